"""Which array library a value belongs to, and arrays that stay in it.

Generated code calls `np.*`; NumPy hands such a call on to the library of its
arguments through the `__array_function__` and `__array_ufunc__` protocols
(NEP 18, NEP 13), so the same code runs on Dask or CuPy arrays. What must not
happen on the way is `np.asarray`, which turns a lazy Dask array into a NumPy
one by computing it (and a CuPy array into a host copy): the helpers use
`as_array` instead.
"""
from __future__ import annotations

import contextlib
import numbers
import threading
import warnings
from typing import Any, Iterator

import numpy as np


def is_foreign_array(value: Any) -> bool:
    """An array of another library that NumPy's functions dispatch to (Dask, CuPy):
    it implements both protocols and has a shape and a dtype."""
    kind = type(value)
    both = _PROTOCOLS.get(kind)
    if both is None:
        both = _protocols_of(kind)
    return both and kind is not np.ndarray and \
        not isinstance(value, (np.ndarray, np.generic)) and \
        hasattr(value, "shape") and hasattr(value, "dtype")


# type -> whether it has both protocols: asked of every value a gradient call meets
# (a float, an ArrayMeta), where a failed hasattr on the class costs 0.3 us each.
_PROTOCOLS: dict = {}


def _protocols_of(kind: type) -> bool:
    both = hasattr(kind, "__array_function__") and hasattr(kind, "__array_ufunc__")
    if len(_PROTOCOLS) >= 4096:   # (classes made without end: start again)
        _PROTOCOLS.clear()
    _PROTOCOLS[kind] = both
    return both


def is_array(value: Any) -> bool:
    """A NumPy array or another library's (CuPy's, Dask's): a value that in-place
    writes change, so the adjoint's private copies must copy it."""
    return isinstance(value, np.ndarray) or is_foreign_array(value)


def size_of(value: Any) -> int:
    """np.size(value), read off the array where it is one (Dask does not implement
    np.size, and its arrays know their size without computing)."""
    size = getattr(value, "size", None)
    return int(size) if isinstance(size, (int, np.integer)) else int(np.size(value))


def cast_into(value: Any, target: Any) -> Any:
    """value, for writing into `target` where NumPy would (np.copyto, a ufunc's out=):
    a TypeError as NumPy gives where its 'same_kind' casting rule refuses the dtype
    (an item assignment, which the compiler writes instead, would cast silently)."""
    have, want = np.result_type(value), np.result_type(target)
    if not np.can_cast(have, want, casting="same_kind"):
        raise TypeError(f"Cannot cast array data from {have!r} to {want!r} according to "
                        f"the rule 'same_kind'")
    return value


def as_array(value: Any, dtype: Any = None) -> Any:
    """np.asarray(value, dtype), except that another library's array stays in that
    library (cast with `astype` where a dtype is asked for)."""
    if type(value) is np.ndarray:
        return value if dtype is None or value.dtype == dtype else value.astype(dtype)
    if is_foreign_array(value):
        if dtype is None or value.dtype == np.dtype(dtype):
            return value
        return value.astype(dtype)
    return np.asarray(value, dtype)


# What Dask says when it is handed a NumPy function it does not implement: it then
# computes the arguments and calls NumPy on the results, so a function that writes
# into an argument (np.put_along_axis, np.copyto) writes into a copy, and the
# gradient would silently be wrong.
_NOT_IMPLEMENTED = r"The `.*` function is not implemented by Dask array"


_FOREIGN = threading.local()   # .depth: generated code runs on another library's arrays


def runs_foreign() -> bool:
    """Whether generated code runs under `foreign_dispatch` in this thread."""
    return getattr(_FOREIGN, "depth", 0) > 0


@contextlib.contextmanager
def foreign_dispatch() -> Iterator[None]:
    """Run generated code on another library's arrays: a NumPy function that library
    does not implement is an error naming it, never a silent fall-back to NumPy."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=_NOT_IMPLEMENTED, category=FutureWarning)
        _FOREIGN.depth = getattr(_FOREIGN, "depth", 0) + 1
        try:
            yield
        except FutureWarning as warning:
            name = str(warning).split("`")[1] if "`" in str(warning) else str(warning)
            raise TypeError(f"{name} is not implemented by Dask arrays, and the generated "
                            f"code needs it for this gradient: compute it on NumPy "
                            f"arrays (np.asarray(x)) or use functions Dask implements"
                            ) from None
        finally:
            _FOREIGN.depth -= 1


def any_foreign(values) -> bool:
    """Whether some value (or an item of a list, tuple or dict) is another library's
    array: the calls that must run under `foreign_dispatch`."""
    for v in values:
        if isinstance(v, (list, tuple)):
            if any_foreign(v):
                return True
        elif isinstance(v, dict):
            if any_foreign(v.values()):
                return True
        elif is_foreign_array(v):
            return True
    return False


def holds_complex(value: Any) -> bool:
    """Whether value is complex, or a list, tuple or dict holding a complex value."""
    kind = type(value)
    if kind is float or kind is int or kind is bool or value is None:
        return False
    if kind is complex:
        return True
    if kind in (list, tuple) or isinstance(value, tuple):
        return any(holds_complex(v) for v in value)
    if kind is dict:
        return any(holds_complex(v) for v in value.values())
    dtype = getattr(value, "dtype", None)
    if dtype is not None:   # (an array API standard dtype may have no kind: its name)
        kind = getattr(dtype, "kind", None)
        return kind == "c" if kind is not None else "complex" in str(dtype)
    return isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real)
