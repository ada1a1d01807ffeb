"""The same gradients on arrays of the strict array API (`array_api_strict`).

The strict implementation refuses anything the standard does not define, so a
NumPy-only call left in the generated code or in a helper fails here. Each case:
the NumPy gradient against central finite differences (two shapes, one
broadcasting), and the strict-array gradient against the NumPy one.
"""
import numpy as np
import pytest
import test_dask
from conftest import import_source, numeric_vjp

import s2sgrad
from s2sgrad import functional

xp = pytest.importorskip("array_api_strict", reason="the test extra is not installed")
Array = type(xp.asarray(0.0))

# test_dask's functions, and what only these tests need.
CASES = test_dask.CASES + '''

def extrema(x):
    return np.sum(np.max(x, axis=0) * np.mean(x, axis=1, keepdims=True)) + np.max(x)


def not_in_the_standard(x):
    return np.sum(np.sinc(x) * x)


def helper(x):
    return x * 2.0


def calls(x):
    return np.sum(helper(x) ** 2)
'''

SHAPES = {name: test_dask.SHAPES[name] for name in ("elementwise", "mlp", "rnn", "custom")}
SHAPES["extrema"] = [[(4, 6)], [(3, 1)]]


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("array_api"), "array_api_cases", CASES)


draw = test_dask.draw


@pytest.mark.parametrize("name, k", [(n, k) for n in SHAPES for k in range(2)])
def test_gradient_on_strict_arrays_equals_numpys(cases, name, k, monkeypatch):
    fn = getattr(cases, name)
    monkeypatch.setattr(test_dask, "SHAPES", SHAPES)
    args, wrt, out, expected = test_dask.checked_numpy_gradient(cases, name, k)
    strict = [xp.asarray(a) for a in args]
    value, grads = s2sgrad.value_and_grad(fn, wrt=wrt)(*strict)
    assert isinstance(value, Array)
    np.testing.assert_allclose(float(value), out, rtol=1e-12)
    for g, a, e in zip(grads, strict, expected):
        assert isinstance(g, Array), type(g)
        assert g.shape == a.shape and g.dtype == a.dtype
        np.testing.assert_allclose(np.asarray(xp.asarray(g, copy=True)), e, rtol=1e-10,
                                   atol=1e-12)


def test_functional_vjp_and_vjp_on_strict_arrays(cases):
    x, W = draw([(4,), (3, 4)])
    v = (np.ones(3), np.arange(4.0))
    _, expected = functional.vjp(cases.vector, (x, W), v)
    for i in range(2):
        np.testing.assert_allclose(expected[i], numeric_vjp(cases.vector, [x, W], v, i),
                                   rtol=1e-6, atol=1e-7)
    sx, sW = xp.asarray(x), xp.asarray(W)
    sv = (xp.asarray(v[0]), xp.asarray(v[1]))
    out, grads = functional.vjp(cases.vector, (sx, sW), sv)
    assert all(isinstance(o, Array) for o in out)
    for g, e in zip(grads, expected):
        assert isinstance(g, Array)
        np.testing.assert_allclose(np.asarray(xp.asarray(g, copy=True)), e, rtol=1e-10)
    _, pullback = s2sgrad.vjp(cases.vector, sx, sW)
    for g, e in zip(pullback(sv), expected):
        np.testing.assert_allclose(np.asarray(xp.asarray(g, copy=True)), e, rtol=1e-10)


def test_a_numpy_function_outside_the_standard_is_a_clear_error(cases):
    x = xp.asarray(draw([(5,)])[0])
    with pytest.raises(TypeError, match=r"np\.sinc is not in the array API standard"):
        s2sgrad.grad(cases.not_in_the_standard)(x)


def test_calls_to_other_functions_are_refused_on_strict_arrays(cases):
    x = draw([(5,)])[0]
    np.testing.assert_allclose(s2sgrad.grad(cases.calls)(x), 8.0 * x)
    with pytest.raises(TypeError, match="calls other functions"):
        s2sgrad.grad(cases.calls)(xp.asarray(x))


def test_integer_and_complex_strict_arrays_are_refused(cases):
    with pytest.raises(TypeError, match="only floating-point inputs"):
        s2sgrad.grad(cases.extrema)(xp.asarray([[1, 2], [3, 4]]))
    with pytest.raises(TypeError, match="complex"):
        s2sgrad.grad(cases.extrema)(xp.asarray([[1 + 1j, 2.0]]))
