"""The compiler: parse -> normalise -> analyse -> transform -> inline -> optimise -> emit.

`compile_function` runs the passes in order and returns a `CompiledFunction`
(the generated forward/adjoint pair plus the facts the API needs). Results are
cached in memory per (function, closure, wrt, options), and on disk (see
`s2sgrad.cache`): a process that finds a valid entry loads the stored code and
runs no pass.
"""
from __future__ import annotations

import ast
import threading
import types
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from ..errors import reporting_bugs
from ..introspect import unwrap
from . import bindings as _bindings
from . import entry as _entry
from .analyze import Activity, analyze, iter_statements, output_items
from .bindings import Binding, all_hold, flat_bindings, pair_bindings  # noqa: F401
from .callables import bound_call
from .emit import Emitted, bind_late, compile_emitted, instantiate, joined_source, to_source
from .inline import inline
from .memory import PairCache, memory_cache_size  # noqa: F401 - the CLI reports the size
from .normalize import normalize
from .optimize import link_residuals, optimize, private_copies
from .parse import ParsedFunction, parse_function
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
    # What the code was generated for: names, dotted attributes, Function methods,
    # the function's code and defaults (see compiler.bindings).
    bindings: List[Binding] = field(default_factory=list)

    def current(self) -> bool:
        """Whether everything the code was generated for (here and in the functions
        it calls) is still bound to the same object: rebinding a global function,
        a closure variable, a module attribute or a name an inlined Function body
        reads must not leave a pair that computes the old one."""
        return _bindings.current(self)

    @property
    def source(self) -> str:
        """This function's generated code followed by that of the functions it calls."""
        return joined_source(self)


_current = _bindings.current  # CompiledJvp.current (tangent.py) uses it too
_CACHE = PairCache()   # least recently used pairs go first (see compiler.memory)
_LOCK = threading.RLock()


def cache_key(fn: Callable, wrt: Tuple[int, ...], options: tuple) -> tuple:
    fn = unwrap(fn)
    code = getattr(fn, "__code__", None)
    closure = tuple(id(c) for c in (getattr(fn, "__closure__", None) or ()))
    # Default values are bound into the generated code: functions that share code
    # but not defaults (a def inside a loop) get pairs of their own.
    defaults = tuple(id(d) for d in (getattr(fn, "__defaults__", None) or ()))
    return (code, closure, id(getattr(fn, "__globals__", None)), defaults, tuple(wrt),
            options)


def compile_function(fn: Callable, wrt: Tuple[int, ...], optimize_code: bool = True,
                     pure: bool = False, scalars: Tuple[str, ...] = (),
                     structure: Tuple[Tuple[int, Tuple[bool, ...]], ...] = (),
                     leaves: Optional[Tuple[int, ...]] = None) -> CompiledFunction:
    """The cached forward/adjoint pair of `fn` with respect to positions `wrt`.

    Looks in memory, then on disk, then runs the passes (and stores the result).
    """
    # pure: an adjoint without in-place updates, to be differentiated again;
    # scalars: parameters known to be Python numbers (a specialised pair);
    # structure: for tuple parameters, the items the caller varies (the others'
    # gradients are not computed: the caller does not read them); leaves: the
    # positions the caller passes arrays or numbers (any other parameter may hold
    # a list, tuple or dict, whose cotangents add item by item); None: every
    # positional parameter (the arrays-only callers: the CLI, functional, numba).
    bound = None if type(fn) is types.FunctionType else bound_call(fn)
    if bound is not None:   # a bound method, callable object or partial: its function's
        inner = compile_function(bound.func, bound.shift(wrt), optimize_code, pure,
                                 scalars, tuple((i + len(bound.args), flags)
                                                for i, flags in structure),
                                 None if leaves is None else bound.shift(leaves))
        return bound.wrap(inner, fn, wrt, "forward")
    if leaves is None:
        leaves = tuple(range(getattr(getattr(unwrap(fn), "__code__", None), "co_argcount", 0)))
    options = (bool(optimize_code), bool(pure), tuple(scalars), tuple(structure),
               tuple(leaves))   # (callers give positions in increasing order)
    key = cache_key(fn, wrt, options)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            if hit.current():
                hit._recent = True   # kept when the cache is trimmed (compiler.memory)
                return hit
            del _CACHE[key]  # a name it was generated for is bound to something else
        wrt = tuple(wrt)
        _CACHE.enter()
        try:
            store, disk_key = _entry.disk_store(fn, wrt, options)
            if store is not None:
                compiled = _entry.load(store, disk_key, fn, wrt, options, key)
                if compiled is not None:
                    return compiled
            return _compile(fn, wrt, options, key, store, disk_key)
        finally:
            _CACHE.leave()  # evicts beyond S2SGRAD_MEMORY_CACHE_SIZE once all are done


def _compile(fn, wrt, options, key, store=None, disk_key=None) -> CompiledFunction:
    optimize_code, pure, scalars, structure, leaves = options
    with reporting_bugs(getattr(fn, "__qualname__", repr(fn))):
        parsed = parse_function(fn)
    if any(i >= len(parsed.all_params) or i < 0 for i in wrt):
        raise IndexError(f"wrt={wrt} is out of range for {parsed.name}, which takes "
                         f"{len(parsed.params)} positional argument(s)")
    with reporting_bugs(parsed.name, parsed):
        return _generate(fn, wrt, options, key, store, disk_key, parsed)


def _generate(fn, wrt, options, key, store, disk_key, parsed) -> CompiledFunction:
    optimize_code, pure, scalars, structure, leaves = options
    t = run_passes(parsed, wrt, optimize_code, pure, scalars, structure, leaves)
    header = (f"# s2sgrad: generated from {parsed.name} ({_short(parsed.filename)}:"
              f"{parsed.node.lineno}), gradient with respect to "
              f"{', '.join(parsed.all_params[i] for i in wrt)}\n")
    source = to_source([t.forward, t.adjoint], header)
    filename = (f"<s2sgrad {parsed.name}@{_short(parsed.filename)}:{parsed.node.lineno} "
                f"wrt={wrt}{'' if optimize_code else ' unoptimized'}{' pure' if pure else ''}"
                f"{' scalars' if scalars else ''}>")
    free = dict(getattr(t, "bindings", {}))
    for site in t.callees.values():
        free[site.forward_name] = None
        free[site.adjoint_name] = None
    emitted = Emitted(source=source, function_names=[t.forward.name, t.adjoint.name],
                      filename=filename, globals=parsed.globals, free=free,
                      closure_cells=dict(parsed.closure))
    code, closure_names = compile_emitted(emitted)
    functions = instantiate(code, closure_names, emitted)
    sites = _function_sites(t)
    not_inlined = [f"{s.cls.__name__}: {s.reason}" for s in sites if not s.inlined]
    compiled = CompiledFunction(fn=fn, wrt=wrt, forward=functions[t.forward.name],
                                adjoint=functions[t.adjoint.name], module_source=source,
                                activity=t.activity, params=parsed.params, name=parsed.name,
                                not_inlined=not_inlined,
                                bindings=pair_bindings(fn, t.nf.resolver.facts,
                                                       [s.cls for s in sites if s.inlined]))
    _CACHE[key] = compiled
    try:
        made: Dict[int, CompiledFunction] = {}   # id(call) -> the callee's pair
        for site in t.callees.values():
            site.structure = _item_structure(site, t, made, bool(optimize_code), pure)
            callee = compile_function(site.fn, site.wrt, bool(optimize_code), pure,
                                      structure=site.structure, leaves=site.leaves)
            made[id(site.call)] = callee
            compiled.callees.append(callee)
            bind_late(functions, site.forward_name, callee.forward)
            bind_late(functions, site.adjoint_name, callee.adjoint)
        if made:  # what this function returns, seen through what its callees return
            known = dict(t.activity.item_flags)
            known.update(_callee_output_flags(t, made))
            t.activity.output_items = output_items(t.nf, t.activity.varied, known)
    except BaseException:
        _CACHE.pop(key, None)
        raise
    if store is not None:
        try:
            payload = _entry.make_entry(disk_key, compiled, t, emitted, code, closure_names,
                                        sites)
        except Exception:  # noqa: BLE001 - not storable: stays in memory only
            payload = None
        if payload is not None:
            store.write(disk_key, payload)
    return compiled


def run_passes(parsed: ParsedFunction, wrt: Tuple[int, ...], optimize_code: bool = True,
               pure: bool = False, scalars: Tuple[str, ...] = (), structure=(),
               leaves: Tuple[int, ...] = ()):
    """Every pass from normalise to optimise; returns the Transformed record."""
    nf = normalize(parsed)
    activity = analyze(nf, wrt, scalars, structure, leaves)
    t = transform(nf, activity, pure)
    t = inline(t)
    if optimize_code:
        t = optimize(t)
    else:  # what makes the pair correct, not faster: reusable pullbacks, residuals
        private_copies(t)
        link_residuals(t)
    return t


def _callee_targets(t) -> Dict[str, Tuple[int, int]]:
    """name -> (id of the call, k) for names unpacked from a callee's tuple output
    (`out, res = f_forward(x, W)`), each assigned there only."""
    calls = {id(site.call) for site in t.callees.values()}
    defs: Dict[str, list] = {}
    for s, _ in iter_statements(t.nf.node.body):
        for target in (s.targets if isinstance(s, ast.Assign) else ()):
            for n in ast.walk(target):
                if isinstance(n, ast.Name):
                    defs.setdefault(n.id, []).append((s, target))
        if isinstance(s, (ast.AugAssign, ast.For)):
            target = s.target
            for n in ast.walk(target):
                if isinstance(n, ast.Name):
                    defs.setdefault(n.id, []).append((s, None))
    out = {}
    for name, sites in defs.items():
        if len(sites) != 1:
            continue
        s, target = sites[0]
        if target is None or id(s.value) not in calls or not isinstance(target, ast.Tuple) \
                or not all(isinstance(e, ast.Name) for e in target.elts):
            continue
        out[name] = (id(s.value), [e.id for e in target.elts].index(name))
    return out


def _callee_output_flags(t, made: Dict[int, CompiledFunction]) -> Dict[str, tuple]:
    out = {}
    for name, (call, k) in _callee_targets(t).items():
        flags = made[call].activity.output_items.get(k) if call in made else None
        if flags is not None:
            out[name] = flags
    return out


def _item_structure(site, t, made, optimize_code: bool, pure: bool) -> tuple:
    """Which items of each tuple argument of `site` vary, where the tuple is what
    another call returned (`out, res = f_forward(x, W); f_adjoint(res, g)`) or an
    item of a parameter whose items are known.

    Items that do not vary (W here) have no effect on the gradient, so the callee
    is compiled without their cotangents (in second-order code, that skips an
    outer product per constant matrix)."""
    from .analyze import any_varies
    producers = {id(other.call): other for other in t.callees.values()}
    targets = _callee_targets(t)
    out = []
    for pos in site.wrt:
        atom = site.arg_atoms[pos] if pos < len(site.arg_atoms) else None
        if not isinstance(atom, ast.Name):
            continue
        flags = t.activity.item_flags.get(atom.id)
        if flags is None and atom.id in targets:
            call, k = targets[atom.id]
            producer = producers[call]
            if producer.fn is site.fn:
                continue
            if call not in made:
                made[call] = compile_function(producer.fn, producer.wrt, optimize_code, pure,
                                              structure=getattr(producer, "structure", ()))
            flags = made[call].activity.output_items.get(k)
        if isinstance(flags, tuple) and not _all_vary(flags) and any_varies(flags):
            out.append((pos, flags))
    return tuple(out)


def _all_vary(flags) -> bool:
    return all(_all_vary(f) for f in flags) if isinstance(flags, tuple) else bool(flags)


def _function_sites(t):
    from .inline import FunctionSite
    return [s for s in t.sites if isinstance(s, FunctionSite)]


def _short(filename: str) -> str:
    import os
    return os.path.basename(filename) if filename else "?"


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()
        _bindings.GENERATION[0] += 1


def cached(fn: Callable, wrt, optimize_code: bool = True) -> Optional[CompiledFunction]:
    return _CACHE.get(cache_key(fn, tuple(wrt), (bool(optimize_code), False, ())))
