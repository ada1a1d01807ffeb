"""Hand-written derivatives of the few table helpers not differentiated from source.

A first-order adjoint calls the helpers of `numpy_grads.py` (`_s2s_prod_grad(g,
a, ...)`, ...). Differentiating that adjoint again (grad of grad, hvp, any order)
differentiates the helper: most helpers are plain NumPy that the compiler reads
and differentiates like a user's function (`registry.differentiate_source_of`),
so their derivatives of every order come from their one definition. The rest,
here, keep a rule written by hand because their code holds a construct the
compiler does not differentiate yet, named in `helper_rules.py` beside each
(einsum's lazy cotangents, made by lambdas). Each is
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


def _plus(a, b):
    """a + b for tangents that may be None (zero) or lists of them."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, (list, tuple)):
        return [_plus(x, y) for x, y in zip(a, b)]
    return a + b


# =============================================================================================
# einsum: its cotangents are made lazily (only the operands differentiated), so the
# Hessian part and the transpose are written here
# =============================================================================================
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
