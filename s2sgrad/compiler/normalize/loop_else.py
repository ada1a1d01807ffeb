"""`for ... else` and `while ... else`, written as the flag Python keeps (before the
normaliser runs, which follows plain loops and branches):

    for v in xs:                    broke = False
        if v > limit:               for v in xs:
            break            ->         if v > limit:
    else:                                   broke = True
        total = total * 2                   break
                                    if not broke:
                                        total = total * 2

The else block runs when the loop ends without a break of its own (a `break` of a
loop inside it is that loop's; one in that loop's own else block is this loop's).
The flag is a bool: nothing is differentiated through it.
"""
from __future__ import annotations

import ast
from typing import List, Optional

from ..names import NameRegistry, assign_node, clone, copy_location, name_node
from .scope import rewrite_blocks

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def desugar_loop_else(body: List[ast.stmt], names: NameRegistry) -> Optional[List[ast.stmt]]:
    """A copy of body with every loop's else block written with a flag, or None where
    no loop has one (the caller keeps its tree)."""
    if not any(isinstance(n, (ast.For, ast.While)) and n.orelse
               for s in body for n in ast.walk(s)):
        return None
    return _block([clone(s) for s in body], names)


def _block(stmts: List[ast.stmt], names: NameRegistry) -> List[ast.stmt]:
    out: List[ast.stmt] = []
    for s in stmts:
        if isinstance(s, _SCOPES):
            out.append(s)
            continue
        rewrite_blocks(s, lambda block: _block(block, names))   # inner loops first: their
        # breaks are theirs
        if isinstance(s, (ast.For, ast.While)) and s.orelse:
            flag = names.fresh("broke")
            orelse, s.orelse = s.orelse, []
            s.body = _flag_breaks(s.body, flag)
            out.append(copy_location(assign_node(flag, ast.Constant(value=False)), s))
            out.append(s)
            out.append(copy_location(ast.If(
                test=ast.UnaryOp(op=ast.Not(), operand=name_node(flag)), body=orelse,
                orelse=[]), s))
        else:
            out.append(s)
    return out


def _flag_breaks(stmts: List[ast.stmt], flag: str) -> List[ast.stmt]:
    """`break` -> `flag = True; break` for the breaks of the loop whose body this is."""
    out: List[ast.stmt] = []
    for s in stmts:
        if isinstance(s, ast.Break):
            out.append(copy_location(assign_node(flag, ast.Constant(value=True)), s))
            out.append(s)
            continue
        if not isinstance(s, (ast.For, ast.While) + _SCOPES):
            rewrite_blocks(s, lambda block: _flag_breaks(block, flag))
        out.append(s)
    return out
