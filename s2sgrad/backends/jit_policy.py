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

Measured: the size rule is a guess from facts of the code; a variant the rule
compiles is then timed (`Trial`). When its compiled calls take a millisecond or
more, the next calls alternate between numba and NumPy (each returns its own
result: both are the gradient) and a variant numba runs clearly slower leaves
calls of its size and larger to NumPy from then on (a stencil of slices, where
numba's slicing costs more than NumPy's kernels). Straight-line code that is not
fused gains under numba only NumPy's dispatch, which a small call's own overhead
can outweigh (a sum of squares of 5 elements: 16 us a call under jit=True against
12 us on NumPy): its quicker calls are timed too, more of them (they are noisier),
and numba slower there leaves every call of the function to NumPy. Loops and
fused code keep the size rule below a millisecond (numba's lead there grows as
calls get smaller, and is large: 20x on the scalar recurrence).
`S2SGRAD_JIT_PLAN=always` measures nothing.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional

import numpy as np

from .numba_fuse import elementwise_statements

LOOP_LIMIT = 100_000       # elements: loops over smaller arrays are compiled
LOOP_PRODUCT_LIMIT = 10_000   # ... and loops that multiply matrices, over smaller ones
STRAIGHT_LIMIT = 500       # elements: straight-line code over smaller arrays is compiled
VJP_MIN_OPERATIONS = 16    # straight-line code under vjp: compiled from this many operations
FUSED_MIN_STATEMENTS = 2   # elementwise code of this many statements: compiled at every size

TRIAL_RUNS = 2             # timed calls of each backend before the measured decision
TRIAL_MIN_SECONDS = 1e-3   # compiled calls faster than this are not measured against NumPy
QUICK_TRIAL_RUNS = 16      # ... but those of straight-line code are, this many of each
TRIAL_MARGIN = 1.2         # numba is left when slower than NumPy by more than this factor

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


@dataclass
class Trial:
    """The measured decision of one compiled variant (see the module's docstring).

    After the variant's first result is checked, its calls are timed (from the
    backend's entry: its own per-call work is part of numba's cost): TRIAL_RUNS
    under numba, then, if those took TRIAL_MIN_SECONDS or more, TRIAL_RUNS under
    NumPy. numba slower than NumPy by more than TRIAL_MARGIN (best times) leaves
    calls whose largest array has at least half as many elements as the measured
    ones to NumPy; smaller calls, where numba's advantage grows, keep the rule.
    `straight` (straight-line code, not fused): quicker calls are timed too,
    QUICK_TRIAL_RUNS of each, and numba slower at all leaves every call to NumPy
    (`numpy_from` 0): its only gain, dispatch, does not grow with size."""

    numba: List[float] = field(default_factory=list)
    numpy: List[float] = field(default_factory=list)
    largest: int = 0
    decided: bool = False
    numpy_from: Optional[float] = None   # the verdict: calls this large run NumPy
    straight: bool = False

    def _quick(self) -> bool:
        """Timed quicker than TRIAL_MIN_SECONDS under numba (dispatch-bound calls)."""
        return bool(self.numba) and min(self.numba) < TRIAL_MIN_SECONDS

    def _runs(self) -> int:
        return QUICK_TRIAL_RUNS if self.straight and self._quick() else TRIAL_RUNS

    def runs_numba(self, largest: int) -> bool:
        """Whether this call runs the compiled variant (False: NumPy's pair)."""
        if self.decided:
            return self.numpy_from is None or largest < self.numpy_from
        return len(self.numba) < self._runs()

    def record(self, compiled: bool, seconds: float, largest: int) -> None:
        """One timed call; the verdict once both backends have their runs."""
        (self.numba if compiled else self.numpy).append(seconds)
        self.largest = max(self.largest, largest)
        if len(self.numba) == TRIAL_RUNS and not self.numpy and self._quick() and \
                not self.straight:
            self.decided = True      # too fast to lose much: the size rule stands
        elif self.numpy and len(self.numpy) == self._runs():
            self.decided = True
            if self.straight and self._quick():
                if min(self.numba) > min(self.numpy):
                    self.numpy_from = 0
            elif min(self.numba) > TRIAL_MARGIN * min(self.numpy):
                self.numpy_from = self.largest / 2

    def plan(self, largest: int) -> Optional[JitPlan]:
        """The plan when the measurement leaves this call to NumPy, else None."""
        if self.numpy_from is None or largest < self.numpy_from:
            return None
        return JitPlan(False, f"left to NumPy: measured slower under numba "
                              f"({_duration(min(self.numba))} a call against "
                              f"{_duration(min(self.numpy))} on NumPy, over arrays of "
                              f"{self.largest:,} elements)", largest)


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


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
