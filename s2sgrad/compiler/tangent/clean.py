"""Forward mode: the clean-up after the transform (zero tangents pruned, folds,
copies propagated, dead code), from the optimiser's statement utilities."""
from __future__ import annotations

import ast
from typing import Dict, Set

from ..names import copy_location, name_nodes
from ..normalize import NormalForm
from ..optimize import eliminate_dead, fold_block, fwd_params, propagate_copies, tidy


class _Peephole(ast.NodeTransformer):
    """`a + -b` -> `a - b` (what adding a negated contribution leaves behind)."""

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Add) and isinstance(node.right, ast.UnaryOp) and \
                isinstance(node.right.op, ast.USub):
            return copy_location(ast.BinOp(left=node.left, op=ast.Sub(),
                                               right=node.right.operand), node)
        return node


def optimize_tangent(fdef: ast.FunctionDef, nf: NormalForm, t) -> None:
    prune_zeros(fdef, t.materialized)
    fdef.body = [_Peephole().visit(s) for s in fdef.body]
    fdef.body = fold_block(fdef.body)
    propagate_copies(fdef, set(nf.resolver.locals))
    eliminate_dead(fdef, keep=fwd_params(fdef))
    fdef.body = tidy(fdef.body)


# -- pruning materialised zeros nobody reads ----------------------------------------------------
def prune_zeros(fdef: ast.FunctionDef, materialized: Set[ast.stmt]) -> None:
    """Remove `v_dot = _s2s_zero_tangent(v)` (and `v = None` inits) whose variable is
    dead afterwards: joins materialise every tangent that is live on one side, but
    only the ones read later need a value."""
    while True:
        record: Dict[ast.stmt, Set[str]] = {}
        _live(fdef.body, set(), record, None)
        dropped = []
        fdef.body = _filter(fdef.body, lambda s, record=record, dropped=dropped:
                            _keep(s, materialized, record, dropped))
        if not dropped:
            return


def _keep(s, materialized, record, dropped) -> bool:
    if s in materialized and isinstance(s, ast.Assign):
        target = s.targets[0].id
        if target not in record.get(s, {target}):
            dropped.append(s)
            return False
    return True


def _filter(stmts, keep):
    out = []
    for s in stmts:
        if not keep(s):
            continue
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                setattr(s, attr, _filter(inner, keep) or ([ast.Pass()] if attr == "body"
                                                          else []))
        out.append(s)
    return out


def _loads(node) -> Set[str]:
    return {n.id for n in name_nodes(node) if n.ctx.__class__ is ast.Load}


def _stores(node) -> Set[str]:
    return {n.id for n in name_nodes(node) if isinstance(n.ctx, (ast.Store, ast.Del))}


def _live(stmts, live_out: Set[str], record, loop) -> Set[str]:
    """Backward liveness over structured code with break/continue (loop = (live at
    the loop's exit, live at its head)); records the live set after each statement."""
    live = set(live_out)
    for s in reversed(stmts):
        record[s] = set(live)
        if isinstance(s, ast.Break):
            live = set(loop[0]) if loop else set(live)
        elif isinstance(s, ast.Continue):
            live = set(loop[1]) if loop else set(live)
        elif isinstance(s, ast.Return):
            live = _loads(s)
        elif isinstance(s, ast.If):
            live = _live(s.body, live, record, loop) | _live(s.orelse, live, record, loop) | \
                _loads(s.test)
        elif isinstance(s, (ast.For, ast.While)):
            header = _loads(s.iter if isinstance(s, ast.For) else s.test)
            after = set(live)
            head = after | header
            while True:
                body_in = _live(s.body, head, record, (after, head))
                if isinstance(s, ast.For):
                    body_in -= _stores(s.target)
                new_head = after | body_in | header
                if new_head == head:
                    break
                head = new_head
            live = head
        else:
            used = _loads(s)
            if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
                used.add(s.target.id)
            stored = _stores(s)
            if isinstance(s, ast.Assign) and not all(isinstance(t, (ast.Name, ast.Tuple))
                                                     for t in s.targets):
                stored = set()        # x[i] = v writes into x: x stays live
            live = (live - stored) | used
    return live
