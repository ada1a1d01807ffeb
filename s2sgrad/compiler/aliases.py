"""Which values share memory, so that in-place writes stay differentiable.

The adjoint restores overwritten values by name. That is exact only if an
in-place write (`x[i] = v`, `x += v` on an array, `xs.append(v)`) changes no
other name the adjoint reads. This module finds, for every written name, the
names that may see the write: views and copies of it (`y = x`, `x[1:]`,
`x.T`, `x.reshape(...)`) and containers holding it (`[x, y]`).

A user variable that may see the write is an error with a suggestion; a
compiler temporary that may see it is marked to be snapshot (copied) when it is
computed, which changes nothing the user can observe.
"""
from __future__ import annotations

import ast
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from ..function import is_function_class
from ..rules import registry
from .facts import ExprFacts, StatementFacts
from .names import loop_items_of, name_nodes
from .ops import ufunc_at_kind

# List methods that put their arguments into the list.
STORING_METHODS = ("append", "extend", "insert")
# Methods that return a view of (or the same object as) their array.
_VIEW_METHODS = {"reshape", "transpose", "ravel", "squeeze", "view", "swapaxes", "T",
                 "diagonal", "__getitem__", "real", "imag", "flat", "conj"}
_FRESH_METHODS = {"copy", "sum", "mean", "prod", "max", "min", "dot", "astype", "std",
                  "var", "cumsum", "cumprod", "tolist", "item", "round", "clip", "any",
                  "all", "argmax", "argmin", "flatten", "trace", "__len__"}


class _Views:
    """Which names may be views of which: `add(a, b)` says a's array may be b's (or a
    view of it: `a = b`, `a = b[1:]`, a call's result that may return its argument).
    A name's memory is its own or any of its sources' (transitively); an in-place write
    changes every name whose memory may overlap the written one's. Directional: two
    names a call's result may be (`r = f(x, acc)`) are not thereby views of each other
    (a symmetric union of the three made every write to acc change x)."""

    def __init__(self):
        self.sources: Dict[str, Set[str]] = {}
        self.users: Dict[str, Set[str]] = {}   # the reverse: who may be a view of whom

    def add(self, a: str, b: str) -> None:
        self.sources.setdefault(a, set()).add(b)
        self.users.setdefault(b, set()).add(a)

    def overlapping(self, name: str) -> Set[str]:
        """Every name whose memory may overlap `name`'s (itself included): the name and
        every name it may be a view of (its own object too: it may have been bound to
        a new array on another path), and every name that may be a view of those."""
        mine = _reach(name, self.sources)
        out: Set[str] = set()
        for n in mine:
            out |= _reach(n, self.users, out)
        return out


def _reach(start: str, edges: Dict[str, Set[str]], seen: Optional[Set[str]] = None
           ) -> Set[str]:
    """start and every name reachable from it along edges (none of `seen` again)."""
    found: Set[str] = set()
    todo = [start]
    while todo:
        n = todo.pop()
        if n not in found and (seen is None or n not in seen):
            found.add(n)
            todo.extend(edges.get(n, ()))
    return found


def _walk(body: List[ast.stmt]):
    for s in body:
        yield s
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                yield from _walk(inner)


def _runs_to_the_end(loop: ast.stmt) -> bool:
    """Whether every iteration of the loop runs its body to the end (or leaves the
    function): no break or continue of its own, no try (whose handler may)."""
    todo = list(loop.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Break, ast.Continue, ast.Try)) or \
                type(node).__name__ == "TryStar":
            return False
        if isinstance(node, (ast.For, ast.While)):
            todo += node.orelse   # (its body's break and continue are its own)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                   ast.ClassDef)):
            todo += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
    return True


def _names(node: Optional[ast.AST], local: Set[str]) -> List[str]:
    if node is None:
        return []
    return [n.id for n in name_nodes(node) if n.id in local]


class AliasFacts:
    """Shares (symmetric: views, copies) and contains (container -> item) relations.

    Each relation remembers where it arises; a write only sees relations that
    can already hold when it runs: earlier in the code, or in a loop that also
    encloses the write (from an earlier iteration).
    """

    def __init__(self, body: List[ast.stmt], local: Set[str], lists: Set[str],
                 exprs: ExprFacts, tuples: Iterable[str] = (),
                 returns_new: Callable[[Any], bool] = lambda fn: False):
        self.exprs = exprs   # what normalise resolved each call to
        # whether a function of the user's is proven to return new values (returns.py)
        self.returns_new = returns_new
        # lists, dicts and tuples: `a + b` or `a * 2` of one holds its items
        self.containers = set(lists) | set(tuples)
        self.edges: List[Tuple[str, str, str, int, frozenset]] = []
        self.defined_at: Dict[str, ast.stmt] = {}
        self.writes: List[Tuple[str, ast.stmt]] = []
        # statement -> (its position in the walk, the loops around it)
        self.where: StatementFacts[Tuple[int, frozenset]] = StatementFacts("alias position")
        self.local = local
        self.lists = lists
        # name -> (position, loops, blocks) of assignments that bind it to a new
        # object: see affected. `blocks` are the (statement, field) pairs of the
        # blocks around it, so that a write inside all of them comes after it.
        self.fresh: Dict[str, List[Tuple[int, frozenset, tuple]]] = {}
        # name -> (position, innermost loop) of those assignments that are in a loop's
        # body whose iterations always run to its end (no break, continue or try)
        self.fresh_in_loop: Dict[str, List[Tuple[int, ast.stmt]]] = {}
        # the same for every assignment binding the name (to anything): a read later in
        # that body reads what this iteration bound (see normalize.scope.read_after)
        self.bound_in_loop: Dict[str, List[Tuple[int, ast.stmt]]] = {}
        self._position = 0
        # the (statement, field) pairs of the blocks around the statement visited
        self._blocks: tuple = ()
        # statement -> the blocks around it (as in `fresh`)
        self.blocks_of: StatementFacts[tuple] = StatementFacts("alias blocks")
        self._visit(body, frozenset(), None)

    def _visit(self, body: List[ast.stmt], loops: frozenset, loop: Optional[ast.stmt]) -> None:
        for s in body:
            self._position += 1
            self.where.record(s, (self._position, loops))
            self.blocks_of.record(s, self._blocks)
            self._here = (self._position, loops)
            self._loop = loop
            self._statement(s)
            looping = isinstance(s, (ast.For, ast.While))
            inner = loops | {s} if looping else loops
            for attr in ("body", "orelse"):
                block = getattr(s, attr, None)
                if isinstance(block, list) and not isinstance(s, ast.Expr):
                    saved = self._blocks
                    self._blocks += ((s, attr),)
                    self._visit(block, inner, s if looping and attr == "body" else loop)
                    self._blocks = saved

    def _share(self, a: str, b: str) -> None:
        self.edges.append(("share", a, b) + self._here)

    def _contain(self, container: str, item: str) -> None:
        self.edges.append(("contain", container, item) + self._here)

    def _item(self, container: str, item: str) -> None:
        """`item` is one of the container's items, which one unknown: it may be any
        object the container holds."""
        self.edges.append(("item", container, item) + self._here)

    def _statement(self, s: ast.stmt) -> None:
        local = self.local
        if isinstance(s, ast.For):
            # The names of a range's bounds are not what its items are (integers);
            # any other iterable's names may hold or be what the target is.
            counted = isinstance(s.iter, ast.Call) and self.exprs.of(s.iter).callee is range
            for t in _names(s.target, local):
                self.defined_at.setdefault(t, s)
                for src in () if counted else _names(s.iter, local):
                    if src not in self.lists:
                        self._share(t, src)     # a row of an array is a view
                    self._item(src, t)          # an item of a list or tuple
            return
        if isinstance(s, ast.AugAssign):
            target = s.target.value if isinstance(s.target, ast.Subscript) else s.target
            if isinstance(target, ast.Name):
                self.writes.append((target.id, s))
                if target.id in self.containers and isinstance(s.op, (ast.Add, ast.Mult)):
                    for held in _names(s.value, local):   # `xs += ys`: xs holds ys' items
                        if held in self.containers:
                            self._contain(target.id, held)
            return
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and \
                self.exprs.of(s.value).method in STORING_METHODS:
            base = s.value.func.value
            if isinstance(base, ast.Name) and base.id in local:
                self.writes.append((base.id, s))
                for arg in s.value.args:
                    for item in self._held(arg):
                        self._contain(base.id, item)
            return
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and s.value.args and \
                ufunc_at_kind(self.exprs.of(s.value).callee) is not None:
            base = s.value.args[0]
            if isinstance(base, ast.Name) and base.id in local:
                self.writes.append((base.id, s))   # np.add.at(a, idx, b) writes into a
            return
        if not isinstance(s, ast.Assign):
            return
        target = s.targets[0]
        if isinstance(target, ast.Subscript):
            if isinstance(target.value, ast.Name):
                self.writes.append((target.value.id, s))
                if target.value.id in self.lists:
                    for item in _names(s.value, local):
                        self._contain(target.value.id, item)
            return
        outs = [n.id for n in name_nodes(target)]
        for o in outs:
            self.defined_at.setdefault(o, s)
        if self._loop is not None and self._blocks[-1] == (self._loop, "body") and \
                _runs_to_the_end(self._loop):
            for o in outs:
                self.bound_in_loop.setdefault(o, []).append((self._position, self._loop))
        value = s.value
        if isinstance(value, ast.Call) and self.exprs.of(value).method == "pop" and \
                isinstance(value.func.value, ast.Name) and value.func.value.id in local:
            self.writes.append((value.func.value.id, s))
        sources = self._sources(value)
        if not sources and len(outs) == 1 and isinstance(target, ast.Name) and \
                isinstance(value, (ast.List, ast.Dict, ast.Tuple, ast.Call)):
            self.fresh.setdefault(outs[0], []).append(self._here + (self._blocks,))
            if self._loop is not None and self._blocks[-1] == (self._loop, "body") and \
                    _runs_to_the_end(self._loop):
                self.fresh_in_loop.setdefault(outs[0], []).append(
                    (self._position, self._loop))
        for o in outs:
            for src, kind in sources:
                if kind == "share":
                    self._share(o, src)
                elif kind == "holds":
                    self._contain(o, src)
                else:  # "item": o is an item of the list src
                    self._item(src, o)

    def _held(self, arg: ast.expr) -> List[str]:
        """The names an appended value may hold: those a call's result may refer to
        (none for a copy or a rule's new array: `xs.append(copy_value(x))` keeps x
        out of xs), or every name in any other expression."""
        if isinstance(arg, ast.Call):
            return [n for n, _ in self._sources(arg)]
        return _names(arg, self.local)

    def _sources(self, value: ast.expr) -> Iterable[Tuple[str, str]]:
        """(name, relation) pairs: what the assigned value may refer to.

        "share": the value may be (a view of) that name's array; "holds": the
        value is a container holding it; "item": the value is an item of that list.
        """
        local = self.local
        if isinstance(value, ast.Name):
            return [(value.id, "share")] if value.id in local else []
        if isinstance(value, (ast.Tuple, ast.List)):
            return [(n, "holds") for n in _names(value, local)]
        if isinstance(value, ast.Dict):
            return [(n, "holds") for v in value.values for n in _names(v, local)]
        if isinstance(value, ast.Subscript):
            # an item of a list; of a tuple, or a view of an array (unknown: both)
            base = _names(value.value, local)
            if base and base[0] in self.lists:
                return [(n, "item") for n in base]
            return [(n, kind) for n in base for kind in ("share", "item")]
        if isinstance(value, ast.Attribute):
            return [(n, "share") for n in _names(value.value, local)]
        if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Mult)):
            # `[x] + held`, `held * 2`: a new list or tuple holding the items of those
            # (arrays' sums and products are new arrays: no relation)
            return [(n, "holds") for side in (value.left, value.right)
                    for n in _names(side, local) if n in self.containers]
        if isinstance(value, ast.Call):
            method = self.exprs.of(value).method
            if method is not None:
                if method in _FRESH_METHODS or method in registry.REGISTRY.nondiff_methods:
                    return []
                if method == "pop":  # the item taken out of the list
                    return [(n, "item") for n in _names(value.func.value, local)]
                rule = registry.REGISTRY.methods.get(method)
                if rule is not None and not rule.view:
                    return []
                return [(n, "share") for n in _names(value.func.value, local)]
            callee = self.exprs.of(value).callee
            if callee is not None and registry.returns_an_argument(callee):
                return [(n, "share") for a in value.args for n in _names(a, local)]
            if callee is not None:
                if registry.is_constructor(callee) or registry.is_nondiff(callee):
                    return []
                rule = registry.lookup_function(callee)
                if rule is not None:
                    if not rule.view:
                        return []
                    first = value.args[0] if value.args else None
                    return [(n, "share") for n in _names(first, local)]
                if isinstance(callee, type) and not is_function_class(callee):
                    return []
                if self.returns_new(callee):   # (`h = layer(W, x)`: a new array)
                    return []
            args = ast.Tuple(elts=list(value.args) + [k.value for k in value.keywords],
                             ctx=ast.Load())
            return [(n, "share") for n in _names(args, local)]
        return []

    def affected(self, name: str, write: ast.stmt) -> Set[str]:
        """Every name whose value the in-place write to `name` may change."""
        pos, loops = self.where.require(write)
        views = _Views()
        contains: Dict[str, Set[str]] = {}
        items: List[Tuple[str, str]] = []
        # Bound to a new object earlier in every block the write is in (so on every
        # way to the write, in every iteration that runs it): what `name` was tied to
        # in an earlier iteration is not what the write changes.
        blocks = self.blocks_of.require(write)
        rebinds = [(q, q_loops) for q, q_loops, q_blocks in self.fresh.get(name, ())
                   if q < pos and blocks[:len(q_blocks)] == q_blocks]
        # Bound to a new object later in a loop's body that every iteration runs to its
        # end: a relation made earlier in that body, after the write if the write is in
        # the loop too, is gone by the time the write runs (again).
        later = [(q, loop) for q, loop in self.fresh_in_loop.get(name, ())
                 if loop not in loops or q > pos]
        for kind, a, b, p, edge_loops in self.edges:
            if not (p < pos or loops & edge_loops):
                continue
            if (name == b if kind == "item" else name in (a, b)) and (any(
                    (p < q or p >= pos) and not edge_loops & (loops - q_loops)
                    for q, q_loops in rebinds) or any(
                    p < q and loop in edge_loops and (loop not in loops or pos < p)
                    for q, loop in later)):
                continue   # every way from that relation to the write rebinds `name`
            if kind == "share":
                views.add(a, b)
            else:
                contains.setdefault(a, set()).add(b)
                if kind == "item":
                    items.append((a, b))
        # An item taken out of a container may be any object the container holds,
        # and (a record in a list) any object held by those, as deep as they go: the
        # item may be a view of the container's contents (a name of its own, with a
        # space no variable has), which may be any held object or its contents.
        for container, item in set(items):
            views.add(item, container + " items")
        for container, held in contains.items():
            for h in held:
                views.add(container + " items", h)
                if h in contains:
                    views.add(container + " items", h + " items")
        out = views.overlapping(name)
        changed = True
        while changed:
            changed = False
            for container, items in contains.items():
                if container not in out and items & out:
                    out |= views.overlapping(container)
                    changed = True
        out.discard(name)
        return {n for n in out if " " not in n}

    def shared_with_user(self, name: str, user_names: Set[str]) -> bool:
        """Does `name` share memory with another user variable anywhere (copies, views)?"""
        linked: Dict[str, Set[str]] = {}   # (either way: the names of one array)
        for kind, a, b, _, _ in self.edges:
            if kind == "share":
                linked.setdefault(a, set()).add(b)
                linked.setdefault(b, set()).add(a)
        return bool((_reach(name, linked) - {name}) & user_names)



def resized_while_walked(facts: AliasFacts, body: List[ast.stmt]
                         ) -> Dict[ast.stmt, Tuple[ast.stmt, str]]:
    """loop -> (a statement of its body that makes the list the loop walks longer or
    shorter: `for t in xs: ... xs.append(v)`, or through a name that may be xs; the
    list, xs also where the loop walks `_s2s_loop_items(xs)`). Python walks a list as
    it changes; a loop over a copy, over positions counted when it starts (how the
    reverse transform walks a differentiated list) or zipped with tangents counted
    then (forward mode) does not: the transforms refuse those."""
    walked: Dict[ast.stmt, str] = {}
    last: Optional[ast.stmt] = None
    for s in _walk(body):
        if isinstance(s, ast.For) and isinstance(s.iter, ast.Name):
            pair = loop_items_of(last)
            walked[s] = pair[1] if pair and pair[0] == s.iter.id else s.iter.id
        last = s
    out: Dict[ast.stmt, Tuple[ast.stmt, str]] = {}
    for name, stmt in facts.writes:
        if not _resizes(facts, name, stmt):
            continue
        for loop in facts.where.require(stmt)[1]:
            seq = walked.get(loop)
            if seq is not None and loop not in out and \
                    (seq == name or seq in facts.affected(name, stmt)):
                out[loop] = (stmt, seq)
    return out


def _resizes(facts: AliasFacts, name: str, stmt: ast.stmt) -> bool:
    """Whether the write changes the length of a list: append, extend, insert, pop,
    `xs += ys`, `xs *= 2` (of a list: a tuple's rebinds the name to a new tuple)."""
    if isinstance(stmt, ast.Expr):
        return facts.exprs.of(stmt.value).method in STORING_METHODS
    if isinstance(stmt, ast.Assign):
        return isinstance(stmt.value, ast.Call) and facts.exprs.of(stmt.value).method == "pop"
    return isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and \
        name in facts.lists
