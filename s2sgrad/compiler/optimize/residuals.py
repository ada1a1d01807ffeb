"""What the forward keeps for the adjoint: saves nobody restores are pruned,
the adjoint gets private copies of what it writes back into, and the forward
returns exactly the values the adjoint reads (a shape and dtype where only
those are read).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Dict, Optional, Set

from ..facts import ResidualMarks
from ..names import name_node, walk_values
from ..transform import Transformed
from .liveness import live_block
from .statements import (
    SHAPE_ARGS,
    SHAPE_FUNCS,
    SHAPE_ITEMS,
    NameIndex,
    Names,
    definitely_assigned,
    drop_marked,
    fwd_params,
    header_parts,
    param_list,
    walk_statements,
)


# -- to-be-recorded: saves the adjoint never needs --------------------------------
@dataclass(frozen=True)
class Pruned:
    """What prune_saves did. `final`: it dropped only dead restores that read no
    restored variable and write only their own, so no other restore's liveness
    changed, and asking again (with nothing else changed) would drop nothing."""

    changed: bool
    final: bool

    def __bool__(self) -> bool:
        return self.changed


def prune_saves(t: Transformed, names: Optional[Names] = None) -> Pruned:
    """Drop saved copies whose restored value nothing reads afterwards.

    A restore is dead when its variable is not live after it in the adjoint. A
    stack is dropped only when every pop of it is dead (its pushes and pops must
    stay paired); a single saved copy is dropped on its own.
    """
    live_after: Dict[ast.stmt, Set[str]] = {}
    if names is None:   # (a caller's: statements only leave the adjoint while it is used)
        names = Names()  # nothing changes until the drops below
    unread = _restored_but_unread(t)
    if unread:
        t.adjoint.body = drop_marked(t.adjoint.body, lambda s: t.marks.of(s).restore_item,
                                     unread)
    restores = [(s, t.marks.of(s)) for s in walk_statements(t.adjoint.body)]
    restores = [(s, mark) for s, mark in restores if mark.restore_of is not None]
    if not restores:
        return Pruned(bool(unread), not unread)
    restored = {mark.restore_of for _, mark in restores}
    live_block(t.adjoint.body, set(), live_after, names, restored)
    slots: Dict[str, bool] = {}
    for s, mark in restores:
        slot = mark.slot
        dead = mark.restore_of not in live_after.get(s, set())
        slots[slot] = slots.get(slot, True) and dead
    # A saved copy read directly (x op= v reads its slot) is needed whatever the restores.
    read_outside: Set[str] = set()
    for s in walk_statements(t.adjoint.body):
        if t.marks.of(s).slot is None:
            for part in header_parts(s):
                read_outside.update(names.loads(part))
                read_outside |= names.stores(part)
    dropped = {slot for slot, dead in slots.items() if dead and slot not in read_outside}
    if not dropped:
        return Pruned(bool(unread), not unread)
    # Dropping a dead restore of x that reads no restored name and writes only x
    # leaves every other restore's liveness as it was (x was not live after it).
    final = all(mark.restore_of is not None and not restored.intersection(names.loads(s))
                and names.stores(s) <= {mark.restore_of}
                for s in walk_statements(t.adjoint.body)
                if (mark := t.marks.of(s)).slot in dropped)
    def slot(s):
        return t.marks.of(s).slot

    def init_of(s):
        return t.marks.of(s).init_of
    t.adjoint.body = drop_marked(t.adjoint.body, slot, dropped)
    t.forward.body = drop_marked(t.forward.body, slot, dropped)
    forward = walk_statements(t.forward.body)
    still_saved = {t.marks.of(s).save_of for s in forward}
    inits = {init_of(s) for s in forward} - still_saved - {None}
    t.forward.body = drop_marked(t.forward.body, init_of, inits)
    return Pruned(True, final and not unread)


def _restored_but_unread(t: Transformed) -> Set[str]:
    """Arrays and lists the adjoint puts items back into (`_s2s_restore_item(u, ...)`,
    a list's `append`/`pop`) but never reads once it has: every other read of them
    is in a statement of the function's body that runs before any of those restores
    (a list's length changes as items go back), and makes nothing that could share
    their memory (a read of their shape, an operand of arithmetic; not `v = u`,
    `u[1:]`, `f(u)`). Putting the items back is then dead, and so is keeping them: a
    stencil's `u[1:-1, 1:-1] += ...` kept a copy of the interior per step for an
    adjoint that reads only its cotangents and the step's Laplacian."""
    body = t.adjoint.body
    first: Dict[str, int] = {}      # the first statement of body holding a restore into it
    own: Set[ast.AST] = set()        # the restores' own reads of the array or list
    for i, top in enumerate(body):
        for s in walk_statements([top]):
            var = t.marks.of(s).restore_item
            if var is not None and isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
                first.setdefault(var, i)
                func = s.value.func
                own.add(func.value if isinstance(func, ast.Attribute) else s.value.args[0])
    if not first:
        return set()
    unread = set(first)
    for i, top in enumerate(body):
        nodes = walk_values(top)
        consumed = _shape_reads(top)[1]
        for node in nodes:
            if isinstance(node, ast.BinOp):
                consumed.update((node.left, node.right))
            elif isinstance(node, ast.UnaryOp):
                consumed.add(node.operand)
            elif isinstance(node, ast.Compare):
                consumed.update([node.left, *node.comparators])
        for node in nodes:
            if node.__class__ is ast.Name and node.id in unread and node not in own and \
                    node.ctx.__class__ is ast.Load and \
                    not (node in consumed and i < first[node.id]):
                unread.discard(node.id)
    return unread


def private_copies(t: Transformed, index: Optional[NameIndex] = None) -> None:
    """The adjoint puts overwritten items back into its own copy of an array (or
    list) and pops its own copy of each stack, never the forward's, so the
    pullback can run many times."""
    names = []
    for s in walk_statements(t.adjoint.body):
        var = t.marks.of(s).restore_item
        if var is not None and var not in names:
            names.append(var)
        stack = _popped_stack(s, t.marks)
        if stack is not None and stack not in names:
            names.append(stack)
    copies = [ast.Assign(targets=[name_node(n, True)],
                         value=ast.Call(func=name_node("_s2s_copy_value"),
                                        args=[name_node(n)], keywords=[]),
                         type_comment=None) for n in names]
    # A variable the adjoint restores items into, given back an earlier value (one
    # popped from a stack, or a saved name: `acc = acc_prev`): that is the forward's
    # array, which later pullbacks read again, so the adjoint takes a copy of it too.
    restored = {t.marks.of(s).restore_item for s in walk_statements(t.adjoint.body)}
    for s in walk_statements(t.adjoint.body):
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and s.targets[0].id in restored and \
                (isinstance(s.value, ast.Name) or _popped_stack(s, t.marks) is not None):
            s.value = ast.Call(func=name_node("_s2s_copy_value"), args=[s.value], keywords=[])
            if index is not None:
                index.changed(s)
    t.adjoint.body[:0] = copies


def _popped_stack(s: ast.stmt, marks: ResidualMarks) -> Optional[str]:
    """`v = stack.pop()` restoring a saved value: the adjoint pops its own copy."""
    if marks.of(s).restore_of is None or not isinstance(s, ast.Assign):
        return None
    value = s.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
            value.func.attr == "pop" and isinstance(value.func.value, ast.Name):
        return value.func.value.id
    return None


def drop_needless_inits(fdef: ast.FunctionDef, marks: Optional[ResidualMarks] = None,
                        index: Optional[NameIndex] = None) -> None:
    """`v = None` exists so that saving v before its first assignment works; it is
    not needed where v is always assigned before any statement that saves it."""
    marks = ResidualMarks() if marks is None else marks
    inits = {marks.of(s).init_of: s for s in fdef.body if marks.of(s).init_of is not None}
    if not inits:
        return
    names = Names(index)   # (statements only leave fdef below)
    params = fwd_params(fdef)
    assigned = set(params)
    needed: Set[str] = set()
    for s in fdef.body:
        if marks.of(s).init_of is not None:
            continue
        for sub in walk_statements([s]):
            var = marks.of(sub).save_of
            if var in inits and var not in assigned:
                needed.add(var)
        if s.__class__ is ast.If:
            assigned = definitely_assigned([s], assigned, names)
        elif s.__class__ is not ast.For and s.__class__ is not ast.While:
            assigned |= names.stores(s)   # (what _definitely_assigned adds, without a copy)
    fdef.body = [s for s in fdef.body
                 if marks.of(s).init_of is None or marks.of(s).init_of in needed]


# -- residuals --------------------------------------------------------------------
def link_residuals(t: Transformed, index: Optional[NameIndex] = None) -> None:
    """The forward returns exactly the values the adjoint reads; the adjoint unpacks them."""
    fwd, adj = t.forward, t.adjoint
    index = NameIndex() if index is None else index
    only_shape = _shape_only_names(adj)
    _save_shapes_only(t, only_shape, index)
    keep_views(t, only_shape, index)
    adj_args = {a.arg for a in adj.args.args}
    defined: Dict[str, None] = {a: None for a in param_list(fwd)}
    names = Names(index)  # of the forward's statements before its return, which stay
    for s in walk_statements(fwd.body):
        stored: Set[str] = set()
        for part in header_parts(s):
            stored |= names.stores(part)
        for n in sorted(stored):
            defined.setdefault(n, None)
    reads = {n.id for n in index.function(adj) if n.ctx.__class__ is ast.Load} - adj_args
    residuals = [n for n in defined if n in reads]
    # A value the adjoint reads only for its shape is kept as shape and dtype (a
    # parameter too: a helper called per loop step is given new arrays each step).
    restored = {t.marks.of(s).restore_of for s in walk_statements(adj.body)}
    shape_only = {n for n in residuals if n not in restored and n in only_shape}
    t.kept_as_shapes = shape_only
    ret = fwd.body[-1]
    ret.value.elts[1] = ast.Tuple(elts=[_kept(n, n in shape_only) for n in residuals],
                                  ctx=ast.Load())
    index.changed(ret)
    if residuals:
        unpack = ast.Assign(targets=[ast.Tuple(elts=[name_node(n, True)
                                                     for n in residuals], ctx=ast.Store())],
                            value=name_node(t.residuals), type_comment=None)
        adj.body.insert(0, unpack)
    assigned = definitely_assigned(fwd.body[:-1], fwd_params(fwd), names)
    maybe_undefined = [n for n in residuals if n not in assigned]
    inits = [ast.Assign(targets=[name_node(n, True)],
                        value=ast.Constant(value=None), type_comment=None)
             for n in maybe_undefined]
    fwd.body[:0] = inits
    t.residual_names = residuals


def _save_shapes_only(t: Transformed, only_shape: Set[str], index: NameIndex) -> None:
    """A value the forward saves (on a stack, per loop step, or in a slot) that the
    adjoint reads back only for its shape and dtype (`_s2s_unbroadcast(g, x)`) is
    saved as shape and dtype: a loop keeps no array per step only for its shape."""
    for s in walk_statements(t.forward.body):
        var = t.marks.of(s).save_of
        if var is None or var not in only_shape:
            continue
        value = s.value
        if s.__class__ is ast.Expr and value.__class__ is ast.Call and \
                value.func.__class__ is ast.Attribute and value.func.attr == "append" and \
                len(value.args) == 1 and value.args[0].__class__ is ast.Name and \
                value.args[0].id == var:
            value.args[0] = _kept(var, True)
            index.changed(s)
        elif s.__class__ is ast.Assign and value.__class__ is ast.Name and value.id == var:
            s.value = _kept(var, True)
            index.changed(s)


def keep_views(t: Transformed, only_shape: Set[str], index: NameIndex) -> None:
    """`v = _s2s_snapshot(u[1:])` back to the view `v = u[1:]` where the copy was only
    the adjoint's (StmtFact.snapshot_for_adjoint: no statement reads v once a write
    has changed u) and the adjoint reads no more of v than its shape, which no write
    changes (or nothing of it): a stencil's slices, summed before the array is
    updated, are not copied."""
    if t.pure:   # (its text is what a higher order differentiates, whose alias check
        return   # would meet the view read after the write: its shape, in the residuals)
    stmts = t.nf.facts.stmts
    values_read = {n.id for n in index.function(t.adjoint)
                   if n.ctx.__class__ is ast.Load} - only_shape
    for s in walk_statements(t.forward.body):
        value = s.value if s.__class__ is ast.Assign else None
        if value is None or len(s.targets) != 1 or s.targets[0].__class__ is not ast.Name or \
                s.targets[0].id in values_read or value.__class__ is not ast.Call or \
                value.func.__class__ is not ast.Name or value.func.id != "_s2s_snapshot" or \
                len(value.args) != 1 or value.keywords or \
                not stmts.of(s).snapshot_for_adjoint:
            continue
        s.value = value.args[0]
        index.changed(s)


def _kept(name: str, shape_only: bool) -> ast.expr:
    value = name_node(name)
    if shape_only:
        return ast.Call(func=name_node("_s2s_meta"), args=[value], keywords=[])
    return value


def _shape_only_names(fdef: ast.FunctionDef) -> Set[str]:
    """Names every read of which (in fdef) uses only their shape and dtype."""
    reads, allowed = _shape_reads(fdef)
    good: Dict[str, bool] = {}
    for n in reads:
        good[n.id] = good.get(n.id, True) and n in allowed
    return {name for name, ok in good.items() if ok}


def _shape_reads(tree: ast.AST):
    """(the names tree reads, those of them read only for shape and dtype)."""
    allowed = set()
    reads = []
    Name, Load = ast.Name, ast.Load
    for node in walk_values(tree):
        if node.__class__ is Name:
            if node.ctx.__class__ is Load:
                reads.append(node)
        elif isinstance(node, ast.Call):
            func = node.func
            index = None
            if isinstance(func, ast.Name) and func.id in SHAPE_ARGS:
                index = SHAPE_ARGS[func.id]
            elif isinstance(func, ast.Attribute) and func.attr in SHAPE_FUNCS and \
                    isinstance(func.value, ast.Name) and func.value.id in ("np", "numpy",
                                                                          "_s2s_np"):
                index = 0
            if index is not None and len(node.args) > index:
                allowed.add(node.args[index])
            items = SHAPE_ITEMS.get(func.id) if isinstance(func, ast.Name) else None
            if items is not None and len(node.args) > items and \
                    isinstance(node.args[items], (ast.List, ast.Tuple)):
                allowed.update(node.args[items].elts)
        elif isinstance(node, ast.Attribute) and node.attr in ("shape", "ndim", "dtype", "size"):
            allowed.add(node.value)
    return reads, allowed
