"""The forward-mode driver: a function's tangent (JVP) code, from memory or the pass.

`compile_jvp` is to forward mode what compiler.driver's `compile_function` is
to reverse mode: it looks in the memory cache (compiler.memory), runs parse,
normalise and analyse, then the tangent transform (compiler.tangent) and its
clean-up, and compiles the text with the tangent code of the functions it
calls. Forward-mode code is not stored on disk.
"""
from __future__ import annotations

import inspect
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .. import runtime
from . import bindings as _bindings
from .analyze import Activity, analyze, complex_returns
from .bindings import pair_bindings
from .callables import bound_call, packed_rest
from .driver import checked_call_results, compile_function, generate_for, header, load
from .emit import joined_source, to_source, with_callees
from .loader import bind_late
from .memory import LOCK, TANGENTS, cache_key
from .normalize import normalize
from .optimize import tidy
from .tangent import FunctionSite, Tangent, any_live, optimize_tangent, prune_zeros
from .transform import fold_loop_items


@dataclass
class CompiledJvp:
    """A function's generated forward-mode code.

    jvp(*args, *tangents) -> (output, output_tangent), with one tangent per
    position in `wrt`, after every positional argument (defaults filled in by
    the caller: see `call`).
    """

    fn: Callable
    wrt: Tuple[int, ...]
    jvp: Callable
    module_source: str
    activity: Activity
    params: List[str]
    name: str
    # Which parts of the output tangent may be nonzero (True/False, or a tuple of
    # those, nested like the output): False where it is structurally zero.
    output_live: Any = True
    output_varied: Any = True          # does the output depend on the inputs (per item)
    callees: List[Any] = field(default_factory=list)
    not_inlined: List[str] = field(default_factory=list)
    bindings: List[Any] = field(default_factory=list)   # see CompiledFunction.current
    # The rules (by label) whose JVP here is their VJP transposed, this function's own.
    transposed: Tuple[str, ...] = ()

    def current(self) -> bool:
        return _bindings.current(self, set())

    @property
    def zero_output(self) -> Any:
        """Structurally zero output tangent: a bool, or one per item of a tuple output."""
        if isinstance(self.output_live, tuple):
            return tuple(not any_live(item) for item in self.output_live)
        return not self.output_live

    @property
    def source(self) -> str:
        """This function's tangent code followed by that of everything it calls."""
        return joined_source(self)

    def transposed_rules(self) -> List[str]:
        """The rules whose JVP is their VJP transposed, here and in the forward-mode
        code of the functions this calls."""
        out: List[str] = []
        for code in with_callees(self):
            out += [r for r in getattr(code, "transposed", ()) if r not in out]
        return out

    def call(self, args: Sequence[Any], tangents: Sequence[Any], kwargs=None):
        """Run the jvp on a call's arguments (defaults of omitted ones filled in)."""
        if not kwargs and len(args) == len(self.params):
            return self.jvp(*args, *tangents)
        positional, keywords = _bind_call(self.fn, args, kwargs or {})
        return self.jvp(*positional, *tangents, **keywords)


def _bind_call(fn, args, kwargs):
    sig = inspect.signature(fn)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    positional, keywords = [], {}
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional.append(bound.arguments[p.name])
        elif p.kind is p.VAR_POSITIONAL:
            positional.extend(bound.arguments.get(p.name, ()))
        elif p.kind is p.KEYWORD_ONLY:
            keywords[p.name] = bound.arguments[p.name]
    return positional, keywords


_IN_PROGRESS: Set[tuple] = set()


def compile_jvp(fn: Callable, wrt: Tuple[int, ...], optimize_code: bool = True,
                structure: Tuple[Tuple[int, Any], ...] = (),
                demand: Optional[Tuple[bool, ...]] = None, packed: bool = False,
                statics: Tuple[Tuple[str, Any], ...] = (),
                complexes: Tuple[str, ...] = ()) -> CompiledJvp:
    """The cached tangent (JVP) code of `fn` with respect to positions `wrt`.

    `structure` gives, for tuple-valued parameters, which items' tangents may be
    nonzero ((position, (True, False, ...)), ...): the code reads only those
    (a caller passing residuals whose items are constants, say). `demand` says,
    for a function returning a tuple, which items' tangents the caller reads;
    the others are returned as None and not computed. `statics`: (parameter,
    function) pairs the caller passes (the code is compiled for those functions,
    as compile_function's are). `complexes`: the parameters given complex values
    (their operations take the rules for complex arguments and their JVPs).
    """
    bound = None if type(fn) is types.FunctionType else bound_call(fn)
    if bound is not None:   # a bound method, callable object or partial: its function's
        inner = compile_jvp(bound.func, bound.shift(wrt), optimize_code,
                            tuple((i + len(bound.args), flags) for i, flags in structure),
                            demand, statics=bound.instances_read(), complexes=complexes)
        return bound.wrap(inner, fn, wrt, "jvp")
    rest = None if packed else packed_rest(fn)
    if rest is not None:   # `def f(x, *rest)`: see compile_function
        inner = compile_jvp(fn, rest.inner(wrt), optimize_code, (), None, packed=True,
                            complexes=complexes)
        return rest.wrap_jvp(inner, fn, wrt, runtime.tangent.zero_tangent)
    key = cache_key(fn, tuple(wrt), ("jvp", bool(optimize_code), tuple(structure), demand,
                                     tuple(statics), tuple(sorted(complexes))))
    with LOCK:
        hit = TANGENTS.valid(key)
        if hit is not None:
            return hit
        _IN_PROGRESS.add(key)
        TANGENTS.enter()
        try:
            return _compile(fn, tuple(wrt), bool(optimize_code), key, tuple(structure),
                            demand, tuple(statics), tuple(sorted(complexes)))
        finally:
            _IN_PROGRESS.discard(key)
            TANGENTS.leave()


def in_progress(fn: Callable, wrt: Tuple[int, ...], optimize_code: bool = True,
                structure: Tuple[Tuple[int, Any], ...] = (),
                demand: Optional[Tuple[bool, ...]] = None,
                statics: Tuple[Tuple[str, Any], ...] = (),
                complexes: Tuple[str, ...] = ()) -> bool:
    return cache_key(fn, tuple(wrt), ("jvp", bool(optimize_code), tuple(structure),
                                      demand, tuple(statics),
                                      tuple(sorted(complexes)))) in _IN_PROGRESS


def clear_cache() -> None:
    with LOCK:
        TANGENTS.clear()


def _inlined_classes(t) -> List[type]:
    """The Function classes whose bodies the tangent code inlines (their
    methods and the names those read are bindings of the pair)."""
    return [s.cls for s in t.sites.values() if isinstance(s, FunctionSite) and s.inlined]


def _compile(fn, wrt, optimize_code, key, structure=(), demand=None,
             statics=(), complexes=()) -> CompiledJvp:
    return generate_for(fn, wrt, statics, lambda parsed: _generate(
        fn, wrt, optimize_code, key, structure, demand, parsed, complexes))


def _generate(fn, wrt, optimize_code, key, structure, demand, parsed,
              complexes=()) -> CompiledJvp:
    nf = normalize(parsed)
    # (complex values take the rules for complex arguments and their JVPs; a rule
    # whose JVP is not written for them is refused at its line by the transform)
    activity = analyze(nf, wrt, complex_params=complexes)
    nf.node.body = fold_loop_items(nf.node.body, activity)
    t = Tangent(nf, activity, optimize_code, dict(structure), demand)
    fdef = t.run()
    if optimize_code:
        optimize_tangent(fdef, nf, t)
    else:
        prune_zeros(fdef, t.materialized)
        fdef.body = tidy(fdef.body)
    what = ", ".join(parsed.all_params[i] for i in wrt) if wrt else "nothing"
    source = to_source([fdef], header(parsed, f"forward mode (tangents of {what})"))
    free = dict(t.bindings)
    for name in t.late:
        free[name] = None
    functions = load(parsed, source, [fdef.name], " jvp", wrt,
                     "" if optimize_code else " unoptimized", free).functions
    compiled = CompiledJvp(fn=fn, wrt=wrt, jvp=functions[fdef.name], module_source=source,
                           activity=activity, params=parsed.params, name=parsed.name,
                           output_live=t.output_live, output_varied=t.output_varied,
                           not_inlined=list(t.not_inlined),
                           transposed=tuple(sorted(t.transposed)),
                           bindings=pair_bindings(fn, nf.resolver.facts, _inlined_classes(t),
                                                  with_jvp=True, functions=nf.inlined))
    for name in sorted(t.compiled):
        if name in t.bindings and t.compiled[name] not in compiled.callees:
            compiled.callees.append(t.compiled[name])
    TANGENTS[key] = compiled
    late: Dict[str, Any] = {}
    try:
        for name, (callee_fn, callee_wrt, kind, *spec) in sorted(t.late.items()):
            if kind == "jvp":
                callee = compile_jvp(callee_fn, callee_wrt, optimize_code, *spec)
                value = callee.jvp
            else:  # a Function's vjp as a function, for a derived JVP: its reverse mode
                callee = compile_function(callee_fn, callee_wrt)
                value = callee.forward if kind == "forward" else callee.adjoint
            late[name] = callee
            if callee not in compiled.callees:
                compiled.callees.append(callee)
            bind_late(functions, name, value)
    except BaseException:
        TANGENTS.pop(key, None)
        raise
    callees = {**t.compiled, **late}   # (a loop's probe may have named one it dropped)
    returned = complex_returns([(outputs, (callees[name] if name else compiled).activity)
                                for outputs, name in t.call_results
                                if name is None or name in callees], activity) | \
        complex_returns(checked_call_results(activity, optimize_code), activity)
    if returned:   # compiled again, knowing which of its callees return complex values
        TANGENTS.pop(key, None)
        return _compile(fn, wrt, optimize_code, key, structure, demand,
                        tuple(parsed.statics.items()), tuple(sorted(set(complexes) | returned)))
    return compiled
