"""What generated code was generated for, and the checks that it still is.

A pair is valid only while the objects its code was generated for are still
where it found them. Each `Binding` is one such fact: a name in a namespace
and the object it was bound to. The namespaces are

- a globals dict (a module's names; the function's own, or those of the
  module an inlined `Function` body was written in);
- a closure cell;
- a module, for a dotted name the compiler resolved (`h.helper`, `np.sin`);
- a class, for the `forward`/`vjp` an inlined `Function` class has, wherever
  in its bases it defines them (an inlined method is a staticmethod or a
  plain function, which reads as the same function object each time, so one
  identity check per method sees it replaced in the class or a base, or
  added to a subclass);
- a function, for its own `__code__`, `__defaults__` and, if it has
  keyword-only parameters, `__kwdefaults__` (reassigning them changes what
  the function computes).

A freshly compiled pair gets its bindings from `pair_bindings`; a pair
loaded from disk gets the same list back (see `compiler.entry`), so both are
checked alike: by `CompiledFunction.current()` on a memory-cache hit and by
`all_hold(flat_bindings(pair))` on every call of a `grad`/`value_and_grad`/
`vjp` wrapper (identity comparisons in flat loops).
"""
from __future__ import annotations

import ast
import types
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from ..introspect import function_methods, unwrap
from .parse import parse_function

MISSING = object()   # the value of a name that is not bound (also resolve.MISSING)

# How many times the memory cache was cleared: wrappers holding on to pairs
# compile anew after clear_cache (see all_hold).
GENERATION = [0]

_CELL = types.CellType
_MODULE = types.ModuleType


class Binding:
    """A name and the object it was bound to when the code was generated
    (namespace: see the module docstring)."""

    __slots__ = ("namespace", "name", "value")

    def __init__(self, namespace, name: str, value: Any):
        self.namespace, self.name, self.value = namespace, name, value

    def holds(self) -> bool:
        return read(self.namespace, self.name) is self.value

    def __repr__(self) -> str:  # for test failures and debugging
        return f"Binding({type(self.namespace).__name__}, {self.name!r})"


class SequenceItems:
    """A list's length and items as attributes (`length`, `item_0`, ...): the
    namespace of the bindings of code generated for what a module-level list held
    (a list of functions the code calls), which the list can change in place."""

    __slots__ = ("items",)

    def __init__(self, items: list):
        self.items = items

    def __getattr__(self, name: str) -> Any:
        items = self.items
        if name == "length":
            return len(items)
        if name.startswith("item_"):
            i = int(name[len("item_"):])
            return items[i] if i < len(items) else MISSING
        raise AttributeError(name)


def read(namespace, name: str) -> Any:
    """What `name` is bound to in `namespace` now, or MISSING."""
    kind = type(namespace)
    if kind is dict:
        return namespace.get(name, MISSING)
    if kind is _CELL:
        try:
            return namespace.cell_contents
        except ValueError:
            return MISSING
    try:
        return getattr(namespace, name, MISSING)
    except Exception:  # noqa: BLE001 - a module __getattr__ that raises: not bound
        return MISSING


def unique_bindings(facts: Iterable[Binding]) -> List[Binding]:
    seen, out = set(), []
    for b in facts:
        key = (id(b.namespace), b.name)
        if key not in seen:
            seen.add(key)
            out.append(b)
    return out


# -- what a freshly compiled pair depends on ------------------------------------------
_OWN = ("__code__", "__defaults__")


def pair_bindings(fn: Callable, facts: Sequence[Binding], classes: Iterable[type] = (),
                  with_jvp: bool = False,
                  functions: Iterable[Callable] = ()) -> List[Binding]:
    """The bindings of a pair generated from `fn`: the free names its resolver
    looked up (`facts`), the function's own code and defaults, and for every
    `Function` class whose body was inlined (`classes`) where its methods come
    from and the names those bodies read in their own module; for every helper
    whose body was inlined (`functions`), its code and defaults and the names it
    reads in its own module."""
    root = unwrap(fn)
    out = list(facts)
    caller = getattr(root, "__globals__", None)
    for own in [root, *functions]:
        if isinstance(own, types.FunctionType):
            out += [Binding(own, attr, getattr(own, attr)) for attr in _OWN]
            if own.__code__.co_kwonlyargcount:   # without keyword-only parameters, unused
                out.append(Binding(own, "__kwdefaults__", own.__kwdefaults__))
            if own is not root:
                out += body_bindings(own, caller)
    done: set = set()
    for cls in classes:
        if id(cls) not in done:
            done.add(id(cls))
            out += class_bindings(cls, caller, with_jvp)
    return unique_bindings(out)


def class_bindings(cls: type, caller_globals, with_jvp: bool = False) -> List[Binding]:
    """The methods `cls` inlines, as the class finds them (in itself or a base),
    and the names their bodies read."""
    out = []
    for meth in function_methods(cls, with_jvp):
        value = read(cls, meth)
        out.append(Binding(cls, meth, value))
        body = _plain_function(value if value is not MISSING else None)
        if body is not None:
            out += body_bindings(body, caller_globals)
    return out


def _plain_function(obj):
    obj = unwrap(obj) if obj is not None else None
    return obj if isinstance(obj, types.FunctionType) else None


def body_bindings(fn: types.FunctionType, caller_globals) -> List[Binding]:
    """The names an inlined body reads, as its own module binds them.

    Inlined code reads a name the caller's module binds to the same object
    from the caller's globals, and any other (a helper the vjp calls, a
    constant of the Function's module) as the object it was bound to when the
    code was generated; either way the body's own module may later bind it
    to something else, which Python would use. Numbers and arrays the body
    reads in the caller's very module are read live, like Python does, and
    are not recorded.
    """
    try:
        node = parse_function(fn).node
    except Exception:  # noqa: BLE001 - no source: called, not inlined
        return []
    code = fn.__code__
    local = set(code.co_varnames) | set(code.co_cellvars)
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    namespace = fn.__globals__
    out: List[Binding] = []
    chains: Dict[ast.Attribute, ast.Attribute] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load):
            chains[sub] = sub
        if not (isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load)) or \
                sub.id in local:
            continue
        name = sub.id
        if name in cells:
            out.append(Binding(cells[name], name, read(cells[name], name)))
        elif name in namespace:
            value = namespace[name]
            if namespace is caller_globals and not _shapes_code(value):
                continue
            out.append(Binding(namespace, name, value))
    # `mod.helper`, `pkg.sub.fn`: module attributes the compiler resolved.
    inner = {a.value for a in chains.values() if isinstance(a.value, ast.Attribute)}
    for attr in chains.values():
        if attr in inner:
            continue  # part of a longer chain
        parts, cur = [], attr
        while isinstance(cur, ast.Attribute):
            parts.append(cur.attr)
            cur = cur.value
        if not isinstance(cur, ast.Name) or cur.id in local:
            continue
        base = read(cells[cur.id], cur.id) if cur.id in cells else namespace.get(cur.id, MISSING)
        for part in reversed(parts):
            if not isinstance(base, _MODULE):
                break
            value = read(base, part)
            if _shapes_code(value):
                out.append(Binding(base, part, value))
            base = value
    return out


def _shapes_code(value) -> bool:
    """Functions, classes and modules decide what code is generated (rules,
    inlining, callees); other values are data."""
    return callable(value) or isinstance(value, _MODULE)


# -- the checks --------------------------------------------------------------------------
def current(compiled, seen: Optional[set] = None) -> bool:
    """Every binding of `compiled` and of the pairs it calls still holds (a
    memory-cache hit asks this). Each pair flattens its own bindings once."""
    checks = compiled.__dict__.get("_flat_checks")
    if checks is None or checks[0] is not compiled.bindings:
        checks = compiled._flat_checks = (compiled.bindings, _flatten(compiled.bindings))
    if not _hold(*checks[1]):
        return False
    callees = _depends_on(compiled)
    if not callees:
        return True
    if seen is None:
        seen = set()
    seen.add(id(compiled))
    for sub in callees:
        if id(sub) not in seen and not current(sub, seen):
            return False
    return True


def _depends_on(compiled) -> list:
    """The pairs whose bindings a pair's code depends on: those it calls, and, for the
    code of a derivative (higher.derived: `grad_f` calling f's generated pair), the
    pair it was written from, whose bindings (a global f reads) its own text does
    not name."""
    origin = getattr(compiled.fn, "__s2sgrad_pair__", None)
    return compiled.callees if origin is None else [*compiled.callees, origin]


def flat_bindings(compiled) -> tuple:
    """Every binding of a finished pair and of the pairs it calls, once each, in
    the form all_hold checks fastest: (dict, name, value) triples (globals, a
    plain module's __dict__), (function, code, defaults), (cell, value) pairs,
    (object, attribute, value) triples (a Function class's methods,
    __kwdefaults__, other modules) and the cache generation."""
    found: Dict[tuple, Binding] = {}
    seen: set = set()

    def visit(c) -> None:
        seen.add(id(c))
        for b in c.bindings:
            found.setdefault((id(b.namespace), b.name), b)
        for sub in _depends_on(c):
            if id(sub) not in seen:
                visit(sub)
    visit(compiled)
    return _flatten(found.values()) + (GENERATION[0],)


def _flatten(bindings: Iterable[Binding]) -> tuple:
    mappings, cells, attributes = [], [], []
    own: Dict[int, Dict[str, Any]] = {}
    for b in bindings:
        ns = b.namespace
        if type(ns) is dict:
            mappings.append((ns, b.name, b.value))
        elif type(ns) is _CELL:
            cells.append((ns, b.value))
        elif type(ns) is _MODULE and b.value is not MISSING and \
                ns.__dict__.get(b.name, MISSING) is b.value:
            mappings.append((ns.__dict__, b.name, b.value))
        elif type(ns) is types.FunctionType and b.name in _OWN:
            own.setdefault(id(ns), {"fn": ns})[b.name] = b.value
        else:
            attributes.append((ns, b.name, b.value))
    functions = []
    for attrs in own.values():
        if len(attrs) == 1 + len(_OWN):
            functions.append((attrs["fn"],) + tuple(attrs[a] for a in _OWN))
        else:
            attributes += [(attrs["fn"], a, attrs[a]) for a in _OWN if a in attrs]
    return tuple(mappings), tuple(functions), tuple(cells), tuple(attributes)


def all_hold(flat: tuple) -> bool:
    """Whether every binding in flat_bindings(...) still holds (and clear_cache
    has not run since: then callers holding pairs compile anew). This runs on
    every call of a gradient wrapper: the common parts first, no calls but
    dict.get (the same loops as _hold, written out: a call costs as much as
    two bindings)."""
    mappings, functions, cells, attributes, generation = flat
    if generation != GENERATION[0]:
        return False
    for namespace, name, value in mappings:
        if namespace.get(name, MISSING) is not value:
            return False
    for fn, code, defaults in functions:
        if fn.__code__ is not code or fn.__defaults__ is not defaults:
            return False
    for obj, name, value in attributes:
        if getattr(obj, name, MISSING) is not value:
            return False
    if cells:
        return _hold((), (), cells, ())
    return True


def _hold(mappings, functions, cells, attributes) -> bool:
    for namespace, name, value in mappings:
        if namespace.get(name, MISSING) is not value:
            return False
    for fn, code, defaults in functions:
        if fn.__code__ is not code or fn.__defaults__ is not defaults:
            return False
    for obj, name, value in attributes:
        if getattr(obj, name, MISSING) is not value:
            return False
    for cell, value in cells:
        try:
            if cell.cell_contents is not value:
                return False
        except ValueError:
            if value is not MISSING:
                return False
    return True
