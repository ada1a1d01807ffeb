"""The compiler's two exceptions: code it refuses, and bugs of its own.

TransformError is a deliberate refusal of code s2sgrad cannot differentiate
correctly. It subclasses SyntaxError so editors and tracebacks show the user's
file, line and caret; the message repeats them so `str(err)` alone is enough in
a log. InternalError is anything else that went wrong inside the compiler: a bug
of s2sgrad, reported with the user's line it was working on.
"""
from __future__ import annotations

import ast
import linecache
import traceback
from typing import Optional, Tuple


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


class InternalError(RuntimeError):
    """A bug in s2sgrad, not in the code being differentiated.

    Raised instead of whatever went wrong inside a compiler pass (the original
    exception is its __cause__), with the function and the user's line the pass
    was working on, so that the report can be acted on.
    """

    def __init__(self, message: str, filename: Optional[str] = None,
                 lineno: Optional[int] = None, col: Optional[int] = None,
                 text: Optional[str] = None):
        self.reason = message
        self.filename, self.lineno = filename, lineno
        super().__init__(_format(message, filename, lineno, col, text,
                                 "This is a bug in s2sgrad, not in your code: please report "
                                 "it on s2sgrad's issue tracker with this message and the "
                                 "function's source. Until it is fixed, wrap the statement "
                                 "in an s2sgrad.Function with a vjp rule."))


def internal_error(exc: BaseException, function: str, source=None) -> InternalError:
    """An InternalError for `exc`, raised while compiling `function` (a parsed
    user function's `source` gives file and lines), located at the innermost
    statement of the user's a compiler frame was handling."""
    filename = getattr(source, "filename", None)
    node = _user_node(exc, source)
    lineno = getattr(node, "lineno", None)
    col = getattr(node, "col_offset", None)
    text = source.line_text(lineno) if source is not None and lineno else None
    if text is not None and col is not None:
        col = _char_col(text, col)
    summary = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" (in {summary.name}, {summary.filename.rsplit('/', 1)[-1]}:{summary.lineno})" \
        if summary is not None else ""
    message = (f"internal error of s2sgrad while compiling {function}: "
               f"{type(exc).__name__}: {exc}{at}")
    return InternalError(message, filename, lineno, col, text)


_NODE_LOCALS: Tuple[str, ...] = ("s", "stmt", "statement", "node", "expr", "value", "call",
                                 "target")


def _user_node(exc: BaseException, source) -> Optional[ast.AST]:
    """The user's statement or expression the innermost compiler frame held."""
    if source is None:
        return None
    frames = [f for f, _ in traceback.walk_tb(exc.__traceback__)]
    fdef = getattr(source, "node", None)   # nodes of other files (inlined bodies, rule
    first = getattr(fdef, "lineno", 1)     # templates) do not locate the user's line
    last = getattr(fdef, "end_lineno", None) or 10 ** 9
    for frame in reversed(frames):
        for name in _NODE_LOCALS:
            node = frame.f_locals.get(name)
            if not isinstance(node, ast.AST):
                continue
            lineno = getattr(node, "lineno", None)
            if lineno and first <= lineno <= last and source.line_text(lineno):
                return node
    return None


def deliberate(exc: Exception) -> Exception:
    """Mark an exception the compiler raises on purpose about the user's code (a
    Function's vjp returning the wrong number of gradients is a TypeError, as in
    PyTorch), so that reporting_bugs lets it through."""
    exc.s2s_deliberate = True
    return exc


class reporting_bugs:
    """`with reporting_bugs(name, parsed):` turns an unexpected exception of the
    compiler into an InternalError; refusals and KeyboardInterrupt pass through."""

    def __init__(self, function: str, source=None):
        self.function, self.source = function, source

    def __enter__(self) -> "reporting_bugs":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or not isinstance(exc, Exception) or \
                isinstance(exc, (TransformError, InternalError)) or \
                getattr(exc, "s2s_deliberate", False):
            return False
        raise internal_error(exc, self.function, self.source) from exc


def guard_fields(error: TransformError) -> tuple:
    """What a run-time guard of generated code (runtime.inplace.unshared and its
    kind) needs to raise `error` at the user's line."""
    return (error.filename, error.lineno, (error.offset or 1) - 1, error.reason, error.hint,
            error.text)
