"""Pass 7 — emit: source text via astor, then compile it into live functions.

The text is what `s2sgrad.source` and `s2sgrad show` print, and it is exactly
what runs: it is parsed back and compiled, with the user's module globals as
globals (so module-level constants are read live, not copied) and s2sgrad's
helpers, callees and the user's closure cells as closure variables. The
generated functions are registered with `linecache`, so tracebacks and
debuggers show the generated lines.
"""
from __future__ import annotations

import ast
import linecache
import math
import re
import types
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

import astor
import numpy

from .. import runtime
from ..function import Context
from .names import clone
from .transform import COMMENT_MARK

_MARKER_LINE = re.compile(r"^(\s*)(?:'''|\"\"\"|'|\")" + re.escape(COMMENT_MARK)
                          + r"(\d+)(?:'''|\"\"\"|'|\")\s*$")
_EXTRA_HELPERS = {"Context": Context}


@dataclass
class Emitted:
    """Generated source and the names it needs bound in its closure."""

    source: str
    function_names: List[str]
    filename: str
    globals: dict
    free: Dict[str, Any] = field(default_factory=dict)
    closure_cells: Dict[str, types.CellType] = field(default_factory=dict)


def to_source(functions: Sequence[ast.FunctionDef], header: str = "") -> str:
    """Deterministic text for the given functions, comments restored."""
    texts: List[str] = []
    module = ast.Module(body=[clone(f) for f in functions], type_ignores=[])
    for node in ast.walk(module):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str) and node.value.value.startswith(COMMENT_MARK):
            texts.append(node.value.value[len(COMMENT_MARK):])
            node.value.value = f"{COMMENT_MARK}{len(texts) - 1}"
    raw = astor.to_source(module, pretty_source=_one_line)
    lines = []
    for line in raw.splitlines():
        m = _MARKER_LINE.match(line)
        if m:
            lines.append(f"{m.group(1)}# {texts[int(m.group(2))]}")
        else:
            lines.append(line)
    text = "\n".join(lines).rstrip() + "\n"
    return (header + text) if header else text


def _one_line(pieces) -> str:
    """astor's default pretty-printer wraps long lines mid-expression; we do not."""
    return "".join(pieces)


def free_names(source: str, function_names: Sequence[str]) -> List[str]:
    """Names the generated functions read that s2sgrad must bind (helpers etc.)."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id.startswith("_s2s_") and node.id not in out:
            out.append(node.id)
    return out


def helper_value(name: str) -> Any:
    """The object a reserved `_s2s_` name stands for, or KeyError."""
    short = name[len("_s2s_"):]
    if short == "np":
        return numpy
    if short == "math":
        return math
    if short in runtime.HELPERS:
        return runtime.HELPERS[short]
    if short in _EXTRA_HELPERS:
        return _EXTRA_HELPERS[short]
    raise KeyError(name)


def load(emitted: Emitted) -> Dict[str, types.FunctionType]:
    """Compile the generated source; returns its functions by name."""
    code, closure_names = compile_emitted(emitted)
    return instantiate(code, closure_names, emitted)


def compile_emitted(emitted: Emitted) -> Tuple[types.CodeType, List[str]]:
    """The code of a factory taking the closure variables and returning the functions.

    The code object depends only on the source and the names, so the disk cache
    stores it (marshal) together with `closure_names`, its parameters in order.
    """
    tree = ast.parse(emitted.source, filename=emitted.filename)
    names = set(emitted.free) | set(emitted.closure_cells)
    names.update(free_names(emitted.source, emitted.function_names))
    closure_names = sorted(names)
    factory = ast.FunctionDef(
        name="_s2s_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in closure_names],
                           vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=tree.body + [ast.Return(value=ast.Tuple(
            elts=[ast.Name(id=n, ctx=ast.Load()) for n in emitted.function_names],
            ctx=ast.Load()))],
        decorator_list=[], returns=None, type_comment=None)
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    code = compile(module, emitted.filename, "exec")
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return factory_code, closure_names


def instantiate(factory_code: types.CodeType, closure_names: Sequence[str],
                emitted: Emitted) -> Dict[str, types.FunctionType]:
    """Run the factory: bind helpers, `emitted.free` and the user's closure cells.

    A closure name is looked up in `emitted.free` first, then among the user's
    closure cells (shared, so they stay live), then as an `_s2s_` helper.
    """
    values = []
    for name in closure_names:
        if name in emitted.free:
            values.append(emitted.free[name])
        elif name in emitted.closure_cells:
            values.append(None)
        else:
            values.append(helper_value(name))
    make = types.FunctionType(factory_code, emitted.globals, "_s2s_factory")
    functions = make(*values)
    out: Dict[str, types.FunctionType] = {}
    for name, fn in zip(emitted.function_names, functions):
        if emitted.closure_cells and fn.__closure__:
            # Share the user's own cells: closure variables stay live.
            cells = tuple(emitted.closure_cells.get(v, c)
                          for v, c in zip(fn.__code__.co_freevars, fn.__closure__))
            fn = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                                    fn.__defaults__, cells)
        out[name] = fn
    linecache.cache[emitted.filename] = (len(emitted.source), None,
                                         emitted.source.splitlines(True), emitted.filename)
    return out


def bind_late(functions: Dict[str, types.FunctionType], name: str, value: Any) -> None:
    """Fill a closure variable after compilation (callees, recursion)."""
    for fn in functions.values():
        if fn.__closure__ and name in fn.__code__.co_freevars:
            fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents = value
