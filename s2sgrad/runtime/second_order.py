"""Hand-written derivatives of the few table helpers not differentiated from source.

A first-order adjoint calls the helpers of `numpy_grads.py` (`_s2s_prod_grad(g,
a, ...)`, ...). Differentiating that adjoint again (grad of grad, hvp, any order)
differentiates the helper: most helpers are plain NumPy that the compiler reads
and differentiates like a user's function (`registry.differentiate_source_of`),
so their derivatives of every order come from their one definition. The rest,
here, keep a rule written by hand because their code holds a construct the
compiler does not differentiate yet, named in `helper_rules.py` beside each
(lazy cotangents made by lambdas: the bilinear products and einsum). Each is
checked against differences in tests/test_second_order_rules.py; differentiating
one of these derivatives again raises TransformError (no rule), never a guess.

Every table helper h(g, x) is the gradient of <g, f(x)>, linear in g: its
derivative in g, transposed, is the tangent of f; its derivative in x is the
Hessian of <g, f(x)> applied to a direction, symmetric, so one `<f>_hvp(g, x, ...,
v)` is both the tangent of h along v and its cotangent for v. `*_jvp` functions
are the full tangent of a helper: the part in g plus the Hessian part.
"""
from __future__ import annotations

import numpy as np

from . import numpy_grads as nh
from .registry import new_helper as _helper


def _zero(t, like):
    """A tangent or cotangent that may be None (not differentiated): zeros then."""
    if t is None:
        return np.zeros(np.shape(like))
    return np.asarray(t)


def _plus(a, b):
    """a + b for tangents that may be None (zero) or lists of them."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, (list, tuple)):
        return [_plus(x, y) for x, y in zip(a, b)]
    return a + b


def _is_float(ans):
    dtype = getattr(ans, "dtype", None)
    return dtype is None or np.issubdtype(dtype, np.inexact)


# =============================================================================================
# Products: bilinear and multilinear functions
# =============================================================================================
# For f bilinear in (a, b), h(g, a, b) = (grad_a, grad_b) with grad_a depending on b only
# and grad_b on a only; so the Hessian part of h's tangent is h(g, a_dot, b_dot), and
# a's cotangent for (u_a, u_b) is grad_a with b replaced by u_b.
def _bilinear_jvp(h, g, a, b, g_dot, a_dot, b_dot, *args):
    out = None
    if g_dot is not None:
        out = list(h(g_dot, a, b, *args))
    if a_dot is not None or b_dot is not None:
        ta = _zero(a_dot, a)
        tb = _zero(b_dot, b)
        out = _plus(out, list(h(g, ta, tb, *args)))
    return out


@_helper
def inner_grads_jvp(g, a, b, g_dot, a_dot, b_dot):
    return _bilinear_jvp(nh.inner_grads, g, a, b, g_dot, a_dot, b_dot)


@_helper
def tensordot_grads_jvp(g, a, b, axes, g_dot, a_dot, b_dot):
    return _bilinear_jvp(nh.tensordot_grads, g, a, b, g_dot, a_dot, b_dot, axes)


@_helper
def kron_grads_jvp(g, a, b, g_dot, a_dot, b_dot):
    return _bilinear_jvp(nh.kron_grads, g, a, b, g_dot, a_dot, b_dot)


def _einsum_arrays(operands):
    """Positions of the array operands of einsum (not the subscripts)."""
    if isinstance(operands[0], str):
        return list(range(1, len(operands)))
    n = len(operands) // 2
    return [2 * i for i in range(n)]


@_helper
def einsum_transpose(g, operands):
    """Transpose of einsum_grads: the tangent of np.einsum, one operand at a time."""
    total = None
    for pos in _einsum_arrays(operands):
        gi = g[pos]
        if gi is None:
            continue
        ops = list(operands)
        ops[pos] = gi
        term = np.einsum(*ops)
        total = term if total is None else total + term
    return total


@_helper
def einsum_hvp(g, operands, v):
    """Hessian part of einsum_grads along v (one array or None per operand): for each
    operand i, the sum over j != i of its cotangent with operand j replaced by v_j."""
    positions = _einsum_arrays(operands)
    out = [None] * len(operands)
    for j in positions:
        if v[j] is None:
            continue
        ops = list(operands)
        ops[j] = np.asarray(v[j])
        grads = nh.einsum_grads(g, tuple(ops))
        for i in positions:
            if i != j:
                out[i] = _plus(out[i], grads[i])
    for i in positions:
        if out[i] is None:
            out[i] = np.zeros(np.shape(operands[i]))
    return out


@_helper
def einsum_grads_jvp(g, operands, g_dot, operands_dot):
    out = None
    if g_dot is not None:
        out = list(nh.einsum_grads(g_dot, operands))
    if operands_dot is not None and any(t is not None for t in operands_dot):
        out = _plus(out, einsum_hvp(g, operands, operands_dot))
    return out
