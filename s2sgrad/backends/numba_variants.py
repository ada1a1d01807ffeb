"""Building the numba variants of one function: free names, kinds, rewrite, load.

A `Variant` is the numba code of one type signature of a `JitFunction`
(`numba_backend`): built from one NumPy run, whose residuals give the
placeholder and kind facts the rewrite needs (`numba_rewrite`), then loaded
(`numba_load`) and handed to numba. The functions here read the state's
prepared facts (its pair, live values, callees) and write only the variant
they build; `numba_backend` decides when to build, call and fall back.
"""
from __future__ import annotations

import builtins
import functools
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..arguments import seed as seed_of
from ..errors import TransformError
from ..function import checkpoint
from ..introspect import is_user_function
from ..witness import plain_residuals
from . import jit_policy
from . import numba_rewrite as rw
from .numba_load import RecordedRejection, first_line, load_module, numba_module
from .numba_worker import NJIT_OPTIONS


# -- live values: the user's globals and closure cells the generated code reads --------
def data(value: Any) -> bool:
    """Values passed as arguments on every call rather than frozen as constants."""
    if isinstance(value, (bool, int, float, complex, np.ndarray, np.generic)):
        return True
    if isinstance(value, tuple):
        return all(data(v) for v in value)
    return False


@dataclass
class Binding:
    name: str
    read: Callable[[], Any]


# -- one compiled variant -----------------------------------------------------------
UNSEEN = object()   # Variant.check's call when no NumPy run of the checked call is kept


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
    trial: jit_policy.Trial = field(default_factory=jit_policy.Trial)   # grad's calls timed

    def functions(self, kind: str) -> list:
        """The numba functions a call of `kind` ("fused": grad, "vjp", "loops") runs."""
        return [self.fused] if kind == "fused" else [self.loops] if kind == "loops" else \
            [self.value, self.pullback]


@dataclass
class FreeNames:
    """What the generated pair's free names are bound to: the values passed on every
    call (`live`: the user's data, and the callees' own live values, renamed), the
    objects frozen into the numba module (`constants`), the compiled functions it
    calls (`callees`: name -> (their state, "forward" or "adjoint")) and, per callee,
    the live values a call passes on (`call_extra`: name -> [(callee's, caller's)])."""

    live: List[Binding]
    constants: Dict[str, Any]
    callees: Dict[str, Tuple[Any, str]]
    call_extra: Dict[str, List[Tuple[str, str]]]


class _Undifferentiated(NamedTuple):
    """What free_names asks of a callee (a compiled pair's fields), for a function of
    the user's that the generated code calls as the user wrote the call."""

    fn: Any
    wrt: Tuple[int, ...]
    name: str
    statics: tuple


def _callee_state(state, state_of: Callable[[Any], Any], callee) -> Any:
    """The prepared numba state of a function state's code calls (rw.Unsupported:
    compiled for a function it is given, recursive, or itself unsupported)."""
    if callee.statics:
        raise rw.Unsupported(f"{callee.name} is compiled for the function it is "
                             f"given ({callee.statics[0][0]}), which the numba "
                             f"backend does not do yet")
    sub = state_of(callee)
    if sub is state or sub.compiled is not None and sub.pair is None and \
            sub.disabled is None:
        raise rw.Unsupported("a recursive call")
    sub.ensure_prepared()
    if sub.disabled is not None:
        raise rw.Unsupported(f"the function it calls, {callee.name}, is "
                             f"unsupported: {sub.disabled}")
    return sub


def free_names(state, state_of: Callable[[Any], Any]) -> FreeNames:
    """Bind the free names of state's pair (see FreeNames); a callee's state is
    state_of(its compiled pair), prepared here. rw.Unsupported: a name numba
    cannot be given (a module other than numpy and math, an unset cell, a
    recursive call, a callee that is itself unsupported)."""
    compiled = state.compiled
    cells = closure_cells(compiled.forward, compiled.adjoint)
    module_globals = compiled.forward.__globals__
    callee_fns = {}
    for callee in compiled.callees:
        callee_fns[id(callee.forward)] = (callee, "forward")
        callee_fns[id(callee.adjoint)] = (callee, "adjoint")
        # A helper marked s2sgrad.checkpoint, called by the forward as the user wrote
        # the call (its adjoint runs the helper's forward again): its forward's value.
        callee_fns[id(callee.fn)] = (callee, "value")
    live, constants, callees = [], {}, {}
    for name in state.pair.free:
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
        elif name in rw.BUILTINS:
            continue
        else:
            raise rw.Unsupported(f"the name {name!r} is not defined")
        if name in state.pair.unaliased and value is not getattr(builtins, name):
            raise rw.Unsupported(f"the code reads the builtin {name} and another "
                                 f"{name!r} of the user's")
        if isinstance(value, checkpoint):
            value = value.__wrapped__
        if id(value) in callee_fns:
            callee, half = callee_fns[id(value)]
            callees[name] = (_callee_state(state, state_of, callee), half)
            continue
        if is_user_function(value):
            # A call of the user's function that nothing differentiates (`weight(k)` in
            # a loop): its own pair, compiled for no argument, gives the value.
            callee = _Undifferentiated(value, (), value.__name__, ())
            given = [d for d in (value.__defaults__ or ()) +
                     tuple((value.__kwdefaults__ or {}).values()) if callable(d)]
            if given:   # (`fn=np.sin`: numba takes no function as a parameter's value)
                raise rw.Unsupported(f"the function it calls, {callee.name}, has a "
                                     f"function as a default ({given[0]!r})")
            try:
                callees[name] = (_callee_state(state, state_of, callee), "value")
            except TransformError as exc:   # (NumPy runs it as the user's Python)
                raise rw.Unsupported(f"the function it calls, {callee.name}, is not "
                                     f"compiled: {exc.reason}") from None
            continue
        if callable(value) and getattr(value, "__name__", "").endswith(
                ("_forward", "_adjoint")) and name.startswith("_s2s_"):
            raise rw.Unsupported(f"{name} is not a compiled callee")
        if data(value):
            live.append(Binding(name, reader))
        elif isinstance(value, types.ModuleType):
            if value.__name__ not in ("numpy", "math", "cmath"):
                raise rw.Unsupported(f"the module {value.__name__} (numba knows numpy "
                                     f"and math)")
            constants[name] = value
        else:
            constants[name] = value
    # A callee's live values are parameters of its pair: the caller passes them on.
    call_extra: Dict[str, List[Tuple[str, str]]] = {}
    seen: Dict[int, List[Tuple[str, str]]] = {}
    for name, (sub, _) in sorted(callees.items()):
        if id(sub) not in seen:
            extra = []
            for b in sub.live:
                param = f"_nbl{len(seen)}_{b.name}"
                live.append(Binding(param, b.read))
                extra.append((b.name, param))
            seen[id(sub)] = extra
        call_extra[name] = seen[id(sub)]
    return FreeNames(live, constants, callees, call_extra)


def numpy_forward(state, call: tuple) -> tuple:
    """The NumPy forward of a bound call (`JitFunction.bind`: every parameter, defaults
    applied, in the pair's order), its keyword-only parameters given by name."""
    signature = state.signature
    if signature is None:
        return state.numpy.forward(*call)
    positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                     for p in signature.parameters.values())
    if len(call) <= positional:
        return state.numpy.forward(*call)
    return state.numpy.forward(*call[:positional],
                                  **dict(zip(state.pair.params[positional:],
                                             call[positional:])))


def build(state, args, live, key, need, old: Optional[Variant],
          ran: Optional[tuple] = None) -> Variant:
    """Learn kinds from one NumPy run, rewrite, exec, njit (numba compiles at the call).

    `ran`: (output, residuals) of the NumPy run the user's thread made of this call
    (`skeleton` of them), when the variant is built behind it; else the run is made
    here, and its values are the reference the first compiled result is checked with.
    """
    v = old or Variant()
    if need == "fused":   # its grad calls are timed once checked (jit_policy.Trial)
        v.trial.straight = not state.facts.has_loops and not state.facts.elementwise
        state.measuring = True
    if ran is None:
        # The NumPy run on copies: the call that follows writes into the arguments
        # (if the function does) once, as without jit.
        out, witnessed = numpy_forward(state, copies(args))
        residuals, built_for = plain_residuals(witnessed), args
    else:
        (out, residuals), built_for = ran, UNSEEN   # the reference: run again when checked
        witnessed = residuals
    if need in ("fused", "loops"):
        seed = seed_of(out)     # a non-scalar output: the API's ValueError, now
        v.check = (built_for, out, witnessed, seed)   # (its adjoint completes the witness)
    if need == "loops":
        build_loops(state, v, args, live, residuals, seed)
        state.variants[key] = v
        return v
    try:
        seeds = seed_kinds(state, args, live)
        placeholders = rw.learn_placeholders(state.pair, residuals, seeds)
        fwd_kinds, adj_kinds = infer_kinds(state.pair, seeds, residuals,
                                           seed if need == "fused" else None)
        blas = wants_blas(args, live)
        kinds = ["fused"] if need == "fused" else ["value", "fused_cot"]
        shapes = {name: value.shape for name, value in
                  zip(list(state.pair.params) + list(state.pair.residual_names),
                      tuple(args) + tuple(residuals))
                  if name is not None and isinstance(value, np.ndarray)}
        out_src = rw.rewrite(state.pair, placeholders, [b.name for b in state.live], kinds,
                             fwd_kinds, adj_kinds, blas, state.call_extra, shapes=shapes,
                             float_stacks=float_stacks(state.pair, residuals))
        ns = module_namespace(state, blas, residuals)
        ns, cache = load_module(out_src.source, ns, state.pair.name,
                                disk=callees_on_disk(state))
        v.on_disk, v.blas, v.module = cache, blas, ns.get("__file__") if cache else None
        jit = functools.partial(numba_module().njit, **dict(NJIT_OPTIONS, cache=cache))
        if need == "fused":
            v.fused = jit(ns[out_src.names["fused"]])
        else:
            v.value = jit(ns[out_src.names["value"]])
            v.pullback = jit(ns[out_src.names["fused_cot"]])
        v.source = (v.source + "\n\n" + out_src.source).strip() + "\n"
    except (rw.Unsupported, RecordedRejection) as exc:
        v.failed = str(exc)
        if need != "fused" or not loops_instead(state, tuple(args), tuple(live)):
            state.warn(v.failed)   # (else its loops run outlined, or it warns then)
    except Exception as exc:  # noqa: BLE001 - a bug of the rewrite: NumPy, and say so
        v.failed = f"internal error of the numba rewrite: {first_line(exc)}"
        state.warn(v.failed)
    state.variants[key] = v
    return v


def loops_instead(state, args: tuple, live: tuple) -> bool:
    """Whether the loops, outlined, run on numba where the whole function cannot
    (what numba could not take is outside them): the function outlines at these
    sizes and its loops' variant builds (here, so that a warning says at once when
    neither does)."""
    return state._outlines(args, live) and state.variant(args, live, "loops") is not None


def build_loops(state, v: Variant, args, live, residuals, seed) -> None:
    """The outlined variant (`numba_outline`): the host and the NumPy loops as
    Python functions over the NumPy module's globals, numba's loops as a module
    of their own. What cannot be outlined leaves v failed, without a warning:
    the call runs on NumPy, as the plan said before there was an outline."""
    from . import numba_outline as outline
    from .numba_stacks import preallocate_stacks
    try:
        pair = split_pair(state)
        seeds = seed_kinds(state, args, live)
        placeholders = rw.learn_placeholders(pair, residuals, seeds)
        fwd_kinds, adj_kinds = infer_kinds(pair, seeds, residuals, seed)
        # BLAS for the loops' products only if the arguments they read are large:
        # the large products of the call are the host's, on NumPy. (A loops
        # variant is built only for a function outline_facts can cut.)
        read, limit = outline_facts(state)
        values = tuple(args) + tuple(live)
        blas = wants_blas([values[i] for i in read], ())
        numba_fn, numpy_fn, _, rename = rw.fused_twins(
            pair, placeholders, [b.name for b in state.live], fwd_kinds, adj_kinds, blas,
            state.call_extra)
        cut = outline.outline(numpy_fn, numba_fn, pair.name,
                              outline.barred_names(pair, rename) | host_calls(state))
        host_globals = python_namespace(state.compiled.forward, state.compiled.adjoint)
        if any(host_globals.get(n) is not c for n, c in state.constants.items()):
            raise rw.Unsupported("a name the code reads is not the module's")
    except rw.Unsupported as exc:
        v.failed = f"its loops cannot be outlined: {exc}"
        return
    except Exception as exc:  # noqa: BLE001 - a bug of the outline: NumPy, and say so
        v.failed = f"internal error of the loops' outline: {first_line(exc)}"
        state.warn(v.failed)
        return
    import ast
    python = ast.unparse(ast.Module(body=[cut.host, cut.numpy_loops], type_ignores=[]))
    from ..compiler.loader import free_names, helper_value
    for name in free_names(python, ()):   # (a helper the rewrite brought in, such as the
        if name not in host_globals:      # zeros of a tuple a Function returns)
            host_globals[name] = helper_value(name)
    code = compile(python, f"<s2sgrad-outlined {pair.name}>", "exec")
    made = {c.co_name: types.FunctionType(c, host_globals, c.co_name)
            for c in code.co_consts if isinstance(c, types.CodeType)}
    loops = preallocate_stacks(cut.loops, float_stacks(pair, residuals))
    numba_src = ast.unparse(ast.Module(body=[loops], type_ignores=[])) + "\n"
    try:
        ns, cache = load_module(numba_src, module_namespace(state, blas, residuals),
                                pair.name, disk=True)
        v.module = ns.get("__file__") if cache else None
        v.loops = functools.partial(numba_module().njit, cache=cache)(ns[loops.name])
    except RecordedRejection as exc:
        v.failed = str(exc)
        state.warn(v.failed)
        return
    except Exception as exc:  # noqa: BLE001
        v.failed = f"numba could not take its loops: {first_line(exc)}"
        state.warn(v.failed)
        return
    v.host, v.numpy_loops = made[cut.host.name], made[cut.numpy_loops.name]
    v.on_disk, v.blas, v.loops_limit = cache, blas, limit
    v.source = (f"# NumPy runs this; it calls {cut.loops.name} (numba) when the "
                f"arrays given have fewer than {int(v.loops_limit):,} elements\n"
                if v.loops_limit < float("inf") else "") + \
        ast.unparse(cut.host) + "\n\n\n" + numba_src


def seed_kinds(state, args, live) -> Dict[str, Any]:
    """The kinds of the parameters and live values seen at a call: what kind
    inference starts from."""
    names = state.pair.params + [b.name for b in state.live]
    kinds = {name: rw.kind_of(value) for name, value in
             zip(names, tuple(args) + tuple(live))}
    return {name: kind for name, kind in kinds.items() if kind is not None}


def infer_kinds(pair: rw.Pair, seeds, residuals, cotangent):
    """Kind inference of the forward and the adjoint, seeded by one NumPy run."""
    known = dict(seeds)
    stacks = {}
    for name, value in zip(pair.residual_names, residuals):
        if name is None:
            continue
        if isinstance(value, list):   # a stack: the kind of its last item
            last = next((x for x in reversed(value) if x is not None), None)
            kind = None if last is None else rw.kind_of(last)
            if kind is not None:
                stacks[name] = kind
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


def module_namespace(state, blas: bool, residuals=None) -> dict:
    """The names the numba module of state's pair is executed with: the helpers,
    the constants, and the split numba functions of the callees."""
    from . import numba_helpers
    ns = numba_helpers.namespace(blas, state.constants)
    examples = {}
    if state.callees and residuals is not None:
        examples = rw.callee_residuals(state.pair, list(state.callees), residuals)
    for name, (sub, half) in state.callees.items():
        forward_name = next((n for n, (s2, h) in state.callees.items()
                             if s2 is sub and h == "forward"), None)
        ns[name] = split_functions(sub, examples.get(forward_name))[_HALVES.index(half)]
    return ns


# What a caller may call of a callee's split module, in the order of `state.split`
# (after the worker's record of the module, at 2).
_HALVES = ("forward", "adjoint", "record", "value")


def split_functions(state, residuals: Optional[tuple] = None) -> tuple:
    """(forward, adjoint) of this function as numba functions, for its callers.

    Placeholder types come from one residual tuple of a NumPy run (the
    caller's), when there is one.
    """
    state.ensure_prepared()
    if not state.numba_ready():
        raise rw.Unsupported(state.disabled)
    with state.lock:
        if state.split is not None:
            return state.split
        if state.building:
            raise rw.Unsupported("a recursive call")
        state.building = True
        try:
            placeholders, fwd_kinds, adj_kinds = {}, None, None
            if residuals is not None and len(residuals) == len(state.pair.residual_names):
                placeholders = rw.learn_placeholders(state.pair, residuals)
                fwd_kinds, adj_kinds = infer_kinds(state.pair, {}, residuals, None)
            src = rw.rewrite(state.pair, placeholders, [b.name for b in state.live],
                             ["split", "value"], fwd_kinds, adj_kinds, False,
                             state.call_extra)
            ns = module_namespace(state, False, residuals)
            ns, cache = load_module(src.source, ns, state.pair.name,
                                    disk=callees_on_disk(state))
            jit = functools.partial(numba_module().njit, **dict(NJIT_OPTIONS, cache=cache))
            state.split = (jit(ns[state.pair.name + "_nb_forward"]),
                           jit(ns[state.pair.name + "_nb_adjoint"]),
                           _as_callee(state, ns) if cache else None,
                           jit(ns[state.pair.name + "_nb_value"]))
            return state.split
        finally:
            state.building = False


def callees_on_disk(state) -> bool:
    """Whether every function state's code calls has its split module on disk (so that
    numba may keep state's machine code, and a worker rebuild its module)."""
    return all(sub.split is not None and sub.split[2] is not None
               for sub, _ in state.callees.values())


def modules_only(state) -> bool:
    """Whether state's code reads no object but the modules a worker imports (numpy,
    math): else another process could not rebuild its module."""
    from .numba_worker import MODULES
    return all(isinstance(c, types.ModuleType) and c.__name__ in MODULES
               for c in state.constants.values())


def _as_callee(state, ns: dict):
    """The worker's record of state's split module (numba_worker.Callee), or None where
    another process could not rebuild it (see modules_only)."""
    from .numba_worker import Callee
    if not modules_only(state):
        return None
    return Callee(ns["__file__"], ns["__name__"], ns.get("__s2sgrad_sha256__", ""),
                  {name: c.__name__ for name, c in state.constants.items()},
                  callee_records(state))


def callee_records(state) -> dict:
    """name in state's code -> (the callee's numba_worker.Callee, its function's name)."""
    return {name: (sub.split[2], f"{sub.pair.name}_nb_{half}")
            for name, (sub, half) in state.callees.items()}


def split_pair(state) -> rw.Pair:
    """The pair with nested calls split (`numba_outline.split_pair`), made once:
    the outline's facts and every outlined variant start from it."""
    if state.split_calls is None:
        from . import numba_outline as outline
        state.split_calls = outline.split_pair(state.pair)
    return state.split_calls


def host_calls(state) -> set:
    """The names of the user's functions that state's code calls only for their values
    (no cotangent goes through them): in an outline, their statements stay on NumPy's
    side, as any Python the loops do not need."""
    return {name for name, (_, half) in state.callees.items() if half == "value"}


def outline_facts(state) -> Optional[Tuple[Tuple[int, ...], float]]:
    """(positions among the call's arguments and live values of those the outlined
    loops read, the size limit of the arrays they are given), or None when the
    function cannot be outlined. The cut is made once on the NumPy statements,
    which do not depend on the types (a variant makes it again with them)."""
    if state.outline is None:
        from . import numba_outline as outline
        facts: Any = ()
        if state.facts.has_loops and not state.mutates and \
                set(state.callees) <= host_calls(state):
            try:
                pair = split_pair(state)
                numpy_fn, rename = rw.fused_numpy(pair, [b.name for b in state.live])
                cut = outline.outline(numpy_fn, numpy_fn, pair.name,
                                      outline.barred_names(pair, rename) | host_calls(state))
                names = list(pair.params) + [b.name for b in state.live]
                products = jit_policy.code_facts([cut.numpy_loops]).products
                limit = float("inf") if state.force in ("always", "loops") else \
                    jit_policy.LOOP_PRODUCT_LIMIT if products else jit_policy.LOOP_LIMIT
                facts = (tuple(names.index(n) for n in cut.inputs if n in names), limit)
            except rw.Unsupported:
                pass
        state.outline = facts
    return state.outline or None


def call_signatures(state, v: Variant, kind: str, call: tuple, live: tuple,
                    out: Any = UNSEEN) -> Optional[list]:
    """[(numba function, its signature)] of v's functions of `kind` ("fused", "vjp")
    at these arguments' types, or None when numba cannot type one of them. `out`:
    the call's output, when a NumPy run made it (a vjp's cotangent has its type)."""
    numba = numba_module()
    functions = v.functions(kind)
    try:
        signature = tuple(numba.typeof(a) for a in tuple(call) + tuple(live))
        if kind != "vjp":
            return [(functions[0], signature)]
        if out is UNSEEN:
            out, _ = numpy_forward(state, copies(call))
        cotangent = unit_cotangent(out)
        if cotangent is None:
            return None
        return [(functions[0], signature),
                (functions[1], signature + (numba.typeof(cotangent),))]
    except Exception:  # noqa: BLE001 - a value numba cannot type: compiled at the call
        return None


def worker_job(state, v: Variant, kind: str, call: tuple, live: tuple,
               out: Any = UNSEEN):
    """The worker's job for v's functions of `kind` at these arguments' types, or
    None when another process could not rebuild its module (not on disk, or it
    names objects other than the modules numba knows) or numba cannot type them."""
    from .numba_worker import Job
    if not v.on_disk or not modules_only(state) or not callees_on_disk(state):
        return None
    first = v.functions(kind)[0].py_func
    module = sys.modules.get(first.__module__)
    path = getattr(module, "__file__", None)
    from .numba_helpers import namespace
    if path is None or not rebuilt_alike(module.__dict__,
                                         namespace(v.blas, state.constants)):
        return None
    signatures = call_signatures(state, v, kind, call, live, out)
    if signatures is None:
        return None
    return Job(path, first.__module__, v.blas,
               {name: c.__name__ for name, c in state.constants.items()},
               [(f.py_func.__name__, sig) for f, sig in signatures],
               module.__dict__.get("__s2sgrad_sha256__", ""), callee_records(state))


def float_stacks(pair: rw.Pair, residuals: Sequence[Any]) -> set:
    """The forward's stacks that held float64 numbers only (and the None a first push
    saves) in a NumPy run: `numba_stacks` makes them arrays."""
    out = set()
    for name, value in zip(pair.residual_names, residuals):
        if name in pair.stacks and type(value) is list and value and \
                all(v is None or type(v) in (float, np.float64) for v in value) and \
                any(v is not None for v in value):
            out.add(name)
    return out


def closure_cells(*functions: Callable) -> Dict[str, Any]:
    """The closure cells of generated functions by variable name (the helpers and
    the user's closure variables; the first function's where two share a name)."""
    cells: Dict[str, Any] = {}
    for fn in functions:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            cells.setdefault(name, cell)
    return cells


def python_namespace(*functions: Callable) -> dict:
    """The names generated NumPy functions read: their globals, and their closure
    variables (the helpers and the user's names), as they are bound now."""
    ns = dict(functions[0].__globals__)
    for name, cell in closure_cells(*functions).items():
        try:
            ns[name] = cell.cell_contents
        except ValueError:      # not set: a read fails as it would in the pair
            pass
    return ns


def skeleton(value: Any) -> Any:
    """The containers of a NumPy run's residuals copied (their arrays and numbers
    shared): what kinds are learnt from, while the adjoint in the user's thread
    pops the stacks it was given."""
    if type(value) is list:
        return [skeleton(x) for x in value]
    if type(value) is tuple:
        return tuple(skeleton(x) for x in value)
    if type(value) is dict:
        return {k: skeleton(x) for k, x in value.items()}
    return value


def copies(args: Sequence[Any]) -> tuple:
    import copy
    return tuple(a.copy() if type(a) is np.ndarray else
                 copy.deepcopy(a) if isinstance(a, (list, dict)) else a for a in args)


def rebuilt_alike(bound: dict, namespace: dict) -> bool:
    """Whether a module's names are bound to the objects a worker binds them to (the
    helpers, numpy and math): else its machine code would be another program's."""
    return all(bound.get(name) is value for name, value in namespace.items()
               if name != "__builtins__")


def unit_cotangent(out: Any) -> Any:
    """A cotangent of ones shaped and typed as a user's would be, or None."""
    if isinstance(out, np.ndarray) and out.dtype.kind in "fc":
        return np.ones_like(out, order="C")
    if type(out) in (float, complex):
        return type(out)(1)
    if isinstance(out, np.floating):
        return float(1)
    if type(out) is tuple:
        parts = tuple(unit_cotangent(o) for o in out)
        return None if any(p is None for p in parts) else parts
    return None


def wants_blas(args, live) -> bool:
    """Use BLAS for large matrix products (numba's BLAS needs SciPy)."""
    big = False
    for v in list(args) + list(live):
        if isinstance(v, np.ndarray) and v.ndim == 2 and v.size >= blas_min():
            big = True
            break
    if not big:
        return False
    try:
        import scipy.linalg.cython_blas  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


def blas_min() -> int:
    from .numba_helpers import BLAS_MIN_SIZE
    return BLAS_MIN_SIZE
