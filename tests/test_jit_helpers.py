"""jit=True with the user's helpers that nothing differentiates (`w = weight(k)` in a
loop, constant weights from a Python helper): each runs its own pair's forward,
compiled by numba, where it ran the NumPy backend (a Python function numba cannot
type) before. The pair reads the helper's globals at every call, as the NumPy
backend does. Gradients are checked against the NumPy backend and central
differences on two sizes, in both background modes.
"""
import sys
import warnings

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad.backends import JitWarning, jit_plan, jit_wait, numba_backend

RATE = 0.5
TABLE = np.array([1.0, 2.0, 3.0])


def weight(k):
    return RATE * k + TABLE[k % 3]


def decay_weights(n, rate):
    return np.array([rate ** i for i in range(n)])


def weighted(x, n):
    s = 0.0
    w = decay_weights(n, 0.9)
    for k in range(n):
        s = s + weight(k) * np.sum(np.sin(x * k)) * w[k]
    return s


def flipped(n):
    """A helper numba has no version of (np.flip with an axis)."""
    return np.flip(np.ones((1, n)), axis=1)[0]


def uses_flipped(x, n):
    s = 0.0
    for k in range(n):
        s = s + np.sum(np.tanh(x * k) * flipped(x.shape[0]))
    return s


def guarded(k):
    """A helper s2sgrad does not compile (try/except): the user's Python runs it."""
    try:
        return 0.5 * k
    except ValueError:
        return 0.0


def uses_guarded(x, n):
    s = 0.0
    for k in range(n):
        s = s + guarded(k) * np.sum(np.sin(x * k))
    return s


@pytest.fixture(autouse=True)
def _fresh():
    numba_backend.reset()
    yield
    numba_backend.reset()


def _jit_grad(f, args):
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        for _ in range(2):   # (in the background mode: NumPy first, then numba)
            s2sgrad.grad(f, jit=True)(*args)
            jit_wait(f)
        return s2sgrad.grad(f, jit=True)(*args)


@pytest.mark.parametrize("background", ["0", "1"])
@pytest.mark.parametrize("n", [3, 7])
def test_undifferentiated_helpers_in_a_loop_run_on_numba(monkeypatch, background, n):
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", background)
    x = np.random.default_rng(n).uniform(-1, 1, n)
    got = _jit_grad(weighted, (x, 12))
    np.testing.assert_allclose(got, s2sgrad.grad(weighted)(x, 12), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, numeric_grad(weighted, [x, 12], 0), rtol=1e-6, atol=1e-7)
    state = numba_backend.known_state(weighted, (0,))
    assert all(v.failed is None for v in state.variants.values())
    assert any(v.check is None for v in state.variants.values())   # numba's code ran
    assert jit_plan(weighted, x, 12).compile


def test_a_helpers_globals_are_read_at_every_call(monkeypatch):
    global TABLE
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "0")
    x = np.array([0.3, -0.2, 0.5])
    _jit_grad(weighted, (x, 9))
    monkeypatch.setattr(sys.modules[__name__], "RATE", 2.0)
    monkeypatch.setattr(sys.modules[__name__], "TABLE", TABLE.copy())
    TABLE[1] = 10.0   # (a module-level copy, changed in place)
    got = s2sgrad.grad(weighted, jit=True)(x, 9)
    np.testing.assert_allclose(got, s2sgrad.grad(weighted)(x, 9), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, numeric_grad(weighted, [x, 9], 0), rtol=1e-6, atol=1e-7)


def test_a_helper_numba_cannot_compile_still_falls_back_with_its_reason(monkeypatch):
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "0")
    x = np.array([0.3, -0.2, 0.5])
    with pytest.warns(JitWarning, match="flip"):
        got = s2sgrad.grad(uses_flipped, jit=True)(x, 4)
    np.testing.assert_allclose(got, numeric_grad(uses_flipped, [x, 4], 0), rtol=1e-6,
                               atol=1e-7)


def test_a_helper_s2sgrad_does_not_compile_leaves_the_call_to_numpy(monkeypatch):
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "0")
    x = np.array([0.3, -0.2, 0.5, 0.1])
    with pytest.warns(JitWarning, match="guarded, is not compiled"):
        got = s2sgrad.grad(uses_guarded, jit=True)(x, 5)
    np.testing.assert_allclose(got, numeric_grad(uses_guarded, [x, 5], 0), rtol=1e-6,
                               atol=1e-7)


def halved(v, fn=np.sin):
    return fn(v) * 0.5


def uses_halved(x, y):
    return np.sum(np.tanh(x) * y) + 0.3 * np.sum(halved(x))   # (y's gradient: halved
    # is called on what nothing differentiates)


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_helper_with_a_function_default_falls_back_with_its_reason(monkeypatch, shape):
    """numba takes no function as a parameter's value (the fuzzer found a NameError of
    the default's binding inside the rewrite, reported as an internal error)."""
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "0")
    rng = np.random.default_rng(len(shape))
    x, y = rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape[-1:])
    with pytest.warns(JitWarning, match="halved, has a function as a default"):
        got = s2sgrad.grad(uses_halved, wrt=1, jit=True)(x, y)
    np.testing.assert_allclose(got, numeric_grad(uses_halved, [x, y], 1), rtol=1e-6,
                               atol=1e-7)


def rows_by_order(x, order):
    out = np.zeros((order.shape[0], x.shape[0]))
    h = x
    for i in range(order.shape[0]):
        h = np.tanh(h * 0.9 + 0.1)
        k = order[i]          # (not proven an int: the write's cotangent is written_grad's)
        out[k] = h * 2.0
    return np.sum(out ** 2)


@pytest.mark.parametrize("order", [[2, 0, 1, 2, 3], [1, 0]])
def test_a_write_at_an_index_read_from_an_array_runs_on_numba(monkeypatch, order):
    """`_s2s_written_grad` has a numba version for indices of integer type (numba's
    typing of the index decides; an index array stays with NumPy)."""
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "0")
    x = np.random.default_rng(len(order)).uniform(-1, 1, len(order))
    order = np.array(order)
    got = _jit_grad(rows_by_order, (x, order))
    np.testing.assert_allclose(got, s2sgrad.grad(rows_by_order)(x, order), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(got, numeric_grad(rows_by_order, [x, order], 0), rtol=1e-6,
                               atol=1e-7)
    state = numba_backend.known_state(rows_by_order, (0,))
    assert all(v.failed is None for v in state.variants.values())
    assert "_s2s_written_grad" in s2sgrad.source(rows_by_order)


def over_ndindex(x, w):
    s = 0.0
    for idx in np.ndindex(*x.shape[:1]):   # (rows: a tuple of one index)
        s = s + np.sum(np.tanh(x[idx] * w) * x[idx])
    return s


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_a_loop_over_np_ndindex_runs_on_numba(monkeypatch, shape):
    """`for idx in np.ndindex(...)` walks its iterator into a list (loop_items), in
    numba's code too (a typing error and a fall-back before)."""
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "0")
    x = np.random.default_rng(len(shape)).uniform(-1, 1, shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        got = s2sgrad.grad(over_ndindex, wrt=(0, 1), jit=True)(x, 0.7)
    want = s2sgrad.grad(over_ndindex, wrt=(0, 1))(x, 0.7)
    for i, g, w in zip((0, 1), got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g, numeric_grad(over_ndindex, [x, 0.7], i), rtol=1e-6,
                                   atol=1e-8)
    state = numba_backend.known_state(over_ndindex, (0, 1))   # compiled whole
    assert [v.failed for v in state.variants.values()] == [None]
    assert all(v.check is None for v in state.variants.values())


class Twice(s2sgrad.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return np.tanh(b) * b, 1.3 * np.cos(a)

    @staticmethod
    def vjp(ctx, g0, g1):
        a, b = ctx.saved_tensors
        return -1.3 * np.sin(a) * g1, g0 * ((1.0 - np.tanh(b) ** 2) * b + np.tanh(b))


def updates_an_output(x, n):
    o, p = Twice.apply(x * x, x)
    for _ in range(n):
        o -= 0.3 * np.tanh(o)       # (o may be x's array: guarded by _s2s_unshared)
    return o * p


@pytest.mark.parametrize("x", [0.4, -1.1])
def test_the_guard_of_an_update_in_place_runs_on_numba_for_numbers(monkeypatch, x):
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "0")
    assert "_s2s_unshared(o" in s2sgrad.source(updates_an_output)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        got = s2sgrad.grad(updates_an_output, jit=True)(x, 5)
    assert got == pytest.approx(s2sgrad.grad(updates_an_output)(x, 5), rel=1e-12)
    assert got == pytest.approx(numeric_grad(updates_an_output, [x, 5], 0), rel=1e-6)
    state = numba_backend.known_state(updates_an_output, (0,))
    assert [v.failed for v in state.variants.values()] == [None]


def scattered(x, idx, n):
    acc = np.zeros((4,) + x.shape[1:])
    for k in range(n):
        np.add.at(acc, idx, np.tanh(x * (k + 1)))   # (idx repeats: they accumulate)
    return np.sum(acc ** 2)


@pytest.mark.parametrize("shape", [(3,), (3, 2)])
def test_np_add_at_of_the_users_runs_on_numba(monkeypatch, shape):
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "0")
    x = np.random.default_rng(len(shape)).uniform(-1, 1, shape)
    idx = np.array([0, 2, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        got = s2sgrad.grad(scattered, jit=True)(x, idx, 3)
    np.testing.assert_allclose(got, s2sgrad.grad(scattered)(x, idx, 3), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(got, numeric_grad(scattered, [x, idx, 3], 0), rtol=1e-6,
                               atol=1e-8)
    state = numba_backend.known_state(scattered, (0,))
    assert [v.failed for v in state.variants.values()] == [None]
