"""A body with early returns as one that ends in its only return.

A `Function`'s forward or vjp is inlined where its body ends in its one `return`.
Users write shortcuts (`if not np.any(g): return np.zeros_like(g)`), which made
the body be called instead, and a called vjp that reads `ctx.saved_tensors` could
not be differentiated again (a Hessian). Returns inside `if` branches fold into one
result variable, each branch carrying the statements that follow it:

    if c:                      if c:
        return a        ->         result = a
    b = h(x)                   else:
    return b                       b = h(x)
                                   result = b

Returns inside loops, `try` or `with` are left alone (the caller calls the body).
"""
from __future__ import annotations

import ast
import copy
from typing import List, Optional

# Each early return copies the statements after its `if` into both branches: a bound
# on the folded body's size keeps a chain of shortcuts from growing without end.
_MAX_STATEMENTS = 400


def _has_return(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(node))


def _fold(body: List[ast.stmt], result: str) -> Optional[List[ast.stmt]]:
    out: List[ast.stmt] = []
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.Return):
            value = stmt.value if stmt.value is not None else ast.Constant(value=None)
            out.append(ast.copy_location(ast.Assign(
                targets=[ast.Name(id=result, ctx=ast.Store())], value=value), stmt))
            return out              # (what follows a return never runs)
        if not _has_return(stmt):
            out.append(stmt)
            continue
        if not isinstance(stmt, ast.If):
            return None             # a return in a loop, `try` or `with`
        rest = body[i + 1:]
        then = _fold(list(stmt.body) + rest, result)
        orelse = _fold(list(stmt.orelse) + copy.deepcopy(rest), result)
        if then is None or orelse is None:
            return None
        out.append(ast.copy_location(ast.If(test=stmt.test, body=then, orelse=orelse), stmt))
        return out
    out.append(ast.Assign(targets=[ast.Name(id=result, ctx=ast.Store())],
                          value=ast.Constant(value=None)))   # (falls off the end: None)
    return out


def fold_returns(body: List[ast.stmt], result: str) -> Optional[List[ast.stmt]]:
    """`body` rewritten to assign what it returns to `result` on every path, with no
    `return` left; None where a return is not in straight code or an `if` (or the
    folded body would exceed the size bound)."""
    folded = _fold(body, result)
    if folded is None:
        return None
    size = sum(1 for s in folded for n in ast.walk(s) if isinstance(n, ast.stmt))
    return folded if size <= _MAX_STATEMENTS else None
