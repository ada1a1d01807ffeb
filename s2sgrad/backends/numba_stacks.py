"""Stacks of numbers as preallocated arrays: a store per push, a load per pop.

The generated code saves a loop's overwritten values on lists (`s.append(v)`
each step, `v = s.pop()` in the adjoint's loop). In numba a list of floats
pays its reference counting and growth on every push; when the loop's trip
count is known before it starts, an array of that length and an index do the
same work with one store and one load (the scalar recurrence of
`benchmarks/`: 36 µs to 27 µs per gradient, and a shorter compile). A stack is
preallocated only when all of this holds, read off the function's text:

- it is made (`s = []`) by a top-level statement, and pushed by exactly one
  `s.append(v)` standing directly in the body of one top-level `for` loop (so
  at most once per step: `break` and `continue` push fewer, never more);
- that loop iterates over a name, an attribute or subscript of one, or a
  `range(...)` of such: `len()` of it, taken just before the loop, is the
  number of steps (numba's `len` of a range and of an array's first axis);
- everything else the function does with it is `x = s.pop()`;
- the caller knows its items are float64 numbers (`float_stacks`: from the
  values one NumPy run pushed). Arrays stay on lists: their shapes may change
  from step to step, and the first push is a placeholder of another shape.
"""
from __future__ import annotations

import ast
import copy
from typing import Dict, List, Optional, Set

from .numba_names import fresh_name

__all__ = ["preallocate_stacks"]


def _is_append(stmt: ast.stmt, stack: str) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
        isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "append" and \
        isinstance(stmt.value.func.value, ast.Name) and stmt.value.func.value.id == stack and \
        len(stmt.value.args) == 1 and not stmt.value.keywords


def _is_pop(stmt: ast.stmt, stack: str) -> bool:
    return isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
        isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.Call) and \
        isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "pop" and \
        isinstance(stmt.value.func.value, ast.Name) and stmt.value.func.value.id == stack and \
        not stmt.value.args and not stmt.value.keywords


def _is_new_list(stmt: ast.stmt, stack: str) -> bool:
    return isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
        isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == stack and \
        isinstance(stmt.value, ast.List) and not stmt.value.elts


def _stable(node: ast.AST) -> bool:
    """An iterable whose len() taken before the loop is its number of steps."""
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int)
    if isinstance(node, ast.Attribute):
        return _stable(node.value)
    if isinstance(node, ast.Subscript):
        return _stable(node.value) and _stable(node.slice)
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id == "range" and \
            not node.keywords and all(_stable(a) for a in node.args)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _stable(node.operand)
    return False


def _statements(body: List[ast.stmt]):
    """Every statement in body, nested ones included."""
    for stmt in body:
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(stmt, field, []) or [])
        for handler in getattr(stmt, "handlers", []) or []:
            yield from _statements(handler.body)


def _loop_of(fn: ast.FunctionDef, stack: str) -> Optional[int]:
    """The index of the top-level `for` whose body pushes the stack, if the stack
    qualifies (see the module's docstring)."""
    inits = [i for i, s in enumerate(fn.body) if _is_new_list(s, stack)]
    if len(inits) != 1:
        return None
    loops = [i for i, s in enumerate(fn.body) if isinstance(s, ast.For) and
             sum(_is_append(b, stack) for b in s.body) == 1]
    pushes = sum(_is_append(s, stack) for s in _statements(fn.body))
    if pushes != 1 or len(loops) != 1 or loops[0] < inits[0] or \
            not _stable(fn.body[loops[0]].iter):
        return None    # (one push in all: not in an inner loop, nor in another loop too)
    expected = 0      # every use of the name: the init, the push, the pops
    seen = 0
    for stmt in _statements(fn.body):
        if _is_new_list(stmt, stack) or _is_append(stmt, stack) or _is_pop(stmt, stack):
            expected += 1
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id == stack:
            seen += 1
    return loops[0] if seen == expected else None


class _Rewrite(ast.NodeTransformer):
    def __init__(self, stack: str, top: str):
        self.stack, self.top = stack, top

    def _index(self, ctx) -> ast.Subscript:
        return ast.Subscript(value=ast.Name(id=self.stack, ctx=ast.Load()),
                             slice=ast.Name(id=self.top, ctx=ast.Load()), ctx=ctx)

    def _step(self, op: ast.operator) -> ast.AugAssign:
        return ast.AugAssign(target=ast.Name(id=self.top, ctx=ast.Store()), op=op,
                             value=ast.Constant(value=1))

    def visit_Expr(self, node: ast.Expr):
        if _is_append(node, self.stack):     # s[s_top] = v; s_top += 1
            return [ast.Assign(targets=[self._index(ast.Store())], value=node.value.args[0],
                               lineno=0), self._step(ast.Add())]
        return node

    def visit_Assign(self, node: ast.Assign):
        if _is_pop(node, self.stack):        # s_top -= 1; x = s[s_top]
            return [self._step(ast.Sub()),
                    ast.Assign(targets=node.targets, value=self._index(ast.Load()), lineno=0)]
        return node


def preallocate_stacks(fn: ast.FunctionDef, float_stacks: Set[str]) -> ast.FunctionDef:
    """A copy of fn with each qualifying stack of float_stacks an array and an index:
    before its loop, `steps = len(<what the loop iterates>)` (once per loop), then
    `s = np.empty(steps)` and `s_top = 0`."""
    fn = copy.deepcopy(fn)
    taken = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | \
        {a.arg for a in ast.walk(fn) if isinstance(a, ast.arg)}
    by_loop: Dict[int, List[str]] = {}
    for stack in sorted(float_stacks):
        at = _loop_of(fn, stack)
        if at is not None:
            by_loop.setdefault(at, []).append(stack)
    if not by_loop:
        return fn
    rewrites = []
    body: List[ast.stmt] = []
    for i, stmt in enumerate(fn.body):
        if any(_is_new_list(stmt, s) for stacks in by_loop.values() for s in stacks):
            continue
        if i in by_loop:
            steps = fresh_name("steps", taken)
            body.append(_assign(steps, ast.Call(func=ast.Name(id="len", ctx=ast.Load()),
                                                args=[copy.deepcopy(stmt.iter)], keywords=[])))
            for stack in by_loop[i]:
                top = fresh_name(stack + "_top", taken)
                body.append(_assign(stack, ast.Call(
                    func=ast.Attribute(value=ast.Name(id="np", ctx=ast.Load()), attr="empty",
                                       ctx=ast.Load()),
                    args=[ast.Name(id=steps, ctx=ast.Load())], keywords=[])))
                body.append(_assign(top, ast.Constant(value=0)))
                rewrites.append(_Rewrite(stack, top))
        body.append(stmt)
    for rewrite in rewrites:
        body = [s for item in (rewrite.visit(s) for s in body)
                for s in (item if isinstance(item, list) else [item])]
    fn.body = body
    return ast.fix_missing_locations(fn)


def _assign(name: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value, lineno=0)
