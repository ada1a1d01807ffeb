"""The source the compiler differentiates is the code that runs, or a TransformError.

s2sgrad reads a function's source from its file (through `linecache`), but
Python runs the function's code object, which was compiled from whatever the
file held when the module was imported. The two differ after an edit without
a reload (a notebook, an editor saving while a program runs), with a stale
`.pyc` (a same-size edit whose modification time was put back), for code run
with `exec` under an existing file's name, or with a stale `linecache` entry;
the gradient would then be that of other code than `f(x)` computes.

`verify_source` compiles the parsed def (or lambda) again, as Python compiled
it -- the same file name and `__future__` flags, inside classes and functions
that give it the same name mangling, `__class__` cell and free variables, in
a module that imports the names its file imports (Python compiles a call of
an imported name's attribute differently) -- and compares the result with
`fn.__code__`: bytecode, constants (nested code recursively), names, local,
free and cell variables, argument counts and flags, but no line numbers or
positions (moving a function, or editing a comment, changes nothing that
runs). Functions in modules pytest imported
have their `assert`s rewritten; their source is rewritten the same way before
the comparison.

It runs on each compile, never on a call, and remembers its verdict per code
object and source text.
"""
from __future__ import annotations
import __future__

import ast
import copy
import linecache
import symtable
import sys
import types
from typing import Dict, List, Optional, Tuple

from ..errors import TransformError

# The `from __future__` flags a code object records and compile() accepts
# (nested_scopes' flag is CO_NESTED, which the compiler sets by itself).
_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    if _feature not in ("nested_scopes", "generators"):
        _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag
_CO_NESTED = 0x10

# id(code) -> (code, the source text it was found to be compiled from).
_VERIFIED: Dict[int, Tuple[types.CodeType, str]] = {}
_MAX_VERIFIED = 4096
# filename -> (its text, the names its module scope binds by import).
_IMPORTED: Dict[str, Tuple[str, frozenset]] = {}


def verify_source(fn: types.FunctionType, node: ast.AST) -> None:
    """Raise TransformError unless `node` (the def or lambda parsed for `fn`,
    positioned in its file) compiles to the code `fn` runs."""
    code = fn.__code__
    text = _text_of(node, code.co_filename)
    known = _VERIFIED.get(id(code))
    if known is not None and known[0] is code and known[1] == text:
        return
    if not _compiles_to(node, code, getattr(code, "co_qualname", None) or fn.__qualname__):
        raise _mismatch(fn, node)
    if len(_VERIFIED) >= _MAX_VERIFIED:
        _VERIFIED.clear()
    _VERIFIED[id(code)] = (code, text)


def _text_of(node: ast.AST, filename: str) -> str:
    """The lines `node` spans (decorators included), or its dump where the
    lines are not in linecache."""
    first = min([d.lineno for d in getattr(node, "decorator_list", ())] + [node.lineno])
    last = node.end_lineno or node.lineno
    lines = linecache.getlines(filename)
    if lines and last <= len(lines):
        return f"{first}:{node.col_offset}:" + "".join(lines[first - 1:last])
    return ast.dump(node, include_attributes=True)


def _mismatch(fn: types.FunctionType, node: ast.AST) -> TransformError:
    code = fn.__code__
    name = getattr(code, "co_qualname", None) or fn.__qualname__
    return TransformError(
        f"the source of {name} in {code.co_filename} differs from the code that runs "
        f"(the file was edited after the module was imported, a stale .pyc was loaded, "
        f"or the code was made from other text under this file's name): s2sgrad would "
        f"differentiate other code than the function computes",
        code.co_filename, getattr(node, "lineno", None) or code.co_firstlineno,
        hint="Reload the module (importlib.reload) or restart the kernel or program, so "
             "that the code that runs is the code in the file.")


# -- compiling the parsed def again -----------------------------------------------------
def _compiles_to(node: ast.AST, code: types.CodeType, qualname: str) -> bool:
    """Whether `node` compiles, in the scopes `qualname` names, to `code`."""
    scopes = _scopes(qualname)
    if _rewritten_by_pytest(code):
        return _same_code(_recompile(node, code, scopes, rewrite=True), code)
    return _same_code(_recompile(node, code, scopes), code)


def _scopes(qualname: str) -> List[Tuple[str, str]]:
    """The (kind, name) of every scope around a function, outermost first, read
    off its qualified name: "class" or "def" (`<locals>` follows a function;
    `<listcomp>` and the like are functions too)."""
    parts = qualname.split(".")[:-1]
    out: List[Tuple[str, str]] = []
    for i, part in enumerate(parts):
        if part == "<locals>":
            continue
        following = parts[i + 1] if i + 1 < len(parts) else None
        is_function = following == "<locals>" or part.startswith("<")
        out.append(("def" if is_function else "class",
                    part if part.isidentifier() else "_s2s_scope"))
    return out


def _recompile(node: ast.AST, code: types.CodeType, scopes: List[Tuple[str, str]],
               rewrite: bool = False) -> Optional[types.CodeType]:
    """`node` compiled inside `scopes`, its free variables bound in the innermost
    function around it (one is added where the qualified name shows none); the
    code object the compiler made for it, or None."""
    if rewrite:
        node = copy.deepcopy(node)   # the rewriter edits the tree it is given
    free = [n for n in code.co_freevars
            if not (n == "__class__" and any(k == "class" for k, _ in scopes))]
    if free and not any(kind == "def" for kind, _ in scopes):
        scopes = [("def", "_s2s_scope")] + scopes
    innermost = max((i for i, (kind, _) in enumerate(scopes) if kind == "def"), default=-1)
    at = node.lineno
    body: List[ast.stmt] = [node if isinstance(node, ast.stmt) else
                            _at(ast.Expr(value=node), at)]
    for i in range(len(scopes) - 1, -1, -1):
        kind, name = scopes[i]
        if i == innermost:
            body = [_at(ast.Assign(targets=[_at(ast.Name(id=n, ctx=ast.Store()), at)],
                                   value=_at(ast.Constant(value=None), at)), at)
                    for n in free] + body
        if kind == "class":
            body = [_at(ast.ClassDef(name=name, bases=[], keywords=[], body=body,
                                     decorator_list=[]), at)]
        else:
            body = [_at(ast.FunctionDef(name=name, args=_no_arguments(), body=body,
                                        decorator_list=[], returns=None,
                                        type_comment=None), at)]
    filename = code.co_filename
    imported = sorted(_imported_names(filename))
    if imported:
        body.insert(0, _at(ast.Import(names=[_at(ast.alias(name="_s2s_module", asname=n), at)
                                             for n in imported]), at))
    module = ast.Module(body=body, type_ignores=[])
    if rewrite and not _rewrite_asserts(module, filename):
        return None
    try:
        compiled = compile(module, filename, "exec", flags=code.co_flags & _FUTURE_FLAGS,
                           dont_inherit=True)
    except (SyntaxError, ValueError, TypeError):
        return None
    for _, name in scopes:
        compiled = _child(compiled, name)
        if compiled is None:
            return None
    return _child(compiled, code.co_name)


def _imported_names(filename: str) -> frozenset:
    """The names the module scope of `filename`'s text binds by import (what
    the compiler asks before it compiles `name.attr(...)` as a method call)."""
    text = "".join(linecache.getlines(filename))
    known = _IMPORTED.get(filename)
    if known is not None and known[0] == text:
        return known[1]
    try:
        table = symtable.symtable(text, filename, "exec")
        names = frozenset(s.get_name() for s in table.get_symbols() if s.is_imported())
    except (SyntaxError, ValueError):
        names = frozenset()
    _IMPORTED[filename] = (text, names)
    return names


def _child(code: types.CodeType, name: str) -> Optional[types.CodeType]:
    return next((c for c in code.co_consts
                 if isinstance(c, types.CodeType) and c.co_name == name), None)


def _at(node: ast.AST, lineno: int) -> ast.AST:
    node.lineno = node.end_lineno = lineno
    node.col_offset = node.end_col_offset = 0
    return node


def _no_arguments() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[],
                         kw_defaults=[], kwarg=None, defaults=[])


# -- pytest's assertion rewriting ---------------------------------------------------------
def _rewritten_by_pytest(code: types.CodeType) -> bool:
    """Names no source can spell (`@py_assert1`, `@pytest_ar`): pytest rewrote
    the asserts of the module the function is in."""
    if any(n.startswith("@py") for n in code.co_names + code.co_varnames):
        return True
    return any(_rewritten_by_pytest(c) for c in code.co_consts
               if isinstance(c, types.CodeType))


def _rewrite_asserts(module: ast.Module, filename: str) -> bool:
    """Rewrite `module`'s asserts as pytest rewrote the file's; False when pytest's
    rewriter is not loaded (then the code cannot have come from it)."""
    rewriter = sys.modules.get("_pytest.assertion.rewrite")
    if rewriter is None:
        return False
    source = "".join(linecache.getlines(filename)).encode("utf-8")
    try:
        rewriter.rewrite_asserts(module, source, filename, None)
    except Exception:  # noqa: BLE001 - another pytest: the code is not comparable
        return False
    return True


# -- comparing code objects ----------------------------------------------------------------
_FIELDS = ("co_code", "co_names", "co_varnames", "co_freevars", "co_cellvars",
           "co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_name",
           "co_exceptiontable")


def _same_code(made: Optional[types.CodeType], running: types.CodeType) -> bool:
    """Whether two code objects run the same instructions on the same constants
    and names (line numbers and positions aside)."""
    if made is None:
        return False
    for field in _FIELDS:
        if getattr(made, field, None) != getattr(running, field, None):
            return False
    if (made.co_flags ^ running.co_flags) & ~_CO_NESTED:
        return False
    return len(made.co_consts) == len(running.co_consts) and \
        all(map(_same_constant, made.co_consts, running.co_consts))


def _same_constant(a, b) -> bool:
    if isinstance(a, types.CodeType) or isinstance(b, types.CodeType):
        return isinstance(a, types.CodeType) and isinstance(b, types.CodeType) and \
            _same_code(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(map(_same_constant, a, b))
    if isinstance(a, frozenset):   # (iteration order depends on hashing)
        return sorted(map(repr, a)) == sorted(map(repr, b))
    return repr(a) == repr(b)   # 0.0 and -0.0, nan
