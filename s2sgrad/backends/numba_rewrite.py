"""Rewrite a generated forward/adjoint pair into the subset numba compiles in nopython mode.

This module does not import numba: it is pure `ast` work, tested on its own.
The input is the text s2sgrad emits (`CompiledFunction.module_source`); the
output is the text of up to three functions:

- `<name>_nb_fused(*params, *live)`: the forward, then the adjoint seeded with
  1, in one function: `(output, gradients)`. The residual tuple is never built
  and the stacks are not copied, because they are used once. This is what
  `grad`/`value_and_grad` run.
- `<name>_nb_forward(*params, *live)` and `<name>_nb_adjoint(residuals,
  cotangent, *live)`: the two halves, for `vjp` and for calls between user
  functions.

What changes on the way (everything else is the generated code as it is):

- `_s2s_<helper>(...)` becomes `_nb_<helper>(...)`, a numba version of the
  same helper (`numba_helpers.py`); a helper without one makes the function
  unsupported. `_s2s_meta(x)` becomes `x`.
- Names the generated code reads from the user's module or closure that hold
  data (numbers, arrays, tuples) become extra parameters (`live`), passed on
  every call, so they are read live as the NumPy backend reads them, instead
  of being frozen into the machine code.
- `range` objects kept as residuals become `(start, stop, step)` tuples;
  `for i in r`, `reversed(r)` and `len(r)` on them become integer loops.
- `x = None` placeholders (the value a loop's stack saves before the first
  iteration) become a placeholder of the type the variable later holds
  (`0.0`, an empty array of the right rank and dtype, ...), learned from one
  run of the NumPy forward, so that numba sees one type per variable and per
  stack instead of optional values. A placeholder is saved and restored like
  the `None` was, and never read: the generated code reads a variable only
  after the forward assigned it.
- `a @ b` and `np.matmul`/`np.dot` become `_nb_matmul`/`_nb_dot`, which loop
  over small operands (no BLAS call, short compile) and call BLAS for large
  ones.
"""
from __future__ import annotations

import ast
import builtins
import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from .numba_fuse import fuse_elementwise
from .numba_names import NUMPY_CALLS, fresh_name
from .numba_stacks import preallocate_stacks

HELPER_PREFIX = "_s2s_"
NB_PREFIX = "_nb_"

# The runtime helpers (`_s2s_<name>`) with a numba version: those `numba_helpers`
# gives a stub of the same name, its own building blocks (OWN_HELPERS) aside.
# Written out, not read from there: that module imports numba, which a call left
# to NumPy never pays for; tests/test_jit.py checks the two agree.
NUMBA_HELPERS = frozenset({
    "unbroadcast", "unbroadcast_matmul", "zeros_like", "ones_like", "expand_reduced",
    "reduced_count",
    "copy_value", "copy_adjoint", "snapshot", "matmul_grad_a", "matmul_grad_b",
    "dot_grad_a", "dot_grad_b", "balanced_max_mask", "safe_log", "clip_grads", "clip_grad_a",
    "real_only", "add_at", "copy_item", "restore_item", "zero_item", "accumulate",
    "add", "transpose_grad", "extremum_grad", "safe_divide", "none_to_zero",
    "log_softmax", "softmax", "logsumexp", "sigmoid_exp", "sigmoid_tanh", "loop_items",
    "loop_items_grad", "cast_into", "concatenate_grad", "stack_grad", "real_part", "written_grad",
    "unshared",
})

# NumPy's functions that join a sequence of arrays (numba's take a tuple of them).
def numpy_attr(node: ast.AST) -> Optional[str]:
    """`name` where node is `np.name` (NumPy by either name generated code gives it)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
            node.value.id in ("np", HELPER_PREFIX + "np"):
        return node.attr
    return None


_JOINS = frozenset({"concatenate", "stack", "vstack", "hstack", "column_stack", "dstack"})

def _joined_as_tuple(node: ast.Call) -> ast.Call:
    """np.concatenate([h, x]) (and stack, vstack, ...) given a tuple: numba joins a
    tuple of arrays, not a list."""
    if numpy_attr(node.func) in _JOINS and node.args and isinstance(node.args[0], ast.List):
        node.args[0] = ast.copy_location(ast.Tuple(elts=node.args[0].elts, ctx=ast.Load()),
                                         node.args[0])
    return node


# Run-time checks that a value is not a list, tuple or dict, or not complex
# (generated where the compiler could not prove it): dropped from numba code,
# which takes no structures, and whose variants are keyed by the kinds of their
# arguments and checked against the NumPy backend's first run, which checks.
STRUCTURE_GUARDS = frozenset({"no_sequence_arithmetic", "real_value", "indexed_by_values",
                              "item_unshared"})

# Helpers the rewrite itself calls (numba_helpers.py defines them too).
OWN_HELPERS = ("range", "riter", "rrev", "rlen", "ritem", "seed", "matmul", "dot")

def _range_of(triple: ast.expr, reverse: bool) -> ast.expr:
    """range(t[0], t[1], t[2]), or the reversed range, for a (start, stop, step) triple.

    Written out (no helper to compile); a triple that is not a plain name is
    bound by `_nb_rrev_args`, a cached helper.
    """
    if not isinstance(triple, ast.Name):
        name = NB_PREFIX + ("rrev_args" if reverse else "riter_args")
        return ast.Call(func=ast.Name(id="range", ctx=ast.Load()),
                        args=[ast.Starred(value=ast.Call(
                            func=ast.Name(id=name, ctx=ast.Load()), args=[triple],
                            keywords=[]), ctx=ast.Load())], keywords=[])
    items = [ast.Subscript(value=ast.Name(id=triple.id, ctx=ast.Load()),
                           slice=ast.Constant(value=i), ctx=ast.Load()) for i in range(3)]
    if not reverse:
        return ast.Call(func=ast.Name(id="range", ctx=ast.Load()), args=items, keywords=[])
    return ast.Call(func=ast.Name(id="range", ctx=ast.Load()), args=[ast.Starred(
        value=ast.Call(func=ast.Name(id=NB_PREFIX + "rrev_args", ctx=ast.Load()),
                       args=[ast.Name(id=triple.id, ctx=ast.Load())], keywords=[]),
        ctx=ast.Load())], keywords=[])


def _atom(node: ast.AST) -> bool:
    """A name or a number (-1.0 included)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
        return isinstance(node, ast.Constant)
    return isinstance(node, (ast.Name, ast.Constant))


def _arithmetic(node: ast.AST) -> bool:
    """An elementwise operation numba would fuse with the one around it."""
    if isinstance(node, ast.BinOp):
        return not isinstance(node.op, ast.MatMult)
    if isinstance(node, ast.UnaryOp):
        return not _atom(node)
    return False


_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}
_AUGOPS = {ast.Add: "iadd", ast.Sub: "isub", ast.Mult: "imul"}
_COMPARES = {ast.Gt: "gt", ast.Lt: "lt", ast.GtE: "ge", ast.LtE: "le", ast.Eq: "eq"}
_NP_ALIASES = {"absolute": "abs", "amax": "max", "amin": "min"}
_NEW_ARRAYS = frozenset({"zeros", "ones"})     # np.zeros(shape): cached np_zeros
# np functions with a cached wrapper, and how many positional arguments it takes.
_NP_WRAPPED = {**{f: n for f, n in NUMPY_CALLS.items() if f not in _NEW_ARRAYS},
               **{alias: NUMPY_CALLS[f] for alias, f in _NP_ALIASES.items()}}
_MATMUL = {(2, 2): "mm22", (2, 1): "mm21", (1, 2): "mm12", (1, 1): "mm11"}
# The shape of a @ b by the operands' ranks: (operand, axis) of each dimension.
_PRODUCT_SHAPE = {(2, 1): ((0, 0),), (1, 2): ((1, 1),), (2, 2): ((0, 0), (1, 1))}


def _ranks(kinds) -> Optional[Tuple[int, int]]:
    if kinds is None or any(k is None or k[0] != "a" for k in kinds):
        return None
    return tuple(k[1] for k in kinds)


_REDUCTIONS = {"sum": "sum", "max": "max", "amax": "max", "min": "min", "amin": "min",
               "prod": "prod", "mean": "mean"}

# Names numba knows as builtins; anything else read as a global must be bound.
BUILTINS = frozenset(dir(builtins))


class Unsupported(Exception):
    """The generated code uses something the numba backend cannot compile."""


@dataclass
class Pair:
    """The generated pair, parsed, with what the rewrite needs to know about it."""

    forward: ast.FunctionDef
    adjoint: ast.FunctionDef
    name: str
    params: List[str]
    out_expr: ast.expr
    residual_elts: List[ast.expr]            # the forward's residual tuple, as written
    residual_names: List[Optional[str]]      # the name each element holds (meta removed)
    adjoint_targets: Optional[List[str]]     # the adjoint's unpacking of `residuals`
    cotangent: str                           # the adjoint's second parameter
    none_inits: Set[str] = field(default_factory=set)
    stacks: Dict[str, Set[str]] = field(default_factory=dict)   # stack -> names pushed
    ranges: Set[str] = field(default_factory=set)               # forward names holding ranges
    range_stacks: Set[str] = field(default_factory=set)
    free: List[str] = field(default_factory=list)   # globals/closure names read
    unaliased: Set[str] = field(default_factory=set)   # builtins read through an alias


def _names_stored(fn: ast.FunctionDef) -> Set[str]:
    out = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
    return out


# Builtins numba compiles itself. Generated code reads them through a bound alias
# (`_s2s_builtin_range`) where the user's function has a variable of that name.
_NATIVE_BUILTINS = frozenset({"range", "len", "min", "max", "abs", "float", "int"})


def _unalias_builtins(fns: Sequence[ast.FunctionDef]) -> Set[str]:
    """Read `_s2s_builtin_<name>` as <name> where neither function of the pair binds
    <name> (numba's code is the two in one function); the names so read. An alias of
    a name the pair binds stays, and the rewrite refuses it."""
    stored = set().union(*(_names_stored(fn) for fn in fns))
    prefix = HELPER_PREFIX + "builtin_"
    out = set()
    for fn in fns:
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and node.id.startswith(prefix):
                name = node.id[len(prefix):]
                if name in _NATIVE_BUILTINS and name not in stored:
                    node.id = name
                    out.add(name)
    return out


def _names_loaded(fn: ast.FunctionDef) -> Set[str]:
    return {node.id for node in ast.walk(fn)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _is_call(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        node.func.id == name


def _method_call(node: ast.AST, method: str) -> Optional[Tuple[str, List[ast.expr]]]:
    """(receiver name, args) for `name.method(args)`, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr == method and isinstance(node.func.value, ast.Name) and \
            not node.keywords:
        return node.func.value.id, node.args
    return None


def _users_add_at(node: ast.Call) -> bool:
    """node is the user's `np.add.at(a, i, b)`: numba's `add_at` helper computes it
    (repeated indices accumulate; a broadcast `b` it cannot type runs on NumPy)."""
    f = node.func
    return isinstance(f, ast.Attribute) and f.attr == "at" and \
        numpy_attr(f.value) == "add" and len(node.args) == 3 and not node.keywords


def _without_releases(fwd: ast.FunctionDef, adj: ast.FunctionDef) -> None:
    """The pair without what spares NumPy memory (compiler/optimize/release.py and
    inplace.py): numba's code is given a tuple it does not empty, its variables are
    typed for the whole function (no `del`), and its loops allocate no temporary
    (`_s2s_subtract_into(c, e)` is `c - e` again)."""
    first = adj.body[0] if adj.body else None
    if isinstance(first, ast.Assign) and _is_call(first.value, HELPER_PREFIX + "take") and \
            len(first.value.args) == 1:
        first.value = first.value.args[0]
    _delete_none(adj.body)
    for fn in (fwd, adj):
        _Differences().visit(fn)


def _delete_none(body: List[ast.stmt]) -> None:
    """body (and its blocks) without `del` statements."""
    body[:] = [s for s in body if not isinstance(s, ast.Delete)]
    for s in body:
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                _delete_none(inner)


class _Differences(ast.NodeTransformer):
    """`_s2s_subtract_into(c, e)` as `c - e`."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if _is_call(node, HELPER_PREFIX + "subtract_into"):
            return ast.copy_location(ast.BinOp(left=node.args[0], op=ast.Sub(),
                                               right=node.args[1]), node)
        return node


def _spell_out_item_cotangents(body: List[ast.stmt]) -> None:
    """`c_bar = _s2s_items_cotangent(c, (k, v), ...)` back into what it stands for,
    `c_bar = _s2s_zeros_like(c)` and `_s2s_add_at(c_bar, k, v)` per pair: the helpers
    numba has (optimize/items.py folds them for NumPy's sake)."""
    for i in range(len(body) - 1, -1, -1):
        s = body[i]
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                _spell_out_item_cotangents(inner)
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and \
                _is_call(s.value, HELPER_PREFIX + "items_cotangent"):
            bar, (container, *pairs) = s.targets[0].id, s.value.args
            body[i:i + 1] = [ast.Assign(
                targets=[ast.Name(id=bar, ctx=ast.Store())], type_comment=None,
                value=ast.Call(func=ast.Name(id=HELPER_PREFIX + "zeros_like", ctx=ast.Load()),
                               args=[container], keywords=[]))] + [
                ast.Expr(value=ast.Call(func=ast.Name(id=HELPER_PREFIX + "add_at", ctx=ast.Load()),
                                        args=[ast.Name(id=bar, ctx=ast.Load()), *pair.elts],
                                        keywords=[])) for pair in pairs]


def parse_pair(source: str, forward_name: str, adjoint_name: str) -> Pair:
    """Find the forward and adjoint in the generated text and read their layout."""
    tree = ast.parse(source)
    fns = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if forward_name not in fns or adjoint_name not in fns:
        raise Unsupported("the generated module does not define the forward and adjoint")
    fwd, adj = fns[forward_name], fns[adjoint_name]
    _without_releases(fwd, adj)
    _spell_out_item_cotangents(adj.body)
    unaliased = _unalias_builtins((fwd, adj))
    a = fwd.args
    if a.vararg or a.kwarg:
        raise Unsupported("*args/**kwargs parameters")
    params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    last = fwd.body[-1] if fwd.body else None
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Tuple)
            and len(last.value.elts) == 2 and isinstance(last.value.elts[1], ast.Tuple)):
        raise Unsupported("the forward does not end in `return output, (residuals...)`")
    if sum(isinstance(n, ast.Return) for n in ast.walk(fwd)) != 1:
        raise Unsupported("the forward returns in more than one place")
    out_expr, res = last.value.elts
    elts = list(res.elts)
    names: List[Optional[str]] = []
    for e in elts:
        if isinstance(e, ast.Name):
            names.append(e.id)
        elif _is_call(e, HELPER_PREFIX + "meta") and len(e.args) == 1 and \
                isinstance(e.args[0], ast.Name):
            names.append(e.args[0].id)
        else:
            names.append(None)
    if len(adj.args.args) != 2 or adj.args.vararg or adj.args.kwarg or adj.args.kwonlyargs:
        raise Unsupported("the adjoint does not take (residuals, cotangent)")
    res_param, cot = adj.args.args[0].arg, adj.args.args[1].arg
    if not adj.body or not isinstance(adj.body[-1], ast.Return) or \
            sum(isinstance(n, ast.Return) for n in ast.walk(adj)) != 1:
        raise Unsupported("the adjoint returns in more than one place")
    targets: Optional[List[str]] = None
    uses = [n for n in ast.walk(adj) if isinstance(n, ast.Name) and n.id == res_param]
    first = adj.body[0]
    if isinstance(first, ast.Assign) and len(first.targets) == 1 and \
            isinstance(first.value, ast.Name) and first.value.id == res_param:
        tgt = first.targets[0]
        if isinstance(tgt, ast.Name) and len(elts) == 1:
            targets = [tgt.id]
        elif isinstance(tgt, ast.Tuple) and all(isinstance(t, ast.Name) for t in tgt.elts) \
                and len(tgt.elts) == len(elts):
            targets = [t.id for t in tgt.elts]
        else:
            raise Unsupported("the adjoint unpacks its residuals in an unexpected way")
        if len(uses) != 1:
            raise Unsupported("the adjoint reads its residuals more than once")
    elif uses:
        raise Unsupported("the adjoint reads its residuals in an unexpected way")
    pair = Pair(forward=fwd, adjoint=adj, name=forward_name[:-len("_forward")]
                if forward_name.endswith("_forward") else forward_name,
                params=params, out_expr=out_expr, residual_elts=elts, residual_names=names,
                adjoint_targets=targets, cotangent=cot, unaliased=unaliased)
    _read_forward(pair)
    stored = _names_stored(fwd) | _names_stored(adj)
    free = sorted((_names_loaded(fwd) | _names_loaded(adj)) - stored - {res_param, cot})
    pair.free = [n for n in free if not n.startswith(HELPER_PREFIX)]
    return pair


def _read_forward(pair: Pair) -> None:
    """None placeholders, stacks and range-valued names of the forward."""
    fwd = pair.forward
    empty_lists = set()
    for node in ast.walk(fwd):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if isinstance(node.value, ast.Constant) and node.value.value is None:
                pair.none_inits.add(name)
            elif isinstance(node.value, ast.List) and not node.value.elts:
                empty_lists.add(name)
            elif _is_call(node.value, "range"):
                pair.ranges.add(name)
        call = _method_call(node, "append")
        if call is not None and len(call[1]) == 1:
            stack, (item,) = call
            if stack in empty_lists or True:
                pair.stacks.setdefault(stack, set())
                if isinstance(item, ast.Name):
                    pair.stacks[stack].add(item.id)
                else:
                    pair.stacks[stack].add("")
    pair.stacks = {s: items for s, items in pair.stacks.items() if s in empty_lists}
    pair.range_stacks = {s for s, items in pair.stacks.items() if items & pair.ranges}
    for s in pair.range_stacks:
        if not pair.stacks[s] <= pair.ranges:
            raise Unsupported("a stack holds ranges and other values")


_MUTATING_HELPERS = frozenset({"restore_item", "zero_item", "add_at", "restore_value"})
_VIEW_METHODS = frozenset({"reshape", "transpose", "ravel", "view", "swapaxes", "squeeze",
                           "diagonal", "T", "real", "imag", "flat"})


def writes_into_arguments(pair: Pair) -> bool:
    """Whether the forward may write into an argument's array (conservatively).

    Names that may share an argument's memory: the parameters, and names
    assigned a name, a subscript, an attribute or a view method of such a
    name. A write is a subscript assignment, an augmented assignment (of a
    name not known to hold a number) or a mutating helper call on one of them.
    """
    fwd = pair.forward
    shared = set(pair.params)

    def root(e: ast.AST) -> Optional[str]:
        while True:
            if isinstance(e, ast.Name):
                return e.id
            if isinstance(e, ast.Subscript):
                e = e.value
            elif isinstance(e, ast.Attribute):
                e = e.value
            elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and \
                    e.func.attr in _VIEW_METHODS:
                e = e.func.value
            else:
                return None
    changed = True
    while changed:
        changed = False
        for node in ast.walk(fwd):
            if isinstance(node, ast.Assign):
                r = root(node.value)
                if r in shared:
                    for t in node.targets:
                        for n in ast.walk(t):
                            if isinstance(n, ast.Name) and n.id not in shared:
                                shared.add(n.id)
                                changed = True
            elif isinstance(node, ast.For) and root(node.iter) in shared:
                for n in ast.walk(node.target):
                    if isinstance(n, ast.Name) and n.id not in shared:
                        shared.add(n.id)
                        changed = True
    for node in ast.walk(fwd):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and \
                            root(n) in shared:
                        return True
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and \
                    node.target.id in shared:
                return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id[len(HELPER_PREFIX):] in _MUTATING_HELPERS and node.args and \
                root(node.args[0]) in shared:
            return True
    return False


# -- learning placeholder types --------------------------------------------------------
# A kind is what numba's type of a value depends on: ("s", dtype) for a number,
# ("a", ndim, dtype) for an array, ("r",) for a range kept as a triple.
Kind = Tuple


def kind_of(value: Any) -> Optional[Kind]:
    """The kind of a value seen at run time (None: no kind, or not one numba has)."""
    from ..runtime import ArrayMeta
    if isinstance(value, (bool, np.bool_)):
        return ("s", "bool")
    if isinstance(value, np.generic):
        return ("s", value.dtype.name) if value.dtype.kind in "fciu" else None
    if isinstance(value, int):
        return ("s", "int64")
    if isinstance(value, float):
        return ("s", "float64")
    if isinstance(value, complex):
        return ("s", "complex128")
    if isinstance(value, (np.ndarray, ArrayMeta)):
        dtype = np.dtype(value.dtype)
        return ("a", len(value.shape), dtype.name) if dtype.kind in "fciub" else None
    if isinstance(value, range):
        return ("r",)
    if isinstance(value, tuple) and value:
        kinds = tuple(kind_of(v) for v in value)
        return None if any(k is None for k in kinds) else ("t", kinds)
    if isinstance(value, list):
        items = [kind_of(v) for v in value if v is not None]
        return ("l", items[-1]) if items and items[-1] is not None else None
    return None


def placeholder_for(kind: Optional[Kind]) -> Optional[str]:
    """Source of a value of this kind (never read: it stands where a None stood)."""
    if kind is None:
        return None
    if kind[0] == "r":
        return "(0, 0, 1)"
    if kind[0] == "t":
        items = [placeholder_for(k) for k in kind[1]]
        return None if any(i is None for i in items) else "(" + ", ".join(items) + ",)"
    if kind[0] == "l":
        item = placeholder_for(kind[1])
        return None if item is None else f"{NB_PREFIX}empty_list({item})"
    if kind[0] == "s":
        return {"float64": "0.0", "int64": "0", "bool": "False",
                "complex128": "0j"}.get(kind[1], f"np.{kind[1]}(0)")
    _, ndim, dtype = kind
    if dtype == "float64" and ndim <= 3:
        return f"{NB_PREFIX}empty_f64_{ndim}()"     # compiled once per machine
    return f"np.empty({(0,) * ndim!r}, np.{'bool_' if dtype == 'bool' else dtype})"


def placeholder(value: Any) -> Optional[str]:
    return placeholder_for(kind_of(value))


def callee_residuals(pair: Pair, callees: Sequence[str], residuals: Sequence[Any]
                     ) -> Dict[str, tuple]:
    """For each callee forward name, one residual tuple it returned in a NumPy run.

    The caller keeps a callee's residuals in a variable (`y, g_res =
    g_forward(...)`), itself a residual or pushed on a stack that is one.
    """
    holders: Dict[str, str] = {}
    for node in ast.walk(pair.forward):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Tuple) and len(node.targets[0].elts) == 2 \
                and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Name) and node.value.func.id in callees and \
                isinstance(node.targets[0].elts[1], ast.Name):
            holders[node.targets[0].elts[1].id] = node.value.func.id
    found: Dict[str, tuple] = {}
    for name, value in zip(pair.residual_names, residuals):
        candidates = []
        if name in holders:
            candidates = [(holders[name], value)]
        for pushed in pair.stacks.get(name, ()):
            if pushed in holders and isinstance(value, list):
                candidates += [(holders[pushed], v) for v in value]
        for callee, v in candidates:
            if isinstance(v, tuple) and callee not in found:
                found[callee] = v
    return found


def learn_placeholders(pair: Pair, residuals: Sequence[Any],
                       seeds: Optional[Dict[str, Kind]] = None) -> Dict[str, str]:
    """For each `x = None` of the forward, a placeholder of the type x later holds.

    The types come from the residuals of one run of the NumPy forward (the
    final value of x when it is a residual, else the items of a stack x is
    pushed on), and, for a name that run never assigned (a branch not
    taken), from the kinds of the expressions assigned to it (`infer_kinds`,
    seeded with the parameters' kinds). A name of unknown kind keeps its None.
    """
    values: Dict[str, List[Any]] = {}
    if len(residuals) != len(pair.residual_names):
        raise Unsupported("the forward's residuals do not match its text")
    for name, value in zip(pair.residual_names, residuals):
        if name is None:
            continue
        values.setdefault(name, []).append(value)
        for pushed in pair.stacks.get(name, ()):
            if isinstance(value, list):
                values.setdefault(pushed, []).extend(value)
    inferred: Optional[Dict[str, Kind]] = None
    out: Dict[str, str] = {}
    for name in sorted(pair.none_inits):
        if name in pair.ranges:
            out[name] = "(0, 0, 1)"
            continue
        seen = [v for v in values.get(name, ()) if v is not None]
        text = placeholder(seen[-1]) if seen else None
        if text is None and not seen:
            if inferred is None:
                known = dict(seeds or {})
                for n, vs in values.items():
                    k = [kind_of(v) for v in vs if v is not None and not isinstance(v, list)]
                    if k and k[-1] is not None:
                        known.setdefault(n, k[-1])
                inferred = infer_kinds(pair.forward, known)
            text = placeholder_for(inferred.get(name))
        if text is not None:
            out[name] = text
    return out


_ELEMENTWISE = frozenset({
    "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh",
    "arccosh", "arctanh", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
    "square", "abs", "absolute", "fabs", "sign", "negative", "positive", "reciprocal",
    "floor", "ceil", "trunc", "rint", "round", "add", "subtract", "multiply", "divide",
    "true_divide", "power", "maximum", "minimum", "fmax", "fmin", "logaddexp", "logaddexp2",
    "hypot", "arctan2", "copysign", "clip", "where", "cbrt", "deg2rad", "rad2deg",
    "degrees", "radians", "sinc", "heaviside", "mod", "fmod", "remainder"})
_FLOAT_RESULT = frozenset({"divide", "true_divide", "sqrt", "exp", "log", "sin", "cos",
                           "tan", "tanh", "logaddexp", "exp2", "expm1", "log2", "log10",
                           "log1p", "arctan", "arcsin", "arccos", "sinh", "cosh", "hypot",
                           "arctan2", "sinc", "cbrt", "deg2rad", "rad2deg", "degrees",
                           "radians", "logaddexp2", "reciprocal"})


def _combine(kinds: Sequence[Optional[Kind]], float_result: bool = False) -> Optional[Kind]:
    """The kind of an elementwise result (broadcast rank, promoted dtype); None where an
    operand is not known to be a number or an array (a range, a list, a tuple)."""
    if any(k is None or k[0] not in ("s", "a") for k in kinds) or not kinds:
        return None
    arrays = [k for k in kinds if k[0] == "a"]
    dtypes = [k[-1] for k in (arrays or kinds)]
    dtype = np.result_type(*[np.dtype(d) for d in dtypes])
    if float_result and dtype.kind in "biu":
        dtype = np.dtype(np.float64)
    if dtype.kind == "b" and not float_result and len(kinds) > 1 and not arrays:
        dtype = np.dtype(np.int64)
    if not arrays:
        return ("s", dtype.name)
    return ("a", max(k[1] for k in arrays), dtype.name)


def _with_dtype(kind: Optional[Kind], dtype: Optional[str]) -> Optional[Kind]:
    if kind is None or dtype is None or kind[0] not in ("s", "a"):
        return kind
    return kind[:-1] + (dtype,)


def _dtype(kind: Optional[Kind]) -> Optional[str]:
    return kind[-1] if kind is not None and kind[0] in ("s", "a") else None


def _float(kind: Optional[Kind]) -> Optional[Kind]:
    d = _dtype(kind)
    if d is None:
        return kind
    return _with_dtype(kind, d if np.dtype(d).kind in "fc" else "float64")


class KindInference:
    """Kinds of expressions and names of one generated function.

    A small flow-insensitive type inference over the generated code's forms
    (one operation per statement, helpers with known result kinds): a name
    keeps the first kind found for it. Unknown stays None. The rewrite uses
    kinds to type placeholders and to call specialised helpers; both are
    checked by numba's own typing, and a variant's first result is compared
    with the NumPy backend's.
    """

    def __init__(self, known: Dict[str, Kind], stacks: Optional[Dict[str, Kind]] = None):
        self.env: Dict[str, Kind] = dict(known)
        self.stacks: Dict[str, Kind] = dict(stacks or {})

    @staticmethod
    def np_name(node: ast.Call) -> Optional[str]:
        return numpy_attr(node.func)

    def expr(self, e: ast.AST) -> Optional[Kind]:
        infer = self.expr
        if isinstance(e, ast.Name):
            return self.env.get(e.id)
        if isinstance(e, ast.Constant):
            v = e.value
            if isinstance(v, bool):
                return ("s", "bool")
            if isinstance(v, int):
                return ("s", "int64")
            if isinstance(v, float):
                return ("s", "float64")
            if v is None:
                return ("none",)
            return None
        if isinstance(e, ast.Tuple):
            return ("t", tuple(infer(x) for x in e.elts))
        if isinstance(e, ast.BinOp):
            left, right = infer(e.left), infer(e.right)
            if isinstance(e.op, ast.MatMult):
                return _matmul_kind(left, right)
            return _combine([left, right], isinstance(e.op, ast.Div))
        if isinstance(e, ast.UnaryOp):
            k = infer(e.operand)
            return ("s", "bool") if isinstance(e.op, ast.Not) else k
        if isinstance(e, ast.Compare):
            k = _combine([infer(e.left)] + [infer(c) for c in e.comparators])
            return None if k is None else (k[:-1] + ("bool",))
        if isinstance(e, ast.BoolOp):
            return ("s", "bool")
        if isinstance(e, ast.IfExp):
            return infer(e.body) or infer(e.orelse)
        if isinstance(e, ast.Attribute) and e.attr == "T":
            return infer(e.value)
        if isinstance(e, ast.Subscript):
            return self._subscript(e)
        if isinstance(e, ast.Call):
            return self._call(e)
        return None

    def _subscript(self, e: ast.Subscript) -> Optional[Kind]:
        k = self.expr(e.value)
        if k is not None and k[0] == "t" and isinstance(e.slice, ast.Constant) and \
                isinstance(e.slice.value, int) and -len(k[1]) <= e.slice.value < len(k[1]):
            return k[1][e.slice.value]
        if k is None or k[0] != "a":
            return None
        index = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
        drop = 0
        for i in index:
            if isinstance(i, ast.Slice):
                continue
            ik = self.expr(i)
            if ik is not None and ik[0] == "s" and ik[1].startswith("int"):
                drop += 1
            else:
                return None
        nd = k[1] - drop
        return ("s", k[2]) if nd == 0 else ("a", nd, k[2])

    def _call(self, e: ast.Call) -> Optional[Kind]:
        infer = self.expr
        name = self.np_name(e)
        if _is_call(e, "range"):
            return ("r",)
        if isinstance(e.func, ast.Name) and e.func.id.startswith(HELPER_PREFIX):
            return self._helper(e.func.id[len(HELPER_PREFIX):], e)
        popped = _method_call(e, "pop")
        if popped is not None:
            return self.stacks.get(popped[0])
        if name in ("matmul", "dot") and len(e.args) == 2:
            return _matmul_kind(infer(e.args[0]), infer(e.args[1]))
        if name == "clip" and e.args:
            return infer(e.args[0])
        if name == "where" and len(e.args) == 3:
            return _combine([infer(e.args[1]), infer(e.args[2])])
        if name in _ELEMENTWISE:
            return _combine([infer(a) for a in e.args], name in _FLOAT_RESULT)
        reduce_on = None
        if name in _REDUCTIONS and e.args:
            reduce_on, rest = e.args[0], e.args[1:]
        elif isinstance(e.func, ast.Attribute) and e.func.attr in _REDUCTIONS and name is None:
            reduce_on, rest = e.func.value, e.args
        if reduce_on is not None:
            k = infer(reduce_on)
            kw = {x.arg: x.value for x in e.keywords}
            axis = rest[0] if rest else kw.get("axis")
            keep = kw.get("keepdims")
            if k is None or k[0] not in ("s", "a"):
                return None
            dtype = "float64" if _REDUCTIONS.get(e.func.attr) == "mean" and \
                k[-1] not in ("float32", "float64") else k[-1]
            keepdims = isinstance(keep, ast.Constant) and bool(keep.value)
            if k[0] == "s" or axis is None or (isinstance(axis, ast.Constant)
                                               and axis.value is None):
                return ("a", k[1], dtype) if keepdims and k[0] == "a" else ("s", dtype)
            if keepdims:
                return ("a", k[1], dtype)
            nd = k[1] - 1
            return ("s", dtype) if nd == 0 else ("a", nd, dtype)
        if isinstance(e.func, ast.Attribute) and e.func.attr == "copy" and not e.args:
            return infer(e.func.value)
        return None

    def _helper(self, short: str, e: ast.Call) -> Optional[Kind]:
        """Result kinds of the runtime helpers (s2sgrad.runtime)."""
        args = [self.expr(a) for a in e.args]
        kw = {x.arg: self.expr(x.value) for x in e.keywords}

        def arg(i, name=None):
            if i < len(args):
                return args[i]
            return kw.get(name)
        if short == "meta" or short in ("copy_value", "copy_adjoint", "snapshot"):
            return arg(0, "x")
        if short in ("unbroadcast", "unbroadcast_matmul"):
            v = arg(0, "value")
            like = arg(1, "like") if short == "unbroadcast" else \
                _matmul_kind(arg(1, "a"), arg(2, "b"))
            if like is None or v is None:
                return None
            if like[0] == "a" and like[1] == 0 and v[0] == "s":
                return ("a", 0, v[-1])
            return _with_dtype(like if like[0] in ("s", "a") else v, _dtype(v))
        if short in ("zeros_like", "ones_like"):
            return _float(arg(0, "x"))
        if short == "expand_reduced":
            g, x = arg(0, "g"), arg(1, "x")
            if x is None or g is None:
                return None
            return ("a", x[1], _dtype(g)) if x[0] == "a" else g
        if short in ("matmul_grad_a", "dot_grad_a"):
            return _with_dtype(arg(1), _dtype(_combine([arg(0), arg(2)])))
        if short in ("matmul_grad_b", "dot_grad_b"):
            return _with_dtype(arg(2), _dtype(_combine([arg(0), arg(1)])))
        if short in ("balanced_max_mask", "safe_log", "safe_divide"):
            return _float(_combine(args))
        if short == "clip_grads":
            g, a = arg(0, "g"), arg(1, "a")
            k = _float(_combine([g, a]))
            bounds = [arg(2, "a_min"), arg(3, "a_max")]
            return ("t", (k,) + tuple(None if b == ("none",) else k for b in bounds))
        if short == "clip_grad_a":
            return _float(_combine([arg(0, "g"), arg(1, "a")]))
        if short in ("real_only", "transpose_grad"):
            return arg(0)
        if short == "extremum_grad":
            return _float(arg(1, "a"))
        if short == "reduced_count":
            return ("s", "int64")
        if short in ("accumulate", "add"):
            return _combine([arg(0), arg(1)])
        return None

    def run(self, fn: ast.FunctionDef, passes: int = 6) -> "KindInference":
        for _ in range(passes):
            if not self._block(fn.body):
                break
        return self

    def _assign(self, name: str, kind: Optional[Kind]) -> bool:
        if kind is not None and kind != ("none",) and name not in self.env:
            self.env[name] = kind
            return True
        return False

    def _block(self, body: Sequence[ast.stmt]) -> bool:
        changed = False
        for st in body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1:
                t = st.targets[0]
                k = self.expr(st.value)
                if isinstance(t, ast.Name):
                    changed |= self._assign(t.id, k)
                elif isinstance(t, ast.Tuple) and k is not None and k[0] == "t" and \
                        len(k[1]) == len(t.elts):
                    for sub, sk in zip(t.elts, k[1]):
                        if isinstance(sub, ast.Name):
                            changed |= self._assign(sub.id, sk)
            elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
                changed |= self._assign(st.target.id, self.expr(st.value))
            elif isinstance(st, ast.Expr):
                call = _method_call(st.value, "append")
                if call is not None and len(call[1]) == 1:
                    k = self.expr(call[1][0])
                    if k is not None and k != ("none",) and call[0] not in self.stacks:
                        self.stacks[call[0]] = k
                        changed = True
            elif isinstance(st, ast.For):
                if isinstance(st.target, ast.Name):
                    it = st.iter
                    if _is_call(it, "reversed") and it.args:
                        it = it.args[0]
                    k = self.expr(it)
                    if _is_call(it, "range") or k == ("r",):
                        changed |= self._assign(st.target.id, ("s", "int64"))
                    elif k is not None and k[0] == "a":
                        changed |= self._assign(st.target.id, ("s", k[2]) if k[1] == 1
                                                else ("a", k[1] - 1, k[2]))
                changed |= self._block(st.body) | self._block(st.orelse)
            elif isinstance(st, (ast.If, ast.While)):
                changed |= self._block(st.body) | self._block(st.orelse)
        return changed


def infer_kinds(fn: ast.FunctionDef, known: Dict[str, Kind]) -> Dict[str, Kind]:
    """Kinds of the names `fn` assigns, from the kinds of the names it starts from."""
    return KindInference(known).run(fn).env


def _matmul_kind(a: Optional[Kind], b: Optional[Kind]) -> Optional[Kind]:
    if a is None or b is None or a[0] != "a" or b[0] != "a":
        return None
    dtype = np.result_type(np.dtype(a[2]), np.dtype(b[2])).name
    nd = {(2, 2): 2, (2, 1): 1, (1, 2): 1, (1, 1): 0}.get((a[1], b[1]))
    if nd is None:
        return None
    return ("s", dtype) if nd == 0 else ("a", nd, dtype)


# -- the rewrite ---------------------------------------------------------------------
_ITEM_HELPERS = frozenset({"copy_item", "restore_item", "zero_item", "add_at"})   # (c, index, ...)


def _is_ellipsis(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def _whole_item_argument(node: ast.Call) -> None:
    """The whole array, x[...], is x[:] for numba, which has no Ellipsis index: an
    item helper's index argument `...` becomes slice(None) (a 0-d array's slice is
    numba's typing error, and the NumPy backend runs it)."""
    f = node.func
    if isinstance(f, ast.Name) and f.id.startswith(HELPER_PREFIX) and \
            f.id[len(HELPER_PREFIX):] in _ITEM_HELPERS and len(node.args) >= 2 and \
            _is_ellipsis(node.args[1]):
        node.args[1] = ast.copy_location(ast.Call(
            func=ast.Name(id="slice", ctx=ast.Load()), args=[ast.Constant(value=None)],
            keywords=[]), node.args[1])


class _Rewriter(ast.NodeTransformer):
    """The expression-level rewrite shared by the forward and the adjoint."""

    def __init__(self, ranges: Set[str], placeholders: Dict[str, str],
                 rename: Dict[str, str], kinds: Optional["KindInference"] = None,
                 blas: bool = False,
                 call_extra: Optional[Dict[str, List[Tuple[str, str]]]] = None):
        self.call_extra = call_extra or {}
        self._no_route = 0
        self.ranges = ranges
        self.placeholders = placeholders
        self.rename = rename
        self.kinds = kinds
        self.blas = blas
        self.helpers: Set[str] = set()

    def _kind(self, node: ast.AST) -> Optional[Kind]:
        return self.kinds.expr(node) if self.kinds is not None else None

    def _nb(self, name: str) -> ast.Name:
        self.helpers.add(name)
        return ast.Name(id=NB_PREFIX + name, ctx=ast.Load())

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
                value.func.id[len(HELPER_PREFIX):] in STRUCTURE_GUARDS and \
                value.func.id.startswith(HELPER_PREFIX):
            # numba code runs on arrays and numbers: the guard cannot fire.
            return ast.copy_location(ast.Pass(), node)
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id.startswith(HELPER_PREFIX):
            short = node.id[len(HELPER_PREFIX):]
            if short == "np":
                return ast.copy_location(ast.Name(id="np", ctx=node.ctx), node)
            if short in ("math", "scalar_math"):   # (numba's math functions raise nowhere)
                return ast.copy_location(ast.Name(id="_nb_math", ctx=node.ctx), node)
            if short not in NUMBA_HELPERS:
                raise Unsupported(f"the helper {node.id} has no numba version")
            return ast.copy_location(self._nb(short), node)
        if node.id in self.rename:
            return ast.copy_location(ast.Name(id=self.rename[node.id], ctx=node.ctx), node)
        if node.id in self.ranges and isinstance(node.ctx, ast.Load):
            # Only the uses handled in visit_For/visit_Call/visit_Subscript may read it.
            raise Unsupported(f"the range object {node.id!r} is used as a value")
        return node

    def _range_name(self, node: ast.AST) -> Optional[str]:
        return node.id if isinstance(node, ast.Name) and node.id in self.ranges else None

    def _load(self, name: str) -> ast.Name:
        return ast.Name(id=self.rename.get(name, name), ctx=ast.Load())

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if isinstance(node.value, ast.Constant) and node.value.value is None and \
                    name in self.placeholders:
                node.value = ast.parse(self.placeholders[name], mode="eval").body
                node.targets = [self.visit(node.targets[0])]
                return node
            if name in self.ranges:
                value = node.value
                if _is_call(value, "range"):
                    value = ast.Call(func=self._nb(f"range{len(value.args)}"),
                                     args=[self.visit(a) for a in value.args], keywords=[])
                elif isinstance(value, ast.Name) and value.id in self.ranges:
                    value = self._load(value.id)
                elif _method_call(value, "pop") is not None:
                    value = self.visit(value)
                elif isinstance(value, ast.Constant) and value.value is None:
                    value = ast.parse("(0, 0, 1)", mode="eval").body
                else:
                    raise Unsupported(f"{name!r} holds a range and other values")
                node.value = value
                node.targets = [ast.Name(id=self.rename.get(name, name), ctx=ast.Store())]
                return node
        return self.generic_visit(node)

    def visit_Tuple(self, node: ast.Tuple) -> ast.AST:
        # Residual tuples may hold ranges (as triples).
        node.elts = [self._load(e.id) if self._range_name(e) and isinstance(e.ctx, ast.Load)
                     else self.visit(e) for e in node.elts]
        return node

    def _range_triple(self, node: ast.AST) -> Optional[ast.expr]:
        """The (start, stop, step) expression of a range-valued node, else None."""
        r = self._range_name(node)
        if r is not None:
            return self._load(r)
        if _is_call(node, "range"):
            return self._visit_range(node)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            inner = self._range_triple(node.value)
            if inner is not None:
                sl = node.slice
                bounds = [self.visit(b) if b is not None else ast.Constant(value=None)
                          for b in (sl.lower, sl.upper, sl.step)]
                return self._call("rslice", [inner] + bounds)
        return None

    def visit_For(self, node: ast.For) -> ast.AST:
        it = node.iter
        triple = None if _is_call(it, "range") else self._range_triple(it)
        if triple is not None:
            node.iter = _range_of(triple, reverse=False)
        elif _is_call(it, "reversed") and len(it.args) == 1:
            arg = it.args[0]
            triple = self._range_triple(arg)
            if triple is not None:
                node.iter = _range_of(triple, reverse=True)
            else:
                node.iter = ast.Subscript(value=self.visit(arg),
                                          slice=ast.Slice(lower=None, upper=None,
                                                          step=ast.Constant(value=-1)),
                                          ctx=ast.Load())
        else:
            node.iter = self.visit(it)
        node.target = self.visit(node.target)
        node.body = [self.visit(s) for s in node.body]
        node.orelse = [self.visit(s) for s in node.orelse]
        return node

    def _call(self, helper: str, args: List[ast.expr]) -> ast.Call:
        return ast.Call(func=self._nb(helper), args=args, keywords=[])

    def _visit_range(self, call: ast.Call) -> ast.Call:
        return ast.Call(func=self._nb(f"range{len(call.args)}"),
                        args=[self.visit(a) for a in call.args],
                        keywords=[])

    def visit_Call(self, node: ast.Call) -> ast.AST:
        f = node.func
        _whole_item_argument(node)
        if isinstance(f, ast.Name) and f.id.startswith(HELPER_PREFIX) and \
                self.kinds is not None and f.id != HELPER_PREFIX + "meta":
            kinds = [self._kind(a) for a in node.args]
            kw_kinds = {k.arg: self._kind(k.value) for k in node.keywords}
            short = f.id[len(HELPER_PREFIX):]
            done = self._specialize(short, node, kinds, kw_kinds)
            if done is not None:
                return done
        if isinstance(f, ast.Name) and f.id in self.call_extra:
            # A callee's pair: its live values are passed by name (its forward's
            # parameters may have defaults).
            node.args = [self.visit(a) for a in node.args]
            node.keywords = [self.visit(k) for k in node.keywords] + \
                [ast.keyword(arg=own, value=ast.Name(id=ours, ctx=ast.Load()))
                 for own, ours in self.call_extra[f.id]]
            return node
        if isinstance(f, ast.Name):
            if f.id == "len" and len(node.args) == 1 and self._range_name(node.args[0]):
                return ast.Call(func=self._nb("rlen"), args=[self._load(node.args[0].id)],
                                keywords=[])
            if f.id == "reversed":
                raise Unsupported("reversed() outside a for loop")
            if f.id == HELPER_PREFIX + "meta" and len(node.args) == 1:
                return self.visit(node.args[0])
        pushed = _method_call(node, "append")
        if pushed is not None and len(pushed[1]) == 1 and self._range_name(pushed[1][0]):
            node.args = [self._load(pushed[1][0].id)]
            node.func = self.visit(node.func)
            return node
        reduced = self._reduction(node)
        if reduced is not None:
            return reduced
        wrapped = self._np_array_call(node) if self.kinds is not None else None
        if wrapped is not None:
            return wrapped
        if _users_add_at(node):   # np.add.at(a, i, b): the scatter-add numba has
            return ast.copy_location(ast.Call(func=self._nb("add_at"), args=[
                self.visit(a) for a in node.args], keywords=[]), node)
        if numpy_attr(f) in ("matmul", "dot") and len(node.args) == 2 and not node.keywords:
            return ast.Call(func=self._nb(f.attr), args=[self.visit(a) for a in node.args],
                            keywords=[])
        if numpy_attr(f) == "random":
            raise Unsupported("np.random")
        return self.generic_visit(_joined_as_tuple(node))

    def _reduction(self, node: ast.Call) -> Optional[ast.Call]:
        """np.sum/max/min/prod/mean (or the method) over an axis -> _nb_reduce_*."""
        f = node.func
        if not isinstance(f, ast.Attribute) or f.attr not in _REDUCTIONS:
            return None
        if numpy_attr(f) is not None:
            if not node.args:
                return None
            array, rest = node.args[0], node.args[1:]
        else:
            array, rest = f.value, list(node.args)
        kw = {k.arg: k.value for k in node.keywords}
        if len(rest) > 1 or set(kw) - {"axis", "keepdims"} or (rest and "axis" in kw):
            return None
        axis = rest[0] if rest else kw.get("axis")
        if axis is None and "keepdims" not in kw:
            return None        # numba's own np.sum(x), x.max(), ...
        args = [self.visit(array), self.visit(axis) if axis is not None
                else ast.Constant(value=None),
                self.visit(kw["keepdims"]) if "keepdims" in kw else ast.Constant(value=False)]
        return self._call("reduce_" + _REDUCTIONS[f.attr], args)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if numpy_attr(node) == "random":
            raise Unsupported("np.random (numba has its own generator, not NumPy's seeded "
                              "state)")
        return self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        r = self._range_name(node.value)
        if r is not None and isinstance(node.slice, ast.Slice):
            return self._range_triple(node)
        if r is not None:
            return ast.Call(func=self._nb("ritem"), args=[self._load(r), self.visit(node.slice)],
                            keywords=[])
        if _is_ellipsis(node.slice):   # x[...] is x[:] (see _whole_item_argument)
            node = ast.copy_location(ast.Subscript(value=node.value, slice=ast.Slice(),
                                                   ctx=node.ctx), node)
        return self.generic_visit(node)

    def _array_op(self, *operands: ast.AST) -> bool:
        """Whether an operation on names and numbers has an array operand.

        Only such single operations become calls: numba fuses a nested
        elementwise expression into one loop without temporaries, which is
        faster than a call per operation.
        """
        if self._no_route or not all(_atom(o) for o in operands):
            return False
        kinds = [self._kind(o) for o in operands]
        return all(k is not None and k[0] in ("s", "a") for k in kinds) and \
            any(k[0] == "a" for k in kinds)

    def _visit_operands(self, node: ast.AST, nested: bool) -> None:
        """Visit an operation's operands; inside a nested arithmetic expression none
        of them becomes a call (numba fuses the whole expression into one loop)."""
        self._no_route += nested
        try:
            self.generic_visit(node)
        finally:
            self._no_route -= nested

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        kinds = (self._kind(node.left), self._kind(node.right))
        array = self._array_op(node.left, node.right)
        nested = not isinstance(node.op, ast.MatMult) and \
            (_arithmetic(node.left) or _arithmetic(node.right))
        self._visit_operands(node, nested)
        if isinstance(node.op, ast.MatMult):
            special = None if self.blas else _MATMUL.get(_ranks(kinds))
            return self._call(special or "matmul", [node.left, node.right])
        op = _BINOPS.get(type(node.op))
        if array and op is not None:
            return self._call("op_" + op, [node.left, node.right])
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        array = isinstance(node.op, ast.USub) and self._array_op(node.operand)
        self._visit_operands(node, _arithmetic(node.operand))
        return self._call("op_neg", [node.operand]) if array else node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        array = len(node.ops) == 1 and type(node.ops[0]) in _COMPARES and \
            self._array_op(node.left, node.comparators[0])
        self.generic_visit(node)
        if array:
            return self._call("op_" + _COMPARES[type(node.ops[0])],
                              [node.left, node.comparators[0]])
        return node

    def _np_array_call(self, node: ast.Call) -> Optional[ast.expr]:
        """np.<ufunc or reduction>(arrays...) -> the cached wrapper, positional args only."""
        name = KindInference.np_name(node)
        if name in _NEW_ARRAYS and len(node.args) == 1 and not node.keywords:
            # np.zeros(n): numba compiles its generic np.zeros in every caller
            return self._call("np_" + name, [self.visit(node.args[0])])
        if name not in _NP_WRAPPED or node.keywords or len(node.args) != _NP_WRAPPED[name]:
            return None
        if name in _REDUCTIONS:
            # a whole-array reduction (of a name or an expression, inside arithmetic
            # or not): a number, which no array expression around it could fuse
            kind = self._kind(node.args[0])
            if kind is None or kind[0] != "a":
                return None
        elif not self._array_op(*node.args):
            return None
        return self._call("np_" + _NP_ALIASES.get(name, name),
                          [self.visit(a) for a in node.args])

    def _specialize(self, short: str, node: ast.Call, kinds: List[Optional[Kind]],
                    kw_kinds: Dict[str, Optional[Kind]]) -> Optional[ast.expr]:
        """A direct call of a specialised helper when the argument kinds are known.

        The generic overloads pick an implementation by type too, but each costs
        a numba compile in every process; these are compiled once per machine.
        """
        def is_s(k):
            return k is not None and k[0] == "s"

        def is_a(k):
            return k is not None and k[0] == "a"
        n = len(node.args)
        if node.keywords:
            return None
        args = lambda: [self.visit(a) for a in node.args]  # noqa: E731 - visited once
        if short == "unbroadcast" and n == 2:
            v, like = kinds
            if is_s(v) and is_s(like):
                return self.visit(node.args[0])
            if is_a(v) and is_a(like) and v[1] >= like[1]:
                return self._call("ub_same" if v[1] == like[1] else "ub_sum_to", args())
            if is_a(v) and is_s(like):
                return self._call("ub_sum_all", args()[:1])
            if is_s(v) and is_a(like) and like[1] > 0:
                return self._call("ub_full", args())
        elif short == "unbroadcast_matmul" and n == 3:
            v, a, b = kinds
            ranks = _ranks((a, b))
            if ranks in _PRODUCT_SHAPE and is_a(v) and v[1] == len(_PRODUCT_SHAPE[ranks]):
                v_node, a_node, b_node = args()
                operands = (a_node, b_node)
                shape = ast.Tuple(elts=[ast.Subscript(
                    value=ast.Attribute(value=operands[which], attr="shape", ctx=ast.Load()),
                    slice=ast.Constant(axis), ctx=ast.Load())
                    for which, axis in _PRODUCT_SHAPE[ranks]], ctx=ast.Load())
                return self._call("ub_to", [v_node, shape])
        elif short == "zeros_like" and n == 1:
            k = kinds[0]
            if is_s(k):
                return ast.Constant(value=0.0)
            if is_a(k):
                return self._call("zeros_same" if np.dtype(k[2]).kind in "fc"
                                  else "zeros_f64", args())
        elif short == "expand_reduced" and n == 2:
            g, x = kinds
            if is_s(x) and is_s(g):
                return self.visit(node.args[0])
            if is_a(x) and is_s(g):
                g_node, x_node = args()
                return self._call("full_like", [x_node, g_node])
        elif short == "balanced_max_mask" and n == 3:
            pattern = "".join("a" if is_a(k) else "s" if is_s(k) else "?" for k in kinds)
            if pattern in ("aaa", "saa", "aas", "sss"):
                return self._call("bmm_" + pattern, args())
        elif short in ("clip_grads", "clip_grad_a") and n in (4, 6):
            g, a, lo, hi = kinds[:4]
            rest_none = all(isinstance(x, ast.Constant) and x.value is None
                            for x in node.args[4:])
            if rest_none and is_a(g) and is_a(a) and g[1] == a[1] and is_s(lo) and is_s(hi):
                return self._call("clip_ss" if short == "clip_grads" else "clip_a_ss",
                                  args()[:4])
        elif short in ("matmul_grad_a", "matmul_grad_b", "dot_grad_a", "dot_grad_b") and \
                n == 3 and not self.blas:
            g, a, b = kinds
            ranks = _ranks((a, b))
            if ranks is None or ranks not in _MATMUL:
                return None
            g_node, a_node, b_node = args()

            def t(x):
                return ast.Attribute(value=x, attr="T", ctx=ast.Load())
            if short.endswith("_a"):
                forms = {(2, 2): ("mm22", [g_node, t(b_node)]),
                         (2, 1): ("outer11", [g_node, b_node]),
                         (1, 2): ("mm21", [b_node, g_node]), (1, 1): (None, [g_node, b_node])}
            else:
                forms = {(2, 2): ("mm22", [t(a_node), g_node]),
                         (1, 2): ("outer11", [a_node, g_node]),
                         (2, 1): ("mm21", [t(a_node), g_node]), (1, 1): (None, [g_node, a_node])}
            helper, operands = forms[ranks]
            if helper is None:
                return ast.BinOp(left=operands[0], op=ast.Mult(), right=operands[1])
            return self._call(helper, operands)
        return None

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        if isinstance(node.op, ast.MatMult):
            raise Unsupported("@=")
        op = _AUGOPS.get(type(node.op))
        value_kind = self._kind(node.value)
        if op is not None and isinstance(node.target, ast.Name) and \
                self._kind(node.target) is not None and self._kind(node.target)[0] == "a" and \
                value_kind is not None and value_kind[0] in ("s", "a"):
            # In place, as `x += v` is on an array (the call returns x itself).
            target = self.visit(ast.Name(id=node.target.id, ctx=ast.Load()))
            value = self.visit(node.value)
            return ast.Assign(targets=[ast.Name(id=target.id, ctx=ast.Store())],
                              value=self._call("op_" + op, [target, value]), lineno=0)
        return self.generic_visit(node)

    def visit_FunctionDef(self, node):  # nested functions: let numba decide, unchanged
        raise Unsupported("a nested function in generated code")

    visit_Lambda = visit_FunctionDef


def adjoint_ranges(pair: Pair) -> Tuple[Set[str], Set[str]]:
    """Names and stacks of the adjoint that hold ranges (from the residual layout)."""
    ranges: Set[str] = set()
    stacks: Set[str] = set()
    if pair.adjoint_targets is None:
        return ranges, stacks
    for fwd_name, target in zip(pair.residual_names, pair.adjoint_targets):
        if fwd_name in pair.ranges:
            ranges.add(target)
        if fwd_name in pair.range_stacks:
            stacks.add(target)
    changed = True
    while changed:
        changed = False
        for node in ast.walk(pair.adjoint):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name):
                name, value = node.targets[0].id, node.value
                popped = _method_call(value, "pop")
                copied = _is_call(value, HELPER_PREFIX + "copy_value") and value.args and \
                    isinstance(value.args[0], ast.Name) and value.args[0].id in stacks
                if popped is not None and popped[0] in stacks and name not in ranges:
                    ranges.add(name)
                    changed = True
                elif isinstance(value, ast.Name) and value.id in ranges and name not in ranges:
                    ranges.add(name)
                    changed = True
                elif copied and name not in stacks:
                    stacks.add(name)
                    changed = True
    return ranges, stacks


def _function(name: str, params: Sequence[str], body: List[ast.stmt],
              defaults: Sequence[ast.expr] = ()) -> ast.FunctionDef:
    return ast.FunctionDef(
        name=name,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None,
                           defaults=[copy.deepcopy(d) for d in defaults]),
        body=body, decorator_list=[], returns=None, type_comment=None)


def _split_defaults(pair: Pair, live: Sequence[str]) -> List[ast.expr]:
    """Defaults of the split forward: the forward's, then None for each live value
    (always passed by name by the callers) when the forward has any."""
    a = pair.forward.args
    defaults = list(a.defaults)
    if a.kwonlyargs:
        if any(d is None for d in a.kw_defaults):
            raise Unsupported("a keyword-only parameter without a default")
        defaults = defaults + list(a.kw_defaults) if defaults or a.kw_defaults else defaults
        if len(defaults) < len(a.kwonlyargs):
            raise Unsupported("keyword-only parameters after parameters without defaults")
    if not defaults:
        return []
    return defaults + [ast.Constant(value=None) for _ in live]


@dataclass
class Rewritten:
    source: str
    names: Dict[str, str]    # kind -> function name
    helpers: Set[str]
    live: List[str]          # extra parameters, read from the user's globals/closure


KINDS = ("fused", "fused_cot", "value", "split")


def rewrite(pair: Pair, placeholders: Dict[str, str], live: Sequence[str],
            kinds: Sequence[str] = ("fused",), fwd_kinds: Optional[KindInference] = None,
            adj_kinds: Optional[KindInference] = None, blas: bool = False,
            call_extra: Optional[Dict[str, List[Tuple[str, str]]]] = None,
            fuse: bool = True, shapes: Optional[Dict[str, tuple]] = None,
            float_stacks: Optional[Set[str]] = None) -> Rewritten:
    """The numba-subset source of the requested functions.

    fused: (*params, *live) -> (output, gradients), seeded with 1 (grad).
    fused_cot: (*params, *live, cotangent) -> (output, gradients) (a vjp's pullback).
    value: (*params, *live) -> output (the forward alone, for vjp's output).
    split: the forward (*params, *live) -> (output, residuals) and the adjoint
    (residuals, cotangent, *live) -> gradients.
    fuse: runs of elementwise statements become one loop each (`numba_fuse`), in
    functions without loops of their own. (jit_policy compiles a function that
    loops only over arrays below LOOP_LIMIT elements, where a fused loop saves
    little, and its compile, with the statements it falls back to, costs more.)
    float_stacks: stacks known to hold float64 numbers, preallocated as arrays where
    the loop's trip count is known (`numba_stacks`), in every kind but "split",
    whose stacks go to the adjoint in the residuals.
    """
    fwd_env = fwd_kinds.env if fwd_kinds is not None else {}
    adj_env = adj_kinds.env if adj_kinds is not None else {}
    fwd_shapes = dict(shapes or {})
    adj_shapes = {t: fwd_shapes[n] for t, n in zip(pair.adjoint_targets or (),
                                                   pair.residual_names) if n in fwd_shapes}

    def fused_loops(fn: ast.FunctionDef, env: Dict[str, Kind],
                    seen: Dict[str, tuple]) -> ast.FunctionDef:
        if not fuse or any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(fn)):
            return fn
        return fuse_elementwise(fn, env, seen)

    live = list(live)
    helpers: Set[str] = set()
    adj_ranges, _ = adjoint_ranges(pair)
    functions: List[ast.FunctionDef] = []
    names: Dict[str, str] = {}

    def forward_body() -> List[ast.stmt]:
        return _forward_body(pair, placeholders, fwd_kinds, blas, call_extra, helpers)

    def adjoint_body(rename: Dict[str, str], drop_copies: bool) -> List[ast.stmt]:
        return _adjoint_body(pair, rename, drop_copies, adj_kinds, blas, call_extra, helpers)

    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(kind)
        if kind in ("fused", "fused_cot"):
            seed_kind = adj_kinds.env.get(pair.cotangent) if adj_kinds is not None else None
            fn, rename = _fused(pair, live, kind == "fused", forward_body, adjoint_body,
                                helpers, seed_kind)
            env = dict(fwd_env)
            env.update({rename.get(n, n): k for n, k in adj_env.items()})
            seen = dict(fwd_shapes)
            seen.update({rename.get(n, n): v for n, v in adj_shapes.items()})
            functions.append(preallocate_stacks(fused_loops(fn, env, seen), float_stacks or set()))
        elif kind == "value":
            body = forward_body()
            ret = body[-1]
            body[-1] = ast.Return(value=ret.value.elts[0])
            functions.append(preallocate_stacks(
                fused_loops(_function(pair.name + "_nb_value", list(pair.params) + live, body),
                            fwd_env, fwd_shapes), float_stacks or set()))
        else:
            functions.append(fused_loops(_function(pair.name + "_nb_forward",
                                                   list(pair.params) + live, forward_body(),
                                                   _split_defaults(pair, live)), fwd_env,
                                         fwd_shapes))
            adj = copy.deepcopy(pair.adjoint)
            rw = _Rewriter(adj_ranges, {}, {}, adj_kinds, blas, call_extra)
            body = [rw.visit(s) for s in adj.body]
            helpers.update(rw.helpers)
            functions.append(fused_loops(_function(pair.name + "_nb_adjoint",
                                                   [a.arg for a in adj.args.args] + live,
                                                   body), adj_env, adj_shapes))
        names[kind] = functions[-1].name if kind != "split" else functions[-2].name
    module = ast.Module(body=functions, type_ignores=[])
    ast.fix_missing_locations(module)
    source = ast.unparse(module) + "\n"
    return Rewritten(source=source, names=names, helpers=helpers, live=live)


def _forward_body(pair: Pair, placeholders: Dict[str, str], kinds: Optional[KindInference],
                  blas: bool, call_extra, helpers: Set[str]) -> List[ast.stmt]:
    """The forward's statements, rewritten (one statement for each)."""
    rw = _Rewriter(set(pair.ranges), placeholders, {}, kinds, blas, call_extra)
    body = [rw.visit(s) for s in copy.deepcopy(pair.forward).body]
    helpers.update(rw.helpers)
    return body


def _adjoint_statements(pair: Pair, drop_copies: bool) -> List[ast.stmt]:
    """A copy of the adjoint's statements without the unpacking of `residuals` (and,
    in a fused function, which pops the forward's own stacks, without their copies)."""
    body = copy.deepcopy(pair.adjoint).body
    if pair.adjoint_targets is not None:
        body = body[1:]
    if drop_copies:
        stacks = _adjoint_stacks(pair)
        body = [s for s in body if not _is_stack_copy(s, stacks)]
    return body


def _adjoint_body(pair: Pair, rename: Dict[str, str], drop_copies: bool,
                  kinds: Optional[KindInference], blas: bool, call_extra,
                  helpers: Set[str]) -> List[ast.stmt]:
    """The adjoint's statements, rewritten (one statement for each)."""
    ranges, _ = adjoint_ranges(pair)
    rw = _Rewriter(ranges, {}, rename, kinds, blas, call_extra)
    body = [rw.visit(s) for s in _adjoint_statements(pair, drop_copies)]
    helpers.update(rw.helpers)
    return body


class _NumpyForm(ast.NodeTransformer):
    """The NumPy twin of a rewritten statement: names renamed as the rewrite renames
    them, and `_s2s_meta(x)` read as x (as the rewrite reads it), nothing else."""

    def __init__(self, rename: Dict[str, str]):
        self.rename = rename

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.rename:
            return ast.copy_location(ast.Name(id=self.rename[node.id], ctx=node.ctx), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if _is_call(node, HELPER_PREFIX + "meta") and len(node.args) == 1 and \
                not node.keywords:
            return self.visit(node.args[0])
        return self.generic_visit(node)


def fused_numpy(pair: Pair, live: Sequence[str]) -> Tuple[ast.FunctionDef, Dict[str, str]]:
    """grad's fused function as the NumPy code the rewrite starts from (seeded with
    1.0), and how the adjoint's names were renamed: `fused_twins`' NumPy twin."""
    return _fused(
        pair, list(live), True,
        lambda: [_NumpyForm({}).visit(s) for s in copy.deepcopy(pair.forward).body],
        lambda rename, drop_copies: [_NumpyForm(rename).visit(s)
                                     for s in _adjoint_statements(pair, drop_copies)],
        set(), ("s", "float64"))


def fused_twins(pair: Pair, placeholders: Dict[str, str], live: Sequence[str],
                fwd_kinds: Optional[KindInference], adj_kinds: Optional[KindInference],
                blas: bool = False, call_extra=None
                ) -> Tuple[ast.FunctionDef, ast.FunctionDef, Set[str], Dict[str, str]]:
    """The fused function (grad's, seeded with 1) twice, statement for statement: as
    numba code and as the NumPy code it was rewritten from; the helpers the numba
    one calls, and how the adjoint's names were renamed. `numba_outline` cuts both
    at the same statements."""
    helpers: Set[str] = set()
    seed_kind = adj_kinds.env.get(pair.cotangent) if adj_kinds is not None else None
    if seed_kind != ("s", "float64"):
        raise Unsupported("the output is not a float64 number")
    numba_fn, rename = _fused(
        pair, list(live), True,
        lambda: _forward_body(pair, placeholders, fwd_kinds, blas, call_extra, helpers),
        lambda rename, drop_copies: _adjoint_body(pair, rename, drop_copies, adj_kinds,
                                                  blas, call_extra, helpers),
        helpers, seed_kind)
    numpy_fn, _ = fused_numpy(pair, live)
    if len(numba_fn.body) != len(numpy_fn.body):
        raise Unsupported("the rewrite changed the number of statements")
    return numba_fn, numpy_fn, helpers, rename


def _fused(pair: Pair, live: List[str], seed: bool, forward_body, adjoint_body,
           helpers: Set[str], seed_kind: Optional[Kind] = None
           ) -> Tuple[ast.FunctionDef, Dict[str, str]]:
    """The forward then the adjoint in one function: no residual tuple, no stack copies
    (and the adjoint's names renamed where the forward has the same: the map returned)."""
    fwd_names = _names_stored(pair.forward) | set(pair.params) | set(live)
    adj_names = _names_stored(pair.adjoint) - {pair.adjoint.args.args[0].arg}
    taken = fwd_names | adj_names | set(pair.free)
    same = set()
    if pair.adjoint_targets is not None:
        same = {t for t, n in zip(pair.adjoint_targets, pair.residual_names) if t == n}
    rename = {}
    for n in sorted(adj_names):
        if n in fwd_names and n not in same:
            rename[n] = fresh_name(n + "_a", taken)
    out_name = fresh_name("nb_output", taken)
    body = forward_body()
    ret = body.pop()
    out_expr, res = ret.value.elts
    body.append(ast.Assign(targets=[ast.Name(id=out_name, ctx=ast.Store())],
                           value=out_expr, lineno=0))
    if pair.adjoint_targets is not None:
        for target, elt in zip(pair.adjoint_targets, res.elts):
            target = rename.get(target, target)
            if isinstance(elt, ast.Name) and elt.id == target:
                continue
            body.append(ast.Assign(targets=[ast.Name(id=target, ctx=ast.Store())],
                                   value=elt, lineno=0))
    cot = rename.get(pair.cotangent, pair.cotangent)
    if seed:
        out_kind = seed_kind
        if out_kind == ("s", "float64"):
            value = ast.Constant(value=1.0)
        else:
            helpers.add("seed")
            value = ast.Call(func=ast.Name(id=NB_PREFIX + "seed", ctx=ast.Load()),
                             args=[ast.Name(id=out_name, ctx=ast.Load())], keywords=[])
        body.append(ast.Assign(targets=[ast.Name(id=cot, ctx=ast.Store())], value=value,
                               lineno=0))
    adj = adjoint_body(rename, drop_copies=True)
    final = adj.pop()
    adj.append(ast.Return(value=ast.Tuple(
        elts=[ast.Name(id=out_name, ctx=ast.Load()), final.value], ctx=ast.Load())))
    params = list(pair.params) + live + ([] if seed else [cot])
    return _function(pair.name + ("_nb_fused" if seed else "_nb_pullback"), params,
                     body + adj), rename


def _adjoint_stacks(pair: Pair) -> Set[str]:
    if pair.adjoint_targets is None:
        return set()
    return {t for t, n in zip(pair.adjoint_targets, pair.residual_names) if n in pair.stacks}


def _is_stack_copy(stmt: ast.stmt, stacks: Set[str]) -> bool:
    """`s = _s2s_copy_value(s)` for a stack: the fused function pops the original."""
    return isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
        isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id in stacks and \
        _is_call(stmt.value, HELPER_PREFIX + "copy_value") and len(stmt.value.args) == 1 and \
        isinstance(stmt.value.args[0], ast.Name) and \
        stmt.value.args[0].id == stmt.targets[0].id
