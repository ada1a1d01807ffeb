"""Deterministic, readable fresh names derived from the user's names.

Generated code must be byte-for-byte reproducible (it is cached and diffed), so
names come from stems and counters, never from ids or hashes.
"""
from __future__ import annotations

import ast
import keyword
import re
from typing import Iterable, Set

RESERVED_PREFIX = "_s2s_"


def sanitize(stem: str) -> str:
    """A valid identifier from a stem (stems from expressions are kept short upstream)."""
    stem = re.sub(r"\W+", "_", stem).strip("_") or "t"
    if stem[0].isdigit():
        stem = "v" + stem
    if keyword.iskeyword(stem) or stem in ("None", "True", "False"):
        stem += "_"
    return stem


class NameRegistry:
    """Hands out names nobody else in the generated module uses."""

    def __init__(self, taken: Iterable[str] = ()):
        self.taken: Set[str] = set(taken)

    def reserve(self, *names: str) -> None:
        self.taken.update(names)

    def fresh(self, stem: str, reserved: bool = False) -> str:
        """`stem` itself if free, else stem_2, stem_3, ...

        reserved=True gives a name under s2sgrad's `_s2s_` prefix (names the
        generated code binds to values, never the user's)."""
        stem = RESERVED_PREFIX + sanitize(stem) if reserved else sanitize(stem)
        if stem not in self.taken:
            self.taken.add(stem)
            return stem
        k = 2
        while f"{stem}_{k}" in self.taken:
            k += 1
        name = f"{stem}_{k}"
        self.taken.add(name)
        return name

    def version(self, base: str) -> str:
        """The next SSA version of a user variable: x -> x_1, x_2, ..."""
        k = 1
        while f"{base}_{k}" in self.taken:
            k += 1
        name = f"{base}_{k}"
        self.taken.add(name)
        return name


def names_in(node: ast.AST) -> Set[str]:
    """Every identifier (Name nodes and argument names) appearing in `node`."""
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.arg):
            out.add(sub.arg)
    return out


def loaded_names(node: ast.AST) -> Set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}


def stored_names(node: ast.AST) -> Set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, (ast.Store, ast.Del))}


def clone(node):
    """A deep copy of an AST (fields cloned, other attributes shared): several
    times faster than copy.deepcopy, which the passes would otherwise spend most
    of their time in."""
    if isinstance(node, ast.AST):
        new = node.__class__.__new__(node.__class__)
        for key, value in node.__dict__.items():
            new.__dict__[key] = clone(value) if isinstance(value, (ast.AST, list)) else value
        return new
    if isinstance(node, list):
        return [clone(item) for item in node]
    return node
