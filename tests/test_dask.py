"""The same gradients on Dask arrays: lazy, chunked like the input, equal to NumPy's.

Each case is checked twice: the NumPy gradient against central finite
differences (float64, two shapes, one broadcasting), and the Dask gradient
against that NumPy gradient, with a scheduler that counts every computation so
that building the gradient provably computes nothing.
"""
import contextlib

import numpy as np
import pytest
from conftest import import_source, numeric_vjp

import s2sgrad
from s2sgrad import functional, optimizer_check

da = pytest.importorskip("dask.array", reason="the dask extra is not installed")
dask = pytest.importorskip("dask")

CASES = '''
import numpy as np
import s2sgrad


def elementwise(x, b):
    y = np.tanh(x * b) + np.exp(-x ** 2) * np.sin(b)
    return np.sum(y * y) + 0.5 * np.mean(np.log1p(x * x))


def mlp(x, W1, W2):
    h = np.tanh(x @ W1)
    out = h @ W2
    return np.sum(out ** 2) / x.shape[0]


def rnn(W, U, h, xs):
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ xs[t, :])   # (xs[t] is not valid on array-API arrays)
    return np.sum(h ** 2)


def reductions(x, y):
    return np.max(x, axis=0) @ np.min(y, axis=1) + np.sum(np.std(x, axis=1)) + np.max(x)


def branches(x, y):
    return np.sum(np.where(x > 0.0, x * y, -x)) + np.sum(np.maximum(x, 0.2 * y))


def reshaped(x, y):
    z = x.reshape(-1) * 2.0
    return np.sum(z ** 3) + np.sum(x.T @ y)


class Softplus(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.log1p(np.exp(x))

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return g / (1.0 + np.exp(-x))


def custom(x, w):
    s = 0.0
    for k in range(3):
        s = s + np.sum(Softplus.apply(x * w + k))
    return s


def written(x, y):
    z = x * 2.0
    z[0] = y[1] ** 2
    z[1:] += x[:-1] * y[0]
    return np.sum(z ** 2)


def scaled(x, s):
    return s * np.sum(x ** 2)


def unsupported(x):
    return np.sum(np.sort(x) * x)


def sorted_by_size(x):
    weights = np.log(1.0 + np.arange(1.0, 1.0 + x.shape[0]) ** 2)
    return np.dot(sorted(x, key=abs), weights) + np.sum(np.cos(x))


def on_value(x):
    if np.sum(x) > 0:
        return np.sum(x ** 2)
    return np.sum(x)


def vector(x, W):
    return np.tanh(W @ x) * 2.0, x * x
'''

# name -> argument shapes: two sets per case, the second broadcasting where it can.
SHAPES = {
    "elementwise": [[(6, 4), (6, 4)], [(6, 4), (4,)]],
    "mlp": [[(8, 3), (3, 5), (5, 2)], [(6, 4), (4, 4), (4, 1)]],
    "rnn": [[(4, 4), (4, 3), (4,), (5, 3)], [(3, 3), (3, 2), (3,), (4, 2)]],
    "reductions": [[(4, 6), (6, 5)], [(3, 3), (3, 2)]],
    "branches": [[(6, 4), (6, 4)], [(6, 4), (4,)]],
    "reshaped": [[(4, 3), (4, 2)], [(6, 2), (6, 5)]],
    "custom": [[(7,), (7,)], [(3, 5), (5,)]],
    "written": [[(6,), (6,)], [(5,), (5,)]],
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("dask"), "dask_cases", CASES)


@contextlib.contextmanager
def no_compute():
    """Fails the test if anything is computed inside (a scheduler that counts).

    Not in the optimizer check mode (S2SGRAD_CHECK_OPTIMIZER=1): there every
    gradient is compared with the plain transform's as it is made, which computes
    both; laziness is the default run's to check."""
    calls = []
    if optimizer_check.ENABLED:
        yield calls
        return

    def counting(*args, **kwargs):
        calls.append(1)
        return dask.get(*args, **kwargs)
    with dask.config.set(scheduler=counting):
        yield calls
    assert not calls, f"the gradient computed {len(calls)} time(s) while it was built"


def chunked(a):
    return da.from_array(a, chunks=tuple(max(1, (n + 1) // 2) for n in a.shape))


def draw(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) * 0.7 for s in shapes]


def checked_numpy_gradient(cases, name, k):
    """(args, wrt, value, gradient) of case `name` on its k-th shapes, the NumPy
    gradient checked against central differences: what other libraries must match."""
    fn = getattr(cases, name)
    args = draw(SHAPES[name][k], seed=k)
    wrt = tuple(range(len(args)))
    out, pullback = s2sgrad.vjp(fn, *args, wrt=wrt)
    expected = pullback(1.0)
    for i in wrt:
        np.testing.assert_allclose(expected[i], numeric_vjp(fn, list(args), 1.0, i),
                                   rtol=1e-6, atol=1e-7)
    return args, wrt, out, expected


def gradient_on_library_equals_numpys(cases, name, k, convert, back, kind):
    """The gradient of case `name` on another library's arrays (`convert` makes them
    from NumPy's, `back` reads them): of their kind, shape, dtype and device, and
    equal to the NumPy gradient. (CuPy's and the strict stand-in's cases.)"""
    fn = getattr(cases, name)
    args, wrt, value, expected = checked_numpy_gradient(cases, name, k)
    converted = [convert(a) for a in args]
    got, grads = s2sgrad.value_and_grad(fn, wrt=wrt)(*converted)
    np.testing.assert_allclose(float(got), value, rtol=1e-10)
    for g, a, e in zip(grads, converted, expected):
        assert isinstance(g, kind) and g.shape == a.shape and g.dtype == a.dtype, type(g)
        assert getattr(g, "device", None) == getattr(a, "device", None)
        np.testing.assert_allclose(back(g), e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name, k", [(n, k) for n in SHAPES for k in range(2)])
def test_gradient_on_dask_is_lazy_chunked_and_equal_to_numpy(cases, name, k):
    fn = getattr(cases, name)
    args, wrt, out, expected = checked_numpy_gradient(cases, name, k)
    # The Dask gradient: built without computing, then equal to NumPy's.
    dargs = [chunked(a) for a in args]
    with no_compute():
        value, grads = s2sgrad.value_and_grad(fn, wrt=wrt)(*dargs)
    assert isinstance(value, da.Array)
    np.testing.assert_allclose(value.compute(), out, rtol=1e-12)
    for g, d, e in zip(grads, dargs, expected):
        assert isinstance(g, da.Array), type(g)
        assert g.chunks == d.chunks and g.dtype == d.dtype
        np.testing.assert_allclose(g.compute(), e, rtol=1e-10, atol=1e-12)


def test_functional_vjp_on_dask(cases):
    x, W = draw([(4,), (3, 4)])
    v = (np.ones(3), np.arange(4.0))
    out, expected = functional.vjp(cases.vector, (x, W), v)
    for i in range(2):
        np.testing.assert_allclose(expected[i], numeric_vjp(cases.vector, [x, W], v, i),
                                   rtol=1e-6, atol=1e-7)
    dx, dW = chunked(x), chunked(W)
    dv = (chunked(v[0]), chunked(v[1]))
    with no_compute():
        dout, grads = functional.vjp(cases.vector, (dx, dW), dv)
    assert all(isinstance(o, da.Array) for o in dout)
    for g, d, e in zip(grads, (dx, dW), expected):
        assert isinstance(g, da.Array) and g.chunks == d.chunks
        np.testing.assert_allclose(g.compute(), e, rtol=1e-10)


def test_vjp_pullback_on_dask(cases):
    x, W = draw([(5,), (2, 5)], seed=3)
    out, pullback = s2sgrad.vjp(cases.vector, x, W)
    expected = pullback((np.ones(2), np.ones(5)))
    with no_compute():
        dout, dpullback = s2sgrad.vjp(cases.vector, chunked(x), chunked(W))
        grads = dpullback((da.ones(2, chunks=1), da.ones(5, chunks=3)))
    for g, e in zip(grads, expected):
        assert isinstance(g, da.Array)
        np.testing.assert_allclose(g.compute(), e, rtol=1e-10)


def test_a_python_float_beside_a_dask_array_gets_a_lazy_gradient(cases):
    x = draw([(6,)])[0]
    gx, gs = s2sgrad.grad(cases.scaled, wrt=(0, 1))(x, 1.5)
    np.testing.assert_allclose(gs, np.sum(x ** 2))
    with no_compute():
        dgx, dgs = s2sgrad.grad(cases.scaled, wrt=(0, 1))(chunked(x), 1.5)
    assert isinstance(dgs, da.Array) and dgs.ndim == 0
    np.testing.assert_allclose(dgs.compute(), gs)
    np.testing.assert_allclose(dgx.compute(), gx)


def test_a_function_dask_does_not_implement_is_a_clear_error(cases):
    x = chunked(draw([(6,)])[0])
    with pytest.raises(TypeError, match=r"numpy\.sort is not implemented by Dask arrays"):
        s2sgrad.grad(cases.unsupported)(x)


def test_a_condition_on_a_dask_value_computes_that_scalar_only(cases):
    for sign in (1.0, -1.0):
        x = sign * (np.abs(draw([(6,)])[0]) + 0.1)
        expected = s2sgrad.grad(cases.on_value)(x)
        np.testing.assert_allclose(expected, 2 * x if sign > 0 else np.ones(6))
        g = s2sgrad.grad(cases.on_value)(chunked(x))
        assert isinstance(g, da.Array)
        np.testing.assert_allclose(g.compute(), expected)


def test_sorted_over_a_dask_vector_gives_a_dask_gradient(cases):
    # (a fuzz finding: the cotangent of sorted() over a Dask array was a list, and
    # adding it to the array's other cotangent raised InternalError)
    for n in (3, 6):
        x = draw([(n,)], seed=n)[0]
        expected = s2sgrad.grad(cases.sorted_by_size)(x)
        np.testing.assert_allclose(expected, numeric_vjp(cases.sorted_by_size, [x], 1.0, 0),
                                   rtol=1e-6, atol=1e-7)
        g = s2sgrad.grad(cases.sorted_by_size)(chunked(x))
        assert isinstance(g, da.Array) and g.shape == x.shape
        np.testing.assert_allclose(g.compute(), expected, rtol=1e-12)


@pytest.mark.skipif(optimizer_check.ENABLED, reason="the optimizer check mode compares "
                    "every gradient whole as it is made: 8 GB here (laziness is this test's "
                    "subject, and the default run checks it)")
def test_a_billion_element_gradient_is_a_graph_until_one_chunk_is_computed(cases):
    x = da.full(10 ** 9, 0.5, chunks=10 ** 7)          # 8 GB if it were ever made
    with no_compute():
        g = s2sgrad.grad(cases.elementwise, wrt=0)(x, 1.25)
    assert isinstance(g, da.Array) and g.shape == x.shape and g.chunks == x.chunks
    block = g.blocks[3].compute()                     # one chunk: 80 MB
    assert block.shape == (10 ** 7,)
    # d/dx of tanh(1.25x)^2 + 2 tanh(1.25x) e^{-x^2} sin(1.25) + e^{-2x^2} sin(1.25)^2
    # + 0.5 log1p(x^2) / n, at x = 0.5, by central differences of the scalar formula.
    n = 10 ** 9

    def term(t):
        y = np.tanh(t * 1.25) + np.exp(-t ** 2) * np.sin(1.25)
        return y * y + 0.5 * np.log1p(t * t) / n
    h = 1e-6
    expected = (term(0.5 + h) - term(0.5 - h)) / (2 * h)
    np.testing.assert_allclose(block, expected, rtol=1e-6)


def test_distributed_example_fits_on_a_local_cluster_and_agrees_with_the_hand_gradient():
    import os
    import subprocess
    import sys
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(root, "examples",
                                                        "distributed_logistic.py"),
                           "--rows", "4e5", "--chunk-rows", "5e4", "--iterations", "3",
                           "--repeat", "1", "--memory", "400MiB"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agrees with the hand-written one" in proc.stdout
    before, after = (float(t) for t in
                     proc.stdout.split("L-BFGS-B: loss ")[1].split(" in ")[0].split(" -> "))
    assert before == pytest.approx(np.log(2.0), abs=1e-4) and after < before - 0.1, proc.stdout
