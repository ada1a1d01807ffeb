"""The numba backend: run the generated forward/adjoint as machine code.

`JitFunction` holds, for one user function and one `wrt`, the NumPy pair the
compiler generated and the numba versions built from it, one per signature of
argument types (the rewrite's placeholders depend on the types, see
`numba_rewrite`). Each call:

1. binds the arguments (defaults applied) and reads the live globals;
2. finds the variant for the argument types, or builds it: one run of the
   NumPy forward (its residuals give the placeholder types), the rewrite,
   `exec`, `numba.njit`;
3. calls it. numba compiles on the first call of a type signature.

numba's compile takes a second or more. By default another process does it
(`numba_worker`), when the generated module is on disk: until it is done,
calls of that type signature run the NumPy backend; the call after it loads
the machine code from numba's cache, and its result is compared with the NumPy
backend's as any first compiled result is. What comes before the compile
(reading the pair's layout, importing numba: a quarter of a second, the
rewrite for the call's types, starting the worker) is done by a thread
behind the user's (`_build_behind`), from the NumPy run the call makes
anyway: a first call costs what the NumPy backend's first call costs. Its
warnings are given at the next call (or `jit_wait`), in the user's thread.
`S2SGRAD_JIT_BACKGROUND=0` does all of it at the first call, which waits;
`jit_wait` waits for the threads and the workers.

A grad call the plan leaves to NumPy for its size, of a function that loops,
may run outlined (`numba_outline`): its straight-line code on NumPy (a host
function run by Python), its loops in numba when the arrays they are given
are small (`_LoopRunner` decides per call). Such a variant is keyed apart
("loops"), and is checked, compiled by a worker and fallen back from as a
whole function is.

Whatever goes wrong falls back to the NumPy pair, never to a guess:
- numba is not installed, or the rewrite or numba's compiler rejects the code:
  the NumPy pair runs from then on (for that type signature), and one
  `JitWarning` per function says why (the first line of the error);
- the compiled code raises at run time: the NumPy pair runs the same call; if
  it raises too, that error propagates (the user's error, as without jit); if
  it succeeds, its result is returned, with a warning, since the two disagree.
"""
from __future__ import annotations

import inspect
import os
import sys
import threading
import time
import types
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..arguments import numpy_where_numbers_fail
from ..arguments import seed as seed_of
from ..witness import mode as witness_mode
from ..witness import plain_residuals, witnessed_pair
from . import jit_policy, numba_variants
from . import numba_load as load
from . import numba_rewrite as rw


class JitWarning(UserWarning):
    """The numba backend could not run a function; the NumPy backend ran instead."""


_STATES: Dict[tuple, "JitFunction"] = {}
_BY_FUNCTION: Dict[tuple, "JitFunction"] = {}   # (function, wrt) -> state: skips the key
_WARNED: set = set()            # functions a JitWarning was issued for
_LOCK = threading.RLock()
# the variants compiling in a worker
_WORKERS: List[Tuple["JitFunction", "numba_variants.Variant"]] = []
_MAX_WORKERS = max(2, os.cpu_count() or 2)   # each is a Python with numba (150 MB)
_INSTANCES: "weakref.WeakSet[JitFunction]" = weakref.WeakSet()   # for a forked child
_BUILDERS: List[Tuple["JitFunction", threading.Thread]] = []   # building behind the user
_BUILDING = threading.local()   # .state: the JitFunction this thread builds behind the user


def _after_fork_in_child() -> None:
    """A forked child has only the thread that called fork: locks another thread
    held are made anew (else the child's next jit call hangs), and the parent's
    worker processes are not the child's to wait for (a variant they compiled
    loads from numba's disk cache, or compiles again)."""
    for lock in [_LOCK] + [state.lock for state in list(_INSTANCES)]:
        if not lock._is_owned():
            lock._at_fork_reinit()
    for _, v in _WORKERS:
        v.worker = None
        v.sent.clear()
    _WORKERS.clear()
    for state, _ in _BUILDERS:   # the threads are the parent's: the child builds at a call
        state.behind = None
    _BUILDERS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def compiles_behind() -> bool:
    """S2SGRAD_JIT_BACKGROUND: numba compiles in a worker process while the NumPy
    backend runs the calls (the default); 0: at the first call, which waits."""
    return os.environ.get("S2SGRAD_JIT_BACKGROUND", "1") != "0"


def wait(fn: Optional[Callable] = None, timeout: Optional[float] = None) -> bool:
    """Wait for the workers compiling fn's variants (every wrt), or every function's,
    and take their outcomes (a JitWarning for code numba rejected). Whether all of
    them finished (False: the timeout came first)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    finished = True
    with _LOCK:
        builders = [(state, t) for state, t in _BUILDERS
                    if fn is None or _function_key(state.fn) == _function_key(fn)]
    for state, thread in builders:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            finished = False
        else:
            state.settle()
    with _LOCK:
        jobs = [(state, v) for state, v in _WORKERS
                if fn is None or _function_key(state.fn) == _function_key(fn)]
    for state, v in jobs:
        worker = v.worker
        if worker is None:
            continue
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if worker.wait(left):
            still_compiling(state, v)
        else:
            finished = False
    return finished


def reset() -> None:
    """Forget every compiled variant (tests; also after s2sgrad.compiler.clear_cache)."""
    with _LOCK:
        builders = [t for _, t in _BUILDERS]
    for thread in builders:     # (a second at most: nothing waits in them)
        thread.join()
    with _LOCK:
        _BUILDERS.clear()
        for _, v in _WORKERS:
            if v.worker is not None:
                v.worker.stop()
        _WORKERS.clear()
        _STATES.clear()
        _BY_FUNCTION.clear()
        load.forget()
        _WARNED.clear()


def still_compiling(state: "JitFunction", v: numba_variants.Variant, kind: str = "",
                    call: tuple = (), live: tuple = (),
                    out: Any = numba_variants.UNSEEN) -> bool:
    """Whether a worker process is compiling v, so that this call runs the NumPy
    backend; given `kind` ("fused" or "vjp"), one is started when it can be.

    A worker's outcome is taken here, in the user's thread: code numba
    rejected fails the variant with a JitWarning (as at a call); a worker
    that crashed leaves the compile to this process.
    """
    worker = v.worker
    if worker is not None:
        if not worker.done():
            return True
        v.worker = None
        with _LOCK:
            if (state, v) in _WORKERS:
                _WORKERS.remove((state, v))
        status, why = worker.outcome()
        if status == "rejected":
            v.failed = why
            load.record_rejection(v.module, v.failed)
            state.warn(why)
            return True
    if not kind or kind in v.sent or not compiles_behind():
        return False
    v.sent.add(kind)
    with _LOCK:
        if sum(not w.worker.done() for _, w in _WORKERS if w.worker) >= _MAX_WORKERS:
            return False      # as many as there are cores: compiled at this call
    job = numba_variants.worker_job(state, v, kind, call, live, out)
    if job is None:
        return False
    from .numba_worker import Worker, cached
    if all(cached(f, sig) for f, (_, sig) in zip(v.functions(kind), job.signatures)):
        return False          # compiled by an earlier process: loaded at this call
    try:
        v.worker = Worker(job)
    except Exception:  # noqa: BLE001 - no process to start: compiled at this call
        return False
    with _LOCK:
        _WORKERS.append((state, v))
    return True


class _LoopRunner:
    """The call an outlined host makes between its straight-line code: numba's loops
    when the arrays given are small (and compiled), the NumPy loops otherwise."""

    __slots__ = ("state", "v", "compiled", "first")

    def __init__(self, state: "JitFunction", v: numba_variants.Variant):
        self.state, self.v = state, v
        self.compiled = False      # numba's loops ran in this call
        self.first = False         # ... for the first time: the call's result is checked

    def __call__(self, *args):
        v = self.v
        if v.failed is None and jit_policy.largest_array(args) < v.loops_limit:
            if v.check is None:
                self.compiled = True
                return v.loops(*args)
            if not still_compiling(self.state, v, "loops", args, ()) and v.failed is None:
                self.compiled = self.first = True
                return v.loops(*args)
        return v.numpy_loops(*args)


class _CompiledPullback:
    """The pullback a compiled vjp returns: numba's, its first result compared with
    the NumPy adjoint's (from `reference`, the residuals of a NumPy run), and
    NumPy's pullback from the first failure or disagreement on."""

    def __init__(self, state: "JitFunction", v: numba_variants.Variant, call: tuple,
                 live: tuple, reference: Optional[tuple]):
        self.state, self.v, self.call, self.live = state, v, call, live
        self.reference = reference
        self.numpy: Optional[Callable] = None

    def __call__(self, cot):
        if self.numpy is None:
            state, v, call = self.state, self.v, self.call
            try:
                grads = v.pullback(*call, *self.live, cot)[1]
                if self.reference is not None:   # the first pullback: numba compiled it
                    want = state.numpy.adjoint(self.reference, cot)
                    self.reference = None
                    problem = mismatch(grads, want)
                    if problem is not None:
                        v.failed = (f"the compiled gradient differs from the NumPy "
                                    f"backend's ({problem})")
                        state.warn(v.failed)
                        self.numpy = state.numpy_vjp(call)[1]
                        return want
                return grads
            except Exception as exc:  # noqa: BLE001
                if load.is_numba_error(exc):
                    state.fail(call, self.live, exc, v)
                else:
                    _, residuals = numba_variants.numpy_forward(state, call)
                    result = state.numpy.adjoint(residuals, cot)   # NumPy's error?
                    state.warn(f"the compiled pullback raised {load.first_line(exc)} "
                               f"where NumPy did not")
                    return result
                self.numpy = state.numpy_vjp(call)[1]
        return self.numpy(cot)


# Why a call given lists, tuples or dicts runs the NumPy backend where jit=True's pair,
# compiled for arrays and numbers (whose cotangents add with `+`), is not theirs.
STRUCTURED = ("an argument is a list, tuple or dict, whose cotangent this function's "
              "code for arrays would not accumulate right")


def _measured_to_numpy(state: "JitFunction", v: numba_variants.Variant,
                       largest: int) -> bool:
    """Whether the measurement (`jit_policy.Trial`) gives this grad call (its largest
    array this large) to NumPy: one of the trial's timed NumPy calls, or its verdict."""
    trial = v.trial
    if state.force == "always" or (trial.decided and trial.numpy_from is None):
        return False
    return not trial.runs_numba(largest)


def _numpy_timed(state: "JitFunction", v: numba_variants.Variant, values: tuple, args,
                 kwargs):
    """The NumPy backend's result of a grad call, timed while the trial measures."""
    started = time.perf_counter()
    result = state.numpy_value_and_grad(args, kwargs)
    if not v.trial.decided:
        _timed(state, v, False, started, values)
    return result


def _timed(state: "JitFunction", v: numba_variants.Variant, compiled: bool, started: float,
           values: tuple) -> None:
    """Record a timed call in v's trial; once it decides that numba loses everywhere
    (straight-line code), every grad call of the function runs NumPy, by the API's own
    path (`numpy_only`), and says why in jit_plan. `started` 0: the call was not timed
    from its start (nothing was measuring when it came in): from the next call on."""
    if not started:
        state.measuring = True
        return
    v.trial.record(compiled, time.perf_counter() - started, jit_policy.largest_array(values))
    if not v.trial.decided:
        return
    if v.trial.numpy_from == 0:
        state.measured = v.trial.plan(v.trial.largest)
        state.size_limit, state.ready = 0, {}
    state.measuring = any(not w.trial.decided for key, w in state.variants.items()
                          if key[-1:] != ("loops",) and w.fused is not None and
                          w.failed is None)


def _limit(state: "JitFunction", values: tuple, vjp: bool = False) -> float:
    """Calls of these values (arguments and live values) over smaller arrays go to
    numba (jit_policy.size_limit, for their dtypes)."""
    limit = state.vjp_size_limit if vjp else state.size_limit
    if state.facts.elementwise and limit == float("inf") and not state.force and \
            not jit_policy.float64_arrays(values):
        # elementwise code fuses on float64 arrays only
        limit = jit_policy.size_limit(state.facts, vjp=vjp, float64=False)
    return limit


_UNDECIDED = object()


def _ready_call(state: "JitFunction", entered: float, args: tuple, kwargs: dict):
    """grad's call of a variant whose first result was checked (`JitFunction.ready`,
    by the kinds of the values): one lookup and one size test instead of the whole
    decision (the backend's own work per call was 7 us, six times that of numba's
    code of a 5-element function); timed while its trial measures (from `entered`:
    this path's work is part of numba's cost). _UNDECIDED: the general path decides."""
    call = state.bind(args, kwargs)
    values = call + state.live_values() if state.live else call
    known = state.ready.get(_kinds(values))
    if known is None:
        return _UNDECIDED
    v, limit = known
    largest = jit_policy.largest_array(values)
    if v.failed is not None or not largest < limit:
        return _UNDECIDED
    if _measured_to_numpy(state, v, largest):
        return _numpy_timed(state, v, values, args, kwargs)
    try:
        result = v.fused(*values)
    except Exception as exc:  # noqa: BLE001 - decided as on the general path
        return _raised(state, exc, call, values[len(call):], args, kwargs, v)
    if not v.trial.decided and state.force != "always":
        _timed(state, v, True, entered, values)
    return result


def _raised(state: "JitFunction", exc: BaseException, call: tuple, live: tuple, args,
            kwargs, v: numba_variants.Variant):
    """grad's compiled call raised: numba's own error fails the variant (NumPy from
    now on, one warning); another is the NumPy backend's to raise, or it gives its
    value and a warning."""
    if load.is_numba_error(exc):
        state.fail(call, live, exc)
        if state._outlines(call, live):   # what numba could not take may be outside the loops
            return state._outlined(call, live, args, kwargs)
        return state.numpy_value_and_grad(args, kwargs)
    return state._numpy_after(exc, args, kwargs, v)


def _whole_failed(state: "JitFunction", call: tuple, live: tuple) -> Optional[str]:
    """Why numba could not take the whole function at these types (a call of the
    user's Python code, a helper with no numba version), or None."""
    v = state.variants.get(_variant_key(call, live, "fused"))
    return None if v is None else v.failed


def _first_result(state: "JitFunction", v: numba_variants.Variant, result, want):
    """A variant's first result is compared with the NumPy backend's, once.

    A disagreement (beyond rounding) means the rewrite or numba computed
    something else: the variant is dropped, NumPy's result returned, and a
    warning says so. Never a wrong value silently.
    """
    v.check = None
    problem = mismatch(result, want)
    if problem is None:
        return result
    v.failed = f"the compiled gradient differs from the NumPy backend's ({problem})"
    state.warn(v.failed)
    return want


def _numpy_then_build(state: "JitFunction", args: tuple, kwargs: dict, vjp: bool):
    """The NumPy backend's result of this call, and a thread that builds its variant
    behind the user's (from this call's NumPy run: the user's function runs once, in
    the user's thread). The thread's containers are copies: the adjoint pops stacks."""
    state.ensure_compiled()
    out, residuals = state.numpy.forward(*args, **kwargs)
    ran = (out, numba_variants.skeleton(plain_residuals(residuals)))
    if vjp:
        result = out, (lambda cot: state.numpy.adjoint(residuals, cot))
    else:
        result = out, state.numpy.adjoint(residuals, seed_of(out))
    thread = threading.Thread(target=_build_behind, args=(state, args, kwargs, ran, vjp),
                              name=f"s2sgrad-jit {getattr(state.fn, '__name__', '')}",
                              daemon=True)
    with _LOCK:
        state.behind = thread
        _BUILDERS.append((state, thread))
    thread.start()
    return result


def _build_behind(state: "JitFunction", args: tuple, kwargs: dict, ran: tuple,
                  vjp: bool) -> None:
    """What a first call of a variant needs before numba compiles it, in a thread
    behind the user's: the pair's layout, numba's import, the rewrite for the
    call's types, and a worker started (or, without one, a compile at the next
    call). Its warnings wait in `state.pending` for the user's next call."""
    _BUILDING.state = state
    try:
        state.ensure_prepared()
        if state.disabled is not None:
            state.warn(state.disabled)
            return
        if numpy_only(state, vjp):
            return
        call, live = state.bind(args, kwargs), state.live_values()
        need = _need_of(state, call, live, vjp)
        v = None if need is None else state.variant(call, live, need, ran)
        if v is not None and need != "loops":   # (loops: a worker at the host's call)
            still_compiling(state, v, need, call, live, out=ran[0])
            if v.worker is None:
                _compile_behind(state, v, need, call, live, ran[0])
    except Exception as exc:  # noqa: BLE001 - a bug here: NumPy from now on, and say so
        state.disabled = f"internal error of the numba backend: {load.first_line(exc)}"
        state.warn(state.disabled)
    finally:
        _BUILDING.state = None


def _need_of(state: "JitFunction", call: tuple, live: tuple, vjp: bool) -> Optional[str]:
    """The variant a call runs on numba ("vjp"; "fused": the whole function, "loops":
    its loops outlined), or None: NumPy runs it."""
    if vjp:
        return "vjp" if state.vjp_size_limit and not state.mutates and \
            state._compiles(call, live, vjp=True) else None
    if state._compiles(call, live) and _whole_failed(state, call, live) is None:
        return "fused"
    return "loops" if state._outlines(call, live) else None


def _compile_behind(state: "JitFunction", v: numba_variants.Variant, need: str,
                    call: tuple, live: tuple, out: Any) -> None:
    """numba's compile of v (or its load from numba's disk cache) in the thread behind
    the user's, when no worker took it: the user's calls run NumPy meanwhile, and
    the first compiled result is checked at the call as ever."""
    signatures = numba_variants.call_signatures(state, v, need, call, live, out)
    if signatures is None:
        return           # compiled at the call, where numba types the values itself
    try:
        for function, signature in signatures:
            function.compile(signature)
    except Exception as exc:  # noqa: BLE001 - numba's rejection fails v; else: at the call
        if load.is_numba_error(exc):
            state.fail(call, live, exc, v)


def _discard(state: "JitFunction", compiled) -> None:
    """A witness failed on state's pair: out of the compiler's caches and of this
    backend's, so that the next call compiles anew."""
    from .. import compiler
    compiler.discard(compiled)
    state.discarded = True
    with _LOCK:
        for table in (_STATES, _BY_FUNCTION):
            for key in [k for k, value in table.items() if value is state]:
                del table[key]


class JitFunction:
    """The numba backend for one function and one wrt."""

    def __init__(self, fn: Callable, positions: Tuple[int, ...], witness: str = "off"):
        self.fn = fn
        self.positions = positions
        self.witness = witness                    # the witness mode of its NumPy runs
        self.compiled = None                      # the generated pair, and as NumPy runs it:
        self.numpy = None                         # ... the witnesses on (s2sgrad.witness)
        self.discarded = False                    # a witness failed: the next call compiles
        self.pair: Optional[rw.Pair] = None
        self.disabled: Optional[str] = None   # why the backend cannot run this function
        self.variants: Dict[tuple, numba_variants.Variant] = {}
        self.signature: Optional[inspect.Signature] = None
        self.nparams = 0
        self.live: List[numba_variants.Binding] = []
        self.constants: Dict[str, Any] = {}
        self.blas = False
        self.callees: Dict[str, Tuple["JitFunction", str]] = {}
        self.call_extra: Dict[str, List[Tuple[str, str]]] = {}
        self.split: Optional[tuple] = None      # (forward, adjoint, its Callee or None)
        self.facts = jit_policy.CodeFacts()       # loops and products: what jit_policy decides on
        self.force = jit_policy.forced()          # S2SGRAD_JIT_PLAN, read once
        self.size_limit: float = 0                # calls over smaller arrays are compiled
        self.measuring = False                    # a grad variant's Trial is timing calls
        self.ready: Dict[tuple, tuple] = {}       # kinds -> (variant, size limit): _ready_call
        self.measured: Optional[jit_policy.JitPlan] = None   # ... and left every call to NumPy
        self.vjp_size_limit: float = 0            # ... by vjp (see jit_policy.size_limit)
        self.building = False                     # split_functions: a recursive call?
        self.mutates = False
        self.outline: Optional[Tuple[Tuple[int, ...], float]] = None   # outline_facts
        self.split_calls: Optional[rw.Pair] = None                      # split_pair
        self.lock = threading.RLock()
        self.laid_out = False                     # _lay_out ran
        self.behind: Optional[threading.Thread] = None   # building behind the user's thread
        self.pending: list = []                   # ... its warnings: [(state, why)]
        _INSTANCES.add(self)

    # -- set-up ------------------------------------------------------------------
    def _compile(self) -> None:
        """Compile the NumPy pair: what the NumPy backend runs."""
        import inspect

        from ..compiler import compile_function
        try:   # numba runs on arrays and numbers: their cotangents add with `+`
            count = len(inspect.signature(self.fn).parameters)
        except (TypeError, ValueError):
            count = 0
        compiled = compile_function(self.fn, self.positions, leaves=tuple(range(count)))
        if self.disabled is None and not isinstance(compiled.forward, types.FunctionType):
            # A partial, bound method or callable object: its pair calls the function's
            # own with the bound arguments, a wrapper the rewrite does not read.
            self.disabled = f"{type(self.fn).__name__} entries run the NumPy backend"
        try:
            self.signature = inspect.signature(compiled.forward)
        except (TypeError, ValueError):
            self.signature = None
        # (complex arguments take the API's path: this pair's gradients are real)
        self.numpy = witnessed_pair(numpy_where_numbers_fail(compiled, real=True), self.fn,
                                    self.witness, lambda pair: _discard(self, pair))
        self.compiled = compiled

    def _lay_out(self) -> None:
        """Read the pair's layout for numba (once): its free names and callees, the
        facts jit_policy decides on, whether the rewrite takes its statements."""
        self.laid_out = True
        if self.disabled is not None:
            return
        try:   # (numba itself is imported only once a call is to be compiled: see plan)
            self.pair = rw.parse_pair(self.compiled.module_source,
                                      self.compiled.forward.__name__,
                                      self.compiled.adjoint.__name__)
            bound = numba_variants.free_names(
                self, lambda callee: state_for(callee.fn, callee.wrt, self.witness))
            self.live, self.constants = bound.live, bound.constants
            self.callees, self.call_extra = bound.callees, bound.call_extra
            from ..introspect import unwrap
            self.facts = jit_policy.code_facts(
                (self.pair.forward, self.pair.adjoint),
                [sub.facts for sub, _ in self.callees.values()],
                jit_policy.user_loop_line(unwrap(self.fn)))
            self.size_limit = jit_policy.size_limit(self.facts, self.force)
            self.vjp_size_limit = jit_policy.size_limit(self.facts, self.force, vjp=True)
            self.mutates = rw.writes_into_arguments(self.pair)
            # Structural problems show before any run (the types come later).
            rw.rewrite(self.pair, {}, [b.name for b in self.live], rw.KINDS,
                       call_extra=self.call_extra)
        except rw.Unsupported as exc:
            self.disabled = str(exc)
        self.nparams = len(self.pair.params) if self.pair is not None else 0

    def ensure_compiled(self) -> None:
        if self.compiled is None:
            with self.lock:
                if self.compiled is None:
                    self._compile()

    def ensure_prepared(self) -> None:
        if not self.laid_out:
            with self.lock:
                if self.compiled is None:
                    self._compile()
                if not self.laid_out:
                    self._lay_out()

    def settle(self) -> bool:
        """Whether no thread builds behind the user's now; the warnings of one that
        finished are given here, in the user's thread."""
        behind = self.behind
        if behind is not None:
            if behind.is_alive():
                return False
            self.behind = None
            with _LOCK:
                if (self, behind) in _BUILDERS:
                    _BUILDERS.remove((self, behind))
        while self.pending:
            state, why = self.pending.pop(0)
            state.warn(why)
        return True

    def warned(self) -> bool:
        """Whether the JitWarning for this function was given."""
        return _function_key(self.fn) in _WARNED

    def warn(self, reason: str) -> None:
        """One JitWarning per function (whatever its wrt), at the user's call (from a
        thread behind it, at the next call)."""
        if getattr(_BUILDING, "state", None) is not None:
            _BUILDING.state.pending.append((self, reason))
            return
        key = _function_key(self.fn)
        with _LOCK:
            if key in _WARNED:
                return
            _WARNED.add(key)
        name = getattr(self.fn, "__qualname__", getattr(self.fn, "__name__", repr(self.fn)))
        warnings.warn(f"s2sgrad: jit=True runs {name} on the NumPy backend: {reason}",
                      JitWarning, stacklevel=_user_stacklevel())

    # -- calls -------------------------------------------------------------------
    def bind(self, args: tuple, kwargs: dict) -> tuple:
        if not kwargs and len(args) == self.nparams:
            return args
        if self.signature is None:
            raise TypeError("cannot bind arguments")
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.arguments[p] for p in self.pair.params)

    def live_values(self) -> tuple:
        return tuple(b.read() for b in self.live)

    def variant(self, args: tuple, live: tuple, need: str,
                ran: Optional[tuple] = None) -> Optional[numba_variants.Variant]:
        """The variant for these types, with the functions `need` ("fused"/"vjp") built
        (`ran`: from a NumPy run made already, see numba_variants.build)."""
        key = _variant_key(args, live, need)
        if self._unmade(self.variants.get(key), need):
            with self.lock:
                v = self.variants.get(key)
                if self._unmade(v, need):
                    numba_variants.build(self, args, live, key, need, v, ran)
        v = self.variants[key]
        return None if v.failed is not None else v

    @staticmethod
    def _unmade(v: Optional[numba_variants.Variant], need: str) -> bool:
        """Whether v (None: no variant yet) lacks the functions `need` asks for."""
        return v is None or v.failed is None and (
            v.fused is None if need == "fused" else v.host is None
            if need == "loops" else v.pullback is None)

    def fail(self, args: tuple, live: tuple, exc: BaseException,
             v: Optional[numba_variants.Variant] = None) -> None:
        """numba could not compile this type signature: NumPy from now on, one warning
        (and in later processes too: the rejection is recorded beside the module); for
        the whole function of one that outlines, its loops instead (they warn if not)."""
        whole = self.variants.get(_variant_key(args, live, "fused"))
        v = v or whole
        if v is not None:
            v.failed, v.check = load.first_line(exc), None
            load.record_rejection(v.module, v.failed)
        if v is None or v is not whole or not numba_variants.loops_instead(self, args, live):
            self.warn(load.first_line(exc))

    # -- the entry points the API calls ---------------------------------------
    def value_and_grad(self, args: tuple, kwargs: dict):
        """(output, gradients as the adjoint returns them)."""
        entered = time.perf_counter() if self.measuring else 0.0
        if self.ready and self.behind is None and not self.pending and self.disabled is None:
            result = _ready_call(self, entered, args, kwargs)   # (checked variants)
            if result is not _UNDECIDED:
                return result
        if not self.settle():
            return self.numpy_value_and_grad(args, kwargs)   # built behind, meanwhile
        if not self.laid_out and compiles_behind():
            return _numpy_then_build(self, args, kwargs, vjp=False)
        self.ensure_prepared()
        if not self.size_limit and self.disabled is None and self.force != "loops":
            return self.numpy_value_and_grad(args, kwargs)   # the plan leaves every call
        if self.disabled is None:
            call = self.bind(args, kwargs)
            live = self.live_values()
            need = _need_of(self, call, live, vjp=False)
            if need is None:
                return self.numpy_value_and_grad(args, kwargs)
            if self._unbuilt(call, live, need):
                return _numpy_then_build(self, args, kwargs, vjp=False)
            if need == "loops":
                return self._outlined(call, live, args, kwargs)
            v = self.variant(call, live, "fused")
            if v is None and self._outlines(call, live):   # not whole: its loops alone
                return self._outlined(call, live, args, kwargs)
            if v is not None and v.check is not None and \
                    still_compiling(self, v, "fused", call, live):
                return self._numpy_first(v, call, args, kwargs)
            if v is not None and v.check is None and _measured_to_numpy(
                    self, v, jit_policy.largest_array(call + live)):
                return _numpy_timed(self, v, call + live, args, kwargs)
            if v is not None:
                try:
                    if v.check is None and (v.trial.decided or self.force == "always"):
                        result = v.fused(*call, *live)
                    elif v.check is None:   # timed for the measured decision
                        result = v.fused(*call, *live)
                        _timed(self, v, True, entered, call + live)
                    else:   # the first call: numba compiles, and the result is checked
                        reference = self._reference(v, call)
                        result = v.fused(*call, *live)
                except Exception as exc:  # noqa: BLE001 - decided as numba's or NumPy's
                    return _raised(self, exc, call, live, args, kwargs, v)
                else:
                    if v.check is None:   # later calls of these kinds: _ready_call
                        self.ready[_kinds(call + live)] = (v, _limit(self, call + live))
                        return result
                    return _first_result(self, v, result, reference)
        else:
            self.warn(self.disabled)
        return self.numpy_value_and_grad(args, kwargs)

    def _outlines(self, call: tuple, live: tuple) -> bool:
        """Whether a call the plan leaves to NumPy for its size runs outlined: numba's
        loops inside NumPy's code (`numba_outline`), for functions that loop, call
        no compiled function, and write into no argument (the NumPy run that checks
        the first compiled result, and the NumPy loops, would see other values);
        and only when the arguments the loops read are small enough for numba. (Its
        callers ask only for calls the size rule did not compile whole.)"""
        if not self.facts.has_loops or self.force == "numpy":
            return False
        facts = numba_variants.outline_facts(self)
        if facts is None or load.numba_module() is None:
            return False
        values = call + live
        return jit_policy.largest_array([values[i] for i in facts[0]]) < facts[1]

    def _outlined(self, call: tuple, live: tuple, args, kwargs):
        """grad's call of an outlined variant: the host runs on NumPy and hands its loops
        to numba or to NumPy (`_LoopRunner`); a first compiled run is checked."""
        v = self.variant(call, live, "loops")
        if v is None:
            why = _whole_failed(self, call, live)
            if why is not None:   # (numba could take neither: the whole one's reason)
                self.warn(why)
            return self.numpy_value_and_grad(args, kwargs)
        runner = _LoopRunner(self, v)
        try:
            result = v.host(*call, *live, runner)
        except Exception as exc:  # noqa: BLE001 - the NumPy backend decides
            if runner.compiled and load.is_numba_error(exc):
                v.failed = load.first_line(exc)
                load.record_rejection(v.module, v.failed)
                self.warn(v.failed)
                return self.numpy_value_and_grad(args, kwargs)
            # The user's error as the NumPy backend raises it (the host runs the
            # statements in another order), or NumPy's value and a warning.
            return self._numpy_after(exc, args, kwargs, v)
        if not runner.first:
            return result
        return _first_result(self, v, result, self._reference(v, call))

    def _reference(self, v: numba_variants.Variant, call: tuple) -> tuple:
        """The NumPy backend's (output, gradients) for this call, from copies of its
        arguments: from the run that built the variant when it was this call's."""
        built_for, out, residuals, seed = v.check
        if built_for is not call:       # built by jit_source, or by a call since
            out, residuals = numba_variants.numpy_forward(self, numba_variants.copies(call))
            seed = seed_of(out)
        return out, self.numpy.adjoint(residuals, seed)

    def _numpy_first(self, v: numba_variants.Variant, call, args, kwargs):
        """The NumPy backend's result while a worker compiles: the reference (which
        reuses the run that built the variant), unless the function writes into its
        arguments, which the reference's runs do on copies."""
        if self.mutates:
            return self.numpy_value_and_grad(args, kwargs)
        return self._reference(v, call)

    def _unbuilt(self, call: tuple, live: tuple, need: str) -> bool:
        """In the background mode, whether this call's variant is yet to be built:
        a thread builds it (`_build_behind`) while the call runs NumPy."""
        return compiles_behind() and self._unmade(
            self.variants.get(_variant_key(call, live, need)), need)

    def _compiles(self, call: tuple, live: tuple, vjp: bool = False) -> bool:
        """Whether this call goes to numba (jit_policy), and numba is there to take it.
        A call left to NumPy by the plan is no failure: no warning."""
        if not jit_policy.largest_array(call + live) < _limit(self, call + live, vjp):
            return False
        if not self.numba_ready():
            self.warn(self.disabled)
            return False
        return True

    def numba_ready(self) -> bool:
        """Not disabled, and numba importable (imported here, when first needed: a
        function whose calls all go to NumPy never imports it); else `disabled` says
        why."""
        if self.disabled is None and load.numba_module() is None:
            self.disabled = load.missing_reason()
        return self.disabled is None

    def numpy_value_and_grad(self, args, kwargs):
        """The NumPy backend's (output, gradients) of a grad call."""
        out, residuals = self.numpy.forward(*args, **kwargs)
        return out, self.numpy.adjoint(residuals, seed_of(out))

    def _numpy_after(self, exc: BaseException, args, kwargs, v: numba_variants.Variant):
        """The compiled code raised: NumPy decides (its error, or its value and a warning)."""
        result = self.numpy_value_and_grad(args, kwargs)   # raises the user's error
        v.failed = f"the compiled code raised {load.first_line(exc)} where NumPy did not"
        self.warn(v.failed)
        return result

    def vjp(self, args: tuple):
        """(output, pullback(v) -> gradients as the adjoint returns them).

        The compiled pullback runs the forward again, then the adjoint: the
        residuals never leave machine code (numba cannot pass Python its
        stacks cheaply, nor type an empty one). The arrays given are copied,
        so the pullback sees the values the output was computed from.
        """
        if not self.settle():
            return self.numpy_vjp(args)   # built behind, meanwhile
        if not self.laid_out and compiles_behind():
            return _numpy_then_build(self, args, {}, vjp=True)
        self.ensure_prepared()
        if not self.vjp_size_limit and self.disabled is None:
            return self.numpy_vjp(args)   # the plan leaves every vjp call to NumPy
        if self.disabled is None and self.mutates:
            self.warn("it writes into its arguments, and vjp(jit=True) runs the forward "
                      "again in the pullback")
            return self.numpy_vjp(args)
        if self.disabled is not None:
            self.warn(self.disabled)
            return self.numpy_vjp(args)
        live = self.live_values()
        call = self.bind(args, {})
        if not self._compiles(call, live, vjp=True):
            return self.numpy_vjp(args)
        if self._unbuilt(call, live, "vjp"):
            return _numpy_then_build(self, args, {}, vjp=True)
        call = tuple(a.copy() if type(a) is np.ndarray else a for a in call)
        v = self.variant(call, live, "vjp")
        if v is None:
            return self.numpy_vjp(args)
        if not v.vjp_checked and still_compiling(self, v, "vjp", call, live):
            return self.numpy_vjp(args)
        try:
            out = v.value(*call, *live)
        except Exception as exc:  # noqa: BLE001
            if load.is_numba_error(exc):
                self.fail(call, live, exc, v)
            else:
                self.numpy.forward(*args)      # the user's error, if any
                self.warn(f"the compiled forward raised {load.first_line(exc)} where NumPy "
                          f"did not")
            return self.numpy_vjp(args)
        reference = None
        if not v.vjp_checked:
            # The first vjp of a variant is compared with the NumPy backend's.
            v.vjp_checked = True
            want_out, reference = numba_variants.numpy_forward(
                self, numba_variants.copies(call))
            problem = mismatch(out, want_out)
            if problem is not None:
                v.failed = f"the compiled output differs from the NumPy backend's ({problem})"
                self.warn(v.failed)
                return self.numpy_vjp(args)
        return out, _CompiledPullback(self, v, call, live, reference)

    def numpy_vjp(self, args):
        out, residuals = numba_variants.numpy_forward(self, args)
        return out, (lambda cot: self.numpy.adjoint(residuals, cot))




def numpy_only(state: Optional["JitFunction"], vjp: bool = False) -> bool:
    """Whether every grad (vjp: vjp) call of state's function is known to run the NumPy
    backend: the plan leaves them all to NumPy, or numba cannot run the function and
    has said so. (Not before the pair's layout is read: its facts decide.)"""
    if state is None or not state.laid_out:
        return False
    if state.disabled is not None:
        return state.warned()
    return not (state.vjp_size_limit if vjp else state.size_limit or state.force == "loops")


# -- what jit=True does with a function, in words (jit_rule, jit_plan, jit_source) --
def rule_of(state: "JitFunction") -> Tuple[str, bool]:
    """(how jit=True decides for this function, whether the arrays' size decides)."""
    state.ensure_prepared()
    if state.disabled is not None:
        return f"runs on NumPy: {state.disabled}", False
    if state.measured is not None:
        return f"runs on NumPy: {state.measured.reason}", False
    outline = numba_variants.outline_facts(state) if state.facts.has_loops else None
    limit = outline[1] if outline is not None and outline[1] < float("inf") else None
    return jit_policy.describe_rule(state.facts, limit), \
        0 < state.size_limit < float("inf")


def plan_of(state: "JitFunction", args: tuple, kwargs: Optional[dict] = None,
            vjp: bool = False) -> jit_policy.JitPlan:
    """What a call with these arguments does (vjp: a call of s2sgrad.vjp, else of
    grad or value_and_grad): compiled by numba, or NumPy and why."""
    state.ensure_prepared()
    if state.measured is not None and not vjp:
        return jit_policy.JitPlan(False, state.measured.reason,
                                  jit_policy.largest_array(tuple(args)))
    if state.disabled is None:
        call = state.bind(args, kwargs or {})
        live = state.live_values()
        plan = jit_policy.decide(state.facts, jit_policy.largest_array(call + live),
                                 state.force, vjp, jit_policy.float64_arrays(call + live))
        if not plan.compile and not vjp and state._outlines(call, live):
            v = state.variant(call, live, "loops")
            if v is None:
                why = state.variants[_variant_key(call, live, "loops")].failed
                return jit_policy.JitPlan(False, f"{plan.reason}; {why}", plan.largest)
            return jit_policy.outlined_plan(plan, v.loops_limit)
        if not plan.compile:
            return plan
        if state.numba_ready():
            failed = state.variants.get(_variant_key(call, live, "fused"))
            if failed is None:
                return plan   # (whether numba can compile it shows at the first call)
            if failed.failed is None:   # compiled: as measured, if it was
                return (None if vjp else failed.trial.plan(plan.largest)) or plan
            whole = jit_policy.JitPlan(False, f"runs on NumPy: numba could not compile it "
                                              f"({failed.failed})", plan.largest)
            loops = state.variant(call, live, "loops") \
                if not vjp and state._outlines(call, live) else None
            return whole if loops is None else jit_policy.outlined_plan(whole,
                                                                        loops.loops_limit)
    return jit_policy.JitPlan(False, f"runs on NumPy: {state.disabled}")


def source_of(state: "JitFunction", args: tuple, kwargs: Optional[dict] = None) -> str:
    """The numba-subset source for these arguments' types (builds it if needed)."""
    state.ensure_prepared()
    if not state.numba_ready():
        raise RuntimeError(state.disabled)
    call = state.bind(args, kwargs or {})
    live = state.live_values()
    need = "loops" if _need_of(state, call, live, False) == "loops" else "fused"
    v = state.variant(call, live, need)
    if v is None:
        raise RuntimeError(state.variants[_variant_key(call, live, need)].failed)
    return v.source


def mismatch(got: Any, want: Any, rtol: float = 1e-7) -> Optional[str]:
    """None if got equals want up to rounding (same structure, shapes, NaNs), else why."""
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return "a different structure"
        for g, w in zip(got, want):
            problem = mismatch(g, w, rtol)
            if problem is not None:
                return problem
        return None
    if want is None or got is None:
        return None if got is want else "None where a value was expected"
    try:
        g = np.asarray(got, dtype=np.complex128 if np.iscomplexobj(want) else np.float64)
        w = np.asarray(want, dtype=g.dtype)
    except (TypeError, ValueError):
        return "values of another type"
    if g.shape != w.shape:
        return f"shape {g.shape} instead of {w.shape}"
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return "NaN in other places"
    finite = np.isfinite(w)
    if not np.array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)]):
        return "infinities in other places"
    if not finite.any():
        return None
    scale = float(np.max(np.abs(w[finite]))) or 1.0
    err = float(np.max(np.abs(g[finite] - w[finite])))
    tol = rtol * scale * 10 if w.dtype.itemsize < 8 else rtol * scale
    if w.dtype == np.float64 and (np.asarray(want).dtype == np.float32 or
                                  np.asarray(got).dtype == np.float32):
        tol = 1e-4 * scale
    return None if err <= tol else f"largest difference {err:.3g} at scale {scale:.3g}"


def _function_key(fn: Callable) -> Any:
    from ..introspect import unwrap
    fn = unwrap(fn)
    return getattr(fn, "__code__", None) or id(fn)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside s2sgrad (for warnings.warn)."""
    frame = sys._getframe(1)      # the caller of this function calls warnings.warn
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
            _PACKAGE_DIR + os.sep):
        frame = frame.f_back
        level += 1
    return level


def _variant_key(args: Sequence[Any], live: Sequence[Any], need: str) -> tuple:
    """The key of a variant: the kinds of the arguments and live values, and for an
    outlined one ("loops") that mark, since it is built apart from the whole one."""
    return _kinds(args) + _kinds(live) + (("loops",) if need == "loops" else ())


def _kinds(values: Sequence[Any]) -> tuple:
    """What numba's type of each value depends on (layout aside)."""
    out = []
    for v in values:
        t = type(v)
        if t is np.ndarray:
            out.append((v.dtype.char, v.ndim))
        elif t is tuple:
            out.append(_kinds(v))
        else:
            out.append(t)
    return tuple(out)



def known_state(fn: Callable, positions: Tuple[int, ...],
                witness: Any = None) -> Optional[JitFunction]:
    """The JitFunction of (fn, positions) if one was made, without any check."""
    try:
        return _BY_FUNCTION.get((fn, positions, witness_mode(witness)))
    except TypeError:                   # an unhashable callable
        return None


def state_for(fn: Callable, positions: Tuple[int, ...], witness: Any = None) -> JitFunction:
    """The JitFunction of (fn, positions), shared by every jit=True wrapper of fn with
    the same witness mode (`witness`: the API's argument, see s2sgrad.witness.mode)."""
    how = witness_mode(witness)
    try:
        state = _BY_FUNCTION.get((fn, positions, how))
    except TypeError:                   # an unhashable callable
        state = None
    # A state whose pair was generated for names since rebound (or failed a witness)
    # is rebuilt.
    if state is not None and not state.discarded and (
            state.compiled is None or state.compiled.current()):
        return state
    from ..compiler import cache_key
    key = cache_key(fn, tuple(positions), ("numba", how))
    with _LOCK:
        state = _STATES.get(key)
        if state is None or state.discarded or (
                state.compiled is not None and not state.compiled.current()):
            state = _STATES[key] = JitFunction(fn, tuple(positions), how)
        try:
            _BY_FUNCTION[(fn, positions, how)] = state
        except TypeError:
            pass
        return state
