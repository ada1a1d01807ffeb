"""Lists, tuples and dicts of arrays given to a function, read as the arrays they hold.

`loss(params, xs)` with `params = [(W1, b1), (W2, b2)]`: code compiled for that
call adds the parameters' cotangents item by item (`_s2s_add` of lists), which
numba cannot type (a list of arrays of different ranks) and which costs the
NumPy backend a call per step. The structure of such an argument is fixed for a
call: written as its arrays, the function is code over arrays alone.

`flattened(fn, args)` gives that function: a parameter holding a structure
becomes one parameter per array (`params_0_0, params_0_1, ...`, or `params_W`
for a dict's key `"W"`), and every read of it that names an item by a constant
(`params[0][1]`, `(W, b), (V, c) = params`, `len(params)`, an alias bound once)
becomes the array's name. A helper the structure is passed to is written the
same way and called with the arrays (`lstm_cell_flat(params_0_0, ..., h, x)`).
Any other read (a loop over it, a NumPy call given it) gets the structure back
as a literal of the same kind built from the arrays (the same values: the
parameters are never rebound), and the view is still exact. Where the function
could see the difference (it writes into the structure, binds the parameter
again, compares it with `is`, declares it global), there is no view: None, and
the caller keeps the general code.

The new function is a real Python function (its code compiled from the new
tree, in the user's file, its closure the original's cells plus the helpers'
views) whose tree the parser takes from `__s2sgrad_tree__` instead of reading
the file: every node keeps the user's line and column, so errors and comments
still point at the user's code. It lives in memory only (its source is not the
file's: the disk cache would key it by the original's text).
"""
from __future__ import annotations

import ast
import builtins
import copy
import inspect
import keyword
import threading
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from ..errors import TransformError
from .names import copy_location
from .parse import parse_function

# A structure's shape: None for an array or number (a leaf), else (kind, keys, items)
# with kind "list", "tuple" or "dict", keys the dict's keys (ints for the others).
Spec = Optional[Tuple[str, Tuple[Any, ...], Tuple[Any, ...]]]

MAX_LEAVES = 256        # beyond this a structure is data, not parameters: general code
MAX_DEPTH = 6
MAX_VIEWS = 8           # views of one function: beyond, its structures are data
MAX_UNROLL = 32         # loops over a structure written out per item up to this length
_MUTATORS = frozenset(("append", "extend", "insert", "pop", "remove", "clear", "sort",
                       "reverse", "update", "setdefault", "popitem", "__setitem__",
                       "__delitem__", "__iadd__", "__imul__"))


class _NoView(Exception):
    """The function could tell its structure from the literal: no view."""


def spec_of(value: Any) -> Spec:
    """The structure of an argument (None: an array or number); raises _NoView for
    anything else (None, strings, objects, a namedtuple, more than MAX_LEAVES)."""
    count = [0]

    def walk(v: Any, depth: int) -> Spec:
        kind = type(v)
        if kind in (list, tuple) and depth < MAX_DEPTH:
            return (kind.__name__, tuple(range(len(v))),
                    tuple(walk(item, depth + 1) for item in v))
        if kind is dict and depth < MAX_DEPTH and all(type(k) is str for k in v):
            return ("dict", tuple(v), tuple(walk(item, depth + 1) for item in v.values()))
        if _is_leaf(v):
            count[0] += 1
            if count[0] > MAX_LEAVES:
                raise _NoView("too many arrays")
            return None
        raise _NoView(f"a {kind.__name__} among the items")
    return walk(value, 0)


def _is_leaf(v: Any) -> bool:
    if isinstance(v, np.ndarray):
        return v.dtype.kind in "biufc"
    return isinstance(v, (int, float, complex, np.number, np.bool_))   # (bool is an int)


def inexact(value: Any) -> bool:
    """A float or complex array or number: a value that has a gradient."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "fc"
    return isinstance(value, (float, complex, np.inexact))


def leaves(value: Any, spec: Spec) -> List[Any]:
    """The arrays and numbers of a structure, in the order of its parameters."""
    if spec is None:
        return [value]
    items = value.values() if spec[0] == "dict" else value
    out: List[Any] = []
    for item, sub in zip(items, spec[2]):
        out.extend(leaves(item, sub))
    return out


def count(spec: Spec) -> int:
    return 1 if spec is None else sum(count(s) for s in spec[2])


def rebuild(spec: Spec, values: Sequence[Any]) -> Any:
    """The structure of `spec` holding `values` (one per leaf, in order)."""
    it = iter(values)

    def build(s: Spec) -> Any:
        if s is None:
            return next(it)
        items = [build(sub) for sub in s[2]]
        if s[0] == "dict":
            return dict(zip(s[1], items))
        return items if s[0] == "list" else tuple(items)
    return build(spec)


# -- what the rewrite knows of a name: a leaf's parameter or a structure of them ----
@dataclass(frozen=True)
class _Agg:
    kind: str
    keys: Tuple[Any, ...]
    items: Tuple[Union[str, "_Agg"], ...]      # a leaf's parameter name, or a structure
    # (or, in the (key, value) pairs of an unrolled `for k, v in d.items()`, a _Key)

    def item(self, key: Any) -> Optional[Union[str, "_Agg"]]:
        if self.kind == "dict":
            return self.items[self.keys.index(key)] if key in self.keys else None
        if type(key) is not int or not -len(self.items) <= key < len(self.items):
            return None
        return self.items[key]

    @property
    def spec(self) -> Spec:
        return (self.kind, self.keys, tuple(None if isinstance(i, str) else i.spec
                                              for i in self.items))

    def names(self) -> List[str]:
        out: List[str] = []
        for i in self.items:
            out.extend([i] if isinstance(i, str) else i.names())
        return out


def _literal(v: Union[str, _Agg], at: ast.AST) -> ast.expr:
    """The structure (or leaf) as an expression built from the leaves' names."""
    if isinstance(v, str):
        node: ast.expr = ast.Name(id=v, ctx=ast.Load())
    elif isinstance(v, _Key):
        node = ast.Constant(value=v.value)
    elif v.kind == "dict":
        node = ast.Dict(keys=[ast.Constant(value=k) for k in v.keys],
                        values=[_literal(i, at) for i in v.items])
    else:
        kind = ast.List if v.kind == "list" else ast.Tuple
        node = kind(elts=[_literal(i, at) for i in v.items], ctx=ast.Load())
    for sub in ast.walk(node):
        copy_location(sub, at)
    return node


@dataclass
class Flat:
    """`fn` written over the arrays of its structured arguments (`specs`: one per
    positional parameter, None for an array or number)."""

    fn: types.FunctionType
    specs: Tuple[Spec, ...]
    checks: Tuple[Callable[[], bool], ...]   # each: a helper's name still means it

    def current(self) -> bool:
        """Whether every helper it wrote a view of is still what its name is bound to."""
        return all(check() for check in self.checks)

    def arguments(self, args: Sequence[Any]) -> tuple:
        out: List[Any] = []
        for a, s in zip(args, self.specs):
            out.extend(leaves(a, s))
        return tuple(out)

    def rebuilt(self, values: Sequence[Any]) -> tuple:
        """The original arguments from the new function's (`arguments` undone)."""
        out, k = [], 0
        for s in self.specs:
            n = count(s)
            out.append(rebuild(s, values[k:k + n]))
            k += n
        return tuple(out)

    def positions(self, wrt: Sequence[int]) -> Tuple[int, ...]:
        """The new function's positions of the arrays of original positions `wrt`."""
        starts = [0]
        for s in self.specs:
            starts.append(starts[-1] + count(s))
        return tuple(k for p in wrt for k in range(starts[p], starts[p + 1]))

    def regroup(self, grads: Sequence[Any], wrt: Sequence[int]) -> tuple:
        """The gradients of the new function's `positions(wrt)` as one per position of
        `wrt`, each in its argument's structure."""
        out, k = [], 0
        for p in wrt:
            n = count(self.specs[p])
            out.append(rebuild(self.specs[p], grads[k:k + n]))
            k += n
        return tuple(out)


_MISSING = object()
_CANNOT = (_NoView, TransformError, OSError, TypeError, SyntaxError, ValueError)
# fn -> {(its code, the structures given): its view or None}; weakly: a function made
# per call (a closure) takes its views along
_VIEWS: "weakref.WeakKeyDictionary[Any, Dict[tuple, Optional[Flat]]]" = \
    weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def flattened(fn: Any, args: Sequence[Any]) -> Optional[Flat]:
    """fn written over the arrays of the lists, tuples and dicts among `args` (one per
    positional parameter), or None where that is not exactly fn (see the module's
    docstring) or no argument is such a structure."""
    if not isinstance(fn, types.FunctionType) or hasattr(fn, "__wrapped__") or \
            hasattr(fn, "__s2sgrad_derived__"):
        return None
    try:
        specs = tuple(spec_of(a) for a in args)
    except _NoView:
        return None
    if all(s is None for s in specs) or len(args) != fn.__code__.co_argcount:
        return None
    key = (fn.__code__, specs)
    with _LOCK:
        made = _VIEWS.setdefault(fn, {})
        if key in made:
            flat = made[key]
            if flat is None or flat.current():
                return flat
        elif len(made) >= MAX_VIEWS:   # structures that change call by call: data, not
            return None                # parameters (a compile per call would cost more)
        try:
            flat = _View(fn, dict(zip(_positional(fn), specs)), (), {}).make()
        except _CANNOT:
            flat = None
        if flat is not None:
            flat.specs = specs
        made[key] = flat
        return flat


def _positional(fn: types.FunctionType) -> List[str]:
    code = fn.__code__
    return list(code.co_varnames[:code.co_argcount])


class _View:
    """The rewrite of one function (and, through it, of the helpers it passes a
    structure to) for parameters of known structure."""

    def __init__(self, fn: types.FunctionType, specs: Dict[str, Spec], outer: tuple,
                 memo: Dict[tuple, Flat]):
        if fn in outer or len(outer) > 8:
            raise _NoView("a helper calls itself")
        self.fn, self.outer, self.memo = fn, outer + (fn,), memo
        parsed = parse_function(fn)
        self.node: ast.FunctionDef = copy.deepcopy(parsed.node)
        a = self.node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or \
                not isinstance(self.node, ast.FunctionDef) or self.node.decorator_list:
            raise _NoView("not a plain function")
        self.specs = specs
        self.taken = {n.id for n in ast.walk(self.node) if isinstance(n, ast.Name)} | \
            {n.arg for n in ast.walk(self.node) if isinstance(n, ast.arg)}
        self.bindings = _binding_counts(self.node)
        self.env: Dict[str, Union[str, _Agg]] = {}
        self.loaded: Set[str] = set()      # names read so far (an alias must come first)
        self.loads = _load_counts(self.node)
        self.consts: Dict[str, Any] = {}   # an unrolled copy's loop variable -> its key
        self.depth = 0                     # statements nested in blocks (aliases: at 0)
        self.helpers: Dict[str, types.FunctionType] = {}   # closure name -> view
        self.checks: List[Callable[[], bool]] = []

    # -- names ------------------------------------------------------------------
    def _fresh(self, stem: str) -> str:
        stem = "".join(c if c.isalnum() or c == "_" else "_" for c in stem)
        if keyword.iskeyword(stem) or stem[:1].isdigit():
            stem = "v_" + stem
        name, k = stem, 2
        while name in self.taken or name in dir(builtins):
            name, k = f"{stem}_{k}", k + 1
        self.taken.add(name)
        return name

    def _leaf_names(self, stem: str, spec: Spec) -> Union[str, _Agg]:
        if spec is None:
            return self._fresh(stem)
        kind, keys, subs = spec
        items = tuple(self._leaf_names(f"{stem}_{k}", s) for k, s in zip(keys, subs))
        return _Agg(kind, keys, items)

    # -- the function -------------------------------------------------------------
    def make(self) -> Flat:
        node = self.node
        params: List[ast.arg] = []
        for a in node.args.args:
            spec = self.specs.get(a.arg)
            if spec is None:
                params.append(a)
                continue
            if self.bindings.get(a.arg, 0) != 1:
                raise _NoView(f"{a.arg} is bound again")
            value = self._leaf_names(a.arg, spec)
            self.env[a.arg] = value
            for leaf in value.names():
                params.append(copy_location(ast.arg(arg=leaf, annotation=None), a))
        node.args.args = params
        node.args.defaults = []   # (the calls pass every argument)
        node.body = self._block(node.body) or [copy_location(ast.Pass(), node)]
        node.returns = None
        return Flat(_function_of(self.fn, self.node, self.helpers), (), tuple(self.checks))

    # -- statements ----------------------------------------------------------------
    def _block(self, body: List[ast.stmt]) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        for s in body:
            out.extend(self._statement(s))
        return out

    def _statement(self, s: ast.stmt) -> List[ast.stmt]:
        if isinstance(s, (ast.Global, ast.Nonlocal)) and any(n in self.env for n in s.names):
            raise _NoView("a structure declared global")
        if isinstance(s, ast.Assign):
            value = self._virtual(s.value)
            if value is not None:
                out: List[ast.stmt] = []
                for target in s.targets:
                    out.extend(self._bind(target, value, s))
                return out
        if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and \
                s.target.id in self.env:
            raise _NoView("a structure updated in place")
        if isinstance(s, ast.For):
            unrolled = self._unrolled(s)
            if unrolled is not None:
                return unrolled
        self._other(s)
        return [s]

    def _unrolled(self, s: ast.For) -> Optional[List[ast.stmt]]:
        """`for W, b in params:`, `for k in d:` or `for k in range(len(params)):` whose
        body reads a structure: one copy of the body per item (at most MAX_UNROLL),
        the loop variable that item, so that each read in the copy names an array.
        Only where that is the loop: no else, break, continue or return, no lambda,
        def or generator that may run later (it would read the last item), loop
        variables not bound again in the body."""
        if s.orelse or _jumps(s.body) or any(
                isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef,
                               ast.ClassDef, ast.GeneratorExp, ast.Return, ast.Yield,
                               ast.YieldFrom))
                for b in s.body for n in ast.walk(b)):
            return None   # (code run later reads the loop variable's last value; a
            # return in each copy guards all the code after it: compiles grew tenfold)
        inside = _load_counts(s)
        if not set(inside) & set(self.env):
            return None
        targets = [n.id for n in ast.walk(s.target) if isinstance(n, ast.Name)]
        in_body = _binding_counts(ast.Module(body=s.body, type_ignores=[]))
        if not isinstance(s.target, (ast.Name, ast.Tuple, ast.List)) or \
                any(t in self.env or in_body.get(t) for t in targets):
            return None
        items = self._items(s)
        if items is None or len(items) > MAX_UNROLL:
            return None
        # a structure item is a name for the copy alone where nothing else reads it
        only_inside = {t for t in targets if self.loads.get(t, 0) == inside.get(t, 0)}
        out: List[ast.stmt] = []
        self.depth += 1
        for item in items:
            scoped: List[str] = []
            out.extend(self._bind_item(s.target, item, s, scoped, only_inside))
            out.extend(self._block(copy.deepcopy(s.body)))
            for name in scoped:
                self.env.pop(name, None)
                self.consts.pop(name, None)
        self.depth -= 1
        return out

    def _items(self, s: ast.For) -> Optional[list]:
        """The items a loop walks: a structure's, a dict's keys (as _Key), a range of
        constants (as _Key); None for anything else."""
        value = self._virtual(s.iter)
        if isinstance(value, _Agg):
            if value.kind == "dict":
                return [_Key(k) for k in value.keys]
            return list(value.items)
        it = s.iter
        method = _dict_method(it)
        if method is not None and not it.args:
            d = self._virtual(it.func.value)
            if isinstance(d, _Agg) and d.kind == "dict":
                if method == "keys":
                    return [_Key(k) for k in d.keys]
                if method == "values":
                    return list(d.items)
                return [_Agg("tuple", (0, 1), (_Key(k), v)) for k, v in zip(d.keys, d.items)]
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords \
                and self._resolve(it.func.id) is range and 1 <= len(it.args) <= 3:
            it.args = [self._expr(a) for a in it.args]
            bounds = [_int_constant(a) for a in it.args]
            if all(b is not _MISSING and b is not None for b in bounds) and \
                    isinstance(s.target, ast.Name) and _indexes_by(s.body, s.target.id):
                span = range(*bounds)
                if len(span) <= MAX_UNROLL:
                    return [_Key(k) for k in span]
        return None

    def _bind_item(self, target: ast.expr, item: Any, at: ast.For, scoped: List[str],
                   only_inside: Set[str]) -> List[ast.stmt]:
        """`target = item` for one copy of an unrolled body: a structure is a name for
        the copy alone (scoped), an array or a key a plain assignment (a key is also
        known to the copy, for the reads it indexes)."""
        if isinstance(target, ast.Name):
            scoped.append(target.id)
            if isinstance(item, _Agg) and target.id in only_inside and \
                    not any(isinstance(i, _Key) for i in item.items):
                self.env[target.id] = item   # (a (key, value) pair of items(): a literal)
                return []
            if isinstance(item, _Key):
                self.consts[target.id] = item.value
                value: ast.expr = copy_location(ast.Constant(value=item.value), at.iter)
            else:
                value = _literal(item, at.iter)
            return [_assign(target, value, at)]
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(item, _Agg) and \
                item.kind != "dict" and len(target.elts) == len(item.items) and \
                not any(isinstance(e, ast.Starred) for e in target.elts):
            out: List[ast.stmt] = []
            for elt, sub in zip(target.elts, item.items):
                out.extend(self._bind_item(elt, sub, at, scoped, only_inside))
            return out
        value = copy_location(ast.Constant(value=item.value), at.iter) \
            if isinstance(item, _Key) else _literal(item, at.iter)
        return [_assign(target, value, at)]

    def _other(self, node: ast.AST) -> ast.AST:
        """A node that is neither statement nor expression (a handler, keyword,
        comprehension, withitem, match case): its expressions and statements."""
        for field, old in ast.iter_fields(node):
            if isinstance(old, list):
                if old and isinstance(old[0], ast.stmt):
                    self.depth += 1
                    setattr(node, field, self._block(old) or [copy_location(ast.Pass(), node)])
                    self.depth -= 1
                else:
                    setattr(node, field, [self._expr(v) if isinstance(v, ast.expr) else
                                          self._other(v) if isinstance(v, ast.AST) else v
                                          for v in old])
            elif isinstance(old, ast.expr):
                setattr(node, field, self._expr(old))
            elif isinstance(old, ast.AST):
                self._other(old)
        return node

    def _bind(self, target: ast.expr, value: Union[str, _Agg], at: ast.stmt) -> List[ast.stmt]:
        """`target = value` where value is known: an alias, an unpacking, or a plain
        assignment of the literal."""
        if isinstance(target, ast.Name):
            if isinstance(value, _Agg) and self.bindings.get(target.id, 0) == 1 and \
                    target.id not in self.env and target.id not in self.loaded and \
                    self.depth == 0:
                self.env[target.id] = value      # an alias bound once: a name for the view
                return []
            if target.id in self.env:
                raise _NoView("a structure's name bound again")
            return [_assign(target, _literal(value, at.value), at)]
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, _Agg) and \
                value.kind != "dict" and len(target.elts) == len(value.items) and \
                not any(isinstance(e, ast.Starred) for e in target.elts):
            out: List[ast.stmt] = []
            for elt, item in zip(target.elts, value.items):
                out.extend(self._bind(elt, item, at))
            return out
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            target = self._expr(target)
        elif any(isinstance(n, ast.Name) and n.id in self.env for n in ast.walk(target)):
            raise _NoView("a structure's name bound again")
        return [_assign(target, _literal(value, at.value), at)]

    def _virtual(self, e: ast.expr) -> Optional[Union[str, _Agg]]:
        """What `e` is when it names a structure or one of its items by constants."""
        if isinstance(e, ast.Name) and isinstance(e.ctx, ast.Load):
            return self.env.get(e.id)
        if _dict_method(e) == "get" and len(e.args) == 1 and \
                isinstance(e.args[0], ast.Constant):   # d.get("w") of a key it has
            d = self._virtual(e.func.value)
            if isinstance(d, _Agg) and d.kind == "dict":
                return d.item(e.args[0].value)
        if isinstance(e, ast.Subscript) and isinstance(e.ctx, ast.Load):
            base = self._virtual(e.value)
            if not isinstance(base, _Agg):
                return None
            index = e.slice
            if isinstance(index, ast.Constant):
                return base.item(index.value)
            if isinstance(index, ast.Name) and index.id in self.consts:
                return base.item(self.consts[index.id])   # (an unrolled loop's key)
            if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub) and \
                    isinstance(index.operand, ast.Constant) and \
                    type(index.operand.value) is int:
                return base.item(-index.operand.value)
            if isinstance(index, ast.Slice) and base.kind != "dict":
                bounds = [_int_constant(b) for b in (index.lower, index.upper, index.step)]
                if all(b is not _MISSING for b in bounds):
                    picked = range(len(base.items))[slice(*bounds)]
                    return _Agg(base.kind, tuple(range(len(picked))),
                                tuple(base.items[i] for i in picked))
        return None

    def _expr(self, e: ast.expr) -> ast.expr:
        value = self._virtual(e)
        if value is not None:
            return _literal(value, e)
        if isinstance(e, ast.Name):
            if e.id in self.env:   # (a store or delete of the structure's name)
                raise _NoView("a structure's name bound again")
            self.loaded.add(e.id)
            return e
        if isinstance(e, (ast.Subscript, ast.Attribute)) and not isinstance(e.ctx, ast.Load) \
                and self._holds_structure(e.value):
            raise _NoView("a structure written into")
        if isinstance(e, ast.Attribute) and e.attr in _MUTATORS and \
                self._holds_structure(e.value):
            raise _NoView("a structure updated by a method")
        if isinstance(e, ast.Compare) and \
                any(isinstance(op, (ast.Is, ast.IsNot)) for op in e.ops) and \
                any(self._holds_structure(x) for x in [e.left] + e.comparators):
            raise _NoView("a structure compared by identity")
        if isinstance(e, ast.Call):
            call = self._call(e)
            if call is not None:
                return call
        self._other(e)   # (lambdas, comprehensions: the names are never rebound)
        return e

    def _holds_structure(self, e: ast.expr) -> bool:
        return isinstance(self._virtual(e), _Agg) or \
            isinstance(e, ast.Name) and e.id in self.env

    def _call(self, e: ast.Call) -> Optional[ast.expr]:
        """len() of a structure, or a helper given one: its view, given the arrays."""
        if not isinstance(e.func, ast.Name):
            return None
        target = self._resolve(e.func.id)
        if target is builtins.len and len(e.args) == 1 and not e.keywords:
            value = self._virtual(e.args[0])
            if isinstance(value, _Agg):
                return copy_location(ast.Constant(value=len(value.items)), e)
            return None
        if not isinstance(target, types.FunctionType) or hasattr(target, "__wrapped__") or \
                hasattr(target, "__s2sgrad_derived__") or \
                any(isinstance(a, ast.Starred) for a in e.args) or \
                any(k.arg is None for k in e.keywords):
            return None
        given = {}
        try:
            bound = inspect.signature(target).bind(*e.args, **{k.arg: k.value
                                                                for k in e.keywords})
        except TypeError:
            return None
        for name, arg in bound.arguments.items():
            given[name] = self._virtual(arg)
        if not any(isinstance(v, _Agg) for v in given.values()):
            return None
        params = _positional(target)
        if set(bound.arguments) != set(params) or target.__code__.co_kwonlyargcount:
            return None   # (a default left out, *args: the literal goes in)
        specs = {p: given[p].spec for p in params if isinstance(given[p], _Agg)}
        key = (target, target.__code__, tuple(sorted(specs.items())))
        view = self.memo.get(key)
        if view is None:
            try:
                view = _View(target, specs, self.outer, self.memo).make()
            except _CANNOT:
                return None
            self.memo[key] = view
        self.checks.extend(view.checks)
        self.checks.append(self._still(e.func.id, target))
        name = self._helper_name(e.func.id, view.fn)
        args: List[ast.expr] = []
        for p in params:
            v = given[p]
            if isinstance(v, _Agg):
                args.extend(copy_location(ast.Name(id=n, ctx=ast.Load()), bound.arguments[p])
                            for n in v.names())
            else:
                args.append(self._expr(bound.arguments[p]))
        func = copy_location(ast.Name(id=name, ctx=ast.Load()), e.func)
        return copy_location(ast.Call(func=func, args=args, keywords=[]), e)

    def _helper_name(self, stem: str, view: types.FunctionType) -> str:
        for name, known in self.helpers.items():
            if known is view:
                return name
        name = self._fresh(f"{stem}_flat")
        self.helpers[name] = view
        return name

    def _resolve(self, name: str) -> Any:
        if self.bindings.get(name):   # a local of the function: not the module's
            return _MISSING
        return _resolve_in(self.fn, name)

    def _still(self, name: str, target: Any) -> Callable[[], bool]:
        """A check that `name`, read by this function, still means `target` (and
        its code is still the code the view was written from)."""
        code, fn = target.__code__, self.fn
        where = (fn.__code__.co_freevars, fn.__closure__, fn.__globals__)   # (not fn: weakly)
        return lambda: _lookup(*where, name) is target and target.__code__ is code


def _function_of(fn: types.FunctionType, node: ast.FunctionDef,
             helpers: Dict[str, types.FunctionType]) -> types.FunctionType:
    """A function object of the rewritten tree (closure: the original's cells and
    the helpers' views), whose tree the parser takes as it is."""
    code = fn.__code__
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    for name, view in helpers.items():
        cells[name] = types.CellType(view)
    free = sorted(cells)
    maker = ast.FunctionDef(
        name="_s2s_make", args=ast.arguments(
            posonlyargs=[], args=[ast.arg(arg=n) for n in free], vararg=None,
            kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[copy.deepcopy(node), ast.Return(value=ast.Name(id=node.name, ctx=ast.Load()))],
        decorator_list=[], returns=None)
    module = ast.Module(body=[copy_location(maker, node)], type_ignores=[])
    for sub in ast.walk(module):
        if hasattr(sub, "lineno") and not hasattr(sub, "end_lineno"):
            sub.end_lineno = sub.lineno
    ast.fix_missing_locations(module)
    made = compile(module, code.co_filename, "exec")
    outer = next(c for c in made.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in outer.co_consts
                 if isinstance(c, types.CodeType) and c.co_name == node.name)
    closure = tuple(cells[n] for n in inner.co_freevars)
    view = types.FunctionType(inner, fn.__globals__, fn.__name__, None, closure or None)
    view.__qualname__, view.__module__ = fn.__qualname__, fn.__module__
    view.__s2sgrad_tree__ = node
    return view


def _binding_counts(node: ast.FunctionDef) -> Dict[str, int]:
    """How often each name is bound in the function (parameters, targets, imports,
    nested defs; a global or nonlocal declaration counts twice: never an alias)."""
    out: Dict[str, int] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out[n.id] = out.get(n.id, 0) + 1
        elif isinstance(n, ast.arg):
            out[n.arg] = out.get(n.arg, 0) + 1
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            for name in n.names:
                out[name] = out.get(name, 0) + 2
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n is not node:
            out[n.name] = out.get(n.name, 0) + 1
        elif isinstance(n, ast.alias):
            name = (n.asname or n.name).split(".")[0]
            out[name] = out.get(name, 0) + 1
    return out


def _resolve_in(fn: types.FunctionType, name: str) -> Any:
    return _lookup(fn.__code__.co_freevars, fn.__closure__, fn.__globals__, name)


def _lookup(freevars: Tuple[str, ...], closure: Optional[tuple], namespace: dict,
            name: str) -> Any:
    """What `name` means to a function with these free variables, cells and globals."""
    if name in freevars:
        try:
            return closure[freevars.index(name)].cell_contents
        except ValueError:
            return _MISSING
    if name in namespace:
        return namespace[name]
    return getattr(builtins, name, _MISSING)


def _assign(target: ast.expr, value: ast.expr, at: ast.stmt) -> ast.Assign:
    return copy_location(ast.Assign(targets=[copy.deepcopy(target)], value=value), at)

# -- expressions ---------------------------------------------------------------


@dataclass(frozen=True)
class _Key:
    """A dict's key or a range's number that an unrolled copy's loop variable holds."""

    value: Any


def _dict_method(e: ast.expr) -> Optional[str]:
    """`keys`, `values`, `items` or `get` for a call `x.<that>(...)` without keywords."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and not e.keywords and \
            e.func.attr in ("keys", "values", "items", "get"):
        return e.func.attr
    return None


def _indexes_by(body: List[ast.stmt], name: str) -> bool:
    """Whether the body reads an item by `name` (`params[k]`): a range loop is written
    out only for such reads, not for any loop beside a structure."""
    return any(isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Name) and
               n.slice.id == name for b in body for n in ast.walk(b))


def _load_counts(node: ast.AST) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out[n.id] = out.get(n.id, 0) + 1
    return out


def _jumps(body: List[ast.stmt]) -> bool:
    """A break or continue of the loop whose body this is (not of a loop inside)."""
    todo = list(body)
    while todo:
        s = todo.pop()
        if isinstance(s, (ast.Break, ast.Continue)):
            return True
        if isinstance(s, (ast.For, ast.While, ast.AsyncFor)):
            todo.extend(s.orelse)   # (a jump in the else block is this loop's)
            continue
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            todo.extend(x for x in getattr(s, field, ()) if isinstance(x, ast.AST))
    return False


def _int_constant(node: Optional[ast.expr]) -> Any:
    if node is None:
        return None
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and \
            isinstance(node.operand, ast.Constant) and type(node.operand.value) is int:
        return -node.operand.value
    return _MISSING


_FAILED = object()


def prepared(f: Any, args: tuple, positions: Tuple[int, ...]
             ) -> Optional[Tuple[Flat, tuple, Tuple[int, ...]]]:
    """(the view of f for these arguments, its arguments, the positions of the arrays
    of `positions` among them), or None: no view, nothing of `positions` in it, or a
    differentiated array that holds other than float or complex values."""
    flat = flattened(f, args)
    if flat is None:
        return None
    inner = flat.positions(positions)
    values = flat.arguments(args)
    if not inner or not all(inexact(values[k]) for k in inner):
        return None
    return flat, values, inner


def regrouped(flat: Flat, grads: Sequence[Any], positions: Tuple[int, ...], args: tuple,
              single: bool, finalize: Callable[[Any, Any], Any]) -> Any:
    """The view's gradients as the arguments' structures (`finalize`: each given its
    argument's types); the one gradient where `single`."""
    out = tuple(finalize(g, args[p]) for g, p in zip(flat.regroup(grads, positions),
                                                     positions))
    return out[0] if single else out


def through_view(f: Any, positions: Tuple[int, ...], single: bool, args: tuple,
                 views: Dict[Any, Any], inner_for: Callable[[Flat, Tuple[int, ...]], Callable],
                 finalize: Callable[[Any, Any], Any]) -> Optional[tuple]:
    """(value, gradients) of `f(*args)` where some arguments are lists, tuples or dicts
    of arrays, computed by `inner_for(view, positions)` (a value_and_grad of the view
    over their arrays, made once per structure and kept in `views`) and regrouped
    into the arguments' structures. None where `prepared` finds no view, or the
    view's code is refused (the general code then runs, and reports the refusal at
    the user's line)."""
    ready = prepared(f, args, positions)
    if ready is None or views.get(ready[0].fn) is _FAILED:
        return None
    flat, values, inner = ready
    if flat.fn not in views:
        views[flat.fn] = inner_for(flat, inner)
    try:
        out, grads = views[flat.fn](*values)
    except TransformError:
        views[flat.fn] = _FAILED
        return None
    return out, regrouped(flat, grads, positions, args, single, finalize)
