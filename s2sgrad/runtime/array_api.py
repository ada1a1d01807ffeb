"""Generated code on arrays of the array API standard that NumPy does not dispatch to.

Dask and CuPy arrays take part in NumPy's dispatch, so generated code runs on
them as it is (see `arrays`). Arrays of the strict array API
(`array_api_strict`) do not: `np.tanh(x)` would turn one into a NumPy array.
For them the same compiled code runs with two things bound differently:

- `np` (whatever the user's module calls NumPy) is `NumPyNames(xp)`: NumPy's
  names for the functions the standard has (`np.tanh` is `xp.tanh`,
  `np.power` is `xp.pow`, `np.transpose` is `xp.permute_dims`); a NumPy
  function the standard does not define is a `TypeError` naming it;
- the `_s2s_` helpers are the ones below, written against the standard;
  any other helper is a `TypeError` naming it.

Nothing here is NumPy-only: the strict implementation refuses any call the
standard does not define, which is how the tests know.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Tuple

import numpy


def namespace_of(value: Any) -> Optional[Any]:
    """The array-API namespace of an array that NumPy does not dispatch to (never
    NumPy's own: its scalars have `__array_namespace__` but no `__array_function__`)."""
    kind = type(value)
    if hasattr(kind, "__array_namespace__") and not hasattr(kind, "__array_function__") \
            and not isinstance(value, (numpy.ndarray, numpy.generic)):
        return value.__array_namespace__()
    return None


def namespace_among(values) -> Optional[Any]:
    """The namespace of the first array-API array among values (or their items)."""
    for v in values:
        if isinstance(v, (list, tuple)):
            found = namespace_among(v)
        elif isinstance(v, dict):
            found = namespace_among(v.values())
        else:
            found = namespace_of(v)
        if found is not None:
            return found
    return None


# NumPy's name -> the standard's, where they differ.
_RENAMED = {
    "absolute": "abs", "power": "pow", "arcsin": "asin", "arccos": "acos", "arctan": "atan",
    "arctan2": "atan2", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh",
    "concatenate": "concat", "transpose": "permute_dims", "true_divide": "divide",
    "amax": "max", "amin": "min", "bitwise_invert": "bitwise_not", "invert": "bitwise_not",
}


class NumPyNames:
    """NumPy's namespace as seen by generated code running on `xp`'s arrays."""

    def __init__(self, xp: Any):
        self._xp = xp
        self.newaxis = None
        self.pi, self.e, self.inf, self.nan = math.pi, math.e, math.inf, math.nan

    def __getattr__(self, name: str) -> Any:
        xp = self.__dict__["_xp"]
        target = getattr(xp, _RENAMED.get(name, name), None)
        if target is None:
            raise TypeError(f"np.{name} is not in the array API standard, and "
                            f"{xp.__name__} arrays need it here: compute on NumPy arrays, "
                            f"or write the function with what the standard defines")
        return target

    # Spellings of NumPy that the standard writes another way.
    def shape(self, x):
        return tuple(x.shape)

    def ndim(self, x):
        return x.ndim

    def size(self, x):
        return math.prod(x.shape)

    def expand_dims(self, x, axis):
        for a in sorted(axis if isinstance(axis, tuple) else (axis,)):
            x = self._xp.expand_dims(x, axis=a)
        return x

    def swapaxes(self, x, a, b):
        axes = list(range(x.ndim))
        axes[a], axes[b] = axes[b], axes[a]
        return self._xp.permute_dims(x, tuple(axes))

    def transpose(self, x, axes=None):
        return self._xp.permute_dims(x, tuple(reversed(range(x.ndim))) if axes is None
                                     else tuple(axes))


def _xp(*values) -> Any:
    for v in values:
        ns = namespace_of(v)
        if ns is not None:
            return ns
    raise TypeError("no array of the array API among the values")


def _shape(x) -> Tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else ()


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def sum_to_shape(value, shape):
    """Sum `value` down to `shape`: the adjoint of broadcasting."""
    if _is_number(value):
        return value
    xp = _xp(value)
    extra = value.ndim - len(shape)
    if extra > 0:
        value = xp.sum(value, axis=tuple(range(extra)))
    elif extra < 0:   # a cotangent of lower rank (an item's zero): broadcast up, as NumPy
        value = xp.reshape(value, (1,) * -extra + tuple(value.shape))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and value.shape[i] != 1)
    if axes:
        value = xp.sum(value, axis=axes, keepdims=True)
    if tuple(value.shape) != tuple(shape):
        value = xp.broadcast_to(value, tuple(shape))
    return value


def unbroadcast(value, like):
    shape = _shape(like)
    if _shape(value) == shape:
        return value
    return sum_to_shape(value, shape)


def _axes(axis, ndim) -> Tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axis = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(a % ndim for a in axis))


def expand_reduced(g, x, axis=None, keepdims=False):
    """Broadcast the cotangent of a reduction over x's reduced axes back to x."""
    xp = _xp(x)
    shape = _shape(x)
    if _is_number(g):
        return xp.full(shape, g, dtype=x.dtype)
    if not keepdims and axis is not None and shape:
        for a in _axes(axis, len(shape)):
            g = xp.expand_dims(g, axis=a)
    return xp.broadcast_to(g, shape)


def reduced_count(x, axis=None):
    shape = _shape(x)
    return math.prod(shape[a] for a in _axes(axis, len(shape))) if shape else 1


def meta(x):
    return x


def zeros_like(x, items=None):
    if _is_number(x):
        return 0.0
    if isinstance(x, (list, tuple)):
        return [zeros_like(item) for item in x]
    return _xp(x).zeros_like(x)


def copy_value(value):
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value            # (the standard's arrays are not written in place here)


def _mT(x, xp):
    return xp.matrix_transpose(x)


def matmul_grad_a(g, a, b):
    xp = _xp(g, a, b)
    if a.ndim == 1 and b.ndim == 1:
        return g * b
    if b.ndim == 1:
        return unbroadcast(xp.expand_dims(g, axis=-1) * b, a)
    if a.ndim == 1:
        return unbroadcast(xp.squeeze(b @ xp.expand_dims(g, axis=-1), axis=-1), a)
    return unbroadcast(g @ _mT(b, xp), a)


def matmul_grad_b(g, a, b):
    xp = _xp(g, a, b)
    if a.ndim == 1 and b.ndim == 1:
        return g * a
    if a.ndim == 1:
        return unbroadcast(xp.expand_dims(a, axis=-1) * xp.expand_dims(g, axis=-2), b)
    if b.ndim == 1:
        return unbroadcast(xp.squeeze(_mT(a, xp) @ xp.expand_dims(g, axis=-1), axis=-1), b)
    return unbroadcast(_mT(a, xp) @ g, b)


def unbroadcast_matmul(value, a, b):
    a_shape, b_shape = _shape(a), _shape(b)
    if len(a_shape) == 1 and len(b_shape) == 1:
        shape: Tuple[int, ...] = ()
    elif len(b_shape) == 1:
        shape = a_shape[:-1]
    elif len(a_shape) == 1:
        shape = b_shape[:-2] + b_shape[-1:]
    else:
        batch = _broadcast_shapes(a_shape[:-2], b_shape[:-2])
        shape = batch + (a_shape[-2], b_shape[-1])
    return value if _shape(value) == shape else sum_to_shape(value, shape)


def _broadcast_shapes(a, b) -> Tuple[int, ...]:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    return tuple(max(x, y) for x, y in zip(a, b))


def seed(out):
    return 1.0


def extremum_grad(g, a, ans, axis=None, keepdims=False, initial=None, where=None):
    """Cotangent of `a` in max/min: to the elements equal to the result, ties
    sharing it equally (as the NumPy helper)."""
    if initial is not None or where is not None:
        raise TypeError("s2sgrad's gradient of max/min with initial= or where= has no "
                        "array-API version yet")
    xp = _xp(a)
    ge = expand_reduced(g, a, axis=axis, keepdims=keepdims)
    ae = expand_reduced(ans, a, axis=axis, keepdims=keepdims)
    hit = xp.astype(a == ae, a.dtype)
    count = xp.sum(hit, axis=_axes(axis, a.ndim), keepdims=True) if a.ndim else hit
    return ge * hit / xp.where(count > 0, count, xp.ones_like(count))


def _basic(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(isinstance(i, (int, slice, type(Ellipsis))) and not isinstance(i, bool)
               for i in items)


def scatter_add(adjoint, index, g):
    """adjoint with g added at a basic index (ints, slices), as a new array."""
    if isinstance(adjoint, list):
        out = list(adjoint)
        out[index] = g if out[index] is None else out[index] + g
        return out
    if not _basic(index):
        raise TypeError("s2sgrad's gradient of indexing with an array of indices (which may "
                        "repeat) has no array-API version yet: use NumPy, Dask or CuPy "
                        "arrays for it")
    xp = _xp(adjoint, g)
    out = xp.asarray(adjoint, copy=True)
    out[index] = out[index] + g
    return out


def with_zeroed(adjoint, index, like=None):
    """adjoint with the items at a basic index set to zero, as a new array."""
    if not _basic(index):
        raise TypeError("s2sgrad's gradient of a write through an array of indices has no "
                        "array-API version yet: use NumPy, Dask or CuPy arrays for it")
    out = _xp(adjoint).asarray(adjoint, copy=True)
    out[index] = 0.0
    return out


HELPERS: Dict[str, Callable] = {f.__name__: f for f in (
    unbroadcast, expand_reduced, reduced_count, meta, zeros_like, copy_value,
    matmul_grad_a, matmul_grad_b, unbroadcast_matmul, seed, scatter_add,
    with_zeroed, extremum_grad)}

# Helpers that never touch an array's values: the NumPy backend's serve as they are.
NEUTRAL = frozenset({"backwards", "keys", "record", "detached", "check_count",
                     "as_returned", "loop_items",
                     "item_unshared", "item_updated",
                     "add_items", "accumulate", "Context", "items_like", "real_value"})


def missing_helper(name: str) -> Callable:
    """A stand-in for a helper the standard's arrays have no version of."""
    def refuse(*args, **kwargs):
        raise TypeError(f"s2sgrad's helper {name} has no array-API version yet: this "
                        f"gradient runs on NumPy, Dask or CuPy arrays only")
    refuse.__name__ = name
    return refuse
