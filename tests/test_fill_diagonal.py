"""np.fill_diagonal(y, v) writing into an array the function made: read as the item
assignment it is (y[diagonal] = v repeated along it, cast as NumPy casts), so both
the matrix's other entries and v get their gradients. It was refused."""
import numpy as np
import pytest
from conftest import assert_grads_match_differences, import_source, numeric_grad

import s2sgrad
from s2sgrad import functional

SOURCE = '''
import numpy as np


def unit_diagonal(x):
    A = np.outer(x, x)
    np.fill_diagonal(A, 1.0)
    return np.sum(A * np.arange(A.size).reshape(A.shape))


def vector_diagonal(x):
    A = np.outer(x, x[:3])
    np.fill_diagonal(A, x[:3] * 3.0)
    return np.sum(np.sin(A))


def repeated_values(x):
    A = np.outer(x, x) + 1.0
    np.fill_diagonal(A, x[:2] ** 2, wrap=False)   # x[0]**2, x[1]**2, x[0]**2, ...
    return np.sum(np.log(A))


def kernel_without_self(x):
    K = np.exp(-np.subtract.outer(x, x) ** 2)
    np.fill_diagonal(K, 0.0)
    return np.sum(K @ x)


def cube(x):
    T = np.ones((3, 3, 3)) * x[1]
    np.fill_diagonal(T, x[0])
    return np.sum(T * np.arange(27.0).reshape(3, 3, 3))


def wrapped(x):
    A = np.outer(np.concatenate([x, x]), x)
    np.fill_diagonal(A, 0.0, wrap=True)
    return np.sum(A)


def vector_target(x):
    y = x * 2.0
    np.fill_diagonal(y, 0.0)
    return np.sum(y)
'''

NAMES = ["unit_diagonal", "vector_diagonal", "repeated_values", "kernel_without_self",
         "cube"]


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("fill_diagonal"), "s2s_fill_diagonal_case",
                         SOURCE)


@pytest.mark.parametrize("optimize", [True, False])
@pytest.mark.parametrize("witness", [True, False])
@pytest.mark.parametrize("n", [4, 5])
@pytest.mark.parametrize("name", NAMES)
def test_gradient_matches_differences(m, rng, name, n, witness, optimize):
    x = rng.uniform(0.2, 1.2, n)
    f = getattr(m, name)
    grad = assert_grads_match_differences(f, [x], (0,), rtol=1e-5, atol=1e-7,
                                          witness=witness, optimize=optimize)
    assert grad is not None
    value, _ = s2sgrad.value_and_grad(f)(x.copy())
    assert value == f(x.copy())


@pytest.mark.parametrize("name", NAMES)
def test_forward_mode(m, rng, name):
    x, v = rng.uniform(0.2, 1.2, 4), rng.standard_normal(4)
    f = getattr(m, name)
    _, tangent = functional.jvp(f, x.copy(), v)
    np.testing.assert_allclose(tangent, numeric_grad(f, [x], 0) @ v, rtol=1e-5, atol=1e-7)


def test_wrap_stays_refused(m):
    with pytest.raises(s2sgrad.TransformError, match="fill_diagonal"):
        s2sgrad.grad(m.wrapped)(np.array([0.3, 0.7]))


def test_numpys_error_for_a_vector(m):
    with pytest.raises(ValueError, match="at least 2-d"):
        m.vector_target(np.ones(3))
    with pytest.raises(ValueError, match="at least 2-d"):
        s2sgrad.grad(m.vector_target)(np.ones(3))
