"""Gradient rules for s2sgrad's own runtime helpers.

Generated adjoints call these helpers; giving them rules (in the same table
format as NumPy's) is what lets the compiler differentiate its own output,
for second derivatives (grad of grad, Hessian-vector products). The helper's
first argument is named `cot` here because `g` is the template's cotangent.
"""
from __future__ import annotations

from .. import runtime
from ..runtime import arrays as runtime_arrays
from ..runtime import complex_grads as runtime_complex
from ..runtime import fused as runtime_fused
from ..runtime import inplace as runtime_inplace
from ..runtime import reverse as runtime_reverse
from ..runtime import shapes as runtime_shapes
from ..runtime import tangent as runtime_tangent
from .registry import Rule, constructors, defvjp, nondiff


def _rule(*args, **kwargs) -> Rule:
    """defvjp, the rule marked holomorphic: every helper here is linear in
    its cotangent with real coefficients, or a holomorphic function (softmax,
    logsumexp, safe_log), so its template holds for complex values as written, and
    the adjoint of complex code is differentiated again."""
    rule = defvjp(*args, **kwargs)
    rule.holomorphic = True
    return rule


# -- the reductions and broadcasting helpers the NumPy rules use ----------------
_rule(runtime.unbroadcast, "value, like", value="broadcast_like(g, value)",
      name="_s2s_unbroadcast")
_rule(runtime.broadcast_like, "cot, value", cot="unbroadcast(g, cot)", name="_s2s_broadcast_like")
_rule(runtime.unbroadcast_matmul, "value, a, b", value="np.broadcast_to(g, np.shape(value))",
      name="_s2s_unbroadcast_matmul")
_rule(runtime.expand_reduced, "cot, x, axis=None, keepdims=False",
      cot="np.sum(g, axis=axis, keepdims=keepdims)", name="_s2s_expand_reduced")
_rule(runtime.transpose_grad, "cot, axes=None", cot="np.transpose(g, axes)",
      name="_s2s_transpose_grad")
_rule(runtime.safe_log, "x", x="g * (x != 0) / np.where(x == 0, 1.0, x)",
      name="_s2s_safe_log")

# matmul_grad_a(cot, a, b) is bilinear in (cot, b): its transpose in cot is the
# product itself, with g in the place of a; in b, matmul_grad_b with g for a.
_rule(runtime.matmul_grad_a, "cot, a, b", cot="unbroadcast(np.matmul(g, b), cot)",
      b="matmul_grad_b(cot, g, b)", name="_s2s_matmul_grad_a")
_rule(runtime.matmul_grad_b, "cot, a, b", cot="unbroadcast(np.matmul(a, g), cot)",
      a="matmul_grad_a(cot, a, g)", name="_s2s_matmul_grad_b")
_rule(runtime.dot_grad_a, "cot, a, b", cot="unbroadcast(np.dot(g, b), cot)",
      b="dot_grad_b(cot, g, b)", name="_s2s_dot_grad_a")
_rule(runtime.dot_grad_b, "cot, a, b", cot="unbroadcast(np.dot(a, g), cot)",
      a="dot_grad_a(cot, a, g)", name="_s2s_dot_grad_b")

# -- copies, lists and the pure forms of in-place updates ----------------------------
_rule(runtime.copy_adjoint, "adjoint", adjoint="g", name="_s2s_copy_adjoint")
_rule(runtime_inplace.copy_value, "value", value="g", name="_s2s_copy_value")
_rule(runtime_inplace.snapshot, "value", value="g", name="_s2s_snapshot")
_rule(runtime.none_to_zero, "grad, like", grad="g", name="_s2s_none_to_zero")
# A tangent broadcast to its value's shape (forward mode's code, differentiated again).
_rule(runtime_tangent.broadcast_tangent, "t, like", t="unbroadcast(g, t)",
      name="_s2s_broadcast_tangent")
# What a Function's vjp returned, checked and made one per input, and back (transposes).
_rule(runtime_reverse.check_count, "grads, expected, method",
      grads="as_returned(g, grads)", name="_s2s_check_count")
_rule(runtime_reverse.as_returned, "cot, grads, method='the vjp'",
      cot="tuple(g)[:len(cot)] if isinstance(grads, (tuple, list)) else (g,)",
      name="_s2s_as_returned")
# A list's array cotangent cut into items, and back (each the other's transpose).
_rule(runtime_reverse.items_like, "cotangent, value", cotangent="items_joined(g, cotangent)",
      name="_s2s_items_like")
_rule(runtime_reverse.items_joined, "items, cotangent", items="items_like(g, items)",
      name="_s2s_items_joined")
# What a loop walked handed back to what it walks, and the tangent (the transposes).
_rule(runtime_reverse.loop_items_grad, "cotangent, value",
      cotangent="loop_items_tangent(g, value)", name="_s2s_loop_items_grad")
_rule(runtime_reverse.loop_items_tangent, "tangent, value",
      tangent="loop_items_grad(g, value)", name="_s2s_loop_items_tangent")
_rule(runtime_inplace.add, "total, contribution", total="g", contribution="g",
      name="_s2s_add")
_rule(runtime_inplace.item_updated, "new, old", new="g", name="_s2s_item_updated")
_rule(runtime_inplace.copy_item, "container, index",
      container="scatter_add(zeros_like(container), index, g)", name="_s2s_copy_item")
_rule(runtime_inplace.scatter_add, "adjoint, index, value", adjoint="g",
      value="unbroadcast(copy_item(g, index), value)", name="_s2s_scatter_add")
# The transpose zeroes the same items of g, which have the structure of `adjoint`'s
# (what was written), not of `like`'s (what the write replaced: L[0] = L[0][:, None]).
_rule(runtime_inplace.with_zeroed, "adjoint, index, like=None",
      adjoint="with_zeroed(g, index, adjoint)",
      name="_s2s_with_zeroed")
_rule(runtime_inplace.with_item, "container, index, value",
      container="with_zeroed(g, index)",
      value="written_grad(g, index, value)", name="_s2s_with_item")
# Linear in the adjoint: its transpose writes g where the winning writers were.
_rule(runtime_inplace.written_grad, "adjoint, index, value",
      adjoint="with_item(zeros_like(adjoint), index, g)", name="_s2s_written_grad")
_rule(runtime_inplace.push, "items, item", items="drop_last(g)", item="last(g)",
      name="_s2s_push")
# An array cut into a list's items, and its transpose: the items as one array again.
_rule(runtime_reverse.split_as_items, "value, items", value="items_joined(g, value)",
      name="_s2s_split_as_items")
_rule(runtime_reverse.dict_item_grad, "cotangent, key, item",
      cotangent="dict_item_transpose(g, cotangent, key)", name="_s2s_dict_item_grad")
_rule(runtime_reverse.dict_item_transpose, "g_item, cotangent, key",
      g_item="dict_item_grad(g, key, g_item)", name="_s2s_dict_item_transpose")


_rule(runtime_inplace.last, "items", items="last_grad(g, items)", name="_s2s_last")
# Linear in its cotangent: the transpose takes that item back out.
_rule(runtime_inplace.last_grad, "cot, items", cot="last(g)", name="_s2s_last_grad")
_rule(runtime_inplace.drop_last, "items", items="push(g, zeros_like(items[-1]))",
      name="_s2s_drop_last")

_rule(runtime_arrays.as_array, "value, dtype=None", value="g", name="_s2s_as_array")
_rule(runtime_arrays.cast_into, "value, target", value="g", name="_s2s_cast_into")
_rule(runtime_shapes.swap_last_axes, "x", x="np.swapaxes(g, -1, -2)", name="_s2s_swap_last_axes")
_rule(runtime_shapes.sum_to_shape, "value, shape",
      value="unbroadcast(np.broadcast_to(g, np.broadcast_shapes(np.shape(g), np.shape(value))), "
            "value)", name="_s2s_sum_to_shape")

# -- no gradient: shapes, masks, counts, constructors ---------------------------------
nondiff(runtime.reduced_count, runtime.balanced_max_mask, runtime.meta, runtime.backwards,
        runtime.keys, runtime.detached, runtime_arrays.size_of, runtime_inplace.item_unshared)
constructors(runtime.zeros_like, runtime.ones_like, runtime.seed, runtime.unit,
             runtime_tangent.zero_tangent, runtime_tangent.generic_cotangent)

# -- softmax, log-softmax, logsumexp and the sigmoid written out (normalize/fused.py) ------------
_rule(runtime_fused.log_softmax, "x, axis",
      x="g - np.exp(ans) * np.sum(g, axis=axis, keepdims=True)", name="_s2s_log_softmax")
_rule(runtime_fused.softmax, "x, axis",
      x="ans * (g - np.sum(g * ans, axis=axis, keepdims=True))", name="_s2s_softmax")
_rule(runtime_fused.logsumexp, "x, axis, keepdims, max_first",
      x="np.exp(x - expand_reduced(ans, x, axis, keepdims)) * "
        "expand_reduced(g, x, axis, keepdims)",
      name="_s2s_logsumexp")
_rule(runtime_fused.sigmoid_exp, "x, one", x="g * ans * (1.0 - ans)", name="_s2s_sigmoid_exp")
_rule(runtime_fused.sigmoid_tanh, "x, one", x="g * ans * (1.0 - ans)", name="_s2s_sigmoid_tanh")

# The real part of a real variable's cotangent (its rule: the cotangent as it is,
# np.real's for complex arguments; a value it makes is real, analyze.realising_ops).
_rule(runtime_complex.real_part, "v", v="g", name="_s2s_real_part")
