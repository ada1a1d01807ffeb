"""jit=True decides from a measurement where the size rule guessed wrong.

A compiled variant's calls are timed after its first result is checked
(`jit_policy.Trial`): numba clearly slower than NumPy leaves calls of that size to
NumPy (the stencil benchmark: numba's slicing took 4x NumPy's time). The logic is
checked alone; then on a real function whose compiled code is made slow, that the
calls move to NumPy, that `jit_plan` says why, that smaller calls keep numba, and
that every result is the gradient (central differences, two shapes).
"""
import time
import warnings

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad.backends import JitWarning, jit_plan, numba_backend
from s2sgrad.backends.jit_policy import QUICK_TRIAL_RUNS, TRIAL_MIN_SECONDS, TRIAL_RUNS, Trial

pytest.importorskip("numba")


def recurrence(v, a):
    for _ in range(4):
        v = np.tanh(v * a) + 0.1 * v
    return np.sum(v * v)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("S2SGRAD_JIT_PLAN", raising=False)
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "0")   # compiled at the first call
    numba_backend.reset()
    yield
    numba_backend.reset()


def test_the_trial_alone():
    slow = Trial()
    for _ in range(TRIAL_RUNS):
        assert slow.runs_numba(1000)
        slow.record(True, 0.05, 1000)
    for _ in range(TRIAL_RUNS):
        assert not slow.runs_numba(1000)    # NumPy's timed calls
        slow.record(False, 0.01, 1000)
    assert slow.decided and slow.numpy_from == 500
    assert not slow.runs_numba(1000) and not slow.runs_numba(500)
    assert slow.runs_numba(499)             # smaller calls keep the rule
    assert "measured slower" in slow.plan(1000).reason and slow.plan(10) is None

    close = Trial()   # slower, but within the margin: numba stays
    for seconds, compiled in [(0.011, True)] * TRIAL_RUNS + [(0.01, False)] * TRIAL_RUNS:
        close.record(compiled, seconds, 1000)
    assert close.decided and close.numpy_from is None and close.runs_numba(10**9)

    fast = Trial()    # compiled calls under TRIAL_MIN_SECONDS: NumPy is never timed
    for _ in range(TRIAL_RUNS):
        fast.record(True, TRIAL_MIN_SECONDS / 10, 1000)
    assert fast.decided and fast.numpy_from is None and not fast.numpy


def _fused(f, witness=None):
    state = numba_backend.known_state(f, (0, 1), witness)
    assert state is not None
    (variant,) = [v for k, v in state.variants.items() if k[-1] != "loops"]
    return variant


def _expected(f, args):
    return [numeric_grad(f, args, i) for i in range(2)]


@pytest.mark.parametrize("shape", [(40,), (6, 8)])
def test_a_variant_measured_slower_leaves_its_calls_to_numpy(shape):
    v0 = np.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape)
    a = np.linspace(0.5, 0.9, shape[-1])     # broadcast against v
    g = s2sgrad.grad(recurrence, wrt=(0, 1), jit=True)
    want = _expected(recurrence, (v0, a))
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        first = g(v0, a)                      # compiles; its result is checked
        variant = _fused(recurrence)
        assert variant.check is None and variant.failed is None
        compiled, ran = variant.fused, []

        def slow(*args):          # numba's code, made slower than NumPy's
            ran.append(args)
            time.sleep(0.02)
            return compiled(*args)

        variant.fused = slow
        results = [first] + [g(v0, a) for _ in range(2 * TRIAL_RUNS + 3)]
    assert len(ran) == TRIAL_RUNS, "after the trial, calls of this size run NumPy"
    assert variant.trial.decided and variant.trial.numpy_from is not None
    plan = jit_plan(recurrence, v0, a, wrt=(0, 1))
    assert not plan.compile and "measured slower under numba" in plan.reason
    for got in results:
        for g_i, w_i in zip(got, want):
            np.testing.assert_allclose(g_i, w_i, rtol=1e-6, atol=1e-8)
    # a call of much smaller arrays (same types) keeps the compiled code
    small_v, small_a = v0.reshape(-1)[:2].reshape((2,) + (1,) * (len(shape) - 1)), a[:1]
    got = g(small_v, small_a)
    assert len(ran) == TRIAL_RUNS + 1
    for g_i, w_i in zip(got, _expected(recurrence, (small_v, small_a))):
        np.testing.assert_allclose(g_i, w_i, rtol=1e-6, atol=1e-8)


def test_fast_compiled_code_is_not_measured_against_numpy_and_always_measures_nothing(
        monkeypatch):
    v0, a = np.linspace(-1.0, 1.0, 30), np.linspace(0.5, 0.9, 30)
    g = s2sgrad.grad(recurrence, wrt=(0, 1), jit=True)
    for _ in range(TRIAL_RUNS + 3):
        g(v0, a)
    trial = _fused(recurrence).trial
    assert trial.decided and not trial.numpy and trial.numpy_from is None

    numba_backend.reset()
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")
    g = s2sgrad.grad(recurrence, wrt=(0, 1), jit=True)
    for _ in range(TRIAL_RUNS + 3):
        got = g(v0, a)
    assert not _fused(recurrence).trial.numba
    for g_i, w_i in zip(got, _expected(recurrence, (v0, a))):
        np.testing.assert_allclose(g_i, w_i, rtol=1e-6, atol=1e-8)


# -- straight-line code: quick calls are measured too, and a loss leaves every call --
def squares(x, a):
    y = x ** 2 * a
    return y.sum()


def test_the_trial_of_quick_straight_line_calls_alone():
    lost = Trial(straight=True)
    for _ in range(QUICK_TRIAL_RUNS):
        assert lost.runs_numba(5)
        lost.record(True, 20e-6, 5)
    for _ in range(QUICK_TRIAL_RUNS):
        assert not lost.runs_numba(5)
        lost.record(False, 12e-6, 5)
    assert lost.decided and lost.numpy_from == 0
    assert not lost.runs_numba(1) and not lost.runs_numba(10**6)
    assert "20 us a call against 12 us on NumPy" in lost.plan(3).reason

    won = Trial(straight=True)    # numba faster, even by a little: it stays
    for seconds, compiled in [(11e-6, True)] * QUICK_TRIAL_RUNS + \
            [(12e-6, False)] * QUICK_TRIAL_RUNS:
        won.record(compiled, seconds, 5)
    assert won.decided and won.numpy_from is None and won.runs_numba(10**6)

    slow = Trial(straight=True)   # calls of a millisecond and more: as for any code
    for seconds, compiled in [(0.05, True)] * TRIAL_RUNS + [(0.01, False)] * TRIAL_RUNS:
        slow.record(compiled, seconds, 1000)
    assert slow.decided and slow.numpy_from == 500


def _squares_inputs(shape):
    x = np.linspace(-1.0, 1.5, int(np.prod(shape))).reshape(shape)
    a = np.linspace(0.5, 2.0, shape[-1])     # broadcast against x
    return x, a


@pytest.mark.parametrize("shape", [(5,), (3, 4)])
def test_straight_line_code_measured_slower_runs_numpy_for_every_call(shape):
    x, a = _squares_inputs(shape)
    g = s2sgrad.grad(squares, wrt=(0, 1), jit=True, witness=False)   # (timed: no checks)
    want = _expected(squares, (x, a))
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        first = g(x, a)
        variant = _fused(squares, witness=False)
        state = numba_backend.known_state(squares, (0, 1), witness=False)
        assert variant.trial.straight and not state.facts.has_loops
        compiled, ran = variant.fused, []

        def slow(*args):          # numba's code, made slower than NumPy's
            ran.append(args)
            time.sleep(1e-4)
            return compiled(*args)

        variant.fused = slow
        results = [first] + [g(x, a) for _ in range(2 * QUICK_TRIAL_RUNS + 3)]
        assert len(ran) == QUICK_TRIAL_RUNS
        assert variant.trial.decided and variant.trial.numpy_from == 0
        assert numba_backend.numpy_only(state), "the API's NumPy path from now on"
        bigger = np.concatenate([x, x], axis=-1) if len(shape) == 1 else np.vstack([x, x])
        results.append(g(bigger, a if len(shape) > 1 else np.concatenate([a, a])))
    assert len(ran) == QUICK_TRIAL_RUNS, "no call of any size runs numba after the loss"
    plan = numba_backend.plan_of(state, (x, a))
    assert not plan.compile and "measured slower under numba" in plan.reason
    for got in results[:-1]:
        for g_i, w_i in zip(got, want):
            np.testing.assert_allclose(g_i, w_i, rtol=1e-6, atol=1e-8)
    big_a = a if len(shape) > 1 else np.concatenate([a, a])
    for g_i, w_i in zip(results[-1], _expected(squares, (bigger, big_a))):
        np.testing.assert_allclose(g_i, w_i, rtol=1e-6, atol=1e-8)


# -- the calls after a variant is checked: one lookup by the values' kinds ----------
@pytest.mark.parametrize("shape", [(5,), (3, 4)])
def test_checked_variants_take_the_short_path_and_new_kinds_the_general_one(shape,
                                                                           monkeypatch):
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")   # (no measured verdict to wait for)
    x, a = _squares_inputs(shape)
    g = s2sgrad.grad(squares, wrt=(0, 1), jit=True, witness=False)   # (timed: no checks)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        got = [g(x, a) for _ in range(3)]
        state = numba_backend.known_state(squares, (0, 1), witness=False)
        assert len(state.ready) == 1, "the checked variant is looked up by kinds"
        (v,) = [entry[0] for entry in state.ready.values()]
        compiled, ran = v.fused, []

        def counted(*args):
            ran.append(args)
            return compiled(*args)

        v.fused = counted
        got.append(g(x, a))
        assert len(ran) == 1, "a checked variant's call runs numba's code"
        x32, a32 = x.astype(np.float32), a.astype(np.float32)   # other kinds: built anew
        got32 = [g(x32, a32) for _ in range(3)]
    assert len(state.ready) == 2 and len(ran) == 1
    want = _expected(squares, (x, a))
    for result in got:
        for g_i, w_i in zip(result, want):
            np.testing.assert_allclose(g_i, w_i, rtol=1e-6, atol=1e-8)
    for result in got32:
        for g_i, w_i in zip(result, want):
            assert g_i.dtype == np.float32
            np.testing.assert_allclose(g_i, w_i, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(5,), (3, 4)])
def test_a_checked_variant_that_raises_later_gives_numpys_result_and_a_warning(shape,
                                                                              monkeypatch):
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")
    x, a = _squares_inputs(shape)
    g = s2sgrad.grad(squares, wrt=(0, 1), jit=True, witness=False)   # (timed: no checks)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        for _ in range(3):
            g(x, a)
    state = numba_backend.known_state(squares, (0, 1), witness=False)
    (v,) = [entry[0] for entry in state.ready.values()]

    def raising(*args):
        raise FloatingPointError("from the compiled code")

    v.fused = raising
    with pytest.warns(JitWarning, match="raised FloatingPointError"):
        got = g(x, a)
    for g_i, w_i in zip(got, _expected(squares, (x, a))):
        np.testing.assert_allclose(g_i, w_i, rtol=1e-6, atol=1e-8)
    assert v.failed is not None
    again = g(x, a)              # NumPy from now on
    for g_i, w_i in zip(again, _expected(squares, (x, a))):
        np.testing.assert_allclose(g_i, w_i, rtol=1e-6, atol=1e-8)


def test_a_call_not_timed_from_its_start_is_not_recorded():
    """A call that came in while nothing was measuring (another variant's trial had just
    decided) would count from time 0: it is left out, and the next call is timed."""
    x, a = _squares_inputs((5,))
    g = s2sgrad.grad(squares, wrt=(0, 1), jit=True, witness=False)
    g(x, a)
    g(x, a)
    state = numba_backend.known_state(squares, (0, 1), witness=False)
    variant = _fused(squares, witness=False)
    assert not variant.trial.decided
    before = len(variant.trial.numba) + len(variant.trial.numpy)
    state.measuring = False
    got = g(x, a)
    assert len(variant.trial.numba) + len(variant.trial.numpy) == before
    assert state.measuring
    g(x, a)
    assert len(variant.trial.numba) + len(variant.trial.numpy) == before + 1
    assert all(t < 1.0 for t in variant.trial.numba + variant.trial.numpy)
    for g_i, w_i in zip(got, _expected(squares, (x, a))):
        np.testing.assert_allclose(g_i, w_i, rtol=1e-6, atol=1e-8)
