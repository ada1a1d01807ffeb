"""scipy.linalg.solve (each assume_a reads its own part of the matrix), lstsq, pinv and
block_diag inside whole programs, against central differences on two shapes; and the
options s2sgrad does not differentiate, which raise instead of giving a gradient."""
import numpy as np
import pytest
from conftest import assert_grads_match_differences, import_source

import s2sgrad
from s2sgrad import functional

pytest.importorskip("scipy.linalg")

SOURCE = '''
import numpy as np
import scipy.linalg


def newton_energy(x, k):
    H = np.outer(x, x) + k * np.eye(x.size)
    step = scipy.linalg.solve(H, np.sin(x), assume_a="pos")
    return np.sum((x - step) ** 2)


def upper_read(A, b):
    # assume_a='sym' reads the upper triangle: the lower one has no gradient
    return np.sum(np.tanh(scipy.linalg.solve(A, b, assume_a="sym")))


def transposed_triangle(A, b):
    return np.sum(scipy.linalg.solve(A, b, assume_a="lower triangular", transposed=True) ** 2)


def fit(t, y):
    A = np.stack([np.ones_like(t), t, t * t], axis=1)
    coef, residues, rank, sv = scipy.linalg.lstsq(A, y)
    return np.sum(coef ** 2) + residues + np.sum(scipy.linalg.pinv(A) ** 2)


def blocks(a, b):
    M = scipy.linalg.block_diag(np.outer(a, a), b, 2.0)
    return np.sum(np.sin(M) * np.arange(M.size).reshape(M.shape))


def banded(A, b):
    return np.sum(scipy.linalg.solve(A, b, assume_a="banded"))


def batched(A, b):
    return np.sum(scipy.linalg.solve(A, b))


def ranked(A):
    P, rank = scipy.linalg.pinv(A, return_rank=True)
    return np.sum(np.sin(P)) * rank
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("scipy_linalg"), "s2s_scipy_linalg_case",
                         SOURCE)


def _well(rng, n):
    return rng.standard_normal((n, n)) + 3.0 * np.eye(n)


@pytest.mark.parametrize("witness", [True, False])
@pytest.mark.parametrize("n", [3, 5])
def test_newton_step_with_a_positive_definite_solve(m, rng, n, witness):
    assert_grads_match_differences(m.newton_energy, [rng.standard_normal(n), 2.0], (0, 1),
                                   rtol=1e-5, atol=1e-7, witness=witness)


@pytest.mark.parametrize("n, k", [(3, None), (4, 2)])
def test_a_symmetric_solve_reads_one_triangle(m, rng, n, k):
    A = _well(rng, n)
    b = rng.standard_normal(n if k is None else (n, k))
    ga, _ = assert_grads_match_differences(m.upper_read, [A, b], (0, 1), rtol=1e-5,
                                           atol=1e-7)
    np.testing.assert_array_equal(np.tril(ga, -1), 0.0)
    assert np.all(ga[np.triu_indices(n, 1)] != 0.0)


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize("n, k", [(3, None), (4, 3)])
def test_a_transposed_triangular_solve(m, rng, n, k, optimize):
    A = _well(rng, n)
    b = rng.standard_normal(n if k is None else (n, k))
    ga, _ = assert_grads_match_differences(m.transposed_triangle, [A, b], (0, 1), rtol=1e-5,
                                           atol=1e-7, optimize=optimize)
    np.testing.assert_array_equal(np.triu(ga, 1), 0.0)


@pytest.mark.parametrize("points", [5, 8])
def test_least_squares_and_pseudo_inverse(m, rng, points):
    t = np.linspace(-1.0, 1.0, points) + 0.05 * rng.standard_normal(points)
    y = np.cos(2.0 * t)
    assert_grads_match_differences(m.fit, [t, y], (0, 1), rtol=1e-5, atol=1e-7)
    v = rng.standard_normal(points)
    _, hv = functional.hvp(lambda t: m.fit(t, y), t, v)
    grad = s2sgrad.grad(m.fit)
    eps = 1e-5
    np.testing.assert_allclose(hv, (grad(t + eps * v, y) - grad(t - eps * v, y)) / (2 * eps),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("shapes", [((2,), (2, 3)), ((3,), (1, 1))])
def test_block_diagonal(m, rng, shapes):
    a, b = (rng.standard_normal(s) for s in shapes)
    assert_grads_match_differences(m.blocks, [a, b], (0, 1), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name, args, match", [
    ("banded", lambda r: [_well(r, 3), r.standard_normal(3)], "banded"),
    ("batched", lambda r: [np.stack([_well(r, 2)] * 2), r.standard_normal((2, 2, 1))],
     "batch"),
])
def test_options_without_a_gradient_raise(m, rng, name, args, match):
    with pytest.raises(NotImplementedError, match=match):
        s2sgrad.grad(getattr(m, name))(*args(rng))


@pytest.mark.parametrize("shape", [(2, 3), (4, 2)])
def test_pseudo_inverse_with_its_rank(m, rng, shape):
    A = rng.standard_normal(shape)
    assert_grads_match_differences(m.ranked, [A], (0,), rtol=1e-5, atol=1e-7)
