"""np.linalg.lstsq and scipy.spatial.distance (cdist, pdist, squareform) in the code
scientists write with them: kernels of point sets, least-squares fits inside a
function. Each rule's own cases (tests/rule_cases.py) run through every order and
mode; these are whole programs, against central differences on two shapes each,
and the metrics s2sgrad does not differentiate, which must raise, never give zeros.
"""
import numpy as np
import pytest
from conftest import assert_grads_match_differences, numeric_grad

import s2sgrad
from s2sgrad import functional

pytest.importorskip("scipy.spatial")

SOURCE = '''
import numpy as np
from scipy.spatial import distance


def kernel_fit(X, Z, ell):
    K = np.exp(-distance.cdist(X, Z, "sqeuclidean") / ell)
    return np.sum(K @ np.linspace(1.0, 2.0, Z.shape[0])) + np.sum(np.sin(K))


def energy(X):
    d = distance.pdist(X)
    return np.sum(1.0 / d) + np.sum(distance.squareform(d) ** 2) * 0.1


def rough_kernel(X):
    return np.sum(np.exp(-distance.cdist(X, X, "minkowski", p=1.5)))


def cosine_spread(X, Y):
    return np.sum(distance.cdist(X, Y, metric="cosine") ** 2)


def fitted(t, y, degree):
    A = np.stack([t ** k for k in range(degree + 1)], axis=1)
    coef, residuals, rank, sv = np.linalg.lstsq(A, y, rcond=None)
    return np.sum(coef ** 2) + np.sum(residuals) + 0.1 * np.sum(sv)


def min_norm(A, b):
    x = np.linalg.lstsq(A, b)[0]
    return np.sum(np.tanh(x))


def gp_evidence(x):
    X = np.stack([x, x ** 2 + 0.3], axis=1)
    K = np.exp(-0.5 * distance.cdist(X, X, "sqeuclidean")) + 0.1 * np.eye(x.size)
    L = np.linalg.cholesky(K)
    y = np.sin(np.arange(x.size))
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return 0.5 * y @ alpha + np.sum(np.log(np.diag(L)))


def poly_smooth(t, y):
    c = np.polyfit(t, y, 3)
    return np.sum(np.polyval(c, t) ** 2) + np.sum(c ** 2)


def fit_slope(t, y):
    return np.polyfit(t, np.sin(y) * t, 1)[0]


def weighted_fit(t, y):
    return np.sum(np.polyfit(t, y, 1, w=np.ones_like(t)))


def hamming(X, Y):
    return np.sum(distance.cdist(X, Y, "hamming"))


def weighted(X, Y):
    return np.sum(distance.cdist(X, Y, "minkowski", p=3, w=np.ones(X.shape[1])))


def below_one(X, Y):
    return np.sum(distance.cdist(X, Y, "minkowski", p=0.5))
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    from conftest import import_source
    return import_source(tmp_path_factory.mktemp("distances"), "s2s_distances_case", SOURCE)


def _points(rng, *shape):
    return rng.standard_normal(shape) * 1.5


@pytest.mark.parametrize("witness", [True, False])
@pytest.mark.parametrize("n, k, dim", [(4, 3, 2), (6, 2, 3)])
def test_kernel_of_two_point_sets(m, rng, n, k, dim, witness):
    X, Z = _points(rng, n, dim), _points(rng, k, dim)
    assert_grads_match_differences(m.kernel_fit, [X, Z, 2.5], (0, 1, 2), rtol=1e-5,
                                   atol=1e-7, witness=witness)


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize("n, dim", [(4, 2), (5, 3)])
def test_pairwise_energy(m, rng, n, dim, optimize):
    assert_grads_match_differences(m.energy, [_points(rng, n, dim)], (0,), rtol=1e-5,
                                   atol=1e-7, optimize=optimize)


@pytest.mark.parametrize("n, dim", [(3, 2), (4, 3)])
def test_cdist_of_a_set_with_itself_has_finite_second_derivatives(m, rng, n, dim):
    # The diagonal of cdist(X, X) is 0: a kink of |d| ** (p - 1) with p < 2, where the
    # chain rule gives 0 * inf = nan unless the rule says 0 there.
    X, v = _points(rng, n, dim), rng.standard_normal((n, dim))
    assert_grads_match_differences(m.rough_kernel, [X], (0,), rtol=1e-5, atol=1e-7)
    grad = s2sgrad.grad(m.rough_kernel)
    eps = 1e-5
    expected = (grad(X + eps * v) - grad(X - eps * v)) / (2 * eps)
    for product in (functional.hvp, functional.vhp):   # forward over reverse, and reverse
        _, hv = product(m.rough_kernel, X, v)
        assert np.all(np.isfinite(hv)), product.__name__
        np.testing.assert_allclose(hv, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("shapes", [((3, 4), (2, 4)), ((4, 2), (4, 2))])
def test_cosine_distances(m, rng, shapes):
    X, Y = (_points(rng, *s) for s in shapes)
    assert_grads_match_differences(m.cosine_spread, [X, Y], (0, 1), rtol=1e-5, atol=1e-7)
    # forward mode, along a random direction
    v = rng.standard_normal(X.shape)
    _, t = functional.jvp(lambda a: m.cosine_spread(a, Y), X, v)
    np.testing.assert_allclose(t, np.sum(numeric_grad(m.cosine_spread, [X, Y], 0) * v),
                               rtol=1e-5)


@pytest.mark.parametrize("witness", [True, False])
@pytest.mark.parametrize("points, degree", [(6, 2), (9, 3)])
def test_least_squares_fit(m, rng, points, degree, witness):
    t = np.linspace(-1.0, 1.0, points) + 0.05 * rng.standard_normal(points)
    y = np.cos(2.0 * t) + 0.1 * rng.standard_normal(points)
    assert_grads_match_differences(lambda t, y: m.fitted(t, y, degree), [t, y], (0, 1),
                                   rtol=1e-5, atol=1e-7, witness=witness)


@pytest.mark.parametrize("a_shape, b_shape", [((2, 4), (2,)), ((3, 5), (3, 2))])
def test_minimum_norm_solution_of_an_underdetermined_system(m, rng, a_shape, b_shape):
    A, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    assert_grads_match_differences(m.min_norm, [A, b], (0, 1), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name, match", [("hamming", "hamming"), ("weighted", "weights"),
                                         ("below_one", "p=0.5")])
def test_metrics_without_a_gradient_raise(m, rng, name, match):
    X, Y = _points(rng, 3, 2), _points(rng, 2, 2)
    fn = getattr(m, name)
    with pytest.raises(NotImplementedError, match=match):
        s2sgrad.grad(fn)(X, Y)
    with pytest.raises(NotImplementedError, match=match):
        functional.jvp(lambda a: fn(a, Y), X, np.ones_like(X))


@pytest.mark.parametrize("n", [4, 6])
def test_float32_points(m, rng, n):
    # SciPy computes distances in float64 whatever the points' dtype; so do the rules
    # (forward mode in float32 disagreed with reverse mode in the witness's check).
    x = rng.uniform(0.2, 1.2, n)
    assert_grads_match_differences(m.gp_evidence, [x], (0,), rtol=1e-5, atol=1e-7)
    for seed in range(5):
        x32 = np.random.default_rng(seed).uniform(0.2, 1.2, n).astype(np.float32)
        g32 = s2sgrad.grad(m.gp_evidence, witness="always")(x32)
        assert g32.dtype == np.float32
        np.testing.assert_allclose(g32, s2sgrad.grad(m.gp_evidence)(x32.astype(np.float64)),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("witness", [True, False])
@pytest.mark.parametrize("name", ["poly_smooth", "fit_slope"])
@pytest.mark.parametrize("points", [6, 9])
def test_polynomial_fits(m, rng, name, points, witness):
    t = np.linspace(-1.0, 1.0, points) + 0.05 * rng.standard_normal(points)
    y = np.cos(2.0 * t)
    assert_grads_match_differences(getattr(m, name), [t, y], (0, 1), rtol=1e-5, atol=1e-7,
                                   witness=witness)


def test_a_weighted_fit_raises(m):
    t = np.linspace(0.0, 1.0, 4)
    with pytest.raises(NotImplementedError, match="w="):
        s2sgrad.grad(m.weighted_fit)(t, t ** 2)
