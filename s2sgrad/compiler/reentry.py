"""Where code the compiler made comes back in: the one hook into the driver.

A pass sometimes needs something only the driver can make. A derivative used
as a value (`s2sgrad.grad(f)` called inside a function being differentiated,
`functional.vjp(..., create_graph=True)`) is read as the source of code that
computes it (compiler.higher writes that source from f's generated pair);
forward mode compiles a callee's tangent, or a Function's vjp in reverse mode,
while it transforms. The driver sits above every pass, so it installs those
makers here when the drivers load (compiler.load_drivers), and passes call these functions
instead of importing it.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Dict, Tuple

from ..errors import InternalError

_MAKERS: Dict[str, Callable] = {}


def install(**makers: Callable) -> None:
    _MAKERS.update(makers)


def _maker(name: str) -> Callable:
    maker = _MAKERS.get(name)
    if maker is None:   # (a driver module imported by itself: load them all now)
        sys.modules[__package__].load_drivers()
        maker = _MAKERS.get(name)
    if maker is None:
        raise InternalError(f"s2sgrad.compiler was imported without its driver ({name})")
    return maker


def derived(kind: str, base: Callable, positions: Tuple[int, ...],
            inputs_tuple: bool = False) -> Callable:
    """A differentiable function computing s2sgrad.<kind>(base, positions)."""
    return _maker("derived")(kind, base, positions, inputs_tuple)


def readable(fn: Callable) -> Callable:
    """fn, or for a wrapper `s2sgrad.grad(f)` & co. the function whose source
    computes that derivative (so that it can be differentiated again)."""
    info = getattr(fn, "__s2sgrad_derived__", None)
    if info is None:
        return fn
    kind, base, positions, as_tuple = info
    return derived(kind, base, tuple(positions), inputs_tuple=as_tuple)


def compile_pair(fn: Callable, wrt: Tuple[int, ...], **options: Any):
    """compile_function: the reverse-mode pair of fn."""
    return _maker("compile_pair")(fn, wrt, **options)


def compile_tangent(fn: Callable, wrt: Tuple[int, ...], *args: Any):
    """compile_jvp: the forward-mode code of fn."""
    return _maker("compile_tangent")(fn, wrt, *args)


def tangent_in_progress(fn: Callable, wrt: Tuple[int, ...], *args: Any) -> bool:
    """Whether fn's forward-mode code is being compiled now (a recursive call)."""
    return _maker("tangent_in_progress")(fn, wrt, *args)
