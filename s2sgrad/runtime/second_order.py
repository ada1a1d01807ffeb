"""Derivatives of the table helpers, for second derivatives.

A first-order adjoint calls the helpers of `numpy_grads.py`
(`_s2s_prod_grad(g, a, ...)`, ...). Differentiating that adjoint again needs
the derivatives of each helper, whose rules are in `helper_rules.py`; what
does not read well as one line of NumPy there lives here, registered with
`s2sgrad.runtime.helper` like every other helper.

Every table helper h(g, x) is the gradient of <g, f(x)> for the function f
it belongs to (np.prod, np.linalg.eigh, ...), so it is linear in g:

- its derivative in g, transposed, is the tangent of f itself (forward mode);
- its derivative in x is the Hessian of <g, f(x)> applied to a direction.
  A Hessian is symmetric, so one function, `<f>_hvp(g, x, ..., v)`, is both
  the tangent of h along v (forward over reverse) and its cotangent for v
  (reverse over reverse).

Where a helper also receives f's result `ans`, the derivative in x is the
*total* one (ans moving with x) and ans gets none: a helper is only ever
called with the result of its own f. `*_jvp` functions here are the full
tangent of a helper: the part in g plus the Hessian part.

Conventions follow the first-order table (README, "NumPy coverage"): where f
is piecewise linear (max, sort, clip, ...) its Hessian is 0 away from the
kinks; where a second derivative does not exist (repeated eigen- or singular
values with a cotangent that mixes them, a rank-deficient matrix for the
decompositions) the helper raises instead of returning a value.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import numpy_grads as nh
from . import tangent as rt
from .registry import new_helper as _helper
from .reverse import join_items
from .shapes import expand_reduced, normalize_axes, sum_to_shape, unbroadcast
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
def sinc_second_derivative(x):
    """d^2/dx^2 sin(pi x) / (pi x): (-pi sin(pi x) - 2 sinc'(x)) / x; a series near 0."""
    x = np.asarray(x, dtype=float)
    small = np.abs(x) < 1e-2
    safe = np.where(small, 1.0, x)
    direct = (-np.pi * np.sin(np.pi * safe) - 2.0 * nh.sinc_derivative(safe)) / safe
    p2 = (np.pi * x) ** 2
    series = np.pi ** 2 * (-1.0 / 3.0 + p2 / 10.0 - p2 * p2 / 168.0 + p2 ** 3 / 6480.0)
    out = np.where(small, series, direct)
    return out[()] if out.ndim == 0 else out


@_helper
def scipy_tetragamma(x):
    """d/dx trigamma(x) = polygamma(2, x)."""
    from scipy import special
    return special.polygamma(2, x)


# =============================================================================================
# Transposes of helpers that only move, sum or mask the cotangent
# =============================================================================================
@_helper
def unravel_transpose(g, cot, a, order="C"):
    """Transpose of unravel (a reshape in the order np.ravel used): the inverse permutation."""
    size = int(np.size(cot))
    where_from = nh.unravel(np.arange(size).reshape(np.shape(cot)), a, order)
    out = np.empty(size, dtype=np.result_type(np.asarray(g).dtype, np.float32))
    out[np.ravel(where_from)] = np.ravel(g)
    return out.reshape(np.shape(cot))


@_helper
def concatenate_transpose(g, cot, arrays, axis=0):
    """Transpose of concatenate_grad: the cotangents joined again."""
    if isinstance(arrays, np.ndarray):
        return np.reshape(np.concatenate(np.asarray(g), axis=axis), np.shape(cot))
    pieces = [np.reshape(np.asarray(gi), np.shape(x)) for gi, x in zip(g, arrays)]
    return np.reshape(np.concatenate(pieces, axis=axis), np.shape(cot))


@_helper
def stack_transpose(g, arrays, axis=0):
    """Transpose of stack_grad: the cotangents stacked again."""
    if isinstance(arrays, np.ndarray):
        return np.moveaxis(np.asarray(g), 0, axis)
    return np.stack([np.asarray(gi) for gi in g], axis=axis)


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
def atleast_transpose(g, cot, arys):
    """Transpose of atleast_grad."""
    if len(arys) == 1:
        return np.reshape(g[0], np.shape(cot))
    return [np.reshape(gi, np.shape(ci)) for gi, ci in zip(g, cot)]


@_helper
def broadcast_arrays_transpose(g, cot):
    """Transpose of broadcast_arrays_grad: each cotangent broadcast back."""
    return [np.broadcast_to(gi, np.shape(ci)).copy() for gi, ci in zip(g, cot)]


@_helper
def meshgrid_transpose(g, cot, xi, indexing="xy", sparse=False):
    """Transpose of meshgrid_grad: each input's cotangent repeated along the other axes."""
    n = len(xi)
    out = []
    for i, (gi, ci) in enumerate(zip(g, cot)):
        axis = i
        if indexing == "xy" and n > 1 and i < 2:
            axis = 1 - i
        nd = np.ndim(ci)
        shape = [1] * nd
        shape[axis] = int(np.size(gi))
        out.append(np.broadcast_to(np.reshape(gi, shape), np.shape(ci)).copy())
    return out


@_helper
def select_transpose(g, cot, condlist):
    """Transpose of select_grads: each choice where its condition is the first true one,
    the default elsewhere."""
    shape = np.shape(cot)
    taken = np.zeros(shape, dtype=bool)
    out = np.zeros(shape)
    for cond, gi in zip(condlist, g[0]):
        cond = np.broadcast_to(cond, shape)
        out = out + np.where(cond & ~taken, gi, 0.0)
        taken = taken | cond
    return out + np.where(taken, 0.0, g[1])


@_helper
def clip_transpose(g, cot, a, a_min=None, a_max=None, min=None, max=None):  # noqa: A002
    """Transpose of clip_grads: the masks of the three cotangents applied again."""
    masks = nh.clip_grads(np.ones(np.shape(cot)), a, a_min, a_max, min, max)
    out = 0.0
    for gi, mask in zip(g, masks):
        if mask is not None:
            out = out + np.asarray(gi) * mask
    return np.broadcast_to(out, np.shape(cot)).copy() if np.ndim(out) else out


@_helper
def astype_transpose(g, cot, dtype):
    """Transpose of astype_grad: the cotangent, or 0 for an integer cast."""
    if not np.issubdtype(np.dtype(dtype), np.inexact):
        return np.zeros(np.shape(cot))
    return np.asarray(g).astype(np.result_type(np.asarray(cot).dtype, np.float32), copy=False)


@_helper
def fill_transpose(g, cot, ans):
    """Transpose of fill_grad: the fill value's cotangent broadcast over the array."""
    if not _is_float(ans):
        return np.zeros(np.shape(cot))
    return np.broadcast_to(g, np.shape(cot)).copy()


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
def pad_transpose(g, pad_width, mode="constant", reflect_type="even"):
    """Transpose of pad_grads: np.pad of the array's cotangent (and of the constant's)."""
    if mode == "constant":
        return np.pad(np.asarray(g[0]), pad_width, mode="constant",
                      constant_values=np.asarray(g[1]))
    return np.pad(np.asarray(g[0]), pad_width, mode=mode)


@_helper
def diff_transpose(g, a, n=1, axis=-1, prepend=None, append=None):
    """Transpose of diff_grads: np.diff of the cotangents of (a, prepend, append)."""
    kw = {}
    if prepend is not None:
        kw["prepend"] = g[1]
    if append is not None:
        kw["append"] = g[2]
    return np.diff(np.asarray(g[0]), n=n, axis=axis, **kw)


@_helper
def ediff1d_transpose(g, to_end=None, to_begin=None):
    """Transpose of ediff1d_grads."""
    return np.ediff1d(np.asarray(g[0]), to_end=None if to_end is None else g[1],
                      to_begin=None if to_begin is None else g[2])


@_helper
def arange_transpose(g, cot, start=None, stop=None, step=None, ans=None):
    """Transpose of arange_grads: start + i * step applied to the cotangents."""
    if stop is None or not _is_float(ans):
        return np.zeros(np.shape(cot))
    t = np.zeros(np.shape(cot)) + g[0]
    if step is not None:
        t = t + np.arange(np.shape(cot)[0]) * g[2]
    return t


@_helper
def linspace_transpose(g, start, stop, num=50, endpoint=True, retstep=False, axis=0, ans=None):
    """Transpose of linspace_grads: np.linspace of the cotangents (it is linear)."""
    value = ans[0] if retstep else ans
    out = np.linspace(np.asarray(g[0]), np.asarray(g[1]), num, endpoint=endpoint,
                      retstep=retstep, axis=axis)
    if not _is_float(value):
        if retstep:
            return np.zeros(np.shape(value)), out[1]
        return np.zeros(np.shape(value))
    return out


@_helper
def cumulative_transpose(g, x, ans, axis=None, include_initial=False, product=False):
    """Transpose of cumulative_grad: the tangent of np.cumulative_sum / _prod."""
    ax = 0 if axis is None else axis
    if product:
        return rt.cumulative_prod_jvp(g, x, ax, include_initial)
    out = np.cumsum(np.asarray(g), axis=ax)
    if include_initial:
        zero = np.zeros_like(np.take(out, [0], axis=ax))
        out = np.concatenate([zero, out], axis=ax)
    return out


@_helper
def slogdet_transpose(g, cot, a):
    """Transpose of slogdet_grad: (0 for the sign, tr(a^-1 g) for log|det|)."""
    logdet = np.trace(np.linalg.solve(a, np.asarray(g)), axis1=-2, axis2=-1)
    return [np.zeros(np.shape(cot[0])), logdet]


@_helper
def trapezoid_transpose(g, y, x=None, dx=1.0, axis=-1):
    """Transpose of trapezoid_grads: the tangent of np.trapezoid along the cotangents
    of (y, x, dx)."""
    trapz = getattr(np, "trapezoid", None) or np.trapz
    out = trapz(np.asarray(g[0]), x=x, dx=dx, axis=axis)
    if x is None:
        out = out + trapz(np.asarray(y), dx=1.0, axis=axis) * g[2]
    else:
        gx = np.asarray(g[1])
        if np.ndim(x) == 1 and np.ndim(y) > 1:
            out = out + trapz(np.asarray(y), x=gx, axis=axis)
        else:
            out = out + trapz(np.asarray(y), x=np.broadcast_to(gx, np.shape(y)), axis=axis)
    return out


@_helper
def interp_transpose(g, x, xp, fp, left=None, right=None):
    """Transpose of interp_grads: the tangent of np.interp along the cotangents of
    (x, xp, fp, left, right), with the same knots and conventions."""
    xp, fp = np.asarray(xp), np.asarray(fp)
    n = len(xp)
    xa = np.asarray(x)
    idx = np.clip(np.searchsorted(xp, xa, side="right") - 1, 0, n - 2)
    span = xp[idx + 1] - xp[idx]
    t = (xa - xp[idx]) / span
    slope = (fp[idx + 1] - fp[idx]) / span
    below, above = xa < xp[0], xa > xp[-1]
    inside = ~below & ~above
    gx, gxp, gfp = np.asarray(g[0]), np.asarray(g[1]), np.asarray(g[2])
    value = gx * slope + gfp[idx] * (1 - t) + gfp[idx + 1] * t \
        - slope * (gxp[idx] * (1 - t) + gxp[idx + 1] * t)
    low = gfp[0] if left is None else g[3]
    high = gfp[-1] if right is None else g[4]
    return np.where(inside, value, np.where(below, low, high))


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


@_helper
def convolve_grads_jvp(g, a, v, mode, g_dot, a_dot, v_dot):
    return _bilinear_jvp(nh.convolve_grads, g, a, v, g_dot, a_dot, v_dot, mode)


@_helper
def correlate_grads_jvp(g, a, v, mode, g_dot, a_dot, v_dot):
    return _bilinear_jvp(nh.correlate_grads, g, a, v, g_dot, a_dot, v_dot, mode)


@_helper
def vecdot_grads_jvp(g, x1, x2, axis, g_dot, x1_dot, x2_dot):
    return _bilinear_jvp(nh.vecdot_grads, g, x1, x2, g_dot, x1_dot, x2_dot, axis)


@_helper
def cross_grads_jvp(g, a, b, axisa, axisb, axisc, axis, g_dot, a_dot, b_dot):
    return _bilinear_jvp(nh.cross_grads, g, a, b, g_dot, a_dot, b_dot,
                         axisa, axisb, axisc, axis)


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


@_helper
def multi_dot_hvp(g, arrays, v):
    """Hessian part of multi_dot_grads along v (one array or None per matrix)."""
    items = list(arrays)
    out = [None] * len(items)
    for j, vj in enumerate(v):
        if vj is None:
            continue
        replaced = list(items)
        replaced[j] = np.asarray(vj)
        grads = nh.multi_dot_grads(g, replaced)
        for i in range(len(items)):
            if i != j:
                out[i] = _plus(out[i], grads[i])
    return [np.zeros(np.shape(x)) if o is None else o for o, x in zip(out, items)]


@_helper
def multi_dot_grads_jvp(g, arrays, g_dot, arrays_dot):
    out = None
    if g_dot is not None:
        out = list(nh.multi_dot_grads(g_dot, arrays))
    if arrays_dot is not None and any(t is not None for t in arrays_dot):
        out = _plus(out, multi_dot_hvp(g, arrays, arrays_dot))
    return out


@_helper
def polyval_transpose(g, p, x):
    """Transpose of polyval_grads: the tangent of np.polyval along (g_p, g_x)."""
    n = len(p)
    xa = np.asarray(x)
    out = np.asarray(g[1]) * rt.polyval_slope(p, x)
    for k in range(n):
        out = out + np.asarray(g[0][k]) * xa ** (n - 1 - k)
    return out


@_helper
def polyval_hvp(g, p, x, p_dot, x_dot):
    """Hessian part of polyval_grads along (p_dot, x_dot)."""
    n = len(p)
    xa = np.asarray(x)
    g = np.asarray(g)
    dx = None if x_dot is None else np.asarray(x_dot)
    pd = None
    if p_dot is not None:
        pd = [None if t is None else np.asarray(t) for t in p_dot] \
            if not isinstance(p_dot, np.ndarray) else list(p_dot)
    g_p = []
    for k in range(n):
        e = n - 1 - k
        if dx is None or e == 0:
            g_p.append(np.zeros(np.shape(p[k])))
        else:
            g_p.append(unbroadcast(g * e * xa ** (e - 1) * dx, np.asarray(p[k])))
    t = 0.0
    if pd is not None:
        for k in range(n - 1):
            if pd[k] is not None:
                t = t + pd[k] * (n - 1 - k) * xa ** (n - 2 - k)
    if dx is not None:
        second = 0.0
        for k in range(n - 2):
            second = second + np.asarray(p[k]) * (n - 1 - k) * (n - 2 - k) * xa ** (n - 3 - k)
        t = t + dx * second
    g_x = unbroadcast(np.broadcast_to(g * t, np.broadcast_shapes(np.shape(g), xa.shape)), xa)
    if isinstance(p, np.ndarray):
        g_p = np.stack([np.asarray(gk) for gk in g_p]) if n else np.zeros(p.shape)
    return g_p, g_x


@_helper
def polyval_grads_jvp(g, p, x, g_dot, p_dot, x_dot):
    out = None
    if g_dot is not None:
        out = list(nh.polyval_grads(g_dot, p, x))
    if p_dot is not None or x_dot is not None:
        hp, hx = polyval_hvp(g, p, x, p_dot, x_dot)
        out = _plus(out, [hp, hx])
    return out


# =============================================================================================
# Reductions
# =============================================================================================
def _slices(x, axis):
    """x with the reduced axes moved last and flattened into one: (lead..., n), and how
    to put an array of that layout back."""
    x = np.asarray(x)
    nd = x.ndim
    axes = normalize_axes(axis, nd)
    keep = [i for i in range(nd) if i not in axes]
    perm = keep + list(axes)
    xt = np.transpose(x, perm)
    lead = xt.shape[:len(keep)]

    def back(flat):
        return np.transpose(np.reshape(flat, xt.shape), np.argsort(perm))
    return xt.reshape(lead + (-1,)), back


def _exclusive_products_dot(x, v, axis):
    """The tangent along v of the product of the *other* elements of each slice
    (prefix and suffix products of dual numbers: exact with zeros, no division)."""
    x = np.asarray(x, dtype=float)
    v = np.broadcast_to(np.asarray(v, dtype=float), x.shape)
    if x.ndim == 0:
        return np.zeros(())
    xs, back = _slices(x, axis)
    vs, _ = _slices(v, axis)
    n = xs.shape[-1]
    lead = xs.shape[:-1]
    left, left_dot = np.ones(lead + (n,)), np.zeros(lead + (n,))
    p, d = np.ones(lead), np.zeros(lead)
    for k in range(n):
        left[..., k], left_dot[..., k] = p, d
        p, d = p * xs[..., k], d * xs[..., k] + p * vs[..., k]
    right, right_dot = np.ones(lead + (n,)), np.zeros(lead + (n,))
    p, d = np.ones(lead), np.zeros(lead)
    for k in range(n - 1, -1, -1):
        right[..., k], right_dot[..., k] = p, d
        p, d = p * xs[..., k], d * xs[..., k] + p * vs[..., k]
    return back(left_dot * right + left * right_dot)


@_helper
def prod_hvp(g, a, v, initial_dot=None, axis=None, keepdims=False, initial=None, where=None):
    """Hessian part of prod_grad along a's tangent v (and initial's, initial_dot)."""
    a = np.asarray(a)
    x = a if where is None else np.where(where, a, 1)
    ge = expand_reduced(g, a, axis=axis, keepdims=keepdims)
    out = np.zeros(a.shape)
    if v is not None:
        vv = np.broadcast_to(np.asarray(v), a.shape)
        if where is not None:
            vv = np.where(where, vv, 0.0)
        part = _exclusive_products_dot(x, vv, axis)
        out = out + ge * (part if initial is None else part * initial)
    if initial_dot is not None:
        out = out + ge * nh._exclusive_products(x, axis) * initial_dot
    return out if where is None else np.where(where, out, 0.0)


@_helper
def prod_grad_jvp(g, a, axis, keepdims, initial, where, g_dot, a_dot, initial_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.prod_grad(g_dot, a, axis=axis, keepdims=keepdims, initial=initial, where=where)
    if a_dot is not None or initial_dot is not None:
        out = out + prod_hvp(g, a, a_dot, initial_dot, axis=axis, keepdims=keepdims,
                             initial=initial, where=where)
    return out


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


def _project(v, a, axis, where, mean):
    """The centring of var/std (a projection) applied to v: v minus its mean over the
    reduced axes (0 where masked); with a given mean, v itself."""
    v = np.broadcast_to(np.asarray(v), np.shape(a))
    if mean is not None:
        return v if where is None else np.where(np.broadcast_to(where, np.shape(a)), v, 0.0)
    return nh._moments(v, axis, where)[1]


@_helper
def var_hvp(g, a, v, axis=None, ddof=0, keepdims=False, where=None, mean=None,
            correction=None):
    """Hessian part of var_grad along v: 2 g P(v) / (n - ddof) (P the centring)."""
    if correction is not None:
        ddof = correction
    n, _ = nh._moments(a, axis, where, mean)
    ge = expand_reduced(g, a, axis=axis, keepdims=keepdims)
    return ge * _project(v, a, axis, where, mean) * (2.0 / (n - ddof))


@_helper
def var_grad_jvp(g, a, axis, ddof, keepdims, where, mean, correction, g_dot, a_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.var_grad(g_dot, a, axis=axis, ddof=ddof, keepdims=keepdims, where=where,
                          mean=mean, correction=correction)
    if a_dot is not None:
        out = out + var_hvp(g, a, a_dot, axis=axis, ddof=ddof, keepdims=keepdims,
                            where=where, mean=mean, correction=correction)
    return out


@_helper
def std_hvp(g, a, ans, v, axis=None, ddof=0, keepdims=False, where=None, mean=None,
            correction=None):
    """Hessian part of std_grad along v. With s = std, c = n - ddof and P the centring,
    std_grad = g P(a) / (c s) and ds = sum(P(a) v) / (c s); 0 where s == 0."""
    if correction is not None:
        ddof = correction
    a = np.asarray(a)
    n, centred = nh._moments(a, axis, where, mean)
    c = n - ddof
    ge = expand_reduced(g, a, axis=axis, keepdims=keepdims)
    s = expand_reduced(ans, a, axis=axis, keepdims=keepdims)
    pv = _project(v, a, axis, where, mean)
    ds = nh.safe_divide(np.sum(centred * np.broadcast_to(np.asarray(v), a.shape), axis=axis,
                               keepdims=True), c * s)
    return ge * (nh.safe_divide(pv, c * s) - nh.safe_divide(centred * ds, c * s * s))


@_helper
def std_grad_jvp(g, a, ans, axis, ddof, keepdims, where, mean, correction, g_dot, a_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.std_grad(g_dot, a, ans, axis=axis, ddof=ddof, keepdims=keepdims, where=where,
                          mean=mean, correction=correction)
    if a_dot is not None:
        out = out + std_hvp(g, a, ans, a_dot, axis=axis, ddof=ddof, keepdims=keepdims,
                            where=where, mean=mean, correction=correction)
    return out


@_helper
def average_hvp(g, a, axis=None, weights=None, returned=False, keepdims=False, a_dot=None,
                weights_dot=None):
    """Hessian part of average_grads along (a_dot, weights_dot). With S the sum of the
    weights w and m the average: grad_a = g w / S, grad_w = g (a - m) / S."""
    if returned:
        g = g[0]
    a = np.asarray(a)
    if weights is None:
        return np.zeros(a.shape), None
    ge = expand_reduced(g, a, axis=axis, keepdims=keepdims)
    w = np.broadcast_to(nh._weights_like(weights, a, axis), a.shape)
    s = np.sum(w, axis=axis, keepdims=True)
    m = np.sum(a * w, axis=axis, keepdims=True) / s
    da = np.zeros(a.shape) if a_dot is None else np.broadcast_to(np.asarray(a_dot), a.shape)
    if weights_dot is None:
        dw = np.zeros(a.shape)
    else:
        dw = np.broadcast_to(nh._weights_like(np.broadcast_to(weights_dot, np.shape(weights)),
                                              a, axis), a.shape)
    ds = np.sum(dw, axis=axis, keepdims=True)
    dm = (np.sum(da * w + a * dw, axis=axis, keepdims=True) - m * ds) / s
    h_a = ge * (dw / s - w * ds / (s * s))
    h_w = ge * ((da - dm) / s - (a - m) * ds / (s * s))
    wl = nh._weights_like(weights, a, axis)
    return h_a, np.reshape(sum_to_shape(h_w, np.shape(wl)), np.shape(weights))


@_helper
def average_transpose(g, cot, a, axis=None, weights=None, returned=False, keepdims=False):
    """Transpose of average_grads: the tangent of np.average along (g_a, g_weights)."""
    return rt.average_jvp(a, weights, g[0], None if weights is None else g[1], cot, axis=axis,
                          returned=returned, keepdims=keepdims)


@_helper
def average_grads_jvp(g, a, axis, weights, returned, keepdims, g_dot, a_dot, weights_dot):
    g_dot = _fill(g_dot, g)
    out = None
    if g_dot is not None:
        out = list(nh.average_grads(g_dot, a, axis=axis, weights=weights, returned=returned,
                                    keepdims=keepdims))
    if a_dot is not None or weights_dot is not None:
        h = list(average_hvp(g, a, axis, weights, returned, keepdims, a_dot, weights_dot))
        out = h if out is None else [x if y is None else (y if x is None else x + y)
                                     for x, y in zip(out, h)]
    return out


def _cumprod_layout(a, axis):
    a = np.asarray(a)
    if axis is None:
        return a.ravel(), 0
    return a, axis


@_helper
def cumprod_hvp(g, a, v, axis=None):
    """Hessian part of cumprod_grad along v. With L_i the product before i and
    T_i = sum_{k>=i} g_k prod_{i<l<=k} x_l (a suffix recurrence), cumprod_grad is
    L T; its tangent follows the recurrences in dual numbers (exact with zeros)."""
    a = np.asarray(a)
    x, ax = _cumprod_layout(a, axis)
    x = np.moveaxis(x, ax, -1).astype(float)
    vv = np.broadcast_to(np.asarray(v), a.shape)
    vv = np.moveaxis(vv.ravel() if axis is None else vv, ax, -1)
    gg = np.asarray(g)
    gg = np.moveaxis(gg.ravel() if axis is None else np.broadcast_to(gg, a.shape), ax, -1)
    n = x.shape[-1]
    lead = x.shape[:-1]
    left, left_dot = np.ones(lead + (n,)), np.zeros(lead + (n,))
    p, d = np.ones(lead), np.zeros(lead)
    for k in range(n):
        left[..., k], left_dot[..., k] = p, d
        p, d = p * x[..., k], d * x[..., k] + p * vv[..., k]
    tail, tail_dot = np.zeros(lead + (n,)), np.zeros(lead + (n,))
    t, td = np.zeros(lead), np.zeros(lead)
    for k in range(n - 1, -1, -1):
        if k < n - 1:
            t, td = gg[..., k] + x[..., k + 1] * t, vv[..., k + 1] * t + x[..., k + 1] * td
        else:
            t, td = gg[..., k], np.zeros(lead)
        tail[..., k], tail_dot[..., k] = t, td
    out = np.moveaxis(left_dot * tail + left * tail_dot, -1, ax)
    return np.reshape(out, a.shape)


@_helper
def cumprod_grad_jvp(g, a, ans, axis, g_dot, a_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.cumprod_grad(g_dot, a, ans, axis)
    if a_dot is not None:
        out = out + cumprod_hvp(g, a, a_dot, axis)
    return out


def _cumulative_g(g, include_initial, ax):
    g = np.asarray(g)
    if include_initial:
        g = np.take(g, np.arange(1, g.shape[ax]), axis=ax)
    return g


@_helper
def cumulative_hvp(g, x, v, axis=None, include_initial=False, product=False):
    """Hessian part of cumulative_grad (only cumulative_prod has one)."""
    if not product:
        return np.zeros(np.shape(x))
    ax = 0 if axis is None else axis
    return cumprod_hvp(_cumulative_g(g, include_initial, ax), x, v, ax)


@_helper
def cumulative_grad_jvp(g, x, ans, axis, include_initial, product, g_dot, x_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.cumulative_grad(g_dot, x, ans, axis, include_initial, product)
    if x_dot is not None:
        out = out + cumulative_hvp(g, x, x_dot, axis, include_initial, product)
    return out


# -- norms ------------------------------------------------------------------------------------
def _norm_axes(x, ord, axis):
    nd = np.ndim(x)
    if axis is None:
        if ord is None:
            return tuple(range(nd)), False
        return ((0, 1), True) if nd == 2 else ((0,), False)
    if isinstance(axis, numbers.Integral):
        return (int(axis) % nd,), False
    axes = tuple(int(a) % nd for a in axis)
    return axes, len(axes) == 2


def _vector_norm_hvp(ge, x, ae, ord, axes, v):
    if ord in (1, 0, np.inf, -np.inf):
        return np.zeros(x.shape)       # piecewise linear (or constant): no curvature
    v = np.broadcast_to(np.asarray(v), x.shape)
    if ord is None or ord == 2:
        xv = np.sum(x * v, axis=axes, keepdims=True)
        return ge * (nh.safe_divide(v, ae) - nh.safe_divide(x * xv, ae ** 3))
    p = float(ord)
    ax = np.abs(x)
    sign = np.sign(x)
    dn = nh.safe_divide(np.sum(sign * ax ** (p - 1) * v, axis=axes, keepdims=True),
                        ae ** (p - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        first = ax ** (p - 2) * v
    return ge * (p - 1) * (nh.safe_divide(first, ae ** (p - 1))
                           - nh.safe_divide(sign * ax ** (p - 1) * dn, ae ** p))


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


def _matrix_norm_hvp(ge, x, ae, ord, r, c, v):
    if ord in (1, -1, np.inf, -np.inf):
        return np.zeros(x.shape)       # sums of absolute values: piecewise linear
    if ord in (None, "fro"):
        return _vector_norm_hvp(ge, x, ae, 2, (r, c), v)
    if ord not in (2, -2, "nuc"):
        raise ValueError(f"invalid norm order {ord!r} for matrices")
    xm = np.moveaxis(x, (r, c), (-2, -1))
    gm = np.moveaxis(ge, (r, c), (-2, -1))[..., 0, 0]
    vm = np.moveaxis(np.broadcast_to(np.asarray(v), x.shape), (r, c), (-2, -1))
    s = np.linalg.svd(xm, compute_uv=False)
    tol = np.max(s, axis=-1, keepdims=True) * max(xm.shape[-2:]) * np.finfo(s.dtype).eps
    if ord == "nuc":
        weight = (s > tol).astype(s.dtype)
    else:
        target = s[..., :1] if ord == 2 else s[..., -1:]
        hit = np.abs(s - target) <= tol
        weight = hit / np.sum(hit, axis=-1, keepdims=True)
        if ord == 2:
            weight = np.where(s[..., :1] > 0, weight, 0.0)
    out = gm[..., None, None] * _svd_weighted_hvp(xm, weight, vm)
    return np.moveaxis(out, (-2, -1), (r, c))


@_helper
def norm_hvp(g, x, ans, v, ord=None, axis=None, keepdims=False):
    """Hessian part of norm_grad along v."""
    x = np.asarray(x, dtype=float)
    axes, matrix = _norm_axes(x, ord, axis)
    ge = expand_reduced(g, x, axis=axes, keepdims=keepdims)
    ae = expand_reduced(ans, x, axis=axes, keepdims=keepdims)
    if matrix and not (axis is None and ord is None):
        return _matrix_norm_hvp(ge, x, ae, ord, axes[0], axes[1], v)
    return _vector_norm_hvp(ge, x, ae, ord, axes, v)


@_helper
def vector_norm_hvp(g, x, ans, v, axis=None, keepdims=False, ord=2):
    x = np.asarray(x, dtype=float)
    axes = normalize_axes(axis, x.ndim) if x.ndim else ()
    ge = expand_reduced(g, x, axis=axes, keepdims=keepdims)
    ae = expand_reduced(ans, x, axis=axes, keepdims=keepdims)
    return _vector_norm_hvp(ge, x, ae, ord, axes, v)


@_helper
def matrix_norm_hvp(g, x, ans, v, keepdims=False, ord="fro"):
    x = np.asarray(x, dtype=float)
    axes = (x.ndim - 2, x.ndim - 1)
    ge = expand_reduced(g, x, axis=axes, keepdims=keepdims)
    ae = expand_reduced(ans, x, axis=axes, keepdims=keepdims)
    return _matrix_norm_hvp(ge, x, ae, ord, axes[0], axes[1], v)


@_helper
def norm_grad_jvp(g, x, ans, ord, axis, keepdims, g_dot, x_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.norm_grad(g_dot, x, ans, ord, axis, keepdims)
    if x_dot is not None:
        out = out + norm_hvp(g, x, ans, x_dot, ord, axis, keepdims)
    return out


@_helper
def vector_norm_grad_jvp(g, x, ans, axis, keepdims, ord, g_dot, x_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.vector_norm_grad(g_dot, x, ans, axis, keepdims, ord)
    if x_dot is not None:
        out = out + vector_norm_hvp(g, x, ans, x_dot, axis, keepdims, ord)
    return out


@_helper
def matrix_norm_grad_jvp(g, x, ans, keepdims, ord, g_dot, x_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.matrix_norm_grad(g_dot, x, ans, keepdims, ord)
    if x_dot is not None:
        out = out + matrix_norm_hvp(g, x, ans, x_dot, keepdims, ord)
    return out


# -- logsumexp ----------------------------------------------------------------------------------
@_helper
def logsumexp_hvp(g, a, ans, axis=None, b=None, keepdims=False, return_sign=False,
                  a_dot=None, b_dot=None):
    """Hessian part of logsumexp_grads along (a_dot, b_dot). With Z = sum(b e^a) and
    q = e^a / Z (the signed softmax weights): grad_a = g b q, grad_b = g q and
    dq = q (da - dZ / Z), dZ / Z = sum(db q + b q da)."""
    sign = None
    if return_sign:
        g, ans, sign = g[0], ans[0], ans[1]
    a = np.asarray(a)
    bb = 1.0 if b is None else np.asarray(b)
    if b is not None:
        a = np.broadcast_arrays(a, bb)[0]
    ge = expand_reduced(g, a, axis=axis, keepdims=keepdims)
    q = np.exp(a - expand_reduced(ans, a, axis=axis, keepdims=keepdims))
    if sign is not None:
        q = q * expand_reduced(sign, a, axis=axis, keepdims=keepdims)
    da = 0.0 if a_dot is None else np.asarray(a_dot)
    db = 0.0 if b_dot is None else np.asarray(b_dot)
    rel = np.sum(np.broadcast_to(db * q + bb * q * da, a.shape), axis=axis, keepdims=True)
    dq = q * (da - rel)
    h_a = ge * (db * q + bb * dq)
    h_b = None if b is None else ge * dq
    h_a = np.broadcast_to(h_a, a.shape)
    if h_b is not None:
        h_b = np.broadcast_to(h_b, a.shape)
    return h_a, h_b


@_helper
def logsumexp_grads_jvp(g, a, ans, axis, b, keepdims, return_sign, g_dot, a_dot, b_dot):
    g_dot = _fill(g_dot, g)
    out = None
    if g_dot is not None:
        out = list(nh.logsumexp_grads(g_dot, a, ans, axis, b, keepdims, return_sign))
    if a_dot is not None or b_dot is not None:
        h = list(logsumexp_hvp(g, a, ans, axis, b, keepdims, return_sign, a_dot, b_dot))
        out = h if out is None else [x if y is None else (y if x is None else x + y)
                                     for x, y in zip(out, h)]
    return out


# =============================================================================================
# Statistics of several variables
# =============================================================================================
def _data_tangent(m, y, m_dot, y_dot):
    """The tangents of the data of cov/corrcoef (zeros where not differentiated)."""
    tm = _zero(m_dot, m)
    ty = None if y is None else _zero(y_dot, y)
    return tm, ty


@_helper
def cov_hvp(g, m, y, rowvar, bias, ddof, m_dot, y_dot):
    """Hessian part of cov_grads: cov is quadratic in its data, so its gradient is linear
    in it and the Hessian along (m_dot, y_dot) is the gradient at (m_dot, y_dot)."""
    tm, ty = _data_tangent(m, y, m_dot, y_dot)
    return nh.cov_grads(g, tm, ty, rowvar, bias, ddof)


@_helper
def cov_transpose(g, m, y=None, rowvar=True, bias=False, ddof=None, fweights=None,
                  aweights=None):
    """Transpose of cov_grads: the tangent of np.cov along (g_m, g_y)."""
    return rt.cov_jvp(m, y, g[0], None if y is None else g[1], rowvar, bias, ddof, fweights,
                      aweights)


@_helper
def cov_grads_jvp(g, m, y, rowvar, bias, ddof, fweights, aweights, g_dot, m_dot, y_dot):
    out = None
    if g_dot is not None:
        out = list(nh.cov_grads(g_dot, m, y, rowvar, bias, ddof, fweights, aweights))
    if m_dot is not None or y_dot is not None:
        if fweights is not None or aweights is not None:
            nh.unsupported("np.cov with fweights/aweights")
        out = _plus(out, list(cov_hvp(g, m, y, rowvar, bias, ddof, m_dot, y_dot)))
    return out


@_helper
def corrcoef_hvp(g, x, y, rowvar, x_dot, y_dot):
    """Hessian part of corrcoef_grads along (x_dot, y_dot): corrcoef_grads is
    cov_back(g_c, X), linear in both g_c (its cotangent of the covariance c) and the
    data X; g_c = g / S - diag(delta / (2 diag c)) with S = d d^T, d = sqrt(diag c)."""
    X, rows_m, flip_m, flip_y = nh._cov_rows(x, y, rowvar)
    tx, ty = _data_tangent(x, y, x_dot, y_dot)
    dX = nh._cov_rows(tx, ty, rowvar)[0]
    fact = nh._cov_fact(X, False, None)
    xc = X - np.mean(X, axis=1, keepdims=True)
    dxc = dX - np.mean(dX, axis=1, keepdims=True)
    c = xc @ xc.T / fact
    dc = (dxc @ xc.T + xc @ dxc.T) / fact
    cd = np.diag(c)
    d = np.sqrt(cd)
    dd = np.diag(dc) / (2.0 * d)
    s = np.outer(d, d)
    ds = np.outer(dd, d) + np.outer(d, dd)
    r = c / s
    dr = dc / s - r * ds / s
    k = c.shape[0]
    g2 = np.reshape(np.asarray(g, dtype=float), (k, k))
    delta = np.sum(g2 * r, axis=1) + np.sum(g2 * r, axis=0)
    ddelta = np.sum(g2 * dr, axis=1) + np.sum(g2 * dr, axis=0)
    g_c = g2 / s - np.diag(delta / (2.0 * cd))
    dg_c = -g2 * ds / (s * s) - np.diag(ddelta / (2.0 * cd) - delta * np.diag(dc) / (2.0 * cd * cd))
    first = nh._cov_back(dg_c, X, rows_m, flip_m, flip_y, x, y, fact)
    second = nh._cov_back(g_c, dX, rows_m, flip_m, flip_y, x, y, fact)
    return [_plus(first[0], second[0]), _plus(first[1], second[1])]


@_helper
def corrcoef_transpose(g, x, y=None, rowvar=True):
    """Transpose of corrcoef_grads: the tangent of np.corrcoef along (g_x, g_y)."""
    ans = np.corrcoef(x, y, rowvar=rowvar)
    return rt.corrcoef_jvp(x, y, g[0], None if y is None else g[1], ans, rowvar)


@_helper
def corrcoef_grads_jvp(g, x, y, rowvar, g_dot, x_dot, y_dot):
    out = None
    if g_dot is not None:
        out = list(nh.corrcoef_grads(g_dot, x, y, rowvar))
    if x_dot is not None or y_dot is not None:
        out = _plus(out, corrcoef_hvp(g, x, y, rowvar, x_dot, y_dot))
    return out


# =============================================================================================
# Differences, integrals, interpolation
# =============================================================================================
@_helper
def trapezoid_hvp(g, y, x=None, dx=1.0, axis=-1, y_dot=None, x_dot=None, dx_dot=None):
    """Hessian part of trapezoid_grads: the integral is bilinear in y and the interval
    lengths (linear in x, or dx), so the cotangent of y moves with x_dot (dx_dot) and
    those of x and dx with y_dot."""
    out = [np.zeros(np.shape(y)), None if x is None else np.zeros(np.shape(x)),
           None if x is not None else 0.0]
    if x is None and dx_dot is not None:
        out[0] = nh.trapezoid_grads(g, y, None, dx_dot, axis)[0]
    if x is not None and x_dot is not None:
        out[0] = nh.trapezoid_grads(g, y, np.asarray(x_dot), dx, axis)[0]
    if y_dot is not None:
        moved = nh.trapezoid_grads(g, np.broadcast_to(y_dot, np.shape(y)), x, dx, axis)
        if x is None:
            out[2] = moved[2]
        else:
            out[1] = moved[1]
    return out


@_helper
def trapezoid_grads_jvp(g, y, x, dx, axis, g_dot, y_dot, x_dot, dx_dot):
    out = None
    if g_dot is not None:
        out = list(nh.trapezoid_grads(g_dot, y, x, dx, axis))
    if y_dot is not None or x_dot is not None or dx_dot is not None:
        out = _plus(out, trapezoid_hvp(g, y, x, dx, axis, y_dot, x_dot, dx_dot))
    return out


@_helper
def interp_hvp(g, x, xp, fp, left=None, right=None, x_dot=None, xp_dot=None, fp_dot=None):
    """Hessian part of interp_grads. Inside segment i, with s its length,
    t = (x - xp_i) / s and slope = (fp_(i+1) - fp_i) / s, the value is
    fp_i (1 - t) + fp_(i+1) t; outside it is a constant."""
    xp, fp = np.asarray(xp), np.asarray(fp)
    n = len(xp)
    xa = np.asarray(x)
    g = np.broadcast_to(np.asarray(g), xa.shape)
    idx = np.clip(np.searchsorted(xp, xa, side="right") - 1, 0, n - 2)
    span = xp[idx + 1] - xp[idx]
    t = (xa - xp[idx]) / span
    slope = (fp[idx + 1] - fp[idx]) / span
    inside = ~(xa < xp[0]) & ~(xa > xp[-1])
    gin = np.where(inside, g, 0.0)
    dxa = np.zeros(xa.shape) if x_dot is None else np.broadcast_to(x_dot, xa.shape)
    dxp = np.zeros(n) if xp_dot is None else np.asarray(xp_dot)
    dfp = np.zeros(n) if fp_dot is None else np.asarray(fp_dot)
    dspan = dxp[idx + 1] - dxp[idx]
    dt = (dxa - dxp[idx] - t * dspan) / span
    dslope = (dfp[idx + 1] - dfp[idx] - slope * dspan) / span
    h_x = gin * dslope
    h_fp = np.zeros(n)
    np.add.at(h_fp, idx, -gin * dt)
    np.add.at(h_fp, idx + 1, gin * dt)
    h_xp = np.zeros(n)
    np.add.at(h_xp, idx, -gin * (dslope * (1 - t) - slope * dt))
    np.add.at(h_xp, idx + 1, -gin * (dslope * t + slope * dt))
    return [h_x, h_xp, h_fp, None if left is None else 0.0, None if right is None else 0.0]


@_helper
def interp_grads_jvp(g, x, xp, fp, left, right, period, g_dot, x_dot, xp_dot, fp_dot):
    out = None
    if g_dot is not None:
        out = list(nh.interp_grads(g_dot, x, xp, fp, left, right, period))
    if x_dot is not None or xp_dot is not None or fp_dot is not None:
        out = _plus(out, interp_hvp(g, x, xp, fp, left, right, x_dot, xp_dot, fp_dot))
    return out


# =============================================================================================
# Constructors
# =============================================================================================
def _steps(num, endpoint, ndim):
    return nh._linspace_steps(num, endpoint).reshape((-1,) + (1,) * (ndim - 1))


@_helper
def geomspace_hvp(g, start, stop, num=50, endpoint=True, axis=0, ans=None, start_dot=None,
                  stop_dot=None):
    """Hessian part of geomspace_grads: y = start^(1 - t) stop^t."""
    if not _is_float(ans):
        return np.zeros(np.shape(start)), np.zeros(np.shape(stop))
    y = np.moveaxis(np.asarray(ans), axis, 0)
    gy = np.moveaxis(np.asarray(g), axis, 0)
    t = _steps(num, endpoint, gy.ndim)
    st, sp = np.asarray(start), np.asarray(stop)
    ds = 0.0 if start_dot is None else np.asarray(start_dot)
    de = 0.0 if stop_dot is None else np.asarray(stop_dot)
    dy = y * ((1 - t) * ds / st + t * de / sp)
    h_start = np.sum(gy * (1 - t) * (dy / st - y * ds / (st * st)), axis=0)
    h_stop = np.sum(gy * t * (dy / sp - y * de / (sp * sp)), axis=0)
    return unbroadcast(h_start, start), unbroadcast(h_stop, stop)


@_helper
def geomspace_grads_jvp(g, start, stop, num, endpoint, axis, ans, g_dot, start_dot, stop_dot):
    out = None
    if g_dot is not None:
        out = list(nh.geomspace_grads(g_dot, start, stop, num, endpoint, axis, ans))
    if start_dot is not None or stop_dot is not None:
        out = _plus(out, list(geomspace_hvp(g, start, stop, num, endpoint, axis, ans,
                                            start_dot, stop_dot)))
    return out


@_helper
def logspace_hvp(g, start, stop, num=50, endpoint=True, base=10.0, axis=0, ans=None,
                 start_dot=None, stop_dot=None, base_dot=None):
    """Hessian part of logspace_grads: y = base ** lin, lin = start + t (stop - start)."""
    if not _is_float(ans):
        return np.zeros(np.shape(start)), np.zeros(np.shape(stop)), np.zeros(np.shape(base))
    y = np.moveaxis(np.asarray(ans), axis, 0)
    gy = np.moveaxis(np.asarray(g), axis, 0)
    t = _steps(num, endpoint, gy.ndim)
    b = np.asarray(base, dtype=float)
    lb = np.log(b)
    lin = np.moveaxis(np.log(np.asarray(ans)), axis, 0) / lb
    ds = 0.0 if start_dot is None else np.asarray(start_dot)
    de = 0.0 if stop_dot is None else np.asarray(stop_dot)
    db = 0.0 if base_dot is None else np.asarray(base_dot)
    dlin = (1 - t) * ds + t * de
    dy = y * (lb * dlin + lin * db / b)
    common = dy * lb + y * db / b
    h_start = np.sum(gy * (1 - t) * common, axis=0)
    h_stop = np.sum(gy * t * common, axis=0)
    h_base = np.sum(gy * (dy * lin / b + y * dlin / b - y * lin * db / (b * b)), axis=0)
    return unbroadcast(h_start, start), unbroadcast(h_stop, stop), unbroadcast(h_base, base)


@_helper
def logspace_grads_jvp(g, start, stop, num, endpoint, base, axis, ans, g_dot, start_dot,
                       stop_dot, base_dot):
    out = None
    if g_dot is not None:
        out = list(nh.logspace_grads(g_dot, start, stop, num, endpoint, base, axis, ans))
    if start_dot is not None or stop_dot is not None or base_dot is not None:
        out = _plus(out, list(logspace_hvp(g, start, stop, num, endpoint, base, axis, ans,
                                           start_dot, stop_dot, base_dot)))
    return out


# =============================================================================================
# Linear algebra
# =============================================================================================
@_helper
def solve_hvp(g, a, b, ans, a_dot=None, b_dot=None):
    """Hessian part of solve_grads along (a_dot, b_dot). With x = a^-1 b,
    g_b = a^-T g and g_a = -g_b x^T: x' = a^-1 (b' - a' x), g_b' = -a^-T a'^T g_b,
    g_a' = -g_b' x^T - g_b x'^T."""
    a, g, x = np.asarray(a), np.asarray(g), np.asarray(ans)
    vector = np.ndim(b) == 1 if nh._NUMPY2 else np.ndim(b) == a.ndim - 1
    da = np.zeros(a.shape) if a_dot is None else np.broadcast_to(np.asarray(a_dot), a.shape)
    if vector:
        gb = np.linalg.solve(_T(a), g[..., None])
        xc = x[..., None]
    else:
        gb = np.linalg.solve(_T(a), g)
        xc = x
    dx = rt.solve_jvp(a, b, None if a_dot is None else da, b_dot, ans)
    dxc = dx[..., None] if vector else dx
    dgb = -np.linalg.solve(_T(a), _T(da) @ gb)
    dga = -dgb @ _T(xc) - gb @ _T(dxc)
    dgb = dgb[..., 0] if vector else dgb
    return unbroadcast(dga, a), unbroadcast(dgb, b)


@_helper
def solve_grads_jvp(g, a, b, ans, g_dot, a_dot, b_dot):
    out = None
    if g_dot is not None:
        out = list(nh.solve_grads(g_dot, a, b, ans))
    if a_dot is not None or b_dot is not None:
        out = _plus(out, list(solve_hvp(g, a, b, ans, a_dot, b_dot)))
    return out


def _cofactor_dot(a, e):
    """The tangent along e of the cofactor matrix det(a) a^-T of each matrix in a."""
    a = np.asarray(a, dtype=float)
    e = np.broadcast_to(np.asarray(e, dtype=float), a.shape)
    n = a.shape[-1]
    out = np.zeros(a.shape)
    if n == 1:
        return out
    if n == 2:  # the cofactors are linear in the entries
        out[..., 0, 0] = e[..., 1, 1]
        out[..., 1, 1] = e[..., 0, 0]
        out[..., 0, 1] = -e[..., 1, 0]
        out[..., 1, 0] = -e[..., 0, 1]
        return out
    for idx in np.ndindex(*a.shape[:-2]):
        ai, ei = a[idx], e[idx]
        s = np.linalg.svd(ai, compute_uv=False)
        if s[-1] > s[0] * n * 1e-10:
            inv = np.linalg.inv(ai)
            det = np.linalg.det(ai)
            out[idx] = det * (np.trace(inv @ ei) * inv.T - inv.T @ ei.T @ inv.T)
            continue
        # (nearly) singular: each cofactor is a determinant of a minor, whose tangent is
        # the sum of the minor's own cofactors times e's minor (exact without inverses)
        for i in range(n):
            for j in range(n):
                rows = [r for r in range(n) if r != i]
                cols = [c for c in range(n) if c != j]
                minor = ai[np.ix_(rows, cols)]
                em = ei[np.ix_(rows, cols)]
                cof = nh.det_grad(1.0, minor)
                out[idx][i, j] = (-1) ** (i + j) * np.sum(cof * em)
    return out


@_helper
def det_hvp(g, a, v):
    """Hessian part of det_grad along v: g times the tangent of the cofactor matrix."""
    return np.asarray(g)[..., None, None] * _cofactor_dot(a, v)


@_helper
def det_grad_jvp(g, a, g_dot, a_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.det_grad(g_dot, a)
    if a_dot is not None:
        out = out + det_hvp(g, a, a_dot)
    return out


@_helper
def slogdet_hvp(g, a, v):
    """Hessian part of slogdet_grad along v: -g_logdet a^-T v^T a^-T."""
    inv_t = _T(np.linalg.inv(a))
    return -np.asarray(g[1])[..., None, None] * (inv_t @ _T(np.asarray(v)) @ inv_t)


@_helper
def slogdet_grad_jvp(g, a, g_dot, a_dot):
    g_dot = _fill(g_dot, g)
    out = 0.0
    if g_dot is not None:
        out = nh.slogdet_grad(g_dot, a)
    if a_dot is not None:
        out = out + slogdet_hvp(g, a, a_dot)
    return out


@_helper
def matrix_power_hvp(g, a, n, v):
    """Hessian part of matrix_power_grad along v: the product rule over the powers of
    the base (a, or inv(a) for n < 0) in sum_i (B^i)^T g (B^(k-1-i))^T."""
    a, g = np.asarray(a, dtype=float), np.asarray(g)
    v = np.broadcast_to(np.asarray(v), a.shape)
    if n == 0:
        return np.zeros(a.shape)
    if n > 0:
        base, dbase = a, v
    else:
        base = np.linalg.inv(a)
        dbase = -base @ v @ base
    k = abs(n)
    eye = np.broadcast_to(np.eye(a.shape[-1]), a.shape)
    powers, dpowers = [eye], [np.zeros(a.shape)]
    for _ in range(k - 1):
        powers.append(powers[-1] @ base)
        dpowers.append(dpowers[-1] @ base + powers[-2] @ dbase)
    grad = sum(_T(powers[i]) @ g @ _T(powers[k - 1 - i]) for i in range(k))
    dgrad = sum(_T(dpowers[i]) @ g @ _T(powers[k - 1 - i])
                + _T(powers[i]) @ g @ _T(dpowers[k - 1 - i]) for i in range(k))
    if n > 0:
        return dgrad
    # grad_a = -B^T grad B^T with B = inv(a)
    return -(_T(dbase) @ grad @ _T(base) + _T(base) @ dgrad @ _T(base)
             + _T(base) @ grad @ _T(dbase))


@_helper
def matrix_power_grad_jvp(g, a, n, g_dot, a_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.matrix_power_grad(g_dot, a, n)
    if a_dot is not None:
        out = out + matrix_power_hvp(g, a, n, a_dot)
    return out


@_helper
def pinv_hvp(g, a, ans, v, hermitian=False):
    """Hessian part of pinv_grad along v (where the rank does not change): the product
    rule on -P^T g P^T + (I - A P) g^T P P^T + P^T P g^T (I - P A)."""
    if hermitian:
        nh.unsupported("np.linalg.pinv(..., hermitian=True)")
    a, p, g = np.asarray(a), np.asarray(ans), np.asarray(g)
    e = np.broadcast_to(np.asarray(v), a.shape)
    dp = rt.pinv_jvp(e, a, p)
    m, n = a.shape[-2:]
    left = np.eye(m) - a @ p
    right = np.eye(n) - p @ a
    dleft = -(e @ p + a @ dp)
    dright = -(dp @ a + p @ e)
    pt, dpt, gt = _T(p), _T(dp), _T(g)
    return (-(dpt @ g @ pt + pt @ g @ dpt)
            + dleft @ gt @ p @ pt + left @ gt @ dp @ pt + left @ gt @ p @ dpt
            + dpt @ p @ gt @ right + pt @ dp @ gt @ right + pt @ p @ gt @ dright)


@_helper
def pinv_grad_jvp(g, a, ans, hermitian, g_dot, a_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.pinv_grad(g_dot, a, ans, hermitian)
    if a_dot is not None:
        out = out + pinv_hvp(g, a, ans, a_dot, hermitian)
    return out


# -- cholesky: its helper reads L (the result), not a, so these are partials in L --------------
def _lower_mask_grad(sym, lower):
    eye = np.eye(sym.shape[-1], dtype=bool)
    tri = np.tril(2 * sym) if lower else np.triu(2 * sym)
    return np.where(eye, sym, tri)


def _cholesky_parts(g, L, upper):
    g = np.asarray(g)
    L = np.asarray(L)
    if upper:
        L, g = _T(L), _T(g)
    g = np.tril(g)
    n = L.shape[-1]
    phi = np.tril(_T(L) @ g)
    phi = phi - 0.5 * phi * np.eye(n)
    inv = np.linalg.inv(L)
    return g, L, phi, inv, n


@_helper
def cholesky_L_jvp(g, L, L_dot, upper=False):
    """The tangent of cholesky_grad(g, L) along L_dot (g fixed)."""
    g, L, phi, inv, n = _cholesky_parts(g, L, upper)
    d = np.asarray(L_dot)
    if upper:
        d = _T(d)
    dphi = np.tril(_T(d) @ g)
    dphi = dphi - 0.5 * dphi * np.eye(n)
    dinv = -inv @ d @ inv
    ds = _T(dinv) @ phi @ inv + _T(inv) @ dphi @ inv + _T(inv) @ phi @ dinv
    return _lower_mask_grad(0.5 * (ds + _T(ds)), lower=not upper)


@_helper
def cholesky_L_vjp(u, g, L, upper=False):
    """L's cotangent through cholesky_grad(g, L) for the cotangent u of its result."""
    g, L, phi, inv, n = _cholesky_parts(g, L, upper)
    u = np.asarray(u)
    sym_bar = _lower_mask_grad(u, lower=not upper)
    s_bar = 0.5 * (sym_bar + _T(sym_bar))
    inv_bar = phi @ inv @ _T(s_bar) + _T(phi) @ inv @ s_bar
    phi_bar = inv @ s_bar @ _T(inv)
    phi_bar = np.tril(phi_bar - 0.5 * phi_bar * np.eye(n))
    L_bar = -_T(inv) @ inv_bar @ _T(inv) + g @ _T(phi_bar)
    return _T(L_bar) if upper else L_bar


@_helper
def cholesky_grad_jvp(g, L, upper, g_dot, L_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.cholesky_grad(g_dot, L, upper)
    if L_dot is not None:
        out = out + cholesky_L_jvp(g, L, L_dot, upper)
    return out


# -- symmetric eigendecompositions -------------------------------------------------------------
def _eigen_frame(w_i, n):
    tol = np.max(np.abs(w_i), initial=0.0) * n * np.finfo(w_i.dtype).eps * 10
    labels = nh._clusters(w_i, tol)
    degenerate = nh._degenerate_pairs(labels)
    off = ~np.eye(n, dtype=bool) & ~degenerate
    gap = w_i[None, :] - w_i[:, None]
    f = np.where(off, 1.0 / np.where(off, gap, 1.0), 0.0)
    return labels, degenerate, f


@_helper
def eigh_hvp(g, a, ans, v, UPLO="L", values_only=False):
    """Hessian part of eigh_grad (and eigvalsh_grad) along v. With P = V^T v V,
    Omega = F o P (V' = V Omega), w' = diag(P) and M = diag(g_w) + F o (V^T g_V),
    the tangent of V M V^T is V (Omega M + M' + M Omega^T) V^T, where
    M' = F' o (V^T g_V) + F o (Omega^T V^T g_V) and F'_ij = -F_ij^2 (w'_j - w'_i)."""
    lower = UPLO.upper() == "L"
    if values_only:
        w, vecs = np.linalg.eigh(a, UPLO=UPLO)
        gw = np.broadcast_to(np.asarray(g), w.shape)
        gv = None
    else:
        w, vecs = np.asarray(ans[0]), np.asarray(ans[1])
        gw, gv = np.asarray(g[0]), np.asarray(g[1])
    n = w.shape[-1]
    d = np.broadcast_to(rt._from_triangle(v, lower), w.shape[:-1] + (n, n))
    out = np.zeros(w.shape[:-1] + (n, n))
    for idx in np.ndindex(*w.shape[:-1]):
        wi, vi = w[idx], vecs[idx]
        labels, degenerate, f = _eigen_frame(wi, n)
        p = _T(vi) @ d[idx] @ vi
        omega = f * p
        middle = np.diag(nh._cluster_mean(gw[idx], labels))
        dmiddle = np.zeros((n, n))
        if gv is not None and np.any(gv[idx]):
            inner = _T(vi) @ gv[idx]
            nh._gauge_check(inner, degenerate, "np.linalg.eigh")
            if np.any(degenerate):
                raise np.linalg.LinAlgError(
                    "the second derivative of np.linalg.eigh through its eigenvectors is "
                    "undefined at a repeated eigenvalue")
            dw = np.diagonal(p)
            df = -f * f * (dw[None, :] - dw[:, None])
            middle = middle + f * inner
            dmiddle = df * inner + f * (_T(omega) @ inner)
        x = omega @ middle + dmiddle + middle @ _T(omega)
        full = vi @ x @ _T(vi)
        out[idx] = 0.5 * (full + _T(full))
    return nh._lower_triangle_grad(out, lower=lower)


@_helper
def eigh_grad_jvp(g, a, ans, UPLO, g_dot, a_dot):
    g_dot = _fill(g_dot, g)
    out = 0.0
    if g_dot is not None:
        out = nh.eigh_grad(g_dot, a, ans, UPLO)
    if a_dot is not None:
        out = out + eigh_hvp(g, a, ans, a_dot, UPLO)
    return out


@_helper
def eigvalsh_grad_jvp(g, a, UPLO, g_dot, a_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.eigvalsh_grad(g_dot, a, UPLO)
    if a_dot is not None:
        out = out + eigh_hvp(g, a, None, a_dot, UPLO, values_only=True)
    return out


# -- singular values -------------------------------------------------------------------------
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
def svdvals_grad_jvp(g, x, g_dot, x_dot):
    out = 0.0
    if g_dot is not None:
        out = nh.svdvals_grad(g_dot, x)
    if x_dot is not None:
        out = out + svdvals_hvp(g, x, x_dot)
    return out


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
def _qr_square_back_dot(q, r, gq, gr, dq, dr, dgq):
    """The tangent of _qr_square_back(q, r, gq, gr) along (dq, dr, dgq)."""
    m = r @ _T(gr) - _T(gq) @ q
    dm = dr @ _T(gr) - _T(dgq) @ q - _T(gq) @ dq
    b = gq + q @ nh._copyltu(m)
    db = dgq + dq @ nh._copyltu(m) + q @ nh._copyltu(dm)
    out = _T(np.linalg.solve(r, _T(b)))
    return _T(np.linalg.solve(r, _T(db - out @ _T(dr))))


@_helper
def qr_hvp(g, a, ans, v, mode="reduced"):
    """Hessian part of qr_grad along v: the tangent of its formula, with the tangents of
    q and r from the forward-mode rule."""
    a = np.asarray(a, dtype=float)
    m, n = a.shape[-2:]
    k = min(m, n)
    e = np.broadcast_to(np.asarray(v), a.shape)
    if mode == "r":
        q, r = np.linalg.qr(a)
        gq, gr = np.zeros(q.shape), np.asarray(g)[..., :k, :]
    elif mode in ("reduced", "complete"):
        q, r = np.asarray(ans[0]), np.asarray(ans[1])
        gq, gr = np.asarray(g[0]), np.asarray(g[1])
        q, gq, r, gr = q[..., :, :k], gq[..., :, :k], r[..., :k, :], gr[..., :k, :]
    else:
        nh.unsupported(f"np.linalg.qr(mode={mode!r})")
    if m >= n:
        dq, dr = rt._qr_tall_jvp(q, r, e)
        return _qr_square_back_dot(q, r, gq, gr, dq, dr, np.zeros(gq.shape))
    dq, dx = rt._qr_tall_jvp(q, r[..., :, :m], e[..., :, :m])
    y = a[..., :, m:]
    dy_r = _T(q) @ (e[..., :, m:] - dq @ r[..., :, m:])
    dr = np.concatenate([dx, dy_r], axis=-1)
    gx_r, gy_r = gr[..., :, :m], gr[..., :, m:]
    dgy = dq @ gy_r
    gq_x = gq + y @ _T(gy_r)
    dgq_x = e[..., :, m:] @ _T(gy_r)
    dgx = _qr_square_back_dot(q, r[..., :, :m], gq_x, gx_r, dq, dr[..., :, :m], dgq_x)
    return np.concatenate([dgx, dgy], axis=-1)


@_helper
def qr_grad_jvp(g, a, ans, mode, g_dot, a_dot):
    g_dot = _fill(g_dot, g)
    out = 0.0
    if g_dot is not None:
        out = nh.qr_grad(g_dot, a, ans, mode)
    if a_dot is not None:
        out = out + qr_hvp(g, a, ans, a_dot, mode)
    return out
