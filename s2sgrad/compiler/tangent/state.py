"""Forward mode: the small AST helpers and the state records its parts share."""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Set, Tuple

from ...rules import registry
from ..facts import ExprFacts
from ..names import copy_location, loop_items_of, name_node

HINT_RULE = ("Use reverse mode (s2sgrad.grad / functional.vjp) for this function, or "
              "register a JVP with s2sgrad.rules.jvp_rules.defjvp.")


def bind_pair(core, stem: str, pair) -> Tuple[str, str, str]:
    """Names for a reverse-mode pair the tangent code calls (a derived JVP's: a
    Function's vjp, or a rule's VJP, as a function of its cotangent), bound in the
    generated module: (forward, adjoint, residuals)."""
    fwd = core.names.fresh(f"{stem}_forward")
    adj = core.names.fresh(f"{stem}_adjoint")
    res = core.names.fresh(f"{stem}_residuals")
    core.bindings[fwd] = pair.forward
    core.bindings[adj] = pair.adjoint
    core.compiled[fwd] = pair
    return fwd, adj, res


def any_live(struct: Any) -> bool:
    """Can any part of a value with this liveness structure be nonzero?"""
    if isinstance(struct, tuple):
        return any(any_live(s) for s in struct)
    return bool(struct)


def _merge(a: Any, b: Any) -> Any:
    """The liveness structure that covers both (elementwise or)."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(_merge(x, y) for x, y in zip(a, b))
    return any_live(a) or any_live(b)


# -- small AST helpers ----------------------------------------------------------------------


def none() -> ast.Constant:
    return ast.Constant(value=None)




def rebuild(node, mapping, exprs: ExprFacts):
    """A copy of `node` with the nodes in `mapping` replaced (by copies), each node
    with the fact of the node it copies (deepcopy would lose both)."""
    new = mapping.get(node)
    if new is not None:
        return exprs.carry(new, copy.deepcopy(new))
    if not isinstance(node, ast.AST):
        return node
    fields = {}
    for name, value in ast.iter_fields(node):
        if isinstance(value, list):
            fields[name] = [rebuild(v, mapping, exprs) for v in value]
        else:
            fields[name] = rebuild(value, mapping, exprs)
    out = type(node)(**fields)
    copy_location(out, node)
    return exprs.same(node, out)


_FRESH_HELPERS = {"_s2s_zero_tangent", "_s2s_with_item", "_s2s_push", "_s2s_drop_last",
                  "_s2s_copy_value", "_s2s_snapshot", "_s2s_scatter_add", "_s2s_with_zeroed",
                  "_s2s_zeros_like"}


def is_fresh(expr: ast.expr, exprs: ExprFacts) -> bool:
    """Does evaluating `expr` always give a new object (never one it read)?"""
    if isinstance(expr, (ast.BinOp, ast.UnaryOp)):
        return True
    if isinstance(expr, (ast.List, ast.Tuple)):
        return False
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id in _FRESH_HELPERS:
            return True
        callee = exprs.of(expr).callee
        if callee is not None:
            if registry.is_constructor(callee):
                return True
            rule = registry.lookup_function(callee)
            return bool(rule is not None and not rule.view and not rule.outputs)
    return False


# -- the transform -------------------------------------------------------------------------
@dataclass
class State:
    live: Set[str]
    owned: Set[str]
    defined: Set[str]
    reachable: bool = True
    # Tuple-valued variables whose items' liveness is known: var -> (bool | tuple, ...)
    struct: Dict[str, tuple] = field(default_factory=dict)

    def copy(self) -> "State":
        return State(set(self.live), set(self.owned), set(self.defined), self.reachable,
                      dict(self.struct))


def merge_struct(a: State, b: State) -> Dict[str, tuple]:
    out = {}
    for var in set(a.struct) & set(b.struct):
        merged = _merge(a.struct[var], b.struct[var])
        if isinstance(merged, tuple):
            out[var] = merged
    for var in set(a.struct) ^ set(b.struct):
        side = a if var in a.struct else b
        other = b if side is a else a
        if var not in other.live:       # zero on the other side: its structure holds
            out[var] = side.struct[var]
    return out


@dataclass
class Loop:
    entry: Set[str]                   # live at the loop head
    owned_entry: Set[str]
    exit_live: Set[str] = field(default_factory=set)
    breaks: List[State] = field(default_factory=list)
    continues: List[State] = field(default_factory=list)


def maybe_none(e: ast.expr) -> bool:
    """Could a jvp's result item be None at run time (so it needs a zero)?"""
    return not isinstance(e, (ast.BinOp, ast.UnaryOp))


def tuple_or_name(names: Sequence[str]) -> ast.expr:
    if len(names) == 1:
        return name_node(names[0])
    return ast.Tuple(elts=[name_node(n) for n in names], ctx=ast.Load())


def store_ctx(node: ast.AST) -> None:
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Name, ast.Tuple, ast.List)):
            sub.ctx = ast.Store()


def tangent_target(target: ast.expr, t) -> ast.expr:
    if isinstance(target, ast.Name):
        return name_node(t.dot(target.id), True)
    return ast.Tuple(elts=[tangent_target(e, t) for e in target.elts], ctx=ast.Store())


def loop_item_sources(body: List[ast.stmt]) -> List[Tuple[str, str]]:
    """(n, xs) for every `n = _s2s_loop_items(xs)`: n is xs, walked by a loop."""
    return [pair for node in ast.walk(ast.Module(body=list(body), type_ignores=[]))
            for pair in [loop_items_of(node)] if pair is not None]


def writes_items_of(name: str, body: List[ast.stmt]) -> bool:
    """Whether statements write into `name`'s items or grow or shrink it in place."""
    for node in ast.walk(ast.Module(body=list(body), type_ignores=[])):
        target = None
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Subscript):
                    target = t.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("append", "extend", "insert", "pop", "remove", "clear"):
            target = node.func.value
        if isinstance(target, ast.Name) and target.id == name:
            return True
    return False


def iteration_leaves(target, it, out, exprs: ExprFacts) -> None:
    """(target, sequence, node) for each loop target: the sequence it walks (None for
    range/enumerate indices) and the iterable node that yields it (the sequence itself,
    or reversed(sequence)), which the tangent code zips with the tangent's."""
    callee = exprs.of(it).callee
    if callee is enumerate and isinstance(target, ast.Tuple) and len(target.elts) == 2:
        out.append((target.elts[0], None, None))
        iteration_leaves(target.elts[1], it.args[0], out, exprs)
    elif callee is zip and isinstance(target, ast.Tuple) and len(target.elts) == len(it.args):
        for t, a in zip(target.elts, it.args):
            iteration_leaves(t, a, out, exprs)
    elif callee is reversed and len(it.args) == 1 and isinstance(it.args[0], ast.Name):
        out.append((target, it.args[0], it))
    elif isinstance(it, ast.Call) or not isinstance(it, ast.Name):
        out.append((target, None, None))
    else:
        out.append((target, it, it))
