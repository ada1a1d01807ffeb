"""The in-memory cache of compiled pairs: least recently used first out.

Without a bound, every function ever differentiated keeps its pair (and,
through it, the function, its closure and whatever they hold): a loop that
differentiates a fresh closure each time grows the process without end. The
cache keeps at most $S2SGRAD_MEMORY_CACHE_SIZE pairs (default 1024; 0 means
no limit). A pair dropped from it stays alive as long as something uses it
(a `grad` wrapper keeps its own, a caller's pair keeps its callees'); asking
for it again loads it from disk or compiles it.

Eviction waits until the outermost compile is done (`compiling`): a pair
being compiled is already in the cache so that recursion finds it, and must
not be dropped while its callees are compiled.

While any compile is in progress the cyclic garbage collector is paused: the
passes allocate and drop AST nodes by the hundred thousand, none of them in
cycles (reference counting frees them), and every collection they trigger
walks the user's objects too (a tenth of a compile's time, measured). It runs
again, as it was, when the outermost compile ends.

Fork: a child forked while another thread compiles gets a fresh lock and no
compile in progress (`_after_fork_in_child`).
"""
from __future__ import annotations

import gc
import os
import threading
from collections import OrderedDict
from typing import Callable, Tuple

from ..introspect import unwrap

DEFAULT_SIZE = 1024


def memory_cache_size() -> int:
    """$S2SGRAD_MEMORY_CACHE_SIZE (pairs; default 1024); 0 means no limit."""
    text = os.environ.get("S2SGRAD_MEMORY_CACHE_SIZE", "").strip()
    try:
        size = int(text) if text else DEFAULT_SIZE
    except ValueError:
        size = DEFAULT_SIZE
    return max(size, 0)


class PairCache(OrderedDict):
    """Compiled pairs in the order they were stored (callers hold the compiler's
    lock). Eviction is least-recently-used by second chance: a memory hit only
    sets the pair's `_recent` flag (an attribute store, cheaper than moving it:
    the hit path of compile_function runs on every call of the functional
    API), and `trim` moves a flagged pair to the end, clearing the flag,
    instead of dropping it."""

    depth = 0   # compiles in progress (nested: callees)

    def valid(self, key):
        """The pair stored under key if everything it was generated for is still
        bound as it was (it is marked recently used), else None (a stale pair
        is dropped)."""
        hit = self.get(key)
        if hit is None:
            return None
        if hit.current():
            hit._recent = True   # kept when the cache is trimmed
            return hit
        del self[key]   # a name it was generated for is bound to something else
        return None

    def enter(self) -> None:
        """A compile starts (see leave)."""
        self.depth += 1
        _COLLECTOR.pause()

    def leave(self) -> None:
        """A compile ended; after the outermost one, drop the least recently used
        pairs beyond the size."""
        self.depth -= 1
        _COLLECTOR.resume()
        if self.depth == 0:
            self.trim()

    def trim(self) -> None:
        size = memory_cache_size()
        if not size:
            return
        while len(self) > size:
            key, pair = self.popitem(last=False)
            if getattr(pair, "_recent", False):
                pair._recent = False
                self[key] = pair   # a second chance, at the end


class _PausedCollector:
    """gc paused while compiles of either cache are in progress (callers hold LOCK)."""

    def __init__(self):
        self.depth = 0
        self.was_enabled = False

    def pause(self) -> None:
        if self.depth == 0:
            self.was_enabled = gc.isenabled()
            gc.disable()
        self.depth += 1

    def resume(self) -> None:
        self.depth -= 1
        if self.depth == 0 and self.was_enabled:
            gc.enable()


_COLLECTOR = _PausedCollector()
PAIRS = PairCache()        # reverse-mode pairs (compiler.driver)
TANGENTS = PairCache()     # forward-mode code (compiler.forward)
LOCK = threading.RLock()   # held while either cache is read or filled


def _after_fork_in_child() -> None:
    """A forked child has only the thread that called fork. A compile another
    thread had in progress never finishes there: its LOCK would be held for
    good (the child's next compile hangs), the garbage collector left paused,
    and a half-made pair (already in the cache, so that recursion finds it)
    served. So: a new lock, no compile in progress, the collector as it was
    before, and the caches dropped (their pairs load again from disk)."""
    if LOCK._is_owned():   # the forking thread itself is compiling: all is consistent
        return
    LOCK._at_fork_reinit()
    if PAIRS.depth or TANGENTS.depth or _COLLECTOR.depth:
        PAIRS.clear()
        TANGENTS.clear()
        PAIRS.depth = TANGENTS.depth = 0
        if _COLLECTOR.depth:
            _COLLECTOR.depth = 0
            if _COLLECTOR.was_enabled:
                gc.enable()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def cache_key(fn: Callable, wrt: Tuple[int, ...], options: tuple) -> tuple:
    """The memory cache's key of `fn`'s pair: what the pair was generated from
    (code, closure cells, globals, defaults, the decorator layers around it)."""
    # A decorated function's pair is its own: the compiler differentiates the inner
    # function only after checking each layer passes the call through unchanged, a
    # check a pair made for the bare function (or another wrapper) never made.
    layers = _layers(fn) if hasattr(fn, "__wrapped__") else ()
    fn = unwrap(fn)
    code = getattr(fn, "__code__", None)
    closure = tuple(id(c) for c in (getattr(fn, "__closure__", None) or ()))
    # Default values are bound into the generated code: functions that share code
    # but not defaults (a def inside a loop) get pairs of their own.
    defaults = tuple(id(d) for d in (getattr(fn, "__defaults__", None) or ()))
    return (code, closure, id(getattr(fn, "__globals__", None)), defaults, tuple(wrt),
            options) + layers


def _layers(fn: Callable) -> tuple:
    """The ids of the decorator layers `unwrap` peels off `fn` (the pair keeps
    `fn`, so they stay alive while it is cached)."""
    out, seen = [], set()
    while hasattr(fn, "__wrapped__") and id(fn) not in seen:
        seen.add(id(fn))
        out.append(id(fn))
        fn = fn.__wrapped__
    return tuple(out)
