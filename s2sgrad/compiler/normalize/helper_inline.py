"""A helper that appends to a list the caller passes it, inlined at the call.

    def add_layer(acts, W):
        acts.append(np.tanh(W @ acts[-1]))

    def loss(W, x):
        acts = [x]
        add_layer(acts, W)
        ...

Compiled on its own, `add_layer` would append to the caller's list behind the
caller's back (its gradient would not see the new items; this was refused). So
the call is replaced by the helper's body, as Python runs it: the list
parameter is the caller's own variable (`acts.append(...)` in the caller, which
the caller's analysis sees like any write it makes), every other parameter a
variable of its own bound to the argument, the helper's locals renamed so that
they meet none of the caller's, the names it reads from its module bound to
what they are there, its result the value of the call. Every statement takes
the call's position, so an error in it points at the call. Only where this is
exactly what Python does: a plain function with its source, no closure,
decorators, nested functions or scopes, `global`/`nonlocal`, `yield` or early
`return`, not already being inlined (recursion), whose list parameters are
only appended to (or extended) and read, and whose arguments there are names
of the caller. Anything else keeps the refusal.
"""
from __future__ import annotations

import ast
import copy
import inspect
import types
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Set

from ...introspect import unwrap
from ..names import NameRegistry, copy_location

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)
_REFUSED = (ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await, ast.Try,
            ast.With, ast.AsyncWith, ast.AsyncFor, ast.Delete)


class NotInlinable(Exception):
    """Why the body cannot stand at the call as Python would run it."""


@dataclass
class Inlined:
    """The statements standing for the call, and the expression of its result."""

    body: List[ast.stmt]
    result: ast.expr


def may_append(helper: types.FunctionType) -> bool:
    """Whether the helper's code (nested code included) names an `append` or `extend`
    attribute at all: a cheap test before its source is parsed (most calls of a
    user's function, or of generated code, append to nothing). True where the code
    parsed would not be this function's own (a wrapper, s2sgrad.grad(f) & co.)."""
    fn = unwrap(helper)
    if not isinstance(fn, types.FunctionType) or hasattr(fn, "__s2sgrad_derived__"):
        return True
    todo = [fn.__code__]
    while todo:
        code = todo.pop()
        if "append" in code.co_names or "extend" in code.co_names:
            return True
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return False


def appended_parameters(node: ast.FunctionDef) -> Set[str]:
    """The parameters the helper appends to or extends (`p.append(v)`), if every
    other use of them only reads them and none is bound again; else empty."""
    params = {a.arg for a in node.args.posonlyargs + node.args.args}
    grown: Set[str] = set()
    calls = {id(n.func.value) for n in ast.walk(node)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and
             n.func.attr in ("append", "extend") and isinstance(n.func.value, ast.Name)}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in params:
            if not isinstance(sub.ctx, ast.Load):
                return set()
            if id(sub) in calls:
                grown.add(sub.id)
    for sub in ast.walk(node):   # any other method called on them: not only reads
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and \
                isinstance(sub.func.value, ast.Name) and sub.func.value.id in grown and \
                sub.func.attr not in ("append", "extend", "index", "count", "copy"):
            return set()
        if isinstance(sub, (ast.Subscript, ast.Attribute)) and \
                not isinstance(sub.ctx, ast.Load) and \
                isinstance(sub.value, ast.Name) and sub.value.id in grown:
            return set()
    return grown


def why_not(helper: types.FunctionType, node: ast.FunctionDef) -> Optional[str]:
    """Why the helper cannot be inlined as Python runs it, or None."""
    if helper.__closure__:
        return "it reads variables of a function around it"
    if node.decorator_list:
        return "it is decorated"
    a = node.args
    if a.vararg or a.kwarg or a.kwonlyargs:
        return "it takes *args, **kwargs or keyword-only parameters"
    for sub in ast.walk(node):
        if sub is not node and isinstance(sub, _SCOPES):
            return "it defines a function, lambda, class or comprehension inside"
        if isinstance(sub, _REFUSED):
            return f"it has a {type(sub).__name__} statement"
    returns = [s for s in ast.walk(node) if isinstance(s, ast.Return)]
    if returns and (len(returns) > 1 or node.body[-1] is not returns[0]):
        return "it returns other than by its last statement"
    return None


def inline(helper: types.FunctionType, node: ast.FunctionDef, call: ast.Call,
           in_place: Set[str], names: NameRegistry,
           bind: Callable[[str, object], str], readable: Callable[[str, object], bool]
           ) -> Inlined:
    """The helper's body for `call`. `in_place`: its parameters that become the
    caller's variables (the arguments there are names); `bind(name, value)` gives a
    caller name bound to an object of the helper's module; `readable(name, value)`
    says whether the caller reads `name` as that very object already."""
    sig = inspect.signature(helper)
    bound = sig.bind(*call.args, **{k.arg: k.value for k in call.keywords})
    bound.apply_defaults()
    locals_ = _bound_names(node)
    rename: Dict[str, str] = {}
    prelude: List[ast.stmt] = []
    for p in sig.parameters:
        value = bound.arguments[p]
        if p in in_place:
            rename[p] = value.id
            continue
        rename[p] = names.fresh(p)
        if not isinstance(value, ast.AST):   # a default: the object itself
            value = ast.Name(id=bind(p, value), ctx=ast.Load()) if not _literal(value) \
                else ast.Constant(value=value)
        prelude.append(ast.Assign(targets=[ast.Name(id=rename[p], ctx=ast.Store())],
                                  value=copy.deepcopy(value)))
    for n in sorted(locals_ - set(sig.parameters)):
        rename[n] = names.fresh(n)
    for sub in ast.walk(node):   # names of the helper's module (and builtins)
        if isinstance(sub, ast.Name) and sub.id not in rename and sub.id not in locals_:
            value = _module_value(helper, sub.id)
            if value is _MISSING:   # (Python would raise NameError; the caller may
                # define the name, which the inlined code would read instead)
                raise NotInlinable(f"it reads {sub.id}, which its module does not define")
            if not readable(sub.id, value):
                rename[sub.id] = bind(sub.id, value)
    body = [copy.deepcopy(s) for s in node.body]
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]   # (the docstring)
    result: ast.expr = ast.Constant(value=None)
    if body and isinstance(body[-1], ast.Return):
        result = body.pop().value or ast.Constant(value=None)
    # (the helper's names only: the prelude's values are the caller's expressions)
    for part in body + [result]:
        for sub in ast.walk(part):
            if isinstance(sub, ast.Name) and sub.id in rename:
                sub.id = rename[sub.id]
    out = prelude + body
    for s in out:   # every statement stands where the call stands
        for sub in ast.walk(s):
            if hasattr(sub, "lineno"):
                copy_location(sub, call)
                sub.end_lineno, sub.end_col_offset = call.end_lineno, call.end_col_offset
    for sub in ast.walk(result):
        if hasattr(sub, "lineno"):
            copy_location(sub, call)
    return Inlined(out, result)


_MISSING = object()


def _module_value(helper: types.FunctionType, name: str):
    namespace = helper.__globals__
    if name in namespace:
        return namespace[name]
    builtins = namespace.get("__builtins__", {})
    builtins = builtins if isinstance(builtins, dict) else vars(builtins)
    return builtins.get(name, _MISSING)


def _literal(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _bound_names(node: ast.FunctionDef) -> Set[str]:
    out = {a.arg for a in node.args.posonlyargs + node.args.args}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            out.add(sub.id)
    return out
