"""What every optimisation step asks of statements: the names they read and
write, walking nested blocks, purity, definite assignment, the compiler's
naming patterns for cotangents.
"""
from __future__ import annotations

import ast
import os
import re
from typing import Dict, Iterable, List, Optional, Sequence, Set

from ..names import BRANCHES_AND_LOOPS, SIMPLE_STATEMENTS, name_nodes, node_classes, walk_values

PART = re.compile(r".*_bar_part(_\d+)?$")


# The compiler's names for cotangents; anything else in an adjoint (a Function's
# vjp locals such as `grad_input`) is the user's and stays.
COTANGENT = re.compile(r".*_bar(_part)?(_\d+)?$")


BAR = re.compile(r".*_bar(_\d+)?$")


_PURE_BUILTINS = {"len", "range", "min", "max", "slice", "tuple", "abs", "float", "int",
                  "reversed", "list", "sum", "isinstance"}


_IMPURE_METHODS = {"pop", "append", "extend", "insert", "remove", "clear", "sort", "fill",
                   "put", "resize", "itemset", "setdefault", "update", "reverse"}


_IMPURE_HELPERS = {"_s2s_add_at", "_s2s_Context"}


# -- assignment counting --------------------------------------------------------------
def assignment_sites(stmts: Iterable[ast.stmt], in_loop: bool = False,
                     counts: Optional[Dict[str, int]] = None) -> Dict[str, int]:
    """How often each name may be assigned (a site inside a loop counts twice)."""
    counts = {} if counts is None else counts
    weight = 2 if in_loop else 1
    For, While, If, Assign, Name = ast.For, ast.While, ast.If, ast.Assign, ast.Name
    for s in stmts:
        cls = s.__class__
        if cls is For or cls is While:
            for n in stored_in(getattr(s, "target", None)):
                counts[n] = counts.get(n, 0) + 2
            assignment_sites(s.body, True, counts)
            continue
        if cls is If:
            assignment_sites(s.body, in_loop, counts)
            assignment_sites(s.orelse, in_loop, counts)
            continue
        if cls is Assign and len(s.targets) == 1 and s.targets[0].__class__ is Name:
            n = s.targets[0].id   # (the common case of _simple_stores)
            counts[n] = counts.get(n, 0) + weight
            continue
        for n in simple_stores(s):
            counts[n] = counts.get(n, 0) + weight
    return counts


def stored_in(node) -> Set[str]:
    if node is None:
        return set()
    Load = ast.Load
    return {n.id for n in name_nodes(node) if n.ctx.__class__ is not Load}   # (Store, Del)


def _loads(node) -> List[str]:
    Load = ast.Load
    return [n.id for n in name_nodes(node) if n.ctx.__class__ is Load]


def value_loads(s: ast.stmt, index: "NameIndex") -> List[str]:
    """`_loads(s.value)` of an Assign, AugAssign or Return, from the index's names
    of s where its targets are plain names (which read nothing)."""
    cls = s.__class__
    if cls is ast.Return or (cls is ast.AugAssign and s.target.__class__ is ast.Name) or \
            (cls is ast.Assign and all(t.__class__ is ast.Name for t in s.targets)):
        return statement_loads(s, index)
    return _loads(s.value)


def statement_loads(s: ast.stmt, index: "NameIndex") -> List[str]:
    """`_loads(s)` of a statement that holds no block, from the index."""
    Load = ast.Load
    return [n.id for n in index.own(s) if n.ctx.__class__ is Load]


# Checked against fresh walks in the optimiser-check mode (see NameIndex).
VERIFY = os.environ.get("S2SGRAD_CHECK_OPTIMIZER", "") not in ("", "0")


class StaleNames(AssertionError):
    """A step changed a statement's names without telling the NameIndex (or the
    counts of names it keeps drifted from the code)."""


def check_kept_counts(step: str, fdef: ast.FunctionDef, pairs) -> None:
    """The optimiser-check mode's test of counts a step keeps up to date: each
    (what, kept, fresh) must agree, names counted zero times aside."""
    for what, kept, fresh in pairs:
        if {k: v for k, v in kept.items() if v} != {k: v for k, v in fresh.items() if v}:
            raise StaleNames(f"{step}'s {what} per name drifted from a fresh count of "
                             f"{fdef.name}")


class NameIndex:
    """The Name nodes of statements, each walked once and kept until a step says
    it changed: the optimiser's steps ask for the names of the same statements
    over and over, and walking them was most of its time.

    A statement's own names are those of its header (`if`/`while`: the test,
    `for`: target and iterable, any other statement: all of it). Steps may
    rename in place (`n.id = b`: the nodes stay the same) and remove
    statements without telling the index; a step that puts a new node into a
    statement (a name replaced by an expression, an argument by another) calls
    `changed(s)`. Where a `with` or `try` holds a block (its header would be all
    of it) the whole-function and nested answers walk afresh. With
    S2SGRAD_CHECK_OPTIMIZER=1 every cached answer is compared with a fresh walk
    and a difference raises StaleNames: the test suite's optimiser-check run
    catches a step that forgot to say so. The lists returned are shared: do not
    modify them."""

    def __init__(self):
        self._own: Dict[ast.AST, List[ast.Name]] = {}   # statements hash by identity

    def own(self, s: ast.stmt) -> List[ast.Name]:
        """The Name nodes of s's header, in source order."""
        known = self._own.get(s)
        if known is None:
            known = self._own[s] = _own_names(s)
        elif VERIFY:
            _verify(known, _own_names(s), s)
        return known

    def changed(self, s: ast.stmt) -> None:
        """s now holds other nodes than when it was last asked about."""
        self._own.pop(s, None)

    def function(self, fdef: ast.FunctionDef) -> List[ast.Name]:
        """`name_nodes(fdef)`: every Name node of the function, in source order."""
        statements = walk_statements(fdef.body)
        if holds_other_block(statements):
            return name_nodes(fdef)
        out: List[ast.Name] = []
        for field in fdef._fields:   # its parameters' defaults, decorators, annotations
            part = getattr(fdef, field, None)
            if field == "body":
                known, own = self._own, self.own
                for s in statements:
                    names = None if VERIFY else known.get(s)
                    out += own(s) if names is None else names
            elif isinstance(part, (ast.AST, list)):
                out += name_nodes(ast.Tuple(elts=part if isinstance(part, list) else [part]))
        return out

    def deep(self, s: ast.stmt) -> List[ast.Name]:
        """`name_nodes(s)`: the Name nodes of s and of its blocks, in source order."""
        if s.__class__ not in COMPOUND_CLASSES:
            if "body" in s._fields or "orelse" in s._fields:
                return name_nodes(s)
            return self.own(s)
        statements = walk_statements([s])
        if holds_other_block(statements):
            return name_nodes(s)
        out: List[ast.Name] = []
        for b in statements:
            out += self.own(b)
        return out


COMPOUND_CLASSES = BRANCHES_AND_LOOPS


# Statements other than if/for/while that hold a block (with, try, a nested def):
# their header is all of them.
_OTHER_BLOCK_HOLDERS = frozenset(
    cls for cls in node_classes(ast.stmt) if cls not in COMPOUND_CLASSES and
    ("body" in cls._fields or "orelse" in cls._fields))


def holds_other_block(statements: List[ast.stmt]) -> bool:
    other = _OTHER_BLOCK_HOLDERS
    for s in statements:
        if s.__class__ in other:
            return True
    return False


def _own_names(s: ast.stmt) -> List[ast.Name]:
    cls = s.__class__
    if cls is ast.If or cls is ast.While:
        return name_nodes(s.test)
    if cls is ast.For:
        return name_nodes(s.target) + name_nodes(s.iter)
    return name_nodes(s)


def _verify(known: List[ast.Name], fresh: List[ast.Name], s: ast.stmt) -> None:
    if len(known) != len(fresh) or any(a is not b for a, b in zip(known, fresh)):
        raise StaleNames(f"the optimiser's names of the {type(s).__name__} statement at "
                         f"line {getattr(s, 'lineno', '?')} are stale: a step changed it "
                         f"without NameIndex.changed")


class Names:
    """`_loads` and `_stores` of nodes, each node walked once: for use while the
    nodes asked about do not change (statements may leave the function). The
    lists and sets returned are shared: do not modify them. Statements' names
    come from `index` when one is given."""

    def __init__(self, index: Optional[NameIndex] = None):
        self._known: Dict[ast.AST, tuple] = {}  # nodes hash by identity
        self._index = index

    def _get(self, node) -> tuple:
        known = self._known.get(node)
        if known is None:
            loads: List[str] = []
            stores: Set[str] = set()
            index = self._index
            nodes = index.own(node) if index is not None and isinstance(node, ast.stmt) \
                and node.__class__ not in COMPOUND_CLASSES else name_nodes(node)
            Load = ast.Load
            for n in nodes:
                if n.ctx.__class__ is Load:
                    loads.append(n.id)
                else:   # (Store or Del)
                    stores.add(n.id)
            known = self._known[node] = (loads, stores)
        return known

    def loads(self, node) -> List[str]:
        return self._get(node)[0]

    def stores(self, node) -> Set[str]:
        return self._get(node)[1]


def walk_statements(stmts) -> List[ast.stmt]:
    """Every statement in `stmts` and in their blocks, in order (a list: no caller
    changes the blocks while it goes through them)."""
    out: List[ast.stmt] = []
    _collect_statements(stmts, out.append)
    return out


def _collect_statements(stmts, append) -> None:
    for s in stmts:
        append(s)
        if s.__class__ not in _NO_BLOCKS:
            for _, inner in inner_blocks(s):
                _collect_statements(inner, append)


def inner_blocks(s: ast.stmt) -> Sequence[tuple]:
    """(field, statements) of each block s holds: an if's branches, a loop's body and
    else; none for the statements that hold no block, which are most of them."""
    cls = s.__class__
    if cls in _NO_BLOCKS:
        return ()
    if cls in COMPOUND_CLASSES:
        return (("body", s.body), ("orelse", s.orelse))
    return [(attr, inner) for attr in ("body", "orelse")
            if (inner := getattr(s, attr, None)).__class__ is list]


_NO_BLOCKS = SIMPLE_STATEMENTS   # (skipped by the walks above)


def simple_stores(s: ast.stmt, names: Optional[List[ast.Name]] = None) -> Set[str]:
    """Names a simple statement assigns (cheaper than walking it). `names`, if
    given, are the Name nodes of `s`."""
    cls = s.__class__
    if cls is ast.Assign:
        targets = s.targets
        if len(targets) == 1 and targets[0].__class__ is ast.Name:
            return {targets[0].id}
        out: Set[str] = set()
        for t in targets:
            out |= {t.id} if t.__class__ is ast.Name else stored_in(t)
        return out
    if cls is ast.AugAssign:
        return {s.target.id} if s.target.__class__ is ast.Name else set()
    if cls is ast.Return or (cls is ast.Expr and
                             s.value.__class__ is ast.Constant):   # (comments)
        return set()
    if names is not None:
        return {n.id for n in names if isinstance(n.ctx, (ast.Store, ast.Del))}
    return stored_in(s)


def name_counts(fdef: ast.FunctionDef, index: Optional[NameIndex] = None) -> tuple:
    """(reads per name, assignments per name, names the final return reads) of fdef.

    One walk of each statement's header gives both counts (the optimiser asks
    this of the whole function again after every step that changed it); with
    an `index`, the headers' names come from it."""
    statements = walk_statements(fdef.body)
    if holds_other_block(statements):
        return _name_counts_nested(fdef, statements)
    loads: Dict[str, int] = {}
    counts: Dict[str, int] = {}
    Load = ast.Load
    for field in fdef._fields:   # its parameters' defaults, decorators, annotations
        part = getattr(fdef, field, None)
        if field != "body" and isinstance(part, (ast.AST, list)):
            for n in name_nodes(ast.Tuple(elts=part if isinstance(part, list) else [part])):
                if n.ctx.__class__ is Load:
                    loads[n.id] = loads.get(n.id, 0) + 1
    own = (index or NameIndex()).own
    for s in statements:
        stored: Set[str] = set()
        for n in own(s):
            if n.ctx.__class__ is Load:
                loads[n.id] = loads.get(n.id, 0) + 1
            else:   # (Store or Del)
                stored.add(n.id)
        for n in stored:
            counts[n] = counts.get(n, 0) + 1
    returned = set(_loads(fdef.body[-1])) if fdef.body and \
        isinstance(fdef.body[-1], ast.Return) else set()
    return loads, counts, returned



def _name_counts_nested(fdef: ast.FunctionDef, statements: List[ast.stmt]) -> tuple:
    """_name_counts where some statement other than if/for/while holds a block (a
    `with` or `try`): its header is all of it, so reads are counted over fdef."""
    loads: Dict[str, int] = {}
    for n in _loads(fdef):
        loads[n] = loads.get(n, 0) + 1
    counts: Dict[str, int] = {}
    for s in statements:
        for n in stored_in(header(s)):
            counts[n] = counts.get(n, 0) + 1
    returned = set(_loads(fdef.body[-1])) if fdef.body and \
        isinstance(fdef.body[-1], ast.Return) else set()
    return loads, counts, returned


def mutates(s, names: Set[str]) -> bool:
    """Does s write into (not rebind) one of names: x[i] = v, x += v, xs.append(v)?"""
    for node in walk_values(s):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id in names:
            return True
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and \
                node.target.id in names:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id in names and \
                node.func.attr in _IMPURE_METHODS:
            return True
    return False


def header(s: ast.stmt) -> ast.AST:
    """The part of a statement that is not a nested block."""
    if isinstance(s, (ast.If, ast.While)):
        return s.test
    if isinstance(s, ast.For):
        return ast.Tuple(elts=[s.target, s.iter], ctx=ast.Load())
    return s


def header_parts(s: ast.stmt) -> tuple:
    """The nodes that make `_header(s)` (which, for a loop, is a new node)."""
    if isinstance(s, (ast.If, ast.While)):
        return (s.test,)
    if isinstance(s, ast.For):
        return (s.target, s.iter)
    return (s,)


def drop_marked(stmts, key, dropped) -> List[ast.stmt]:
    """stmts without the statements whose `key(s)` is in dropped, at any depth."""
    out = []
    for s in stmts:
        if key(s) in dropped:
            continue
        for attr, inner in inner_blocks(s):
            setattr(s, attr, drop_marked(inner, key, dropped))
        out.append(s)
    return out


# -- dead code ------------------------------------------------------------------
def pure(node: ast.AST) -> bool:
    for sub in walk_values(node):
        if isinstance(sub, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)):
            return False
        if isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Name):
                if func.id in _IMPURE_HELPERS:
                    return False
                if not (func.id.startswith("_s2s_") or func.id in _PURE_BUILTINS):
                    return False
            elif isinstance(func, ast.Attribute):
                if func.attr in _IMPURE_METHODS:
                    return False
                root, inner = func.value, []   # (np.random.normal: impure)
                while isinstance(root, ast.Attribute):
                    inner.append(root.attr)
                    root = root.value
                if not (isinstance(root, ast.Name) and root.id in ("np", "numpy", "_s2s_np")) \
                        or "random" in inner:
                    return False
            else:
                return False
    return True


def param_list(fdef: ast.FunctionDef) -> List[str]:
    """Every parameter of a generated function, in order (keyword-only ones too: the
    adjoint reads them like any value the forward had)."""
    a = fdef.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


def fwd_params(fdef: ast.FunctionDef) -> Set[str]:
    return set(param_list(fdef))


# Where reading a value needs only its shape and dtype.
SHAPE_ARGS = {"_s2s_unbroadcast": 1, "_s2s_zeros_like": 0, "_s2s_expand_reduced": 1,
               "_s2s_reduced_count": 0}


SHAPE_FUNCS = {"shape", "ndim", "size"}

# Helpers given a list or tuple literal whose items they read only for their shapes
# (the argument's position): np.concatenate's cotangent splits g at the items' sizes.
SHAPE_ITEMS = {"_s2s_concatenate_grad": 1}


def definitely_assigned(stmts, assigned: Set[str],
                         names: Optional[Names] = None) -> Set[str]:
    out = set(assigned)
    for s in stmts:
        if isinstance(s, ast.If):
            out |= definitely_assigned(s.body, out, names) & \
                definitely_assigned(s.orelse, out, names)
        elif isinstance(s, (ast.For, ast.While)):
            continue
        else:
            out |= stored_in(s) if names is None else names.stores(s)
    return out


def plain_assignment(s: ast.stmt) -> bool:
    """`a = E`, `a, b = E` or `a += E` with E pure and writing into nothing."""
    if isinstance(s, ast.Assign):
        simple = all(isinstance(t, ast.Name) or
                     (isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts))
                     for t in s.targets)
    elif isinstance(s, ast.AugAssign):
        simple = isinstance(s.target, ast.Name)
    else:
        return False
    return simple and writes_nothing(s.value)


def writes_nothing(value: ast.expr) -> bool:
    """Pure (see _pure), and no `out=` or `ufunc.at`, which _pure does not look for."""
    return pure(value) and not any(
        (isinstance(n, ast.keyword) and n.arg == "out") or
        (isinstance(n, ast.Attribute) and n.attr == "at") for n in walk_values(value))


def blocks(stmts: List[ast.stmt]) -> Iterable[List[ast.stmt]]:
    """stmts and every statement list nested in it."""
    yield stmts
    for s in stmts:
        for _, inner in inner_blocks(s):
            yield from blocks(inner)


def is_pop(value: ast.expr) -> bool:
    """`stack.pop()`: takes a saved value off a stack, touching no cotangent."""
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
        value.func.attr == "pop" and isinstance(value.func.value, ast.Name) and \
        not value.args and not value.keywords
