"""What goes into a derivative and what comes out: argument checks, `wrt`, seeds,
and gradients in the structure and dtype of the arguments they belong to.

The public API and the backends share these; they live below both, so that a
backend never imports the API it serves.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import numbers
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import InternalError
from .function import Context
from .runtime.array_api import namespace_of
from .runtime.arrays import holds_complex, is_foreign_array

Wrt = Union[int, Sequence[int], None]


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
        count = nargs if nargs is not None else positional_count(f)
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


def positional_count(f: Callable) -> "int | None":
    if f is None:
        return None
    names = parameter_names(f)
    return len(names) if names else None


_COMPLEX_HINT = ("s2sgrad.functional differentiates real-valued code: pass the real and "
                 "imaginary parts as separate float arguments, or use s2sgrad.grad or "
                 "s2sgrad.vjp, which take complex arguments")


def is_structure(value: Any) -> bool:
    kind = type(value)
    return kind is list or kind is tuple or kind is dict or isinstance(value, (list, tuple, dict))


def is_constant_leaf(value: Any) -> bool:
    """Integer and boolean leaves of a structure are constants (no gradient)."""
    return isinstance(value, (bool, numbers.Integral, np.bool_)) or (
        isinstance(value, np.ndarray) and value.dtype.kind in "biu")


def check_differentiable(value: Any, what: str, complex_ok: bool = False) -> None:
    """Only floating-point values can carry a gradient: real ones, and complex ones
    where `complex_ok` (grad, value_and_grad and vjp: their pairs take the rules for
    complex arguments; s2sgrad.functional's forward mode and higher derivatives do
    not). A structure (nested lists, tuples and dicts) carries its leaves'
    gradients; None, integer and boolean leaves in it are constants."""
    kind = type(value)
    if kind is float or (kind is np.ndarray and value.dtype.kind == "f"):
        return  # the common cases, first and cheap
    if complex_ok and (kind is complex or isinstance(value, np.complexfloating) or (
            kind is np.ndarray and value.dtype.kind == "c")):
        return
    if is_structure(value):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if item is None or is_constant_leaf(item):
                continue
            check_differentiable(item, f"{what}[{key!r}]", complex_ok)
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
    xp = None if isinstance(value, np.ndarray) else namespace_of(value)
    if xp is not None:   # an array of the array API standard (array_api_strict, ...)
        if xp.isdtype(value.dtype, "real floating"):
            return
        if xp.isdtype(value.dtype, "complex floating"):
            raise TypeError(f"{what} is complex: {_COMPLEX_HINT}")
        raise TypeError(f"{what} has dtype {value.dtype}: only floating-point inputs can be "
                        f"differentiated; convert it with xp.astype(x, xp.float64)")
    if isinstance(value, np.ndarray) or is_foreign_array(value):
        if np.issubdtype(value.dtype, np.floating):
            return
        if np.issubdtype(value.dtype, np.complexfloating):
            raise TypeError(f"{what} is complex: {_COMPLEX_HINT}")
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
    elif is_structure(like):
        return _finalize_structure(grad, like, avoid)
    elif namespace_of(like) is not None:
        return _finalize_array_api(grad, like)
    elif is_foreign_array(like):
        return _finalize_duck(grad, like, avoid)
    if isinstance(like, (float, complex)) and not isinstance(like, np.generic):
        if is_foreign_array(grad):   # a lazy (Dask) gradient stays lazy: a 0-d array
            return grad.sum() if grad.ndim else grad
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


def _finalize_duck(grad: Any, like: Any, avoid) -> Any:
    """The gradient of another library's array (Dask, CuPy) in that library, with
    like's shape, dtype and (for Dask) chunks; never computed or moved to NumPy
    here: a lazy gradient stays lazy."""
    if type(grad) is not type(like):   # a number or NumPy array: nothing reached it
        grad = np.zeros_like(like) + grad   # (dispatched: made by like's library)
    elif any(grad is a for a in avoid):
        grad = grad.copy()
    if grad.shape != like.shape:
        grad = np.broadcast_to(grad, like.shape)
    if grad.dtype != like.dtype:
        grad = grad.astype(like.dtype)
    chunks = getattr(like, "chunks", None)
    if chunks is not None and getattr(grad, "chunks", None) != chunks:
        grad = grad.rechunk(chunks)
    return grad


def _finalize_array_api(grad: Any, like: Any) -> Any:
    """The gradient of an array-API array, in its namespace, shape and dtype."""
    xp = namespace_of(like)
    if namespace_of(grad) is not xp:    # a number: nothing (or a constant) reached it
        return xp.full(like.shape, float(grad), dtype=like.dtype)
    if tuple(grad.shape) != tuple(like.shape):
        grad = xp.broadcast_to(grad, like.shape)
    if grad.dtype != like.dtype:
        grad = xp.astype(grad, like.dtype)
    return grad


def _finalize_structure(grad: Any, like: Any, avoid) -> Any:
    """The generated adjoint gives a list for a list or tuple and a dict for a dict,
    a number 0 where nothing reached the structure (or an item of it), or one array
    where a NumPy function read the whole structure as an array (np.append([a, b],
    ...)): its items along the first axis. Anything else is an s2sgrad bug, never
    read as a zero."""
    if isinstance(like, dict):
        if isinstance(grad, dict):
            got = grad
        elif _is_symbolic_zero(grad):
            got = {}
        else:
            raise _structure_mismatch(grad, like)
        return {k: _finalize_leaf(got.get(k, 0.0), v, avoid) for k, v in like.items()}
    if isinstance(grad, (list, tuple)):
        if len(grad) != len(like):
            raise InternalError(f"the gradient of a {type(like).__name__} of {len(like)} "
                                f"items has {len(grad)}")
        got = grad
    elif _is_symbolic_zero(grad):   # nothing reached the structure
        got = [0.0] * len(like)
    elif _as_array_shape(like) is not None and np.shape(grad) == _as_array_shape(like):
        got = list(np.asarray(grad))
    else:
        raise _structure_mismatch(grad, like)
    items = [_finalize_leaf(g, v, avoid) for g, v in zip(got, like)]
    if isinstance(like, list):
        return items
    if type(like) is not tuple and hasattr(like, "_fields"):
        return type(like)(*items)      # a namedtuple keeps its type
    return tuple(items)


def _is_symbolic_zero(grad: Any) -> bool:
    return grad is None or (isinstance(grad, numbers.Number) and grad == 0)


def _as_array_shape(like: Any):
    """The shape of np.asarray(like) where the structure reads as one float array."""
    try:
        arr = np.asarray(like)
    except (ValueError, TypeError):
        return None
    return arr.shape if arr.dtype.kind in "fiub" else None


def _structure_mismatch(grad: Any, like: Any) -> Exception:
    return InternalError(f"the gradient of a {type(like).__name__} came back as a "
                         f"{type(grad).__name__} of shape {np.shape(grad)}")


def _finalize_leaf(grad: Any, like: Any, avoid) -> Any:
    if like is None or is_constant_leaf(like):
        return None
    if is_structure(like):
        return _finalize_structure(grad, like, avoid)
    if grad is None:
        grad = 0.0
    return finalize(grad, like, avoid)


def python_numbers(args: tuple, positions: Tuple[int, ...]) -> Tuple[int, ...]:
    """Positions of arguments that are Python numbers, when some differentiated
    argument is one (then a scalar-specialised pair pays off); else ()."""
    if not any(i < len(args) and type(args[i]) is float for i in positions):
        return ()
    return tuple(i for i, a in enumerate(args) if type(a) is float or type(a) is int)


def leaf_positions(args: tuple) -> Tuple[int, ...]:
    """Positions of the arguments that are arrays or numbers, not structures: the
    compiled code adds their cotangents with `+` (a list's would concatenate)."""
    return tuple([i for i, a in enumerate(args)
                  if type(a) is np.ndarray or type(a) is float or
                  not isinstance(a, (list, tuple, dict)) and
                  (isinstance(a, (np.ndarray, np.generic, numbers.Number)) or
                   is_foreign_array(a) or namespace_of(a) is not None)])


def structured(args: tuple, kwargs: Optional[dict] = None) -> bool:
    """Whether an argument is a list, tuple or dict (or another non-leaf): jit=True's
    pair is compiled for arrays and numbers, whose cotangents add with `+`."""
    values = tuple(args) + tuple((kwargs or {}).values())
    return len(leaf_positions(values)) != len(values)


def parameter_names(f: Callable) -> List[str]:
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def check_args(f: Callable, args: tuple, positions: Tuple[int, ...]) -> Tuple[int, ...]:
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
        check_differentiable(args[i], f"argument {i}", complex_ok=True)
    return python_numbers(args, positions)


def call_kind(f: Callable, args: tuple, positions: Tuple[int, ...]) -> tuple:
    """(positions of Python numbers, as check_args gives them; positions of the
    arguments that are leaves, or None when every argument is an array or a
    float or int): which specialised pair a call runs. The common case is one loop
    (an int, such as a step count, is a leaf and needs no closer look either)."""
    numbers_at = check_args(f, args, positions)
    for a in args:
        if type(a) is not float and type(a) is not int and \
                (type(a) is not np.ndarray or a.dtype.kind == "c"):
            return numbers_at, leaf_positions(args)
    return numbers_at, None


def complex_parameters(f: Callable, args: tuple, kwargs: dict) -> Tuple[str, ...]:
    """The names of the parameters given complex values (or structures holding one):
    a pair specialised to that takes the rules for complex arguments there (the
    rules of real analysis would give them wrong gradients). Arguments past the
    named parameters are the `*args` parameter's."""
    complex_at = [i for i, a in enumerate(args) if holds_complex(a)]
    named = [k for k, v in kwargs.items() if holds_complex(v)]
    if not complex_at and not named:
        return ()
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                        p.POSITIONAL_OR_KEYWORD)]
    rest = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    extra = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
    out = {positional[i] if i < len(positional) else rest for i in complex_at}
    out |= {k if k in positional or extra is None else extra for k in named}
    return tuple(sorted(n for n in out if n is not None))


def numpy_numbers(value: Any) -> Any:
    """value with each Python float in it (in tuples, lists, dicts and a Function's
    ctx) a np.float64: arithmetic on it is NumPy's, inf or nan with NumPy's warning
    where Python's raises ZeroDivisionError or OverflowError (`g / x` at x = 0.0) or
    gives a complex number (`x ** 1.5` at x < 0). Anything else is kept as it is."""
    kind = type(value)
    if kind is float:
        return np.float64(value)
    if kind is tuple or kind is list:
        return kind(numpy_numbers(v) for v in value)
    if kind is dict:
        return {k: numpy_numbers(v) for k, v in value.items()}
    if isinstance(value, Context):
        ctx = copy.copy(value)
        ctx.__dict__.update({k: numpy_numbers(v) for k, v in vars(value).items()})
        return ctx
    return value


def numpy_where_numbers_fail(pair: Any, real: bool) -> Any:
    """A pair specialised to Python numbers computes on floats, which is fast, but
    Python's arithmetic is not NumPy's: the adjoint's `g / x` at x = 0.0 (of np.log)
    raises ZeroDivisionError where NumPy gives inf, `x ** 1.5` at x < 0 (of
    np.power) is complex where it is nan. Where the adjoint raises so, or (`real`)
    gives a complex gradient, it runs again on the residuals as NumPy numbers; the
    forward (which holds a derivative's adjoint, for grad of grad) likewise on the
    arguments, unless the function itself raises so too (`1.0 / x` at 0.0: its
    derivative raises what it raises) or returns a complex number itself."""
    forward, adjoint, own = pair.forward, pair.adjoint, pair.fn

    def numpy_faithful_forward(*args, **kwargs):
        try:
            out, residuals = forward(*args, **kwargs)
        except (ZeroDivisionError, OverflowError):
            own(*args, **kwargs)   # (the function's own error, where it raises one)
            return forward(*numpy_numbers(args), **numpy_numbers(kwargs))
        if real and holds_complex(out) and not holds_complex(own(*args, **kwargs)):
            return forward(*numpy_numbers(args), **numpy_numbers(kwargs))
        return out, residuals

    def numpy_faithful_adjoint(residuals, cotangent):
        return numpy_faithful_call(adjoint, (residuals, cotangent), real)
    return dataclasses.replace(pair, forward=numpy_faithful_forward,
                               adjoint=numpy_faithful_adjoint)


def numpy_faithful_call(run: Callable, values: tuple, real: bool = True) -> Any:
    """run(*values) of derivative code; again on NumPy numbers (numpy_numbers) where
    Python's float arithmetic in it raised ZeroDivisionError or OverflowError or
    (`real`) gave a complex result."""
    try:
        out = run(*values)
        if not (real and holds_complex(out)):
            return out
    except (ZeroDivisionError, OverflowError):
        pass
    return run(*numpy_numbers(values))



def seed(out: Any) -> Any:
    """The cotangent 1 for a scalar output, or ValueError for anything else."""
    kind = type(out)
    if kind is np.float64 or kind is float:
        return 1.0
    if isinstance(out, (float, int)) and not isinstance(out, bool):
        return 1.0
    if holds_complex(out):
        raise TypeError("grad requires a real-valued output, but the function returned a "
                        "complex value; differentiate a real loss of it (np.real(z), "
                        "np.abs(z) ** 2, ...) or use s2sgrad.vjp with a complex cotangent")
    if isinstance(out, (np.ndarray, np.generic)) and np.ndim(out) == 0 and \
            np.issubdtype(np.asarray(out).dtype, np.number):
        return np.ones((), dtype=np.result_type(out, np.float64)
                       if not np.issubdtype(np.asarray(out).dtype, np.inexact)
                       else np.asarray(out).dtype)
    xp = namespace_of(out)
    if xp is not None and out.ndim == 0 and xp.isdtype(out.dtype, "real floating"):
        return 1.0
    if is_foreign_array(out) and out.ndim == 0 and np.issubdtype(out.dtype, np.floating):
        return np.ones_like(out)   # (made by its library: CuPy refuses NumPy arrays)
    if isinstance(out, np.ndarray) and out.size == 1 and np.issubdtype(out.dtype, np.number):
        # one element, not 0-d (shape (1,), (1, 1)): differentiated as that element, like
        # torch's backward() and autograd; the cotangent has the output's shape
        return np.ones(out.shape, dtype=np.result_type(out, np.float64)
                       if not np.issubdtype(out.dtype, np.inexact) else out.dtype)
    shape = np.shape(out) if isinstance(out, (np.ndarray, np.generic)) or \
        is_foreign_array(out) or xp is not None \
        else type(out).__name__
    raise ValueError(f"grad requires a function that returns a scalar, but it returned "
                     f"{shape}; use s2sgrad.vjp (or s2sgrad.functional.vjp) for "
                     f"non-scalar outputs")


def finalized(out: Any, grads: Any, args: tuple, positions: Tuple[int, ...],
              single: bool) -> tuple:
    """(out, the gradients as grad returns them): each given its argument's type, shape
    and dtype (finalize); one bare where `single` (the adjoint returns one gradient
    bare when there is one position)."""
    if len(positions) == 1:
        g = finalize(grads, args[positions[0]])
        return out, (g if single else (g,))
    grads = tuple([finalize(g, args[i]) for g, i in zip(grads, positions)])
    return out, (grads[0] if single else grads)


def pack(grads: Any, positions: Tuple[int, ...]) -> tuple:
    return (grads,) if len(positions) == 1 else tuple(grads)


def leaves_of(v) -> tuple:
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
            if is_structure(oi):
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
