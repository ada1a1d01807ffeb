"""Control flow in normal form: if, while, for (dict and list loops, zip,
enumerate, reversed), conditions and walrus expressions in them, break and
continue.
"""
from __future__ import annotations

import ast
import contextlib
from typing import List, Optional, Set

import numpy as np

from ... import runtime
from ...errors import InternalError
from ..names import assign_node, clone, copy_location, name_node, stored_names
from . import spelled
from .scope import (
    LIBRARIES,
    SCOPES,
    assigned_names,
    dotted,
    drop_trailing_continue,
    lift_jumps,
    walk_scope,
)


class ControlRules:
    """The normaliser's control: a part of `_Normalizer` (normalize/__init__.py), which
    owns the state these methods read and write (`self.core`: names, the SSA
    environment, the resolver, the facts) and calls them as `self.control`."""

    def __init__(self, core):
        self.core = core

    def stmt_If(self, s, out):
        with self.partials_scoped():
            self._stmt_If(s, out)

    def _stmt_If(self, s, out):
        core = self.core
        test = self.test(s.test, out, "cond")
        body, orelse = [], []
        saved = core.origin
        owned = set(core.owned)   # what nothing else refers to holds per path
        core.statements.block(s.body, body)
        owned_body, core.owned = core.owned, owned
        core.origin = saved
        core.statements.block(s.orelse, orelse)
        core.owned &= owned_body
        core.origin = saved
        if isinstance(test, ast.Name) and any(test.id in stored_names(b)
                                              for b in body + orelse):
            # The adjoint chooses the branch before it undoes the branch's assignments:
            # a test the branch reassigns (`if c: c = False`, an early return's flag)
            # would be read with its new value. The branch is taken on a copy.
            tested = core.names.fresh(f"{test.id}_tested")
            core.emit(out, ast.Assign(targets=[name_node(tested, True)],
                                      value=test), s)
            test = name_node(tested)
        node = ast.If(test=test, body=body or [copy_location(ast.Pass(), s)], orelse=orelse)
        core.emit(out, node, s)

    def stmt_While(self, s, out):
        with self.partials_scoped():
            self._stmt_While(s, out)

    def _stmt_While(self, s, out):
        core = self.core
        if s.orelse:   # (loop_else.py wrote every else block with a flag before)
            raise InternalError("a while loop's else block was not written with a flag")
        body = list(s.body)
        test = s.test
        resolver = self.core.resolver
        if any(isinstance(n, ast.NamedExpr) or (isinstance(n, ast.Call) and
                                                 not _library_call(n, resolver))
               for n in walk_scope(test) + [test]):
            # `while (v := f(x)) > 0: ...` is `while True: if ...: pass else: break; ...`,
            # so the assignment (or a call) runs as a statement before each test.
            stop = ast.If(test=test, body=[copy_location(ast.Pass(), s)],
                          orelse=[copy_location(ast.Break(), s)])
            body = [copy_location(stop, test)] + body
            test = copy_location(ast.Constant(value=True), test)
        body = lift_jumps(body, (ast.Break, ast.Continue))
        body = drop_trailing_continue(body)
        inner: List[ast.stmt] = []
        saved = core.origin
        entry = self.enter_loop(body)
        core.loop_depth += 1
        core.statements.block(body, inner)
        core.loop_depth -= 1
        core.owned &= entry
        core.origin = saved
        node = ast.While(test=core.rename_loads(test),
                         body=inner or [copy_location(ast.Pass(), s)], orelse=[])
        core.emit(out, node, s)

    def dict_loop(self, s: ast.For) -> Optional[ast.For]:
        """`for k, v in d.items()`, `for v in d.values()`, `for k in d.keys()` (and
        `for k in d` over a dict literal or a name bound to one) as a loop over the
        keys, which carry no gradient, reading each value as `d[k]`."""
        core = self.core
        it = s.iter
        method = None
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and \
                it.func.attr in ("items", "values", "keys") and not it.args and \
                not it.keywords:
            method, base = it.func.attr, it.func.value
        elif isinstance(it, ast.Name) and core.env.get(it.id, it.id) in core.dict_names or \
                isinstance(it, (ast.Dict, ast.DictComp)):   # (`for k in {...}`: its keys)
            method, base = "keys", it
        if method is None:
            return None
        target, prefix = s.target, []
        if method == "keys":
            key = target
        elif method == "values":
            key = name_node(core.names.fresh("key"), True)
            prefix = [ast.Assign(targets=[target], value=ast.Subscript(
                value=clone(base), slice=name_node(key.id), ctx=ast.Load()))]
        elif isinstance(target, ast.Tuple) and len(target.elts) == 2:
            key, value = target.elts
            if not isinstance(key, ast.Name):
                key = name_node(core.names.fresh("key"), True)
                prefix.append(ast.Assign(targets=[target.elts[0]],
                                         value=name_node(key.id)))
            prefix.append(ast.Assign(targets=[value], value=ast.Subscript(
                value=clone(base), slice=name_node(key.id), ctx=ast.Load())))
        else:
            key = name_node(core.names.fresh("key"), True)
            pair = ast.Tuple(elts=[name_node(key.id), ast.Subscript(
                value=clone(base), slice=name_node(key.id), ctx=ast.Load())],
                ctx=ast.Load())
            prefix = [ast.Assign(targets=[target], value=pair)]
        for p in prefix:
            copy_location(p, s)
            ast.fix_missing_locations(p)
        keys = copy_location(ast.Call(func=name_node("_s2s_keys"),
                                          args=[clone(base)], keywords=[]), it)
        loop = ast.For(target=key, iter=keys, body=prefix + list(s.body), orelse=[],
                       type_comment=None)
        core.resolver.locals |= assigned_names([loop])
        core.unversioned |= assigned_names([loop])
        return copy_location(loop, s)

    def enumerate_from(self, s: ast.For, out) -> ast.For:
        """`for k, v in enumerate(xs, start)`: the loop walks enumerate(xs) and its body
        first sets k to that index plus start (evaluated once, before the loop, as
        Python does); the transforms read enumerate's first argument only."""
        core = self.core
        it = s.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and
                it.func.id == "enumerate" and it.func.id not in core.resolver.locals):
            return s
        ok, obj = core.resolver.static(it.func)
        if not ok or obj is not enumerate or (len(it.args) == 1 and not it.keywords):
            return s
        starts = it.args[1:] + [k.value for k in it.keywords if k.arg == "start"]
        if len(it.args) < 1 or len(starts) != 1 or \
                any(k.arg != "start" for k in it.keywords):
            raise core.err(it, "enumerate() with these arguments",
                           "Call it as enumerate(xs) or enumerate(xs, start).")
        target = s.target
        if not (isinstance(target, ast.Tuple) and len(target.elts) == 2 and
                isinstance(target.elts[0], ast.Name)):
            raise core.err(target, "enumerate(xs, start) into this loop target",
                           "Unpack it as `for k, item in enumerate(xs, start):`.")
        start = core.expressions.atom(starts[0], out)
        if isinstance(start, ast.Name):   # the body may rebind it; Python read it once
            held = core.names.fresh(f"{start.id}_start")
            core.emit(out, assign_node(held, start), starts[0])
            start = name_node(held)
        counter = target.elts[0].id
        index = core.names.fresh(f"{counter}_from_0")
        offset = ast.Assign(targets=[name_node(counter, True)],
                            value=ast.BinOp(left=name_node(index), op=ast.Add(), right=start))
        loop = ast.For(target=ast.Tuple(elts=[name_node(index, True), target.elts[1]],
                                        ctx=ast.Store()),
                       iter=copy_location(ast.Call(func=it.func, args=[it.args[0]],
                                                   keywords=[]), it),
                       body=[copy_location(offset, s)] + list(s.body), orelse=[],
                       type_comment=None)
        ast.fix_missing_locations(loop)
        core.resolver.locals |= assigned_names([loop])
        core.unversioned |= assigned_names([loop])
        return copy_location(loop, s)

    def stmt_For(self, s, out):
        unrolled = spelled.unrolled_over_functions(self.core, s)
        if unrolled is not None:
            self.core.statements.block(unrolled, out)
            return
        with self.partials_scoped():
            self._stmt_For(s, out)

    def _stmt_For(self, s, out):
        core = self.core
        if s.orelse:   # (loop_else.py wrote every else block with a flag before)
            raise InternalError("a for loop's else block was not written with a flag")
        s = self.separate_loop_variables(s)
        over_keys = self.dict_loop(s)
        if over_keys is not None:
            s = over_keys
        s = self.enumerate_from(s, out)
        iterable = self.iterable(s.iter, out)
        # Python iterates over the object the header named; a body that rebinds the
        # name (`for r in acc: acc = r * w`) must not change what is iterated.
        rebound = assigned_names(s.body) | assigned_names([s.target])
        for node in walk_scope(iterable) + [iterable]:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                    node.id in rebound and node.id in core.resolver.locals:
                held = core.names.fresh(f"{node.id}_iterated")
                core.emit(out, assign_node(held, name_node(node.id)), s.iter)
                node.id = held
        body = lift_jumps(list(s.body), (ast.Break, ast.Continue))
        body = drop_trailing_continue(body)
        target = self.loop_target(s.target)
        inner: List[ast.stmt] = []
        saved = core.origin
        entry = self.enter_loop(body + [ast.Assign(targets=[s.target], value=s.iter)])
        core.loop_depth += 1
        core.statements.block(body, inner)
        core.loop_depth -= 1
        core.owned &= entry
        core.origin = saved
        node = ast.For(target=target, iter=iterable,
                       body=inner or [copy_location(ast.Pass(), s)], orelse=[],
                       type_comment=None)
        core.emit(out, node, s)

    @contextlib.contextmanager
    def partials_scoped(self):
        """A partial bound in a branch or a loop body is known there, after its
        binding; after the statement the name may hold another value (the other
        branch's, the one before a loop that ran no time): its calls are refused."""
        core = self.core
        before = dict(core.partials)
        try:
            yield
        finally:
            for name, known in list(core.partials.items()):
                if before.get(name) is not known:
                    del core.partials[name]
                    core.partials_unsure.add(name)

    def separate_loop_variables(self, s: ast.For) -> ast.For:
        """`for i in ...:` whose body rebinds `i` (`i = n - 1 - i`, `i += 1`, a loop
        inside it that also iterates over `i`, or one a pass unrolled into `i = 0;
        ...; i = 1; ...`): the rest of the body reads the changed `i`, and the adjoint,
        which sets each loop's variable from its range, would read the wrong value
        (silently wrong gradients once). Each such loop gets a variable of its own
        and assigns `i` from it as the first statement of its body, so `i` is an
        ordinary variable, saved and restored like any other."""
        shared = _target_names(s.target) & assigned_names(s.body)
        if not shared:
            return s
        nested = [f for f in walk_scope(ast.Module(body=s.body, type_ignores=[]),
                                        statements_only=True)
                  if isinstance(f, ast.For) and _target_names(f.target) & shared]
        for loop in [s] + nested:
            fresh = {}
            for node in ast.walk(loop.target):
                if isinstance(node, ast.Name) and node.id in shared:
                    fresh[node.id] = node.id = self.core.names.fresh(f"{node.id}_loop")
            loop.body = [copy_location(assign_node(name_node(user, True), name_node(held)),
                                       loop)
                         for user, held in fresh.items()] + loop.body
        return s

    def enter_loop(self, body: List[ast.stmt]) -> Set[str]:
        """At a loop's head, a name the body assigns may hold what the previous
        iteration left, which another variable may share: not owned. Returns what
        is owned there (also after the loop, which may run zero times)."""
        self.core.owned -= assigned_names(body)
        return set(self.core.owned)

    def loop_target(self, target):
        if isinstance(target, ast.Name):
            self.core.env[target.id] = target.id
            return name_node(target.id, True)
        if isinstance(target, (ast.Tuple, ast.List)):
            return ast.Tuple(elts=[self.loop_target(e) for e in target.elts], ctx=ast.Store())
        raise self.core.err(target, "loop targets must be names or tuples of names")

    def iterable(self, it, out):
        """range/zip/enumerate keep their call (the transform reads them); else an atom."""
        core = self.core
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and \
                it.func.id == "_s2s_keys":
            call = ast.Call(func=name_node(it.func.id),
                            args=[core.expressions.atom(a, out) for a in it.args], keywords=[])
            core.facts.exprs.note(call, callee=runtime.keys)
            return copy_location(call, it)
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and \
                it.func.id == "_s2s_backwards":
            call = ast.Call(func=name_node(it.func.id),
                            args=[core.expressions.atom(a, out) for a in it.args], keywords=[])
            ok, obj = core.resolver.static(it.func)
            if ok:
                core.facts.exprs.note(call, callee=obj)
            return copy_location(call, it)
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and \
                it.func.id in ("range", "zip", "enumerate", "reversed") and not it.keywords:
            ok, obj = core.resolver.static(it.func)
            if ok and obj is {"range": range, "zip": zip, "enumerate": enumerate,
                              "reversed": reversed}[it.func.id]:
                args = [self.iterable(a, out) if it.func.id in ("zip", "enumerate", "reversed")
                        else core.expressions.atom(a, out) for a in it.args]
                call = ast.Call(func=name_node(it.func.id), args=args,
                                keywords=[])
                core.facts.exprs.note(call, callee=obj)
                return copy_location(call, it)
        # `for t in [x, x ** 2]`: the literal gets a name, so that the items the loop
        # reads can hand their adjoints back to x and x ** 2.
        atom = core.statements.operand(it, out)
        if isinstance(atom, ast.Name) and (atom.id in core.dict_names or (
                atom.id in core.resolver.locals | core.names.taken and
                atom.id not in core.lists | core.tuple_names)):
            # Maybe a dict (an argument, an item of one): Python walks its keys. The
            # transform makes this a plain copy where the value is proven an array.
            # (A dict literal's name gets here inside zip() or enumerate(); a loop
            # over it alone is dict_loop's.)
            return spelled.walked(core, atom, it, out)
        return atom

    def test(self, expr, out, stem) -> ast.expr:
        """A branch condition: non-differentiable, computed into a flag variable.

        Assignment expressions in it (`if (s := np.sum(x)) > 0:`) become statements
        before it, in evaluation order, so the value they bind keeps its gradient."""
        core = self.core
        expr = self.hoist_walrus(expr, out)
        if isinstance(expr, ast.Name):
            return core.load(expr.id)
        if isinstance(expr, ast.Call):
            # `if h(x):` is a call like any other (its callee may be differentiated
            # or write into its arguments): the flag is its result.
            return core.expressions.atom(expr, out)
        name = core.names.fresh(stem)
        core.emit(out, assign_node(name, self.condition(expr, out)), expr)
        return name_node(name)

    def condition(self, expr: ast.expr, out) -> ast.expr:
        """A comparison or and/or kept whole (it has no gradient). A single
        comparison's operands are computed first, as statements the analyses see;
        a call inside and/or or a chained comparison (evaluated only on some
        paths) to a user function is refused: it could write into its arguments."""
        core = self.core
        if isinstance(expr, ast.Compare) and len(expr.comparators) == 1:
            left = core.statements.operand(expr.left, out)
            right = core.statements.operand(expr.comparators[0], out)
            node = ast.Compare(left=left, ops=list(expr.ops), comparators=[right])
            core.facts.exprs.note(node, opaque=True)
            return copy_location(node, expr)
        self.refuse_user_calls(expr, "a condition that runs only on some paths",
                               "Call it in a statement of its own before the condition.")
        # Kept whole: a flag (a chained comparison, and/or of comparisons) carries no
        # gradient; and/or of values is refused where a gradient would flow through it.
        node = core.rename_loads(expr)
        core.facts.exprs.note(node, opaque=True)
        return node

    def refuse_user_calls(self, expr: ast.expr, where: str, hint: str) -> None:
        """A call that may be to a user function (which may write into its arguments)
        inside `expr`, which is kept whole, is refused: the analyses would not see it."""
        for sub in walk_scope(expr):
            if isinstance(sub, ast.Call) and not _library_call(sub, self.core.resolver):
                raise self.core.err(sub, f"a call to {ast.unparse(sub.func)} inside {where}", hint)

    def hoist_walrus(self, expr: ast.expr, out) -> ast.expr:
        """`(s := v)` -> a statement `s = v` emitted now and the name `s` in its place;
        a call to a user function -> a statement computing it, and its result.

        Only where Python always evaluates it: not inside the later operands of
        and/or, the branches of a conditional expression, or a nested scope."""
        core = self.core
        if not any(isinstance(n, ast.NamedExpr) or (isinstance(n, ast.Call) and
                                                     not _library_call(n, core.resolver))
                   for n in walk_scope(expr) + [expr]):
            return expr

        def visit(node, always: bool):
            if isinstance(node, ast.NamedExpr):
                if not always:
                    raise core.err(node, "an assignment expression (:=) that runs only on "
                                   "some paths of the condition",
                                   "Assign the value in a statement before the condition.")
                value = visit(node.value, always)
                core.statements.assign_name(node.target.id, value, out, node)
                return copy_location(name_node(node.target.id), node)
            if isinstance(node, SCOPES + (ast.ListComp, ast.SetComp, ast.DictComp,
                                           ast.GeneratorExp)):
                return node
            if isinstance(node, ast.Call) and always and not _library_call(node, core.resolver):
                # A user function called on every path: a statement of its own (its
                # result may carry a gradient; it may write into its arguments).
                return core.expressions.atom(node, out)
            if isinstance(node, ast.BoolOp):
                first, *rest = node.values
                node.values = [visit(first, always)] + [visit(v, False) for v in rest]
                return node
            if isinstance(node, ast.IfExp):
                node.test = visit(node.test, always)
                node.body, node.orelse = visit(node.body, False), visit(node.orelse, False)
                return node
            for field_name, value in ast.iter_fields(node):
                if isinstance(value, ast.AST):
                    setattr(node, field_name, visit(value, always))
                elif isinstance(value, list):
                    setattr(node, field_name, [visit(v, always) if isinstance(v, ast.AST)
                                               else v for v in value])
            return node
        return visit(clone(expr), True)

    def stmt_Break(self, s, out):
        self.core.emit(out, ast.Break(), s)

    def stmt_Continue(self, s, out):
        self.core.emit(out, ast.Continue(), s)


def _target_names(target: ast.expr) -> Set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _library_call(call: ast.Call, resolver) -> bool:
    """A call of NumPy, SciPy, math or a builtin, which leaves its arguments
    alone (unless given out=): anything else may be a user function."""
    if not dotted(call.func) or resolver.is_local_chain(call.func) or \
            any(k.arg == "out" for k in call.keywords):
        return False
    ok, fn = resolver.static(call.func)
    module = (getattr(fn, "__module__", "") or "") if ok else ""
    if ok and isinstance(fn, np.ufunc):
        return True
    return ok and module.split(".")[0] in LIBRARIES and callable(fn)
