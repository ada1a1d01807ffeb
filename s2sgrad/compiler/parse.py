"""Pass 1 — parse: a live Python function to its AST, positioned in the user's file.

Every node keeps the line and column it has in the user's file, so errors and the
comments in generated code point at the code the user wrote.
"""
from __future__ import annotations

import ast
import copy
import inspect
import linecache
import textwrap
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from ..errors import TransformError
from ..introspect import refuse_opaque_decorators, source_block, unwrap
from . import reentry
from .names import copy_location, walk
from .source_check import verify_source


@dataclass
class ParsedFunction:
    """A user function's AST plus everything needed to resolve its names."""

    fn: Callable
    name: str
    node: ast.FunctionDef
    filename: str
    source: str
    globals: dict
    closure: Dict[str, types.CellType] = field(default_factory=dict)
    _lines: Optional[List[str]] = None
    # `node` was parsed for this record alone (not taken from a tree of the whole
    # file, which later parses share): normalise may then rewrite it in place
    # instead of copying it, and it is marked used (`tree_used`) when it does.
    own_tree: bool = True
    tree_used: bool = False
    # Parameters bound to the function a caller passes them (`layer(W, x, np.tanh)`):
    # read as that function, like a global, in a pair made for it alone.
    statics: Dict[str, Any] = field(default_factory=dict)

    def line_text(self, lineno: int) -> Optional[str]:
        """The user's source line (without newline), for errors and comments."""
        text = linecache.getline(self.filename, lineno)
        if not text and self._lines and 0 < lineno <= len(self._lines):
            text = self._lines[lineno - 1]
        return text.rstrip("\n") if text else None

    @property
    def is_generator(self) -> bool:
        """A generator function (its body yields): normalise collects what it yields."""
        code = getattr(unwrap(self.fn), "__code__", None)
        return bool(code is not None and code.co_flags & inspect.CO_GENERATOR)

    @property
    def params(self) -> List[str]:
        return [a.arg for a in self.node.args.posonlyargs + self.node.args.args]

    @property
    def all_params(self) -> List[str]:
        """Positional then keyword-only parameters: what `wrt` positions index (the
        public API differentiates positional ones only; a caller's generated code
        may differentiate a callee's keyword-only parameter too)."""
        return self.params + [a.arg for a in self.node.args.kwonlyargs]


def parse_function(fn: Callable) -> ParsedFunction:
    """Parse `fn`'s source into a FunctionDef whose positions are the user's."""
    refuse_opaque_decorators(fn)
    fn = unwrap(fn)
    fn = reentry.readable(fn)   # s2sgrad.grad(f) & co.: their code (second derivatives)
    if isinstance(fn, types.MethodType):
        raise TransformError(
            f"cannot differentiate the bound method {fn.__qualname__} directly",
            hint="Differentiate the plain function (Class.method) and pass the "
                 "instance as an argument, or wrap the call in a lambda.")
    if not isinstance(fn, types.FunctionType):
        raise TransformError(
            f"s2sgrad can only differentiate Python functions, not {type(fn).__name__}",
            hint="Pass a function defined with def or lambda in a .py file.")
    code = fn.__code__
    filename = code.co_filename
    made = getattr(fn, "__s2sgrad_tree__", None)
    if made is not None:   # a function the compiler wrote (compiler.aggregates): its tree
        return _made(fn, made)
    found = source_block(fn)
    node = None if found is None else _parse_in_place(*found, code)
    if node is not None:
        block, first = found
    else:   # inspect finds the end of the block by tokenising the file
        try:
            block, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as exc:
            raise TransformError(
                f"cannot read the source of {fn.__qualname__} ({exc})",
                hint="s2sgrad transforms source code: define the function in a .py "
                     "file or a notebook cell, not with exec() or in the plain REPL.") from None
        node = _parse_block(block, first, code)
    own_tree = node is not None
    if node is None:
        node = _parse_from_file(filename, code)   # (a tree the file's parses share)
    if node is None:
        raise TransformError(f"cannot locate the source of {fn.__qualname__}",
                             filename, first)
    verify_source(fn, node)   # the source parsed is the code that runs, or an error
    node = _as_function_def(node, code)
    closure = {}
    if fn.__closure__:
        closure = dict(zip(code.co_freevars, fn.__closure__))
    name = code.co_name if code.co_name != "<lambda>" else f"lambda_{code.co_firstlineno}"
    return ParsedFunction(fn=fn, name=name, node=node, filename=filename,
                          source="".join(block), globals=fn.__globals__,
                          closure=closure, _lines=linecache.getlines(filename) or None,
                          own_tree=own_tree)


def _made(fn: types.FunctionType, node: ast.FunctionDef) -> ParsedFunction:
    """The record of a function whose tree the compiler wrote from the user's (every
    node at the user's line): that tree, not the file's text, is its source."""
    code = fn.__code__
    closure = dict(zip(code.co_freevars, fn.__closure__ or ()))
    return ParsedFunction(fn=fn, name=code.co_name, node=copy.deepcopy(node),
                          filename=code.co_filename, source=ast.unparse(node),
                          globals=fn.__globals__, closure=closure,
                          _lines=linecache.getlines(code.co_filename) or None)


def _parse_in_place(block: List[str], first: int, code: types.CodeType):
    """The def of `code`, parsed where it stands in its file (so that every node
    has its position there without a walk to shift it), or None."""
    indented = block[0][:1] in (" ", "\t")
    if indented:   # a method or a nested def: under `if 1:` on the line above
        if first < 2:
            return None
        text = "\n" * (first - 2) + "if 1:\n" + "".join(block)
    else:
        text = "\n" * (first - 1) + "".join(block)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    body = tree.body[0].body if indented else tree.body
    return body[0] if len(body) == 1 and _is_def_of(body[0], code) else None


def _parse_block(block: List[str], first: int, code: types.CodeType):
    text = "".join(block)
    dedented = textwrap.dedent(text)
    indent = _indent_width(block, dedented)
    try:
        tree = ast.parse(dedented)
    except SyntaxError:
        return None
    for node in walk(tree):
        if hasattr(node, "lineno"):
            node.lineno += first - 1
            node.end_lineno = (node.end_lineno or node.lineno) + first - 1
            node.col_offset += indent
            if node.end_col_offset is not None:
                node.end_col_offset += indent
    return _find_code_node(tree, code)


def _indent_width(block: List[str], dedented: str) -> int:
    first_line = block[0]
    return len(first_line) - len(dedented.splitlines(True)[0]) if block else 0


_FILE_TREES: Dict[str, tuple] = {}


def _parse_from_file(filename: str, code: types.CodeType):
    """Fallback for a lambda inside a multi-line statement: parse the whole file."""
    lines = linecache.getlines(filename)
    if not lines:
        return None
    text = "".join(lines)
    cached = _FILE_TREES.get(filename)
    if cached is None or cached[0] != text:
        try:
            cached = (text, ast.parse(text))
        except SyntaxError:
            return None
        _FILE_TREES[filename] = cached
    return _find_code_node(cached[1], code)


def _find_code_node(tree: ast.AST, code: types.CodeType):
    """The FunctionDef or Lambda that compiled to `code`."""
    want_line = code.co_firstlineno
    is_lambda = code.co_name == "<lambda>"
    candidates = []
    for node in walk(tree):
        if is_lambda and isinstance(node, ast.Lambda) and node.lineno == want_line:
            candidates.append(node)
        elif not is_lambda and _is_def_of(node, code):
            candidates.append(node)
    if len(candidates) > 1:
        candidates = [c for c in candidates if _same_args(c, code)] or candidates
    if len(candidates) > 1 and is_lambda:
        candidates = _match_positions(candidates, code)
        if len(candidates) != 1:
            raise TransformError(
                f"cannot tell which of the lambdas on line {want_line} is the one to "
                f"differentiate", code.co_filename, want_line,
                hint="Give the lambda a line of its own, or define it with def.")
    return candidates[0] if candidates else None


def _is_def_of(node, code: types.CodeType) -> bool:
    """node is a def of code's name starting (at a decorator or the def) at its line."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or \
            node.name != code.co_name:
        return False
    start = min([d.lineno for d in node.decorator_list] + [node.lineno])
    return code.co_firstlineno in (start, node.lineno)


def _same_args(node, code: types.CodeType) -> bool:
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return tuple(names) == code.co_varnames[:len(names)]


def _match_positions(nodes, code: types.CodeType):
    """The innermost of the lambdas whose text spans every position `code` was
    compiled from (a lambda inside another spans its own positions, and so does
    the outer one); all of `nodes` where positions are not recorded (Python < 3.11)."""
    positions = getattr(code, "co_positions", None)
    if positions is None:
        return nodes
    spans = [(p[2], p[3]) for p in positions()
             if p[2] is not None and p[3] is not None and p[3] > p[2]
             and p[0] == code.co_firstlineno]
    if not spans:
        return nodes
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    around = [n for n in nodes if n.col_offset <= lo and hi <= (n.end_col_offset or hi)]
    if len(around) > 1:
        narrowest = min((n.end_col_offset or hi) - n.col_offset for n in around)
        around = [n for n in around if (n.end_col_offset or hi) - n.col_offset == narrowest]
    return around


def _as_function_def(node, code: types.CodeType) -> ast.FunctionDef:
    if isinstance(node, ast.AsyncFunctionDef):
        raise TransformError("async functions cannot be differentiated", code.co_filename,
                             node.lineno, node.col_offset,
                             hint="Differentiate a plain def function.")
    if isinstance(node, ast.Lambda):
        ret = ast.Return(value=node.body)
        copy_location(ret, node.body)
        fdef = ast.FunctionDef(name=f"lambda_{node.lineno}", args=node.args, body=[ret],
                               decorator_list=[], returns=None, type_comment=None)
        copy_location(fdef, node)
        fdef.end_lineno, fdef.end_col_offset = node.end_lineno, node.end_col_offset
        node = fdef
    node.decorator_list = []
    node.returns = None
    for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
        arg.annotation = None
    for arg in (node.args.vararg, node.args.kwarg):
        if arg is not None:
            arg.annotation = None
    if node.args.vararg is not None:
        # `*rest` is one tuple parameter after the positional ones (callables.PackedRest
        # passes the arguments so): its items are read like any tuple's.
        node.args.args = node.args.args + [node.args.vararg]
        node.args.vararg = None
    return node
