"""What a function of the user's returns, read from its source: which of its
results are arrays or numbers (never a list, tuple or dict).

A caller's analysis asks this of the functions it calls. A result proven an
array or a number is a *leaf* there (analyze.leaf_names): its cotangent adds
with `+`, and arithmetic on it needs no run-time guard against concatenating or
repeating lists. Without the fact, every callee's result is taken for a possible
structure: `k1 = rhs(y, W); y + 0.5 * h * k1` carried a guard per step.

The facts are the analysis' own, read in the callee as Python runs it: an
operator's result (arithmetic on lists is refused where it would carry a
gradient), a NumPy ufunc's or a NumPy or SciPy function's with a rule that
returns one array, a number; a name only where the body is straight-line code, so
that the last assignment before the `return` is the value returned. Anything else
(a branch, a loop, a parameter returned, another call) proves nothing.
"""
from __future__ import annotations

import ast
import builtins
import functools
import types
from typing import Tuple, Union

import numpy as np

from ..errors import TransformError
from ..rules import registry
from .names import dotted
from .parse import parse_function

# None: nothing proven; True: one array or number; a tuple: a returned tuple's items.
Returned = Union[None, bool, Tuple[bool, ...]]

_BRANCHING = (ast.If, ast.For, ast.While, ast.Try, ast.With, ast.AsyncFor, ast.AsyncWith,
              ast.Match, ast.Global, ast.Nonlocal, ast.FunctionDef, ast.AsyncFunctionDef,
              ast.ClassDef, ast.Import, ast.ImportFrom, ast.Delete)


def returned_leaves(fn) -> Returned:
    """Which results of `fn` are proven arrays or numbers: True for a single result,
    a tuple of flags for `return a, b`, None where nothing is proven (or fn's source
    cannot be read)."""
    found = _returned(fn)
    if found is None:
        return None
    body, value = found
    leaf = functools.partial(_leaf, body=body, fn=fn, depth=0, new=False)
    if isinstance(value, ast.Tuple):
        if any(isinstance(e, ast.Starred) for e in value.elts):
            return None
        flags = tuple(leaf(e) for e in value.elts)
        return flags if any(flags) else None
    return True if leaf(value) else None


def returns_new(fn) -> bool:
    """Whether what `fn` returns (each item of a returned tuple) is proven a new array
    or a number, sharing no memory with its arguments or anything else: an
    operator's result but `+`, `*` and `|`'s (which join lists, tuples and dicts), a
    NumPy ufunc's or a NumPy or SciPy function's whose rule makes a new array (no
    view, no argument, no `out=`), read through names as returned_leaves reads them.
    The caller's alias analysis then ties the call's result to nothing:
    `h = layer(W, x); h[h < 0] = 0` writes into h alone."""
    found = _returned(fn)
    if found is None or not _keeps_to_itself(*found, fn):
        return False
    body, value = found
    items = value.elts if isinstance(value, ast.Tuple) else [value]
    return all(not isinstance(e, ast.Starred) and _leaf(e, body, fn, 0, new=True)
               for e in items)


def _keeps_to_itself(body, value, fn) -> bool:
    """Whether nothing `fn` makes can end up anywhere but in what it returns: its
    statements only bind local names, and every call in it is NumPy's, SciPy's or
    math's (a call of the user's could keep an argument: `store.append(h)`)."""
    for s in body:
        targets = s.targets if isinstance(s, ast.Assign) else \
            [s.target] if isinstance(s, ast.AugAssign) else None
        if targets is None or not all(isinstance(n, ast.Name) for t in targets
                                      for n in ([t] if not isinstance(t, ast.Tuple)
                                                else t.elts)):
            return False
    nodes = ast.walk(ast.Module(body=list(body) + [ast.Expr(value=value)], type_ignores=[]))
    return all(_library(n, fn) for n in nodes if isinstance(n, ast.Call))


def _library(call: ast.Call, fn) -> bool:
    """A call of a function of NumPy, SciPy or math, read off fn's globals."""
    obj = _called(call, fn)
    module = getattr(obj, "__module__", None) or ""
    return isinstance(obj, np.ufunc) or module.split(".")[0] in ("numpy", "scipy", "math")


def _returned(fn):
    """(the statements before the return, the value returned) of a function of the
    user's that is straight-line code ending in one return; None otherwise."""
    if not isinstance(fn, types.FunctionType) or hasattr(fn, "__s2sgrad_derived__") or \
            hasattr(fn, "__wrapped__"):
        return None   # (a wrapper's result is what the wrapper makes of it)
    try:
        node = parse_function(fn).node
    except (TransformError, OSError, SyntaxError, TypeError, ValueError):
        return None
    body = node.body
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return None
    if any(isinstance(s, ast.Return) for s in ast.walk(ast.Module(body=body[:-1],
                                                                   type_ignores=[]))):
        return None
    if any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await, ast.Lambda))
           for n in ast.walk(node)) or any(isinstance(s, _BRANCHING) for s in body):
        return None
    return body[:-1], body[-1].value


def _leaf(e: ast.expr, body, fn, depth: int, new: bool) -> bool:
    """Whether e, evaluated after the straight-line statements `body`, is an array or a
    number (`new`: one made there, sharing memory with nothing else)."""
    if depth > 20:
        return False
    if isinstance(e, ast.Constant):
        return isinstance(e.value, (int, float, complex))
    if isinstance(e, ast.BinOp):   # (`+`, `*`, `|` join lists, tuples and dicts)
        return not (new and isinstance(e.op, (ast.Add, ast.Mult, ast.BitOr)))
    if isinstance(e, ast.UnaryOp):
        return isinstance(e.op, (ast.USub, ast.UAdd))
    if isinstance(e, ast.Call):
        return _numeric_call(e, fn, new)
    if isinstance(e, ast.Name):
        for k in range(len(body) - 1, -1, -1):   # the last binding before the return
            s = body[k]
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                    isinstance(s.targets[0], ast.Name) and s.targets[0].id == e.id:
                return _leaf(s.value, body[:k], fn, depth + 1, new)
            if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and \
                    s.target.id == e.id:   # (`xs += [a]` extends a list: as it was)
                return _leaf(e, body[:k], fn, depth + 1, new)
            if any(isinstance(n, ast.Name) and n.id == e.id and not isinstance(n.ctx, ast.Load)
                   for n in ast.walk(s)):
                return False   # (unpacked, a loop target, ...: not proven)
        return False           # a parameter or a global: what the caller passed
    return False


def _numeric_call(call: ast.Call, fn, new: bool = False) -> bool:
    """A call of a NumPy ufunc, or of a NumPy or SciPy function whose rule returns one
    array (not np.linalg.eigh's pair, not an argument as it is; `new`: nor a view,
    nor an array given as `out=`)."""
    if new and (any(k.arg in (None, "out") for k in call.keywords) or
                any(isinstance(a, ast.Starred) for a in call.args)):
        return False
    obj = _called(call, fn)
    if obj is None:
        return False
    if isinstance(obj, np.ufunc):   # (positional outputs after the inputs: not new)
        return obj.nout == 1 and not (new and len(call.args) > obj.nin)
    rule = registry.lookup_function(obj) if callable(obj) else None
    return one_library_array(obj, rule) and not (new and rule.view)


def _called(call: ast.Call, fn):
    """What a call in fn's body calls, where it is a dotted name of fn's module (or a
    builtin); None for a local, a closure variable or an attribute of a user's object."""
    path = dotted(call.func)
    if path is None:
        return None
    head, *rest = path.split(".")
    if head in fn.__code__.co_varnames or head in (fn.__code__.co_freevars or ()):
        return None   # (a local or a closure variable: not the module's)
    obj = fn.__globals__[head] if head in fn.__globals__ else getattr(builtins, head, None)
    for attr in rest:
        if not isinstance(obj, (types.ModuleType, np.ufunc, type)):
            return None   # (only reads of modules' attributes: no user object's getattr)
        obj = getattr(obj, attr, None)
    return obj


def one_library_array(fn, rule) -> bool:
    """Whether `fn`, with this rule, returns one array or number: a NumPy or SciPy
    function (or a reduction s2sgrad recognised, runtime.fused) whose result is not a
    list or tuple (`outputs`, `sequence_result`: np.linalg.eigh, np.split) and not an
    argument as it is. A rule of the user's (s2sgrad.defvjp) may return anything."""
    if rule is None or rule.sequence_result or rule.outputs:
        return False
    module = getattr(fn, "__module__", "") or ""
    if module == "s2sgrad.runtime.fused":   # (softmax & co., recognised: an array)
        return True
    return module.split(".")[0] in ("numpy", "scipy") and not registry.returns_an_argument(fn)
