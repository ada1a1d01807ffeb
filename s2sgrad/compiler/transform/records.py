"""Reverse mode: the small AST helpers and records its parts share, and the
rewrite of loops over dict items and the run-time dtype checks that forward
mode shares too."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set

from ...errors import TransformError, guard_fields
from ..analyze import (
    Activity,
    may_build_sequence,
)
from ..names import (
    clone,
    copy_location,
    helper_call,
    index_expr,
    loop_items_of,
    name_node,
    stored_names,
)
from ..ops import Op, OpKind

DIFFERENTIABLE_KINDS = {OpKind.COPY, OpKind.PACK, OpKind.RULE, OpKind.GETITEM, OpKind.FIELD,
                        OpKind.APPLY, OpKind.CALL}


def rule_for(op: Op, act: Activity):
    """(the rule an operation takes, whether it touches complex values): the rule for
    complex arguments where it does (the analysis refused an operation without one)."""
    complex_names = act.complex_names
    touches = bool(complex_names) and any(
        n in complex_names for n in op.outputs + op.diff_inputs + op.other_inputs)
    return (op.rule.for_complex() if touches else op.rule), touches


def real_among_complex(act: Activity, name: str) -> bool:
    """A real variable of code with complex values (one that is differentiated): the
    real part of what reaches it is its cotangent (the rules for complex arguments
    give real variables complex parts, and a caller may pass a complex one)."""
    return bool(act.complex_names) and name in act.active and \
        name not in act.complex_names


def real_value_checks(s: ast.stmt, op: Op, act: Activity,
                      err: Callable[..., TransformError]) -> List[ast.stmt]:
    """`_s2s_real_value(v, <where>)` after a statement that makes a value of a dtype
    the compiler does not see, which the gradient path reads (Activity.real_checks):
    a complex one raises there, at the user's line, instead of getting the wrong
    gradient the rules of real analysis would give it."""
    out: List[ast.stmt] = []
    for name in op.outputs:
        if name in act.real_checks:
            fields = guard_fields(err(s, "a complex value reaches the gradient path here: "
                                         "s2sgrad differentiates real-valued code",
                                      "Keep real and imaginary parts in separate float "
                                      "arrays (np.real(v), np.imag(v))."))
            out.append(copy_location(ast.Expr(value=helper_call(
                "real_value", name_node(name), *[ast.Constant(value=f) for f in fields])), s))
    return out


def sequence_guard(s: ast.stmt, value: ast.expr, act: Activity, sequences: Set[str],
                   err: Callable[..., TransformError]) -> List[ast.stmt]:
    """`a + b` / `a * n` on values that may be lists or tuples: concatenation and
    repetition are not differentiated (in either mode), so they are refused where
    they run (at compile time when an operand is known to be a list or tuple,
    `sequences`)."""
    if not may_build_sequence(value, act.leaves):
        return []
    add = isinstance(value.op, ast.Add)
    words = ("concatenating lists or tuples that carry a gradient" if add else
             "repeating a list or tuple that carries a gradient")
    hint = "Build the list with append, extend or a comprehension."

    def known(node) -> bool:
        return isinstance(node, ast.Name) and node.id in sequences

    def integer(node) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int
    if (add and known(value.left) and known(value.right)) or (not add and (
            (known(value.left) and integer(value.right)) or
            (known(value.right) and integer(value.left)))):
        raise err(s, words, hint)
    guard = ast.Expr(value=helper_call(
        "no_sequence_arithmetic", clone(value.left), clone(value.right),
        *[ast.Constant(value=f) for f in guard_fields(err(s, words, hint))]))
    return [copy_location(guard, s)]


def index_value_checks(s: ast.stmt, op: Op, act: Activity,
                       err: Callable[..., TransformError]) -> List[ast.stmt]:
    """`_s2s_indexed_by_values(base, index, <where>)` before `y = base[index]` whose
    index varies with the inputs: an array, list, tuple or dict gives its index no
    gradient (an integer index has none), but another object's `[...]` (np.r_
    passed as a parameter, a class of the user's) may compute with a float index,
    whose gradient s2sgrad cannot see: refused there, at the user's line."""
    index_names = [n for n in op.other_inputs if n in act.varied and n not in act.ints]
    if op.kind != OpKind.GETITEM or not index_names or not isinstance(s.value, ast.Subscript):
        return []
    base = ast.unparse(s.value.value)
    fields = guard_fields(err(s, f"indexing {base} with values that carry a gradient: "
                                 f"s2sgrad cannot tell how {base}[...] uses them",
                              "Use a NumPy function with a gradient rule instead "
                              "(np.concatenate, np.stack, np.arange, ...)."))
    return [copy_location(ast.Expr(value=helper_call(
        "indexed_by_values", clone(s.value.value), index_expr(s.value.slice),
        *[ast.Constant(value=f) for f in fields])), s)]


@dataclass
class LoopInfo:
    kind: str                       # "range" | "items" | "while"
    range_name: Optional[str] = None
    trips: Optional[str] = None
    target: Optional[ast.expr] = None
    item_assigns: List[ast.stmt] = field(default_factory=list)


def field_index(node: ast.Attribute) -> ast.expr:
    """`_s2s_field_index(p, 'W')`: where a namedtuple keeps its field W."""
    return helper_call("field_index", name_node(node.value.id), ast.Constant(value=node.attr))


def fold_loop_items(body: List[ast.stmt], act: Activity) -> List[ast.stmt]:
    """`xs_items = _s2s_loop_items(xs); for x in xs_items:` walks xs itself where xs
    is proven an array or carries no gradient (a dict's keys are walked then by
    Python itself): the loop reads xs again and the copy goes."""
    out: List[ast.stmt] = []
    for s in body:
        for attr in ("body", "orelse"):
            block = getattr(s, attr, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                setattr(s, attr, fold_loop_items(block, act))
        if isinstance(s, ast.For) and out and _loop_items_of(out[-1], s.iter) is not None:
            source = _loop_items_of(out[-1], s.iter)
            rebound = any(source in stored_names(b) for b in s.body)   # walks the old value
            if not rebound and (source in act.leaves or source not in act.varied):
                out.pop()
                s.iter = name_node(source)
        out.append(s)
    return out


def _loop_items_of(s: ast.stmt, it: ast.expr) -> Optional[str]:
    """The xs of `it = _s2s_loop_items(xs)`, or None."""
    pair = loop_items_of(s)
    return pair[1] if pair and isinstance(it, ast.Name) and pair[0] == it.id else None


def all_vary(flags) -> bool:
    return all(all_vary(f) for f in flags) if isinstance(flags, tuple) else bool(flags)


def is_literal(value) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return type(value) in (type(None), bool, int, float, str)
    if type(value) is tuple:
        return all(is_literal(v) for v in value)
    return False


def var_for(atom, old: Optional[Dict[str, ast.expr]]) -> Optional[str]:
    """The variable an argument stands for (the saved copy stands for its variable)."""
    if old:
        for var, value in old.items():
            if value is atom:
                return var
    return atom.id if isinstance(atom, ast.Name) else None


