"""The one exception the compiler raises for code it cannot differentiate.

It subclasses SyntaxError so editors and tracebacks show the user's file, line
and caret; the message repeats them so `str(err)` alone is enough in a log.
"""
from __future__ import annotations

import ast
import linecache
from typing import Optional


class TransformError(SyntaxError):
    """Code that s2sgrad cannot differentiate correctly.

    Raised at compile time (the first gradient request), never a silent zero.
    """

    def __init__(self, message: str, filename: Optional[str] = None,
                 lineno: Optional[int] = None, col: Optional[int] = None,
                 hint: Optional[str] = None, text: Optional[str] = None):
        if text is None and filename and lineno:
            text = linecache.getline(filename, lineno) or None
        self.reason = message
        self.hint = hint
        full = _format(message, filename, lineno, col, text, hint)
        # SyntaxError's offset is 1-based.
        super().__init__(full, (filename, lineno, None if col is None else col + 1,
                                text))

    def __str__(self) -> str:
        return self.msg


def _format(message, filename, lineno, col, text, hint) -> str:
    where = ""
    if filename:
        where = f"{filename}:{lineno}:{(col or 0) + 1}: " if lineno else f"{filename}: "
    lines = [where + message]
    if text:
        stripped = text.rstrip("\n")
        lines.append("    " + stripped)
        if col is not None:
            lines.append("    " + _caret_pad(stripped, col) + "^")
    if hint:
        lines.append(hint)
    return "\n".join(lines)


def _caret_pad(line: str, col: int) -> str:
    # Keep tabs so the caret lines up under the same column as in the source.
    return "".join(ch if ch == "\t" else " " for ch in line[:col])


def error_at(node: Optional[ast.AST], message: str, source=None,
             hint: Optional[str] = None) -> TransformError:
    """Build a TransformError located at `node` of a parsed user function.

    `source` is a compiler.parse.ParsedSource (anything with filename and
    line_text(lineno)); node positions are already in the user's file.
    """
    filename = getattr(source, "filename", None)
    lineno = getattr(node, "lineno", None)
    col = getattr(node, "col_offset", None)
    text = None
    if source is not None and lineno is not None:
        text = source.line_text(lineno)
        if text is not None and col is not None:
            col = _char_col(text, col)
    return TransformError(message, filename, lineno, col, hint, text)


def _char_col(text: str, byte_col: int) -> int:
    """ast gives UTF-8 byte offsets; the caret needs a character offset."""
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))
