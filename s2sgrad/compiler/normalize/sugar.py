"""Container constructors and dict.get, written as the literals and expressions the
normaliser already differentiates (before it runs):

    tuple((w, v)), list([a, b])   ->  (w, v), [a, b]
    list(xs)                      ->  [item for item in xs]   (rows of an array too)
    dict(a=x, b=y)                ->  {"a": x, "b": y}
    dict(d)                       ->  {key: d[key] for key in d}
    d.get(k), d.get(k, default)   ->  (d[k] if k in d else default)

Only where the name is Python's own builtin (the resolver says so) and the call
has exactly these forms; anything else is left for the normaliser to judge.
"""
from __future__ import annotations

import ast
from typing import List, Optional

from ..names import clone, copy_location


def desugar(body: List[ast.stmt], resolver) -> Optional[List[ast.stmt]]:
    """A copy of body with the constructors above rewritten, or None where there
    is none (the caller keeps its tree)."""
    rewriter = _Sugar(resolver)
    if not any(rewriter.replacement(n) is not None for n in _calls(body)):
        return None
    return [ast.fix_missing_locations(rewriter.visit(clone(s))) for s in body]


def _calls(body: List[ast.stmt]):
    for s in body:
        for node in ast.walk(s):
            if isinstance(node, ast.Call):
                yield node


class _Sugar(ast.NodeTransformer):
    def __init__(self, resolver):
        self.resolver = resolver

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        new = self.replacement(node)
        return node if new is None else copy_location(new, node)

    def builtin(self, func: ast.expr, obj) -> bool:
        if not (isinstance(func, ast.Name) and func.id not in self.resolver.locals):
            return False
        ok, found = self.resolver.static(func)
        return ok and found is obj

    def replacement(self, node: ast.Call) -> Optional[ast.expr]:
        func, args, keywords = node.func, node.args, node.keywords
        if any(isinstance(a, ast.Starred) for a in args) or \
                any(k.arg is None for k in keywords):
            return None
        for maker, literal in ((tuple, ast.Tuple), (list, ast.List)):
            if self.builtin(func, maker) and len(args) == 1 and not keywords:
                arg = args[0]
                if isinstance(arg, (ast.Tuple, ast.List)):
                    return literal(elts=[clone(e) for e in arg.elts], ctx=ast.Load())
                if maker is tuple:
                    return None   # (a tuple of unknown length: left as it is)
                item = ast.Name(id="item", ctx=ast.Load())
                return ast.ListComp(elt=item, generators=[ast.comprehension(
                    target=ast.Name(id="item", ctx=ast.Store()), iter=clone(arg), ifs=[],
                    is_async=0)])
        if self.builtin(func, dict):
            if not args:
                return ast.Dict(keys=[ast.Constant(value=k.arg) for k in keywords],
                                values=[clone(k.value) for k in keywords])
            if len(args) == 1 and not keywords and isinstance(args[0], ast.Name):
                key = ast.Name(id="key", ctx=ast.Load())
                return ast.DictComp(
                    key=key, value=ast.Subscript(value=clone(args[0]), slice=clone(key),
                                                 ctx=ast.Load()),
                    generators=[ast.comprehension(target=ast.Name(id="key", ctx=ast.Store()),
                                                  iter=clone(args[0]), ifs=[], is_async=0)])
        if isinstance(func, ast.Attribute) and func.attr == "get" and \
                isinstance(func.value, ast.Name) and func.value.id in self.resolver.locals \
                and 1 <= len(args) <= 2 and not keywords:
            mapping, key = func.value, args[0]
            default = clone(args[1]) if len(args) == 2 else ast.Constant(value=None)
            return ast.IfExp(
                test=ast.Compare(left=clone(key), ops=[ast.In()], comparators=[clone(mapping)]),
                body=ast.Subscript(value=clone(mapping), slice=clone(key), ctx=ast.Load()),
                orelse=default)
        return None
