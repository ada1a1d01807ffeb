"""`s2sgrad.functional`: torch.autograd.functional's contract on NumPy arrays.

`vjp(func, inputs, v=None, create_graph=False, strict=False)` runs the
generated forward/adjoint pair of `func`. Argument conventions, return
structure (tuples mirror tuples) and error messages follow PyTorch, with
"array" for "Tensor".
"""
from __future__ import annotations

from typing import Any, Callable, Tuple

import numpy as np

from .api import check_differentiable, finalize
from .compiler import CompiledFunction, compile_function

__all__ = ["vjp"]


def _as_tuple_inputs(inputs: Any, fname: str) -> Tuple[bool, tuple]:
    if isinstance(inputs, tuple):
        items, is_tuple = inputs, True
    else:
        items, is_tuple = (inputs,), False
    for i, x in enumerate(items):
        if isinstance(x, (list, dict, set)) or not _array_like(x):
            shown = type(inputs).__name__ if not is_tuple else type(x).__name__
            raise TypeError(f"The inputs given to {fname} must be either an array or a tuple of "
                            f"arrays but the given inputs has type {shown}.")
        check_differentiable(x, f"input {i}" if is_tuple else "the input")
    return is_tuple, items


def _array_like(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic, float, int, complex)) and \
        not isinstance(x, bool) or isinstance(x, bool)


def _shape(x: Any) -> tuple:
    return tuple(np.shape(x))


def _validate_v(v: Any, outputs: tuple, is_outputs_tuple: bool) -> tuple:
    if v is None:
        if is_outputs_tuple or len(outputs) != 1 or np.size(outputs[0]) != 1:
            raise RuntimeError("The vector v can only be None if the user-provided function "
                               "returns a single array with a single element.")
        out = outputs[0]
        if isinstance(out, (float, int)) and not isinstance(out, np.generic):
            return (1.0,)
        return (np.ones_like(np.asarray(out, dtype=np.result_type(out, np.float64))),)
    vs = v if isinstance(v, tuple) else (v,)
    if len(vs) != len(outputs):
        raise RuntimeError(f"v is a tuple of invalid length: should be {len(outputs)} but got "
                           f"{len(vs)}.")
    for i, (vi, oi) in enumerate(zip(vs, outputs)):
        if _shape(vi) != _shape(oi):
            prefix = f"Entry {i} in " if is_outputs_tuple else ""
            raise RuntimeError(f"{prefix}v has invalid size: should be {_shape(oi)} but got "
                               f"{_shape(vi)}.")
    return vs


def _strict_check(compiled: CompiledFunction) -> None:
    act = compiled.activity
    for i in act.independent:
        reason = act.reasons.get(i)
        message = (f"The output of the user-provided function is independent of input {i}. "
                   f"This is not allowed in strict mode.")
        raise RuntimeError(f"{message} {reason}" if reason else message)


def vjp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> Tuple[Any, Any]:
    """Vector-Jacobian product of `func` at `inputs`: returns (func_output, vjp).

    `vjp` mirrors `inputs` (a tuple when `inputs` is a tuple). With strict=True,
    an input that no output depends on (decided statically) raises
    RuntimeError; otherwise its entry is zeros. create_graph=True gives the same
    values at top level and is differentiable when used inside a function that
    s2sgrad differentiates.
    """
    is_inputs_tuple, items = _as_tuple_inputs(inputs, "vjp")
    compiled = compile_function(func, tuple(range(len(items))))
    if strict:
        _strict_check(compiled)
    output, residuals = compiled.forward(*items)
    is_outputs_tuple = isinstance(output, tuple)
    outputs = output if is_outputs_tuple else (output,)
    vs = _validate_v(v, outputs, is_outputs_tuple)
    cotangent = vs if is_outputs_tuple else vs[0]
    grads = compiled.adjoint(residuals, cotangent)
    grads = (grads,) if len(items) == 1 else tuple(grads)
    grads = tuple(finalize(g, x, avoid=vs) for g, x in zip(grads, items))
    return output, (grads if is_inputs_tuple else grads[0])
