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
