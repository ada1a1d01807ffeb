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
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Iterator

DEFAULT_SIZE = 1024
_NONE = object()


def memory_cache_size() -> int:
    """$S2SGRAD_MEMORY_CACHE_SIZE (pairs; default 1024); 0 means no limit."""
    text = os.environ.get("S2SGRAD_MEMORY_CACHE_SIZE", "").strip()
    try:
        size = int(text) if text else DEFAULT_SIZE
    except ValueError:
        size = DEFAULT_SIZE
    return max(size, 0)


class PairCache:
    """A dict-like LRU of compiled pairs (callers hold the compiler's lock)."""

    def __init__(self):
        self._data: "OrderedDict[Any, Any]" = OrderedDict()
        self.depth = 0   # compiles in progress (nested: callees)

    def get(self, key, default=None):
        value = self._data.get(key, _NONE)
        if value is _NONE:
            return default
        self._data.move_to_end(key)
        return value

    def __setitem__(self, key, value) -> None:
        self._data[key] = value
        self._data.move_to_end(key)

    def __getitem__(self, key):
        return self._data[key]

    def __delitem__(self, key) -> None:
        del self._data[key]

    def pop(self, key, default=None):
        return self._data.pop(key, default)

    def __contains__(self, key) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator:
        return iter(self._data)

    def values(self):
        return self._data.values()

    def clear(self) -> None:
        self._data.clear()

    def enter(self) -> None:
        """A compile starts (see leave)."""
        self.depth += 1

    def leave(self) -> None:
        """A compile ended; after the outermost one, drop the least recently used
        pairs beyond the size."""
        self.depth -= 1
        if self.depth == 0:
            self.trim()

    def trim(self) -> None:
        size = memory_cache_size()
        if size:
            while len(self._data) > size:
                self._data.popitem(last=False)
