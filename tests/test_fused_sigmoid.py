"""The logistic sigmoid written out, recognised as one operation (normalize/fused.py).

`1 / (1 + np.exp(-x))` and `0.5 * (np.tanh(0.5 * x) + 1.0)` (either order in each
sum and product, the constant 1 or 1.0) become `_s2s_sigmoid_exp(x, one)` and
`_s2s_sigmoid_tanh(x, one)`: the same operations (the value bit for bit), one
adjoint `g * s * (1 - s)` that keeps only s. Checked against central differences
on two shapes (one broadcasting), in forward mode, to third order, in a helper
called in a loop, on numbers, float32 and complex values; forms the recognition
must leave alone are still differentiated statement by statement.
"""
import warnings

import numpy as np
import pytest
from conftest import check_jvp, check_vjp, numeric_grad

import s2sgrad
from s2sgrad import functional

MODULE = '''
import numpy as np


def exp_form(W, x, b):
    s = 1 / (1 + np.exp(-(W @ x + b)))
    return np.sum(s * s)


def exp_form_float_ones(x, w):
    return np.sum(w * (1.0 / (1.0 + np.exp(-x))))


def exp_form_swapped(x, w):
    return np.sum(np.sin(1.0 / (np.exp(-x) + 1.0)) * w)


def tanh_form(W, x, b):
    s = 0.5 * (np.tanh(0.5 * (W @ x + b)) + 1.0)
    return np.sum(s * s)


def tanh_form_swapped(x, w):
    return np.sum(((1 + np.tanh(x * 0.5)) * 0.5) * w)


def sigmoid(a):
    return 0.5 * (np.tanh(0.5 * a) + 1.0)


def gates_in_a_loop(W, b, xs):
    h = np.zeros(b.shape[0])
    for x in xs:
        h = sigmoid(W @ np.concatenate([h, x]) + b) * np.tanh(h + 0.5)
    return np.sum(h ** 2)


def reread(x, w):
    e = np.exp(-x)
    s = 1 / (1 + e)
    return np.sum(s * w) + np.sum(e)


def other_constants(x, w):
    return np.sum(w * (2.0 / (1.0 + np.exp(-x))) + 0.25 * (np.tanh(0.5 * x) + 1.0))


def mixed_ones(x, w):
    return np.sum(w / (1.0 + np.exp(-x)) + 1 / (1.0 + np.exp(-x)))


def not_numpys(x, w):
    return np.sum(w * (1 / (1 + exp(-x))))


def exp(v):
    return np.exp(v) * 1.0
'''

FUSED = {"exp_form": "_s2s_sigmoid_exp(", "exp_form_float_ones": "_s2s_sigmoid_exp(",
         "exp_form_swapped": "_s2s_sigmoid_exp(", "tanh_form": "_s2s_sigmoid_tanh(",
         "tanh_form_swapped": "_s2s_sigmoid_tanh(", "sigmoid": "_s2s_sigmoid_tanh("}
LEFT_ALONE = ["reread", "other_constants", "mixed_ones", "not_numpys"]
# (W's shape, x's shape, b's shape): b broadcast over the rows of W @ x in the second
SHAPES = [((4, 3), (3,), (4,)), ((4, 3), (3, 5), (4, 1))]


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    from conftest import import_source
    return import_source(tmp_path_factory.mktemp("sigmoid"), "s2s_fused_sigmoid", MODULE)


def _args(name, shape, rng):
    wshape, xshape, bshape = shape
    if name in ("exp_form", "tanh_form"):
        return [rng.standard_normal(wshape), rng.standard_normal(xshape) * 2.0,
                rng.standard_normal(bshape)]
    if name == "sigmoid":
        return [rng.standard_normal(xshape) * 3.0]
    return [rng.standard_normal(xshape) * 2.0, rng.standard_normal(xshape[-1:])]


@pytest.mark.parametrize("shape", SHAPES, ids=["vector", "broadcast"])
@pytest.mark.parametrize("name", list(FUSED) + LEFT_ALONE)
def test_gradient_matches_differences(m, name, shape):
    rng = np.random.default_rng(len(name))
    check_vjp(getattr(m, name), _args(name, shape, rng), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", list(FUSED))
def test_each_form_is_one_call_keeping_only_its_value(m, name):
    text = s2sgrad.source(getattr(m, name), wrt=(0,))
    assert FUSED[name] in text
    text = "\n".join(line for line in text.splitlines() if not line.strip().startswith("#"))
    assert "np.exp(" not in text and "np.tanh(" not in text, text
    assert "ans * (1.0 - " in text or "* (1.0 - " in text, text


@pytest.mark.parametrize("name", list(FUSED))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_value_is_the_written_codes_bit_for_bit(m, name, dtype):
    rng = np.random.default_rng(3)
    args = [a.astype(dtype) for a in _args(name, SHAPES[1], rng)]
    f = getattr(m, name)
    if name == "sigmoid":
        out, _ = s2sgrad.vjp(f, *args)
        expected = f(*args)
        assert out.dtype == expected.dtype and np.array_equal(out, expected)
        return
    value, _ = s2sgrad.value_and_grad(f)(*args)
    expected = f(*args)
    assert value == expected and np.asarray(value).dtype == np.asarray(expected).dtype


@pytest.mark.parametrize("name", LEFT_ALONE)
def test_forms_that_are_not_the_pattern_are_left_alone(m, name):
    text = s2sgrad.source(getattr(m, name), wrt=(0,))
    assert "_s2s_sigmoid_exp(" not in text
    # (other_constants' tanh is 0.25 * (...): not a sigmoid either)
    assert "_s2s_sigmoid_tanh(" not in text


def test_far_tails_have_the_slope_zero_not_nan(m):
    x = np.array([-1000.0, -40.0, 0.0, 3.0, 40.0, 1000.0])
    w = np.ones(6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # (exp(1000) overflows, as written)
        g = s2sgrad.grad(m.exp_form_float_ones)(x, w)
    s = 1.0 / (1.0 + np.exp(-x[1:5]))
    assert np.all(np.isfinite(g)) and g[0] == 0.0 and g[-1] == 0.0
    np.testing.assert_allclose(g[1:5], s * (1.0 - s), rtol=1e-15)
    assert g[1] == pytest.approx(np.exp(-40.0), rel=1e-12)   # (the slope left of 0: exact)


@pytest.mark.parametrize("name", ["exp_form_float_ones", "tanh_form_swapped"])
def test_python_numbers(m, name):
    f = getattr(m, name)
    for x in (-2.5, 0.0, 1.75):
        g = s2sgrad.grad(f, wrt=(0, 1))(x, 0.75)
        for i in (0, 1):
            expected = numeric_grad(f, [x, 0.75], i)
            assert g[i] == pytest.approx(float(expected), rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("name", ["exp_form", "tanh_form"])
@pytest.mark.parametrize("shape", SHAPES, ids=["vector", "broadcast"])
def test_forward_mode(m, name, shape):
    rng = np.random.default_rng(7)
    args = _args(name, shape, rng)
    check_jvp(getattr(m, name), args, [rng.standard_normal(np.shape(a)) for a in args])


@pytest.mark.parametrize("name", ["exp_form_float_ones", "tanh_form_swapped"])
def test_hessian_vector_product(m, name):
    rng = np.random.default_rng(11)
    f = getattr(m, name)
    x, w = rng.standard_normal((3, 4)) * 2.0, rng.standard_normal(4)
    v = rng.standard_normal(x.shape)
    _, hv = functional.hvp(lambda z: f(z, w), x, v)
    grad = s2sgrad.grad(f, wrt=0)
    expected = numeric_grad(lambda z: float(np.sum(grad(z, w) * v)), [x], 0, eps=1e-5)
    np.testing.assert_allclose(hv, expected, rtol=1e-5, atol=1e-6)


THIRD = '''
import numpy as np
import s2sgrad


def f(x):
    return np.sum(np.sin(FORM))


def along_v(x):
    return np.sum(s2sgrad.grad(f)(x) * V)


def vhv(x):
    return np.sum(s2sgrad.grad(along_v)(x) * V)
'''


@pytest.mark.parametrize("form", ["1 / (1 + np.exp(-x))", "0.5 * (np.tanh(0.5 * x) + 1.0)"])
def test_third_derivative_matches_differences(make_module, form):
    """d/dx of grad(grad f)(x) . V, with f = sum(sin(sigmoid(x))): the adjoint's
    `g * s * (1 - s)` differentiated twice more."""
    module = make_module(THIRD.replace("FORM", form))
    rng = np.random.default_rng(5)
    x = rng.standard_normal(4) * 2.0
    module.V = rng.standard_normal(4)
    assert "_s2s_sigmoid" in s2sgrad.source(module.f, wrt=(0,))
    got = s2sgrad.grad(module.vhv)(x)
    expected = numeric_grad(module.vhv, [x], 0, eps=1e-5)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("steps", [1, 4])
def test_a_sigmoid_helper_called_in_a_loop(m, steps):
    rng = np.random.default_rng(steps)
    W, b = rng.standard_normal((3, 5)) * 0.7, rng.standard_normal(3)
    xs = rng.standard_normal((steps, 2))
    check_vjp(m.gates_in_a_loop, [W, b, xs], wrt=(0, 1), rtol=1e-6, atol=1e-8)


def test_complex_values_have_the_chain_rules_gradient(m, make_module):
    """A complex argument: the same gradient as the written-out code differentiated
    statement by statement (`reread`-style: an intermediate read again)."""
    module = make_module('''
import numpy as np


def fused(z):
    return np.sum(np.real(1 / (1 + np.exp(-z)) * (0.5 * (np.tanh(0.5 * z) + 1.0))))


def chained(z):
    e = np.exp(-z)
    t = np.tanh(0.5 * z)
    return np.sum(np.real(1 / (1 + e) * (0.5 * (t + 1.0)))) + 0.0 * np.sum(np.real(e + t))
''')
    assert "_s2s_sigmoid" in s2sgrad.source(module.fused, wrt=(0,), args=(np.ones(3) + 0j,))
    z = np.array([0.3 + 0.2j, -1.1 + 0.5j, 2.0 - 0.7j])
    np.testing.assert_allclose(s2sgrad.grad(module.fused)(z), s2sgrad.grad(module.chained)(z),
                               rtol=1e-12, atol=1e-14)
