"""Forward mode: the tangents of statements that write in place (`x[i] = v`,
`x op= v`, `xs.append(v)`, `xs.pop()`, `np.add.at`): a tangent written in place
only where the transform owns it (see transform.py), else copied first.

Each function takes the transform `t` (its state: which tangents are live and
owned) and returns the statements for one statement of the normal form.
"""
from __future__ import annotations

import ast
import copy
from typing import List

from ..names import assign_node, helper_call, index_expr, name_node
from ..ops import UFUNC_AT_SIGNS, Op, OpKind, ufunc_at_kind
from .state import HINT_RULE, is_fresh


def ufunc_at(t, s: ast.Expr, op: Op) -> List[ast.stmt]:
    """np.add.at(a, idx, b): a's tangent gets b's added the same way."""
    base = op.outputs[0]
    _, index, value = s.value.args
    out: List[ast.stmt] = [s]
    if base not in t.act.active or not t.live_atom(value):
        return out
    item = t.tangent_of(value)
    if UFUNC_AT_SIGNS[ufunc_at_kind(t.facts.exprs.of(s.value).callee)] < 0:
        item = ast.UnaryOp(op=ast.USub(), operand=item)
    t.read([value], fresh=False)
    if t.is_live(base) and base not in t.state.owned:
        out.append(assign_node(t.dot(base), helper_call(
            "scatter_add", name_node(t.dot(base)), copy.deepcopy(index), item)))
        t.state.owned.add(base)
        return out
    own(t, base, out)
    out.append(ast.Expr(value=helper_call("add_at", name_node(t.dot(base)),
                                      copy.deepcopy(index), item)))
    return out


def setitem(t, s, op: Op) -> List[ast.stmt]:
    target = s.targets[0]
    base = target.value.id
    value = s.value
    out: List[ast.stmt] = [s]
    if base not in t.act.active:
        return out
    if not t.is_live(base) and not t.live_atom(value):
        return out
    item = t.tangent_of(value)
    if not t.live_atom(value):
        if isinstance(value, (ast.Tuple, ast.List)):
            pass
        elif isinstance(value, ast.Name):
            # A zero of its structure: a value that carries no tangent may still be a
            # list, a tuple or a record (a constant one, a global), whose items are
            # read one by one later ("leaves" are proven only for varied values).
            item = t.zero_of(value)
        else:
            item = ast.Constant(value=0.0)
    t.read([value], fresh=False)
    if t.is_live(base) and base not in t.state.owned:
        out.append(assign_node(t.dot(base), helper_call(
            "with_item", name_node(t.dot(base)), index_expr(target.slice), item)))
        t.state.owned.add(base)
        return out
    own(t, base, out)
    store = ast.Subscript(value=name_node(t.dot(base)), slice=copy.deepcopy(target.slice),
                          ctx=ast.Store())
    out.append(ast.Assign(targets=[store], value=item, type_comment=None))
    return out


def augassign(t, s: ast.AugAssign, op: Op) -> List[ast.stmt]:
    var = s.target.id
    out: List[ast.stmt] = []
    guard = t.facts.stmts.of(s).guard
    if guard is not None:
        out.append(ast.Expr(value=helper_call("unshared", name_node(var),
                                          *[ast.Constant(value=g) for g in guard])))
    if var not in t.act.active or not (t.is_live(var) or t.live_atom(s.value)):
        out.append(s)
        if var in t.act.active and not t.is_live(var):
            t.kill(var)
        return out
    rule = op.rule
    if rule is None:
        raise t.err(s, f"s2sgrad has no forward-mode rule for {op.label}", HINT_RULE)
    # The tangent reads the old value: it is computed before the update.
    old = name_node(var)
    rule_op = Op(OpKind.RULE, [var], diff_inputs=op.diff_inputs, rule=rule,
                 bound=dict(zip(rule.params, [old, s.value])), label=op.label)
    value = ast.BinOp(left=old, op=s.op, right=s.value)
    ans_name = t.names.fresh(f"{var}_new")
    stmts, expr = t.rules.rule_tangent(s, rule_op, value, name_node(ans_name))
    uses_ans = expr is not None and any(isinstance(n, ast.Name) and n.id == ans_name
                                        for n in ast.walk(ast.Module(
                                            body=stmts + [ast.Expr(value=expr)],
                                            type_ignores=[])))
    if uses_ans:
        out.append(assign_node(ans_name, copy.deepcopy(value)))
    new_dot = t.names.fresh(f"{var}_dot_new")
    if expr is None:
        out.append(s)
        t.kill(var)
        return out
    out += stmts + [assign_node(new_dot, expr), s,
            assign_node(t.dot(var), name_node(new_dot))]
    t.read([s.value, old], fresh=True)
    t.set_live(var, owned=is_fresh(expr, t.facts.exprs))
    return out


def append(t, s: ast.Expr, op: Op) -> List[ast.stmt]:
    xs = op.outputs[0]
    item = op.call.args[0]
    out: List[ast.stmt] = []
    if xs in t.act.active and (t.is_live(xs) or t.live_atom(item)):
        tangent = t.tangent_of(item)
        t.read([item], fresh=False)
        if t.is_live(xs) and xs not in t.state.owned:
            out.append(assign_node(t.dot(xs),
                                   helper_call("push", name_node(t.dot(xs)), tangent)))
            t.state.owned.add(xs)
        else:
            own(t, xs, out)
            out.append(ast.Expr(value=ast.Call(
                func=ast.Attribute(value=name_node(t.dot(xs)), attr="append",
                                   ctx=ast.Load()), args=[tangent], keywords=[])))
    # The tangent list is made (zeros of xs's items) before xs grows by the item.
    out.append(s)
    return out


def pop(t, s, op: Op) -> List[ast.stmt]:
    v, xs = op.outputs
    out: List[ast.stmt] = []
    if xs in t.act.active and t.is_live(xs):
        if xs in t.state.owned:
            out.append(assign_node(t.dot(v), ast.Call(
                func=ast.Attribute(value=name_node(t.dot(xs)), attr="pop", ctx=ast.Load()),
                args=[], keywords=[])))
        else:
            out.append(assign_node(t.dot(v), helper_call("last", name_node(t.dot(xs)))))
            out.append(assign_node(t.dot(xs),
                                   helper_call("drop_last", name_node(t.dot(xs)))))
            t.state.owned.add(xs)
        t.set_live(v, owned=False)
        if v not in t.act.active:
            t.kill(v)
    else:
        t.kill(v)
    return [s] + out


def own(t, var: str, out: List[ast.stmt]) -> None:
    """Make var's tangent a private object before it is updated in place."""
    if var not in t.state.live:
        t.materialize(var, out)
        t.set_live(var, owned=True)
    elif var not in t.state.owned:
        out.append(assign_node(t.dot(var),
                               helper_call("copy_value", name_node(t.dot(var)))))
        t.state.owned.add(var)
