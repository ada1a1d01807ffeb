"""Pass 3 — analyse: which values carry a gradient (activity analysis).

A variable is *varied* when it depends differentiably on an input we
differentiate with respect to, and *useful* when the output depends
differentiably on it. Only variables that are both (*active*) get adjoints.
The same facts decide `strict=True` in functional.vjp, and say why an input
does not matter (it reaches the output only through np.floor, say).

The analysis is flow-insensitive (a fixed point over all statements), which is
exact for straight-line SSA code and conservative inside loops.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import numpy as np

from .. import runtime
from ..errors import error_at, guard_fields
from ..introspect import unwrap
from ..rules import registry
from ..runtime.arrays import holds_complex
from .aliases import AliasFacts
from .facts import ExprFacts, FunctionFacts
from .names import name_nodes, stored_names, walk_values
from .normalize import NormalForm, normalize
from .ops import Op, OpKind, describe, names
from .parse import parse_function
from .returns import one_library_array, returned_leaves, returns_new

SCALAR = "()"


@dataclass
class Activity:
    wrt: Tuple[int, ...]
    varied: Set[str]
    useful: Set[str]
    active: Set[str]
    ints: Set[str]
    independent: Tuple[int, ...]
    reasons: Dict[int, str] = field(default_factory=dict)
    outputs: List[str] = field(default_factory=list)
    # name -> representative of the names statically known to have its shape
    # (SCALAR for Python scalars); only names assigned at a single place.
    shapes: Dict[str, str] = field(default_factory=dict)
    # For a returned tuple whose element k is a tuple of names built in one place:
    # k -> which of its items vary with the inputs (a caller passing that tuple on
    # to another function need not ask for the constant items' gradients).
    # (Flags: a tuple of bools, or of nested Flags for items that are tuples.)
    output_items: Dict[int, tuple] = field(default_factory=dict)
    # Tuple-valued names whose items are known to vary or not (parameters given a
    # `structure`, and items read from them): the constant items' cotangents are
    # never read, so they are not computed and their zeros stay scalars.
    item_flags: Dict[str, tuple] = field(default_factory=dict)
    # Names that always hold a 0-d value (np.sum(x), x.max(), and arithmetic on
    # those and numbers): broadcasting with them never widens a result.
    zero_d: Set[str] = field(default_factory=set)
    # Names proven to hold an array or a number, never a list, tuple or dict: their
    # cotangents add with `+` (anything else adds item by item, see leaf_names).
    leaves: Set[str] = field(default_factory=set)
    # Names whose values come from where the compiler cannot see their dtype (a
    # call it does not differentiate, an expression it keeps whole) and that feed
    # the gradient path: the forward checks at run time that they are not complex
    # (the rules are those of real analysis: a complex value would get a wrong
    # gradient, e.g. np.abs(1j * x)).
    real_checks: Set[str] = field(default_factory=set)
    # Calls of functions of yours no gradient passes through whose results are among
    # those ((the names a call assigns, the function), ...): what a function returns
    # is seen by compiling it (driver.checked_call_results), and complex values it
    # returns then take the rules for complex arguments instead of the check's refusal.
    checked_calls: Tuple[Tuple[Tuple[str, ...], Any], ...] = ()
    # Names that hold complex values (complex literals, constants and arguments, and
    # what is computed from them): operations touching them take the rules for
    # complex arguments (Rule.for_complex), and the real variables among their
    # inputs the real part of their cotangents.
    complex_names: Set[str] = field(default_factory=set)
    # For tuple-valued names among those: which items hold the complex values (paths
    # of item numbers, see complex_seeds); a name not here holds them anywhere.
    complex_paths: Dict[str, Set[Tuple[int, ...]]] = field(default_factory=dict)
    # Where the returned value holds complex values (paths; () is all of it): a caller
    # takes the rules for complex arguments for those (driver.complex_returns).
    result_complex: Set[Tuple[int, ...]] = field(default_factory=set)

    @property
    def returns_complex(self) -> bool:
        return bool(self.result_complex)

    def complex_entries(self, name: str, as_name: Optional[str] = None) -> List[str]:
        """complex_seeds' entries saying where `name` holds complex values (none if
        it holds none), for `as_name` (a callee's parameter given `name`)."""
        if name not in self.complex_names:
            return []
        return path_entries(as_name or name, self.complex_paths.get(name, {()}))

    def same_shape(self, a: ast.expr, b: ast.expr) -> bool:
        ra, rb = self.shape_of(a), self.shape_of(b)
        return ra is not None and ra == rb

    def shape_of(self, node: ast.expr) -> Optional[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return SCALAR
        if isinstance(node, ast.Name):
            return self.shapes.get(node.id)
        return None

    def is_number(self, name: str) -> bool:
        """The analysis proves `name` holds a number (a Python scalar, an int, a 0-d
        value), never an array."""
        return self.shapes.get(name) == SCALAR or name in self.ints or name in self.zero_d


def iter_statements(body: Sequence[ast.stmt]) -> Iterator[Tuple[ast.stmt, Optional[ast.AST]]]:
    """Every statement, depth first; loop headers are yielded as their For node."""
    for s in body:
        yield s, None
        if isinstance(s, (ast.If, ast.For, ast.While)):
            yield from iter_statements(s.body)
            yield from iter_statements(s.orelse)


def statement_op(s: ast.stmt, local_names, facts: FunctionFacts) -> Optional[Op]:
    if isinstance(s, ast.For):
        return loop_header_op(s, facts.exprs)
    if isinstance(s, (ast.If, ast.While, ast.Break, ast.Continue, ast.Pass)):
        test = getattr(s, "test", None)
        return Op(OpKind.CONTROL, [], other_inputs=names(test)) if test is not None else None
    return describe(s, local_names, facts)


def loop_header_op(s: ast.For, exprs: ExprFacts) -> Op:
    targets = [n.id for n in name_nodes(s.target)]
    it = s.iter
    callee = exprs.of(it).callee
    if callee is range:
        return Op(OpKind.ITERATE, targets, other_inputs=names(it), label="range")
    if callee is not None and registry.is_nondiff(callee):
        return Op(OpKind.ITERATE, targets, other_inputs=names(it), label="indices")
    # `for x in xs`, zip(xs, ys), enumerate(xs): the rows of what it names (leaves
    # where those are: an array's rows are arrays or numbers), and counts
    if isinstance(it, ast.Name):
        return Op(OpKind.ITERATE, targets, diff_inputs=[it.id], label="rows")
    if callee in (zip, enumerate) and not it.keywords and \
            all(isinstance(a, ast.Name) for a in it.args):
        return Op(OpKind.ITERATE, targets, diff_inputs=[a.id for a in it.args], label="rows")
    return Op(OpKind.ITERATE, targets, diff_inputs=names(it), label="iteration")


def analyze(nf: NormalForm, wrt: Sequence[int], scalar_params: Sequence[str] = (),
            structure: Sequence[Tuple[int, Tuple[bool, ...]]] = (),
            leaf_params: Sequence[int] = (), complex_params: Sequence[str] = ()) -> Activity:
    """Activity, independence reasons and shape facts.

    `scalar_params` names parameters known to be Python numbers at run time
    (the compiled pair is specialised for that): every value computed from them
    by elementwise arithmetic is a scalar too, so no broadcasting is undone.
    `structure` gives, for tuple parameters, which items the caller differentiates
    ((position, (True, False, ...)), ...): `p[i]` of a False item is a constant.
    `leaf_params`: positions of parameters the caller passes arrays or numbers
    (any other may hold a list, tuple or dict: see `leaf_names`).
    `complex_params`: where the caller passes complex values (complex_seeds'
    entries: parameters, items of tuple parameters, names a callee returned complex
    values into): a pair specialised to that. Complex values on the gradient path
    take the rules for complex arguments (rules/complex_rules.py), and any operation
    without one is refused.
    """
    local_names = nf.resolver.locals | nf.names.taken
    stmts = [s for s, _ in iter_statements(nf.node.body)]
    ops = [(s, statement_op(s, local_names, nf.facts)) for s in stmts]
    ops = [(s, op) for s, op in ops if op is not None]
    ret = nf.node.body[-1]
    outputs = names(ret.value) if isinstance(ret, ast.Return) else []
    wrt_names = [nf.all_params[i] for i in wrt]

    constant_reads, item_flags = _item_flags(nf, structure)
    varied_ops = [(s, op) for s, op in ops if s not in constant_reads]
    varied = _forward_closure(set(wrt_names), varied_ops, diff_only=True)
    useful = _backward_closure(set(outputs), ops, diff_only=True)
    active = varied & useful
    ints = _int_names(ops, nf.facts.exprs)
    independent, reasons = [], {}
    reach_all = _backward_closure(set(outputs), ops, diff_only=False)
    for i, name in zip(wrt, wrt_names):
        if name not in useful:
            independent.append(i)
            reasons[i] = _why_independent(name, ops, reach_all, nf)
    _check_supported(ops, active, varied, useful, nf)
    complex_names, complex_paths = _check_complex(ops, active, varied, nf, complex_params)
    real_checks = unseen_dtypes(ops, active, outputs) - complex_names
    checked_calls = tuple(
        (tuple(op.outputs), op.callee) for _, op in ops
        if op.kind == OpKind.CALL and isinstance(op.callee, types.FunctionType)
        and real_checks.intersection(op.outputs)
        and complex_names.isdisjoint(op.diff_inputs + op.other_inputs))
    definitions = _definition_counts(nf.node.body)   # (for both questions below)
    shapes = shape_classes(nf.node.body, ops, ints, nf.params, definitions)
    for n in scalar_names(ops, ints, set(scalar_params), set(nf.params)):
        shapes[n] = SCALAR
    return Activity(wrt=tuple(wrt), varied=varied, useful=useful, active=active, ints=ints,
                    independent=tuple(independent), reasons=reasons, outputs=outputs,
                    shapes=shapes, item_flags=item_flags,
                    zero_d=zero_d_names(nf.node.body, ops, ints, nf.params, definitions),
                    leaves=leaf_names(nf, ops, leaf_params),
                    output_items=output_items(nf, varied, item_flags),
                    real_checks=real_checks, checked_calls=checked_calls,
                    complex_names=complex_names,
                    complex_paths=complex_paths,
                    result_complex=result_paths(ret.value if isinstance(ret, ast.Return)
                                                else None, complex_names, complex_paths))


# Ops whose outputs are leaves when their inputs are: indexing an array gives an
# array or a number, and so do arithmetic and methods on them.
_LEAF_IF_INPUTS = {OpKind.COPY, OpKind.GETITEM, OpKind.AUGASSIGN, OpKind.AUGITEM, OpKind.SETITEM,
                   OpKind.UFUNC_AT}


def leaf_names(nf: NormalForm, ops, leaf_params: Sequence[int]) -> Set[str]:
    """Names that hold an array or a number wherever they are assigned.

    Since arguments may be structures (a list of (W, b) tuples, a dict), a value
    is a leaf only when that is proven: a NumPy function's result, arithmetic on
    leaves (`a + b` of two lists concatenates them), an item of a leaf, a constant
    number, a parameter the caller passes an array. A callee's result, an item of
    a list, a popped value are not: their cotangents add item by item."""
    params = {nf.all_params[i] for i in leaf_params if i < len(nf.all_params)}
    makers: Dict[str, List[Optional[Op]]] = {}
    unproven: Set[str] = set()   # names some call of a function of yours may make a structure
    for s, op in ops:
        for n in op.outputs:
            makers.setdefault(n, []).append(op)
        if op.kind == OpKind.CALL:
            unproven |= set(op.outputs) - call_result_leaves(s, op)
    described = {s for s, _ in ops}
    for s, _ in iter_statements(nf.node.body):
        if s not in described:
            if not isinstance(s, (ast.If, ast.While)):   # a loop: what its target binds
                for n in stored_names(s.target if isinstance(s, ast.For) else s):
                    makers.setdefault(n, []).append(None)
    leaves = set(makers) | params
    for p in nf.all_params:
        if p not in params:
            leaves.discard(p)
            makers.setdefault(p, []).append(None)   # what the caller passed: unknown
    changed = True
    while changed:
        changed = False
        for n in list(leaves):
            if n in params and n not in makers:
                continue
            if not all(_makes_leaf(op, leaves) or (op is not None and op.kind == OpKind.CALL
                                                   and n not in unproven)
                       for op in makers.get(n, ())):
                leaves.discard(n)
                changed = True
    return leaves


def call_result_leaves(s: ast.stmt, op: Op) -> Set[str]:
    """The names `r = f(...)` or `a, b = f(...)` binds that f's source proves arrays or
    numbers (returns.returned_leaves): they are whatever the arguments are."""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1):
        return set()
    returned = returned_leaves(op.callee)
    target = s.targets[0]
    if returned is True and isinstance(target, ast.Name):
        return {target.id}
    if isinstance(returned, tuple) and isinstance(target, ast.Tuple) and \
            len(target.elts) == len(returned):
        return {e.id for e, leaf in zip(target.elts, returned)
                if leaf and isinstance(e, ast.Name)}
    return set()


# Functions without a gradient whose result has the structure of their argument:
# zeros_like of a list is a list; loop_items of an array is the array.
_SHAPED_LIKE_ARGUMENT = (runtime.zeros_like, runtime.ones_like, runtime.loop_items)
# Modules whose functions without a gradient return arrays, numbers or flags.
_NUMERIC_MODULES = ("numpy", "math")
_NUMERIC_BUILTINS = (len, int, float, bool, round, isinstance, abs, range)


def _makes_leaf(op: Optional[Op], leaves: Set[str]) -> bool:
    if op is None:
        return False
    if op.kind == OpKind.NONDIFF:
        # Operators and comparisons give numbers or arrays; a call does where it is
        # known to (NumPy, math, len); zeros_like(xs) is a leaf where xs is. Any other
        # call may return a list, whose cotangent `+` would concatenate.
        callee = op.callee
        if callee is None:
            return True
        if any(callee is f for f in _SHAPED_LIKE_ARGUMENT):
            return all(n in leaves for n in op.other_inputs)
        module = (getattr(callee, "__module__", "") or "").split(".")[0]
        return module in _NUMERIC_MODULES or isinstance(callee, np.ufunc) or \
            any(callee is f for f in _NUMERIC_BUILTINS)
    if op.kind in (OpKind.CONST, OpKind.CONTROL) or \
            (op.kind == OpKind.ITERATE and op.label in ("range", "indices")):
        return True
    if op.kind == OpKind.ITERATE and op.label == "rows":
        return bool(op.diff_inputs) and all(n in leaves for n in op.diff_inputs)
    if op.kind == OpKind.RULE:
        return _rule_makes_leaf(op, leaves)
    if op.kind in _LEAF_IF_INPUTS:
        return all(n in leaves for n in op.diff_inputs)
    return False


def _rule_makes_leaf(op: Op, leaves: Set[str]) -> bool:
    """A function, operator, method or attribute with a rule gives one array or number
    where that is known: NumPy's and SciPy's functions unless their result may be a
    list or tuple (`outputs`, `sequence_result`: r = np.linalg.eigh(a), np.split,
    logsumexp(..., return_sign=True)), arithmetic, and methods and attributes of
    leaves. A rule of the user's (s2sgrad.defvjp) may return anything."""
    rule = op.rule
    if rule is not None and (rule.sequence_result or rule.outputs):
        return bool(rule.outputs) and len(op.outputs) > 1   # (w, v = np.linalg.eigh(a))
    if op.label.startswith(("the operator", "unary")):
        # Arithmetic gives an array or a number: a list or tuple `+` or `*` (which
        # would concatenate or repeat) is refused where it runs (sequence_guard).
        return True
    if op.callee is not None:
        return one_library_array(op.callee, rule)
    return all(n in leaves for n in op.diff_inputs)   # a method or attribute of leaves


def may_build_sequence(value: ast.expr, leaves: Set[str]) -> bool:
    """Whether `a + b` or `a * b` may concatenate or repeat lists or tuples: `+`
    unless an operand is proven an array or number, `*` unless both are."""
    if not isinstance(value, ast.BinOp) or not isinstance(value.op, (ast.Add, ast.Mult)):
        return False

    def constant(node) -> ast.expr:   # -0.5 is a unary minus applied to 0.5
        while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            node = node.operand
        return node

    def leaf(node) -> bool:
        node = constant(node)
        return (isinstance(node, ast.Constant) and
                isinstance(node.value, (int, float, complex))) \
            or (isinstance(node, ast.Name) and node.id in leaves)
    if isinstance(value.op, ast.Add):
        return not (leaf(value.left) or leaf(value.right))

    def maybe_int(node) -> bool:   # a list times a float is a TypeError, not a list
        node = constant(node)
        return not (isinstance(node, ast.Constant) and type(node.value) in (float, complex))
    return (not leaf(value.left) and maybe_int(value.right)) or \
        (not leaf(value.right) and maybe_int(value.left))


def any_varies(flags) -> bool:
    """Whether a flag (a bool, or nested Flags) marks anything as varying."""
    return any(any_varies(f) for f in flags) if isinstance(flags, tuple) else bool(flags)


def _item_flags(nf: NormalForm, structure) -> Tuple[Set[int], Dict[str, tuple]]:
    """(ids of the statements `v = p[i]` that read a constant item, item flags of
    names): from the parameters' `structure`, through reads of their items."""
    flags = {nf.params[pos]: items for pos, items in structure if pos < len(nf.params)}
    if not flags:
        return set(), {}
    counts = _definition_counts(nf.node.body)
    for p in list(flags):
        if counts.get(p, 0):
            del flags[p]  # reassigned: what the caller passed is not all it holds
    constant: Set[int] = set()
    changed = True
    while changed:  # items of items: `inner = p[0]; v = inner[1]`
        changed = False
        for s, _ in iter_statements(nf.node.body):
            if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
                    isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Subscript)
                    and isinstance(s.value.value, ast.Name) and s.value.value.id in flags and
                    isinstance(s.value.slice, ast.Constant) and
                    type(s.value.slice.value) is int):
                continue
            items, i = flags[s.value.value.id], s.value.slice.value
            if not -len(items) <= i < len(items):
                continue
            if not any_varies(items[i]):
                constant.add(s)
            target = s.targets[0].id
            if isinstance(items[i], tuple) and counts.get(target) == 1 and \
                    target not in flags:
                flags[target] = items[i]
                changed = True
    return constant, flags


def output_items(nf: NormalForm, varied: Set[str], known: Dict[str, tuple]
                 ) -> Dict[int, tuple]:
    """For the returned tuple's elements built as tuples of names in one place:
    which of their items vary (nested where an item's own items are `known`)."""
    ret = nf.node.body[-1] if nf.node.body else None
    if not (isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple)):
        return {}
    counts = _definition_counts(nf.node.body)
    built: Dict[str, ast.Tuple] = {}
    for s in nf.node.body:  # top level only: built once, on every path
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Tuple) and \
                counts.get(s.targets[0].id) == 1:
            built[s.targets[0].id] = s.value
    out: Dict[int, tuple] = {}
    for k, elt in enumerate(ret.value.elts):
        items = built.get(elt.id) if isinstance(elt, ast.Name) else None
        if items is not None:
            # Any other expression (a call to _s2s_meta, say) counts as varying.
            out[k] = tuple(known.get(e.id, e.id in varied) if isinstance(e, ast.Name)
                           else not isinstance(e, ast.Constant) for e in items.elts)
    return out


_FULL_REDUCTIONS = ("sum", "mean", "prod", "max", "min", "amax", "amin", "std", "var")


def scalar_names(ops, ints: Set[str], scalar_params: Set[str], params: Set[str]) -> Set[str]:
    """Names that hold a scalar at every assignment (a greatest fixed point).

    Seeded by the parameters known to be Python numbers; elementwise arithmetic
    on scalars and full reductions give scalars.
    """
    if not scalar_params and not ints:
        return set()
    defs: Dict[str, List[Tuple[ast.stmt, Op]]] = {}
    for s, op in ops:
        for o in op.outputs:
            defs.setdefault(o, []).append((s, op))
    candidates = (set(defs) | scalar_params | ints) - (params - scalar_params)

    def scalar_atom(node) -> bool:
        while isinstance(node, ast.UnaryOp):
            node = node.operand
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
        if isinstance(node, ast.Name):
            return node.id in candidates or node.id in ints
        return False

    def scalar_def(s, op: Op) -> bool:
        if op.kind == OpKind.ITERATE:
            return op.label == "range"
        if isinstance(s, ast.AugAssign):
            return scalar_atom(s.target) and scalar_atom(s.value)
        if not isinstance(s, ast.Assign) or len(op.outputs) != 1:
            return False
        if op.kind in (OpKind.COPY, OpKind.CONST):
            return scalar_atom(s.value)
        if op.kind == OpKind.RULE and registry.is_elementwise(op.rule):
            return all(scalar_atom(v) for v in op.bound.values())
        if op.kind == OpKind.RULE and op.rule.name.split(".")[-1] in _FULL_REDUCTIONS:
            axis = op.bound.get("axis")
            whole = axis is None or (isinstance(axis, ast.Constant) and axis.value is None)
            return whole and not _true(op.bound.get("keepdims"))
        return False

    changed = True
    while changed:
        changed = False
        for n in sorted(candidates):
            if n in ints:
                continue
            if n not in defs:
                if n in scalar_params:
                    continue  # a Python-number parameter never reassigned
                candidates.discard(n)
                changed = True
                continue
            # A parameter known to be a number must also stay one where reassigned.
            if not all(scalar_def(s, op) for s, op in defs[n]):
                candidates.discard(n)
                changed = True
    return candidates


def _true(node) -> bool:
    return isinstance(node, ast.Constant) and bool(node.value)


def _definition_counts(body) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    # An explicit stack, not a recursive closure: a closure that calls itself is a
    # reference cycle, left for the cyclic collector (see compiler.memory).
    stack = [(body, False)]
    while stack:
        stmts, in_loop = stack.pop()
        nested = []
        for s in stmts:
            targets = []
            if isinstance(s, (ast.Assign, ast.AugAssign)):
                targets = [n.id for t in (s.targets if isinstance(s, ast.Assign) else [s.target])
                           for n in name_nodes(t)
                           if isinstance(n.ctx, ast.Store)]
                if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
                    targets = [s.target.id]
            elif isinstance(s, ast.For):
                targets = [n.id for n in name_nodes(s.target)]
            for t in targets:
                counts[t] = counts.get(t, 0) + (2 if in_loop and isinstance(s, ast.For) else 1)
            if isinstance(s, ast.If):
                nested += [(s.body, in_loop), (s.orelse, in_loop)]
            elif isinstance(s, (ast.For, ast.While)):
                nested.append((s.body, True))
        stack += reversed(nested)
    return counts


# Reductions over every axis when called with the array alone.
_FULL_REDUCTIONS = frozenset(f"{kind}.{name}" for kind in ("np", "ndarray")
                             for name in ("sum", "mean", "prod", "max", "min"))


def zero_d_names(body, ops, ints: Set[str], params: Sequence[str] = (),
                 definitions: Optional[Dict[str, int]] = None) -> Set[str]:
    """Names assigned at one place from a full reduction, or from elementwise
    arithmetic on such names, ints and numbers: always 0-d.

    Kept apart from the shape classes on purpose: two 0-d values may differ in
    dtype (a complex sum, a float32 mean), so neither may stand in for the other
    where a witness's dtype matters (zeros_like); only broadcasting uses this.
    `definitions`: `_definition_counts(body)`, if the caller has them."""
    counts = dict(definitions) if definitions is not None else _definition_counts(body)
    for p in params:
        counts[p] = counts.get(p, 0) + 1
    out: Set[str] = set()

    def zero_d(node) -> bool:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            node = node.operand
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (int, float))
        return isinstance(node, ast.Name) and (node.id in out or node.id in ints)

    for s, op in ops:
        if op.kind != OpKind.RULE or len(op.outputs) != 1 or not isinstance(s, ast.Assign) or \
                counts.get(op.outputs[0]) != 1:
            continue
        if op.rule.name in _FULL_REDUCTIONS and set(op.bound) <= {"a", "self"}:
            out.add(op.outputs[0])
        elif registry.is_elementwise(op.rule) and op.bound and \
                all(zero_d(v) for v in op.bound.values()):
            out.add(op.outputs[0])
    return out


def shape_classes(body, ops, ints: Set[str], params: Sequence[str] = (),
                  definitions: Optional[Dict[str, int]] = None) -> Dict[str, str]:
    """Which names must have the same shape (elementwise results, copies, scalars).

    Only names assigned at one place take part: their shape relation holds every
    time the statement runs. The transform drops `unbroadcast` where an operand
    has the result's shape, and the optimiser reads a shape from a value it keeps
    anyway instead of keeping another. `definitions`: `_definition_counts(body)`,
    if the caller has them.
    """
    counts = dict(definitions) if definitions is not None else _definition_counts(body)
    for p in params:  # a parameter is assigned by the call
        counts[p] = counts.get(p, 0) + 1
    for _, op in ops:   # a list that grows or shrinks has no one shape
        if op.kind in (OpKind.APPEND, OpKind.POP):
            for n in op.outputs:
                counts[n] = counts.get(n, 0) + 2
    parent: Dict[str, str] = {}

    def find(n: str) -> str:
        while parent.get(n, n) != n:
            n = parent[n]
        return n

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra == rb:
            return
        if rb == SCALAR:
            ra, rb = rb, ra
        parent[rb] = ra

    def klass(node) -> Optional[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and \
                not isinstance(node.value, bool):
            return SCALAR
        if isinstance(node, ast.Name):
            if node.id in ints:
                return SCALAR
            if counts.get(node.id, 0) <= 1:
                parent.setdefault(node.id, node.id)
                return node.id
        return None

    for s, op in ops:
        if len(op.outputs) != 1 or counts.get(op.outputs[0]) != 1 or \
                not isinstance(s, ast.Assign):
            continue
        target = op.outputs[0]
        parent.setdefault(target, target)
        operands: List[ast.expr] = []
        if op.kind == OpKind.COPY:
            operands = [s.value]
        elif op.kind == OpKind.CONST:
            if klass(s.value) == SCALAR:
                union(SCALAR, target)
            continue
        elif op.kind == OpKind.RULE and registry.is_elementwise(op.rule) and \
                not op.rule.outputs:   # (parts = np.modf(x): a tuple of x's shapes)
            operands = list(op.bound.values())
        else:
            continue
        classes = [klass(o) for o in operands]
        if any(c is None for c in classes):
            continue
        shaped = {find(c) for c in classes if find(c) != SCALAR}
        if not shaped:
            union(SCALAR, target)
        elif len(shaped) == 1:
            union(shaped.pop(), target)
    return {n: find(n) for n in parent}


def _forward_closure(seeds: Set[str], ops, diff_only: bool) -> Set[str]:
    """Every name computed from a seed (through the ops' inputs), seeds included."""
    readers: Dict[str, List[List[str]]] = {}   # input name -> outputs of the ops reading it
    for _, op in ops:
        if op.outputs:
            inputs = op.diff_inputs if diff_only else op.diff_inputs + op.other_inputs
            for n in inputs:
                readers.setdefault(n, []).append(op.outputs)
    return _closure(seeds, readers)


def _backward_closure(seeds: Set[str], ops, diff_only: bool) -> Set[str]:
    """Every name a seed is computed from, seeds included (control ops count only
    when diff_only: a branch's test decides no value's derivative)."""
    writers: Dict[str, List[List[str]]] = {}   # output name -> inputs of the ops writing it
    for _, op in ops:
        if op.kind == OpKind.CONTROL and not diff_only:
            continue
        inputs = op.diff_inputs if diff_only else op.diff_inputs + op.other_inputs
        for o in op.outputs:
            writers.setdefault(o, []).append(inputs)
    return _closure(seeds, writers)


def _closure(seeds: Set[str], edges: Dict[str, List[List[str]]]) -> Set[str]:
    """seeds and everything reachable from them along edges (a worklist: each name's
    edges followed once)."""
    out = set(seeds)
    todo = list(out)
    while todo:
        for targets in edges.get(todo.pop(), ()):
            for n in targets:
                if n not in out:
                    out.add(n)
                    todo.append(n)
    return out


def _int_names(ops, exprs: ExprFacts) -> Set[str]:
    """Names that only ever hold Python ints (range loop counters, len(), shapes)."""
    candidates: Dict[str, bool] = {}
    for s, op in ops:
        for o in op.outputs:
            ok = _int_valued(s, op, exprs)
            candidates[o] = candidates.get(o, True) and ok
    return {n for n, ok in candidates.items() if ok}


def _int_valued(s, op: Op, exprs: ExprFacts) -> bool:
    if op.kind == OpKind.ITERATE:
        return op.label == "range" and isinstance(s.target, ast.Name)
    value = getattr(s, "value", None)
    if isinstance(value, ast.Constant):
        return isinstance(value.value, int) and not isinstance(value.value, bool)
    if isinstance(value, ast.Call) and exprs.of(value).callee in (len, int):
        return True
    return False


def _why_independent(name: str, ops, reach_all: Set[str], nf: NormalForm) -> str:
    """One sentence on how an input fails to reach the output differentiably."""
    if name not in reach_all:
        return f"'{name}' is not used in computing the output."
    from_input = _forward_closure({name}, ops, diff_only=True)
    for s, op in ops:
        crosses = any(n in from_input for n in op.other_inputs) or (
            op.kind == OpKind.NONDIFF and any(n in from_input for n in op.diff_inputs))
        if crosses and (any(o in reach_all for o in op.outputs) or op.kind == OpKind.CONTROL):
            what = op.label or "a non-differentiable operation"
            if op.kind == OpKind.CONTROL:
                what = "a branch or loop condition"
            return (f"'{name}' only reaches the output through {what} at line "
                    f"{getattr(s, 'lineno', '?')}, which has no gradient.")
    return f"'{name}' does not reach the output through a differentiable operation."


_UNSUPPORTED_HINTS = {
    OpKind.UNKNOWN: "Register a rule with s2sgrad.defvjp, or wrap the computation in an "
                    "s2sgrad.Function with a vjp rule.",
    OpKind.OPAQUE: "Rewrite it: a call with *args or **kwargs with its arguments spelled out "
                   "(g(s[0], s[1]) for g(*s)); a set or set comprehension as a list (a for "
                   "loop that appends to it) or one vectorised NumPy expression; and/or on "
                   "values as if/else. Or wrap the computation in an s2sgrad.Function with a "
                   "vjp rule.",
    OpKind.METHOD: "For a method of your own class, call it through the class: "
                   "Model.method(self, ...) (s2sgrad reads its source); for another object's "
                   "method, call the NumPy function instead (np.f(x)), register a rule with "
                   "s2sgrad.defvjp, or wrap it in an s2sgrad.Function.",
    OpKind.MUTATE: "Compute a new value instead of modifying one in place.",
}
# (a call writing into one of its arguments: the hint of OpKind.MUTATE for calls)
MUTATING_CALL_HINT = ("Compute the value as a result instead (y = np.exp(x)), or write it "
                      "with an item assignment (y[idx] = v), which s2sgrad differentiates, "
                      "as it does np.copyto(y, x) and a ufunc's out=y without other "
                      "keywords; np.take_along_axis rather than np.put_along_axis or np.put.")


_CTX_KEEPERS = ("the method .save_for_backward()", "the method .save_for_forward()")


def _check_supported(ops, active, varied, useful, nf: NormalForm) -> None:
    """A construct on the gradient path without a rule is an error, never a zero."""
    for s, op in ops:
        if op.kind not in _UNSUPPORTED_HINTS:
            continue
        touches = any(n in varied for n in op.diff_inputs + op.other_inputs)
        if op.kind == OpKind.MUTATE:
            bad = touches
        else:
            bad = touches and any(o in useful for o in op.outputs)
        if bad:
            node = getattr(op.call, "func", None) or getattr(s, "value", s)
            hint = _UNSUPPORTED_HINTS[op.kind]
            if op.kind == OpKind.MUTATE and op.callee is not None:
                message = (f"{op.label} writes into one of its arguments in place, and a "
                           f"differentiated value takes part in the write")
                hint = MUTATING_CALL_HINT
            elif op.kind == OpKind.MUTATE and op.label in _CTX_KEEPERS:
                message = (f"{op.label} keeps a differentiated value in ctx, where "
                           f"s2sgrad cannot follow it (a Function's forward differentiated "
                           f"as a function of its own, not inlined: in a second derivative "
                           f"through a Function that is called)")
                hint = ("Write the Function so that it is inlined (the generated code's "
                        "comment says why it is called).")
            elif op.kind == OpKind.MUTATE:
                message = f"{op.label or 'this call'} modifies a differentiated value in place"
            else:
                message = f"s2sgrad has no gradient rule for {op.label}"
            raise error_at(node, message, nf.parsed, hint)


_COMPLEX_DTYPES = frozenset({"complex", "complex64", "complex128", "complex256", "csingle",
                             "cdouble", "clongdouble", "complexfloating"})


def _complex_node(s: ast.stmt, nf: NormalForm,
                  known: Dict[str, bool]) -> Optional[ast.AST]:
    """A complex literal, dtype or constant read by a statement (None if it has none).
    `known`: whether each non-local name asked about so far holds a complex value."""
    if isinstance(s, (ast.If, ast.While, ast.For)):
        return None
    local = nf.resolver.locals
    for node in walk_values(s):
        cls = node.__class__
        if cls is ast.Constant:
            value = node.value
            if isinstance(value, complex) or \
                    (isinstance(value, str) and value.lower() in _COMPLEX_DTYPES):
                return node
        elif cls is ast.Attribute:
            if node.attr in _COMPLEX_DTYPES:
                return node
        elif cls is ast.Name:
            if node.id in _COMPLEX_DTYPES:
                return node
            if node.id not in local:
                complex_value = known.get(node.id)
                if complex_value is None:
                    complex_value = known[node.id] = _holds_complex(nf, node)
                if complex_value:
                    return node
    return None


def _holds_complex(nf: NormalForm, name: ast.Name) -> bool:
    ok, value = nf.resolver.static(name)
    return ok and holds_complex(value)


# Operations that move values without computing (a complex one moves as it is).
_MOVES = frozenset({OpKind.COPY, OpKind.PACK, OpKind.GETITEM, OpKind.FIELD, OpKind.SETITEM,
                    OpKind.APPEND, OpKind.POP, OpKind.CONST, OpKind.RETURN, OpKind.ITERATE})


def _check_complex(ops, active: Set[str], varied: Set[str], nf: NormalForm,
                   complex_params: Sequence[str]) -> Tuple[Set[str], Dict[str, "Paths"]]:
    """The names holding complex values: those of complex literals, dtypes and
    constants, of the parameters given complex values, of the functions that make
    complex arrays (np.fft.fft, ...), and what is computed from them (np.abs and
    np.real make real values again), with where tuples hold them (paths of their
    items). On the gradient path, an operation touching one needs a rule for complex
    arguments: else it is refused at its line, since the rules of real analysis
    would give it a wrong gradient. A call to a function of yours is not assumed to
    return complex values: it is compiled for what it is given, and what it
    returns is known then (complex_returns)."""
    whole, paths = complex_seeds(complex_params)
    known: Dict[str, bool] = {}
    literal = {s: _complex_node(s, nf, known) for s, _ in ops}
    realising = realising_ops(ops)
    real_items = _real_items()
    changed = True
    while changed:
        changed = False
        for s, op in ops:
            moved = _followed_items(s, whole, paths)
            if moved is not None:   # items of tuples: complex where theirs are
                for target, found in moved:
                    if not found or target in whole or found <= paths.get(target, set()):
                        continue
                    if () in found:
                        whole.add(target)
                        paths.pop(target, None)
                    else:
                        paths.setdefault(target, set()).update(found)
                    changed = True
                continue
            reads = op.diff_inputs + op.other_inputs
            # (a function of yours is compiled for the complex values it is given, and
            # what it returns is known once it is: complex_returns)
            complex_read = op.kind != OpKind.CALL and any(n in whole or n in paths for n in reads)
            if not (literal[s] is not None or (complex_read and id(s) not in realising) or
                    _makes_complex(op.callee)):
                continue
            outputs = set(op.outputs)
            real = real_items.get(id(op.rule), ()) if op.rule is not None else ()
            if len(op.outputs) > 1:   # w, v = np.linalg.eigh(a)
                outputs -= {op.outputs[k] for k in real}
            elif real:   # r = np.linalg.svd(a): r[1] is real
                items = {(k,) for k in range(op.rule.outputs or 0) if k not in real}
                target = op.outputs[0]
                if target not in whole and not items <= paths.get(target, set()):
                    paths.setdefault(target, set()).update(items)
                    changed = True
                continue
            if not outputs <= whole:
                whole.update(outputs)
                for o in outputs:
                    paths.pop(o, None)
                changed = True
    complex_names = whole | set(paths)
    for s, op in ops:
        if op.kind == OpKind.NONDIFF and op.callee is np.sign and any(
                n in complex_names and n in varied for n in op.other_inputs):
            # z / |z| of a complex z varies with it: not a function without a gradient
            raise error_at(getattr(s, "value", s), "np.sign of a complex value is not "
                           "differentiated", nf.parsed, "Write z / np.abs(z).")
        if not any(o in active for o in op.outputs):
            continue
        node = literal[s]
        touched = [n for n in op.diff_inputs + op.other_inputs + op.outputs
                   if n in complex_names]
        if node is None and not touched and not _makes_complex(op.callee):
            continue
        where = node if node is not None else getattr(s, "value", s)
        if op.kind in _MOVES or op.kind == OpKind.CALL or op.label in ("np.add.at",
                                                                   "np.subtract.at") or (
                op.rule is not None and op.rule.for_complex() is not None
                and op.kind in (OpKind.RULE, OpKind.AUGASSIGN)) or (
                op.kind == OpKind.NONDIFF and op.callee is not np.sign):
            # (a function of yours is compiled for the complex values it is given; a
            # function without a gradient stays one: np.zeros(n, dtype=complex), and
            # np.round, np.argmax, comparisons of complex values are piecewise
            # constant, but np.sign(z) = z / |z| is not)
            continue
        raise error_at(where, f"{op.label or 'this operation'} is not differentiated for "
                              f"complex values", nf.parsed,
                       "s2sgrad differentiates complex values through the functions listed "
                       "in the README's complex section (arithmetic, exp/log/trig, np.abs, "
                       "np.real, np.imag, np.conj, np.angle, sums, products, np.fft); "
                       "elsewhere keep real and imaginary parts in separate float arrays.")
    return complex_names, paths


# -- complex values in tuples: which items hold them ------------------------------------------
# A path is a tuple of item numbers into a value; () is the value itself. A tuple whose
# complex items are known (a callee's residuals, what a call returns) is followed item by
# item where the code reads its items with constant numbers, so that its real items keep
# the rules of real analysis (np.maximum, np.sign, ...), which complex values lack.
Paths = Set[Tuple[int, ...]]


def complex_seeds(entries: Sequence[str]) -> Tuple[Set[str], Dict[str, Paths]]:
    """The names a compile is told hold complex values: `name` (the value, or every
    item of it) or `name[1][0]` (that item only), as path_entries writes them."""
    whole: Set[str] = set()
    paths: Dict[str, Paths] = {}
    for entry in entries:
        name, bracket, rest = entry.partition("[")
        if not bracket:
            whole.add(name)
            continue
        path = tuple(int(k) for k in rest.rstrip("]").split("]["))
        paths.setdefault(name, set()).add(path)
    for name in whole:
        paths.pop(name, None)
    return whole, paths


def path_entries(name: str, found: Paths) -> List[str]:
    """complex_seeds' entries for `name` holding complex values at `found`."""
    if () in found:
        return [name]
    return [name + "".join(f"[{k}]" for k in path) for path in sorted(found)]


def _item_moves(s: ast.stmt) -> Optional[Tuple[str, List[Tuple[str, Optional[int]]]]]:
    """(source, [(target, item number), ...]) for `v = t[k]` with a constant k and for
    `a, b = t`; the number is None where it cannot be known (a negative one)."""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1):
        return None
    target, value = s.targets[0], s.value
    if isinstance(target, ast.Name) and isinstance(value, ast.Subscript) and \
            isinstance(value.value, ast.Name) and isinstance(value.slice, ast.Constant) and \
            type(value.slice.value) is int:
        k = value.slice.value
        return value.value.id, [(target.id, k if k >= 0 else None)]
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Name) and \
            all(isinstance(e, ast.Name) for e in target.elts):
        return value.id, [(e.id, k) for k, e in enumerate(target.elts)]
    return None


def _followed_items(s: ast.stmt, whole: Set[str], paths: Dict[str, Paths]
                    ) -> Optional[List[Tuple[str, Paths]]]:
    """For `t = (a, b)`, and for `v = t[k]` and `a, b = t` where t is a tuple whose
    complex items are known: (target, where it holds complex values), ...; None for
    any other statement."""
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
            isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Tuple):
        return [(s.targets[0].id, result_paths(s.value, whole | set(paths), paths))]
    items = _item_moves(s)
    if items is None or items[0] not in paths:
        return None
    return list(moved_paths(paths[items[0]], items[1]))


def moved_paths(found: Paths, moves) -> Iterator[Tuple[str, Paths]]:
    """The paths each target of an item read gets from its source's (`moves`:
    (target, item number or None), ...)."""
    for target, k in moves:
        if k is None:
            if found:
                yield target, {()}
            continue
        sub = {p[1:] for p in found if p and p[0] == k}
        if () in found:   # (the source as a whole: every item)
            sub.add(())
        if sub:
            yield target, sub


def complex_returns(calls, activity: "Activity") -> Set[str]:
    """complex_seeds' entries for the names a function assigns from calls to
    functions returning complex values, where its analysis took them for real
    ones (`calls`: (the names a call assigns, the callee's Activity), ...). The
    analysis sees a callee's result only once the callee is compiled; where one is
    complex the function is compiled again with these among its complex names
    (each round adds entries, so this ends), so that what it computes from them
    takes the rules for complex arguments, never the real ones."""
    out: Set[str] = set()
    for assigned_names, callee in calls:
        found = callee.result_complex
        if not found:
            continue
        assigned = [(assigned_names[0], found)] if len(assigned_names) == 1 else \
            moved_paths(found, [(n, k) for k, n in enumerate(assigned_names)])
        for name, where in assigned:
            known = activity.complex_paths.get(name, {()}) \
                if name in activity.complex_names else set()
            if () not in known and not where <= known:
                out.update(path_entries(name, where))
    return out


def result_paths(value: Optional[ast.expr], complex_names: Set[str],
                 paths: Dict[str, Paths]) -> Paths:
    """Where a returned value (an atom or a tuple of atoms) holds complex values."""
    if isinstance(value, ast.Tuple):
        return {(k,) + p for k, e in enumerate(value.elts)
                for p in result_paths(e, complex_names, paths)}
    if isinstance(value, ast.Constant):
        return {()} if isinstance(value.value, complex) else set()
    if isinstance(value, ast.Name) and value.id in complex_names:
        return set(paths.get(value.id, {()}))
    return set()


def _makes_complex(callee) -> bool:
    """Functions whose result is complex for real arguments: the discrete Fourier
    transforms (NumPy's and SciPy's), roots, np.emath. (np.linalg.eig's and eigvals'
    rules raise at run time where their result is complex.)"""
    if callee is None:
        return False
    module = getattr(callee, "__module__", None) or ""
    name = getattr(callee, "__name__", "")
    if module.startswith(("numpy.fft", "scipy.fft", "scipy.fftpack")):
        return name not in ("fftshift", "ifftshift", "fftfreq", "rfftfreq", "irfft", "irfft2",
                            "irfftn", "hfft", "next_fast_len", "dct", "idct", "dst", "idst")
    return callee is np.roots or module.startswith("numpy.lib.scimath")


# Kinds of operation whose result's dtype the compiler does not see: a call it does
# not differentiate (no rule, a method, a user function the gradient does not pass
# through) or an expression it keeps whole.
_UNSEEN_DTYPE = frozenset({OpKind.UNKNOWN, OpKind.OPAQUE, OpKind.METHOD, OpKind.CALL})


def _real_items() -> Dict[int, Tuple[int, ...]]:
    """The items that are real, whatever the argument, of results that are tuples:
    eigh's values, svd's singular values (by the id of the function's rule)."""
    return {id(registry.lookup_function(np.linalg.eigh)): (0,),
            id(registry.lookup_function(np.linalg.svd)): (1,)}


def realising_ops(ops) -> Set[int]:
    """The ids of the statements computing np.real(v), np.abs(v), abs(v), v.imag,
    np.fft.irfft(v), np.linalg.eigvalsh(v), ...: real whatever v is (what is complex,
    and what a run-time check needs to go back to, stops there)."""
    return {id(s) for s, op in ops if is_realising(op)}


def is_realising(op: Op) -> bool:
    """Whether the operation's result is real whatever its arguments are."""
    if op.kind != OpKind.RULE or op.rule is None:
        return False
    if op.label in (".real", ".imag"):
        return True
    if op.rule is registry.lookup_function(np.linalg.svd):
        return _constant_false(op.bound.get("compute_uv"))
    return any(op.rule is registry.lookup_function(f) for f in _REALISING)


# Functions whose result is real whatever their arguments.
_REALISING = (np.real, np.imag, np.absolute, np.angle, np.fft.irfft, np.linalg.eigvalsh,
              runtime.complex_grads.real_part) + \
    ((np.linalg.svdvals,) if hasattr(np.linalg, "svdvals") else ())


def _constant_false(node) -> bool:
    """A literal False (np.linalg.svd(a, compute_uv=False): the singular values only)."""
    return isinstance(node, ast.Constant) and node.value is False


def unseen_dtypes(ops, active: Set[str], outputs: Sequence[str] = ()) -> Set[str]:
    """The names made by an operation of an unseen dtype (see _UNSEEN_DTYPE) that
    no gradient passes through, which the gradient path reads, directly or through
    other values no gradient passes through: each is checked at run time, where it
    is made, not to be complex (`Activity.real_checks`). What the function returns
    counts as read (a caller may differentiate it: it takes the rules for complex
    arguments only where `returns_complex` says so)."""
    feeds: Set[str] = set(outputs)
    for _, op in ops:
        if any(o in active for o in op.outputs):
            feeds.update(op.diff_inputs + op.other_inputs)
    realising = realising_ops(ops)
    changed = True
    while changed:     # through values no gradient passes through, back to their sources
        changed = False
        for s, op in ops:
            if op.kind in (OpKind.CONTROL, OpKind.ITERATE):
                continue
            if not any(o in active for o in op.outputs) and id(s) not in realising and \
                    any(o in feeds for o in op.outputs):
                new = set(op.diff_inputs + op.other_inputs) - feeds
                if new:
                    feeds |= new
                    changed = True
    checked = {o for _, op in ops if (op.kind in _UNSEEN_DTYPE or _complex_at_times(op.callee))
               and not any(x in active for x in op.outputs) for o in op.outputs if o in feeds}
    return checked | {o for _, op in ops if op.kind == OpKind.APPLY and
                      _forward_may_be_complex(op.callee) for o in op.outputs
                      if o in active or o in feeds}


def _forward_may_be_complex(cls) -> bool:
    """Whether a Function's forward may return complex values for real arguments
    (its results are then checked where they are made): a complex literal or dtype,
    a NumPy function that makes complex arrays, or a call of anything but NumPy, a
    method or a builtin that makes no complex value (whose result's dtype is unseen).
    A forward of NumPy arithmetic, the common case, needs no check."""
    tree = _forward_tree(cls)
    if tree is None:
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and (isinstance(node.value, complex) or (
                isinstance(node.value, str) and node.value.lower() in _COMPLEX_DTYPES)):
            return True
        if isinstance(node, (ast.Name, ast.Attribute)) and \
                getattr(node, "id", getattr(node, "attr", "")) in _COMPLEX_DTYPES:
            return True
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                if func.id not in _REAL_BUILTINS:
                    return True
            elif isinstance(func, ast.Attribute):
                text = ast.unparse(func)
                if text.startswith(("np.fft", "numpy.fft", "np.emath", "np.lib.scimath",
                                    "np.roots", "scipy")):
                    return True
    return False


# Builtins a Function's forward may call without making a complex value.
_REAL_BUILTINS = frozenset({"len", "float", "int", "range", "abs", "min", "max", "sum",
                            "tuple", "list", "isinstance", "enumerate", "zip", "round"})


def _forward_tree(cls) -> Optional[ast.AST]:
    """The syntax tree of a Function class's forward (None where it has no source)."""
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (OSError, TypeError, SyntaxError):
        return None


def _complex_at_times(callee) -> bool:
    """Functions with a rule whose result is complex for some real arguments (the
    rule refuses those where it is on the gradient path; a constant result of one
    is checked like a value of an unseen dtype)."""
    return getattr(callee, "__name__", "") in ("eig", "eigvals", "sqrtm", "logm") and \
        (getattr(callee, "__module__", None) or "").startswith(("numpy.linalg",
                                                                 "scipy.linalg"))


# -- calls to functions that write into their arguments ---------------------------------
_PARAMETER_WRITES: Dict[object, Optional[Dict[int, tuple]]] = {}


def parameter_writes(fn) -> Optional[Dict[int, tuple]]:
    """Which parameters `fn` may write into in place (x[i] = v, x += v on an array,
    xs.append(v), np.add.at(x, ...), directly or through a view or alias of the
    parameter): position -> the error's (filename, lineno, col, message, hint, text)
    for the caller to raise if an array is passed there. None when fn's source
    cannot be read as a differentiable function (then every argument may be written).

    The caller's adjoint would not see such a write: the generated forward checks
    at run time that no array goes to these positions (numbers are rebound, fine)."""
    # (The code of the function parsed, decorators peeled: a decorator's wrapper code
    # is shared by every function it wraps.)
    key = getattr(unwrap(fn), "__code__", fn)
    if key in _PARAMETER_WRITES:
        return _PARAMETER_WRITES[key]
    try:
        nf = normalize(parse_function(fn))
    except Exception:  # noqa: BLE001 - unreadable: no facts, the caller guards everything
        _PARAMETER_WRITES[key] = None
        return None
    facts = AliasFacts(nf.node.body, nf.resolver.locals | nf.names.taken, nf.lists | nf.dicts,
                       nf.facts.exprs, nf.tuples, returns_new)
    params = nf.all_params
    out: Dict[int, tuple] = {}
    for name, stmt in facts.writes:
        for hit in sorted(({name} | facts.affected(name, stmt)) & set(params)):
            pos = params.index(hit)
            if pos in out:
                continue
            error = error_at(stmt, f"{nf.parsed.name} writes into its parameter '{hit}' in "
                                   f"place, and the caller's gradient would not see it",
                             nf.parsed, f"Give {nf.parsed.name} its own array ({hit} = "
                                        f"{hit}.copy()) or return the new value instead.")
            out[pos] = guard_fields(error)
    _PARAMETER_WRITES[key] = out
    return out


def call_write_guards(op: Op, ints: Set[str], local_names, parsed) -> List[Tuple[str, tuple]]:
    """(argument name, guard fields) for each local passed to a parameter the called
    user function may write into (see parameter_writes)."""
    call = op.call
    fn = op.callee
    if call is None or not isinstance(fn, types.FunctionType):
        return []
    writes = parameter_writes(fn)
    if writes == {}:
        return []
    try:
        sig = inspect.signature(fn)
        bound = sig.bind(*call.args, **{k.arg: k.value for k in call.keywords})
    except (TypeError, ValueError):
        return []
    params = [p.name for p in sig.parameters.values()]
    out = []
    for pos, name in enumerate(params):
        atom = bound.arguments.get(name)
        if not (isinstance(atom, ast.Name) and atom.id in local_names) or atom.id in ints:
            continue
        if writes is None:
            error = error_at(call, f"cannot tell whether {getattr(fn, '__name__', 'it')} "
                                   f"writes into its argument '{atom.id}' in place", parsed,
                             "Pass a copy, or make the function readable by s2sgrad.")
            out.append((atom.id, guard_fields(error)))
        elif pos in writes:
            out.append((atom.id, writes[pos]))
    return out
