"""What a user's callable is: decorators peeled off, a Function class's methods.

The compiler, the disk cache and the backends all ask these questions; they
live below all of them so that none imports another for them.
"""
from __future__ import annotations

from typing import Callable, List


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
