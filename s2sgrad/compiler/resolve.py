"""Static resolution of the names a function reads but does not assign.

`np.sin` inside a function is a global lookup at run time; the compiler needs
the object at compile time to pick its gradient rule. Locals shadow
everything; then closure cells, module globals, builtins, as Python does.
"""
from __future__ import annotations

import ast
import builtins
import types
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from .bindings import MISSING as _MISSING
from .bindings import Binding, SequenceItems, unique_bindings  # noqa: F401 - also imported here

# What a pair may be compiled for, a parameter read as the function it is given
# (`layer(W, x, np.tanh)`; CompiledFunction.statics): functions with source or a rule.
FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType, np.ufunc)


class Resolver:
    def __init__(self, globals_: dict, closure: dict, local_names: Set[str]):
        self.globals = globals_
        self.closure = closure
        self.locals = set(local_names)
        # (namespace, name, object) for every free name resolved to a function,
        # class or module: generated code is only valid while they stay bound.
        self.facts: List[Binding] = []
        # Names the normaliser binds to objects it resolved itself (an item of a
        # module-level tuple of functions): valid while what they came from is,
        # which `sequence_of_functions` records.
        self.bound: Dict[str, Any] = {}

    def lookup(self, name: str) -> Any:
        """The object a free name refers to now, or _MISSING."""
        if name in self.locals:
            return _MISSING
        if name in self.bound:
            return self.bound[name]
        if name in self.closure:
            try:
                value = self.closure[name].cell_contents
            except ValueError:
                return _MISSING
            self._note(self.closure[name], name, value)
            return value
        if name in self.globals:
            value = self.globals[name]
            self._note(self.globals, name, value)
            return value
        builtins_ns = self.globals.get("__builtins__", builtins)
        if isinstance(builtins_ns, dict):
            return builtins_ns.get(name, _MISSING)
        return getattr(builtins_ns, name, _MISSING)

    def shadows_builtin(self, name: str) -> bool:
        """Whether the function, its closure or its module binds `name` to something
        other than the builtin (`from numpy import *` binds min, max, abs, round, ...):
        code the compiler writes then reads the builtin through an alias."""
        if name in self.locals or name in self.closure or name in self.bound:
            return True
        return name in self.globals and self.globals[name] is not getattr(builtins, name, None)

    def builtin_reference(self, name: str, taken: Set[str], bindings: Dict[str, Any]) -> str:
        """How generated code names builtin `name` (len, range, zip, ...): by its own
        name, unless a name the code uses (`taken`) or the function's closure or module
        binds it; then through an alias bound to the builtin (in `bindings`)."""
        if name not in taken and not self.shadows_builtin(name):
            return name
        alias = f"_s2s_builtin_{name}"
        bindings[alias] = getattr(builtins, name)
        return alias

    def _note(self, namespace, name: str, value: Any) -> None:
        if callable(value) or isinstance(value, types.ModuleType):
            self.facts.append(Binding(namespace, name, value))

    def static(self, expr: ast.expr) -> Tuple[bool, Optional[Any]]:
        """Resolve a Name or a dotted Attribute chain on a non-local name."""
        if isinstance(expr, ast.Name):
            value = self.lookup(expr.id)
            return (value is not _MISSING), (None if value is _MISSING else value)
        if isinstance(expr, ast.Attribute):
            ok, base = self.static(expr.value)
            if not ok:
                return False, None
            try:
                value = getattr(base, expr.attr)
            except AttributeError:
                return False, None
            if isinstance(base, types.ModuleType):  # `mod.act = relu` is watched too
                self._note(base, expr.attr, value)
            return True, value
        return False, None

    def pin(self, expr: ast.expr) -> None:
        """Record every step of a static chain (`model.loss`, `cfg.model`) as a
        binding, whatever the objects are: code that baked in what the chain
        resolved to (an instance, the function a method runs) is valid only
        while each step still resolves to the same object."""
        if isinstance(expr, ast.Name):
            if expr.id in self.locals:
                return
            if expr.id in self.closure:
                cell = self.closure[expr.id]
                self.facts.append(Binding(cell, expr.id, _read_cell(cell)))
            elif expr.id in self.globals:
                self.facts.append(Binding(self.globals, expr.id, self.globals[expr.id]))
            return
        if not isinstance(expr, ast.Attribute):
            return
        self.pin(expr.value)
        ok, base = self.static(expr.value)
        if not ok:
            return
        value = getattr(base, expr.attr, _MISSING)
        if isinstance(value, types.MethodType) and value.__self__ is base:
            # A fresh bound method on every access: pin the function its class
            # gives, and that the instance does not shadow it.
            self.facts.append(Binding(type(base), expr.attr,
                                      getattr(type(base), expr.attr, _MISSING)))
            own = getattr(base, "__dict__", None)
            if type(own) is dict:
                self.facts.append(Binding(own, expr.attr, own.get(expr.attr, _MISSING)))
        else:
            self.facts.append(Binding(base, expr.attr, value))

    def sequence_of_functions(self, expr: ast.expr) -> Optional[List[Any]]:
        """The items of a tuple or list of functions a free name (or dotted chain)
        refers to (`ACTIVATIONS = (np.tanh, relu)` at module level), with what the
        code generated for them rests on recorded: the name's binding and, for a
        list, which it can change in place, each item and the length. None for
        anything else."""
        if self.is_local_chain(expr):
            return None
        ok, value = self.static(expr)
        if not ok or type(value) not in (tuple, list) or not value or \
                not all(callable(item) for item in value):
            return None
        self.pin(expr)
        if type(value) is list:
            items = SequenceItems(value)
            self.facts.append(Binding(items, "length", len(value)))
            self.facts += [Binding(items, f"item_{i}", item) for i, item in enumerate(value)]
        return list(value)

    def is_local_chain(self, expr: ast.expr) -> bool:
        """True when the chain starts at a local variable (x.T, self.w.sum)."""
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        return isinstance(expr, ast.Name) and expr.id in self.locals


def _read_cell(cell) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return _MISSING


MISSING = _MISSING
