"""NumPy arrays beside Dask arrays in one call are lifted to single-chunk Dask arrays:
the whole gradient stays lazy (nothing is computed until asked), and equals NumPy's."""
import numpy as np
import pytest

import s2sgrad
from s2sgrad import optimizer_check

da = pytest.importorskip("dask.array", reason="the dask extra is not installed")
dask = pytest.importorskip("dask")

CASES = '''
import numpy as np


def logistic(w, X, y):
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    return np.mean((p - y) ** 2)


def layers(params, X):
    h = X
    for W, b in params:
        h = np.tanh(h @ W + b)
    return np.sum(h ** 2)
'''


class Counting:
    """A scheduler that counts every computation."""

    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return dask.get(*args, **kwargs)


@pytest.fixture
def cases(make_module):
    return make_module(CASES)


def data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((40, 3))
    return rng.standard_normal(3), X, rng.uniform(size=40)


@pytest.mark.skipif(optimizer_check.ENABLED, reason="the optimizer check computes both pairs")
def test_numpy_parameters_beside_dask_data_give_a_lazy_gradient(cases):
    w, X, y = data()
    expected = s2sgrad.grad(cases.logistic, wrt=(0, 2))(w, X, y)
    Xd = da.from_array(X, chunks=(10, 3))
    counting = Counting()
    with dask.config.set(scheduler=counting):
        gw, gy = s2sgrad.grad(cases.logistic, wrt=(0, 2))(w, Xd, y)
        value, g = s2sgrad.value_and_grad(cases.logistic)(w, Xd, y)
        out, pullback = s2sgrad.vjp(cases.logistic, w, Xd, y, wrt=0)
        pulled = pullback(1.0)
        assert counting.calls == 0, f"computed {counting.calls} time(s) while building"
    for lazy in (gw, gy, value, g, out, pulled):
        assert isinstance(lazy, da.Array), type(lazy)
    assert gw.chunks == ((3,),) and gy.chunks == ((40,),)   # one chunk each
    with dask.config.set(scheduler=counting):
        got = dask.compute(gw, gy, g, pulled)
    assert counting.calls == 1   # everything in one pass
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-12)
    np.testing.assert_allclose(got[2], expected[0], rtol=1e-12)
    np.testing.assert_allclose(got[3], expected[0], rtol=1e-12)


@pytest.mark.skipif(optimizer_check.ENABLED, reason="the optimizer check computes both pairs")
def test_numpy_arrays_in_a_structure_are_lifted_too(cases):
    rng = np.random.default_rng(1)
    params = [(rng.standard_normal((3, 4)), np.zeros(4)), (rng.standard_normal((4, 2)),
                                                           np.zeros(2))]
    X = rng.standard_normal((8, 3))
    expected = s2sgrad.grad(cases.layers)(params, X)
    counting = Counting()
    with dask.config.set(scheduler=counting):
        grads = s2sgrad.grad(cases.layers)(params, da.from_array(X, chunks=(4, 3)))
        assert counting.calls == 0
    for (gW, gb), (eW, eb) in zip(grads, expected):
        assert isinstance(gW, da.Array) and isinstance(gb, da.Array)
        np.testing.assert_allclose(gW.compute(), eW, rtol=1e-12)
        np.testing.assert_allclose(gb.compute(), eb, rtol=1e-12)


def test_all_numpy_calls_are_left_alone(cases):
    w, X, y = data()
    g = s2sgrad.grad(cases.logistic)(w, X, y)
    assert type(g) is np.ndarray
    from s2sgrad.backends.array_api import lift_beside_dask
    args = (w, X, 2.0)
    assert lift_beside_dask(args) is args
    lifted = lift_beside_dask((w, da.from_array(X), np.arange(3), [w]))
    assert isinstance(lifted[0], da.Array) and isinstance(lifted[3][0], da.Array)
    assert type(lifted[2]) is np.ndarray   # integers are indices, not values: kept
