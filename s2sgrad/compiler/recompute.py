"""Whether a helper marked `s2sgrad.checkpoint` gives the same values when called again.

The adjoint of a checkpointed call runs the helper's forward a second time, on the
arguments the call had. That is exact only if the second run computes what the first
did and changes nothing the first one left: no random numbers, no writes into its
arguments or into globals, no call of code this module cannot see into. Each fact is
read from the source (the helper's and, transitively, its own helpers'); what is not
proven is refused, with the reason, rather than differentiated at other values.
"""
from __future__ import annotations

import ast
import builtins
import types
from typing import Any, Dict, Iterable, Optional, Set

import numpy as np

from ..errors import TransformError
from ..function import checkpoint, is_function_class
from ..introspect import unwrap
from .parse import parse_function

# Builtins that compute from their arguments alone (print only writes out).
_PURE_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "complex", "dict", "divmod", "enumerate", "float",
    "int", "isinstance", "len", "list", "map", "max", "min", "pow", "print", "range",
    "reversed", "round", "slice", "sorted", "sum", "tuple", "zip", "type", "hasattr",
    "getattr", "callable", "str", "repr", "set", "frozenset"})   # (not next: it advances)

# Types whose calls make a value from their arguments alone.
_PURE_TYPES = (bool, int, float, complex, list, tuple, dict, set, frozenset, str, range,
               slice, enumerate, zip, map, reversed)

# Modules whose functions compute from their arguments alone (numpy.random aside).
_PURE_MODULES = ("numpy", "math", "cmath", "scipy", "operator")

# ndarray methods that write into the array itself.
_INPLACE_METHODS = frozenset({"fill", "sort", "put", "partition", "resize", "setflags",
                              "setfield", "itemset", "byteswap"})

# Methods of lists and dicts that only read; the ones that change the container.
_READ_METHODS = frozenset({"get", "items", "keys", "values", "index", "count", "copy"})
_CONTAINER_WRITES = frozenset({"append", "extend", "insert", "pop", "remove", "clear",
                               "update", "setdefault", "popitem", "add", "discard"})

# Names of calls that draw random numbers (numpy.random, random, scipy.stats' rvs).
_RANDOM = frozenset({"random", "rvs", "shuffle", "permutation", "default_rng", "seed"})

# NumPy functions that write into their first argument.
_WRITES_FIRST = frozenset({"at", "copyto", "put", "place", "putmask", "fill_diagonal",
                           "put_along_axis"})

# Calls whose result is a new object (never one of their arguments, nor a view of one).
_FRESH_CALLS = frozenset({"zeros", "ones", "empty", "full", "zeros_like", "ones_like",
                          "empty_like", "full_like", "array", "copy", "concatenate", "stack",
                          "hstack", "vstack", "arange", "linspace", "eye", "identity",
                          "outer", "dot", "matmul", "list", "dict", "tuple"})


def refusal(fn: Any, written_by_caller: Iterable[str] = ()) -> Optional[str]:
    """Why calling `fn` again might not give the same values (None: it does).
    `written_by_caller`: names the calling function writes into in place (a global the
    helper reads, changed between the two runs, would give it other values)."""
    return _Checker(set(written_by_caller)).function(fn)


class _Checker:
    def __init__(self, written_by_caller: Set[str]):
        self.written_by_caller = written_by_caller
        self.seen: Set[int] = set()

    def function(self, fn: Any, own_first: bool = False) -> Optional[str]:
        """own_first: the first parameter is a value made for this call alone (the
        ctx a Function's forward is given), which it may write into."""
        fn = unwrap(fn)
        if id(fn) in self.seen:
            return None
        self.seen.add(id(fn))
        if not isinstance(fn, types.FunctionType):
            return f"it calls {getattr(fn, '__name__', fn)!r}, whose code cannot be read"
        try:
            parsed = parse_function(fn)
        except TransformError as exc:
            return f"the source of {fn.__name__} cannot be read ({exc.reason})"
        scope = _Scope(parsed.node, parsed.globals, parsed.closure)
        if own_first and parsed.node.args.args:
            scope.own.add(parsed.node.args.args[0].arg)
        for node in ast.walk(parsed.node):
            reason = self.statement(node, scope, fn.__name__)
            if reason is not None:
                return reason
        return None

    def statement(self, node: ast.AST, scope: "_Scope", where: str) -> Optional[str]:
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return f"{where} declares {', '.join(node.names)} {type(node).__name__.lower()}"
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            return f"{where} is a generator or coroutine"
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
                [node.target]
            for target in targets:
                for t in _flat(target):
                    reason = self.write(t, scope, where, isinstance(node, ast.AugAssign))
                    if reason is not None:
                        return reason
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                node.id in self.written_by_caller and not scope.is_local(node.id):
            return (f"{where} reads the global {node.id}, which the calling function "
                    f"writes into")
        if isinstance(node, ast.Call):
            return self.call(node, scope, where)
        return None

    def write(self, target: ast.expr, scope: "_Scope", where: str,
              augmented: bool) -> Optional[str]:
        """A write: into a subscript or attribute of a value made here, or a name."""
        if isinstance(target, ast.Name):
            if augmented and not scope.fresh(target.id):
                return (f"{where} updates {target.id} in place (`{target.id} op= ...`), "
                        f"which may be an array the caller passed")
            return None
        root = _root(target)
        if isinstance(target, ast.Attribute):
            if root is not None and root in scope.own and scope.fresh(root):
                return None
            return f"{where} sets the attribute .{target.attr} of {root or 'a value'}"
        if root is None or not scope.fresh(root):
            return (f"{where} writes into {root or 'a value'}, which may share memory "
                    f"with an argument or a global")
        return None

    def call(self, call: ast.Call, scope: "_Scope", where: str) -> Optional[str]:
        func = call.func
        chain = _chain(func)
        text = ".".join(chain) if chain else ast.unparse(func)
        if chain and _RANDOM & set(chain):
            return f"{where} calls {text}, which draws random numbers"
        written = [kw.value for kw in call.keywords if kw.arg == "out"]
        if chain and chain[-1] in _WRITES_FIRST and call.args:
            written.append(call.args[0])
        for target in written:
            for t in _flat(target):
                root = _root(t)
                if root is None or not scope.fresh(root):
                    return (f"{where} calls {text}, which writes into {root or 'a value'}: "
                            f"it may share memory with an argument or a global")
        if isinstance(func, ast.Attribute):
            root = chain[0] if chain else None
            if root is not None and not scope.is_local(root):
                value = scope.lookup(root)
                if isinstance(value, types.ModuleType):
                    return self.module_call(value, text, where)
                if value is _MISSING:
                    return f"{where} calls {text}, which is not defined where it is read"
                if callable(value) or len(chain) > 2:   # a class's or function's attribute
                    return self.known_call(_attribute(value, chain[1:]), text, where)
            method = func.attr
            if root is not None and root in scope.own and scope.fresh(root):
                return None   # ctx.save_for_backward(...)
            if method in _INPLACE_METHODS or (method in _CONTAINER_WRITES and
                                              not (root and scope.fresh(root))):
                return f"{where} calls .{method}(), which changes {root or 'a value'} in place"
            if hasattr(np.ndarray, method) or method in _READ_METHODS or \
                    method in _CONTAINER_WRITES:
                return None
            return (f"{where} calls the method .{method}(), which s2sgrad cannot prove "
                    f"gives the same values when called again")
        if isinstance(func, ast.Name):
            if scope.is_local(func.id):
                return (f"{where} calls {func.id}, a value it is given, which s2sgrad "
                        f"cannot see into")
            return self.known_call(scope.lookup(func.id), text, where)
        return f"{where} calls {text}, which s2sgrad cannot see into"

    def module_call(self, module: types.ModuleType, text: str, where: str) -> Optional[str]:
        if module.__name__.split(".")[0] in _PURE_MODULES:
            return None
        return (f"{where} calls {text}, of the module {module.__name__}, which s2sgrad "
                f"cannot prove gives the same values when called again")

    def known_call(self, value: Any, text: str, where: str) -> Optional[str]:
        if value is _MISSING:
            return f"{where} calls {text}, which is not defined where it is read"
        if isinstance(value, checkpoint):
            value = value.__wrapped__
        module = getattr(value, "__module__", None) or ""
        if _RANDOM & set(module.split(".")) or getattr(value, "__name__", "") in _RANDOM:
            return f"{where} calls {text}, which draws random numbers"
        if isinstance(value, types.BuiltinFunctionType) and value is getattr(
                builtins, getattr(value, "__name__", ""), None):
            return None if value.__name__ in _PURE_BUILTINS else \
                f"{where} calls the builtin {value.__name__}"
        if any(value is t for t in _PURE_TYPES):
            return None
        if isinstance(value, np.ufunc) or module.split(".")[0] in _PURE_MODULES:
            return None
        if isinstance(value, types.FunctionType):
            return self.function(value)
        if isinstance(value, types.MethodType) and is_function_class(value.__self__) and \
                value.__func__.__name__ == "apply":   # a Function's forward, inlined
            return self.function(value.__self__.forward, own_first=True)
        return f"{where} calls {text}, which s2sgrad cannot see into"


_MISSING = object()


class _Scope:
    """The names a function binds, and how it binds each (fresh values or not)."""

    def __init__(self, node: ast.FunctionDef, globals_: dict, closure: Dict[str, Any]):
        self.globals, self.closure = globals_, closure
        args = node.args
        self.params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                self.params.add(extra.arg)
        self.bindings: Dict[str, list] = {}
        self.own: Set[str] = set()   # parameters made for the call alone (see function)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign):
                for target in sub.targets:
                    self._bind(target, sub.value)
            elif isinstance(sub, ast.AnnAssign) and sub.value is not None:
                self._bind(sub.target, sub.value)   # (x op= v keeps x's kind of value)
            elif isinstance(sub, (ast.For, ast.comprehension)):
                self._bind(sub.target, None)
            elif isinstance(sub, (ast.With,)):
                for item in sub.items:
                    if item.optional_vars is not None:
                        self._bind(item.optional_vars, None)
            elif isinstance(sub, ast.NamedExpr):
                self._bind(sub.target, sub.value)
            elif isinstance(sub, (ast.FunctionDef, ast.Lambda, ast.ClassDef)) and sub is not node:
                if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    self.bindings.setdefault(sub.name, []).append(None)

    def _bind(self, target: ast.expr, value: Optional[ast.expr]) -> None:
        if isinstance(target, ast.Name):
            self.bindings.setdefault(target.id, []).append(value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for item in target.elts:   # unpacked: items of whatever the value was
                self._bind(item.value if isinstance(item, ast.Starred) else item, None)

    def is_local(self, name: str) -> bool:
        return name in self.params or name in self.bindings

    def fresh(self, name: str) -> bool:
        """Every value the function gives `name` is a new object of its own."""
        if name in self.own:
            return name not in self.bindings
        values = self.bindings.get(name)
        return name not in self.params and bool(values) and all(
            v is not None and _fresh(v, self.global_value) for v in values)

    def global_value(self, name: str) -> Any:
        return _MISSING if self.is_local(name) else self.lookup(name)

    def lookup(self, name: str) -> Any:
        if name in self.closure:
            try:
                return self.closure[name].cell_contents
            except ValueError:
                return _MISSING
        if name in self.globals:
            return self.globals[name]
        return getattr(builtins, name, _MISSING)


def _fresh(value: ast.expr, lookup) -> bool:
    """An expression whose value is a new object: a literal, arithmetic, a container
    display, a call known to allocate (np.zeros, x.copy(), ...), or a NumPy ufunc's
    call with no `out=` (np.log(1.0 + w ** 2)). `lookup`: a global name's value."""
    if isinstance(value, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp,
                          ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp,
                          ast.SetComp, ast.JoinedStr)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else \
            func.id if isinstance(func, ast.Name) else None
        if name in _FRESH_CALLS:
            return True
        return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
            lookup(func.value.id) is np and isinstance(getattr(np, func.attr, None), np.ufunc) \
            and not any(k.arg == "out" for k in value.keywords) and \
            not any(isinstance(a, ast.Starred) for a in value.args) and \
            len(value.args) <= getattr(np, func.attr).nin
    return False


def _flat(target: ast.expr):
    if isinstance(target, (ast.Tuple, ast.List)):
        for item in target.elts:
            yield from _flat(item.value if isinstance(item, ast.Starred) else item)
    else:
        yield target


def _root(node: ast.expr) -> Optional[str]:
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _chain(node: ast.expr):
    """`np.linalg.solve` as ["np", "linalg", "solve"]; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def _attribute(value: Any, rest) -> Any:
    for attr in rest:
        value = getattr(value, attr, _MISSING)
        if value is _MISSING:
            return _MISSING
    return value


# Builtins that iterate over an argument (a second run would find an iterator empty).
_ITERATING = frozenset({"list", "tuple", "set", "frozenset", "dict", "sum", "sorted", "min",
                        "max", "any", "all", "enumerate", "zip", "map", "iter", "next",
                        "reversed", "filter"})


def iterated_parameters(fn: Any, seen: Optional[Set[int]] = None) -> Set[str]:
    """The parameters of `fn` it iterates over: a `for` or a comprehension over one, a
    builtin that walks one (list, sum, zip, ...), or a function of the user's it
    passes one to that does (transitively)."""
    fn = unwrap(fn.__wrapped__ if isinstance(fn, checkpoint) else fn)
    seen = set() if seen is None else seen
    if not isinstance(fn, types.FunctionType) or id(fn) in seen:
        return set()
    seen.add(id(fn))
    try:
        node = parse_function(fn).node
    except TransformError:
        return set()
    scope = _Scope(node, fn.__globals__, {})
    params = scope.params
    out: Set[str] = set()

    def param(expr) -> Optional[str]:
        return expr.id if isinstance(expr, ast.Name) and expr.id in params else None

    for sub in ast.walk(node):
        if isinstance(sub, (ast.For, ast.comprehension)) and param(sub.iter):
            out.add(param(sub.iter))
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and \
                not scope.is_local(sub.func.id):
            value = scope.lookup(sub.func.id)
            given = [(i, param(a)) for i, a in enumerate(sub.args) if param(a)]
            if not given:
                continue
            if sub.func.id in _ITERATING and value is getattr(builtins, sub.func.id, None):
                out.update(name for _, name in given)
            elif isinstance(value, (types.FunctionType, checkpoint)):
                inner = unwrap(value.__wrapped__ if isinstance(value, checkpoint) else value)
                names = list(getattr(getattr(inner, "__code__", None), "co_varnames", ()))
                walked = iterated_parameters(inner, seen)
                out.update(name for i, name in given if i < len(names) and names[i] in walked)
    return out
