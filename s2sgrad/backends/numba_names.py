"""Fresh names for the code the numba passes write (one rule for all of them)."""
from __future__ import annotations

import keyword
from typing import Set


def fresh_name(base: str, taken: Set[str]) -> str:
    """base, or base_2, base_3, ...: the first not in taken (nor a keyword); taken
    grows by it, so that the next call gives another."""
    name, i = base, 2
    while name in taken or keyword.iskeyword(name):
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name
