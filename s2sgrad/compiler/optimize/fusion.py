"""Fusion: compiler temporaries used once go back into the expression that
reads them, in the forward (lower peak memory) and in the adjoint.
"""
from __future__ import annotations

import ast
import re
from typing import List, Optional, Set

from ..facts import NodeFacts, ResidualMarks, StmtFact
from ..names import replace_loads, walk_values
from .statements import (
    COTANGENT,
    VERIFY,
    NameIndex,
    check_kept_counts,
    header,
    inner_blocks,
    mutates,
    name_counts,
    plain_assignment,
    pure,
    statement_loads,
    stored_in,
    value_loads,
    writes_nothing,
)


# -- the forward: temporaries nobody keeps go back into expressions -----------------
def fuse_forward_temporaries(fdef: ast.FunctionDef, user_names: Set[str],
                             stmts: NodeFacts[StmtFact],
                             marks: Optional[ResidualMarks] = None,
                             index: Optional[NameIndex] = None) -> None:
    """`t = a * b; y = np.sum(t)` -> `y = np.sum(a * b)` for a compiler temporary
    used once and not kept for the adjoint. The forward then reads like the
    user's code, and NumPy frees such intermediates as soon as they are used
    instead of when the forward returns (a lower peak memory). `stmts` (the
    compile's statement facts) says which statements copy a value a later
    in-place write would change: they stay statements of their own."""
    marks = ResidualMarks() if marks is None else marks
    index = NameIndex() if index is None else index
    # Counted once: a fusion removes one store and one read of the temporary (its
    # value moves, with the same reads), and _fuse_block counts that itself. (No
    # fused temporary is a residual: the names the return reads never change.)
    loads, counts, residual_reads = name_counts(fdef, index)
    while _fuse_block(fdef.body, loads, counts, residual_reads, user_names, marks, stmts,
                       index):
        if VERIFY:
            fresh_loads, fresh_counts, _ = name_counts(fdef, index)
            check_kept_counts("fuse_forward_temporaries", fdef,
                              (("reads", loads, fresh_loads),
                               ("assignments", counts, fresh_counts)))


_VERSIONED = re.compile(r"(.+)_\d+$")   # x_2: a version of x


def _fusable(s, loads, counts, residual_reads, user_names, marks, stmts) -> Optional[str]:
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
            isinstance(s.targets[0], ast.Name)):
        return None
    name = s.targets[0].id
    version = _VERSIONED.match(name)
    if name in user_names or (version and version.group(1) in user_names) or \
            counts.get(name) != 1 or loads.get(name) != 1 or \
            name in residual_reads or _keeps_a_value(s, marks, stmts):
        return None
    value = s.value
    if isinstance(value, (ast.Name, ast.Constant)) or not pure(value):
        return None
    return name


def _keeps_a_value(s: ast.stmt, marks: ResidualMarks, stmts: NodeFacts[StmtFact]) -> bool:
    """s saves a value, creates a stack or the `None` a save needs, or copies a
    value a later in-place write would change: it stays a statement of its own."""
    mark = marks.of(s)
    return bool(mark.save_of or mark.init_of or mark.stack_of or mark.slot or
                stmts.of(s).snapshot)


def _fuse_block(block, loads, counts, residual_reads, user_names, marks, stmts,
                index: NameIndex) -> bool:
    changed = False
    for s in block:
        for _, inner in inner_blocks(s):
            changed |= _fuse_block(inner, loads, counts, residual_reads, user_names,
                                   marks, stmts, index)
    i = 0
    while i < len(block):
        s = block[i]
        name = _fusable(s, loads, counts, residual_reads, user_names, marks, stmts)
        if name is not None:
            reads = set(value_loads(s, index))
            for j in range(i + 1, len(block)):
                use = block[j]
                simple = isinstance(use, (ast.Assign, ast.AugAssign, ast.Return, ast.Expr))
                if simple and name in statement_loads(use, index):   # (its one read:
                    # s.value moves there)
                    replace_loads(use, name, s.value, copy=False)
                    index.changed(use)
                    del block[i]
                    loads[name] -= 1    # (its one read and its one store are gone)
                    counts[name] -= 1
                    i -= 1
                    changed = True
                    break
                if not simple or stored_in(header(use)) & (reads | {name}) or \
                        mutates(use, reads):
                    break
        i += 1
    return changed


# -- the adjoint: temporaries read once go into their reader -------------------------
def fuse_adjoint_temporaries(fdef: ast.FunctionDef, index: Optional[NameIndex] = None) -> None:
    """`e_bar = g * y; n_bar = e_bar * x; x_bar = x_bar + -n_bar` ->
    `x_bar = x_bar + -(g * y * x)`, for cotangent temporaries read once, within
    one block (names the user wrote, in a Function's vjp, stay). Each such
    temporary is as large as the value it differentiates; inside one expression
    NumPy writes over it in place instead of keeping it alive until the adjoint
    returns (elementwise on 1e6 floats: 72 -> 48 MB peak).

    An expression moves only past plain assignments of pure expressions that do
    not rebind what it reads: never past an in-place update (of anything: an
    alias of what it reads could change), a call statement, a loop or branch, or
    the comment that opens the next source line's block. One pass suffices: a
    fused statement is looked at again, so chains fold from the top."""
    index = NameIndex() if index is None else index
    loads, counts, returned = name_counts(fdef, index)
    _fuse_adjoint_block(fdef.body, loads, counts, returned, {}, index)


def _fuse_adjoint_block(stmts: List[ast.stmt], loads, counts, returned, plain,
                        index: NameIndex) -> None:
    for s in stmts:
        for _, inner in inner_blocks(s):
            _fuse_adjoint_block(inner, loads, counts, returned, plain, index)
    i = 0
    while i < len(stmts):
        s = stmts[i]
        name = _adjoint_temporary(s, loads, counts, returned)
        if name is not None:
            reads = set(value_loads(s, index))
            for use in stmts[i + 1:]:
                if not isinstance(use, (ast.Assign, ast.AugAssign, ast.Return)):
                    break
                if not isinstance(use, ast.Return):
                    known = plain.get(use)
                    if known is None:
                        known = plain[use] = plain_assignment(use)
                    if not known:
                        break
                if name in statement_loads(use, index):
                    if _in_arithmetic(use.value, name):   # (its one read: s.value moves)
                        replace_loads(use, name, s.value, copy=False)
                        index.changed(use)
                        plain.pop(use, None)   # its value changed
                        del stmts[i]
                        i -= 1
                    break
                if isinstance(use, ast.AugAssign) or stored_in(use) & (reads | {name}):
                    break
        i += 1


def _adjoint_temporary(s: ast.stmt, loads, counts, returned) -> Optional[str]:
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
            isinstance(s.targets[0], ast.Name)):
        return None
    name = s.targets[0].id
    if counts.get(name) != 1 or loads.get(name) != 1 or name in returned or \
            not COTANGENT.match(name):
        return None
    if not isinstance(s.value, (ast.BinOp, ast.UnaryOp)) or not writes_nothing(s.value):
        return None
    return name


def _in_arithmetic(value: ast.expr, name: str) -> bool:
    """Whether `name` is read in `value` as an operand of arithmetic (or is all
    of it): where NumPy can reuse a temporary, and where an expression put in
    its place still reads as one formula, not as an argument buried in calls."""
    if isinstance(value, ast.Name):
        return value.id == name
    for node in walk_values(value):
        if isinstance(node, ast.BinOp):
            operands = (node.left, node.right)
        elif isinstance(node, ast.UnaryOp):
            operands = (node.operand,)
        else:
            continue
        if any(isinstance(o, ast.Name) and o.id == name for o in operands):
            return True
    return False
