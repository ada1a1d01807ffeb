"""Helpers of scipy.integrate.odeint's rules: the adjoint method and forward
sensitivities, which differentiate the user's dynamics with s2sgrad itself.

`odeint(func, y0, t, args)` solves dy/dt = func(y, t, *args). Its VJP integrates
the adjoint system backwards from the last time (as HIPS autograd's and the
neural-ODE papers' adjoint method do): with a = dL/dy,

    dy/dt = func(y, t, *args),   da/dt = -a . df/dy,   da_args/dt = -a . df/dargs,

adding each time's cotangent to `a` when the integration passes it and putting
y back on the forward solution there. Its JVP integrates the tangent alongside
(dy'/dt = df/dy . y' + df/dargs . args'). The VJP and JVP of `func` at each step
are s2sgrad's own (compiled once, cached), reached through `callbacks`, which
the API installs: the runtime sits below it.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

from .registry import new_helper as helper

_CALLBACKS: Dict[str, Callable] = {}


def install_callbacks(**fns: Callable) -> None:
    """The API's vjp and jvp (s2sgrad.vjp, s2sgrad.functional.jvp), for the helpers."""
    _CALLBACKS.update(fns)


def _solve(fn, y0, t, rtol, atol, mxstep):
    from scipy.integrate import odeint  # (imported: the user's call of odeint was SciPy's)
    return odeint(fn, y0, t, rtol=rtol, atol=atol, mxstep=mxstep)


class _Packing:
    """The dynamics' arrays as one flat state vector, as odeint integrates it."""

    def __init__(self, shapes: Sequence[Tuple[int, ...]]):
        self.shapes = [tuple(s) for s in shapes]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.ends = np.cumsum(self.sizes)

    def pack(self, parts) -> np.ndarray:
        return np.concatenate([np.ravel(np.asarray(p, dtype=float)) for p in parts]) \
            if parts else np.zeros(0)

    def unpack(self, flat) -> List[np.ndarray]:
        starts = np.concatenate([[0], self.ends[:-1]])
        return [np.reshape(flat[a:b], s) for a, b, s in zip(starts, self.ends, self.shapes)]


def _check(full_output) -> None:
    if full_output:
        raise NotImplementedError("s2sgrad differentiates scipy.integrate.odeint without "
                                  "full_output: call it with full_output=0")


def _call_order(tfirst: bool, y, t, args) -> tuple:
    return (t, y, *args) if tfirst else (y, t, *args)


def _wrt(args, tfirst: bool) -> Tuple[int, ...]:
    """The positions of y and the args in a call of func (all but t's)."""
    return tuple(i for i in range(len(args) + 2) if i != (0 if tfirst else 1))


def _as_tuple(args) -> tuple:
    return tuple(args) if isinstance(args, (tuple, list)) else (args,)


@helper
def odeint_adjoint(g, ans, func, y0, t, args, rtol=None, atol=None, mxstep=0,
                   full_output=0, tfirst=False) -> Tuple[Any, Tuple[Any, ...]]:
    """(cotangent of y0, cotangents of args) of ans = odeint(func, y0, t, args)."""
    _check(full_output)
    args = _as_tuple(args)
    y0 = np.asarray(y0, dtype=float)
    ans = np.reshape(np.asarray(ans, dtype=float), (len(t),) + y0.shape)
    g = np.reshape(np.asarray(g, dtype=float), (len(t),) + y0.shape)
    state = _Packing([y0.shape, y0.shape] + [np.shape(p) for p in args])
    wrt = _wrt(args, tfirst)

    def backwards(flat, time):
        # [dy/dt, da/dt, da_args/dt] = [f, -a . df/dy, -a . df/dargs]
        y, a = state.unpack(flat)[:2]
        out, pullback = _CALLBACKS["vjp"](func, *_call_order(tfirst, y, time, args), wrt=wrt)
        grads = pullback(-a)
        return state.pack([out, *(grads if isinstance(grads, tuple) else (grads,))])

    a = g[-1]
    a_args = [np.zeros(np.shape(p)) for p in args]
    for i in range(len(t) - 1, 0, -1):
        flat = state.pack([ans[i], a, *a_args])
        flat = _solve(backwards, flat, np.array([t[i], t[i - 1]], dtype=float), rtol, atol,
                      mxstep)[-1]
        _, a, *a_args = state.unpack(flat)
        a = a + g[i - 1]
    return a, tuple(a_args)


@helper
def odeint_tangent(func, y0, t, args, y0_dot, args_dot, rtol=None, atol=None, mxstep=0,
                   full_output=0, tfirst=False):
    """The tangent of odeint(func, y0, t, args) for tangents y0_dot and args_dot (None
    for none): y and its tangent integrated together, dy'/dt = df/dy . y' + df/dargs .
    args'."""
    _check(full_output)
    args = _as_tuple(args)
    y0 = np.asarray(y0, dtype=float)
    args_dot = _as_tuple(args_dot) if args_dot is not None else (None,) * len(args)
    args_dot = tuple(np.zeros(np.shape(p)) if d is None else d
                     for p, d in zip(args, args_dot))
    y0_dot = np.zeros(y0.shape) if y0_dot is None else np.asarray(y0_dot, dtype=float)
    state = _Packing([y0.shape, y0.shape])

    def forwards(flat, time):
        y, y_dot = state.unpack(flat)
        inputs = _call_order(tfirst, y, time, args)
        tangents = _call_order(tfirst, y_dot, np.zeros(np.shape(time)), args_dot)
        out, out_dot = _CALLBACKS["jvp"](func, inputs, tangents)
        return state.pack([out, out_dot])

    solution = _solve(forwards, state.pack([y0, y0_dot]), np.asarray(t, dtype=float), rtol,
                      atol, mxstep)
    return np.reshape(solution[:, y0.size:], (len(t),) + y0.shape)
