"""Gradient rules for the table helpers (runtime/numpy_grads.py): second derivatives.

A first-order adjoint calls the helpers the NumPy rules' templates use
(`_s2s_stack_grad(g, arrays, axis)`, `_s2s_prod_grad(g, a, ...)`, ...);
grad of grad, functional.hvp/vhp/hessian and forward over reverse
differentiate that adjoint again, so each helper has a rule here, in the
table format of numpy_rules.py, and a forward-mode rule (jvp_rules).

Every helper h(g, x) is the gradient of <g, f(x)> for its function f, so it
is linear in its cotangent argument (named `cot` here, since `g` is the
template's own cotangent):

- `cot`'s rule is the transpose of h in g, which is the tangent of f: often
  f itself on g, or the JVP helper of forward mode;
- a primal argument's rule is the Hessian of <g, f> applied to g (helpers
  `*_hvp` in runtime/second_order.py, which are also the tangents: a Hessian is
  symmetric). Helpers of piecewise linear functions (max, sort, clip, take,
  ...) have none, and arguments that only give shapes, indices, masks or f's
  result `ans` (whose dependence is included in the total derivative) are not
  differentiable parameters here.
"""
from __future__ import annotations

from ..runtime import numpy_grads as nh
from . import jvp_rules
from .registry import defvjp, nondiff


def _rule(fn, params, **grads):
    """defvjp for a table helper, under its generated name `_s2s_<name>`."""
    name = f"_s2s_{fn.__name__}"
    defvjp(fn, params, name=name, **grads)
    return name


# -- elementwise ---------------------------------------------------------------------------------
jvp_rules.pointwise(
    _rule(nh.safe_divide, "num, den", num="safe_divide(g, den)",
          den="-g * safe_divide(ans, den)", broadcast=True),
    _rule(nh.sinc_derivative, "x", x="g * sinc_second_derivative(x)"),
    _rule(nh.scipy_digamma, "x", x="g * scipy_trigamma(x)"),
    _rule(nh.scipy_trigamma, "x", x="g * scipy_tetragamma(x)"),
    _rule(nh.xlogy_grad_y, "x, y", x="g / y", y="-g * ans / y", broadcast=True),
    _rule(nh.power_slope, "x, y, k=1", x="g * power_slope(x, y, k + 1)",
          y="g * power_slope_dy(x, y, k)", broadcast=True))
# (power_slope_dy has no rule: a third derivative mixing x and y in x ** y is refused)
nondiff(nh.unsupported)     # raises; its result never carries a gradient

# -- linear in the cotangent, no curvature: the rule of `cot` is the transpose -----------------
_REDUCE = "reduce_tangent({w}, g, axis=axis, keepdims=keepdims)"
_LINEAR = [
    # gathers: the transpose of a scatter-add is the gather itself
    _rule(nh.take_grad, "cot, a, indices, axis=None, mode='raise'",
          cot="np.take(g, indices, axis=axis, mode=mode)"),
    _rule(nh.take_along_axis_grad, "cot, arr, indices, axis",
          cot="np.take_along_axis(g, indices, axis)"),
    _rule(nh.compress_grad, "cot, condition, a, axis=None",
          cot="np.compress(condition, g, axis=axis)"),
    _rule(nh.extract_grad, "cot, condition, arr", cot="np.extract(condition, g)"),
    _rule(nh.diagonal_grad, "cot, a, offset=0, axis1=0, axis2=1",
          cot="np.diagonal(g, offset, axis1, axis2)"),
    _rule(nh.trace_grad, "cot, a, offset=0, axis1=0, axis2=1",
          cot="np.trace(g, offset, axis1, axis2)"),
    _rule(nh.diag_grad, "cot, v, k=0", cot="np.diag(g, k)"),
    _rule(nh.diagflat_grad, "cot, v, k=0", cot="np.diagflat(g, k)"),
    _rule(nh.repeat_grad, "cot, a, repeats, axis=None", cot="np.repeat(g, repeats, axis=axis)"),
    _rule(nh.tile_grad, "cot, A, reps", cot="np.tile(g, reps)"),
    _rule(nh.resize_grad, "cot, a, new_shape", cot="np.resize(g, new_shape)"),
    _rule(nh.delete_grad, "cot, arr, obj, axis=None", cot="np.delete(g, obj, axis=axis)"),
    _rule(nh.insert_grads, "cot, arr, obj, values, axis=None",
          cot="np.insert(g[0], obj, g[1], axis=axis)"),
    _rule(nh.append_grads, "cot, arr, values, axis=None", cot="np.append(g[0], g[1], axis=axis)"),
    _rule(nh.pad_grads, "cot, array, pad_width, mode='constant', constant_values=0, "
                        "reflect_type='even'",
          cot="pad_transpose(g, pad_width, mode, reflect_type)"),
    _rule(nh.sort_grad, "cot, a, axis=-1", cot="sort_jvp(g, a, axis)"),
    _rule(nh.item_grad, "cot, a, args", cot="item_transpose(g, args)"),
    # rearrangements and joins
    _rule(nh.unravel, "cot, a, order='C'", cot="unravel_transpose(g, cot, a, order)", view=True),
    _rule(nh.rollaxis_grad, "cot, a, axis, start=0", cot="np.rollaxis(g, axis, start)",
          view=True),
    _rule(nh.concatenate_grad, "cot, arrays, axis=0",
          cot="concatenate_transpose(g, cot, arrays, axis)", view=True),
    _rule(nh.index_concat_grads, "cot, maker, items",
          cot="index_concat_linear(maker, items, g)", view=True),
    _rule(nh.stack_grad, "cot, arrays, axis=0", cot="stack_transpose(g, arrays, axis)",
          view=True),
    _rule(nh.vstack_grad, "cot, tup", cot="np.vstack(g)", view=True),
    _rule(nh.hstack_grad, "cot, tup", cot="np.hstack(g)", view=True),
    _rule(nh.dstack_grad, "cot, tup", cot="np.dstack(g)", view=True),
    _rule(nh.column_stack_grad, "cot, tup", cot="np.column_stack(g)", view=True),
    _rule(nh.array_grad, "cot, object, res=None", cot="array_grad_transpose(g, cot, object, res)",
          view=True),
    _rule(nh.atleast_grad, "cot, arys", cot="atleast_transpose(g, cot, arys)", sequence=("cot",),
          view=True),
    _rule(nh.broadcast_arrays_grad, "cot, args", cot="broadcast_arrays_transpose(g, cot)",
          sequence=("cot",), view=True),
    _rule(nh.meshgrid_grad, "cot, xi, indexing='xy', sparse=False",
          cot="meshgrid_transpose(g, cot, xi, indexing, sparse)", sequence=("cot",), view=True),
    _rule(nh.diff_grads, "cot, a, n=1, axis=-1, prepend=None, append=None",
          cot="diff_transpose(g, a, n, axis, prepend, append)"),
    _rule(nh.ediff1d_grads, "cot, ary, to_end=None, to_begin=None",
          cot="ediff1d_transpose(g, to_end, to_begin)", view=True),
    # masks and casts
    _rule(nh.real_only, "cot, x", cot="real_only(g, x)", view=True),
    _rule(nh.astype_grad, "cot, x, dtype", cot="astype_transpose(g, cot, dtype)", view=True),
    _rule(nh.clip_grads, "cot, a, a_min=None, a_max=None, min=None, max=None",
          cot="clip_transpose(g, cot, a, a_min, a_max, min, max)", view=True),
    _rule(nh.clip_grad_a, "cot, a, a_min=None, a_max=None, min=None, max=None",
          cot="clip_grad_a(g, a, a_min, a_max, min, max)", view=True),  # a diagonal mask
    _rule(nh.select_grads, "cot, condlist, choicelist, default=0",
          cot="select_transpose(g, cot, condlist)"),
    # reductions that pick (max, min, ptp, quantiles) or average (nanmean): weights only
    _rule(nh.extremum_grad, "cot, a, res, axis=None, keepdims=False, initial=None, where=None",
          cot=_REDUCE.format(w="extremum_grad(ones_like(cot), a, res, axis=axis, "
                               "keepdims=keepdims, initial=initial, where=where)")),
    _rule(nh.extremum_initial_grad, "cot, a, res, initial, axis=None, keepdims=False, where=None",
          cot="extremum_initial_jvp(g, a, res, initial, axis=axis, keepdims=keepdims, "
              "where=where)"),
    _rule(nh.ptp_grad, "cot, a, axis=None, keepdims=False",
          cot=_REDUCE.format(w="ptp_grad(ones_like(cot), a, axis=axis, keepdims=keepdims)")),
    _rule(nh.nanmean_grad, "cot, a, axis=None, keepdims=False",
          cot=_REDUCE.format(w="nanmean_grad(ones_like(cot), a, axis=axis, "
                               "keepdims=keepdims)")),
    _rule(nh.quantile_grad, "cot, a, q, axis=None, method='linear', keepdims=False, "
                            "ignore_nan=False, overwrite_input=False, weights=None, "
                            "interpolation=None",
          cot="quantile_jvp(g, a, q, cot, axis=axis, method=method, keepdims=keepdims, "
              "ignore_nan=ignore_nan, overwrite_input=overwrite_input, weights=weights, "
              "interpolation=interpolation)"),
    # constructors linear in their arguments
    _rule(nh.fill_grad, "cot, fill_value, res", cot="fill_transpose(g, cot, res)", view=True),
    _rule(nh.linspace_grads, "cot, start, stop, num=50, endpoint=True, retstep=False, axis=0, "
                             "res=None",
          cot="linspace_transpose(g, start, stop, num, endpoint, retstep, axis, res)",
          sequence=("cot",)),
    _rule(nh.arange_grads, "cot, start=None, stop=None, step=None, res=None",
          cot="arange_transpose(g, cot, start, stop, step, res)"),
    # builtin sorted: a permutation and its transpose
    _rule(nh.sorted_grad, "cot, iterable, key=None, reverse=False",
          cot="sorted_like(g, iterable, key, reverse)", sequence=("cot",)),
    _rule(nh.sorted_like, "values, iterable, key=None, reverse=False",
          values="sorted_grad(g, iterable, key, reverse)", sequence=("values",)),
]
jvp_rules.linear(*_LINEAR)


# -- curvature: the rule of a primal argument is a Hessian-vector product --------------------------
def _curved(fn, params, joint, joint_params, **grads):
    """A helper with a Hessian part: its tangent is one template for its cotangent and
    primal arguments together (`*_jvp` in runtime/second_order.py)."""
    name = _rule(fn, params, **grads)
    jvp_rules.defjvp(name, joint=joint, joint_params=joint_params)


_STATS = "axis=axis, ddof=ddof, keepdims=keepdims, where=where, mean=mean, correction=correction"

# reductions
_curved(nh.prod_grad, "cot, a, axis=None, keepdims=False, initial=None, where=None",
        "prod_grad_jvp(cot, a, axis, keepdims, initial, where, cot_dot, a_dot, initial_dot)",
        ("cot", "a", "initial"),
        cot=_REDUCE.format(w="prod_grad(ones_like(cot), a, axis=axis, keepdims=keepdims, "
                             "initial=initial, where=where)"),
        a="prod_hvp(cot, a, g, None, axis=axis, keepdims=keepdims, initial=initial, where=where)",
        initial="np.sum(prod_hvp(cot, a, None, g, axis=axis, keepdims=keepdims, initial=initial, "
                "where=where))")
_curved(nh.prod_initial_grad, "cot, a, initial, axis=None, keepdims=False, where=None",
        "prod_initial_grad_jvp(cot, a, initial, axis, keepdims, where, cot_dot, a_dot)",
        ("cot", "a"),
        cot="prod_initial_transpose(g, a, axis=axis, keepdims=keepdims, where=where)",
        a="prod_initial_a_vjp(g, cot, a, axis=axis, keepdims=keepdims, where=where)")
_curved(nh.var_grad, "cot, a, axis=None, ddof=0, keepdims=False, where=None, mean=None, "
                     "correction=None",
        "var_grad_jvp(cot, a, axis, ddof, keepdims, where, mean, correction, cot_dot, a_dot)",
        ("cot", "a"),
        cot=_REDUCE.format(w=f"var_grad(ones_like(cot), a, {_STATS})"),
        a=f"var_hvp(cot, a, g, {_STATS})")
_curved(nh.std_grad, "cot, a, res, axis=None, ddof=0, keepdims=False, where=None, mean=None, "
                     "correction=None",
        "std_grad_jvp(cot, a, res, axis, ddof, keepdims, where, mean, correction, cot_dot, "
        "a_dot)",
        ("cot", "a"),
        cot=_REDUCE.format(w=f"std_grad(ones_like(cot), a, res, {_STATS})"),
        a=f"std_hvp(cot, a, res, g, {_STATS})")
_curved(nh.average_grads, "cot, a, axis=None, weights=None, returned=False, keepdims=False",
        "average_grads_jvp(cot, a, axis, weights, returned, keepdims, cot_dot, a_dot, "
        "weights_dot)",
        ("cot", "a", "weights"),
        prelude="hv = average_hvp(cot, a, axis, weights, returned, keepdims, g[0], g[1])",
        cot="average_transpose(g, cot, a, axis, weights, returned, keepdims)",
        a="hv[0]", weights="hv[1]", sequence=("cot",), outputs=2)
_curved(nh.cumprod_grad, "cot, a, res, axis=None",
        "cumprod_grad_jvp(cot, a, res, axis, cot_dot, a_dot)", ("cot", "a"),
        cot="cumprod_jvp(g, a, axis)", a="cumprod_hvp(cot, a, g, axis)")
_curved(nh.cumulative_grad, "cot, x, res, axis=None, include_initial=False, product=False",
        "cumulative_grad_jvp(cot, x, res, axis, include_initial, product, cot_dot, x_dot)",
        ("cot", "x"),
        cot="cumulative_transpose(g, x, res, axis, include_initial, product)",
        x="cumulative_hvp(cot, x, g, axis, include_initial, product)")
_curved(nh.norm_grad, "cot, x, res, ord=None, axis=None, keepdims=False",
        "norm_grad_jvp(cot, x, res, ord, axis, keepdims, cot_dot, x_dot)", ("cot", "x"),
        cot=_REDUCE.format(w="norm_grad(ones_like(cot), x, res, ord, axis, keepdims)"),
        x="norm_hvp(cot, x, res, g, ord, axis, keepdims)")
_curved(nh.vector_norm_grad, "cot, x, res, axis=None, keepdims=False, ord=2",
        "vector_norm_grad_jvp(cot, x, res, axis, keepdims, ord, cot_dot, x_dot)", ("cot", "x"),
        cot=_REDUCE.format(w="vector_norm_grad(ones_like(cot), x, res, axis, keepdims, ord)"),
        x="vector_norm_hvp(cot, x, res, g, axis, keepdims, ord)")
_curved(nh.matrix_norm_grad, "cot, x, res, keepdims=False, ord='fro'",
        "matrix_norm_grad_jvp(cot, x, res, keepdims, ord, cot_dot, x_dot)", ("cot", "x"),
        cot="reduce_tangent(matrix_norm_grad(ones_like(cot), x, res, keepdims, ord), g, "
            "axis=(-2, -1), keepdims=keepdims)",
        x="matrix_norm_hvp(cot, x, res, g, keepdims, ord)")
_curved(nh.logsumexp_grads, "cot, a, res, axis=None, b=None, keepdims=False, return_sign=False",
        "logsumexp_grads_jvp(cot, a, res, axis, b, keepdims, return_sign, cot_dot, a_dot, b_dot)",
        ("cot", "a", "b"),
        prelude="hv = logsumexp_hvp(cot, a, res, axis, b, keepdims, return_sign, g[0], g[1])",
        cot="logsumexp_jvp(a, b, g[0], g[1], res, axis, keepdims, return_sign)",
        a="unbroadcast(hv[0], a)", b="unbroadcast(hv[1], b)", sequence=("cot",), outputs=2)

# statistics of several variables, differences, integrals, interpolation, polynomials
_curved(nh.cov_grads, "cot, m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, "
                      "aweights=None",
        "cov_grads_jvp(cot, m, y, rowvar, bias, ddof, fweights, aweights, cot_dot, m_dot, y_dot)",
        ("cot", "m", "y"),
        prelude="hv = cov_hvp(cot, m, y, rowvar, bias, ddof, g[0], g[1])",
        cot="cov_transpose(g, m, y, rowvar, bias, ddof, fweights, aweights)",
        m="hv[0]", y="hv[1]", outputs=2)
_curved(nh.corrcoef_grads, "cot, x, y=None, rowvar=True",
        "corrcoef_grads_jvp(cot, x, y, rowvar, cot_dot, x_dot, y_dot)", ("cot", "x", "y"),
        prelude="hv = corrcoef_hvp(cot, x, y, rowvar, g[0], g[1])",
        cot="corrcoef_transpose(g, x, y, rowvar)", x="hv[0]", y="hv[1]", outputs=2)
_curved(nh.trapezoid_grads, "cot, y, x=None, dx=1.0, axis=-1",
        "trapezoid_grads_jvp(cot, y, x, dx, axis, cot_dot, y_dot, x_dot, dx_dot)",
        ("cot", "y", "x", "dx"),
        prelude="hv = trapezoid_hvp(cot, y, x, dx, axis, g[0], g[1], g[2])",
        cot="trapezoid_transpose(g, y, x, dx, axis)", y="hv[0]", x="hv[1]", dx="hv[2]",
        outputs=3)
_curved(nh.interp_grads, "cot, x, xp, fp, left=None, right=None, period=None",
        "interp_grads_jvp(cot, x, xp, fp, left, right, period, cot_dot, x_dot, xp_dot, fp_dot)",
        ("cot", "x", "xp", "fp"),
        prelude="hv = interp_hvp(cot, x, xp, fp, left, right, g[0], g[1], g[2])",
        cot="interp_transpose(g, x, xp, fp, left, right)", x="hv[0]", xp="hv[1]", fp="hv[2]",
        outputs=5)
_curved(nh.polyval_grads, "cot, p, x", "polyval_grads_jvp(cot, p, x, cot_dot, p_dot, x_dot)",
        ("cot", "p", "x"),
        prelude="hv = polyval_hvp(cot, p, x, g[0], g[1])",
        cot="polyval_transpose(g, p, x)", p="hv[0]", x="hv[1]", sequence=("p",), outputs=2)

# constructors whose values are not linear in their arguments
_curved(nh.logspace_grads, "cot, start, stop, num=50, endpoint=True, base=10.0, axis=0, "
                           "res=None",
        "logspace_grads_jvp(cot, start, stop, num, endpoint, base, axis, res, cot_dot, "
        "start_dot, stop_dot, base_dot)",
        ("cot", "start", "stop", "base"),
        prelude="hv = logspace_hvp(cot, start, stop, num, endpoint, base, axis, res, g[0], g[1], "
                "g[2])",
        cot="logspace_jvp(g[0], g[1], g[2], base, res, num, endpoint, axis)",
        start="hv[0]", stop="hv[1]", base="hv[2]", outputs=3)
_curved(nh.geomspace_grads, "cot, start, stop, num=50, endpoint=True, axis=0, res=None",
        "geomspace_grads_jvp(cot, start, stop, num, endpoint, axis, res, cot_dot, start_dot, "
        "stop_dot)",
        ("cot", "start", "stop"),
        prelude="hv = geomspace_hvp(cot, start, stop, num, endpoint, axis, res, g[0], g[1])",
        cot="geomspace_jvp(start, stop, g[0], g[1], res, num, endpoint, axis)",
        start="hv[0]", stop="hv[1]", outputs=2)

# -- products: bilinear (the cotangent of one operand is the other's rule at g) -------------
for _fn, _params, _f, _extra in (
        (nh.inner_grads, "cot, a, b", "np.inner", ""),
        (nh.kron_grads, "cot, a, b", "np.kron", ""),
        (nh.tensordot_grads, "cot, a, b, axes=2", "np.tensordot", ", axes"),
        (nh.convolve_grads, "cot, a, b, mode='full'", "np.convolve", ", mode"),
        (nh.correlate_grads, "cot, a, b, mode='valid'", "np.correlate", ", mode"),
        (nh.cross_grads, "cot, a, b, axisa=-1, axisb=-1, axisc=-1, axis=None", "np.cross",
         ", axisa, axisb, axisc, axis")):
    _curved(_fn, _params,
            f"{_fn.__name__}_jvp(cot, a, b{_extra}, cot_dot, a_dot, b_dot)", ("cot", "a", "b"),
            cot=f"{_f}(g[0], b{_extra}) + {_f}(a, g[1]{_extra})",
            a=f"{_fn.__name__}(cot, a, g[1]{_extra})[0]",
            b=f"{_fn.__name__}(cot, g[0], b{_extra})[1]", outputs=2)
_curved(nh.vecdot_grads, "cot, a, b, axis=-1",
        "vecdot_grads_jvp(cot, a, b, axis, cot_dot, a_dot, b_dot)", ("cot", "a", "b"),
        cot="np.vecdot(g[0], b, axis=axis) + np.vecdot(a, g[1], axis=axis)",
        a="vecdot_grads(cot, a, g[1], axis)[0]", b="vecdot_grads(cot, g[0], b, axis)[1]",
        broadcast=True, outputs=2)
_curved(nh.einsum_grads, "cot, operands", "einsum_grads_jvp(cot, operands, cot_dot, operands_dot)",
        ("cot", "operands"),
        cot="einsum_transpose(g, operands)", operands="einsum_hvp(cot, operands, g)",
        sequence=("operands",), view=True)
_curved(nh.multi_dot_grads, "cot, arrays", "multi_dot_grads_jvp(cot, arrays, cot_dot, arrays_dot)",
        ("cot", "arrays"),
        cot="multi_dot_jvp(arrays, g)", arrays="multi_dot_hvp(cot, arrays, g)",
        sequence=("arrays",))

# -- linear algebra ----------------------------------------------------------------------
_curved(nh.solve_grads, "cot, a, b, res", "solve_grads_jvp(cot, a, b, res, cot_dot, a_dot, b_dot)",
        ("cot", "a", "b"),
        prelude="hv = solve_hvp(cot, a, b, res, g[0], g[1])",
        cot="solve_jvp(a, b, g[0], g[1], res)", a="hv[0]", b="hv[1]", outputs=2)
_curved(nh.det_grad, "cot, a", "det_grad_jvp(cot, a, cot_dot, a_dot)", ("cot", "a"),
        cot="reduce_tangent(det_grad(ones_like(cot), a), g, axis=(-2, -1))",
        a="det_hvp(cot, a, g)")
_curved(nh.slogdet_grad, "cot, a", "slogdet_grad_jvp(cot, a, cot_dot, a_dot)", ("cot", "a"),
        cot="slogdet_transpose(g, cot, a)", a="slogdet_hvp(cot, a, g)", sequence=("cot",))
_curved(nh.matrix_power_grad, "cot, a, n", "matrix_power_grad_jvp(cot, a, n, cot_dot, a_dot)",
        ("cot", "a"),
        cot="matrix_power_jvp(g, a, n)", a="matrix_power_hvp(cot, a, n, g)")
_curved(nh.pinv_grad, "cot, a, res, hermitian=False",
        "pinv_grad_jvp(cot, a, res, hermitian, cot_dot, a_dot)", ("cot", "a"),
        cot="pinv_jvp(g, a, res, hermitian)", a="pinv_hvp(cot, a, res, g, hermitian)")
_curved(nh.cholesky_grad, "cot, L, upper=False", "cholesky_grad_jvp(cot, L, upper, cot_dot, L_dot)",
        ("cot", "L"),
        cot="cholesky_jvp(g, L, upper)", L="cholesky_L_vjp(g, cot, L, upper)")
_curved(nh.eigh_grad, "cot, a, res, UPLO='L'", "eigh_grad_jvp(cot, a, res, UPLO, cot_dot, a_dot)",
        ("cot", "a"),
        cot="eigh_jvp(g, res, UPLO)", a="eigh_hvp(cot, a, res, g, UPLO)", sequence=("cot",))
_curved(nh.eigvalsh_grad, "cot, a, UPLO='L'", "eigvalsh_grad_jvp(cot, a, UPLO, cot_dot, a_dot)",
        ("cot", "a"),
        cot="eigvalsh_jvp(g, a, UPLO)", a="eigh_hvp(cot, a, None, g, UPLO, True)")
_curved(nh.svd_grad, "cot, a, res, full_matrices=True, compute_uv=True, hermitian=False",
        "svd_grad_jvp(cot, a, res, full_matrices, compute_uv, hermitian, cot_dot, a_dot)",
        ("cot", "a"),
        cot="svd_jvp(g, a, res, full_matrices, compute_uv, hermitian)",
        a="svd_hvp(cot, a, res, g, full_matrices, compute_uv, hermitian)", sequence=("cot",))
_curved(nh.svdvals_grad, "cot, x", "svdvals_grad_jvp(cot, x, cot_dot, x_dot)", ("cot", "x"),
        cot="svdvals_jvp(g, x)", x="svdvals_hvp(cot, x, g)")
_curved(nh.qr_grad, "cot, a, res, mode='reduced'", "qr_grad_jvp(cot, a, res, mode, cot_dot, a_dot)",
        ("cot", "a"),
        cot="qr_jvp(g, a, res, mode)", a="qr_hvp(cot, a, res, g, mode)", sequence=("cot",))

# -- the helpers of the SciPy rules and of issue 34's NumPy rules ------------------------------
# Pointwise: SciPy's special functions, whose derivatives are the same helpers again.
_ORDER = "unsupported('the gradient of a Bessel function with respect to its order')"
jvp_rules.pointwise(
    _rule(nh.scipy_gammaln, "x", x="g * scipy_digamma(x)"),
    _rule(nh.scipy_polygamma, "n, x", x="g * scipy_polygamma(n + 1, x)",
          n="unsupported('the gradient of polygamma with respect to n')", broadcast=True),
    _rule(nh.bessel_j, "v, x", x="g * (bessel_j(v - 1, x) - bessel_j(v + 1, x)) / 2.0",
          v=_ORDER, broadcast=True),
    _rule(nh.bessel_y, "v, x", x="g * (bessel_y(v - 1, x) - bessel_y(v + 1, x)) / 2.0",
          v=_ORDER, broadcast=True),
    _rule(nh.bessel_i, "v, x", x="g * (bessel_i(v - 1, x) + bessel_i(v + 1, x)) / 2.0",
          v=_ORDER, broadcast=True),
    _rule(nh.bessel_k, "v, x", x="-g * (bessel_k(v - 1, x) + bessel_k(v + 1, x)) / 2.0",
          v=_ORDER, broadcast=True),
    _rule(nh.bessel_ie, "v, x",
          x="g * ((bessel_ie(v - 1, x) + bessel_ie(v + 1, x)) / 2.0 - np.sign(x) * ans)",
          v=_ORDER, broadcast=True),
    _rule(nh.bessel_ke, "v, x",
          x="g * (ans - (bessel_ke(v - 1, x) + bessel_ke(v + 1, x)) / 2.0)",
          v=_ORDER, broadcast=True))
# Checks, shapes and options: no gradient.
nondiff(nh.dirichlet_shape, nh.is_transposed, nh.flipped_trans, nh.full_conv_shape)

# Linear in their array argument: the rule of `cot` is the transpose.
jvp_rules.linear(
    _rule(nh.mvn_mean, "x, mean, cov, allow_singular=False", mean="unbroadcast(g, mean)"),
    _rule(nh.symmetric_from_lower, "a",
          a="np.tril(g) + np.swapaxes(np.triu(g, 1), -1, -2)"),
    _rule(nh.triangle_part, "cot, lower=True, unit_diagonal=False",
          cot="triangle_part(g, lower, unit_diagonal)"),
    _rule(nh.transpose_if, "cot, flag", cot="transpose_if(g, flag)"),
    _rule(nh.as_columns, "cot, n", cot="np.reshape(g, np.shape(cot))"),
    _rule(nh.require_real, "value, what", value="g"),
    _rule(nh.block_upper, "a, e", prelude="n = np.shape(a)[-1]",
          a="unbroadcast(g[..., :n, :n] + g[..., n:, n:], a)",
          e="unbroadcast(g[..., :n, n:], e)"),
    _rule(nh.embed_centered, "cot, shape", cot="crop_centered(g, np.shape(cot))"),
    _rule(nh.crop_centered, "cot, shape", cot="embed_centered(g, np.shape(cot))"),
    _rule(nh.partition_grad, "cot, a, res, axis=-1", cot="partition_jvp(g, a, res, axis)"),
    _rule(nh.gradient_grad, "cot, f, varargs=(), axis=None, edge_order=1",
          cot="gradient_linear(g, f, varargs, axis, edge_order)"),
    _rule(nh.gradient_linear, "f_dot, f, varargs=(), axis=None, edge_order=1",
          f_dot="gradient_grad(g, f, varargs, axis, edge_order)"))

# SciPy's linear algebra and signal processing, for templates: the same rules as the
# table's entries (scipy_linalg_rules.py, scipy_signal_rules.py), so derivatives of
# every order are these helpers again.
_SOLVE_TRIANGULAR_A = ("-triangle_part(transpose_if(as_columns(gb, np.shape(a)[-1]) @ "
                       "np.swapaxes(as_columns(ans, np.shape(a)[-1]), -1, -2), "
                       "is_transposed(trans)), lower, unit_diagonal)")
_rule(nh.scipy_solve_triangular, "a, b, trans=0, lower=False, unit_diagonal=False",
      prelude="gb = scipy_solve_triangular(a, g, flipped_trans(trans), lower, unit_diagonal)",
      a=_SOLVE_TRIANGULAR_A, b="gb")
jvp_rules.defjvp("_s2s_scipy_solve_triangular",
                 joint="solve_triangular_jvp(a, b, a_dot, b_dot, ans, trans, lower, "
                       "unit_diagonal)", joint_params=("a", "b"))
_CHO_SOLVE_C = ("transpose_if(triangle_part(sym @ triangle_part(transpose_if(c, not lower), "
                "True), True), not lower)")
_rule(nh.scipy_cho_solve, "c, lower, b",
      prelude="gb = scipy_cho_solve(c, lower, g); n = np.shape(c)[-1]; "
              "outer = as_columns(gb, n) @ np.swapaxes(as_columns(ans, n), -1, -2); "
              "sym = -(outer + np.swapaxes(outer, -1, -2))",
      c=_CHO_SOLVE_C, b="gb")
jvp_rules.defjvp("_s2s_scipy_cho_solve", joint="cho_solve_jvp(c, lower, b, c_dot, b_dot, ans)",
                 joint_params=("c", "b"))
_rule(nh.scipy_solve_sylvester, "a, b, q",
      prelude="gq = scipy_solve_sylvester(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2), g)",
      a="-gq @ np.swapaxes(ans, -1, -2)", b="-np.swapaxes(ans, -1, -2) @ gq", q="gq")
jvp_rules.defjvp("_s2s_scipy_solve_sylvester",
                 joint="solve_sylvester_jvp(a, b, a_dot, b_dot, q_dot, ans)",
                 joint_params=("a", "b", "q"))
_rule(nh.expm_frechet, "a, e",
      prelude="n = np.shape(a)[-1]; gm = expm_frechet(np.swapaxes(block_upper(a, e), -1, -2), "
              "block_upper(np.zeros_like(g), g))",
      a="unbroadcast(gm[..., :n, :n] + gm[..., n:, n:], a)", e="unbroadcast(gm[..., :n, n:], e)")
jvp_rules.defjvp("_s2s_expm_frechet", joint="expm_frechet_jvp(a, e, a_dot, e_dot)",
                 joint_params=("a", "e"))
_rule(nh.signal_convolve, "in1, in2, mode='full'",
      prelude="gf = embed_centered(g, full_conv_shape(in1, in2))",
      in1="signal_correlate(gf, in2, 'valid')", in2="signal_correlate(gf, in1, 'valid')")
_rule(nh.signal_correlate, "in1, in2, mode='full'",
      prelude="gf = embed_centered(g, full_conv_shape(in1, in2))",
      in1="signal_convolve(gf, in2, 'valid')", in2="signal_correlate(in1, gf, 'valid')")
jvp_rules.multilinear("_s2s_signal_convolve", "_s2s_signal_correlate")

# np.linalg.eig's gap weights: dF[i, j] = -F[i, j]^2 (dw[j] - dw[i]).
_rule(nh.eig_gaps, "w", w="np.sum(g * ans * ans, axis=-1) - np.sum(g * ans * ans, axis=-2)")
jvp_rules.defjvp("_s2s_eig_gaps", w="-ans * ans * (w_dot[..., None, :] - w_dot[..., :, None])")
