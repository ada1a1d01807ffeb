"""Sequences made from an array's items, and arrays read item by item.

`sorted(x)` of an array is a list of its items; the list's derivative may come back
from an array function reading it (`np.dot(sorted(x), w)`: the rule of np.dot gives
an array), and forward mode's tangent of x is an array. Both were taken for a zero
(`sorted_grad` and `sorted_like` accepted lists alone): a zero gradient where the
witness could not tell (reverse and forward mode both zero), or a WitnessError. A list
operand of a product (`g * [..]`) repeated the list. A loop over `range(1,
y.shape[0])` updating y in place was refused: the loop's index was taken to share
y's memory (the range's bound is read from y). Each gradient here is compared with
central differences on two sizes (one a row broadcast against a matrix).
"""
import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import functional

W6 = np.linspace(0.5, 3.0, 6)


def sorted_indexed(x):
    return sorted(x)[0] * 2.0 + sorted(x, reverse=True)[1] * 3.0


def sorted_dot(x):
    return np.dot(sorted(x, reverse=True), W6[:len(x)])


def sorted_array(x):
    return np.sum(np.array(sorted(np.tanh(x) - np.sum(x), key=abs)) * W6[:len(x)])


def sorted_product(x):
    return sorted(x * 0.7, reverse=True)[1] * np.sum(x ** 2)


SIZES = [np.array([0.3, -1.2, 0.8, 2.0]), np.array([0.9, -0.4, 1.7, -2.2, 0.1, 0.55])]


@pytest.mark.parametrize("f", [sorted_indexed, sorted_dot, sorted_array, sorted_product])
@pytest.mark.parametrize("x", SIZES, ids=["4", "6"])
def test_sorted_items_in_reverse_and_forward_mode(f, x):
    want = numeric_grad(f, [x], 0)
    np.testing.assert_allclose(s2sgrad.grad(f)(x), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(s2sgrad.grad(f, witness=False)(x), want, rtol=1e-6,
                               atol=1e-8)
    u = np.linspace(-1.0, 1.0, len(x))
    _, tangent = functional.jvp(f, (x,), (u,))
    np.testing.assert_allclose(tangent, np.dot(want, u), rtol=1e-6, atol=1e-8)


def list_operands(x, w):
    return np.dot([x[0], x[1] * 2.0], w[:2]) + np.sum([x[1], x[0]] @ np.outer(w, w)[:2]) + \
        np.dot(w[:2], (x[0], x[1]))


@pytest.mark.parametrize("n", [3, 5])
def test_lists_and_tuples_as_product_operands(n):
    x = np.linspace(-0.8, 1.3, n)
    w = np.linspace(0.4, 1.9, n)
    for i in range(2):
        np.testing.assert_allclose(s2sgrad.grad(list_operands, i)(x, w),
                                   numeric_grad(list_operands, [x, w], i),
                                   rtol=1e-6, atol=1e-8)


def rows_from_shape(x, c):
    y = x * 1.0
    for i in range(1, y.shape[0]):
        y[i] += c * np.tanh(y[i - 1])
    return np.sum(y ** 2)


def rows_from_bound(x, c):
    y = x.copy()
    n = y.shape[0]
    for i in range(1, n):
        y[i] -= 0.5 * np.tanh(y[i - 1]) * c
    return np.sum(np.sin(y))


@pytest.mark.parametrize("f", [rows_from_shape, rows_from_bound])
@pytest.mark.parametrize("shapes", [((5,), ()), ((4, 3), (3,))], ids=["vector", "rows"])
def test_a_loop_over_rows_bounded_by_the_arrays_shape(f, shapes):
    x = np.linspace(-1.0, 1.2, int(np.prod(shapes[0]))).reshape(shapes[0])
    c = np.linspace(0.3, 0.9, int(np.prod(shapes[1]))).reshape(shapes[1]) if shapes[1] \
        else 0.6
    for i in range(2):
        np.testing.assert_allclose(s2sgrad.grad(f, i)(x, c), numeric_grad(f, [x, c], i),
                                   rtol=1e-6, atol=1e-8)


# -- `a, b, c = np.exp(theta)`: the rows of the one array a call returns -------------
def unpacked_exp(theta):
    ell, sf, sn = np.exp(theta)
    return np.sum(sf ** 2 * np.exp(-0.5 * np.arange(3.0) / ell ** 2) + sn ** 2)


def unpacked_rows(m):
    top, bottom = np.tanh(m)
    first, second = m.sum(axis=1, keepdims=True) * m
    # (a method of a value computed in place: rows too, which crashed in the adjoint)
    upper, lower = (np.exp(m) * 2.0).copy()
    return np.sum(top * bottom) + np.sum(first ** 2) - np.sum(second) + \
        np.sum(np.tanh(upper) * lower)


def marginal_likelihood(theta, x, y):
    """A Gaussian process's negative log marginal likelihood, as written in practice."""
    ell, sf, sn = np.exp(theta)
    d = x[:, None] - x[None, :]
    k = sf ** 2 * np.exp(-0.5 * d ** 2 / ell ** 2) + sn ** 2 * np.eye(len(x))
    chol = np.linalg.cholesky(k)
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
    return 0.5 * y @ alpha + np.sum(np.log(np.diag(chol)))


@pytest.mark.parametrize("theta", [np.array([0.1, -0.2, -1.0]), np.array([0.5, 0.3, -0.4])])
def test_a_calls_array_unpacked_into_its_items(theta):
    np.testing.assert_allclose(s2sgrad.grad(unpacked_exp)(theta),
                               numeric_grad(unpacked_exp, [theta], 0), rtol=1e-6, atol=1e-8)
    x, y = np.linspace(-1.0, 1.0, 5), np.sin(np.linspace(0.0, 2.0, 5))
    np.testing.assert_allclose(s2sgrad.grad(marginal_likelihood)(theta, x, y),
                               numeric_grad(marginal_likelihood, [theta, x, y], 0),
                               rtol=1e-6, atol=1e-8)
    u = np.array([1.0, -0.5, 0.25])
    _, tangent = functional.jvp(unpacked_exp, (theta,), (u,))
    np.testing.assert_allclose(tangent, numeric_grad(unpacked_exp, [theta], 0) @ u,
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("m", [np.linspace(-1.0, 1.0, 6).reshape(2, 3),
                               np.linspace(-0.7, 1.2, 2).reshape(2, 1)])
def test_rows_of_a_matrix_a_call_returns(m):
    np.testing.assert_allclose(s2sgrad.grad(unpacked_rows)(m),
                               numeric_grad(unpacked_rows, [m], 0), rtol=1e-6, atol=1e-8)
