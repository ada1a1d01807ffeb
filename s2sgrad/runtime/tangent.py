"""Helpers that generated forward-mode (tangent) code calls, under the `_s2s_` prefix.

Forward mode carries a tangent next to each value. Most tangent rules are one
line of NumPy in `s2sgrad/rules/jvp_rules.py`; what does not read well as one
line lives here: zero tangents of any value, undoing dtype casts, and the
tangents of the matrix decompositions. Every helper is plain NumPy.

Conventions match the reverse-mode table (README, "NumPy coverage"): ties and
repeated eigen/singular values share equally, the zero subgradient at kinks.
Where a derivative does not exist at all (eigenvectors of a repeated
eigenvalue when the direction splits it, the arbitrary extra columns of
`svd(full_matrices=True)` or `qr(mode='complete')`), the tangent is NaN there:
reverse mode raises in that case, forward mode cannot see how the value is
used later, so it marks the entries instead of choosing a basis silently.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from . import numpy_grads as _nh
from .registry import new_helper as _helper
from .reverse import one_per
from .shapes import ArrayMeta, normalize_axes
from .shapes import swap_last_axes as _T


# -- zeros, shapes and dtypes ---------------------------------------------------------
def _tangent_like(x: Any, leaf) -> Any:
    """x's structure with a float leaf where x holds a float value (`leaf(shape,
    dtype)`, shape None for a Python float), 0.0 or float zeros for integers, itemwise
    for lists, tuples and dicts, None for what has no tangent (strings, None, shapes)."""
    kind = type(x)
    if kind is float:
        return leaf(None, None)
    if kind is int:
        return 0.0
    if kind is np.ndarray:
        return leaf(x.shape, x.dtype) if x.dtype.kind in "fc" else np.zeros(x.shape)
    if isinstance(x, list):
        return [_tangent_like(item, leaf) for item in x]
    if isinstance(x, tuple):
        return tuple(_tangent_like(item, leaf) for item in x)
    if isinstance(x, dict):
        return {k: _tangent_like(v, leaf) for k, v in x.items()}
    if x is None or isinstance(x, (str, bytes, bool, np.bool_, ArrayMeta, slice, range, type)):
        return None
    if isinstance(x, (numbers.Number, np.generic)):
        dtype = np.asarray(x).dtype
        return leaf((), dtype)[()] if dtype.kind in "fc" else 0.0
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return _tangent_like(np.asarray(x), leaf)
    return None


def _zeros(shape, dtype):
    return 0.0 if shape is None else np.zeros(shape, dtype)


@_helper
def zero_tangent(x: Any) -> Any:
    """The zero tangent of a value: 0.0 for numbers, float zeros for arrays, itemwise
    for lists and tuples, None for what has no tangent (strings, None, shapes only)."""
    kind = type(x)
    if kind is float or kind is int:   # (the usual case, first)
        return 0.0
    return _tangent_like(x, _zeros)


# A fixed pseudo-random draw, none of its entries 0 or equal to another: values at
# which no test a VJP makes of its cotangent (`if np.any(g)`, `g == 0`) takes the
# special case. (4093 entries, a prime, so no array's strides align with repeats.)
_GENERIC = np.random.default_rng(4093).uniform(0.5, 1.5, 4093) * \
    np.random.default_rng(4094).choice([-1.0, 1.0], 4093)


def _generic(shape, dtype):
    if shape is None:
        return float(_GENERIC[0])
    values = np.resize(_GENERIC, shape)
    if dtype.kind == "c":
        values = values + 1j * np.resize(_GENERIC[::-1], shape)
    return values.astype(dtype)


@_helper
def generic_cotangent(x: Any) -> Any:
    """A cotangent of x's structure with generic float entries (zero_tangent's zeros
    where x has no gradient: integers, strings, None).

    Where forward mode takes a VJP's transpose (reverse mode of the VJP in g), the
    VJP runs once at this cotangent and its branches are the ones the adjoint
    follows. A VJP is linear in g, so any point will do except one where a branch
    takes a special case: at g = 0, `if not np.any(g): return zeros` (a shortcut
    users write) would make every tangent zero. This point is generic."""
    return _tangent_like(x, _generic)


@_helper
def none_to_zero_tangent(t, like):
    """A user's jvp may return None for "zero": make it the zero tangent of `like`."""
    return zero_tangent(like) if t is None else t


@_helper
def check_tangents(tangents, expected: int, method: str):
    """A Function's jvp returns one tangent per output of forward."""
    return one_per(tangents, expected, method, "tangent", "output")


@_helper
def call_jvp(cls, ctx, *tangents):
    """cls.jvp(ctx, *tangents) for a Function whose bodies are called, not inlined; in
    jvp, ctx.saved_tensors are the values forward gave to save_for_forward, if any."""
    saved = getattr(ctx, "saved_for_forward", None)
    if saved is None:
        return cls.jvp(ctx, *tangents)
    before = ctx.saved_tensors
    ctx.saved_tensors = saved
    try:
        return cls.jvp(ctx, *tangents)
    finally:
        ctx.saved_tensors = before


@_helper
def broadcast_tangent(t, like):
    """A tangent with the shape of the value it belongs to (an operand that was
    broadcast in the primal contributes its tangent broadcast the same way)."""
    shape = () if type(like) is float else np.shape(like)
    if np.shape(t) == shape:
        return t
    return np.broadcast_to(t, shape)


@_helper
def cast_tangent(t, ans):
    """The tangent of a value computed with an explicit dtype: zero when the result is
    an integer (piecewise constant), else cast to the result's float dtype."""
    if isinstance(ans, (tuple, list)):
        return type(ans)(cast_tangent(ti, ai) for ti, ai in zip(t, ans)) \
            if type(ans) in (tuple, list) else tuple(cast_tangent(ti, ai)
                                                     for ti, ai in zip(t, ans))
    dtype = getattr(ans, "dtype", None)
    if dtype is None:
        if isinstance(ans, (bool, numbers.Integral)):
            return 0.0
        return t
    if not np.issubdtype(dtype, np.inexact):
        return np.zeros(np.shape(ans))
    if getattr(t, "dtype", dtype) != dtype:
        t = np.asarray(t)
        if np.iscomplexobj(t) and not np.issubdtype(dtype, np.complexfloating):
            t = np.real(t)   # (a complex value cast to a real dtype keeps its real part)
        return t.astype(dtype)
    return t


@_helper
def reduce_tangent(weights, t, axis=None, keepdims=False):
    """sum(weights * t) over the reduced axes: the tangent of a reduction whose
    cotangent rule, applied to ones, gives `weights` (each output reads its own
    slice of the input, so the Jacobian is that slice's row of weights)."""
    prod = np.asarray(weights) * t
    if np.ndim(prod) == 0:
        return prod
    return np.sum(prod, axis=axis, keepdims=keepdims)


# -- elementwise with several outputs --------------------------------------------------------
@_helper
def divmod_jvp(x1, x2, x1_dot, x2_dot, ans):
    """(quotient, remainder) of divmod: the quotient is piecewise constant."""
    q, r = ans
    t = 0.0
    if x1_dot is not None:
        t = t + x1_dot
    if x2_dot is not None:
        t = t - x2_dot * q
    return zero_tangent(np.asarray(q, dtype=float)), broadcast_tangent(t, r)


@_helper
def frexp_jvp(x_dot, ans):
    """np.frexp: mantissa m = x / 2**e with e piecewise constant."""
    m, e = ans
    return np.asarray(x_dot) * np.ldexp(1.0, -e), zero_tangent(np.asarray(e, dtype=float))


# -- reductions -----------------------------------------------------------------------------
@_helper
def extremum_initial_jvp(initial_dot, a, ans, initial, axis=None, keepdims=False, where=None):
    """Tangent contributed by `initial=` of max/min: its share where it ties the result."""
    a = np.asarray(a)
    ae = _nh.expand_reduced(ans, a, axis=axis, keepdims=keepdims)
    hit = a == ae
    if where is not None:
        hit = hit & np.broadcast_to(where, a.shape)
    count = np.sum(hit, axis=axis, keepdims=keepdims) if a.ndim else hit.astype(int)
    wins = np.asarray(initial) == ans
    return np.where(wins, np.asarray(initial_dot) / (count + 1), 0.0)


@_helper
def quantile_jvp(a_dot, a, q, ans, axis=None, method="linear", keepdims=False,
                 ignore_nan=False, overwrite_input=False, weights=None, interpolation=None):
    """Tangent of np.quantile/percentile/median: the interpolation weights of the two
    order statistics (the same ones the cotangent rule uses), one quantile at a time."""
    a = np.asarray(a)
    qs = np.atleast_1d(np.asarray(q, dtype=float)).ravel()
    shape = np.shape(ans)
    lead = shape[np.ndim(q):] if np.ndim(q) else shape
    axes = normalize_axes(axis, a.ndim) if a.ndim else ()
    out = []
    for i in range(len(qs)):
        g = np.zeros((len(qs),) + lead)
        g[i] = 1.0
        w = _nh.quantile_grad(g if np.ndim(q) else g[0], a, q, axis=axis, method=method,
                              keepdims=keepdims, ignore_nan=ignore_nan,
                              overwrite_input=overwrite_input, weights=weights,
                              interpolation=interpolation)
        prod = w * a_dot
        out.append(np.sum(prod, axis=axes, keepdims=keepdims) if axes else prod)
    if np.ndim(q):
        return np.reshape(np.stack(out), shape)
    return np.reshape(out[0], shape)


@_helper
def average_jvp(a, weights, a_dot, weights_dot, ans, axis=None, returned=False,
                keepdims=False):
    """np.average: linear in `a`; in the weights, sum(w_dot (a - avg)) / sum(w)."""
    avg = ans[0] if returned else ans
    t = 0.0
    total_dot = 0.0
    if a_dot is not None:
        t = t + np.average(a_dot, axis=axis, weights=weights, keepdims=keepdims)
    if weights_dot is not None:
        a_arr = np.asarray(a)
        w = _nh.weights_like(weights, a_arr, axis)
        wd = _nh.weights_like(np.broadcast_to(weights_dot, np.shape(weights)), a_arr, axis)
        wsum = np.sum(np.broadcast_to(w, a_arr.shape), axis=axis, keepdims=True)
        mean = np.sum(a_arr * w, axis=axis, keepdims=True) / wsum
        full = np.broadcast_to(wd, a_arr.shape)
        t = t + np.sum(full * (a_arr - mean) / wsum, axis=axis, keepdims=keepdims)
        total_dot = np.sum(full, axis=axis, keepdims=keepdims)
    t = broadcast_tangent(t, avg)
    if returned:
        return t, broadcast_tangent(total_dot, ans[1])
    return t


@_helper
def cumprod_jvp(a_dot, a, axis=None):
    """np.cumprod along an axis: d_k = d_(k-1) a_k + ans_(k-1) a_dot_k (exact with zeros)."""
    a = np.asarray(a)
    t = np.broadcast_to(np.asarray(a_dot), a.shape)
    if axis is None:
        a, t, ax = a.ravel(), t.ravel(), 0
    else:
        ax = axis
    x = np.moveaxis(a, ax, 0)
    tx = np.moveaxis(t, ax, 0)
    out = np.empty(x.shape, dtype=np.result_type(x, tx, np.float64))
    prev = np.ones(x.shape[1:])
    d = np.zeros(x.shape[1:])
    for k in range(x.shape[0]):
        d = d * x[k] + prev * tx[k]
        prev = prev * x[k]
        out[k] = d
    return np.moveaxis(out, 0, ax)


@_helper
def cumulative_prod_jvp(x_dot, x, axis=None, include_initial=False):
    """np.cumulative_prod (NumPy >= 2.1); with include_initial a leading zero tangent."""
    ax = 0 if axis is None else axis
    out = cumprod_jvp(x_dot, x, ax)
    if include_initial:
        zero = np.zeros_like(np.take(out, [0], axis=ax))
        out = np.concatenate([zero, out], axis=ax)
    return out


@_helper
def sort_jvp(a_dot, a, axis=-1):
    """np.sort: the tangent follows its element (the stable order decides ties)."""
    a = np.asarray(a)
    t = np.broadcast_to(np.asarray(a_dot), a.shape)
    if axis is None:
        a, t, axis = a.ravel(), t.ravel(), -1
    order = np.argsort(a, axis=axis, kind="stable")
    return np.take_along_axis(t, order, axis=axis)


@_helper
def logsumexp_jvp(a, b, a_dot, b_dot, ans, axis=None, keepdims=False, return_sign=False):
    """scipy.special.logsumexp: softmax-weighted tangents (times b, and b's own share)."""
    sign = None
    value = ans
    if return_sign:
        value, sign = ans
    a_arr = np.asarray(a)
    if b is not None:
        a_arr = np.broadcast_arrays(a_arr, np.asarray(b))[0]
    weight = np.exp(a_arr - _nh.expand_reduced(value, a_arr, axis=axis, keepdims=keepdims))
    if sign is not None:
        weight = weight * _nh.expand_reduced(sign, a_arr, axis=axis, keepdims=keepdims)
    t = 0.0
    if a_dot is not None:
        t = t + (a_dot * weight if b is None else a_dot * weight * b)
    if b_dot is not None:
        t = t + b_dot * weight
    t = np.sum(np.broadcast_to(t, a_arr.shape), axis=axis, keepdims=keepdims)
    t = broadcast_tangent(t, value)
    if return_sign:
        return t, zero_tangent(np.asarray(sign, dtype=float))
    return t


# -- shape -------------------------------------------------------------------------------
@_helper
def pad_jvp(array_dot, constant_values_dot, pad_width, mode="constant", reflect_type="even"):
    """np.pad copies values in the modes the cotangent rule supports, so it is linear
    in the array (and in the constant); the statistical modes raise like there."""
    if mode not in _nh.PAD_MOVES or reflect_type != "even":
        _nh.unsupported(f"np.pad with mode={mode!r}, reflect_type={reflect_type!r}")
    if mode == "constant":
        if constant_values_dot is not None and np.ndim(constant_values_dot) != 0:
            _nh.unsupported("np.pad with per-axis constant_values")
        return np.pad(array_dot, pad_width, mode="constant",
                      constant_values=0.0 if constant_values_dot is None
                      else constant_values_dot)
    return np.pad(array_dot, pad_width, mode=mode)


# -- interpolation --------------------------------------------------------------------------
@_helper
def interp_slope(x, xp, fp, period=None):
    """d np.interp / dx: the slope of the segment to the right of a knot (the last knot:
    to its left), 0 outside [xp[0], xp[-1]] (the conventions of the cotangent rule)."""
    if period is not None:
        _nh.unsupported("np.interp with period=")
    xp = np.asarray(xp)
    fp = np.asarray(fp)
    n = len(xp)
    if n < 2:
        _nh.unsupported("np.interp with fewer than two points")
    xa = np.asarray(x)
    idx = np.clip(np.searchsorted(xp, xa, side="right") - 1, 0, n - 2)
    slope = (fp[idx + 1] - fp[idx]) / (xp[idx + 1] - xp[idx])
    inside = (xa >= xp[0]) & (xa <= xp[-1])
    return np.where(inside, slope, 0.0)


@_helper
def polyval_slope(p, x):
    """d np.polyval(p, x) / dx (p highest power first)."""
    n = len(p)
    xa = np.asarray(x)
    deriv = 0.0
    for k in range(n - 1):
        deriv = deriv * xa + np.asarray(p[k]) * (n - 1 - k)
    return deriv


@_helper
def polynomial_slope(c, x):
    """d/dx of np.polynomial.polynomial.polyval(x, c) (c lowest power first, numbers)."""
    if np.ndim(c) != 1:
        _nh.unsupported("np.polynomial.polynomial.polyval with coefficients that are arrays")
    return polyval_slope(c[::-1], x)


@_helper
def multi_dot_jvp(arrays, arrays_dot):
    """np.linalg.multi_dot: one product per differentiated matrix (None: constant)."""
    total = None
    for i, t in enumerate(arrays_dot):
        if t is None:
            continue
        term = np.linalg.multi_dot(list(arrays[:i]) + [t] + list(arrays[i + 1:])) \
            if len(arrays) > 2 else _two(arrays, i, t)
        total = term if total is None else total + term
    return total


def _two(arrays, i, t):
    items = list(arrays)
    items[i] = t
    return np.linalg.multi_dot(items) if len(items) > 2 else np.dot(items[0], items[1])


@_helper
def cov_jvp(m, y, m_dot, y_dot, rowvar=True, bias=False, ddof=None, fweights=None,
            aweights=None, dtype=None):
    """np.cov is a quadratic form B(x, x) in its data, so its tangent is
    B(t, x) + B(x, t) = (cov(x + s t) - cov(x - s t)) / (2 s) exactly; s scales
    t to the data's size so that no digits cancel."""
    def zeros_if_none(t, like):
        return zero_tangent(np.asarray(like, dtype=float)) if t is None else np.asarray(t)
    m_arr = np.asarray(m, dtype=float)
    tm = zeros_if_none(m_dot, m_arr)
    ty = None if y is None else zeros_if_none(y_dot, y)
    size = max(np.max(np.abs(m_arr), initial=0.0),
               0.0 if y is None else np.max(np.abs(np.asarray(y, dtype=float)), initial=0.0))
    tsize = max(np.max(np.abs(tm), initial=0.0),
                0.0 if ty is None else np.max(np.abs(ty), initial=0.0))
    if tsize == 0:
        return np.zeros(np.shape(np.cov(m_arr, y, rowvar=rowvar, bias=bias, ddof=ddof,
                                        fweights=fweights, aweights=aweights)))
    s = (size if size > 0 else 1.0) / tsize
    kw = dict(rowvar=rowvar, bias=bias, ddof=ddof, fweights=fweights, aweights=aweights)
    plus = np.cov(m_arr + s * tm, None if y is None else np.asarray(y) + s * ty, **kw)
    minus = np.cov(m_arr - s * tm, None if y is None else np.asarray(y) - s * ty, **kw)
    return (plus - minus) / (2.0 * s)


@_helper
def corrcoef_jvp(x, y, x_dot, y_dot, ans, rowvar=True):
    """np.corrcoef = C_ij / sqrt(C_ii C_jj): from the tangent of the covariance C."""
    c = np.cov(x, y, rowvar=rowvar)
    dc = cov_jvp(x, y, x_dot, y_dot, rowvar=rowvar)
    if np.ndim(c) == 0:
        return np.zeros(np.shape(ans))
    d = np.diagonal(c)
    dd = np.diagonal(dc)
    rel = dd / (2.0 * d)
    sd = np.sqrt(d)
    return dc / np.outer(sd, sd) - np.asarray(ans) * (rel[:, None] + rel[None, :])


# -- constructors -----------------------------------------------------------------------------
@_helper
def arange_jvp(start_dot, step_dot, ans, stop=None):
    """np.arange: values start + i * step (stop changes only the count, by jumps)."""
    if stop is None:  # np.arange(stop): its only argument is bound to `start`
        return np.zeros(np.shape(ans))
    i = np.arange(np.shape(ans)[0])
    t = np.zeros(np.shape(ans))
    if start_dot is not None:
        t = t + start_dot
    if step_dot is not None:
        t = t + i * step_dot
    return cast_tangent(t, ans)


def _along(value, axis):
    value = np.asarray(value)
    return np.expand_dims(value, axis) if value.ndim else value


@_helper
def logspace_jvp(start_dot, stop_dot, base_dot, base, ans, num=50, endpoint=True, axis=0):
    """np.logspace = base ** linspace(start, stop)."""
    t = 0.0
    if start_dot is not None or stop_dot is not None:
        lin = np.linspace(0.0 if start_dot is None else start_dot,
                          0.0 if stop_dot is None else stop_dot, num, endpoint=endpoint,
                          axis=axis)
        t = t + ans * np.log(_along(base, axis)) * lin
    if base_dot is not None:
        b = _along(base, axis)
        t = t + ans * (np.log(ans) / np.log(b)) * (_along(base_dot, axis) / b)
    return cast_tangent(broadcast_tangent(t, ans), ans)


@_helper
def geomspace_jvp(start, stop, start_dot, stop_dot, ans, num=50, endpoint=True, axis=0):
    """np.geomspace = start (stop / start) ** t: log-linear between the end points."""
    rel_start = 0.0 if start_dot is None else np.asarray(start_dot) / np.asarray(start)
    rel_stop = 0.0 if stop_dot is None else np.asarray(stop_dot) / np.asarray(stop)
    lin = np.linspace(rel_start, rel_stop, num, endpoint=endpoint, axis=axis)
    return cast_tangent(broadcast_tangent(ans * lin, ans), ans)


# -- linear algebra ------------------------------------------------------------------------
def _from_triangle(d, lower):
    """The symmetric (Hermitian) matrix that cholesky/eigh actually see: one triangle,
    mirrored (conjugated), the diagonal's real part (its imaginary part is ignored)."""
    d = np.asarray(d)
    if lower:
        out = np.tril(d, -1) + _H(np.tril(d, -1))
    else:
        out = np.triu(d, 1) + _H(np.triu(d, 1))
    diagonal = np.diagonal(d, axis1=-2, axis2=-1)
    return out + np.real(diagonal)[..., None] * np.eye(d.shape[-1])


def _H(x):
    """The conjugate transpose of the last two axes (the transpose of real ones)."""
    return np.conj(_T(x)) if np.iscomplexobj(x) else _T(x)


@_helper
def solve_jvp(a, b, a_dot, b_dot, ans):
    """np.linalg.solve: x = a^-1 b, so x_dot = a^-1 (b_dot - a_dot x)."""
    a, x = np.asarray(a), np.asarray(ans)
    vector = np.ndim(b) == 1 if _nh.NUMPY2 else np.ndim(b) == a.ndim - 1
    rhs = 0.0
    if b_dot is not None:
        rhs = rhs + np.asarray(b_dot)
    if a_dot is not None:
        rhs = rhs - ((np.asarray(a_dot) @ x[..., None])[..., 0] if vector
                     else np.asarray(a_dot) @ x)
    rhs = np.broadcast_to(rhs, x.shape)
    if vector:
        return np.linalg.solve(a, rhs[..., None])[..., 0]
    return np.linalg.solve(a, rhs)


@_helper
def slogdet_jvp(a, a_dot, ans):
    """np.linalg.slogdet: the sign is piecewise constant; d log|det| = tr(a^-1 a_dot)."""
    sign = np.asarray(ans[0])
    logdet = np.trace(np.linalg.solve(a, a_dot), axis1=-2, axis2=-1)
    return np.zeros(sign.shape, dtype=np.result_type(sign, np.float64)), logdet


@_helper
def cholesky_jvp(a_dot, L, upper=False):
    """np.linalg.cholesky (one triangle of `a` is read): L_dot = L Phi(L^-1 A_dot L^-T)."""
    L = np.asarray(L)
    if upper:
        L = _T(L)
    d = _from_triangle(a_dot, not upper)
    x = np.linalg.solve(L, _T(np.linalg.solve(L, d)))
    n = L.shape[-1]
    phi = np.tril(x) - 0.5 * x * np.eye(n)
    out = L @ phi
    return _T(out) if upper else out


def _cluster_info(values, scale_of, n):
    tol = np.max(scale_of, initial=0.0) * n * np.finfo(np.asarray(values).dtype).eps * 10
    labels = _nh.clusters(values, tol)
    return tol, labels, _nh.degenerate_pairs(labels)


def _undefined(inner, degenerate):
    """Pairs of repeated values that the direction mixes: no derivative there."""
    scale = np.max(np.abs(inner)) if inner.size else 0.0
    return degenerate & (np.abs(inner) > 1e-8 * scale + 1e-300)


@_helper
def eigh_jvp(a_dot, ans, UPLO="L"):
    """np.linalg.eigh: w_dot = diag(V^T A_dot V) (averaged over repeated eigenvalues),
    V_dot = V (F o V^T A_dot V) with F_ij = 1 / (w_j - w_i)."""
    w, v = np.asarray(ans[0]), np.asarray(ans[1])
    d = _from_triangle(a_dot, UPLO.upper() == "L")
    p = _T(v) @ d @ v
    n = w.shape[-1]
    dw = np.array(np.diagonal(p, axis1=-2, axis2=-1))
    dv = np.zeros(np.broadcast_shapes(v.shape, p.shape), dtype=np.result_type(v, p))
    for idx in np.ndindex(*w.shape[:-1]):
        wi, pi = w[idx], p[idx]
        _, labels, degenerate = _cluster_info(wi, np.abs(wi), n)
        dw[idx] = _nh.cluster_mean(dw[idx], labels)
        gap = wi[None, :] - wi[:, None]
        off = ~np.eye(n, dtype=bool) & ~degenerate
        f = np.where(off, 1.0 / np.where(off, gap, 1.0), 0.0)
        f = np.where(_undefined(pi, degenerate), np.nan, f)
        dv[idx] = v[idx] @ (f * pi)
    return dw, dv


@_helper
def eigvalsh_jvp(a_dot, a, UPLO="L"):
    """np.linalg.eigvalsh: diag(V^T A_dot V), averaged over repeated eigenvalues."""
    w, v = np.linalg.eigh(a, UPLO=UPLO)
    d = _from_triangle(a_dot, UPLO.upper() == "L")
    dw = np.array(np.real(np.diagonal(_H(v) @ d @ v, axis1=-2, axis2=-1)))
    for idx in np.ndindex(*w.shape[:-1]):
        _, labels, _ = _cluster_info(w[idx], np.abs(w[idx]), w.shape[-1])
        dw[idx] = _nh.cluster_mean(dw[idx], labels)
    return dw


def _singular_values_dot(u, s, v, a_dot, signed_zero=False):
    """Re diag(U^H A_dot V), averaged over repeated singular values, 0 at zero ones but
    a simple one when `signed_zero` (see numpy_grads._singular_values_back)."""
    p = _H(u) @ np.asarray(a_dot) @ v
    ds = np.array(np.real(np.diagonal(p, axis1=-2, axis2=-1)))
    for idx in np.ndindex(*s.shape[:-1]):
        si = s[idx]
        tol, labels, _ = _cluster_info(si, si, max(u.shape[-2], v.shape[-2]))
        ds[idx] = np.where(_nh.counted_values(si, tol, labels, signed_zero),
                           _nh.cluster_mean(ds[idx], labels), 0.0)
    return p, ds


@_helper
def svd_jvp(a_dot, a, ans, full_matrices=True, compute_uv=True, hermitian=False):
    """np.linalg.svd (Townsend's formulas): with P = U^T A_dot V,
    s_dot = diag(P), U_dot = U (F o (P S + S P^T)) + (I - U U^T) A_dot V S^-1,
    V_dot = V (F o (S P + P^T S)) + (I - V V^T) A_dot^T U S^-1, F_ij = 1/(s_j^2 - s_i^2)."""
    if hermitian:
        _nh.unsupported("np.linalg.svd(..., hermitian=True)")
    a = np.asarray(a)
    if not compute_uv:
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        return _singular_values_dot(u, s, _H(vt), a_dot)[1]
    u, s, vt = (np.asarray(t) for t in ans)
    m, n = a.shape[-2:]
    k = min(m, n)
    uk, vk = u[..., :, :k], _T(vt[..., :k, :])
    a_dot = np.broadcast_to(np.asarray(a_dot), a.shape)
    p, ds = _singular_values_dot(uk, s, vk, a_dot, signed_zero=True)
    du = np.zeros(u.shape, dtype=np.result_type(u, p))
    dv = np.zeros(vk.shape[:-2] + (n, n if full_matrices else k), dtype=du.dtype)
    for idx in np.ndindex(*s.shape[:-1]):
        si, pi = s[idx], p[idx]
        tol, _, degenerate = _cluster_info(si, si, max(m, n))
        sym = pi * si[None, :] + si[:, None] * _T(pi)        # P S + S P^T
        sym_v = si[:, None] * pi + _T(pi) * si[None, :]      # S P + P^T S
        s2 = si[None, :] ** 2 - si[:, None] ** 2
        off = ~np.eye(k, dtype=bool) & ~degenerate
        f = np.where(off, 1.0 / np.where(off, s2, 1.0), 0.0)
        bad = _undefined(pi - _T(pi), degenerate) | \
            _undefined(pi, degenerate & (si[:, None] <= tol))
        f = np.where(bad, np.nan, f)
        ui, vi, ai = uk[idx], vk[idx], a_dot[idx]
        dui = ui @ (f * sym)
        dvi = vi @ (f * sym_v)
        small = si <= tol
        inv_s = 1.0 / np.where(small, 1.0, si)
        if m > k:
            rest = ai @ vi - ui @ (_T(ui) @ ai @ vi)
            rest = np.where(small[None, :] & (np.abs(rest) > tol), np.nan, rest)
            dui = dui + rest * inv_s[None, :]
        if n > k:
            rest = _T(ai) @ ui - vi @ (_T(vi) @ _T(ai) @ ui)
            rest = np.where(small[None, :] & (np.abs(rest) > tol), np.nan, rest)
            dvi = dvi + rest * inv_s[None, :]
        du[idx][..., :k] = dui
        dv[idx][..., :k] = dvi
        if full_matrices and m > k:
            du[idx][..., k:] = np.nan      # an arbitrary basis of the complement
        if full_matrices and n > k:
            dv[idx][..., k:] = np.nan
    return du, ds, _T(dv)


@_helper
def svdvals_jvp(x_dot, x):
    """np.linalg.svdvals: diag(U^T X_dot V), repeated values averaged, 0 at zero ones."""
    u, s, vt = np.linalg.svd(np.asarray(x), full_matrices=False)
    return _singular_values_dot(u, s, _H(vt), x_dot)[1]


@_helper
def pinv_jvp(a_dot, a, ans, hermitian=False):
    """np.linalg.pinv (where the rank does not change):
    P_dot = -P A_dot P + P P^T A_dot^T (I - A P) + (I - P A) A_dot^T P^T P."""
    if hermitian:
        _nh.unsupported("np.linalg.pinv(..., hermitian=True)")
    a, p, d = np.asarray(a), np.asarray(ans), np.asarray(a_dot)
    m, n = a.shape[-2:]
    return (-p @ d @ p + p @ _T(p) @ _T(d) @ (np.eye(m) - a @ p)
            + (np.eye(n) - p @ a) @ _T(d) @ _T(p) @ p)


@_helper
def lstsq_jvp(a, b, a_dot, b_dot, ans, rcond=None):
    """np.linalg.lstsq (where the rank does not change): x = P b, so x_dot = P_dot b +
    P b_dot; the residuals at their minimum over x change only with a and b (2 r.b_dot
    - 2 r.(a_dot x)); the singular values as svdvals'; the rank not at all."""
    a, b = np.asarray(a), np.asarray(b)
    x = np.asarray(ans[0])
    p = _nh.lstsq_pinv(a, rcond)
    x_dot = np.zeros_like(x)
    shape = np.shape(ans[1])    # ((1,) for NumPy's where b is a vector, () for SciPy's)
    residuals_dot = np.zeros(shape)
    s_dot = None if ans[3] is None else np.zeros(np.shape(ans[3]))   # (None: gelsy)
    r = b - a @ x
    if a_dot is not None:
        x_dot = x_dot + pinv_jvp(a_dot, a, p) @ b
        if np.size(ans[1]):
            ax = np.asarray(a_dot) @ x
            residuals_dot = residuals_dot - 2.0 * np.reshape(np.sum(r * ax, axis=0), shape)
        if s_dot is not None:
            s_dot = s_dot + svdvals_jvp(a_dot, a)
    if b_dot is not None:
        x_dot = x_dot + p @ np.asarray(b_dot)
        if np.size(ans[1]):
            residuals_dot = residuals_dot + 2.0 * np.reshape(
                np.sum(r * np.asarray(b_dot), axis=0), shape)
    return x_dot, residuals_dot, 0.0, s_dot


@_helper
def cdist_jvp(xa, xb, xa_dot, xb_dot, ans, metric="euclidean", p=2, w=None):
    """scipy.spatial.distance.cdist: each distance changes with its pair's difference
    along the metric's slopes (numpy_grads.cdist_grads is the transpose)."""
    metric = _nh.distance_metric(metric, p, w)
    # (in float64, as SciPy computes the distances, whatever the points' dtype)
    xa, xb = np.asarray(xa, dtype=np.float64), np.asarray(xb, dtype=np.float64)
    dist = np.asarray(ans)
    da = np.zeros(xa.shape) if xa_dot is None else np.asarray(xa_dot, dtype=np.float64)
    db = np.zeros(xb.shape) if xb_dot is None else np.asarray(xb_dot, dtype=np.float64)
    if metric in ("euclidean", "sqeuclidean") or (metric == "minkowski" and p == 2):
        twice = 2.0 * (np.sum(xa * da, axis=1)[:, None] - xa @ _T(db) - da @ _T(xb)
                       + np.sum(xb * db, axis=1)[None, :])
        return twice if metric == "sqeuclidean" else _nh.safe_divide(0.5 * twice, dist)
    if metric == "cosine":
        na, nb, cos = _nh.cosine_parts(xa, xb, dist)
        cross = _nh.safe_divide(da @ _T(xb) + xa @ _T(db), na[:, None] * nb[None, :])
        own = (_nh.safe_divide(np.sum(xa * da, axis=1), na * na)[:, None]
               + _nh.safe_divide(np.sum(xb * db, axis=1), nb * nb)[None, :])
        return -(cross - cos * own)
    slopes = _nh.difference_slopes(xa, xb, dist, metric, p)
    return np.einsum("ijk,ijk->ij", slopes, da[:, None, :] - db[None, :, :])


@_helper
def pdist_jvp(x, x_dot, ans, metric="euclidean", p=2, w=None):
    """scipy.spatial.distance.pdist: the pairs i < j of cdist(X, X)'s tangent."""
    x = np.asarray(x)
    n = x.shape[0]
    full = cdist_jvp(x, x, x_dot, x_dot, _nh.square_distances(ans, n), metric, p, w)
    return full[np.triu_indices(n, 1)]


@_helper
def polyfit_jvp(x, y, x_dot, y_dot, deg, ans, rcond=None, full=False, w=None, cov=False):
    """np.polyfit: lstsq's tangent for the Vandermonde system (see polyfit_grads)."""
    v, cut = _nh.polyfit_system(x, deg, rcond, full, w, cov)
    v_dot = None if x_dot is None else \
        np.expand_dims(np.asarray(x_dot), -1) * _nh.vander_slopes(x, deg + 1)
    return lstsq_jvp(v, y, v_dot, y_dot, (ans, np.zeros(0), 0, None), cut)[0]


@_helper
def scipy_solve_jvp(a, b, a_dot, b_dot, ans, lower=False, assume_a=None, transposed=False):
    """scipy.linalg.solve: np.linalg.solve's tangent for the matrix its solver reads."""
    m = _nh.solver_matrix(a, lower, assume_a, transposed)
    m_dot = None if a_dot is None else _nh.solver_matrix(a_dot, lower, assume_a, transposed)
    return solve_jvp(m, b, m_dot, b_dot, ans)


@_helper
def scipy_pinv_jvp(a_dot, a, ans, return_rank=False):
    """scipy.linalg.pinv: np.linalg.pinv's tangent (the rank, when returned, is constant)."""
    if return_rank:
        return pinv_jvp(a_dot, a, ans[0]), 0
    return pinv_jvp(a_dot, a, ans)


def _qr_tall_jvp(q, r, d):
    """a = q r with r square: C = Q^T A_dot R^-1, Omega its antisymmetric lower part,
    R_dot = (C - Omega) R, Q_dot = A_dot R^-1 - Q (C - Omega)."""
    x = _T(np.linalg.solve(_T(r), _T(d)))
    c = _T(q) @ x
    low = np.tril(c, -1)
    upper_part = c - (low - _T(low))
    return x - q @ upper_part, upper_part @ r


@_helper
def qr_jvp(a_dot, a, ans, mode="reduced"):
    """np.linalg.qr (modes 'reduced', 'complete', 'r')."""
    a = np.asarray(a)
    d = np.broadcast_to(np.asarray(a_dot), a.shape)
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "r":
        q, r = np.linalg.qr(a)
    elif mode in ("reduced", "complete"):
        q, r = np.asarray(ans[0]), np.asarray(ans[1])
    else:
        _nh.unsupported(f"np.linalg.qr(mode={mode!r})")
    extra = q.shape[-1] - k
    qk, rk = q[..., :, :k], r[..., :k, :]
    if m >= n:
        dq, dr = _qr_tall_jvp(qk, rk, d)
    else:
        dq, dx = _qr_tall_jvp(qk, rk[..., :, :m], d[..., :, :m])
        dy = _T(qk) @ (d[..., :, m:] - dq @ rk[..., :, m:])
        dr = np.concatenate([dx, dy], axis=-1)
    if mode == "r":
        return dr
    if extra:
        nan = np.full(dq.shape[:-1] + (extra,), np.nan)
        dq = np.concatenate([dq, nan], axis=-1)     # an arbitrary basis of the complement
        dr = np.concatenate([dr, np.zeros(dr.shape[:-2] + (extra, n))], axis=-2)
    return dq, dr


@_helper
def matrix_power_jvp(a_dot, a, n):
    """np.linalg.matrix_power: sum_i B^i B_dot B^(k-1-i), B = a or inv(a) for n < 0."""
    a, d = np.asarray(a), np.asarray(a_dot)
    if n == 0:
        return np.zeros(np.broadcast_shapes(a.shape, d.shape))
    if n > 0:
        base, db = a, d
    else:
        base = np.linalg.inv(a)
        db = -base @ d @ base
    k = abs(n)
    powers = [np.broadcast_to(np.eye(a.shape[-1]), a.shape)]
    for _ in range(k - 1):
        powers.append(powers[-1] @ base)
    return sum(powers[i] @ db @ powers[k - 1 - i] for i in range(k))



# -- functions of issue 34 ----------------------------------------------------------------------
@_helper
def expm_frechet_jvp(a, e, a_dot, e_dot):
    """The tangent of expm_frechet(a, e) (linear in e): the upper right block of the
    Frechet derivative of expm at [[a, e], [0, a]] in the direction [[a_dot, e_dot], [0, a_dot]]."""
    n = np.shape(a)[-1]
    a_dot = np.zeros(np.shape(a)) if a_dot is None else a_dot
    e_dot = np.zeros(np.shape(e)) if e_dot is None else e_dot
    return _nh.expm_frechet(_nh.block_upper(a, e), _nh.block_upper(a_dot, e_dot))[..., :n, n:]


@_helper
def partition_jvp(a_dot, a, ans, axis=-1):
    """np.partition: the tangent follows its element (matched by value, as partition_grad)."""
    a = np.asarray(a)
    t = np.broadcast_to(np.asarray(a_dot), a.shape)
    res = np.asarray(ans)
    if axis is None:
        a, t, axis = a.ravel(), t.ravel(), -1
    order_a = np.argsort(a, axis=axis, kind="stable")
    order_r = np.argsort(res, axis=axis, kind="stable")
    out = np.zeros(res.shape, dtype=np.result_type(t, np.float32))
    np.put_along_axis(out, order_r, np.take_along_axis(t, order_a, axis=axis), axis=axis)
    return out


@_helper
def eig_jvp(a_dot, ans):
    """np.linalg.eig of a real matrix with real, distinct eigenvalues: w' = diag(C),
    V' = V (F * C + diag(c)) with C = V^-1 A' V, F the gap weights and c keeping every
    column of unit length (NumPy normalises them)."""
    w, v = ans
    f = _nh.eig_gaps(w)
    c = np.linalg.solve(v, np.asarray(a_dot) @ v)
    w_dot = np.diagonal(c, axis1=-2, axis2=-1)
    e = f * c
    vtv = v.swapaxes(-1, -2) @ v
    norm = -np.diagonal(vtv @ e, axis1=-2, axis2=-1)
    return w_dot, v @ (e + norm[..., None, :] * np.eye(v.shape[-1]))


@_helper
def eigvals_jvp(a_dot, a):
    """np.linalg.eigvals (real, distinct eigenvalues): diag(V^-1 A' V)."""
    w, v = np.linalg.eig(a)
    _nh.eig_gaps(w)
    return np.diagonal(np.linalg.solve(v, np.asarray(a_dot) @ v), axis1=-2, axis2=-1)


@_helper
def solve_triangular_jvp(a, b, a_dot, b_dot, ans, trans=0, lower=False, unit_diagonal=False):
    """scipy.linalg.solve_triangular: x' = op(T)^-1 (b' - op(T') x), T the triangle read."""
    rhs = np.zeros(np.shape(ans)) if b_dot is None else np.broadcast_to(b_dot, np.shape(ans))
    if a_dot is not None:
        n = np.shape(a)[-1]
        t_dot = _nh.transpose_if(_nh.triangle_part(a_dot, lower, unit_diagonal),
                                 _nh.is_transposed(trans))
        rhs = rhs - np.reshape(t_dot @ _nh.as_columns(ans, n), np.shape(ans))
    return _nh.scipy_solve_triangular(a, rhs, trans, lower, unit_diagonal)


@_helper
def solve_banded_jvp(l_and_u, ab, ab_dot, b_dot, ans):
    """scipy.linalg.solve_banded: x' = A^-1 (b' - A' x), A' of ab_dot's band."""
    rhs = np.zeros(np.shape(ans)) if b_dot is None else np.broadcast_to(b_dot, np.shape(ans))
    if ab_dot is not None:
        rhs = rhs - _nh.band_matvec(ab_dot, ans, l_and_u[0], l_and_u[1])
    return _nh.scipy_solve_banded(l_and_u, ab, rhs)


@_helper
def cho_solve_jvp(c, lower, b, c_dot, b_dot, ans):
    """scipy.linalg.cho_solve: x' = A^-1 (b' - A' x), A = L L^T from c's triangle."""
    rhs = np.zeros(np.shape(ans)) if b_dot is None else np.broadcast_to(b_dot, np.shape(ans))
    if c_dot is not None:
        n = np.shape(c)[-1]
        low = _nh.triangle_part(_nh.transpose_if(c, not lower), True)
        low_dot = _nh.triangle_part(_nh.transpose_if(c_dot, not lower), True)
        a_dot = low_dot @ _T(low) + low @ _T(low_dot)
        rhs = rhs - np.reshape(a_dot @ _nh.as_columns(ans, n), np.shape(ans))
    return _nh.scipy_cho_solve(c, lower, rhs)


@_helper
def solve_sylvester_jvp(a, b, a_dot, b_dot, q_dot, ans):
    """scipy.linalg.solve_sylvester: X' solves a X' + X' b = q' - a' X - X b'."""
    rhs = np.zeros(np.shape(ans)) if q_dot is None else np.asarray(q_dot, dtype=float)
    if a_dot is not None:
        rhs = rhs - np.asarray(a_dot) @ ans
    if b_dot is not None:
        rhs = rhs - ans @ np.asarray(b_dot)
    return _nh.scipy_solve_sylvester(a, b, rhs)


@_helper
def cho_solve_pair_jvp(c_and_lower, b, c_and_lower_dot, b_dot, ans):
    """scipy.linalg.cho_solve((c, lower), b): the tangent of c is the pair's first."""
    c_dot = None if c_and_lower_dot is None else c_and_lower_dot[0]
    return cho_solve_jvp(c_and_lower[0], c_and_lower[1], b, c_dot, b_dot, ans)


@_helper
def cho_factor_jvp(a_dot, ans):
    """scipy.linalg.cho_factor: the factor's tangent in its triangle, a's in the other."""
    c, lower = ans
    factor = _nh.triangle_part(c, lower)
    t = cholesky_jvp(a_dot, factor, not lower)
    return t + np.asarray(a_dot) - _nh.triangle_part(a_dot, lower), None
