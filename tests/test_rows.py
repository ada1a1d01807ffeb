"""Rows of an argument read again in the adjoint, not kept per loop step
(`s2sgrad/compiler/optimize/rows.py`).

`for x in xs:` (and `x = xs[t]` in `for t in range(...)`) kept every step's row
on a stack: a NumPy view object per step. Where the array is an argument that
nothing binds again or writes into, and nothing reads the loop variable outside
the loop, the adjoint reads `xs[k]` instead. Each case checks the generated text
(the stack gone, or kept where the proof fails) and the gradient against central
differences on two shapes, one broadcasting.
"""
import re

import numpy as np
import pytest
from conftest import assert_grads_match_differences, numeric_grad

import s2sgrad


def rnn(W, U, b, xs):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = np.tanh(W @ h + U @ x + b)
    return np.sum(h ** 2)


def rnn_indexed(W, U, b, xs):
    h = np.zeros(W.shape[0])
    for t in range(xs.shape[0]):
        x = xs[t]
        h = np.tanh(W @ h + U @ x + b)
    return np.sum(h ** 2)


def nested(W, U, b, xs):
    h = np.zeros(W.shape[0])
    for _ in range(2):
        for x in xs:
            h = np.tanh(W @ h + U @ x + b)
        h = h * 0.5
    return np.sum(h ** 2)


def enumerated(W, U, b, xs):
    h = np.zeros(W.shape[0])
    for i, x in enumerate(xs):
        h = np.tanh(W @ h + U @ x * (1.0 + 0.1 * i) + b)
    return np.sum(h ** 2)


def zipped(W, U, b, xs):
    h = np.zeros(W.shape[0])
    for x, y in zip(xs, xs[::-1] * 0.5):     # (y is no argument's row)
        h = np.tanh(W @ h + (U @ x) * y[0] + b)
    return np.sum(h ** 2)


# -- where the proof fails: the stack stays ---------------------------------------------
def written_after(W, U, b, xs):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = np.tanh(W @ h + U @ x + b)
    xs[0] = 0.0          # the rows the stack kept saw this write too: a view each
    return np.sum(h ** 2) + np.sum(xs)


def read_after(W, U, b, xs):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = np.tanh(W @ h + U @ x + b)
    return np.sum(h ** 2) + np.sum(U @ x)     # the last row, after the loop


def read_before(W, U, b, xs):
    h = np.zeros(W.shape[0])
    x = xs[0] * 0.0
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ x + b)        # the previous step's row
        x = xs[t]
    return np.sum(h ** 2)


def from_a_list(W, U, b, xs):
    rows = [xs[0], xs[1] * 2.0, xs[0] - xs[1]]
    h = np.zeros(W.shape[0])
    for x in rows:
        h = np.tanh(W @ h + U @ x + b)
    return np.sum(h ** 2)


def _args(hidden, inputs, steps, b_shape, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((hidden, hidden)) * 0.4, rng.standard_normal((hidden, inputs)),
            rng.standard_normal(b_shape) * 0.1, rng.standard_normal((steps, inputs))]


SHAPES = [(4, 3, 5, (4,)), (3, 2, 4, (1,))]   # (the second's bias broadcasts)


def _copying(fn):
    """fn on copies of its arguments (for differences of a function that writes into one)."""
    return lambda *args: fn(*[a.copy() for a in args])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("wrt", [(0, 1, 2), (0, 1, 2, 3)])
@pytest.mark.parametrize("fn", [rnn, rnn_indexed, nested, enumerated, zipped])
def test_rows_are_read_from_the_argument_in_the_adjoint(fn, wrt, shape):
    args = _args(*shape)
    src = s2sgrad.source(fn, wrt=wrt, args=args)
    assert not re.search(r"\bx_stack\b", src) and "x = xs[" in src.split("_adjoint(")[1], src
    assert_grads_match_differences(fn, args, wrt)
    out, pullback = s2sgrad.vjp(fn, *args, wrt=wrt)
    first, again = pullback(1.0), pullback(1.0)     # (the adjoint reads xs each time)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fn", [written_after, read_after, read_before, from_a_list])
def test_the_stack_stays_where_the_rows_may_not_be_the_same(fn, shape):
    args = _args(*shape)
    src = s2sgrad.source(fn, wrt=(0, 1, 2, 3), args=args)
    assert re.search(r"\bx_stack\b", src), src
    grads = s2sgrad.grad(fn, wrt=(0, 1, 2, 3))(*[a.copy() for a in args])
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, numeric_grad(_copying(fn), args, i), rtol=1e-6,
                                   atol=1e-8, err_msg=f"argument {i}")



def zip_scaled(W, U, b, xs):
    h = np.zeros(W.shape[0])
    for x, s in zip(xs, b):            # b's items are numbers: arithmetic, not repetition
        h = np.tanh(W @ h + U @ x) * s
    return np.sum(h ** 2)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_rows_of_arrays_are_arrays_or_numbers(shape):
    """Items of an array (a row, a number) are never lists: `h * s` needs no check at
    run time that it does not repeat a list (`_s2s_no_sequence_arithmetic`)."""
    W, U, b, xs = _args(*shape)
    b = np.linspace(0.5, 1.5, xs.shape[0])
    src = s2sgrad.source(zip_scaled, wrt=(0, 1, 2, 3), args=(W, U, b, xs))
    assert "no_sequence_arithmetic" not in src, src
    assert_grads_match_differences(zip_scaled, [W, U, b, xs], (0, 1, 2, 3))
