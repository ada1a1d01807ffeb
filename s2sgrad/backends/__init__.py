"""Optional backends that run the generated forward/adjoint another way.

`grad(f, jit=True)`, `value_and_grad(f, jit=True)` and `vjp(f, *args,
jit=True)` run the generated code compiled by numba in nopython mode (the
extra `jit`: `pip install 's2sgrad[jit]'`). The NumPy code s2sgrad generates
is rewritten into numba's subset (`numba_rewrite`), with numba versions of
the helpers it calls (`numba_helpers`); `numba_variants` builds the numba
code of one type signature, `numba_load` imports numba and keeps that code on
disk, and `numba_backend` decides what each call runs and falls back. When
numba is missing or cannot compile a function, the NumPy backend runs and
one `JitWarning` per function says why. numba compiles in a worker process
(`numba_worker`) while the NumPy backend runs the calls (`jit_wait` waits for
it; `S2SGRAD_JIT_BACKGROUND=0` compiles at the first call).

Nothing here imports numba until a jit=True function is first called.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from ..arguments import check_args, check_cotangent, finalize, leaves_of, normalize_wrt, pack, seed
from ..runtime.arrays import holds_complex
from .jit_policy import JitPlan
from .numba_backend import JitWarning, known_state, reset, state_for, wait

__all__ = ["JitPlan", "JitWarning", "jit_plan", "jit_rule", "jit_value_and_grad", "jit_vjp",
           "jit_source", "jit_wait", "numpy_runs_vjp", "reset"]


def jit_value_and_grad(f: Callable, positions: Tuple[int, ...], single: bool,
                       numpy_path: Callable) -> Callable:
    """The body of value_and_grad(f, wrt, jit=True); `numpy_path` (the NumPy
    backend's) takes the calls given complex values (the numba pair is not
    specialised to them: see s2sgrad.arguments.complex_parameters)."""
    states: list = []

    def value_and_grad_f(*args, **kwargs):
        if any(holds_complex(a) for a in args) or \
                any(holds_complex(a) for a in kwargs.values()):
            return numpy_path(*args, **kwargs)
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


def numpy_runs_vjp(f: Callable, positions: Tuple[int, ...]) -> bool:
    """Whether every vjp(f, ..., jit=True) call is known to run the NumPy backend (the
    plan leaves them all to NumPy, or numba cannot run f and has said so): the API
    then takes its own NumPy path, without the backend's per-call work."""
    state = known_state(f, positions)
    return state is not None and state.compiled is not None and (
        state.disabled is not None and state.warned() or
        state.disabled is None and not state.vjp_size_limit)


def jit_source(f: Callable, *args: Any, wrt=0, **kwargs) -> str:
    """The numba-subset code jit=True compiles for f at these arguments' types."""
    positions, _ = normalize_wrt(wrt, len(args))
    return state_for(f, positions).source(args, kwargs)


def jit_rule(f: Callable, wrt=0) -> Tuple[str, bool]:
    """How jit=True decides for f, in words (loops, matrix products, the size limit),
    and whether the size of the call's arrays decides (see jit_plan for a call)."""
    positions, _ = normalize_wrt(wrt, None, f=f)
    return state_for(f, positions).rule()


def jit_plan(f: Callable, *args: Any, wrt=0, vjp: bool = False, **kwargs) -> JitPlan:
    """What jit=True does with a call of f on these arguments: `.compile` (numba, or the
    NumPy backend) and `.reason` (the facts it decided on: loops, matrix products, the
    size of the largest array). vjp=True: for `s2sgrad.vjp(f, *args, jit=True)`, else
    for grad and value_and_grad."""
    positions, _ = normalize_wrt(wrt, len(args))
    return state_for(f, positions).plan(args, kwargs, vjp)


def jit_wait(f: Optional[Callable] = None, timeout: Optional[float] = None) -> bool:
    """Wait until numba has compiled what the calls of f so far asked for (every
    function's when f is None), so that the next call runs the compiled code; give
    the JitWarning of a compile that failed. False if the timeout (seconds) came
    first. Without it, calls run the NumPy backend while numba compiles."""
    return wait(f, timeout)
