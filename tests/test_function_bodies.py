"""Function bodies written as people write them, inlined in both modes.

A forward that sets ctx attributes in one tuple assignment (`ctx.lo, ctx.hi = lo,
hi`) could not be inlined, and forward mode, which inlines to derive a JVP from the
vjp, refused it ("forward reads ctx.lo, which forward never sets"): the derivative
witness, which runs forward mode, refused the gradient with it. A vjp that assigns to
its gradient parameter (`g = g * d` in a loop) was an internal error. Each gradient is
compared with central differences on two shapes; forward mode and the Hessian-vector
product too.
"""
import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import functional


class Clamp(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.lo, ctx.hi = lo, hi
        ctx.save_for_backward(x)
        return np.clip(x, lo, hi)

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return g * ((x > ctx.lo) & (x < ctx.hi)), None, None


class Tanh3(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        y = x
        for _ in range(3):
            y = np.tanh(y)
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        y, slopes = x, []
        for _ in range(3):
            y = np.tanh(y)
            slopes.append(1.0 - y * y)
        for slope in reversed(slopes):
            g = g * slope
        return g


class Scaled(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k, ctx.shift = k, 0.5
        ctx.save_for_backward(x)
        return np.sin(x) * k + ctx.shift

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        g *= ctx.k           # in place: on the vjp's own copy of the adjoint's array
        return g * np.cos(x), None


def clamped(x):
    return np.sum(Clamp.apply(x * 2.0, -0.5, 0.7) ** 2 + x ** 2)


def tanh3(x):
    return np.sum(Tanh3.apply(x) * x)


def scaled(x):
    y = x * 1.5
    s = Scaled.apply(y, 3.0)
    return np.sum(s * y) + np.sum(np.sin(y))   # (y's cotangent is read after the vjp)


@pytest.mark.parametrize("f", [clamped, tanh3, scaled])
@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_inlined_in_reverse_and_forward_mode(f, shape):
    x = np.linspace(-0.8, 0.9, int(np.prod(shape))).reshape(shape) + 0.013
    want = numeric_grad(f, [x], 0)
    for witness in ("always", False):
        np.testing.assert_allclose(s2sgrad.grad(f, witness=witness)(x), want,
                                   rtol=1e-6, atol=1e-8)
    u = np.linspace(1.0, -1.0, x.size).reshape(shape)
    _, tangent = functional.jvp(f, (x,), (u,))
    np.testing.assert_allclose(tangent, np.sum(want * u), rtol=1e-6, atol=1e-8)
    _, hv = functional.hvp(f, x, u)
    eps = 1e-5
    g = s2sgrad.grad(f)
    np.testing.assert_allclose(hv, (g(x + eps * u) - g(x - eps * u)) / (2 * eps),
                               rtol=1e-4, atol=1e-6)
    assert "inlined" in s2sgrad.source(f)
