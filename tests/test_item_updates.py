"""`L[i] += v` and `d[k] *= v` on a list's or dict's item, and a loop's variable read
after a loop with nothing in its body.

Python updates the array an item holds in place (`L[0].__iadd__(v)`, then stores
it back): where another variable or item holds that array too, it changes with
it. The normal form assigns a new array (`L[0] = t + v`), which is the same only
where nothing else holds the old one. Found by probing: `d = {"w": x}; d["w"] +=
1.0` and `L = [x, x]; L[0] += 1.0` gave wrong gradients, silently with the
witness off. Now a variable that holds the item's array and is read later (a
parameter always: the caller reads it) is refused at compile time, and another
item of the same container holding it at run time; the common case (items of
their own) compiles as before.

And `for i in range(3): pass` followed by a read of `i`: the optimiser removed the
empty loop, so `i` stayed None (a TypeError at run time).
"""
import numpy as np
import pytest
from conftest import assert_grads_match_differences, import_source, numeric_grad

import s2sgrad

SOURCE = '''
import numpy as np


def own_items(x, w):
    L = [x * 1.0, x * w]
    for i in range(2):
        L[i] += np.sin(x) * (i + 1)
    L[0] *= 0.5 * w
    return np.sum(L[0] * L[1])


def dict_items(x, w):
    d = {"w": x * 1.0, "b": 0.5, "s": w * 2.0}
    d["b"] += np.sum(x)
    d["w"] -= 0.1 * w
    d["s"] *= np.tanh(w)
    return np.sum(d["w"] * d["s"]) * d["b"]


def dict_holds_parameter(x, w):
    d = {"w": x}
    d["w"] += w
    return np.sum(d["w"] * x)


def list_holds_one_array_twice(x, w):
    L = [x, x]
    L[0] += w
    return np.sum(L[1] * x)


def item_held_by_a_variable(x, w):
    a = x * 1.0
    L = [a, x * 2.0]
    L[0] += w
    return np.sum(a * x) + np.sum(L[0])


def item_appended_again(x, w):
    L = [x * 1.0, x * w]
    L.append(L[0])
    L[0] += w
    return np.sum(L[2] * x)


def item_grows(x, w):
    L = [w * 1.0]
    L[0] += x   # (x of more rows than w: NumPy refuses to update w's array in place)
    return np.sum(L[0])


def item_of_single_precision(x, w):
    L = [np.ones(x.shape, dtype=np.float32)]
    L[0] += x / 3.0   # (the item stays float32, as in place)
    return np.sum(L[0] * x)


def counter_beside_a_parameter(x, w):
    state = {"h": x, "n": 0, "scale": 0.5}
    for _ in range(2):
        state["h"] = np.sin(state["h"]) + w
        state["n"] += 1
        state["scale"] *= 1.5
    return np.sum(state["h"] * x) * state["n"] * state["scale"]


def number_beside_an_array(x, w):
    L = [x, np.float64(0.5), 2]
    L[1] += np.sum(w)
    L[2] *= 3
    return np.sum(L[0] * L[1]) * L[2]


def loop_for_its_variable(x, w):
    for i in range(3):
        pass
    for row in np.atleast_2d(w):
        pass
    return np.sum(x * i) + np.sum(row * x)
'''

SHAPES = [((3,), (3,)), ((2, 3), (3,))]   # (one broadcasting: w against rows of x)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("item_updates"), "item_updates", SOURCE)


def _args(shapes):
    rng = np.random.default_rng(11)
    return [rng.uniform(0.2, 1.1, s) for s in shapes]


@pytest.mark.parametrize("optimize", [True, False], ids=["optimised", "plain"])
@pytest.mark.parametrize("witness", [True, False], ids=["witness", "no_witness"])
@pytest.mark.parametrize("shapes", SHAPES, ids=["same", "broadcast"])
@pytest.mark.parametrize("name", ["own_items", "dict_items", "loop_for_its_variable",
                                  "counter_beside_a_parameter", "number_beside_an_array"])
def test_updates_of_items_of_their_own_match_differences(mod, name, shapes, witness,
                                                          optimize):
    assert_grads_match_differences(getattr(mod, name), _args(shapes), (0, 1),
                                   witness=witness, optimize=optimize)


@pytest.mark.parametrize("witness", [True, False], ids=["witness", "no_witness"])
@pytest.mark.parametrize("name, says", [
    ("dict_holds_parameter", "in-place update of an item of 'd' also changes 'x'"),
    ("list_holds_one_array_twice", "in-place update of an item of 'L' also changes 'x'"),
    ("item_held_by_a_variable", "in-place update of an item of 'L' also changes 'a' (line"),
    ("item_appended_again", "also changes another of its items, which holds the same array"),
])
def test_an_item_another_name_holds_is_refused_at_its_line(mod, name, says, witness):
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(getattr(mod, name), wrt=(0, 1), witness=witness)(*_args(SHAPES[0]))
    text = str(info.value)
    assert says in text
    assert "item_updates.py:" in text and "^" in text and "+= w" in text


def test_an_update_that_numpy_refuses_in_place_is_refused_the_same_way(mod):
    x, w = _args(SHAPES[1])
    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        mod.item_grows(x, w)
    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        s2sgrad.grad(mod.item_grows, wrt=(0, 1), witness=False)(x, w)


def test_an_item_keeps_its_dtype_as_an_update_in_place_does(mod):
    x, w = _args(SHAPES[0])
    value, grads = s2sgrad.value_and_grad(mod.item_of_single_precision, wrt=(0,),
                                          witness=False)(x, w)
    assert value == mod.item_of_single_precision(x, w)   # (float32 rounding, bit for bit)
    # (differences of a float32 value are noise at any step: d/dx of (1 + x/3) * x)
    np.testing.assert_allclose(grads[0], 1.0 + 2.0 * x / 3.0, rtol=1e-6)


@pytest.mark.parametrize("shapes", SHAPES, ids=["same", "broadcast"])
def test_forward_mode_and_second_order_through_item_updates(mod, shapes):
    x, w = _args(shapes)
    v = np.random.default_rng(3).standard_normal(x.shape)
    f = mod.own_items
    _, tangent = s2sgrad.functional.jvp(lambda a: f(a, w), x, v)
    np.testing.assert_allclose(tangent, np.sum(numeric_grad(f, [x, w], 0) * v),
                               rtol=1e-6, atol=1e-8)
    _, hv = s2sgrad.functional.hvp(lambda a: f(a, w), x, v)
    g = s2sgrad.grad(f)
    eps = 1e-5
    np.testing.assert_allclose(hv, (g(x + eps * v, w) - g(x - eps * v, w)) / (2 * eps),
                               rtol=1e-6, atol=1e-7)
