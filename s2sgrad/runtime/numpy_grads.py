"""Helpers for the NumPy gradient table, where one line of NumPy would not read well.

Each function is registered with `s2sgrad.runtime.helper`, so a template in
`numpy_rules.py` calls it by name and generated code shows it as
`_s2s_<name>(...)`. Every helper is plain NumPy.

Conventions at points where a function has no derivative (README, "NumPy
coverage"): ties of max/min/sort-like functions split the cotangent equally;
norms and standard deviations at zero take the zero subgradient; a gradient
that is undefined (eigenvectors of repeated eigenvalues, ...) raises instead
of returning a value.
"""
from __future__ import annotations

import math
import numbers
import string
from collections import Counter

import numpy as np

from ..errors import InternalError
from .arrays import as_array, size_of
from .registry import new_helper as _helper
from .reverse import balanced_max_mask, safe_log, split_as_items
from .shapes import (
    ArrayMeta,
    expand_reduced,
    normalize_axes,
    reduced_count,
    sum_to_shape,
    unbroadcast,
)
from .shapes import swap_last_axes as _T

NUMPY2 = int(np.__version__.split(".")[0]) >= 2




# -- errors and small arithmetic ------------------------------------------------
@_helper
def unsupported(what):
    """Raise: the gradient through `what` is not implemented (never a silent zero)."""
    raise NotImplementedError(f"s2sgrad cannot differentiate {what}")


@_helper
def safe_divide(num, den):
    """num / den, with 0 where den == 0 (the zero subgradient of a norm at 0)."""
    den = as_array(den)
    zero = den == 0
    out = np.where(zero, 0.0, num / np.where(zero, 1.0, den))
    return out[()] if np.ndim(out) == 0 else out


@_helper
def power_slope(x, y, k=1):
    """The k-th derivative of x ** y in x: y (y - 1) ... (y - k + 1) x ** (y - k),
    and 0 wherever that product is 0 (x ** 0 has no slope, x ** 2 no third
    derivative), also at x == 0, where the formula reads 0 * inf."""
    factor = 1.0
    for i in range(k):
        factor = factor * (y - i)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.equal(factor, 0), 0.0, factor * np.power(x, y - float(k)))
    return out[()] if np.ndim(out) == 0 else out


@_helper
def power_slope_mixed(x, y, k=1, m=1):
    """d^k/dx^k d^m/dy^m of x ** y: the sum over j of C(m, j) P^(j)(y) log(x)^(m - j)
    x ** (y - k), P(y) = y (y - 1) ... (y - k + 1), each term 0 where its P^(j) is
    (as in power_slope). Its rule is itself one order up in x or in y: the mixed
    derivatives of x ** y of every order from this one definition."""
    slopes = [1.0] + [0.0] * m   # P and its derivatives in y, one factor at a time
    for i in range(k):
        slopes = [slopes[j] * (y - i) + (j * slopes[j - 1] if j else 0.0)
                  for j in range(m + 1)]
    out = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        log_x = safe_log(x)   # (nan for x < 0: where the terms are 0, as x ** y's are)
        power = np.power(x, y - float(k))
        for j in range(m + 1):
            out = out + math.comb(m, j) * np.where(np.equal(slopes[j], 0), 0.0,
                                                   slopes[j] * power * log_x ** (m - j))
    return out[()] if np.ndim(out) == 0 else out


@_helper
def real_only(grad, x):
    """`grad`, after checking that `x` is real: complex derivatives are not supported."""
    if np.iscomplexobj(x):
        raise NotImplementedError("s2sgrad differentiates real-valued code; complex "
                                  "intermediate values are not supported")
    return grad


# sinc'(x) = sum over k >= 1 of (-1)^k pi^2k 2k x^(2k - 1) / (2k + 1)!: the coefficients
# of x, x^3, ..., x^15, enough for |x| < 0.1 to the last bit and exact derivatives at 0
# to the 15th order.
_SINC_SLOPE_SERIES = tuple((-1) ** k * math.pi ** (2 * k) * 2 * k / math.factorial(2 * k + 1)
                           for k in range(1, 9))


@_helper
def sinc_derivative(x):
    """d/dx sin(pi x) / (pi x): (cos(pi x) - sinc(x)) / x, and its Taylor series for
    |x| < 0.1, where the formula cancels (and reads 0 / 0 at x == 0): a polynomial, so
    the derivatives of this function there, which higher orders read, are exact too."""
    x = as_array(x)
    near = np.abs(x) < 0.1
    safe = np.where(near, 1.0, x)
    x2 = x * x
    series = 0.0
    for c in reversed(_SINC_SLOPE_SERIES):
        series = series * x2 + c
    return np.where(near, series * x, (np.cos(np.pi * safe) - np.sinc(safe)) / safe)


@_helper
def zero_unless_float(grad, ans):
    """Integer results (dtype=int, astype(int)) are piecewise constant: zero gradient."""
    dtype = getattr(ans, "dtype", None)
    if dtype is not None and not np.issubdtype(dtype, np.inexact):
        return np.zeros(np.shape(grad))
    return grad


# -- clip ---------------------------------------------------------------------------
@_helper
def clip_grads(g, a, a_min=None, a_max=None, min=None, max=None):  # noqa: A002 - NumPy's names
    """Cotangents of (a, lower bound, upper bound) in np.clip.

    clip is minimum(maximum(a, lo), hi), and ties split like np.maximum: at
    a == lo both a and lo receive half of g.
    """
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    g = as_array(g)
    mid = a if lo is None else np.maximum(a, lo)
    g_mid, g_hi, g_lo = g, None, None
    if hi is not None:
        out = np.minimum(mid, hi)
        g_hi = g * balanced_max_mask(hi, out, mid)
        g_mid = g * balanced_max_mask(mid, out, hi)
    g_a = g_mid
    if lo is not None:
        g_lo = g_mid * balanced_max_mask(lo, mid, a)
        g_a = g_mid * balanced_max_mask(a, mid, lo)
    return g_a, g_lo, g_hi


@_helper
def clip_grad_a(g, a, a_min=None, a_max=None, min=None, max=None):  # noqa: A002
    """clip_grads' first cotangent alone: when the bounds are constants (the usual
    `np.clip(v, -1.0, 1.0)` in a loop) their cotangents are never read, and
    forming them took half of the work. Same values, ties split the same way
    (the masks are 0, 1/2 or 1, so their product is exact)."""
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    inside = strictly_inside(g, a, lo, hi)
    if inside is not None:
        return g * inside
    mid = a if lo is None else np.maximum(a, lo)
    mask = None
    if hi is not None:
        mask = balanced_max_mask(mid, np.minimum(mid, hi), hi)
    if lo is not None:
        below = balanced_max_mask(a, mid, lo)
        mask = below if mask is None else mask * below
    return as_array(g) if mask is None else g * mask


def strictly_inside(g, a, lo, hi):
    """Where a float64 `a` lies strictly between number bounds (lo < hi), as booleans,
    when no element sits on a bound: there the masks above are 1 inside and 0
    outside (NaN too), so g * mask is g times these booleans, to the bit and in
    g's float64. Half the work on a loop's 100-vector (the masks divide and
    convert booleans; the bounds are Python floats). None: the general masks.
    (A mask: no gradient, helper_rules.nondiff.)"""
    if type(a) is not np.ndarray or a.dtype != np.float64 or \
            not (type(g) is float or type(g) is np.ndarray and g.dtype == np.float64) or \
            not (_number_bound(lo) and _number_bound(hi)) or \
            (lo is not None and hi is not None and not lo < hi):
        return None
    inside = None
    if lo is not None:
        if np.count_nonzero(a == lo):   # (a third of .any()'s cost)
            return None   # (a tie: the masks split it in half)
        inside = a > lo
    if hi is not None:
        if np.count_nonzero(a == hi):
            return None
        inside = a < hi if inside is None else inside & (a < hi)
    return inside


def _number_bound(b) -> bool:
    return b is None or type(b) in (float, int) or type(b) is np.float64


# -- reductions ------------------------------------------------------------------------
def _inverse(perm) -> tuple:
    """The permutation that undoes `perm`, as a tuple of ints (an axes argument every
    array library takes)."""
    return tuple(int(i) for i in np.argsort(perm))


@_helper
def extremum_grad(g, a, ans, axis=None, keepdims=False, initial=None, where=None):
    """Cotangent of `a` in max/min/amax/amin/nanmax/nanmin.

    The cotangent goes to the elements equal to the result; ties split it
    equally (an `initial` equal to the result takes its share). NaNs get 0.
    """
    a = as_array(a)
    ge = expand_reduced(g, a, axis=axis, keepdims=keepdims)
    ae = expand_reduced(ans, a, axis=axis, keepdims=keepdims)
    hit = a == ae
    if where is not None:
        hit = hit & np.broadcast_to(where, a.shape)
    count = np.sum(hit, axis=axis, keepdims=True) if a.ndim else hit.astype(int)
    if initial is not None:
        count = count + (as_array(initial) == ae)
    return np.where(hit, ge / np.maximum(count, 1), 0.0)


@_helper
def extremum_initial_grad(g, a, ans, initial, axis=None, keepdims=False, where=None):
    """Cotangent of `initial=` in max/min: its share where it equals the result."""
    a = as_array(a)
    ae = expand_reduced(ans, a, axis=axis, keepdims=keepdims)
    hit = a == ae
    if where is not None:
        hit = hit & np.broadcast_to(where, a.shape)
    count = np.sum(hit, axis=axis, keepdims=keepdims) if a.ndim else hit.astype(int)
    wins = as_array(initial) == ans
    share = np.where(wins, as_array(g) / (count + 1), 0.0)
    return sum_to_shape(share, np.shape(initial))


def _exclusive_products(x, axis=None):
    """For each element, the product of the *other* elements reduced with it.

    Computed with prefix and suffix products, so zeros in x are exact (no
    division by x).
    """
    x = as_array(x)
    nd = x.ndim
    if nd == 0:
        return np.ones_like(x)
    axes = normalize_axes(axis, nd)
    keep = [i for i in range(nd) if i not in axes]
    perm = keep + list(axes)
    xt = np.transpose(x, perm)
    lead = xt.shape[:len(keep)]
    flat = xt.reshape(lead + (-1,))
    if flat.shape[-1] == 0:
        return np.ones_like(x)
    one = np.ones(lead + (1,), dtype=flat.dtype)
    left = np.cumprod(np.concatenate([one, flat[..., :-1]], axis=-1), axis=-1)
    right = np.cumprod(np.concatenate([one, flat[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    return np.transpose((left * right).reshape(xt.shape), _inverse(perm))


@_helper
def prod_grad(g, a, axis=None, keepdims=False, initial=None, where=None):
    """Cotangent of `a` in np.prod: g times the product of the other factors (exact at 0)."""
    a = as_array(a)
    x = a if where is None else np.where(where, a, 1)
    others = _exclusive_products(x, axis)
    if initial is not None:
        others = others * initial
    out = expand_reduced(g, a, axis=axis, keepdims=keepdims) * others
    return out if where is None else np.where(where, out, 0.0)


@_helper
def prod_initial_grad(g, a, initial, axis=None, keepdims=False, where=None):
    """Cotangent of `initial=` in np.prod: g times the product of the elements."""
    if where is None:
        rest = np.prod(a, axis=axis, keepdims=keepdims)
    else:
        rest = np.prod(a, axis=axis, keepdims=keepdims, where=where)
    return sum_to_shape(as_array(g) * rest, np.shape(initial))


def _moments(a, axis, where, mean=None):
    """Element count and centred values for var/std (optional where mask, given mean)."""
    a = as_array(a)
    if where is None:
        n = reduced_count(a, axis=axis)
        if mean is None:
            mean = np.mean(a, axis=axis, keepdims=True)
        return n, a - mean
    mask = np.broadcast_to(where, a.shape)
    n = np.sum(mask, axis=axis, keepdims=True)
    if mean is None:
        mean = np.sum(np.where(mask, a, 0.0), axis=axis, keepdims=True) / n
    return n, np.where(mask, a - mean, 0.0)


@_helper
def var_grad(g, a, axis=None, ddof=0, keepdims=False, where=None, mean=None, correction=None):
    """Cotangent of `a` in np.var: 2 (a - mean) / (n - ddof)."""
    if correction is not None:
        ddof = correction
    n, centred = _moments(a, axis, where, mean)
    return expand_reduced(g, a, axis=axis, keepdims=keepdims) * centred * (2.0 / (n - ddof))


@_helper
def std_grad(g, a, ans, axis=None, ddof=0, keepdims=False, where=None, mean=None,
             correction=None):
    """Cotangent of `a` in np.std: (a - mean) / ((n - ddof) std); 0 where std == 0."""
    if correction is not None:
        ddof = correction
    n, centred = _moments(a, axis, where, mean)
    scale = expand_reduced(ans, a, axis=axis, keepdims=keepdims) * (n - ddof)
    return expand_reduced(g, a, axis=axis, keepdims=keepdims) * safe_divide(centred, scale)


@_helper
def nanmean_grad(g, a, axis=None, keepdims=False):
    """Cotangent of `a` in np.nanmean: shared by the non-NaN elements, 0 at NaNs."""
    a = as_array(a)
    valid = ~np.isnan(a)
    count = np.sum(valid, axis=axis, keepdims=True)
    return np.where(valid, expand_reduced(g, a, axis=axis, keepdims=keepdims) / count, 0.0)


def weights_like(w, a, axis):
    """Weights of np.average broadcast against `a` (1-d weights lie along `axis`)."""
    w = as_array(w)
    if w.shape == a.shape:
        return w
    shape = [1] * a.ndim
    for ax, n in zip(normalize_axes(axis, a.ndim), w.shape):
        shape[ax] = n
    return w.reshape(shape)


@_helper
def average_grads(g, a, axis=None, weights=None, returned=False, keepdims=False):
    """Cotangents of (a, weights) in np.average (and its sum of weights if returned)."""
    g_sum = None
    if returned:
        g, g_sum = g[0], g[1]
    a = as_array(a)
    ge = expand_reduced(g, a, axis=axis, keepdims=keepdims)
    if weights is None:
        return ge / reduced_count(a, axis=axis), None
    w = weights_like(weights, a, axis)
    wsum = np.sum(np.broadcast_to(w, a.shape), axis=axis, keepdims=True)
    avg = np.sum(a * w, axis=axis, keepdims=True) / wsum
    g_a = ge * w / wsum
    g_w = ge * (a - avg) / wsum
    if g_sum is not None:
        g_w = g_w + expand_reduced(g_sum, a, axis=axis, keepdims=keepdims)
    return g_a, np.reshape(sum_to_shape(g_w, w.shape), np.shape(weights))


# How many zeros of a slice cumprod_grad follows (see there): its derivatives are exact up
# to this order; those of higher order past as many zeros are 0.
_CUMPROD_ZERO_LEVELS = 4


@_helper
def cumprod_grad(g, a, ans, axis=None):
    """Cotangent of `a` in np.cumprod, exact when `a` contains zeros.

    Before the first zero of a slice the usual sum(g * ans) / a holds; at
    the first zero the product of the other factors is formed explicitly;
    after it every partial product contains that zero, so the gradient is 0,
    written as that zero times the gradient past it (the same, on the slice with
    that zero made 1: a level per zero, _CUMPROD_ZERO_LEVELS of them) so that its
    derivatives in the zeros, which higher orders read, are exact too.
    """
    a = as_array(a)
    if axis is None:
        x, ax = a.ravel(), 0
    else:
        x, ax = a, axis
    x = np.moveaxis(x, ax, -1)
    gg = np.moveaxis(as_array(g), ax, -1)
    y = np.moveaxis(as_array(ans), ax, -1)
    n = x.shape[-1]
    idx = np.arange(n)
    out = 0.0
    scale = 1.0    # the zeros passed so far, times the products before them
    lower = -1     # the last of those zeros: this level writes the positions past it
    for _ in range(_CUMPROD_ZERO_LEVELS):
        zero = x == 0
        first = np.where(zero.any(axis=-1, keepdims=True), zero.argmax(axis=-1)[..., None], n)
        before = idx < first
        tail_sums = np.flip(np.cumsum(np.flip(gg * y, -1), -1), -1)
        level = np.where(before, tail_sums / np.where(before, x, 1), 0.0)
        at = idx == first
        if not at.any():
            out = np.where(idx > lower, scale * level, out)
            break
        after = np.where(idx > first, x, 1)
        partial = np.cumprod(after, axis=-1)
        tail = np.sum(np.where(idx >= first, gg * partial, 0.0), axis=-1, keepdims=True)
        head = np.prod(np.where(before, x, 1), axis=-1, keepdims=True)
        level = np.where(at, head * tail, level)
        out = np.where(idx > lower, scale * level, out)
        scale = scale * np.sum(np.where(at, x, 0), axis=-1, keepdims=True) * head
        lower, x, y = first, after, partial
    out = np.moveaxis(out, -1, ax)
    return np.reshape(out, a.shape)


@_helper
def cumulative_grad(g, x, ans, axis=None, include_initial=False, product=False):
    """Cotangent of `x` in np.cumulative_sum / np.cumulative_prod (NumPy >= 2.1)."""
    x = as_array(x)
    ax = 0 if axis is None else axis
    g = as_array(g)
    if include_initial:
        n = g.shape[ax]
        g = np.take(g, np.arange(1, n), axis=ax)
        ans = np.take(ans, np.arange(1, n), axis=ax)
    if product:
        return cumprod_grad(g, x, ans, axis=ax)
    return np.flip(np.cumsum(np.flip(g, ax), ax), ax)


@_helper
def quantile_grad(g, a, q, axis=None, method="linear", keepdims=False, ignore_nan=False,
                  overwrite_input=False, weights=None, interpolation=None):
    """Cotangent of `a` in np.quantile/percentile/median (and their nan versions).

    With the default 'linear' method a quantile interpolates between two
    order statistics; the cotangent goes to those two elements with the
    interpolation weights. Equal values are told apart by a stable sort.
    """
    if method != "linear" or interpolation is not None or weights is not None:
        unsupported("np.quantile other than method='linear' without weights")
    if overwrite_input:
        unsupported("np.quantile/median with overwrite_input=True (the input is reordered "
                    "before the gradient can read it)")
    a = as_array(a)
    nd = a.ndim
    axes = normalize_axes(axis, nd) if nd else ()
    keep = [i for i in range(nd) if i not in axes]
    perm = keep + list(axes)
    xt = np.transpose(a, perm)
    lead = xt.shape[:len(keep)]
    flat = xt.reshape(lead + (-1,))
    n = flat.shape[-1]
    order = np.argsort(flat, axis=-1, kind="stable")
    valid = np.sum(~np.isnan(flat), axis=-1) if ignore_nan else np.full(lead, n)
    qs = np.atleast_1d(as_array(q, dtype=float)).ravel()
    gq = np.reshape(as_array(g), (len(qs),) + lead)
    k = np.arange(n)
    sorted_grad = np.zeros(lead + (n,), dtype=np.result_type(gq, np.float64))
    for i, qi in enumerate(qs):
        pos = qi * (valid - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, valid - 1)
        frac = pos - lo
        gi = np.where(valid > 0, gq[i], 0.0)
        sorted_grad = sorted_grad + gi[..., None] * (
            (k == lo[..., None]) * (1 - frac)[..., None] + (k == hi[..., None]) * frac[..., None])
    out = _placed_back(sorted_grad, order, -1)
    return np.transpose(out.reshape(xt.shape), _inverse(perm))


@_helper
def ptp_grad(g, a, axis=None, keepdims=False):
    """Cotangent of `a` in np.ptp = max - min (ties split as in max/min)."""
    hi = np.max(a, axis=axis, keepdims=keepdims)
    lo = np.min(a, axis=axis, keepdims=keepdims)
    return (extremum_grad(g, a, hi, axis=axis, keepdims=keepdims)
            - extremum_grad(g, a, lo, axis=axis, keepdims=keepdims))


@_helper
def diff_grads(g, a, n=1, axis=-1, prepend=None, append=None):
    """Cotangents of (a, prepend, append) in np.diff.

    The adjoint of one difference along an axis is minus the difference of
    the cotangent padded with a zero at each end.
    """
    a = as_array(a)
    g = as_array(g)
    ax = axis % a.ndim
    width = [(0, 0)] * ax + [(1, 1)] + [(0, 0)] * (g.ndim - ax - 1)
    for _ in range(n):
        g = -np.diff(np.pad(g, width), axis=ax)
    parts = []
    start = 0
    for extra in (prepend, a, append):
        if extra is None:
            parts.append(None)
            continue
        ext = as_array(extra)
        length = ext.shape[ax] if ext.ndim else 1
        piece = np.take(g, np.arange(start, start + length), axis=ax)
        start += length
        parts.append(sum_to_shape(piece, ext.shape))
    return parts[1], parts[0], parts[2]


@_helper
def ediff1d_grads(g, ary, to_end=None, to_begin=None):
    """Cotangents of (ary, to_end, to_begin) in np.ediff1d."""
    g = as_array(g)
    nb = size_of(to_begin) if to_begin is not None else 0
    ne = size_of(to_end) if to_end is not None else 0
    mid = g[nb:len(g) - ne]
    g_ary = -np.diff(np.pad(mid, (1, 1)))
    g_begin = np.reshape(g[:nb], np.shape(to_begin)) if to_begin is not None else None
    g_end = np.reshape(g[len(g) - ne:], np.shape(to_end)) if to_end is not None else None
    return np.reshape(g_ary, np.shape(ary)), g_end, g_begin


@_helper
def trapezoid_grads(g, y, x=None, dx=1.0, axis=-1):
    """Cotangents of (y, x, dx) in np.trapezoid (np.trapz).

    The integral is sum_i d_i (y_i + y_(i+1)) / 2 with d_i the interval
    lengths, so y_i's weight is (d_(i-1) + d_i) / 2 and x_j's gradient is the
    difference of neighbouring interval means.
    """
    y = as_array(y)
    ax = axis % y.ndim
    n = y.shape[ax]
    ge = np.expand_dims(as_array(g), ax)
    shape = [1] * y.ndim
    shape[ax] = n - 1
    if x is None:
        d = np.full(shape, dx, dtype=float)
    elif np.ndim(x) == 1:
        d = np.reshape(np.diff(x), shape)
    else:
        d = np.diff(x, axis=ax)
    zero = np.zeros_like(np.take(d, [0], axis=ax))
    weight = (np.concatenate([zero, d], axis=ax) + np.concatenate([d, zero], axis=ax)) / 2.0
    g_y = sum_to_shape(ge * weight, y.shape)
    means = (np.take(y, np.arange(1, n), axis=ax) + np.take(y, np.arange(n - 1), axis=ax)) / 2.0
    g_d = ge * means  # cotangent of each interval length
    g_x = g_dx = None
    if x is None:
        g_dx = np.sum(g_d)
    else:
        width = [(0, 0)] * y.ndim
        width[ax] = (1, 1)
        g_full = -np.diff(np.pad(g_d, width), axis=ax)
        if np.ndim(x) == 1:
            g_x = np.sum(g_full, axis=tuple(i for i in range(g_full.ndim) if i != ax))
        else:
            g_x = sum_to_shape(g_full, np.shape(x))
    return g_y, g_x, g_dx


# -- norms ---------------------------------------------------------------------------------
def _vector_norm_grad(ge, x, ae, ord, axes):
    if ord is None or ord == 2:
        return ge * safe_divide(x, ae)
    if ord == 1:
        return ge * np.sign(x)
    if ord == 0:
        return np.zeros(x.shape, dtype=np.result_type(x, float))
    if ord in (np.inf, -np.inf):
        ax = np.abs(x)
        hit = ax == ae
        count = np.sum(hit, axis=axes, keepdims=True)
        return np.where(hit & (ae != 0), ge * np.sign(x) / np.maximum(count, 1), 0.0)
    p = float(ord)
    if p < 1 and np.any(x == 0):
        raise ValueError(f"the gradient of a vector norm with ord={ord} is undefined at "
                         "zero entries")
    return ge * np.sign(x) * np.abs(x) ** (p - 1) * safe_divide(1.0, ae ** (p - 1))


def _matrix_norm_grad(ge, x, ae, ord, r, c):
    xm = np.moveaxis(x, (r, c), (-2, -1))
    gm = np.moveaxis(ge, (r, c), (-2, -1))[..., :1, :1]
    am = np.moveaxis(ae, (r, c), (-2, -1))[..., :1, :1]
    if ord in (None, "fro"):
        out = gm * safe_divide(xm, am)
    elif ord in (1, -1, np.inf, -np.inf):
        sum_axis = -2 if ord in (1, -1) else -1
        sums = np.sum(np.abs(xm), axis=sum_axis, keepdims=True)
        other = -1 if sum_axis == -2 else -2
        if ord in (1, np.inf):   # (an if, not a function picked: the compiler reads it)
            best = np.max(sums, axis=other, keepdims=True)
        else:
            best = np.min(sums, axis=other, keepdims=True)
        hit = sums == best
        count = np.sum(hit, axis=other, keepdims=True)
        out = gm * np.sign(xm) * hit / count
    elif ord in (2, -2, "nuc"):
        u, s, vt = np.linalg.svd(xm, full_matrices=False)
        tol = np.max(s, axis=-1, keepdims=True) * max(xm.shape[-2:]) * np.finfo(s.dtype).eps
        if ord == "nuc":
            weight = (s > tol).astype(s.dtype)
        else:
            target = s[..., :1] if ord == 2 else s[..., -1:]
            hit = np.abs(s - target) <= tol
            weight = hit / np.sum(hit, axis=-1, keepdims=True)
            if ord == 2:
                weight = np.where(s[..., :1] > 0, weight, 0.0)
        out = gm * ((u * weight[..., None, :]) @ vt)
    else:
        raise ValueError(f"invalid norm order {ord!r} for matrices")
    return np.moveaxis(out, (-2, -1), (r, c))


@_helper
def norm_grad(g, x, ans, ord=None, axis=None, keepdims=False):
    """Cotangent of `x` in np.linalg.norm, for vector and matrix norms.

    At a zero vector or matrix the zero subgradient is taken; ties (ord=inf,
    1 for matrices, 2 with a repeated largest singular value) split g equally.
    """
    x = as_array(x)
    nd = x.ndim
    if axis is None:
        if ord is None:
            axes = tuple(range(nd))
        elif nd == 2:
            axes = (0, 1)
        else:
            axes = (0,)
    elif isinstance(axis, numbers.Integral):
        axes = (int(axis) % nd,)
    else:
        axes = tuple(int(a) % nd for a in axis)
    ge = expand_reduced(g, x, axis=axes, keepdims=keepdims)
    ae = expand_reduced(ans, x, axis=axes, keepdims=keepdims)
    if len(axes) == 2 and not (axis is None and ord is None):
        return _matrix_norm_grad(ge, x, ae, ord, axes[0], axes[1])
    return _vector_norm_grad(ge, x, ae, ord, axes)


@_helper
def vector_norm_grad(g, x, ans, axis=None, keepdims=False, ord=2):
    """Cotangent of `x` in np.linalg.vector_norm (axis=None: all elements, one vector)."""
    x = as_array(x)
    axes = normalize_axes(axis, x.ndim) if x.ndim else ()
    ge = expand_reduced(g, x, axis=axes, keepdims=keepdims)
    ae = expand_reduced(ans, x, axis=axes, keepdims=keepdims)
    return _vector_norm_grad(ge, x, ae, ord, axes)


@_helper
def matrix_norm_grad(g, x, ans, keepdims=False, ord="fro"):
    """Cotangent of `x` in np.linalg.matrix_norm (the last two axes)."""
    x = as_array(x)
    axes = (x.ndim - 2, x.ndim - 1)
    ge = expand_reduced(g, x, axis=axes, keepdims=keepdims)
    ae = expand_reduced(ans, x, axis=axes, keepdims=keepdims)
    return _matrix_norm_grad(ge, x, ae, ord, *axes)


# -- statistics of several variables ---------------------------------------------------
def _cov_rows(m, y, rowvar):
    X = np.atleast_2d(as_array(m, np.result_type(m, np.float64)))
    flip_m = not rowvar and X.shape[0] != 1
    if flip_m:
        X = X.T
    rows_m = X.shape[0]
    flip_y = False
    if y is not None:
        Y = np.atleast_2d(as_array(y, np.result_type(y, np.float64)))
        flip_y = not rowvar and Y.shape[0] != 1
        if flip_y:
            Y = Y.T
        X = np.concatenate([X, Y], axis=0)
    return X, rows_m, flip_m, flip_y


def _cov_back(g_c, X, rows_m, flip_m, flip_y, m, y, fact):
    k = X.shape[0]
    g2 = np.reshape(g_c, (k, k))
    centred = X - np.mean(X, axis=1, keepdims=True)
    gx = (g2 + g2.T) @ centred / fact
    gx = gx - np.mean(gx, axis=1, keepdims=True)
    gm = gx[:rows_m].T if flip_m else gx[:rows_m]
    gy = None
    if y is not None:
        gy = gx[rows_m:].T if flip_y else gx[rows_m:]
        gy = np.reshape(gy, np.shape(y))
    return np.reshape(gm, np.shape(m)), gy


def _cov_fact(X, bias, ddof):
    if ddof is None:
        ddof = 0 if bias else 1
    return X.shape[1] - ddof


@_helper
def cov_grads(g, m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None):
    """Cotangents of (m, y) in np.cov (without frequency or analytic weights)."""
    if fweights is not None or aweights is not None:
        unsupported("np.cov with fweights/aweights")
    X, rows_m, flip_m, flip_y = _cov_rows(m, y, rowvar)
    return _cov_back(g, X, rows_m, flip_m, flip_y, m, y, _cov_fact(X, bias, ddof))


@_helper
def corrcoef_grads(g, x, y=None, rowvar=True):
    """Cotangents of (x, y) in np.corrcoef = cov / sqrt(var_i var_j)."""
    X, rows_m, flip_m, flip_y = _cov_rows(x, y, rowvar)
    fact = _cov_fact(X, False, None)
    centred = X - np.mean(X, axis=1, keepdims=True)
    c = centred @ centred.T / fact
    d = np.sqrt(np.diag(c))
    scale = np.outer(d, d)
    r = c / scale
    k = c.shape[0]
    g2 = np.reshape(as_array(g, dtype=float), (k, k))
    g_c = g2 / scale
    diag = np.sum(g2 * r, axis=1) + np.sum(g2 * r, axis=0)
    g_c = g_c - np.diag(diag / (2.0 * np.diag(c)))
    return _cov_back(g_c, X, rows_m, flip_m, flip_y, x, y, fact)


# -- gathers: functions that only move elements ----------------------------------------
def _gather_vjp(g, build, *inputs):
    """Cotangents of the inputs of a function that only copies elements around.

    `build` is applied to arrays of 1-based element numbers of the inputs
    (0 marks a value the function made up, like padding); every output
    element then names its source, and the cotangent is summed back with
    bincount, so repeated sources accumulate.
    """
    return _summed_back(g, as_array(build(*element_numbers(*inputs))), inputs)


@_helper
def diagonal_entries(a):
    """The index of the entries np.fill_diagonal(a, v) writes (wrap=False): (i, ..., i)
    for i below the shortest side, as an integer array per axis; NumPy's errors."""
    shape = np.shape(a)
    if len(shape) < 2:
        raise ValueError("array must be at least 2-d")
    if len(shape) > 2 and len(set(shape)) != 1:
        raise ValueError("All dimensions of input must be of equal length")
    entries = np.arange(min(shape))
    return (entries,) * len(shape)


def element_numbers(*inputs):
    """Arrays of 1-based element numbers, one of each input's shape (integers: a
    function that only copies elements around, applied to them, says where each
    element of its result came from)."""
    out = []
    start = 1
    for x in inputs:
        n = int(size_of(x))
        out.append(np.arange(start, start + n).reshape(np.shape(x)))
        start += n
    return out


def _summed_back(g, source, inputs):
    """The cotangents of `inputs` (a tuple) where each element of g came from the
    element `source` numbers (see element_numbers): summed back with bincount. Written without a
    function passed in, so that the compiler differentiates it (a gather's
    derivatives of every order)."""
    sizes = [int(size_of(x)) for x in inputs]
    end = 1 + sum(sizes)
    gflat = np.broadcast_to(as_array(g), np.shape(source)).ravel()
    index = np.ravel(source)
    if np.iscomplexobj(gflat):   # (bincount's weights are real)
        total = np.zeros(end, dtype=gflat.dtype)
        np.add.at(total, index, gflat)
    else:
        total = np.bincount(index, weights=gflat, minlength=end)
    dtype = np.result_type(as_array(g).dtype, np.float32)
    out = []
    start = 1
    for x, n in zip(inputs, sizes):
        out.append(total[start:start + n].reshape(np.shape(x)).astype(dtype, copy=False))
        start += n
    return out if len(out) > 1 else out[0]


@_helper
def take_grad(g, a, indices, axis=None, mode="raise"):
    """Cotangent of `a` in np.take (repeated indices accumulate)."""
    return _summed_back(g, np.take(element_numbers(a)[0], indices, axis=axis, mode=mode), (a,))


@_helper
def take_along_axis_grad(g, arr, indices, axis):
    return _summed_back(g, np.take_along_axis(element_numbers(arr)[0], indices, axis), (arr,))


@_helper
def compress_grad(g, condition, a, axis=None):
    return _summed_back(g, np.compress(condition, element_numbers(a)[0], axis=axis), (a,))


@_helper
def extract_grad(g, condition, arr):
    return _summed_back(g, np.extract(condition, element_numbers(arr)[0]), (arr,))


@_helper
def diagonal_grad(g, a, offset=0, axis1=0, axis2=1):
    return _summed_back(g, np.diagonal(element_numbers(a)[0], offset, axis1, axis2), (a,))


@_helper
def trace_grad(g, a, offset=0, axis1=0, axis2=1):
    """Cotangent of `a` in np.trace: g on the chosen diagonal, 0 elsewhere."""
    diag = np.diagonal(as_array(a), offset, axis1, axis2)
    gd = np.broadcast_to(np.expand_dims(as_array(g), -1), diag.shape)
    return diagonal_grad(gd, a, offset, axis1, axis2)


@_helper
def diag_grad(g, v, k=0):
    return _summed_back(g, np.diag(element_numbers(v)[0], k), (v,))


@_helper
def diagflat_grad(g, v, k=0):
    return _summed_back(g, np.diagflat(element_numbers(v)[0], k), (v,))


@_helper
def repeat_grad(g, a, repeats, axis=None):
    return _summed_back(g, np.repeat(element_numbers(a)[0], repeats, axis=axis), (a,))


@_helper
def tile_grad(g, A, reps):
    return _summed_back(g, np.tile(element_numbers(A)[0], reps), (A,))


@_helper
def resize_grad(g, a, new_shape):
    return _summed_back(g, np.resize(element_numbers(a)[0], new_shape), (a,))


@_helper
def delete_grad(g, arr, obj, axis=None):
    return _summed_back(g, np.delete(element_numbers(arr)[0], obj, axis=axis), (arr,))


@_helper
def insert_grads(g, arr, obj, values, axis=None):
    """Cotangents of (arr, values) in np.insert."""
    numbers = element_numbers(arr, values)
    return _summed_back(g, np.insert(numbers[0], obj, numbers[1], axis=axis), (arr, values))


@_helper
def append_grads(g, arr, values, axis=None):
    """Cotangents of (arr, values) in np.append."""
    numbers = element_numbers(arr, values)
    return _summed_back(g, np.append(numbers[0], numbers[1], axis=axis), (arr, values))


PAD_MOVES = ("constant", "edge", "reflect", "symmetric", "wrap")


@_helper
def pad_grads(g, array, pad_width, mode="constant", constant_values=0, reflect_type="even"):
    """Cotangents of (array, constant_values) in np.pad.

    Modes that copy elements ('constant', 'edge', 'reflect', 'symmetric',
    'wrap' with reflect_type='even') are exact; the statistical modes raise.
    """
    if mode not in PAD_MOVES or reflect_type != "even":
        unsupported(f"np.pad with mode={mode!r}, reflect_type={reflect_type!r}")
    if mode == "constant":
        source = np.pad(element_numbers(array)[0], pad_width, constant_values=0)
    else:
        source = np.pad(element_numbers(array)[0], pad_width, mode=mode)
    g_arr = _summed_back(g, source, (array,))
    g_const = None
    if mode == "constant":
        filled = np.pad(np.zeros(np.shape(array), dtype=bool), pad_width, constant_values=True)
        if np.ndim(constant_values) != 0:
            unsupported("np.pad with per-axis constant_values")
        g_const = np.sum(np.where(filled, g, 0.0))
    return g_arr, g_const


@_helper
def unravel(g, a, order="C"):
    """Cotangent of `a` in np.ravel(a, order): the cotangent reshaped back."""
    if order in ("A", "K"):
        a = as_array(a)
        c_order, f_order = bool(a.flags.c_contiguous), bool(a.flags.f_contiguous)
        fortran = f_order and not c_order
        if order == "K" and not (c_order or f_order):
            strides = [s for s, n in zip(a.strides, a.shape) if n > 1]
            if any(s < 0 for s in strides):
                unsupported("np.ravel(order='K') of an array with negative strides")
            if strides == sorted(strides, reverse=True):
                fortran = False
            elif strides == sorted(strides):
                fortran = True
            else:
                unsupported("np.ravel(order='K') of an array with permuted strides")
        order = "F" if fortran else "C"
    return np.reshape(g, np.shape(a), order=order)


# -- joining and splitting --------------------------------------------------------------
def _split_back(g, shapes, axis):
    """Split g along axis into pieces of the given (promoted) shapes."""
    return _pieces(as_array(g), [s[axis] for s in shapes], axis)


def _pieces(g, sizes, axis):
    """np.split(g, cumulative sizes, axis) by slicing: views, in any array library."""
    out, start, index = [], 0, [slice(None)] * g.ndim
    for n in sizes:
        index[axis] = slice(start, start + int(n))
        out.append(g[tuple(index)])
        start += int(n)
    return out


@_helper
def concatenate_grad(g, arrays, axis=0):
    """One cotangent per item of np.concatenate(arrays, axis)."""
    if type(g) is np.ndarray and type(arrays) is list and axis == 0:
        # The usual case (an RNN's np.concatenate([h, x]) once per step): NumPy
        # arrays of g's rank, whose pieces are slices of g as they are.
        out, start = [], 0
        for x in arrays:   # (an item the forward kept only for its shape: an ArrayMeta)
            if type(x) is not np.ndarray and type(x) is not ArrayMeta or x.ndim != g.ndim \
                    or x.ndim == 0 or x.shape[1:] != g.shape[1:]:
                break
            n = x.shape[0]
            out.append(g[start:start + n])
            start += n
        else:
            if start == g.shape[0]:
                return out
    g = as_array(g)
    items = list(arrays)
    if axis is None:
        sizes = [int(size_of(x)) for x in items]
        pieces = _pieces(g.reshape(-1), sizes, 0)
    else:
        shapes = [np.shape(x) for x in items]
        pieces = _split_back(g, shapes, axis % g.ndim)
    out = [np.reshape(p, np.shape(x)) for p, x in zip(pieces, items)]
    return np.stack(out) if isinstance(arrays, np.ndarray) else out


@_helper
def index_concat(maker, *items):
    """np.r_[items] or np.c_[items] (maker) as a call: a normal-form operation."""
    return maker[items]


@_helper
def index_concat_linear(maker, items, values):
    """maker[...] with `values` in the items' places (None: zeros) and zeros for the
    slices' made-up values: np.r_/np.c_'s tangent, and the transpose of its
    cotangents (both are the same linear map)."""
    parts = []
    for x, v in zip(items, values):
        if isinstance(x, str):
            parts.append(x)
        elif isinstance(x, slice):
            parts.append(np.zeros(np.shape(np.r_[x])))
        else:
            parts.append(np.zeros(np.shape(x)) if v is None else v)
    return maker[tuple(parts)]


@_helper
def index_concat_grads(g, maker, items):
    """One cotangent per item of np.r_[items] / np.c_[items]; None for the slices and
    directive strings, whose values are made up (numbered 0 for the gather)."""
    moved = [i for i, x in enumerate(items) if not isinstance(x, (str, slice))]

    def build(*numbers):
        parts = list(items)
        for i, x in enumerate(items):
            if isinstance(x, slice):
                parts[i] = np.zeros(np.shape(np.r_[x]), dtype=np.intp)
        for i, n in zip(moved, numbers):
            parts[i] = n
        return maker[tuple(parts)]
    grads = _gather_vjp(g, build, *[items[i] for i in moved]) if moved else []
    grads = grads if len(moved) != 1 else [grads]
    out = [None] * len(items)
    for i, gi in zip(moved, grads):
        out[i] = gi
    return out


@_helper
def stack_grad(g, arrays, axis=0):
    """One cotangent per item of np.stack(arrays, axis)."""
    g = as_array(g)
    if isinstance(arrays, np.ndarray):
        return np.moveaxis(g, axis, 0)
    return [np.reshape(np.take(g, i, axis=axis), np.shape(x)) for i, x in enumerate(arrays)]


def _joined_grad(g, arrays, promote, axis):
    items = list(arrays)
    shapes = [np.shape(promote(np.empty(np.shape(x), dtype=bool))) for x in items]
    pieces = _split_back(g, shapes, axis)
    out = [np.reshape(p, np.shape(x)) for p, x in zip(pieces, items)]
    return np.stack(out) if isinstance(arrays, np.ndarray) else out


@_helper
def vstack_grad(g, tup):
    return _joined_grad(g, tup, np.atleast_2d, 0)


@_helper
def hstack_grad(g, tup):
    first = np.atleast_1d(np.empty(np.shape(tup[0]), dtype=bool))
    return _joined_grad(g, tup, np.atleast_1d, 0 if first.ndim == 1 else 1)


@_helper
def dstack_grad(g, tup):
    return _joined_grad(g, tup, np.atleast_3d, 2)


@_helper
def column_stack_grad(g, tup):
    def promote(x):
        return x.reshape(-1, 1) if x.ndim < 2 else x
    return _joined_grad(g, tup, promote, 1)


@_helper
def array_grad(g, object, ans=None):  # noqa: A002 - NumPy's parameter name
    """One cotangent per item of np.array([...]) (or the array's, for an array)."""
    g = as_array(g)
    if ans is not None and not np.issubdtype(as_array(ans).dtype, np.inexact):
        g = np.zeros(g.shape)
    if isinstance(object, (list, tuple)):
        if not object:
            return []
        g = np.reshape(g, (len(object),) + np.shape(object[0]))  # undo ndmin
        return split_as_items(g, object)
    return np.reshape(g, np.shape(object))



@_helper
def atleast_grad(g, arys):
    """Cotangents of np.atleast_1d/2d/3d: reshape back to each input's shape."""
    if len(arys) == 1:
        return [np.reshape(g, np.shape(arys[0]))]
    return [np.reshape(gi, np.shape(x)) for gi, x in zip(g, arys)]


@_helper
def broadcast_arrays_grad(g, args):
    return [unbroadcast(gi, x) for gi, x in zip(g, args)]


@_helper
def meshgrid_grad(g, xi, indexing="xy", sparse=False):
    """One cotangent per input of np.meshgrid: sum over the axes it is repeated along."""
    n = len(xi)
    out = []
    for i, (gi, x) in enumerate(zip(g, xi)):
        axis = i
        if indexing == "xy" and n > 1 and i < 2:
            axis = 1 - i
        gi = as_array(gi)
        other = tuple(a for a in range(gi.ndim) if a != axis)
        out.append(np.reshape(np.sum(gi, axis=other), np.shape(x)))
    return out


@_helper
def select_grads(g, condlist, choicelist, default=0):
    """Cotangents of (choicelist items, default) in np.select: the first true condition."""
    g = as_array(g)
    taken = np.zeros(g.shape, dtype=bool)
    grads = []
    for cond, choice in zip(condlist, choicelist):
        cond = np.broadcast_to(cond, g.shape)
        pick = cond & ~taken
        taken = taken | cond
        grads.append(unbroadcast(np.where(pick, g, 0.0), choice))
    return grads, unbroadcast(np.where(taken, 0.0, g), default)


@_helper
def rollaxis_grad(g, a, axis, start=0):
    nd = np.ndim(a)
    axis = axis % nd
    start = start + nd if start < 0 else start
    perm = list(range(nd))
    if axis < start:
        start -= 1
    if axis != start:
        perm.remove(axis)
        perm.insert(start, axis)
    return np.transpose(g, _inverse(perm))


@_helper
def sort_grad(g, a, axis=-1):
    """Cotangent of `a` in np.sort: each sorted value's cotangent goes back to where
    it came from (equal values are told apart by a stable sort)."""
    a = as_array(a)
    if axis is None:
        order = np.argsort(a.ravel(), kind="stable")
        out = np.zeros(a.size, dtype=np.result_type(as_array(g), np.float32))
        out[order] = as_array(g)
        return out.reshape(a.shape)
    order = np.argsort(a, axis=axis, kind="stable")
    return _placed_back(as_array(g), order, axis)


def _placed_back(values, order, axis):
    """values[..., i] put where order[..., i] says along axis (the transpose of
    np.take_along_axis(x, order, axis) for a permutation `order`), as a gather by the
    inverse permutation, made of integers: the compiler differentiates the gather
    (derivatives of every order), not a np.put_along_axis of values."""
    inverse = np.empty_like(order)
    shape = [1] * order.ndim
    shape[axis] = order.shape[axis]
    ranks = np.broadcast_to(np.arange(order.shape[axis]).reshape(shape), order.shape)
    np.put_along_axis(inverse, order, ranks, axis=axis)
    return np.take_along_axis(values, inverse, axis=axis)


@_helper
def item_grad(g, a, args):
    """Cotangent of `a` in a.item(*args): g at that element, zeros elsewhere."""
    a = as_array(a)
    dtype = np.result_type(a, np.float32)
    if len(args) == 1:   # a flat index (an item write into a new array, not `.flat`)
        flat = np.zeros(size_of(a), dtype=dtype)
        flat[args[0]] = g
        return flat.reshape(a.shape)
    out = np.zeros(a.shape, dtype=dtype)
    if args:
        out[tuple(args)] = g
    else:
        out[...] = g
    return out


@_helper
def astype_grad(g, x, dtype):
    """Cotangent through a.astype(dtype): 0 for an integer or boolean dtype; a real
    `a` cast to a complex dtype takes the real part of its cotangent."""
    if not np.issubdtype(np.dtype(dtype), np.inexact):
        return np.zeros(np.shape(x))
    g = as_array(g)
    if not np.iscomplexobj(x):
        g = np.real(g) if np.iscomplexobj(g) else g
    return g.astype(np.result_type(x, np.float32), copy=False)


# -- constructors whose values depend on their arguments -------------------------------
@_helper
def fill_grad(g, fill_value, ans):
    """Cotangent of fill_value in np.full / np.full_like."""
    return unbroadcast(zero_unless_float(as_array(g), ans), fill_value)


def _linspace_steps(num, endpoint):
    div = (num - 1) if endpoint else num
    return np.arange(num) / div if div > 0 else np.zeros(num)


@_helper
def linspace_grads(g, start, stop, num=50, endpoint=True, retstep=False, axis=0, ans=None):
    """Cotangents of (start, stop) in np.linspace: start + t (stop - start)."""
    g_step = None
    if retstep:
        g, g_step = g[0], g[1]
        ans = ans[0]
    g = zero_unless_float(as_array(g), ans)
    g = np.moveaxis(g, axis, 0)
    t = _linspace_steps(num, endpoint).reshape((-1,) + (1,) * (g.ndim - 1))
    g_start = np.sum(g * (1 - t), axis=0)
    g_stop = np.sum(g * t, axis=0)
    if g_step is not None:
        div = (num - 1) if endpoint else num
        if div > 0:
            g_start = g_start - as_array(g_step) / div
            g_stop = g_stop + as_array(g_step) / div
    return unbroadcast(g_start, start), unbroadcast(g_stop, stop)


@_helper
def logspace_grads(g, start, stop, num=50, endpoint=True, base=10.0, axis=0, ans=None):
    """Cotangents of (start, stop, base) in np.logspace: base ** linspace(start, stop)."""
    g = zero_unless_float(as_array(g), ans)
    gy = np.moveaxis(g * ans, axis, 0)
    t = _linspace_steps(num, endpoint).reshape((-1,) + (1,) * (gy.ndim - 1))
    log_base = np.log(base)
    g_start = unbroadcast(np.sum(gy * (1 - t), axis=0) * log_base, start)
    g_stop = unbroadcast(np.sum(gy * t, axis=0) * log_base, stop)
    exponent = np.moveaxis(np.log(as_array(ans)) / log_base, axis, 0)
    g_base = unbroadcast(np.sum(gy * exponent, axis=0) / base, base)
    return g_start, g_stop, g_base


@_helper
def geomspace_grads(g, start, stop, num=50, endpoint=True, axis=0, ans=None):
    """Cotangents of (start, stop) in np.geomspace: start (stop / start) ** t."""
    g = zero_unless_float(as_array(g), ans)
    gy = np.moveaxis(g * ans, axis, 0)
    t = _linspace_steps(num, endpoint).reshape((-1,) + (1,) * (gy.ndim - 1))
    g_start = unbroadcast(np.sum(gy * (1 - t), axis=0) / as_array(start), start)
    g_stop = unbroadcast(np.sum(gy * t, axis=0) / as_array(stop), stop)
    return g_start, g_stop


@_helper
def arange_grads(g, start=None, stop=None, step=None, ans=None):
    """Cotangents of (start, stop, step) in np.arange: values start + i * step.

    The number of values changes only by jumps, so stop's gradient is 0.
    """
    g = zero_unless_float(as_array(g), ans)
    if stop is None:  # np.arange(stop): the only argument bound to `start`
        return np.zeros(()), None, None
    i = np.arange(g.shape[0])
    g_step = np.sum(g * i) if step is not None else None
    return np.sum(g), np.zeros(()), g_step


# -- interpolation and polynomials ---------------------------------------------------------
@_helper
def interp_grads(g, x, xp, fp, left=None, right=None, period=None):
    """Cotangents of (x, xp, fp, left, right) in np.interp.

    At a knot the slope of the segment to its right is taken (at the last
    knot, the segment to its left); outside [xp[0], xp[-1]] the value is
    constant.
    """
    if period is not None:
        unsupported("np.interp with period=")
    xp = as_array(xp)
    fp = as_array(fp)
    n = len(xp)
    if n < 2:
        unsupported("np.interp with fewer than two points")
    xa = as_array(x)
    g = np.broadcast_to(as_array(g), xa.shape)
    idx = np.clip(np.searchsorted(xp, xa, side="right") - 1, 0, n - 2)
    x0, x1 = xp[idx], xp[idx + 1]
    span = x1 - x0
    t = (xa - x0) / span
    slope = (fp[idx + 1] - fp[idx]) / span
    below = xa < xp[0]
    above = xa > xp[-1]
    inside = ~below & ~above
    gin = np.where(inside, g, 0.0)
    g_x = gin * slope
    g_fp = np.zeros(n)
    np.add.at(g_fp, idx, gin * (1 - t))
    np.add.at(g_fp, idx + 1, gin * t)
    g_xp = np.zeros(n)
    np.add.at(g_xp, idx, -gin * slope * (1 - t))
    np.add.at(g_xp, idx + 1, -gin * slope * t)
    g_below = np.sum(np.where(below, g, 0.0))
    g_above = np.sum(np.where(above, g, 0.0))
    g_left = g_right = None
    if left is None:
        g_fp[0] += g_below
    else:
        g_left = g_below
    if right is None:
        g_fp[-1] += g_above
    else:
        g_right = g_above
    return g_x, g_xp, g_fp, g_left, g_right


@_helper
def polyval_grads(g, p, x):
    """Cotangents of (p, x) in np.polyval (p highest power first)."""
    n = len(p)
    xa = as_array(x)
    g = as_array(g)
    g_p = [unbroadcast(g * xa ** (n - 1 - k), as_array(p[k])) for k in range(n)]
    deriv = 0.0
    for k in range(n - 1):
        deriv = deriv * xa + as_array(p[k]) * (n - 1 - k)
    g_x = unbroadcast(g * deriv, xa)
    if isinstance(p, np.ndarray):
        g_p = np.stack([as_array(gk) for gk in g_p])
    return g_p, g_x


@_helper
def vander_slopes(x, N=None, increasing=False):
    """d np.vander(x, N, increasing) / dx, column by column: p x^(p-1) for the power p
    of the column (0 where p = 0), from the Vandermonde matrix one degree lower (so that
    its own derivatives are vander's again, to any order)."""
    x = as_array(x)
    n = x.shape[0] if N is None else N
    rows = x.shape[0]
    if n == 0:
        return np.zeros((rows, 0), dtype=np.result_type(x, np.float64))
    lower = np.vander(x, n - 1, increasing=True) * np.arange(1, n)
    slopes = np.concatenate([np.zeros((rows, 1), dtype=np.result_type(lower, np.float64)),
                             lower], axis=1)
    return slopes if increasing else slopes[:, ::-1]


@_helper
def polynomial_polyval_grads(g, x, c):
    """Cotangents of (x, c) in np.polynomial.polynomial.polyval: np.polyval's with the
    coefficients lowest power first (numbers: an array of coefficient arrays is its
    tensor product, refused)."""
    if np.ndim(c) != 1:
        unsupported("np.polynomial.polynomial.polyval with coefficients that are arrays")
    g_c, g_x = polyval_grads(g, c[::-1], x)
    return g_x, g_c[::-1]


def _convolve_back(g, a, v, mode):
    na, nv = len(a), len(v)
    full = na + nv - 1
    start = {"full": 0, "same": (min(na, nv) - 1) // 2, "valid": min(na, nv) - 1}[mode]
    padded = np.zeros(full, dtype=np.result_type(as_array(g), np.float32))
    padded[start:start + len(g)] = g
    return np.correlate(padded, v, "valid"), np.correlate(padded, a, "valid")


@_helper
def convolve_grads(g, a, v, mode="full"):
    """Cotangents of (a, v) in np.convolve."""
    return _convolve_back(as_array(g), as_array(a), as_array(v), mode)


@_helper
def correlate_grads(g, a, v, mode="valid"):
    """Cotangents of (a, v) in np.correlate, via convolution with a reversed kernel."""
    a, v, g = as_array(a), as_array(v), as_array(g)
    if len(a) >= len(v):
        ga, gw = _convolve_back(g, a, v[::-1], mode)
        return ga, gw[::-1]
    gv, gr = _convolve_back(g[::-1], v, a[::-1], mode)
    return gr[::-1], gv


# -- products ------------------------------------------------------------------------------
@_helper
def inner_grad_a(g, a, b):
    """The cotangent of a in np.inner (a sum over the last axes). One helper per
    operand, plain NumPy: only the operands differentiated are computed, and the
    compiler differentiates each again (derivatives of every order)."""
    a, b, g = as_array(a), as_array(b), as_array(g)
    if a.ndim == 0 or b.ndim == 0:
        return unbroadcast(g * b, a)
    na, nb = a.ndim - 1, b.ndim - 1
    return np.tensordot(g, b, axes=(list(range(na, na + nb)), list(range(nb))))


@_helper
def inner_grad_b(g, a, b):
    """The cotangent of b in np.inner."""
    a, b, g = as_array(a), as_array(b), as_array(g)
    if a.ndim == 0 or b.ndim == 0:
        return unbroadcast(g * a, b)
    na = a.ndim - 1
    return np.moveaxis(np.tensordot(a, g, axes=(list(range(na)), list(range(na)))), 0, -1)


def _tensordot_axes(axes, nda, ndb):
    if isinstance(axes, numbers.Integral):
        ax_a = list(range(nda - axes, nda))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, numbers.Integral) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, numbers.Integral) else list(ax_b)
    return [int(i) % nda for i in ax_a], [int(j) % ndb for j in ax_b]


def _tensordot_orders(axes, nda, ndb):
    """(free axes of a, of b, a's axes in the order g and b give them, b's in the
    order a and g give them) for np.tensordot(a, b, axes)."""
    ax_a, ax_b = _tensordot_axes(axes, nda, ndb)
    free_a = [i for i in range(nda) if i not in ax_a]
    free_b = [j for j in range(ndb) if j not in ax_b]
    order_a = free_a + [ax_a[ax_b.index(j)] for j in sorted(ax_b)]
    order_b = [ax_b[ax_a.index(i)] for i in sorted(ax_a)] + free_b
    return free_a, free_b, order_a, order_b


@_helper
def tensordot_grad_a(g, a, b, axes=2):
    """The cotangent of a in np.tensordot (one helper per operand, as inner's)."""
    a, b, g = as_array(a), as_array(b), as_array(g)
    free_a, free_b, order_a, _ = _tensordot_orders(axes, a.ndim, b.ndim)
    nfa = len(free_a)
    return np.transpose(np.tensordot(g, b, axes=(list(range(nfa, g.ndim)), free_b)),
                        _inverse(order_a))


@_helper
def tensordot_grad_b(g, a, b, axes=2):
    """The cotangent of b in np.tensordot."""
    a, b, g = as_array(a), as_array(b), as_array(g)
    free_a, _, _, order_b = _tensordot_orders(axes, a.ndim, b.ndim)
    nfa = len(free_a)
    return np.transpose(np.tensordot(a, g, axes=(free_a, list(range(nfa)))),
                        _inverse(order_b))


def kron_shapes(a, b):
    """(a's shape and b's, padded with ones to the same length, and that length)."""
    nd = max(np.ndim(a), np.ndim(b))
    return (1,) * (nd - np.ndim(a)) + np.shape(a), (1,) * (nd - np.ndim(b)) + np.shape(b), nd


@_helper
def kron_grad_a(g, a, b):
    """The cotangent of a in np.kron: g's blocks, each weighed by b."""
    return _kron_contracted(g, a, b, 1)


@_helper
def kron_grad_b(g, a, b):
    """The cotangent of b in np.kron: g's blocks weighed by a's entries, summed."""
    return _kron_contracted(g, a, b, 0)


def _kron_contracted(g, a, b, first):
    """g as blocks (a's axes interleaved with b's) contracted with b over b's axes
    (first = 1: a's cotangent) or with a over a's (first = 0: b's)."""
    a, b, g = as_array(a), as_array(b), as_array(g)
    sa, sb, nd = kron_shapes(a, b)
    blocks = np.reshape(g, [n for pair in zip(sa, sb) for n in pair])
    other, shape = (np.reshape(b, sb), np.shape(a)) if first else (np.reshape(a, sa),
                                                                   np.shape(b))
    return np.reshape(np.tensordot(blocks, other, axes=(list(range(first, 2 * nd, 2)),
                                                        list(range(nd)))), shape)


_LETTERS = string.ascii_uppercase + string.ascii_lowercase


def _sublist(sub):
    return "".join("..." if s is Ellipsis else _LETTERS[s] for s in sub)


def _einsum_spec(operands):
    """Input labels per array operand (ellipses expanded), output labels, arrays,
    their positions in `operands`, and letters still free."""
    if isinstance(operands[0], str):
        subscripts = operands[0].replace(" ", "")
        arrays = list(operands[1:])
        positions = list(range(1, len(operands)))
    else:  # interleaved: op0, sublist0, op1, sublist1, ..., [output sublist]
        arrays = list(operands[0::2])
        subs = list(operands[1::2])
        out = None
        if len(operands) % 2 == 1:
            out = operands[-1]
            arrays = arrays[:-1]
        positions = [2 * i for i in range(len(arrays))]
        subscripts = ",".join(_sublist(s) for s in subs)
        if out is not None:
            subscripts += "->" + _sublist(out)
    ins, _, out = subscripts.partition("->")
    explicit = "->" in subscripts
    specs = ins.split(",")
    if len(specs) != len(arrays):
        raise ValueError(f"einsum subscripts {subscripts!r} do not match {len(arrays)} operands")
    used = {c for c in subscripts if c.isalpha()}
    free = [c for c in _LETTERS if c not in used]
    ell_len = max([np.ndim(x) - len(s) + 3 for s, x in zip(specs, arrays) if "..." in s],
                  default=0)
    ell = [free.pop(0) for _ in range(ell_len)]
    labels = []
    for spec, x in zip(specs, arrays):
        if "..." in spec:
            pre, post = spec.split("...")
            k = np.ndim(x) - len(pre) - len(post)
            labels.append(list(pre) + ell[ell_len - k:] + list(post))
        else:
            labels.append(list(spec))
    if explicit:
        if "..." in out:
            pre, post = out.split("...")
            out_labels = list(pre) + ell + list(post)
        else:
            out_labels = list(out)
    else:
        counts = Counter(c for s in specs for c in s if c.isalpha())
        out_labels = ell + sorted(c for c, n in counts.items() if n == 1)
    return labels, out_labels, arrays, positions, free


# einsum's cotangents are einsums again, written so that the compiler differentiates
# them like any helper (every order from this one definition): the arrays as one list
# (`einsum_list`, since the compiler differentiates no call with *args), the label
# bookkeeping in helpers without a gradient (`einsum_form`, `einsum_operand_plan`).
@_helper
def einsum_list(subscripts, operands):
    """np.einsum(subscripts, *operands): einsum with its arrays as one list."""
    return np.einsum(subscripts, *operands)


# The labels' bookkeeping of an einsum, by its subscripts and its operands' shapes: an
# einsum in a loop, and each of its cotangents, would read its subscripts again each step.
_EINSUM_PLANS: dict = {}


def _einsum_memo(key, make):
    plan = _EINSUM_PLANS.get(key)
    if plan is None:
        if len(_EINSUM_PLANS) > 512:
            _EINSUM_PLANS.clear()
        plan = _EINSUM_PLANS[key] = make()
    return plan


def _einsum_key(operands) -> tuple:
    return tuple(x if type(x) is str else ("sublist", tuple(x)) if type(x) in (list, tuple)
                 else np.shape(x) for x in operands)


@_helper
def einsum_form(operands):
    """(subscripts, positions of the arrays in `operands`) of np.einsum's arguments,
    in either form (interleaved sublists become letters). No gradient: strings."""
    def make():
        labels, out_labels, _, positions, _ = _einsum_spec(operands)
        return (",".join("".join(ls) for ls in labels) + "->" + "".join(out_labels),
                tuple(positions))
    subscripts, positions = _einsum_memo(("form",) + _einsum_key(operands), make)
    return subscripts, list(positions)


@_helper
def einsum_operand_plan(subscripts, operands, k):
    """(spec, others, extras) for the cotangent of operands[k] of
    einsum_list(subscripts, operands): einsum_list(spec, [g] + [operands[j] for j
    in others] + extras), where the constant `extras` sum over a broadcast axis
    (ones of 1), put a repeated label's gradient on the diagonal (an identity) or
    spread it along a label only operands[k] has (ones, read-only). No gradient: labels."""
    spec, others, extras = _einsum_memo(
        ("plan", subscripts, k) + _einsum_key(operands),
        lambda: _einsum_operand_plan(subscripts, operands, k))
    return spec, list(others), list(extras)


def _einsum_operand_plan(subscripts, operands, k):
    labels, out_labels, arrays, _, free = _einsum_spec((subscripts,) + tuple(operands))
    sizes = {}
    for ls, x in zip(labels, arrays):
        for c, n in zip(ls, np.shape(x)):
            sizes[c] = max(sizes.get(c, 1), n)
    fresh = iter(free)
    present = set(out_labels)
    # the size each label has in what the cotangent's einsum reads (g has the
    # broadcast sizes of the output's labels)
    given = {c: sizes[c] for c in out_labels}
    for j, ls in enumerate(labels):
        if j != k:
            present.update(ls)
            for c, n in zip(ls, np.shape(arrays[j])):
                given[c] = max(given.get(c, 1), n)
    target, extra_specs, extras, seen = [], [], [], set()
    for c, n in zip(labels[k], np.shape(arrays[k])):
        if n == 1 and sizes[c] > 1:  # broadcast along c: sum over it
            f = next(fresh)
            target.append(f)
            extra_specs.append(f)
            extras.append(np.ones(1))
        elif c in seen:  # repeated label: the gradient lives on the diagonal
            f = next(fresh)
            target.append(f)
            extra_specs.append(c + f)
            extras.append(np.eye(n))
        else:
            seen.add(c)
            target.append(c)
            if c not in present or given[c] < n:
                # summed within this operand only, or the others have it of size 1
                # (broadcast to this operand's): ones give the cotangent its length
                extra_specs.append(c)
                extras.append(np.ones(n))
    specs = ["".join(out_labels)] + ["".join(ls) for j, ls in enumerate(labels) if j != k]
    others = tuple(j for j in range(len(labels)) if j != k)
    for e in extras:
        e.flags.writeable = False   # (kept for the next call of this plan)
    return ",".join(specs + extra_specs) + "->" + "".join(target), others, tuple(extras)


@_helper
def einsum_operand_grad(g, subscripts, operands, k):
    """The cotangent of operands[k] of einsum_list(subscripts, operands): one more
    einsum, of g and the other operands."""
    spec, others, extras = einsum_operand_plan(subscripts, operands, k)
    ops = [g]
    for j in others:
        ops.append(operands[j])
    for e in extras:
        ops.append(e)
    return einsum_list(spec, ops)


@_helper
def einsum_list_grads(g, subscripts, operands):
    """The cotangent of every operand of einsum_list (for a list not written out)."""
    return [einsum_operand_grad(g, subscripts, operands, k) for k in range(len(operands))]


@_helper
def einsum_item_grad(g, operands, item):
    """The cotangent of the argument at position `item` (an array) of np.einsum."""
    subscripts, positions = einsum_form(operands)
    arrays = [operands[p] for p in positions]
    return einsum_operand_grad(g, subscripts, arrays, positions.index(item))


@_helper
def einsum_grads(g, operands):
    """One cotangent per argument of np.einsum (None for the subscripts): for
    arguments not written out as a list, `np.einsum(*args)`."""
    _, positions = einsum_form(operands)
    return [einsum_item_grad(g, operands, j) if j in positions else None
            for j in range(len(operands))]


@_helper
def einsum_list_jvp(subscripts, operands, tangents):
    """The tangent of einsum_list: one einsum per operand with a tangent, that
    operand replaced by it (multilinear); a None tangent is a constant operand."""
    total = None
    for k in range(len(operands)):
        if tangents[k] is not None:
            ops = [tangents[k] if j == k else operands[j] for j in range(len(operands))]
            term = einsum_list(subscripts, ops)
            total = term if total is None else total + term
    return total


@_helper
def multi_dot_grads(g, arrays):
    """One cotangent per matrix of np.linalg.multi_dot."""
    mats = [as_array(x) for x in arrays]
    first_vec, last_vec = mats[0].ndim == 1, mats[-1].ndim == 1
    if first_vec:
        mats[0] = mats[0][None, :]
    if last_vec:
        mats[-1] = mats[-1][:, None]
    G = as_array(g).reshape(mats[0].shape[0], mats[-1].shape[1])
    out = []
    for i in range(len(mats)):
        grad = G
        if i + 1 < len(mats):
            after = mats[i + 1]
            for m in mats[i + 2:]:
                after = after @ m
            grad = grad @ after.T
        if i > 0:
            before = mats[0]
            for m in mats[1:i]:
                before = before @ m
            grad = before.T @ grad
        out.append(grad.reshape(np.shape(arrays[i])))
    return out


@_helper
def cross_grads(g, a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cotangents of (a, b) in np.cross for 3-vectors: b x g and g x a."""
    if axis is not None:
        axisa = axisb = axisc = axis
    am = np.moveaxis(as_array(a), axisa, -1)
    bm = np.moveaxis(as_array(b), axisb, -1)
    if am.shape[-1] != 3 or bm.shape[-1] != 3:
        unsupported("np.cross of 2-vectors")
    gm = np.moveaxis(as_array(g), axisc, -1)
    ga = sum_to_shape(np.cross(bm, gm), am.shape)
    gb = sum_to_shape(np.cross(gm, am), bm.shape)
    return np.moveaxis(ga, -1, axisa), np.moveaxis(gb, -1, axisb)


# -- linear algebra ------------------------------------------------------------------------
@_helper
def solve_grads(g, a, b, ans):
    """Cotangents of (a, b) in np.linalg.solve: b_bar = solve(a.T, g), a_bar = -b_bar x.T."""
    a, g, x = as_array(a), as_array(g), as_array(ans)
    vector = np.ndim(b) == 1 if NUMPY2 else np.ndim(b) == a.ndim - 1
    if vector:
        gb = np.linalg.solve(_T(a), g[..., None])[..., 0]
        ga = -gb[..., :, None] * x[..., None, :]
    else:
        gb = np.linalg.solve(_T(a), g)
        ga = -gb @ _T(x)
    return unbroadcast(ga, a), unbroadcast(gb, b)


@_helper
def det_grad(g, a):
    """Cotangent of `a` in np.linalg.det: g times the cofactor matrix.

    The cofactors come from an SVD with products of the *other* singular
    values, so singular matrices (where inv(a) does not exist) are exact too.
    """
    u, s, vt = np.linalg.svd(as_array(a))
    phase = np.linalg.det(u) * np.linalg.det(vt)
    products = _exclusive_products(s, -1)[..., None, :]
    if np.iscomplexobj(u):   # a = U S V^H: the cofactors are det(U V^H) conj(U) P conj(V^H)
        cof = phase[..., None, None] * ((np.conj(u) * products) @ np.conj(vt))
    else:   # (phase is +-1; its real part, since the compiler sees both branches)
        cof = np.sign(np.real(phase))[..., None, None] * ((u * products) @ vt)
    return as_array(g)[..., None, None] * cof


@_helper
def slogdet_grad(g, a):
    """Cotangent of `a` in np.linalg.slogdet: logdet_bar * inv(a).T (sign has none)."""
    return as_array(g[1])[..., None, None] * _T(np.linalg.inv(a))


def _lower_triangle_grad(sym, lower=True):
    """Gradient w.r.t. an input of which only one triangle is read (cholesky, eigh)."""
    eye = np.eye(sym.shape[-1], dtype=bool)
    tri = np.tril(2 * sym) if lower else np.triu(2 * sym)
    return np.where(eye, sym, tri)


@_helper
def cholesky_grad(g, L, upper=False):
    """Cotangent of `a` in np.linalg.cholesky (which reads one triangle of `a`)."""
    g = as_array(g)
    if upper:
        L, g = _T(L), _T(g)
    g = np.tril(g)
    phi = np.tril(_T(L) @ g)
    n = L.shape[-1]
    phi = phi - 0.5 * phi * np.eye(n)
    inv = np.linalg.inv(L)
    s = _T(inv) @ phi @ inv
    sym = 0.5 * (s + _T(s))
    return _lower_triangle_grad(sym, lower=not upper)


def clusters(values, tol):
    """Label runs of (sorted) values closer than tol: equal labels = repeated values."""
    return np.concatenate([[0], np.cumsum(np.abs(np.diff(values)) > tol)])


def cluster_mean(gv, labels):
    """Replace each entry by the mean over its cluster (ties split equally)."""
    out = np.array(gv, dtype=float)
    for c in np.unique(labels):
        members = labels == c
        out[members] = np.mean(out[members])
    return out


def degenerate_pairs(labels):
    same = labels[:, None] == labels[None, :]
    return same & ~np.eye(len(labels), dtype=bool)


def _gauge_check(inner, degenerate, what, phases=True):
    """Refuse a cotangent that depends on the arbitrary basis of repeated values
    (and, for complex vectors, on the phase each vector is returned with): the
    loss is invariant exactly when `inner` is Hermitian on those entries."""
    anti = inner - np.conj(inner.T)
    scale = np.max(np.abs(inner)) if inner.size else 0.0
    if np.any(np.abs(anti[degenerate]) > 1e-8 * scale + 1e-300):
        raise np.linalg.LinAlgError(
            f"the gradient of {what} is undefined: repeated values make the vectors "
            "non-unique, and the result depends on their choice")
    if phases and np.iscomplexobj(inner) and np.any(np.abs(np.imag(np.diagonal(inner))) >
                                         1e-8 * scale + 1e-300):
        raise np.linalg.LinAlgError(
            f"the gradient of {what} is undefined: complex vectors are returned with an "
            "arbitrary phase each, and the result depends on it (a loss of |v|, v v^H, or "
            "the values is defined)")


def _eigh_back(w, v, gw, gv, what):
    """Hermitian (for real input: symmetric) cotangent of the input of a Hermitian
    eigendecomposition A = V diag(w) V^H: conj(V) (diag(gw) + F * V^T gv) V^T,
    F the reciprocal gaps, made Hermitian (only one triangle of A is read)."""
    batch = w.shape[:-1]
    n = w.shape[-1]
    out = np.zeros_like(v, shape=batch + (n, n))   # (complex where v is)
    for idx in np.ndindex(batch):
        wi, vi = w[idx], v[idx]
        tol = np.max(np.abs(wi), initial=0.0) * n * np.finfo(wi.dtype).eps * 10
        labels = clusters(wi, tol)
        degenerate = degenerate_pairs(labels)
        # (the values are real: the real part of their cotangent is what pairs with them)
        middle = np.diag(cluster_mean(np.real(gw[idx]), labels))
        if gv is not None:
            inner = vi.T @ gv[idx]
            _gauge_check(inner, degenerate, what)
            gap = wi[None, :] - wi[:, None]
            off = ~np.eye(n, dtype=bool) & ~degenerate
            f = np.where(off, 1.0 / np.where(off, gap, 1.0), 0.0)
            middle = middle + f * inner
        a_bar = np.conj(vi) @ middle @ vi.T
        out[idx] = 0.5 * (a_bar + np.conj(a_bar.T))
    return out


@_helper
def eigh_grad(g, a, ans, UPLO="L"):
    """Cotangent of `a` in np.linalg.eigh (reads one triangle of `a`).

    Repeated eigenvalues: their cotangents are averaged (ties split equally);
    eigenvectors of a repeated eigenvalue are not unique, so a cotangent that
    depends on their choice raises LinAlgError.
    """
    w, v = as_array(ans[0]), as_array(ans[1])
    sym = _eigh_back(w, v, as_array(g[0]), as_array(g[1]), "np.linalg.eigh")
    return _lower_triangle_grad(sym, lower=UPLO.upper() == "L")


@_helper
def eigvalsh_grad(g, a, UPLO="L"):
    """Cotangent of `a` in np.linalg.eigvalsh (repeated eigenvalues: averaged)."""
    w, v = np.linalg.eigh(a, UPLO=UPLO)
    sym = _eigh_back(w, v, np.broadcast_to(as_array(g), w.shape), None,
                     "np.linalg.eigvalsh")
    return _lower_triangle_grad(sym, lower=UPLO.upper() == "L")


def counted_values(values, tol, labels, signed_zero=False):
    """Which singular values get their cotangent or tangent: those above `tol`, and
    with `signed_zero` a zero one alone in its cluster (see _singular_values_back)."""
    return (values > tol) | (signed_zero & (np.bincount(labels)[labels] == 1))


def _singular_values_back(u, s, vt, gs, signed_zero=False):
    """conj(U diag(gs) V^H) with repeated singular values averaged and zero ones given
    0 (the conjugate: a complex cotangent pairs with the change unconjugated).

    `signed_zero` (the singular vectors are results too): a simple zero singular value
    takes the slope of its signed continuation, u^H dA v, the one its singular vectors'
    derivatives follow, so that U S V^H, the cofactors and other smooth functions of the
    three are exact at a rank-deficient matrix (s alone is |u^H dA v| there: a kink)."""
    out = np.zeros_like(u, shape=u.shape[:-2] + (u.shape[-2], vt.shape[-1]))
    for idx in np.ndindex(s.shape[:-1]):
        si = s[idx]
        tol = np.max(si, initial=0.0) * max(out.shape[-2:]) * np.finfo(si.dtype).eps * 10
        labels = clusters(si, tol)
        gi = np.where(counted_values(si, tol, labels, signed_zero),
                      cluster_mean(np.real(gs[idx]), labels), 0.0)
        out[idx] = (u[idx] * gi[None, :]) @ vt[idx]
    return np.conj(out)


def _H(x):
    """The conjugate transpose of the last two axes."""
    return np.conj(_T(x))


@_helper
def svd_grad(g, a, ans, full_matrices=True, compute_uv=True, hermitian=False):
    """Cotangent of `a` in np.linalg.svd.

    Repeated singular values: their cotangents are averaged; repeated zero ones get
    none, a simple zero one that of its signed continuation; singular vectors that are
    not unique (repeated values, the extra columns of full_matrices=True, zero values
    of a non-square matrix) raise LinAlgError if the cotangent depends on them.
    """
    if hermitian:
        unsupported("np.linalg.svd(..., hermitian=True)")
    a = as_array(a)
    if not compute_uv:
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        return _singular_values_back(u, s, vt, as_array(g))
    # (item by item: s is real, and the compiler follows which items are complex)
    u, s, vt = as_array(ans[0]), as_array(ans[1]), as_array(ans[2])
    gu, gs, gvt = as_array(g[0]), as_array(g[1]), as_array(g[2])
    m, n = a.shape[-2:]
    k = min(m, n)
    if full_matrices and m != n:
        if np.any(gu[..., :, k:]) or np.any(gvt[..., k:, :]):
            raise np.linalg.LinAlgError(
                "the gradient of np.linalg.svd(full_matrices=True) is undefined for the "
                "extra singular vectors of a non-square matrix; use full_matrices=False")
        u, gu = u[..., :, :k], gu[..., :, :k]
        vt, gvt = vt[..., :k, :], gvt[..., :k, :]
    out = _singular_values_back(u, s, vt, gs, signed_zero=True)
    # The singular vectors' part, written per matrix as the gradient of the conjugate
    # pairing (gU = conj of U's cotangent, gV = V's; conjugated back at the end):
    # U [F (J - J^H) S + S F (K - K^H) + i Im(diag J) / S] V^H, J = U^H gU, K = V^H gV
    vectors = np.zeros_like(out)
    for idx in np.ndindex(s.shape[:-1]):
        ui, si, vti = u[idx], s[idx], vt[idx]
        vi = _H(vti)
        gui, gvi = np.conj(gu[idx]), _T(gvt[idx])
        tol = np.max(si, initial=0.0) * max(m, n) * np.finfo(si.dtype).eps * 10
        labels = clusters(si, tol)
        degenerate = degenerate_pairs(labels)
        j = _H(ui) @ gui
        kk = _H(vi) @ gvi
        pos = si > tol
        _gauge_check(j + kk, degenerate & pos[:, None] & pos[None, :], "np.linalg.svd")
        zero_pairs = degenerate & ~pos[:, None] & ~pos[None, :]
        _gauge_check(j, zero_pairs, "np.linalg.svd", phases=False)
        _gauge_check(kk, zero_pairs, "np.linalg.svd", phases=False)
        s2 = si[None, :] ** 2 - si[:, None] ** 2
        off = ~np.eye(k, dtype=bool) & ~degenerate
        f = np.where(off, 1.0 / np.where(off, s2, 1.0), 0.0)
        middle = (f * (j - _H(j))) * si[None, :] + si[:, None] * (f * (kk - _H(kk)))
        small = si <= tol
        # the phase each pair shares, put on U's side: i Im(diag J) / S (0 if real)
        phase = np.diagonal(j) - np.conj(np.diagonal(j))
        middle = middle + np.diag(np.where(small, 0.0, phase / (2 * np.where(small, 1.0, si))))
        grad = ui @ middle @ vti
        if m > k:
            rest = gui - ui @ (_H(ui) @ gui)
            if np.any(small & np.any(np.abs(rest) > tol, axis=0)):
                raise np.linalg.LinAlgError("the gradient of np.linalg.svd is undefined "
                                            "for a rank-deficient non-square matrix")
            grad = grad + (rest / np.where(small, 1.0, si)[None, :]) @ vti
        if n > k:
            rest = gvi - vi @ (_H(vi) @ gvi)
            if np.any(small & np.any(np.abs(rest) > tol, axis=0)):
                raise np.linalg.LinAlgError("the gradient of np.linalg.svd is undefined "
                                            "for a rank-deficient non-square matrix")
            grad = grad + ui @ _H(rest / np.where(small, 1.0, si)[None, :])
        vectors[idx] = np.conj(grad)
    return out + vectors


@_helper
def svdvals_grad(g, x):
    """Cotangent of `x` in np.linalg.svdvals."""
    u, s, vt = np.linalg.svd(as_array(x), full_matrices=False)
    return _singular_values_back(u, s, vt, as_array(g))


@_helper
def pinv_grad(g, a, ans, hermitian=False):
    """Cotangent of `a` in np.linalg.pinv (valid where the rank does not change)."""
    if hermitian:
        unsupported("np.linalg.pinv(..., hermitian=True)")
    a, p, g = as_array(a), as_array(ans), as_array(g)
    m, n = a.shape[-2:]
    left = np.eye(m) - a @ p
    right = np.eye(n) - p @ a
    return (-_T(p) @ g @ _T(p) + left @ _T(g) @ p @ _T(p)
            + _T(p) @ p @ _T(g) @ right)


def lstsq_pinv(a, rcond=None):
    """The pseudo-inverse np.linalg.lstsq solves with: the same cut-off of small
    singular values (machine precision times max(M, N) by default; -1: machine
    precision), so that x = P b is lstsq's minimum-norm solution."""
    a = as_array(a)
    eps = np.finfo(np.result_type(a.dtype, np.float64)).eps
    if rcond is None:
        cut = eps * max(a.shape[-2:])
    elif rcond < 0:
        cut = eps
    else:
        cut = rcond
    return np.linalg.pinv(a, rcond=cut)


@_helper
def lstsq_grads(g, a, b, ans, rcond=None):
    """Cotangents of (a, b) in np.linalg.lstsq (valid where the rank does not change).

    x = P b with P lstsq's pseudo-inverse: b's cotangent P^T gx, a's that of P
    (pinv_grad of gx b^T). The residuals |b - a x|^2 (given where a has full column
    rank and more rows than columns) are at their minimum over x, so their
    cotangents are those at fixed x: 2 r g and -2 r g x^T. The singular values', as
    in np.linalg.svd. The rank is an integer: no cotangent.
    """
    a, b = as_array(a), as_array(b)
    vector = b.ndim == 1
    x, gx = as_array(ans[0]), as_array(g[0])
    bm = b[:, None] if vector else b
    xm = x[:, None] if vector else x
    gxm = gx[:, None] if vector else gx
    p = lstsq_pinv(a, rcond)
    gb = _T(p) @ gxm
    ga = pinv_grad(gxm @ _T(bm), a, p)
    if np.size(ans[1]):     # (SciPy's: a number where b is a vector)
        weighted = 2.0 * (bm - a @ xm) * np.reshape(as_array(g[1]), (1, -1))
        gb = gb + weighted
        ga = ga - weighted @ _T(xm)
    gs = None if ans[3] is None else g[3]     # (no singular values: SciPy's gelsy)
    if gs is not None:
        if np.any(gs):
            u, s, vt = np.linalg.svd(a, full_matrices=False)
            ga = ga + _singular_values_back(u, s, vt, as_array(gs))
    return ga, gb[:, 0] if vector else gb


def polyfit_system(x, deg, rcond, full, w, cov):
    """The Vandermonde matrix np.polyfit solves with and its cut-off (its default:
    len(x) times machine precision); weights, full= and cov= are refused."""
    if full or cov or w is not None:
        unsupported("np.polyfit with full=, w= or cov= (np.linalg.lstsq of np.vander "
                    "differentiates them)")
    x = as_array(x)
    cut = len(x) * np.finfo(np.result_type(x.dtype, np.float64)).eps if rcond is None \
        else rcond
    return np.vander(x, deg + 1), cut


@_helper
def polyfit_grads(g, x, y, deg, ans, rcond=None, full=False, w=None, cov=False):
    """Cotangents of (x, y) in np.polyfit: the least-squares solution of the
    Vandermonde system (lstsq's, NumPy's column scaling aside: the solution is the
    same), x's through the matrix's slopes."""
    v, cut = polyfit_system(x, deg, rcond, full, w, cov)
    none = np.zeros(0)
    gv, gy = lstsq_grads((g, none, 0, None), v, y, (ans, none, 0, None), cut)
    return np.sum(gv * vander_slopes(x, deg + 1), axis=1), gy


def _copyltu(m):
    return np.tril(m) + _T(np.tril(m, -1))


def _qr_square_back(q, r, gq, gr):
    """Cotangent of `a` = q r for a tall or square `a` (r square, invertible)."""
    m = r @ _T(gr) - _T(gq) @ q
    b = gq + q @ _copyltu(m)
    return _T(np.linalg.solve(r, _T(b)))


@_helper
def qr_grad(g, a, ans, mode="reduced"):
    """Cotangent of `a` in np.linalg.qr (modes 'reduced', 'complete', 'r').

    A rank-deficient matrix (singular leading block of r) raises LinAlgError.
    """
    a = as_array(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "r":
        q, r = np.linalg.qr(a)
        gq, gr = np.zeros_like(q), as_array(g)
        gr = gr[..., :k, :]
    elif mode in ("reduced", "complete"):
        q, r = as_array(ans[0]), as_array(ans[1])
        gq, gr = as_array(g[0]), as_array(g[1])
        if mode == "complete" and m > n:
            if np.any(gq[..., :, k:]) or np.any(gr[..., k:, :]):
                raise np.linalg.LinAlgError(
                    "the gradient of np.linalg.qr(mode='complete') is undefined for the "
                    "extra columns of q; use mode='reduced'")
            q, gq, r, gr = q[..., :, :k], gq[..., :, :k], r[..., :k, :], gr[..., :k, :]
    else:
        unsupported(f"np.linalg.qr(mode={mode!r})")
    if m >= n:
        return _qr_square_back(q, r, gq, gr)
    x_r = r[..., :, :m]
    gx_r, gy_r = gr[..., :, :m], gr[..., :, m:]
    y = a[..., :, m:]
    gy = q @ gy_r
    gx = _qr_square_back(q, x_r, gq + y @ _T(gy_r), gx_r)
    return np.concatenate([gx, gy], axis=-1)


@_helper
def matrix_power_grad(g, a, n):
    """Cotangent of `a` in np.linalg.matrix_power(a, n)."""
    a, g = as_array(a), as_array(g)
    if n == 0:
        return np.zeros(a.shape)
    base = a if n > 0 else np.linalg.inv(a)
    k = abs(n)
    powers = [np.broadcast_to(np.eye(a.shape[-1]), a.shape)]
    for _ in range(k - 1):
        powers.append(powers[-1] @ base)
    grad = sum(_T(powers[i]) @ g @ _T(powers[k - 1 - i]) for i in range(k))
    if n < 0:
        grad = -_T(base) @ grad @ _T(base)
    return grad


@_helper
def vecdot_grads(g, x1, x2, axis=-1):
    """Cotangents of (x1, x2) in np.vecdot (real arrays)."""
    ge = np.expand_dims(as_array(g), axis)
    return ge * as_array(x2), ge * as_array(x1)


# -- scipy.special (rules in scipy_rules.py, registered only when scipy imports) -----------
def _scipy_special(name: str, function: str, doc: str, *fixed):
    """A helper calling scipy.special.<function>(*fixed, *args), SciPy imported at the
    first call (rule templates call these by name)."""
    def call(*args):
        from scipy import special
        return getattr(special, function)(*fixed, *args)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    return _helper(call)


scipy_digamma = _scipy_special("scipy_digamma", "digamma", "d/dx gammaln(x).")
scipy_trigamma = _scipy_special("scipy_trigamma", "polygamma", "d/dx digamma(x).", 1)


@_helper
def xlogy_grad_y(x, y):
    """d/dy x log(y) = x / y, and 0 where x == y == 0 (xlogy(0, y) is 0 for every y).
    At x == 0 < y the quotient itself: 0, with its slope 1 / y in x (second derivatives)."""
    x, y = as_array(x), as_array(y)
    zero = (x == 0) & (y == 0)
    return np.where(zero, 0.0, x / np.where(zero, 1.0, y))


@_helper
def logsumexp_grads(g, a, ans, axis=None, b=None, keepdims=False, return_sign=False):
    """Cotangents of (a, b) in scipy.special.logsumexp: softmax weights (times b)."""
    sign = None
    if return_sign:
        g, ans, sign = g[0], ans[0], ans[1]
    a = as_array(a)
    if b is not None:
        a = np.broadcast_arrays(a, as_array(b))[0]
    ge = expand_reduced(g, a, axis=axis, keepdims=keepdims)
    weight = np.exp(a - expand_reduced(ans, a, axis=axis, keepdims=keepdims))
    if sign is not None:
        weight = weight * expand_reduced(sign, a, axis=axis, keepdims=keepdims)
    g_a = ge * weight if b is None else ge * weight * b
    g_b = None if b is None else ge * weight
    return g_a, g_b



scipy_gammaln = _scipy_special("scipy_gammaln", "gammaln",
                               "log |Gamma(x)|, for templates (its derivative is scipy_digamma).")
scipy_polygamma = _scipy_special("scipy_polygamma", "polygamma",
                                 "The n-th derivative of digamma (n = 0: digamma itself); "
                                 "d/dx is order n + 1.")
# Bessel functions of real order v, for templates: each one's derivative in x is a
# combination of the same function at orders v - 1 and v + 1 (DLMF 10.6.1, 10.29.1),
# so their rules (helper_rules.py) give derivatives of every order.
bessel_j = _scipy_special("bessel_j", "jv", "J_v(x) (scipy.special.jv).")
bessel_y = _scipy_special("bessel_y", "yv", "Y_v(x) (scipy.special.yv).")
bessel_i = _scipy_special("bessel_i", "iv", "I_v(x) (scipy.special.iv).")
bessel_k = _scipy_special("bessel_k", "kv", "K_v(x) (scipy.special.kv).")
bessel_ie = _scipy_special("bessel_ie", "ive", "I_v(x) exp(-|x|) (scipy.special.ive).")
bessel_ke = _scipy_special("bessel_ke", "kve", "K_v(x) exp(x) (scipy.special.kve).")


# -- scipy.stats (rules in scipy_stats_rules.py) -----------------------------------------
@_helper
def dirichlet_shape(x, alpha):
    """The shape that lines alpha up with the K rows of x in scipy.stats.dirichlet
    (x of K - 1 rows, the last one implied, is refused)."""
    if np.shape(x)[0] != np.shape(alpha)[-1]:
        raise NotImplementedError("s2sgrad cannot differentiate scipy.stats.dirichlet with "
                                  "x of K - 1 components (the last one implied); pass all K")
    return np.shape(alpha) + (1,) * (np.ndim(x) - 1)


@_helper
def mvn_mean(x, mean, cov, allow_singular=False):
    """The mean of scipy.stats.multivariate_normal as an array (zeros for None), after
    refusing the argument forms whose gradient is not implemented."""
    cov_a = as_array(cov)
    if cov_a.ndim != 2 or cov_a.shape[0] != cov_a.shape[1]:
        raise NotImplementedError("s2sgrad differentiates scipy.stats.multivariate_normal with "
                                  "a full (d, d) covariance matrix only; pass np.diag(v) or "
                                  "s * np.eye(d) for a diagonal or scalar one")
    d = cov_a.shape[0]
    if d == 1 or np.shape(x)[-1:] != (d,):
        raise NotImplementedError("s2sgrad differentiates scipy.stats.multivariate_normal with "
                                  "x of shape (d,) or (n, d), d > 1")
    if allow_singular:
        raise NotImplementedError("s2sgrad cannot differentiate scipy.stats.multivariate_normal "
                                  "with allow_singular=True (not differentiable at a singular "
                                  "covariance)")
    if mean is None:
        return np.zeros(d)
    mean = as_array(mean)
    if mean.shape != (d,):
        raise NotImplementedError("s2sgrad differentiates scipy.stats.multivariate_normal with "
                                  "a mean of shape (d,) only")
    return mean


@_helper
def symmetric_from_lower(a):
    """The symmetric matrix that reads the lower triangle of `a` (what LAPACK's
    symmetric routines see: scipy.stats.multivariate_normal's covariance)."""
    lower = np.tril(as_array(a))
    return lower + _T(np.tril(as_array(a), -1))


# -- scipy.linalg (rules in scipy_linalg_rules.py) -------------------------------------------
@_helper
def triangle_part(m, lower=True, unit_diagonal=False):
    """The lower (or upper) triangle of m; without its diagonal when unit_diagonal."""
    m = as_array(m)
    if unit_diagonal:
        return np.tril(m, -1) if lower else np.triu(m, 1)
    return np.tril(m) if lower else np.triu(m)


@_helper
def transpose_if(m, flag):
    """m with its last two axes swapped when `flag` (a trans= option), else m."""
    return _T(as_array(m)) if flag else m


@_helper
def is_transposed(trans):
    """Whether a LAPACK trans= option (0/'N', 1/'T', 2/'C') transposes (real matrices)."""
    if trans in (0, "N", "n"):
        return False
    if trans in (1, 2, "T", "t", "C", "c"):
        return True
    raise ValueError(f"unknown trans={trans!r}")


@_helper
def flipped_trans(trans):
    """The trans= option of the transposed solve (the cotangent's)."""
    return 0 if is_transposed(trans) else 1


@_helper
def as_columns(b, n):
    """b as a matrix of n rows (a vector becomes one column)."""
    return np.reshape(as_array(b), (n, -1))


@_helper
def scipy_solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False):
    """scipy.linalg.solve_triangular, for templates."""
    from scipy import linalg
    return linalg.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)


@_helper
def scipy_cho_solve(c, lower, b):
    """scipy.linalg.cho_solve((c, lower), b), for templates."""
    from scipy import linalg
    return linalg.cho_solve((c, lower), b)


@_helper
def scipy_solve_banded(l_and_u, ab, b):
    """scipy.linalg.solve_banded, for templates."""
    from scipy import linalg
    return linalg.solve_banded(l_and_u, ab, b)


def _band_entries(n, below, above):
    """(band rows, rows, columns): where LAPACK's storage of a band of `below`
    subdiagonals and `above` superdiagonals keeps each entry of the n x n matrix it
    holds (ab[band_rows, columns] = a[rows, columns])."""
    r = np.arange(below + above + 1)[:, None]
    i = np.arange(n)[None, :] + r - above
    band_rows, cols = np.nonzero((i >= 0) & (i < n))
    return band_rows, cols + band_rows - above, cols


@_helper
def band_transposed(ab, below, above):
    """The band storage of a^T (below and above swapped) from that of a."""
    ab = as_array(ab)
    band_rows, rows, cols = _band_entries(ab.shape[-1], below, above)
    out = np.zeros_like(ab)
    out[below + cols - rows, rows] = ab[band_rows, cols]
    return out


@_helper
def band_outer(gb, x, below, above):
    """The entries of gb x^T (vectors or columns of n rows) that the band holds, in
    band storage: -band_outer(gb, x, ...) is ab's cotangent in solve_banded."""
    n = np.shape(gb)[0]
    gc, xc = as_columns(gb, n), as_columns(x, n)
    band_rows, rows, cols = _band_entries(n, below, above)
    out = np.zeros((below + above + 1, n), dtype=np.result_type(gc, xc))
    out[band_rows, cols] = np.sum(gc[rows] * xc[cols], axis=-1)
    return out


@_helper
def band_matvec(ab, x, below, above):
    """a @ x for the matrix a that band storage ab holds (x a vector or columns)."""
    ab, x = as_array(ab), as_array(x)
    band_rows, rows, cols = _band_entries(ab.shape[-1], below, above)
    values = np.reshape(ab[band_rows, cols], (-1,) + (1,) * (x.ndim - 1)) * x[cols]
    out = np.zeros(x.shape, dtype=values.dtype)
    np.add.at(out, rows, values)
    return out


@_helper
def scipy_solve_sylvester(a, b, q):
    """The X of a X + X b = q (scipy.linalg.solve_sylvester), for templates."""
    from scipy import linalg
    return linalg.solve_sylvester(a, b, q)


@_helper
def require_real(value, what):
    """`value`, after checking that it is real (a real matrix can have a complex
    square root; s2sgrad differentiates real-valued code)."""
    if np.iscomplexobj(value):
        raise NotImplementedError(f"s2sgrad differentiates real-valued code; {what} returned "
                                  f"complex values here")
    return value


@_helper
def block_upper(a, e):
    """The block matrix [[a, e], [0, a]] (last two axes): expm of it holds the Frechet
    derivative of expm at a in the direction e in its upper right block."""
    a, e = as_array(a), as_array(e)
    a, e = np.broadcast_arrays(a, e)
    zero = np.zeros_like(a)
    return np.concatenate([np.concatenate([a, e], axis=-1),
                           np.concatenate([zero, a], axis=-1)], axis=-2)


@_helper
def expm_frechet(a, e):
    """The derivative of scipy.linalg.expm at `a` in the direction `e`: the upper
    right block of expm([[a, e], [0, a]]) (Higham, Functions of Matrices, 3.2)."""
    from scipy import linalg
    n = np.shape(a)[-1]
    return linalg.expm(block_upper(a, e))[..., :n, n:]


# -- scipy.signal (rules in scipy_signal_rules.py) -----------------------------------------------
@_helper
def full_conv_shape(in1, in2):
    """The shape of scipy.signal.convolve(in1, in2, 'full')."""
    return tuple(n1 + n2 - 1 for n1, n2 in zip(np.shape(in1), np.shape(in2)))


def _centered_slices(big, small):
    return tuple(slice((s - t) // 2, (s - t) // 2 + t) for s, t in zip(big, small))


@_helper
def embed_centered(cot, shape):
    """cot placed at the center of zeros of `shape`, where scipy.signal's 'same' and
    'valid' modes cut their result out of the full one."""
    cot = as_array(cot)
    out = np.zeros(shape, dtype=np.result_type(cot, np.float32))
    out[_centered_slices(shape, cot.shape)] = cot
    return out


@_helper
def crop_centered(cot, shape):
    """The centered block of `shape` of cot (the transpose of embed_centered)."""
    return as_array(cot)[_centered_slices(np.shape(cot), shape)]


@_helper
def signal_convolve(in1, in2, mode="full"):
    """scipy.signal.convolve, for templates."""
    from scipy import signal
    return signal.convolve(in1, in2, mode=mode)


@_helper
def signal_correlate(in1, in2, mode="full"):
    """scipy.signal.correlate (real arrays), for templates."""
    from scipy import signal
    return signal.correlate(in1, in2, mode=mode)


# -- NumPy functions of issue 34 ----------------------------------------------------------------
@_helper
def partition_grad(g, a, ans, axis=-1):
    """Cotangent of `a` in np.partition: each value's cotangent goes back to where it
    came from. The result is a permutation of `a`: matching the stably sorted values
    of both finds it, whatever order partition left inside each part (equal values
    are told apart by a stable sort, as for np.sort)."""
    a, g = as_array(a), as_array(g)
    flat = axis is None
    src, res = (a.ravel(), as_array(ans)) if flat else (a, as_array(ans))
    ax = -1 if flat else axis
    order_a = np.argsort(src, axis=ax, kind="stable")
    order_r = np.argsort(res, axis=ax, kind="stable")
    out = _placed_back(np.take_along_axis(np.broadcast_to(g, res.shape), order_r, axis=ax),
                       order_a, ax)
    return out.reshape(a.shape)


def _gradient_axes(f, axis):
    nd = np.ndim(f)
    if axis is None:
        return list(range(nd))
    axes = [axis] if isinstance(axis, numbers.Integral) else list(axis)
    return [ax % nd for ax in axes]


def _gradient_spacing(varargs, axes, nd):
    if len(varargs) == 0:
        return [()] * len(axes)
    if len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        return [(varargs[0],)] * len(axes)
    return [(v,) for v in varargs]


@_helper
def gradient_grad(g, f, varargs=(), axis=None, edge_order=1):
    """Cotangent of `f` in np.gradient, which is linear in f: along each axis the
    transpose of the stencil matrix (np.gradient of the identity) applied to g."""
    f = as_array(f)
    axes = _gradient_axes(f, axis)
    gs = list(g) if isinstance(g, (list, tuple)) else [g]
    spacing = _gradient_spacing(tuple(varargs), axes, f.ndim)
    out = np.zeros(f.shape, dtype=np.result_type(f, np.float32))
    for ax, gi, sp in zip(axes, gs, spacing):
        if gi is None:
            continue
        n = f.shape[ax]
        stencil = np.gradient(np.eye(n), *sp, axis=0, edge_order=edge_order)
        # out_i = sum_j stencil[i, j] f_j along ax: the cotangent of f_j is sum_i stencil[i, j] g_i
        gm = np.moveaxis(np.broadcast_to(as_array(gi), f.shape), ax, -1)
        out = out + np.moveaxis(gm @ stencil, -1, ax)
    return out


@_helper
def gradient_linear(f_dot, f, varargs=(), axis=None, edge_order=1):
    """np.gradient of a tangent (or, transposed, of gradient_grad's cotangent): the
    same stencils, with the spacing of the primal call."""
    return np.gradient(f_dot, *varargs, axis=axis, edge_order=edge_order)


def _eig_real(w, what):
    if np.iscomplexobj(w):
        raise NotImplementedError(f"s2sgrad differentiates {what} only where every eigenvalue "
                                  f"is real (complex ones here: complex numbers are not "
                                  f"supported); np.linalg.eigh differentiates symmetric "
                                  f"matrices")


@_helper
def eig_gaps(w):
    """F[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it (last axis of w): the
    first-order perturbation weights of np.linalg.eig. Repeated eigenvalues have no
    derivative in general (Jordan blocks): LinAlgError."""
    w = as_array(w)
    _eig_real(w, "np.linalg.eig")
    diff = w[..., None, :] - w[..., :, None]
    n = w.shape[-1]
    off = ~np.eye(n, dtype=bool)
    scale = np.max(np.abs(w), axis=-1, initial=0.0)[..., None, None]
    tol = np.maximum(scale, 1.0) * n * np.finfo(np.float64).eps * 100
    if np.any((np.abs(diff) <= tol) & off):
        raise np.linalg.LinAlgError("np.linalg.eig: repeated eigenvalues have no derivative "
                                    "(the eigenvalues of a perturbed Jordan block are not "
                                    "differentiable)")
    return np.where(off, 1.0 / np.where(off, diff, 1.0), 0.0)



# -- builtin sorted (rule in numpy_rules.py) -------------------------------------------------
def _sort_order(items, key, reverse):
    """The indices of items in the order sorted(items, key=key, reverse=reverse) puts
    them (stable, as sorted is: equal items keep their order)."""
    keyed = items.__getitem__ if key is None else (lambda i: key(items[i]))
    return sorted(range(len(items)), key=keyed, reverse=reverse)


@_helper
def sorted_grad(cot, iterable, key=None, reverse=False):
    """The cotangents of sorted's output put back in the iterable's order (the
    transpose of the permutation); a zero cotangent gives zeros."""
    items = list(iterable)
    cot = _items_of(cot, len(items))
    if isinstance(iterable, np.ndarray):   # an array's cotangent is an array: its rows'
        out = np.zeros(iterable.shape, np.result_type(iterable.dtype, np.float64))
        if cot is not None:
            for position, index in enumerate(_sort_order(items, key, reverse)):
                if cot[position] is not None:
                    out[index] = cot[position]
        return out
    if np.ndim(iterable) >= 1:   # another library's array (Dask): an array of its own
        rows = [item * 0.0 for item in items]
        if cot is not None:
            for position, index in enumerate(_sort_order(items, key, reverse)):
                if cot[position] is not None:
                    rows[index] = rows[index] + cot[position]
        return np.stack(rows)
    out = [0.0] * len(items)
    if cot is not None:
        for position, index in enumerate(_sort_order(items, key, reverse)):
            out[index] = cot[position]
    return out


def _items_of(values, n: int):
    """values as n items (a list or tuple, or an array of n rows: what a rule of the
    list's reader gives, np.dot(sorted(x), w)'s); None for a symbolic zero (0.0,
    None: no item carries a derivative)."""
    # (if statements, not and/or: the compiler differentiates this helper's source)
    if isinstance(values, (list, tuple)):
        return values
    if np.ndim(values) >= 1:
        if len(values) == n:
            return values
    elif values is None:
        return None
    elif not np.any(values):
        return None
    raise InternalError(f"a derivative of {n} items was expected, not "
                        f"{type(values).__name__} {np.shape(values)}")


@_helper
def sorted_like(values, iterable, key=None, reverse=False):
    """values in the order sorted(iterable) puts the iterable's items (the
    permutation sorted_grad undoes)."""
    items = list(iterable)
    if isinstance(iterable, dict):   # (sorted(d) sorts the keys: no derivative)
        return [0.0] * len(items)
    values = _items_of(values, len(items))
    if values is None:
        return [0.0] * len(items)
    return [values[i] for i in _sort_order(items, key, reverse)]


# -- scipy.spatial.distance (rules in scipy_spatial_rules.py) ----------------------------------
# The metrics of a difference d = u - v: the distance's slope along each coordinate of d.
_BY_DIFFERENCE = ("euclidean", "sqeuclidean", "cityblock", "minkowski", "chebyshev")


@_helper
def distance_metric(metric, p=2, w=None):
    """The metric's name, after checking s2sgrad has its gradient (else the call raises
    at the user's line: never a silent zero for a metric it does not know)."""
    if w is not None:
        unsupported("scipy.spatial.distance with weights w")
    if not isinstance(metric, str) or metric not in _BY_DIFFERENCE + ("cosine",):
        unsupported(f"scipy.spatial.distance with metric={metric!r} (euclidean, "
                    "sqeuclidean, cityblock, minkowski, chebyshev and cosine have gradients)")
    if metric == "minkowski" and not p >= 1:
        unsupported(f"scipy.spatial.distance's minkowski metric with p={p!r} < 1")
    return metric


def difference_slopes(xa, xb, dist, metric, p):
    """S[i, j, k] = d dist(xa_i, xb_j) / d (xa_i - xb_j)_k, 0 where the distance is
    (the zero subgradient at a kink; ties of chebyshev's max share equally)."""
    d = xa[:, None, :] - xb[None, :, :]
    if metric == "cityblock" or (metric == "minkowski" and p == 1):
        return np.sign(d)
    if metric == "chebyshev":
        top = np.abs(d) == dist[..., None]
        return np.sign(d) * top / np.maximum(np.sum(top, axis=-1, keepdims=True), 1)
    return safe_divide(np.sign(d) * _power_of_positive(np.abs(d), p - 1),
                       _power_of_positive(dist[..., None], p - 1))


def _power_of_positive(x, e):
    """x ** e of x >= 0, 0 where x is: its derivatives there are 0, not 0 * inf (the
    diagonal of cdist(X, X) differentiated twice)."""
    zero = x == 0
    return np.where(zero, 0.0, np.where(zero, 1.0, x) ** e)


def cosine_parts(xa, xb, dist):
    """The row norms and the cosine similarities 1 - dist of cdist's cosine metric."""
    na = np.sqrt(np.sum(xa * xa, axis=1))
    nb = np.sqrt(np.sum(xb * xb, axis=1))
    return na, nb, 1.0 - dist


@_helper
def cdist_grads(g, xa, xb, ans, metric="euclidean", p=2, w=None):
    """Cotangents of (XA, XB) in scipy.spatial.distance.cdist. Euclidean distances
    (and their squares) weigh each pair's difference by g / dist (by 2 g): two
    matrix products, no (m, n, k) array; the other difference metrics through their
    slopes; cosine from the similarity's gradient, u / (|u| |v|) - cos u / |u|^2."""
    metric = distance_metric(metric, p, w)
    # (in float64, as SciPy computes the distances, whatever the points' dtype)
    xa, xb = as_array(xa).astype(np.float64), as_array(xb).astype(np.float64)
    g, dist = as_array(g), as_array(ans)
    if metric in ("euclidean", "sqeuclidean") or (metric == "minkowski" and p == 2):
        weights = 2.0 * g if metric == "sqeuclidean" else safe_divide(g, dist)
        ga = np.sum(weights, axis=1)[:, None] * xa - weights @ xb
        gb = np.sum(weights, axis=0)[:, None] * xb - _T(weights) @ xa
        return ga, gb
    if metric == "cosine":
        na, nb, cos = cosine_parts(xa, xb, dist)
        scaled = safe_divide(g, na[:, None] * nb[None, :])
        ga = -(scaled @ xb - safe_divide(np.sum(g * cos, axis=1), na * na)[:, None] * xa)
        gb = -(_T(scaled) @ xa - safe_divide(np.sum(g * cos, axis=0), nb * nb)[:, None] * xb)
        return ga, gb
    slopes = difference_slopes(xa, xb, dist, metric, p)
    return np.einsum("ij,ijk->ik", g, slopes), -np.einsum("ij,ijk->jk", g, slopes)


def upper_triangle(condensed, n):
    """The (n, n) matrix holding pdist's condensed values above its diagonal, in
    pdist's order (row by row), zeros elsewhere."""
    upper = np.zeros((n, n), dtype=np.result_type(as_array(condensed), np.float64))
    upper[np.triu_indices(n, 1)] = condensed
    return upper


def square_distances(condensed, n):
    """The symmetric (n, n) matrix of pdist's condensed distances (squareform's)."""
    upper = upper_triangle(condensed, n)
    return upper + _T(upper)


@_helper
def pdist_grads(g, x, ans, metric="euclidean", p=2, w=None):
    """Cotangent of X in scipy.spatial.distance.pdist: the pairs i < j of cdist(X, X),
    X on both sides."""
    x = as_array(x)
    n = x.shape[0]
    ga, gb = cdist_grads(upper_triangle(g, n), x, x, square_distances(ans, n), metric, p, w)
    return ga + gb


@_helper
def squareform_grad(g, x):
    """Cotangent of X in scipy.spatial.distance.squareform: a condensed vector's entry
    stands at (i, j) and (j, i) of the matrix; a matrix gives its upper triangle."""
    g = as_array(g)
    if np.ndim(x) == 1:
        upper = np.triu_indices(g.shape[0], 1)
        return g[upper] + _T(g)[upper]
    return upper_triangle(g, np.shape(x)[0])


# -- scipy.linalg.solve, lstsq, pinv, block_diag (rules in scipy_linalg_rules.py) ---------------
# What scipy.linalg.solve's solver reads of `a` for each assume_a: all of it (None:
# SciPy picks a solver from the values, for the same solution of the whole matrix),
# one triangle made symmetric, one triangle, the diagonal, three bands.
_SOLVER_READS = {None: "all", "gen": "all", "general": "all", "sym": "symmetric",
                 "symmetric": "symmetric", "pos": "symmetric", "positive definite": "symmetric",
                 "upper triangular": "upper", "lower triangular": "lower",
                 "diagonal": "diagonal", "tridiagonal": "tridiagonal"}


def _solver_reads(a, assume_a):
    read = _SOLVER_READS.get(assume_a) if isinstance(assume_a, (str, type(None))) else None
    if read is None:
        unsupported(f"scipy.linalg.solve with assume_a={assume_a!r}")
    if np.ndim(a) != 2:
        unsupported("scipy.linalg.solve of a batch of matrices (use np.linalg.solve)")
    if read == "symmetric" and np.iscomplexobj(a):
        unsupported("scipy.linalg.solve with assume_a='sym' or 'pos' of a complex matrix")
    return read


@_helper
def solver_matrix(a, lower=False, assume_a=None, transposed=False):
    """The matrix scipy.linalg.solve solves with: what its solver reads of `a` (see
    _SOLVER_READS), transposed for transposed=True. Linear in `a`."""
    read = _solver_reads(a, assume_a)
    a = as_array(a)
    if read == "symmetric":   # (the upper triangle's: the lower one of the transpose)
        m = symmetric_from_lower(a if lower else _T(a))
    elif read == "upper":
        m = np.triu(a)
    elif read == "lower":
        m = np.tril(a)
    elif read == "diagonal":
        m = a * np.eye(a.shape[-1])
    elif read == "tridiagonal":
        m = np.triu(np.tril(a, 1), -1)
    else:
        m = a
    return _T(m) if transposed else m


@_helper
def solver_matrix_grad(g, a, lower=False, assume_a=None, transposed=False):
    """The transpose of solver_matrix: the cotangent of `a` from the solved matrix's
    (an entry of the triangle a symmetric solver reads stands at two places)."""
    read = _solver_reads(a, assume_a)
    g = as_array(g)
    g = _T(g) if transposed else g
    if read == "symmetric":
        return np.tril(g) + np.tril(_T(g), -1) if lower else np.triu(g) + np.triu(_T(g), 1)
    if read in ("upper", "lower", "diagonal", "tridiagonal"):
        return solver_matrix(g, lower, assume_a)
    return g


@_helper
def lstsq_cutoff(cond):
    """np.linalg.lstsq's rcond for scipy.linalg.lstsq's cond: SciPy's default cut-off is
    machine precision (-1 to lstsq_pinv)."""
    return -1 if cond is None else cond


@_helper
def scipy_pinv_grad(g, a, ans, return_rank=False):
    """Cotangent of `a` in scipy.linalg.pinv (the rank, when returned, has none)."""
    if return_rank:
        return pinv_grad(g[0], a, ans[0])
    return pinv_grad(g, a, ans)


def _block_sizes(arrs):
    """The (rows, columns) of each block scipy.linalg.block_diag places: a number is
    1x1, a vector one row."""
    return [(1, 1) if np.ndim(a) == 0 else (1, np.shape(a)[0]) if np.ndim(a) == 1
            else np.shape(a) for a in arrs]


@_helper
def block_diag_grads(g, arrs):
    """Cotangents of the blocks of scipy.linalg.block_diag: each its block of g."""
    g = as_array(g)
    out = []
    row = col = 0
    for a, (r, c) in zip(arrs, _block_sizes(arrs)):
        out.append(np.reshape(g[row:row + r, col:col + c], np.shape(a)))
        row, col = row + r, col + c
    return out
