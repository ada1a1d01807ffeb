"""Undoing broadcasting by a product with ones (runtime.shapes.sum_to_shape).

A cotangent summed over its leading or trailing axes is a matrix-vector product
with a vector of ones where it is a C-ordered float array (NumPy's axis-0 sum of
a (5000, 8) array adds a row at a time). The sums against NumPy's on every
placement of the summed axes, dtype kept; gradients of broadcasting code against
central differences on two shapes.
"""
import numpy as np
import pytest
from conftest import assert_grads_match_differences

from s2sgrad.runtime.shapes import sum_to_shape, unbroadcast

CASES = [((500, 8), (8,)), ((500, 8), (1, 8)), ((500, 8), (500, 1)), ((4, 5, 6), (6,)),
         ((4, 5, 6), (5, 6)), ((4, 5, 6), (1, 1, 6)), ((4, 5, 6), (4, 1, 1)),
         ((4, 5, 6), (1, 5, 1)), ((4, 5, 6), (4, 5, 1)), ((4, 5, 6), ()), ((3,), (1,)),
         ((2, 3), (2, 3)), ((1, 3), (4, 3)), ((5, 1), (5, 3)), ((0, 3), (3,)),
         ((4, 1, 6), (1, 1, 6)), ((4, 1, 6), (4, 3, 1)), ((2, 3, 4), (3, 1)),
         ((2, 3, 4), (1, 4)), ((2, 3, 4), (2, 1, 1)), ((6, 1), (1, 1)), ((1, 5), (1, 1)),
         ((2, 3, 4), (1, 3, 4)), ((3, 4), (4,)), ((3, 4), (1, 4)), ((3, 4), (3, 1)),
         ((3, 4), ()), ((3, 4), (1, 1)), ((3,), ())]


def _numpy_sum(value, shape):
    while value.ndim > len(shape):
        value = value.sum(axis=0)
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and value.shape[i] != 1)
    return np.broadcast_to(value.sum(axis=axes, keepdims=True), shape)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int64])
@pytest.mark.parametrize("shapes", CASES, ids=str)
def test_sums_as_numpy_sums_them(shapes, dtype):
    value_shape, shape = shapes
    rng = np.random.default_rng(len(value_shape))
    value = (rng.standard_normal(value_shape) * 10).astype(dtype)
    if dtype == np.complex128:
        value = value + 1j * rng.standard_normal(value_shape)
    got = sum_to_shape(value, shape)
    want = _numpy_sum(value, shape)
    assert np.shape(got) == shape and np.result_type(got) == np.result_type(want)
    assert type(got) is type(want[()] if not shape else want)   # (a sum of all: a scalar)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_views_and_strided_values_take_numpy_sum():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((40, 8))
    for value in (base[::2], base.T, np.broadcast_to(base[0], (40, 8))):
        np.testing.assert_allclose(sum_to_shape(value, (value.shape[1],)),
                                   value.sum(axis=0), rtol=1e-12)


def test_the_sum_is_a_new_array_the_adjoint_may_add_into():
    g = np.ones((100, 4))
    total = unbroadcast(g, np.zeros(4))
    total += 1.0   # (the shared vector of ones is not handed out)
    np.testing.assert_array_equal(total, 101.0)
    np.testing.assert_array_equal(unbroadcast(g, np.zeros(4)), 100.0)


def mixture(means, scales, X):
    diff = X[:, None, :] - means[None, :, :]
    a = -0.5 * np.sum(diff ** 2, axis=2) / scales ** 2 - np.log(scales)
    return np.sum(np.log(np.sum(np.exp(a), axis=1))) + np.sum(a[:, :1] * scales)


@pytest.mark.parametrize("n, k, d", [(7, 3, 2), (40, 1, 3)])
def test_gradients_through_broadcast_operands(n, k, d):
    rng = np.random.default_rng(n)
    args = [rng.standard_normal((k, d)), rng.uniform(0.5, 1.5, k), rng.standard_normal((n, d))]
    assert_grads_match_differences(mixture, args, (0, 1, 2))
