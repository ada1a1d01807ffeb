"""What a user's callable is: decorators peeled off, a Function class's methods.

The compiler, the disk cache and the backends all ask these questions; they
live below all of them so that none imports another for them.
"""
from __future__ import annotations

import linecache
import types
from typing import Callable, List, Optional, Tuple


def unwrap(fn: Callable) -> Callable:
    """Peel decorators that keep `__wrapped__` (ours and functools.wraps)."""
    seen = set()
    while hasattr(fn, "__wrapped__") and id(fn) not in seen:
        seen.add(id(fn))
        fn = fn.__wrapped__
    if isinstance(fn, (staticmethod, classmethod)):
        fn = fn.__func__
    return fn


def function_methods(cls, with_jvp: bool = False) -> List[str]:
    """forward, whichever of vjp/backward the class uses (and jvp if it has one)."""
    out = ["forward"]
    vjp = getattr(cls, "vjp_method", None)
    if vjp is not None:
        out.append("vjp" if vjp() is getattr(cls, "vjp", None) else "backward")
    if with_jvp and getattr(cls, "jvp", None) is not None:
        out.append("jvp")
    return out


def last_source_line(code: types.CodeType, last: int = 0) -> int:
    """The last line any instruction of `code` (or of code nested in it) spans."""
    for _, end, _, _ in code.co_positions():
        if end is not None and end > last:
            last = end
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            last = last_source_line(const, last)
    return last


def source_block(fn: types.FunctionType) -> Optional[Tuple[List[str], int]]:
    """(lines, number of the first) of a def's source, decorators included, found
    from the positions its code records; None when they do not settle it.

    `inspect.getsourcelines` tokenises the file from the def on to find where the
    block ends, a millisecond for a 60-line function; the positions give the last
    line that holds code directly. That is the end of the block when the next line
    of code is indented no deeper than the def (a deeper one may be a trailing
    `pass` or dead code: then None, and the caller asks inspect). A block cut
    inside a bracket or a string does not parse, which the caller checks.
    """
    code = fn.__code__
    if code.co_name == "<lambda>" or not hasattr(code, "co_positions"):
        return None
    filename = code.co_filename
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, fn.__globals__)
    first = code.co_firstlineno
    last = last_source_line(code, first)
    if not lines or last > len(lines):
        return None
    head = lines[first - 1]
    indent = len(head) - len(head.lstrip())
    for text in lines[last:]:
        stripped = text.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(text) - len(stripped) > indent:
            return None
        break
    return lines[first - 1:last], first
