"""Cotangents of unpacked lists and tuples, made in one call.

`(W, b), (V, c) = params` reads each item once; its adjoint, as the transform
writes it, makes a zero cotangent for each container and adds each item's into it:

    params_0_bar = _s2s_zeros_like(params_0)
    _s2s_add_at(params_0_bar, 1, b_bar)
    _s2s_add_at(params_0_bar, 0, W_bar)

Called once per step of a loop, a helper cell of an LSTM spends more time there
than in its arithmetic. This step folds such a run into

    params_0_bar = _s2s_items_cotangent(params_0, (1, b_bar), (0, W_bar))

which is the same computation (zeros_like, then add_at for each pair, in order)
done in one call, and without the zeros where the pairs name every item once.

The fold is exact: it takes only adds at constant indices, and moves them only past
statements that mention neither the container, its cotangent, nor any value added;
the call goes where the last add was. Containers the analysis knows to be arrays or
numbers are left alone (their adds are NumPy's, and numba's).
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Set, Tuple

from ..names import BRANCHES_AND_LOOPS, assign_node, helper_call, name_node, name_nodes

_ZEROS = "_s2s_zeros_like"
_ADD_AT = "_s2s_add_at"


def collect_item_cotangents(body: List[ast.stmt], leaves: Set[str]) -> List[ast.stmt]:
    """`body` with each zeros_like/add_at run on a container folded (nested blocks too)."""
    out: List[Optional[ast.stmt]] = []   # (None: a statement folded away)
    pending: Dict[str, _Run] = {}   # cotangent -> its run so far

    def close(bar: str) -> None:
        run = pending.pop(bar)
        if run.pairs:
            out[run.zeros_at] = None
            out[run.last_at] = assign_node(bar, helper_call(
                "items_cotangent", name_node(run.container), *run.pairs))

    for s in body:
        if s.__class__ in BRANCHES_AND_LOOPS:
            for bar in list(pending):
                close(bar)
            for attr in ("body", "orelse"):
                block = getattr(s, attr, None)
                if isinstance(block, list):
                    setattr(s, attr, collect_item_cotangents(block, leaves))
            out.append(s)
            continue
        mentioned = {n.id for n in name_nodes(s)}
        added = _constant_add(s)
        if added is not None and added[0] in pending and added[2] not in pending[added[0]].watched:
            bar, index, value = added
            for other in [b for b, run in pending.items() if b != bar and mentioned & run.watched]:
                close(other)   # (the value is another run's cotangent: complete it first)
            run = pending[bar]
            run.pairs.append(ast.Tuple([index, name_node(value)], ast.Load()))
            run.watched.add(value)
            out.append(None)
            run.last_at = len(out) - 1
            continue
        for bar in [b for b, run in pending.items() if mentioned & run.watched]:
            close(bar)
        out.append(s)
        zeros = _zeros(s)
        if zeros is not None and zeros[1] not in leaves:
            bar, container = zeros
            pending[bar] = _Run(container, len(out) - 1, {bar, container})
    for bar in list(pending):
        close(bar)
    return [s for s in out if s is not None]


class _Run:
    """A zero cotangent made for a container, and the adds into it seen since."""

    def __init__(self, container: str, zeros_at: int, watched: Set[str]):
        self.container = container
        self.zeros_at = zeros_at
        self.last_at = zeros_at
        self.pairs: List[ast.expr] = []
        self.watched = watched   # names no statement it moves past may mention


def _zeros(s: ast.stmt) -> Optional[Tuple[str, str]]:
    """(cotangent, container) of `c_bar = _s2s_zeros_like(c)`."""
    if s.__class__ is ast.Assign and len(s.targets) == 1 and \
            s.targets[0].__class__ is ast.Name and _calls(s.value, _ZEROS, 1) and \
            s.value.args[0].__class__ is ast.Name:
        return s.targets[0].id, s.value.args[0].id
    return None


def _constant_add(s: ast.stmt) -> Optional[Tuple[str, ast.expr, str]]:
    """(cotangent, index, value) of `_s2s_add_at(c_bar, <int>, v_bar)`."""
    if s.__class__ is ast.Expr and _calls(s.value, _ADD_AT, 3):
        bar, index, value = s.value.args
        if bar.__class__ is ast.Name and value.__class__ is ast.Name and _is_int(index):
            return bar.id, index, value.id
    return None


def _calls(node: ast.expr, name: str, arity: int) -> bool:
    return node.__class__ is ast.Call and node.func.__class__ is ast.Name and \
        node.func.id == name and len(node.args) == arity and not node.keywords


def _is_int(node: ast.expr) -> bool:
    if node.__class__ is ast.UnaryOp and node.op.__class__ is ast.USub:
        node = node.operand
    return node.__class__ is ast.Constant and type(node.value) is int
