"""numba versions of the helpers generated code calls (`_s2s_<name>` -> `_nb_<name>`).

Each helper is a stub (calling it from Python raises) with a numba
`@overload` that picks an implementation from the argument *types* when the
generated function is compiled (`@version` makes both from one definition):
a helper whose NumPy version branches on `np.ndim` or on `None` arguments
branches here at compile time, so the machine code does only the work the
case needs. Shapes are still checked at
run time (numba compiles once per type signature, not per shape).

Every implementation computes what its NumPy counterpart in `s2sgrad.runtime`
or `s2sgrad.runtime.numpy_grads` computes, for the cases it accepts; a case
it does not accept is a typing error, and the caller falls back to NumPy.
Importing this module needs numba.
"""
from __future__ import annotations

import math
import operator
import os
from typing import Optional

import numpy as np
from numba import njit, types
from numba.core.errors import TypingError
from numba.cpython.unsafe.tuple import tuple_setitem
from numba.extending import overload, register_jitable
from numba.np.numpy_support import as_dtype

from .numba_names import NUMPY_CALLS, OPERATORS

STUBS = {}

# The machine code of the helpers below is kept on disk by numba (cache=True), in
# __pycache__ beside this file or numba's user cache directory: it is library
# code, compiled once per machine and type signature, as .pyc files are.
# S2SGRAD_JIT_CACHE=0 turns that off.
_CACHE = os.environ.get("S2SGRAD_JIT_CACHE", "1") != "0"


def cached(fn):
    """A helper compiled once per type signature and kept on disk (see _CACHE)."""
    return njit(cache=_CACHE)(fn)


def _stub(fn):
    """Register a Python stub; calling it outside compiled code is an error."""
    def refuse(*args, **kwargs):
        raise RuntimeError(f"{fn.__name__} runs only inside numba-compiled code")
    refuse.__name__ = refuse.__qualname__ = fn.__name__
    refuse.__signature_source__ = fn
    STUBS[fn.__name__] = refuse
    return refuse


def version(impl=None, **options):
    """The numba version of a helper: `impl`, named as the helper, picks an
    implementation from the argument types (numba's @overload, with `options`); the
    name is bound to the helper's stub, which generated code calls."""
    def register(impl):
        stub = _stub(impl)
        overload(stub, **options)(impl)
        return stub
    return register if impl is None else register(impl)


def _none(t) -> bool:
    return t is None or isinstance(t, (types.NoneType, types.Omitted)) and \
        (not isinstance(t, types.Omitted) or t.value is None)


def _num(t) -> bool:
    return isinstance(t, (types.Number, types.Boolean))


def _arr(t) -> bool:
    return isinstance(t, types.Array)


def _scalar_like(t) -> bool:
    """A number or a 0-d array."""
    return _num(t) or (_arr(t) and t.ndim == 0)


def _float_dtype(t):
    """The dtype of a gradient for values of type t (floats keep theirs, else float64)."""
    dt = t.dtype if _arr(t) else t
    try:
        npdt = as_dtype(dt)
    except Exception:  # noqa: BLE001 - not a NumPy dtype
        return np.float64
    return npdt.type if npdt.kind in "fc" else np.float64


# -- shape work shared by the helpers ----------------------------------------------
@cached
def _c_strides(shape):
    n = len(shape)
    out = np.zeros(max(n, 1), np.int64)
    acc = 1
    for k in range(n - 1, -1, -1):
        out[k] = acc
        acc *= shape[k]
    return out


@cached
def _sum_to(value, shape):
    """Sum `value` down to `shape` (the adjoint of broadcasting `shape` to value.shape)."""
    vshape = value.shape
    nd = len(vshape)
    m = len(shape)
    if m > nd:
        raise ValueError("unbroadcast: the cotangent has fewer dimensions than its value")
    cs = _c_strides(shape)
    ostr = np.zeros(max(nd, 1), np.int64)
    for j in range(nd):
        k = j - (nd - m)
        if k >= 0:
            if shape[k] != 1:
                if shape[k] != vshape[j]:
                    raise ValueError("unbroadcast: shapes do not broadcast")
                ostr[j] = cs[k]
    out = np.zeros(shape, value.dtype)
    o = out.reshape(out.size)
    v = np.ascontiguousarray(value).reshape(value.size)
    idx = np.zeros(max(nd, 1), np.int64)
    off = 0
    for f in range(v.size):
        o[off] += v[f]
        j = nd - 1
        while j >= 0:
            idx[j] += 1
            off += ostr[j]
            if idx[j] < vshape[j]:
                break
            off -= ostr[j] * vshape[j]
            idx[j] = 0
            j -= 1
    return out


@cached
def _broadcast_into(g, gstr, shape):
    """An array of `shape` whose element at index i is g.flat[sum(i * gstr)]."""
    out = np.empty(shape, g.dtype)
    nd = len(shape)
    o = out.reshape(out.size)
    gf = np.ascontiguousarray(g).reshape(g.size)
    idx = np.zeros(max(nd, 1), np.int64)
    off = 0
    for f in range(o.size):
        o[f] = gf[off]
        j = nd - 1
        while j >= 0:
            idx[j] += 1
            off += gstr[j]
            if idx[j] < shape[j]:
                break
            off -= gstr[j] * shape[j]
            idx[j] = 0
            j -= 1
    return out


@cached
def _reduced_mask(nd, axis):
    mask = np.zeros(max(nd, 1), np.bool_)
    for a in axis:
        k = a % nd if nd else 0
        mask[k] = True
    return mask


def _axis_tuple(axis):
    """An implementation turning an axis argument (int or tuple) into a tuple."""
    if isinstance(axis, types.Integer):
        return register_jitable(lambda axis: (axis,))
    if isinstance(axis, (types.UniTuple, types.Tuple)) and \
            all(isinstance(t, types.Integer) for t in axis):
        return register_jitable(lambda axis: axis)
    if isinstance(axis, types.IntegerLiteral):
        return register_jitable(lambda axis: (axis,))
    raise TypingError(f"axis of type {axis}")


# -- seed, ranges, matmul ------------------------------------------------------------
@version
def seed(out):
    if isinstance(out, types.Float):
        one = as_dtype(out).type(1)
        return lambda out: one
    if isinstance(out, (types.Integer, types.Boolean)):
        return lambda out: 1.0
    if _arr(out) and out.ndim == 0:
        dt = _float_dtype(out)
        return lambda out: np.ones((), dt)
    if _arr(out):
        dt = _float_dtype(out)

        def one_element(out):   # shape (1,), (1, 1): differentiated as that element
            if out.size != 1:
                raise ValueError("grad requires a function that returns a scalar")
            return np.ones(out.shape, dt)
        return one_element
    return None


@_stub
def range_(a, b=None, c=None):
    pass


STUBS["range"] = STUBS.pop("range_")


@overload(range_)
def _range(a, b=None, c=None):
    if _none(b):
        return lambda a, b=None, c=None: (np.int64(0), np.int64(a), np.int64(1))
    if _none(c):
        return lambda a, b=None, c=None: (np.int64(a), np.int64(b), np.int64(1))
    return lambda a, b=None, c=None: (np.int64(a), np.int64(b), np.int64(c))


@version
def riter(r):
    return lambda r: range(r[0], r[1], r[2])


@version
def rlen(r):
    return lambda r: len(range(r[0], r[1], r[2]))


@version
def rrev(r):
    def impl(r):
        n = len(range(r[0], r[1], r[2]))
        return range(r[0] + (n - 1) * r[2], r[0] - r[2], -r[2])
    return impl


@version
def rslice(r, lower, upper, step):
    """range(...)[lower:upper:step] as a (start, stop, step) triple."""
    def impl(r, lower, upper, step):
        n = len(range(r[0], r[1], r[2]))
        k = 1 if step is None else np.int64(step)
        if k == 0:
            raise ValueError("slice step cannot be zero")
        if k > 0:
            lo = 0 if lower is None else np.int64(lower)
            hi = n if upper is None else np.int64(upper)
            lo = max(lo + n, 0) if lo < 0 else min(lo, n)
            hi = max(hi + n, 0) if hi < 0 else min(hi, n)
        else:
            lo = n - 1 if lower is None else np.int64(lower)
            hi = -1 if upper is None else np.int64(upper)
            lo = max(lo + n, -1) if lo < 0 else min(lo, n - 1)
            if upper is not None:
                hi = max(hi + n, -1) if hi < 0 else min(hi, n - 1)
        return (r[0] + lo * r[2], r[0] + hi * r[2], r[2] * k)
    return impl


@version
def ritem(r, i):
    if not isinstance(i, types.Integer):
        return None

    def impl(r, i):
        n = len(range(r[0], r[1], r[2]))
        k = i + n if i < 0 else i
        if k < 0 or k >= n:
            raise IndexError("range object index out of range")
        return r[0] + k * r[2]
    return impl


@cached
def _mm22(a, b, out):
    n, k = a.shape
    k2, m = b.shape
    if k != k2:
        raise ValueError("matmul: mismatch in its core dimension")
    for i in range(n):
        for p in range(k):
            aip = a[i, p]
            for j in range(m):
                out[i, j] += aip * b[p, j]
    return out


@cached
def _mm21(a, b, out):
    n, k = a.shape
    if k != b.shape[0]:
        raise ValueError("matmul: mismatch in its core dimension")
    for i in range(n):
        s = out[i]
        for p in range(k):
            s += a[i, p] * b[p]
        out[i] = s
    return out


@cached
def _mm12(a, b, out):
    k, m = b.shape
    if k != a.shape[0]:
        raise ValueError("matmul: mismatch in its core dimension")
    for p in range(k):
        ap = a[p]
        for j in range(m):
            out[j] += ap * b[p, j]
    return out


def _result_dtype(a, b):
    return np.result_type(as_dtype(a.dtype), as_dtype(b.dtype)).type


# Operands at least this large go to BLAS (np.dot) in the `_blas` variants; smaller
# ones use the loops above, which numba compiles much faster than its BLAS binding.
BLAS_MIN_SIZE = 4096


def _matmul_impl(a, b, blas):
    """matmul for 1-d and 2-d operands: loops, or BLAS above BLAS_MIN_SIZE if blas."""
    if not (_arr(a) and _arr(b)) or a.ndim not in (1, 2) or b.ndim not in (1, 2):
        return None
    dt = _result_dtype(a, b)
    big = blas and a.dtype == b.dtype and isinstance(a.dtype, types.Float)
    if a.ndim == 2 and b.ndim == 2:
        if big:
            def impl(a, b):
                if a.size + b.size >= BLAS_MIN_SIZE:
                    return np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))
                return _mm22(a, b, np.zeros((a.shape[0], b.shape[1]), dt))
            return impl
        return lambda a, b: _mm22(a, b, np.zeros((a.shape[0], b.shape[1]), dt))
    if a.ndim == 2:
        if big:
            def impl(a, b):
                if a.size >= BLAS_MIN_SIZE:
                    return np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))
                return _mm21(a, b, np.zeros(a.shape[0], dt))
            return impl
        return lambda a, b: _mm21(a, b, np.zeros(a.shape[0], dt))
    if b.ndim == 2:
        if big:
            def impl(a, b):
                if b.size >= BLAS_MIN_SIZE:
                    return np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))
                return _mm12(a, b, np.zeros(b.shape[1], dt))
            return impl
        return lambda a, b: _mm12(a, b, np.zeros(b.shape[1], dt))

    def dot11(a, b):
        if a.shape[0] != b.shape[0]:
            raise ValueError("matmul: mismatch in its core dimension")
        s = dt(0)
        for i in range(a.shape[0]):
            s += a[i] * b[i]
        return s
    return dot11


@_stub
def matmul(a, b):
    pass


@_stub
def matmul_blas(a, b):
    pass


@overload(matmul)
def _matmul(a, b):
    return _matmul_impl(a, b, blas=False)


@overload(matmul_blas)
def _matmul_blas(a, b):
    return _matmul_impl(a, b, blas=True)


@_stub
def dot(a, b):
    pass


@_stub
def dot_blas(a, b):
    pass


def _dot_impl(a, b, mm):
    if _num(a) or _num(b):
        return lambda a, b: a * b
    if _arr(a) and _arr(b) and (a.ndim == 0 or b.ndim == 0):
        return lambda a, b: a * b
    if _arr(a) and _arr(b) and a.ndim <= 2 and b.ndim <= 2:
        return lambda a, b: mm(a, b)
    return None


@overload(dot)
def _dot(a, b):
    return _dot_impl(a, b, matmul)


@overload(dot_blas)
def _dot_blas(a, b):
    return _dot_impl(a, b, matmul_blas)


def _outer_impl(u, v):
    dt = _result_dtype(u, v)

    def impl(u, v):
        out = np.empty((u.shape[0], v.shape[0]), dt)
        for i in range(u.shape[0]):
            ui = u[i]
            for j in range(v.shape[0]):
                out[i, j] = ui * v[j]
        return out
    return impl


@version
def outer(u, v):
    if _arr(u) and _arr(v) and u.ndim == 1 and v.ndim == 1:
        return _outer_impl(u, v)
    return None


def _matmul_grads(mm):
    def grad_a(g, a, b):
        if not (_arr(a) and _arr(b)):
            return None
        if a.ndim == 2 and b.ndim == 2:
            return lambda g, a, b: mm(g, b.T)
        if a.ndim == 2 and b.ndim == 1:
            return lambda g, a, b: outer(g, b)
        if a.ndim == 1 and b.ndim == 2:
            return lambda g, a, b: mm(b, g)
        if a.ndim == 1 and b.ndim == 1:
            return lambda g, a, b: g * b
        return None

    def grad_b(g, a, b):
        if not (_arr(a) and _arr(b)):
            return None
        if a.ndim == 2 and b.ndim == 2:
            return lambda g, a, b: mm(a.T, g)
        if a.ndim == 1 and b.ndim == 2:
            return lambda g, a, b: outer(a, g)
        if a.ndim == 2 and b.ndim == 1:
            return lambda g, a, b: mm(a.T, g)
        if a.ndim == 1 and b.ndim == 1:
            return lambda g, a, b: g * a
        return None
    return grad_a, grad_b


for _suffix, _mm in (("", matmul), ("_blas", matmul_blas)):
    _ga, _gb = _matmul_grads(_mm)
    for _name, _impl in (("matmul_grad_a", _ga), ("matmul_grad_b", _gb)):
        def _make_stub(g, a, b):
            pass
        _make_stub.__name__ = _name + _suffix
        _s = _stub(_make_stub)
        overload(_s)(_impl)

    def _dot_grad(which, ga=_ga, gb=_gb):
        def ov(g, a, b):
            if _scalar_like(a) or _scalar_like(b):
                if which == "a":
                    return lambda g, a, b: unbroadcast(g * b, a)
                return lambda g, a, b: unbroadcast(g * a, b)
            return (ga if which == "a" else gb)(g, a, b)
        return ov
    for _which in ("a", "b"):
        def _make_stub(g, a, b):
            pass
        _make_stub.__name__ = f"dot_grad_{_which}{_suffix}"
        overload(_stub(_make_stub))(_dot_grad(_which))


# -- broadcasting and reductions -----------------------------------------------------
@version
def unbroadcast(value, like):
    if _num(value) and (_num(like) or _none(like)):
        return lambda value, like: value
    if _num(value) and _arr(like):
        if like.ndim == 0:
            dt = _float_dtype(value)
            return lambda value, like: np.full((), value, dt)
        return lambda value, like: np.full(like.shape, value)
    if _arr(value) and (_num(like) or _none(like)):
        if value.ndim == 0:
            return lambda value, like: value
        return lambda value, like: value.sum()
    if _arr(value) and _arr(like):
        if value.ndim == like.ndim:
            def same_rank(value, like):
                if value.shape == like.shape:
                    return value
                return _sum_to(value, like.shape)
            return same_rank
        if value.ndim > like.ndim:
            return lambda value, like: _sum_to(value, like.shape)
    return None


@version
def unbroadcast_matmul(value, a, b):
    """unbroadcast(value, a @ b) for 1-d and 2-d operands (runtime.unbroadcast_matmul)."""
    if not (_arr(a) and _arr(b)) or a.ndim not in (1, 2) or b.ndim not in (1, 2):
        return None
    if a.ndim == 1 and b.ndim == 1:
        if _scalar_like(value):
            return lambda value, a, b: value
        return (lambda value, a, b: value.sum()) if _arr(value) else None
    shape_of = _PRODUCT_SHAPE[(a.ndim, b.ndim)]
    if _num(value):
        return lambda value, a, b: np.full(shape_of(a, b), value)
    nd = 1 if a.ndim == 1 or b.ndim == 1 else 2
    if not _arr(value) or value.ndim < nd:
        return None
    if value.ndim > nd:
        return lambda value, a, b: _sum_to(value, shape_of(a, b))

    def same_rank(value, a, b):
        shape = shape_of(a, b)
        if value.shape == shape:
            return value
        return _sum_to(value, shape)
    return same_rank


_PRODUCT_SHAPE = {
    (2, 1): register_jitable(lambda a, b: (a.shape[0],)),
    (1, 2): register_jitable(lambda a, b: (b.shape[1],)),
    (2, 2): register_jitable(lambda a, b: (a.shape[0], b.shape[1])),
}


@version
def zeros_like(x):
    if _num(x):
        return lambda x: 0.0
    if _arr(x):
        dt = _float_dtype(x)
        return lambda x: np.zeros(x.shape, dt)
    return None


@version
def ones_like(x):
    if _num(x):
        return lambda x: 1.0
    if _arr(x):
        dt = _float_dtype(x)
        return lambda x: np.ones(x.shape, dt)
    return None


@version
def expand_reduced(g, x, axis=None, keepdims=False):
    if _num(x) or (_arr(x) and x.ndim == 0):
        return lambda g, x, axis=None, keepdims=False: g
    if not _arr(x):
        return None
    if _num(g):
        return lambda g, x, axis=None, keepdims=False: np.full(x.shape, g)
    if not _arr(g):
        return None
    if g.ndim == 0:
        return lambda g, x, axis=None, keepdims=False: np.full(x.shape, g.sum())
    if _none(axis):
        def all_axes(g, x, axis=None, keepdims=False):
            # keepdims: g has x's rank with ones; broadcast it
            gs = _c_strides(g.shape)
            gstr = np.zeros(len(x.shape), np.int64)
            for j in range(len(x.shape)):
                if g.shape[j] != 1:
                    gstr[j] = gs[j]
            return _broadcast_into(g, gstr, x.shape)
        if g.ndim != x.ndim:
            return None
        return all_axes
    to_tuple = _axis_tuple(axis)

    def some_axes(g, x, axis=None, keepdims=False):
        nd = len(x.shape)
        mask = _reduced_mask(nd, to_tuple(axis))
        gs = _c_strides(g.shape)
        gstr = np.zeros(max(nd, 1), np.int64)
        k = 0
        for j in range(nd):
            if keepdims:
                if g.shape[j] != 1:
                    gstr[j] = gs[j]
            elif not mask[j]:
                if g.shape[k] != 1:
                    gstr[j] = gs[k]
                k += 1
        return _broadcast_into(g, gstr, x.shape)
    return some_axes


@version
def reduced_count(x, axis=None):
    if _num(x):
        return lambda x, axis=None: 1
    if not _arr(x):
        return None
    if _none(axis):
        return lambda x, axis=None: x.size
    to_tuple = _axis_tuple(axis)

    def impl(x, axis=None):
        nd = len(x.shape)
        mask = _reduced_mask(nd, to_tuple(axis))
        n = 1
        for j in range(nd):
            if mask[j]:
                n *= x.shape[j]
        return n
    return impl


# -- copies ------------------------------------------------------------------------
def _copy_ov(x):
    if _arr(x) or isinstance(x, (types.List, types.ListType)):
        return lambda x: x.copy()
    return lambda x: x


for _name in ("copy_value", "copy_adjoint", "snapshot"):
    def _make_stub(x):
        pass
    _make_stub.__name__ = _name
    overload(_stub(_make_stub))(_copy_ov)


@version
def real_only(grad, x):
    dt = x.dtype if _arr(x) else x
    if isinstance(dt, types.Complex):
        return None
    return lambda grad, x: grad


@version
def real_part(v):
    """The cotangent of a real variable from complex parts: their real part (a real
    one as it is); None stays None."""
    if _none(v):
        return lambda v: v
    if _arr(v):
        if isinstance(v.dtype, types.Complex):
            return lambda v: np.real(v).copy()
        return lambda v: v
    if isinstance(v, types.Complex):
        return lambda v: v.real
    if _num(v):
        return lambda v: v
    return None


@version
def loop_items_grad(cotangent, value):
    """The items' cotangent handed back to what the loop walked (numba code takes no
    dicts, whose keys would hand back none)."""
    return lambda cotangent, value: cotangent


@version
def loop_items(value):
    """What `for x in value` walks: an array or a tuple by position, as it is; a list
    copied (as the NumPy backend's: a later append must not change it); an iterator
    (np.ndindex, zip, enumerate) walked once, into a list."""
    if _arr(value) or isinstance(value, types.BaseTuple):
        return lambda value: value
    if isinstance(value, types.List):
        return lambda value: list(value)
    if isinstance(value, (types.IteratorType, types.NumpyNdIndexType)):
        def walked(value):
            out = []
            for item in value:
                out.append(item)
            return out
        return walked
    return None


@register_jitable
def _first_axis(axis, ndim):
    """Joins and stacks along axis 0 only (-1 of a vector is 0): another axis raises,
    and the NumPy backend runs the call."""
    if axis != 0 and not (ndim == 1 and axis == -1):
        raise ValueError("only axis 0 in numba code")


@version
def concatenate_grad(g, arrays, axis=0):
    """np.concatenate(arrays, 0)'s cotangents: the slices of g, for a list or tuple
    of arrays of g's rank (runtime.concatenate_grad's fast path); another axis raises,
    and the NumPy backend runs the call."""
    if not _arr(g) or g.ndim == 0 or not isinstance(arrays, (types.List, types.UniTuple)) or \
            not _arr(arrays.dtype) or arrays.dtype.ndim != g.ndim:
        return None

    def pieces(g, arrays, axis=0):
        _first_axis(axis, g.ndim)
        out = []
        start = 0
        for x in arrays:
            n = x.shape[0]
            out.append(g[start:start + n])
            start += n
        return out
    return pieces


@version
def stack_grad(g, arrays, axis=0):
    """np.stack(arrays, 0)'s cotangents: g's items along its first axis, for a list or
    tuple of arrays (or numbers) of one rank less; another axis raises, and the NumPy
    backend runs the call."""
    if not _arr(g) or not isinstance(arrays, (types.List, types.UniTuple)):
        return None
    item = arrays.dtype
    if not ((_arr(item) and item.ndim == g.ndim - 1) or (_num(item) and g.ndim == 1)):
        return None

    def items(g, arrays, axis=0):
        _first_axis(axis, g.ndim)
        return [g[k] for k in range(len(arrays))]
    return items


@version
def cast_into(value, target):
    """value, to be written into target (np.copyto, out=): types NumPy's 'same_kind'
    rule refuses are no implementation here, so the NumPy backend raises its error."""
    try:
        have = as_dtype(value.dtype if _arr(value) else value)
        want = as_dtype(target.dtype if _arr(target) else target)
    except Exception:  # noqa: BLE001 - not a NumPy dtype
        return None
    if not np.can_cast(have, want, casting="same_kind"):
        return None
    return lambda value, target: value


# -- elementwise helpers -----------------------------------------------------------
@version
def balanced_max_mask(x, ans, other):
    if _num(x) and _num(ans) and _num(other):
        def scalar(x, ans, other):
            return (1.0 if x == ans else 0.0) / (2.0 if x == other else 1.0)
        return scalar
    return lambda x, ans, other: np.where(x == ans, 1.0, 0.0) / np.where(x == other, 2.0, 1.0)


@version
def safe_log(x):
    if _num(x):
        return lambda x: np.log(1.0 if x == 0 else x)
    return lambda x: np.log(np.where(x == 0, 1.0, x))


@version
def safe_divide(num, den):
    if _num(num) and _num(den):
        return lambda num, den: 0.0 if den == 0 else num / den
    return lambda num, den: np.where(den == 0, 0.0, num / np.where(den == 0, 1.0, den))


@version
def pick(x, y):
    if _none(x):
        return lambda x, y: y
    return lambda x, y: x


@version
def clip_parts(g, a, lo, hi):
    no_lo, no_hi = _none(lo), _none(hi)
    if no_lo and no_hi:
        return lambda g, a, lo, hi: (g, None, None)
    if no_lo:
        def upper(g, a, lo, hi):
            out = np.minimum(a, hi)
            return (g * balanced_max_mask(a, out, hi), None, g * balanced_max_mask(hi, out, a))
        return upper
    if no_hi:
        def lower(g, a, lo, hi):
            mid = np.maximum(a, lo)
            return (g * balanced_max_mask(a, mid, lo), g * balanced_max_mask(lo, mid, a), None)
        return lower

    def both(g, a, lo, hi):
        mid = np.maximum(a, lo)
        out = np.minimum(mid, hi)
        g_hi = g * balanced_max_mask(hi, out, mid)
        g_mid = g * balanced_max_mask(mid, out, hi)
        return (g_mid * balanced_max_mask(a, mid, lo), g_mid * balanced_max_mask(lo, mid, a),
                g_hi)
    return both


@version
def clip_grads(g, a, a_min=None, a_max=None, min=None, max=None):  # noqa: A002
    def impl(g, a, a_min=None, a_max=None, min=None, max=None):  # noqa: A002
        return clip_parts(g, a, pick(a_min, min), pick(a_max, max))
    return impl


@version
def clip_grad_a(g, a, a_min=None, a_max=None, min=None, max=None):  # noqa: A002
    def impl(g, a, a_min=None, a_max=None, min=None, max=None):  # noqa: A002
        return clip_parts(g, a, pick(a_min, min), pick(a_max, max))[0]
    return impl


@version
def extremum_grad(g, a, ans, axis=None, keepdims=False, initial=None, where=None):
    if not (_none(initial) and _none(where)):
        return None
    if _num(a):
        return lambda g, a, ans, axis=None, keepdims=False, initial=None, where=None: g
    if not _arr(a):
        return None
    if _none(axis):
        def all_axes(g, a, ans, axis=None, keepdims=False, initial=None, where=None):
            ge = expand_reduced(g, a, None, keepdims)
            hit = a == expand_reduced(ans, a, None, keepdims)
            count = max(np.sum(hit), 1)
            return np.where(hit, ge / count, 0.0)
        return all_axes
    to_tuple = _axis_tuple(axis)

    def some_axes(g, a, ans, axis=None, keepdims=False, initial=None, where=None):
        ge = expand_reduced(g, a, axis, keepdims)
        hit = a == expand_reduced(ans, a, axis, keepdims)
        nd = len(a.shape)
        mask = _reduced_mask(nd, to_tuple(axis))
        kept = a.shape
        for j in range(nd):
            if mask[j]:
                kept = tuple_setitem(kept, j, 1)
        counts = _sum_to(np.where(hit, 1.0, 0.0), kept)
        count = expand_reduced(counts, a, axis, True)
        return np.where(hit, ge / np.maximum(count, 1.0), 0.0)
    return some_axes


@version
def transpose_grad(g, axes=None):
    if not _arr(g):
        return None
    if _none(axes):
        return lambda g, axes=None: np.transpose(g)
    if g.ndim <= 2:
        return lambda g, axes=None: np.transpose(g, axes)   # a permutation of 2 is its inverse
    return None


# -- in-place writes ---------------------------------------------------------------
def _basic_index(index) -> bool:
    items = index.types if isinstance(index, types.BaseTuple) else (index,)
    return all(isinstance(i, (types.Integer, types.SliceType)) for i in items)


@version
def add_at(adjoint, index, g):
    if not _arr(adjoint):
        return None
    if _basic_index(index):
        def basic(adjoint, index, g):
            adjoint[index] += g
        return basic
    if _arr(index) and isinstance(index.dtype, types.Integer) and index.ndim == 1:
        if _num(g):
            def scatter_scalar(adjoint, index, g):
                for k in range(index.shape[0]):
                    adjoint[index[k]] += g
            return scatter_scalar
        if _arr(g) and g.ndim == adjoint.ndim:
            def scatter(adjoint, index, g):
                if g.shape[0] != index.shape[0]:
                    raise ValueError("add_at: the cotangent does not match the index")
                for k in range(index.shape[0]):
                    adjoint[index[k]] += g[k]
            return scatter
    return None


@version
def copy_item(container, index):
    if not _arr(container):
        return None

    copy_value = STUBS["copy_value"]

    def impl(container, index):
        return copy_value(container[index])
    return impl


def _basic_index(t) -> bool:
    """An index type that names each element once (ints, slices, None, `...`): the
    NumPy helper's is_basic_index, decided on types."""
    items = t.types if isinstance(t, types.BaseTuple) else (t,)
    return all(isinstance(i, (types.Integer, types.SliceType, types.NoneType,
                              types.EllipsisType)) for i in items)


@version
def written_grad(adjoint, index, value):
    # The cotangent of `value` in `container[index] = value` for a basic index (an
    # integer-array index, which may name an element twice, stays with NumPy).
    if not _arr(adjoint) or not _basic_index(index):
        return None
    copy_item, unbroadcast_ = STUBS["copy_item"], STUBS["unbroadcast"]

    def impl(adjoint, index, value):
        return unbroadcast_(copy_item(adjoint, index), value)
    return impl


@version
def restore_item(container, index, value):
    if not _arr(container):
        return None

    def impl(container, index, value):
        container[index] = value
    return impl


@version
def zero_item(adjoint, index):
    if not _arr(adjoint):
        return None

    def impl(adjoint, index):
        adjoint[index] = 0
    return impl


@version
def accumulate(total, contribution):
    if _none(contribution):
        return lambda total, contribution: total
    if _none(total):
        return lambda total, contribution: contribution
    return lambda total, contribution: total + contribution


@version
def add(total, contribution):
    if isinstance(total, (types.List, types.ListType)) or \
            isinstance(contribution, (types.List, types.ListType)):
        return None
    return lambda total, contribution: total + contribution


@version
def none_to_zero(grad, like):
    if _none(grad):
        return lambda grad, like: zeros_like(like)
    return lambda grad, like: grad


@version
def unshared(value, filename, lineno, col, message, hint, text):
    """The guard of an in-place update of what may be another variable's array: a
    number passes; an array is no numba code's (the NumPy backend raises the error
    with its caret), so it is a typing error and the call runs on NumPy."""
    if isinstance(value, (types.Number, types.Boolean)):
        return lambda value, filename, lineno, col, message, hint, text: None
    return None


# -- reductions over an axis (numba's own take no axis, or no keepdims) -------------
@cached
def _reduce_kept(x, kept, op):
    """Reduce x to the shape `kept` (x.shape with ones on the reduced axes)."""
    nd = len(x.shape)
    cs = _c_strides(kept)
    ostr = np.zeros(max(nd, 1), np.int64)
    for j in range(nd):
        if kept[j] != 1:
            ostr[j] = cs[j]
    if op == 0:
        out = np.zeros(kept, x.dtype)
    elif op == 3:
        out = np.ones(kept, x.dtype)
    else:
        out = np.empty(kept, x.dtype)
    o = out.reshape(out.size)
    seen = np.zeros(o.size, np.bool_)
    v = np.ascontiguousarray(x).reshape(x.size)
    idx = np.zeros(max(nd, 1), np.int64)
    off = 0
    for f in range(v.size):
        a = v[f]
        if op == 0:
            o[off] += a
        elif op == 3:
            o[off] *= a
        elif not seen[off]:
            o[off] = a
            seen[off] = True
        elif op == 1:
            if a > o[off] or a != a:
                o[off] = a
        else:
            if a < o[off] or a != a:
                o[off] = a
        j = nd - 1
        while j >= 0:
            idx[j] += 1
            off += ostr[j]
            if idx[j] < x.shape[j]:
                break
            off -= ostr[j] * x.shape[j]
            idx[j] = 0
            j -= 1
    if op in (1, 2) and x.size == 0:
        raise ValueError("zero-size array to reduction operation which has no identity")
    return out


def _literal(t):
    return getattr(t, "literal_value", None) if isinstance(t, types.Literal) else None


def _reduce_overload(op: int, mean: bool = False):
    def ov(a, axis=None, keepdims=False):
        if not _arr(a) or not isinstance(a.dtype, (types.Float, types.Integer)):
            return None
        k = _literal(axis)
        kd = _literal(keepdims) if not isinstance(keepdims, types.Omitted) else keepdims.value
        if isinstance(keepdims, types.Boolean) and kd is None:
            raise TypingError("keepdims must be a constant")
        if _none(axis):
            k = None
        elif not isinstance(k, int):
            raise TypingError("axis must be a constant int")
        nd = a.ndim
        if k is not None:
            k = k % nd

        def impl(a, axis=None, keepdims=False):
            kept = a.shape
            for j in range(nd):
                if k is None or j == k:
                    kept = tuple_setitem(kept, j, 1)
            r = _reduce_kept(a, kept, op)
            if mean:
                n = 1
                for j in range(nd):
                    if k is None or j == k:
                        n *= a.shape[j]
                r = r / n
            return r
        if kd:
            return impl
        kept_impl = register_jitable(impl)
        if k is None or nd == 1:
            def total(a, axis=None, keepdims=False):
                return kept_impl(a, axis, keepdims).reshape(1)[0]
            return total

        # The result's shape drops axis k: a tuple built with constant indices.
        items = ", ".join(f"s[{j}]" for j in range(nd) if j != k)
        ns = {"kept_impl": kept_impl}
        exec(f"def drop(a, axis=None, keepdims=False):\n"
             f"    s = a.shape\n"
             f"    return kept_impl(a, axis, keepdims).reshape(({items},))\n", ns)
        return ns["drop"]
    return ov


for _name, _op, _mean in (("reduce_sum", 0, False), ("reduce_max", 1, False),
                          ("reduce_min", 2, False), ("reduce_prod", 3, False),
                          ("reduce_mean", 0, True)):
    def _make_stub(a, axis=None, keepdims=False):
        pass
    _make_stub.__name__ = _name
    overload(_stub(_make_stub), prefer_literal=True)(_reduce_overload(_op, _mean))


# -- softmax, log-softmax and logsumexp (runtime/fused.py), along the last axis --------
def _last_axis(x, axis) -> bool:
    """A float array and a constant axis naming its last one (other axes: the NumPy
    backend)."""
    k = _literal(axis)
    if not (_arr(x) and isinstance(x.dtype, types.Float) and x.ndim >= 1 and
            isinstance(k, int) and k % x.ndim == x.ndim - 1):
        raise TypingError("along the last axis of a float array only")
    return True


@register_jitable
def _rows(x):
    n = x.shape[-1]
    return np.ascontiguousarray(x).reshape((-1, n)), n


@register_jitable
def _shifted_rows(x):
    """x as rows, each less its maximum: what softmax and log-softmax start from."""
    rows, n = _rows(x)
    out = np.empty_like(rows)
    for i in range(rows.shape[0]):
        m = np.max(rows[i])
        for j in range(n):
            out[i, j] = rows[i, j] - m
    return out


@version(prefer_literal=True)
def log_softmax(x, axis):
    _last_axis(x, axis)

    def impl(x, axis):
        out = _shifted_rows(x)
        for i in range(out.shape[0]):
            out[i] -= np.log(np.sum(np.exp(out[i])))
        return out.reshape(x.shape)
    return impl


@version(prefer_literal=True)
def softmax(x, axis):
    _last_axis(x, axis)

    def impl(x, axis):
        out = np.exp(_shifted_rows(x))
        for i in range(out.shape[0]):
            out[i] /= np.sum(out[i])
        return out.reshape(x.shape)
    return impl


@version(prefer_literal=True)
def logsumexp(x, axis, keepdims, max_first):
    _last_axis(x, axis)
    keep = _literal(keepdims)
    if not isinstance(keep, bool):
        raise TypingError("keepdims must be a constant")

    def rows_of(x):
        rows, n = _rows(x)
        out = np.empty(rows.shape[0], dtype=rows.dtype)
        for i in range(rows.shape[0]):
            m = np.max(rows[i])
            out[i] = m + np.log(np.sum(np.exp(rows[i] - m)))
        return out
    rows_of = register_jitable(rows_of)
    if keep:
        return lambda x, axis, keepdims, max_first: rows_of(x).reshape(x.shape[:-1] + (1,))
    if x.ndim == 1:
        return lambda x, axis, keepdims, max_first: rows_of(x)[0]
    return lambda x, axis, keepdims, max_first: rows_of(x).reshape(x.shape[:-1])


# -- the logistic sigmoid (runtime/fused.py): the same operations on numbers or arrays --
@version
def sigmoid_exp(x, one):
    return lambda x, one: one / (one + np.exp(-x))


@version
def sigmoid_tanh(x, one):
    return lambda x, one: 0.5 * (np.tanh(0.5 * x) + one)


# -- specialised helpers: what the rewrite calls when it knows the argument kinds ----
# Each is one cached function (numba compiles it per signature, once per machine);
# the generic overloads above remain for kinds the rewrite could not infer.
SPECIAL = {}


def special(fn):
    SPECIAL[fn.__name__] = cached(fn)
    return SPECIAL[fn.__name__]


@special
def ub_same(value, like):
    """unbroadcast for two arrays of the same rank."""
    if value.shape == like.shape:
        return value
    return _sum_to(value, like.shape)


@special
def ub_to(value, shape):
    """unbroadcast(value, to an array of `shape`) for value of shape's rank: the
    same-rank case of unbroadcast_matmul, compiled once per machine instead of in
    every caller (the rewrite reads the product's shape off its operands)."""
    if value.shape == shape:
        return value
    return _sum_to(value, shape)


@special
def ub_sum_to(value, like):
    return _sum_to(value, like.shape)


@special
def ub_sum_all(value):
    return value.sum()


@special
def ub_full(value, like):
    return np.full(like.shape, value)


@special
def zeros_same(x):
    return np.zeros(x.shape, x.dtype)


@special
def zeros_f64(x):
    return np.zeros(x.shape, np.float64)


@special
def full_like(x, g):
    return np.full(x.shape, g)


@special
def bmm_aaa(x, ans, other):
    """balanced_max_mask on three arrays of one shape: (x == ans) / (1 + (x == other))."""
    if x.shape != ans.shape or x.shape != other.shape:
        raise ValueError("balanced_max_mask: shapes differ")
    out = np.empty(x.shape, np.float64)
    o, xf = out.reshape(out.size), np.ascontiguousarray(x).reshape(x.size)
    af = np.ascontiguousarray(ans).reshape(ans.size)
    bf = np.ascontiguousarray(other).reshape(other.size)
    for i in range(o.size):
        o[i] = (1.0 if xf[i] == af[i] else 0.0) / (2.0 if xf[i] == bf[i] else 1.0)
    return out


@special
def bmm_saa(x, ans, other):
    if ans.shape != other.shape:
        raise ValueError("balanced_max_mask: shapes differ")
    out = np.empty(ans.shape, np.float64)
    o = out.reshape(out.size)
    af = np.ascontiguousarray(ans).reshape(ans.size)
    bf = np.ascontiguousarray(other).reshape(other.size)
    for i in range(o.size):
        o[i] = (1.0 if x == af[i] else 0.0) / (2.0 if x == bf[i] else 1.0)
    return out


@special
def bmm_aas(x, ans, other):
    if x.shape != ans.shape:
        raise ValueError("balanced_max_mask: shapes differ")
    out = np.empty(x.shape, np.float64)
    o, xf = out.reshape(out.size), np.ascontiguousarray(x).reshape(x.size)
    af = np.ascontiguousarray(ans).reshape(ans.size)
    for i in range(o.size):
        o[i] = (1.0 if xf[i] == af[i] else 0.0) / (2.0 if xf[i] == other else 1.0)
    return out


@special
def bmm_sss(x, ans, other):
    return (1.0 if x == ans else 0.0) / (2.0 if x == other else 1.0)


@special
def clip_ss(g, a, lo, hi):
    """clip_grads for an array between two numbers: (g_a, g_lo, g_hi), ties split in half.

    mid = maximum(a, lo), out = minimum(mid, hi); NaN propagates as in NumPy.
    """
    if g.shape != a.shape:
        raise ValueError("clip_grads: the cotangent's shape differs")
    ga = np.empty(a.shape, np.float64)
    glo = np.empty(a.shape, np.float64)
    ghi = np.empty(a.shape, np.float64)
    gf = np.ascontiguousarray(g).reshape(g.size)
    af = np.ascontiguousarray(a).reshape(a.size)
    oa, ol, oh = ga.reshape(ga.size), glo.reshape(glo.size), ghi.reshape(ghi.size)
    for i in range(af.size):
        x = af[i]
        mid = np.nan if (x != x or lo != lo) else (x if x >= lo else lo)
        out = np.nan if (mid != mid or hi != hi) else (mid if mid <= hi else hi)
        gi = gf[i]
        oh[i] = gi * ((1.0 if hi == out else 0.0) / (2.0 if hi == mid else 1.0))
        gmid = gi * ((1.0 if mid == out else 0.0) / (2.0 if mid == hi else 1.0))
        ol[i] = gmid * ((1.0 if lo == mid else 0.0) / (2.0 if lo == x else 1.0))
        oa[i] = gmid * ((1.0 if x == mid else 0.0) / (2.0 if x == lo else 1.0))
    return ga, glo, ghi


@special
def clip_a_ss(g, a, lo, hi):
    """clip_grad_a for an array between two numbers: clip_ss's first array alone."""
    if g.shape != a.shape:
        raise ValueError("clip_grads: the cotangent's shape differs")
    ga = np.empty(a.shape, np.float64)
    gf = np.ascontiguousarray(g).reshape(g.size)
    af = np.ascontiguousarray(a).reshape(a.size)
    oa = ga.reshape(ga.size)
    for i in range(af.size):
        x = af[i]
        mid = np.nan if (x != x or lo != lo) else (x if x >= lo else lo)
        out = np.nan if (mid != mid or hi != hi) else (mid if mid <= hi else hi)
        gmid = gf[i] * ((1.0 if mid == out else 0.0) / (2.0 if mid == hi else 1.0))
        oa[i] = gmid * ((1.0 if x == mid else 0.0) / (2.0 if x == lo else 1.0))
    return ga


# (x[:0] * y[:0]).dtype: the promoted dtype, typed at compile time (numba has no
# np.result_type).
@special
def mm22(a, b):
    dt = (a[:0, :0] * b[:0, :0]).dtype
    return _mm22(a, b, np.zeros((a.shape[0], b.shape[1]), dt))


@special
def mm21(a, b):
    return _mm21(a, b, np.zeros(a.shape[0], (a[0, :0] * b[:0]).dtype))


@special
def mm12(a, b):
    return _mm12(a, b, np.zeros(b.shape[1], (a[:0] * b[0, :0]).dtype))


@special
def mm11(a, b):
    if a.shape[0] != b.shape[0]:
        raise ValueError("matmul: mismatch in its core dimension")
    s = np.zeros(1, (a[:0] * b[:0]).dtype)
    for i in range(a.shape[0]):
        s[0] += a[i] * b[i]
    return s[0]


@special
def outer11(u, v):
    out = np.empty((u.shape[0], v.shape[0]), (u[:0] * v[:0]).dtype)
    for i in range(u.shape[0]):
        ui = u[i]
        for j in range(v.shape[0]):
            out[i, j] = ui * v[j]
    return out


# Array arithmetic and NumPy's calls as calls: numba compiles an inline array
# expression in every function that contains it (tens of milliseconds each); a call
# of one of these is compiled once per machine and signature. One cached function
# per name (numba's cache is keyed by it), each calling what the table names.
_CALLED = {**{"op_" + op: (getattr(operator, "truediv" if op == "div" else op), arity)
              for op, arity in OPERATORS.items()},
           **{"np_" + f: (getattr(np, f), arity) for f, arity in NUMPY_CALLS.items()}}


def _calling(fn, arity: int):
    """fn(a, ...) as a function of its own."""
    if arity == 1:
        def call(a):
            return fn(a)
    elif arity == 2:
        def call(a, b):
            return fn(a, b)
    else:
        def call(a, b, c):
            return fn(a, b, c)
    return call


for _name, (_fn, _arity) in _CALLED.items():
    _call = _calling(_fn, _arity)
    _call.__name__ = _call.__qualname__ = _name
    special(_call)

@special
def empty_f64_0():
    return np.empty((), np.float64)


@special
def empty_f64_1():
    return np.empty((0,), np.float64)


@special
def empty_f64_2():
    return np.empty((0, 0), np.float64)


@special
def empty_f64_3():
    return np.empty((0, 0, 0), np.float64)


@special
def range1(stop):
    return (np.int64(0), np.int64(stop), np.int64(1))


@special
def range2(start, stop):
    return (np.int64(start), np.int64(stop), np.int64(1))


@special
def range3(start, stop, step):
    if step == 0:
        raise ValueError("range() arg 3 must not be zero")
    return (np.int64(start), np.int64(stop), np.int64(step))


@special
def riter_args(r):
    return r


@special
def rrev_args(r):
    """(start, stop, step) of reversed(range(*r))."""
    n = len(range(r[0], r[1], r[2]))
    return (r[0] + (n - 1) * r[2], r[0] - r[2], -r[2])


@special
def empty_list(item):
    """An empty list of item's type (a placeholder for a callee's stack)."""
    out = [item]
    out.pop()
    return out


def namespace(blas: bool, constants: Optional[dict] = None) -> dict:
    """What the names generated numba code reads are bound to (its callees aside):
    numpy, the `_nb_` helpers (their stubs), and the user's `constants`. A worker
    process (numba_worker) binds the same."""
    from numba.typed import List
    ns = {"np": np, "_nb_math": math, "__builtins__": __builtins__}
    ns.update({"_nb_" + name: stub for name, stub in STUBS.items()
               if not name.endswith("_blas")})
    ns["_nb_List"] = List
    for name, fn in SPECIAL.items():
        ns["_nb_" + name] = fn
    from .numba_math import FAST, HELPERS
    for name, fn in FAST.items():
        ns["_nb_fast_" + name] = fn
    for name, fn in HELPERS.items():
        ns["_nb_" + name] = fn
    if blas:
        for name, stub in STUBS.items():
            if name.endswith("_blas"):
                ns["_nb_" + name[:-len("_blas")]] = stub
    ns.update(constants or {})
    return ns
