"""Outline a function's loops: numba runs the loops, NumPy the code around them.

jit=True decides per call whether numba compiles a whole function, from the
size of the call's largest array (`jit_policy`). A function that loops over
small arrays next to straight-line work on large ones (`C = A @ B` with A
1000x1000, then a recurrence on a vector) is then left to NumPy whole,
though numba would run its loops several times faster and NumPy's BLAS and
SIMD kernels are what its straight-line code wants. This pass cuts grad's
fused function (the forward, then the adjoint, `numba_rewrite.fused_twins`)
in three:

- the *host* (NumPy, run by Python): the statements before the first loop
  and after the last, with one call in between;
- the *loops* (numba): the statements from the first loop to the last, with
  what they read before as parameters and what the host reads after as
  results; and the same statements as NumPy code, which the call runs
  instead when the arrays the loops are given are large (decided per call).

Statements move only where moving cannot change a value:

- a straight-line statement between the loops moves before them when it is
  pure (an assignment of NumPy functions and helpers that write nothing, of
  names and numbers) and reads nothing the loops' statements before it write
  or update in place (or may alias something they do); it moves after them
  when nothing the statements after it read or write is one of its targets,
  and they write nothing it reads. So `C_bar = ...` of a large array goes
  back to NumPy, and so does `np.sum(C)`, once `split_calls` has given each
  call nested in a top-level statement a statement of its own;
- initialisations the loops need in numba's form move into them: `x = None`
  (a typed placeholder in numba), `stack = []` (numba's list), `r = range(n)`
  (a triple), numbers. A stack, a range or a None that would still have to
  cross between the host and the loops makes the function not outlined.
"""
from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
import keyword
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from .numba_names import fresh_name
from .numba_rewrite import HELPER_PREFIX, Pair, Unsupported, numpy_attr

# Helpers that write nothing (their result may be their argument: an alias).
PURE_HELPERS = frozenset({
    "unbroadcast", "unbroadcast_matmul", "zeros_like", "ones_like", "expand_reduced",
    "reduced_count", "copy_value", "copy_adjoint", "snapshot", "matmul_grad_a",
    "matmul_grad_b", "dot_grad_a", "dot_grad_b", "balanced_max_mask", "safe_log",
    "clip_grad_a", "real_only", "transpose_grad", "extremum_grad", "safe_divide",
    "none_to_zero", "meta", "accumulate", "add"})
_IMPURE_NUMPY = frozenset({"copyto", "put", "place", "putmask", "fill_diagonal",
                           "put_along_axis", "random"})
_PURE_BUILTINS = frozenset({"len", "float", "int", "abs", "min", "max", "range"})
_STACK_METHODS = frozenset({"append", "pop"})


def _pure_call(node: ast.Call) -> bool:
    """A call that writes nothing: a NumPy function (no `out=`), a pure helper, or a
    builtin that only reads."""
    if any(k.arg == "out" or k.arg is None for k in node.keywords):
        return False
    f = node.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return numpy_attr(f) not in (None, *_IMPURE_NUMPY)
    if isinstance(f, ast.Name):
        if f.id.startswith(HELPER_PREFIX):
            return f.id[len(HELPER_PREFIX):] in PURE_HELPERS
        return f.id in _PURE_BUILTINS
    return False


def pure_expression(node: ast.AST) -> bool:
    """Names, numbers, operators, attributes, subscripts, tuples and pure calls only."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            if not _pure_call(sub):
                return False
        elif isinstance(sub, (ast.Lambda, ast.NamedExpr, ast.Yield, ast.YieldFrom,
                              ast.Await, ast.ListComp, ast.DictComp, ast.SetComp,
                              ast.GeneratorExp, ast.Starred, ast.List, ast.Dict, ast.Set)):
            return False
    return True


def _target_names(targets: Sequence[ast.expr]) -> Optional[List[str]]:
    """The names of `a = ...` or `a, b = ...`, or None for any other target."""
    if len(targets) != 1:
        return None
    t = targets[0]
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts):
        return [e.id for e in t.elts]
    return None


def pure_statement(stmt: ast.stmt) -> bool:
    """An assignment to names of a pure expression: it can run earlier or later, as
    long as what it reads and writes is not touched in between."""
    return isinstance(stmt, ast.Assign) and _target_names(stmt.targets) is not None and \
        pure_expression(stmt.value)


# -- splitting nested calls ---------------------------------------------------------
def _call_name(node: ast.Call) -> str:
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "call")
    name = name[len(HELPER_PREFIX):] if name.startswith(HELPER_PREFIX) else name
    args = [a.id for a in node.args if isinstance(a, ast.Name)]
    return "_".join([name] + args[:1])


class _CallSplitter(ast.NodeTransformer):
    """Pure calls nested in an expression become statements of their own (in order)."""

    def __init__(self, taken: Set[str]):
        self.taken = taken
        self.before: List[ast.stmt] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)
        if not pure_expression(node):
            return node
        name = fresh_name(_call_name(node), self.taken)
        self.before.append(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())],
                                      value=node, lineno=0))
        return ast.Name(id=name, ctx=ast.Load())

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node


def split_calls(fn: ast.FunctionDef, taken: Set[str]) -> ast.FunctionDef:
    """A copy of fn where each pure call nested inside a top-level `name = expr` (an
    operand, an argument) is assigned to a fresh name first: `r = np.sum(C) +
    np.sum(h)` becomes `sum_C = np.sum(C)`, `sum_h = np.sum(h)`, `r = sum_C + sum_h`,
    the same calls in the same order. `taken`: names in use (grows)."""
    fn = copy.deepcopy(fn)
    body: List[ast.stmt] = []
    for stmt in fn.body:
        if isinstance(stmt, ast.Assign) and _target_names(stmt.targets) is not None and \
                pure_expression(stmt.value):
            splitter = _CallSplitter(taken)
            value = stmt.value
            if isinstance(value, ast.Call):      # the call itself stays; its arguments split
                value.args = [splitter.visit(a) for a in value.args]
                for k in value.keywords:
                    k.value = splitter.visit(k.value)
            else:
                value = splitter.visit(value)
            stmt.value = value
            body.extend(splitter.before)
        body.append(stmt)
    fn.body = body
    return fn


def _all_names(pair: Pair) -> Set[str]:
    """Every name the pair uses, and the builtins and keywords (a fresh name shadows
    none of them)."""
    used = {n.id for fn in (pair.forward, pair.adjoint) for n in ast.walk(fn)
            if isinstance(n, ast.Name)} | {a.arg for fn in (pair.forward, pair.adjoint)
                                           for a in ast.walk(fn) if isinstance(a, ast.arg)}
    return used | set(dir(builtins)) | set(keyword.kwlist)


def split_pair(pair: Pair) -> Pair:
    """The pair with `split_calls` applied to its forward and its adjoint."""
    taken = _all_names(pair) | set(pair.free)
    return dataclasses.replace(pair, forward=split_calls(pair.forward, taken),
                               adjoint=split_calls(pair.adjoint, taken))


# -- what each statement reads and writes -------------------------------------------
@dataclass(frozen=True)
class Effects:
    """Names one statement reads, binds, and may write into (in place)."""

    reads: FrozenSet[str]
    binds: FrozenSet[str]
    updates: FrozenSet[str]

    @property
    def writes(self) -> FrozenSet[str]:
        return self.binds | self.updates


def _root(node: ast.AST) -> Optional[str]:
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def effects(stmt: ast.stmt) -> Effects:
    """What stmt reads and binds, and the names whose value it may change in place:
    subscript and attribute stores, augmented assignments (arrays update in place),
    and every name handed to a call that is not pure (a method, a writing helper)."""
    reads, binds, updates = set(), set(), set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and \
                isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root(node)
            if root is not None:
                updates.add(root)
                reads.add(root)
        elif isinstance(node, ast.AugAssign):
            root = _root(node.target)
            if root is not None:
                updates.add(root)
                reads.add(root)
        elif isinstance(node, ast.Call) and not _pure_call(node):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in _STACK_METHODS:
                root = _root(f.value)     # a stack changes; what is pushed does not
                if root is not None:
                    updates.add(root)
                continue
            for arg in [node.func] + list(node.args) + [k.value for k in node.keywords]:
                root = _root(arg)
                if root is not None:
                    updates.add(root)
    return Effects(frozenset(reads), frozenset(binds), frozenset(updates))


# NumPy functions whose result is a new array, never one of their arguments.
FRESH_NUMPY = frozenset({
    "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
    "array", "copy", "sum", "mean", "prod", "max", "min", "amax", "amin", "dot", "matmul",
    "outer", "inner", "tensordot", "einsum", "sin", "cos", "tan", "exp", "log", "tanh",
    "sqrt", "abs", "absolute", "square", "log1p", "expm1", "sinh", "cosh", "arctan",
    "arcsin", "arccos", "exp2", "log2", "log10", "sign", "add", "subtract", "multiply",
    "divide", "true_divide", "power", "maximum", "minimum", "where", "clip", "logaddexp",
    "arange", "linspace", "concatenate", "stack", "vstack", "hstack", "cumsum", "cumprod"})


def _alias_sources(value: ast.AST) -> Tuple[Set[str], bool]:
    """(names whose array the value may be, or be a view of or contain; whether it may
    be a new object). Operators make new arrays (or immutable numbers); a call may
    return an argument unless it is a NumPy function known to allocate."""
    if isinstance(value, ast.Name):
        return {value.id}, False
    if isinstance(value, (ast.Subscript, ast.Attribute, ast.Starred)):
        root = _root(value)
        return ({root} if root else set()), root is None
    if isinstance(value, (ast.Tuple, ast.List)):
        names: Set[str] = set()
        for e in value.elts:
            names |= _alias_sources(e)[0]
        return names, True
    if isinstance(value, ast.IfExp):
        a, fa = _alias_sources(value.body)
        b, fb = _alias_sources(value.orelse)
        return a | b, True
    if isinstance(value, ast.Call):
        f = value.func
        if numpy_attr(f) in FRESH_NUMPY:
            return set(), True
        names = set()
        if isinstance(f, ast.Attribute):          # a method: its receiver (x.pop(), x.T)
            root = _root(f.value)
            if root:
                names.add(root)
        for arg in list(value.args) + [k.value for k in value.keywords]:
            names |= _alias_sources(arg)[0]
        return names, True
    return set(), True


def points_to(body: Iterable[ast.stmt], params: Iterable[str]) -> Dict[str, FrozenSet[str]]:
    """For each name, the objects it may hold (flow-insensitively): a parameter's own, a
    statement's new object, and what the names it is assigned from may hold; a list
    holds what is appended to it, a loop variable what its iterable holds."""
    pts: Dict[str, Set[str]] = {p: {"param " + p} for p in params}
    edges: List[Tuple[str, Set[str]]] = []
    body = list(body)
    local = set(pts).union(*[effects(s).binds for s in body]) if body else set(pts)
    made = 0                     # the objects assignments make: "new 0", "new 1", ...
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Assign, ast.For)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value if isinstance(node, ast.Assign) else node.iter
                sources, fresh = _alias_sources(value)
                made += 1
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            if fresh:
                                pts.setdefault(n.id, set()).add(f"new {made}")
                            edges.append((n.id, sources))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = _root(node.func.value)
                if receiver in local:        # x.append(v): x holds v (np.sum(v): no)
                    args: Set[str] = set()
                    for arg in node.args:
                        args |= _alias_sources(arg)[0]
                    edges.append((receiver, args))
    changed = True
    while changed:
        changed = False
        for target, sources in edges:
            have = pts.setdefault(target, set())
            for src in sources:
                more = pts.setdefault(src, {"global " + src}) - have
                if more:
                    have |= more
                    changed = True
    return {n: frozenset(v) for n, v in pts.items()}


# -- the cut -------------------------------------------------------------------------
@dataclass(frozen=True)
class Outlined:
    """The host and the loops of one fused function (see the module's docstring)."""

    host: ast.FunctionDef          # NumPy: (*params, *live, loops) -> (output, gradients)
    loops: ast.FunctionDef         # numba: (*inputs) -> outputs
    numpy_loops: ast.FunctionDef   # the same statements as NumPy code
    inputs: Tuple[str, ...]
    outputs: Tuple[str, ...]
    before: int                    # statements the host runs before the loops
    after: int                     # ... and after them


def _is_loop(stmt: ast.stmt) -> bool:
    return isinstance(stmt, (ast.For, ast.While))


def _is_init(stmt: ast.stmt) -> bool:
    """`x = None`, `x = []`, `x = <number>` or `x = range(...)`: what numba needs in its
    own form (a typed placeholder, its list, a triple)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and
            isinstance(stmt.targets[0], ast.Name)):
        return False
    v = stmt.value
    if isinstance(v, ast.Constant):
        return v.value is None or isinstance(v.value, (int, float, bool))
    if isinstance(v, ast.List):
        return not v.elts
    return isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and \
        v.func.id == "range" and pure_expression(v)


def outline(numpy_fn: ast.FunctionDef, numba_fn: ast.FunctionDef, name: str,
            barred: Set[str], runner: str = "_nb_loops") -> Outlined:
    """Cut the twins (`numba_rewrite.fused_twins`) around their loops.

    barred: names that hold what has another form in numba than in NumPy
    (stacks, ranges, `x = None` placeholders): none may cross between the host
    and the loops. Raises Unsupported when there is no loop or one must.
    """
    body = numpy_fn.body
    if len(body) != len(numba_fn.body):
        raise Unsupported("the twins differ in length")
    loops = [i for i, s in enumerate(body) if _is_loop(s)]
    if not loops:
        raise Unsupported("no loop")
    first, last = loops[0], loops[-1]
    if any(isinstance(n, ast.Return) for s in body[:-1] for n in ast.walk(s)) or \
            not isinstance(body[-1], ast.Return) or last == len(body) - 1:
        raise Unsupported("a return before the end")
    fx = [effects(s) for s in body]
    pts = points_to(body, [a.arg for a in numpy_fn.args.args])

    def widen(names: Iterable[str]) -> Set[str]:
        """The names that may hold an object one of `names` holds."""
        held = set().union(*[pts.get(n, {n}) for n in names]) if names else set()
        return {m for m, objs in pts.items() if objs & held} | set(names)

    def changed(stmts: List[int]) -> Set[str]:
        """Names whose value the statements may change: those they bind, and those
        that may hold an object they update in place."""
        if not stmts:
            return set()
        return set().union(*[fx[k].binds for k in stmts]) | \
            widen(set().union(*[fx[k].updates for k in stmts]))

    def named(stmts: List[int]) -> Set[str]:
        """Every name the statements read or write."""
        return set().union(*[fx[k].reads | fx[k].writes for k in stmts]) if stmts else set()

    def may_pass(i: int, others: List[int]) -> bool:
        """Whether statement i may run on the other side of `others`: it is pure, reads
        nothing they may change, and binds nothing they read or write."""
        return not _is_loop(body[i]) and pure_statement(body[i]) and \
            not fx[i].reads & changed(others) and not fx[i].binds & named(others)

    before = list(range(first))
    after = list(range(last + 1, len(body)))
    # Straight-line statements between the loops: before them, if they can go ...
    kept: List[int] = []
    for i in range(first, last + 1):
        (before if may_pass(i, kept) else kept).append(i)
    # ... or after them.
    region, kept = kept, []
    for i in reversed(region):
        if may_pass(i, kept):
            after.insert(0, i)
        else:
            kept.insert(0, i)
    region = kept
    # Initialisations the loops need in numba's form go into them.
    region_names = named(region)
    moved: List[int] = []
    for pos in range(len(before) - 1, -1, -1):
        i = before[pos]
        if not _is_init(body[i]) or not (fx[i].binds & region_names):
            continue
        later = [k for k in before[pos + 1:] if k not in moved]
        if fx[i].binds & named(later) or fx[i].reads & changed(later):
            continue
        moved.insert(0, i)
    before = [k for k in before if k not in moved]
    region = moved + region

    params = [a.arg for a in numpy_fn.args.args]
    bound_before = set(params).union(*[fx[k].binds for k in before])
    # (numba's twin may read more: the live values a callee's call is given)
    read_in = set().union(*[fx[k].reads | fx[k].updates | effects(numba_fn.body[k]).reads
                            for k in region])
    bound_in = set().union(*[fx[k].binds for k in region])
    read_after = set().union(*[fx[k].reads | fx[k].updates for k in after])
    outputs = sorted(bound_in & read_after)
    inputs = sorted((read_in | set(outputs)) & bound_before)
    crossing = (set(inputs) | set(outputs)) & barred
    if crossing:
        raise Unsupported(f"{', '.join(sorted(crossing))} would cross between NumPy and numba")

    def returning(stmts: List[ast.stmt]) -> List[ast.stmt]:
        result = ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Load()) for n in outputs],
                           ctx=ast.Load())
        return stmts + [ast.Return(value=result)]

    def function(fname: str, args: Sequence[str], stmts: List[ast.stmt]) -> ast.FunctionDef:
        fn = ast.FunctionDef(
            name=fname, args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in args],
                                           vararg=None, kwonlyargs=[], kw_defaults=[],
                                           kwarg=None, defaults=[]),
            body=stmts, decorator_list=[], returns=None, type_comment=None)
        return ast.fix_missing_locations(fn)

    call = ast.Call(func=ast.Name(id=runner, ctx=ast.Load()),
                    args=[ast.Name(id=n, ctx=ast.Load()) for n in inputs], keywords=[])
    target = ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Store()) for n in outputs],
                       ctx=ast.Store())
    host_body = [copy.deepcopy(body[k]) for k in before] + \
        [ast.Assign(targets=[target], value=call, lineno=0)] + \
        [copy.deepcopy(body[k]) for k in after]
    return Outlined(
        host=function(name + "_host", params + [runner], host_body),
        loops=function(name + "_nb_loops", inputs,
                       returning([copy.deepcopy(numba_fn.body[k]) for k in region])),
        numpy_loops=function(name + "_np_loops", inputs,
                             returning([copy.deepcopy(body[k]) for k in region])),
        inputs=tuple(inputs), outputs=tuple(outputs), before=len(before), after=len(after))


def barred_names(pair: Pair, rename: Dict[str, str]) -> Set[str]:
    """Names whose value has another form in numba code: stacks, ranges and `x =
    None` placeholders, of the forward and of the adjoint (renamed as the fused
    function renames them)."""
    from .numba_rewrite import adjoint_ranges
    names = set(pair.stacks) | set(pair.ranges) | set(pair.none_inits) | pair.range_stacks
    ranges, stacks = adjoint_ranges(pair)
    adjoint = ranges | stacks
    if pair.adjoint_targets is not None:
        adjoint |= {t for t, n in zip(pair.adjoint_targets, pair.residual_names)
                    if n in pair.stacks}
    return names | {rename.get(n, n) for n in adjoint}
