"""Pass 7 — emit: source text via astor, then compile it into live functions.

The text is what `s2sgrad.source` and `s2sgrad show` print, and it is exactly
what runs: it is compiled (inside a factory function), with the user's module
globals as globals (so module-level constants are read live, not copied) and s2sgrad's
helpers, callees and the user's closure cells as closure variables. The
generated functions are registered with `linecache`, so tracebacks and
debuggers show the generated lines.
"""
from __future__ import annotations

import ast
import keyword
import linecache
import math
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy
from astor.code_gen import SourceGenerator
from astor.string_repr import pretty_string

from .. import runtime
from ..function import Context
from .names import clone
from .transform import COMMENT_MARK

_EXTRA_HELPERS = {"Context": Context}
# What astor's generator notes on the nodes it writes (their precedence, a
# unary operand's operator).
_ASTOR_ATTRS = ("_pp", "_p_op")
# Text that could make a line continue another, or indentation not only spaces.
_NOT_ONE_LINE = ('"""', "'''", "\\\n", "\t", "\r", "\f", "\v")


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
    """Deterministic text for the given functions, comments restored.

    astor writes the text; comment statements (see `transform.comment`) are
    written as `# ...` lines directly, and the `_s2s_` names written are noted
    for `helper_names`, so that neither the functions nor the text need another
    walk. The functions are left as they were: the attributes astor sets on
    nodes (`_ASTOR_ATTRS`) are removed afterwards. (Trees that share a node,
    or already carry such attributes, are written from a copy: astor reads
    them, so a second visit of a node could read what the first one set.)
    """
    nodes = _all_nodes(functions)
    if nodes is None:
        functions = [clone(f) for f in functions]
    generator = _Generator(" " * 4, False, pretty_string)
    try:
        generator.visit(ast.Module(body=list(functions), type_ignores=[]))
    finally:
        for n in nodes or ():
            d = n.__dict__
            for attr in _ASTOR_ATTRS:
                d.pop(attr, None)
    result = generator.result
    result.append("\n")
    if set(result[0]) == set("\n"):
        result[0] = ""
    # Line by line, as the text is read back (splitlines also splits at \f etc.).
    text = "\n".join(_one_line(result).splitlines()).rstrip() + "\n"
    text = (header + text) if header else text
    if generator.names_ok:
        _remember_names(text, list(generator.names))
    return text


def _all_nodes(roots) -> Optional[List[ast.AST]]:
    """Every node under `roots` (through their fields) that has fields, or None if
    such a node occurs twice or a node already has an attribute astor sets.

    Nodes without fields (contexts, operators: the parser shares one `Load()`
    among all its names) may occur many times: astor notes nothing on them."""
    out: List[ast.AST] = []
    seen: set = set()
    stack = list(roots)
    pop, push, AST = stack.pop, stack.append, ast.AST
    while stack:
        n = pop()
        d = n.__dict__
        if any(attr in d for attr in _ASTOR_ATTRS):
            return None
        if not n._fields:
            continue
        if id(n) in seen:
            return None
        seen.add(id(n))
        out.append(n)
        for f in n._fields:
            v = d.get(f)
            if v.__class__ is list:
                for item in v:
                    if isinstance(item, AST):
                        push(item)
            elif isinstance(v, AST):
                push(v)
    return out


class _Generator(SourceGenerator):
    """astor's generator, writing comment statements as comments and noting the
    `_s2s_` names it writes."""

    def __init__(self, *args):
        super().__init__(*args)
        self.names: Dict[str, None] = {}
        self.names_ok = True

    def visit_Expr(self, node):
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and \
                value.value.startswith(COMMENT_MARK):
            self.newline(node)
            self.write(f"# {value.value[len(COMMENT_MARK):]}")
            return
        super().visit_Expr(node)

    def visit_Name(self, node):
        name = node.id
        if name.startswith("_s2s_"):
            self.names[name] = None
            if not name.isidentifier() or keyword.iskeyword(name):
                self.names_ok = False  # not a name once read back: parse instead
        self.write(name)


def _one_line(pieces) -> str:
    """astor's default pretty-printer wraps long lines mid-expression; we do not."""
    return "".join(pieces)


# Text -> the `_s2s_` names in it, for texts `to_source` made recently.
_NAMES: Dict[str, List[str]] = {}
_NAMES_LOCK = threading.Lock()
_NAMES_KEPT = 64


def _remember_names(text: str, names: List[str]) -> None:
    with _NAMES_LOCK:
        _NAMES.pop(text, None)
        _NAMES[text] = names
        while len(_NAMES) > _NAMES_KEPT:
            del _NAMES[next(iter(_NAMES))]


def _remembered_names(source: str) -> Optional[List[str]]:
    with _NAMES_LOCK:
        known = _NAMES.get(source)
    return None if known is None else list(known)


def helper_names(source: str) -> List[str]:
    """The `_s2s_` names read or written in `source` (in order of first use when
    `to_source` made the text, else in `ast.walk` order)."""
    known = _remembered_names(source)
    return free_names(source, ()) if known is None else known


def joined_source(root) -> str:
    """The generated text of a compiled function (anything with `module_source`
    and `callees`) followed by that of each function it calls, once each."""
    parts, seen = [], set()

    def visit(c) -> None:
        if id(c) in seen:
            return
        seen.add(id(c))
        parts.append(c.module_source)
        for sub in c.callees:
            visit(sub)
    visit(root)
    return "\n\n".join(parts)


def free_names(source: str, function_names: Sequence[str]) -> List[str]:
    """Names the generated functions read that s2sgrad must bind (helpers etc.)."""
    return _tree_names(ast.parse(source))


def _tree_names(tree: ast.AST) -> List[str]:
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
    The factory is written as text around the source when that is safe (see
    `_factory_text`): compiling text builds no Python syntax tree, and gives the
    same code as compiling the tree of the source put in a factory.
    """
    names = set(emitted.free) | set(emitted.closure_cells)
    helpers = _remembered_names(emitted.source)
    tree = None
    if helpers is None:  # text `to_source` did not make (or made long ago)
        tree = ast.parse(emitted.source, filename=emitted.filename)
        helpers = _tree_names(tree)
    names.update(helpers)
    closure_names = sorted(names)
    text = _factory_text(emitted.source, closure_names, emitted.function_names)
    if text is not None:
        try:
            code = compile(text, emitted.filename, "exec")
        except Exception:  # noqa: BLE001 - the tree below reports it as before
            pass
        else:
            return _factory_code(code), closure_names
    return _factory_from_tree(emitted, closure_names, tree), closure_names


def _factory_from_tree(emitted: Emitted, closure_names: Sequence[str],
                       tree: Optional[ast.Module] = None) -> types.CodeType:
    """The factory's code, compiled from the syntax tree of the source put in a
    function (what `_factory_text` does as text). `tree`: the source's, if parsed."""
    if tree is None:
        tree = ast.parse(emitted.source, filename=emitted.filename)
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
    return _factory_code(compile(module, emitted.filename, "exec"))


def _factory_code(module_code: types.CodeType) -> types.CodeType:
    return next(c for c in module_code.co_consts if isinstance(c, types.CodeType))


def _factory_text(source: str, params: Sequence[str],
                  function_names: Sequence[str]) -> Optional[str]:
    """`source` inside `def _s2s_factory(params): ... return (functions)`, line
    for line and column for column, or None where that is not safely done.

    The factory's header replaces the first line (the `# s2sgrad: ...`
    comment), so every line keeps its number; the top-level `def` lines are
    indented by one space and nothing else moves, so every column of the
    functions' code stays too (tracebacks point into `source` by both). Only
    text of the shape `to_source` writes qualifies: every line at column 0
    blank, a comment or a `def`; no string that could span lines, no
    continuation, tab or form feed.
    """
    if not (source.startswith("#") and source.endswith("\n")) or \
            any(bad in source for bad in _NOT_ONE_LINE) or \
            not all(n.isidentifier() for n in (*params, *function_names)):
        return None
    lines = source.split("\n")
    lines[0] = f"def _s2s_factory({', '.join(params)}):"
    for i in range(1, len(lines)):
        line = lines[i]
        if not line or line[0] == " " or line[0] == "#":
            continue
        if line.startswith("def "):
            lines[i] = " " + line
        else:
            return None
    lines.append(f" return ({''.join(n + ', ' for n in function_names)})")
    return "\n".join(lines) + "\n"


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
