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
    value = body[-1].value
    leaf = functools.partial(_leaf, body=body[:-1], fn=fn, depth=0)
    if isinstance(value, ast.Tuple):
        if any(isinstance(e, ast.Starred) for e in value.elts):
            return None
        flags = tuple(leaf(e) for e in value.elts)
        return flags if any(flags) else None
    return True if leaf(value) else None


def _leaf(e: ast.expr, body, fn, depth: int) -> bool:
    """Whether e, evaluated after the straight-line statements `body`, is an array or a
    number."""
    if depth > 20:
        return False
    if isinstance(e, ast.Constant):
        return isinstance(e.value, (int, float, complex))
    if isinstance(e, ast.BinOp):
        return True
    if isinstance(e, ast.UnaryOp):
        return isinstance(e.op, (ast.USub, ast.UAdd))
    if isinstance(e, ast.Call):
        return _numeric_call(e, fn)
    if isinstance(e, ast.Name):
        for k in range(len(body) - 1, -1, -1):   # the last binding before the return
            s = body[k]
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                    isinstance(s.targets[0], ast.Name) and s.targets[0].id == e.id:
                return _leaf(s.value, body[:k], fn, depth + 1)
            if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and \
                    s.target.id == e.id:   # (`xs += [a]` extends a list: as it was)
                return _leaf(e, body[:k], fn, depth + 1)
            if any(isinstance(n, ast.Name) and n.id == e.id and not isinstance(n.ctx, ast.Load)
                   for n in ast.walk(s)):
                return False   # (unpacked, a loop target, ...: not proven)
        return False           # a parameter or a global: what the caller passed
    return False


def _numeric_call(call: ast.Call, fn) -> bool:
    """A call of a NumPy ufunc, or of a NumPy or SciPy function whose rule returns one
    array (not np.linalg.eigh's pair, not an argument as it is)."""
    path = dotted(call.func)
    if path is None:
        return False
    head, *rest = path.split(".")
    if head in fn.__code__.co_varnames or head in (fn.__code__.co_freevars or ()):
        return False   # (a local or a closure variable: not the module's)
    obj = fn.__globals__[head] if head in fn.__globals__ else getattr(builtins, head, None)
    for attr in rest:
        if not isinstance(obj, (types.ModuleType, np.ufunc, type)):
            return False   # (only reads of modules' attributes: no user object's getattr)
        obj = getattr(obj, attr, None)
    if isinstance(obj, np.ufunc):
        return obj.nout == 1
    return one_library_array(obj, registry.lookup_function(obj) if callable(obj) else None)


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
