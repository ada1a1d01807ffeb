"""Derivatives of any order: grad of grad of grad ..., no order special-cased.

A derivative s2sgrad makes is a function whose code the compiler can read
again (compiler.higher), so the k-th derivative is the (k-1)-th one
differentiated once more. Checked against closed forms up to the fourth
derivative, for a scalar parameter `a` of functions of data `x` of two shapes.
"""
import math

import numpy as np
import pytest
from conftest import import_source

import s2sgrad

SOURCE = '''
import numpy as np
from s2sgrad import functional

V = {}


def quartic(a):
    return a ** 4


def poly(a, x):
    return np.sum(x * a ** 5 - 2.0 * a ** 3 * x ** 2)


def sin_exp(a, x):
    return np.sum(np.sin(a * x) * np.exp(0.5 * a))


def looped(a, x):
    y = x
    for _ in range(3):
        y = y * a
    return np.sum(np.sin(y))


def mixed(a, b):
    return a ** 3 * b ** 2 + np.sin(a * b)


def field(x):
    return np.sum(np.sin(x) * x ** 2 + np.exp(0.3 * x))


def hvp_of_field(x):
    return functional.hvp(field, x, V["v"], create_graph=True)[1]


def branchy(a, x):
    if a > 0:
        return np.sum(np.exp(a * x))
    return np.sum(np.cos(a * x))
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("order"), "s2s_any_order", SOURCE)


def nth(f, k):
    for _ in range(k):
        f = s2sgrad.grad(f)
    return f


def _sin_derivative(k, t):
    return np.sin(t + k * np.pi / 2)


# d^k/da^k, in closed form
def poly_k(k, a, x):
    c5 = math.perm(5, k) * a ** (5 - k) if k <= 5 else 0.0
    c3 = math.perm(3, k) * a ** (3 - k) if k <= 3 else 0.0
    return np.sum(x * c5 - 2.0 * c3 * x ** 2)


def sin_exp_k(k, a, x):
    # Leibniz: sum_j C(k, j) (d^j sin(a x)) (d^(k-j) exp(a/2))
    return sum(math.comb(k, j) * np.sum(x ** j * _sin_derivative(j, a * x)) *
               0.5 ** (k - j) * np.exp(0.5 * a) for j in range(k + 1))


def looped_k(k, a, x):
    # sum sin(a^3 x): derivatives by the chain rule written out to order 4
    u = a ** 3 * x
    d = [u, 3 * a ** 2 * x, 6 * a * x, 6 * x, 0 * x]
    s = [_sin_derivative(j, u) for j in range(5)]
    if k == 1:
        return np.sum(s[1] * d[1])
    if k == 2:
        return np.sum(s[2] * d[1] ** 2 + s[1] * d[2])
    if k == 3:
        return np.sum(s[3] * d[1] ** 3 + 3 * s[2] * d[1] * d[2] + s[1] * d[3])
    return np.sum(s[4] * d[1] ** 4 + 6 * s[3] * d[1] ** 2 * d[2] +
                  s[2] * (3 * d[2] ** 2 + 4 * d[1] * d[3]))


def branchy_k(k, a, x):
    if a > 0:
        return np.sum(x ** k * np.exp(a * x))
    return np.sum(x ** k * np.cos(a * x + k * np.pi / 2))


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_quartic_to_the_fourth_derivative(m, k):
    a = 1.1
    expected = [4 * a ** 3, 12 * a ** 2, 24 * a, 24.0][k - 1]
    np.testing.assert_allclose(nth(m.quartic, k)(a), expected, rtol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", [(3,), (2, 4)])
@pytest.mark.parametrize("name, closed, a", [
    ("poly", poly_k, 0.7), ("sin_exp", sin_exp_k, 0.4), ("looped", looped_k, 0.9),
    ("branchy", branchy_k, 0.6), ("branchy", branchy_k, -0.8)])
def test_kth_derivative_matches_its_closed_form(m, k, shape, name, closed, a):
    x = np.random.default_rng(3).uniform(-1.0, 1.0, shape)
    got = nth(getattr(m, name), k)(a, x)
    np.testing.assert_allclose(got, closed(k, a, x), rtol=1e-9, atol=1e-10)


def test_the_third_derivative_is_readable_code(m):
    text = s2sgrad.source(nth(m.quartic, 2))   # the code grad of it differentiates
    assert "def grad_grad_quartic_forward" in text
    assert "_s2s_vjp" not in text and "lambda" not in text


def _fd_jacobian(f, x, eps=1e-6):
    cols = []
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps))
    out = np.stack(cols, axis=-1)
    return out.reshape(np.shape(f(x)) + x.shape)


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_modes_and_orders_mix(m, shape):
    """jacobian of grad, jvp of grad (forward over reverse), jacobian of an hvp
    and grad of an hvp: each against finite differences of the order below."""
    from s2sgrad import functional
    rng = np.random.default_rng(4)
    x, v = rng.uniform(-1, 1, shape), rng.standard_normal(shape)
    m.V["v"] = v
    g = s2sgrad.grad(m.field)
    np.testing.assert_allclose(functional.jacobian(g, x), _fd_jacobian(g, x), rtol=1e-6,
                               atol=1e-8)
    hv = _fd_jacobian(g, x).reshape(x.size, x.size) @ v.ravel()
    np.testing.assert_allclose(functional.jvp(g, x, v)[1].ravel(), hv, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(functional.jacobian(m.hvp_of_field, x),
                               _fd_jacobian(m.hvp_of_field, x), rtol=1e-6, atol=1e-8)

    def total(z):
        return np.sum(functional.hvp(m.field, z, v)[1])
    got = s2sgrad.grad(lambda z: np.sum(m.hvp_of_field(z)))(x)
    np.testing.assert_allclose(got, _fd_jacobian(total, x), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("a, b", [(0.7, -1.3), (-0.4, 0.9)])
def test_mixed_positions(m, a, b):
    """d/da d/db and d/da d/da d/db, each derivative with its own wrt."""
    d_ab = 6 * a ** 2 * b + np.cos(a * b) - a * b * np.sin(a * b)
    d_aab = 12 * a * b - 2 * b * np.sin(a * b) - a * b * b * np.cos(a * b)
    g_ab = s2sgrad.grad(s2sgrad.grad(m.mixed, wrt=1), wrt=0)
    np.testing.assert_allclose(g_ab(a, b), d_ab, rtol=1e-12)
    np.testing.assert_allclose(s2sgrad.grad(g_ab, wrt=0)(a, b), d_aab, rtol=1e-12)
