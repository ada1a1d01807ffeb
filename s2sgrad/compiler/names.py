"""Deterministic, readable fresh names derived from the user's names.

Generated code must be byte-for-byte reproducible (it is cached and diffed), so
names come from stems and counters, never from ids or hashes.
"""
from __future__ import annotations

import ast
import builtins
import keyword
import re
from functools import lru_cache
from typing import Dict, Iterable, List, Optional, Set, Tuple, Union

RESERVED_PREFIX = "_s2s_"
_NOT_WORD = re.compile(r"\W+")


@lru_cache(maxsize=4096)   # the passes ask for the same few stems thousands of times
def sanitize(stem: str) -> str:
    """A valid identifier from a stem (stems from expressions are kept short upstream)."""
    stem = _NOT_WORD.sub("_", stem).strip("_") or "t"
    if stem[0].isdigit():
        stem = "v" + stem
    if keyword.iskeyword(stem) or stem in ("None", "True", "False"):
        stem += "_"
    return stem


BUILTIN_NAMES = frozenset(n for n in dir(builtins) if not n.startswith("_"))
_BUILTIN_STEMS = {"sum": "total", "min": "smallest", "max": "largest", "abs": "magnitude",
                  "len": "length", "pow": "power", "round": "rounded", "all": "every",
                  "any": "some", "map": "mapped", "range": "span"}


class NameRegistry:
    """Hands out names nobody else in the generated module uses."""

    def __init__(self, taken: Iterable[str] = ()):
        self.taken: Set[str] = set(taken)

    def reserve(self, *names: str) -> None:
        self.taken.update(names)

    def fresh(self, stem: str, reserved: bool = False) -> str:
        """`stem` itself if free, else stem_2, stem_3, ...

        reserved=True gives a name under s2sgrad's `_s2s_` prefix (names the
        generated code binds to values, never the user's). A temporary never
        takes a builtin's name (`sum = np.sum(t)` would hide the builtin from the
        generated code that calls it): it is renamed (`total`)."""
        stem = RESERVED_PREFIX + sanitize(stem) if reserved else sanitize(stem)
        if stem in BUILTIN_NAMES:
            stem = _BUILTIN_STEMS.get(stem, f"{stem}_value")
        if stem not in self.taken:
            self.taken.add(stem)
            return stem
        k = 2
        while f"{stem}_{k}" in self.taken:
            k += 1
        name = f"{stem}_{k}"
        self.taken.add(name)
        return name

    def version(self, base: str) -> str:
        """The next SSA version of a user variable: x -> x_1, x_2, ..."""
        k = 1
        while f"{base}_{k}" in self.taken:
            k += 1
        name = f"{base}_{k}"
        self.taken.add(name)
        return name


def name_nodes(node: ast.AST, args: Optional[Set[str]] = None) -> List[ast.Name]:
    """Every Name node under `node`, in source order.

    The passes ask this question constantly; a plain stack over `_fields` is
    several times faster than `ast.walk`, whose generators dominate compile time.
    Parameter names found on the way are added to `args` when it is given."""
    out: List[ast.Name] = []
    stack = [node]
    pop, push, extend, append = stack.pop, stack.append, stack.extend, out.append
    Name, Arg, table = ast.Name, ast.arg, _NAME_FIELDS
    while stack:
        n = pop()
        cls = n.__class__
        if cls is Name:
            append(n)
            continue
        fields = table.get(cls)
        if fields is None:
            fields = _name_fields(cls)
        if cls is Arg and args is not None:
            args.add(n.arg)
        if not fields:
            continue
        d = n.__dict__
        for field in fields:  # reversed: popped in source order
            value = d.get(field)
            if value is None:
                continue
            if value.__class__ is list:
                extend(reversed(value))  # items that are not nodes are skipped when popped
            else:
                push(value)
    return out


# Class -> the fields (last first) that may hold a Name: none for what is not a
# node, for constants, contexts and operators; no context, operator or identifier.
_NAME_FIELDS: Dict[type, Tuple[str, ...]] = {}
_NO_NAMES = {"ctx", "op", "ops", "id", "attr", "name", "arg", "asname", "module",
             "type_comment", "kind", "level", "conversion", "is_async", "simple", "tag"}


def _name_fields(cls: type) -> Tuple[str, ...]:
    if not isinstance(cls, type) or not issubclass(cls, ast.AST) or cls is ast.Constant or \
            issubclass(cls, (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop,
                             ast.boolop)):
        fields: Tuple[str, ...] = ()
    else:
        fields = tuple(f for f in reversed(cls._fields) if f not in _NO_NAMES)
    _NAME_FIELDS[cls] = fields
    return fields


def replace_loads(node: ast.AST, old: str, new: ast.expr, copy: bool = True) -> None:
    """Replace, in place, every read of the name `old` under `node` by a copy of
    `new` placed where the read was (what an ast.NodeTransformer would do, without
    its visit of every node). copy=False: `new` itself, for a caller that knows
    there is one read and drops `new`'s statement."""
    stack = [node]
    pop, push, Name, Load, AST, table = stack.pop, stack.append, ast.Name, ast.Load, \
        ast.AST, _NAME_FIELDS
    while stack:
        n = pop()
        cls = n.__class__
        fields = table.get(cls)
        if fields is None:
            fields = _name_fields(cls)
        if not fields:
            continue
        d = n.__dict__
        for field in fields:
            value = d.get(field)
            if value is None:
                continue
            if value.__class__ is list:
                for i, item in enumerate(value):
                    if item.__class__ is Name:
                        if item.id == old and item.ctx.__class__ is Load:
                            value[i] = copy_location(clone(new) if copy else new, item)
                    elif isinstance(item, AST):
                        push(item)
            elif value.__class__ is Name:
                if value.id == old and value.ctx.__class__ is Load:
                    d[field] = copy_location(clone(new) if copy else new, value)
            else:
                push(value)


# One context of each kind, shared by the nodes built here (as the parser shares them).
LOAD, STORE = ast.Load(), ast.Store()


def name_node(id_: str, store: bool = False) -> ast.Name:
    """A Name node. (Built positionally: keyword arguments make ast's constructors
    about 2.5 times slower, and the passes build tens of thousands of names.)"""
    return ast.Name(id_, STORE if store else LOAD)


def assign_node(target: Union[str, ast.expr], value: ast.expr) -> ast.Assign:
    """`target = value`; a str target is a name."""
    if target.__class__ is str:
        target = ast.Name(target, STORE)
    return ast.Assign([target], value, None)


def helper_call(helper: str, *args: ast.expr) -> ast.Call:
    """A call of the runtime helper `_s2s_<helper>` (what generated code calls)."""
    return ast.Call(ast.Name("_s2s_" + helper, LOAD), list(args), [])


def index_expr(index: ast.expr) -> ast.expr:
    """The index of `x[...]` as an ordinary expression (slices become slice()), for
    a helper that takes the index as an argument."""
    if isinstance(index, ast.Slice):
        parts = [index.lower, index.upper, index.step]
        args = [p if p is not None else ast.Constant(value=None) for p in parts]
        if isinstance(args[2], ast.Constant) and args[2].value is None:
            args.pop()  # slice(lower, upper); slice(x) alone would mean slice(None, x)
        return ast.Call(func=name_node("slice"), args=args, keywords=[])
    if isinstance(index, ast.Tuple):
        return ast.Tuple(elts=[index_expr(e) for e in index.elts], ctx=ast.Load())
    return clone(index)


# The nodes whose positions are these four: what copy_location copies fast.
_POSITIONS = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def node_classes(base: type) -> List[type]:
    """`base` and every node class below it."""
    found, todo = [], [base]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


_LOCATED = frozenset(cls for cls in node_classes(ast.AST)
                     if getattr(cls, "_attributes", ()) == _POSITIONS)


# The statements whose blocks the passes enter by name (body, orelse) ...
BRANCHES_AND_LOOPS = frozenset((ast.If, ast.For, ast.While))
# ... and those that hold no block at all (most statements: walks skip them).
SIMPLE_STATEMENTS = frozenset((ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return,
                               ast.Pass, ast.Break, ast.Continue, ast.Delete, ast.Raise,
                               ast.Assert, ast.Global, ast.Nonlocal, ast.Import,
                               ast.ImportFrom))


def copy_location(new: ast.AST, old: ast.AST) -> ast.AST:
    """`ast.copy_location(new, old)`, with the same result, without its hasattr and
    getattr per attribute (the passes place tens of thousands of nodes)."""
    if new.__class__ not in _LOCATED or old.__class__ not in _LOCATED:
        return ast.copy_location(new, old)
    o, d = old.__dict__, new.__dict__
    value = o.get("lineno")
    if value is not None:
        d["lineno"] = value
    value = o.get("col_offset")
    if value is not None:
        d["col_offset"] = value
    d["end_lineno"] = o.get("end_lineno")     # (optional: copied even when None)
    d["end_col_offset"] = o.get("end_col_offset")
    return new


def dotted(node: ast.AST) -> Optional[str]:
    """`a.b.c` for a name or a chain of attributes of one (what `ast.unparse` writes
    for them, without its printer), else None."""
    parts = []
    while node.__class__ is ast.Attribute:
        parts.append(node.attr)
        node = node.value
    if node.__class__ is not ast.Name:
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


# The symbol of each binary operator, as written.
OPERATOR_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.MatMult: "@",
                    ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
                    ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitXor: "^",
                    ast.BitAnd: "&"}


def walk(node: ast.AST) -> List[ast.AST]:
    """`list(ast.walk(node))`, in the same order, without its generators."""
    out = [node]
    append, AST = out.append, ast.AST
    for n in out:  # grows as it goes: breadth first, as ast.walk
        for field in n._fields:
            value = getattr(n, field, None)
            if isinstance(value, AST):
                append(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, AST):
                        append(item)
    return out


def child_fields(cls: type) -> Tuple[str, ...]:
    """The fields of a node class that may hold nodes other than contexts and
    operators (last field first): what the walks here enter."""
    fields = _NAME_FIELDS.get(cls)
    return _name_fields(cls) if fields is None else fields


def walk_values(node: ast.AST) -> List[ast.AST]:
    """`walk(node)` without expression contexts and operators (Load, Add, ...), in
    the same order: for the many questions about calls, names, constants and
    statements, which never look at those (about 40 % of a generated function's
    nodes: every Name has its context)."""
    out = [node]
    append, AST, table = out.append, ast.AST, _NAME_FIELDS
    for n in out:
        fields = table.get(n.__class__)
        if fields is None:
            fields = _name_fields(n.__class__)
        if not fields:
            continue
        d = n.__dict__
        for field in reversed(fields):   # (the table is last field first)
            value = d.get(field)
            if value is None:
                continue
            if value.__class__ is list:
                for item in value:
                    if isinstance(item, AST):
                        append(item)
            elif isinstance(value, AST):
                append(value)
    return out


def nesting(node: ast.AST) -> Tuple[int, ast.AST]:
    """(how many levels deep the tree under `node` is nested, a deepest node), walked
    level by level without recursion: the passes recurse a few frames per level,
    and the caller makes room for that (`pipeline.deep_enough`)."""
    level, depth, deepest = [node], 0, node
    AST, table = ast.AST, _NAME_FIELDS
    while level:
        depth += 1
        deepest = level[0]
        below: List[ast.AST] = []
        append = below.append
        for n in level:
            fields = table.get(n.__class__)
            if fields is None:
                fields = _name_fields(n.__class__)
            d = n.__dict__
            for field in fields:
                value = d.get(field)
                if value.__class__ is list:
                    for item in value:
                        if isinstance(item, AST):
                            append(item)
                elif isinstance(value, AST):
                    append(value)
        level = below
    return depth, deepest


def names_in(node: ast.AST) -> Set[str]:
    """Every identifier (Name nodes and argument names) appearing in `node`."""
    out: Set[str] = set()
    out.update(n.id for n in name_nodes(node, out))
    return out


def stored_names(node: ast.AST) -> Set[str]:
    return {n.id for n in name_nodes(node) if n.ctx.__class__ is not ast.Load}


def clone(node):
    """A deep copy of an AST (fields cloned, other attributes shared): several
    times faster than copy.deepcopy, which the passes would otherwise spend most
    of their time in."""
    cls = node.__class__
    if cls is list:
        return [clone(item) for item in node]
    if cls in SHARED_LEAVES and not node.__dict__:
        return node   # a context or operator: the parser shares one of each too
    if isinstance(node, ast.AST):
        new = cls.__new__(cls)
        d, AST = new.__dict__, ast.AST
        for key, value in node.__dict__.items():
            d[key] = clone(value) if value.__class__ is list or isinstance(value, AST) \
                else value
        return new
    return node


# Node classes without fields (contexts, operators), whose instances hold nothing.
SHARED_LEAVES = frozenset(
    cls for base in (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
    for cls in base.__subclasses__())


def loop_items_of(s: ast.AST) -> Optional[Tuple[str, str]]:
    """(n, xs) where s is `n = _s2s_loop_items(xs)` (what a loop over xs walks: normalise
    writes it before the loop); None otherwise."""
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
            isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Call) and \
            isinstance(s.value.func, ast.Name) and s.value.func.id == "_s2s_loop_items" and \
            len(s.value.args) == 1 and isinstance(s.value.args[0], ast.Name):
        return s.targets[0].id, s.value.args[0].id
    return None
