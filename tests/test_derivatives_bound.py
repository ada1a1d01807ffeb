"""A derivative bound to a name inside differentiated code, then called:

    g = s2sgrad.grad(inner)
    return np.sum(g(x) ** 2)          # a gradient-norm penalty

was refused ("no gradient rule for the call g(...)"); the same written in one
expression, s2sgrad.grad(inner)(x), was differentiated. A call of a name bound once
to s2sgrad.grad(f) or value_and_grad(f), read only by calls, is that derivative's call
(a maker reading a name bound again later keeps the refusal: the name would mean
something else at the call). Gradients against central differences on two shapes,
and forward mode over them.
"""
import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import functional


def inner(v):
    return np.sum(np.sin(v) * v * np.linspace(0.5, 2.0, v.shape[-1]))


def gradient_penalty(x):
    g = s2sgrad.grad(inner)
    return np.sum(g(x) ** 2) + np.sum(x ** 2)


def closure_maker(x, c):
    g = s2sgrad.grad(lambda v: np.sum(np.tanh(v * c) ** 2))
    return np.sum(g(x) * x) + np.sum(g(2.0 * x))


def value_and_gradient(x):
    vg = s2sgrad.value_and_grad(inner)
    value, gradient = vg(x)
    return value * np.sum(gradient)


@pytest.mark.parametrize("f, extra", [(gradient_penalty, ()), (closure_maker, (0.8,)),
                                      (value_and_gradient, ())])
@pytest.mark.parametrize("shape", [(3,), (2, 4)])
def test_a_bound_derivative_is_differentiated_again(f, extra, shape):
    x = np.linspace(-0.9, 1.1, int(np.prod(shape))).reshape(shape)
    want = numeric_grad(f, [x, *extra], 0)
    np.testing.assert_allclose(s2sgrad.grad(f)(x, *extra), want, rtol=1e-6, atol=1e-8)
    u = np.linspace(1.0, -1.0, x.size).reshape(shape)
    _, tangents = functional.jvp(f, (x, *extra), (u, *[0.0 for _ in extra]))
    np.testing.assert_allclose(tangents, np.sum(want * u), rtol=1e-6, atol=1e-8)


def maker_of_a_rebound_name(x):
    h = inner
    g = s2sgrad.grad(h)
    h = np.sum   # noqa: F841 - rebound after the maker: at g(x), h is not what g was made of
    return np.sum(g(x))


def test_a_maker_whose_names_are_rebound_stays_refused():
    with pytest.raises(s2sgrad.TransformError):
        s2sgrad.grad(maker_of_a_rebound_name)(np.linspace(-1.0, 1.0, 3))
