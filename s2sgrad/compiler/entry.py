"""The disk entry of a compiled pair: what is stored, and how it is checked and
rebuilt in another process without running any pass.

An entry (a marshal-able dict, see `make_entry`) holds

- `deps`: the Function classes inlined (or called) and the user functions
  called, each with how to find it again (`cache.locate`, or for the
  function a partial or bound method runs, through that callable: see
  below) and the fingerprint of its sources;
- `facts`: every dotted name the compile resolved (`np.sin`, `cfg.act`) with
  a description of what it resolved to;
- `bindings`: the generated code's closure variables, how to bind them
  again (`_s2s_` helpers by name, defaults among the defaults, a Function
  body's foreign globals where that body reads them, what a partial or bound
  method binds through that callable) and a description of the value bound;
- `checks`: the pair's bindings (`compiler.bindings`) -- every name, dotted
  attribute and Function method the code was generated for -- as (where the
  namespace is, name, description of the value). Loading finds each
  namespace again, compares the description and keeps the binding with the
  object bound now, so the loaded pair is checked on every call exactly as a
  freshly compiled one;
- the generated source, its code object and the facts the API needs.

`load` checks deps, facts and checks before anything runs; any mismatch or
error means the entry is regenerated.

A partial or bound method the code calls (`act = functools.partial(h, a=2)`,
`act = model.act`) is one of the pair's bindings, described with what it
binds (`cache.describe_value`: the function, and each bound value by value, dtype
and shape, or class). The values its call passes (`a`, `self`) and the
function it runs are found again through it -- ("bound", index of that
binding, "arg", i | "kw", name | "func") -- never by searching a namespace
for an identical object: `2` is also every other global bound to 2.
"""
from __future__ import annotations

import ast
import dataclasses
import marshal
import sys
import types
from typing import Any, Callable, Dict, List, Optional

from .. import cache as disk_cache
from ..introspect import function_methods, unwrap
from .analyze import Activity
from .bindings import MISSING, Binding, read
from .callables import bound_call
from .compiled import CompiledFunction
from .loader import Emitted, bind_late, helper_value, instantiate
from .memory import PAIRS
from .parse import parse_function


def disk_store(fn, wrt, options):
    """(store, key) when the disk cache is on and `fn` has source, else (None, None)."""
    store = disk_cache.current()
    if store is None or hasattr(unwrap(fn), "__s2sgrad_tree__"):
        return None, None   # (a function the compiler wrote has no text of its own)
    try:
        disk_key = disk_cache.function_key(fn, wrt, options)
    except Exception:  # noqa: BLE001 - no key, no disk cache; the compile reports errors
        return None, None
    return (store, disk_key) if disk_key else (None, None)


def make_entry(disk_key, compiled, t, emitted: Emitted, code, closure_names,
               function_sites, chains: Optional[List[str]] = None) -> Optional[dict]:
    """What the disk keeps: enough to rebuild `compiled` without any pass, or None
    (memory only) when some object cannot be found again in another process.

    The generated code's closure variables are rebound by name: `_s2s_`
    helpers by `loader.helper_value`, callees by compiling them, the others (a
    Function body's globals that the caller's module binds differently)
    through `cache.locate`.
    """
    root = unwrap(compiled.fn)
    deps: List[tuple] = []
    objects: List[Any] = []
    parts = bound_parts(compiled.bindings)

    def dependency(kind: str, obj: Any) -> Optional[int]:
        for i, known in enumerate(objects):
            if known is obj and deps[i][0] == kind:
                return i
        where = next((w for part, w in parts if part is obj and w[2] == "func"), None) \
            if kind == "callee" else None
        if where is None:
            where = disk_cache.locate(obj, root)
        if where is None:
            return None
        deps.append((kind, where, disk_cache.dependency_fingerprint(kind, obj, root)))
        objects.append(obj)
        return len(deps) - 1

    for site in function_sites:
        if dependency("function", site.cls) is None:
            return None
    callees = []
    for site in t.callees.values():
        index = dependency("callee", site.fn)
        if index is None or site.statics:   # (a specialised callee: memory only)
            return None
        callees.append((site.forward_name, site.adjoint_name, index, tuple(site.wrt),
                        tuple(getattr(site, "structure", ())), tuple(site.leaves),
                        tuple(site.complexes)))
    # Which original name of which Function each alias stands for.
    origins: Dict[str, List[tuple]] = {}
    for site in function_sites:
        index = next(i for i, obj in enumerate(objects) if obj is site.cls)
        for original, alias in getattr(site, "foreign", {}).items():
            if isinstance(alias, ast.Name):
                origins.setdefault(alias.id, []).append((index, original))
    bindings = {}
    for name, value in getattr(t, "bindings", {}).items():
        where = locate_binding(name, value, root, objects, origins.get(name, []), parts)
        if where is None:
            return None
        bindings[name] = (where, None if where[0] == "helper" else _description(value))
    checks = []
    for b in compiled.bindings:
        where = _namespace_locator(b.namespace, root, objects, deps)
        if where is None:
            return None
        checks.append((where, b.name, None if where[0] == "self" else _description(b.value)))
    facts = _chain_facts(root, objects, deps, chains)
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
            "tolerance": compiled.tolerance,
            "checks": checks}


def root_chains(node: ast.FunctionDef, root: Callable) -> Optional[List[str]]:
    """The dotted names (`np.sin`) in the parsed tree of `root` (the function the
    entry is for, unwrapped), as the entry records them: asked before the passes
    rewrite that tree. None when they cannot be read (the entry reads them again)."""
    try:
        code = root.__code__
        return disk_cache.attribute_chains(node, code.co_varnames + code.co_cellvars)
    except Exception:  # noqa: BLE001 - not storable is decided in make_entry
        return None


def _chain_facts(root, objects, deps, chains: Optional[List[str]] = None) -> List[tuple]:
    """(scope, chain, description) for every dotted name the compile resolved.

    Scope -1 is the function itself; (i, method) a Function dependency's body,
    whose chains are also checked in the function's namespace, where the
    inlined code reads the names the two modules agree on.
    """
    facts = []
    if chains is None:
        chains = root_chains(parse_function(root).node, root)
    for chain in chains:
        facts.append((-1, chain, disk_cache.describe_chain(root, chain)))
    for i, obj in enumerate(objects):
        if deps[i][0] != "function":
            continue
        for meth in function_methods(obj):
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


# -- the pair's bindings, found again ----------------------------------------------------
def _description(value) -> str:
    return "<missing>" if value is MISSING else disk_cache.describe_value(value)


def _method(objects, i, meth):
    return unwrap(getattr(objects[i], meth))


def _namespace_locator(ns, root, objects, deps) -> Optional[tuple]:
    """How to find a binding's namespace again from the function and its
    dependencies, as marshal-able data; None when it cannot be."""
    functions = [i for i, (kind, *_) in enumerate(deps) if kind == "function"]
    if ns is root:
        return ("self",)
    if ns is getattr(root, "__globals__", None):
        return ("globals",)
    kind = type(ns)
    if kind is dict:
        for i in functions:
            for meth in function_methods(objects[i]):
                if getattr(_method(objects, i, meth), "__globals__", None) is ns:
                    return ("dep-globals", i, meth)
        name = ns.get("__name__")
        if isinstance(name, str) and getattr(sys.modules.get(name), "__dict__", None) is ns:
            return ("module-dict", name)
        return None
    if kind is types.CellType:
        for name, cell in zip(root.__code__.co_freevars, root.__closure__ or ()):
            if cell is ns:
                return ("cell", name)
        for i in functions:
            for meth in function_methods(objects[i]):
                body = _method(objects, i, meth)
                for name, cell in zip(body.__code__.co_freevars, body.__closure__ or ()):
                    if cell is ns:
                        return ("dep-cell", i, meth, name)
        return None
    if isinstance(ns, type):
        for i in functions:
            if objects[i] is ns:
                return ("class", i)
        return None
    if isinstance(ns, types.ModuleType):
        where = disk_cache.locate(ns, root)
        return ("module", where) if where is not None else None
    return None


def _namespace_at(where: tuple, root, objects) -> Any:
    """The namespace a locator names now, or MISSING."""
    kind = where[0]
    if kind == "self":
        return root
    if kind == "globals":
        return root.__globals__
    if kind == "dep-globals":
        return _method(objects, where[1], where[2]).__globals__
    if kind == "module-dict":
        module = sys.modules.get(where[1])
        return module.__dict__ if module is not None else MISSING
    if kind in ("cell", "dep-cell"):
        fn = root if kind == "cell" else _method(objects, where[1], where[2])
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        return cells.get(where[-1], MISSING)
    if kind == "class":
        return objects[where[1]]
    if kind == "module":
        module = disk_cache.resolve(where[1], root)
        return module if isinstance(module, types.ModuleType) else MISSING
    return MISSING


def _checks_now(checks, root, objects) -> Optional[List[Binding]]:
    """The loaded pair's bindings, bound to the objects bound now; None if one
    of them is no longer what the code was generated for."""
    out = []
    for where, name, description in checks:
        ns = _namespace_at(tuple(where), root, objects)
        if ns is MISSING:
            return None
        value = read(ns, name)
        if description is not None and _description(value) != description:
            return None
        out.append(Binding(ns, name, value))
    return out


# -- what partials and bound methods bind ------------------------------------------------
def bound_parts(bindings: List[Binding]) -> List[tuple]:
    """(object, locator) for the function and the values each partial, bound
    method or callable instance among a pair's `bindings` binds: the locator
    ("bound", index in `bindings`, "func" | "arg", i | "kw", name) finds it
    again through that binding in another process."""
    out: List[tuple] = []
    for j, b in enumerate(bindings):
        value = b.value
        if value is MISSING or isinstance(value, (types.FunctionType, type)) or \
                not callable(value):
            continue
        bound = bound_call(value)
        if bound is None:
            continue
        out.append((bound.func, ("bound", j, "func")))
        out += [(arg, ("bound", j, "arg", i)) for i, arg in enumerate(bound.args)]
        out += [(arg, ("bound", j, "kw", k)) for k, arg in sorted(bound.kwargs.items())]
    return out


def _bound_part(where: tuple, checks: List[Binding]) -> Any:
    """What a ("bound", ...) locator names now, through the binding it names."""
    _, j, part, *rest = where
    if not 0 <= j < len(checks):
        return MISSING
    bound = bound_call(checks[j].value)
    if bound is None:
        return MISSING
    if part == "func":
        return bound.func
    if part == "arg":
        return bound.args[rest[0]] if rest[0] < len(bound.args) else MISSING
    return bound.kwargs.get(rest[0], MISSING)


# -- closure variables of generated code ---------------------------------------------------
def locate_binding(name: str, value: Any, root, objects, origins,
                   parts: List[tuple] = ()) -> Optional[tuple]:
    """How to bind a closure name of generated code again in another process.

    What a partial or bound method the code calls binds (`parts`, from
    `bound_parts`) is found through that callable. A default value of the
    function is found among its defaults (the object bound when the def ran,
    not a name). `origins` are the (Function dependency, name in its body) the
    alias stands for: the value is looked up where that body looks it up.
    """
    try:
        if helper_value(name) is value:
            return ("helper",)
    except KeyError:
        pass
    for part, where in parts:
        if part is value:
            return where
    for i, default in enumerate(getattr(root, "__defaults__", None) or ()):
        if default is value:
            return ("default", i)
    for arg, default in (getattr(root, "__kwdefaults__", None) or {}).items():
        if default is value:
            return ("kwdefault", arg)
    for index, original in origins:
        for meth in function_methods(objects[index]):
            body = unwrap(getattr(objects[index], meth))
            if disk_cache.lookup(body, original) is value:
                return ("dep", index, meth, original)
    return disk_cache.locate(value, root, [original for _, original in origins])


def resolve_binding(where: tuple, root, objects, checks: List[Binding] = ()) -> Any:
    """The value a `locate_binding` locator names now, or MISSING."""
    if where[0] == "bound":
        return _bound_part(where, list(checks))
    if where[0] == "default":
        return root.__defaults__[where[1]]
    if where[0] == "kwdefault":
        return root.__kwdefaults__[where[1]]
    if where[0] == "dep":
        _, i, meth, name = where
        return disk_cache.lookup(unwrap(getattr(objects[i], meth)), name)
    return disk_cache.resolve(where, root)


# -- loading -----------------------------------------------------------------------------
def load(store, disk_key, fn, wrt, options, key, compile_function):
    """The CompiledFunction stored on disk, or None if absent, stale or unusable
    (its callees' pairs come from `compile_function`: the driver's)."""
    payload = store.read(disk_key)
    if payload is None:
        return None
    try:
        return _from_entry(payload, fn, wrt, options, key, compile_function)
    except Exception:  # noqa: BLE001 - a bad entry is regenerated, never an error
        PAIRS.pop(key, None)
        return None


def _from_entry(payload: dict, fn, wrt, options, key, compile_function):
    root = unwrap(fn)
    objects: List[Any] = []
    for kind, where, fingerprint in payload["deps"]:
        # A function a partial or bound method runs is found through it, once the
        # bindings are (below); they never name one another's dependency.
        obj = MISSING if where[0] == "bound" else disk_cache.resolve(where, root)
        if where[0] != "bound" and (obj is disk_cache.MISSING or
                                    disk_cache.dependency_fingerprint(kind, obj, root)
                                    != fingerprint):
            return None
        objects.append(obj)
    checks = _checks_now(payload["checks"], root, objects)
    if checks is None:
        return None
    for i, (kind, where, fingerprint) in enumerate(payload["deps"]):
        if where[0] == "bound":
            obj = _bound_part(tuple(where), checks)
            if obj is MISSING or disk_cache.dependency_fingerprint(kind, obj, root) != \
                    fingerprint:
                return None
            objects[i] = obj
    for scope, chain, description in payload["facts"]:
        fn_scope = root if scope == -1 else unwrap(getattr(objects[scope[0]], scope[1]))
        if disk_cache.describe_chain(fn_scope, chain) != description:
            return None
    free: Dict[str, Any] = {}
    for name, (where, description) in payload["bindings"].items():
        if where[0] == "helper":
            continue
        value = resolve_binding(tuple(where), root, objects, checks)
        if value is disk_cache.MISSING or value is MISSING or \
                _description(value) != description:
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
                                not_inlined=list(payload["not_inlined"]), bindings=checks,
                                tolerance=payload.get("tolerance"))
    PAIRS[key] = compiled
    for forward_name, adjoint_name, index, callee_wrt, structure, leaves, complexes in \
            payload["callees"]:
        callee = compile_function(objects[index], callee_wrt, options[0], options[1],
                                  structure=_as_structure(structure), leaves=tuple(leaves),
                                  complexes=tuple(complexes))
        compiled.callees.append(callee)
        bind_late(functions, forward_name, callee.forward)
        bind_late(functions, adjoint_name, callee.adjoint)
    return compiled


def _activity(data: dict, wrt) -> Activity:
    """Activity facts read back from disk (strict mode needs `independent`/`reasons`)."""
    kwargs = {}
    for f in dataclasses.fields(Activity):
        if f.name in data:
            kwargs[f.name] = data[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = tuple(wrt) if f.name == "wrt" else set()
    return Activity(**kwargs)


def _as_structure(value) -> tuple:
    def flags(f):
        return tuple(flags(x) for x in f) if isinstance(f, (tuple, list)) else bool(f)
    return tuple((int(pos), flags(items)) for pos, items in value)
