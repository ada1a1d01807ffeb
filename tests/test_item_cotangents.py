"""Cotangents of unpacked lists and tuples folded into one call (optimize/items.py,
runtime items_cotangent): the same values as zeros_like and add_at, and the
gradients of code unpacking nested parameters against differences."""
import ast

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad.compiler.optimize.items import collect_item_cotangents
from s2sgrad.runtime import add_at, add_items, items_cotangent, zeros_like
from s2sgrad.runtime.numpy_grads import concatenate_grad
from s2sgrad.runtime.shapes import zero_cotangent_item


def _fold(text, leaves=()):
    body = collect_item_cotangents(ast.parse(text).body, set(leaves))
    return ast.unparse(ast.fix_missing_locations(ast.Module(body, [])))


def test_a_run_of_adds_becomes_one_call_where_the_last_add_was():
    text = ("p_bar = _s2s_zeros_like(p)\n_s2s_add_at(p_bar, 1, b_bar)\nx = y + 1\n"
            "_s2s_add_at(p_bar, 0, W_bar)\nz = p_bar\n")
    assert _fold(text) == ("x = y + 1\np_bar = _s2s_items_cotangent(p, (1, b_bar), (0, W_bar))\n"
                           "z = p_bar")


@pytest.mark.parametrize("between", [
    "q = p_bar",              # the cotangent read: the adds so far come first
    "b_bar = 2.0 * w",        # an added value rebound
    "b_bar += 1.0",           # ... or updated in place
    "p = restore()",          # the container rebound
    "if c:\n    pass",        # a branch: no fold across it
])
def test_a_run_stops_before_a_statement_it_may_not_move_past(between):
    text = (f"p_bar = _s2s_zeros_like(p)\n_s2s_add_at(p_bar, 1, b_bar)\n{between}\n"
            f"_s2s_add_at(p_bar, 0, W_bar)\n")
    folded = _fold(text)
    assert folded.index("_s2s_items_cotangent(p, (1, b_bar))") < folded.index(between[:6])
    assert "_s2s_add_at(p_bar, 0, W_bar)" in folded


def test_arrays_and_other_indices_are_left_alone():
    assert "_s2s_add_at" in _fold("a_bar = _s2s_zeros_like(a)\n_s2s_add_at(a_bar, 0, v)\n",
                                  leaves=["a"])
    text = "p_bar = _s2s_zeros_like(p)\n_s2s_add_at(p_bar, i, v)\n"
    assert _fold(text) == text.strip()


def test_a_cotangent_added_into_another_is_complete_first():
    text = ("B1 = _s2s_zeros_like(X1)\n_s2s_add_at(B1, 0, v)\nB2 = _s2s_zeros_like(X2)\n"
            "_s2s_add_at(B2, 0, B1)\n_s2s_add_at(B1, 1, w)\n")
    folded = _fold(text).splitlines()
    assert folded == ["B1 = _s2s_items_cotangent(X1, (0, v))",
                      "B2 = _s2s_items_cotangent(X2, (0, B1))", "_s2s_add_at(B1, 1, w)"]


def _plain(x, *pairs):
    out = zeros_like(x)
    for k, v in pairs:
        add_at(out, k, v)
    return out


def _same(a, b):
    assert type(a) is type(b)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for p, q in zip(a, b):
            _same(p, q)
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", range(10))
def test_items_cotangent_is_zeros_then_adds(case):
    rng = np.random.default_rng(case)
    W, b = rng.standard_normal((3, 2)), rng.standard_normal(3)
    x = [(W, b), (W, b)]
    cases = [
        ((W, b), (0, W * 2), (1, b + 1)),                        # every item once
        ((W, b), (1, b + 1)),                                     # one item of two
        ((W, b), (-1, b + 1), (0, W)),                            # a negative index
        ((W, b), (0, W), (0, W * 3)),                             # an item twice
        (x, (1, [W, b]), (0, [W * 0.5, b])),                      # nested lists
        ((W, b), (0, 2.0), (1, b)),                               # a number into an array item
        ([1.0, b], (0, 0.5), (1, np.ones((2, 3)))),               # a broadcast cotangent
        (x, (1, [W, np.ones((2, 3))]), (0, [W, b])),              # a broadcast leaf, nested
        (x, (1, [W, 2.0]), (0, [W, b])),                          # a number leaf, nested
        ([(W, [b, b])], (0, [W, [b, b * 2]])),                    # two levels of nesting
    ]
    x, *pairs = cases[case]
    _same(items_cotangent(x, *pairs), _plain(x, *pairs))


NESTED = '''
import numpy as np


def cell(params, h):
    (W, b), (V, c) = params
    return np.tanh(W @ h + b) * np.sin(V @ h + c)


def loss(params, hs):
    total = 0.0
    for h in hs:
        total = total + np.sum(cell(params, h) ** 2)
    return total
'''


@pytest.mark.parametrize("n, m", [(3, 2), (1, 4)])
def test_gradient_of_nested_unpacked_parameters(make_module, n, m):
    module = make_module(NESTED)
    rng = np.random.default_rng(n)
    params = [(rng.standard_normal((n, m)), rng.standard_normal(n)),
              (rng.standard_normal((n, m)), rng.standard_normal(1))]   # c broadcasts
    hs = rng.standard_normal((3, m))
    got = s2sgrad.grad(module.loss)(params, hs)
    flat = [params[0][0], params[0][1], params[1][0], params[1][1]]

    def of_flat(*items):
        return module.loss([(items[0], items[1]), (items[2], items[3])], hs)
    for k, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        np.testing.assert_allclose(got[i][j], numeric_grad(of_flat, flat, k),
                                   rtol=1e-6, atol=1e-8)


STRUCTURED = '''
import numpy as np


def loss(params, X):
    h = X
    for W, b in params[:-1]:
        h = np.tanh(h @ W + b)
    W, b = params[-1]
    return np.sum((h @ W + b) ** 2)
'''


def _structured_params(rng):
    """STRUCTURED's parameters: two layers, (W, b) each."""
    return [(rng.standard_normal((3, 4)), rng.standard_normal(4)),
            (rng.standard_normal((4, 2)), rng.standard_normal(2))]


def test_jit_spells_the_fold_out_for_numba(make_module):
    # numba has zeros_like and add_at, not items_cotangent: jit=True must not fall
    # back to NumPy because of the fold (it spells it out again), and agree with it.
    # (Arrays of 10,000 elements and more: numba runs the loops, NumPy the rest.)
    pytest.importorskip("numba")
    import warnings

    from s2sgrad.backends import JitWarning, numba_backend
    module = make_module(STRUCTURED)
    rng = np.random.default_rng(3)
    params = _structured_params(rng)
    X = rng.standard_normal((4000, 3))
    numba_backend.reset()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", JitWarning)
            got = s2sgrad.grad(module.loss, jit=True)(params, X)
    finally:
        numba_backend.reset()
    want = s2sgrad.grad(module.loss)(params, X)
    for g_pair, w_pair in zip(got, want):
        for g, w in zip(g_pair, w_pair):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_jits_first_structured_call_is_witnessed_once(make_module, monkeypatch):
    # The first call given lists of tuples runs the NumPy backend (witnessed) and
    # jit=True's own pair, and compares the two results: that pair's run needs no
    # witness of its own (it was a second forward-mode run, the first call's largest
    # cost after the compiles). Both are right, and a wrong pair would still be caught
    # by the comparison.
    pytest.importorskip("numba")
    from s2sgrad import witness
    from s2sgrad.backends import numba_backend
    module = make_module(STRUCTURED)
    rng = np.random.default_rng(4)
    params = _structured_params(rng)
    X = rng.standard_normal((6, 3))
    runs = []
    real = witness._value_and_tangent
    monkeypatch.setattr(witness, "_value_and_tangent",
                        lambda *a, **k: runs.append(1) or real(*a, **k))
    numba_backend.reset()
    try:
        got = s2sgrad.grad(module.loss, jit=True, witness="first")(params, X)
    finally:
        numba_backend.reset()
    assert len(runs) == 1
    want = s2sgrad.grad(module.loss, witness=False)(params, X)
    for g_pair, w_pair in zip(got, want):
        for g, w in zip(g_pair, w_pair):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def _added(a, b):
    """add_items' meaning: leaf by leaf, NumPy's broadcasting sum."""
    if isinstance(a, (list, tuple)):
        return [_added(p, q) for p, q in zip(a, b)]
    return a + b


@pytest.mark.parametrize("case", range(5))
def test_adding_lists_of_pairs_is_leaf_by_leaf(case):
    """add_items on lists of (W, b) cotangents: arrays of one shape added in the list's
    own loop, anything else (a zero item, a broadcast leaf, a number) through add_items."""
    rng = np.random.default_rng(case)
    W, b = rng.standard_normal((3, 2)), rng.standard_normal(3)
    zero_W = zero_cotangent_item(W)
    cases = [
        ([[W, b], [W * 2, b]], [[W, b * 3], [W, b]]),
        ([[W, b]], [[np.ones(2), b]]),                 # a leaf that broadcasts
        ([[W, 1.5]], [[W, b]]),                        # a number leaf
        ([[zero_W, b]], [[W * 2, b]]),                 # a zero item: the other as it is
        ([[W, b]], [[zero_W, b]]),
    ]
    total, contribution = cases[case]
    expected = _added([[np.asarray(x) for x in t] for t in total], contribution)
    before = [[np.array(x) for x in t] for t in total]
    _same(add_items(total, contribution), expected)
    for t, kept in zip(total, before):   # (nothing added in place into the total)
        for x, y in zip(t, kept):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("shapes, axis", [
    (((3,), (2,)), 0), (((2, 4), (1, 4), (3, 4)), 0), (((2, 3), (2, 1)), 1),
    (((0,), (3,)), 0), (((2, 3), (2, 3)), -2)])
def test_concatenate_grad_pieces_are_the_items_shapes(shapes, axis):
    """concatenate_grad's cut of g (the slices it takes for 1-D and axis-0 items, the
    general split otherwise) against np.split at the items' offsets."""
    rng = np.random.default_rng(len(shapes))
    items = [rng.standard_normal(s) for s in shapes]
    g = rng.standard_normal(np.concatenate(items, axis=axis).shape)
    offsets = np.cumsum([x.shape[axis] for x in items])[:-1]
    got = concatenate_grad(g, items, axis)
    assert len(got) == len(items)
    for piece, want, x in zip(got, np.split(g, offsets, axis=axis), items):
        assert piece.shape == x.shape
        np.testing.assert_array_equal(piece, want)
    lists = concatenate_grad(g, [x.tolist() for x in items], axis)   # (the general path)
    for piece, want in zip(lists, got):
        np.testing.assert_array_equal(piece, want)
