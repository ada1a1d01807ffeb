"""A gradient that checks itself: two witnesses on the first call of each pair.

Sound analyses are the first line; these are the second, run where a mistake
would otherwise pass silently. On the first call of a compiled pair in a
process, and on each new combination of argument structure, shapes and dtypes:

- the *value witness*: the generated forward's output must equal the user's own
  function's on copies of the same arguments. It catches source that is not the
  code that runs, a decorator or a callee the compiler did not see, a stale pair;
- the *derivative witness*: a dot-product test between two independent
  transforms of the same code, reverse mode (the adjoint of a random cotangent
  v) and forward mode (the tangent of a random direction u):
  <adjoint(v), u> == <v, tangent(u)>.

A mismatch raises `WitnessError`, returns no gradient, and removes the pair
from the memory and disk caches. Where forward mode refuses a construct, or the
function is not deterministic (np.random), the derivative or value witness says
so (`report`: `s2sgrad check` prints it) instead of failing.

S2SGRAD_WITNESS: `first` (the default), `always` (every call: the test suite),
`off`; the API's `witness=` argument overrides it per derivative.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from . import compiler  # (its drivers and passes load at the first compile)
from .arguments import finalize, numpy_faithful_call
from .errors import TransformError
from .optimizer_check import fresh_copy
from .runtime.arrays import holds_complex
from .runtime.tangent import zero_tangent

MODES = ("first", "always", "off")
# float64: the optimiser may reorder sums (a few ulps per operation); float32 more.
_VALUE_RTOL = {8: 1e-9, 4: 1e-4, 2: 1e-2}
_DOT_RTOL = {8: 1e-6, 4: 1e-2, 2: 1e-1}
_DOT_FLOOR = {8: 1e-12, 4: 1e-4, 2: 1e-2}


class WitnessError(AssertionError):
    """The generated code failed a self-check: its value differs from the user's
    function, or its reverse- and forward-mode derivatives disagree. s2sgrad
    returned no gradient; this is a bug of s2sgrad (please report it)."""


def mode(override: Optional[object] = None) -> str:
    """The witness mode: the API's `witness=` (True/False/a mode name) over
    S2SGRAD_WITNESS over `first`."""
    if override is not None:
        if override is True:
            return "first"
        if override is False:
            return "off"
        if override in MODES:
            return str(override)
        raise ValueError(f"witness={override!r}: use True, False, 'first', 'always' or 'off'")
    raw = _ENVIRON_DATA.get(_WITNESS_KEY) if _ENVIRON_DATA is not None else \
        os.environ.get("S2SGRAD_WITNESS")
    known = _MODE_OF.get(raw)
    if known is None:
        value = (raw.decode() if isinstance(raw, bytes) else raw or "first").strip().lower()
        known = _MODE_OF[raw] = "off" if value in ("0", "false", "no", "off") else \
            "always" if value in ("always", "2") else "first"
    return known


# The variable read where each vjp(..., jit=True) call asks for the mode: on POSIX from
# the bytes mapping os.environ keeps in step with itself (os.environ.get of a name that
# is not set costs a microsecond: it raises and catches a KeyError inside).
_ENVIRON_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None
_WITNESS_KEY = b"S2SGRAD_WITNESS"
_MODE_OF: dict = {}   # the variable's raw value -> its mode


def forward_mode_gap(fn: Callable, wrt: Tuple[int, ...]) -> Optional[str]:
    """Why the derivative witness cannot run for fn (forward mode refuses a
    construct in it), or None when it can."""
    try:
        compiler.compile_jvp(fn, tuple(wrt))
    except TransformError as exc:
        return exc.reason
    return None


# fn -> {wrt: {"value"/"derivative": why that witness did not run}}, weakly: the
# notes go with the function. (What passed is per compiled pair: `witnessed`.)
_NOTES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_NOTES_LOCK = threading.Lock()


def notes_for(fn: Callable, wrt: Tuple[int, ...]) -> Dict[str, str]:
    """Where the witnesses of fn (for these positions) note why they did not run."""
    with _NOTES_LOCK:
        try:
            per_fn = _NOTES.setdefault(fn, {})
        except TypeError:   # not weakly referable: notes kept nowhere
            return {}
        return per_fn.setdefault(tuple(wrt), {})


def report(fn: Callable, wrt: Tuple[int, ...]) -> List[str]:
    """One line per witness: whether it ran on fn's gradient, or why it could not."""
    notes = notes_for(fn, wrt)
    lines = []
    for which in ("value", "derivative"):
        reason = notes.get(which)
        scope = notes.get(f"{which}_scope")
        lines.append(f"{which} witness: not run ({reason})" if reason else
                     f"{which} witness: passed" + (f" ({scope})" if scope else ""))
    return lines


def signature(args: Any, kwargs: Dict[str, Any]) -> tuple:
    """Structure, shapes and dtypes of a call's arguments (not their values). Asked
    on every call: arrays and Python numbers alone, the common call, take a short way."""
    if not kwargs:
        fast: list = [_FAST]
        for value in args:
            t = type(value)
            if t is np.ndarray:
                fast.append((value.shape, value.dtype))
            elif t is float or t is int:
                fast.append(t)
            else:
                break
        else:
            return tuple(fast)

    def kind(value):
        if isinstance(value, np.ndarray):
            return ("a", value.shape, value.dtype.str)
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(kind(v) for v in value))
        if isinstance(value, dict):
            return ("d", tuple((k, kind(v)) for k, v in value.items()))
        if isinstance(value, (bool, int, float, complex, np.generic)):
            return (type(value).__name__,)
        return ("o", type(value).__qualname__)
    return kind(tuple(args)), kind(dict(kwargs))


_FAST = object()   # (marks signature's short form: no long form starts with it)


@dataclasses.dataclass
class _Pending:
    """Residuals of a witnessed forward, with what the first adjoint call compares:
    the direction u and the tangent the forward-mode code gave for it."""

    residuals: Any
    u: Tuple[Any, ...] = ()
    tangent: Any = None
    args: Tuple[Any, ...] = ()
    kind: Optional[tuple] = None
    size: int = 8


_VOUCHED = threading.local()   # .on: this thread's calls are compared by their caller


class vouched_for:
    """Within it, a witnessed pair runs without its witnesses, and counts its calls'
    argument kinds as checked: the caller compares the results with those of a
    witnessed run of the same call (jit=True's first call given lists, tuples or
    dicts, whose pair is checked against the NumPy backend's)."""

    def __enter__(self):
        self.before = getattr(_VOUCHED, "on", False)
        _VOUCHED.on = True

    def __exit__(self, *exc):
        _VOUCHED.on = self.before


def plain_residuals(residuals: Any) -> Any:
    """The generated forward's residuals, from what a witnessed forward returned (which
    holds them while the first adjoint call has a comparison to make)."""
    return residuals.residuals if type(residuals) is _Pending else residuals


def witnessed_pair(compiled: Any, fn: Callable, chosen: Optional[object] = None,
                   discard: Optional[Callable[[Any], None]] = None) -> Any:
    """`compiled` itself (witness off), or a copy that runs the witnesses on the first
    call per argument kind (every call in mode `always`): the value witness in the
    forward, the derivative witness where the caller first runs the adjoint on those
    residuals (its cotangent is the v of the dot-product test, so no adjoint runs
    twice). `discard` removes a failed pair from the caches."""
    how = mode(chosen)
    if how == "off":
        return compiled
    forward, adjoint = compiled.forward, compiled.adjoint
    checked, notes = compiled.witnessed, notes_for(fn, compiled.wrt)
    name = getattr(fn, "__qualname__", None) or compiled.name

    def fail(error: WitnessError):
        if discard is not None:
            discard(compiled)
        raise error

    def witnessed_forward(*args, **kwargs):
        kind = signature(args, kwargs) if how == "first" else None
        if kind is not None and kind in checked:
            return forward(*args, **kwargs)
        if getattr(_VOUCHED, "on", False):
            if kind is not None:
                checked.add(kind)
            return forward(*args, **kwargs)
        copies = (fresh_copy(args), fresh_copy(kwargs)), (fresh_copy(args), fresh_copy(kwargs))
        out, residuals = forward(*args, **kwargs)
        try:
            pending = _value_and_tangent(compiled, fn, name, copies, out, notes)
        except WitnessError as error:
            fail(error)
        if pending is None:   # nothing left for the adjoint to compare
            if kind is not None:
                checked.add(kind)
            return out, residuals
        pending.residuals, pending.kind = residuals, kind
        return out, pending

    def witnessed_adjoint(residuals, cotangent):
        if type(residuals) is not _Pending:
            return adjoint(residuals, cotangent)
        pending = residuals
        grads = adjoint(pending.residuals, cotangent)
        if pending.u:
            try:
                _compare(compiled.wrt, pending, cotangent, grads, name,
                         getattr(compiled, "derivative_tolerance", lambda: None)())
            except WitnessError as error:
                fail(error)
            pending.u = ()   # (a pullback run again is not compared again)
            if pending.kind is not None:
                checked.add(pending.kind)
        return grads
    return dataclasses.replace(compiled, forward=witnessed_forward, adjoint=witnessed_adjoint)


def _value_and_tangent(compiled: Any, fn: Callable, name: str, copies, out: Any,
                       notes: Dict[str, str]) -> Optional[_Pending]:
    """The value witness; then the forward-mode tangent of a random direction, for
    the derivative witness the first adjoint call completes (None: nothing to do)."""
    (user_args, user_kwargs), (args, kwargs) = copies
    try:
        expected = fn(*user_args, **user_kwargs)
    except Exception as exc:  # noqa: BLE001 - not for the witness to report
        notes["value"] = notes["derivative"] = f"the function raised {type(exc).__name__}"
        return None
    if not _agree(out, expected, _VALUE_RTOL):
        again = fn(*fresh_copy(args), **fresh_copy(kwargs))
        if not _agree(expected, again, _VALUE_RTOL):
            notes["value"] = notes["derivative"] = \
                "the function returns other values on each call (random numbers?)"
            return None
        raise WitnessError(
            f"s2sgrad self-check failed for {name}: the value witness found the generated "
            f"forward's output different from {name}'s own ({_difference(out, expected)}). "
            f"The code s2sgrad differentiated is not the code that runs (a source file "
            f"edited after import, a decorator, a rebound callee?); no gradient was "
            f"returned. If the source is current, please report this as an s2sgrad bug.")
    wrt = tuple(compiled.wrt)
    if any(i >= len(args) for i in wrt) or _random_like(out, np.random.default_rng(0)) is None:
        return None
    if any(holds_complex(a) for a in args) or any(holds_complex(a) for a in kwargs.values()):
        notes["derivative"] = "complex arguments (forward mode takes real values only)"
        return None
    rng = np.random.default_rng(int(hashlib.sha256(repr(signature(args, kwargs)).encode())
                                    .hexdigest()[:8], 16))
    u = tuple(_random_like(args[i], rng) for i in wrt)
    if all(x is None for x in u):
        return None
    try:
        code = compiler.compile_jvp(fn, wrt)
    except TransformError as exc:
        notes["derivative"] = f"forward mode refuses it: {exc.reason}"
        return None
    derived = code.transposed_rules()
    if derived:   # (their JVP is their VJP: for those, the two transforms agree by making)
        notes["derivative_scope"] = f"not of {', '.join(derived)}, whose JVP is derived " \
            f"from its VJP"
    tangents = tuple(_zeros_where_none(t, args[i]) for t, i in zip(u, wrt))
    try:
        # (on NumPy numbers where Python's arithmetic on floats raised or turned
        # complex: the tangent of log x at x = 0.0, of x ** 1.5 at x < 0)
        tangent = numpy_faithful_call(lambda a, t, k: code.call(a, t, k)[1],
                                      (list(args), tangents, kwargs))
    except (TransformError, NotImplementedError) as exc:
        notes["derivative"] = f"forward mode refuses it: {exc}"
        return None
    size = max(_itemsize(out), min(_itemsize(args[i]) for i in wrt))
    return _Pending(None, u, tangent, tuple(args[i] for i in wrt), size=size)


def _compare(wrt, pending: _Pending, cotangent: Any, grads: Any, name: str,
             approximate: Optional[float] = None) -> None:
    """The dot-product test: <adjoint(v), u> against <v, tangent(u)>, to rounding, or
    to `approximate` (relative) where a rule's derivatives are a numerical method's."""
    grads = (grads,) if len(wrt) == 1 else tuple(grads)
    grads = tuple(finalize(g, a) for g, a in zip(grads, pending.args))
    reverse, scale_r = _inner(grads, pending.u)
    forward_dot, scale_f = _inner(cotangent, pending.tangent)
    if not (np.isfinite(reverse) and np.isfinite(forward_dot)):
        return   # an infinite slope somewhere (sqrt at 0): nothing to compare
    # Relative to the terms summed, and, for derivatives that cancel to 0 (the sum of
    # y - mean(y)), to the size of the directions: rounding leaves ~1e-16 of it.
    floor = _DOT_FLOOR.get(pending.size, 1e-12) * max(1.0, _norm(pending.u) *
                                                      _norm(cotangent))
    rtol = max(_DOT_RTOL.get(pending.size, 1e-6), approximate or 0.0)
    tolerance = rtol * (scale_r + scale_f) + floor
    if abs(reverse - forward_dot) > tolerance:
        raise WitnessError(
            f"s2sgrad self-check failed for {name}: the derivative witness found reverse "
            f"and forward mode disagreeing: <gradient, u> = {reverse:.10g} but <v, "
            f"tangent(u)> = {forward_dot:.10g} for a random direction u (difference "
            f"{abs(reverse - forward_dot):.3g}, allowed {tolerance:.3g}). One of the two "
            f"generated derivatives is wrong; no gradient was returned. Please report this "
            f"as an s2sgrad bug, with the function's source.")


def _random_like(value: Any, rng) -> Any:
    """A random value of value's structure for its float leaves (None elsewhere)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "f":
            return None
        return rng.standard_normal(value.shape).astype(value.dtype)
    if isinstance(value, (float, np.floating)) and not isinstance(value, bool):
        return float(rng.standard_normal())
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_random_like(v, rng) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_random_like(v, rng) for v in value)
    if isinstance(value, dict):
        return {k: _random_like(v, rng) for k, v in value.items()}
    return None


def _zeros_where_none(tangent: Any, like: Any) -> Any:
    """A tangent of like's structure, the zero tangent where like has no float leaf."""
    if isinstance(like, (list, tuple)) and isinstance(tangent, (list, tuple)):
        items = [_zeros_where_none(t, x) for t, x in zip(tangent, like)]
        return type(like)(*items) if hasattr(like, "_fields") else type(like)(items)
    if isinstance(like, dict) and isinstance(tangent, dict):
        return {k: _zeros_where_none(tangent[k], x) for k, x in like.items()}
    return zero_tangent(like) if tangent is None else tangent


def _inner(a: Any, b: Any) -> Tuple[float, float]:
    """(sum of a * b over matching float leaves, sum of |a * b|) as Python floats."""
    if a is None or b is None:
        return 0.0, 0.0
    if isinstance(a, dict) and isinstance(b, dict):
        parts = [_inner(a[k], b[k]) for k in a if k in b]
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        parts = [_inner(x, y) for x, y in zip(a, b)]
    elif isinstance(a, (list, tuple, dict)) or isinstance(b, (list, tuple, dict)):
        return 0.0, 0.0   # a symbolic zero against a structure
    else:
        x = np.asarray(a, dtype=np.float64)
        y = np.asarray(b, dtype=np.float64)
        product = x * y
        return float(np.sum(product)), float(np.sum(np.abs(product)))
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def _norm(value: Any) -> float:
    """The 2-norm of a structure's float leaves."""
    return float(np.sqrt(_inner(value, value)[0]))


def _itemsize(value: Any) -> int:
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return value.dtype.itemsize
    if isinstance(value, (list, tuple)):
        return max((_itemsize(v) for v in value), default=8)
    if isinstance(value, dict):
        return max((_itemsize(v) for v in value.values()), default=8)
    return 8


def _agree(a: Any, b: Any, rtols: Dict[int, float]) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_agree(a[k], b[k], rtols) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_agree(x, y, rtols) for x, y in zip(a, b))
    try:
        x, y = np.asarray(a), np.asarray(b)
    except Exception:  # noqa: BLE001 - not numeric: equality decides
        return a is b or a == b
    if x.dtype.kind not in "biufc" or y.dtype.kind not in "biufc":
        try:
            return bool(a is b or a == b)
        except Exception:  # noqa: BLE001 - an object without a truth value
            return True
    if x.shape != y.shape:
        return False
    rtol = rtols.get(max(x.dtype.itemsize if x.dtype.kind == "f" else 8,
                         y.dtype.itemsize if y.dtype.kind == "f" else 8) if
                     x.dtype.kind == "f" or y.dtype.kind == "f" else 8, 1e-9)
    finite = np.isfinite(y) if y.dtype.kind in "fc" else np.ones(y.shape, bool)
    scale = float(np.max(np.abs(y[finite]), initial=0.0)) if y.size else 0.0
    return bool(np.allclose(x, y, rtol=rtol, atol=rtol * scale + 1e-300, equal_nan=True))


def _difference(a: Any, b: Any) -> str:
    try:
        x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if x.shape == y.shape:
            return f"largest difference {float(np.nanmax(np.abs(x - y))):.3g}"
        return f"shapes {x.shape} and {y.shape}"
    except Exception:  # noqa: BLE001 - structures
        return f"{type(a).__name__} against {type(b).__name__}"
