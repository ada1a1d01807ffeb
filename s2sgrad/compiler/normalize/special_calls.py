"""Calls of the user's functions that cannot be compiled as they are: a helper that
appends to a list its caller passes (inlined at the call, normalize.helper_inline)
and one given a def or lambda that reads the caller's variables (a copy made for
it, normalize.closures). A part of `_Normalizer`, like CallRules."""
from __future__ import annotations

import ast
import types
from typing import List, Optional

from ...errors import TransformError
from ..names import copy_location, name_node
from ..parse import parse_function
from .closures import NotSpecialisable, Passed, bind_arguments, specialised
from .helper_inline import NotInlinable, appended_parameters, inline, may_append, why_not
from .scope import assigned_in_compound, assigned_names


class SpecialCalls:
    """The normaliser's calls of helpers copied or inlined for their call: a part of
    `_Normalizer` (normalize/__init__.py), whose state it reads as `self.core`, and
    which calls it as `self.special`."""

    def __init__(self, core):
        self.core = core

    def special_call(self, expr: ast.Call, helper: types.FunctionType,
                     out) -> Optional[ast.expr]:
        """A call of a function of the user's that cannot be compiled as it is: one
        that appends to a list the caller passes (inlined_appends), or one given a
        closure (closures_passed); None for any other call."""
        inlined = self.inlined_appends(expr, helper, out)
        return inlined if inlined is not None else self.closures_passed(expr, helper, out)

    def inlined_appends(self, expr: ast.Call, helper: types.FunctionType,
                        out) -> Optional[ast.expr]:
        """`add_layer(acts, W)` where add_layer appends to its parameter: its body,
        inlined here (normalize.helper_inline); None where it appends to nothing."""
        core = self.core
        if not may_append(helper):
            return None
        try:
            parsed = parse_function(helper)
        except TransformError:
            return None
        grown = appended_parameters(parsed.node)
        if not grown:
            return None
        try:
            bound = bind_arguments(helper, expr)
        except TypeError:
            return None
        passed = {p: bound.arguments.get(p) for p in grown}
        if not all(isinstance(a, ast.Name) and a.id in core.resolver.locals
                   for a in passed.values()):
            return None   # (the run-time guard refuses an array passed there)
        reason = why_not(helper, parsed.node) or (
            "it calls itself" if helper in core.inlining else None)
        if reason is not None:
            name = sorted(passed)[0]
            raise core.err(expr, f"{helper.__name__} appends to the list passed as {name}, "
                           f"and its body cannot be inlined here: {reason}",
                           f"Return the new items from {helper.__name__} and extend the "
                           f"list in the caller.")
        resolver = core.resolver

        def bind(name: str, value) -> str:
            fresh = core.names.fresh(name)
            resolver.bound[fresh] = value
            core.bindings[fresh] = value
            return fresh

        def readable(name: str, value) -> bool:
            if name in resolver.locals:
                return False
            ok, found = resolver.static(ast.Name(id=name, ctx=ast.Load()))
            if ok and found is value:
                core.names.taken.add(name)   # (no temporary may take it after)
                return True
            return False

        try:
            done = inline(helper, parsed.node, expr, set(grown), core.names, bind, readable)
        except NotInlinable as exc:
            raise core.err(expr, f"{helper.__name__} appends to the list passed as "
                           f"{sorted(passed)[0]}, and its body cannot be inlined here: {exc}",
                           f"Return the new items from {helper.__name__} and extend the "
                           f"list in the caller.") from None
        own = assigned_names(done.body)
        resolver.locals |= own
        core.user_names |= own   # (a write a local of the helper would see: refused)
        core.unversioned |= assigned_in_compound(done.body)
        core.inlining.add(helper)
        try:
            for s in done.body:
                core.statements.stmt(s, out)
            result = core.statements.operand(done.result, out)
        finally:
            core.inlining.discard(helper)
        core.inlined.append(helper)
        return result

    def closures_passed(self, expr: ast.Call, helper: types.FunctionType,
                        out) -> Optional[ast.expr]:
        """`apply(act, x)` where `act` is a def or lambda of this function that reads
        its variables: a call of a copy of `apply` made for it (normalize.closures),
        the variables passed at the call; None when no argument is such a closure."""
        core = self.core
        try:
            bound = bind_arguments(helper, expr)
        except TypeError:
            return None
        passed: List[Passed] = []
        for param, value in bound.arguments.items():
            node = value
            if isinstance(value, ast.Name) and value.id in core.lambdas:
                node = core.lambdas[value.id]
            elif not (isinstance(value, ast.Lambda) or
                      (isinstance(value, ast.Name) and value.id in core.local_defs)):
                continue
            fn, free = core.calls.differentiated_function(node, value)
            if free:
                passed.append(Passed(param, fn, tuple(free)))
        if not passed:
            return None
        first = bound.arguments[passed[0].param]
        try:
            copied, kept = specialised(helper, parse_function(helper), passed)
        except (NotSpecialisable, TransformError) as exc:
            reason = exc.reason if isinstance(exc, TransformError) else str(exc)
            raise core.err(first, f"this function, passed to {helper.__name__}, reads "
                           f"{', '.join(passed[0].free)} of the function around it, and "
                           f"{helper.__name__} cannot be compiled for it: {reason}",
                           "Pass those values as arguments too, or define the function "
                           "at module level.") from None
        args = [self._argument(bound.arguments[name]) for name in kept]
        removed = {p.param for p in passed}
        keywords = [ast.keyword(arg=p.name, value=self._argument(bound.arguments[p.name]))
                    for p in bound.signature.parameters.values()
                    if p.kind is p.KEYWORD_ONLY and p.name not in removed]
        call = core.calls.functions_passed(copy_location(
            ast.Call(func=expr.func, args=args, keywords=keywords), expr))
        return core.calls.call_of(copied, [], {}, call, [v for p in passed for v in p.free], out)

    def _argument(self, value) -> ast.expr:
        """An argument of a call as a node: itself, or the default value the helper
        would use (a constant, or a name bound to it in the generated code)."""
        if isinstance(value, ast.AST):
            return value
        if value is None or isinstance(value, (bool, int, float, str)):
            return ast.Constant(value=value)
        name = self.core.names.fresh("default")
        self.core.bindings[name] = value
        self.core.resolver.bound[name] = value
        return name_node(name)
