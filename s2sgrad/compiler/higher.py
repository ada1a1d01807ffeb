"""Higher order: derivatives written as code, so that they can be differentiated.

`s2sgrad.grad(f)` is, at run time, a wrapper around f's generated forward and
adjoint. To differentiate it (grad of grad, `functional.vjp(...,
create_graph=True)` inside a differentiated function), the compiler needs
source it can read. This module writes that source: a plain function that
calls f's generated pair, compiled in *pure* mode (no in-place updates), so
that the compiler can differentiate it like any user function:

    def grad_f(x):
        f_output, f_residuals = f_forward(x)
        return f_adjoint(f_residuals, _s2s_seed(f_output))

The generated pair and this function are ordinary Python with their text in
`linecache`, so `s2sgrad.source` shows every level and tracebacks point into it.
Inner and outer derivatives cannot be confused: a closure variable of the
inner function becomes an explicit parameter (lambda lifting), so the outer
derivative sees how the inner result depends on it.
"""
from __future__ import annotations

import inspect
import itertools
import types
from typing import Any, Callable, Dict, List, Tuple

from ..errors import TransformError
from . import reentry
from .driver import compile_function
from .loader import Emitted, load

_COUNTER = itertools.count()
_DERIVED: Dict[tuple, types.FunctionType] = {}


def _params(fn: Callable) -> List[inspect.Parameter]:
    """The positional parameters of fn, which its derivative's code takes. A
    keyword-only parameter with a default keeps it (the functional API passes inputs
    by position: `def f(x, *, w=None)`); *args, **kwargs and a keyword-only
    parameter without a default are refused."""
    params = list(inspect.signature(fn).parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or
           (p.kind == p.KEYWORD_ONLY and p.default is p.empty) for p in params):
        name = getattr(fn, "__name__", None) or repr(fn)
        raise TransformError(f"cannot differentiate the derivative of {name}, which "
                             f"takes *args, **kwargs or a keyword-only parameter without "
                             f"a default",
                             hint="Give it positional parameters (keyword-only ones "
                                  "with defaults are kept at their defaults).")
    return [p for p in params if p.kind != p.KEYWORD_ONLY]


def derived(kind: str, base: Callable, positions: Tuple[int, ...],
            inputs_tuple: bool = False) -> types.FunctionType:
    """A differentiable Python function computing s2sgrad.<kind>(base, positions).

    kind is "grad", "value_and_grad", "vjp" (functional.vjp's (output, vjp),
    taking the cotangent as a last argument) or "hvp" (functional.hvp's and
    vhp's (output, Hessian times v), v the last argument). `inputs_tuple` makes
    the gradient a tuple even for one position, as functional.vjp does for tuple
    inputs and grad does for `wrt=(i,)`.
    """
    # A derivative of a derivative of ...: its base is itself a wrapper (grad(f)),
    # whose code is the derived function one order down. No order is special.
    base = reentry.readable(base)
    key = (kind, base, tuple(positions), inputs_tuple)
    fn = _DERIVED.get(key)
    if fn is not None and fn.__s2sgrad_pair__.current():
        return fn  # (else base's pair was generated for names since rebound)
    if kind in ("hvp", "jvp", "jacobian"):
        make = {"hvp": _hvp, "jvp": _jvp, "jacobian": _jacobian}[kind]
        fn = make(base, tuple(positions), inputs_tuple)
        _DERIVED[key] = fn
        return fn
    params = _params(base)
    names = [p.name for p in params]
    pair = compile_function(base, tuple(positions), pure=True, leaves=())  # any arguments
    stem = pair.name
    fwd, adj = f"{stem}_forward", f"{stem}_adjoint"
    out, res = f"{stem}_output", f"{stem}_residuals"
    args = ", ".join(names)
    lines = [f"{out}, {res} = {fwd}({args})"]
    if kind == "vjp":
        cotangent = "v" if "v" not in names else "cotangent"
        signature = f"{args}, {cotangent}" if args else cotangent
        grads = f"{adj}({res}, {cotangent})"
        if inputs_tuple and len(positions) == 1:
            grads = f"({grads},)"
        lines.append(f"return {out}, {grads}")
        fname = f"vjp_{stem}"
    else:
        signature = args
        grads = f"{adj}({res}, _s2s_seed({out}))"
        if inputs_tuple and len(positions) == 1:
            grads = f"({grads},)"
        lines.append(f"return {out}, {grads}" if kind == "value_and_grad" else f"return {grads}")
        fname = f"{kind}_{stem}"
    defaults = [p for p in params if p.default is not inspect.Parameter.empty]
    free = {fwd: pair.forward, adj: pair.adjoint}
    if defaults and kind != "vjp":
        parts = []
        for p in params:
            if p.default is inspect.Parameter.empty:
                parts.append(p.name)
            else:
                alias = f"_s2s_default_{p.name}"
                free[alias] = p.default
                parts.append(f"{p.name}={alias}")
        signature = ", ".join(parts)
    body = "\n".join("    " + line for line in lines)
    source = (f"# s2sgrad: the {kind} of {stem} as code (with respect to "
              f"{', '.join(names[i] for i in positions)})\n"
              f"def {fname}({signature}):\n{body}\n")
    fn = _define(fname, source, kind, stem, base, free, pair)
    _DERIVED[key] = fn
    return fn


def _define(name: str, source: str, kind: str, stem: str, base: Callable, free: dict,
            pair) -> types.FunctionType:
    """The function `name` of `source`, compiled with base's module globals and
    `free` bound; `pair` is the code it calls, whose bindings say when it is stale."""
    filename = f"<s2sgrad {kind} of {stem} #{next(_COUNTER)}>"
    functions = load(Emitted(source=source, function_names=[name], filename=filename,
                             globals=getattr(base, "__globals__", {}), free=free))
    fn = functions[name]
    fn.__s2sgrad_pair__ = pair
    return fn


def _jacobian(base: Callable, positions: Tuple[int, ...],
              inputs_tuple: bool) -> types.FunctionType:
    """functional.jacobian of a function with one array output, as code: one
    adjoint call per output element (a basis cotangent each), the rows stacked
    and reshaped to output.shape + input.shape, one block per input."""
    names = [p.name for p in _params(base)]
    pair = compile_function(base, positions, pure=True, leaves=())
    stem = pair.name
    fwd, adj = f"{stem}_forward", f"{stem}_adjoint"
    out, res = f"{stem}_output", f"{stem}_residuals"
    rows = [f"rows_{k}" for k in range(len(positions))]
    grads = ", ".join(f"grad_{k}" for k in range(len(positions)))
    blocks = [f"_s2s_np.reshape(_s2s_np.stack({r}), _s2s_np.shape({out}) + "
              f"_s2s_np.shape({names[i]}))" for r, i in zip(rows, positions)]
    lines = [f"{out}, {res} = {fwd}({', '.join(names)})"]
    lines += [f"{r} = []" for r in rows]
    lines.append(f"for k in range(_s2s_size_of({out})):")
    target = grads if len(positions) > 1 else "grad_0"
    lines.append(f"    {target} = {adj}({res}, _s2s_unit({out}, k))")
    lines += [f"    {r}.append(grad_{k})" for k, r in enumerate(rows)]
    result = f"({', '.join(blocks)},)" if inputs_tuple else blocks[0]
    lines.append(f"return {result}")
    body = "\n".join("    " + line for line in lines)
    source = (f"# s2sgrad: the Jacobian of {stem} as code (with respect to "
              f"{', '.join(names[i] for i in positions)})\n"
              f"def jacobian_{stem}({', '.join(names)}):\n{body}\n")
    return _define(f"jacobian_{stem}", source, "jacobian", stem, base,
                   {fwd: pair.forward, adj: pair.adjoint}, pair)


def _jvp(base: Callable, positions: Tuple[int, ...], inputs_tuple: bool) -> types.FunctionType:
    """functional.jvp's (output, J v) as code: a call of base's generated tangent
    code (plain NumPy, which reverse mode reads like any other), its structural
    zeros made arrays. `v` is one tangent, or a tuple of them for tuple inputs."""
    names = [p.name for p in _params(base)]
    code = reentry.compile_tangent(base, positions)
    stem = base.__name__ if base.__name__ != "<lambda>" else "lambda"
    v = "v" if "v" not in names else "tangent"
    tangents = [f"{v}[{k}]" for k in range(len(positions))] if inputs_tuple else [v]
    out, dot, jvp_name = f"{stem}_output", f"{stem}_tangent", f"{stem}_jvp"
    if isinstance(code.output_live, tuple):   # a tuple output: each item's zero its own
        items = ", ".join(f"_s2s_none_to_zero({dot}[{k}], {out}[{k}])"
                          for k in range(len(code.output_live)))
        result = f"({items},)"
    else:
        result = f"_s2s_none_to_zero({dot}, {out})"
    source = (f"# s2sgrad: the jvp of {stem} as code (tangents of "
              f"{', '.join(names[i] for i in positions)})\n"
              f"def jvp_{stem}({', '.join(names + [v])}):\n"
              f"    {out}, {dot} = {jvp_name}({', '.join(names + tangents)})\n"
              f"    return {out}, {result}\n")
    return _define(f"jvp_{stem}", source, "jvp", stem, base, {jvp_name: code.jvp}, code)


def _hvp(base: Callable, positions: Tuple[int, ...], inputs_tuple: bool) -> types.FunctionType:
    """(output, H v) as code: the vjp of value_and_grad with the cotangent (0, v).

    The Hessian is symmetric, so this is also torch's vhp (v^T H). Reverse over
    reverse, written as a function the compiler reads again like any other.
    """
    names = [p.name for p in _params(base)]
    inner = derived("vjp", derived("value_and_grad", base, positions, inputs_tuple),
                    positions, inputs_tuple)
    stem = base.__name__ if base.__name__ != "<lambda>" else "lambda"
    v = "v" if "v" not in names else "tangent"
    out = f"{stem}_output"
    signature = ", ".join(names + [v])
    source = (f"# s2sgrad: the Hessian of {stem} times v as code (with respect to "
              f"{', '.join(names[i] for i in positions)})\n"
              f"def hvp_{stem}({signature}):\n"
              f"    ({out}, _), hv = {inner.__name__}({', '.join(names)}, (0.0, {v}))\n"
              f"    return {out}, hv\n")
    return _define(f"hvp_{stem}", source, "hvp", stem, base, {inner.__name__: inner},
                   inner.__s2sgrad_pair__)


_ = Any
