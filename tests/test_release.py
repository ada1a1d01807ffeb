"""Fewer arrays alive at once in the NumPy backend's gradients.

- the adjoint frees each residual after reading it last when grad hands it the
  residuals for one call (`_s2s_take`, `del`), and keeps them for a pullback
  called again;
- a cotangent made by arithmetic is summed into in place (`x_bar += part`);
- `1.0 - t * t` is `_s2s_subtract_into(1.0, t * t)` outside loops: the
  temporary's array is reused, the bits are the same (signed zeros too).
Peak memory is measured with tracemalloc in arrays of the argument's size;
gradients against central differences on two shapes (one broadcasting).
"""
import ast
import tracemalloc

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import optimizer_check
from s2sgrad.compiler import compile_function
from s2sgrad.compiler.optimize.inplace import accumulate_in_place, subtract_from_temporaries
from s2sgrad.runtime.release import Once
from s2sgrad.runtime.temporaries import SMALL, subtract_into


def wave(x):
    return np.sum(np.sin(x) * np.exp(-x ** 2) + np.tanh(x))


def wave_scaled(x, w):
    return np.sum(np.sin(x) * np.exp(-(x * w) ** 2) + np.tanh(x) * w)


def _peak_in_arrays(fn, n_bytes: int) -> float:
    fn()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return (peak - base) / n_bytes


def test_grad_frees_residuals_after_their_last_read():
    x = np.random.default_rng(0).standard_normal(200_000)
    pair = compile_function(wave, (0,))

    def once():
        out, residuals = pair.forward(x)
        residuals = Once(residuals)
        return pair.adjoint(residuals, 1.0)
    # sin(x), exp(-x**2), tanh(x) kept, and one temporary: the forward's peak; the
    # adjoint's never exceeds it (it held all three beside two of its own before)
    assert _peak_in_arrays(once, x.nbytes) < 4.5
    if not optimizer_check.ENABLED:   # (that mode runs a second pair beside this one)
        g = s2sgrad.grad(wave, witness=False)   # (the witnesses copy and compare)
        assert _peak_in_arrays(lambda: g(x), x.nbytes) < 4.5
    text = s2sgrad.source(wave)
    adjoint = text.split("def wave_adjoint")[1]
    assert "= _s2s_take(residuals)" in adjoint
    assert "del tanh_x" in adjoint and "del sin_x" in adjoint
    assert "x_bar += " in adjoint and "x_bar = x_bar +" not in adjoint
    assert "_s2s_subtract_into(1.0, tanh_x * tanh_x)" in adjoint


@pytest.mark.parametrize("shapes", [((7,), (7,)), ((3, 4), (4,))])
def test_gradients_of_the_released_code(shapes):
    rng = np.random.default_rng(len(shapes[0]))
    x, w = rng.standard_normal(shapes[0]), rng.uniform(0.5, 1.5, shapes[1])
    grads = s2sgrad.grad(wave_scaled, (0, 1))(x, w)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, numeric_grad(wave_scaled, [x, w], i), rtol=1e-6,
                                   atol=1e-8)


@pytest.mark.parametrize("shape", [(SMALL + 1,), (3, SMALL)])
def test_the_difference_written_into_a_large_temporary_is_the_derivative(shape):
    """Above SMALL items `_s2s_subtract_into` writes into the product's array (the
    fuzzer's arrays are all below it): the gradient against the derivative in closed
    form (differences on this many elements would take too long)."""
    x = np.random.default_rng(len(shape)).uniform(-2.0, 2.0, shape)
    assert "_s2s_subtract_into(1.0, tanh_x * tanh_x)" in s2sgrad.source(wave)
    e = np.exp(-x ** 2)
    want = np.cos(x) * e - 2.0 * x * np.sin(x) * e + (1.0 - np.tanh(x) ** 2)
    np.testing.assert_allclose(s2sgrad.grad(wave)(x), want, rtol=1e-12, atol=1e-14)


def test_a_pullback_called_again_keeps_its_residuals():
    x = np.random.default_rng(1).standard_normal((3, 5))
    out, pullback = s2sgrad.vjp(wave, x)
    first = pullback(1.0)
    again = pullback(2.0)
    np.testing.assert_allclose(again[0], 2.0 * first[0], rtol=1e-12)
    np.testing.assert_allclose(first[0], numeric_grad(wave, [x], 0), rtol=1e-6, atol=1e-8)


def _module(src):
    return ast.parse(src).body[0]


def test_subtracting_from_a_constant_reuses_the_temporary_to_the_bit():
    fn = _module("def f(t, m, s):\n    for k in s:\n        t = 1.0 - t * t\n"
                 "    return (1.0 - t * t, 1 - m * m, 2.0 - s * s)\n")
    subtract_from_temporaries(fn, lambda name: name == "s")   # s: a proven number
    assert ast.unparse(fn.body[1]) == \
        "return (_s2s_subtract_into(1.0, t * t), _s2s_subtract_into(1, m * m), 2.0 - s * s)"
    assert ast.unparse(fn.body[0].body[0]) == "t = 1.0 - t * t"   # (a step's small arrays)
    rng = np.random.default_rng(2)
    t = np.concatenate([rng.standard_normal(SMALL + 10), [1.0, -1.0, 0.0, -0.0, np.inf]])
    m = rng.standard_normal(SMALL + 10) > 0   # bool: `-` of a bool array is refused
    c64 = t * (1.0 + 0.5j)
    for c, make in [(1.0, lambda: t * t), (1, lambda: t * t), (1, lambda: m * m),
                    (1.0, lambda: m * m), (1.0, lambda: c64 * c64),
                    (1.0, lambda: (t * t).astype(np.float32)), (2.0, lambda: t[:8] * t[:8]),
                    (1.0, lambda: float(t[0] * t[0])), (1.0, lambda: t[0] * t[0])]:
        with np.errstate(invalid="ignore"):   # (inf times a complex number)
            old = c - make()
            new = subtract_into(c, make())
        np.testing.assert_array_equal(new, old)
        assert type(new) is type(old) and np.result_type(new) == np.result_type(old)
        for part in (np.real, np.imag):   # (1 - 1 is +0.0)
            np.testing.assert_array_equal(np.signbit(part(new)), np.signbit(part(old)))
    e = t * t
    assert subtract_into(1.0, e) is e   # (written into the temporary: no new array)


def test_a_cotangent_read_before_its_sum_is_not_summed_in_place():
    from s2sgrad.compiler.facts import ResidualMarks
    fn = _module("def f(g, a, b):\n    x_bar = g * a\n    y = x_bar\n    x_bar = x_bar + b\n"
                 "    z_bar = g * b\n    z_bar = z_bar + a\n    return x_bar, y, z_bar\n")
    marks = ResidualMarks()
    marks.mark(fn.body[2], accumulates="x_bar")
    marks.mark(fn.body[4], accumulates="z_bar")
    accumulate_in_place(fn, marks)
    lines = [ast.unparse(s) for s in fn.body]
    assert lines[2] == "x_bar = x_bar + b"     # y refers to x_bar's array
    assert lines[4] == "z_bar += a"


class Softsign(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / (1.0 + np.abs(x))

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return g / (1.0 + np.abs(x)) ** 2


def _cell(h, w):
    return np.tanh(h * w + 0.1)


def looped(x, w):
    h = x * 1.0
    out = np.zeros_like(x)
    for k in range(3):
        h = _cell(h, w)
        out[..., k % x.shape[-1]] += np.sum(h, axis=-1)
        if np.sum(h) > 0.0:
            h = Softsign.apply(h) * 1.5
        else:
            h = h - 0.1 * h ** 2
    return np.sum(out ** 2) + np.sum(1.0 - h * h)


@pytest.mark.parametrize("shapes", [((4,), (4,)), ((2, 4), (4,))])
def test_gradients_with_residuals_handed_over_for_one_call(shapes):
    """The test suite runs the witnesses on every call, which hand the adjoint the
    forward's tuple: here they are off, so grad hands over a `Once` (loops, stacks,
    in-place writes, a callee, a Function, branches)."""
    rng = np.random.default_rng(len(shapes[0]))
    x, w = rng.uniform(-1, 1, shapes[0]), rng.uniform(0.5, 1.5, shapes[1])
    g = s2sgrad.grad(looped, (0, 1), witness=False)
    for _ in range(2):   # (a second call: nothing of the first's residuals is left)
        grads = g(x, w)
        for i, gi in enumerate(grads):
            np.testing.assert_allclose(gi, numeric_grad(looped, [x, w], i), rtol=1e-6,
                                       atol=1e-8)
