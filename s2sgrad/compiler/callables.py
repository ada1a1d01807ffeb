"""Callables that are not plain functions, seen as the plain function they call.

`grad(model.loss)`, `grad(model)` (an instance with `__call__`) and
`grad(functools.partial(f, a, k=1))` each run one Python function with some
leading arguments and keywords already bound. The compiler reads and
differentiates that function; the bound values (`self`, the partial's
arguments) are constants of the call, and positions in `wrt` count the
arguments the caller passes, as they would for the plain function.
"""
from __future__ import annotations

import dataclasses
import functools
import types
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from ..introspect import unwrap


@dataclass(frozen=True)
class BoundCall:
    """`func(*args, *call_args, **{**kwargs, **call_kwargs})`."""

    func: types.FunctionType
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]

    def shift(self, wrt: Tuple[int, ...]) -> Tuple[int, ...]:
        """The positions in `func`'s own parameters of the caller's `wrt`."""
        return tuple(i + len(self.args) for i in wrt)

    def bind(self, run: Callable) -> Callable:
        """`run` (a generated forward or jvp of func) with the bound values filled in."""
        return functools.partial(run, *self.args, **self.kwargs)

    def wrap(self, compiled, fn: Callable, wrt: Tuple[int, ...], attr: str):
        """A copy of func's compiled pair (or jvp) that the caller runs as `fn`'s."""
        return dataclasses.replace(compiled, fn=fn, wrt=tuple(wrt),
                                   params=compiled.params[len(self.args):],
                                   **{attr: self.bind(getattr(compiled, attr))})


def bound_call(fn: Any) -> Optional[BoundCall]:
    """The plain function a bound method, callable instance or functools.partial
    runs, with what it binds; None for anything else (plain functions included)."""
    args: Tuple[Any, ...] = ()
    kwargs: Dict[str, Any] = {}
    peeled = False
    for _ in range(32):   # partial(partial(obj.method, a), b): a few layers at most
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
