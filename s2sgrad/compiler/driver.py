"""The driver: a function's pair from memory, from disk, or from the passes.

`compile_function` looks in the memory cache (compiler.memory), then on disk
(compiler.entry, s2sgrad.cache), and only then runs the passes
(compiler.pipeline), compiles the text (compiler.loader) and the pairs of the
functions it calls, and stores the result in both caches. Whether a pair is
still valid (the names it was generated for still bound as they were) is
compiler.bindings' job.
"""
from __future__ import annotations

import ast
import os
import types
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..errors import TransformError, error_at, reporting_bugs
from ..introspect import unwrap
from . import bindings as _bindings
from . import entry as _entry
from .analyze import any_varies, complex_returns, iter_statements, output_items
from .bindings import pair_bindings
from .callables import bound_call, packed_rest
from .compiled import CompiledFunction
from .loader import Emitted, bind_late, compile_emitted, distinct_filename, instantiate
from .memory import LOCK, PAIRS, cache_key
from .parse import ParsedFunction
from .pipeline import deep_enough, emit_pair, parse_for, run_passes
from .sites import FunctionSite


def compile_function(fn: Callable, wrt: Tuple[int, ...], optimize_code: bool = True,
                     pure: bool = False, scalars: Tuple[str, ...] = (),
                     structure: Tuple[Tuple[int, Tuple[bool, ...]], ...] = (),
                     leaves: Optional[Tuple[int, ...]] = None, packed: bool = False,
                     statics: Tuple[Tuple[str, Any], ...] = (),
                     complexes: Tuple[str, ...] = ()) -> CompiledFunction:
    """The cached forward/adjoint pair of `fn` with respect to positions `wrt`.

    Looks in memory, then on disk, then runs the passes (and stores the result).
    """
    # pure: an adjoint without in-place updates, to be differentiated again;
    # scalars: parameters known to be Python numbers (a specialised pair);
    # structure: for tuple parameters, the items the caller varies (the others'
    # gradients are not computed: the caller does not read them); leaves: the
    # positions the caller passes arrays or numbers (any other parameter may hold
    # a list, tuple or dict, whose cotangents add item by item); None: every
    # positional parameter (the arrays-only callers: the CLI, functional, numba);
    # statics: (parameter, function) pairs a caller passes (a specialised pair,
    # kept in memory only: the functions are part of its key); complexes: the
    # parameters the caller passes complex values (their operations take the rules
    # for complex arguments).
    bound = None if type(fn) is types.FunctionType else bound_call(fn)
    if bound is not None:   # a bound method, callable object or partial: its function's
        inner = compile_function(bound.func, bound.shift(wrt), optimize_code, pure,
                                 scalars, tuple((i + len(bound.args), flags)
                                                for i, flags in structure),
                                 None if leaves is None else bound.shift(leaves),
                                 statics=bound.instances_read(), complexes=complexes)
        return bound.wrap(inner, fn, wrt, "forward")
    rest = None if packed else packed_rest(fn)
    if rest is not None:   # `def f(x, *rest)`: positions from rest.count on are its items
        inner = compile_function(fn, rest.inner(wrt), optimize_code, pure, scalars, (),
                                 tuple(i for i in (leaves or ()) if i < rest.count)
                                 if leaves is not None else tuple(range(rest.count)),
                                 packed=True, complexes=complexes)
        return rest.wrap_pair(inner, fn, wrt)
    if leaves is None:
        leaves = tuple(range(getattr(getattr(unwrap(fn), "__code__", None), "co_argcount", 0)))
    options = (bool(optimize_code), bool(pure), tuple(scalars), tuple(structure),
               tuple(leaves), tuple(statics), tuple(sorted(complexes)))
    # (callers give positions in increasing order)
    key = cache_key(fn, wrt, options)
    with LOCK:
        hit = PAIRS.valid(key)
        if hit is not None:
            return hit
        wrt = tuple(wrt)
        PAIRS.enter()
        try:
            store, disk_key = _entry.disk_store(fn, wrt, options) if not statics else \
                (None, None)
            if store is not None:
                compiled = _entry.load(store, disk_key, fn, wrt, options, key, compile_function)
                if compiled is not None:
                    compiled.cached_as = ((key, store, disk_key),)
                    return compiled
            return _compile(fn, wrt, options, key, store, disk_key)
        finally:
            PAIRS.leave()  # evicts beyond S2SGRAD_MEMORY_CACHE_SIZE once all are done


def discard(compiled: CompiledFunction) -> None:
    """Drop a pair from the memory and disk caches (one that failed a self-check:
    it must never be served again)."""
    for key, store, disk_key in compiled.cached_as:
        with LOCK:
            PAIRS.pop(key, None)
        if store is not None and disk_key:
            try:
                os.unlink(store.entry_path(disk_key))
            except OSError:
                pass


def _compile(fn, wrt, options, key, store=None, disk_key=None) -> CompiledFunction:
    return generate_for(fn, wrt, options[5],
                        lambda parsed: _generate(fn, wrt, options, key, store, disk_key, parsed))


def generate_for(fn: Callable, wrt: Tuple[int, ...], statics: Tuple[Tuple[str, Any], ...],
                 generate: Callable[[ParsedFunction], Any]) -> Any:
    """Parse `fn` and run `generate` on it (either mode's passes), with an internal
    error reported at the user's line and the recursion limit raised for deep code."""
    parsed = parse_for(fn, wrt)
    parsed.statics = dict(statics)
    with reporting_bugs(parsed.name, parsed), deep_enough(parsed):
        return generate(parsed)


def header(parsed: ParsedFunction, what: str) -> str:
    """The first line of a generated module: the function it was generated from,
    where, and what it computes (and for which functions it was specialised)."""
    return (f"# s2sgrad: generated from {parsed.name} ({_short(parsed.filename)}:"
            f"{parsed.node.lineno}), {what}{specialised_for(parsed.statics)}\n")


class Loaded(NamedTuple):
    emitted: Emitted
    code: Any
    closure_names: Any
    functions: Dict[str, Any]


def load(parsed: ParsedFunction, source: str, names: List[str], kind: str,
         wrt: Tuple[int, ...], flags: str, free: Dict[str, Any]) -> Loaded:
    """Compile a generated module (either mode's) under a file name of its own in
    linecache: `<s2sgrad{kind} f@file.py:line wrt=(..){flags}>`, made distinct from
    another text compiled under the same name (options the name does not show)."""
    filename = distinct_filename(
        f"<s2sgrad{kind} {parsed.name}@{_short(parsed.filename)}:{parsed.node.lineno} "
        f"wrt={wrt}{flags}{statics_tag(parsed.statics)}>", source)
    emitted = Emitted(source=source, function_names=names, filename=filename,
                      globals=parsed.globals, free=free, closure_cells=dict(parsed.closure))
    code, closure_names = compile_emitted(emitted)
    return Loaded(emitted, code, closure_names, instantiate(code, closure_names, emitted))


def _generate(fn, wrt, options, key, store, disk_key, parsed) -> CompiledFunction:
    optimize_code, pure, scalars, structure, leaves, _, complexes = options
    # The disk entry records the dotted names the user's code resolves; read them
    # now, before the passes rewrite the tree (else the entry parses it again).
    chains = _entry.root_chains(parsed.node, unwrap(fn)) if store is not None else None
    t = run_passes(parsed, wrt, optimize_code, pure, scalars, structure, leaves, complexes)
    top = header(parsed, "gradient with respect to "
                         f"{', '.join(parsed.all_params[i] for i in wrt)}")
    inlined = sorted({f"{s.cls.__name__} (its {s.vjp_name} at {s.vjp_location()})"
                      for s in _function_sites(t) if s.inlined})
    if inlined:
        top += f"# s2sgrad: inlined Functions: {', '.join(inlined)}\n"
    source = emit_pair(t, top)
    free = dict(getattr(t, "bindings", {}))
    for site in t.callees.values():
        free[site.forward_name] = None
        free[site.adjoint_name] = None
    flags = (f"{'' if optimize_code else ' unoptimized'}{' pure' if pure else ''}"
             f"{' scalars' if scalars else ''}")
    loaded = load(parsed, source, [t.forward.name, t.adjoint.name], "", wrt, flags, free)
    emitted, code, closure_names, functions = loaded
    sites = _function_sites(t)
    not_inlined = [f"{s.cls.__name__}: {s.reason}" for s in sites if not s.inlined]
    compiled = CompiledFunction(fn=fn, wrt=wrt, forward=functions[t.forward.name],
                                adjoint=functions[t.adjoint.name], module_source=source,
                                activity=t.activity, params=parsed.params, name=parsed.name,
                                not_inlined=not_inlined, statics=tuple(parsed.statics.items()),
                                tolerance=t.nf.facts.tolerance,
                                bindings=pair_bindings(fn, t.nf.resolver.facts,
                                                       [s.cls for s in sites if s.inlined],
                                                       functions=t.nf.inlined))
    compiled.cached_as = ((key, store, disk_key),)
    PAIRS[key] = compiled
    try:
        made: Dict[ast.Call, CompiledFunction] = {}   # call -> the callee's pair
        for site in t.callees.values():
            site.structure = _item_structure(site, t, made, bool(optimize_code), pure)
            callee = _callee_pair(site, parsed, bool(optimize_code), pure)
            made[site.call] = callee
            compiled.callees.append(callee)
            bind_late(functions, site.forward_name, callee.forward)
            bind_late(functions, site.adjoint_name, callee.adjoint)
        if made:  # what this function returns, seen through what its callees return
            known = dict(t.activity.item_flags)
            known.update(_callee_output_flags(t, made))
            t.activity.output_items = output_items(t.nf, t.activity.varied, known)
    except BaseException:
        PAIRS.pop(key, None)
        raise
    returned = complex_returns(((site.out_names, made[site.call].activity)
                                for site in t.callees.values()), t.activity) | \
        complex_returns(checked_call_results(t.activity, bool(optimize_code)), t.activity)
    if returned:   # compiled again, knowing which of its callees return complex values
        PAIRS.pop(key, None)
        options = options[:6] + (tuple(sorted(set(complexes) | returned)),)
        return _compile(fn, wrt, options, key, store, disk_key)
    if store is not None and not t.nf.inlined:   # (inlined helpers: memory only)
        try:
            payload = _entry.make_entry(disk_key, compiled, t, emitted, code, closure_names,
                                        sites, chains)
        except Exception:  # noqa: BLE001 - not storable: stays in memory only
            payload = None
        if payload is not None:
            store.write(disk_key, payload)
    return compiled


def checked_call_results(activity, optimize_code: bool = True) -> List[Tuple[Sequence[str], Any]]:
    """(names assigned, the callee's Activity) for the calls whose results the analysis
    checks at run time (Activity.checked_calls): each callee compiled for nothing but
    what it returns, so that a complex result takes the rules for complex arguments
    where it meets the gradient path, as an active call's does, instead of being
    refused there at run time. A callee that does not compile keeps its check."""
    out = []
    for names_assigned, fn in activity.checked_calls:
        try:
            callee = compile_function(fn, (), optimize_code)
        except TransformError:
            continue
        out.append((names_assigned, callee.activity))
    return out


def specialised_for(statics: Dict[str, Any]) -> str:
    """` (for g=np.sin)`: what a header adds for the functions the code is compiled
    for (parameters bound to functions by the caller), or nothing."""
    if not statics:
        return ""
    return " (for " + ", ".join(f"{n}={_function_name(v)}" for n, v in statics.items()) + ")"


def statics_tag(statics: Dict[str, Any]) -> str:
    """What a generated module's file name adds for those functions (one per object)."""
    return "".join(f" {n}=#{id(v):x}" for n, v in statics.items())


def _function_name(fn: Any) -> str:
    """How a specialised pair names the function a parameter is bound to."""
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    if isinstance(fn, np.ufunc) or module.startswith("numpy"):
        return f"np.{getattr(fn, '__name__', name)}"
    return name


def _callee_pair(site, parsed, optimize_code: bool, pure: bool) -> CompiledFunction:
    """The pair of a function this one calls. A refusal that has no place of its
    own (the callee's source cannot be read: made with exec, say) is reported
    at the call, with the caret under it."""
    try:
        return compile_function(site.fn, site.wrt, optimize_code, pure,
                                structure=site.structure, leaves=site.leaves,
                                statics=site.statics, complexes=site.complexes)
    except TransformError as exc:
        if exc.filename:
            raise
        name = getattr(site.fn, "__qualname__", None) or getattr(site.fn, "__name__", "it")
        raise error_at(site.call, f"cannot differentiate through this call to {name}: "
                                  f"{exc.reason}", parsed, exc.hint) from None


def _callee_targets(t) -> Dict[str, Tuple[int, int]]:
    """name -> (id of the call, k) for names unpacked from a callee's tuple output
    (`out, res = f_forward(x, W)`), each assigned there only."""
    calls = {site.call for site in t.callees.values()}
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
        if target is None or s.value not in calls or not isinstance(target, ast.Tuple) \
                or not all(isinstance(e, ast.Name) for e in target.elts):
            continue
        out[name] = (s.value, [e.id for e in target.elts].index(name))
    return out


def _callee_output_flags(t, made: Dict[ast.Call, CompiledFunction]) -> Dict[str, tuple]:
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
    producers = {other.call: other for other in t.callees.values()}
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
    return [s for s in t.sites if isinstance(s, FunctionSite)]


def _short(filename: str) -> str:
    return os.path.basename(filename) if filename else "?"


def clear_cache() -> None:
    with LOCK:
        PAIRS.clear()
        _bindings.GENERATION[0] += 1


def cached(fn: Callable, wrt, optimize_code: bool = True) -> Optional[CompiledFunction]:
    return PAIRS.get(cache_key(fn, tuple(wrt), (bool(optimize_code), False, ())))
