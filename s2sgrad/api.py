"""The public entry points: differentiable, grad, value_and_grad, vjp, source.

A thin layer over the compiler: it validates arguments, runs the generated
forward and adjoint, and gives gradients the shape and dtype of the argument
they belong to.
"""
from __future__ import annotations

import functools
import inspect
import types
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence, Tuple, Union

from . import compiler  # (its drivers and passes load at the first compile)
from .arguments import (
    Wrt,
    call_kind,
    check_cotangent,
    complex_parameters,
    finalize,
    finalized,
    leaf_positions,
    leaves_of,
    normalize_wrt,
    numpy_where_numbers_fail,
    pack,
    parameter_names,
    seed,
)
from .compiler import FUNCTION_TYPES, all_hold, flat_bindings
from .errors import TransformError
from .introspect import unwrap, user_instance
from .optimizer_check import checked_pair
from .runtime.array_api import namespace_among
from .runtime.arrays import any_foreign
from .runtime.release import Once
from .witness import witnessed_pair

if TYPE_CHECKING:
    from .compiler.compiled import CompiledFunction


def differentiable(fn: Callable) -> Callable:
    """Mark `fn` for differentiation; calling it runs the original unchanged.

    Compilation happens on the first gradient request and is cached.
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    # The mark is the wrapper itself: functools.wraps copies __dict__, and a
    # decorator applied over this one must not look like s2sgrad's own.
    wrapper.__s2sgrad__ = wrapper
    return wrapper


def _derived_from(f: Callable, kind: str, positions: Tuple[int, ...], as_tuple: bool):
    """Name and document a derived function like f, without making it look like f.

    functools.wraps would set __wrapped__ = f, and whoever unwraps decorators
    (the compiler does) would then see f itself instead of its gradient.
    """
    def decorate(wrapper: Callable) -> Callable:
        name = getattr(f, "__name__", "f")
        wrapper.__name__ = wrapper.__qualname__ = f"{kind}_{name}"
        wrapper.__doc__ = f"{kind} of {name} with respect to arguments {positions}."
        # as_tuple: the gradient is a tuple even for one position (wrt=(i,)).
        wrapper.__s2sgrad_derived__ = (kind, f, positions, as_tuple)
        return wrapper
    return decorate


class Derived:
    """What `grad(f)` and `value_and_grad(f)` return: calls its function, and pickles
    by reference to f and the options (`pickle.dumps(grad(f))` for a module-level f
    sends it to a multiprocessing pool or a Dask worker, which makes its own pair).

    It reads as the derived function it calls (`__wrapped__`, marked as s2sgrad's
    own and passing the call through), so the compiler differentiates it again."""

    def __init__(self, run: Callable, remake: tuple):
        self.__s2sgrad__ = self   # (see differentiable)
        self.__wrapped__ = run
        self.__name__ = self.__qualname__ = run.__name__
        self.__doc__ = run.__doc__
        self.__module__ = getattr(remake[1], "__module__", None)
        self.__s2sgrad_derived__ = run.__s2sgrad_derived__
        self._remake = remake

    def __call__(self, *args, **kwargs):
        return self.__wrapped__(*args, **kwargs)

    def __reduce__(self):
        return _remade, self._remake

    def __repr__(self) -> str:
        return f"<s2sgrad {self.__name__}>"


def _remade(kind: str, f: Callable, wrt: Any, jit: bool, witness: Any) -> Derived:
    """Derived.__reduce__'s maker: the same derivative of f, in this process."""
    make = {"grad": grad, "value_and_grad": value_and_grad}[kind]
    return make(f, wrt, jit=jit, witness=witness)


def pair_for(f: Callable, positions: Tuple[int, ...],
              numbers_at: Tuple[int, ...] = (), leaves: Tuple[int, ...] = (),
              foreign: bool = False, xp: Any = None, witness: Any = None,
              statics: Tuple[Tuple[str, Any], ...] = (),
              complexes: Tuple[str, ...] = ()) -> CompiledFunction:
    """The pair for f; where some arguments are Python numbers, one specialised to
    that (values computed from them alone are scalars: no broadcasting to undo);
    where some are complex (`complexes`: their names), one whose operations on
    them take the rules for complex arguments;
    `leaves`: the positions of the arguments that are arrays or numbers. For
    another library's arrays (`foreign`) the adjoint makes no in-place updates:
    `a += b` cannot put a Dask value into a NumPy cotangent, nor `a[i] += b`
    every index into a Dask one."""
    _refuse_a_generator(f)
    scalars: Tuple[str, ...] = ()
    if numbers_at:
        names = parameter_names(f)
        scalars = tuple(names[i] for i in numbers_at if i < len(names))
    if xp is not None:   # arrays of the array API standard: the pure pair, re-bound
        from .backends.array_api import array_api_pair
        return array_api_pair(compiler.compile_function(
            f, positions, scalars=scalars, leaves=leaves, pure=True, statics=statics,
            complexes=complexes), xp)
    options = dict(scalars=scalars, leaves=leaves, pure=foreign, statics=statics,
                   complexes=complexes)
    def faithful(pair: CompiledFunction) -> CompiledFunction:
        # (Python numbers among the arguments: Python's arithmetic on them)
        return numpy_where_numbers_fail(pair, real=not complexes) if numbers_at else pair
    pair = checked_pair(faithful(compiler.compile_function(f, positions, **options)),
                        lambda: faithful(compiler.compile_function(f, positions, False,
                                                                   **options)))
    if foreign:   # its forward and adjoint run under foreign_dispatch
        from .backends.array_api import dispatching_pair
        return dispatching_pair(pair)
    # (Lazy and other libraries' arrays are not witnessed: the checks would compute them.)
    return witnessed_pair(pair, f, witness, compiler.discard)


def value_and_grad(f: Callable, wrt: Union[int, Sequence[int]] = 0,
                   jit: bool = False, witness: Any = None) -> Callable:
    """Return a function computing (f(*args), gradient of f w.r.t. args[wrt]).

    jit=True runs the generated code compiled by numba (s2sgrad.backends).
    witness: the self-checks of the generated code (s2sgrad.witness): True or
    "first" (on the first call per argument kind), "always", False or "off";
    None: the S2SGRAD_WITNESS environment variable, default "first".
    """
    positions, single = normalize_wrt(wrt, f=f)
    remake = ("value_and_grad", f, wrt, jit, witness)
    if jit and not _instance_defaults(f):   # (else the pair made for the instance)
        from .backends import jit_value_and_grad
        return Derived(_derived_from(f, "value_and_grad", positions, not single)(
            jit_value_and_grad(f, positions, single,
                               value_and_grad(f, wrt, witness=witness), witness)), remake)

    # The compiled pair per kind of call (which arguments are Python numbers) with
    # the bindings it was generated for, flattened: later calls skip the cache
    # lookup and check the bindings in one loop.
    compiled_pairs: Dict[tuple, Tuple[CompiledFunction, tuple]] = {}
    function_defaults = _function_defaults(f)

    views: Dict[Any, Any] = {}   # f written over a structure's arrays -> its value_and_grad

    def view_for(flat, inner_positions: Tuple[int, ...]) -> Callable:
        return value_and_grad(flat.fn, inner_positions, witness=witness)

    @_derived_from(f, "value_and_grad", positions, not single)
    def value_and_grad_f(*args, **kwargs):
        kind = call_kind(f, args, positions)
        if kind[1] is not None and not kwargs and not function_defaults:
            through = _aggregates().through_view(f, positions, single, args, views,
                                                 view_for, finalize)
            if through is not None:
                return through
        foreign = xp = None
        statics = functions_given(f, args, kwargs, function_defaults) \
            if kind[1] is not None or function_defaults or kwargs else ()
        complexes: Tuple[str, ...] = ()
        if kind[1] is not None:   # (not the all-NumPy path)
            xp = namespace_among(args)
            foreign = xp is None and any_foreign(args)
            complexes = complex_parameters(f, args, kwargs)
        elif kwargs:
            complexes = complex_parameters(f, (), kwargs)
        if kind[1] is not None or statics or complexes:
            kind += (foreign, xp, statics, complexes)
        entry = compiled_pairs.get(kind)
        if entry is None or not all_hold(entry[1]):
            compiled = pair_for(f, positions, kind[0], leaf_positions(args), foreign, xp,
                                witness, statics, complexes)
            entry = compiled_pairs[kind] = (compiled, flat_bindings(compiled))
        compiled = entry[0]
        if foreign:   # NumPy arrays beside Dask ones join them: the gradient stays lazy
            args = _lift_beside_dask(args)
        out, residuals = compiled.forward(*args, **kwargs)
        if type(residuals) is tuple and not kind[0]:
            # One adjoint call: it may free each residual after reading it last (not
            # with Python numbers, where it may run again on NumPy's: see pair_for).
            residuals = Once(residuals)
        return finalized(out, compiled.adjoint(residuals, seed(out)), args, positions,
                         single)
    return Derived(value_and_grad_f, remake)


def _positions_and_tuple(wrt, f=None) -> Tuple[Tuple[int, ...], bool]:
    positions, single = normalize_wrt(wrt, f=f)
    return positions, not single


def grad(f: Callable, wrt: Union[int, Sequence[int]] = 0, jit: bool = False,
         witness: Any = None) -> Callable:
    """Return a function with f's signature computing the gradient of scalar f
    (jit and witness: see value_and_grad)."""
    vg = value_and_grad(f, wrt, jit=jit, witness=witness)

    @_derived_from(f, "grad", *_positions_and_tuple(wrt, f))
    def grad_f(*args, **kwargs):
        return vg(*args, **kwargs)[1]
    return Derived(grad_f, ("grad", f, wrt, jit, witness))


def vjp(f: Callable, *args: Any, wrt: Wrt = None, jit: bool = False,
        witness: Any = None) -> Tuple[Any, Callable]:
    """Run f(*args) and return (output, pullback); pullback(v) gives v^T J.

    The pullback reuses the values kept by the forward pass and may be called
    many times with different v. jit=True: see value_and_grad.
    """
    positions, single = normalize_wrt(wrt, len(args))
    numbers_at, leaves = call_kind(f, args, positions)
    if leaves is not None and len(leaves) < len(args):   # lists, tuples or dicts given
        through = _vjp_through_view(f, args, positions, single, jit, witness)
        if through is not None:
            return through
    complexes = () if leaves is None else complex_parameters(f, args, {})
    if jit and not complexes and not _instance_defaults(f):   # (the numba pair is not
        # specialised to complex values, nor made for an instance: the NumPy backend's are)
        backends = _backends()
        if (leaves is None or len(leaves) == len(args) or
                not backends.structured_vjp(f, positions, args, witness)) and \
                not backends.numpy_runs_vjp(f, positions, witness):
            return backends.jit_vjp(f, args, positions, single, witness)
    xp = None if leaves is None else namespace_among(args)
    foreign = xp is None and leaves is not None and any_foreign(args)
    compiled = _known_pair(f, positions, numbers_at,
                           tuple(range(len(args))) if leaves is None else leaves, foreign, xp,
                           witness, functions_given(f, args, {}, _function_defaults(f)),
                           complexes)
    if foreign:   # NumPy arrays beside Dask ones join them: the gradient stays lazy
        args = _lift_beside_dask(args)
    out, residuals = compiled.forward(*args)

    def pullback(v):
        check_cotangent(v, out)
        grads = pack(compiled.adjoint(residuals, v), positions)
        grads = tuple(finalize(g, args[i], avoid=leaves_of(v)) for g, i in zip(grads, positions))
        return grads[0] if single else grads
    return out, pullback


def _vjp_through_view(f: Callable, args: tuple, positions: Tuple[int, ...], single: bool,
                      jit: bool, witness: Any) -> Optional[Tuple[Any, Callable]]:
    """vjp of f given lists, tuples or dicts of arrays, from f written over their
    arrays (compiler.aggregates), its cotangents regrouped into the structures; None
    where there is no such view (see aggregates.through_view)."""
    aggregates = _aggregates()
    ready = aggregates.prepared(f, args, positions)
    if ready is None:
        return None
    flat, values, inner_positions = ready
    try:
        out, inner = vjp(flat.fn, *values, wrt=inner_positions, jit=jit, witness=witness)
    except TransformError:   # (the general code reports it at the user's line)
        return None

    def pullback(v):
        return aggregates.regrouped(flat, inner(v), positions, args, single, finalize)
    return out, pullback


_BACKENDS: list = []
_AGGREGATES: list = []


def _aggregates():
    """s2sgrad.compiler.aggregates, imported on the first call given a structure."""
    if not _AGGREGATES:
        from .compiler import aggregates
        _AGGREGATES.append(aggregates)
    return _AGGREGATES[0]


def _lift_beside_dask(args: tuple) -> tuple:
    from .backends.array_api import lift_beside_dask
    return lift_beside_dask(args)


def _backends():
    """s2sgrad.backends, imported on the first jit=True call (vjp is called per
    pullback: an import statement there would cost each call)."""
    if not _BACKENDS:
        from . import backends
        _BACKENDS.append(backends)
    return _BACKENDS[0]


# vjp is called afresh for every pullback, so it keeps the pairs it used per
# function (weakly: a function that goes away takes its pairs along) and skips
# the cache key on later calls; the code, the defaults and every name the pair
# was generated for are checked each time, as compile_function would.
_PAIRS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _instance_defaults(f: Callable) -> bool:
    """Whether a default of f is an instance whose methods f calls (_function_defaults)."""
    return any(not isinstance(d, FUNCTION_TYPES) for _, _, d in _function_defaults(f))


def _function_defaults(f: Callable) -> Tuple[Tuple[int, str, Any], ...]:
    """(position, name, default) of each parameter of f whose default is a function
    (`act=softplus`), or an instance of the user's class whose methods f calls
    (`model=MODEL`: see functions_given); computed once per grad(f), read at each call."""
    if not isinstance(f, types.FunctionType) or not f.__defaults__:
        return ()   # (a method, partial or callable object: its pairs are its function's)
    code, defaults = f.__code__, f.__defaults__
    names = code.co_varnames[:code.co_argcount]
    first = len(names) - len(defaults)
    out = [(first + k, names[first + k], d) for k, d in enumerate(defaults)
           if isinstance(d, FUNCTION_TYPES)]
    if any(user_instance(d) for d in defaults):
        from .compiler.callables import instances_read
        read = dict(instances_read(f, [(names[first + k], d) for k, d in enumerate(defaults)]))
        out += [(first + k, names[first + k], d) for k, d in enumerate(defaults)
                if names[first + k] in read]
    return tuple(sorted(out, key=lambda entry: entry[0]))


def functions_given(f: Callable, args: tuple, kwargs: dict,
                    defaults: Tuple[Tuple[int, str, Any], ...]) -> Tuple[Tuple[str, Any], ...]:
    """(parameter, function) for each parameter this call binds to a function: an
    argument that is one, or a function default the call leaves. The pair is made
    for them (a kind of call, like a shape), so that `act(z)` in f is `act`'s rule.
    Also (parameter, instance) for an instance of the user's class whose methods f
    calls (`model.loss(w)` of a `model` argument: callables.instances_read)."""
    out = []
    if any(isinstance(a, FUNCTION_TYPES) for a in args) or kwargs:
        names = parameter_names(f)
        out = [(names[i], a) for i, a in enumerate(args)
               if isinstance(a, FUNCTION_TYPES) and i < len(names)]
        out += [(k, v) for k, v in kwargs.items() if isinstance(v, FUNCTION_TYPES)]
    given = {name for name, _ in out} | set(kwargs)
    out += [(name, d) for i, name, d in defaults if i >= len(args) and name not in given]
    if any(user_instance(a) for a in args):
        from .compiler.callables import instances_read
        names = parameter_names(f)
        out += instances_read(f, list(zip(names, args)))
    return tuple(out)


def _refuse_a_generator(f: Callable) -> None:
    """A generator function has no value to differentiate (it returns a generator):
    what it yields has, in the function that consumes it."""
    inner = unwrap(f)
    if inspect.isgeneratorfunction(inner):
        code = inner.__code__
        raise TransformError(f"{inner.__name__} is a generator function: calling it makes a "
                             f"generator, which has no gradient", code.co_filename,
                             code.co_firstlineno, 0,
                             hint=f"Differentiate a function that consumes what it yields "
                                  f"(sum(np.sum(v) for v in {inner.__name__}(x))).")


def _known_pair(f: Callable, positions: Tuple[int, ...], numbers_at: Tuple[int, ...],
                leaves: Tuple[int, ...], foreign: bool = False, xp: Any = None,
                witness: Any = None, statics: tuple = (),
                complexes: Tuple[str, ...] = ()) -> CompiledFunction:
    try:
        pairs = _PAIRS.get(f)
    except TypeError:   # not weakly referable (a builtin, a callable object)
        return pair_for(f, positions, numbers_at, leaves, foreign, xp, witness, statics,
                        complexes)
    code, defaults = getattr(f, "__code__", None), getattr(f, "__defaults__", None)
    kind = (positions, numbers_at, leaves, foreign, xp, witness, statics, complexes)
    entry = pairs.get(kind) if pairs is not None else None
    if entry is not None and entry[1] is code and entry[2] is defaults and all_hold(entry[3]):
        return entry[0]
    compiled = pair_for(f, positions, numbers_at, leaves, foreign, xp, witness, statics,
                        complexes)
    if pairs is None:
        pairs = _PAIRS[f] = {}
    pairs[kind] = (compiled, code, defaults, flat_bindings(compiled))
    return compiled


def source(f: Callable, wrt: Union[int, Sequence[int]] = 0, optimize: bool = True,
           mode: str = "reverse", *, args: Optional[Sequence[Any]] = None) -> str:
    """The generated code of f (and of the functions it calls), as text: its forward
    and adjoint (mode="reverse"), or its tangent code (mode="forward"). `args`: the
    code a call given these arguments runs: where some are lists, tuples or dicts of
    arrays, f written over their arrays (see compiler.aggregates); where some are
    Python numbers, the code specialised to them."""
    positions, _ = normalize_wrt(wrt, f=f)
    flat = None if args is None or mode != "reverse" else \
        _aggregates().flattened(f, tuple(args))
    if flat is not None and flat.positions(positions):
        return compiler.compile_function(
            flat.fn, flat.positions(positions), optimize,
            leaves=tuple(range(len(flat.arguments(tuple(args)))))).source
    if mode == "forward":
        return compiler.compile_jvp(f, positions, optimize).source
    if mode != "reverse":
        raise ValueError(f"source(mode={mode!r}): mode is 'reverse' (forward and adjoint) "
                         "or 'forward' (tangent code)")
    # Shown for array arguments (a list's or dict's cotangents add item by item), and
    # where `args` has Python numbers, specialised to them as such a call's pair is.
    names = parameter_names(f)
    numbers_at = () if args is None else call_kind(f, tuple(args), positions)[0]
    return compiler.compile_function(
        f, positions, optimize, leaves=tuple(range(len(names))),
        scalars=tuple(names[i] for i in numbers_at if i < len(names))).source
