"""The numba backend (jit=True): same gradients as the NumPy backend, or a fallback.

Every JIT gradient is checked against the NumPy backend and against central
differences. Tests that need numba call pytest.importorskip("numba") inside
the test; the fallback tests run without numba (they hide it when present).
"""
import warnings

import numpy as np
import pytest
from conftest import leaf_differences, numeric_grad, numeric_vjp

import s2sgrad
from benchmarks.workloads.branchy_loop import branchy  # the benchmarks' own workloads
from benchmarks.workloads.custom_softplus import Softplus
from s2sgrad import optimizer_check
from s2sgrad.backends import (
    JitWarning,
    jit_source,
    jit_wait,
    numba_backend,
    numba_load,
    numba_variants,
)

SCALE = 3.0        # a module-level constant read by `scaled` (read live)


def pendulum(x0, v0, a, b, dt, n_steps):
    x = x0
    v = v0
    for _ in range(n_steps):
        v = v + dt * (-a * np.sin(x) - b * v)
        x = x + dt * v
    return x


def logistic(r, x, n_steps):
    for _ in range(n_steps):
        x = r * x * (1.0 - x) / (1.0 + 0.1 * x * x)
    return x * x


def rnn(W, U, b, xs, target):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = np.tanh(W @ h + U @ x + b)
    return np.sum((h - target) ** 2)


def softplus_loop(h, w, c, xs):
    for x in xs:
        h = 0.5 * Softplus.apply(w * h + c + x)
    return np.sum(h)


def while_loop(x, a):
    n = 0
    while np.sum(x * x) < 10.0 and n < 20:
        x = x * a + 0.1
        n += 1
    return np.sum(np.exp(-x))


def reductions(x, w):
    y = np.tanh(x @ w)                          # (4, 3) @ (3,) -> (4,)
    m = np.max(x, axis=1, keepdims=True)
    z = np.exp(x - m)
    s = np.sum(z, axis=1)
    return np.mean(y * np.log(s)) + np.sum(x.T @ x) * 0.01


def stable_softmaxes(z, w):
    # softmax, log-softmax and logsumexp written out (one call each: normalize/fused.py)
    s = z - np.max(z, axis=-1, keepdims=True)
    p = np.exp(s)
    p = p / np.sum(p, axis=-1, keepdims=True)
    t = z * w
    t = t - np.max(t, axis=1, keepdims=True)
    logp = t - np.log(np.sum(np.exp(t), axis=1, keepdims=True))
    m = np.max(z, axis=1, keepdims=True)
    ll = m[:, 0] + np.log(np.sum(np.exp(z - m), axis=1))
    return np.sum(p * logp) + np.sum(ll ** 2)


def sigmoid_gates(W, xs):
    # the logistic sigmoid written out both ways (one call each: normalize/fused.py)
    h = np.zeros(W.shape[0])
    for x in xs:
        a = W @ x + h
        h = 1 / (1 + np.exp(-a)) * (0.5 * (np.tanh(0.5 * a) + 1.0))
    return np.sum(h ** 2)


def sigmoid_of_numbers(x, b, n):
    for _ in range(n):
        x = 1.0 / (1.0 + np.exp(-(x * b))) + 0.5 * (np.tanh(0.5 * x) + 1)
    return x


def broadcasting(x, row, c):
    y = x * row + c                             # (3, 4) * (4,) + scalar
    return np.sum(np.sin(y) * y) / x.shape[0]


def nested(x, n):
    total = 0.0
    for i in range(n):
        for j in range(i + 1):
            total = total + np.sum(np.sin(x * (i - j + 1)))
    return total


def inner_step(h, w, x, k=1.0):
    return np.tanh(w * h + x) * k + SCALE * 0.01


def calls_a_function(h, w, xs):
    for x in xs:
        h = inner_step(h, w, x) + inner_step(h, x, w, k=0.5)
    return np.sum(h * h)


def recursive(x, n):
    if n == 0:
        return np.sum(x)
    return recursive(np.sin(x), n - 1)


_SORTED_WEIGHTS = np.array([0.3, -0.2, 0.5])


def dot_with_a_sorted_list(x):
    acc = x * 1.0
    for _ in range(2):
        acc = acc + 0.3 * np.tanh(np.dot(sorted(_SORTED_WEIGHTS), acc))
    return np.sum(np.maximum(acc, np.sum(acc)))


def scaled(x):
    return np.sum(x * SCALE) ** 2


def uses_random(x):
    return np.sum(x * np.random.standard_normal(x.shape))


def _jit_and_numpy(f, args, wrt, expect_warning=False):
    """(jit gradient, NumPy gradient), checking whether a JitWarning was raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = s2sgrad.grad(f, wrt, jit=True)(*args)
        got_again = s2sgrad.grad(f, wrt, jit=True)(*args)
    jit_warnings = [w for w in caught if issubclass(w.category, JitWarning)]
    if expect_warning:
        assert len(jit_warnings) == 1, [str(w.message) for w in jit_warnings]
    else:
        assert not jit_warnings, str(jit_warnings[0].message)
    want = s2sgrad.grad(f, wrt)(*args)
    for a, b in zip(got if isinstance(got, tuple) else (got,),
                    got_again if isinstance(got_again, tuple) else (got_again,)):
        np.testing.assert_array_equal(a, b)
    return got, want


def _check(f, args, wrt, rtol=1e-9, fd_rtol=1e-5, expect_warning=False):
    got, want = _jit_and_numpy(f, args, wrt, expect_warning)
    single = isinstance(wrt, int)
    got_t, want_t = ((got,), (want,)) if single else (got, want)
    positions = (wrt,) if single else wrt
    for i, g, w in zip(positions, got_t, want_t):
        assert type(g) is type(w), (type(g), type(w))
        assert np.shape(g) == np.shape(args[i])
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12,
                                   err_msg=f"jit vs NumPy backend, argument {i}")
        fd = numeric_grad(f, list(args), i)
        scale = max(1.0, float(np.max(np.abs(fd))))
        np.testing.assert_allclose(g, fd, rtol=fd_rtol, atol=fd_rtol * scale,
                                   err_msg=f"jit vs finite differences, argument {i}")
    return got


@pytest.fixture(autouse=True)
def _fresh_backend():
    numba_backend.reset()
    yield
    numba_backend.reset()


def _rng():
    return np.random.default_rng(7)


# -- with numba -----------------------------------------------------------------------
def test_scalar_recurrence_stays_python_floats():
    pytest.importorskip("numba")
    got = _check(pendulum, (1.0, 0.0, 4.0, 0.1, 0.01, 300), (2, 3))
    assert all(type(g) is float for g in got)
    _check(logistic, (2.9, 0.3, 60), (0, 1))


def test_branchy_loop_takes_both_branches():
    pytest.importorskip("numba")
    rng = np.random.default_rng(10)
    v = rng.standard_normal(8)
    a, b = rng.uniform(0.5, 1.5, 8), rng.uniform(0.5, 1.5, 8)
    _check(branchy, (v, a, b, 16), (0, 1, 2))


def clipped_between_numbers(x):
    return np.sum(np.sin(np.clip(x, -0.5, 0.7)) * x)


def clipped_between_arrays(x, lo):
    return np.sum(np.sin(np.clip(x, lo, 0.7)) * x)


@pytest.mark.parametrize("shape", [(7,), (3, 4)])
def test_clip_cotangent_of_the_clipped_array_alone(shape):
    """np.clip whose bounds get no gradient: the adjoint calls clip_grad_a (between
    two numbers: the compiled loop clip_a_ss; array bounds: the overload)."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(11)
    x = rng.uniform(-1.0, 1.0, shape)
    x = np.where(np.abs(x + 0.5) < 0.02, 0.0, x)   # away from the kinks, for differences
    x = np.where(np.abs(x - 0.7) < 0.02, 0.0, x)
    _check(clipped_between_numbers, (x,), 0)
    _check(clipped_between_arrays, (x, np.full(shape[-1], -0.5)), 0)
    ties = np.array([-0.5, 0.7, 0.1, -2.0, 2.0])   # at a bound the gradient is halved
    got, want = _jit_and_numpy(clipped_between_numbers, (ties,), 0)
    np.testing.assert_array_equal(got, want)
    assert got[0] == pytest.approx(0.5 * np.cos(-0.5) * -0.5 + np.sin(-0.5))


def test_rnn_matrix_products():
    pytest.importorskip("numba")
    rng = _rng()
    W = rng.standard_normal((4, 4)) * 0.4
    U = rng.standard_normal((4, 3)) * 0.5
    b = rng.standard_normal(4) * 0.1
    xs = rng.standard_normal((6, 3))
    target = rng.standard_normal(4)
    _check(rnn, (W, U, b, xs, target), (0, 1, 2))


def product_plus(a, b, c):
    return np.sum(np.tanh(a @ b + c))


# The product's cotangent is summed to its shape read off the operands
# (unbroadcast_matmul): smaller than the sum, the same, 1-d and 2-d operands.
@pytest.mark.parametrize("shapes", [((4, 3), (3,), (4,)), ((1, 3), (3,), (2, 5)),
                                    ((3,), (3, 2), (4, 2)), ((2, 3), (3, 1), (2, 4)),
                                    ((3,), (3,), (2,)), ((3,), (3, 2), (2,)),
                                    ((2, 3), (3, 4), (2, 4))])
def test_product_shapes_from_operands(shapes):
    pytest.importorskip("numba")
    rng = _rng()
    _check(product_plus, tuple(rng.standard_normal(s) for s in shapes), (0, 1, 2))


def new_arrays_and_reductions(x):
    acc = np.zeros(x.shape[1])
    for i in range(x.shape[0]):
        acc = acc + np.ones(x.shape[1]) * np.sin(x[i])
    return np.sum(acc * acc) + np.max(acc * 2.0) + np.mean(np.cos(acc))


def test_new_arrays_and_reductions_of_expressions_call_cached_helpers():
    """np.zeros(n), np.ones(n) and a whole-array reduction of an expression become
    the helpers numba keeps compiled on disk (no generic compile in each caller)."""
    pytest.importorskip("numba")
    x = _rng().standard_normal((5, 3))
    source = jit_source(new_arrays_and_reductions, x)
    for helper in ("_nb_np_zeros(", "_nb_np_ones(", "_nb_np_sum(", "_nb_np_max(",
                   "_nb_np_mean("):
        assert helper in source, source
    _check(new_arrays_and_reductions, (x,), 0)
    _check(new_arrays_and_reductions, (_rng().standard_normal((2, 7)),), 0)


@pytest.mark.parametrize("shape", [(5, 3), (2, 7)])
def test_softmax_and_logsumexp_have_numba_versions(shape):
    pytest.importorskip("numba")
    rng = _rng()
    args = (rng.standard_normal(shape) * 2.0, rng.standard_normal(shape[-1]))
    source = jit_source(stable_softmaxes, *args, wrt=(0, 1))
    for helper in ("_nb_softmax(", "_nb_log_softmax(", "_nb_logsumexp("):
        assert helper in source, source
    _check(stable_softmaxes, args, (0, 1))


@pytest.mark.parametrize("shape", [(3, 4), (5, 2)])
def test_the_sigmoid_has_numba_versions(shape):
    pytest.importorskip("numba")
    rng = _rng()
    args = (rng.standard_normal((shape[0], shape[0])), rng.standard_normal((6, shape[0])))
    source = jit_source(sigmoid_gates, *args, wrt=0)
    for helper in ("_nb_sigmoid_exp(", "_nb_sigmoid_tanh("):
        assert helper in source, source
    _check(sigmoid_gates, args, 0)
    _check(sigmoid_of_numbers, (0.3, -1.7, shape[1]), (0, 1))


def joined_cell(W, h, xs):
    for x in xs:
        z = np.concatenate([h, x])
        h = np.tanh(W @ z)
    return np.sum(h ** 2)


def stacked_rows(A, B):
    C = np.concatenate((A, B))
    S = np.stack([A[0], np.cos(B[0]), A[-1] * B[-1]])
    return np.sum(np.sin(C) * np.arange(C.shape[0])[:, None]) + np.sum(S * S[::-1])


@pytest.mark.parametrize("sizes", [(3, 2), (4, 1)])
def test_concatenate_and_stack_grads_have_numba_versions(sizes):
    """np.concatenate's and np.stack's cotangents (slices and items of g) in numba
    code: an RNN cell that joins its state and input every step, a 2-D join along
    axis 0, a stack of rows."""
    pytest.importorskip("numba")
    rng = _rng()
    hidden, inp = sizes
    args = (rng.standard_normal((hidden, hidden + inp)) * 0.5, rng.standard_normal(hidden),
            rng.standard_normal((4, inp)))
    assert "_nb_concatenate_grad(" in jit_source(joined_cell, *args, wrt=(0, 1))
    _check(joined_cell, args, (0, 1, 2))
    rows = (rng.standard_normal((2, hidden)), rng.standard_normal((inp, hidden)))
    source = jit_source(stacked_rows, *rows, wrt=(0, 1))
    assert "_nb_concatenate_grad(" in source and "_nb_stack_grad(" in source
    _check(stacked_rows, rows, (0, 1))


@pytest.mark.parametrize("shape", [(5, 3), (2, 7)])
def test_a_call_after_jit_source_is_checked_against_its_own_values(shape):
    """jit_source builds the variant from one NumPy run; the first compiled call,
    on other values, is checked against a NumPy run of its own (it once returned
    the gradient at jit_source's arguments)."""
    pytest.importorskip("numba")
    rng = _rng()
    x1, x2 = rng.standard_normal(shape), rng.standard_normal(shape) + 2.0
    jit_source(new_arrays_and_reductions, x1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        got = s2sgrad.grad(new_arrays_and_reductions, jit=True)(x2)
    np.testing.assert_allclose(got, s2sgrad.grad(new_arrays_and_reductions)(x2), rtol=1e-12)
    np.testing.assert_allclose(got, numeric_grad(new_arrays_and_reductions, [x2], 0),
                               rtol=1e-6, atol=1e-8)


def test_inlined_custom_function():
    pytest.importorskip("numba")
    rng = _rng()
    _check(softplus_loop, (rng.standard_normal(5), rng.uniform(-1.5, 1.5, 5),
                           rng.standard_normal(5), rng.standard_normal((8, 5))), (1, 2))


def test_while_loop_with_data_dependent_trip_count():
    pytest.importorskip("numba")
    _check(while_loop, (np.array([0.3, -0.2, 0.5]), 1.3), (0, 1))


def test_reductions_with_axes_and_matrix_products():
    pytest.importorskip("numba")
    rng = _rng()
    _check(reductions, (rng.standard_normal((4, 3)), rng.standard_normal(3)), (0, 1))


def test_broadcasting_is_undone():
    pytest.importorskip("numba")
    rng = _rng()
    _check(broadcasting, (rng.standard_normal((3, 4)), rng.standard_normal(4), 0.7), (0, 1, 2))


def test_nested_loops_with_ranges():
    pytest.importorskip("numba")
    _check(nested, (np.array([0.2, -0.4, 0.9]), 4), 0)


def test_float32_arrays_keep_their_dtype():
    pytest.importorskip("numba")
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    row = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        got = s2sgrad.grad(broadcasting, (0, 1), jit=True)(x[None, :], row, 0.5)
    want = s2sgrad.grad(broadcasting, (0, 1))(x[None, :], row, 0.5)
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-5)


def test_value_and_grad_and_vjp():
    pytest.importorskip("numba")
    args = (1.0, 0.0, 4.0, 0.1, 0.01, 50)
    value, g = s2sgrad.value_and_grad(pendulum, (2, 3), jit=True)(*args)
    assert value == pytest.approx(pendulum(*args), rel=1e-12)
    rng = _rng()
    v0, a, b = rng.standard_normal(6), rng.uniform(0.5, 1.5, 6), rng.uniform(0.5, 1.5, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        out, pullback = s2sgrad.vjp(branchy, v0, a, b, 10, wrt=(0, 1), jit=True)
        first, second = pullback(1.0), pullback(2.0)      # a pullback may be reused
    assert out == pytest.approx(branchy(v0, a, b, 10), rel=1e-12)
    want = s2sgrad.vjp(branchy, v0, a, b, 10, wrt=(0, 1))[1](1.0)
    for g1, g2, w, i in zip(first, second, want, (0, 1)):
        np.testing.assert_allclose(g1, w, rtol=1e-9)
        np.testing.assert_allclose(g2, 2 * w, rtol=1e-9)
        np.testing.assert_allclose(g1, numeric_vjp(branchy, [v0, a, b, 10], 1.0, i),
                                   rtol=1e-5, atol=1e-6)


def test_module_constants_are_read_live():
    pytest.importorskip("numba")
    global SCALE
    x = np.array([1.0, 2.0])
    g = s2sgrad.grad(scaled, jit=True)
    np.testing.assert_allclose(g(x), 2 * np.sum(x * 3.0) * 3.0)
    SCALE = 5.0
    try:
        np.testing.assert_allclose(g(x), 2 * np.sum(x * 5.0) * 5.0)
    finally:
        SCALE = 3.0


@pytest.mark.skipif(optimizer_check.ENABLED, reason="the optimiser check compares two "
                    "runs of a function drawing random numbers (the NumPy backend runs "
                    "its calls after the warning)")
def test_unsupported_construct_falls_back_with_one_warning():
    pytest.importorskip("numba")
    x = np.array([1.0, 2.0, 3.0])
    g = s2sgrad.grad(uses_random, jit=True)
    with pytest.warns(JitWarning, match="np.random"):
        np.random.seed(0)
        got = g(x)
    np.random.seed(0)
    np.testing.assert_allclose(got, np.random.standard_normal(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)   # once per function
        g(x)


def test_errors_are_the_numpy_backends():
    pytest.importorskip("numba")
    with pytest.raises(ValueError, match="returns a scalar"):
        s2sgrad.grad(lambda_free_vector, jit=True)(np.ones(3))
    with pytest.raises(ValueError):
        s2sgrad.grad(broadcasting, jit=True)(np.ones((2, 3)), np.ones(4), 1.0)


def lambda_free_vector(x):
    return x * 2.0


def test_source_shows_the_numba_code():
    pytest.importorskip("numba")
    text = jit_source(pendulum, 1.0, 0.0, 4.0, 0.1, 0.01, 10, wrt=(2, 3))
    assert "def pendulum_nb_fused(" in text
    assert "None" not in text          # placeholders typed, no optional values


# -- without numba (runs whether or not numba is installed) -----------------------------
def _hide_numba(monkeypatch):
    numba_backend.reset()
    monkeypatch.setattr(numba_load, "_NUMBA",
                        [None, "ModuleNotFoundError: No module named 'numba'"])


def test_without_numba_the_numpy_backend_runs_with_one_warning(monkeypatch):
    _hide_numba(monkeypatch)
    args = (1.0, 0.0, 4.0, 0.1, 0.01, 40)
    g = s2sgrad.grad(pendulum, (2, 3), jit=True)
    with pytest.warns(JitWarning, match="No module named 'numba'") as caught:
        got = g(*args)
    assert len([w for w in caught if issubclass(w.category, JitWarning)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        again = g(*args)
        value, vg = s2sgrad.value_and_grad(pendulum, (2, 3), jit=True)(*args)
        out, pullback = s2sgrad.vjp(pendulum, *args, wrt=2, jit=True)
    want = s2sgrad.grad(pendulum, (2, 3))(*args)
    assert got == want and again == want and vg == want
    assert value == pendulum(*args) and out == pendulum(*args)
    assert pullback(1.0) == want[0]


def test_without_numba_errors_are_unchanged(monkeypatch):
    _hide_numba(monkeypatch)
    with pytest.warns(JitWarning):
        with pytest.raises(ValueError, match="returns a scalar"):
            s2sgrad.grad(lambda_free_vector, jit=True)(np.ones(3))
    with pytest.raises(TypeError, match="integer"):
        s2sgrad.grad(pendulum, 2, jit=True)(1.0, 0.0, 4, 0.1, 0.01, 3)


def _sabotage(monkeypatch, replacement, name="_nb_op_mul"):
    """Make the compiled code's array multiplication (or helper `name`) `replacement`."""
    original = numba_variants.module_namespace

    def sabotaged(self, *args):
        ns = original(self, *args)
        ns[name] = replacement
        return ns
    monkeypatch.setattr(numba_variants, "module_namespace", sabotaged)


@pytest.mark.parametrize("how", ["wrong value", "raises"])
def test_a_wrong_or_failing_compiled_gradient_gives_numpys(monkeypatch, how):
    numba = pytest.importorskip("numba")

    @numba.njit
    def wrong_mul(a, b):
        return a * b * 1.5

    @numba.njit
    def failing_mul(a, b):
        if np.size(a) >= 0:
            raise ValueError("boom")
        return a * b

    _sabotage(monkeypatch, wrong_mul if how == "wrong value" else failing_mul)
    rng = np.random.default_rng(10)
    v, a, b = rng.standard_normal(8), rng.uniform(0.5, 1.5, 8), rng.uniform(0.5, 1.5, 8)
    expected = "differs from the NumPy backend" if how == "wrong value" else "raised ValueError"
    with pytest.warns(JitWarning, match=expected):
        got = s2sgrad.grad(branchy, (0, 1, 2), jit=True)(v, a, b, 16)
    want = s2sgrad.grad(branchy, (0, 1, 2))(v, a, b, 16)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    again = s2sgrad.grad(branchy, (0, 1, 2), jit=True)(v, a, b, 16)   # NumPy from now on
    for g, w in zip(again, want):
        np.testing.assert_array_equal(g, w)


def writes_into_argument(x, w):
    x[0] = x[0] * w
    x *= 2.0
    return np.sum(np.sin(x))


def test_writes_into_arguments_happen_once():
    pytest.importorskip("numba")
    x = np.array([0.3, -0.7, 1.1])
    expected_x = x.copy()
    expected = writes_into_argument(expected_x, 1.3)
    want = s2sgrad.value_and_grad(writes_into_argument, (0, 1))(x.copy(), 1.3)
    caller = x.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        value, grads = s2sgrad.value_and_grad(writes_into_argument, (0, 1), jit=True)(caller, 1.3)
    np.testing.assert_array_equal(caller, expected_x)     # written once, as without jit
    assert value == pytest.approx(expected, rel=1e-12)
    for g, w in zip(grads, want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    # vjp(jit=True) would run the forward again in its pullback: NumPy runs it.
    caller = x.copy()
    with pytest.warns(JitWarning, match="writes into its arguments"):
        out, pullback = s2sgrad.vjp(writes_into_argument, caller, 1.3, wrt=1, jit=True)
    np.testing.assert_array_equal(caller, expected_x)
    assert pullback(1.0) == pytest.approx(want[1][1], rel=1e-12)


def test_calls_to_other_user_functions():
    pytest.importorskip("numba")
    rng = _rng()
    _check(calls_a_function, (rng.standard_normal(4), rng.uniform(-1, 1, 4),
                              rng.standard_normal((5, 4))), (0, 1))


def test_recursion_falls_back():
    pytest.importorskip("numba")
    x = np.array([0.3, 0.5])
    with pytest.warns(JitWarning, match="recursive"):
        got = s2sgrad.grad(recursive, jit=True)(x, 3)
    np.testing.assert_array_equal(got, s2sgrad.grad(recursive)(x, 3))


def test_a_list_among_an_elementwise_calls_operands_is_left_to_numba(monkeypatch):
    # The rewrite typed the call's result from the list's kind as if it were a number's
    # ("data type 's' not understood": an internal error); the list makes the kind
    # unknown, numba's own typing refuses the call, and the NumPy backend runs it.
    pytest.importorskip("numba")
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")
    x = np.array([0.1, 0.2, 0.3])
    numba_backend.reset()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", JitWarning)
            got = s2sgrad.grad(dot_with_a_sorted_list, jit=True)(x)
    finally:
        numba_backend.reset()
    assert not [w for w in caught if "internal error" in str(w.message)]
    np.testing.assert_allclose(got, s2sgrad.grad(dot_with_a_sorted_list)(x), rtol=1e-12)
    np.testing.assert_allclose(got, numeric_grad(dot_with_a_sorted_list, [x], 0), rtol=1e-6)


_CACHE_SCRIPT = """
import sys
sys.path.insert(0, {where!r})
import s2sgrad
from s2sgrad.backends import numba_backend
from jit_cache_case import pendulum
g = s2sgrad.grad(pendulum, (2, 3), jit=True)(1.0, 0.0, 4.0, 0.1, 0.01, 50)
state = numba_backend.state_for(pendulum, (2, 3))
variant = next(iter(state.variants.values()))
print(repr(g), sum(variant.fused.stats.cache_hits.values()))
"""


def test_compiled_code_is_kept_on_disk_for_the_next_process(tmp_path):
    pytest.importorskip("numba")
    import inspect
    import os
    import subprocess
    import sys
    where = tmp_path / "src"
    where.mkdir()
    (where / "jit_cache_case.py").write_text("import numpy as np\n\n\n" +
                                             inspect.getsource(pendulum))
    env = dict(os.environ, S2SGRAD_CACHE_DIR=str(tmp_path), S2SGRAD_CACHE="1")
    script = _CACHE_SCRIPT.format(where=str(where))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    (g1, hits1), (g2, hits2) = (r.stdout.split(") ") for r in runs)
    assert g1 == g2
    assert int(hits1) == 0 and int(hits2) >= 1
    assert any(p.suffix == ".py" for p in (tmp_path / "numba").iterdir())
    env["S2SGRAD_CACHE"] = "0"
    off = subprocess.run([sys.executable, "-c", script], env=dict(
        env, S2SGRAD_CACHE_DIR=str(tmp_path / "off")), capture_output=True, text=True,
        timeout=300)
    assert off.returncode == 0, off.stderr
    assert int(off.stdout.split(") ")[1]) == 0 and not (tmp_path / "off").exists()


def test_a_wrong_compiled_vjp_is_caught_on_the_first_pullback(monkeypatch):
    numba = pytest.importorskip("numba")

    @numba.njit
    def wrong_unbroadcast(g, like):
        return g * 1.5   # the shapes match here: only the value is wrong

    # branchy's products all sit inside larger expressions (numba fuses them
    # itself), so the adjoint's unbroadcast is what gets a wrong value here.
    _sabotage(monkeypatch, wrong_unbroadcast, "_nb_unbroadcast")
    rng = np.random.default_rng(10)
    v, a, b = rng.standard_normal(8), rng.uniform(0.5, 1.5, 8), rng.uniform(0.5, 1.5, 8)
    want_out, want_pullback = s2sgrad.vjp(branchy, v, a, b, 16, wrt=(0, 1))
    with pytest.warns(JitWarning, match="differs from the NumPy backend"):
        out, pullback = s2sgrad.vjp(branchy, v, a, b, 16, wrt=(0, 1), jit=True)
        got = pullback(1.0)
    assert out == want_out
    for g, w in zip(got, want_pullback(1.0)):
        np.testing.assert_array_equal(g, w)


def cell(params, h, x):
    (W, b), (U, c) = params
    h = np.tanh(W @ h + U @ x + b)
    return h * c


def cells(params, xs, weights):
    h = np.zeros(params[0][1].shape[0])
    for x in xs:
        h = cell(params, h, x)
    return np.sum(h * h) + np.sum(weights["w"] * h)


@pytest.mark.parametrize("small", [True, False])
def test_a_list_of_tuples_accumulated_in_a_loop_is_compiled_over_its_arrays(small):
    """jit=True's pair is compiled for arrays and numbers: the LSTM benchmark's list of
    (W, b) tuples, whose cotangent a loop accumulates, ran the NumPy backend (numba
    cannot type a list of arrays of two ranks) with a JitWarning. Written over its
    eight arrays (compiler.aggregates), the loss and its helper cell are code over
    arrays: numba compiles it, no warning; gradients (grad, a second call, vjp)
    against the NumPy backend's and differences (small)."""
    pytest.importorskip("numba")
    from benchmarks.workloads import lstm_helper
    params, xs, target = lstm_helper.make_inputs(small=small)
    f = lstm_helper.lstm_loss
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        got = s2sgrad.grad(f, jit=True)(params, xs, target)
        jit_wait()
        again = s2sgrad.grad(f, jit=True)(params, xs, target)
    assert isinstance(got, list) and all(isinstance(p, tuple) for p in got)
    assert s2sgrad.backends.jit_plan(f, params, xs, target).compile
    assert "lstm_cell" in s2sgrad.backends.jit_source(f, params, xs, target)
    want = s2sgrad.grad(f)(params, xs, target)
    _, pullback = s2sgrad.vjp(f, params, xs, target, wrt=0, jit=True)
    from_vjp = pullback(1.0)
    for i, pair in enumerate(params):
        for k, leaf in enumerate(pair):
            for g in (got, again, from_vjp):
                np.testing.assert_allclose(g[i][k], want[i][k], rtol=1e-12, atol=1e-14)
            if small:
                fd = leaf_differences(f, (params, xs, target), leaf)
                np.testing.assert_allclose(got[i][k], fd, rtol=1e-6, atol=1e-8)


@pytest.mark.filterwarnings("ignore:(?s).*type .reflected list.")
@pytest.mark.parametrize("hidden, inp", [(3, 2), (5, 4)])
def test_lists_tuples_and_dicts_of_arrays_under_jit(hidden, inp):
    """A list of (W, b) tuples and a dict: jit=True's gradient is NumPy's (against
    differences), compiled over their arrays without a warning."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(7)
    params = [(rng.standard_normal((hidden, hidden)) * 0.4, rng.standard_normal(hidden) * 0.1),
              (rng.standard_normal((hidden, inp)) * 0.4, rng.standard_normal(hidden))]
    xs, weights = rng.standard_normal((4, inp)), {"w": rng.standard_normal(hidden)}
    with warnings.catch_warnings():   # (written over their arrays: numba compiles it)
        warnings.simplefilter("error", JitWarning)
        got = s2sgrad.grad(cells, wrt=(0, 2), jit=True)(params, xs, weights)
    want = s2sgrad.grad(cells, wrt=(0, 2))(params, xs, weights)
    _, pullback = s2sgrad.vjp(cells, params, xs, weights, wrt=0, jit=True)
    from_vjp = pullback(1.0)
    for i, (W, b) in enumerate(params):
        for k, leaf in enumerate((W, b)):
            fd = leaf_differences(cells, (params, xs, weights), leaf)
            np.testing.assert_allclose(got[0][i][k], want[0][i][k], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(from_vjp[i][k], want[0][i][k], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(got[0][i][k], fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got[1]["w"], want[1]["w"], rtol=1e-12, atol=1e-14)


def damped_steps(x, a, *, steps=6, rate=0.3):
    for _ in range(steps):
        x = x - rate * np.sin(a * x)
    return np.sum(x * x)


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_keyword_only_parameters_under_jit(shape):
    """A keyword-only parameter's default was passed to the NumPy forward by position
    when jit=True built its variant (TypeError); given by name, or left to its
    default, the gradient is NumPy's (and the differences')."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(11)
    x, a = rng.uniform(-1, 1, shape), rng.uniform(0.5, 1.5, shape[-1:])
    for kwargs in ({}, {"steps": 3}, {"rate": 0.2, "steps": 4}):
        def f(x, a, kw=kwargs):
            return damped_steps(x, a, **kw)

        got = s2sgrad.grad(damped_steps, wrt=(0, 1), jit=True)(x, a, **kwargs)
        _, pullback = s2sgrad.vjp(damped_steps, x, a, wrt=(0, 1), jit=True)
        from_vjp = pullback(1.0)
        for i in range(2):
            fd = numeric_grad(f, [x, a], i)
            np.testing.assert_allclose(got[i], fd, rtol=1e-6, atol=1e-8)
            if not kwargs:
                np.testing.assert_allclose(from_vjp[i], fd, rtol=1e-6, atol=1e-8)


def rotated(x, n):
    s = 0.0
    for k in range(n):
        z = x * np.exp(1j * 0.3 * k)            # complex parts of a real variable's
        s = s + np.sum(np.real(z) ** 2)         # cotangent: _s2s_real_part
    return s


@pytest.mark.parametrize("n", [4, 7])
def test_the_real_part_of_a_complex_cotangent_compiles(monkeypatch, n):
    pytest.importorskip("numba")
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")
    x = np.linspace(-1.0, 1.0, n)
    assert "_s2s_real_part(" in s2sgrad.source(rotated, args=(x, 5))
    _check(rotated, (x, 5), 0)
    state = numba_backend.known_state(rotated, (0,))
    assert any(v.failed is None and v.check is None for v in state.variants.values())


def test_every_operator_and_numpy_call_the_rewrite_wraps_has_its_cached_function():
    """The rewrite writes `_nb_op_add(a, b)`, `_nb_np_sin(x)`; numba_helpers makes
    them from the one table both read (numba_names)."""
    from s2sgrad.backends import numba_helpers
    from s2sgrad.backends import numba_rewrite as rw
    ops = {*rw._BINOPS.values(), *rw._AUGOPS.values(), *rw._COMPARES.values(), "neg"}
    wanted = {"op_" + op for op in ops} | {"np_" + rw._NP_ALIASES.get(f, f)
                                            for f in rw._NP_WRAPPED} | \
        {"np_" + f for f in rw._NEW_ARRAYS}
    assert wanted <= set(numba_helpers.SPECIAL)
    a, b = np.array([1.0, -2.0, 3.0]), np.array([0.5, 0.5, 4.0])
    np.testing.assert_array_equal(numba_helpers.SPECIAL["op_div"](a, b), a / b)
    np.testing.assert_array_equal(numba_helpers.SPECIAL["np_clip"](a, 0.0, 2.0),
                                  np.clip(a, 0.0, 2.0))
    # (they share one code object: numba's cache on disk keeps them apart by name)
    for f in ("sin", "cos", "tan", "exp", "tanh", "sum", "max"):
        np.testing.assert_allclose(numba_helpers.SPECIAL["np_" + f](a), getattr(np, f)(a),
                                   rtol=1e-15)
    total = a.copy()
    assert numba_helpers.SPECIAL["op_iadd"](total, b) is total   # (in place, as `+=`)
    np.testing.assert_array_equal(total, a + b)


def test_the_rewrites_list_of_helpers_is_numba_helpers_stubs():
    """numba_rewrite.NUMBA_HELPERS (written out so that a call left to NumPy imports no
    numba) names exactly the runtime helpers numba_helpers gives a stub of."""
    from s2sgrad.backends import numba_helpers
    from s2sgrad.backends import numba_rewrite as rw
    from s2sgrad.runtime.registry import HELPERS
    derived = set(numba_helpers.STUBS) & set(HELPERS) - set(rw.OWN_HELPERS)
    assert rw.NUMBA_HELPERS == derived
