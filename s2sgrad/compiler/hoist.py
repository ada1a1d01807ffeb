"""Loop-invariant code motion on the normal form.

A temporary computed in a loop from values the loop never changes (`-a`,
`dt * b`, `W.T`) is computed once before the loop. Beyond saving the work,
this keeps the forward from saving the same value once per iteration for the
adjoint. Only compiler temporaries move, and only operations that cannot
raise or have effects, whatever the shapes (a negation, a product with a
number, a transpose, a one-argument ufunc, a whole-array sum), so a loop that
runs zero times behaves as before: `w * G2` moved out of a `while` whose test
was false raised on shapes the user's code never multiplied (fuzz seed 4318).
"""
from __future__ import annotations

import ast
from typing import List, Set

import numpy as np

from ..rules import registry
from .facts import ExprFacts
from .names import copy_location, name_nodes, walk_values

_SAFE_BINOPS = (ast.Add, ast.Sub, ast.Mult)
_SAFE_UNARY = (ast.USub, ast.UAdd)


def hoist_invariants(body: List[ast.stmt], user_names: Set[str],
                     facts) -> List[ast.stmt]:
    """The normal-form body with loop-invariant temporaries moved out of loops.

    `facts` (the AliasFacts of the body) says which names share memory with a
    name the loop writes in place: a value read through any of them is not
    invariant either; its `exprs` what each call calls."""
    defs = _definition_counts(body)
    return _hoist_block(body, defs, user_names, facts)


def _definition_counts(body) -> dict:
    counts: dict = {}
    for node in name_nodes(ast.Module(body=body, type_ignores=[])):
        if isinstance(node.ctx, ast.Store):
            counts[node.id] = counts.get(node.id, 0) + 1
    return counts


def _hoist_block(stmts: List[ast.stmt], defs, user_names, facts) -> List[ast.stmt]:
    out: List[ast.stmt] = []
    for s in stmts:
        if isinstance(s, ast.If):
            s.body = _hoist_block(s.body, defs, user_names, facts)
            s.orelse = _hoist_block(s.orelse, defs, user_names, facts)
        elif isinstance(s, (ast.For, ast.While)):
            s.body = _hoist_block(s.body, defs, user_names, facts)
            moved = _hoist_loop(s, defs, user_names, facts)
            out.extend(moved)
        out.append(s)
    return out


def _changed_in(loop, facts) -> Set[str]:
    """Names a loop assigns or updates in place (x[i] = v, x += v, xs.append(v),
    np.add.at(x, ...)), the names sharing memory with those, and every name passed
    to a call that may write into its arguments (a user function)."""
    names: Set[str] = set()
    inside = {n for n in walk_values(loop)}
    for name, stmt in facts.writes:
        if stmt in inside:
            names.add(name)
            names |= facts.affected(name, stmt)
    for node in walk_values(loop):
        if isinstance(node, ast.Call) and _may_write_arguments(node, facts.exprs):
            names |= {n.id for a in list(node.args) + [k.value for k in node.keywords]
                      for n in name_nodes(a)}
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name):
            names.add(node.value.id)
        elif isinstance(node, ast.Call) and facts.exprs.of(node).method in (
                "append", "pop", "extend", "insert", "sort", "fill"):
            base = node.func.value
            if isinstance(base, ast.Name):
                names.add(base.id)
    return names


def _may_write_arguments(call: ast.Call, exprs: ExprFacts) -> bool:
    """A call that is not known to leave its arguments alone: a user function, an
    unknown callable, or anything given `out=`."""
    if any(k.arg == "out" for k in call.keywords):
        return True
    if exprs.of(call).method is not None:
        return False   # mutating methods are in _changed_in's own list
    callee = exprs.of(call).callee
    if callee is None:
        return True
    return not (registry.lookup_function(callee) is not None or registry.is_nondiff(callee)
                or registry.is_constructor(callee) or callee in (range, len, zip, enumerate,
                                                                 reversed))


def _hoist_loop(loop, defs, user_names, facts) -> List[ast.stmt]:
    moved: List[ast.stmt] = []
    changed = _changed_in(loop, facts)
    progress = True
    while progress:
        progress = False
        for s in list(loop.body):
            if _invariant(s, changed, defs, user_names, facts.exprs):
                loop.body.remove(s)
                moved.append(s)
                changed.discard(s.targets[0].id)
                progress = True
    if not loop.body:
        loop.body = [copy_location(ast.Pass(), loop)]
    return moved


def _invariant(s, changed: Set[str], defs, user_names, exprs: ExprFacts) -> bool:
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
            isinstance(s.targets[0], ast.Name)):
        return False
    target = s.targets[0].id
    if target in user_names or defs.get(target) != 1:
        return False
    reads = {n.id for n in name_nodes(s.value)}
    if reads & changed:
        return False
    return _pure(s.value, exprs)


def _pure(value: ast.expr, exprs: ExprFacts) -> bool:
    """An operation that raises on no array or number: no two arrays meet (their
    shapes may not broadcast), no axis is named (it may not exist)."""
    if isinstance(value, ast.BinOp):
        return isinstance(value.op, _SAFE_BINOPS) and (_number(value.left) or _number(value.right))
    if isinstance(value, ast.UnaryOp):
        return isinstance(value.op, _SAFE_UNARY)
    if isinstance(value, ast.Attribute):
        return value.attr in ("T", "real", "imag", "shape", "ndim", "size", "dtype")
    if isinstance(value, ast.Call):
        callee = exprs.of(value).callee
        if callee is None or exprs.of(value).opaque or value.keywords or \
                len(value.args) != 1 or registry.lookup_function(callee) is None:
            return False
        # One-argument ufuncs never raise on values (they warn); nor does a sum or
        # mean of the whole array. Anything else stays where the user put it.
        return (isinstance(callee, np.ufunc) and callee.nin == 1 and
                callee.signature is None) or callee in (np.sum, np.mean)
    return False


def _number(node: ast.expr) -> bool:
    """A numeric literal (-1.0 included): broadcast against any shape."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, _SAFE_UNARY):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)
