"""Generated text into live functions: compiled inside a factory, bound late.

The text is compiled (inside a factory function) with the user's module
globals as globals (so module-level constants are read live, not copied) and
s2sgrad's helpers, callees and the user's closure cells as closure variables.
The generated functions are registered with `linecache`, so tracebacks and
debuggers show the generated lines. Below every pass: loading code is not a
step of the pipeline, and passes that make small functions (a lifted lambda,
a Function's vjp as a function) use it too.
"""
from __future__ import annotations

import ast
import hashlib
import itertools
import linecache
import math
import os
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy

from .. import runtime
from ..function import Context

# Text that could make a line continue another, or indentation not only spaces.
_NOT_ONE_LINE = ('"""', "'''", "\\\n", "\t", "\r", "\f", "\v")

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


# Text -> the `_s2s_` names in it, for texts `to_source` made recently.
_NAMES: Dict[str, List[str]] = {}


_NAMES_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):   # a child forked while another thread held it
    os.register_at_fork(after_in_child=_NAMES_LOCK._at_fork_reinit)


_NAMES_KEPT = 64


def remember_names(text: str, names: List[str]) -> None:
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
    if short == "scalar_math":
        return runtime.scalar_math
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
            shared = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                                        fn.__defaults__, cells)
            # (the constructor takes no keyword-only defaults: without them a caller
            # leaving `scale` out, as the caller's code may, found it required)
            shared.__kwdefaults__ = fn.__kwdefaults__
            shared.__qualname__ = fn.__qualname__
            fn = shared
        out[name] = fn
    if emitted.closure_cells:
        # A generated function calling itself or another one of the text (recursion)
        # reads it from the factory's cell, which holds the function made before the
        # user's cells were shared: the function with them in its place.
        for fn in out.values():
            for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
                if var in out and var not in emitted.closure_cells:
                    cell.cell_contents = out[var]
    # Lines as Python numbers them (at "\n" only; str.splitlines would also split at
    # U+2028 and the like, and tracebacks would show the wrong lines).
    lines = [line + "\n" for line in emitted.source.split("\n")]
    if lines and lines[-1] == "\n":
        lines.pop()
    linecache.cache[emitted.filename] = (len(emitted.source), None, lines, emitted.filename)
    return out


def distinct_filename(filename: str, source: str) -> str:
    """The name `source` goes into linecache under: `filename`, unless another text is
    there already (the same function compiled again with options its name does not
    show: argument structures, the callees it was specialised for). Then a name of its
    own, so that the code running from the first text keeps its lines (tracebacks, and
    the source check of a derivative of it)."""
    entry = linecache.cache.get(filename)
    if entry is None or "".join(entry[2]).rstrip("\n") == source.rstrip("\n"):
        return filename
    digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:8]
    return f"{filename[:-1]} #{digest}>"


def bind_late(functions: Dict[str, types.FunctionType], name: str, value: Any) -> None:
    """Fill a closure variable after compilation (callees, recursion)."""
    for fn in functions.values():
        if fn.__closure__ and name in fn.__code__.co_freevars:
            fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents = value


_COUNTER = itertools.count()


def lift_def(node: ast.FunctionDef, free: Sequence[str], globals_: dict,
             filename: str) -> types.FunctionType:
    """A module-level function for a `def` nested in a differentiated function: the
    outer variables it reads are extra trailing parameters (as for a lambda). Where
    the def has defaults, those parameters get None as theirs, so that each default
    stays with its own parameter; the compiler's calls of it pass every parameter
    (normalize.calls.completed) or name the outer ones."""
    lifted = _lifted(node.name, node.args, free, node.body)
    source = ast.unparse(ast.fix_missing_locations(ast.Module(body=[lifted],
                                                              type_ignores=[]))) + "\n"
    pseudo = f"<s2sgrad nested def {node.name} at {filename}:{node.lineno} #{next(_COUNTER)}>"
    functions = load(Emitted(source=source, function_names=[node.name], filename=pseudo,
                             globals=globals_))
    return functions[node.name]


def _lifted(name: str, args: ast.arguments, free: Sequence[str],
            body: list) -> ast.FunctionDef:
    """`def name(<args' positional parameters>, <free>)`: where they have defaults,
    the outer variables get None as theirs, so each default stays with its own."""
    defaults = list(args.defaults)
    if defaults:
        defaults += [ast.Constant(value=None) for _ in free]
    return ast.FunctionDef(
        name=name,
        args=ast.arguments(posonlyargs=list(args.posonlyargs),
                           args=list(args.args) + [ast.arg(arg=n) for n in free],
                           vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                           defaults=defaults),
        body=body, decorator_list=[], returns=None, type_comment=None)


def lift_lambda(node: ast.Lambda, free: Sequence[str], globals_: dict,
                filename: str) -> types.FunctionType:
    """A module-level function for `lambda args: body` whose free variables are
    extra trailing parameters (so an outer derivative sees them as inputs), its
    defaults kept (constants: see lift_def)."""
    name = f"lambda_{node.lineno}"
    body = ast.Return(value=node.body)
    source = ast.unparse(ast.fix_missing_locations(ast.Module(body=[_lifted(
        name, node.args, free, [body])], type_ignores=[]))) + "\n"
    pseudo = f"<s2sgrad lifted lambda at {filename}:{node.lineno} #{next(_COUNTER)}>"
    functions = load(Emitted(source=source, function_names=[name], filename=pseudo,
                             globals=globals_))
    return functions[name]
