"""`s2sgrad.Function`: user-defined differentiable operations, PyTorch-style.

Inside a function that s2sgrad differentiates, `MyOp.apply(...)` is inlined:
the body of `forward` goes into the generated forward function and the body
of `vjp` into the adjoint. In forward mode the body of `jvp` (PyTorch's name,
optional) goes into the tangent code; without one, the tangent is derived
from `vjp`. Outside compiled code, `apply` runs `forward` eagerly with a
fresh context.
"""
from __future__ import annotations

from typing import Any, Tuple

import numpy as np


class Context:
    """What `forward` hands to `vjp`: saved values and arbitrary attributes."""

    def __init__(self, needs_input_grad: Tuple[bool, ...] = ()):
        self.saved_tensors: Tuple[Any, ...] = ()
        self.needs_input_grad = tuple(needs_input_grad)
        self.non_differentiable: Tuple[Any, ...] = ()

    def save_for_backward(self, *values: Any) -> None:
        self.saved_tensors = tuple(values)

    def save_for_forward(self, *values: Any) -> None:
        """Values for `jvp`, which reads them as `ctx.saved_tensors` (as in PyTorch)."""
        self.saved_for_forward = tuple(values)

    def mark_non_differentiable(self, *outputs: Any) -> None:
        self.non_differentiable = self.non_differentiable + tuple(outputs)


def _defines(cls: type, name: str) -> bool:
    return any(name in klass.__dict__ for klass in cls.__mro__
               if klass is not Function and klass is not object)


class _FunctionMeta(type):
    def __init__(cls, name, bases, namespace):
        super().__init__(name, bases, namespace)
        if not any(isinstance(b, _FunctionMeta) for b in bases):
            return  # Function itself
        has_vjp, has_backward = _defines(cls, "vjp"), _defines(cls, "backward")
        if has_vjp and has_backward:
            raise TypeError(f"{name} defines both vjp and backward; define exactly one "
                            f"(backward is an alias of vjp)")
        if not has_vjp and not has_backward:
            raise TypeError(f"{name} must define a vjp (or backward) staticmethod")
        if not _defines(cls, "forward"):
            raise TypeError(f"{name} must define a forward staticmethod")


class Function(metaclass=_FunctionMeta):
    """Base class of differentiable operations with a hand-written VJP.

    Subclasses define ``forward(ctx, *inputs)`` and ``vjp(ctx, *grad_outputs)``
    (or its alias ``backward``) as staticmethods, and optionally
    ``jvp(ctx, *grad_inputs)`` for forward mode (one tangent per input in, one
    per output out; without it forward mode derives the JVP from ``vjp``).
    """

    @classmethod
    def apply(cls, *args: Any) -> Any:
        ctx = Context(tuple(_is_differentiable(a) for a in args))
        return cls.forward(ctx, *args)

    @classmethod
    def vjp_method(cls):
        """The user's vjp, whichever of the two names it was given."""
        return cls.vjp if _defines(cls, "vjp") else cls.backward

    @classmethod
    def vjp_name(cls) -> str:
        """The name the class gives its vjp: `vjp`, or PyTorch's `backward`."""
        return "vjp" if _defines(cls, "vjp") else "backward"

    @classmethod
    def jvp_method(cls):
        """The user's jvp (forward mode), or None when the class defines none."""
        return cls.jvp if _defines(cls, "jvp") else None


def _is_differentiable(value: Any) -> bool:
    if isinstance(value, (bool, int, str)) or value is None:
        return False
    if isinstance(value, float):
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and np.issubdtype(dtype, np.inexact)


def is_function_class(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, Function) and obj is not Function


class checkpoint:  # noqa: N801 - used as a decorator, like functools' lowercase classes
    """Mark a helper whose intermediate values the gradient recomputes instead of
    keeping (rematerialisation, as `jax.checkpoint` and `torch.utils.checkpoint`).

    A call of a checkpointed helper inside a differentiated function keeps only the
    helper's arguments; the adjoint calls the helper's forward again just before its
    adjoint. For a step function called in a loop (an ODE integrator's step, say),
    memory then grows by one state per step instead of every stage's intermediates,
    for about one more evaluation of the helper per step. Calling the mark runs the
    helper unchanged. The compiler refuses (TransformError) a helper whose second
    evaluation could differ from the first: one that draws random numbers, writes
    into its arguments or a global, or calls what it cannot see into.
    """

    def __init__(self, fn):
        if not callable(fn):
            raise TypeError(f"s2sgrad.checkpoint takes a function, not "
                            f"{type(fn).__name__}")
        self.__s2sgrad__ = self      # s2sgrad's own mark: passes the call through
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", "checkpointed")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__module__ = getattr(fn, "__module__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<s2sgrad.checkpoint of {self.__qualname__}>"
