"""The public entry points: differentiable, grad, value_and_grad, vjp, source.

A thin layer over the compiler: it validates arguments, runs the generated
forward and adjoint, and gives gradients the shape and dtype of the argument
they belong to.
"""
from __future__ import annotations

import functools
import numbers
import weakref
from typing import Any, Callable, Dict, List, Sequence, Tuple, Union

import numpy as np

from .compiler import CompiledFunction, all_hold, compile_function, flat_bindings
from .optimizer_check import checked_pair

Wrt = Union[int, Sequence[int], None]


def differentiable(fn: Callable) -> Callable:
    """Mark `fn` for differentiation; calling it runs the original unchanged.

    Compilation happens on the first gradient request and is cached.
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    wrapper.__s2sgrad__ = True
    return wrapper


def normalize_wrt(wrt: Wrt, nargs: int = None, f: Callable = None
                  ) -> Tuple[Tuple[int, ...], bool]:
    """(positions, single) from an int, a tuple of ints, or None (all positional).

    Validated like JAX's argnums: negative positions count from the end (of the
    call's arguments, or of f's positional parameters), duplicates and anything
    that is not an int are refused with one line saying so."""
    if wrt is None:
        if nargs is None:
            raise TypeError("wrt=None needs the call's arguments")
        return tuple(range(nargs)), False
    # The common cases first: vjp normalises its wrt on every call.
    if type(wrt) is int and wrt >= 0:
        return (wrt,), True
    if type(wrt) is tuple and wrt and all(type(i) is int and i >= 0 for i in wrt) and \
            len(set(wrt)) == len(wrt):
        return wrt, False
    single = isinstance(wrt, numbers.Integral) and not isinstance(wrt, bool)
    items = (wrt,) if single else wrt
    try:
        items = tuple(items)
    except TypeError:
        raise TypeError(f"wrt must be an int, a tuple of ints or None, not {wrt!r}") from None
    if not items:
        raise ValueError("wrt must name at least one argument")
    for i in items:
        if not isinstance(i, numbers.Integral) or isinstance(i, bool):
            raise TypeError(f"wrt must be an int, a tuple of ints or None, not {wrt!r} "
                            f"({i!r} is a {type(i).__name__})")
    if any(i < 0 for i in items):
        count = nargs if nargs is not None else _positional_count(f)
        if count is None:
            raise ValueError(f"wrt={wrt!r}: a negative position needs a function whose "
                             f"positional parameters can be counted")
        if any(i < -count for i in items):
            raise ValueError(f"wrt={wrt!r} is out of range for {count} positional "
                             f"argument(s)")
        items = tuple(int(i) % count if i < 0 else int(i) for i in items)
    positions = tuple(int(i) for i in items)
    repeated = sorted({i for i in positions if positions.count(i) > 1})
    if repeated:
        raise ValueError(f"wrt={wrt!r} names argument {repeated[0]} more than once")
    return positions, single


def _positional_count(f: Callable) -> "int | None":
    if f is None:
        return None
    names = _parameter_names(f)
    return len(names) if names else None


_COMPLEX_HINT = ("s2sgrad differentiates real-valued code: pass the real and imaginary "
                 "parts as separate float arguments")


def _is_structure(value: Any) -> bool:
    kind = type(value)
    return kind is list or kind is tuple or kind is dict or isinstance(value, (list, tuple, dict))


def _is_constant_leaf(value: Any) -> bool:
    """Integer and boolean leaves of a structure are constants (no gradient)."""
    return isinstance(value, (bool, numbers.Integral, np.bool_)) or (
        isinstance(value, np.ndarray) and value.dtype.kind in "biu")


def check_differentiable(value: Any, what: str) -> None:
    """Only real floating-point values can carry a gradient (complex ones are refused:
    the rules are those of real analysis, so their gradient would be wrong). A
    structure (nested lists, tuples and dicts) carries its leaves' gradients; None,
    integer and boolean leaves in it are constants."""
    kind = type(value)
    if kind is float or (kind is np.ndarray and value.dtype.kind == "f"):
        return  # the common cases, first and cheap
    if _is_structure(value):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if item is None or _is_constant_leaf(item):
                continue
            check_differentiable(item, f"{what}[{key!r}]")
        return
    if isinstance(value, bool) or isinstance(value, numbers.Integral):
        raise TypeError(f"{what} is an integer ({value!r}): only floating-point inputs can "
                        f"be differentiated; pass a float (e.g. {float(value)!r}) or do not "
                        f"differentiate with respect to it")
    if isinstance(value, (complex, np.complexfloating)) or (
            isinstance(value, np.ndarray) and value.dtype.kind == "c"):
        raise TypeError(f"{what} is complex: {_COMPLEX_HINT}")
    if isinstance(value, (float, np.floating)):
        return
    if isinstance(value, np.ndarray):
        if np.issubdtype(value.dtype, np.floating):
            return
        raise TypeError(f"{what} has dtype {value.dtype}: only floating-point inputs can be "
                        f"differentiated; convert it with .astype(float)")
    raise TypeError(f"{what} is a {type(value).__name__}: only floating-point arrays and "
                    f"Python floats can be differentiated")


def finalize(grad: Any, like: Any, avoid: Sequence[Any] = ()) -> Any:
    """Give a gradient the type, shape and dtype of the value it belongs to (the
    structure too: list -> list, tuple -> tuple, dict -> dict with the same keys in
    the same order; None, integer and boolean leaves get None)."""
    if type(like) is np.ndarray:
        if type(grad) is np.ndarray and grad.shape == like.shape and \
                grad.dtype == like.dtype and grad.flags.writeable and \
                (not avoid or not any(grad is a for a in avoid)):
            return grad  # already right: the common case
    elif type(like) is float:
        if type(grad) is float:
            return grad
    elif _is_structure(like):
        return _finalize_structure(grad, like, avoid)
    if isinstance(like, (float, complex)) and not isinstance(like, np.generic):
        if isinstance(like, complex):
            return complex(np.asarray(grad).sum()) if np.ndim(grad) else complex(grad)
        return float(np.asarray(grad).sum()) if np.ndim(grad) else float(grad)
    like_arr = np.asarray(like)
    arr = np.asarray(grad)
    if arr.shape != like_arr.shape:
        arr = np.broadcast_to(arr, like_arr.shape)
    if arr.dtype != like_arr.dtype:
        arr = arr.astype(like_arr.dtype)
    elif not arr.flags.writeable or any(arr is a for a in avoid):
        arr = arr.copy()
    if isinstance(like, np.generic):
        return like_arr.dtype.type(arr)
    return arr


def _finalize_structure(grad: Any, like: Any, avoid) -> Any:
    """The generated adjoint gives a list for a list or tuple and a dict for a dict,
    or a number 0 where nothing reached the structure (or an item of it)."""
    if isinstance(like, dict):
        got = grad if isinstance(grad, dict) else {}
        return {k: _finalize_leaf(got.get(k, 0.0), v, avoid) for k, v in like.items()}
    if isinstance(grad, (list, tuple)):
        if len(grad) != len(like):
            from .errors import InternalError
            raise InternalError(f"the gradient of a {type(like).__name__} of {len(like)} "
                                f"items has {len(grad)}")
        got = grad
    else:   # nothing reached the structure: a symbolic zero
        got = [0.0] * len(like)
    items = [_finalize_leaf(g, v, avoid) for g, v in zip(got, like)]
    if isinstance(like, list):
        return items
    if type(like) is not tuple and hasattr(like, "_fields"):
        return type(like)(*items)      # a namedtuple keeps its type
    return tuple(items)


def _finalize_leaf(grad: Any, like: Any, avoid) -> Any:
    if like is None or _is_constant_leaf(like):
        return None
    if _is_structure(like):
        return _finalize_structure(grad, like, avoid)
    if grad is None:
        grad = 0.0
    return finalize(grad, like, avoid)


def _derived_from(f: Callable, kind: str, positions: Tuple[int, ...], as_tuple: bool):
    """Name and document a derived function like f, without making it look like f.

    functools.wraps would set __wrapped__ = f, and whoever unwraps decorators
    (the compiler does) would then see f itself instead of its gradient.
    """
    def decorate(wrapper: Callable) -> Callable:
        name = getattr(f, "__name__", "f")
        wrapper.__name__ = wrapper.__qualname__ = f"{kind}_{name}"
        wrapper.__doc__ = f"{kind} of {name} with respect to arguments {positions}."
        # as_tuple: the gradient is a tuple even for one position (wrt=(i,)).
        wrapper.__s2sgrad_derived__ = (kind, f, positions, as_tuple)
        return wrapper
    return decorate


def _python_numbers(args: tuple, positions: Tuple[int, ...]) -> Tuple[int, ...]:
    """Positions of arguments that are Python numbers, when some differentiated
    argument is one (then a scalar-specialised pair pays off); else ()."""
    if not any(i < len(args) and type(args[i]) is float for i in positions):
        return ()
    return tuple(i for i, a in enumerate(args) if type(a) is float or type(a) is int)


def _compiled(f: Callable, positions: Tuple[int, ...],
              numbers_at: Tuple[int, ...] = (), leaves: Tuple[int, ...] = ()
              ) -> CompiledFunction:
    """The pair for f; where some arguments are Python numbers, one specialised to
    that (values computed from them alone are scalars: no broadcasting to undo);
    `leaves`: the positions of the arguments that are arrays or numbers."""
    scalars: Tuple[str, ...] = ()
    if numbers_at:
        names = _parameter_names(f)
        scalars = tuple(names[i] for i in numbers_at if i < len(names))
    return checked_pair(compile_function(f, positions, scalars=scalars, leaves=leaves),
                        lambda: compile_function(f, positions, False, scalars=scalars,
                                                 leaves=leaves))


def leaf_positions(args: tuple) -> Tuple[int, ...]:
    """Positions of the arguments that are arrays or numbers, not structures: the
    compiled code adds their cotangents with `+` (a list's would concatenate)."""
    return tuple([i for i, a in enumerate(args)
                  if type(a) is np.ndarray or type(a) is float or
                  not isinstance(a, (list, tuple, dict)) and
                  isinstance(a, (np.ndarray, np.generic, numbers.Number))])


def _parameter_names(f: Callable) -> List[str]:
    import inspect
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _check_args(f: Callable, args: tuple, positions: Tuple[int, ...]) -> Tuple[int, ...]:
    """Validate the differentiated arguments and say what kind of call this is:
    the positions of Python numbers when some differentiated argument is a float
    (a scalar-specialised pair pays off then), else (). One pass over the
    positions: this runs on every call, and small functions feel every step."""
    if len(args) > max(positions):
        some_float = False
        for i in positions:
            a = args[i]
            if type(a) is float:
                some_float = True
            elif not (type(a) is np.ndarray and a.dtype.kind == "f"):
                break
        else:
            if not some_float:
                return ()
            return tuple(i for i, a in enumerate(args) if type(a) is float or type(a) is int)
    for i in positions:
        if i >= len(args):
            raise TypeError(f"cannot differentiate {getattr(f, '__name__', f)} with respect to "
                            f"argument {i}: only {len(args)} positional argument(s) were given")
        check_differentiable(args[i], f"argument {i}")
    return _python_numbers(args, positions)


def _call_kind(f: Callable, args: tuple, positions: Tuple[int, ...]) -> tuple:
    """(positions of Python numbers, as _check_args gives them; positions of the
    arguments that are leaves, or None when every argument is an array or a
    float): which specialised pair a call runs. The common case is one loop."""
    numbers_at = _check_args(f, args, positions)
    for a in args:
        if type(a) is not np.ndarray and type(a) is not float:
            return numbers_at, leaf_positions(args)
    return numbers_at, None


def _seed(out: Any) -> Any:
    """The cotangent 1 for a scalar output, or ValueError for anything else."""
    kind = type(out)
    if kind is np.float64 or kind is float:
        return 1.0
    if isinstance(out, (float, int)) and not isinstance(out, bool):
        return 1.0
    if isinstance(out, (np.ndarray, np.generic)) and np.ndim(out) == 0 and \
            np.issubdtype(np.asarray(out).dtype, np.number):
        return np.ones((), dtype=np.result_type(out, np.float64)
                       if not np.issubdtype(np.asarray(out).dtype, np.inexact)
                       else np.asarray(out).dtype)
    shape = np.shape(out) if isinstance(out, (np.ndarray, np.generic)) else type(out).__name__
    raise ValueError(f"grad requires a function that returns a scalar, but it returned "
                     f"{shape}; use s2sgrad.vjp (or s2sgrad.functional.vjp) for "
                     f"non-scalar outputs")


def _pack(grads: Any, positions: Tuple[int, ...]) -> tuple:
    return (grads,) if len(positions) == 1 else tuple(grads)


def value_and_grad(f: Callable, wrt: Union[int, Sequence[int]] = 0,
                   jit: bool = False) -> Callable:
    """Return a function computing (f(*args), gradient of f w.r.t. args[wrt]).

    jit=True runs the generated code compiled by numba (s2sgrad.backends).
    """
    positions, single = normalize_wrt(wrt, f=f)
    if jit:
        from .backends import jit_value_and_grad
        return _derived_from(f, "value_and_grad", positions, not single)(
            jit_value_and_grad(f, positions, single))

    # The compiled pair per kind of call (which arguments are Python numbers) with
    # the bindings it was generated for, flattened: later calls skip the cache
    # lookup and check the bindings in one loop.
    compiled_pairs: Dict[tuple, Tuple[CompiledFunction, tuple]] = {}

    @_derived_from(f, "value_and_grad", positions, not single)
    def value_and_grad_f(*args, **kwargs):
        kind = _call_kind(f, args, positions)
        entry = compiled_pairs.get(kind)
        if entry is None or not all_hold(entry[1]):
            compiled = _compiled(f, positions, kind[0], leaf_positions(args))
            entry = compiled_pairs[kind] = (compiled, flat_bindings(compiled))
        compiled = entry[0]
        out, residuals = compiled.forward(*args, **kwargs)
        grads = compiled.adjoint(residuals, _seed(out))
        if len(positions) == 1:  # the adjoint returns one gradient bare
            g = finalize(grads, args[positions[0]])
            return out, (g if single else (g,))
        return out, tuple([finalize(g, args[i]) for g, i in zip(grads, positions)])
    return value_and_grad_f


def _positions_and_tuple(wrt, f=None) -> Tuple[Tuple[int, ...], bool]:
    positions, single = normalize_wrt(wrt, f=f)
    return positions, not single


def grad(f: Callable, wrt: Union[int, Sequence[int]] = 0, jit: bool = False) -> Callable:
    """Return a function with f's signature computing the gradient of scalar f."""
    vg = value_and_grad(f, wrt, jit=jit)

    @_derived_from(f, "grad", *_positions_and_tuple(wrt, f))
    def grad_f(*args, **kwargs):
        return vg(*args, **kwargs)[1]
    return grad_f


def vjp(f: Callable, *args: Any, wrt: Wrt = None, jit: bool = False) -> Tuple[Any, Callable]:
    """Run f(*args) and return (output, pullback); pullback(v) gives v^T J.

    The pullback reuses the values kept by the forward pass and may be called
    many times with different v. jit=True: see value_and_grad.
    """
    positions, single = normalize_wrt(wrt, len(args))
    numbers_at, leaves = _call_kind(f, args, positions)
    if jit:
        from .backends import jit_vjp
        return jit_vjp(f, args, positions, single)
    compiled = _known_pair(f, positions, numbers_at,
                           tuple(range(len(args))) if leaves is None else leaves)
    out, residuals = compiled.forward(*args)

    def pullback(v):
        check_cotangent(v, out)
        grads = _pack(compiled.adjoint(residuals, v), positions)
        grads = tuple(finalize(g, args[i], avoid=_leaves(v)) for g, i in zip(grads, positions))
        return grads[0] if single else grads
    return out, pullback


# vjp is called afresh for every pullback, so it keeps the pairs it used per
# function (weakly: a function that goes away takes its pairs along) and skips
# the cache key on later calls; the code, the defaults and every name the pair
# was generated for are checked each time, as compile_function would.
_PAIRS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _known_pair(f: Callable, positions: Tuple[int, ...], numbers_at: Tuple[int, ...],
                leaves: Tuple[int, ...]) -> CompiledFunction:
    try:
        pairs = _PAIRS.get(f)
    except TypeError:   # not weakly referable (a builtin, a callable object)
        return _compiled(f, positions, numbers_at, leaves)
    code, defaults = getattr(f, "__code__", None), getattr(f, "__defaults__", None)
    kind = (positions, numbers_at, leaves)
    entry = pairs.get(kind) if pairs is not None else None
    if entry is not None and entry[1] is code and entry[2] is defaults and all_hold(entry[3]):
        return entry[0]
    compiled = _compiled(f, positions, numbers_at, leaves)
    if pairs is None:
        pairs = _PAIRS[f] = {}
    pairs[kind] = (compiled, code, defaults, flat_bindings(compiled))
    return compiled


def _leaves(v) -> tuple:
    return tuple(v) if isinstance(v, tuple) else (v,)


def check_cotangent(v: Any, out: Any, where: str = "") -> None:
    """v must mirror the output's structure (tuples, lists, dicts) and shapes."""
    if type(out) is np.ndarray:   # the common case, first
        if type(v) is np.ndarray and v.shape == out.shape:
            return
    elif isinstance(out, tuple):
        if not isinstance(v, tuple) or len(v) != len(out):
            raise ValueError(f"the cotangent{where} must be a tuple of {len(out)} values, one "
                             f"per output, not {type(v).__name__}")
        for i, (vi, oi) in enumerate(zip(v, out)):
            if _is_structure(oi):
                check_cotangent(vi, oi, f"{where}[{i}]")
            elif np.shape(vi) != np.shape(oi):
                raise ValueError(f"cotangent {where}{i} has shape {np.shape(vi)}, but output "
                                 f"{where}{i} has shape {np.shape(oi)}")
        return
    elif isinstance(out, list):
        if not isinstance(v, list) or len(v) != len(out):
            raise ValueError(f"the cotangent{where} must be a list of {len(out)} values, like "
                             f"the output, not {type(v).__name__}")
        for i, (vi, oi) in enumerate(zip(v, out)):
            check_cotangent(vi, oi, f"{where}[{i}]")
        return
    elif isinstance(out, dict):
        if not isinstance(v, dict) or list(v) != list(out):
            raise ValueError(f"the cotangent{where} must be a dict with the output's keys "
                             f"{list(out)}, not {v!r:.80}")
        for k in out:
            check_cotangent(v[k], out[k], f"{where}[{k!r}]")
        return
    if np.shape(v) != np.shape(out):
        raise ValueError(f"the cotangent{where} has shape {np.shape(v)}, but the output"
                         f"{where} has shape {np.shape(out)}")


def source(f: Callable, wrt: Union[int, Sequence[int]] = 0, optimize: bool = True,
           mode: str = "reverse") -> str:
    """The generated code of f (and of the functions it calls), as text: its forward
    and adjoint (mode="reverse"), or its tangent code (mode="forward")."""
    positions, _ = normalize_wrt(wrt, f=f)
    if mode == "forward":
        from .compiler.tangent import compile_jvp
        return compile_jvp(f, positions, optimize).source
    if mode != "reverse":
        raise ValueError(f"source(mode={mode!r}): mode is 'reverse' (forward and adjoint) "
                         "or 'forward' (tangent code)")
    # Shown for array arguments (a list's or dict's cotangents add item by item).
    every = tuple(range(len(_parameter_names(f))))
    return compile_function(f, positions, optimize, leaves=every).source
