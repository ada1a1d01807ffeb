"""Helpers that generated code calls, under the reserved `_s2s_` prefix.

Only what does not read well as one line of NumPy lives here: undoing
broadcasting, re-expanding reduced axes, the N-d cases of matmul/dot. Each
helper is an ordinary NumPy function, so generated code stays plain NumPy and
can be differentiated again.
"""
from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, Callable, Dict, Tuple

import numpy as np

HELPERS: Dict[str, Callable] = {}


def helper(fn: Callable) -> Callable:
    """Register `fn` so templates may call it by name (emitted as _s2s_<name>)."""
    HELPERS[fn.__name__] = fn
    return fn


def new_helper(fn: Callable) -> Callable:
    """helper() for the rule tables' helpers: a name already taken by another
    function is an error, not a silent replacement."""
    if fn.__name__ in HELPERS and HELPERS[fn.__name__] is not fn:
        raise ValueError(f"helper name {fn.__name__!r} is already taken")
    return helper(fn)


def swap_last_axes(x):
    """The transpose of a matrix, or of each matrix in a stack."""
    return np.swapaxes(x, -1, -2)


def shape_of(x: Any) -> Tuple[int, ...]:
    shape = getattr(x, "shape", None)
    return shape if shape is not None else np.shape(x)


class ArrayMeta:
    """Shape and dtype of an array the adjoint needs only for its shape.

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


@helper
def meta(x):
    """What the adjoint keeps of a value it reads only for shape and dtype.

    Small arrays are kept as they are (cheaper than describing them).
    """
    if type(x) is np.ndarray and x.size > _SMALL:
        return ArrayMeta(x.shape, x.dtype)
    return x


@helper
def unbroadcast(value, like):
    """Sum `value` down to the shape of `like`: the adjoint of broadcasting."""
    if type(like) is float:
        shape = ()
    else:
        shape = getattr(like, "shape", None)
        if shape is None:
            shape = np.shape(like)  # a list or tuple taken as an array
    vshape = getattr(value, "shape", ())
    if vshape == shape:
        return value
    return sum_to_shape(value, shape)


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
    value = np.asarray(value)
    extra = value.ndim - len(shape)
    if extra > 0:
        value = value.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and value.shape[i] != 1)
    if axes:
        value = value.sum(axis=axes, keepdims=True)
    if value.shape != tuple(shape):
        value = np.broadcast_to(value, shape)
    return value[()] if value.ndim == 0 else value


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
        return {k: _zero_item(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        if items is not None:
            return [zeros_like(item, flag) if isinstance(flag, tuple) else
                    (_zero_item(item) if flag else 0.0) for item, flag in zip(x, items)]
        return [_zero_item(item) for item in x]
    if isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        # A lazy sequence of cotangents (numpy_helpers._Lazy): None stays None.
        return [None if item is None else zeros_like(item) for item in x]
    if isinstance(x, ArrayMeta):
        return np.zeros(x.shape, x.dtype if np.issubdtype(x.dtype, np.inexact) else np.float64)
    x = np.asarray(x)
    dtype = x.dtype if np.issubdtype(x.dtype, np.inexact) else np.float64
    return np.zeros(x.shape, dtype)


# The items of a structure's zero cotangent are read-only views of one 0-d zero:
# no memory is written until something reaches them (add_items then takes the
# contribution as it is), and nothing can update them in place by mistake.
_ZERO_BASES: dict = {}
_ZERO_IDS: set = set()


def _zero_item(item):
    if isinstance(item, (list, tuple, dict)) or not isinstance(item, (np.ndarray, ArrayMeta)):
        return zeros_like(item)
    dtype = item.dtype if np.issubdtype(item.dtype, np.inexact) else np.dtype(np.float64)
    base = _ZERO_BASES.get(dtype)
    if base is None:
        base = np.zeros((), dtype)
        base.flags.writeable = False
        _ZERO_BASES[dtype] = base
        _ZERO_IDS.add(id(base))
    return np.broadcast_to(base, item.shape)


@helper
def ones_like(x):
    if isinstance(x, (float, int)) and not isinstance(x, (bool, np.generic)):
        return 1.0
    return np.ones(shape_of(x), np.result_type(x, np.float64)
                   if not np.issubdtype(np.asarray(x).dtype, np.inexact) else np.asarray(x).dtype)


def _normalize_axes(axis, ndim):
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
            g = np.expand_dims(g, _normalize_axes(axis, len(shape)))
    if not _small(shape):
        return np.broadcast_to(g, shape)
    # np.broadcast_to costs microseconds; for a small array a filled copy is
    # cheaper (np.empty + fill or one broadcast write, cheaper than np.full).
    if type(g) is np.ndarray and g.ndim:
        out = np.empty(shape, g.dtype)   # the dtype broadcast_to would give
        out[...] = g
        return out
    if type(g) is float or np.ndim(g) == 0:
        dtype = _dtype_of(x)
        if not (type(g) is float and dtype is _FLOAT64):   # skip the usual promotion
            dtype = np.result_type(g, dtype)
        out = np.empty(shape, dtype)
        out.fill(g)
        return out
    return np.broadcast_to(g, shape)


_FLOAT64 = np.dtype(np.float64)


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
    return int(np.prod([shape[a] for a in _normalize_axes(axis, len(shape))], dtype=np.int64))


@helper
def matmul_grad_a(g, a, b):
    """Cotangent of `a` in a @ b, for every combination of 1-d and N-d operands."""
    if type(a) is np.ndarray and type(b) is np.ndarray:
        # The usual case, without np.ndim's dispatch or unbroadcast's call: this
        # runs once per matrix product per loop step (an RNN's W @ h).
        a_nd, b_nd = a.ndim, b.ndim
        if a_nd == 2 and b_nd == 2:
            return g @ b.T
        if a_nd == 2 and b_nd == 1 and type(g) is np.ndarray and g.ndim == 1:
            return np.multiply.outer(g, b)
    a_nd, b_nd = np.ndim(a), np.ndim(b)
    if a_nd == 2 and b_nd == 2:
        return g @ b.T
    if b_nd == 1:
        ga = np.multiply.outer(g, b) if a_nd == 1 else g[..., None] * b
    elif a_nd == 1:
        ga = (b @ g[..., None])[..., 0]
    else:
        ga = g @ np.swapaxes(b, -1, -2)
    return unbroadcast(ga, a)


@helper
def matmul_grad_b(g, a, b):
    """Cotangent of `b` in a @ b."""
    if type(a) is np.ndarray and type(b) is np.ndarray:
        a_nd, b_nd = a.ndim, b.ndim   # the usual cases first, as in matmul_grad_a
        if a_nd == 2 and b_nd == 2:
            return a.T @ g
        if a_nd == 2 and b_nd == 1 and type(g) is np.ndarray and g.ndim == 1:
            return a.T @ g
    a_nd, b_nd = np.ndim(a), np.ndim(b)
    if a_nd == 2 and b_nd == 2:
        return a.T @ g
    if a_nd == 1:
        gb = np.multiply.outer(a, g) if b_nd > 1 else g * a
    elif b_nd == 1:
        gb = np.swapaxes(a, -1, -2) @ g[..., None]
        gb = gb[..., 0]
    else:
        gb = np.swapaxes(a, -1, -2) @ g
    return unbroadcast(gb, b)


@helper
def dot_grad_a(g, a, b):
    """Cotangent of `a` in np.dot(a, b) (scalar, 1-d, 2-d and N-d cases)."""
    a_nd, b_nd = np.ndim(a), np.ndim(b)
    if a_nd == 0 or b_nd == 0:
        return unbroadcast(g * b, a)
    if b_nd <= 2 and a_nd <= 2:
        return matmul_grad_a(g, a, b)
    # dot(a, b)[i.., k.., m] = sum_j a[i.., j] * b[k.., j, m]
    b_free = tuple(range(b_nd - 2)) + ((b_nd - 1,) if b_nd > 1 else ())
    g_axes = tuple(range(a_nd - 1, np.ndim(g)))
    return np.tensordot(g, b, axes=(g_axes, b_free))


@helper
def dot_grad_b(g, a, b):
    """Cotangent of `b` in np.dot(a, b)."""
    a_nd, b_nd = np.ndim(a), np.ndim(b)
    if a_nd == 0 or b_nd == 0:
        return unbroadcast(g * a, b)
    if b_nd <= 2 and a_nd <= 2:
        return matmul_grad_b(g, a, b)
    ga_axes = tuple(range(a_nd - 1))
    gb = np.tensordot(a, g, axes=(ga_axes, ga_axes))  # (j, k.., m)
    if b_nd == 1:
        return gb
    return np.moveaxis(gb, 0, -2)


@helper
def transpose_grad(g, axes=None):
    """Undo np.transpose(x, axes) on the cotangent."""
    if axes is None:
        return np.transpose(g)
    return np.transpose(g, np.argsort(axes))


@helper
def balanced_max_mask(x, ans, other):
    """Where x won an elementwise max/min; ties split the gradient in half."""
    return (x == ans) / (1.0 + (x == other))


@helper
def safe_log(x):
    """log(x) with log(0) taken as 0, for d/dy x**y at x == 0 (where ans is 0)."""
    return np.log(np.where(x == 0, 1.0, x))


@helper
def check_count(grads, expected: int, method: str):
    """Validate that a Function's vjp returned one gradient per input.

    `method` is "Class.vjp" (or "Class.backward"), for the message.
    """
    return one_per(grads, expected, method, "gradient", "input")


def one_per(values, expected: int, method: str, what: str, per: str):
    """`values` as a sequence of `expected` items (one bare value is a 1-tuple),
    or a TypeError naming the Function method that returned the wrong count."""
    if expected == 1 and not isinstance(values, (tuple, list)):
        return (values,)
    got = len(values) if isinstance(values, (tuple, list)) else 1
    if got != expected:
        cls = method.rsplit(".", 1)[0]
        raise TypeError(f"{method} returns {got} {what}(s), expected {expected} "
                        f"(one per {per} of {cls}.forward)")
    return values


@helper
def none_to_zero(grad, like):
    """A Function's vjp may return None for "no gradient": make it a zero."""
    return zeros_like(like) if grad is None else grad


@helper
def copy_adjoint(adjoint):
    """A private copy of an adjoint before it is updated in place."""
    if isinstance(adjoint, list):
        return list(adjoint)
    if isinstance(adjoint, dict):
        return dict(adjoint)
    return adjoint.copy() if isinstance(adjoint, np.ndarray) else adjoint


def _is_basic_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(isinstance(i, (numbers.Integral, slice, type(None), type(Ellipsis)))
               and not isinstance(i, bool) for i in items)


def add_items(total, contribution):
    """total + contribution, item by item where the adjoints are lists or tuples
    (the adjoint of a list of arrays is a list; `+` would concatenate)."""
    if type(total) is np.ndarray and id(total.base) in _ZERO_IDS:
        if np.shape(contribution) == total.shape and isinstance(contribution, np.ndarray):
            return contribution    # (a cotangent the adjoint no longer updates)
        if _symbolic_zero(contribution):
            return total
        return total + contribution
    if type(contribution) is np.ndarray and id(contribution.base) in _ZERO_IDS:
        return total
    seq_total = isinstance(total, (list, tuple))
    seq_contribution = isinstance(contribution, (list, tuple))
    if seq_total or seq_contribution:
        if not seq_contribution and _symbolic_zero(contribution):
            return total
        if not seq_total and _symbolic_zero(total):
            return list(contribution)
        if not (seq_total and seq_contribution) or len(total) != len(contribution):
            from .errors import InternalError
            raise InternalError(f"cotangents of different structures meet: "
                                f"{type(total).__name__} and {type(contribution).__name__}")
        return [add_items(a, b) for a, b in zip(total, contribution)]
    if isinstance(total, dict) or isinstance(contribution, dict):
        if not isinstance(contribution, dict):
            return total            # a symbolic zero (0.0) added to a dict's cotangent
        if not isinstance(total, dict):
            return dict(contribution)
        out = dict(total)
        for k, v in contribution.items():
            out[k] = add_items(out[k], v) if k in out else v
        return out
    return total + contribution


def _symbolic_zero(value) -> bool:
    """The 0.0 (or None) standing for a cotangent nothing has reached yet."""
    return value is None or (type(value) in (int, float) and value == 0)


@helper
def add_at(adjoint, index, g):
    """adjoint[index] += g, where repeated indices accumulate (scatter-add).

    `adjoint` is an array owned by the adjoint code, or a list for a Python
    list. Basic indices (ints, slices) cannot repeat, so they take the fast path.
    """
    if isinstance(adjoint, list):
        if isinstance(index, slice):
            for k, gk in zip(range(*index.indices(len(adjoint))), g):
                adjoint[k] = add_items(adjoint[k], gk)
        else:
            adjoint[index] = add_items(adjoint[index], g)
        return
    if isinstance(adjoint, dict):
        adjoint[index] = add_items(adjoint[index], g) if index in adjoint else g
        return
    if _is_basic_index(index):
        adjoint[index] += g
    elif isinstance(index, np.ndarray) and index.dtype == bool:
        adjoint[index] += g
    else:
        np.add.at(adjoint, index, g)


@helper
def dict_item_grad(cotangent, key, item):
    """The cotangent of a dict's item: cotangent[key], or zero where the dict's
    cotangent has no such key (nothing read that item, or it is a scalar zero)."""
    if isinstance(cotangent, dict) and key in cotangent:
        return cotangent[key]
    return zeros_like(item)


@helper
def accumulate(total, contribution):
    """total + contribution where either may be None (a Function's None gradient)."""
    if contribution is None:
        return total
    if total is None:
        return contribution
    return total + contribution


@helper
def seed(out):
    """The cotangent 1 of a scalar output (what grad differentiates against)."""
    if isinstance(out, (float, int)) and not isinstance(out, (bool, np.generic)):
        return 1.0
    if np.ndim(out) != 0:
        raise ValueError(f"grad requires a function that returns a scalar, but it returned "
                         f"shape {np.shape(out)}; use s2sgrad.vjp for non-scalar outputs")
    return np.ones((), dtype=np.result_type(out, np.float64))


@helper
def keys(mapping):
    """The keys of a dict, as a list: what `for k in d.items()` walks (no gradient)."""
    return list(mapping)


@helper
def record(cls, items):
    """A namedtuple built from its items: `Layer(W, b)` in differentiated code. For
    differentiation it is the tuple of its items (its cotangent a list of theirs)."""
    return cls(*items)


@helper
def loop_items(value):
    """What `for x in value` walks by position: a dict's keys (as Python iterates a
    dict), anything else itself. For differentiation it is a copy of `value`: a
    list's items keep their cotangents; keys carry none."""
    return list(value) if isinstance(value, (dict, _DICT_VIEWS)) else value


_DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))


@helper
def loop_items_tangent(tangent, value):
    """The tangent of loop_items(value): none for a dict's keys (or a view of it)."""
    return [0.0] * len(value) if isinstance(value, (dict, _DICT_VIEWS)) else tangent


@helper
def backwards(indices):
    """reversed(range): how pure adjoints walk a loop backwards (no gradient)."""
    return reversed(indices)
