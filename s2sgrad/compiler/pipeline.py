"""The passes in order: parse -> normalise -> analyse -> transform -> inline ->
optimise -> emit. Each is a function from the previous one's record to the next.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator, Tuple

from ..errors import TransformError, error_at, reporting_bugs
from ..introspect import unwrap
from .analyze import SCALAR, analyze
from .emit import to_source
from .inline import inline, numpy_on_numbers
from .names import nesting
from .normalize import normalize
from .optimize import link_residuals, optimize, private_copies
from .parse import ParsedFunction, parse_function
from .transform import Transformed, transform


def parse_for(fn: Callable, wrt: Tuple[int, ...]) -> ParsedFunction:
    """Pass 1, and the check that every position in wrt is a parameter of fn."""
    with reporting_bugs(getattr(fn, "__qualname__", repr(fn))):
        try:
            parsed = parse_function(fn)
        except RecursionError:   # (Python's own ast conversions, below deep_enough)
            code = getattr(unwrap(fn), "__code__", None)
            raise TransformError(
                "this function is nested too deeply for s2sgrad to read",
                getattr(code, "co_filename", None), getattr(code, "co_firstlineno", None),
                hint="split its deepest expression into statements") from None
    if any(i >= len(parsed.all_params) or i < 0 for i in wrt):
        raise IndexError(f"wrt={wrt} is out of range for {parsed.name}, which takes "
                         f"{len(parsed.params)} positional argument(s)")
    return parsed


# The passes recurse on the syntax tree, a few frames per level of nesting (a sum
# of 2,900 terms, which Python compiles, needs about 12,000). Python compiles code
# nested up to about three times its recursion limit (2,990 levels by default).
FRAMES_PER_LEVEL = 8
SHALLOW = 60            # levels: no room needed beyond the recursion limit
MAX_NESTING = 10_000    # levels: beyond, a TransformError at the deepest line


@contextlib.contextmanager
def deep_enough(parsed: ParsedFunction) -> Iterator[None]:
    """Around a compile of `parsed`: the recursion limit raised by enough frames for
    how deep its syntax tree is nested (and put back after), so that code Python
    compiles never fails with a RecursionError inside the compiler. A tree nested
    beyond MAX_NESTING, or a RecursionError all the same, is a TransformError at
    the deepest line."""
    depth, deepest = nesting(parsed.node)
    if depth <= SHALLOW:
        yield
        return
    if depth > MAX_NESTING:
        raise error_at(deepest, f"this is nested {depth} levels deep; s2sgrad "
                                f"differentiates code nested up to {MAX_NESTING} levels",
                       parsed, "split the expression into statements")
    old = sys.getrecursionlimit()
    need = old + FRAMES_PER_LEVEL * depth
    sys.setrecursionlimit(need)
    try:
        yield
    except RecursionError:
        raise error_at(deepest, f"this is nested too deeply for s2sgrad ({depth} levels)",
                       parsed, "split the expression into statements") from None
    finally:
        if sys.getrecursionlimit() == need:
            sys.setrecursionlimit(old)


def run_passes(parsed: ParsedFunction, wrt: Tuple[int, ...], optimize_code: bool = True,
               pure: bool = False, scalars: Tuple[str, ...] = (), structure=(),
               leaves: Tuple[int, ...] = (), complexes: Tuple[str, ...] = ()):
    """Every pass from normalise to optimise; returns the Transformed record."""
    nf = normalize(parsed)
    activity = analyze(nf, wrt, scalars, structure, leaves, complexes)
    t = transform(nf, activity, pure, recompute=bool(optimize_code))
    t = inline(t)
    if optimize_code:
        t = optimize(t)
    else:  # what makes the pair correct, not faster: reusable pullbacks, residuals
        private_copies(t)
        link_residuals(t)
    if scalars and not pure:   # (a pure pair's forward is differentiated again)
        numpy_on_numbers(t.forward, t.np_name, activity, SCALAR)
    return t


def emit_pair(t: Transformed, header: str) -> str:
    """The pair's source text: forward then adjoint, under a header comment."""
    return to_source([t.forward, t.adjoint], header)
