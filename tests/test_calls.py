"""Calls between user functions, closures, globals, recursion."""
import numpy as np
import pytest
from conftest import check_vjp

import s2sgrad

HELPERS = '''
import numpy as np


def scale_and_square(v, k):
    return (v * k) ** 2


def two_results(v):
    return np.sin(v), np.cos(v) * 2.0
'''

SOURCE = '''
import numpy as np
import s2sgrad
import s2s_call_helpers as other

OFFSET = 0.25


class Softplus(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.log1p(np.exp(x)) if False else np.log(1.0 + np.exp(x))

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return g / (1.0 + np.exp(-x))


def helper(a, b=2.0):
    c = a * b + OFFSET
    return np.tanh(c)


@s2sgrad.differentiable
def decorated_helper(a):
    return np.exp(-a * a)


def calls_helper(x, y):
    return np.sum(helper(x) * y + helper(y, b=3.0))


def calls_decorated(x):
    return np.sum(decorated_helper(x) * x)


def calls_other_module(x):
    return np.sum(other.scale_and_square(x, 0.5))


def calls_tuple_helper(x):
    s, c = other.two_results(x)
    return np.sum(s * c)


def softplus_step(v):
    return Softplus.apply(v) * 0.5


def combo(x):
    h = x
    for t in range(4):
        if np.sum(h) > 0:
            h = softplus_step(h) - 0.3
        else:
            h = h * 1.2 + 0.1
    return np.sum(h * h)


class Model:
    def loss(params, x):
        return np.sum(np.tanh(x @ params) ** 2)

    @staticmethod
    def penalty(params):
        return np.sum(params * params)


def uses_methods(params, x):
    return Model.loss(params, x) + 0.1 * Model.penalty(params)


def power(x, n):
    if n == 0:
        return x * 0.0 + 1.0
    return x * power(x, n - 1)


def recursive(x):
    return np.sum(power(x, 3))


def make_scaled(k):
    def f(x):
        return np.sum(np.sin(x) * k)
    return f


def writes_global(x):
    global OFFSET
    OFFSET = x
    return x * 2.0


def mutates_global_array(x):
    TABLE[0] = x
    return x


TABLE = np.zeros(3)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    import importlib.util
    import sys
    d = tmp_path_factory.mktemp("calls")
    (d / "s2s_call_helpers.py").write_text(HELPERS)
    (d / "s2s_calls.py").write_text(SOURCE)
    sys.path.insert(0, str(d))
    try:
        spec = importlib.util.spec_from_file_location("s2s_calls", d / "s2s_calls.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["s2s_calls"] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(d))
    return module


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,))])
def test_call_to_helper_with_keyword(m, shapes, rng):
    check_vjp(m.calls_helper, [rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])])


def test_callee_has_its_own_generated_pair(m):
    src = s2sgrad.source(m.calls_helper, wrt=(0, 1))
    assert "def helper_forward(a, b=2.0):" in src
    assert "def helper_adjoint(" in src
    assert "helper_forward(x)" in src and "helper_residuals" in src


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_call_to_decorated_function(m, shape, rng):
    check_vjp(m.calls_decorated, [rng.standard_normal(shape)])


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_call_into_another_module(m, shape, rng):
    check_vjp(m.calls_other_module, [rng.standard_normal(shape)])


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_callee_with_two_results(m, shape, rng):
    check_vjp(m.calls_tuple_helper, [rng.standard_normal(shape)])


@pytest.mark.parametrize("scale", [1.0, -1.0])
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_loop_branch_call_function_apply(m, scale, shape, rng):
    check_vjp(m.combo, [np.abs(rng.standard_normal(shape)) * scale])


@pytest.mark.parametrize("shapes", [((3, 2), (4, 3)), ((2, 1), (5, 2))])
def test_methods_called_as_plain_functions(m, shapes, rng):
    check_vjp(m.uses_methods, [rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])])


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_recursion(m, shape, rng):
    check_vjp(m.recursive, [rng.standard_normal(shape)])


def test_closure_constant(m, rng):
    f = m.make_scaled(2.5)
    check_vjp(f, [rng.standard_normal(3)])
    check_vjp(m.make_scaled(-1.0), [rng.standard_normal((2, 2))])


def test_writing_a_global_is_an_error(m):
    with pytest.raises(s2sgrad.TransformError, match="Global"):
        s2sgrad.grad(lambda x: np.sum(m.writes_global(x)))(np.ones(2))


def test_writing_into_a_global_array_is_an_error(m):
    with pytest.raises(s2sgrad.TransformError, match="non-local"):
        s2sgrad.vjp(m.mutates_global_array, 1.0)


_KEYWORD_ONLY = '''
import numpy as np

def scaled(v, *, scale=1.0):
    return np.tanh(v) * scale

def f(x):
    return np.sum(scaled(x) ** 2) + np.sum(scaled(x, scale=0.5) * x)
'''


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_second_derivatives_of_a_call_leaving_a_keyword_only_default_out(make_module,
                                                                        shape, rng):
    # The tangent code of the callee's generated forward lost its keyword-only
    # default where its function was remade with the user's closure cells (the
    # constructor takes none): hvp raised "missing 1 required keyword-only argument".
    from s2sgrad import functional
    m = make_module(_KEYWORD_ONLY)
    x = rng.standard_normal(shape)
    v = rng.standard_normal(shape)
    eps = 1e-5
    expected = (s2sgrad.grad(m.f)(x + eps * v) - s2sgrad.grad(m.f)(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(functional.hvp(m.f, x, v)[1], expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(functional.vhp(m.f, x, v)[1], expected, rtol=1e-6, atol=1e-7)
