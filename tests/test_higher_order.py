"""Second derivatives: differentiating s2sgrad's own generated code."""
import numpy as np
import pytest
from conftest import import_source

import s2sgrad
from s2sgrad import functional

SOURCE = '''
import numpy as np
import s2sgrad
from s2sgrad import functional


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def quadratic(x, A):
    return 0.5 * x @ A @ x


def looped(x):
    h = x
    for i in range(3):
        h = np.tanh(h * 1.3 + 0.2) * h
    return np.sum(h)


def branchy(x):
    if np.sum(x) > 0:
        y = np.sin(x) * x
    else:
        y = x ** 3
    return np.sum(y)


def in_place(x):
    y = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = np.sin(x[i]) * x[i - 1]
    return np.sum(y * y)


class Cube(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return 3.0 * x ** 2 * g


def with_function(x):
    return np.sum(Cube.apply(x) * np.cos(x))


def grad_of_rosenbrock_dot(x, v):
    return np.sum(s2sgrad.grad(rosenbrock)(x) * v)


def hvp_through_functional(x, v):
    out, g = functional.vjp(rosenbrock, x, 1.0, create_graph=True)
    return np.sum(g * v)


def perturbation(x):
    return x * s2sgrad.grad(lambda y: x + y)(1.0)


def closure_inner(x):
    return s2sgrad.grad(lambda y: np.sum(np.sin(x * y)))(np.ones(3) * 0.5)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("ho"), "s2s_higher_order", SOURCE)


def numeric_hessian(f, x, eps=1e-5):
    """Central differences of an independent first derivative (also by differences)."""
    def grad(z):
        g = np.zeros_like(z)
        for i in range(z.size):
            e = np.zeros_like(z)
            e[i] = eps
            g[i] = (f(z + e) - f(z - e)) / (2 * eps)
        return g
    n = x.size
    H = np.zeros((n, n))
    for j in range(n):
        e = np.zeros_like(x)
        e[j] = 1e-4
        H[:, j] = (grad(x + e) - grad(x - e)) / 2e-4
    return H


def rosenbrock_hessian(x):
    """Closed form."""
    n = x.size
    H = np.zeros((n, n))
    for i in range(n - 1):
        H[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        H[i, i + 1] -= 400 * x[i]
        H[i + 1, i] -= 400 * x[i]
        H[i + 1, i + 1] += 200
    return H


def hessian_by_grad_of_grad(f, x):
    g = s2sgrad.grad(f)
    rows = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = 1.0

        def component(z, e=e):
            return np.sum(g(z) * e)
        rows.append(s2sgrad.grad(component)(x))
    return np.array(rows)


@pytest.mark.parametrize("n", [2, 4])
def test_rosenbrock_hessian_closed_form(m, n, rng):
    x = rng.uniform(-1.0, 1.5, n)
    np.testing.assert_allclose(hessian_by_grad_of_grad(m.rosenbrock, x),
                               rosenbrock_hessian(x), rtol=1e-9, atol=1e-8)


@pytest.mark.parametrize("n", [2, 3])
def test_quadratic_form_hessian(m, n, rng):
    A = rng.standard_normal((n, n))
    x = rng.standard_normal(n)
    H = hessian_by_grad_of_grad(lambda z: m.quadratic(z, A), x)
    np.testing.assert_allclose(H, 0.5 * (A + A.T), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fname", ["looped", "branchy", "in_place", "with_function"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_second_derivative_matches_differences(m, fname, sign, rng):
    f = getattr(m, fname)
    x = np.abs(rng.standard_normal(3)) * sign * 0.7
    H = hessian_by_grad_of_grad(f, x)
    np.testing.assert_allclose(H, numeric_hessian(f, x), rtol=1e-5, atol=1e-6)


def test_grad_inside_differentiated_function(m, rng):
    x, v = rng.uniform(-1, 1, 3), rng.standard_normal(3)
    hv = s2sgrad.grad(m.grad_of_rosenbrock_dot)(x, v)
    np.testing.assert_allclose(hv, rosenbrock_hessian(x) @ v, rtol=1e-9, atol=1e-8)


def test_functional_vjp_create_graph_inside_gives_hessian_vector_product(m, rng):
    x, v = rng.uniform(-1, 1, 4), rng.standard_normal(4)
    hv = s2sgrad.grad(m.hvp_through_functional)(x, v)
    np.testing.assert_allclose(hv, rosenbrock_hessian(x) @ v, rtol=1e-9, atol=1e-8)


def test_nested_derivatives_do_not_confuse_perturbations(m):
    # d/dx [ x * (d/dy (x + y))(y=1) ] = d/dx [x * 1] = 1
    assert s2sgrad.grad(m.perturbation)(2.0) == pytest.approx(1.0)


def test_inner_lambda_closes_over_outer_variable(m, rng):
    x = rng.standard_normal(3)
    # inner: d/dy sum(sin(x*y)) = x cos(x y); outer: grad of sum over that w.r.t. x
    out, pullback = s2sgrad.vjp(m.closure_inner, x)
    v = rng.standard_normal(3)
    (g,) = pullback(v)
    y = 0.5
    expected = v * (np.cos(x * y) - x * y * np.sin(x * y))
    np.testing.assert_allclose(g, expected, rtol=1e-10)


def test_top_level_create_graph_values_equal(m, rng):
    x = rng.uniform(-1, 1, 3)
    a = functional.vjp(m.rosenbrock, x)
    b = functional.vjp(m.rosenbrock, x, create_graph=True)
    np.testing.assert_array_equal(a[1], b[1])


AUGMENTED_LOOP = '''
import numpy as np
import s2sgrad

G = np.array([0.4, -0.7, 0.2])


def g(x):
    acc = G * 1.0
    for t in [x * 0.5, x, np.sin(x)]:
        acc += 0.3 * np.tanh(t * acc)
        acc = np.tanh(acc * -0.7 + x)
    return acc[1] + 0.3 * np.sum(np.tanh(acc))


def f(x):
    return np.sum(s2sgrad.grad(g)(x) * G)
'''


@pytest.mark.parametrize("n", [3, 1])
def test_second_derivative_of_a_loop_updating_in_place(make_module, n):
    # The first-order code stacks `acc` and then binds it anew at the end of each
    # iteration: the next iteration's `acc += ...` changes the new array, not the
    # stacked one (once refused as an in-place write into the stack).
    from conftest import numeric_grad
    module = make_module(AUGMENTED_LOOP.replace("G = np.array([0.4, -0.7, 0.2])",
                                                "G = np.array([0.4, -0.7, 0.2])[:%d]" % n)
                         .replace("acc[1]", "acc[0]"))
    x = np.array([0.3, -0.8, 1.1])[:n]
    got = s2sgrad.grad(module.f)(x)
    np.testing.assert_allclose(got, numeric_grad(module.f, (x,), 0), rtol=1e-6, atol=1e-8)


_KEYWORD_ONLY_TOP = '''
import numpy as np

def weighted(x, /, k=2.0, *, w=None, s=0.5):
    if w is None:
        w = np.ones_like(x)
    return np.sum(np.tanh(x * k) * w) * s

def required(x, *, w):
    return np.sum(x * w)
'''


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_second_derivatives_of_a_function_with_keyword_only_defaults(make_module, shape, rng):
    # hvp, vhp and hessian pass inputs by position: keyword-only parameters with
    # defaults keep them (they raised "which takes ... keyword-only parameters").
    m = make_module(_KEYWORD_ONLY_TOP)
    x = rng.standard_normal(shape)
    v = rng.standard_normal(shape)
    eps = 1e-5
    grad = s2sgrad.grad(m.weighted)
    expected = (grad(x + eps * v) - grad(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(functional.hvp(m.weighted, x, v)[1], expected, rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(functional.vhp(m.weighted, x, v)[1], expected, rtol=1e-6,
                               atol=1e-7)
    hessian = np.reshape(functional.hessian(m.weighted, x), (x.size, x.size))
    np.testing.assert_allclose(hessian @ np.ravel(v), np.ravel(expected), rtol=1e-6,
                               atol=1e-7)


def test_a_keyword_only_parameter_without_a_default_is_refused_for_second_derivatives(
        make_module):
    m = make_module(_KEYWORD_ONLY_TOP)
    with pytest.raises(s2sgrad.TransformError, match="keyword-only parameter without"):
        functional.hvp(m.required, np.ones(3), np.ones(3))
