"""The gradient table for NumPy: one entry per function, in plain NumPy.

Read an entry as mathematics: `defvjp(np.sin, "x", x="g * np.cos(x)")` says
d/dx sin(x) applied to the cotangent g is g * cos(x). `broadcast=True` marks
elementwise functions whose gradients the compiler sums back to each
argument's shape with the one shared helper (runtime.unbroadcast).
"""
from __future__ import annotations

import ast

import numpy as np

from .registry import (
                       alias,
                       constructors,
                       defattr,
                       defmethod,
                       defop,
                       defvjp,
                       nondiff,
                       nondiff_attributes,
                       nondiff_methods,
)

# --- arithmetic (the Python operators share these) --------------------------
defvjp(np.add, "x, y", x="g", y="g", broadcast=True)
defvjp(np.subtract, "x, y", x="g", y="-g", broadcast=True)
defvjp(np.multiply, "x, y", x="g * y", y="g * x", broadcast=True)
defvjp(np.divide, "x, y", x="g / y", y="-g * ans / y", broadcast=True)
defvjp(np.power, "x, y", x="g * y * x ** (y - 1)", y="g * ans * safe_log(x)",
       broadcast=True)
defvjp(np.negative, "x", x="-g")
defvjp(np.positive, "x", x="g")
defvjp(np.matmul, "a, b", a="matmul_grad_a(g, a, b)", b="matmul_grad_b(g, a, b)")

defop(ast.Add, "+", np.add)
defop(ast.Sub, "-", np.subtract)
defop(ast.Mult, "*", np.multiply)
defop(ast.Div, "/", np.true_divide)
defop(ast.Pow, "**", np.power)
defop(ast.MatMult, "@", np.matmul)
defop(ast.USub, "-", np.negative)
defop(ast.UAdd, "+", np.positive)

# --- elementwise math --------------------------------------------------------
defvjp(np.exp, "x", x="g * ans")
defvjp(np.log, "x", x="g / x")
defvjp(np.sin, "x", x="g * np.cos(x)")
defvjp(np.cos, "x", x="-g * np.sin(x)")
defvjp(np.tanh, "x", x="g * (1.0 - ans * ans)")
defvjp(np.sqrt, "x", x="g * 0.5 / ans")          # +inf at x == 0, like 1/(2 sqrt(x))
defvjp(np.absolute, "x", x="g * np.sign(x)")     # np.abs; 0 at x == 0 (zero subgradient)
alias(abs, np.absolute)
defvjp(np.maximum, "x, y", x="g * balanced_max_mask(x, ans, y)",
       y="g * balanced_max_mask(y, ans, x)", broadcast=True)  # ties split g in half
defvjp(np.minimum, "x, y", x="g * balanced_max_mask(x, ans, y)",
       y="g * balanced_max_mask(y, ans, x)", broadcast=True)
defvjp(np.where, "condition, x, y", x="np.where(condition, g, 0.0)",
       y="np.where(condition, 0.0, g)", broadcast=True)

# --- reductions --------------------------------------------------------------
defvjp(np.sum, "a, axis=None, dtype=None, out=None, keepdims=False",
       a="expand_reduced(g, a, axis=axis, keepdims=keepdims)")
defvjp(np.mean, "a, axis=None, dtype=None, out=None, keepdims=False",
       a="expand_reduced(g, a, axis=axis, keepdims=keepdims) / reduced_count(a, axis=axis)")

# --- linear algebra and shape ------------------------------------------------
defvjp(np.dot, "a, b, out=None", a="dot_grad_a(g, a, b)", b="dot_grad_b(g, a, b)")
defvjp(np.reshape, "a, shape=None, order='C', newshape=None, copy=None",
       a="np.reshape(g, np.shape(a), order=order)", view=True)
defvjp(np.transpose, "a, axes=None", a="transpose_grad(g, axes)", view=True)

# --- array methods and attributes -------------------------------------------
defmethod("sum", "self, axis=None, dtype=None, out=None, keepdims=False", like=np.sum)
defmethod("mean", "self, axis=None, dtype=None, out=None, keepdims=False", like=np.mean)
defmethod("dot", "self, b, out=None", like=np.dot)
defmethod("reshape", "self, *shape, order='C', copy=None",
          grads={"self": "np.reshape(g, np.shape(self), order=order)"}, view=True)
defmethod("transpose", "self, *axes",
          grads={"self": "transpose_grad(g, axes[0] if len(axes) == 1 else (axes or None))"},
          view=True)
defattr("T", self="np.transpose(g)")

# --- no gradient -------------------------------------------------------------
nondiff(np.floor, np.ceil, np.sign, np.round, np.rint, np.trunc, np.argmax, np.argmin,
        np.argsort, np.nonzero, np.isfinite, np.isnan, np.isinf, np.shape, np.ndim,
        np.size, np.greater, np.less, np.equal, np.not_equal, np.greater_equal,
        np.less_equal, np.logical_and, np.logical_or, np.logical_not, np.all, np.any,
        np.allclose, np.isclose, np.array_equal, np.result_type, np.broadcast_shapes,
        len, isinstance, range, int, bool, print)
constructors(np.zeros, np.ones, np.empty, np.full, np.eye, np.identity, np.arange,
             np.linspace, np.zeros_like, np.ones_like, np.empty_like, np.full_like)
nondiff_methods("argmax", "argmin", "argsort", "nonzero", "all", "any")
nondiff_attributes("shape", "ndim", "size", "dtype", "itemsize", "nbytes", "flags")
