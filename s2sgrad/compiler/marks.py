"""Comments in generated code: statements the emitter prints as `# text`.

Every pass may open a block with a comment naming the source line it
differentiates; the emitter turns the marked statements into comments. The mark
lives here, below every pass, so that none imports another for it.
"""
from __future__ import annotations

import ast
from typing import Optional, Tuple

COMMENT_MARK = "__s2s_comment__"


def comment(text: str) -> ast.Expr:
    """A statement the emitter prints as `# text`."""
    return ast.Expr(value=ast.Constant(value=f"{COMMENT_MARK}{text}"))


def is_comment(s) -> bool:
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and \
        isinstance(s.value.value, str) and s.value.value.startswith(COMMENT_MARK)


def line_comment(origin: ast.stmt, parsed, last_line: Optional[int],
                 force: bool = False) -> Optional[Tuple[int, ast.Expr]]:
    """(line, `# line N: <source>` comment) opening the generated block of the
    user's statement `origin`; None while that line's block is already open."""
    lineno = getattr(origin, "lineno", None)
    if lineno is None or (lineno == last_line and not force):
        return None
    text = parsed.line_text(lineno) or ""
    return lineno, comment(f"line {lineno}: {text.strip()}")
