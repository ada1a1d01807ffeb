"""Expressions in normal form: atoms, operations, comprehensions, builtin
reductions, conditional expressions, indexing and calls.
"""
from __future__ import annotations

import ast
import types
from typing import Dict, List, Optional

import numpy as np

from ...rules import registry
from ..names import assign_node, clone, copy_location, name_node, name_nodes
from . import spelled
from .scope import (
    assigned_names,
    dotted,
    is_atom,
    output_count,
    readable_stem,
    user_bound_call,
    walk_scope,
)

# Objects whose `[i]` reads an item: an index computed here carries no gradient.
_CONTAINERS = (np.ndarray, np.generic, list, tuple, dict, str, bytes, range)


class ExpressionRules:
    """The normaliser's expressions: a part of `_Normalizer` (normalize/__init__.py), which
    owns the state these methods read and write (`self.core`: names, the SSA
    environment, the resolver, the facts) and calls them as `self.expressions`."""

    def __init__(self, core):
        self.core = core

    # -- expressions -----------------------------------------------------------
    def atom(self, expr: ast.expr, out: List[ast.stmt]) -> ast.expr:
        """Reduce `expr` to a variable or constant, emitting statements for it."""
        core = self.core
        if isinstance(expr, ast.Name):
            if expr.id in core.partials:
                raise core.err(expr, f"{expr.id}, a functools.partial made in this function, "
                               f"is used other than by calling it",
                               "Call it where it is made, or make it at module level.")
            core.calls.refuse_unsure_partial(expr)
            if expr.id in core.local_defs:
                # A nested def used as a value is the function itself, lifted (refused
                # if it reads this function's variables: its callers could not see them).
                return core.calls.bound_pure_function(
                    expr, expr, f"the function {expr.id} is used as a value here and")
            if expr.id in core.resolver.locals:
                return copy_location(core.load(expr.id), expr)
            return copy_location(name_node(expr.id), expr)
        if isinstance(expr, ast.Constant):
            return expr
        if isinstance(expr, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in expr.elts):
                return spelled.starred_literal(core, expr, out)
            node = type(expr)(elts=[core.statements.element(e, out) for e in expr.elts],
                              ctx=ast.Load())
            return copy_location(node, expr)
        if isinstance(expr, ast.Attribute) and not core.resolver.is_local_chain(expr):
            ok, _ = core.resolver.static(expr)
            if ok:
                node = clone(expr)
                core.facts.exprs.note(node, static=True)
                return node
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) and \
                isinstance(expr.operand, ast.Constant):
            return expr
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name) and \
                isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, int):
            known = core.tuples.get(core.env.get(expr.value.id, expr.value.id))
            if known is not None and -len(known) <= expr.slice.value < len(known):
                return clone(known[expr.slice.value])
        if isinstance(expr, ast.Dict) and all(k is not None for k in expr.keys):
            name = core.names.fresh("items")
            core.statements.assign_name(name, expr, out, expr)
            return copy_location(core.load(name), expr)
        if isinstance(expr, ast.Call) and output_count(core.resolver, expr) > 1:
            # `SinCos.apply(x)[0]`: the outputs get names, the tuple is a known one.
            name = core.names.fresh("outputs")
            core.statements.assign_name(name, expr, out, expr)
            return copy_location(core.load(name), expr)
        op = self.operation(expr, out)
        name = core.names.fresh(readable_stem(op, core) or "t")
        core.emit(out, assign_node(name, op), expr)
        core.statements.note_owned(name, op)
        return copy_location(name_node(name), expr)

    def operation(self, expr: ast.expr, out: List[ast.stmt]) -> ast.expr:
        """One operation whose operands are atoms."""
        core = self.core
        if isinstance(expr, (ast.Name, ast.Constant)) or is_atom(expr, core.facts.exprs):
            return self.atom(expr, out)
        if isinstance(expr, ast.BinOp):
            left = core.statements.operand(expr.left, out)
            right = core.statements.operand(expr.right, out)
            return copy_location(ast.BinOp(left=left, op=expr.op, right=right), expr)
        if isinstance(expr, ast.UnaryOp):
            if isinstance(expr.op, ast.Not):
                return core.rename_loads(expr)
            operand = core.statements.operand(expr.operand, out)
            return copy_location(ast.UnaryOp(op=expr.op, operand=operand), expr)
        if isinstance(expr, ast.Call):
            return self.call(expr, out)
        if isinstance(expr, ast.Subscript):
            if isinstance(expr.value, ast.Name) and \
                    core.env.get(expr.value.id, expr.value.id) in core.tuples and \
                    isinstance(expr.slice, ast.Constant):
                known = core.tuples[core.env.get(expr.value.id, expr.value.id)]
                return clone(known[expr.slice.value])
            concat = spelled.index_concat(core, expr, out)
            if concat is not None:
                return concat
            base = core.statements.packed(expr.value, out)   # ((x, x ** 2)[k]: see packed)
            index = self.index(expr.slice, out)
            self.check_indexed(expr, base, index)
            return copy_location(ast.Subscript(value=base, slice=index, ctx=ast.Load()), expr)
        if isinstance(expr, ast.Attribute):
            base = self.atom(expr.value, out)
            return copy_location(ast.Attribute(value=base, attr=expr.attr, ctx=ast.Load()),
                                     expr)
        if isinstance(expr, (ast.Tuple, ast.List)):
            return self.atom(expr, out)
        if isinstance(expr, ast.IfExp):
            return self.ifexp(expr, out)
        if isinstance(expr, ast.Dict) and all(k is not None for k in expr.keys):
            return self.atom(expr, out)
        if isinstance(expr, (ast.ListComp, ast.GeneratorExp, ast.DictComp)):
            return self.comprehension(expr, out)
        if isinstance(expr, (ast.Compare, ast.BoolOp)):
            # As a branch's test: a single comparison's operands become statements
            # (a call among them is a call site like any other: its callee may write
            # into its arguments); a user function called inside and/or or a chained
            # comparison is refused.
            return core.control.condition(expr, out)
        if isinstance(expr, (ast.JoinedStr, ast.Dict, ast.Set,
                             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                             ast.Lambda)):
            if not isinstance(expr, ast.Lambda):   # (a lambda's body runs when called)
                core.control.refuse_user_calls(expr, f"a {type(expr).__name__} expression, whose "
                                               f"value carries no gradient",
                                               "Call it in a statement of its own first.")
            node = core.rename_loads(expr)
            core.facts.exprs.note(node, opaque=True)
            return node
        if isinstance(expr, ast.NamedExpr):
            raise core.err(expr, "assignment expressions (:=) are not supported",
                           "Assign in a separate statement.")
        if isinstance(expr, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise core.err(expr, "a yield whose value is used, yield from, and coroutines "
                           "cannot be differentiated (a generator that yields values "
                           "as statements can)",
                           "Yield each value as a statement of its own (`yield v`), or "
                           "return a list.")
        if isinstance(expr, ast.Starred):
            raise core.err(expr, "starred expressions are not supported here")
        raise core.err(expr, f"unsupported expression ({type(expr).__name__})")

    def comprehension(self, expr, out) -> ast.expr:
        """`[f(x) for x in xs if c]` (a generator expression alike, a dict
        comprehension into a dict) as the loop that builds it:

            items = []
            for x_1 in xs:
                if c:
                    items.append(f(x_1))

        The comprehension's variables get names of their own (they are local to it
        in Python), and the loop is normalised like any loop, so its items keep
        their gradients. A generator expression is built as a list: every consumer
        s2sgrad differentiates (sum, max, np.stack, ...) reads all of it."""
        core = self.core
        mapping: Dict[str, str] = {}

        def rename(node):
            node = clone(node)
            for sub in [node, *walk_scope(node)]:
                if isinstance(sub, ast.Name) and sub.id in mapping:
                    sub.id = mapping[sub.id]
            return node
        is_dict = isinstance(expr, ast.DictComp)
        name = core.names.fresh("entries" if is_dict else "items")
        core.resolver.locals.add(name)
        empty = ast.Dict(keys=[], values=[]) if is_dict else ast.List(elts=[], ctx=ast.Load())
        core.statements.assign_name(name, copy_location(empty, expr), out, expr)
        loops = []
        for gen in expr.generators:
            if gen.is_async:
                raise core.err(expr, "asynchronous comprehensions cannot be differentiated")
            iterable = rename(gen.iter)
            for n in name_nodes(gen.target):
                mapping[n.id] = core.names.fresh(n.id)
            loops.append((rename(gen.target), iterable, [rename(c) for c in gen.ifs]))
        target = name_node(name)
        if is_dict:
            inner: ast.stmt = ast.Assign(targets=[ast.Subscript(value=target,
                                                                slice=rename(expr.key),
                                                                ctx=ast.Store())],
                                         value=rename(expr.value))
        else:
            inner = ast.Expr(value=ast.Call(func=ast.Attribute(value=target, attr="append",
                                                               ctx=ast.Load()),
                                            args=[rename(expr.elt)], keywords=[]))
        body: List[ast.stmt] = [inner]
        for loop_target, iterable, conditions in reversed(loops):
            for c in reversed(conditions):
                body = [ast.If(test=c, body=body, orelse=[])]
            body = [ast.For(target=loop_target, iter=iterable, body=body, orelse=[],
                            type_comment=None)]
        loop = body[0]
        for node in [loop, *walk_scope(loop)]:
            if isinstance(node, (ast.stmt, ast.expr)):
                copy_location(node, expr)
        ast.fix_missing_locations(loop)
        assigned = assigned_names([loop]) | set(mapping.values())
        core.resolver.locals |= assigned
        core.unversioned |= assigned
        saved = core.origin
        core.statements.stmt(loop, out)
        core.origin = saved
        return copy_location(core.load(name), expr)

    def builtin_reduction(self, expr: ast.Call, out) -> Optional[ast.expr]:
        """Builtin `sum(xs)`, `sum(xs, start)`, `max(xs)` and `min(xs)` over a list, a
        generator expression or an array's rows, as the loop Python runs:

            total = start                      best = xs[0]
            for item in xs:                    for item in xs[1:]:
                total = total + item               best = max(best, item)

        (max of two values is np.maximum's rule: ties split the gradient)."""
        core = self.core
        if not (isinstance(expr.func, ast.Name) and expr.func.id in ("sum", "max", "min")):
            return None
        ok, fn = core.resolver.static(expr.func)
        if not ok or fn not in (sum, max, min) or any(isinstance(a, ast.Starred)
                                                      for a in expr.args):
            return None
        kind = expr.func.id
        start = None
        if kind == "sum":
            keywords = {k.arg: k.value for k in expr.keywords}
            if len(expr.args) == 2 and not keywords:
                start = expr.args[1]
            elif len(expr.args) == 1 and set(keywords) <= {"start"}:
                start = keywords.get("start")
            else:
                return None
        elif len(expr.args) != 1 or expr.keywords:
            return None   # max(a, b) has a rule; key= and default= are not differentiated
        arg = expr.args[0]
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and \
                arg.func.attr in ("items", "values", "keys") and not arg.args and \
                not arg.keywords:
            # sum(d.values()): the view is walked as a dict loop, into a list.
            value = core.names.fresh("value")
            arg = copy_location(ast.ListComp(
                elt=name_node(value),
                generators=[ast.comprehension(target=name_node(value, True),
                                              iter=arg, ifs=[], is_async=0)]), arg)
            ast.fix_missing_locations(arg)
        items = core.statements.operand(arg, out)
        if kind != "sum" and isinstance(items, ast.Name) and \
                items.id not in core.lists | core.tuple_names:
            items = spelled.walked(core, items, expr, out)   # (read by position below)
        acc = core.statements.user_temp("total" if kind == "sum" else "best")
        item = core.statements.user_temp("item")
        for st in _reduction_loop(kind, items, start, acc, item):
            for node in [st, *walk_scope(st)]:
                if isinstance(node, (ast.stmt, ast.expr)):
                    copy_location(node, expr)
            ast.fix_missing_locations(st)
            saved = core.origin
            core.statements.stmt(st, out)
            core.origin = saved
        return copy_location(core.load(acc), expr)

    def ifexp(self, expr: ast.IfExp, out) -> ast.expr:
        """`a if c else b` becomes an if statement assigning one temporary."""
        core = self.core
        test = core.control.test(expr.test, out, "cond")
        name = core.names.fresh("choice")
        body, orelse = [], []
        env, owned = dict(core.env), set(core.owned)
        body_atom = self.atom(expr.body, body)
        core.emit(body, assign_node(name, body_atom), expr.body)
        core.env, owned_body, core.owned = dict(env), core.owned, owned
        else_atom = self.atom(expr.orelse, orelse)
        core.emit(orelse, assign_node(name, else_atom), expr.orelse)
        core.env = env
        core.owned &= owned_body
        core.emit(out, ast.If(test=test, body=body, orelse=orelse), expr)
        core.unversioned.add(name)
        return name_node(name)

    def check_indexed(self, expr: ast.Subscript, base: ast.expr, index: ast.expr) -> None:
        """Indexing an object that is not a local, with values computed here: only a
        container's items (a global array, list, tuple, dict) are known to carry no
        gradient from the index; any other object's `[...]` may compute with it."""
        core = self.core
        def local(node) -> bool:   # a local or one of the normal form's temporaries
            return isinstance(node, ast.Name) and (
                node.id in core.resolver.locals or
                (node.id in core.names.taken and not core.resolver.static(node)[0]))
        if local(base) or not any(local(n) for n in ast.walk(index)):
            return
        ok, obj = core.resolver.static(base) if dotted(base) else (False, None)
        if ok and isinstance(obj, _CONTAINERS):
            return
        text = ast.unparse(expr.value)
        raise core.err(expr, f"indexing {text} with values computed in this function: "
                       f"s2sgrad cannot tell how {text}[...] uses them",
                       "Use a NumPy function with a gradient rule instead (np.concatenate, "
                       "np.stack, np.arange, ...).")

    def index(self, index: ast.expr, out) -> ast.expr:
        """Atoms inside a subscript: slices keep their shape, bounds become atoms."""
        if isinstance(index, ast.Slice):
            parts = {k: (self.atom(getattr(index, k), out) if getattr(index, k) is not None
                         else None) for k in ("lower", "upper", "step")}
            return copy_location(ast.Slice(**parts), index)
        if isinstance(index, ast.Tuple):
            return copy_location(ast.Tuple(elts=[self.index(e, out) for e in index.elts],
                                               ctx=ast.Load()), index)
        return self.atom(index, out)

    def call(self, expr: ast.Call, out: List[ast.stmt]) -> ast.expr:
        core = self.core
        chosen = spelled.function_of_literal(core, expr.func)   # fns[1](x)
        if chosen is not None:
            expr = copy_location(ast.Call(func=chosen, args=expr.args,
                                          keywords=expr.keywords), expr)
        expr = core.calls.bound_derivative(expr)   # g(x) for g = s2sgrad.grad(f)
        func = expr.func
        derived = core.calls.derivative_call(expr, out)
        if derived is not None:
            return derived
        folded = self.builtin_reduction(expr, out)
        if folded is not None:
            return folded
        if any(isinstance(a, ast.Starred) for a in expr.args):
            expr = spelled.spread_known_items(core, expr, out)
        if any(k.arg is None for k in expr.keywords):
            expr = spelled.spread_known_keywords(core, expr)
        if any(isinstance(a, ast.Starred) for a in expr.args) or any(
                k.arg is None for k in expr.keywords):
            ok, obj = core.resolver.static(func) if dotted(func) and \
                not core.resolver.is_local_chain(func) else (False, None)
            node = core.rename_loads(expr)
            core.facts.exprs.note(node, opaque=True)
            if ok:
                core.facts.exprs.note(node, callee=obj)
            return node
        core.calls.refuse_unsure_partial(func)
        if isinstance(func, ast.Name) and func.id in core.partials:
            inner, args, keywords = core.partials[func.id]
            named = {k.arg: k for k in keywords}
            named.update((k.arg, k) for k in expr.keywords)   # (a call's keyword wins)
            return self.call(copy_location(ast.Call(
                func=clone(inner), args=[clone(a) for a in args] + list(expr.args),
                keywords=list(named.values())), expr), out)
        lam = func if isinstance(func, ast.Lambda) else \
            core.lambdas.get(func.id) if isinstance(func, ast.Name) else None
        if lam is not None:   # g(x) for g = lambda v: ..., or (lambda v: ...)(x)
            return core.calls.lambda_call(expr, lam, out)
        if isinstance(func, ast.Name) and func.id in core.local_defs:
            return core.calls.def_call(expr, core.local_defs[func.id], out)
        if dotted(func) and not core.resolver.is_local_chain(func):
            ok, obj = core.resolver.static(func)
            if not ok:
                raise core.err(func, f"name {ast.unparse(func)!r} is not defined",
                               "Define it before calling the differentiated function.")
            bound = user_bound_call(obj)
            if bound is not None:
                return core.calls.bound_call(expr, bound, out)
            if isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields"):
                return core.calls.record(expr, obj, out)
            rule = registry.lookup_function(obj)
            if rule is None and isinstance(obj, types.FunctionType):
                special = core.special.special_call(expr, obj, out)
                if special is not None:
                    return special
                expr = core.calls.functions_passed(expr)   # (a def or lambda of this function)
            opaque = rule is None and not registry.is_nondiff(obj) and \
                not registry.is_constructor(obj)
            args, keywords = core.calls.rule_arguments(rule, expr.args, expr.keywords, out,
                                                            pack=opaque)
            node = ast.Call(func=clone(func), args=args, keywords=keywords)
            core.facts.exprs.note(node, callee=obj)
            return copy_location(node, expr)
        if isinstance(func, ast.Attribute):
            base = self.atom(func.value, out)
            rule = registry.REGISTRY.methods.get(func.attr)
            args, keywords = core.calls.rule_arguments(rule, expr.args, expr.keywords, out,
                                                            skip_first=True)
            if func.attr in ("append", "insert", "extend"):
                # xs.append((a, b)): the item gets a variable of its own, so that its
                # adjoint (the list's last cotangent) is unpacked into a's and b's.
                args = [core.statements.operand(a, out) for a in expr.args]
            method = ast.Attribute(value=base, attr=func.attr, ctx=ast.Load())
            node = ast.Call(func=copy_location(method, func), args=args, keywords=keywords)
            core.facts.exprs.note(node, method=func.attr)
            return copy_location(node, expr)
        # Calling a local variable or the result of an expression.
        callee = self.atom(func, out)
        args = [core.statements.operand(a, out) for a in expr.args]
        keywords = [ast.keyword(arg=k.arg, value=core.statements.operand(k.value, out))
                    for k in expr.keywords]
        return copy_location(ast.Call(func=callee, args=args, keywords=keywords), expr)


def _reduction_loop(kind: str, items: ast.expr, start: Optional[ast.expr], acc: str,
                    item: str) -> List[ast.stmt]:
    """The loop ExpressionRules.builtin_reduction spells `sum`, `max` or `min` as."""
    if kind == "sum":
        first: ast.expr = start if start is not None else ast.Constant(value=0)
        sequence: ast.expr = items
        step: ast.expr = ast.BinOp(left=name_node(acc), op=ast.Add(), right=name_node(item))
    else:
        first = ast.Subscript(value=clone(items), slice=ast.Constant(value=0), ctx=ast.Load())
        sequence = ast.Subscript(value=clone(items), slice=ast.Slice(
            lower=ast.Constant(value=1), upper=None, step=None), ctx=ast.Load())
        step = ast.Call(func=name_node(kind), args=[name_node(acc), name_node(item)],
                        keywords=[])
    return [ast.Assign(targets=[name_node(acc, True)], value=first),
            ast.For(target=name_node(item, True), iter=sequence,
                    body=[ast.Assign(targets=[name_node(acc, True)], value=step)],
                    orelse=[], type_comment=None)]
