"""Optional backends that run the generated forward/adjoint another way.

`grad(f, jit=True)`, `value_and_grad(f, jit=True)` and `vjp(f, *args,
jit=True)` run the generated code compiled by numba in nopython mode (the
extra `jit`: `pip install 's2sgrad[jit]'`). The NumPy code s2sgrad generates
is rewritten into numba's subset (`numba_rewrite`), with numba versions of
the helpers it calls (`numba_helpers`); `numba_backend` compiles, calls and
falls back. When numba is missing or cannot compile a function, the NumPy
backend runs and one `JitWarning` per function says why.

Nothing here imports numba until a jit=True function is first called.
"""
from __future__ import annotations

from typing import Any, Callable, Tuple

from ..arguments import check_args, check_cotangent, finalize, leaves_of, normalize_wrt, pack, seed
from .numba_backend import JitWarning, reset, state_for

__all__ = ["JitWarning", "jit_value_and_grad", "jit_vjp", "jit_source", "reset"]


def jit_value_and_grad(f: Callable, positions: Tuple[int, ...], single: bool) -> Callable:
    """The body of value_and_grad(f, wrt, jit=True)."""
    states: list = []

    def value_and_grad_f(*args, **kwargs):
        check_args(f, args, positions)
        if not states:
            states.append(state_for(f, positions))
        elif states[0].compiled is not None and not states[0].compiled.current():
            states[0] = state_for(f, positions)  # a name it was built for was rebound
        out, grads = states[0].value_and_grad(args, kwargs)
        seed(out)                       # a non-scalar output: the API's ValueError
        grads = pack(grads, positions)
        grads = tuple(finalize(g, args[i]) for g, i in zip(grads, positions))
        return out, (grads[0] if single else grads)
    return value_and_grad_f


def jit_vjp(f: Callable, args: tuple, positions: Tuple[int, ...], single: bool):
    """The body of vjp(f, *args, wrt, jit=True) after the arguments are checked."""
    out, adjoint = state_for(f, positions).vjp(args)

    def pullback(v):
        check_cotangent(v, out)
        grads = pack(adjoint(v), positions)
        grads = tuple(finalize(g, args[i], avoid=leaves_of(v)) for g, i in zip(grads, positions))
        return grads[0] if single else grads
    return out, pullback


def jit_source(f: Callable, *args: Any, wrt=0, **kwargs) -> str:
    """The numba-subset code jit=True compiles for f at these arguments' types."""
    positions, _ = normalize_wrt(wrt, len(args))
    return state_for(f, positions).source(args, kwargs)
