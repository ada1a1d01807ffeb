"""Branches whose test is known before the code runs, taken or dropped as Python
would take them:

    if hasattr(np, "trapezoid"):            ->  return np.trapezoid(y, dx=h)
        return np.trapezoid(y, dx=h)
    return np.trapz(y, dx=h)

    trap = np.trapezoid if hasattr(np, "trapezoid") else np.trapz   ->  trap = np.trapezoid

NumPy 2 removed np.trapz; code written for both versions names it in a branch
that never runs, and the normaliser, which resolves every call it meets, refused
the function ("name 'np.trapz' is not defined"). A test is known when it is a
literal (`if True:`, `if 0:`), `hasattr(M, "name")` of a module M the resolver
reads statically, or `not`, `and`, `or` of known tests. The answer of hasattr is
recorded as a binding (the attribute, or its absence): a pair generated for it is
compiled again when the module gains or loses the attribute. A branch is dropped
only where every name it assigns is assigned by the branch taken too, or read
nowhere: the generated code would otherwise read a global of that name where
Python raises UnboundLocalError (the test is then left to run, as before).
"""
from __future__ import annotations

import ast
import builtins
import types
from typing import List, Optional, Set

from ..names import clone
from .scope import assigned_names, is_builtin, rewrite_blocks


def prune_static_branches(body: List[ast.stmt], resolver) -> Optional[List[ast.stmt]]:
    """A copy of body with the branches of known tests taken, or None where there is
    no such test (the caller keeps its tree)."""
    pruner = _Pruner(resolver, _read_names(body))
    if not any(isinstance(n, (ast.If, ast.IfExp)) and pruner.known(n.test) is not None
               for s in body for n in ast.walk(s)):
        return None
    return pruner.block([clone(s) for s in body])


def _read_names(body: List[ast.stmt]) -> Set[str]:
    return {n.id for s in body for n in ast.walk(s)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


class _Pruner(ast.NodeTransformer):
    def __init__(self, resolver, read: Set[str]):
        self.resolver = resolver
        self.read = read   # the names the function reads anywhere

    def droppable(self, dropped, taken) -> bool:
        """Whether the names `dropped` assigns stay bound as Python binds them: each
        assigned by `taken` too, or never read."""
        lost = assigned_names(dropped) - assigned_names(taken)
        return not (lost & self.read)

    def known(self, test: ast.expr) -> Optional[bool]:
        """The truth of `test` when it is known statically (recording what it rests
        on), else None."""
        if isinstance(test, ast.Constant):
            return bool(test.value)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.known(test.operand)
            return None if inner is None else not inner
        if isinstance(test, ast.BoolOp):   # (as Python evaluates it: short-circuited)
            deciding = not isinstance(test.op, ast.And)   # the value that ends it
            for value in test.values:
                known = self.known(value)
                if known is None:
                    return None
                if known is deciding:
                    return deciding
            return not deciding
        if isinstance(test, ast.Call) and \
                is_builtin(self.resolver, test.func, builtins.hasattr) and \
                len(test.args) == 2 and not test.keywords and \
                isinstance(test.args[1], ast.Constant) and isinstance(test.args[1].value, str):
            holder, name = test.args[0], test.args[1].value
            if self.resolver.is_local_chain(holder):
                return None
            ok, module = self.resolver.static(holder)
            if not (ok and isinstance(module, types.ModuleType)):
                return None
            # (the module's binding, and the attribute or its absence, recorded)
            self.resolver.pin(ast.Attribute(value=holder, attr=name, ctx=ast.Load()))
            return hasattr(module, name)
        return None

    def block(self, stmts: List[ast.stmt]) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        for s in stmts:
            taken = self.known(s.test) if isinstance(s, ast.If) else None
            if taken is not None and self.droppable(s.orelse if taken else s.body,
                                                    s.body if taken else s.orelse):
                out += self.block(s.body if taken else s.orelse)
                continue
            s = self.visit(s)
            rewrite_blocks(s, self.block)
            out.append(s)
        return out

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.stmt):   # (its blocks are `block`'s)
            for field, value in ast.iter_fields(node):
                if isinstance(value, ast.AST):
                    setattr(node, field, self.visit(value))
                elif isinstance(value, list) and not (value and isinstance(value[0], ast.stmt)):
                    setattr(node, field, [self.visit(v) if isinstance(v, ast.AST) else v
                                          for v in value])
            return node
        return super().generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        taken = self.known(node.test)
        if taken is None or not self.droppable([node.orelse if taken else node.body],
                                               [node.body if taken else node.orelse]):
            return self.generic_visit(node)
        return self.visit(node.body if taken else node.orelse)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return node   # (a nested def is normalised where it is called, with its own names)

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef
