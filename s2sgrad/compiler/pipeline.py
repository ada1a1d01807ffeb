"""The passes in order: parse -> normalise -> analyse -> transform -> inline ->
optimise -> emit. Each is a function from the previous one's record to the next.
"""
from __future__ import annotations

from typing import Callable, Tuple

from ..errors import reporting_bugs
from .analyze import analyze
from .emit import to_source
from .inline import inline
from .normalize import normalize
from .optimize import link_residuals, optimize, private_copies
from .parse import ParsedFunction, parse_function
from .transform import Transformed, transform


def parse_for(fn: Callable, wrt: Tuple[int, ...]) -> ParsedFunction:
    """Pass 1, and the check that every position in wrt is a parameter of fn."""
    with reporting_bugs(getattr(fn, "__qualname__", repr(fn))):
        parsed = parse_function(fn)
    if any(i >= len(parsed.all_params) or i < 0 for i in wrt):
        raise IndexError(f"wrt={wrt} is out of range for {parsed.name}, which takes "
                         f"{len(parsed.params)} positional argument(s)")
    return parsed


def run_passes(parsed: ParsedFunction, wrt: Tuple[int, ...], optimize_code: bool = True,
               pure: bool = False, scalars: Tuple[str, ...] = (), structure=(),
               leaves: Tuple[int, ...] = ()):
    """Every pass from normalise to optimise; returns the Transformed record."""
    nf = normalize(parsed)
    activity = analyze(nf, wrt, scalars, structure, leaves)
    t = transform(nf, activity, pure)
    t = inline(t)
    if optimize_code:
        t = optimize(t)
    else:  # what makes the pair correct, not faster: reusable pullbacks, residuals
        private_copies(t)
        link_residuals(t)
    return t


def emit_pair(t: Transformed, header: str) -> str:
    """The pair's source text: forward then adjoint, under a header comment."""
    return to_source([t.forward, t.adjoint], header)
