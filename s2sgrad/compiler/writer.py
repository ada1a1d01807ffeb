"""The text of generated functions, character for character as astor writes it.

astor's generator dispatches every node through a closure that tests each piece
it writes, and notes each child's precedence as an attribute on the child; for
the few hundred statements of a generated pair that was a tenth of a compile.
This writer passes the precedence down as an argument instead and writes the
pieces directly, following astor's rules exactly (its parentheses, its spacing,
its number and string forms, its blank lines), so that the text, which is a
product surface and the disk cache's content, does not change with it.

It knows the nodes generated code is made of. A node it does not know (a
lambda, a comprehension, an f-string the user wrote) raises `Unsupported`, and
the caller writes the whole text with astor. In the optimiser-check mode the
caller writes every text both ways and compares them.
"""
from __future__ import annotations

import ast
import keyword
import math
from typing import Dict, List, Sequence

from astor.op_util import Precedence, get_op_precedence, get_op_symbol
from astor.string_repr import string_triplequote_repr

from ..trust import comment_safe
from .marks import COMMENT_MARK

P = Precedence   # astor's precedence of each kind of node and operator
_HIGHEST = P.highest      # what astor assumes of a child its parent did not mark
_POW_LHS = P.Pow + 1
_INDENT = " " * 4


class Unsupported(Exception):
    """A node this writer does not write: the caller uses astor."""


class WrittenNames:
    """The `_s2s_` names a writer of generated text wrote, noted as it writes them
    (`loader` needs them, and then need not walk the functions or the text)."""

    def __init__(self):
        self.names: Dict[str, None] = {}
        self.names_ok = True

    def note(self, name: str) -> None:
        if name.startswith("_s2s_"):
            self.names[name] = None
            if not name.isidentifier() or keyword.iskeyword(name):
                self.names_ok = False   # not a name once read back: parse instead


class SourceWriter(WrittenNames):
    """Writes statements into `result` (pieces to be joined), as astor's
    SourceGenerator with four-space indentation and no line information."""

    def __init__(self):
        super().__init__()
        self.result: List[str] = []
        self.indentation = 0
        self.new_lines = 0
        self.colinfo = (0, 0)   # where the current line starts: (piece, offset)

    # -- pieces --------------------------------------------------------------------
    def write(self, text: str) -> None:
        if self.new_lines:
            result = self.result
            result.append("\n" * self.new_lines)
            self.colinfo = (len(result), 0)
            result.append(_INDENT * self.indentation)
            self.new_lines = 0
        if text:
            self.result.append(text)

    def newline(self, extra: int = 0) -> None:
        self.new_lines = max(self.new_lines, 1 + extra)

    # -- statements ----------------------------------------------------------------
    def module(self, functions: Sequence[ast.stmt]) -> None:
        self.statements(functions)

    def statements(self, stmts: Sequence[ast.stmt]) -> None:
        table = _STATEMENTS
        for s in stmts:
            method = table.get(s.__class__)
            if method is None:
                raise Unsupported(type(s).__name__)
            method(self, s)

    def block(self, stmts: Sequence[ast.stmt]) -> None:
        self.indentation += 1
        self.statements(stmts)
        self.indentation -= 1

    def else_block(self, stmts: Sequence[ast.stmt]) -> None:
        if stmts:
            self.newline()
            self.write("else:")
            self.block(stmts)

    def s_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.decorator_list or node.returns is not None:
            raise Unsupported("decorated or annotated def")
        self.newline(1 if self.indentation else 2)
        self.newline()
        self.write(f"def {node.name}")
        self.write("(")
        self.arguments(node.args)
        self.write(")")
        self.write(":")
        self.block(node.body)
        if not self.indentation:
            self.newline(2)

    def arguments(self, node: ast.arguments) -> None:
        want_comma = [False]

        def comma() -> None:
            if want_comma[0]:
                self.write(", ")
            else:
                want_comma[0] = True

        def loop(args, defaults) -> None:
            padding = [None] * (len(args) - len(defaults))
            for arg, default in zip(args, padding + list(defaults)):
                comma()
                self.arg(arg)
                if default is not None:
                    self.write("=")
                    self.expr(default, P.Comma)

        offset = 0
        if node.posonlyargs:
            offset += len(node.defaults) - len(node.args)
            loop(node.posonlyargs, node.defaults[:offset])
            comma()
            self.write("/")
        loop(node.args, node.defaults[offset:])
        if node.vararg is not None:
            comma()
            self.write("*")
            self.arg(node.vararg)
        if node.kwonlyargs:
            if node.vararg is None:
                comma()
                self.write("*")
            loop(node.kwonlyargs, node.kw_defaults)
        if node.kwarg is not None:
            comma()
            self.write("**")
            self.arg(node.kwarg)

    def arg(self, node: ast.arg) -> None:
        if node.annotation is not None:
            raise Unsupported("annotation")
        self.write(node.arg)

    def s_Assign(self, node: ast.Assign) -> None:
        self.newline()
        for target in node.targets:
            self.expr(target, P.Assign)
            self.write(" = ")
        self.expr(node.value, P.Assign)

    def s_AugAssign(self, node: ast.AugAssign) -> None:
        self.newline()
        self.expr(node.target, P.AugAssign)
        self.write(get_op_symbol(node.op, " %s= "))
        self.expr(node.value, P.AugAssign)

    def s_Expr(self, node: ast.Expr) -> None:
        value = node.value
        self.newline()
        if value.__class__ is ast.Constant and isinstance(value.value, str) and \
                value.value.startswith(COMMENT_MARK):
            self.write(comment_line(value.value))
            return
        self.expr(value, P.Expr)

    def s_Return(self, node: ast.Return) -> None:
        self.newline()
        self.write("return")
        if node.value is not None:
            self.write(" ")
            self.expr(node.value, P.Return)

    def s_If(self, node: ast.If) -> None:
        self._clause("if ", node.test, P.If, node.body)
        while True:
            orelse = node.orelse
            if len(orelse) == 1 and orelse[0].__class__ is ast.If:
                node = orelse[0]
                self._clause("elif ", node.test, P.If, node.body)
            else:
                self.else_block(orelse)
                break

    def s_For(self, node: ast.For) -> None:
        self.newline()
        self.write("for ")
        self.expr(node.target, P.For)
        self.write(" in ")
        self.expr(node.iter, _HIGHEST)
        self.write(":")
        self.block(node.body)
        self.else_block(node.orelse)

    def s_While(self, node: ast.While) -> None:
        self._clause("while ", node.test, P.While, node.body)
        self.else_block(node.orelse)

    def _clause(self, keyword: str, test: ast.expr, p: int, body) -> None:
        """`keyword test:` on a line of its own, then the block under it."""
        self.newline()
        self.write(keyword)
        self.expr(test, p)
        self.write(":")
        self.block(body)

    def _word(self, word: str) -> None:
        self.newline()
        self.write(word)

    def s_Pass(self, node) -> None:
        self._word("pass")

    def s_Break(self, node) -> None:
        self._word("break")

    def s_Continue(self, node) -> None:
        self._word("continue")

    # -- expressions ---------------------------------------------------------------
    def expr(self, node: ast.AST, pp: int) -> None:
        """Write `node`, whose parent gave it precedence `pp` (astor's `_pp`)."""
        method = _EXPRESSIONS.get(node.__class__)
        if method is None:
            raise Unsupported(type(node).__name__)
        method(self, node, pp)

    def comma_list(self, items, trailing: bool = False) -> None:
        for i, item in enumerate(items):
            self.write(", " if i else "")
            self.expr(item, P.Comma)
        self.write("," if trailing else "")

    def _open(self, discard: bool, delimiters: str = "()") -> None:
        # astor writes the opening delimiter and blanks it when discarded: either
        # way pending newlines are written first.
        self.write("" if discard else delimiters[0])

    def e_Name(self, node: ast.Name, pp: int) -> None:
        self.note(node.id)
        self.write(node.id)

    def e_Constant(self, node: ast.Constant, pp: int) -> None:
        value = node.value
        if isinstance(value, (int, float, complex)):
            discard = P.Constant >= pp
            self._open(discard)
            self.write(_number(value))
            if not discard:
                self.write(")")
        elif isinstance(value, str):
            self.string(node, value, pp)
        elif value is Ellipsis:
            self.write("...")
        else:
            self.write(repr(value))

    def string(self, node: ast.Constant, value: str, pp: int) -> None:
        embedded = (pp > P.Expr) + (pp >= P.Assign)
        self.write("")
        start, offset = self.colinfo
        line = self.result[start:]
        if offset:
            line[0] = line[0][offset:]
        text = pretty_string(value, embedded, "".join(line), False)
        if getattr(node, "kind", None):
            text = node.kind + text
        self.write(text)
        lf = text.rfind("\n") + 1
        if lf:
            self.colinfo = (len(self.result) - 1, lf)

    def e_Attribute(self, node: ast.Attribute, pp: int) -> None:
        self.expr(node.value, _HIGHEST)
        self.write(".")
        self.write(node.attr)

    def e_Call(self, node: ast.Call, pp: int) -> None:
        args, keywords = node.args, node.keywords
        p = P.Comma if len(args) + len(keywords) > 1 else P.call_one_arg
        self.expr(node.func, _HIGHEST)
        self.write("(")
        first = True
        for arg in args:
            if not first:
                self.write(", ")
            first = False
            self.expr(arg, p)
        for kw in keywords:
            if not first:
                self.write(", ")
            first = False
            if kw.arg:
                self.write(kw.arg)
                self.write("=")
            else:
                self.write("**")
            self.expr(kw.value, P.Comma)
        self.write(")")

    def e_Starred(self, node: ast.Starred, pp: int) -> None:
        self.write("*")
        self.expr(node.value, _HIGHEST)

    def e_Subscript(self, node: ast.Subscript, pp: int) -> None:
        self.expr(node.value, _HIGHEST)
        self.write("[")
        self.expr(node.slice, P.Subscript)
        self.write("]")

    def e_Slice(self, node: ast.Slice, pp: int) -> None:
        if node.lower is not None:
            self.expr(node.lower, P.Slice)
        self.write(":")
        if node.upper is not None:
            self.expr(node.upper, P.Slice)
        step = node.step
        if step is not None:
            self.write(":")
            if not (step.__class__ is ast.Name and step.id == "None"):
                self.expr(step, P.Slice)

    def e_Tuple(self, node: ast.Tuple, pp: int) -> None:
        elts = node.elts
        discard = P.Tuple >= pp and bool(elts)
        self._open(discard)
        self.comma_list(elts, len(elts) == 1)
        if not discard:
            self.write(")")

    def e_List(self, node: ast.List, pp: int) -> None:
        self.write("[")
        self.comma_list(node.elts)
        self.write("]")

    def e_Set(self, node: ast.Set, pp: int) -> None:
        if node.elts:
            self.write("{")
            self.comma_list(node.elts)
            self.write("}")
        else:
            self.write("{1}.__class__()")

    def e_Dict(self, node: ast.Dict, pp: int) -> None:
        self.write("{")
        for i, (key, value) in enumerate(zip(node.keys, node.values)):
            self.write(", " if i else "")
            if key is not None:
                self.expr(key, _HIGHEST)
                self.write(": ")
            else:
                self.write("**")
            self.expr(value, P.Comma)
        self.write("}")

    def e_BinOp(self, node: ast.BinOp, pp: int) -> None:
        op = node.op
        p = get_op_precedence(op)
        discard = p >= pp
        self._open(discard)
        if op.__class__ is ast.Pow:
            self.expr(node.left, _POW_LHS)
            self.write(" ** ")
            self.expr(node.right, P.PowRHS)
        else:
            self.expr(node.left, p)
            self.write(get_op_symbol(op, " %s "))
            self.expr(node.right, p + 1)
        if not discard:
            self.write(")")

    def e_BoolOp(self, node: ast.BoolOp, pp: int) -> None:
        symbol = get_op_symbol(node.op, " %s ")
        self._joined(get_op_precedence(node.op), pp, node.values,
                     [symbol] * (len(node.values) - 1))

    def e_Compare(self, node: ast.Compare, pp: int) -> None:
        self._joined(get_op_precedence(node.ops[0]), pp, [node.left, *node.comparators],
                     [get_op_symbol(op, " %s ") for op in node.ops])

    def _joined(self, p: int, pp: int, operands, symbols: List[str]) -> None:
        """Operands with the symbols between them (and/or, comparisons), each at
        precedence p + 1, in parentheses unless the parent's pp allows none."""
        discard = p >= pp
        self._open(discard)
        for i, value in enumerate(operands):
            if i:
                self.write(symbols[i - 1])
            self.expr(value, p + 1)
        if not discard:
            self.write(")")

    def e_UnaryOp(self, node: ast.UnaryOp, pp: int) -> None:
        p = get_op_precedence(node.op)
        discard = p >= pp
        self._open(discard)
        symbol = get_op_symbol(node.op)
        self.write(symbol)
        self.write(" " if symbol.isalpha() else "")
        self.expr(node.operand, p)
        if not discard:
            self.write(")")

    def e_IfExp(self, node: ast.IfExp, pp: int) -> None:
        discard = P.IfExp >= pp
        self._open(discard)
        self.expr(node.body, P.IfExp + 1)
        self.write(" if ")
        self.expr(node.test, P.IfExp + 1)
        self.write(" else ")
        self.expr(node.orelse, P.IfExp)
        if not discard:
            self.write(")")


def comment_line(marked: str) -> str:
    """The `# text` line of a comment statement: the text (often a copy of the
    user's source line) with every line boundary and control character escaped,
    so that nothing in it can end the comment."""
    return f"# {comment_safe(marked[len(COMMENT_MARK):])}"


def pretty_string(s, embedded: int, current_line: str, uni_lit: bool = False,
                  min_trip_str: int = 20, max_line: int = 100) -> str:
    """A string literal as astor writes it (`astor.string_repr.pretty_string`: a
    triple-quoted form for text of several lines, else repr), with two changes
    so that no text of the user's can leave its string: text holding a character
    that is not printable, other than a newline (a line boundary of
    str.splitlines such as U+2028 or a form feed, a control or format character),
    is written by repr, escaped on one line; and the triple-quoted form is
    checked by reading it back with ast.literal_eval (astor evals it)."""
    default = repr(s)
    if not isinstance(s, str) or not s.replace("\n", "").isprintable():
        return default
    if current_line.strip():
        len_current = len(current_line)
        second_line_start = s.find("\n") + 1
        if embedded > 1 and not second_line_start:
            return default
        if len(default) < min_trip_str:
            return default
        line_indent = len_current - len(current_line.lstrip())
        if embedded and not second_line_start:
            return default
        if len_current + len(default) < max_line and not _indented_at_least(s, line_indent):
            return default
    fancy = string_triplequote_repr(s)
    try:
        if ast.literal_eval(fancy) == s and "\r" not in fancy:
            return fancy
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    return default


def _indented_at_least(s: str, indent: int) -> bool:
    """Does every non-blank line after the first start with at least `indent` spaces
    (so that a triple-quoted form keeps the code's indentation)? False for text of one
    line."""
    widths = [len(line) - len(line.lstrip()) for line in s.split("\n")[1:] if line.strip()]
    return bool(widths) and min(widths) >= indent


def _number(value) -> str:
    """astor's form of a number: infinities as 1e1000, NaN as their difference."""
    def part(p, imaginary: bool) -> str:
        s = "j" if imaginary else ""
        try:
            if math.isinf(p):
                return ("-1e1000" if p < 0 else "1e1000") + s
            if math.isnan(p):
                return f"(1e1000{s}-1e1000{s})"
        except OverflowError:   # an int too large for a float
            pass
        return repr(p) + s

    if not isinstance(value, complex):
        return part(value, False)
    real, imag = part(value.real, False), part(value.imag, True)
    if value.real == 0:
        return imag
    if value.imag == 0:
        return f"({real}+0j)"
    return f"({real}{'' if imag.startswith('-') else '+'}{imag})"


_STATEMENTS = {getattr(ast, name[2:]): method for name, method in vars(SourceWriter).items()
               if name.startswith("s_")}
_EXPRESSIONS = {getattr(ast, name[2:]): method for name, method in vars(SourceWriter).items()
                if name.startswith("e_")}
