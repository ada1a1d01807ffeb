"""Callables that are not plain functions, seen as the plain function they call.

`grad(model.loss)`, `grad(model)` (an instance with `__call__`) and
`grad(functools.partial(f, a, k=1))` each run one Python function with some
leading arguments and keywords already bound. The compiler reads and
differentiates that function; the bound values (`self`, the partial's
arguments) are constants of the call, and positions in `wrt` count the
arguments the caller passes, as they would for the plain function.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from ..errors import TransformError
from ..introspect import refuse_opaque_decorators, unwrap, user_instance
from . import parse, reentry


@dataclass(frozen=True)
class BoundCall:
    """`func(*args, *call_args, **{**kwargs, **call_kwargs})`."""

    func: types.FunctionType
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]

    def instances_read(self) -> Tuple[Tuple[str, Any], ...]:
        """The bound instances func's body calls methods of (`self.predict(x)`), by
        parameter: its pair is made for them (see instances_read)."""
        names = list(inspect.signature(self.func).parameters)
        return instances_read(self.func, [(names[i], a) for i, a in enumerate(self.args)
                                          if i < len(names)])

    def shift(self, wrt: Tuple[int, ...]) -> Tuple[int, ...]:
        """The positions in `func`'s own parameters of the caller's `wrt`."""
        return tuple(i + len(self.args) for i in wrt)

    def bind(self, run: Callable) -> Callable:
        """`run` (a generated forward or jvp of func) with the bound values filled in."""
        return functools.partial(run, *self.args, **self.kwargs)

    def wrap(self, compiled, fn: Callable, wrt: Tuple[int, ...], attr: str):
        """A copy of func's compiled pair (or jvp) that the caller runs as `fn`'s."""
        if attr == "jvp":
            return dataclasses.replace(compiled, fn=fn, wrt=tuple(wrt),
                                       params=compiled.params[len(self.args):],
                                       jvp=self.bind_tangents(compiled.jvp, compiled.params,
                                                              len(wrt)))
        return dataclasses.replace(compiled, fn=fn, wrt=tuple(wrt),
                                   params=compiled.params[len(self.args):],
                                   forward=self.bind(compiled.forward), witnessed=set())

    def bind_tangents(self, run: Callable, params, count: int) -> Callable:
        """A jvp `run(*args, *tangents)` with the bound values filled in: keywords of
        func's positional parameters (`partial(f, x=1)`) go in their place, before
        the tangents, where a keyword would clash with a tangent."""
        def jvp(*values, **kwargs):
            split = len(values) - count
            args = list(self.args) + list(values[:split])
            merged = {**self.kwargs, **kwargs}
            for name in params[len(args):]:
                if name not in merged:
                    break
                args.append(merged.pop(name))
            return run(*args, *values[split:], **merged)
        return jvp


def instances_read(fn: Callable, bound: Sequence[Tuple[str, Any]]
                   ) -> Tuple[Tuple[str, Any], ...]:
    """Of (parameter, value) pairs, those binding an instance of the user's class to a
    parameter whose method fn's body calls (`self.predict(x)`, `model.loss(w)`): fn's
    pair is made for those objects (memory only, a key of its own, as for a function
    passed to it), and the calls are read as those methods' (the class of a plain
    parameter is not known when compiling). A function that calls none keeps its
    plain pair, which the disk cache keeps."""
    wanted = [(p, v) for p, v in bound if user_instance(v)]
    if not wanted:
        return ()
    receivers = _RECEIVERS.get(fn)
    if receivers is None or receivers[0] is not fn.__code__:
        try:
            node = parse.parse_function(fn).node
        except TransformError:
            return ()
        receivers = (fn.__code__, frozenset(
            n.func.value.id for n in ast.walk(node) if isinstance(n, ast.Call) and
            isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)))
        _RECEIVERS[fn] = receivers
    return tuple((p, v) for p, v in wanted if p in receivers[1])


# The names whose methods a function's body calls, with the code they were read
# from (a function given new code is read again): calls may ask per call.
_RECEIVERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def bound_call(fn: Any) -> Optional[BoundCall]:
    """The plain function a bound method, callable instance or functools.partial
    runs, with what it binds; None for anything else (plain functions included)."""
    args: Tuple[Any, ...] = ()
    kwargs: Dict[str, Any] = {}
    peeled = False
    for _ in range(32):   # partial(partial(obj.method, a), b): a few layers at most
        refuse_opaque_decorators(fn)
        fn = unwrap(fn)
        if isinstance(fn, functools.partial):
            args = tuple(fn.args) + args
            kwargs = {**fn.keywords, **kwargs}
            fn = fn.func
        elif isinstance(fn, types.MethodType):
            args = (fn.__self__,) + args
            fn = fn.__func__
        elif isinstance(fn, types.FunctionType) or isinstance(fn, type) or \
                not callable(fn):
            break
        else:
            call = next((k.__dict__["__call__"] for k in type(fn).__mro__
                         if "__call__" in k.__dict__), None)
            if not isinstance(unwrap(call), types.FunctionType):
                break  # a builtin or C-level callable: nothing to read
            args = (fn,) + args
            fn = call
        peeled = True
    fn = unwrap(fn)
    if not peeled or not isinstance(fn, types.FunctionType):
        return None
    return BoundCall(fn, args, kwargs)


@dataclass(frozen=True)
class PackedRest:
    """`def f(x, *rest)`: the parser reads `*rest` as one tuple parameter, which the
    compiled pair takes; callers pass, and differentiate, the arguments one by one
    (positions from `count` on are items of that tuple)."""

    count: int   # the positional parameters before *rest

    def inner(self, positions: Tuple[int, ...]) -> Tuple[int, ...]:
        """The packed pair's positions for the caller's."""
        return tuple(sorted({min(i, self.count) for i in positions}))

    def pack(self, args: Tuple[Any, ...]) -> Tuple[Any, ...]:
        return (*args[:self.count], tuple(args[self.count:]))

    def spread(self, inner_wrt: Tuple[int, ...], grads: Any, wrt: Tuple[int, ...]) -> Any:
        """The packed pair's gradients (one bare, else a tuple) as the caller's."""
        by_position = dict(zip(inner_wrt, grads if len(inner_wrt) > 1 else (grads,)))
        out = []
        for i in wrt:
            g = by_position[min(i, self.count)]
            if i >= self.count:   # an item of the tuple's cotangent (0: nothing reached it)
                g = g[i - self.count] if isinstance(g, (list, tuple)) else 0.0
            out.append(g)
        return out[0] if len(out) == 1 else tuple(out)

    def wrap_pair(self, compiled, fn: Callable, wrt: Tuple[int, ...]):
        """The packed pair run with the arguments one by one."""
        forward, adjoint, inner_wrt = compiled.forward, compiled.adjoint, compiled.wrt

        def packed_forward(*args, **kwargs):
            return forward(*self.pack(args), **kwargs)

        def packed_adjoint(residuals, cotangent):
            return self.spread(inner_wrt, adjoint(residuals, cotangent), tuple(wrt))
        return dataclasses.replace(compiled, fn=fn, wrt=tuple(wrt), forward=packed_forward,
                                   adjoint=packed_adjoint, witnessed=set())

    def wrap_jvp(self, compiled, fn: Callable, wrt: Tuple[int, ...], zero: Callable):
        """The packed tangent code run with arguments and tangents one by one
        (`zero(x)`: the tangent of an item not differentiated)."""
        jvp, inner_wrt = compiled.jvp, compiled.wrt
        wrt = tuple(wrt)

        def packed_jvp(*values, **kwargs):
            args, tangents = values[:len(values) - len(wrt)], values[len(values) - len(wrt):]
            given = dict(zip(wrt, tangents))
            inner_tangents = []
            for i in inner_wrt:
                if i < self.count:
                    inner_tangents.append(given[i])
                else:
                    inner_tangents.append(tuple(given[k] if k in given else zero(a)
                                                for k, a in enumerate(args)
                                                if k >= self.count))
            return jvp(*self.pack(args), *inner_tangents, **kwargs)
        return dataclasses.replace(compiled, fn=fn, wrt=wrt, jvp=packed_jvp)


def packed_rest(fn: Callable) -> Optional[PackedRest]:
    """A PackedRest for a plain function with `*args`; None for any other (s2sgrad's
    own derived functions, `grad(f)`, count by the code they stand for)."""
    code = getattr(reentry.readable(unwrap(fn)), "__code__", None)
    if code is None or not code.co_flags & inspect.CO_VARARGS:
        return None
    return PackedRest(code.co_argcount)
