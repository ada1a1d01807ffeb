"""The registry of helpers generated code calls (emitted as `_s2s_<name>`)."""
from __future__ import annotations

from typing import Callable, Dict

HELPERS: Dict[str, Callable] = {}


def helper(fn: Callable) -> Callable:
    """Register `fn` so templates may call it by name (emitted as _s2s_<name>)."""
    HELPERS[fn.__name__] = fn
    return fn


def new_helper(fn: Callable) -> Callable:
    """helper() for the rule tables' helpers: a name already taken by another
    function is an error, not a silent replacement."""
    if fn.__name__ in HELPERS and HELPERS[fn.__name__] is not fn:
        raise ValueError(f"helper name {fn.__name__!r} is already taken")
    return helper(fn)
