"""`grad(f)` and `value_and_grad(f)` pickle by reference to f and their options, as
a module-level function does: a multiprocessing pool or a Dask worker can run them."""
import multiprocessing
import pickle
import sys

import numpy as np
import pytest
from conftest import import_source

import s2sgrad

SOURCE = '''
import numpy as np


def loss(w, x):
    return np.sum(np.tanh(x @ w) ** 2)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    """A module other processes can import too (its folder is on sys.path, which a
    spawned process inherits)."""
    folder = tmp_path_factory.mktemp("pickled")
    sys.path.insert(0, str(folder))
    try:
        yield import_source(folder, "s2s_pickled_loss", SOURCE)
    finally:
        sys.path.remove(str(folder))


def _numeric(f, w, x, eps=1e-6):
    steps = [e.reshape(w.shape) * eps for e in np.eye(w.size)]
    return np.array([(f(w + d, x) - f(w - d, x)) / (2 * eps)
                     for d in steps]).reshape(w.shape)


@pytest.mark.parametrize("shape", [(3,), (3, 2)])
def test_a_pickled_gradient_computes_the_same(m, shape, rng):
    w, x = rng.standard_normal(shape), rng.standard_normal((4, 3))
    g = s2sgrad.grad(m.loss)
    again = pickle.loads(pickle.dumps(g))
    np.testing.assert_allclose(again(w, x), _numeric(m.loss, w, x), rtol=1e-6, atol=1e-8)
    vg = pickle.loads(pickle.dumps(s2sgrad.value_and_grad(m.loss, wrt=(0, 1))))
    value, (gw, gx) = vg(w, x)
    assert value == pytest.approx(m.loss(w, x))
    np.testing.assert_allclose(gw, _numeric(m.loss, w, x), rtol=1e-6, atol=1e-8)
    assert gx.shape == x.shape
    assert again.__name__ == "grad_loss" and "loss" in repr(again)


def test_a_gradient_runs_in_a_spawned_pool(m, rng):
    w, x = rng.standard_normal(3), rng.standard_normal((4, 3))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        (got,) = pool.starmap_async(s2sgrad.grad(m.loss), [(w, x)]).get(timeout=120)
    np.testing.assert_allclose(got, _numeric(m.loss, w, x), rtol=1e-6, atol=1e-8)


def test_a_gradient_of_a_lambda_does_not_pickle():
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(s2sgrad.grad(lambda v: np.sum(v ** 2)))


def test_derivatives_of_the_pickled_callable_still_compile(m, rng):
    w, x = rng.standard_normal(3), rng.standard_normal((4, 3))
    g = pickle.loads(pickle.dumps(s2sgrad.grad(m.loss)))
    second = s2sgrad.grad(lambda v: np.sum(g(v, x) ** 2))(w)
    expected = np.array([(np.sum(g(w + 1e-6 * e, x) ** 2) - np.sum(g(w - 1e-6 * e, x) ** 2))
                         / 2e-6 for e in np.eye(3)])
    np.testing.assert_allclose(second, expected, rtol=1e-5, atol=1e-7)
