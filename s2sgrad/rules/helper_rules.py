"""Second derivatives of the table helpers (runtime/numpy_grads.py): mostly derived.

A first-order adjoint calls the helpers the NumPy rules' templates use
(`_s2s_stack_grad(g, arrays, axis)`, `_s2s_prod_grad(g, a, ...)`, ...); grad of
grad, functional.hvp/vhp/hessian and forward over reverse differentiate that
adjoint again, and so differentiate the helper. The helpers are plain NumPy:
`differentiate_source_of(numpy_grads)` lets the compiler read and differentiate
a helper without a rule like any function of the user's, so its derivatives of
every order, in both modes, come from its one definition (one source of the
mathematics, as autograd's rules are themselves differentiable).

The rules below are the exceptions, each for a reason the compiler does not yet
differentiate the helper's code (or a helper it calls): SciPy's special functions
called with *args, `from scipy import ...` inside the helper, `with
np.errstate(...)` (power_slope), a `*args` call (np.gradient, and np.einsum
itself: `einsum_list` is einsum with its arrays as one list, the form its
cotangents take). Each is a rule in the table's form whose derivatives are the
same helpers again (digamma's is polygamma's; x ** y's mixed slopes are
power_slope_mixed one order up; einsum's cotangents are einsum_lists), so they
too hold to every order. No derivative of a helper is written by hand.

Each helper h(g, x) is linear in its cotangent argument (named `cot` here, since
`g` is the template's own cotangent): `cot`'s rule is the transpose of h in g.
"""
from __future__ import annotations

from ..runtime import complex_grads as cg
from ..runtime import numpy_grads as nh
from . import jvp_rules
from .registry import defvjp, differentiate_source_of, holomorphic, nondiff


def _rule(fn, params, **grads):
    """defvjp for a table helper, under its generated name `_s2s_<name>`."""
    name = f"_s2s_{fn.__name__}"
    defvjp(fn, params, name=name, **grads)
    return name


# -- elementwise ---------------------------------------------------------------------------------
jvp_rules.pointwise(
    _rule(nh.scipy_digamma, "x", x="g * scipy_trigamma(x)"),
    _rule(nh.scipy_trigamma, "x", x="g * scipy_polygamma(2, x)"),
    _rule(nh.power_slope, "x, y, k=1", x="g * power_slope(x, y, k + 1)",
          y="g * power_slope_mixed(x, y, k, 1)", broadcast=True),
    _rule(nh.power_slope_mixed, "x, y, k=1, m=1", x="g * power_slope_mixed(x, y, k + 1, m)",
          y="g * power_slope_mixed(x, y, k, m + 1)", broadcast=True))
holomorphic(nh.power_slope)   # (the slopes of a holomorphic power)
nondiff(nh.unsupported)     # raises; its result never carries a gradient
nondiff(nh.element_numbers)        # element numbers: integers, no gradient
nondiff(nh.diagonal_entries)       # the index np.fill_diagonal writes at: integers
nondiff(nh.kron_shapes)    # shapes
nondiff(nh.strictly_inside)   # a boolean mask
differentiate_source_of(nh)
# The complex rules' helpers too (for derivatives of derivatives of complex code);
# the axes a transform runs over are numbers, never differentiated.
nondiff(cg.fft_axes)
differentiate_source_of(cg)

# -- linear in the cotangent, no curvature: the rule of `cot` is the transpose -----------------
_REDUCE = "reduce_tangent({w}, g, axis=axis, keepdims=keepdims)"
_LINEAR = [
    # rearrangements and joins
    _rule(nh.index_concat_grads, "cot, maker, items",
          cot="index_concat_linear(maker, items, g)", view=True),
    _rule(nh.index_concat_linear, "maker, items, values",
          values="index_concat_grads(g, maker, items)", sequence=("values",)),
    # builtin sorted's transpose (its forward-mode rule's helper)
    _rule(nh.sorted_like, "values, iterable, key=None, reverse=False",
          values="sorted_grad(g, iterable, key, reverse)", sequence=("values",)),
]
jvp_rules.linear(*_LINEAR)


# -- einsum with its arrays as one list: the function einsum's cotangents call, so that
# they are einsums again and differentiate from source to any order
jvp_rules.defjvp(
    _rule(nh.einsum_list, "subscripts, operands",
          operands="einsum_list_grads(g, subscripts, operands)", sequence=("operands",),
          per_item=dict(operands="einsum_operand_grad(g, subscripts, operands, item)")),
    joint="einsum_list_jvp(subscripts, operands, operands_dot)", joint_params=("operands",),
    complex_ok=True)
holomorphic(nh.einsum_list)   # (a product: no conjugate anywhere)
nondiff(nh.einsum_form, nh.einsum_operand_plan)   # labels and positions

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
    _rule(nh.block_upper, "a, e", prelude="n = np.shape(a)[-1]",
          a="unbroadcast(g[..., :n, :n] + g[..., n:, n:], a)",
          e="unbroadcast(g[..., :n, n:], e)"),
    _rule(nh.crop_centered, "cot, shape", cot="embed_centered(g, np.shape(cot))"),
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
_rule(nh.scipy_solve_banded, "l_and_u, ab, b",
      prelude="l = l_and_u[0]; u = l_and_u[1]; "
              "gb = scipy_solve_banded((u, l), band_transposed(ab, l, u), g)",
      ab="-band_outer(gb, ans, l, u)", b="gb")
jvp_rules.defjvp("_s2s_scipy_solve_banded",
                 joint="solve_banded_jvp(l_and_u, ab, ab_dot, b_dot, ans)",
                 joint_params=("ab", "b"))
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

