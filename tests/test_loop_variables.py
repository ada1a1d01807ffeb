"""A loop whose body rebinds the loop's own variable.

`for i in range(3): i = 2 - i; s = s + x[i]` reads the rebound `i` for the rest of
the body. The adjoint sets each range loop's variable from the range again, so it
read the range's value where the body read the rebound one: silently wrong
gradients with the witness off (x's gradient reversed). Only a loop nested inside
with the same variable was separated; a rebinding by assignment, by `+=`, or by
an inner loop over a list's items that a pass unrolls into `i = 0; ...; i = 1`
(found by the fuzzer, seed 14010) was not. Now any loop whose body rebinds its
variable gets one of its own, and the user's name is an ordinary variable.
"""
import numpy as np
import pytest
from conftest import assert_grads_match_differences, import_source, leaf_differences, numeric_grad

import s2sgrad

SOURCE = '''
import numpy as np


def reversed_index(x, w):
    s = 0.0
    for i in range(3):
        i = 2 - i
        s = s + np.sum(x[i] * w) * (i + 1.0)
    return s


def shifted_by_augmented(x, w):
    s = 0.0
    for i in range(3):
        s = s + np.sum(x[i] ** 2 * w)
        i += 1
        s = s * np.sum(x[i % 3] * w)
    return s


def reset_in_a_branch(x, w):
    s = 0.0
    for i in range(1, 4):
        if i == 2:
            i = 0
        s = s + np.sum(np.tanh(x[i % 3] * w)) * i
    return s


def enumerate_counter_rebound(x, w):
    s = 0.0
    for k, row in enumerate(x):
        k = (k + 1) % 3
        s = s + np.sum(row * x[k] * w)
    return s


def array_item_rebound(x, w):
    s = 0.0
    for row in x:
        row = np.tanh(row * w)
        s = s + np.sum(row ** 2)
    return s


def inner_loop_over_a_list(x, w):
    Q = [x[0] * w, x[1] + w]
    s = 0.0
    for i in range(2):
        for i in range(2):
            t = Q[i]
        s = s + np.sum(np.sin(Q[i]) * t)
    return s
'''

NAMES = ["reversed_index", "shifted_by_augmented", "reset_in_a_branch",
         "enumerate_counter_rebound", "array_item_rebound", "inner_loop_over_a_list"]
SHAPES = [((3, 2), (2,)), ((3, 4, 2), (1, 2))]   # (the second broadcasting: w against rows)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("loop_variables"), "loop_variables", SOURCE)


def _args(shapes):
    rng = np.random.default_rng(21)
    return [rng.uniform(0.2, 1.1, s) for s in shapes]


@pytest.mark.parametrize("optimize", [True, False], ids=["optimised", "plain"])
@pytest.mark.parametrize("witness", [True, False], ids=["witness", "no_witness"])
@pytest.mark.parametrize("shapes", SHAPES, ids=["same", "broadcast"])
@pytest.mark.parametrize("name", NAMES)
def test_a_rebound_loop_variable_matches_differences(mod, name, shapes, witness, optimize):
    assert_grads_match_differences(getattr(mod, name), _args(shapes), (0, 1),
                                   witness=witness, optimize=optimize)


STRUCTURED = '''
import numpy as np


def rebound_over_list_items(Q, w):
    s = 0.0
    for i in range(2):
        acc = 0.0
        for i in range(2):
            acc = 0.5 * acc + np.sum(Q[i][0] * w)
        s = s + np.tanh(np.sum(Q[i][0]) * acc)
    return s
'''


@pytest.mark.parametrize("witness", [True, False], ids=["witness", "no_witness"])
@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_loop_over_a_structured_parameter_inside_one_over_the_same_name(
        tmp_path, shape, witness):
    """The fuzzer's program reduced: the inner loop indexes a list parameter, so it
    is unrolled (`i = 0; ...; i = 1; ...`) before the outer loop is normalised."""
    f = import_source(tmp_path, "structured_loops", STRUCTURED).rebound_over_list_items
    rng = np.random.default_rng(4)
    Q = [[rng.uniform(0.2, 1.0, shape)] for _ in range(2)]
    w = rng.uniform(0.2, 1.0, shape[-1:])
    grads = s2sgrad.grad(f, wrt=(0, 1), witness=witness)(Q, w)
    for k in range(2):
        np.testing.assert_allclose(grads[0][k][0], leaf_differences(f, (Q, w), Q[k][0]),
                                   rtol=1e-6, atol=1e-8, err_msg=f"Q[{k}][0]")
    np.testing.assert_allclose(grads[1], numeric_grad(f, [Q, w], 1), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shapes", SHAPES, ids=["same", "broadcast"])
def test_forward_mode_through_a_rebound_loop_variable(mod, shapes):
    x, w = _args(shapes)
    v = np.random.default_rng(3).standard_normal(x.shape)
    f = mod.reversed_index
    _, tangent = s2sgrad.functional.jvp(lambda a: f(a, w), x, v)
    np.testing.assert_allclose(tangent, np.sum(numeric_grad(f, [x, w], 0) * v),
                               rtol=1e-6, atol=1e-8)
