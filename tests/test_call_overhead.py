"""The per-call path and what the forward keeps: fewer steps, same gradients.

- `unbroadcast` is skipped where every other operand is a number (the result
  has the argument's shape), so a loop no longer keeps each iteration's
  temporary alive only to tell its shape;
- the seed of a small sum is filled without promotion when it can be;
- the value_and_grad fast path checks the pair's bindings in one flat loop
  (rebinding still recompiles: tests/test_rebinding.py covers the rest).
Every gradient is checked against central differences on two shapes.
"""
import numpy as np
import pytest
from conftest import check_vjp, numeric_grad

import s2sgrad
from benchmarks.workloads.branchy_loop import branchy  # the benchmark's own loop
from s2sgrad.runtime import expand_reduced

SOURCE = """
import numpy as np


def shifted(x, w):
    y = x * w - 0.5
    z = 2.0 + y
    return np.sum(np.sin(z) / 3.0)


def helper(x):
    return x * 2.0


def calls_helper(x):
    return np.sum(helper(x) ** 2)


def two_sums(a, b):
    s = (a + b).sum()
    p = np.max(a * b)
    return s + p * 2.0 - np.mean(a) / 3.0


def row_sums(x, scale=2.0):
    return np.exp(x).sum(axis=1) * scale


def row_sums_cubed(x, scale=2.0):
    return (x ** 3).sum(axis=1) * scale


def sums_in_a_loop(x, n):
    total = 0.0
    for _ in range(n):
        s = np.sum(np.sin(x))
        x = x * s + 0.5
        total = total + np.max(x) * s
    return total
"""


@pytest.fixture
def m(make_module):
    return make_module(SOURCE)


def test_loop_keeps_no_shape_witness_for_scalar_operands():
    text = s2sgrad.source(branchy, wrt=(0, 1, 2))
    forward = text.split("def branchy_adjoint")[0]
    # v * a - 0.1 and clip(v) * b + 0.1: the products' shapes are the results'
    assert "v_times_a_stack" not in forward
    assert "clip_v_times_b_stack" not in forward
    assert "_s2s_unbroadcast(v_bar, " not in text


@pytest.mark.parametrize("shapes", [((6,), (6,), (6,)), ((4, 3), (3,), (4, 1))])
def test_branchy_loop_gradient(shapes):
    rng = np.random.default_rng(7)
    v = rng.standard_normal(shapes[0])
    a = rng.uniform(0.5, 1.5, shapes[1])
    b = rng.uniform(0.5, 1.5, shapes[2])
    # keep entries away from the clip's kinks at +-1
    v = np.where(np.abs(np.abs(v) - 1.0) < 0.05, 0.5, v)
    check_vjp(branchy, (v, a, b, 5), wrt=(0, 1, 2))


@pytest.mark.parametrize("shapes", [((5,), (5,)), ((3, 4), (4,)), ((4,), (2, 4))])
def test_scalar_operands_keep_broadcast_undone(m, shapes):
    """Where the other operand is an array, the broadcast is still undone."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_vjp(m.shifted, (x, w), wrt=(0, 1))


def test_python_float_operands(m):
    grads = s2sgrad.grad(m.shifted, wrt=(0, 1))(0.3, 1.7)
    for i in (0, 1):
        assert grads[i] == pytest.approx(numeric_grad(m.shifted, [0.3, 1.7], i), rel=1e-7)


@pytest.mark.parametrize("shape", [(5,), (3, 4)])
def test_an_int_argument_keeps_the_plain_path(m, shape):
    """A step count given as an int is a leaf like a float: the call takes the plain
    path (no look at structures, functions or other libraries' arrays), and the
    pair made for one count gives the right gradient at another."""
    from s2sgrad.arguments import call_kind
    x = np.random.default_rng(4).standard_normal(shape) * 0.3
    assert call_kind(m.sums_in_a_loop, (x, 3), (0,))[1] is None
    assert call_kind(m.sums_in_a_loop, (0.5, 3), (0,))[1] is None
    assert call_kind(m.sums_in_a_loop, (x, True), (0,))[1] is not None   # (a bool is not)
    g = s2sgrad.grad(m.sums_in_a_loop)
    for n in (1, 3):
        np.testing.assert_allclose(g(x, n), numeric_grad(m.sums_in_a_loop, [x, n], 0),
                                   rtol=1e-6, atol=1e-8)
    assert g(0.5, 2) == pytest.approx(numeric_grad(m.sums_in_a_loop, [0.5, 2], 0), rel=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(5,), (3, 2)])
def test_expand_reduced_small_seed(dtype, shape):
    x = np.ones(shape, dtype=dtype)
    out = expand_reduced(1.0, x)
    assert out.shape == shape and out.dtype == np.result_type(1.0, dtype)
    assert np.all(out == 1.0)
    out[...] = 0.0  # a fresh array: writing it touches nothing else
    assert np.all(expand_reduced(2.5, x) == 2.5)
    g = expand_reduced(np.float32(2.0), np.ones(shape))
    assert g.dtype == np.float64 and np.all(g == 2.0)


def test_expand_reduced_large_is_a_view():
    g = expand_reduced(1.0, np.ones(10_000))
    assert g.shape == (10_000,) and g.strides == (0,)


def test_fast_path_sees_a_rebound_callee(m):
    vg = s2sgrad.value_and_grad(m.calls_helper)
    x = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(vg(x)[1], 8.0 * x)  # d/dx sum((2x)^2) = 8x
    m.helper = lambda x: x * 3.0
    value, grad = vg(x)
    assert value == pytest.approx(np.sum((3.0 * x) ** 2))
    np.testing.assert_allclose(grad, 18.0 * x)
    np.testing.assert_allclose(grad, numeric_grad(m.calls_helper, [x], 0), rtol=1e-7)


def test_bad_arguments_are_still_refused(m):
    g = s2sgrad.grad(m.shifted)
    with pytest.raises(TypeError, match="dtype int"):
        g(np.array([1, 2]), np.ones(2))
    with pytest.raises(TypeError, match="only 1 positional"):
        s2sgrad.grad(m.shifted, wrt=1)(np.ones(2))


def test_full_reductions_need_no_shape_witness(m):
    text = s2sgrad.source(m.two_sums, wrt=(0, 1))
    adjoint = text.split("def two_sums_adjoint")[1]
    blocks = adjoint.split("# line ")
    last_line = next(b for b in blocks if "return s + p * 2.0" in b.splitlines()[0])
    assert "_s2s_unbroadcast" not in last_line, adjoint
    assert "_s2s_meta(s)" not in text and "_s2s_meta(p)" not in text


@pytest.mark.parametrize("shapes", [((5,), (5,)), ((2, 3), (3,))])
def test_full_reduction_gradients(m, shapes):
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_vjp(m.two_sums, (a, b), wrt=(0, 1))
    check_vjp(m.sums_in_a_loop, (a * 0.3, 3), wrt=(0,))



@pytest.mark.parametrize("shape, axis", [((3, 4), 1), ((3, 4), 0), ((3, 4), -1),
                                         ((2, 3, 4), 1), ((200, 30), 1)])
def test_expand_reduced_along_an_axis(shape, axis):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    g = rng.standard_normal(np.sum(x, axis=axis).shape)
    want = np.broadcast_to(np.expand_dims(g, axis), shape)
    got = expand_reduced(g, x, axis=axis)
    assert got.shape == shape and got.dtype == g.dtype
    np.testing.assert_array_equal(got, want)
    kept = expand_reduced(np.expand_dims(g, axis), x, axis=axis, keepdims=True)
    np.testing.assert_array_equal(kept, want)


@pytest.mark.parametrize("shape", [(3, 4), (50, 100)])
def test_vjp_of_a_row_sum(m, shape):
    rng = np.random.default_rng(1)
    check_vjp(m.row_sums, (rng.standard_normal(shape) * 0.5,), wrt=(0,))


def test_vjp_fast_path_follows_code_defaults_and_names(m):
    x = np.array([[0.1, -0.2, 0.3], [0.5, 0.0, -1.0]])
    v = np.array([1.0, -2.0])
    _, pullback = s2sgrad.vjp(m.row_sums, x)
    np.testing.assert_allclose(pullback(v)[0], 2.0 * v[:, None] * np.exp(x))
    m.row_sums.__defaults__ = (3.0,)
    _, pullback = s2sgrad.vjp(m.row_sums, x)
    np.testing.assert_allclose(pullback(v)[0], 3.0 * v[:, None] * np.exp(x))
    m.row_sums.__code__ = m.row_sums_cubed.__code__
    _, pullback = s2sgrad.vjp(m.row_sums, x)
    np.testing.assert_allclose(pullback(v)[0], 3.0 * v[:, None] * 3.0 * x ** 2)
    y = np.array([1.0, -2.0, 0.5])
    _, pullback = s2sgrad.vjp(m.calls_helper, y)
    np.testing.assert_allclose(pullback(1.0)[0], 8.0 * y)
    m.helper = lambda x: x * 3.0            # a name the pair was generated for
    _, pullback = s2sgrad.vjp(m.calls_helper, y)
    np.testing.assert_allclose(pullback(1.0)[0], 18.0 * y)


def test_a_loop_keeps_one_shared_description_per_shape_not_an_array_per_step():
    """What the adjoint keeps of a value it reads only for its shape is the one
    ArrayMeta of that shape and dtype: a loop that keeps one per step holds a
    pointer per step (small arrays were once kept whole), and the gradient is the
    same (against differences, on two shapes)."""
    from conftest import check_vjp

    from s2sgrad.runtime import ArrayMeta, meta
    a, b = np.ones(8), np.zeros(8)
    assert meta(a) is meta(b) and isinstance(meta(a), ArrayMeta)
    assert meta(np.ones(8, dtype=np.float32)) is not meta(a)
    assert meta(2.5) == 2.5 and meta([a]) == [a]
    # ... and the zero cotangent of a structure's items: one read-only view per shape
    zeros = s2sgrad.runtime.zeros_like([a, (b, np.ones((2, 2)))])
    assert zeros[0] is zeros[1][0] and not zeros[0].flags.writeable
    assert zeros[1][1].shape == (2, 2) and not np.any(zeros[1][1])

    def steps(y, W):
        for _ in range(5):
            k = np.tanh(W @ y)
            y = y + 0.1 * k * 0.5
        return np.sum(y ** 2)
    for n in (3, 8):
        rng = np.random.default_rng(n)
        check_vjp(steps, [rng.standard_normal(n), rng.standard_normal((n, n)) * 0.5])
