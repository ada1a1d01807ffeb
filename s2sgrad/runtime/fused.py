"""Softmax, log-softmax, logsumexp and the logistic sigmoid as one operation each.

The normaliser recognises them where code writes them out (the maximum
subtracted first; the sigmoid as `1 / (1 + np.exp(-x))` or
`0.5 * (np.tanh(0.5 * x) + 1)`: normalize/fused.py) and calls these instead: each computes
exactly what the written-out statements compute, in the same order (the same
values, bit for bit), and has one rule (rules/runtime_rules.py), so the adjoint
is the hand-written one: no gradient through the maximum (the result does not
change when a constant is added along the axis), no cotangents of the
intermediates; for the sigmoid, `g * s * (1 - s)` from its value alone (the
intermediates are not kept, and `1 / (1 + exp(-x))` at x < -709, where exp
overflows, has the slope 0 instead of the inf * 0 = nan of its chain rule).
"""
from __future__ import annotations

import numpy as np

from .registry import new_helper as _helper


@_helper
def log_softmax(x, axis):
    """(x - max) - log(sum(exp(x - max)))."""
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


@_helper
def softmax(x, axis):
    """exp(x - max) / sum(exp(x - max))."""
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


@_helper
def logsumexp(x, axis, keepdims, max_first):
    """max + log(sum(exp(x - max))), the maximum kept or squeezed along `axis` like
    the sum; `max_first`: the order the code added them in."""
    m = np.max(x, axis=axis, keepdims=True)
    total = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=keepdims))
    top = m if keepdims else np.squeeze(m, axis=axis)
    return top + total if max_first else total + top


@_helper
def sigmoid_exp(x, one):
    """one / (one + exp(-x)); `one`: the constant as the code wrote it (1 or 1.0)."""
    return one / (one + np.exp(-x))


@_helper
def sigmoid_tanh(x, one):
    """0.5 * (tanh(0.5 * x) + one); `one`: the constant as the code wrote it."""
    return 0.5 * (np.tanh(0.5 * x) + one)
