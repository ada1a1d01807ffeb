"""A list a loop walks, changed later or while it is walked.

`for t in xs` over a list a comprehension built walks `_s2s_loop_items(xs)`, which
the compiler takes to be a copy: an append after the loop (`xs.append(x)`) must not
change what the adjoint reads of the items the loop walked. It once did (the runtime
returned xs itself): the gradient came out zero, or a quarter of itself, without a
word. A loop whose body makes the list it walks longer or shorter is refused at the
write: Python's loop walks the list as it changes, the differentiated one the items
it had when it started. Gradients against central differences on two shapes (items
broadcast against x in the second).
"""
import numpy as np
import pytest
from conftest import check_vjp

import s2sgrad
from s2sgrad.runtime import loop_items

MODULE = '''
import numpy as np


def summed_then_appended(x, P):
    L = [p * np.tanh(x) for p in P]
    s = 0.0
    for t in L:
        s = s + t
    L.append(x)
    return np.sum(np.tanh(s)) + np.sum(L[-1] ** 2)


def mapped_then_extended(x, P):
    L = [p * np.tanh(x) for p in P]
    M = [t * 2.0 for t in L]
    L.extend([x, x * 3.0])
    return np.sum(np.tanh(M[0])) + np.sum(np.sin(L[3]))


def written_after(x, P):
    L = [p * np.tanh(x) for p in P]
    s = 0.0
    for t in L:
        s = s + t * t
    L[0] = x
    return np.sum(np.tanh(s)) + np.sum(L[0])


def indices_grown_while_walked(x, P):
    idx = [0, 1]
    s = 0.0
    for i in idx:
        if len(idx) < 4:
            idx.append(i + 1)
        s = s + x[..., i] * P[0][i]
    return np.sum(np.tanh(s))


def grown_while_walked(x, P):
    L = []
    for p in P:
        L.append(p * x)
    s = 0.0
    for t in L:
        if len(L) < 4:
            L.append(t * 0.5)
        s = s + t
    return np.sum(np.tanh(s))


def grown_through_another_name(x, P):
    L = [P[0] * x, P[1] * x]
    M = L
    s = 0.0
    for t in L:
        s = s + t
        if len(M) < 3:
            M.append(x * 0.5)
    return np.sum(np.tanh(s))


def copy_grown_while_walked(x, P):
    L = [p * np.tanh(x) for p in P]
    s = 0.0
    for t in L:
        s = s + t
        if len(L) < 3:
            L.insert(0, x)
    return np.sum(np.tanh(s))


PP = [np.ones(3), np.ones(3) * 3.0]


def summed_then_appended_of_x(x):
    return summed_then_appended(x, PP)


def indices_grown_while_walked_of_x(x):
    return indices_grown_while_walked(x, PP)


def grown_while_walked_of_x(x):
    return grown_while_walked(x, PP)


def grown_through_another_name_of_x(x):
    return grown_through_another_name(x, PP)
'''

SHAPES = [((3,), (3,)), ((2, 3), (3,))]   # (x's shape, each item's of P)
SOUND = ["summed_then_appended", "mapped_then_extended", "written_after",
         "indices_grown_while_walked"]
REFUSED = {"grown_while_walked": "L.append(t * 0.5)",
           "grown_through_another_name": "M.append(x * 0.5)",
           "copy_grown_while_walked": "L.insert(0, x)"}


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    from conftest import import_source
    return import_source(tmp_path_factory.mktemp("walked"), "s2s_walked_lists", MODULE)


def _args(shapes, rng):
    xshape, pshape = shapes
    return [rng.standard_normal(xshape), [rng.standard_normal(pshape) for _ in range(2)]]


@pytest.mark.parametrize("shapes", SHAPES, ids=["same", "broadcast"])
@pytest.mark.parametrize("name", SOUND)
def test_gradient_matches_differences(m, name, shapes):
    rng = np.random.default_rng(len(name))
    check_vjp(getattr(m, name), _args(shapes, rng), wrt=(0, 1), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", SOUND[:2])
def test_the_witness_off_gives_the_same_gradient(m, name, monkeypatch):
    """(The wrong gradient was a silent one where the witness was off.)"""
    rng = np.random.default_rng(1)
    x, P = _args(SHAPES[1], rng)
    on = s2sgrad.grad(getattr(m, name), wrt=0)(x, P)
    off = s2sgrad.grad(getattr(m, name), wrt=0, witness=False)(x, P)
    np.testing.assert_array_equal(on, off)
    assert np.any(off != 0.0)


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_list_resized_while_a_loop_walks_it_is_refused_at_the_write(m, name):
    rng = np.random.default_rng(2)
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(getattr(m, name), wrt=0)(*_args(SHAPES[0], rng))
    text = str(info.value)
    assert REFUSED[name] in text and "^" in text, text
    if name != "copy_grown_while_walked":   # (that one: the alias check's, about t)
        assert "longer or shorter" in text, text


def test_loop_items_copies_a_list_and_passes_arrays_and_tuples():
    xs = [np.ones(2), np.zeros(2)]
    walked = loop_items(xs)
    assert walked == xs and walked is not xs
    xs.append(np.ones(2))
    assert len(walked) == 2
    a, t = np.ones((2, 3)), (1.0, 2.0)
    assert loop_items(a) is a and loop_items(t) is t
    assert loop_items({"a": 1, "b": 2}) == ["a", "b"]


@pytest.mark.parametrize("name", ["summed_then_appended", "indices_grown_while_walked"])
def test_forward_mode_matches_differences(m, name):
    from conftest import check_jvp
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3))
    check_jvp(getattr(m, name + "_of_x"), [x], [rng.standard_normal(x.shape)])


@pytest.mark.parametrize("name", ["grown_while_walked", "grown_through_another_name"])
def test_forward_mode_refuses_a_list_resized_while_walked(m, name):
    from s2sgrad import functional
    x = np.random.default_rng(4).standard_normal(3)
    with pytest.raises(s2sgrad.TransformError, match="longer or shorter"):
        functional.jvp(getattr(m, name + "_of_x"), x, np.ones_like(x))
