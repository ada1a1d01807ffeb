"""A compiled pair re-bound to run on arrays of the array API standard.

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
