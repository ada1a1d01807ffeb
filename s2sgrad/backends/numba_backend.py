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
calls of that type signature run the NumPy backend, so a first call costs
what a NumPy call costs; the call after it loads the machine code from
numba's cache, and its result is compared with the NumPy backend's as any
first compiled result is. `S2SGRAD_JIT_BACKGROUND=0` compiles at the first
call, which waits; `jit_wait` waits for the workers.

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

import functools
import inspect
import os
import sys
import threading
import time
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import cache as disk_cache
from .. import trust
from ..arguments import seed as seed_of
from ..trust import comment_safe
from . import jit_policy
from . import numba_rewrite as rw
from .numba_worker import summary


class JitWarning(UserWarning):
    """The numba backend could not run a function; the NumPy backend ran instead."""


_STATES: Dict[tuple, "JitFunction"] = {}
_BY_FUNCTION: Dict[tuple, "JitFunction"] = {}   # (function, wrt) -> state: skips the key
_WARNED: set = set()            # functions a JitWarning was issued for
_LOCK = threading.RLock()
_NUMBA: List[Any] = []          # [numba module] once imported, [None] if unavailable
_WORKERS: List[Tuple["JitFunction", "Variant"]] = []   # variants compiling in a worker
_MAX_WORKERS = max(2, os.cpu_count() or 2)   # each is a Python with numba (150 MB)
_INSTANCES: "weakref.WeakSet[JitFunction]" = weakref.WeakSet()   # for a forked child


def _after_fork_in_child() -> None:
    """A forked child has only the thread that called fork: locks another thread
    held are made anew (else the child's next jit call hangs), and the parent's
    worker processes are not the child's to wait for (a variant they compiled
    loads from numba's disk cache, or compiles again)."""
    for lock in [_LOCK] + [state._lock for state in list(_INSTANCES)]:
        if not lock._is_owned():
            lock._at_fork_reinit()
    for _, v in _WORKERS:
        v.worker = None
        v.sent.clear()
    _WORKERS.clear()


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
    with _LOCK:
        jobs = [(state, v) for state, v in _WORKERS
                if fn is None or _function_key(state.fn) == _function_key(fn)]
    finished = True
    for state, v in jobs:
        worker = v.worker
        if worker is None:
            continue
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if worker.wait(left):
            state.still_compiling(v)
        else:
            finished = False
    return finished


def numba_module():
    """numba, or None when it cannot be imported (cached)."""
    if not _NUMBA:
        try:
            import numba

            from . import numba_helpers  # noqa: F401 - registers the overloads
        except Exception as exc:  # noqa: BLE001 - any import failure means: no numba
            _NUMBA.append(None)
            _NUMBA.append(first_line(exc))
        else:
            _NUMBA.append(numba)
    return _NUMBA[0]


def _numba_missing_reason() -> str:
    return _NUMBA[1] if len(_NUMBA) > 1 else "numba is not installed"


def reset() -> None:
    """Forget every compiled variant (tests; also after s2sgrad.compiler.clear_cache)."""
    with _LOCK:
        for _, v in _WORKERS:
            if v.worker is not None:
                v.worker.stop()
        _WORKERS.clear()
        _STATES.clear()
        _BY_FUNCTION.clear()
        _NUMBA.clear()
        _WARNED.clear()


def first_line(exc: BaseException) -> str:
    return summary(type(exc).__name__, str(exc))


def _is_numba_error(exc: BaseException) -> bool:
    numba = numba_module()
    if numba is None:
        return False
    from numba.core.errors import NumbaError
    return isinstance(exc, NumbaError)


# -- live values: the user's globals and closure cells the generated code reads --------
def _data(value: Any) -> bool:
    """Values passed as arguments on every call rather than frozen as constants."""
    if isinstance(value, (bool, int, float, complex, np.ndarray, np.generic)):
        return True
    if isinstance(value, tuple):
        return all(_data(v) for v in value)
    return False


@dataclass
class _Binding:
    name: str
    read: Callable[[], Any]


# -- one compiled variant -----------------------------------------------------------
@dataclass
class Variant:
    """The numba functions of one type signature (built as they are first needed)."""

    fused: Any = None            # (*args, *live) -> (out, grads), seeded with 1
    check: Any = None            # (call, out, residuals, seed) of a NumPy run, until checked
    vjp_checked: bool = False    # a first vjp and pullback were compared with NumPy's
    on_disk: bool = False        # its module is a file: a worker process can compile it
    blas: bool = False
    worker: Any = None           # the numba_worker.Worker compiling it
    sent: set = field(default_factory=set)     # "fused", "vjp": given to a worker once
    pullback: Any = None         # (*args, *live, cotangent) -> (out, grads)
    value: Any = None            # (*args, *live) -> out
    host: Any = None             # outlined (numba_outline): the NumPy code around the loops
    loops: Any = None            # ... numba's loops, and the same loops as NumPy code
    numpy_loops: Any = None
    loops_limit: float = 0       # ... numba runs the loops given smaller arrays
    source: str = ""
    failed: Optional[str] = None
    module: Optional[str] = None   # its module's file in the disk cache (rejections go beside)

    def functions(self, kind: str) -> list:
        """The numba functions a call of `kind` ("fused": grad, "vjp", "loops") runs."""
        return [self.fused] if kind == "fused" else [self.loops] if kind == "loops" else \
            [self.value, self.pullback]


class _LoopRunner:
    """The call an outlined host makes between its straight-line code: numba's loops
    when the arrays given are small (and compiled), the NumPy loops otherwise."""

    __slots__ = ("state", "v", "compiled", "first")

    def __init__(self, state: "JitFunction", v: Variant):
        self.state, self.v = state, v
        self.compiled = False      # numba's loops ran in this call
        self.first = False         # ... for the first time: the call's result is checked

    def __call__(self, *args):
        v = self.v
        if v.failed is None and jit_policy.largest_array(args) < v.loops_limit:
            if v.check is None:
                self.compiled = True
                return v.loops(*args)
            if not self.state.still_compiling(v, "loops", args, ()) and v.failed is None:
                self.compiled = self.first = True
                return v.loops(*args)
        return v.numpy_loops(*args)


class JitFunction:
    """The numba backend for one function and one wrt."""

    def __init__(self, fn: Callable, positions: Tuple[int, ...]):
        self.fn = fn
        self.positions = positions
        self.compiled = None
        self.pair: Optional[rw.Pair] = None
        self.disabled: Optional[str] = None   # why the backend cannot run this function
        self.variants: Dict[tuple, Variant] = {}
        self.signature: Optional[inspect.Signature] = None
        self.nparams = 0
        self.live: List[_Binding] = []
        self.constants: Dict[str, Any] = {}
        self.blas = False
        self.callees: Dict[str, Tuple["JitFunction", str]] = {}
        self.call_extra: Dict[str, List[Tuple[str, str]]] = {}
        self.split: Optional[tuple] = None      # (forward, adjoint) dispatchers, for callers
        self.facts = jit_policy.CodeFacts()       # loops and products: what jit_policy decides on
        self.force = jit_policy.forced()          # S2SGRAD_JIT_PLAN, read once
        self.size_limit: float = 0                # calls over smaller arrays are compiled
        self.vjp_size_limit: float = 0            # ... by vjp (see jit_policy.size_limit)
        self._building = False
        self.mutates = False
        self.outline: Optional[Tuple[Tuple[int, ...], float]] = None   # see _outline_facts
        self.split_calls: Optional[rw.Pair] = None                      # see _split_pair
        self._lock = threading.RLock()
        _INSTANCES.add(self)

    # -- set-up ------------------------------------------------------------------
    def _prepare(self) -> None:
        """Compile the NumPy pair and read its layout (once)."""
        import inspect

        from ..compiler import compile_function
        try:   # numba runs on arrays and numbers: their cotangents add with `+`
            count = len(inspect.signature(self.fn).parameters)
        except (TypeError, ValueError):
            count = 0
        self.compiled = compile_function(self.fn, self.positions, leaves=tuple(range(count)))
        if self.disabled is None and not isinstance(self.compiled.forward, types.FunctionType):
            # A partial, bound method or callable object: its pair calls the function's
            # own with the bound arguments, a wrapper the rewrite does not read.
            self.disabled = f"{type(self.fn).__name__} entries run the NumPy backend"
        if self.disabled is not None:
            return
        try:   # (numba itself is imported only once a call is to be compiled: see plan)
            self.pair = rw.parse_pair(self.compiled.module_source,
                                      self.compiled.forward.__name__,
                                      self.compiled.adjoint.__name__)
            self._bind_free_names()
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
        try:
            self.signature = inspect.signature(self.compiled.forward)
        except (TypeError, ValueError):
            self.signature = None
        self.nparams = len(self.pair.params) if self.pair is not None else 0

    def _bind_free_names(self) -> None:
        compiled = self.compiled
        cells = _closure_cells(compiled.forward, compiled.adjoint)
        module_globals = compiled.forward.__globals__
        callee_fns = {}
        for callee in compiled.callees:
            callee_fns[id(callee.forward)] = (callee, "forward")
            callee_fns[id(callee.adjoint)] = (callee, "adjoint")
        live, constants = [], {}
        for name in self.pair.free:
            if name in cells:
                cell = cells[name]
                try:
                    value = cell.cell_contents
                except ValueError:
                    raise rw.Unsupported(f"the closure variable {name!r} is not set") from None
                reader = functools.partial(getattr, cell, "cell_contents")
            elif name in module_globals:
                value = module_globals[name]
                reader = functools.partial(module_globals.__getitem__, name)
            elif name in rw._BUILTINS:
                continue
            else:
                raise rw.Unsupported(f"the name {name!r} is not defined")
            if id(value) in callee_fns:
                callee, half = callee_fns[id(value)]
                if callee.statics:
                    raise rw.Unsupported(f"{callee.name} is compiled for the function it is "
                                         f"given ({callee.statics[0][0]}), which the numba "
                                         f"backend does not do yet")
                sub = state_for(callee.fn, callee.wrt)
                if sub is self or sub.compiled is not None and sub.pair is None and \
                        sub.disabled is None:
                    raise rw.Unsupported("a recursive call")
                sub._ensure_prepared()
                if sub.disabled is not None:
                    raise rw.Unsupported(f"the function it calls, {callee.name}, is "
                                         f"unsupported: {sub.disabled}")
                self.callees[name] = (sub, half)
                continue
            if callable(value) and getattr(value, "__name__", "").endswith(
                    ("_forward", "_adjoint")) and name.startswith("_s2s_"):
                raise rw.Unsupported(f"{name} is not a compiled callee")
            if _data(value):
                live.append(_Binding(name, reader))
            elif isinstance(value, types.ModuleType):
                if value.__name__ not in ("numpy", "math", "cmath"):
                    raise rw.Unsupported(f"the module {value.__name__} (numba knows numpy "
                                         f"and math)")
                constants[name] = value
            else:
                constants[name] = value
        # A callee's live values are parameters of its pair: the caller passes them on.
        self.call_extra = {}
        seen: Dict[int, List[Tuple[str, str]]] = {}
        for name, (sub, _) in sorted(self.callees.items()):
            if id(sub) not in seen:
                extra = []
                for b in sub.live:
                    param = f"_nbl{len(seen)}_{b.name}"
                    live.append(_Binding(param, b.read))
                    extra.append((b.name, param))
                seen[id(sub)] = extra
            self.call_extra[name] = seen[id(sub)]
        self.live = live
        self.constants = constants

    def _ensure_prepared(self) -> None:
        if self.compiled is None:
            with self._lock:
                if self.compiled is None:
                    self._prepare()

    def warned(self) -> bool:
        """Whether the JitWarning for this function was given."""
        return _function_key(self.fn) in _WARNED

    def _warn(self, reason: str) -> None:
        """One JitWarning per function (whatever its wrt), at the user's call."""
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

    def variant(self, args: tuple, live: tuple, need: str) -> Optional[Variant]:
        """The variant for these types, with the functions `need` ("fused"/"vjp") built."""
        key = _variant_key(args, live, need)
        v = self.variants.get(key)
        if v is None or (v.failed is None and not self._has(v, need)):
            with self._lock:
                v = self.variants.get(key)
                if v is None or (v.failed is None and not self._has(v, need)):
                    v = self._build(args, live, key, need, v)
        return None if v.failed is not None else v

    @staticmethod
    def _has(v: Variant, need: str) -> bool:
        return v.fused is not None if need == "fused" else v.host is not None \
            if need == "loops" else v.pullback is not None

    def _build(self, args, live, key, need, old: Optional[Variant]) -> Variant:
        """Learn kinds from one NumPy run, rewrite, exec, njit (numba compiles at the call)."""
        v = old or Variant()
        # The NumPy run on copies: the call that follows writes into the arguments
        # (if the function does) once, as without jit.
        out, residuals = self.compiled.forward(*_copies(args))
        if need in ("fused", "loops"):
            seed = seed_of(out)     # a non-scalar output: the API's ValueError, now
            v.check = (args, out, residuals, seed)
        if need == "loops":
            self._build_loops(v, args, live, residuals, seed)
            self.variants[key] = v
            return v
        try:
            seeds = self._seeds(args, live)
            placeholders = rw.learn_placeholders(self.pair, residuals, seeds)
            fwd_kinds, adj_kinds = self._kinds(seeds, residuals,
                                               seed if need == "fused" else None)
            blas = _wants_blas(args, live)
            kinds = ["fused"] if need == "fused" else ["value", "fused_cot"]
            shapes = {name: value.shape for name, value in
                      zip(list(self.pair.params) + list(self.pair.residual_names),
                          tuple(args) + tuple(residuals))
                      if name is not None and isinstance(value, np.ndarray)}
            out_src = rw.rewrite(self.pair, placeholders, [b.name for b in self.live], kinds,
                                 fwd_kinds, adj_kinds, blas, self.call_extra, shapes=shapes,
                                 float_stacks=_float_stacks(self.pair, residuals))
            ns = self._namespace(blas, residuals)
            ns, cache = _load_module(out_src.source, ns, self.pair.name,
                                     disk=not self.callees)
            v.on_disk, v.blas, v.module = cache, blas, ns.get("__file__") if cache else None
            jit = functools.partial(numba_module().njit, cache=cache)
            if need == "fused":
                v.fused = jit(ns[out_src.names["fused"]])
            else:
                v.value = jit(ns[out_src.names["value"]])
                v.pullback = jit(ns[out_src.names["fused_cot"]])
            v.source = (v.source + "\n\n" + out_src.source).strip() + "\n"
        except (rw.Unsupported, RecordedRejection) as exc:
            v.failed = str(exc)
            self._warn(v.failed)
        except Exception as exc:  # noqa: BLE001 - a bug of the rewrite: NumPy, and say so
            v.failed = f"internal error of the numba rewrite: {first_line(exc)}"
            self._warn(v.failed)
        self.variants[key] = v
        return v

    def _build_loops(self, v: Variant, args, live, residuals, seed) -> None:
        """The outlined variant (`numba_outline`): the host and the NumPy loops as
        Python functions over the NumPy module's globals, numba's loops as a module
        of their own. What cannot be outlined leaves v failed, without a warning:
        the call runs on NumPy, as the plan said before there was an outline."""
        from . import numba_outline as outline
        from .numba_stacks import preallocate_stacks
        try:
            pair = self._split_pair()
            seeds = self._seeds(args, live)
            placeholders = rw.learn_placeholders(pair, residuals, seeds)
            fwd_kinds, adj_kinds = self._kinds(seeds, residuals, seed, pair)
            # BLAS for the loops' products only if the arguments they read are large:
            # the large products of the call are the host's, on NumPy. (A loops
            # variant is built only for a function _outline_facts can cut.)
            read, limit = self._outline_facts()
            values = tuple(args) + tuple(live)
            blas = _wants_blas([values[i] for i in read], ())
            numba_fn, numpy_fn, _, rename = rw.fused_twins(
                pair, placeholders, [b.name for b in self.live], fwd_kinds, adj_kinds, blas,
                self.call_extra)
            cut = outline.outline(numpy_fn, numba_fn, pair.name,
                                  outline.barred_names(pair, rename))
            host_globals = _python_namespace(self.compiled.forward, self.compiled.adjoint)
            if any(host_globals.get(n) is not c for n, c in self.constants.items()):
                raise rw.Unsupported("a name the code reads is not the module's")
        except rw.Unsupported as exc:
            v.failed = f"its loops cannot be outlined: {exc}"
            return
        except Exception as exc:  # noqa: BLE001 - a bug of the outline: NumPy, and say so
            v.failed = f"internal error of the loops' outline: {first_line(exc)}"
            self._warn(v.failed)
            return
        import ast
        python = ast.unparse(ast.Module(body=[cut.host, cut.numpy_loops], type_ignores=[]))
        code = compile(python, f"<s2sgrad-outlined {pair.name}>", "exec")
        made = {c.co_name: types.FunctionType(c, host_globals, c.co_name)
                for c in code.co_consts if isinstance(c, types.CodeType)}
        loops = preallocate_stacks(cut.loops, _float_stacks(pair, residuals))
        numba_src = ast.unparse(ast.Module(body=[loops], type_ignores=[])) + "\n"
        try:
            ns, cache = _load_module(numba_src, self._namespace(blas, residuals),
                                     pair.name, disk=True)
            v.module = ns.get("__file__") if cache else None
            v.loops = functools.partial(numba_module().njit, cache=cache)(ns[loops.name])
        except RecordedRejection as exc:
            v.failed = str(exc)
            self._warn(v.failed)
            return
        except Exception as exc:  # noqa: BLE001
            v.failed = f"numba could not take its loops: {first_line(exc)}"
            self._warn(v.failed)
            return
        v.host, v.numpy_loops = made[cut.host.name], made[cut.numpy_loops.name]
        v.on_disk, v.blas, v.loops_limit = cache, blas, limit
        v.source = (f"# NumPy runs this; it calls {cut.loops.name} (numba) when the "
                    f"arrays given have fewer than {int(v.loops_limit):,} elements\n"
                    if v.loops_limit < float("inf") else "") + \
            ast.unparse(cut.host) + "\n\n\n" + numba_src

    def _seeds(self, args, live) -> Dict[str, Any]:
        """The kinds of the parameters and live values seen at a call: what kind
        inference starts from."""
        names = self.pair.params + [b.name for b in self.live]
        kinds = {name: rw.kind_of(value) for name, value in
                 zip(names, tuple(args) + tuple(live))}
        return {name: kind for name, kind in kinds.items() if kind is not None}

    def _kinds(self, seeds, residuals, cotangent, pair: Optional[rw.Pair] = None):
        """Kind inference of the forward and the adjoint, seeded by one NumPy run."""
        pair = pair or self.pair
        known = dict(seeds)
        stacks = {}
        for name, value in zip(pair.residual_names, residuals):
            if name is None:
                continue
            if isinstance(value, list):
                items = [rw.kind_of(x) for x in value if x is not None]
                if items and items[-1] is not None:
                    stacks[name] = items[-1]
            else:
                kind = rw.kind_of(value)
                if kind is not None:
                    known.setdefault(name, kind)
        fwd = rw.KindInference(known)
        fwd.run(pair.forward)
        adj_known, adj_stacks = {}, {}
        if pair.adjoint_targets is not None:
            for target, name in zip(pair.adjoint_targets, pair.residual_names):
                if name in stacks:
                    adj_stacks[target] = stacks[name]
                elif name is not None and name in fwd.env:
                    adj_known[target] = fwd.env[name]
                if name in pair.ranges:
                    adj_known[target] = ("r",)
        if cotangent is not None:
            # numba's seed of a scalar output is a number, never a 0-d array
            kind = rw.kind_of(cotangent[()] if isinstance(cotangent, np.ndarray) and
                              cotangent.ndim == 0 else cotangent)
            if kind is not None:
                adj_known[pair.cotangent] = kind
        adj = rw.KindInference(adj_known, adj_stacks)
        adj.run(pair.adjoint)
        return fwd, adj

    def _namespace(self, blas: bool, residuals=None) -> dict:
        from . import numba_helpers
        ns = numba_helpers.namespace(blas, self.constants)
        examples = {}
        if self.callees and residuals is not None:
            examples = rw.callee_residuals(self.pair, list(self.callees), residuals)
        for name, (sub, half) in self.callees.items():
            forward_name = next((n for n, (s2, h) in self.callees.items()
                                 if s2 is sub and h == "forward"), None)
            ns[name] = sub.split_dispatchers(examples.get(forward_name))[
                0 if half == "forward" else 1]
        return ns

    def split_dispatchers(self, residuals: Optional[tuple] = None) -> tuple:
        """(forward, adjoint) of this function as numba functions, for its callers.

        Placeholder types come from one residual tuple of a NumPy run (the
        caller's), when there is one.
        """
        self._ensure_prepared()
        if not self._numba_ready():
            raise rw.Unsupported(self.disabled)
        with self._lock:
            if self.split is not None:
                return self.split
            if self._building:
                raise rw.Unsupported("a recursive call")
            self._building = True
            try:
                placeholders, fwd_kinds, adj_kinds = {}, None, None
                if residuals is not None and len(residuals) == len(self.pair.residual_names):
                    placeholders = rw.learn_placeholders(self.pair, residuals)
                    fwd_kinds, adj_kinds = self._kinds({}, residuals, None)
                src = rw.rewrite(self.pair, placeholders, [b.name for b in self.live],
                                 ["split"], fwd_kinds, adj_kinds, False, self.call_extra)
                ns = self._namespace(False, residuals)
                exec(compile(src.source, f"<s2sgrad-numba {self.pair.name}>", "exec"), ns)
                jit = numba_module().njit
                self.split = (jit(ns[self.pair.name + "_nb_forward"]),
                              jit(ns[self.pair.name + "_nb_adjoint"]))
                return self.split
            finally:
                self._building = False

    def fail(self, args: tuple, live: tuple, exc: BaseException,
             v: Optional[Variant] = None) -> None:
        """numba could not compile this type signature: NumPy from now on, one warning
        (and in later processes too: the rejection is recorded beside the module)."""
        v = v or self.variants.get(_variant_key(args, live, "fused"))
        if v is not None:
            v.failed = first_line(exc)
            _record_rejection(v)
        self._warn(first_line(exc))

    # -- the entry points the API calls ---------------------------------------
    def value_and_grad(self, args: tuple, kwargs: dict):
        """(output, gradients as the adjoint returns them)."""
        self._ensure_prepared()
        if not self.size_limit and self.disabled is None and self.force != "loops":
            return self._numpy_value_and_grad(args, kwargs)   # the plan leaves every call
        if self.disabled is None:
            call = self.bind(args, kwargs)
            live = self.live_values()
            if not self._compiles(call, live):
                if self._outlines(call, live):
                    return self._outlined(call, live, args, kwargs)
                return self._numpy_value_and_grad(args, kwargs)
            v = self.variant(call, live, "fused")
            if v is not None and v.check is not None and \
                    self.still_compiling(v, "fused", call, live):
                return self._numpy_first(v, call, args, kwargs)
            if v is not None:
                try:
                    if v.check is None:
                        result = v.fused(*call, *live)
                    else:   # the first call: numba compiles, and the result is checked
                        reference = self._reference(v, call)
                        result = v.fused(*call, *live)
                except Exception as exc:  # noqa: BLE001 - decided below
                    if _is_numba_error(exc):
                        self.fail(call, live, exc)
                    else:
                        return self._numpy_after(exc, args, kwargs, v)
                else:
                    if v.check is None:
                        return result
                    return self._first_result(v, result, reference)
        else:
            self._warn(self.disabled)
        return self._numpy_value_and_grad(args, kwargs)

    def _split_pair(self) -> rw.Pair:
        """The pair with nested calls split (`numba_outline.split_pair`), made once:
        the outline's facts and every outlined variant start from it."""
        if self.split_calls is None:
            from . import numba_outline as outline
            self.split_calls = outline.split_pair(self.pair)
        return self.split_calls

    def _outline_facts(self) -> Optional[Tuple[Tuple[int, ...], float]]:
        """(positions among the call's arguments and live values of those the outlined
        loops read, the size limit of the arrays they are given), or None when the
        function cannot be outlined. The cut is made once on the NumPy statements,
        which do not depend on the types (a variant makes it again with them)."""
        if self.outline is None:
            from . import numba_outline as outline
            facts: Any = ()
            if self.facts.has_loops and not self.callees and not self.mutates:
                try:
                    pair = self._split_pair()
                    numpy_fn, rename = rw.fused_numpy(pair, [b.name for b in self.live])
                    cut = outline.outline(numpy_fn, numpy_fn, pair.name,
                                          outline.barred_names(pair, rename))
                    names = list(pair.params) + [b.name for b in self.live]
                    products = jit_policy.code_facts([cut.numpy_loops]).products
                    limit = float("inf") if self.force in ("always", "loops") else \
                        jit_policy.LOOP_PRODUCT_LIMIT if products else jit_policy.LOOP_LIMIT
                    facts = (tuple(names.index(n) for n in cut.inputs if n in names), limit)
                except rw.Unsupported:
                    pass
            self.outline = facts
        return self.outline or None

    def _outlines(self, call: tuple, live: tuple) -> bool:
        """Whether a call the plan leaves to NumPy for its size runs outlined: numba's
        loops inside NumPy's code (`numba_outline`), for functions that loop, call
        no compiled function, and write into no argument (the NumPy run that checks
        the first compiled result, and the NumPy loops, would see other values);
        and only when the arguments the loops read are small enough for numba. (Its
        callers ask only for calls the size rule did not compile whole.)"""
        if not self.facts.has_loops or self.force == "numpy":
            return False
        facts = self._outline_facts()
        if facts is None or numba_module() is None:
            return False
        values = call + live
        return jit_policy.largest_array([values[i] for i in facts[0]]) < facts[1]

    def _outlined(self, call: tuple, live: tuple, args, kwargs):
        """grad's call of an outlined variant: the host runs on NumPy and hands its loops
        to numba or to NumPy (`_LoopRunner`); a first compiled run is checked."""
        v = self.variant(call, live, "loops")
        if v is None:
            return self._numpy_value_and_grad(args, kwargs)
        runner = _LoopRunner(self, v)
        try:
            result = v.host(*call, *live, runner)
        except Exception as exc:  # noqa: BLE001 - the NumPy backend decides
            if runner.compiled and _is_numba_error(exc):
                v.failed = first_line(exc)
                _record_rejection(v)
                self._warn(v.failed)
                return self._numpy_value_and_grad(args, kwargs)
            # The user's error as the NumPy backend raises it (the host runs the
            # statements in another order), or NumPy's value and a warning.
            return self._numpy_after(exc, args, kwargs, v)
        if not runner.first:
            return result
        return self._first_result(v, result, self._reference(v, call))

    def _reference(self, v: Variant, call: tuple) -> tuple:
        """The NumPy backend's (output, gradients) for this call, from copies of its
        arguments: from the run that built the variant when it was this call's."""
        built_for, out, residuals, seed = v.check
        if built_for is not call:       # built by jit_source, or by a call since
            out, residuals = self.compiled.forward(*_copies(call))
            seed = seed_of(out)
        return out, self.compiled.adjoint(residuals, seed)

    def _numpy_first(self, v: Variant, call, args, kwargs):
        """The NumPy backend's result while a worker compiles: the reference (which
        reuses the run that built the variant), unless the function writes into its
        arguments, which the reference's runs do on copies."""
        if self.mutates:
            return self._numpy_value_and_grad(args, kwargs)
        return self._reference(v, call)

    def still_compiling(self, v: Variant, kind: str = "", call: tuple = (),
                        live: tuple = ()) -> bool:
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
                if (self, v) in _WORKERS:
                    _WORKERS.remove((self, v))
            status, why = worker.outcome()
            if status == "rejected":
                v.failed = why
                _record_rejection(v)
                self._warn(why)
                return True
        if not kind or kind in v.sent or not compiles_behind():
            return False
        v.sent.add(kind)
        with _LOCK:
            if sum(not w.worker.done() for _, w in _WORKERS if w.worker) >= _MAX_WORKERS:
                return False      # as many as there are cores: compiled at this call
        job = self._job(v, kind, call, live)
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
            _WORKERS.append((self, v))
        return True

    def _job(self, v: Variant, kind: str, call: tuple, live: tuple):
        """The worker's job for v's functions of `kind` at these arguments' types, or
        None when another process could not rebuild its module (not on disk, or it
        names objects other than the modules numba knows)."""
        from .numba_worker import MODULES, Job
        if not v.on_disk or any(not isinstance(c, types.ModuleType) or
                                c.__name__ not in MODULES for c in self.constants.values()):
            return None
        numba = numba_module()
        functions = v.functions(kind)
        first = functions[0].py_func
        module = sys.modules.get(first.__module__)
        path = getattr(module, "__file__", None)
        from .numba_helpers import namespace
        if path is None or not _rebuilt_alike(module.__dict__,
                                              namespace(v.blas, self.constants)):
            return None
        try:
            signature = tuple(numba.typeof(a) for a in tuple(call) + tuple(live))
            job = Job(path, first.__module__, v.blas,
                      {name: c.__name__ for name, c in self.constants.items()},
                      [(first.__name__, signature)],
                      module.__dict__.get("__s2sgrad_sha256__", ""))
            if kind == "vjp":
                out, _ = self.compiled.forward(*_copies(call))
                cotangent = _unit_cotangent(out)
                if cotangent is None:
                    return None
                job.signatures.append((functions[1].py_func.__name__,
                                       signature + (numba.typeof(cotangent),)))
        except Exception:  # noqa: BLE001 - a value numba cannot type: compiled at the call
            return None
        return job

    def _compiles(self, call: tuple, live: tuple, vjp: bool = False) -> bool:
        """Whether this call goes to numba (jit_policy), and numba is there to take it.
        A call left to NumPy by the plan is no failure: no warning."""
        limit = self.vjp_size_limit if vjp else self.size_limit
        if self.facts.elementwise and limit == float("inf") and not self.force and \
                not jit_policy.float64_arrays(call + live):
            # elementwise code fuses on float64 arrays only
            limit = jit_policy.size_limit(self.facts, vjp=vjp, float64=False)
        if not jit_policy.largest_array(call + live) < limit:
            return False
        if not self._numba_ready():
            self._warn(self.disabled)
            return False
        return True

    def _numba_ready(self) -> bool:
        """Not disabled, and numba importable (imported here, when first needed: a
        function whose calls all go to NumPy never imports it); else `disabled` says
        why."""
        if self.disabled is None and numba_module() is None:
            self.disabled = _numba_missing_reason()
        return self.disabled is None

    def rule(self) -> Tuple[str, bool]:
        """(how jit=True decides for this function, whether the arrays' size decides)."""
        self._ensure_prepared()
        if self.disabled is not None:
            return f"runs on NumPy: {self.disabled}", False
        outline = self._outline_facts() if self.facts.has_loops else None
        limit = outline[1] if outline is not None and outline[1] < float("inf") else None
        return jit_policy.describe_rule(self.facts, limit), \
            0 < self.size_limit < float("inf")

    def plan(self, args: tuple, kwargs: Optional[dict] = None,
             vjp: bool = False) -> jit_policy.JitPlan:
        """What a call with these arguments does (vjp: a call of s2sgrad.vjp, else of
        grad or value_and_grad): compiled by numba, or NumPy and why."""
        self._ensure_prepared()
        if self.disabled is None:
            call = self.bind(args, kwargs or {})
            live = self.live_values()
            plan = jit_policy.decide(self.facts, jit_policy.largest_array(call + live),
                                     self.force, vjp, jit_policy.float64_arrays(call + live))
            if not plan.compile and not vjp and self._outlines(call, live):
                v = self.variant(call, live, "loops")
                if v is None:
                    why = self.variants[_variant_key(call, live, "loops")].failed
                    return jit_policy.JitPlan(False, f"{plan.reason}; {why}", plan.largest)
                return jit_policy.outlined_plan(plan, v.loops_limit)
            if not plan.compile:
                return plan
            if self._numba_ready():
                failed = self.variants.get(_variant_key(call, live, "fused"))
                if failed is None or failed.failed is None:
                    return plan   # (whether numba can compile it shows at the first call)
                return jit_policy.JitPlan(False, f"runs on NumPy: numba could not compile it "
                                                 f"({failed.failed})", plan.largest)
        return jit_policy.JitPlan(False, f"runs on NumPy: {self.disabled}")

    def _numpy_value_and_grad(self, args, kwargs):
        out, residuals = self.compiled.forward(*args, **kwargs)
        return out, self.compiled.adjoint(residuals, seed_of(out))

    def _numpy_after(self, exc: BaseException, args, kwargs, v: Variant):
        """The compiled code raised: NumPy decides (its error, or its value and a warning)."""
        result = self._numpy_value_and_grad(args, kwargs)   # raises the user's error
        v.failed = f"the compiled code raised {first_line(exc)} where NumPy did not"
        self._warn(v.failed)
        return result

    def _first_result(self, v: Variant, result, want):
        """A variant's first result is compared with the NumPy backend's, once.

        A disagreement (beyond rounding) means the rewrite or numba computed
        something else: the variant is dropped, NumPy's result returned, and a
        warning says so. Never a wrong value silently.
        """
        v.check = None
        problem = _mismatch(result, want)
        if problem is None:
            return result
        v.failed = f"the compiled gradient differs from the NumPy backend's ({problem})"
        self._warn(v.failed)
        return want

    def vjp(self, args: tuple):
        """(output, pullback(v) -> gradients as the adjoint returns them).

        The compiled pullback runs the forward again, then the adjoint: the
        residuals never leave machine code (numba cannot pass Python its
        stacks cheaply, nor type an empty one). The arrays given are copied,
        so the pullback sees the values the output was computed from.
        """
        self._ensure_prepared()
        if not self.vjp_size_limit and self.disabled is None:
            return self._numpy_vjp(args)   # the plan leaves every vjp call to NumPy
        if self.disabled is None and self.mutates:
            self._warn("it writes into its arguments, and vjp(jit=True) runs the forward "
                       "again in the pullback")
            return self._numpy_vjp(args)
        if self.disabled is not None:
            self._warn(self.disabled)
            return self._numpy_vjp(args)
        live = self.live_values()
        call = self.bind(args, {})
        if not self._compiles(call, live, vjp=True):
            return self._numpy_vjp(args)
        call = tuple(a.copy() if type(a) is np.ndarray else a for a in call)
        v = self.variant(call, live, "vjp")
        if v is None:
            return self._numpy_vjp(args)
        if not v.vjp_checked and self.still_compiling(v, "vjp", call, live):
            return self._numpy_vjp(args)
        try:
            out = v.value(*call, *live)
        except Exception as exc:  # noqa: BLE001
            if _is_numba_error(exc):
                self.fail(call, live, exc, v)
            else:
                self.compiled.forward(*args)      # the user's error, if any
                self._warn(f"the compiled forward raised {first_line(exc)} where NumPy "
                           f"did not")
            return self._numpy_vjp(args)
        numpy_pullback: List[Any] = []
        reference: List[Any] = []
        if not v.vjp_checked:
            # The first vjp of a variant is compared with the NumPy backend's.
            v.vjp_checked = True
            want_out, want_residuals = self.compiled.forward(*_copies(call))
            problem = _mismatch(out, want_out)
            if problem is not None:
                v.failed = f"the compiled output differs from the NumPy backend's ({problem})"
                self._warn(v.failed)
                return self._numpy_vjp(args)
            reference.append(want_residuals)

        def pullback(cot):
            if not numpy_pullback:
                try:
                    grads = v.pullback(*call, *live, cot)[1]
                    if reference:   # the first pullback: numba compiled it
                        want = self.compiled.adjoint(reference.pop(), cot)
                        problem = _mismatch(grads, want)
                        if problem is not None:
                            v.failed = (f"the compiled gradient differs from the NumPy "
                                        f"backend's ({problem})")
                            self._warn(v.failed)
                            numpy_pullback.append(self._numpy_vjp(call)[1])
                            return want
                    return grads
                except Exception as exc:  # noqa: BLE001
                    if _is_numba_error(exc):
                        self.fail(call, live, exc, v)
                    else:
                        _, residuals = self.compiled.forward(*call)
                        result = self.compiled.adjoint(residuals, cot)   # NumPy's error?
                        self._warn(f"the compiled pullback raised {first_line(exc)} "
                                   f"where NumPy did not")
                        return result
                    numpy_pullback.append(self._numpy_vjp(call)[1])
            return numpy_pullback[0](cot)
        return out, pullback

    def _numpy_vjp(self, args):
        out, residuals = self.compiled.forward(*args)
        return out, (lambda cot: self.compiled.adjoint(residuals, cot))

    def source(self, args: tuple, kwargs: Optional[dict] = None) -> str:
        """The numba-subset source for these arguments' types (builds it if needed)."""
        self._ensure_prepared()
        if not self._numba_ready():
            raise RuntimeError(self.disabled)
        call = self.bind(args, kwargs or {})
        live = self.live_values()
        need = "loops" if not self._compiles(call, live) and self._outlines(call, live) \
            else "fused"
        v = self.variant(call, live, need)
        if v is None:
            raise RuntimeError(self.variants[_variant_key(call, live, need)].failed)
        return v.source


def _cache_dir() -> Optional[str]:
    """Where generated numba modules and their machine code are kept, or None.

    $S2SGRAD_CACHE_DIR/numba (the disk cache's directory), unless S2SGRAD_CACHE=0
    or S2SGRAD_JIT_CACHE=0; a cache directory or subdirectory that is not ours
    alone (another user's, writable by others, a link) is not used.
    """
    if os.environ.get("S2SGRAD_JIT_CACHE", "1") == "0":
        return None
    store = disk_cache.current()
    return store.subdirectory(disk_cache.NUMBA_SUBDIR) if store is not None else None


class RecordedRejection(Exception):
    """numba rejected this code in an earlier process (recorded beside its module,
    with numba's version): NumPy runs it at once, with the same warning."""


def _load_module(source: str, ns: dict, name: str, disk: bool) -> Tuple[dict, bool]:
    """Execute the generated source; (its namespace, whether numba may cache it on disk).

    With a cache directory, the source is written to a file named by its hash
    (with numba's and s2sgrad's versions and what its names are bound to), so
    numba's `cache=True` keeps the machine code beside it: a later process
    loads it instead of compiling. The file is checked like a cache entry
    (a regular file of ours nobody else may write, s2sgrad's marker and
    checksum) and must hold exactly this source, else it is written again;
    what runs is always the text generated here, never the file's. numba's
    machine code is used only from a `__pycache__` that passes the same checks.
    Otherwise the code is exec'd from memory. RecordedRejection: numba rejected
    it before.
    """
    import hashlib
    directory = _cache_dir() if disk else None
    if directory is not None:
        numba = numba_module()
        bound = sorted((k, _describe(v)) for k, v in ns.items() if k != "__builtins__")
        digest = hashlib.sha256(repr((source, bound, numba.__version__, np.__version__,
                                      _backend_fingerprint())).encode()).hexdigest()[:40]
        stem = f"m_{digest}"
        path = os.path.join(directory, stem + disk_cache.MODULE_SUFFIX)
        rejected = _recorded_rejection(path)
        if rejected is not None:
            raise RecordedRejection(rejected)
        body = f"# s2sgrad: numba code for {comment_safe(name)}; regenerated when missing\n" \
            + source
        try:
            if disk_cache.read_sealed(path, trust.NUMBA_MODULE_MARKER) != body:
                disk_cache.write_sealed(directory, stem + disk_cache.MODULE_SUFFIX,
                                        trust.NUMBA_MODULE_MARKER, body)
            _private_pycache(directory)
            from .numba_worker import import_file
            module = import_file(path, f"s2sgrad_jit_{digest}", ns,
                                 trust.sealed_text(trust.NUMBA_MODULE_MARKER, body))
            return module.__dict__, not trust.machine_code_problem(directory, stem)
        except (OSError, SyntaxError):
            pass
    code = compile(source, f"<s2sgrad-numba {name}>", "exec")
    exec(code, ns)
    return ns, False


def _private_pycache(directory: str) -> None:
    """numba's machine code directory, made 0700 before numba makes it with the
    umask's mode (it is then checked: see trust.machine_code_problem)."""
    pycache = os.path.join(directory, "__pycache__")
    try:
        os.mkdir(pycache, 0o700)
    except FileExistsError:
        return
    os.chmod(pycache, 0o700)


def _rejection_path(module: str) -> str:
    return module[:-len(disk_cache.MODULE_SUFFIX)] + disk_cache.REJECTION_SUFFIX


def _recorded_rejection(module: str) -> Optional[str]:
    """Why numba rejected the module at `module` in an earlier process, if that
    was recorded with the numba version this process has."""
    text = disk_cache.read_sealed(_rejection_path(module), trust.NUMBA_REJECTION_MARKER)
    if text is None:
        return None
    version, _, why = text.partition("\n")
    numba = numba_module()
    if numba is None or version != f"numba {numba.__version__}" or not why.strip():
        return None
    return why.strip()


def _record_rejection(v: "Variant") -> None:
    """Record beside v's module that numba rejected it (and why, with numba's
    version): later processes skip the compile that fails (seconds each)."""
    numba = numba_module()
    if v.module is None or v.failed is None or numba is None:
        return
    try:
        disk_cache.write_sealed(os.path.dirname(v.module),
                                os.path.basename(_rejection_path(v.module)),
                                trust.NUMBA_REJECTION_MARKER,
                                f"numba {numba.__version__}\n{v.failed}\n")
    except OSError:
        pass


_FINGERPRINT: List[str] = []


def _backend_fingerprint() -> str:
    """A hash of this package's sources: cached machine code links the helpers'."""
    if not _FINGERPRINT:
        import hashlib
        h = hashlib.sha256()
        here = os.path.dirname(os.path.abspath(__file__))
        for fname in sorted(os.listdir(here)):
            if fname.endswith(".py"):
                with open(os.path.join(here, fname), "rb") as f:
                    h.update(fname.encode() + f.read())
        _FINGERPRINT.append(h.hexdigest())
    return _FINGERPRINT[0]


def _describe(value: Any) -> str:
    """What a name of generated numba code is bound to, for the cache key."""
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    mod = getattr(value, "__module__", None) or type(value).__module__
    qual = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{mod}.{qual}"


def _float_stacks(pair: rw.Pair, residuals: Sequence[Any]) -> set:
    """The forward's stacks that held float64 numbers only (and the None a first push
    saves) in a NumPy run: `numba_stacks` makes them arrays."""
    out = set()
    for name, value in zip(pair.residual_names, residuals):
        if name in pair.stacks and type(value) is list and value and \
                all(v is None or type(v) in (float, np.float64) for v in value) and \
                any(v is not None for v in value):
            out.add(name)
    return out


def _closure_cells(*functions: Callable) -> Dict[str, Any]:
    """The closure cells of generated functions by variable name (the helpers and
    the user's closure variables; the first function's where two share a name)."""
    cells: Dict[str, Any] = {}
    for fn in functions:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            cells.setdefault(name, cell)
    return cells


def _python_namespace(*functions: Callable) -> dict:
    """The names generated NumPy functions read: their globals, and their closure
    variables (the helpers and the user's names), as they are bound now."""
    ns = dict(functions[0].__globals__)
    for name, cell in _closure_cells(*functions).items():
        try:
            ns[name] = cell.cell_contents
        except ValueError:      # not set: a read fails as it would in the pair
            pass
    return ns


def _copies(args: Sequence[Any]) -> tuple:
    import copy
    return tuple(a.copy() if type(a) is np.ndarray else
                 copy.deepcopy(a) if isinstance(a, (list, dict)) else a for a in args)


def _rebuilt_alike(bound: dict, namespace: dict) -> bool:
    """Whether a module's names are bound to the objects a worker binds them to (the
    helpers, numpy and math): else its machine code would be another program's."""
    return all(bound.get(name) is value for name, value in namespace.items()
               if name != "__builtins__")


def _unit_cotangent(out: Any) -> Any:
    """A cotangent of ones shaped and typed as a user's would be, or None."""
    if isinstance(out, np.ndarray) and out.dtype.kind in "fc":
        return np.ones_like(out, order="C")
    if type(out) in (float, complex):
        return type(out)(1)
    if isinstance(out, np.floating):
        return float(1)
    if type(out) is tuple:
        parts = tuple(_unit_cotangent(o) for o in out)
        return None if any(p is None for p in parts) else parts
    return None


def _mismatch(got: Any, want: Any, rtol: float = 1e-7) -> Optional[str]:
    """None if got equals want up to rounding (same structure, shapes, NaNs), else why."""
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return "a different structure"
        for g, w in zip(got, want):
            problem = _mismatch(g, w, rtol)
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


def _wants_blas(args, live) -> bool:
    """Use BLAS for large matrix products (numba's BLAS needs SciPy)."""
    big = False
    for v in list(args) + list(live):
        if isinstance(v, np.ndarray) and v.ndim == 2 and v.size >= rw_blas_min():
            big = True
            break
    if not big:
        return False
    try:
        import scipy.linalg.cython_blas  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


def rw_blas_min() -> int:
    from .numba_helpers import BLAS_MIN_SIZE
    return BLAS_MIN_SIZE


def known_state(fn: Callable, positions: Tuple[int, ...]) -> Optional[JitFunction]:
    """The JitFunction of (fn, positions) if one was made, without any check."""
    try:
        return _BY_FUNCTION.get((fn, positions))
    except TypeError:                   # an unhashable callable
        return None


def state_for(fn: Callable, positions: Tuple[int, ...]) -> JitFunction:
    """The JitFunction of (fn, positions), shared by every jit=True wrapper of fn."""
    try:
        state = _BY_FUNCTION.get((fn, positions))
    except TypeError:                   # an unhashable callable
        state = None
    # A state whose pair was generated for names since rebound is rebuilt.
    if state is not None and (state.compiled is None or state.compiled.current()):
        return state
    from ..compiler import cache_key
    key = cache_key(fn, tuple(positions), ("numba",))
    with _LOCK:
        state = _STATES.get(key)
        if state is None or (state.compiled is not None and not state.compiled.current()):
            state = _STATES[key] = JitFunction(fn, tuple(positions))
        try:
            _BY_FUNCTION[(fn, positions)] = state
        except TypeError:
            pass
        return state


def enabled_by_env() -> bool:
    return os.environ.get("S2SGRAD_JIT", "1") != "0"
