"""Rules of s2sgrad's runtime helpers (what second derivatives differentiate)."""
import pytest
from conftest import check_vjp, import_source

from s2sgrad.rules import all_rules

SOURCE = '''
import numpy as np
from s2sgrad.runtime import (unbroadcast as ub, expand_reduced as er, transpose_grad as tg,
                             safe_log as sl, matmul_grad_a as mga, matmul_grad_b as mgb,
                             dot_grad_a as dga, dot_grad_b as dgb, copy_adjoint as ca,
                             none_to_zero as nz, unbroadcast_matmul as ubm,
                             broadcast_like as bl)
from s2sgrad.runtime.reverse import items_like as il, items_joined as ij
from s2sgrad.runtime.reverse import dict_item_grad as dig, dict_item_transpose as dit
from s2sgrad.runtime.reverse import split_as_items as sai, loop_items_grad as lig
from s2sgrad.runtime.reverse import loop_items_tangent as lit
from s2sgrad.runtime.reverse import as_returned as ar, check_count as cc
from s2sgrad.runtime.arrays import as_array as aa, cast_into as cinto
from s2sgrad.runtime.shapes import swap_last_axes as sla, sum_to_shape as sts
from s2sgrad.runtime.tangent import broadcast_tangent as bt
from s2sgrad.runtime.fused import log_softmax as lsm, softmax as sm, logsumexp as lse
from s2sgrad.runtime.fused import sigmoid_exp as sge, sigmoid_tanh as sgt
from s2sgrad.runtime.complex_grads import real_part as rp
from s2sgrad.runtime.inplace import (copy_value as cv, snapshot as sn, add as ad,
                                     copy_item as ci, scatter_add as sa, with_zeroed as wz,
                                     with_item as wi, push, last, drop_last,
                                     written_grad as wg, last_grad as lg,
                                     item_updated as iu)


def f_dict_item_grad(c, x):
    return dig({"a": c * c, "b": x}, "a", x) * np.sin(x) + dig(0.0, "a", x)

def f_dict_item_transpose(c, x):
    d = dit(c * c, {"a": x, "b": 2.0 * x}, "a")
    return d["a"] * x + d["b"] * c

def f_split_as_items(c, x):
    parts = sai(c * c, [x, x])
    return parts[0] * np.sin(parts[1]) * x

def f_real_part(x, y):
    return rp(x * (1.0 + 2.0j) * y) * np.sin(x) + rp((x, y * y))[1] * x


def f_as_array(x):
    return aa(x * x) * np.sin(x)

def f_cast_into(x, like):
    return cinto(x * x, like) * np.sin(like)

def f_swap_last_axes(x):
    return sla(x * x) * 2.0

def f_sum_to_shape(x, like):
    return sts(x * x, np.shape(like)) * like


def f_items_like(c, x):
    parts = il(c * c, [x, 2.0 * x])
    return parts[0] * np.sin(parts[1]) * x

def f_loop_items_grad(c, x):
    return lig(c * c, x * 2.0) * x

def f_loop_items_tangent(t, x):
    return lit(t * t, x * 2.0) * x

def f_items_joined(a, b, c):
    return ij([a * a, b * a], c) * c

def f_check_count(a, b):
    one = cc(a * a, 1, "F.vjp")[0] * np.sin(b)            # a bare gradient: a 1-tuple
    two = cc((a * b, b * b, None), 2, "G.vjp")            # a trailing None dropped
    return one + two[0] * two[1]

def f_as_returned(a, b):
    bare = ar((a * a,), b * 1.0) * b                     # the vjp returned it bare
    padded = ar((a * b, b * b), (a, b, None))            # and with a trailing None
    return bare + padded[0] * padded[1] + (padded[2] is None) * a

def f_item_updated(n, o):
    return iu(n * n, o * 1.0) * o

def f_broadcast_tangent(t, x):
    return bt(t * t, x * 2.0) * x

def f_unbroadcast(x, like):
    return ub(x * x, like) * 2.0

def f_unbroadcast_matmul(x, a, b):
    return ubm(x * x, a, b) * 2.0

def f_broadcast_like(c, x):
    return bl(c * c, x) * x

def f_broadcast_like_items(c, d, x):
    parts = bl([c * d, d], [x, x * 2.0])
    return parts[0] * parts[1]

def f_expand_axis(c, x):
    return er(c * c, x, axis=0) * x

def f_expand_keep(c, x):
    return er(c, x, axis=1, keepdims=True) * x

def f_expand_all(c, x):
    return er(c, x) * x

def f_transpose(c):
    return tg(c * c, (1, 2, 0))

def f_transpose_none(c):
    return tg(np.sin(c))

def f_safe_log(x):
    return sl(x) * x

def f_mga(c, a, b):
    return mga(c * c, a, b)

def f_mgb(c, a, b):
    return mgb(c * c, a, b)

def f_dga(c, a, b):
    return dga(c * c, a, b)

def f_dgb(c, a, b):
    return dgb(c * c, a, b)

def f_copies(x):
    return ca(x * 2.0) + cv(x * x) + sn(np.sin(x)) + nz(x * 3.0, x)

def f_add(x, y):
    return ad(x * y, np.sin(x))

def f_items(x, y):
    return ci(x * y, 1) * 2.0 + sa(x * x, 0, y[0] * 3.0)

def f_with(x, y):
    return wz(x * y, 1) + wi(x * x, 0, y[1] * 2.0)

def f_written(x, y):
    # y's cotangent as the value written at [2, 0, 2]: element 2 is written twice
    return wg(x * x, np.array([2, 0, 2]), y) * y + wi(x, np.array([1, 1]), y[:2] * 3.0)

def f_written_scalar(x, y):
    return wg(np.sin(x), np.array([0, 0, 1]), y) * y

def f_last_grad(x, y):
    grads = lg(x * y, [y, y * 2.0, x])
    return grads[2] * 3.0 + grads[0]

def f_log_softmax(x, w):
    return lsm(x * 1.5, 1) * w + lsm(np.sin(x), -1)

def f_softmax(x, w):
    return sm(x, 0) * w + sm(x * x, -1)

def f_logsumexp(x, w):
    return lse(x * 2.0, 1, False, True) * np.sum(w) + np.sum(lse(np.sin(x), 0, True, False))

def f_sigmoid(x, w):
    return sge(x * w, 1) * w + sgt(np.sin(x), 1.0) * 2.0 + sge(x, 1.0) * sgt(w, 1)

def f_lists(x, y):
    items = [x * 2.0, y]
    more = push(items, x * y)
    return last(more) * 3.0 + drop_last(more)[0] * drop_last(more)[1]
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("rt"), "s2s_runtime_rules", SOURCE)


# (function, argument shapes, positions differentiated, rules exercised)
CASES = [
    ("f_log_softmax", [(2, 3), (2, 3)], [0], ["_s2s_log_softmax"]),
    ("f_log_softmax", [(3, 4), (4,)], [0, 1], ["_s2s_log_softmax"]),
    ("f_softmax", [(2, 3), (2, 3)], [0], ["_s2s_softmax"]),
    ("f_softmax", [(3, 2), (2,)], [0, 1], ["_s2s_softmax"]),
    ("f_logsumexp", [(2, 3), (2,)], [0], ["_s2s_logsumexp"]),
    ("f_logsumexp", [(3, 4), (1,)], [0, 1], ["_s2s_logsumexp"]),
    ("f_sigmoid", [(2, 3), (3,)], [0, 1], ["_s2s_sigmoid_exp", "_s2s_sigmoid_tanh"]),
    ("f_sigmoid", [(4,), (4,)], [0, 1], ["_s2s_sigmoid_exp", "_s2s_sigmoid_tanh"]),
    ("f_unbroadcast", [(2, 3), (3,)], [0], ["_s2s_unbroadcast"]),
    ("f_unbroadcast", [(4, 1), (1, 1)], [0], ["_s2s_unbroadcast"]),
    ("f_unbroadcast_matmul", [(2, 4), (4, 3), (3,)], [0], ["_s2s_unbroadcast_matmul"]),
    ("f_unbroadcast_matmul", [(5, 2, 3), (2, 4), (4, 1)], [0], ["_s2s_unbroadcast_matmul"]),
    ("f_broadcast_like", [(3,), (2, 3)], [0, 1], ["_s2s_broadcast_like"]),
    ("f_broadcast_like", [(1, 1), (4, 1)], [0, 1], []),
    ("f_broadcast_like_items", [(3,), (3,), (2, 3)], [0, 1], []),
    ("f_expand_axis", [(3,), (2, 3)], [0, 1], ["_s2s_expand_reduced"]),
    ("f_expand_keep", [(2, 1), (2, 3)], [0, 1], ["_s2s_expand_reduced"]),
    ("f_expand_all", [(), (2, 2)], [0, 1], ["_s2s_expand_reduced"]),
    ("f_transpose", [(2, 3, 4)], [0], ["_s2s_transpose_grad"]),
    ("f_transpose_none", [(2, 3)], [0], ["_s2s_transpose_grad"]),
    ("f_safe_log", [("positive", (3,))], [0], ["_s2s_safe_log"]),
    ("f_safe_log", [("positive", (2, 2))], [0], ["_s2s_safe_log"]),
    ("f_mga", [(2, 4), (2, 3), (3, 4)], [0, 2], ["_s2s_matmul_grad_a"]),
    ("f_mga", [(4,), (3,), (3, 4)], [0, 2], ["_s2s_matmul_grad_a"]),
    ("f_mga", [(2,), (2, 3), (3,)], [0, 2], ["_s2s_matmul_grad_a"]),
    ("f_mgb", [(2, 4), (2, 3), (3, 4)], [0, 1], ["_s2s_matmul_grad_b"]),
    ("f_mgb", [(4,), (3,), (3, 4)], [0, 1], ["_s2s_matmul_grad_b"]),
    ("f_dga", [(2, 4), (2, 3), (3, 4)], [0, 2], ["_s2s_dot_grad_a"]),
    ("f_dga", [(), (3,), (3,)], [0, 2], ["_s2s_dot_grad_a"]),
    ("f_dgb", [(2, 4), (2, 3), (3, 4)], [0, 1], ["_s2s_dot_grad_b"]),
    ("f_dgb", [(2,), (2, 3), (3,)], [0, 1], ["_s2s_dot_grad_b"]),
    ("f_copies", [(3,)], [0], ["_s2s_copy_adjoint", "_s2s_copy_value", "_s2s_snapshot",
                               "_s2s_none_to_zero"]),
    ("f_copies", [(2, 2)], [0], []),
    ("f_add", [(3,), (3,)], [0, 1], ["_s2s_add"]),
    ("f_add", [(2, 3), (3,)], [0, 1], []),
    ("f_items", [(3,), (3,)], [0, 1], ["_s2s_copy_item", "_s2s_scatter_add"]),
    ("f_items", [(4,), (4,)], [0, 1], []),
    ("f_with", [(3,), (3,)], [0, 1], ["_s2s_with_zeroed", "_s2s_with_item"]),
    ("f_with", [(5,), (5,)], [0, 1], []),
    ("f_written", [(3,), (3,)], [0, 1], ["_s2s_written_grad"]),
    ("f_written_scalar", [(4,), ()], [0, 1], []),
    ("f_written_scalar", [(3,), ()], [0, 1], []),
    ("f_lists", [(3,), (3,)], [0, 1], ["_s2s_push", "_s2s_last", "_s2s_drop_last"]),
    ("f_last_grad", [(3,), (3,)], [0, 1], ["_s2s_last_grad"]),
    ("f_last_grad", [(2, 2), (2, 2)], [0, 1], []),
    ("f_lists", [(2, 2), (2, 2)], [0, 1], []),
    ("f_items_like", [(2, 3), (3,)], [0, 1], ["_s2s_items_like"]),
    ("f_items_like", [(2, 2), (2,)], [0, 1], []),
    ("f_items_joined", [(3,), (3,), (2, 3)], [0, 1, 2], ["_s2s_items_joined"]),
    ("f_loop_items_grad", [(3,), (3,)], [0, 1], ["_s2s_loop_items_grad"]),
    ("f_loop_items_grad", [(2, 3), (2, 3)], [0, 1], []),
    ("f_loop_items_tangent", [(3,), (3,)], [0, 1], ["_s2s_loop_items_tangent"]),
    ("f_loop_items_tangent", [(2, 3), (2, 3)], [0, 1], []),
    ("f_items_joined", [(), (), (2,)], [0, 1, 2], []),
    ("f_check_count", [(3,), (3,)], [0, 1], ["_s2s_check_count"]),
    ("f_check_count", [(2, 3), (3,)], [0, 1], []),
    ("f_as_returned", [(3,), (3,)], [0, 1], ["_s2s_as_returned"]),
    ("f_as_returned", [(2, 2), (2, 2)], [0, 1], []),
    ("f_item_updated", [(3,), (3,)], [0, 1], ["_s2s_item_updated"]),
    ("f_item_updated", [(2, 3), (2, 3)], [0, 1], []),
    ("f_item_updated", [(), ()], [0, 1], []),
    ("f_broadcast_tangent", [(3,), (2, 3)], [0, 1], ["_s2s_broadcast_tangent"]),
    ("f_broadcast_tangent", [(), (3,)], [0, 1], []),
    ("f_broadcast_tangent", [(2, 3), (2, 3)], [0, 1], []),
    ("f_dict_item_grad", [(3,), (3,)], [0, 1], ["_s2s_dict_item_grad"]),
    ("f_dict_item_grad", [(2, 2), (2, 2)], [0, 1], []),
    ("f_dict_item_transpose", [(3,), (3,)], [0, 1], ["_s2s_dict_item_transpose"]),
    ("f_dict_item_transpose", [(2, 3), (2, 3)], [0, 1], []),
    ("f_split_as_items", [(2, 3), (3,)], [0, 1], ["_s2s_split_as_items"]),
    ("f_split_as_items", [(2, 2, 2), (2, 2)], [0, 1], []),
    ("f_real_part", [(3,), (3,)], [0, 1], ["_s2s_real_part"]),
    ("f_real_part", [(2, 3), (3,)], [0, 1], []),
    ("f_as_array", [(3,)], [0], ["_s2s_as_array"]),
    ("f_as_array", [(2, 3)], [0], []),
    ("f_cast_into", [(3,), (3,)], [0, 1], ["_s2s_cast_into"]),
    ("f_cast_into", [(2, 3), (3,)], [0, 1], []),
    ("f_swap_last_axes", [(2, 3)], [0], ["_s2s_swap_last_axes"]),
    ("f_swap_last_axes", [(4, 2, 3)], [0], []),
    ("f_sum_to_shape", [(2, 3), (3,)], [0, 1], ["_s2s_sum_to_shape"]),
    ("f_sum_to_shape", [(4, 3), (1, 3)], [0, 1], []),
    ("f_sum_to_shape", [(3,), (2, 3)], [0, 1], []),
]


def _draw(spec, rng):
    if isinstance(spec, tuple) and spec and spec[0] == "positive":
        return rng.uniform(0.5, 2.0, spec[1])
    return rng.standard_normal(spec) if spec else float(rng.standard_normal())


@pytest.mark.parametrize("fname, shapes, wrt, rules", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_runtime_rule_matches_finite_differences(m, fname, shapes, wrt, rules, rng):
    args = [_draw(s, rng) for s in shapes]
    check_vjp(getattr(m, fname), args, wrt=wrt)


def test_every_runtime_rule_is_tested():
    tested = {r for case in CASES for r in case[3]}
    # The rules of numpy_grads' helpers are tested in test_second_order_rules.py.
    names = {r.name for r in all_rules() if r.name.startswith("_s2s_")
             and r.func.__module__ != "s2sgrad.runtime.numpy_grads"}
    assert names <= tested, sorted(names - tested)
