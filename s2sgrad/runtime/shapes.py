"""Shapes in generated adjoints: undoing broadcasting and reductions, zeros of a shape.

The adjoint of broadcasting sums a cotangent down to its value's shape; the
adjoint of a reduction spreads it back. These helpers need only shapes and
dtypes, which is why the forward may keep an `ArrayMeta` instead of an array.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, Tuple

import numpy as np

from .arrays import as_array, cast_into, is_foreign_array, size_of
from .registry import helper


def swap_last_axes(x):
    """The transpose of a matrix, or of each matrix in a stack."""
    return np.swapaxes(x, -1, -2)


def shape_of(x: Any) -> Tuple[int, ...]:
    shape = getattr(x, "shape", None)
    return shape if shape is not None else np.shape(x)


class ArrayMeta:
    """Shape and dtype of an array the adjoint needs only for its shape (shared
    between arrays of one shape and dtype: never changed once made).

    The forward keeps this instead of the array when no rule reads the values,
    so intermediate arrays are not held alive just to undo broadcasting.
    """

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self) -> str:
        return f"ArrayMeta(shape={self.shape}, dtype={self.dtype})"


helper(size_of)   # generated code's `_s2s_size_of(x)`: np.size(x), in any array library
helper(cast_into)   # np.copyto(y, x) and out=y written as y[...] = _s2s_cast_into(x, y)


# One description per shape and dtype, shared: a loop that keeps one per step keeps a
# pointer per step, not an object (nor the array itself, as small arrays once were).
_METAS: dict = {}


@helper
def meta(x):
    """What the adjoint keeps of a value it reads only for shape and dtype: the
    shared ArrayMeta of its shape and dtype (an ndarray's; anything else as it is)."""
    if type(x) is np.ndarray:
        key = (x.shape, x.dtype)
        known = _METAS.get(key)
        if known is None:
            if len(_METAS) >= 4096:   # (shapes without end: start again)
                _METAS.clear()
            known = _METAS[key] = ArrayMeta(x.shape, x.dtype)
        return known
    return x


@helper
def unbroadcast(value, like):
    """Sum `value` down to the shape of `like`: the adjoint of broadcasting."""
    if type(like) is float:
        shape = ()
    else:
        shape = getattr(like, "shape", None)
        if shape is None:
            if isinstance(value, (list, tuple)) and isinstance(like, (list, tuple)) and \
                    len(value) == len(like):
                # The cotangent of a structure (a residual tuple, in derivatives of
                # derivatives): item by item.
                return type(value)(v if v is None else unbroadcast(v, item)
                                   for v, item in zip(value, like))
            if isinstance(value, dict) and isinstance(like, dict):
                return {k: v if v is None or k not in like else unbroadcast(v, like[k])
                        for k, v in value.items()}
            shape = np.shape(like)  # a list or tuple taken as an array
    vshape = getattr(value, "shape", ())
    if vshape == shape:
        return value
    return sum_to_shape(value, shape)


@helper
def broadcast_like(cot, value):
    """cot broadcast to value's shape: the transpose of unbroadcast (item by item
    where value is a structure, as unbroadcast is)."""
    if isinstance(value, (list, tuple)) and isinstance(cot, (list, tuple)) and \
            len(cot) == len(value):
        return type(cot)(c if c is None else broadcast_like(c, v) for c, v in zip(cot, value))
    if isinstance(cot, dict) and isinstance(value, dict):
        return {k: c if c is None or k not in value else broadcast_like(c, value[k])
                for k, c in cot.items()}
    return np.broadcast_to(cot, np.shape(value))


@helper
def unbroadcast_matmul(value, a, b):
    """unbroadcast(value, a @ b), the product's shape read off its operands.

    The adjoint reads a and b anyway (for the product's own rule), so the
    forward need not keep the product just to tell its shape: an RNN's
    `W @ h` is then not saved at every step.
    """
    if type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim <= 2:
        shape = a.shape[:1] if b.ndim == 1 else (a.shape[0], b.shape[1])
    else:
        shape = matmul_shape(shape_of(a), shape_of(b))
    if getattr(value, "shape", ()) == shape:
        return value
    return sum_to_shape(value, shape)


def matmul_shape(a_shape: Tuple[int, ...], b_shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """The shape of a @ b, by NumPy's rules for 1-d and stacked operands."""
    if len(a_shape) == 1 and len(b_shape) == 1:
        return ()
    if len(b_shape) == 1:
        return tuple(a_shape[:-1])
    if len(a_shape) == 1:
        return tuple(b_shape[:-2]) + (b_shape[-1],)
    batch = np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    return tuple(batch) + (a_shape[-2], b_shape[-1])


def sum_to_shape(value, shape):
    """value summed down to `shape` (the axes broadcasting added or widened)."""
    if type(value) is np.ndarray and value.dtype.char in "fdFD" and value.size and \
            value.flags.c_contiguous:
        summed = _summed_by_product(value, tuple(shape))
        if summed is not None:
            return summed
    if not hasattr(value, "ndim"):   # (an array of any library stays in its library)
        value = as_array(value)
    extra = value.ndim - len(shape)
    if extra > 0:
        value = value.sum(axis=tuple(range(extra)))
    elif extra < 0:   # a cotangent of lower rank (an item's zero): broadcast up, as NumPy
        value = value.reshape((1,) * -extra + tuple(value.shape))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and value.shape[i] != 1)
    if axes:
        value = value.sum(axis=axes, keepdims=True)
    if value.shape != tuple(shape):
        value = np.broadcast_to(value, shape)
    return value[()] if value.ndim == 0 else value


# Sums over the leading or the trailing axes of a C-ordered float array as a product
# with ones (BLAS's matrix-vector product): NumPy adds the rows of a (5000, 8)
# cotangent a row at a time, a call per row (89 us; the product: 10 us), and is
# slower at every shape measured, (20000, 100) and (100, 10000) included
# (docs/benchmarks.md). The cases are told apart by their shapes alone: this runs
# for every bias of every layer at every step.
_ONES: dict = {}


def _summed_by_product(value: np.ndarray, shape: tuple):
    """value summed to `shape` where that sums only its leading axes (dropped or
    kept as 1) or only its trailing ones (kept as 1), every other axis unchanged;
    else None (NumPy's sum: axes between, broadcasting up, a sum of everything)."""
    vshape = value.shape
    nd, k = len(vshape), len(shape)
    if nd > k:   # leading axes dropped (and maybe more summed, kept as 1)
        lead = nd - k
        if not k:
            return None   # (a sum of everything: NumPy's pairwise sum of contiguous memory)
        while lead < nd - 1 and shape[lead - nd + k] == 1 and vshape[lead] != 1:
            lead += 1
        if vshape[lead:] != shape[lead - nd + k:]:
            return None
    elif nd == k and nd > 1:
        if shape[0] == 1 and vshape[0] != 1:   # leading axes kept as 1
            lead = 1
            while lead < nd - 1 and shape[lead] == 1 and vshape[lead] != 1:
                lead += 1
            if vshape[lead:] != shape[lead:]:
                return None
        elif shape[-1] == 1 and vshape[-1] != 1:   # trailing axes kept as 1
            cut = nd - 1
            while cut > 1 and shape[cut - 1] == 1 and vshape[cut - 1] != 1:
                cut -= 1
            if vshape[:cut] != shape[:cut]:
                return None
            n = math.prod(vshape[cut:])
            return (value.reshape(-1, n) @ _ones(n, value.dtype)).reshape(shape)
        else:
            return None
    else:
        return None
    n = math.prod(vshape[:lead])
    rows = value if nd == 2 else value.reshape(n, -1)
    total = _ones(n, value.dtype) @ rows
    return total if total.shape == shape else total.reshape(shape)


def _ones(n: int, dtype) -> np.ndarray:
    """A read-only vector of n ones, shared."""
    key = (n, dtype)
    ones = _ONES.get(key)
    if ones is None:
        if len(_ONES) >= 256:   # (lengths without end: start again)
            _ONES.clear()
        ones = _ONES[key] = np.ones(n, dtype)
        ones.flags.writeable = False
    return ones


@helper
def zeros_like(x, items=None):
    """A zero cotangent for `x`: a Python 0.0 for Python numbers, else an array.

    Lists and tuples (of arrays) get a list of zeros, one per item. `items`, when
    given, flags which items vary (nested for items that are tuples): the others,
    whose cotangents the caller never reads, get a scalar 0.0.
    """
    if isinstance(x, (float, int)) and not isinstance(x, (bool, np.generic)):
        return 0.0
    if isinstance(x, dict):   # the cotangent of a dict is a dict with its keys
        return {k: zero_cotangent_item(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        if items is not None:
            return [zeros_like(item, flag) if isinstance(flag, tuple) else
                    (zero_cotangent_item(item) if flag else 0.0) for item, flag in zip(x, items)]
        return [zero_cotangent_item(item) for item in x]
    if isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        # Another sequence (a range): one zero per item; None stays None.
        return [None if item is None else zeros_like(item) for item in x]
    if isinstance(x, ArrayMeta):
        return np.zeros(x.shape, x.dtype if np.issubdtype(x.dtype, np.inexact) else np.float64)
    if is_foreign_array(x):   # another library's array (Dask, CuPy): made by it
        return np.zeros_like(x, dtype=x.dtype if np.issubdtype(x.dtype, np.inexact)
                             else np.float64)
    x = as_array(x)
    dtype = x.dtype if np.issubdtype(x.dtype, np.inexact) else np.float64
    return np.zeros(x.shape, dtype)


# The items of a structure's zero cotangent are read-only views of one 0-d zero:
# no memory is written until something reaches them (add_items then takes the
# contribution as it is), and nothing can update them in place by mistake.
# One view per shape and dtype, shared (made once: np.broadcast_to costs microseconds,
# and a structure's zero cotangent is made in every call of a helper in a loop).
_ZERO_BASES: dict = {}
ZERO_IDS: set = set()
_ZERO_VIEWS: dict = {}


def zero_cotangent_item(item):
    if isinstance(item, (list, tuple, dict)) or not isinstance(item, (np.ndarray, ArrayMeta)):
        return zeros_like(item)
    key = (item.shape, item.dtype)
    view = _ZERO_VIEWS.get(key)
    if view is not None:
        return view
    dtype = item.dtype if np.issubdtype(item.dtype, np.inexact) else np.dtype(np.float64)
    base = _ZERO_BASES.get(dtype)
    if base is None:
        base = np.zeros((), dtype)
        base.flags.writeable = False
        _ZERO_BASES[dtype] = base
        ZERO_IDS.add(id(base))
    if len(_ZERO_VIEWS) >= 4096:   # (shapes without end: start again)
        _ZERO_VIEWS.clear()
    view = _ZERO_VIEWS[key] = np.broadcast_to(base, item.shape)
    return view


@helper
def ones_like(x):
    if isinstance(x, (float, int)) and not isinstance(x, (bool, np.generic)):
        return 1.0
    if is_foreign_array(x):
        return np.ones_like(x, dtype=np.result_type(x.dtype, np.float64)
                            if not np.issubdtype(x.dtype, np.inexact) else x.dtype)
    return np.ones(shape_of(x), np.result_type(x, np.float64)
                   if not np.issubdtype(as_array(x).dtype, np.inexact) else as_array(x).dtype)


def normalize_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, numbers.Integral):
        axis = (axis,)
    return tuple(sorted(int(a) % ndim if ndim else 0 for a in axis))


@helper
def expand_reduced(g, x, axis=None, keepdims=False):
    """Broadcast the cotangent of a reduction back over the reduced axes of x."""
    shape = shape_of(x)
    if not keepdims and axis is not None and len(shape):
        if type(axis) is int and type(g) is np.ndarray and g.ndim == len(shape) - 1 and \
                -len(shape) <= axis < len(shape):
            a = axis % len(shape)    # one axis: a reshape, without expand_dims' checks
            g = g.reshape(g.shape[:a] + (1,) + g.shape[a:])
        else:
            g = np.expand_dims(g, normalize_axes(axis, len(shape)))
    if is_foreign_array(x):   # in x's library (CuPy refuses NumPy arrays) and chunks
        return _filled_like(g, x)   # (a NumPy view of x's shape would become one chunk)
    if not _small(shape):
        return np.broadcast_to(g, shape)
    # np.broadcast_to costs microseconds; for a small array a filled copy is
    # cheaper (np.empty + fill or one broadcast write, cheaper than np.full).
    if type(g) is np.ndarray and g.ndim:
        out = np.empty(shape, g.dtype)   # the dtype broadcast_to would give
        out[...] = g
        return out
    if type(g) is float or (np.ndim(g) == 0 and not is_foreign_array(g)):
        dtype = _dtype_of(x)
        if not (type(g) is float and dtype is _FLOAT64):   # skip the usual promotion
            dtype = np.result_type(g, dtype)
        out = np.empty(shape, dtype)
        out.fill(g)
        return out
    return np.broadcast_to(g, shape)


_FLOAT64 = np.dtype(np.float64)


def _filled_like(g, x):
    """g (0-d, or x's shape with reduced axes kept) spread over another library's
    array x, made by that library in x's chunks: one fill where g is a number."""
    dtype = np.result_type(g, x.dtype)
    if type(g) is float or (type(g) is np.ndarray and g.ndim == 0) or \
            isinstance(g, np.generic):
        return np.full_like(x, g[()] if type(g) is np.ndarray else g, dtype=dtype)
    return g * np.ones_like(x, dtype=dtype)


_SMALL = 1 << 12


def _small(shape) -> bool:
    n = 1
    for d in shape:
        n *= d
    return n <= _SMALL


def _dtype_of(x):
    dtype = getattr(x, "dtype", None)
    return dtype if dtype is not None and dtype.kind in "fc" else np.float64


@helper
def reduced_count(x, axis=None):
    """How many elements a reduction over `axis` combined (for mean's adjoint)."""
    shape = shape_of(x)
    if axis is None:
        return int(np.prod(shape, dtype=np.int64)) if shape else 1
    return int(np.prod([shape[a] for a in normalize_axes(axis, len(shape))], dtype=np.int64))


@helper
def unit(like, k):
    """An array of like's shape and float dtype with 1 at flat index k and 0
    elsewhere: the cotangent that picks one row of a Jacobian."""
    if isinstance(like, (tuple, list, dict)):
        raise TypeError("functional.jacobian and hessian inside a differentiated function "
                        "need func to return one array, not a "
                        f"{type(like).__name__}")
    out = np.zeros(np.shape(like), dtype=_dtype_of(like))
    out.reshape(-1)[k] = 1.0
    return out
