"""Complex values a function of yours returns where no gradient passes through the
call (differentiating with respect to an argument it does not read): the caller
learns what the function returns by compiling it, and the complex values take the
rules for complex arguments where they meet the gradient path (once refused there
at run time). Against central differences, on two shapes (one broadcasting), in
both modes and differentiated twice."""
import numpy as np
import pytest
from conftest import check_jvp, check_vjp

import s2sgrad

SOURCE = '''
import numpy as np
import s2sgrad


def rot(u):
    return np.exp(1j * u) * (u + 1.5)


def pair(u):
    return np.exp(0.7j * u) * (u + 1.5), np.cos(u) - 0.2


def loss(x, y):
    z = rot(y)                       # no gradient passes through: y is not varied
    return np.sum(np.abs(z * x) ** 2 + np.real(z) * x)


def loss_pair(x, y):
    z, r = pair(y)                   # a tuple: one complex item, one real
    return np.sum(np.imag(np.exp(z * 0.4) * x) + np.maximum(r, 0.0) * x)


def g(x, y):
    z, r = pair(x)
    x = x + 0.2 * np.maximum(r, 0.0)
    x = x + 0.3 * np.imag(np.exp(z * 0.4))
    return np.sum(np.tanh(y) * x)


def second(x, y):
    # grad of g with respect to x, differentiated with respect to y: the call of pair
    # reads only x, which is constant there
    return np.sum(s2sgrad.grad(g)(x, y) * np.sin(x))
'''

SHAPES = [((4,), (4,)), ((2, 3), (3,))]


@pytest.mark.parametrize("xs, ys", SHAPES)
@pytest.mark.parametrize("name", ["loss", "loss_pair"])
def test_reverse_mode(make_module, name, xs, ys):
    m = make_module(SOURCE)
    rng = np.random.default_rng(len(xs))
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    check_vjp(getattr(m, name), (x, y), wrt=(0,))


@pytest.mark.parametrize("xs, ys", SHAPES)
@pytest.mark.parametrize("name", ["loss", "loss_pair"])
def test_forward_mode(make_module, name, xs, ys):
    m = make_module(SOURCE)
    rng = np.random.default_rng(len(xs) + 7)
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    check_jvp(getattr(m, name), (x, y), (rng.standard_normal(xs), np.zeros(ys)))


@pytest.mark.parametrize("xs", [(4,), (2, 4)])
def test_a_second_derivative_through_the_constant_call(make_module, xs):
    m = make_module(SOURCE)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(xs), rng.standard_normal(xs[-1:])
    check_vjp(m.second, (x, y), wrt=(1,))
    hv = s2sgrad.functional.hvp(m.second, (x, y), (np.zeros(xs), np.ones(xs[-1:])))[1]
    eps = 1e-5
    grad = s2sgrad.grad(m.second, wrt=1)
    fd = (grad(x, y + eps) - grad(x, y - eps)) / (2 * eps)
    np.testing.assert_allclose(hv[1], fd, rtol=1e-5, atol=1e-7)
