"""A compiled pair made to run on other array libraries' arrays.

`dispatching_pair`: Dask's and CuPy's arrays run the NumPy code as it is, under
`runtime.arrays.foreign_dispatch`. `array_api_pair`: arrays of the array API
standard, which NumPy does not dispatch to, run it re-bound.

The code objects are the NumPy backend's; only what their names are bound to
changes (see s2sgrad/runtime/array_api.py): `np` becomes NumPy's names over the
arrays' namespace, the `_s2s_` helpers their array-API versions. Module
globals other than NumPy are read live from the user's module, as usual.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any, Dict

import numpy

from ..compiler import CompiledFunction
from ..runtime import array_api
from ..runtime.arrays import foreign_dispatch


class _Overlay(dict):
    """Globals: the overrides, then the user's module (read live)."""

    def __init__(self, overrides: Dict[str, Any], base: dict):
        super().__init__(overrides)
        self.base = base

    def __missing__(self, key: str) -> Any:
        return self.base[key]


def _rebound(fn: types.FunctionType, xp: Any) -> types.FunctionType:
    names = array_api.NumPyNames(xp)
    overrides = {k: names for k, v in fn.__globals__.items() if v is numpy}
    overrides["__builtins__"] = fn.__globals__.get("__builtins__", __builtins__)
    cells = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        if name == "_s2s_np":
            cell = types.CellType(names)
        elif name.startswith("_s2s_") and name[len("_s2s_"):] not in array_api.NEUTRAL:
            helper = name[len("_s2s_"):]
            cell = types.CellType(array_api.HELPERS.get(helper) or
                                  array_api.missing_helper(helper))
        cells.append(cell)
    return types.FunctionType(fn.__code__, _Overlay(overrides, fn.__globals__), fn.__name__,
                              fn.__defaults__, tuple(cells) or None)


def array_api_pair(compiled: CompiledFunction, xp: Any) -> CompiledFunction:
    """`compiled` with its forward and adjoint running on `xp`'s arrays."""
    if compiled.callees:
        raise TypeError(f"{compiled.name} calls other functions: on array-API arrays "
                        f"s2sgrad differentiates single functions for now (NumPy, Dask "
                        f"and CuPy arrays have no such limit)")
    return dataclasses.replace(compiled, forward=_rebound(compiled.forward, xp),
                               adjoint=_rebound(compiled.adjoint, xp))


def dispatching_pair(compiled: Any) -> Any:
    """`compiled` with its forward and adjoint run under `foreign_dispatch`: a NumPy
    function the arrays' library lacks is an error, never a silent fall-back."""
    forward, adjoint = compiled.forward, compiled.adjoint

    def guarded_forward(*args, **kwargs):
        with foreign_dispatch():
            return forward(*args, **kwargs)

    def guarded_adjoint(residuals, cotangent):
        with foreign_dispatch():
            return adjoint(residuals, cotangent)
    return dataclasses.replace(compiled, forward=guarded_forward, adjoint=guarded_adjoint)


def _is_dask(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "dask" and hasattr(value, "chunks")


def _has_dask(values) -> bool:
    for v in values:
        if isinstance(v, (list, tuple)):
            if _has_dask(v):
                return True
        elif isinstance(v, dict):
            if _has_dask(v.values()):
                return True
        elif _is_dask(v):
            return True
    return False


def _lifted(value: Any, from_array: Any) -> Any:
    if type(value) is numpy.ndarray and value.dtype.kind in "fc":
        return from_array(value, chunks=value.shape or ())
    if isinstance(value, dict):
        return type(value)((k, _lifted(v, from_array)) for k, v in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):   # a namedtuple
        return type(value)(*(_lifted(v, from_array) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_lifted(v, from_array) for v in value)
    return value


def lift_beside_dask(args: tuple) -> tuple:
    """A call with Dask arrays: every floating-point NumPy array among its arguments
    (in lists, tuples and dicts too) becomes a single-chunk Dask array, so that the
    whole gradient stays lazy (`grad(loss)(w, X, y)` with `w` NumPy and `X` Dask:
    `w`'s gradient is a Dask array, computed with the rest). Without Dask arrays the
    arguments are returned as they are."""
    if not _has_dask(args):
        return args
    from dask.array import from_array
    return tuple(_lifted(a, from_array) for a in args)

