"""Constant folding (`needs_input_grad`, default arguments, `x ** 1`) and the
last tidy-up (empty blocks, `pass`).
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Set, Tuple

from ..marks import is_comment
from ..names import (
    BRANCHES_AND_LOOPS,
    SHARED_LEAVES,
    child_fields,
    clone,
    copy_location,
    walk_values,
)
from .statements import pure


# -- constant folding -----------------------------------------------------------
def _is_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_is_constant(e) for e in node.elts)
    return False


def _evaluable(node: ast.AST) -> bool:
    """An operation on constants (children are folded first, so one level suffices)."""
    cls = node.__class__
    if cls is ast.BinOp:
        return _is_constant(node.left) and _is_constant(node.right)
    if cls is ast.UnaryOp:
        return _is_constant(node.operand)
    if cls is ast.Compare:
        return _is_constant(node.left) and all(_is_constant(c) for c in node.comparators)
    if cls is ast.BoolOp:
        return all(_is_constant(v) for v in node.values)
    if cls is ast.IfExp:
        return _is_constant(node.test) and _is_constant(node.body) and \
            _is_constant(node.orelse)
    return False


def _to_ast(value) -> Optional[ast.expr]:
    if isinstance(value, tuple):
        elts = [_to_ast(v) for v in value]
        return None if any(e is None for e in elts) else ast.Tuple(elts=elts, ctx=ast.Load())
    if isinstance(value, (int, float, str, bool, type(None))):
        return ast.Constant(value=value)
    return None


_FOLDABLE = frozenset((ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp))

# Folding is bounded: an integer of more bits, or a string or tuple of more items,
# than this is left for Python to compute when the code runs (`2 ** 20000 % 7`
# folded would take time, memory, and a literal Python cannot print).
FOLD_LIMIT = 4096


def _bounded(node: ast.AST) -> bool:
    """Whether evaluating this operation on constants makes a result of bounded
    size, judged from the operands before anything is computed: the operations
    that grow their result (`**`, `<<`, `*` of numbers or of a sequence by a
    count) are folded only below FOLD_LIMIT."""
    if node.__class__ is not ast.BinOp:
        return True
    op, a, b = node.op.__class__, _operand(node.left), _operand(node.right)
    if op is ast.Pow and type(a) is int and type(b) is int and b > 0:
        return max(a.bit_length(), 1) * b <= FOLD_LIMIT
    if op is ast.LShift and type(a) is int and type(b) is int:
        return a.bit_length() + b <= FOLD_LIMIT
    if op is ast.Mult:
        if type(a) is int and type(b) is int:
            return a.bit_length() + b.bit_length() <= FOLD_LIMIT
        for seq, count in ((a, b), (b, a)):
            if isinstance(seq, (str, bytes, tuple)) and type(count) is int:
                return len(seq) * max(count, 0) <= FOLD_LIMIT
    return True


def _operand(node: ast.AST):
    """A constant operand's value; a tuple or list display as a tuple of its items."""
    if isinstance(node, ast.Constant):
        return node.value
    return tuple(node.elts) if isinstance(node, (ast.Tuple, ast.List)) else None


def _small(value) -> bool:
    """A folded value small enough to be written into the generated code."""
    if type(value) is int:
        return value.bit_length() <= FOLD_LIMIT
    if isinstance(value, (str, bytes)):
        return len(value) <= FOLD_LIMIT
    if isinstance(value, tuple):
        return len(value) <= FOLD_LIMIT and all(_small(v) for v in value)
    return True


# Nodes `_fold` returns as they are (no children, or none it folds).
_FOLD_LEAVES = {ast.Name, ast.Constant, *SHARED_LEAVES}


_FIELDS: Dict[type, Tuple[str, ...]] = {}   # class -> the fields _fold enters, in order


def _fold(node: ast.AST) -> ast.AST:
    """Fold constant subexpressions of `node`, children first.

    A hand-written recursion rather than a NodeTransformer: folding visits every
    node of both functions, and the visitor's dispatch was most of its cost."""
    d = node.__dict__
    fields = _FIELDS.get(node.__class__)
    if fields is None:   # (the fields that may hold nodes other than contexts, operators)
        fields = _FIELDS[node.__class__] = tuple(reversed(child_fields(node.__class__)))
    for field in fields:
        value = d.get(field)
        if value.__class__ is list:
            for i, item in enumerate(value):
                if isinstance(item, ast.AST) and item.__class__ not in _FOLD_LEAVES:
                    new = _fold(item)
                    if new is not item:
                        value[i] = new
        elif isinstance(value, ast.AST) and value.__class__ not in _FOLD_LEAVES:
            new = _fold(value)
            if new is not value:
                setattr(node, field, new)
    return _fold_here(node)


def _fold_here(node: ast.AST) -> ast.AST:
    """What a rule of folding makes of node, with the children it has now: a
    constant, one of its children, or node itself (nothing is changed in place)."""
    cls = node.__class__
    if cls in _FOLDABLE and _evaluable(node) and _bounded(node):
        try:
            value = eval(compile(ast.Expression(body=ast.fix_missing_locations(
                clone(node))), "<fold>", "eval"), {"__builtins__": {}})
        except Exception:  # noqa: BLE001 - folding is best effort
            return node
        new = _to_ast(value) if _small(value) else None
        return node if new is None else copy_location(new, node)
    if cls is ast.Call:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "len" and len(node.args) == 1 \
                and isinstance(node.args[0], (ast.Tuple, ast.List)) and not node.keywords:
            return copy_location(ast.Constant(value=len(node.args[0].elts)), node)
        if isinstance(func, ast.Name) and func.id == "_s2s_zeros_like" and \
                len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, (int, float)):
            return copy_location(ast.Constant(value=0.0), node)
    elif cls is ast.Subscript:
        if isinstance(node.value, ast.Tuple) and isinstance(node.slice, ast.Constant) and \
                isinstance(node.slice.value, int) and isinstance(node.ctx, ast.Load):
            n = len(node.value.elts)
            if -n <= node.slice.value < n:
                return node.value.elts[node.slice.value]
    elif cls is ast.BinOp:
        if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) and \
                node.right.value == 1 and not isinstance(node.right.value, bool):
            return node.left
        if isinstance(node.op, ast.Mult):
            slope = _constant_power_slope(node.right)
            if slope is not None:
                return copy_location(slope(node.left), node)
    return node


def _constant_power_slope(node: ast.AST):
    """`power_slope(x, c)` of a number c != 0 as the arithmetic it is (`g * c * x **
    (c - 1)`, which folds on to `g * 2 * x`): a builder of that product from its
    left factor; None for anything else (c == 0 stays a call: the slope is 0)."""
    if not (node.__class__ is ast.Call and isinstance(node.func, ast.Name) and
            node.func.id == "_s2s_power_slope" and len(node.args) == 2 and
            not node.keywords and isinstance(node.args[1], ast.Constant)):
        return None
    x, c = node.args[0], node.args[1].value
    if not isinstance(c, (int, float)) or isinstance(c, bool) or c == 0:
        return None

    def build(left: ast.expr) -> ast.expr:
        power = _fold_here(ast.BinOp(left=x, op=ast.Pow(), right=ast.Constant(value=c - 1)))
        return ast.BinOp(left=ast.BinOp(left=left, op=ast.Mult(), right=ast.Constant(value=c)),
                         op=ast.Mult(), right=power)
    return build


def _may_fold(node: ast.AST) -> bool:
    """Whether folding can change anything under node. A node folds only when a
    rule applies to its children as they are, or when a child changed: so nothing
    changes where no node folds as it is now (then the walk is all it costs)."""
    for sub in walk_values(node):
        if sub.__class__ in _MAY_FOLD and _fold_here(sub) is not sub:
            return True
    return False


# The classes `_fold_here` has a rule for.
_MAY_FOLD = _FOLDABLE | {ast.Call, ast.Subscript}


def fold_statement(s: ast.stmt) -> None:
    """Fold, in place, a statement that holds no block. Folding reaches its fixpoint
    in one pass (children first), so after a step changes a few statements of a
    folded function, folding those few gives what folding it all again would."""
    if s.__class__ in BRANCHES_AND_LOOPS:
        raise ValueError("fold_statement folds simple statements (use fold_block)")
    _fold(s)


def fold_block(stmts: List[ast.stmt]) -> List[ast.stmt]:
    out: List[ast.stmt] = []
    for s in stmts:
        # Compound statements: fold only their header here; their bodies below.
        cls = s.__class__
        if cls is ast.If or cls is ast.While:
            if _may_fold(s.test):
                s.test = _fold(s.test)
        elif cls is ast.For:
            if _may_fold(s.iter):
                s.iter = _fold(s.iter)
        elif _may_fold(s):
            s = _fold(s)
        if isinstance(s, ast.If):
            if _is_constant(s.test):
                out += fold_block(s.body if ast.literal_eval(s.test) else s.orelse)
                continue
            s.body = fold_block(s.body) or [ast.Pass()]
            s.orelse = fold_block(s.orelse)
        elif isinstance(s, (ast.For, ast.While)):
            s.body = fold_block(s.body) or [ast.Pass()]
        out.append(s)
    return out


# -- a sum of a negation ---------------------------------------------------------
def subtract_negations(fdef: ast.FunctionDef) -> None:
    """`a + -b` as `a - b` and `a += -b` as `a -= b`, in place: what substituting a
    negated cotangent (`-unbroadcast(g, y)`) into its sum leaves. The same numbers to
    the bit (IEEE subtraction is the sum with the negation), one array pass fewer.
    For adjoints only: their operands are cotangents, NumPy values or numbers (a
    user's class could define `-` and `+` apart)."""
    for node in ast.walk(fdef):
        if node.__class__ is ast.BinOp and node.op.__class__ is ast.Add and \
                _negation(node.right):
            node.op, node.right = ast.Sub(), node.right.operand
        elif node.__class__ is ast.AugAssign and node.op.__class__ is ast.Add and \
                _negation(node.value):
            node.op, node.value = ast.Sub(), node.value.operand


def _negation(node: ast.AST) -> bool:
    return node.__class__ is ast.UnaryOp and node.op.__class__ is ast.USub


# -- tidy -----------------------------------------------------------------------
def tidy(stmts: List[ast.stmt], loaded: Optional[Set[str]] = None) -> List[ast.stmt]:
    """Remove empty branches and loops, and comments left with nothing to describe.

    A loop with nothing in its body still binds its target: it goes only where no
    statement of the function (`stmts`, at the outermost call) reads that name."""
    if loaded is None:
        loaded = {n.id for s in stmts for n in ast.walk(s)
                  if n.__class__ is ast.Name and n.ctx.__class__ is ast.Load}
    out: List[ast.stmt] = []
    for s in stmts:
        if isinstance(s, ast.If):
            s.body = tidy(s.body, loaded)
            s.orelse = tidy(s.orelse, loaded)
            if not _has_code(s.body) and not _has_code(s.orelse):
                continue
            if not _has_code(s.body):
                s.test = ast.UnaryOp(op=ast.Not(), operand=s.test)
                s.body, s.orelse = s.orelse, []
            if not _has_code(s.orelse):
                s.orelse = []
            if not s.body:
                s.body = [ast.Pass()]
        elif isinstance(s, ast.For):
            s.body = tidy(s.body, loaded)
            if not _has_code(s.body):
                if pure(s.iter) and loaded.isdisjoint(
                        n.id for n in ast.walk(s.target) if n.__class__ is ast.Name):
                    continue
                s.body = [ast.Pass()]
        elif isinstance(s, ast.While):
            s.body = tidy(s.body, loaded) or [ast.Pass()]
        elif isinstance(s, ast.Pass):
            continue
        out.append(s)
    # A comment must describe the code that follows it (a return is not that code).
    return [s for i, s in enumerate(out)
            if not (is_comment(s) and (i + 1 == len(out) or is_comment(out[i + 1]) or
                                       isinstance(out[i + 1], ast.Return)))]


def _has_code(stmts) -> bool:
    return any(not is_comment(s) and not isinstance(s, ast.Pass) for s in stmts)
