"""A helper specialised for the closures a call passes it.

`apply(act, x)`, where `act` is a def (or lambda) of the differentiated function
that reads its variables (`W`), cannot call `apply` as it is: compiled on its
own, `apply` would see `act` as a constant function and `W`'s gradient would be
lost. So the call calls a copy of `apply` made for it instead: the parameter
that receives `act` is gone, each call of it in the body calls `act` lifted
(`act(z, W)`, the variables it reads as trailing parameters), and those
variables are parameters of the copy, passed at the call. Their values are
those at the call, which is when Python's closure reads them too (the caller
is suspended while the helper runs). A copy is made only where every use of
the parameter in the helper is a call of it; anything else (storing the
function, passing it on, rebinding the parameter) keeps the refusal.
"""
from __future__ import annotations

import ast
import copy
import inspect
import itertools
import types
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

from ..loader import Emitted, load
from ..names import NameRegistry, names_in
from ..parse import ParsedFunction

_COUNTER = itertools.count()


class NotSpecialisable(Exception):
    """Why the helper cannot be copied for the closures (the reason of a refusal)."""


@dataclass(frozen=True)
class Passed:
    """A closure passed to the helper's parameter `param`: the function lifted (the
    outer variables it reads are its trailing parameters) and those variables."""

    param: str
    lifted: Callable
    free: Tuple[str, ...]


def specialised(helper: types.FunctionType, parsed: ParsedFunction,
                passed: Sequence[Passed]) -> Tuple[types.FunctionType, List[str]]:
    """The copy of `helper` without the parameters in `passed`, calling the lifted
    functions instead, and its parameters in order (the helper's others, then one
    per outer variable of each closure)."""
    node = copy.deepcopy(parsed.node)
    a = node.args
    if a.vararg or a.kwarg:
        raise NotSpecialisable(f"{helper.__name__} takes *args or **kwargs")
    by_param = {p.param: p for p in passed}
    registry = NameRegistry(names_in(node))
    called: Dict[str, str] = {p.param: registry.fresh(f"{p.param}_lifted") for p in passed}
    extra = {p.param: [(v, registry.fresh(v)) for v in p.free] for p in passed}
    _calls_only(node, set(by_param), helper.__name__)
    _Redirect(called, extra).visit(node)
    kept = [arg.arg for arg in a.posonlyargs + a.args if arg.arg not in by_param]
    added = [v for p in passed for _, v in extra[p.param]]
    keyword_only = [arg for arg in a.kwonlyargs if arg.arg not in by_param]
    # (no defaults: the call passes every argument, the helper's defaults included)
    node.args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in kept + added],
                              vararg=None, kwonlyargs=keyword_only,
                              kw_defaults=[None] * len(keyword_only), kwarg=None, defaults=[])
    node.decorator_list = []
    names = ", ".join(f"{p.param}={getattr(p.lifted, '__name__', 'function')}"
                      for p in passed)
    source = (f"# s2sgrad: {helper.__name__} for the closures passed to it ({names})\n"
              + ast.unparse(ast.fix_missing_locations(node)) + "\n")
    filename = (f"<s2sgrad {helper.__name__} for {names} at {parsed.filename}:"
                f"{parsed.node.lineno} #{next(_COUNTER)}>")
    free: Dict[str, Any] = {called[p.param]: p.lifted for p in passed}
    functions = load(Emitted(source=source, function_names=[node.name], filename=filename,
                             globals=parsed.globals, free=free,
                             closure_cells=dict(parsed.closure)))
    return functions[node.name], kept


def _calls_only(node: ast.FunctionDef, params: set, helper: str) -> None:
    """Refuse a helper that uses one of `params` other than by calling it."""
    calls = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    own = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    for sub in ast.walk(node):
        if isinstance(sub, ast.arg) and sub.arg in params and sub not in own:
            raise NotSpecialisable(f"{helper} binds the name {sub.arg} again inside")
        if isinstance(sub, ast.Name) and sub.id in params:
            if not isinstance(sub.ctx, ast.Load):
                raise NotSpecialisable(f"{helper} assigns to its parameter {sub.id}")
            if id(sub) not in calls:
                raise NotSpecialisable(f"{helper} uses its parameter {sub.id} other than "
                                       f"by calling it")


class _Redirect(ast.NodeTransformer):
    """`fn(a, b)` -> `fn_lifted(a, b, W=W_1)` for each closure parameter `fn` (by
    keyword: the call may name the function's own parameters too)."""

    def __init__(self, called: Dict[str, str], extra: Dict[str, List[Tuple[str, str]]]):
        self.called, self.extra = called, extra

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id in self.called:
            node.keywords = node.keywords + [
                ast.keyword(arg=outer, value=ast.Name(id=param, ctx=ast.Load()))
                for outer, param in self.extra[func.id]]
            node.func = ast.Name(id=self.called[func.id], ctx=ast.Load())
        return node


def bind_arguments(helper: Callable, call: ast.Call) -> inspect.BoundArguments:
    """The call's arguments bound to the helper's parameters, defaults applied (a
    default is the object itself, not a node)."""
    bound = inspect.signature(helper).bind(*call.args,
                                           **{k.arg: k.value for k in call.keywords})
    bound.apply_defaults()
    return bound
