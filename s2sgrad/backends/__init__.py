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

from typing import Any, Callable, Dict, Optional, Tuple

from ..arguments import (
    call_kind,
    check_cotangent,
    finalize,
    finalized,
    leaf_positions,
    leaves_of,
    normalize_wrt,
    pack,
    seed,
    structured,
)
from ..compiler import all_hold, flat_bindings
from ..compiler.aggregates import flattened, leaves, through_view
from ..introspect import user_instance
from ..runtime.arrays import holds_complex
from ..witness import vouched_for
from .jit_policy import JitPlan
from .numba_backend import (
    STRUCTURED,
    JitWarning,
    known_state,
    mismatch,
    numpy_only,
    plan_of,
    reset,
    rule_of,
    source_of,
    state_for,
    wait,
)

__all__ = ["JitPlan", "JitWarning", "jit_plan", "jit_rule", "jit_value_and_grad", "jit_vjp",
           "jit_source", "jit_wait", "numpy_runs_vjp", "pair_holds", "reset", "structured_vjp"]


def jit_value_and_grad(f: Callable, positions: Tuple[int, ...], single: bool,
                       numpy_path: Callable, witness: Any = None) -> Callable:
    """The body of value_and_grad(f, wrt, jit=True); `numpy_path` (the NumPy
    backend's) takes the calls given complex values (the numba pair is not
    specialised to them: see s2sgrad.arguments.complex_parameters), and those given
    lists, tuples or dicts where jit=True's pair is not theirs (see pair_holds).
    `witness`: the mode of the witnesses on the NumPy runs of jit=True's pair."""
    states: list = []
    verdicts: Dict[tuple, bool] = {}   # structured call's leaves -> jit's pair holds
    checked: list = []                 # [(a state's pair, its bindings flattened)]
    views: Dict[Any, Any] = {}         # f written over a structure's arrays -> its jit
    view_maker = _jit_view(witness, numpy_path, positions, single)

    def value_and_grad_f(*args, **kwargs):
        if states and numpy_only(states[0]) and not states[0].discarded:
            return numpy_path(*args, **kwargs)    # without the backend's per-call work
        # (checks the arguments; floats and real arrays alone need no closer look)
        plain = call_kind(f, args, positions)[1] is None and not kwargs
        if not plain and (any(holds_complex(a) for a in args) or
                          any(holds_complex(a) for a in kwargs.values()) or
                          any(user_instance(a) for a in args)):
            return numpy_path(*args, **kwargs)   # (an instance: the API's pair is made for it)
        if not plain and not kwargs and structured(args, kwargs):
            through = through_view(f, positions, single, args, views, view_maker, finalize)
            if through is not None:
                return through
        pattern = held = None
        if not plain and structured(args, kwargs):
            pattern = (leaf_positions(args), tuple(sorted(kwargs)))
            held = verdicts.get(pattern)
            if held is False:
                return numpy_path(*args, **kwargs)
            if held is None and pair_holds(f, positions, args, kwargs, witness):
                verdicts[pattern] = held = True
        if not states:
            states.append(state_for(f, positions, witness))
        elif states[0].discarded or not _still_current(states[0], checked):
            states[0] = state_for(f, positions, witness)  # a name it was bound to changed
        if held is None and pattern is not None:
            return _verified(states[0], verdicts, pattern, single, positions, numpy_path,
                             args, kwargs)
        return _jit_call(states[0], single, positions, args, kwargs)
    return value_and_grad_f


def _jit_view(witness: Any, numpy_path: Callable, positions: Tuple[int, ...], single: bool):
    """jit=True's value_and_grad of a view over a structure's arrays (aggregates.Flat);
    its NumPy path is the NumPy backend's, given the structures."""
    def inner_for(flat, inner_positions: Tuple[int, ...]) -> Callable:
        def numpy_leaves(*values):
            out, grads = numpy_path(*flat.rebuilt(values))
            grads = (grads,) if single else grads
            return out, tuple(x for g, p in zip(grads, positions)
                              for x in leaves(g, flat.specs[p]))
        return jit_value_and_grad(flat.fn, inner_positions, False, numpy_leaves, witness)
    return inner_for


def _still_current(state, checked: list) -> bool:
    """state's pair is still what its names are bound to (compiled.current()), checked
    as the NumPy backend's calls check theirs: its bindings flattened once (`checked`
    holds them for the pair last seen), then one loop per call."""
    compiled = state.compiled
    if compiled is None:
        return True
    if checked and checked[0][0] is compiled and all_hold(checked[0][1]):
        return True
    if not compiled.current():
        return False
    checked[:] = [(compiled, flat_bindings(compiled))]
    return True


def _jit_call(state, single: bool, positions: Tuple[int, ...], args: tuple, kwargs: dict):
    out, grads = state.value_and_grad(args, kwargs)
    seed(out)                       # a non-scalar output: the API's ValueError
    return finalized(out, grads, args, positions, single)


def _verified(state, verdicts: dict, pattern: tuple, single: bool,
              positions: Tuple[int, ...], numpy_path: Callable, args: tuple, kwargs: dict):
    """The first call given lists, tuples or dicts in this pattern, where jit=True's pair
    (compiled for arrays and numbers) is not the text of theirs: its result is compared
    with the NumPy backend's (on copies of the arguments); the same values, and the
    pattern's later calls run jit=True's pair; else they run the NumPy backend, and
    the JitWarning says why (a list's cotangent accumulated with `+=` concatenates)."""
    from .numba_variants import copies
    want = numpy_path(*copies(args), **kwargs)   # (the user's error, if any, from here)
    try:   # (compared with the witnessed NumPy run: no witness of its own)
        with vouched_for():
            got = _jit_call(state, single, positions, args, kwargs)
    except Exception:  # noqa: BLE001 - the pair is not this call's: NumPy's result
        got = None
    verdicts[pattern] = got is not None and mismatch(got, want) is None
    if not verdicts[pattern]:
        state.warn(STRUCTURED)
        return want
    return got


def jit_vjp(f: Callable, args: tuple, positions: Tuple[int, ...], single: bool,
            witness: Any = None):
    """The body of vjp(f, *args, wrt, jit=True) after the arguments are checked."""
    out, adjoint = state_for(f, positions, witness).vjp(args)

    def pullback(v):
        check_cotangent(v, out)
        grads = pack(adjoint(v), positions)
        grads = tuple(finalize(g, args[i], avoid=leaves_of(v)) for g, i in zip(grads, positions))
        return grads[0] if single else grads
    return out, pullback


def pair_holds(f: Callable, positions: Tuple[int, ...], args: tuple,
               kwargs: Optional[dict] = None, witness: Any = None) -> bool:
    """Whether jit=True's pair, compiled for arrays and numbers (whose cotangents add
    with `+`), is the text of the pair compiled for what a call given lists, tuples or
    dicts is given (where a structure's cotangent accumulates it is not:
    `params_bar += part` would concatenate lists)."""
    from ..compiler import compile_function
    state = state_for(f, positions, witness)
    state.ensure_compiled()     # (not its layout for numba: a thread reads that)
    if state.compiled is None or any(structured((v,)) for v in (kwargs or {}).values()):
        return False
    leaves = set(leaf_positions(args))
    count = max(len(args), len(state.signature.parameters) if state.signature else 0)
    compiled = compile_function(f, positions, leaves=tuple(
        i for i in range(count) if i >= len(args) or i in leaves))
    return compiled.module_source == state.compiled.module_source


def structured_vjp(f: Callable, positions: Tuple[int, ...], args: tuple,
                   witness: Any = None) -> bool:
    """Whether vjp(f, ..., jit=True) given lists, tuples or dicts runs the NumPy backend
    (jit=True's pair is not theirs: see pair_holds); the JitWarning says so. An
    instance of the user's class among them runs the NumPy backend too, silently
    (the API's pair is made for it)."""
    if any(user_instance(a) for a in args):
        return True
    if pair_holds(f, positions, args, witness=witness):
        return False
    state_for(f, positions, witness).warn(STRUCTURED)
    return True


def numpy_runs_vjp(f: Callable, positions: Tuple[int, ...], witness: Any = None) -> bool:
    """Whether every vjp(f, ..., jit=True) call is known to run the NumPy backend (the
    plan leaves them all to NumPy, or numba cannot run f and has said so): the API
    then takes its own NumPy path, without the backend's per-call work."""
    return numpy_only(known_state(f, positions, witness), vjp=True)


def jit_source(f: Callable, *args: Any, wrt=0, **kwargs) -> str:
    """The numba-subset code jit=True compiles for f at these arguments' types."""
    positions, _ = normalize_wrt(wrt, len(args))
    f, positions, args = _viewed(f, positions, args, kwargs)
    return source_of(state_for(f, positions), args, kwargs)


def jit_rule(f: Callable, wrt=0) -> Tuple[str, bool]:
    """How jit=True decides for f, in words (loops, matrix products, the size limit),
    and whether the size of the call's arrays decides (see jit_plan for a call)."""
    positions, _ = normalize_wrt(wrt, None, f=f)
    return rule_of(state_for(f, positions))


def jit_plan(f: Callable, *args: Any, wrt=0, vjp: bool = False, **kwargs) -> JitPlan:
    """What jit=True does with a call of f on these arguments: `.compile` (numba, or the
    NumPy backend) and `.reason` (the facts it decided on: loops, matrix products, the
    size of the largest array). vjp=True: for `s2sgrad.vjp(f, *args, jit=True)`, else
    for grad and value_and_grad."""
    positions, _ = normalize_wrt(wrt, len(args))
    f, positions, args = _viewed(f, positions, args, kwargs)
    return plan_of(state_for(f, positions), args, kwargs, vjp)


def _viewed(f: Callable, positions: Tuple[int, ...], args: tuple, kwargs: dict) -> tuple:
    """(function, positions, arguments) jit=True runs for this call: f's view over the
    arrays of the lists, tuples and dicts given (compiler.aggregates), or f's own."""
    flat = None if kwargs or not structured(args) else flattened(f, args)
    if flat is None or not flat.positions(positions):
        return f, positions, args
    return flat.fn, flat.positions(positions), flat.arguments(args)


def jit_wait(f: Optional[Callable] = None, timeout: Optional[float] = None) -> bool:
    """Wait until numba has compiled what the calls of f so far asked for (every
    function's when f is None), so that the next call runs the compiled code; give
    the JitWarning of a compile that failed. False if the timeout (seconds) came
    first. Without it, calls run the NumPy backend while numba compiles."""
    return wait(f, timeout)
