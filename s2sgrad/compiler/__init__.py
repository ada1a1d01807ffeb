"""The compiler: parse -> normalise -> analyse -> transform -> inline -> optimise -> emit.

`compile_function` runs the passes in order and returns a `CompiledFunction`
(the generated forward/adjoint pair plus the facts the API needs). Results are
cached in memory per (function, closure, wrt, options), and on disk (see
`s2sgrad.cache`): a process that finds a valid entry loads the stored code and
runs no pass.
"""
from __future__ import annotations

import ast
import dataclasses
import marshal
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import cache as disk_cache
from ..errors import reporting_bugs
from .analyze import Activity, analyze, iter_statements, output_items
from .emit import Emitted, bind_late, compile_emitted, instantiate, joined_source, to_source
from .inline import inline
from .normalize import normalize
from .optimize import link_residuals, optimize, private_copies
from .parse import ParsedFunction, parse_function, unwrap
from .resolve import MISSING, Binding, unique_bindings
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
    # The functions, classes and modules the code was generated for, by name.
    bindings: List[Binding] = field(default_factory=list)

    def current(self) -> bool:
        """Whether every name the code was generated for (here and in the functions
        it calls) is still bound to the same object: rebinding a global function
        or a closure variable must not leave a pair that computes the old one."""
        return _current(self, set())

    @property
    def source(self) -> str:
        """This function's generated code followed by that of the functions it calls."""
        return joined_source(self)


def _current(c: CompiledFunction, seen: set) -> bool:
    seen.add(id(c))
    for b in c.bindings:
        if not b.holds():
            return False
    return all(_current(sub, seen) for sub in c.callees if id(sub) not in seen)


def flat_bindings(compiled: CompiledFunction) -> tuple:
    """Every binding of a finished pair and of the pairs it calls, once each, as
    (globals dict, name, value) triples and other Binding objects: what a caller
    holding on to the pair checks on each call (see all_hold)."""
    found: Dict[tuple, Binding] = {}
    seen: set = set()

    def visit(c: CompiledFunction) -> None:
        seen.add(id(c))
        for b in c.bindings:
            found.setdefault((id(b.namespace), b.name), b)
        for sub in c.callees:
            if id(sub) not in seen:
                visit(sub)
    visit(compiled)
    in_dicts = tuple((b.namespace, b.name, b.value) for b in found.values()
                     if type(b.namespace) is dict)
    others = tuple(b for b in found.values() if type(b.namespace) is not dict)
    return in_dicts, others, _GENERATION[0]


def all_hold(flat: tuple) -> bool:
    """Whether every name in flat_bindings(...) is still bound to the same object
    (and clear_cache has not run since: then callers holding pairs compile anew)."""
    in_dicts, others, generation = flat
    if generation != _GENERATION[0]:
        return False
    for namespace, name, value in in_dicts:
        if namespace.get(name, MISSING) is not value:
            return False
    for b in others:
        if not b.holds():
            return False
    return True


_CACHE: Dict[tuple, CompiledFunction] = {}
_GENERATION = [0]    # how many times clear_cache ran (see all_hold)
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
                     structure: Tuple[Tuple[int, Tuple[bool, ...]], ...] = ()
                     ) -> CompiledFunction:
    """The cached forward/adjoint pair of `fn` with respect to positions `wrt`.

    Looks in memory, then on disk, then runs the passes (and stores the result).
    """
    # pure: an adjoint without in-place updates, to be differentiated again;
    # scalars: parameters known to be Python numbers (a specialised pair);
    # structure: for tuple parameters, the items the caller varies (the others'
    # gradients are not computed: the caller does not read them).
    options = (bool(optimize_code), bool(pure), tuple(scalars), tuple(structure))
    key = cache_key(fn, wrt, options)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            if hit.current():
                return hit
            del _CACHE[key]  # a name it was generated for is bound to something else
        wrt = tuple(wrt)
        store, disk_key = _disk(fn, wrt, options)
        if store is not None:
            compiled = _load_entry(store, disk_key, fn, wrt, options, key)
            if compiled is not None:
                return compiled
        return _compile(fn, wrt, options, key, store, disk_key)


def _compile(fn, wrt, options, key, store=None, disk_key=None) -> CompiledFunction:
    optimize_code, pure, scalars, structure = options
    with reporting_bugs(getattr(fn, "__qualname__", repr(fn))):
        parsed = parse_function(fn)
    if any(i >= len(parsed.all_params) or i < 0 for i in wrt):
        raise IndexError(f"wrt={wrt} is out of range for {parsed.name}, which takes "
                         f"{len(parsed.params)} positional argument(s)")
    with reporting_bugs(parsed.name, parsed):
        return _generate(fn, wrt, options, key, store, disk_key, parsed)


def _generate(fn, wrt, options, key, store, disk_key, parsed) -> CompiledFunction:
    optimize_code, pure, scalars, structure = options
    t = run_passes(parsed, wrt, optimize_code, pure, scalars, structure)
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
    not_inlined = [f"{s.cls.__name__}: {s.reason}" for s in _function_sites(t)
                   if not s.inlined]
    compiled = CompiledFunction(fn=fn, wrt=wrt, forward=functions[t.forward.name],
                                adjoint=functions[t.adjoint.name], module_source=source,
                                activity=t.activity, params=parsed.params, name=parsed.name,
                                not_inlined=not_inlined,
                                bindings=unique_bindings(t.nf.resolver.facts))
    _CACHE[key] = compiled
    try:
        made: Dict[int, CompiledFunction] = {}   # id(call) -> the callee's pair
        for site in t.callees.values():
            site.structure = _item_structure(site, t, made, bool(optimize_code), pure)
            callee = compile_function(site.fn, site.wrt, bool(optimize_code), pure,
                                      structure=site.structure)
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
            payload = _entry(disk_key, compiled, t, emitted, code, closure_names)
        except Exception:  # noqa: BLE001 - not storable: stays in memory only
            payload = None
        if payload is not None:
            store.write(disk_key, payload)
    return compiled


# -- the disk cache ------------------------------------------------------------------
def _disk(fn, wrt, options):
    """(store, key) when the disk cache is on and `fn` has source, else (None, None)."""
    store = disk_cache.current()
    if store is None:
        return None, None
    try:
        disk_key = disk_cache.function_key(fn, wrt, options)
    except Exception:  # noqa: BLE001 - no key, no disk cache; the compile reports errors
        return None, None
    return (store, disk_key) if disk_key else (None, None)


def _entry(disk_key, compiled: CompiledFunction, t, emitted: Emitted, code,
           closure_names) -> Optional[dict]:
    """What the disk keeps: enough to rebuild `compiled` without any pass, or None.

    Dependencies are the Function classes inlined (or called) and the user
    functions called, each with how to find it again and its fingerprint. The
    generated code's closure variables are rebound by name: `_s2s_` helpers by
    `emit.helper_value`, callees by compiling them, the others (a Function body's
    globals that the caller's module binds differently) through `cache.locate`.
    """
    root = unwrap(compiled.fn)
    deps: List[tuple] = []
    objects: List[Any] = []

    def dependency(kind: str, obj: Any) -> Optional[int]:
        for i, known in enumerate(objects):
            if known is obj and deps[i][0] == kind:
                return i
        where = disk_cache.locate(obj, root)
        if where is None:
            return None
        deps.append((kind, where, disk_cache.dependency_fingerprint(kind, obj, root)))
        objects.append(obj)
        return len(deps) - 1

    for site in _function_sites(t):
        if dependency("function", site.cls) is None:
            return None
    callees = []
    for site in t.callees.values():
        index = dependency("callee", site.fn)
        if index is None:
            return None
        callees.append((site.forward_name, site.adjoint_name, index, tuple(site.wrt),
                        tuple(getattr(site, "structure", ()))))
    # Which original name of which Function each alias stands for.
    origins: Dict[str, List[tuple]] = {}
    for site in _function_sites(t):
        index = next(i for i, obj in enumerate(objects) if obj is site.cls)
        for original, alias in getattr(site, "foreign", {}).items():
            if isinstance(alias, ast.Name):
                origins.setdefault(alias.id, []).append((index, original))
    bindings = {}
    for name, value in getattr(t, "bindings", {}).items():
        where = _locate_binding(name, value, root, objects, origins.get(name, []))
        if where is None:
            return None
        bindings[name] = where
    facts = _chain_facts(root, objects, deps)
    activity = {}
    for f in dataclasses.fields(compiled.activity):
        value = getattr(compiled.activity, f.name)
        try:
            marshal.dumps(value)
        except ValueError:
            continue
        activity[f.name] = value
    return {"format": disk_cache.FORMAT, "key": disk_key, "deps": deps,
            "name": compiled.name, "params": list(compiled.params),
            "source": compiled.module_source, "filename": emitted.filename,
            "function_names": list(emitted.function_names), "code": code,
            "closure_names": list(closure_names), "bindings": bindings, "callees": callees,
            "not_inlined": list(compiled.not_inlined), "activity": activity, "facts": facts,
            "names_bound": [("global" if type(b.namespace) is dict else "cell", b.name)
                            for b in compiled.bindings
                            if b.namespace is root.__globals__ or
                            type(b.namespace).__name__ == "cell"]}


def _chain_facts(root, objects, deps) -> List[tuple]:
    """(scope, chain, description) for every dotted name the compile resolved.

    Scope -1 is the function itself; (i, method) a Function dependency's body,
    whose chains are also checked in the function's namespace, where the
    inlined code reads the names the two modules agree on.
    """
    facts = []
    parsed = parse_function(root)
    for chain in disk_cache.attribute_chains(parsed.node, root.__code__.co_varnames
                                             + root.__code__.co_cellvars):
        facts.append((-1, chain, disk_cache.describe_chain(root, chain)))
    for i, obj in enumerate(objects):
        if deps[i][0] != "function":
            continue
        for meth in disk_cache._function_methods(obj):
            body = unwrap(getattr(obj, meth))
            try:
                node = parse_function(body).node
            except Exception:  # noqa: BLE001 - no source: called, not inlined
                continue
            code = body.__code__
            for chain in disk_cache.attribute_chains(node, code.co_varnames + code.co_cellvars):
                facts.append(((i, meth), chain, disk_cache.describe_chain(body, chain)))
                facts.append((-1, chain, disk_cache.describe_chain(root, chain)))
    return sorted(set(facts), key=repr)


def _locate_binding(name: str, value: Any, root, objects, origins) -> Optional[tuple]:
    """How to bind a closure name of generated code again in another process.

    A default value of the function is found among its defaults (the object
    bound when the def ran, not a name). `origins` are the (Function
    dependency, name in its body) the alias stands for: the value is looked up
    where that body looks it up.
    """
    from .emit import helper_value
    try:
        if helper_value(name) is value:
            return ("helper",)
    except KeyError:
        pass
    for i, default in enumerate(getattr(root, "__defaults__", None) or ()):
        if default is value:
            return ("default", i)
    for arg, default in (getattr(root, "__kwdefaults__", None) or {}).items():
        if default is value:
            return ("kwdefault", arg)
    for index, original in origins:
        for meth in disk_cache._function_methods(objects[index]):
            body = unwrap(getattr(objects[index], meth))
            if disk_cache.lookup(body, original) is value:
                return ("dep", index, meth, original)
    return disk_cache.locate(value, root, [original for _, original in origins])


def _resolve_binding(where: tuple, root, objects) -> Any:
    if where[0] == "default":
        return root.__defaults__[where[1]]
    if where[0] == "kwdefault":
        return root.__kwdefaults__[where[1]]
    if where[0] == "dep":
        _, i, meth, name = where
        return disk_cache.lookup(unwrap(getattr(objects[i], meth)), name)
    return disk_cache.resolve(where, root)


def _load_entry(store, disk_key, fn, wrt, options, key) -> Optional[CompiledFunction]:
    """The CompiledFunction stored on disk, or None if absent, stale or unusable."""
    payload = store.read(disk_key)
    if payload is None:
        return None
    try:
        return _from_entry(payload, fn, wrt, options, key)
    except Exception:  # noqa: BLE001 - a bad entry is regenerated, never an error
        _CACHE.pop(key, None)
        return None


def _from_entry(payload: dict, fn, wrt, options, key) -> Optional[CompiledFunction]:
    root = unwrap(fn)
    objects = []
    for kind, where, fingerprint in payload["deps"]:
        obj = disk_cache.resolve(where, root)
        if obj is disk_cache.MISSING or \
                disk_cache.dependency_fingerprint(kind, obj, root) != fingerprint:
            return None
        objects.append(obj)
    for scope, chain, description in payload["facts"]:
        fn_scope = root if scope == -1 else unwrap(getattr(objects[scope[0]], scope[1]))
        if disk_cache.describe_chain(fn_scope, chain) != description:
            return None
    free: Dict[str, Any] = {}
    for name, where in payload["bindings"].items():
        if where[0] == "helper":
            continue
        value = _resolve_binding(where, root, objects)
        if value is disk_cache.MISSING:
            return None
        free[name] = value
    for forward_name, adjoint_name, *_ in payload["callees"]:
        free[forward_name] = None
        free[adjoint_name] = None
    closure = dict(zip(root.__code__.co_freevars, root.__closure__ or ()))
    emitted = Emitted(source=payload["source"], function_names=payload["function_names"],
                      filename=payload["filename"], globals=root.__globals__, free=free,
                      closure_cells=closure)
    functions = instantiate(payload["code"], payload["closure_names"], emitted)
    forward_name, adjoint_name = payload["function_names"]
    compiled = CompiledFunction(fn=fn, wrt=wrt, forward=functions[forward_name],
                                adjoint=functions[adjoint_name],
                                module_source=payload["source"],
                                activity=_activity(payload["activity"], wrt),
                                params=list(payload["params"]), name=payload["name"],
                                not_inlined=list(payload["not_inlined"]),
                                bindings=_bindings_now(root, payload.get("names_bound", ())))
    _CACHE[key] = compiled
    for forward_name, adjoint_name, index, callee_wrt, structure in payload["callees"]:
        callee = compile_function(objects[index], callee_wrt, options[0], options[1],
                                  structure=_as_structure(structure))
        compiled.callees.append(callee)
        bind_late(functions, forward_name, callee.forward)
        bind_late(functions, adjoint_name, callee.adjoint)
    return compiled


def _bindings_now(root, names) -> List[Binding]:
    """The bindings of a pair loaded from disk: the names as bound now (the entry's
    dependencies and facts were just checked against them)."""
    cells = dict(zip(root.__code__.co_freevars, root.__closure__ or ()))
    out = []
    for kind, name in names:
        if kind == "cell" and name in cells:
            try:
                out.append(Binding(cells[name], name, cells[name].cell_contents))
            except ValueError:
                continue
        elif kind == "global" and name in root.__globals__:
            out.append(Binding(root.__globals__, name, root.__globals__[name]))
    return out


def _activity(data: dict, wrt) -> Activity:
    """Activity facts read back from disk (strict mode needs `independent`/`reasons`)."""
    kwargs = {}
    for f in dataclasses.fields(Activity):
        if f.name in data:
            kwargs[f.name] = data[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = tuple(wrt) if f.name == "wrt" else set()
    return Activity(**kwargs)


def run_passes(parsed: ParsedFunction, wrt: Tuple[int, ...], optimize_code: bool = True,
               pure: bool = False, scalars: Tuple[str, ...] = (), structure=()):
    """Every pass from normalise to optimise; returns the Transformed record."""
    nf = normalize(parsed)
    activity = analyze(nf, wrt, scalars, structure)
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


def _as_structure(value) -> tuple:
    def flags(f):
        return tuple(flags(x) for x in f) if isinstance(f, (tuple, list)) else bool(f)
    return tuple((int(pos), flags(items)) for pos, items in value)


def _function_sites(t):
    from .inline import FunctionSite
    return [s for s in t.sites if isinstance(s, FunctionSite)]


def _short(filename: str) -> str:
    import os
    return os.path.basename(filename) if filename else "?"


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()
        _GENERATION[0] += 1


def cached(fn: Callable, wrt, optimize_code: bool = True) -> Optional[CompiledFunction]:
    return _CACHE.get(cache_key(fn, tuple(wrt), (bool(optimize_code), False, ())))
