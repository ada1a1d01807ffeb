"""Forward mode from the VJP table alone: a rule's JVP as the transpose of its VJP.

A rule's VJP template is linear in the cotangent `g`. Written as a function of
`g` (the call's arguments and result held fixed), for
`defvjp(mylib.revcumsum, "x, axis=-1", x="np.cumsum(g, axis=axis)")`:

    def mylib_revcumsum_vjp(g, ans, x, axis):
        return (np.cumsum(g, axis=axis),)

its reverse mode with respect to `g`, given the input tangents as the
cotangent of what it returns, is the transpose of that linear map: the JVP
(the "double-vjp" identity, as for a Function without `jvp`). So a rule needs
no second, hand-written derivative for forward mode: the VJP is the one
definition, and the compiler differentiates it (its helpers are NumPy code).
The forward half runs at a generic `g` (runtime.tangent.generic_cotangent: at `g = 0` a
branch such as `if np.any(g)` would take its special case) and only its residuals
are used.
"""
from __future__ import annotations

import ast
import itertools
import re
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy

from ...rules.registry import Rule
from ...runtime import HELPERS
from ..loader import Emitted, load

# (read and written under the compiler's lock: forward mode compiles hold it)
_FUNCTIONS: Dict[Tuple[int, Tuple[str, ...]], Tuple[Rule, Callable]] = {}
_COUNTER = itertools.count()   # (each text its own file name: a rule may be replaced)


def stem_of(rule: Rule) -> str:
    """A readable identifier from the rule's name (`np.linalg.eigh` -> np_linalg_eigh)."""
    return re.sub(r"\W+", "_", rule.name).strip("_") or "rule"


def vjp_function(rule: Rule, params: Sequence[str]) -> Callable:
    """The rule's VJP for `params` as a plain function of (g, ans, every parameter of
    the rule), returning the tuple of their cotangents (memoised per rule and
    parameters; the rule object is part of the key, so a replaced rule is another).
    The rule is one jvp_rules.transposable accepts (its JvpRule says `transposed`)."""
    key = (id(rule), tuple(params))
    hit = _FUNCTIONS.get(key)
    if hit is not None and hit[0] is rule:
        return hit[1]
    fn = _build(rule, tuple(params))
    _FUNCTIONS[key] = (rule, fn)
    return fn


def _build(rule: Rule, params: Tuple[str, ...]) -> Callable:
    names = list(rule.params)
    stem = stem_of(rule)
    body: List[str] = [ast.unparse(s) for s in rule.prelude]
    parts = []
    for p in params:
        text = ast.unparse(rule.grads[p])
        if rule.broadcast:   # (as reverse mode expands it: the argument's own shape)
            text = f"unbroadcast({text}, {p})"
        parts.append(text)
    body.append(f"return ({', '.join(parts)},)")
    source = (f"# s2sgrad: the VJP of {rule.name} as a function of its cotangent g "
              f"(its reverse mode is the JVP)\n"
              f"def {stem}_vjp({', '.join(['g', 'ans'] + names)}):\n"
              + "".join(f"    {line}\n" for text in body for line in text.splitlines()))
    namespace: Dict[str, Any] = dict(HELPERS)
    namespace.update(rule.extra_names)
    namespace["np"] = numpy
    namespace["__builtins__"] = __builtins__
    filename = f"<s2sgrad {rule.name} VJP as a function of g #{next(_COUNTER)}>"
    return load(Emitted(source=source, function_names=[f"{stem}_vjp"], filename=filename,
                        globals=namespace))[f"{stem}_vjp"]


def pair_for(rule: Rule, params: Sequence[str], compile_pair: Callable) -> Any:
    """The reverse-mode pair of the rule's VJP with respect to g (TransformError
    where the compiler cannot differentiate it)."""
    return compile_pair(vjp_function(rule, params), (0,))
