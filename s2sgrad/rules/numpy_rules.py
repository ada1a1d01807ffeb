"""The gradient table for NumPy: one entry per function, in plain NumPy.

Read an entry as mathematics: `defvjp(np.sin, "x", x="g * np.cos(x)")` says
d/dx sin(x) applied to the cotangent g is g * cos(x). `broadcast=True` marks
elementwise functions whose gradients the compiler sums back to each
argument's shape with the one shared helper (runtime.unbroadcast).
"""
from __future__ import annotations

import ast
import math

import numpy as np

from .. import runtime
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
                       sequence_results,
)

# --- arithmetic (the Python operators share these) --------------------------
defvjp(np.add, "x, y", x="g", y="g", broadcast=True)
defvjp(np.subtract, "x, y", x="g", y="-g", broadcast=True)
defvjp(np.multiply, "x, y", x="g * y", y="g * x", broadcast=True)
defvjp(np.divide, "x, y", x="g / y", y="-g * ans / y", broadcast=True)
defvjp(np.power, "x, y", x="g * power_slope(x, y)", y="g * ans * safe_log(x)",
       broadcast=True)   # (power_slope(x, 2) folds to 2 * x: optimize.folding)
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

# --- more elementwise math ---------------------------------------------------
defvjp(np.exp2, "x", x="g * ans * np.log(2.0)")
defvjp(np.expm1, "x", x="g * (ans + 1.0)")
defvjp(np.log2, "x", x="g / (x * np.log(2.0))")
defvjp(np.log10, "x", x="g / (x * np.log(10.0))")
defvjp(np.log1p, "x", x="g / (1.0 + x)")
defvjp(np.cbrt, "x", x="g / (3.0 * ans * ans)")           # +inf at x == 0, like sqrt
defvjp(np.square, "x", x="2.0 * g * x")
defvjp(np.reciprocal, "x", x="-g * ans * ans")
defvjp(np.float_power, "x, y", x="g * y * np.float_power(x, y - 1)",
       y="g * ans * safe_log(x)", broadcast=True)
defvjp(np.tan, "x", x="g * (1.0 + ans * ans)")
defvjp(np.arcsin, "x", x="g / np.sqrt(1.0 - x * x)")
defvjp(np.arccos, "x", x="-g / np.sqrt(1.0 - x * x)")
defvjp(np.arctan, "x", x="g / (1.0 + x * x)")
defvjp(np.arctan2, "x1, x2", x1="g * x2 / (x1 * x1 + x2 * x2)",
       x2="-g * x1 / (x1 * x1 + x2 * x2)", broadcast=True)  # nan at (0, 0): undefined
defvjp(np.sinh, "x", x="g * np.cosh(x)")
defvjp(np.cosh, "x", x="g * np.sinh(x)")
defvjp(np.arcsinh, "x", x="g / np.sqrt(x * x + 1.0)")
defvjp(np.arccosh, "x", x="g / np.sqrt(x * x - 1.0)")
defvjp(np.arctanh, "x", x="g / (1.0 - x * x)")
defvjp(np.fabs, "x", x="g * np.sign(x)")                 # 0 at x == 0, like abs
defvjp(np.fmax, "x1, x2", x1="g * balanced_max_mask(x1, ans, x2)",
       x2="g * balanced_max_mask(x2, ans, x1)", broadcast=True)  # ties split; NaN loses
defvjp(np.fmin, "x1, x2", x1="g * balanced_max_mask(x1, ans, x2)",
       x2="g * balanced_max_mask(x2, ans, x1)", broadcast=True)
defvjp(np.clip, "a, a_min=None, a_max=None, out=None, min=None, max=None",
       prelude="parts = clip_grads(g, a, a_min, a_max, min, max)",
       a="clip_grad_a(g, a, a_min, a_max, min, max)", a_min="parts[1]", a_max="parts[2]",
       min="parts[1]", max="parts[2]",
       broadcast=True)                                   # at a bound: split like maximum
defvjp(np.hypot, "x1, x2", x1="g * safe_divide(x1, ans)", x2="g * safe_divide(x2, ans)",
       broadcast=True)                                   # 0 at (0, 0)
defvjp(np.logaddexp, "x1, x2", x1="g * np.exp(x1 - ans)", x2="g * np.exp(x2 - ans)",
       broadcast=True)
defvjp(np.logaddexp2, "x1, x2", x1="g * np.exp2(x1 - ans)", x2="g * np.exp2(x2 - ans)",
       broadcast=True)
defvjp(np.sinc, "x", x="g * sinc_derivative(x)")
defvjp(np.deg2rad, "x", x="g * (np.pi / 180.0)")
defvjp(np.rad2deg, "x", x="g * (180.0 / np.pi)")
alias(np.radians, np.deg2rad)
alias(np.degrees, np.rad2deg)
defvjp(np.real, "val", val="real_only(g, val)")
defvjp(np.imag, "val", val="real_only(0.0 * g, val)")
defvjp(np.conjugate, "x", x="real_only(g, x)")           # np.conj
defvjp(np.nan_to_num, "x, copy=True, nan=0.0, posinf=None, neginf=None",
       x="np.where(np.isfinite(x), g, 0.0)", nan="np.sum(np.where(np.isnan(x), g, 0.0))",
       posinf="np.sum(np.where(np.isposinf(x), g, 0.0))",
       neginf="np.sum(np.where(np.isneginf(x), g, 0.0))")
defvjp(np.remainder, "x1, x2", x1="g", x2="-g * np.floor_divide(x1, x2)", broadcast=True)
defop(ast.Mod, "%", np.remainder)
defvjp(np.fmod, "x1, x2", x1="g", x2="-g * np.trunc(x1 / x2)", broadcast=True)
defvjp(np.divmod, "x1, x2", x1="g[1]", x2="-g[1] * ans[0]", broadcast=True, outputs=2)
defvjp(np.modf, "x", x="g[0]", outputs=2)
defvjp(np.frexp, "x", x="g[0] * np.ldexp(1.0, -ans[1])", outputs=2)
defvjp(np.ldexp, "x1, x2", x1="g * np.ldexp(1.0, x2)", broadcast=True)
defvjp(np.copysign, "x1, x2", x1="g * np.sign(x1) * np.copysign(1.0, x2)", broadcast=True)
defvjp(np.heaviside, "x1, x2", x2="g * (x1 == 0)", broadcast=True)

# --- more reductions ------------------------------------------------------------
defvjp(np.prod, "a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None",
       a="prod_grad(g, a, axis=axis, keepdims=keepdims, initial=initial, where=where)",
       initial="prod_initial_grad(g, a, initial, axis=axis, keepdims=keepdims, where=where)")
for _f, _name in ((np.max, "np.max"), (np.min, "np.min")):
    defvjp(_f, "a, axis=None, out=None, keepdims=False, initial=None, where=None", name=_name,
           a="extremum_grad(g, a, ans, axis=axis, keepdims=keepdims, initial=initial, "
             "where=where)",
           initial="extremum_initial_grad(g, a, ans, initial, axis=axis, keepdims=keepdims, "
                   "where=where)")                       # ties split equally
alias(np.amax, np.max)
alias(np.amin, np.min)
for _f, _name in ((np.nanmax, "np.nanmax"), (np.nanmin, "np.nanmin")):
    defvjp(_f, "a, axis=None, out=None, keepdims=False", name=_name,
           a="extremum_grad(g, a, ans, axis=axis, keepdims=keepdims)")
defvjp(np.var, "a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, "
               "mean=None, correction=None",
       a="var_grad(g, a, axis=axis, ddof=ddof, keepdims=keepdims, where=where, mean=mean, "
         "correction=correction)",
       mean="unsupported('the mean= argument of np.var')")
defvjp(np.std, "a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, "
               "mean=None, correction=None",
       a="std_grad(g, a, ans, axis=axis, ddof=ddof, keepdims=keepdims, where=where, "
         "mean=mean, correction=correction)",
       mean="unsupported('the mean= argument of np.std')")  # 0 where std == 0
defvjp(np.nanvar, "a, axis=None, dtype=None, out=None, ddof=0, keepdims=False",
       a="var_grad(g, a, axis=axis, ddof=ddof, keepdims=keepdims, where=~np.isnan(a))")
defvjp(np.nanstd, "a, axis=None, dtype=None, out=None, ddof=0, keepdims=False",
       a="std_grad(g, a, ans, axis=axis, ddof=ddof, keepdims=keepdims, where=~np.isnan(a))")
defvjp(np.average, "a, axis=None, weights=None, returned=False, keepdims=False",
       prelude="parts = average_grads(g, a, axis=axis, weights=weights, returned=returned, "
               "keepdims=keepdims)",
       a="parts[0]", weights="parts[1]")
defvjp(np.nansum, "a, axis=None, dtype=None, out=None, keepdims=False",
       a="np.where(np.isnan(a), 0.0, expand_reduced(g, a, axis=axis, keepdims=keepdims))")
defvjp(np.nanmean, "a, axis=None, dtype=None, out=None, keepdims=False",
       a="nanmean_grad(g, a, axis=axis, keepdims=keepdims)")
defvjp(np.nanprod, "a, axis=None, dtype=None, out=None, keepdims=False",
       a="prod_grad(g, a, axis=axis, keepdims=keepdims, where=~np.isnan(a))")
defvjp(np.cumsum, "a, axis=None, dtype=None, out=None",
       a="np.reshape(np.flip(np.cumsum(np.flip(g, axis), axis), axis), np.shape(a))")
defvjp(np.cumprod, "a, axis=None, dtype=None, out=None", a="cumprod_grad(g, a, ans, axis)")
defvjp(np.nancumsum, "a, axis=None, dtype=None, out=None",
       a="np.where(np.isnan(a), 0.0, "
         "np.reshape(np.flip(np.cumsum(np.flip(g, axis), axis), axis), np.shape(a)))")
defvjp(np.nancumprod, "a, axis=None, dtype=None, out=None",
       a="np.where(np.isnan(a), 0.0, cumprod_grad(g, np.where(np.isnan(a), 1.0, a), ans, axis))")
if hasattr(np, "cumulative_sum"):
    defvjp(np.cumulative_sum, "x, axis=None, dtype=None, out=None, include_initial=False",
           x="cumulative_grad(g, x, ans, axis, include_initial)")
    defvjp(np.cumulative_prod, "x, axis=None, dtype=None, out=None, include_initial=False",
           x="cumulative_grad(g, x, ans, axis, include_initial, True)")
defvjp(np.ptp, "a, axis=None, out=None, keepdims=False",
       a="ptp_grad(g, a, axis=axis, keepdims=keepdims)")
_QUANTILE = ("axis=None, out=None, overwrite_input=False, method='linear', keepdims=False, "
             "weights=None, interpolation=None")
_QUANTILE_GRAD = ("axis=axis, method=method, keepdims=keepdims, "
                  "overwrite_input=overwrite_input, weights=weights, interpolation=interpolation")
for _f, _q, _nan in ((np.quantile, "q", False), (np.nanquantile, "q", True),
                     (np.percentile, "np.asarray(q) / 100.0", False),
                     (np.nanpercentile, "np.asarray(q) / 100.0", True)):
    defvjp(_f, "a, q, " + _QUANTILE,
           a=f"quantile_grad(g, a, {_q}, {_QUANTILE_GRAD}, ignore_nan={_nan})",
           q=f"unsupported('the gradient of {_f.__name__} with respect to q')")
for _f, _nan in ((np.median, False), (np.nanmedian, True)):
    defvjp(_f, "a, axis=None, out=None, overwrite_input=False, keepdims=False",
           a="quantile_grad(g, a, 0.5, axis=axis, keepdims=keepdims, "
             f"overwrite_input=overwrite_input, ignore_nan={_nan})")
defvjp(np.diff, "a, n=1, axis=-1, prepend=None, append=None",
       prelude="parts = diff_grads(g, a, n, axis, prepend, append)",
       a="parts[0]", prepend="parts[1]", append="parts[2]")
defvjp(np.ediff1d, "ary, to_end=None, to_begin=None",
       prelude="parts = ediff1d_grads(g, ary, to_end, to_begin)",
       ary="parts[0]", to_end="parts[1]", to_begin="parts[2]")
_trapezoid = getattr(np, "trapezoid", None) or np.trapz
defvjp(_trapezoid, "y, x=None, dx=1.0, axis=-1", name="np.trapezoid",
       prelude="parts = trapezoid_grads(g, y, x, dx, axis)",
       y="parts[0]", x="parts[1]", dx="parts[2]")
if getattr(np, "trapz", _trapezoid) is not _trapezoid:
    alias(np.trapz, _trapezoid)
defvjp(np.linalg.norm, "x, ord=None, axis=None, keepdims=False",
       x="norm_grad(g, x, ans, ord, axis, keepdims)")   # 0 at a zero vector / matrix
if hasattr(np.linalg, "vector_norm"):
    defvjp(np.linalg.vector_norm, "x, axis=None, keepdims=False, ord=2",
           x="vector_norm_grad(g, x, ans, axis, keepdims, ord)")
    defvjp(np.linalg.matrix_norm, "x, keepdims=False, ord='fro'",
           x="matrix_norm_grad(g, x, ans, keepdims, ord)")
defvjp(np.cov, "m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, "
               "dtype=None",
       prelude="parts = cov_grads(g, m, y, rowvar, bias, ddof, fweights, aweights)",
       m="parts[0]", y="parts[1]", aweights="unsupported('np.cov with aweights')")
defvjp(np.corrcoef, "x, y=None, rowvar=True, bias=None, ddof=None, dtype=None",
       prelude="parts = corrcoef_grads(g, x, y, rowvar)", x="parts[0]", y="parts[1]")

# --- shape: each gradient undoes the rearrangement ---------------------------------
defvjp(np.ravel, "a, order='C'", a="unravel(g, a, order)", view=True)
defvjp(np.squeeze, "a, axis=None", a="np.reshape(g, np.shape(a))", view=True)
defvjp(np.expand_dims, "a, axis", a="np.reshape(g, np.shape(a))", view=True)
defvjp(np.swapaxes, "a, axis1, axis2", a="np.swapaxes(g, axis1, axis2)", view=True)
defvjp(np.moveaxis, "a, source, destination", a="np.moveaxis(g, destination, source)",
       view=True)
defvjp(np.rollaxis, "a, axis, start=0", a="rollaxis_grad(g, a, axis, start)", view=True)
defvjp(np.broadcast_to, "array, shape, subok=False", array="unbroadcast(g, array)", view=True)
defvjp(np.broadcast_arrays, "*args, subok=False", args="broadcast_arrays_grad(g, args)",
       sequence=("args",), view=True)
for _f in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    defvjp(_f, "*arys", arys="atleast_grad(g, arys)", sequence=("arys",), view=True)
defvjp(np.concatenate, "arrays, axis=0, out=None, dtype=None, casting='same_kind'",
       arrays="concatenate_grad(g, arrays, axis)", sequence=("arrays",))
defvjp(runtime.numpy_grads.index_concat, "maker, *items",   # np.r_[...], np.c_[...]
       items="index_concat_grads(g, maker, items)", sequence=("items",),
       name="_s2s_index_concat")
defvjp(np.stack, "arrays, axis=0, out=None, dtype=None, casting='same_kind'",
       arrays="stack_grad(g, arrays, axis)", sequence=("arrays",))
defvjp(np.vstack, "tup, dtype=None, casting='same_kind'", tup="vstack_grad(g, tup)",
       sequence=("tup",))
defvjp(np.hstack, "tup, dtype=None, casting='same_kind'", tup="hstack_grad(g, tup)",
       sequence=("tup",))
defvjp(np.dstack, "tup", tup="dstack_grad(g, tup)", sequence=("tup",))
defvjp(np.column_stack, "tup", tup="column_stack_grad(g, tup)", sequence=("tup",))
if getattr(np, "row_stack", np.vstack) is not np.vstack:
    alias(np.row_stack, np.vstack)
defvjp(sorted, "iterable, key=None, reverse=False", sequence=("iterable",),
       iterable="sorted_grad(g, iterable, key, reverse)")
defvjp(np.split, "ary, indices_or_sections, axis=0", ary="np.concatenate(g, axis=axis)",
       view=True)
defvjp(np.array_split, "ary, indices_or_sections, axis=0", ary="np.concatenate(g, axis=axis)",
       view=True)
defvjp(np.hsplit, "ary, indices_or_sections",
       ary="np.concatenate(g, axis=1 if np.ndim(ary) > 1 else 0)", view=True)
defvjp(np.vsplit, "ary, indices_or_sections", ary="np.concatenate(g, axis=0)", view=True)
defvjp(np.dsplit, "ary, indices_or_sections", ary="np.concatenate(g, axis=2)", view=True)
if hasattr(np, "unstack"):
    defvjp(np.unstack, "x, axis=0", x="np.stack(g, axis=axis)", view=True)
defvjp(np.tile, "A, reps", A="tile_grad(g, A, reps)")
defvjp(np.repeat, "a, repeats, axis=None", a="repeat_grad(g, a, repeats, axis)")
defvjp(np.resize, "a, new_shape", a="resize_grad(g, a, new_shape)")
defvjp(np.flip, "m, axis=None", m="np.flip(g, axis)", view=True)
defvjp(np.fliplr, "m", m="np.fliplr(g)", view=True)
defvjp(np.flipud, "m", m="np.flipud(g)", view=True)
defvjp(np.roll, "a, shift, axis=None", a="np.roll(g, np.negative(shift), axis)")
defvjp(np.rot90, "m, k=1, axes=(0, 1)", m="np.rot90(g, -k, axes)", view=True)
defvjp(np.pad, "array, pad_width, mode='constant', stat_length=None, constant_values=0, "
               "end_values=0, reflect_type='even'",
       prelude="parts = pad_grads(g, array, pad_width, mode, constant_values, reflect_type)",
       array="parts[0]", constant_values="parts[1]",
       end_values="unsupported('np.pad with end_values')")
defvjp(np.diag, "v, k=0", v="diag_grad(g, v, k)")
defvjp(np.diagflat, "v, k=0", v="diagflat_grad(g, v, k)")
defvjp(np.diagonal, "a, offset=0, axis1=0, axis2=1",
       a="diagonal_grad(g, a, offset, axis1, axis2)", view=True)
defvjp(np.trace, "a, offset=0, axis1=0, axis2=1, dtype=None, out=None",
       a="trace_grad(g, a, offset, axis1, axis2)")
defvjp(np.triu, "m, k=0", m="np.triu(g, k)")
defvjp(np.tril, "m, k=0", m="np.tril(g, k)")
defvjp(np.take, "a, indices, axis=None, out=None, mode='raise'",
       a="take_grad(g, a, indices, axis, mode)")
defvjp(np.take_along_axis, "arr, indices, axis=-1",
       arr="take_along_axis_grad(g, arr, indices, axis)")
defvjp(np.compress, "condition, a, axis=None, out=None", a="compress_grad(g, condition, a, axis)")
defvjp(np.extract, "condition, arr", arr="extract_grad(g, condition, arr)")
defvjp(np.delete, "arr, obj, axis=None", arr="delete_grad(g, arr, obj, axis)")
defvjp(np.insert, "arr, obj, values, axis=None",
       prelude="parts = insert_grads(g, arr, obj, values, axis)",
       arr="parts[0]", values="parts[1]")
defvjp(np.append, "arr, values, axis=None", prelude="parts = append_grads(g, arr, values, axis)",
       arr="parts[0]", values="parts[1]")
defvjp(np.select, "condlist, choicelist, default=0",
       prelude="parts = select_grads(g, condlist, choicelist, default)",
       choicelist="parts[0]", default="parts[1]", sequence=("choicelist",))
defvjp(np.sort, "a, axis=-1, kind=None, order=None, stable=None", a="sort_grad(g, a, axis)")
defvjp(np.partition, "a, kth, axis=-1, kind='introselect', order=None",
       a="partition_grad(g, a, ans, axis)")         # values matched to where they came from
defvjp(np.gradient, "f, *varargs, axis=None, edge_order=1",
       f="gradient_grad(g, f, varargs, axis, edge_order)",
       varargs="unsupported('the gradient of np.gradient with respect to its spacing')",
       sequence=("varargs",))
defvjp(np.real_if_close, "a, tol=100", a="real_only(g, a)", view=True)
defvjp(np.fft.fftshift, "x, axes=None", x="np.fft.ifftshift(g, axes)")   # rolls: real too
defvjp(np.fft.ifftshift, "x, axes=None", x="np.fft.fftshift(g, axes)")
defvjp(np.copy, "a, order='K', subok=False", a="g")
if hasattr(np, "astype"):   # NumPy >= 2
    defvjp(np.astype, "x, dtype, copy=True, device=None", x="astype_grad(g, x, dtype)")
defvjp(np.array, "object, dtype=None, copy=True, order='K', subok=False, ndmin=0, ndmax=0, "
                 "like=None",
       object="array_grad(g, object, ans)", sequence=("object",))
for _f in (np.asarray, np.asanyarray):
    defvjp(_f, "a, dtype=None, order=None, device=None, copy=None, like=None",
           a="array_grad(g, a, ans)", sequence=("a",), view=True)
alias(np.ascontiguousarray, np.asarray)
alias(np.asfortranarray, np.asarray)
defvjp(np.meshgrid, "*xi, copy=True, sparse=False, indexing='xy'",
       xi="meshgrid_grad(g, xi, indexing, sparse)", sequence=("xi",))
if hasattr(np, "matrix_transpose"):
    defvjp(np.matrix_transpose, "x", x="np.swapaxes(g, -1, -2)", view=True)
defvjp(np.bincount, "x, weights=None, minlength=0", weights="np.asarray(g)[x]")
defvjp(np.interp, "x, xp, fp, left=None, right=None, period=None",
       prelude="parts = interp_grads(g, x, xp, fp, left, right, period)",
       x="parts[0]", xp="parts[1]", fp="parts[2]", left="parts[3]", right="parts[4]",
       period="unsupported('np.interp with a differentiated period')")
defvjp(np.polyval, "p, x", prelude="parts = polyval_grads(g, p, x)", p="parts[0]", x="parts[1]",
       sequence=("p",))
defvjp(np.polyfit, "x, y, deg, rcond=None, full=False, w=None, cov=False",
       prelude="parts = polyfit_grads(g, x, y, deg, ans, rcond, full, w, cov)",
       x="parts[0]", y="parts[1]")
defvjp(np.vander, "x, N=None, increasing=False",
       x="np.sum(g * vander_slopes(x, N, increasing), axis=1)")
defvjp(np.polynomial.polynomial.polyval, "x, c, tensor=True",
       prelude="parts = polynomial_polyval_grads(g, x, c)", x="parts[0]", c="parts[1]",
       sequence=("c",), name="np.polynomial.polynomial.polyval")
defvjp(np.convolve, "a, v, mode='full'", prelude="parts = convolve_grads(g, a, v, mode)",
       a="parts[0]", v="parts[1]")
defvjp(np.correlate, "a, v, mode='valid'", prelude="parts = correlate_grads(g, a, v, mode)",
       a="parts[0]", v="parts[1]")

# --- products and linear algebra --------------------------------------------------
defvjp(np.vdot, "a, b", a="np.reshape(g * b, np.shape(a))", b="np.reshape(g * a, np.shape(b))")
defvjp(np.inner, "a, b", a="inner_grad_a(g, a, b)", b="inner_grad_b(g, a, b)")
defvjp(np.outer, "a, b, out=None", a="np.reshape(np.dot(g, np.ravel(b)), np.shape(a))",
       b="np.reshape(np.dot(np.ravel(a), g), np.shape(b))")
defvjp(np.tensordot, "a, b, axes=2", a="tensordot_grad_a(g, a, b, axes)",
       b="tensordot_grad_b(g, a, b, axes)")
defvjp(np.einsum, "*operands, out=None, optimize=False, dtype=None, order='K', casting='safe'",
       operands="einsum_grads(g, operands)", sequence=("operands",),
       per_item=dict(operands="einsum_item_grad(g, operands, item)"))
defvjp(np.kron, "a, b", a="kron_grad_a(g, a, b)", b="kron_grad_b(g, a, b)")
defvjp(np.cross, "a, b, axisa=-1, axisb=-1, axisc=-1, axis=None",
       prelude="parts = cross_grads(g, a, b, axisa, axisb, axisc, axis)",
       a="parts[0]", b="parts[1]")
if hasattr(np, "vecdot"):
    defvjp(np.vecdot, "x1, x2, axis=-1", prelude="parts = vecdot_grads(g, x1, x2, axis)",
           x1="parts[0]", x2="parts[1]", broadcast=True)
defvjp(np.linalg.inv, "a", a="-np.swapaxes(ans, -1, -2) @ g @ np.swapaxes(ans, -1, -2)")
defvjp(np.linalg.solve, "a, b", prelude="parts = solve_grads(g, a, b, ans)",
       a="parts[0]", b="parts[1]")
defvjp(np.linalg.det, "a", a="det_grad(g, a)")         # exact for singular a too
defvjp(np.linalg.slogdet, "a", a="slogdet_grad(g, a)", outputs=2)
defvjp(np.linalg.cholesky, "a, upper=False", a="cholesky_grad(g, ans, upper)")
defvjp(np.linalg.eigh, "a, UPLO='L'", a="eigh_grad(g, a, ans, UPLO)", outputs=2)
defvjp(np.linalg.eigvalsh, "a, UPLO='L'", a="eigvalsh_grad(g, a, UPLO)")
defvjp(np.linalg.svd, "a, full_matrices=True, compute_uv=True, hermitian=False",
       a="svd_grad(g, a, ans, full_matrices, compute_uv, hermitian)", outputs=3)
if hasattr(np.linalg, "svdvals"):
    defvjp(np.linalg.svdvals, "x", x="svdvals_grad(g, x)")
defvjp(np.linalg.pinv, "a, rcond=None, hermitian=False, rtol=None",
       a="pinv_grad(g, a, ans, hermitian)")
defvjp(np.linalg.lstsq, "a, b, rcond=None", prelude="parts = lstsq_grads(g, a, b, ans, rcond)",
       a="parts[0]", b="parts[1]", outputs=4)
defvjp(np.linalg.qr, "a, mode='reduced'", a="qr_grad(g, a, ans, mode)", outputs=2)
defvjp(np.linalg.matrix_power, "a, n", a="matrix_power_grad(g, a, n)")
# eig of a real matrix with real, distinct eigenvalues (complex or repeated ones raise):
# A = V diag(w) V^-1 with unit columns, gA = V^-T (diag(gw) + F*(V^T gV) - F*(V^T V diag(d))) V^T
_EIG = ("np.swapaxes(np.linalg.inv(V), -1, -2) @ (np.expand_dims(gw, -1) * np.eye(np.shape(V)[-1])"
        " + F * M - F * ((Vt @ V) * np.expand_dims(np.diagonal(M, axis1=-2, axis2=-1), -2)))"
        " @ Vt")
defvjp(np.linalg.eig, "a", prelude="V = ans[1]; gw = g[0]; F = eig_gaps(ans[0]); "
                                   "Vt = np.swapaxes(V, -1, -2); M = Vt @ g[1]",
       a=_EIG, outputs=2)
defvjp(np.linalg.eigvals, "a", prelude="wv = np.linalg.eig(a); V = wv[1]; gw = g; "
                                       "F = eig_gaps(wv[0]); Vt = np.swapaxes(V, -1, -2); "
                                       "M = 0.0 * F",
       a=_EIG)
defvjp(np.linalg.multi_dot, "arrays, out=None", arrays="multi_dot_grads(g, arrays)",
       sequence=("arrays",))
if hasattr(np.linalg, "trace"):   # NumPy >= 2: over the last two axes
    defvjp(np.linalg.trace, "x, offset=0, dtype=None", x="trace_grad(g, x, offset, -2, -1)")
    defvjp(np.linalg.diagonal, "x, offset=0", x="diagonal_grad(g, x, offset, -2, -1)",
           view=True)
for _f, _like in (("matmul", np.matmul), ("tensordot", np.tensordot), ("outer", np.outer),
                  ("cross", np.cross), ("matrix_transpose", getattr(np, "matrix_transpose", None)),
                  ("vecdot", getattr(np, "vecdot", None))):
    _g = getattr(np.linalg, _f, None)
    if _g is not None and _like is not None and _g is not _like:
        alias(_g, _like)

# --- constructors whose values depend on their arguments ----------------------------
defvjp(np.full, "shape, fill_value, dtype=None, order='C', device=None, like=None",
       fill_value="fill_grad(g, fill_value, ans)")
defvjp(np.full_like, "a, fill_value, dtype=None, order='K', subok=True, shape=None, device=None",
       fill_value="fill_grad(g, fill_value, ans)")
defvjp(np.linspace, "start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, "
                    "device=None",
       prelude="parts = linspace_grads(g, start, stop, num, endpoint, retstep, axis, ans)",
       start="parts[0]", stop="parts[1]")
defvjp(np.logspace, "start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0",
       prelude="parts = logspace_grads(g, start, stop, num, endpoint, base, axis, ans)",
       start="parts[0]", stop="parts[1]", base="parts[2]")
defvjp(np.geomspace, "start, stop, num=50, endpoint=True, dtype=None, axis=0",
       prelude="parts = geomspace_grads(g, start, stop, num, endpoint, axis, ans)",
       start="parts[0]", stop="parts[1]")
defvjp(np.arange, "start=None, stop=None, step=None, dtype=None, device=None, like=None",
       prelude="parts = arange_grads(g, start, stop, step, ans)",
       start="parts[0]", stop="parts[1]", step="parts[2]")

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
if hasattr(np.ndarray, "mT"):
    defattr("mT", self="np.swapaxes(g, -1, -2)")
defattr("real", self="real_only(g, self)")
defattr("imag", self="real_only(0.0 * g, self)")
defmethod("prod", "self, axis=None, dtype=None, out=None, keepdims=False, initial=None, "
                  "where=None", like=np.prod)
defmethod("max", "self, axis=None, out=None, keepdims=False, initial=None, where=None",
          like=np.max)
defmethod("min", "self, axis=None, out=None, keepdims=False, initial=None, where=None",
          like=np.min)
defmethod("var", "self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, "
                 "mean=None, correction=None", like=np.var)
defmethod("std", "self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, "
                 "mean=None, correction=None", like=np.std)
defmethod("cumsum", "self, axis=None, dtype=None, out=None", like=np.cumsum)
defmethod("cumprod", "self, axis=None, dtype=None, out=None", like=np.cumprod)
defmethod("ravel", "self, order='C'", like=np.ravel)
defmethod("flatten", "self, order='C'", like=np.ravel, view=False)
defmethod("squeeze", "self, axis=None", like=np.squeeze)
defmethod("swapaxes", "self, axis1, axis2", like=np.swapaxes)
defmethod("repeat", "self, repeats, axis=None", like=np.repeat)
defmethod("diagonal", "self, offset=0, axis1=0, axis2=1", like=np.diagonal)
defmethod("trace", "self, offset=0, axis1=0, axis2=1, dtype=None, out=None", like=np.trace)
defmethod("take", "self, indices, axis=None, out=None, mode='raise'", like=np.take)
defmethod("conj", "self", like=np.conjugate)
defmethod("conjugate", "self", like=np.conjugate)
defmethod("clip", "self, min=None, max=None, out=None",
          prelude="parts = clip_grads(g, self, None, None, min, max)",
          grads={"self": "clip_grad_a(g, self, None, None, min, max)", "min": "parts[1]",
                 "max": "parts[2]"}, broadcast=True)
defmethod("astype", "self, dtype, order='K', casting='unsafe', subok=True, copy=True",
          grads={"self": "astype_grad(g, self, dtype)"})
defmethod("copy", "self, order='C'", grads={"self": "g"})
defmethod("item", "self, *args", grads={"self": "item_grad(g, self, args)"})
defmethod("compress", "self, condition, axis=None, out=None",
          grads={"self": "compress_grad(g, condition, self, axis)"})

# --- Python's own functions on numbers: the NumPy rule of the same function ----------
alias(max, np.maximum)        # max(a, b): ties split g in half, like np.maximum
alias(min, np.minimum)
alias(pow, np.power)          # pow(x, y); pow(x, y, mod) has no rule
defvjp(float, "x=0.0", x="g * np.ones_like(x)")   # float(x) of a number or 0-d array
defvjp(np.float64, "x=0.0", x="g * np.ones_like(x)")   # of a number, a 0-d or n-d array
for _name, _like in (("sin", np.sin), ("cos", np.cos), ("tan", np.tan), ("asin", np.arcsin),
                     ("acos", np.arccos), ("atan", np.arctan), ("atan2", np.arctan2),
                     ("sinh", np.sinh), ("cosh", np.cosh), ("tanh", np.tanh),
                     ("asinh", np.arcsinh), ("acosh", np.arccosh), ("atanh", np.arctanh),
                     ("exp", np.exp), ("expm1", np.expm1), ("log", np.log),
                     ("log2", np.log2), ("log10", np.log10), ("log1p", np.log1p),
                     ("sqrt", np.sqrt), ("fabs", np.fabs), ("pow", np.power),
                     ("hypot", np.hypot), ("cbrt", np.cbrt), ("exp2", np.exp2),
                     ("degrees", np.degrees), ("radians", np.radians)):
    if hasattr(math, _name):  # math.cbrt and math.exp2 are Python 3.11+
        alias(getattr(math, _name), _like)   # math.log(x, base) has no rule
defvjp(math.erf, "x", x="g * (2.0 / np.sqrt(np.pi)) * np.exp(-x * x)")    # (numbers only)
defvjp(math.erfc, "x", x="g * (-2.0 / np.sqrt(np.pi)) * np.exp(-x * x)")
for _name, _like in runtime.scalar_math.NUMPY_TWINS.items():   # (in adjoints on numbers)
    alias(getattr(runtime.scalar_math, _name), _like)
nondiff(round, math.floor, math.ceil, math.trunc, math.isnan, math.isinf, math.isfinite,
        math.isclose)

# --- no gradient -------------------------------------------------------------
nondiff(np.floor, np.ceil, np.sign, np.round, np.rint, np.trunc, np.argmax, np.argmin,
        np.argsort, np.nonzero, np.isfinite, np.isnan, np.isinf, np.shape, np.ndim,
        np.size, np.greater, np.less, np.equal, np.not_equal, np.greater_equal,
        np.less_equal, np.logical_and, np.logical_or, np.logical_not, np.all, np.any,
        np.allclose, np.isclose, np.array_equal, np.result_type, np.broadcast_shapes,
        len, isinstance, range, int, bool, print, slice)
nondiff(np.around, np.fix, np.signbit, np.floor_divide, np.isreal, np.iscomplex,
        np.isrealobj, np.iscomplexobj, np.isscalar, np.argwhere, np.flatnonzero,
        np.searchsorted, np.digitize, np.count_nonzero, np.argpartition, np.lexsort,
        np.isneginf, np.isposinf, np.logical_xor, np.spacing, np.array_equiv,
        np.may_share_memory, np.shares_memory)
constructors(np.zeros, np.ones, np.empty, np.eye, np.identity, np.zeros_like, np.ones_like,
             np.empty_like, np.tri, np.indices, np.tril_indices, np.triu_indices,
             np.diag_indices, np.unravel_index, np.ravel_multi_index)
nondiff_methods("argmax", "argmin", "argsort", "nonzero", "all", "any", "round",
                "searchsorted", "argpartition")
nondiff_attributes("shape", "ndim", "size", "dtype", "itemsize", "nbytes", "flags")


# Results that are lists or tuples (for some arguments): their cotangents add item by item.
sequence_results(np.average, np.broadcast_arrays, np.atleast_1d, np.atleast_2d, np.atleast_3d,
                 np.split, np.array_split, np.hsplit, np.vsplit, np.dsplit, np.gradient,
                 np.meshgrid, np.linspace, *([np.unstack] if hasattr(np, "unstack") else []))
