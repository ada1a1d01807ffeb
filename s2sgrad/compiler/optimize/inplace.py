"""Fewer arrays allocated: cotangents summed in place, temporaries reused.

`accumulate_in_place`: `b = b + part` as `b += part` where b's array is new.

The transform adds a contribution in place only where it knows the cotangent's
array is its own. A first contribution the inliner and copy propagation turned
into arithmetic (`x_bar = g * (1.0 - t * t)`) is a new array too, but the
transform saw only a name there. Found here, once that is visible: one array of
the variable's size fewer per such sum (the peak of a memory-bound adjoint).

Only statements the transform marked as a cotangent's sum are rewritten (their
parts all have the variable's shape, as for the transform's own `+=`), and only
while nothing has read b since the arithmetic that made it (a read could have
made a second reference: `c = b`, `f(b)`).

`subtract_from_temporaries`: `1.0 - t * t` as `_s2s_subtract_into(1.0, t * t)`.
NumPy reuses a temporary's array for the next operation when the temporary is its
left operand (or either operand of a commutative one); `1.0 - T` allocates a
second array of T's size. The helper computes the difference into T's array
(runtime/temporaries.py): the same ufunc on the same operands, so the same numbers
to the bit, and no ufunc call more (an earlier form, `1.0 + -1.0 * (t * t)`,
cost one that on the small arrays of a helper called in a loop outweighed the
array it spared: 5 % of an LSTM's gradient).
"""
from __future__ import annotations

import ast
from typing import Callable, Dict, List

from ..facts import ResidualMarks
from ..names import copy_location, helper_call
from .statements import inner_blocks


def accumulate_in_place(fdef: ast.FunctionDef, marks: ResidualMarks) -> None:
    """Rewrite fdef's marked sums in place where the cotangent's array is new."""
    _block(fdef.body, marks)


def _block(stmts: List[ast.stmt], marks: ResidualMarks) -> None:
    fresh: Dict[str, bool] = {}   # names holding a new array nothing else refers to
    for i, s in enumerate(stmts):
        b = marks.of(s).accumulates
        if b is not None and b in fresh and isinstance(s, ast.Assign) and \
                _sum_into(s, b):
            stmts[i] = copy_location(ast.AugAssign(
                target=ast.Name(id=b, ctx=ast.Store()), op=s.value.op, value=s.value.right), s)
            continue   # (b is still its own array)
        for _, inner in inner_blocks(s):
            _block(inner, marks)
        for n in ast.walk(s):
            if isinstance(n, ast.Name):
                fresh.pop(n.id, None)   # read (maybe shared now) or stored (rebound)
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and \
                isinstance(s.value, (ast.BinOp, ast.UnaryOp)):
            fresh[s.targets[0].id] = True   # arithmetic: a new array (or a number)


def _sum_into(s: ast.Assign, b: str) -> bool:
    """s is `b = b + part` or `b = b - part`, part not reading b (what it computes
    could refer to b's array, which the update in place would then change)."""
    v = s.value
    return len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) and \
        s.targets[0].id == b and isinstance(v, ast.BinOp) and \
        isinstance(v.op, (ast.Add, ast.Sub)) and isinstance(v.left, ast.Name) and \
        v.left.id == b and not any(isinstance(n, ast.Name) and n.id == b
                                   for n in ast.walk(v.right))


def subtract_from_temporaries(fdef: ast.FunctionDef, scalar: Callable[[str], bool]) -> None:
    """`c - e` (c a number, e arithmetic that is not only of numbers: `scalar(name)`
    says a name holds one) as `_s2s_subtract_into(c, e)`, in place. Not inside loops,
    whose values are mostly a step's small arrays (the helper's call would cost more
    than the array it spares), nor in a pair that is differentiated again (its text
    must stay NumPy's arithmetic)."""
    for node in _outside_loops(fdef.body):
        for field in ("value", "left", "right", "operand", "test", "body", "orelse"):
            child = getattr(node, field, None)
            if isinstance(child, ast.BinOp) and _from_constant(child, scalar):
                setattr(node, field, _into(child))
        for field in ("args", "elts", "targets"):
            items = getattr(node, field, None)
            if isinstance(items, list):
                for i, child in enumerate(items):
                    if isinstance(child, ast.BinOp) and _from_constant(child, scalar):
                        items[i] = _into(child)


def _outside_loops(stmts: List[ast.stmt]):
    """Every node of stmts but those of loops (branches are walked into)."""
    for s in stmts:
        if isinstance(s, (ast.For, ast.While)):
            continue
        if isinstance(s, ast.If):
            yield from ast.walk(s.test)
            yield from _outside_loops(s.body)
            yield from _outside_loops(s.orelse)
            continue
        yield from ast.walk(s)


def _from_constant(node: ast.BinOp, scalar: Callable[[str], bool]) -> bool:
    c, e = node.left, node.right
    return isinstance(node.op, ast.Sub) and isinstance(c, ast.Constant) and \
        type(c.value) in (float, int) and isinstance(e, ast.BinOp) and \
        not isinstance(e.op, ast.MatMult) and \
        any(isinstance(n, ast.Name) and not scalar(n.id) for n in ast.walk(e))


def _into(node: ast.BinOp) -> ast.Call:
    return ast.copy_location(helper_call("subtract_into", node.left, node.right), node)
