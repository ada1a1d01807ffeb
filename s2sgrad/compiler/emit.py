"""Pass 7 — emit: the generated functions as source text, as astor writes it.

The text is what `s2sgrad.source` and `s2sgrad show` print, and it is exactly
what runs (compiled by `loader`): one statement per line, comments where the
passes marked them, names as the passes chose them.
"""
from __future__ import annotations

import ast
import os
from typing import List, Optional, Sequence

from astor.code_gen import SourceGenerator

from ..trust import comment_safe
from .loader import remember_names
from .marks import COMMENT_MARK
from .names import clone, walk_values
from .writer import SourceWriter, Unsupported, WrittenNames, comment_line, pretty_string

# What astor's generator notes on the nodes it writes (their precedence, a
# unary operand's operator).
_ASTOR_ATTRS = ("_pp", "_p_op")

# The optimiser-check mode also checks the writer against astor.
_CHECK = os.environ.get("S2SGRAD_CHECK_OPTIMIZER", "") not in ("", "0")




def to_source(functions: Sequence[ast.FunctionDef], header: str = "") -> str:
    """Deterministic text for the given functions, comments restored.

    `writer.SourceWriter` writes the text as astor would; functions holding a node
    it does not know are written by astor itself. Comment statements (see
    `transform.comment`) are written as `# ...` lines directly, and the `_s2s_`
    names written are noted for `helper_names`, so that neither the functions
    nor the text need another walk. In the optimiser-check mode every text is
    written both ways, and a difference raises.
    """
    pieces = None
    try:
        writer = SourceWriter()
        writer.module(functions)
        pieces, names, names_ok = writer.result, writer.names, writer.names_ok
    except Unsupported:
        pass
    text = None if pieces is None else _text(pieces, header)
    if text is None or _CHECK:
        generator = _astor_pieces(functions)
        astor_text = _text(generator.result, header)
        if text is not None and text != astor_text:
            raise AssertionError("the source writer and astor wrote different text for "
                                 f"{[f.name for f in functions]}")
        text, names, names_ok = astor_text, generator.names, generator.names_ok
    if names_ok:
        remember_names(text, list(names))
    return text


def _text(pieces: List[str], header: str) -> str:
    """The pieces joined, as they are: never split into lines again (str.splitlines
    would also split at U+2028, a form feed and the like, and where such a
    character stood in a comment, the rest of the comment would become code).
    The writers put a line boundary in no comment and no one-line string."""
    result = list(pieces)
    result.append("\n")
    if set(result[0]) == set("\n"):
        result[0] = ""
    text = _one_line(result).rstrip() + "\n"
    return (_header_lines(header) + text) if header else text


def _header_lines(header: str) -> str:
    """The header comment, every line of it a comment that nothing in it (a file or
    function name) can end."""
    lines = header[:-1].split("\n") if header.endswith("\n") else header.split("\n")
    return "".join("# " + comment_safe(line[2:] if line.startswith("# ") else
                                       line[1:] if line.startswith("#") else line) + "\n"
                   for line in lines)


def _astor_pieces(functions: Sequence[ast.FunctionDef]) -> "_Generator":
    """astor's generator after writing the functions. The functions are left as
    they were: the attributes astor sets on nodes (`_ASTOR_ATTRS`) are removed
    afterwards. (Trees that share a node, or already carry such attributes, are
    written from a copy: astor reads them, so a second visit of a node could
    read what the first one set.)"""
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
    return generator


def _all_nodes(roots) -> Optional[List[ast.AST]]:
    """Every node under `roots` (through their fields) that has fields, or None if
    such a node occurs twice or a node already has an attribute astor sets.

    Nodes without fields (contexts, operators: the parser shares one `Load()`
    among all its names) may occur many times: astor notes nothing on them."""
    out = [n for root in roots for n in walk_values(root) if n._fields]
    if len(set(out)) != len(out):
        return None
    pp, p_op = _ASTOR_ATTRS
    for n in out:
        d = n.__dict__
        if pp in d or p_op in d:
            return None
    return out


class _Generator(SourceGenerator, WrittenNames):
    """astor's generator, writing comment statements as comments and noting the
    `_s2s_` names it writes."""

    def __init__(self, *args):
        SourceGenerator.__init__(self, *args)
        WrittenNames.__init__(self)

    def visit_Expr(self, node):
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and \
                value.value.startswith(COMMENT_MARK):
            self.newline(node)
            self.write(comment_line(value.value))
            return
        super().visit_Expr(node)

    def visit_Name(self, node):
        self.note(node.id)
        self.write(node.id)


def _one_line(pieces) -> str:
    """astor's default pretty-printer wraps long lines mid-expression; we do not."""
    return "".join(pieces)


def with_callees(root) -> list:
    """A compiled function (anything with `callees`) and every function it calls,
    directly or not, once each, in the order a depth-first walk meets them."""
    out, seen = [], set()

    def visit(c) -> None:
        if id(c) in seen:
            return
        seen.add(id(c))
        out.append(c)
        for sub in c.callees:
            visit(sub)
    visit(root)
    return out


def joined_source(root) -> str:
    """The generated text of a compiled function (anything with `module_source`
    and `callees`) followed by that of each function it calls, once each."""
    return "\n\n".join(c.module_source for c in with_callees(root))
