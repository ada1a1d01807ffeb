"""Hand-written derivatives of the few table helpers not differentiated from source.

A first-order adjoint calls the helpers of `numpy_grads.py` (`_s2s_prod_grad(g,
a, ...)`, ...). Differentiating that adjoint again (grad of grad, hvp, any order)
differentiates the helper: most helpers are plain NumPy that the compiler reads
and differentiates like a user's function (`registry.differentiate_source_of`),
so their derivatives of every order come from their one definition. The rest,
here, keep a rule written by hand because their code holds a construct the
compiler does not differentiate yet, named in `helper_rules.py` beside each
(lazy cotangents made by lambdas, a view updated in place, a function passed with
variables it closes over, SciPy's special functions called with *args). Each is
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
from .reverse import join_items
from .shapes import sum_to_shape
from .shapes import swap_last_axes as _T


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


def _fill(t, like):
    """The tangent of a cotangent that is a tuple of arrays, with the items forward mode
    left as None (constant) replaced by zeros like the item."""
    if t is None or not isinstance(like, (list, tuple)):
        return t
    return [np.zeros(np.shape(item)) if ti is None else ti for ti, item in zip(t, like)]


def _is_float(ans):
    dtype = getattr(ans, "dtype", None)
    return dtype is None or np.issubdtype(dtype, np.inexact)


# =============================================================================================
# Elementwise
# =============================================================================================
@_helper
def scipy_tetragamma(x):
    """d/dx trigamma(x) = polygamma(2, x)."""
    from scipy import special
    return special.polygamma(2, x)


# =============================================================================================
# Transposes of helpers that only move, sum or mask the cotangent
# =============================================================================================
@_helper
def array_grad_transpose(g, cot, object, ans=None):  # noqa: A002 - NumPy's parameter name
    """Transpose of array_grad: the items' cotangents as one array again."""
    if ans is not None and not np.issubdtype(np.asarray(ans).dtype, np.inexact):
        return np.zeros(np.shape(cot))
    if isinstance(object, (list, tuple)):
        out = np.zeros((len(object),) + np.shape(object[0]) if object else (0,),
                       dtype=np.result_type(np.asarray(cot).dtype, np.float64))
        join_items(g, object, out)
        return np.reshape(out, np.shape(cot))
    return np.reshape(g, np.shape(cot))


@_helper
def item_transpose(g, args):
    """Transpose of item_grad: the cotangent at that element."""
    g = np.asarray(g)
    if not args:
        return g.reshape(-1)[0]
    if len(args) == 1:
        return g.flat[args[0]]
    return g[tuple(args)]


@_helper
def diff_transpose(g, a, n=1, axis=-1, prepend=None, append=None):
    """Transpose of diff_grads: np.diff of the cotangents of (a, prepend, append)."""
    kw = {}
    if prepend is not None:
        kw["prepend"] = g[1]
    if append is not None:
        kw["append"] = g[2]
    return np.diff(np.asarray(g[0]), n=n, axis=axis, **kw)


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


# =============================================================================================
# Reductions
# =============================================================================================
@_helper
def prod_initial_transpose(g, a, axis=None, keepdims=False, where=None):
    """Transpose of prod_initial_grad in its cotangent: g times the product."""
    kw = {} if where is None else {"where": where}
    return np.asarray(g) * np.prod(a, axis=axis, keepdims=keepdims, **kw)


@_helper
def prod_initial_a_vjp(u, g, a, axis=None, keepdims=False, where=None):
    """a's cotangent through prod_initial_grad (the product of a, times g, summed to
    initial's shape): prod_grad of g times u."""
    ge = np.asarray(g) * u
    return nh.prod_grad(ge, a, axis=axis, keepdims=keepdims, where=where)


@_helper
def prod_initial_grad_jvp(g, a, initial, axis, keepdims, where, g_dot, a_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.prod_initial_grad(g_dot, a, initial, axis=axis, keepdims=keepdims,
                                   where=where)
    if a_dot is not None:
        weights = nh.prod_grad(g, a, axis=axis, keepdims=keepdims, where=where)
        total = np.sum(weights * np.broadcast_to(a_dot, np.shape(a)))
        out = out + sum_to_shape(total, np.shape(initial))
    return out


# =============================================================================================
# Linear algebra
# =============================================================================================
def _svd_weighted_hvp(xm, weights, e):
    """The tangent along e of U diag(weights) V^T (thin SVD of the matrices xm), with the
    weights held fixed: equal on repeated singular values, 0 on zero ones."""
    u, s, vt = np.linalg.svd(xm, full_matrices=False)
    v = _T(vt)
    e = np.broadcast_to(np.asarray(e), xm.shape)
    m, n = xm.shape[-2:]
    k = s.shape[-1]
    out = np.zeros(np.broadcast_shapes(xm.shape, e.shape))
    for idx in np.ndindex(*s.shape[:-1]):
        si, wi = s[idx], np.broadcast_to(weights[idx], s[idx].shape)
        ui, vi, ei = u[idx], v[idx], e[idx]
        tol = np.max(si, initial=0.0) * max(m, n) * np.finfo(si.dtype).eps * 10
        labels = nh._clusters(si, tol)
        degenerate = nh._degenerate_pairs(labels)
        p = _T(ui) @ ei @ vi
        s2 = si[None, :] ** 2 - si[:, None] ** 2
        off = ~np.eye(k, dtype=bool) & ~degenerate
        f = np.where(off, 1.0 / np.where(off, s2, 1.0), 0.0)
        sw = si * wi
        inner = f * (p * (sw[None, :] - sw[:, None])
                     + _T(p) * (si[:, None] * wi[None, :] - si[None, :] * wi[:, None]))
        res = ui @ inner @ _T(vi)
        scaled = nh.safe_divide(wi, si)
        if m > k:
            res = res + ((ei @ vi - ui @ (_T(ui) @ ei @ vi)) * scaled[None, :]) @ _T(vi)
        if n > k:
            res = res + (ui * scaled[None, :]) @ (_T(ui) @ ei - (_T(ui) @ ei @ vi) @ _T(vi))
        out[idx] = res
    return out


@_helper
def svdvals_hvp(g, x, v):
    """Hessian part of svdvals_grad along v: the tangent of U diag(g) V^T (repeated
    singular values share their cotangent, zero ones get none)."""
    x = np.asarray(x, dtype=float)
    s = np.linalg.svd(x, compute_uv=False)
    gs = np.broadcast_to(np.asarray(g, dtype=float), s.shape)
    weights = np.zeros(s.shape)
    for idx in np.ndindex(*s.shape[:-1]):
        si = s[idx]
        tol = np.max(si, initial=0.0) * max(x.shape[-2:]) * np.finfo(si.dtype).eps * 10
        labels = nh._clusters(si, tol)
        weights[idx] = np.where(si > tol, nh._cluster_mean(gs[idx], labels), 0.0)
    return _svd_weighted_hvp(x, weights, v)


@_helper
def svd_hvp(g, a, ans, v, full_matrices=True, compute_uv=True, hermitian=False):
    """Hessian part of svd_grad along v: the tangent of its formula
    U (diag(g_s) + middle) V^T + (I - U U^T) g_U S^-1 V^T + U S^-1 g_V^T (I - V V^T),
    middle = (F o (J - J^T)) S + S (F o (K - K^T)), J = U^T g_U, K = V^T g_V,
    F_ij = 1 / (s_j^2 - s_i^2), with U' = U Omega_U + (I - U U^T) v V S^-1 and
    V' = V Omega_V + (I - V V^T) v^T U S^-1 (thin parts)."""
    if hermitian:
        nh.unsupported("np.linalg.svd(..., hermitian=True)")
    a = np.asarray(a, dtype=float)
    if not compute_uv:
        return svdvals_hvp(g, a, v)
    u, s, vt = (np.asarray(t) for t in ans)
    gu, gs, gvt = (np.asarray(t) for t in g)
    m, n = a.shape[-2:]
    k = min(m, n)
    u, gu = u[..., :, :k], gu[..., :, :k]
    vt, gvt = vt[..., :k, :], gvt[..., :k, :]
    e = np.broadcast_to(np.asarray(v), a.shape)
    out = np.zeros(a.shape)
    for idx in np.ndindex(*s.shape[:-1]):
        ui, si, vi = u[idx], s[idx], _T(vt[idx])
        gui, gsi, gvi = gu[idx], gs[idx], _T(gvt[idx])
        ei = e[idx]
        tol = np.max(si, initial=0.0) * max(m, n) * np.finfo(si.dtype).eps * 10
        labels = nh._clusters(si, tol)
        degenerate = nh._degenerate_pairs(labels)
        if np.any(degenerate) or np.any(si <= tol):
            raise np.linalg.LinAlgError(
                "the second derivative of np.linalg.svd is undefined at repeated or zero "
                "singular values")
        s2 = si[None, :] ** 2 - si[:, None] ** 2
        off = ~np.eye(k, dtype=bool)
        f = np.where(off, 1.0 / np.where(off, s2, 1.0), 0.0)
        S, Sinv = np.diag(si), np.diag(1.0 / si)
        P = _T(ui) @ ei @ vi
        ds = np.diagonal(P)
        om_u = f * (P * si[None, :] + si[:, None] * _T(P))
        om_v = f * (si[:, None] * P + _T(P) * si[None, :])
        proj_u = np.eye(m) - ui @ _T(ui)
        proj_v = np.eye(n) - vi @ _T(vi)
        du = ui @ om_u + proj_u @ ei @ vi @ Sinv
        dv = vi @ om_v + proj_v @ _T(ei) @ ui @ Sinv
        dS = np.diag(ds)
        df = -f * f * (2.0 * si[None, :] * ds[None, :] - 2.0 * si[:, None] * ds[:, None])
        J, K = _T(ui) @ gui, _T(vi) @ gvi
        dJ, dK = _T(du) @ gui, _T(dv) @ gvi
        aj, ak = J - _T(J), K - _T(K)
        daj, dak = dJ - _T(dJ), dK - _T(dK)
        B = np.diag(gsi) + (f * aj) @ S + S @ (f * ak)
        dB = (df * aj + f * daj) @ S + (f * aj) @ dS + dS @ (f * ak) + S @ (df * ak + f * dak)
        res = du @ B @ _T(vi) + ui @ dB @ _T(vi) + ui @ B @ _T(dv)
        if m > k:
            dproj_u = -(du @ _T(ui) + ui @ _T(du))
            res = res + (dproj_u @ gui @ Sinv @ _T(vi) - proj_u @ gui @ Sinv @ dS @ Sinv @ _T(vi)
                         + proj_u @ gui @ Sinv @ _T(dv))
        if n > k:
            dproj_v = -(dv @ _T(vi) + vi @ _T(dv))
            res = res + (du @ Sinv @ _T(gvi) @ proj_v - ui @ Sinv @ dS @ Sinv @ _T(gvi) @ proj_v
                         + ui @ Sinv @ _T(gvi) @ dproj_v)
        out[idx] = res
    return out


@_helper
def svd_grad_jvp(g, a, ans, full_matrices, compute_uv, hermitian, g_dot, a_dot):
    g_dot = _fill(g_dot, g)
    out = 0.0
    if g_dot is not None:
        out = nh.svd_grad(g_dot, a, ans, full_matrices, compute_uv, hermitian)
    if a_dot is not None:
        out = out + svd_hvp(g, a, ans, a_dot, full_matrices, compute_uv, hermitian)
    return out


# -- qr ----------------------------------------------------------------------------------------
