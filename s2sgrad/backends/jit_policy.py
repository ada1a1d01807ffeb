"""Whether jit=True should hand a call to numba or leave it to NumPy.

numba wins where NumPy's cost is its own overhead: a loop runs many small
array operations (a microsecond of dispatch each, plus the interpreter's
loop), or straight-line code touches arrays so small that dispatch is all
there is. Where NumPy's kernels do the work (large elementwise passes with
SIMD transcendental functions, BLAS matrix products) numba's code is slower.
The decision uses facts the compiler has: whether the generated pair (or a
function it calls) loops, whether it multiplies matrices, whether it is all
elementwise statements and whole-array sums, and the size of the largest array
of the call. Elementwise code over float64 arrays is compiled at every size:
`numba_fuse` turns its statements into one loop with vectorised sin, cos, exp
and tanh (`numba_math`), one pass over memory where NumPy makes one per
operation, with SIMD where NumPy has none for float64 (sin, cos). The decision
is made per call, from the arrays' sizes (a compiled variant is kept per dtype
and rank, and shapes change between calls), and costs a pass over the
arguments.

The limits come from `benchmarks/jit_sizes.py` (jit time over NumPy time, one
thread, float64; the README's JIT section has the table): loops of elementwise
work ran faster under numba up to 1e5 elements (breaking even there on bodies
heavy in exp and log), loops with matrix products up to 1e4 (slower from
6.5e4); straight-line code that is not all elementwise broke even between 1e2
and 1e3 elements, and a straight-line matrix product was slower at every size.
`S2SGRAD_JIT_PLAN=always` compiles whatever the sizes (`numpy`: never; `loops`:
functions that loop run outlined, numba running their loops at every size); it
is read when a function is first called with jit=True.

Per loop: a call left to NumPy here, of a function that loops, may still have
numba run its loops (`numba_outline`, `outlined_plan`): the limits above then
apply to the arrays the loops are given, decided at each call.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import numpy as np

from .numba_fuse import elementwise_statements

LOOP_LIMIT = 100_000       # elements: loops over smaller arrays are compiled
LOOP_PRODUCT_LIMIT = 10_000   # ... and loops that multiply matrices, over smaller ones
STRAIGHT_LIMIT = 500       # elements: straight-line code over smaller arrays is compiled
VJP_MIN_OPERATIONS = 16    # straight-line code under vjp: compiled from this many operations
FUSED_MIN_STATEMENTS = 2   # elementwise code of this many statements: compiled at every size

_PRODUCTS = {"dot", "matmul", "einsum", "tensordot", "inner", "outer", "vdot", "kron",
             "_s2s_unbroadcast_matmul"}


@dataclass(frozen=True)
class CodeFacts:
    """What the decision needs to know of a generated pair (and its callees)."""

    loops: Optional[int] = None      # line of the first loop in the user's source, or 0
    products: bool = False           # a matrix product anywhere
    operations: int = 0              # operators and calls in the forward and the adjoint
    elementwise: int = 0             # elementwise statements, if nothing else but sums

    @property
    def has_loops(self) -> bool:
        return self.loops is not None


@dataclass(frozen=True)
class JitPlan:
    """The decision for one call: compile with numba, or run the NumPy backend."""

    compile: bool
    reason: str
    largest: int = 0
    outlined: bool = False   # not compiled whole: numba runs its loops inside NumPy's code


def code_facts(functions: Iterable[ast.FunctionDef], callees: Iterable[CodeFacts] = (),
               user_loop_line: Optional[int] = None) -> CodeFacts:
    """Loops and matrix products of the generated functions and of their callees
    (`user_loop_line`: the line of the user's first loop, for the reason given)."""
    loops = False
    products = False
    operations = 0
    functions = list(functions)
    counts = [elementwise_statements(fn) for fn in functions]
    elementwise = sum(counts) if all(counts) else 0
    for fn in functions:
        for node in ast.walk(fn):
            if isinstance(node, (ast.For, ast.While)):
                loops = True
            elif isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Call)):
                operations += 1
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                products = True
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else \
                    func.id if isinstance(func, ast.Name) else None
                if name in _PRODUCTS:
                    products = True
    for sub in callees:
        loops = loops or sub.has_loops
        products = products or sub.products
        operations += sub.operations
        elementwise = 0
    return CodeFacts((user_loop_line or 0) if loops else None, products, operations,
                     elementwise if elementwise >= FUSED_MIN_STATEMENTS else 0)


def user_loop_line(fn: Any) -> Optional[int]:
    """The line of the first `for` or `while` in fn's source, if it can be read."""
    import inspect
    import textwrap
    try:
        lines, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    lines_found = [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While))]
    return start + min(lines_found) - 1 if lines_found else None


def largest_array(values: Iterable[Any]) -> int:
    """Elements of the largest array among values (tuples looked into); 1 for numbers."""
    largest = 0
    for v in values:
        t = type(v)
        if t is np.ndarray:
            if v.size > largest:
                largest = v.size
        elif t is tuple or t is list:
            largest = max(largest, largest_array(v))
        elif largest == 0:
            largest = 1
    return largest


def forced() -> str:
    """S2SGRAD_JIT_PLAN: "always" (compile at every size), "numpy" (never), "loops"
    (functions that loop: their loops outlined and compiled at every size, the rest
    on NumPy; other functions as by default), or ""."""
    return os.environ.get("S2SGRAD_JIT_PLAN", "")


def size_limit(facts: CodeFacts, force: str = "", vjp: bool = False,
               float64: bool = True) -> float:
    """Calls whose largest array has fewer elements than this are compiled: the
    whole decision as one number, so that each call pays one comparison (and, for
    elementwise code, a look at the arrays' dtypes: only float64 runs fuse).

    vjp: for s2sgrad.vjp, whose compiled pullback runs the forward again."""
    if force == "always":
        return float("inf")
    if force == "numpy" or force == "loops" and facts.has_loops:
        return 0
    if facts.has_loops:
        return LOOP_PRODUCT_LIMIT if facts.products else LOOP_LIMIT
    if facts.products or (vjp and facts.operations < VJP_MIN_OPERATIONS):
        return 0
    if facts.elementwise and float64:
        return float("inf")
    return STRAIGHT_LIMIT


def float64_arrays(values: Iterable[Any]) -> bool:
    """Are all the arrays among values (tuples looked into) float64?"""
    for v in values:
        t = type(v)
        if t is np.ndarray:
            if v.dtype != np.float64:
                return False
        elif (t is tuple or t is list) and not float64_arrays(v):
            return False
    return True


def decide(facts: CodeFacts, largest: int, force: Optional[str] = None,
           vjp: bool = False, float64: bool = True) -> JitPlan:
    """Compile, or leave to NumPy, a call whose largest array has `largest` elements
    (the same decision as `size_limit`, with the reason)."""
    force = forced() if force is None else force
    compile_it = largest < size_limit(facts, force, vjp, float64)
    if force in ("always", "numpy") or force == "loops" and facts.has_loops:
        return JitPlan(compile_it, f"S2SGRAD_JIT_PLAN={force}", largest)
    size = f"{largest:,} element{'' if largest == 1 else 's'}"
    if facts.has_loops:
        where = f" (line {facts.loops})" if facts.loops else ""
        limit = int(size_limit(facts))
        what = "loops with matrix products" if facts.products else "loops"
        if compile_it:
            return JitPlan(True, f"compiled by numba: it loops{where} over arrays of at most "
                                 f"{size} (below {limit:,} for {what}), where NumPy's cost "
                                 f"is its per-operation overhead", largest)
        return JitPlan(False, f"left to NumPy: it loops{where}, but over arrays of {size} "
                              f"(from {limit:,} on, for {what}, NumPy's kernels are as fast "
                              f"or faster)", largest)
    if facts.products:
        return JitPlan(False, "left to NumPy: straight-line code with matrix products "
                              "(BLAS is faster than numba's loops at every size)", largest)
    if vjp and facts.operations < VJP_MIN_OPERATIONS:
        return JitPlan(False, f"left to NumPy: straight-line code of {facts.operations} "
                              f"operations under vjp (its compiled pullback runs the forward "
                              f"again; worth it from {VJP_MIN_OPERATIONS} operations)", largest)
    if facts.elementwise and float64:
        return JitPlan(True, f"compiled by numba: elementwise code ({facts.elementwise} "
                             f"statements and whole-array sums) over float64 arrays: its "
                             f"statements fuse into one loop, one pass over memory where "
                             f"NumPy makes one per operation, with vectorised sin, cos, exp "
                             f"and tanh", largest)
    if compile_it:
        return JitPlan(True, f"compiled by numba: straight-line code over arrays of at most "
                             f"{size} (below {STRAIGHT_LIMIT:,}), where NumPy's cost is its "
                             f"per-operation overhead", largest)
    return JitPlan(False, f"left to NumPy: straight-line code over arrays of {size} (from "
                          f"{STRAIGHT_LIMIT:,} on NumPy's kernels are as fast or faster)",
                   largest)


def outlined_plan(whole: JitPlan, loops_limit: float) -> JitPlan:
    """The plan of a call left to NumPy whole whose loops are outlined (`numba_outline`):
    numba runs the loops when the arrays they are given are small, NumPy the rest."""
    limit = "at every size" if loops_limit == float("inf") else \
        f"when the arrays they are given have fewer than {int(loops_limit):,} elements " \
        f"(decided at each call)"
    why = whole.reason.split(": ", 1)[-1]
    return JitPlan(False, f"loops outlined: numba runs its loops {limit}, NumPy the "
                          f"straight-line code before and after them (not compiled whole: "
                          f"{why})", whole.largest, outlined=True)


def describe_rule(facts: CodeFacts, loops_limit: Optional[float] = None) -> str:
    """The decision in general, for `s2sgrad show --jit` without shapes (loops_limit:
    the function can be outlined, its loops compiled below that many elements)."""
    if facts.has_loops:
        where = f" (line {facts.loops})" if facts.loops else ""
        limit = LOOP_PRODUCT_LIMIT if facts.products else LOOP_LIMIT
        what = " and multiplies matrices" if facts.products else ""
        then = "left to NumPy from there on" if loops_limit is None else (
            f"from there on grad runs it outlined: numba runs its loops when the arrays "
            f"they are given have fewer than {int(loops_limit):,} elements, NumPy the code "
            f"around them (and all of it when they have more)")
        return (f"it loops{where}{what}: compiled by numba when its largest array has fewer "
                f"than {limit:,} elements, {then}")
    if facts.products:
        return ("straight-line code with matrix products: left to NumPy (BLAS) at every "
                "size")
    if facts.elementwise:
        return (f"elementwise code ({facts.elementwise} statements and whole-array sums): "
                f"compiled by numba at every size when its arrays are float64 (its "
                f"statements fuse into one loop); otherwise when its largest array has fewer "
                f"than {STRAIGHT_LIMIT:,} elements")
    return (f"straight-line code: compiled by numba when its largest array has fewer than "
            f"{STRAIGHT_LIMIT:,} elements, left to NumPy from there on")
