"""The compiler: parse -> normalise -> analyse -> transform -> inline -> optimise -> emit.

`compile_function` runs the passes in order and returns a `CompiledFunction`
(the generated forward/adjoint pair plus the facts the API needs). Results are
cached in memory per (function, closure, wrt, options).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from .analyze import Activity, analyze
from .emit import Emitted, bind_late, load, to_source
from .inline import inline
from .normalize import normalize
from .optimize import link_residuals, optimize
from .parse import ParsedFunction, parse_function, unwrap
from .transform import transform


@dataclass
class CompiledFunction:
    """A function's generated forward/adjoint pair.

    forward(*args) -> (output, residuals); adjoint(residuals, cotangent) ->
    the gradient (one value when one input is differentiated, else a tuple).
    """

    fn: Callable
    wrt: Tuple[int, ...]
    forward: Callable
    adjoint: Callable
    module_source: str
    activity: Activity
    params: List[str]
    name: str
    callees: List["CompiledFunction"] = field(default_factory=list)
    not_inlined: List[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        """This function's generated code followed by that of the functions it calls."""
        parts, seen = [], set()

        def visit(c: "CompiledFunction"):
            if id(c) in seen:
                return
            seen.add(id(c))
            parts.append(c.module_source)
            for sub in c.callees:
                visit(sub)
        visit(self)
        return "\n\n".join(parts)


_CACHE: Dict[tuple, CompiledFunction] = {}
_LOCK = threading.RLock()


def cache_key(fn: Callable, wrt: Tuple[int, ...], options: tuple) -> tuple:
    fn = unwrap(fn)
    code = getattr(fn, "__code__", None)
    closure = tuple(id(c) for c in (getattr(fn, "__closure__", None) or ()))
    return (code, closure, id(getattr(fn, "__globals__", None)), tuple(wrt), options)


def compile_function(fn: Callable, wrt: Tuple[int, ...], optimize_code: bool = True,
                     ) -> CompiledFunction:
    """The cached forward/adjoint pair of `fn` with respect to positions `wrt`."""
    options = (bool(optimize_code),)
    key = cache_key(fn, wrt, options)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
        return _compile(fn, tuple(wrt), options, key)


def _compile(fn, wrt, options, key) -> CompiledFunction:
    (optimize_code,) = options
    parsed = parse_function(fn)
    if any(i >= len(parsed.params) or i < 0 for i in wrt):
        raise IndexError(f"wrt={wrt} is out of range for {parsed.name}, which takes "
                         f"{len(parsed.params)} positional argument(s)")
    t = run_passes(parsed, wrt, optimize_code)
    header = (f"# s2sgrad: generated from {parsed.name} ({_short(parsed.filename)}:"
              f"{parsed.node.lineno}), gradient with respect to "
              f"{', '.join(parsed.params[i] for i in wrt)}\n")
    source = to_source([t.forward, t.adjoint], header)
    filename = f"<s2sgrad {parsed.name}@{_short(parsed.filename)}:{parsed.node.lineno} wrt={wrt}>"
    free = dict(getattr(t, "bindings", {}))
    for site in t.callees.values():
        free[site.forward_name] = None
        free[site.adjoint_name] = None
    emitted = Emitted(source=source, function_names=[t.forward.name, t.adjoint.name],
                      filename=filename, globals=parsed.globals, free=free,
                      closure_cells=dict(parsed.closure))
    functions = load(emitted)
    not_inlined = [f"{s.cls.__name__}: {s.reason}" for s in _function_sites(t)
                   if not s.inlined]
    compiled = CompiledFunction(fn=fn, wrt=wrt, forward=functions[t.forward.name],
                                adjoint=functions[t.adjoint.name], module_source=source,
                                activity=t.activity, params=parsed.params, name=parsed.name,
                                not_inlined=not_inlined)
    _CACHE[key] = compiled
    try:
        for site in t.callees.values():
            callee = compile_function(site.fn, site.wrt, bool(optimize_code))
            compiled.callees.append(callee)
            bind_late(functions, site.forward_name, callee.forward)
            bind_late(functions, site.adjoint_name, callee.adjoint)
    except BaseException:
        _CACHE.pop(key, None)
        raise
    return compiled


def run_passes(parsed: ParsedFunction, wrt: Tuple[int, ...], optimize_code: bool = True):
    """Every pass from normalise to optimise; returns the Transformed record."""
    nf = normalize(parsed)
    activity = analyze(nf, wrt)
    t = transform(nf, activity)
    t = inline(t)
    if optimize_code:
        t = optimize(t)
    else:
        link_residuals(t)
    return t


def _function_sites(t):
    from .inline import FunctionSite
    return [s for s in t.sites if isinstance(s, FunctionSite)]


def _short(filename: str) -> str:
    import os
    return os.path.basename(filename) if filename else "?"


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()


def cached(fn: Callable, wrt, optimize_code: bool = True) -> Optional[CompiledFunction]:
    return _CACHE.get(cache_key(fn, tuple(wrt), (bool(optimize_code),)))
