"""`with np.errstate(...)` blocks, written as their bodies (before the normaliser
runs, which follows plain statements and branches):

    with np.errstate(divide="ignore"):        y = np.where(x > 0, np.log(x), 0.0)
        y = np.where(x > 0, np.log(x), 0.0)

np.errstate changes only which floating-point warnings NumPy reports, never a
value: the generated forward and adjoint compute the block's statements (and their
derivatives) without it, and may report the warnings it silenced. Any other
context manager keeps its refusal: `warnings.catch_warnings()` restores filters the
block changes (`warnings.simplefilter` run without it would change them for good),
and others may skip the block (`contextlib.suppress`) or run code of their own.
"""
from __future__ import annotations

import ast
from typing import List, Optional

import numpy as np

from ..names import clone
from .scope import SCOPES, rewrite_blocks

_VALUES_UNCHANGED = (np.errstate,)


def unwrap_context_blocks(body: List[ast.stmt], resolver) -> Optional[List[ast.stmt]]:
    """A copy of body with each `with np.errstate(...)` block replaced by its body, or
    None where there is none (the caller keeps its tree)."""
    if not any(isinstance(n, ast.With) and _unwrapped(n, resolver)
               for s in body for n in ast.walk(s)):
        return None
    return _block([clone(s) for s in body], resolver)


def _block(stmts: List[ast.stmt], resolver) -> List[ast.stmt]:
    out: List[ast.stmt] = []
    for s in stmts:
        if isinstance(s, SCOPES):
            out.append(s)
            continue
        rewrite_blocks(s, lambda block: _block(block, resolver))
        if isinstance(s, ast.With) and _unwrapped(s, resolver):
            out.extend(s.body)
        else:
            out.append(s)
    return out


def _unwrapped(node: ast.With, resolver) -> bool:
    """Every manager of the block is np.errstate(...), bound to no name."""
    for item in node.items:
        call = item.context_expr
        if item.optional_vars is not None or not isinstance(call, ast.Call):
            return False
        ok, obj = resolver.static(call.func)
        if not (ok and any(obj is manager for manager in _VALUES_UNCHANGED)):
            return False
    return True
