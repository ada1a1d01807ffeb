"""Shape facts the adjoint can use instead of keeping values: shape witnesses
shared, a full reduction's cotangent kept 0-d, `unbroadcast` chains collapsed,
a product's shape read from its operands.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Set

import numpy as np

from ..analyze import SCALAR
from ..marks import is_comment
from ..names import name_node, walk_values
from ..transform import Transformed
from .statements import (
    SHAPE_ARGS,
    NameIndex,
    blocks,
    header,
    header_parts,
    holds_other_block,
    inner_blocks,
    is_pop,
    name_counts,
    plain_assignment,
    stored_in,
    walk_statements,
    writes_nothing,
)


# -- shapes from values already kept ----------------------------------------------
def _shape_positions(fdef: ast.FunctionDef, index: NameIndex) -> List[tuple]:
    """(statement, call, argument index, Name) for every read that needs only a
    shape. Only the statements that name a shape helper are walked; the statement
    is None where it is not known (a `with` or `try` holds a block)."""
    statements = walk_statements(fdef.body)
    if holds_other_block(statements):
        return [(None, *position) for position in _calls_reading_shapes(fdef)]
    out = []
    for s in statements:
        if any(n.id in SHAPE_ARGS for n in index.own(s)):
            for part in header_parts(s):
                out += [(s, *position) for position in _calls_reading_shapes(part)]
    return out


def _calls_reading_shapes(node: ast.AST) -> List[tuple]:
    out = []
    for sub in walk_values(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and \
                sub.func.id in SHAPE_ARGS:
            i = SHAPE_ARGS[sub.func.id]
            if len(sub.args) > i and isinstance(sub.args[i], ast.Name):
                out.append((sub, i, sub.args[i].id))
    return out


def definition_paths(body, path=()) -> Dict[str, tuple]:
    """Each name's first assignment in `body`, as a path of indices and block names."""
    out: Dict[str, tuple] = {}
    for i, s in enumerate(body):
        here = path + (i,)
        for n in stored_in(s) if isinstance(s, (ast.Assign, ast.AugAssign)) else ():
            out.setdefault(n, here)
        for attr, inner in inner_blocks(s):
            for n, p in definition_paths(inner, here + (attr,)).items():
                out.setdefault(n, p)
    return out


def share_shape_witnesses(t: Transformed, index: Optional[NameIndex] = None,
                          paths: Optional[Dict[str, tuple]] = None) -> Set[Optional[ast.stmt]]:
    """Read a shape from a value the adjoint keeps anyway (or a scalar constant).

    `unbroadcast(g, v)` needs only v's shape; when the analysis proves that an
    earlier value u has that shape and the adjoint reads u anyway, read u, so v
    need not be kept at all. Returns the statements it changed (None for one it
    cannot name), which the caller tells the index about.
    """
    shapes = t.activity.shapes
    changed: Set[Optional[ast.stmt]] = set()
    if not shapes:
        return changed
    index = NameIndex() if index is None else index
    params = set(t.nf.all_params)
    positions = _shape_positions(t.adjoint, index)
    if not positions:
        return changed
    shape_reads = {call.args[i] for _, call, i, _ in positions}  # the nodes themselves
    names = index.function(t.adjoint)
    value_reads = {n.id for n in names
                   if isinstance(n.ctx, ast.Load) and n not in shape_reads} | params
    if paths is None:   # (the normal form's: a caller asking again may keep them)
        paths = definition_paths(t.nf.node.body)
    members: Dict[str, List[str]] = {}
    for name, rep in shapes.items():
        members.setdefault(rep, []).append(name)
    for s, call, i, n in positions:
        rep = shapes.get(n)
        if rep is None:
            continue
        if rep == SCALAR:
            call.args[i] = ast.Constant(value=0.0)
            changed.add(s)
            continue
        if n in value_reads:
            continue
        here = paths.get(n, ())
        best = None
        for m in sorted(members.get(rep, ()), key=lambda k: paths.get(k, ())):
            if m == n or m not in value_reads:
                continue
            there = paths.get(m, ())
            if m in params or (there < here and here[:len(there) - 1] == there[:-1]):
                best = m
                break
        if best is not None:
            call.args[i] = name_node(best)
            changed.add(s)
    return changed


# -- a full reduction's cotangent stays a scalar ----------------------------------------
def elide_scalar_broadcasts(t: Transformed, index: Optional[NameIndex] = None) -> None:
    """`v_bar = expand_reduced(g, x)` after `np.sum(x)` is g spread over x's
    shape. When every use multiplies it elementwise with a value of x's shape,
    the scalar g does the same job without allocating an array of x's size."""
    shapes = t.activity.shapes
    fdef = t.adjoint
    index = NameIndex() if index is None else index
    uses_of: Dict[str, List[ast.stmt]] = {}
    Load = ast.Load
    for u in walk_statements(fdef.body):
        for n in {n.id for n in index.own(u) if n.ctx.__class__ is Load}:
            uses_of.setdefault(n, []).append(u)
    for s in walk_statements(fdef.body):
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
                isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Call) and
                isinstance(s.value.func, ast.Name) and
                s.value.func.id == "_s2s_expand_reduced" and len(s.value.args) == 2 and
                not s.value.keywords and isinstance(s.value.args[1], ast.Name)):
            continue
        name, like = s.targets[0].id, s.value.args[1].id
        shape = shapes.get(like)
        if shape is None:
            continue
        uses = [u for u in uses_of.get(name, []) if u is not s]
        if uses and all(_elementwise_with(u, name, shape, shapes) for u in uses):
            s.value = s.value.args[0]
            index.changed(s)


def _elementwise_with(use, name: str, shape: str, shapes) -> bool:
    if not isinstance(use, (ast.Assign, ast.AugAssign)):
        return False
    value = use.value
    full = False
    for node in walk_values(value):
        if isinstance(node, ast.Name):
            if node.id != name and shapes.get(node.id) == shape:
                full = True
        elif isinstance(node, ast.Call):
            func = node.func
            ufunc = getattr(np, func.attr, None) if isinstance(func, ast.Attribute) else None
            if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and
                    func.value.id in ("np", "numpy", "_s2s_np") and
                    isinstance(ufunc, np.ufunc) and ufunc.signature is None):
                return False
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return False  # not elementwise
        elif not isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Attribute,
                                   ast.operator, ast.unaryop, ast.expr_context)):
            return False
    return full


# -- unbroadcast of an unbroadcast ----------------------------------------------------
def collapse_unbroadcast_chains(fdef: ast.FunctionDef,
                                index: Optional[NameIndex] = None) -> bool:
    """`s_bar = unbroadcast(g, s); a_bar = unbroadcast(s_bar, a)` -> `a_bar =
    unbroadcast(g, a)`, when s_bar is read only that way.

    s_bar is the cotangent of an operand s of `z = s + c` (g is z's), and a an
    operand of the op that made s: a broadcasts to s and s to z, so summing g
    down to s's shape and then to a's is summing it down to a's shape at once.
    Then s is no longer a shape witness, and a loop stops keeping it for every
    step (`W @ h + U @ x + b` in an RNN: two stacks fewer)."""
    index = NameIndex() if index is None else index
    loads, counts, _ = name_counts(fdef, index)
    return _collapse_block(fdef.body, loads, counts, index)


def _unbroadcast_of(node: ast.AST, name: Optional[str] = None) -> Optional[ast.Call]:
    """node, when it is `_s2s_unbroadcast(<a Name: `name` if given>, like)`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id == "_s2s_unbroadcast" and len(node.args) == 2 and \
            not node.keywords and isinstance(node.args[0], ast.Name) and \
            (name is None or node.args[0].id == name):
        return node
    return None


def _collapse_block(stmts: List[ast.stmt], loads, counts, index: NameIndex) -> bool:
    changed = False
    for s in stmts:
        for _, inner in inner_blocks(s):
            changed |= _collapse_block(inner, loads, counts, index)
    i = 0
    while i < len(stmts):
        s = stmts[i]
        call = _unbroadcast_of(s.value) if isinstance(s, ast.Assign) and \
            len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) else None
        if call is not None:
            name, g = s.targets[0].id, call.args[0].id
            uses = None
            if counts.get(name) == 1 and loads.get(name, 0) > 0 and g != name:
                uses = _unbroadcasts_reading(stmts[i + 1:], name, g, loads[name], index)
            if uses is not None:
                for statement, use in uses:
                    use.args[0] = name_node(g)
                    index.changed(statement)
                loads[g] = loads.get(g, 0) + len(uses) - 1
                del stmts[i]
                changed = True
                continue
        i += 1
    return changed


def _unbroadcasts_reading(stmts: List[ast.stmt], name: str, g: str, wanted: int,
                          index: NameIndex) -> Optional[List[tuple]]:
    """(statement, call) for the `_s2s_unbroadcast(name, ...)` calls in stmts, when
    they are all of name's `wanted` reads and nothing before the last of them can
    change g; else None."""
    found: List[tuple] = []
    for use in stmts:
        reads = sum(1 for n in index.deep(use) if n.id == name)
        if reads:
            calls = [c for c in walk_values(use) if _unbroadcast_of(c, name) is not None]
            if len(calls) != reads or not isinstance(use, (ast.Assign, ast.AugAssign)):
                return None
            found.extend((use, c) for c in calls)
            if len(found) == wanted:
                return found
        if g in stored_in(header(use)):
            return None
        if isinstance(use, ast.Assign) and \
                all(isinstance(t, ast.Name) for t in use.targets) and \
                (writes_nothing(use.value) or is_pop(use.value)):
            continue   # a rebinding of another name: g's array is untouched
        if isinstance(use, ast.AugAssign) and isinstance(use.target, ast.Name) and \
                use.target.id != g and writes_nothing(use.value):
            continue   # in place into another cotangent, which only its name holds
        return None    # anything else (a call statement, a loop, a comment): stop
    return None


# -- a product's shape from its operands -----------------------------------------------
_MATMUL_GRADS = ("_s2s_matmul_grad_a", "_s2s_matmul_grad_b")


def product_shapes_from_operands(fdef: ast.FunctionDef,
                                 index: Optional[NameIndex] = None) -> bool:
    """`p_bar = unbroadcast(g, p)` ... `matmul_grad_a(p_bar, a, b)` ->
    `p_bar = unbroadcast_matmul(g, a, b)`.

    The matmul rule passes p_bar as the cotangent of `a @ b`, so p has the shape
    of a @ b with the a and b that rule reads. When nothing between the two
    statements mentions a, b or p_bar (plain assignments to other names, pops
    of other stacks), they hold the same values at the unbroadcast, and the
    shape comes from them: p is no longer a shape witness, and a loop stops
    saving it at every step (`W @ h` in an RNN)."""
    changed = False
    index = NameIndex() if index is None else index
    for block in blocks(fdef.body):
        for i, s in enumerate(block):
            call = _unbroadcast_of(s.value) if isinstance(s, ast.Assign) and \
                len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) else None
            if call is None or not isinstance(call.args[1], ast.Name):
                continue
            operands = _product_operands(block[i + 1:], s.targets[0].id, index)
            if operands is not None:
                call.func = name_node("_s2s_unbroadcast_matmul")
                call.args = [call.args[0]] + [name_node(n) for n in operands]
                index.changed(s)
                changed = True
    return changed


def _product_operands(stmts: List[ast.stmt], cot: str, index: NameIndex) -> Optional[tuple]:
    """(a, b) of the first `matmul_grad_a/b(cot, a, b)` in stmts (a and b plain
    names), when no statement before it mentions cot, a or b or does anything
    but assign pure values or pops to other names; else None."""
    before: List[ast.stmt] = []
    for use in stmts:
        names = index.deep(use)
        calls_grad = use.__class__ in (ast.Assign, ast.AugAssign) and \
            any(n.id in _MATMUL_GRADS for n in names)   # (else no call to walk for)
        for c in walk_values(use) if calls_grad else ():
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and \
                    c.func.id in _MATMUL_GRADS and len(c.args) == 3 and not c.keywords and \
                    all(isinstance(a, ast.Name) for a in c.args) and c.args[0].id == cot:
                a, b = c.args[1].id, c.args[2].id
                if cot in (a, b) or any(n.id in (a, b, cot)
                                        for s in before for n in index.deep(s)):
                    return None
                return a, b
        if any(n.id == cot for n in names):
            return None
        if not (is_comment(use) or plain_assignment(use) or
                (isinstance(use, ast.Assign) and is_pop(use.value) and
                 all(isinstance(t, ast.Name) for t in use.targets))):
            return None
        before.append(use)
    return None
