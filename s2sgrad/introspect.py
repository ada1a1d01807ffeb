"""What a user's callable is: decorators peeled off, a Function class's methods.

The compiler, the disk cache and the backends all ask these questions; they
live below all of them so that none imports another for them.
"""
from __future__ import annotations

import ast
import linecache
import textwrap
import types
from typing import Any, Callable, List, Optional, Tuple

from .errors import TransformError


def unwrap(fn: Callable) -> Callable:
    """Peel decorators that keep `__wrapped__` (ours and functools.wraps)."""
    seen = set()
    while hasattr(fn, "__wrapped__") and id(fn) not in seen:
        seen.add(id(fn))
        fn = fn.__wrapped__
    if isinstance(fn, (staticmethod, classmethod)):
        fn = fn.__func__
    return fn


def opaque_decorator(fn: Callable) -> Optional[types.FunctionType]:
    """The first wrapper on fn's `__wrapped__` chain whose code may compute something
    else than the function it wraps (`10 * f(*args)`), or None when every layer is
    known to pass the call through unchanged: s2sgrad's own marks, functools' caches,
    and wrappers whose whole body is `return wrapped(*args, **kwargs)`. Differentiating
    the innermost function would silently drop what such a wrapper computes."""
    seen = set()
    while hasattr(fn, "__wrapped__") and id(fn) not in seen:
        seen.add(id(fn))
        inner = fn.__wrapped__
        if not (getattr(fn, "__s2sgrad__", None) is fn or _is_cache(fn) or is_library(fn) or
                _forwards(fn, inner)):
            return fn
        fn = inner
    return None


def refuse_opaque_decorators(fn: Callable) -> None:
    """Raise TransformError where fn is wrapped by a decorator that may compute
    (opaque_decorator): unwrapping it would differentiate other code than runs."""
    wrapper = opaque_decorator(fn)
    if wrapper is None:
        return
    code = getattr(wrapper, "__code__", None)
    where = f"{code.co_name} at {code.co_filename}:{code.co_firstlineno}" if code else \
        type(wrapper).__qualname__
    raise TransformError(
        f"{getattr(fn, '__qualname__', fn)} is wrapped by a decorator whose code "
        f"({where}) may compute something else than the function it wraps: s2sgrad "
        f"would differentiate the inner function and drop what the wrapper does",
        code.co_filename if code else None, code.co_firstlineno if code else None,
        hint="Differentiate a function that calls the decorated one's undecorated "
             "code (f.__wrapped__) and does the wrapper's arithmetic itself, or "
             "drop the decorator.")


_LIBRARIES = ("numpy", "scipy")


def is_library(fn, own: bool = False) -> bool:
    """NumPy's and SciPy's functions and wrappers (array-function dispatchers), and
    with `own` s2sgrad's: the rules describe what they compute, nothing reads their
    source. The one test of it (the compiler's calls, the decorators seen through,
    the numba backend's helpers)."""
    module = getattr(fn, "__module__", None) or type(fn).__module__ or ""
    return module.split(".")[0] in (_LIBRARIES + ("s2sgrad",) if own else _LIBRARIES)


def is_user_function(fn) -> bool:
    """A plain Python function of the user's: not NumPy's, SciPy's or s2sgrad's,
    nor a derivative s2sgrad made (`grad(f)`)."""
    return isinstance(fn, types.FunctionType) and not is_library(fn, own=True) and \
        not hasattr(fn, "__s2sgrad_derived__")


def _is_cache(fn) -> bool:
    return type(fn).__module__ == "functools" and hasattr(fn, "cache_info")


def _forwards(wrapper, inner) -> bool:
    """wrapper's body is `return <inner>(*args, **kwargs)` (a docstring aside)."""
    code = getattr(wrapper, "__code__", None)
    if not isinstance(wrapper, types.FunctionType) or code is None:
        return False
    found = source_block(wrapper)
    if found is None:
        return False
    try:
        tree = ast.parse(textwrap.dedent("".join(found[0])))
    except SyntaxError:
        return False
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef) or node.args.args or node.args.posonlyargs or \
            node.args.kwonlyargs or node.args.vararg is None or node.args.kwarg is None:
        return False
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    call = body[0].value
    star, kw = node.args.vararg.arg, node.args.kwarg.arg
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and
            len(call.args) == 1 and isinstance(call.args[0], ast.Starred) and
            isinstance(call.args[0].value, ast.Name) and call.args[0].value.id == star and
            len(call.keywords) == 1 and call.keywords[0].arg is None and
            isinstance(call.keywords[0].value, ast.Name) and
            call.keywords[0].value.id == kw):
        return False
    cells = dict(zip(code.co_freevars, wrapper.__closure__ or ()))
    cell = cells.get(call.func.id)
    try:
        return cell is not None and cell.cell_contents is inner
    except ValueError:   # an empty cell
        return False


def function_methods(cls, with_jvp: bool = False) -> List[str]:
    """forward, whichever of vjp/backward the class uses (and jvp if it has one)."""
    out = ["forward"]
    if getattr(cls, "vjp_name", None) is not None:
        out.append(cls.vjp_name())
    if with_jvp and getattr(cls, "jvp", None) is not None:
        out.append("jvp")
    return out


def last_source_line(code: types.CodeType, last: int = 0) -> int:
    """The last line any instruction of `code` (or of code nested in it) spans."""
    for _, end, _, _ in code.co_positions():
        if end is not None and end > last:
            last = end
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            last = last_source_line(const, last)
    return last


def source_block(fn: types.FunctionType) -> Optional[Tuple[List[str], int]]:
    """(lines, number of the first) of a def's source, decorators included, found
    from the positions its code records; None when they do not settle it.

    `inspect.getsourcelines` tokenises the file from the def on to find where the
    block ends, a millisecond for a 60-line function; the positions give the last
    line that holds code directly. That is the end of the block when the next line
    of code is indented no deeper than the def (a deeper one may be a trailing
    `pass` or dead code: then None, and the caller asks inspect). A block cut
    inside a bracket or a string does not parse, which the caller checks.
    """
    code = fn.__code__
    if code.co_name == "<lambda>" or not hasattr(code, "co_positions"):
        return None
    filename = code.co_filename
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, fn.__globals__)
    first = code.co_firstlineno
    last = last_source_line(code, first)
    if not lines or last > len(lines):
        return None
    head = lines[first - 1]
    indent = len(head) - len(head.lstrip())
    for text in lines[last:]:
        stripped = text.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(text) - len(stripped) > indent:
            return None
        break
    return lines[first - 1:last], first


def user_instance(value: Any) -> bool:
    """An object of a class the user wrote (not a module's array, number, container or
    function), hashable (a pair is cached for it, as for a function)."""
    cls = type(value)
    module = getattr(cls, "__module__", "") or ""
    if module.split(".")[0] in ("builtins", "numpy", "scipy", "s2sgrad", "collections",
                                "functools", "types") or isinstance(value, type):
        return False
    try:
        hash(value)
    except TypeError:
        return False
    return True
