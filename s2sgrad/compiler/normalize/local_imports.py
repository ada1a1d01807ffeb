"""Imports inside the differentiated function, done once when it is compiled:

    def loss(w):                                 def loss(w):
        from scipy.special import gammaln  ->        return np.sum(gammaln(w) * w)
        return np.sum(gammaln(w) * w)          (gammaln bound to scipy.special.gammaln)

Python runs such an import on every call and binds a local name; the module is
the same object each time (sys.modules keeps it), so the compiler imports it once
and reads the name as it reads a global: statically, finding its gradient rule or
its source. What the name was bound to is recorded (a later `scipy.special.gammaln
= other` compiles the function again). A name that the function also binds in any
other way is left alone (and refused as before: its value depends on the path);
an import that fails is refused at the statement, with Python's own message.
"""
from __future__ import annotations

import ast
import importlib
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..bindings import Binding
from ..names import clone
from .scope import SCOPES, assigned_names, rewrite_blocks, walk_scope

_IMPORTS = (ast.Import, ast.ImportFrom)


def lift_local_imports(body: List[ast.stmt], package: Optional[str],
                       refuse: Callable[[ast.AST, str, str], Exception]
                       ) -> Optional[Tuple[List[ast.stmt], Dict[str, Any], List[Binding]]]:
    """(body without its imports, the names they bind with their objects, what those
    objects were found through), or None where the function imports nothing."""
    imports = sorted((n for s in body if not isinstance(s, SCOPES)   # (a def's are its own)
                      for n in [s] + walk_scope(s, statements_only=True)
                      if isinstance(n, _IMPORTS)), key=lambda n: (n.lineno, n.col_offset))
    if not imports:
        return None
    bound: Dict[str, Any] = {}
    facts: List[Binding] = []
    for s in imports:
        for name, value, fact in _imported(s, package, refuse):
            if name in bound and bound[name] is not value:
                raise refuse(s, f"the name {name!r} is imported twice, as different objects",
                             "Import each object once, at the top of the function "
                             "or of the module.")
            bound[name] = value
            if fact is not None:
                facts.append(fact)
    rest = _without_imports([clone(s) for s in body]) or [ast.Pass()]
    for name in sorted(assigned_names(rest) & set(bound)):
        where = next(s for s in imports if name in _names_bound(s))
        raise refuse(where, f"the name {name!r} is bound by this import and assigned "
                     f"elsewhere in the function", "Give the imported object a name of "
                     "its own (import ... as ...).")
    return rest, bound, facts


def _without_imports(block: List[ast.stmt]) -> List[ast.stmt]:
    out: List[ast.stmt] = []
    for s in block:
        if isinstance(s, _IMPORTS):
            continue
        if not isinstance(s, SCOPES):
            rewrite_blocks(s, _without_imports)
        out.append(s)
    return out


def _names_bound(s: ast.stmt) -> List[str]:
    return [a.asname or a.name.split(".")[0] for a in s.names]


def _imported(s: ast.stmt, package: Optional[str], refuse):
    """(name, object, binding fact or None) for each name the statement binds."""
    try:
        if isinstance(s, ast.Import):
            for a in s.names:
                module = importlib.import_module(a.name)
                if a.asname:
                    yield a.asname, module, None
                else:
                    top = a.name.split(".")[0]
                    yield top, importlib.import_module(top), None
            return
        relative = "." * s.level + (s.module or "")
        module = importlib.import_module(relative, package if s.level else None)
        for a in s.names:
            if a.name == "*":
                raise refuse(s, "'from ... import *' inside a function",
                             "Import the names you use.")
            value = getattr(module, a.name, _ABSENT)
            if value is _ABSENT:   # a submodule not imported yet, as Python finds it
                value = importlib.import_module(f"{module.__name__}.{a.name}")
            fact = None if isinstance(value, types.ModuleType) else \
                Binding(module, a.name, value)
            yield a.asname or a.name, value, fact
    except ImportError as e:
        raise refuse(s, f"this import fails when the function is compiled: "
                     f"{type(e).__name__}: {e}",
                     "Install the module, or import it at module level where it is "
                     "optional.") from None


_ABSENT = object()
