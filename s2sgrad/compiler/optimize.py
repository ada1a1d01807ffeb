"""Pass 6 — optimise: fold, propagate, prune, and link forward to adjoint.

The transform and the inliner generate code mechanically; this pass makes it
what a person would write: constants folded (`needs_input_grad`, default
arguments), single-use temporaries substituted into their use, copies
propagated, dead statements removed. It also decides what the forward keeps
(the to-be-recorded analysis): a value is kept only if the adjoint reads it,
and a variable's saved copies survive only if some rule reads the variable.
"""
from __future__ import annotations

import ast
import re
from typing import Dict, Iterable, List, Optional, Sequence, Set

import numpy as np

from .marks import is_comment
from .names import clone, name_nodes, walk
from .transform import Transformed

_PART = re.compile(r".*_bar_part(_\d+)?$")
# The compiler's names for cotangents; anything else in an adjoint (a Function's
# vjp locals such as `grad_input`) is the user's and stays.
_COTANGENT = re.compile(r".*_bar(_part)?(_\d+)?$")
_BAR = re.compile(r".*_bar(_\d+)?$")
_PURE_BUILTINS = {"len", "range", "min", "max", "slice", "tuple", "abs", "float", "int",
                  "reversed", "list", "sum", "isinstance"}
_IMPURE_METHODS = {"pop", "append", "extend", "insert", "remove", "clear", "sort", "fill",
                   "put", "resize", "itemset", "setdefault", "update", "reverse"}
_IMPURE_HELPERS = {"_s2s_add_at", "_s2s_Context"}


def optimize(t: Transformed) -> Transformed:
    user_names = set(t.nf.resolver.locals)
    for fdef in (t.forward, t.adjoint):
        fdef.body = fold_block(fdef.body)
    # The adjoint reads forward values by name, so a renaming applies to both.
    propagate_copies(t.forward, user_names, also=(t.adjoint,))
    propagate_copies(t.adjoint, user_names)
    substitute_single_use(t.adjoint)
    collapse_unbroadcast_chains(t.adjoint)
    product_shapes_from_operands(t.adjoint)
    elide_scalar_broadcasts(t)
    while True:
        shared = share_shape_witnesses(t)
        if shared:
            t.adjoint.body = fold_block(t.adjoint.body)
        pruned = prune_saves(t)
        removed = eliminate_dead(t.adjoint, keep=set())
        if not (shared or pruned or removed):
            break
    private_copies(t)
    drop_needless_inits(t.forward)
    link_residuals(t)
    eliminate_dead(t.forward, keep=set(t.nf.all_params))
    fuse_forward_temporaries(t.forward, user_names)
    fuse_adjoint_temporaries(t.adjoint)
    for fdef in (t.forward, t.adjoint):
        fdef.body = tidy(fdef.body)
    return t


# -- constant folding -----------------------------------------------------------
def _is_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_is_constant(e) for e in node.elts)
    return False


def _evaluable(node: ast.AST) -> bool:
    """An operation on constants (children are folded first, so one level suffices)."""
    if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp)):
        return all(_is_constant(c) for c in ast.iter_child_nodes(node)
                   if not isinstance(c, (ast.operator, ast.unaryop, ast.cmpop, ast.boolop)))
    return False


def _to_ast(value) -> Optional[ast.expr]:
    if isinstance(value, tuple):
        elts = [_to_ast(v) for v in value]
        return None if any(e is None for e in elts) else ast.Tuple(elts=elts, ctx=ast.Load())
    if isinstance(value, (int, float, str, bool, type(None))):
        return ast.Constant(value=value)
    return None


_FOLDABLE = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp)
# Nodes `_fold` returns as they are (no children, or none it folds).
_FOLD_LEAVES = {ast.Name, ast.Constant, *ast.expr_context.__subclasses__(),
                *ast.operator.__subclasses__(), *ast.unaryop.__subclasses__(),
                *ast.cmpop.__subclasses__(), *ast.boolop.__subclasses__()}


def _fold(node: ast.AST) -> ast.AST:
    """Fold constant subexpressions of `node`, children first.

    A hand-written recursion rather than a NodeTransformer: folding visits every
    node of both functions, and the visitor's dispatch was most of its cost."""
    for field in node._fields:
        value = getattr(node, field, None)
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
    if isinstance(node, _FOLDABLE) and _evaluable(node):
        try:
            value = eval(compile(ast.Expression(body=ast.fix_missing_locations(
                clone(node))), "<fold>", "eval"), {"__builtins__": {}})
        except Exception:  # noqa: BLE001 - folding is best effort
            return node
        new = _to_ast(value)
        return node if new is None else ast.copy_location(new, node)
    cls = node.__class__
    if cls is ast.Call:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "len" and len(node.args) == 1 \
                and isinstance(node.args[0], (ast.Tuple, ast.List)) and not node.keywords:
            return ast.copy_location(ast.Constant(value=len(node.args[0].elts)), node)
        if isinstance(func, ast.Name) and func.id == "_s2s_zeros_like" and \
                len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, (int, float)):
            return ast.copy_location(ast.Constant(value=0.0), node)
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
    return node


def fold_block(stmts: List[ast.stmt]) -> List[ast.stmt]:
    out: List[ast.stmt] = []
    for s in stmts:
        # Compound statements: fold only their header here; their bodies below.
        if isinstance(s, (ast.If, ast.While)):
            s.test = _fold(s.test)
        elif isinstance(s, ast.For):
            s.iter = _fold(s.iter)
        else:
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


# -- assignment counting --------------------------------------------------------------
def assignment_sites(stmts: Iterable[ast.stmt], in_loop: bool = False,
                     counts: Optional[Dict[str, int]] = None) -> Dict[str, int]:
    """How often each name may be assigned (a site inside a loop counts twice)."""
    counts = {} if counts is None else counts
    for s in stmts:
        weight = 2 if in_loop else 1
        if isinstance(s, (ast.For, ast.While)):
            for n in _stores(getattr(s, "target", None)):
                counts[n] = counts.get(n, 0) + 2
            assignment_sites(s.body, True, counts)
            continue
        if isinstance(s, ast.If):
            assignment_sites(s.body, in_loop, counts)
            assignment_sites(s.orelse, in_loop, counts)
            continue
        for n in _simple_stores(s):
            counts[n] = counts.get(n, 0) + weight
    return counts


def _stores(node) -> Set[str]:
    if node is None:
        return set()
    return {n.id for n in name_nodes(node)
            if isinstance(n.ctx, (ast.Store, ast.Del))}


def _loads(node) -> List[str]:
    return [n.id for n in name_nodes(node) if isinstance(n.ctx, ast.Load)]


class _Names:
    """`_loads` and `_stores` of nodes, each node walked once: for use while the
    nodes asked about do not change (statements may leave the function). The
    lists and sets returned are shared: do not modify them."""

    def __init__(self):
        self._known: Dict[int, tuple] = {}

    def _get(self, node) -> tuple:
        known = self._known.get(id(node))
        if known is None:
            loads: List[str] = []
            stores: Set[str] = set()
            for n in name_nodes(node):
                if isinstance(n.ctx, ast.Load):
                    loads.append(n.id)
                elif isinstance(n.ctx, (ast.Store, ast.Del)):
                    stores.add(n.id)
            known = self._known[id(node)] = (node, loads, stores)  # node: its id stays its
        return known

    def loads(self, node) -> List[str]:
        return self._get(node)[1]

    def stores(self, node) -> Set[str]:
        return self._get(node)[2]


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: ast.expr):
        self.old, self.new = old, new

    def visit_Name(self, node):
        if node.id == self.old and isinstance(node.ctx, ast.Load):
            return ast.copy_location(clone(self.new), node)
        return node


def propagate_copies(fdef: ast.FunctionDef, user_names: Set[str],
                     also: Sequence[ast.FunctionDef] = ()) -> None:
    """Drop `a = b` between generated names when both are assigned once, outside loops."""
    params = fwd_params(fdef)
    changed = True
    also_stores = set()
    for other in also:
        also_stores |= _stores(other)
    loads_of: Optional[Dict[str, List[ast.Name]]] = None
    while changed:
        changed = False
        counts = assignment_sites(fdef.body)
        renamed: Set[str] = set()
        mapping: Dict[str, str] = {}
        for s in _walk_statements(fdef.body):
            if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
                    isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Name)):
                continue
            a, b = s.targets[0].id, s.value.id
            if a in user_names or a in params or counts.get(a) != 1 or _PART.match(b) or \
                    _BAR.match(a):
                continue
            if counts.get(b, 0) > 1 or (b in params and counts.get(b, 0) > 0):
                continue
            if getattr(s, "s2s_restore_of", None) or getattr(s, "s2s_save_of", None):
                continue
            if a in also_stores or b in also_stores or a in renamed or b in renamed:
                continue  # one renaming per name and round: counts stay valid
            _remove_statement(fdef.body, s)
            mapping[a] = b
            renamed |= {a, b}
            changed = True
        if mapping:
            if loads_of is None:
                # Each name's reads, found once: from here on names change in place
                # (n.id) and statements leave, nothing else.
                loads_of = {}
                for target in (fdef, *also):
                    for n in name_nodes(target):
                        if n.ctx.__class__ is ast.Load:
                            loads_of.setdefault(n.id, []).append(n)
            for a, b in mapping.items():  # (no b is also renamed: see `renamed`)
                for n in loads_of.pop(a, ()):
                    n.id = b
                    loads_of.setdefault(b, []).append(n)


def _walk_statements(stmts) -> List[ast.stmt]:
    """Every statement in `stmts` and in their blocks, in order (a list: no caller
    changes the blocks while it goes through them)."""
    out: List[ast.stmt] = []
    _collect_statements(stmts, out.append)
    return out


def _collect_statements(stmts, append) -> None:
    for s in stmts:
        append(s)
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list):
                _collect_statements(inner, append)


def _remove_statement(stmts: List[ast.stmt], target: ast.stmt) -> bool:
    for i, s in enumerate(stmts):
        if s is target:
            del stmts[i]
            return True
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and _remove_statement(inner, target):
                return True
    return False


# -- single-use temporaries -----------------------------------------------------
def substitute_single_use(fdef: ast.FunctionDef) -> None:
    """`x_bar_part = E; x_bar = x_bar + x_bar_part` -> `x_bar = x_bar + E`.

    Also propagates block-local copies between adjoints (`a_bar = b_bar` whose
    uses all follow in the same block before b_bar changes).
    """
    while True:
        dropped: List[int] = []
        fdef.body = _drop_self_assignments(fdef.body, dropped)
        occurrences: Dict[str, int] = {}
        load_counts: Dict[str, int] = {}
        for n in name_nodes(fdef):
            occurrences[n.id] = occurrences.get(n.id, 0) + 1
            if isinstance(n.ctx, ast.Load):
                load_counts[n.id] = load_counts.get(n.id, 0) + 1
        # Keeps both counts as they are after the copies it propagates.
        copies = _propagate_local_copies(fdef.body, fdef, occurrences, load_counts)
        counts: Dict[str, int] = {}
        for s in _walk_statements(fdef.body):
            for n in _simple_stores(s) if not isinstance(s, (ast.If, ast.For, ast.While)) else ():
                counts[n] = counts.get(n, 0) + 1
        substituted = _substitute_in_block(fdef.body, load_counts, counts)
        if not (dropped or copies or substituted):
            return


def _simple_stores(s: ast.stmt, names: Optional[List[ast.Name]] = None) -> Set[str]:
    """Names a simple statement assigns (cheaper than walking it). `names`, if
    given, are the Name nodes of `s`."""
    if isinstance(s, ast.Assign):
        out: Set[str] = set()
        for t in s.targets:
            out |= {t.id} if isinstance(t, ast.Name) else _stores(t)
        return out
    if isinstance(s, ast.AugAssign):
        return {s.target.id} if isinstance(s.target, ast.Name) else set()
    if isinstance(s, ast.Return):
        return set()
    if names is not None:
        return {n.id for n in names if isinstance(n.ctx, (ast.Store, ast.Del))}
    return _stores(s)


def _drop_self_assignments(stmts: List[ast.stmt], dropped: List[int]) -> List[ast.stmt]:
    """`x_bar = x_bar` is what an identity contribution leaves behind."""
    out = []
    for s in stmts:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Name) and \
                s.targets[0].id == s.value.id and getattr(s, "s2s_slot", None) is None:
            dropped.append(1)
            continue
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                setattr(s, attr, _drop_self_assignments(inner, dropped))
        out.append(s)
    return out


def _propagate_local_copies(stmts: List[ast.stmt], fdef: ast.FunctionDef,
                            occurrences: Dict[str, int], load_counts: Dict[str, int]) -> int:
    """`occurrences`: how often each name occurs in fdef (`load_counts`: is read),
    kept up to date."""
    done = 0
    for s in stmts:
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                done += _propagate_local_copies(inner, fdef, occurrences, load_counts)
    # The Name nodes of each statement of this block, found once: below, names
    # change in place (n.id) and statements leave the block, nothing else.
    nodes: Dict[int, List[ast.Name]] = {}
    i = 0
    while i < len(stmts):
        s = stmts[i]
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Name) and \
                _BAR.match(s.targets[0].id) and _BAR.match(s.value.id):
            a, b = s.targets[0].id, s.value.id
            reads = _copy_is_local(stmts, i, a, b, occurrences.get(a, 0), nodes)
            if reads is not None:
                # These are all the reads of a (its occurrences are counted): after
                # this copy, in this block.
                for n in reads:
                    n.id = b
                del stmts[i]  # (with its store of a and read of b)
                occurrences[b] = occurrences.get(b, 0) + occurrences.get(a, 0) - 2
                occurrences[a] = 0
                load_counts[b] = load_counts.get(b, 0) + len(reads) - 1
                load_counts[a] = 0
                done += 1
                continue
        i += 1
    return done


def _copy_is_local(stmts, i, a, b, total: int,
                   nodes: Dict[int, List[ast.Name]]) -> Optional[List[ast.Name]]:
    """Every read of `a` comes after stmts[i] in this block, before `b` or `a` change:
    those reads (Name nodes), else None.

    `total` is how often `a` occurs in the whole function; `nodes` the Name
    nodes of statements of the block, by id, as far as known."""
    seen: List[ast.Name] = []
    Load = ast.Load
    for s in stmts[i + 1:]:
        names = nodes.get(id(s))
        if names is None:
            names = nodes[id(s)] = name_nodes(s)
        reads = [n for n in names if n.id == a and n.ctx.__class__ is Load]
        if reads and isinstance(s, (ast.If, ast.For, ast.While)):
            return None
        seen += reads
        if len(seen) == total - 1:
            return seen
        if _simple_stores(s, names) & {a, b}:
            return None
    return seen if len(seen) == total - 1 else None


def _substitute_in_block(stmts: List[ast.stmt], load_counts, counts) -> int:
    done = 0
    i = 0
    while i < len(stmts):
        s = stmts[i]
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                done += _substitute_in_block(inner, load_counts, counts)
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and _PART.match(s.targets[0].id) and \
                counts.get(s.targets[0].id) == 1 and load_counts.get(s.targets[0].id) == 1:
            name = s.targets[0].id
            reads = set(_loads(s.value))
            for j in range(i + 1, len(stmts)):
                use = stmts[j]
                if not isinstance(use, (ast.Assign, ast.AugAssign, ast.Return)):
                    break
                if isinstance(use, ast.AugAssign) and isinstance(use.target, ast.Name) and \
                        use.target.id in reads:
                    break
                if name in _loads(use.value):
                    _Rename(name, s.value).visit(use)
                    del stmts[i]
                    i -= 1
                    done += 1
                    break
                if _simple_stores(use) & (reads | {name}):
                    break
        i += 1
    return done


# -- shapes from values already kept ----------------------------------------------
def _shape_positions(fdef: ast.FunctionDef) -> List[tuple]:
    """(call, argument index, Name) for every read that needs only a shape."""
    out = []
    for node in walk(fdef):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in _SHAPE_ARGS:
            i = _SHAPE_ARGS[node.func.id]
            if len(node.args) > i and isinstance(node.args[i], ast.Name):
                out.append((node, i, node.args[i].id))
    return out


def _definition_paths(body, path=()) -> Dict[str, tuple]:
    out: Dict[str, tuple] = {}
    for i, s in enumerate(body):
        here = path + (i,)
        for n in _stores(s) if isinstance(s, (ast.Assign, ast.AugAssign)) else ():
            out.setdefault(n, here)
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                for n, p in _definition_paths(inner, here + (attr,)).items():
                    out.setdefault(n, p)
    return out


def share_shape_witnesses(t: Transformed) -> bool:
    """Read a shape from a value the adjoint keeps anyway (or a scalar constant).

    `unbroadcast(g, v)` needs only v's shape; when the analysis proves that an
    earlier value u has that shape and the adjoint reads u anyway, read u, so v
    need not be kept at all.
    """
    from .analyze import SCALAR
    shapes = t.activity.shapes
    if not shapes:
        return False
    params = set(t.nf.all_params)
    positions = _shape_positions(t.adjoint)
    if not positions:
        return False
    shape_reads = {id(call.args[i]) for call, i, _ in positions}
    value_reads = {n.id for n in name_nodes(t.adjoint)
                   if isinstance(n.ctx, ast.Load) and id(n) not in shape_reads} | params
    paths = _definition_paths(t.nf.node.body)
    members: Dict[str, List[str]] = {}
    for name, rep in shapes.items():
        members.setdefault(rep, []).append(name)
    changed = False
    for call, i, n in positions:
        rep = shapes.get(n)
        if rep is None:
            continue
        if rep == SCALAR:
            call.args[i] = ast.Constant(value=0.0)
            changed = True
            continue
        if n in value_reads:
            continue
        here = paths.get(n, ())
        best = None
        for m in sorted(members.get(rep, ()), key=lambda k: paths.get(k, ())):
            if m == n or m not in value_reads:
                continue
            there = paths.get(m, ())
            if m in params or (there < here and here[:len(there) - 1] == there[:-1]):
                best = m
                break
        if best is not None:
            call.args[i] = ast.Name(id=best, ctx=ast.Load())
            changed = True
    return changed


# -- a full reduction's cotangent stays a scalar ----------------------------------------
def elide_scalar_broadcasts(t: Transformed) -> None:
    """`v_bar = expand_reduced(g, x)` after `np.sum(x)` is g spread over x's
    shape. When every use multiplies it elementwise with a value of x's shape,
    the scalar g does the same job without allocating an array of x's size."""
    shapes = t.activity.shapes
    fdef = t.adjoint
    uses_of: Dict[str, List[ast.stmt]] = {}
    for u in _walk_statements(fdef.body):
        for n in set(_loads(_header(u))):
            uses_of.setdefault(n, []).append(u)
    for s in _walk_statements(fdef.body):
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
                isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Call) and
                isinstance(s.value.func, ast.Name) and
                s.value.func.id == "_s2s_expand_reduced" and len(s.value.args) == 2 and
                not s.value.keywords and isinstance(s.value.args[1], ast.Name)):
            continue
        name, like = s.targets[0].id, s.value.args[1].id
        shape = shapes.get(like)
        if shape is None:
            continue
        uses = [u for u in uses_of.get(name, []) if u is not s]
        if uses and all(_elementwise_with(u, name, shape, shapes) for u in uses):
            s.value = s.value.args[0]


def _elementwise_with(use, name: str, shape: str, shapes) -> bool:
    if not isinstance(use, (ast.Assign, ast.AugAssign)):
        return False
    value = use.value
    full = False
    for node in walk(value):
        if isinstance(node, ast.Name):
            if node.id != name and shapes.get(node.id) == shape:
                full = True
        elif isinstance(node, ast.Call):
            func = node.func
            ufunc = getattr(np, func.attr, None) if isinstance(func, ast.Attribute) else None
            if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and
                    func.value.id in ("np", "numpy", "_s2s_np") and
                    isinstance(ufunc, np.ufunc) and ufunc.signature is None):
                return False
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return False  # not elementwise
        elif not isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Attribute,
                                   ast.operator, ast.unaryop, ast.expr_context)):
            return False
    return full


# -- the forward: temporaries nobody keeps go back into expressions -----------------
def fuse_forward_temporaries(fdef: ast.FunctionDef, user_names: Set[str]) -> None:
    """`t = a * b; y = np.sum(t)` -> `y = np.sum(a * b)` for a compiler temporary
    used once and not kept for the adjoint. The forward then reads like the
    user's code, and NumPy frees such intermediates as soon as they are used
    instead of when the forward returns (a lower peak memory)."""
    marks = ("s2s_save_of", "s2s_init_of", "s2s_stack_of", "s2s_slot", "s2s_snapshot")
    while True:
        loads, counts, residual_reads = _name_counts(fdef)
        if not _fuse_block(fdef.body, loads, counts, residual_reads, user_names, marks):
            return


def _name_counts(fdef: ast.FunctionDef) -> tuple:
    """(reads per name, assignments per name, names the final return reads) of fdef."""
    loads: Dict[str, int] = {}
    for n in _loads(fdef):
        loads[n] = loads.get(n, 0) + 1
    counts: Dict[str, int] = {}
    for s in _walk_statements(fdef.body):
        for n in _stores(_header(s)):
            counts[n] = counts.get(n, 0) + 1
    returned = set(_loads(fdef.body[-1])) if fdef.body and \
        isinstance(fdef.body[-1], ast.Return) else set()
    return loads, counts, returned


def _fusable(s, loads, counts, residual_reads, user_names, marks) -> Optional[str]:
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
            isinstance(s.targets[0], ast.Name)):
        return None
    name = s.targets[0].id
    version = re.match(r"(.+)_\d+$", name)
    if name in user_names or (version and version.group(1) in user_names) or \
            counts.get(name) != 1 or loads.get(name) != 1 or \
            name in residual_reads or any(getattr(s, m, None) for m in marks):
        return None
    value = s.value
    if isinstance(value, (ast.Name, ast.Constant)) or not _pure(value):
        return None
    return name


def _fuse_block(stmts, loads, counts, residual_reads, user_names, marks) -> bool:
    changed = False
    for s in stmts:
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                changed |= _fuse_block(inner, loads, counts, residual_reads, user_names,
                                       marks)
    i = 0
    while i < len(stmts):
        s = stmts[i]
        name = _fusable(s, loads, counts, residual_reads, user_names, marks)
        if name is not None:
            reads = set(_loads(s.value))
            for j in range(i + 1, len(stmts)):
                use = stmts[j]
                simple = isinstance(use, (ast.Assign, ast.AugAssign, ast.Return, ast.Expr))
                if simple and name in _loads(use):
                    _Rename(name, s.value).visit(use)
                    del stmts[i]
                    i -= 1
                    changed = True
                    break
                if not simple or _stores(_header(use)) & (reads | {name}) or \
                        _mutates(use, reads):
                    break
        i += 1
    return changed


def _mutates(s, names: Set[str]) -> bool:
    """Does s write into (not rebind) one of names: x[i] = v, x += v, xs.append(v)?"""
    for node in walk(s):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id in names:
            return True
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and \
                node.target.id in names:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id in names and \
                node.func.attr in _IMPURE_METHODS:
            return True
    return False


# -- to-be-recorded: saves the adjoint never needs --------------------------------
def prune_saves(t: Transformed) -> bool:
    """Drop saved copies whose restored value nothing reads afterwards.

    A restore is dead when its variable is not live after it in the adjoint. A
    stack is dropped only when every pop of it is dead (its pushes and pops must
    stay paired); a single saved copy is dropped on its own.
    """
    live_after: Dict[int, Set[str]] = {}
    names = _Names()  # nothing changes until the drops below
    _live_block(t.adjoint.body, set(), live_after, names)
    slots: Dict[str, bool] = {}
    for s in _walk_statements(t.adjoint.body):
        var = getattr(s, "s2s_restore_of", None)
        if var is None:
            continue
        slot = s.s2s_slot
        dead = var not in live_after.get(id(s), set())
        slots[slot] = slots.get(slot, True) and dead
    # A saved copy read directly (x op= v reads its slot) is needed whatever the restores.
    read_outside: Set[str] = set()
    for s in _walk_statements(t.adjoint.body):
        if getattr(s, "s2s_slot", None) is None:
            for part in _header_parts(s):
                read_outside.update(names.loads(part))
                read_outside |= names.stores(part)
    dropped = {slot for slot, dead in slots.items() if dead and slot not in read_outside}
    if not dropped:
        return False
    t.adjoint.body = _drop_marked(t.adjoint.body, ("s2s_slot",), dropped)
    t.forward.body = _drop_marked(t.forward.body, ("s2s_slot",), dropped)
    still_saved = {getattr(s, "s2s_save_of", None) for s in _walk_statements(t.forward.body)}
    inits = {getattr(s, "s2s_init_of", None) for s in _walk_statements(t.forward.body)} - \
        still_saved - {None}
    t.forward.body = _drop_marked(t.forward.body, ("s2s_init_of",), inits)
    return True


def private_copies(t: Transformed) -> None:
    """The adjoint puts overwritten items back into its own copy of an array (or
    list) and pops its own copy of each stack, never the forward's, so the
    pullback can run many times."""
    names = []
    for s in _walk_statements(t.adjoint.body):
        var = getattr(s, "s2s_restore_item", None)
        if var is not None and var not in names:
            names.append(var)
        stack = _popped_stack(s)
        if stack is not None and stack not in names:
            names.append(stack)
    copies = [ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store())],
                         value=ast.Call(func=ast.Name(id="_s2s_copy_value", ctx=ast.Load()),
                                        args=[ast.Name(id=n, ctx=ast.Load())], keywords=[]),
                         type_comment=None) for n in names]
    t.adjoint.body[:0] = copies


def _header(s: ast.stmt) -> ast.AST:
    """The part of a statement that is not a nested block."""
    if isinstance(s, (ast.If, ast.While)):
        return s.test
    if isinstance(s, ast.For):
        return ast.Tuple(elts=[s.target, s.iter], ctx=ast.Load())
    return s


def _header_parts(s: ast.stmt) -> tuple:
    """The nodes that make `_header(s)` (which, for a loop, is a new node)."""
    if isinstance(s, (ast.If, ast.While)):
        return (s.test,)
    if isinstance(s, ast.For):
        return (s.target, s.iter)
    return (s,)


def _popped_stack(s: ast.stmt) -> Optional[str]:
    """`v = stack.pop()` restoring a saved value: the adjoint pops its own copy."""
    if getattr(s, "s2s_restore_of", None) is None or not isinstance(s, ast.Assign):
        return None
    value = s.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
            value.func.attr == "pop" and isinstance(value.func.value, ast.Name):
        return value.func.value.id
    return None


def drop_needless_inits(fdef: ast.FunctionDef) -> None:
    """`v = None` exists so that saving v before its first assignment works; it is
    not needed where v is always assigned before any statement that saves it."""
    inits = {s.s2s_init_of: s for s in fdef.body
             if getattr(s, "s2s_init_of", None) is not None}
    if not inits:
        return
    params = fwd_params(fdef)
    assigned = set(params)
    needed: Set[str] = set()
    for s in fdef.body:
        if getattr(s, "s2s_init_of", None) is not None:
            continue
        for sub in _walk_statements([s]):
            var = getattr(sub, "s2s_save_of", None)
            if var in inits and var not in assigned:
                needed.add(var)
        assigned = _definitely_assigned([s], assigned)
    fdef.body = [s for s in fdef.body
                 if getattr(s, "s2s_init_of", None) is None or s.s2s_init_of in needed]


def _uses(s: ast.stmt, names: _Names) -> Set[str]:
    used = set(names.loads(s))
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
        used.add(s.target.id)
    # Putting items back into x (or popping from a list) writes into the object x is
    # bound to: a use of x, so that the restore binding x back to the array the
    # forward wrote into stays (else the items go into whatever x was rebound to,
    # an argument or a global).
    return used


def _live_block(stmts: List[ast.stmt], live_out: Set[str], record: Dict[int, Set[str]],
                names: _Names):
    """Backward liveness over structured code; records the live set after each statement."""
    live = set(live_out)
    for s in reversed(stmts):
        record[id(s)] = set(live)
        live = _live_statement(s, live, record, names)
    return live


def _live_statement(s, live_after: Set[str], record, names: _Names) -> Set[str]:
    if isinstance(s, ast.If):
        return (_live_block(s.body, live_after, record, names) |
                _live_block(s.orelse, live_after, record, names) | set(names.loads(s.test)))
    if isinstance(s, (ast.For, ast.While)):
        header = set(names.loads(s.iter if isinstance(s, ast.For) else s.test))
        head = set(live_after) | header
        while True:
            body_in = _live_block(s.body, head, record, names)
            if isinstance(s, ast.For):
                body_in -= names.stores(s.target)
            new_head = set(live_after) | body_in | header
            if new_head == head:
                return head
            head = new_head
    return (live_after - names.stores(s)) | _uses(s, names)


def _drop_marked(stmts, attrs, dropped) -> List[ast.stmt]:
    out = []
    for s in stmts:
        if any(getattr(s, a, None) in dropped for a in attrs):
            continue
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                setattr(s, attr, _drop_marked(inner, attrs, dropped))
        out.append(s)
    return out


# -- dead code ------------------------------------------------------------------
def _pure(node: ast.AST) -> bool:
    for sub in walk(node):
        if isinstance(sub, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)):
            return False
        if isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Name):
                if func.id in _IMPURE_HELPERS:
                    return False
                if not (func.id.startswith("_s2s_") or func.id in _PURE_BUILTINS):
                    return False
            elif isinstance(func, ast.Attribute):
                if func.attr in _IMPURE_METHODS:
                    return False
                root = func
                while isinstance(root, ast.Attribute):
                    root = root.value
                if not (isinstance(root, ast.Name) and root.id in ("np", "numpy", "_s2s_np")) \
                        or ".random." in ast.unparse(func):
                    return False
            else:
                return False
    return True


def eliminate_dead(fdef: ast.FunctionDef, keep: Set[str]) -> bool:
    """Remove pure assignments nobody reads; True if anything was removed."""
    removed_any = False
    names = _Names()  # statements only leave the function below
    while True:
        used: Dict[str, int] = {}
        for s in _walk_statements(fdef.body):
            node = s
            if isinstance(s, (ast.If, ast.While)):
                node = s.test
            elif isinstance(s, ast.For):
                node = s.iter
            for n in names.loads(node):
                used[n] = used.get(n, 0) + 1
            if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and \
                    not _pure(s.value):
                # `v_bar += xs_bar.pop()` stays for its effect, so it reads v_bar.
                used[s.target.id] = used.get(s.target.id, 0) + 1
        removed = _remove_dead(fdef.body, used, keep, names)
        if not removed:
            return removed_any
        removed_any = True


def _remove_dead(stmts: List[ast.stmt], used, keep, names: _Names) -> bool:
    removed = False
    i = 0
    while i < len(stmts):
        s = stmts[i]
        dead = False
        if isinstance(s, ast.Assign) and all(isinstance(t, (ast.Name, ast.Tuple))
                                             for t in s.targets):
            targets = names.stores(s)
            if targets and not any(used.get(n, 0) > 0 or n in keep for n in targets) and \
                    _pure(s.value):
                dead = True
        elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
            if used.get(s.target.id, 0) <= 0 and s.target.id not in keep and _pure(s.value):
                dead = True
        if dead:
            del stmts[i]
            removed = True
            continue
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                removed |= _remove_dead(inner, used, keep, names)
        i += 1
    return removed


# -- residuals --------------------------------------------------------------------
def link_residuals(t: Transformed) -> None:
    """The forward returns exactly the values the adjoint reads; the adjoint unpacks them."""
    fwd, adj = t.forward, t.adjoint
    adj_args = {a.arg for a in adj.args.args}
    defined: Dict[str, None] = {a: None for a in param_list(fwd)}
    names = _Names()  # of the forward's statements before its return, which stay
    for s in _walk_statements(fwd.body):
        stored: Set[str] = set()
        for part in _header_parts(s):
            stored |= names.stores(part)
        for n in sorted(stored):
            defined.setdefault(n, None)
    reads = set(_loads(adj)) - adj_args
    residuals = [n for n in defined if n in reads]
    # A value the adjoint reads only for its shape is kept as shape and dtype.
    restored = {getattr(s, "s2s_restore_of", None) for s in _walk_statements(adj.body)}
    only_shape = _shape_only_names(adj)
    shape_only = {n for n in residuals if n not in restored and n not in fwd_params(fwd)
                  and n in only_shape}
    ret = fwd.body[-1]
    ret.value.elts[1] = ast.Tuple(elts=[_kept(n, n in shape_only) for n in residuals],
                                  ctx=ast.Load())
    if residuals:
        unpack = ast.Assign(targets=[ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Store())
                                                     for n in residuals], ctx=ast.Store())],
                            value=ast.Name(id=t.residuals, ctx=ast.Load()), type_comment=None)
        adj.body.insert(0, unpack)
    assigned = _definitely_assigned(fwd.body[:-1], fwd_params(fwd), names)
    maybe_undefined = [n for n in residuals if n not in assigned]
    inits = [ast.Assign(targets=[ast.Name(id=n, ctx=ast.Store())],
                        value=ast.Constant(value=None), type_comment=None)
             for n in maybe_undefined]
    fwd.body[:0] = inits
    t.residual_names = residuals


def _kept(name: str, shape_only: bool) -> ast.expr:
    value = ast.Name(id=name, ctx=ast.Load())
    if shape_only:
        return ast.Call(func=ast.Name(id="_s2s_meta", ctx=ast.Load()), args=[value], keywords=[])
    return value


def param_list(fdef: ast.FunctionDef) -> List[str]:
    """Every parameter of a generated function, in order (keyword-only ones too: the
    adjoint reads them like any value the forward had)."""
    a = fdef.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


def fwd_params(fdef: ast.FunctionDef) -> Set[str]:
    return set(param_list(fdef))


# Where reading a value needs only its shape and dtype.
_SHAPE_ARGS = {"_s2s_unbroadcast": 1, "_s2s_zeros_like": 0, "_s2s_expand_reduced": 1,
               "_s2s_reduced_count": 0}
_SHAPE_FUNCS = {"shape", "ndim", "size"}


def _shape_only_names(fdef: ast.FunctionDef) -> Set[str]:
    """Names every read of which (in fdef) uses only their shape and dtype."""
    allowed = set()
    for node in walk(fdef):
        if isinstance(node, ast.Call):
            func = node.func
            index = None
            if isinstance(func, ast.Name) and func.id in _SHAPE_ARGS:
                index = _SHAPE_ARGS[func.id]
            elif isinstance(func, ast.Attribute) and func.attr in _SHAPE_FUNCS and \
                    isinstance(func.value, ast.Name) and func.value.id in ("np", "numpy",
                                                                          "_s2s_np"):
                index = 0
            if index is not None and len(node.args) > index:
                allowed.add(id(node.args[index]))
        elif isinstance(node, ast.Attribute) and node.attr in ("shape", "ndim", "dtype", "size"):
            allowed.add(id(node.value))
    good: Dict[str, bool] = {}
    for n in walk(fdef):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            good[n.id] = good.get(n.id, True) and id(n) in allowed
    return {name for name, ok in good.items() if ok}


def _definitely_assigned(stmts, assigned: Set[str],
                         names: Optional[_Names] = None) -> Set[str]:
    out = set(assigned)
    for s in stmts:
        if isinstance(s, ast.If):
            out |= _definitely_assigned(s.body, out, names) & \
                _definitely_assigned(s.orelse, out, names)
        elif isinstance(s, (ast.For, ast.While)):
            continue
        else:
            out |= _stores(s) if names is None else names.stores(s)
    return out


# -- tidy -----------------------------------------------------------------------
def tidy(stmts: List[ast.stmt]) -> List[ast.stmt]:
    """Remove empty branches and loops, and comments left with nothing to describe."""
    out: List[ast.stmt] = []
    for s in stmts:
        if isinstance(s, ast.If):
            s.body = tidy(s.body)
            s.orelse = tidy(s.orelse)
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
            s.body = tidy(s.body)
            if not _has_code(s.body):
                if _pure(s.iter):
                    continue
                s.body = [ast.Pass()]
        elif isinstance(s, ast.While):
            s.body = tidy(s.body) or [ast.Pass()]
        elif isinstance(s, ast.Pass):
            continue
        out.append(s)
    # A comment must describe the code that follows it (a return is not that code).
    return [s for i, s in enumerate(out)
            if not (is_comment(s) and (i + 1 == len(out) or is_comment(out[i + 1]) or
                                       isinstance(out[i + 1], ast.Return)))]


def _has_code(stmts) -> bool:
    return any(not is_comment(s) and not isinstance(s, ast.Pass) for s in stmts)


# -- the adjoint: temporaries read once go into their reader -------------------------
def fuse_adjoint_temporaries(fdef: ast.FunctionDef) -> None:
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
    loads, counts, returned = _name_counts(fdef)
    _fuse_adjoint_block(fdef.body, loads, counts, returned, {})


def _fuse_adjoint_block(stmts: List[ast.stmt], loads, counts, returned, plain) -> None:
    for s in stmts:
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                _fuse_adjoint_block(inner, loads, counts, returned, plain)
    i = 0
    while i < len(stmts):
        s = stmts[i]
        name = _adjoint_temporary(s, loads, counts, returned)
        if name is not None:
            reads = set(_loads(s.value))
            for use in stmts[i + 1:]:
                if not isinstance(use, (ast.Assign, ast.AugAssign, ast.Return)):
                    break
                if not isinstance(use, ast.Return):
                    known = plain.get(id(use))
                    if known is None:
                        known = plain[id(use)] = (use, _plain_assignment(use))
                    if not known[1]:
                        break
                if name in _loads(use):
                    if _in_arithmetic(use.value, name):
                        _Rename(name, s.value).visit(use)
                        plain.pop(id(use), None)   # its value changed
                        del stmts[i]
                        i -= 1
                    break
                if isinstance(use, ast.AugAssign) or _stores(use) & (reads | {name}):
                    break
        i += 1


def _adjoint_temporary(s: ast.stmt, loads, counts, returned) -> Optional[str]:
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
            isinstance(s.targets[0], ast.Name)):
        return None
    name = s.targets[0].id
    if counts.get(name) != 1 or loads.get(name) != 1 or name in returned or \
            not _COTANGENT.match(name):
        return None
    if not isinstance(s.value, (ast.BinOp, ast.UnaryOp)) or not _writes_nothing(s.value):
        return None
    return name


def _in_arithmetic(value: ast.expr, name: str) -> bool:
    """Whether `name` is read in `value` as an operand of arithmetic (or is all
    of it): where NumPy can reuse a temporary, and where an expression put in
    its place still reads as one formula, not as an argument buried in calls."""
    if isinstance(value, ast.Name):
        return value.id == name
    for node in ast.walk(value):
        if isinstance(node, ast.BinOp):
            operands = (node.left, node.right)
        elif isinstance(node, ast.UnaryOp):
            operands = (node.operand,)
        else:
            continue
        if any(isinstance(o, ast.Name) and o.id == name for o in operands):
            return True
    return False


def _plain_assignment(s: ast.stmt) -> bool:
    """`a = E`, `a, b = E` or `a += E` with E pure and writing into nothing."""
    if isinstance(s, ast.Assign):
        simple = all(isinstance(t, ast.Name) or
                     (isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts))
                     for t in s.targets)
    elif isinstance(s, ast.AugAssign):
        simple = isinstance(s.target, ast.Name)
    else:
        return False
    return simple and _writes_nothing(s.value)


def _writes_nothing(value: ast.expr) -> bool:
    """Pure (see _pure), and no `out=` or `ufunc.at`, which _pure does not look for."""
    return _pure(value) and not any(
        (isinstance(n, ast.keyword) and n.arg == "out") or
        (isinstance(n, ast.Attribute) and n.attr == "at") for n in ast.walk(value))


# -- unbroadcast of an unbroadcast ----------------------------------------------------
def collapse_unbroadcast_chains(fdef: ast.FunctionDef) -> bool:
    """`s_bar = unbroadcast(g, s); a_bar = unbroadcast(s_bar, a)` -> `a_bar =
    unbroadcast(g, a)`, when s_bar is read only that way.

    s_bar is the cotangent of an operand s of `z = s + c` (g is z's), and a an
    operand of the op that made s: a broadcasts to s and s to z, so summing g
    down to s's shape and then to a's is summing it down to a's shape at once.
    Then s is no longer a shape witness, and a loop stops keeping it for every
    step (`W @ h + U @ x + b` in an RNN: two stacks fewer)."""
    loads, counts, _ = _name_counts(fdef)
    return _collapse_block(fdef.body, loads, counts)


def _unbroadcast_of(node: ast.AST, name: Optional[str] = None) -> Optional[ast.Call]:
    """node, when it is `_s2s_unbroadcast(<a Name: `name` if given>, like)`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id == "_s2s_unbroadcast" and len(node.args) == 2 and \
            not node.keywords and isinstance(node.args[0], ast.Name) and \
            (name is None or node.args[0].id == name):
        return node
    return None


def _collapse_block(stmts: List[ast.stmt], loads, counts) -> bool:
    changed = False
    for s in stmts:
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                changed |= _collapse_block(inner, loads, counts)
    i = 0
    while i < len(stmts):
        s = stmts[i]
        call = _unbroadcast_of(s.value) if isinstance(s, ast.Assign) and \
            len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) else None
        if call is not None:
            name, g = s.targets[0].id, call.args[0].id
            uses = None
            if counts.get(name) == 1 and loads.get(name, 0) > 0 and g != name:
                uses = _unbroadcasts_reading(stmts[i + 1:], name, g, loads[name])
            if uses is not None:
                for use in uses:
                    use.args[0] = ast.Name(id=g, ctx=ast.Load())
                loads[g] = loads.get(g, 0) + len(uses) - 1
                del stmts[i]
                changed = True
                continue
        i += 1
    return changed


def _unbroadcasts_reading(stmts: List[ast.stmt], name: str, g: str,
                          wanted: int) -> Optional[List[ast.Call]]:
    """The `_s2s_unbroadcast(name, ...)` calls in stmts, when they are all of name's
    `wanted` reads and nothing before the last of them can change g; else None."""
    found: List[ast.Call] = []
    for use in stmts:
        reads = sum(1 for n in name_nodes(use) if n.id == name)
        if reads:
            calls = [c for c in ast.walk(use) if _unbroadcast_of(c, name) is not None]
            if len(calls) != reads or not isinstance(use, (ast.Assign, ast.AugAssign)):
                return None
            found.extend(calls)
            if len(found) == wanted:
                return found
        if g in _stores(_header(use)):
            return None
        if isinstance(use, ast.Assign) and \
                all(isinstance(t, ast.Name) for t in use.targets) and \
                (_writes_nothing(use.value) or _is_pop(use.value)):
            continue   # a rebinding of another name: g's array is untouched
        if isinstance(use, ast.AugAssign) and isinstance(use.target, ast.Name) and \
                use.target.id != g and _writes_nothing(use.value):
            continue   # in place into another cotangent, which only its name holds
        return None    # anything else (a call statement, a loop, a comment): stop
    return None


# -- a product's shape from its operands -----------------------------------------------
_MATMUL_GRADS = ("_s2s_matmul_grad_a", "_s2s_matmul_grad_b")


def product_shapes_from_operands(fdef: ast.FunctionDef) -> bool:
    """`p_bar = unbroadcast(g, p)` ... `matmul_grad_a(p_bar, a, b)` ->
    `p_bar = unbroadcast_matmul(g, a, b)`.

    The matmul rule passes p_bar as the cotangent of `a @ b`, so p has the shape
    of a @ b with the a and b that rule reads. When nothing between the two
    statements mentions a, b or p_bar (plain assignments to other names, pops
    of other stacks), they hold the same values at the unbroadcast, and the
    shape comes from them: p is no longer a shape witness, and a loop stops
    saving it at every step (`W @ h` in an RNN)."""
    changed = False
    for block in _blocks(fdef.body):
        for i, s in enumerate(block):
            call = _unbroadcast_of(s.value) if isinstance(s, ast.Assign) and \
                len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) else None
            if call is None or not isinstance(call.args[1], ast.Name):
                continue
            operands = _product_operands(block[i + 1:], s.targets[0].id)
            if operands is not None:
                call.func = ast.Name(id="_s2s_unbroadcast_matmul", ctx=ast.Load())
                call.args = [call.args[0]] + [ast.Name(id=n, ctx=ast.Load()) for n in operands]
                changed = True
    return changed


def _blocks(stmts: List[ast.stmt]) -> Iterable[List[ast.stmt]]:
    """stmts and every statement list nested in it."""
    yield stmts
    for s in stmts:
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                yield from _blocks(inner)


def _product_operands(stmts: List[ast.stmt], cot: str) -> Optional[tuple]:
    """(a, b) of the first `matmul_grad_a/b(cot, a, b)` in stmts (a and b plain
    names), when no statement before it mentions cot, a or b or does anything
    but assign pure values or pops to other names; else None."""
    before: List[ast.stmt] = []
    for use in stmts:
        for c in ast.walk(use) if isinstance(use, (ast.Assign, ast.AugAssign)) else ():
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and \
                    c.func.id in _MATMUL_GRADS and len(c.args) == 3 and not c.keywords and \
                    all(isinstance(a, ast.Name) for a in c.args) and c.args[0].id == cot:
                a, b = c.args[1].id, c.args[2].id
                if cot in (a, b) or any(n.id in (a, b, cot)
                                        for s in before for n in name_nodes(s)):
                    return None
                return a, b
        if any(n.id == cot for n in name_nodes(use)):
            return None
        if not (is_comment(use) or _plain_assignment(use) or
                (isinstance(use, ast.Assign) and _is_pop(use.value) and
                 all(isinstance(t, ast.Name) for t in use.targets))):
            return None
        before.append(use)
    return None


def _is_pop(value: ast.expr) -> bool:
    """`stack.pop()`: takes a saved value off a stack, touching no cotangent."""
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
        value.func.attr == "pop" and isinstance(value.func.value, ast.Name) and \
        not value.args and not value.keywords
