"""Generated code follows the names it was generated for.

A pair is generated for the objects that a function's free names are bound to
(a helper function called by name, a Function class, a closure variable).
Rebinding such a name must give the new function's gradient, never the
cached code of the old one (a wrong gradient with no error). Every backend
and mode is checked against finite differences after the rebinding.
"""
import numpy as np
import pytest
from conftest import import_source, numeric_grad, numeric_vjp

import s2sgrad
from s2sgrad import functional

SOURCE = '''
import numpy as np


def smooth(z):
    return np.sin(z)


def cubic(z):
    return z ** 3


act = smooth


def loss(x):
    return np.sum(act(x) * x)


def outer(x):
    return loss(x) + np.sum(x)
'''


@pytest.fixture
def m(tmp_path):
    module = import_source(tmp_path, "s2s_rebinding", SOURCE)
    module.act = module.smooth
    return module


def _expected(m, x):
    return numeric_grad(m.loss, [x], 0)


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_rebinding_a_global_function_recompiles(m, shape, rng):
    x = rng.standard_normal(shape)
    g = s2sgrad.grad(m.loss)
    np.testing.assert_allclose(g(x), _expected(m, x), rtol=1e-6, atol=1e-8)
    m.act = m.cubic
    np.testing.assert_allclose(g(x), _expected(m, x), rtol=1e-6, atol=1e-8)
    # A new wrapper, and a caller whose callee's global changed, too.
    np.testing.assert_allclose(s2sgrad.grad(m.loss)(x), _expected(m, x), rtol=1e-6)
    np.testing.assert_allclose(s2sgrad.grad(m.outer)(x), _expected(m, x) + 1.0, rtol=1e-6)
    m.act = m.smooth
    np.testing.assert_allclose(g(x), _expected(m, x), rtol=1e-6, atol=1e-8)


def test_lambdas_over_a_loop_variable_get_their_own_gradients(m, rng):
    x = rng.standard_normal(3)
    # The lambda reads fn late on purpose: each call must see the current binding.
    got = [s2sgrad.grad(lambda z: np.sum(fn(z) * 1.0))(x)  # noqa: B023
           for fn in (m.smooth, m.cubic)]
    np.testing.assert_allclose(got[0], np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(got[1], 3 * x ** 2, rtol=1e-12)


def test_closure_cell_rebound_between_calls(m, rng):
    x = rng.standard_normal(3)
    fn = m.smooth

    def f(z):
        return np.sum(fn(z))

    g = s2sgrad.grad(f)
    np.testing.assert_allclose(g(x), np.cos(x), rtol=1e-12)
    fn = m.cubic  # noqa: F841 - read by f through its closure cell
    np.testing.assert_allclose(g(x), 3 * x ** 2, rtol=1e-12)


def test_forward_mode_and_second_order_follow_the_rebinding(m, rng):
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    functional.jvp(m.loss, x, v)
    functional.hvp(m.loss, x, v)
    m.act = m.cubic
    _, jv = functional.jvp(m.loss, x, v)
    np.testing.assert_allclose(jv, numeric_grad(m.loss, [x], 0) @ v, rtol=1e-6)
    _, hv = functional.hvp(m.loss, x, v)
    g = s2sgrad.grad(m.loss)
    np.testing.assert_allclose(hv, numeric_vjp(g, [x], v, 0), rtol=1e-6, atol=1e-8)


def test_jit_backend_follows_the_rebinding(m, rng):
    pytest.importorskip("numba")
    import warnings
    x = rng.standard_normal(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = s2sgrad.grad(m.loss, jit=True)
        g(x)
        m.act = m.cubic
        np.testing.assert_allclose(g(x), _expected(m, x), rtol=1e-6, atol=1e-8)


SOURCE_WRT = '''
import numpy as np
import s2sgrad


def cubic_sum(x):
    return np.sum(x ** 3)


g_tuple = s2sgrad.grad(cubic_sum, wrt=(0,))


def inline_tuple(x, v):
    grads = s2sgrad.grad(cubic_sum, wrt=(0,))(x)
    return np.sum(grads[0] * v)


def wrapper_tuple(x, v):
    return np.sum(g_tuple(x)[0] * v)


def value_and_tuple(x, v):
    value, (gx,) = s2sgrad.value_and_grad(cubic_sum, wrt=(0,))(x)
    return np.sum(gx * v) + value
'''


@pytest.mark.parametrize("fname", ["inline_tuple", "wrapper_tuple", "value_and_tuple"])
@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_one_tuple_wrt_inside_differentiated_code(tmp_path, fname, shape, rng):
    mod = import_source(tmp_path, f"s2s_wrt_{fname}", SOURCE_WRT)
    f = getattr(mod, fname)
    x, v = rng.standard_normal(shape), rng.standard_normal(shape)
    value, grads = s2sgrad.value_and_grad(f, wrt=(0, 1))(x, v)
    np.testing.assert_allclose(value, f(x, v), rtol=1e-12)
    for i in (0, 1):
        np.testing.assert_allclose(grads[i], numeric_grad(f, [x, v], i), rtol=1e-6, atol=1e-8)


def test_rebinding_a_module_attribute_recompiles(tmp_path, rng):
    helpers = import_source(tmp_path, "s2s_rebinding_helpers", '''
import numpy as np


def act(z):
    return np.tanh(z)
''')
    user = import_source(tmp_path, "s2s_rebinding_user", '''
import numpy as np
import s2s_rebinding_helpers as helpers


def loss(x):
    return np.sum(helpers.act(x))
''')
    x = rng.standard_normal(4)
    g = s2sgrad.grad(user.loss)
    np.testing.assert_allclose(g(x), 1 - np.tanh(x) ** 2, rtol=1e-12)
    helpers.act = lambda z: z * z
    np.testing.assert_allclose(g(x), 2 * x, rtol=1e-12)


FUNCTION_SOURCE = '''
import numpy as np
import s2sgrad

POWER = 3.0


def dpow(x):
    return POWER * x ** (POWER - 1)


class Pow(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** POWER

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return dpow(x) * g
'''


@pytest.fixture
def ops(tmp_path):
    return import_source(tmp_path, "s2s_rebinding_ops", FUNCTION_SOURCE)


@pytest.fixture
def user(tmp_path, ops):
    return import_source(tmp_path, "s2s_rebinding_ops_user", '''
import numpy as np
from s2s_rebinding_ops import Pow


def f(x):
    return np.sum(Pow.apply(x))
''')


def test_a_helper_and_a_global_of_an_inlined_vjp_are_watched_in_their_module(ops, user, rng):
    x = np.abs(rng.standard_normal(3)) + 0.5
    g = s2sgrad.grad(user.f)
    np.testing.assert_allclose(g(x), 3 * x ** 2, rtol=1e-12)
    ops.POWER = 4.0   # read by forward and by the helper: Python now computes x ** 4
    np.testing.assert_allclose(g(x), numeric_grad(user.f, [x], 0), rtol=1e-6)
    np.testing.assert_allclose(g(x), 4 * x ** 3, rtol=1e-12)
    ops.dpow = lambda z: 2 * 4.0 * z ** 3   # a (wrong on purpose) vjp helper: it runs
    np.testing.assert_allclose(g(x), 8 * x ** 3, rtol=1e-12)


def test_a_method_replaced_on_the_class_or_added_to_a_subclass_recompiles(ops, tmp_path, rng):
    x = rng.standard_normal(3)
    sub = import_source(tmp_path, "s2s_rebinding_sub", '''
import numpy as np
from s2s_rebinding_ops import Pow


class Sub(Pow):
    pass


def f(x):
    return np.sum(Sub.apply(x))
''')
    g = s2sgrad.grad(sub.f)
    np.testing.assert_allclose(g(x), 3 * x ** 2, rtol=1e-12)

    def cube_vjp(ctx, g):
        x, = ctx.saved_tensors
        return 3.0 * x ** 2 * g * 10.0
    ops.Pow.vjp = staticmethod(cube_vjp)   # in the base class: Sub inherits it
    np.testing.assert_allclose(g(x), 30 * x ** 2, rtol=1e-12)

    def sub_vjp(ctx, g):
        x, = ctx.saved_tensors
        return -3.0 * x ** 2 * g
    sub.Sub.vjp = staticmethod(sub_vjp)    # now the subclass has one of its own
    np.testing.assert_allclose(g(x), -3 * x ** 2, rtol=1e-12)


def test_reassigned_defaults_and_code_are_seen_by_a_held_wrapper(make_module, rng):
    mod = make_module('''
import numpy as np


def f(x, k=3.0, *, c=1.0):
    return np.sum((x + c) ** k)


def g(x, k=3.0, *, c=1.0):
    return np.sum(np.sin(x + c) * k)
''')
    x = np.abs(rng.standard_normal(3)) + 0.5
    grad_f = s2sgrad.grad(mod.f)
    np.testing.assert_allclose(grad_f(x), 3 * (x + 1) ** 2, rtol=1e-12)
    mod.f.__defaults__ = (2.0,)
    np.testing.assert_allclose(grad_f(x), 2 * (x + 1), rtol=1e-12)
    mod.f.__kwdefaults__ = {"c": 5.0}
    np.testing.assert_allclose(grad_f(x), 2 * (x + 5), rtol=1e-12)
    mod.f.__code__ = mod.g.__code__
    np.testing.assert_allclose(grad_f(x), 2.0 * np.cos(x + 5), rtol=1e-12)
    np.testing.assert_allclose(grad_f(x), numeric_grad(mod.f, [x], 0), rtol=1e-6)


REBOUND_TWO_LEVELS = '''
import numpy as np
import s2sgrad

V = np.array([0.3, -0.5, 0.9])


def f1(x):
    return np.sum(np.sin(x) ** 2)


def f2(x):
    return np.sum(np.exp(x) * x)


F = f1


def hv(x):
    return np.sum(s2sgrad.grad(F)(x) * V)


def vhv(x):
    return np.sum(s2sgrad.grad(hv)(x) * V)
'''


@pytest.mark.parametrize("x", [np.array([0.1, 0.5, -0.3]), np.array([-0.4, 0.2, 0.7])])
def test_rebinding_what_a_derivative_inside_a_derivative_calls(make_module, x):
    """vhv's code calls the derivative of hv, whose code calls the derivative of F: a
    new F makes every level stale, also the pairs compiled from the generated code
    (their only link to F is the pair they were generated from)."""
    m = make_module(REBOUND_TWO_LEVELS)
    eps = 1e-6

    def numeric(fn):
        return np.array([(fn(x + eps * e) - fn(x - eps * e)) / (2 * eps) for e in np.eye(3)])
    for f in (m.f1, m.f2, m.f1):
        m.F = f
        expected = numeric(m.vhv)
        np.testing.assert_allclose(s2sgrad.grad(m.vhv)(x), expected, rtol=1e-5, atol=1e-7)
        _, tangent = s2sgrad.functional.jvp(m.vhv, x, m.V)
        np.testing.assert_allclose(tangent, expected @ m.V, rtol=1e-5, atol=1e-7)
