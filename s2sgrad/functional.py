"""`s2sgrad.functional`: torch.autograd.functional's contract on NumPy arrays.

`vjp(func, inputs, v=None, create_graph=False, strict=False)` runs the
generated forward/adjoint pair of `func`; `jvp` runs its generated tangent
code (forward mode); `jacobian` picks forward or reverse mode by the sizes of
the inputs and outputs; `hvp` is forward-over-reverse (the tangent code of
the gradient's code) and `vhp` reverse-over-reverse (the adjoint of the
gradient's code); `hessian` uses the cheaper of the two. Argument conventions,
return structure (tuples mirror tuples) and error messages follow PyTorch,
with "array" for "Tensor". `strict=True` is decided statically, from the
generated code, never by looking at values.
"""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from . import api, compiler  # (the compiler's drivers and passes load at the first compile)
from .api import pair_for
from .arguments import check_differentiable, complex_parameters, finalize, numpy_numbers
from .optimizer_check import checked_jvp
from .runtime import ode
from .runtime.array_api import namespace_among, namespace_of
from .runtime.arrays import any_foreign, is_foreign_array
from .runtime.release import Once

if TYPE_CHECKING:
    from .compiler.compiled import CompiledFunction

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


def _pair(func: Callable, wrt: Tuple[int, ...], foreign: bool = False,
          xp: Any = None) -> CompiledFunction:
    """The forward/adjoint pair of func, as the API makes it (api.pair_for)."""
    # functional's inputs are arrays by its contract: their cotangents add with `+`.
    return pair_for(func, wrt, leaves=wrt, foreign=foreign, xp=xp)


def _jvp(func: Callable, wrt: Tuple[int, ...], complexes: Tuple[str, ...] = ()):
    """The tangent code of func (checked like _pair); `complexes`: the parameters
    given complex values (a forward-mode pair of their own)."""
    return checked_jvp(compiler.compile_jvp(func, wrt, complexes=complexes),
                       lambda: compiler.compile_jvp(func, wrt, False, complexes=complexes))


def _as_tuple_inputs(inputs: Any, fname: str) -> Tuple[bool, tuple]:
    if isinstance(inputs, tuple):
        items, is_tuple = inputs, True
    else:
        items, is_tuple = (inputs,), False
    for i, x in enumerate(items):
        if isinstance(x, (list, dict, set)) or not _array_like(x):
            shown = type(inputs).__name__ if not is_tuple else type(x).__name__
            hint = (" s2sgrad.functional keeps torch.autograd.functional's contract; for lists "
                    "and dicts of arrays (pytrees) use s2sgrad.vjp or s2sgrad.grad."
                    if isinstance(x, (list, dict)) else "")
            raise TypeError(f"The inputs given to {fname} must be either an array or a tuple of "
                            f"arrays but the given inputs has type {shown}.{hint}")
        check_differentiable(x, f"input {i}" if is_tuple else "the input")
    return is_tuple, numpy_numbers(items)


def _array_like(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic, float, int, complex)) and \
        not isinstance(x, bool) or isinstance(x, bool) or is_foreign_array(x) or \
        namespace_of(x) is not None


def _shape(x: Any) -> tuple:
    return tuple(np.shape(x))


def _unit_like(x: Any) -> Any:
    """The v that v=None stands for beside a one-element value: 1, in its float type."""
    if isinstance(x, (float, int)) and not isinstance(x, np.generic):
        return 1.0
    xp = namespace_of(x)
    if xp is not None:
        return xp.ones_like(x)
    if is_foreign_array(x):   # (made by x's library: a lazy output stays lazy)
        return np.ones_like(x, dtype=np.result_type(x.dtype, np.float64))
    return np.ones_like(np.asarray(x, dtype=np.result_type(x, np.float64)))


def _validate_v(v: Any, outputs: tuple, is_outputs_tuple: bool) -> tuple:
    if v is None:
        if is_outputs_tuple or len(outputs) != 1 or np.size(outputs[0]) != 1:
            raise RuntimeError("The vector v can only be None if the user-provided function "
                               "returns a single array with a single element.")
        return (_unit_like(outputs[0]),)
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
    xp = namespace_among(items)
    foreign = xp is None and any_foreign(items)
    compiled = _pair(func, tuple(range(len(items))), foreign, xp)
    if strict:
        _strict_check(compiled)
    output, residuals = compiled.forward(*items)
    is_outputs_tuple = isinstance(output, tuple)
    outputs = output if is_outputs_tuple else (output,)
    vs = _validate_v(v, outputs, is_outputs_tuple)
    cotangent = vs if is_outputs_tuple else vs[0]
    if type(residuals) is tuple:   # (one adjoint call: it frees each residual read last)
        residuals = Once(residuals)
    grads = compiled.adjoint(residuals, cotangent)
    grads = (grads,) if len(items) == 1 else tuple(grads)
    grads = tuple(finalize(g, x, avoid=vs) for g, x in zip(grads, items))
    return output, (grads if is_inputs_tuple else grads[0])


# =============================================================================================
# jvp, jacobian, hessian, hvp, vhp
# =============================================================================================
def _kind(x: Any) -> str:
    return type(x).__name__


def _as_tuple(inp: Any, arg_name: str, fn_name: str) -> Tuple[bool, tuple]:
    """torch's _as_tuple: (was it a tuple, the items), each an array or a Python number."""
    is_tuple = isinstance(inp, tuple)
    items = inp if is_tuple else (inp,)
    for i, el in enumerate(items):
        if isinstance(el, (list, dict, set)) or not _array_like(el):
            if is_tuple:
                raise TypeError(f"The {arg_name} given to {fn_name} must be either an array or a "
                                f"tuple of arrays but the value at index {i} has type "
                                f"{_kind(el)}.")
            raise TypeError(f"The {arg_name} given to {fn_name} must be either an array or a "
                            f"tuple of arrays but the given {arg_name} has type {_kind(el)}.")
    return is_tuple, items


def _inputs(inputs: Any, fn_name: str, complex_ok: bool = False) -> Tuple[bool, tuple]:
    is_tuple, items = _as_tuple(inputs, "inputs", fn_name)
    for i, x in enumerate(items):
        check_differentiable(x, f"input {i}" if is_tuple else "the input", complex_ok)
    # Inputs are arrays by the contract: a Python float is a NumPy one (float64, a
    # float too), so that its derivatives are NumPy's (inf at x = 0 of log x, where
    # Python's `g / x` raises; nan, not a complex number, of x ** 1.5 at x < 0).
    return is_tuple, numpy_numbers(items)


def _validate_v_inputs(v: Any, inputs: tuple, is_inputs_tuple: bool, fn_name: str) -> tuple:
    """torch's _validate_v, for a v that mirrors the inputs (jvp, hvp, vhp)."""
    if v is None:
        if len(inputs) != 1 or np.size(inputs[0]) != 1:
            raise RuntimeError("The vector v can only be None if the input to the "
                               "user-provided function is a single array with a single element.")
        return (_unit_like(inputs[0]),)
    _, vs = _as_tuple(v, "v", fn_name)
    if len(vs) != len(inputs):
        if is_inputs_tuple:
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(inputs)} but "
                               f"got {len(vs)}.")
        raise RuntimeError("The given v should contain a single array.")
    for i, (vi, xi) in enumerate(zip(vs, inputs)):
        if _shape(vi) != _shape(xi):
            prefix = f"Entry {i} in " if is_inputs_tuple else ""
            raise RuntimeError(f"{prefix}v has invalid size: should be {_shape(xi)} but got "
                               f"{_shape(vi)}.")
    return vs


def _like(value: Any, ref: Any) -> Any:
    """A derivative with the shape of `ref` and its float dtype (a float for a float)."""
    if isinstance(ref, (float, int)) and not isinstance(ref, (bool, np.generic)):
        return float(np.asarray(value).sum()) if np.ndim(value) else float(value)
    ref_arr = np.asarray(ref)
    dtype = ref_arr.dtype if ref_arr.dtype.kind in "fc" else np.float64
    arr = np.asarray(value)
    if arr.shape != ref_arr.shape:
        arr = np.broadcast_to(arr, ref_arr.shape)
    if arr.dtype != dtype or not arr.flags.writeable:
        arr = arr.astype(dtype)
    if isinstance(ref, np.generic):
        return np.dtype(dtype).type(arr)
    return arr


def _outputs(out: Any, fn_name: str) -> Tuple[bool, tuple]:
    return _as_tuple(out, "outputs of the user-provided function", fn_name)


def _varied(flags: Any, n: int) -> Tuple[bool, ...]:
    return tuple(flags) if isinstance(flags, tuple) and len(flags) == n else (bool(flags),) * n


def _strict_outputs(varied: Tuple[bool, ...]) -> None:
    for i, ok in enumerate(varied):
        if not ok:
            raise RuntimeError(f"Output {i} of the user-provided function does not require "
                               f"gradients. The outputs must be computed in a differentiable "
                               f"manner from the input when running in strict mode.")


def _strict_independent(activity) -> None:
    for i in activity.independent:
        reason = activity.reasons.get(i)
        message = (f"The output of the user-provided function is independent of input {i}. "
                   f"This is not allowed in strict mode.")
        raise RuntimeError(f"{message} {reason}" if reason else message)


def _jvp_code(func: Callable, n: int, complexes: Tuple[str, ...] = ()):
    return _jvp(func, tuple(range(n)), complexes)


def jvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> Tuple[Any, Any]:
    """Jacobian-vector product of `func` at `inputs`: returns (func_output, jvp).

    Forward mode: the generated tangent code of `func` runs once. `v` mirrors
    `inputs`; the jvp mirrors the output (a tuple when `func` returns a tuple).
    strict=True raises if an output does not depend on the inputs or an input
    does not reach the output (decided from the code). create_graph=True gives
    the same values.
    """
    # (complex inputs, tangents and values in between: each rule's JVP for complex
    # arguments, where it has one; the tangent of a real input is real)
    is_inputs_tuple, items = _inputs(inputs, "jvp", complex_ok=True)
    vs = _validate_v_inputs(v, items, is_inputs_tuple, "jvp")
    for i, (vi, xi) in enumerate(zip(vs, items)):
        if np.iscomplexobj(vi) and not np.iscomplexobj(xi):
            raise TypeError(f"v{f'[{i}]' if is_inputs_tuple else ''} is complex but its input "
                            f"is real: the tangent of a real input is real")
    code = _jvp_code(func, len(items), complex_parameters(func, items, {}))
    out, tangent = code.call(items, vs)
    is_outputs_tuple, outputs = _outputs(out, "jvp")
    if strict:
        _strict_outputs(_varied(code.output_varied, len(outputs)))
        _strict_independent(code.activity)
    tangents = tangent if is_outputs_tuple else (tangent,)
    result = tuple(_like(t, o) for t, o in zip(tangents, outputs))
    return out, (result if is_outputs_tuple else result[0])


# -- jacobian --------------------------------------------------------------------------------
_STRATEGIES = ("forward-mode", "reverse-mode")


def _check_strategy(strategy, what="strategy") -> None:
    if strategy is not None and strategy not in _STRATEGIES:
        raise ValueError(f'Expected {what} to be either "forward-mode" or "reverse-mode". '
                         f'Hint: If your function has more outputs than inputs, '
                         f'"forward-mode" tends to be more performant. Otherwise, prefer to '
                         f'use "reverse-mode".')


def _size(x: Any) -> int:
    return int(np.size(x))


def _dependence(func: Callable, n_inputs: int, n_outputs: int) -> List[List[bool]]:
    """dep[i][j]: can output i depend on input j (static, from the tangent code)."""
    dep = [[True] * n_inputs for _ in range(n_outputs)]
    for j in range(n_inputs):
        zero = _jvp(func, (j,)).zero_output
        flags = zero if isinstance(zero, tuple) and len(zero) == n_outputs else \
            (zero,) * n_outputs
        for i in range(n_outputs):
            dep[i][j] = not flags[i]
    return dep


def _strict_jacobian(func, varied, n_inputs, n_outputs) -> None:
    _strict_outputs(varied)
    dep = _dependence(func, n_inputs, n_outputs)
    for i in range(n_outputs):
        for j in range(n_inputs):
            if not dep[i][j]:
                raise RuntimeError(f"Output {i} of the user-provided function is independent of "
                                   f"input {j}. This is not allowed in strict mode.")


def _assemble(blocks, is_outputs_tuple: bool, is_inputs_tuple: bool):
    """torch's _tuple_postprocess(res, (is_outputs_tuple, is_inputs_tuple))."""
    res = tuple(tuple(row) for row in blocks)
    if not is_inputs_tuple:
        res = tuple(row[0] for row in res)
    if not is_outputs_tuple:
        res = res[0]
    return res


def _jacobian_reverse(func, items):
    """Rows of the Jacobian from one forward pass and one adjoint call per output element."""
    compiled = _pair(func, tuple(range(len(items))))
    out, residuals = compiled.forward(*items)
    is_outputs_tuple, outputs = _outputs(out, "jacobian")
    blocks = [[np.zeros(_shape(o) + _shape(x), dtype=_float_dtype(o, x)) for x in items]
              for o in outputs]
    for i, o in enumerate(outputs):
        for j in range(_size(o)):
            cot = tuple(_one_hot(oo, j if k == i else None) for k, oo in enumerate(outputs))
            grads = compiled.adjoint(residuals, cot if is_outputs_tuple else cot[0])
            grads = (grads,) if len(items) == 1 else tuple(grads)
            for k, (g, x) in enumerate(zip(grads, items)):
                blocks[i][k].reshape(_size(o), _size(x))[j] = np.ravel(_like(g, x))
    return out, is_outputs_tuple, outputs, blocks, compiled.activity


def _jacobian_forward(func, items):
    """Columns of the Jacobian from one tangent-code call per input element."""
    code = _jvp_code(func, len(items))
    blocks = None
    out = outputs = is_outputs_tuple = None
    for k, x in enumerate(items):
        for j in range(_size(x)):
            tangents = tuple(_one_hot(xx, j if m == k else None) for m, xx in enumerate(items))
            out, tangent = code.call(items, tangents)
            if blocks is None:
                is_outputs_tuple, outputs = _outputs(out, "jacobian")
                blocks = [[np.zeros(_shape(o) + _shape(xx), dtype=_float_dtype(o, xx))
                           for xx in items] for o in outputs]
            ts = tangent if is_outputs_tuple else (tangent,)
            for i, (t, o) in enumerate(zip(ts, outputs)):
                blocks[i][k].reshape(_size(o), _size(x))[:, j] = np.ravel(_like(t, o))
    if blocks is None:  # no input elements at all: the outputs from one call
        out, _ = code.call(items, tuple(_one_hot(x, None) for x in items))
        is_outputs_tuple, outputs = _outputs(out, "jacobian")
        blocks = [[np.zeros(_shape(o) + _shape(xx), dtype=_float_dtype(o, xx)) for xx in items]
                  for o in outputs]
    return out, is_outputs_tuple, outputs, blocks, code


def _float_dtype(*values) -> np.dtype:
    dtypes = [np.asarray(v).dtype for v in values]
    floats = [d for d in dtypes if d.kind in "fc"]
    return np.result_type(*floats) if floats else np.dtype(np.float64)


def _one_hot(like: Any, index: Optional[int]) -> Any:
    """Zeros shaped like `like` with a 1 at flat `index` (None: all zeros)."""
    if isinstance(like, (float, int)) and not isinstance(like, (bool, np.generic)):
        return 1.0 if index is not None else 0.0
    arr = np.zeros(_shape(like), dtype=_float_dtype(like))
    if index is not None:
        arr.reshape(-1)[index] = 1.0
    return arr


def jacobian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: Optional[str] = None) -> Any:
    """The Jacobian of `func` at `inputs`, with torch's return structure: block (i, j)
    has shape output_i.shape + input_j.shape; tuples mirror tuples.

    strategy="forward-mode" runs the tangent code once per input element,
    "reverse-mode" the forward once and the adjoint once per output element;
    the default (None; torch's default is "reverse-mode") chooses forward mode
    when the inputs have fewer elements than the outputs. strict=True is
    decided from the code (also with forward mode and vectorize). vectorize is
    accepted for compatibility and gives the same values (s2sgrad already
    reuses the forward pass for every row).
    """
    _check_strategy(strategy)
    is_inputs_tuple, items = _inputs(inputs, "jacobian")
    n_in = sum(_size(x) for x in items)
    mode = strategy
    if mode is None:
        compiled = _pair(func, tuple(range(len(items))))
        out, _ = compiled.forward(*items)
        _, outputs = _outputs(out, "jacobian")
        mode = "forward-mode" if n_in < sum(_size(o) for o in outputs) else "reverse-mode"
    if mode == "forward-mode":
        out, is_outputs_tuple, outputs, blocks, code = _jacobian_forward(func, items)
        varied = _varied(code.output_varied, len(outputs))
    else:
        out, is_outputs_tuple, outputs, blocks, _ = _jacobian_reverse(func, items)
        varied = None
    if strict:
        if varied is None:
            varied = _varied(_jvp_code(func, len(items)).output_varied, len(outputs))
        _strict_jacobian(func, varied, len(items), len(outputs))
    return _assemble(blocks, is_outputs_tuple, is_inputs_tuple)


# -- second derivatives --------------------------------------------------------------------
_HESSIAN_MODE: Dict[Any, str] = {}


def _cheaper_hessian(func: Callable, n: int) -> str:
    """Forward over reverse when the first-order code loops, else reverse over reverse."""
    key = (func, getattr(func, "__code__", None), n)
    mode = _HESSIAN_MODE.get(key)
    if mode is None:
        pair = _derived("value_and_grad", func, n).__s2sgrad_pair__
        loops = any(isinstance(node, (ast.For, ast.While))
                    for node in ast.walk(ast.parse(pair.source)))
        mode = "forward-mode" if loops else "reverse-mode"
        _HESSIAN_MODE[key] = mode
    return mode


def _scalar_output(out: Any, fn_name: str) -> None:
    if isinstance(out, tuple) or not _array_like(out):
        raise RuntimeError(f"The function given to {fn_name} should return a single array")
    if np.size(out) != 1:
        raise RuntimeError(f"The array returned by the function given to {fn_name} should "
                           f"contain a single element")


def _run_scalar(fn_name: str, func: Callable, items: tuple, run: Callable):
    """run(), turning the gradient code's "not a scalar" into torch's errors."""
    try:
        return run()
    except ValueError as exc:
        if "grad requires a function that returns a scalar" not in str(exc):
            raise
    pair = _derived("value_and_grad", func, len(items)).__s2sgrad_pair__
    out, _ = pair.forward(*items)
    _outputs(out, fn_name)
    _scalar_output(out, fn_name)
    raise AssertionError("unreachable: the output is a scalar")  # pragma: no cover


def _derived(kind: str, func: Callable, n: int):
    return compiler.higher.derived(kind, func, tuple(range(n)))


def _second_order_zeros(func: Callable, n: int) -> List[List[bool]]:
    """zero[i][j]: the derivative of gradient component i with respect to input j is
    structurally zero in the generated second-order code."""
    zero = [[False] * n for _ in range(n)]
    for i in range(n):
        grad_i = compiler.higher.derived("grad", func, (i,))
        for j in range(n):
            zero[i][j] = bool(_jvp(grad_i, (j,)).zero_output)
    return zero


def _strict_second_order(func: Callable, n: int, fn_name: str) -> List[List[bool]]:
    """torch's strict checks of hessian/hvp/vhp up to the last stage, from the code."""
    code = _jvp(func, tuple(range(n)))
    _strict_outputs(_varied(code.output_varied, 1))
    zero = _second_order_zeros(func, n)
    for i in range(n):
        if all(zero[i]):
            raise RuntimeError(
                f"While computing the hessian, found that the jacobian of the user-provided "
                f"function with respect to input {i} is independent of the input. This is not "
                f"allowed in strict mode. You should ensure that your function is twice "
                f"differentiable and that the jacobian depends on the inputs (this would be "
                f"violated by a linear function for example).")
    return zero


def hvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> Tuple[Any, Any]:
    """Hessian-vector product H v of scalar `func`: returns (func_output, hvp).

    Forward over reverse: the generated tangent code of `func`'s generated
    gradient code runs once (about the cost of two gradients).
    """
    is_inputs_tuple, items = _inputs(inputs, "hvp")
    vs = _validate_v_inputs(v, items, is_inputs_tuple, "hvp")
    n = len(items)
    code = _jvp(_derived("value_and_grad", func, n), tuple(range(n)))
    (out, _grads), (_, hv) = _run_scalar("hvp", func, items, lambda: code.call(items, vs))
    _outputs(out, "hvp")
    _scalar_output(out, "hvp")
    if strict:
        zero = _strict_second_order(func, n, "hvp")
        for i in range(n):
            if all(zero[i]):
                raise RuntimeError(
                    f"The hessian of the user-provided function is independent of entry {i} "
                    f"in the grad_jacobian. This is not allowed in strict mode as it prevents "
                    f"from using the double backward trick to replace forward mode AD.")
    hv = (hv,) if n == 1 else tuple(hv)
    result = tuple(_like(h, x) for h, x in zip(hv, items))
    return out, (result if is_inputs_tuple else result[0])


def vhp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> Tuple[Any, Any]:
    """Vector-Hessian product v^T H of scalar `func`: returns (func_output, vhp).

    Reverse over reverse: the generated adjoint of `func`'s generated gradient
    code, applied to v.
    """
    is_inputs_tuple, items = _inputs(inputs, "vhp")
    vs = _validate_v_inputs(v, items, is_inputs_tuple, "vhp")
    n = len(items)
    pair = _pair(_derived("value_and_grad", func, n), tuple(range(n)))
    (out, _grads), residuals = _run_scalar("vhp", func, items, lambda: pair.forward(*items))
    _outputs(out, "vhp")
    _scalar_output(out, "vhp")
    if strict:
        zero = _strict_second_order(func, n, "vhp")
        for j in range(n):
            if all(zero[i][j] for i in range(n)):
                raise RuntimeError(f"The jacobian of the user-provided function is independent "
                                   f"of input {j}. This is not allowed in strict mode.")
    cot = (_one_hot(out, None), vs[0] if n == 1 else tuple(vs))
    grads = pair.adjoint(residuals, cot)
    grads = (grads,) if n == 1 else tuple(grads)
    result = tuple(_like(g, x) for g, x in zip(grads, items))
    return out, (result if is_inputs_tuple else result[0])


def hessian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False, outer_jacobian_strategy: Optional[str] = None) -> Any:
    """The Hessian of scalar `func` at `inputs`: block (i, j) has shape
    input_i.shape + input_j.shape (a tuple of tuples when `inputs` is a tuple).

    outer_jacobian_strategy="forward-mode" is forward over reverse (the tangent
    code of the gradient code, once per input element), "reverse-mode" is
    reverse over reverse (the gradient code's forward once, its adjoint once
    per input element). The default (None; torch's is "reverse-mode") picks
    the one that measured cheaper for the code at hand: reverse over reverse
    for straight-line code (its rows reuse one forward pass), forward over
    reverse when the code has loops (whose second adjoint replays stacks).
    """
    _check_strategy(outer_jacobian_strategy, "strategy")
    is_inputs_tuple, items = _inputs(inputs, "hessian")
    n = len(items)
    mode = outer_jacobian_strategy or _cheaper_hessian(func, n)
    blocks = [[np.zeros(_shape(a) + _shape(b), dtype=_float_dtype(a, b)) for b in items]
              for a in items]
    if mode == "forward-mode":
        code = _jvp(_derived("value_and_grad", func, n), tuple(range(n)))
        out = None
        for k, x in enumerate(items):
            for j in range(_size(x)):
                tangents = tuple(_one_hot(xx, j if m == k else None) for m, xx in enumerate(items))
                (out, _), (_, column) = _run_scalar(
                    "hessian", func, items, lambda t=tangents: code.call(items, t))
                if k == 0 and j == 0:
                    _outputs(out, "hessian")
                    _scalar_output(out, "hessian")
                column = (column,) if n == 1 else tuple(column)
                for i, (c, xi) in enumerate(zip(column, items)):
                    blocks[i][k].reshape(_size(xi), _size(x))[:, j] = np.ravel(_like(c, xi))
        if out is None:
            (out, _), _ = _run_scalar("hessian", func, items, lambda: code.call(
                items, tuple(_one_hot(x, None) for x in items)))
    else:
        pair = _pair(_derived("value_and_grad", func, n), tuple(range(n)))
        (out, _grads), residuals = _run_scalar("hessian", func, items,
                                               lambda: pair.forward(*items))
        _outputs(out, "hessian")
        _scalar_output(out, "hessian")
        zero_out = _one_hot(out, None)
        for i, x in enumerate(items):
            for j in range(_size(x)):
                e = tuple(_one_hot(xx, j if m == i else None) for m, xx in enumerate(items))
                row = pair.adjoint(residuals, (zero_out, e[0] if n == 1 else e))
                row = (row,) if n == 1 else tuple(row)
                for k, (r, xk) in enumerate(zip(row, items)):
                    blocks[i][k].reshape(_size(x), _size(xk))[j] = np.ravel(_like(r, xk))
    _outputs(out, "hessian")
    _scalar_output(out, "hessian")
    if strict:
        zero = _strict_second_order(func, n, "hessian")
        for i in range(n):
            for j in range(n):
                if zero[i][j]:
                    raise RuntimeError(f"Output {i} of the user-provided function is independent "
                                       f"of input {j}. This is not allowed in strict mode.")
    return _assemble(blocks, is_inputs_tuple, is_inputs_tuple)


# The helpers of rules whose argument is a user's function (scipy.integrate.odeint's)
# differentiate it at run time with these.
ode.install_callbacks(vjp=api.vjp, jvp=lambda func, inputs, tangents: jvp(func, inputs, tangents))
