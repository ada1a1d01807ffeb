"""A strict stand-in for CuPy's arrays, for testing on machines without a GPU.

`StrictArray` wraps a NumPy array and takes part in NumPy's dispatch (NEP 13 and
NEP 18) as CuPy's arrays do, with CuPy's strictness: a NumPy function or ufunc
given a `numpy.ndarray` beside a StrictArray raises `TypeError` ("Unsupported
type <class 'numpy.ndarray'>"), so does writing one into a StrictArray, and there
is no implicit conversion to NumPy (`np.asarray(x)` raises). Python and NumPy
scalars mix freely, as on CuPy. So a helper of s2sgrad's runtime that makes a
NumPy array where the arguments are another library's fails here, on the CPU,
as it would fail on a GPU.

`to_strict(value)` and `to_numpy(value)` convert (nested lists and tuples too).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin


class StrictArray(NDArrayOperatorsMixin):
    """A NumPy array that refuses to mix with NumPy arrays (like cupy.ndarray)."""

    __slots__ = ("_data",)

    def __init__(self, data):
        if isinstance(data, StrictArray):
            data = data._data
        if not isinstance(data, np.ndarray):
            raise TypeError(f"StrictArray wraps a numpy.ndarray, not {type(data).__name__}")
        self._data = data

    # -- NumPy's protocols -------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed (as on "
                        "CuPy): use to_numpy()")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        args = [_unwrap(a) for a in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(_unwrap(o) for o in kwargs["out"])
        result = getattr(ufunc, method)(*args, **kwargs)
        return None if method == "at" else _wrap(result, scalars=True)

    def __array_function__(self, func, types, args, kwargs):
        # (a reduction gives a 0-d array, as CuPy's do, not a NumPy scalar)
        return _wrap(func(*_unwrap_all(args), **_unwrap_all(kwargs)), scalars=True)

    # -- what array code reads ---------------------------------------------------------
    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    ndim = property(lambda self: self._data.ndim)
    size = property(lambda self: self._data.size)
    T = property(lambda self: StrictArray(self._data.T))
    mT = property(lambda self: StrictArray(np.swapaxes(self._data, -1, -2)))
    real = property(lambda self: StrictArray(np.asarray(self._data.real)))
    imag = property(lambda self: StrictArray(np.asarray(self._data.imag)))
    flags = property(lambda self: self._data.flags)
    device = property(lambda self: "strict")

    def __len__(self):
        return len(self._data)

    def __iter__(self):
        return (_wrap(item) for item in self._data)

    def __getitem__(self, index):
        return _wrap(self._data[_unwrap_index(index)])

    def __setitem__(self, index, value):
        if isinstance(value, np.ndarray):
            raise TypeError(f"Unsupported type {type(value)}")
        self._data[_unwrap_index(index)] = _unwrap(value)

    def __float__(self):
        return float(self._data)

    def __int__(self):
        return int(self._data)

    def __bool__(self):
        return bool(self._data)

    def __index__(self):
        return self._data.__index__()

    def __repr__(self):
        return f"StrictArray({self._data!r})"

    def __getattr__(self, name):
        # methods (x.sum(axis=0), x.reshape(...), x.astype(...)): NumPy's, on the data,
        # with the same strictness for their arguments; no protocol of the data's
        # (__array_interface__ would hand NumPy the data behind the refusal)
        if name.startswith("__"):
            raise AttributeError(name)
        attr = getattr(self._data, name)
        if not callable(attr):
            return _wrap(attr)

        def method(*args, **kwargs):
            return _wrap(attr(*_unwrap_all(args), **_unwrap_all(kwargs)))
        return method

    def get(self):
        """The data as a NumPy array (cupy.ndarray.get)."""
        return self._data.copy()


def _unwrap(value: Any) -> Any:
    if isinstance(value, StrictArray):
        return value._data
    if isinstance(value, np.ndarray):
        raise TypeError(f"Unsupported type {type(value)}")
    return value


def _unwrap_all(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap_all(v) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap_all(v) for k, v in value.items()}
    return _unwrap(value)


def _unwrap_index(index: Any) -> Any:
    if isinstance(index, tuple):
        return tuple(_unwrap_index(i) for i in index)
    if isinstance(index, StrictArray):
        return index._data
    if isinstance(index, np.ndarray):
        raise TypeError(f"Unsupported type {type(index)} as an index")
    return index


def _wrap(value: Any, scalars: bool = False) -> Any:
    if isinstance(value, np.ndarray):
        return StrictArray(value)
    if scalars and isinstance(value, np.generic) and not isinstance(value, np.bool_):
        return StrictArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_wrap(v, scalars) for v in value)
    if isinstance(value, list):
        return [_wrap(v, scalars) for v in value]
    return value


def to_strict(value: Any) -> Any:
    """NumPy arrays (in lists and tuples too) as StrictArrays; numbers as they are."""
    if isinstance(value, (list, tuple)):
        return type(value)(to_strict(v) for v in value)
    return StrictArray(np.array(value)) if isinstance(value, np.ndarray) else value


def to_numpy(value: Any) -> Any:
    if isinstance(value, StrictArray):
        return value._data
    if isinstance(value, (list, tuple)):
        return type(value)(to_numpy(v) for v in value)
    return value
