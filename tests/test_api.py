"""grad, value_and_grad, vjp, differentiable, source: behaviour and contracts."""
import numpy as np
import pytest
from conftest import check_vjp, import_source, numeric_grad

import s2sgrad

SOURCE = '''
import numpy as np
import s2sgrad

SCALE = 2.0


def loss(w, x, b):
    h = np.tanh(x @ w + b)
    return np.mean(h ** 2) * SCALE


@s2sgrad.differentiable
def decorated(x):
    return np.sum(np.exp(x) / (1.0 + x * x))


def reassigns(x):
    y = x * 2.0
    y = y + np.sin(y)
    x = x * y
    return x.sum()


def vector(x, y):
    return np.sin(x) * y


def pair(x):
    return np.sin(x), x * 3.0


def uses_global(x):
    return np.sum(x) * SCALE


def make_closure(k):
    def inner(x):
        return np.sum(x * k)
    return inner


def python_scalars(a, b):
    c = a * b + a / b
    return c * c


def ignores_second(x, y):
    return np.sum(x ** 2)


def returns_input(x):
    return x
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("api"), "s2s_api_cases", SOURCE)


@pytest.mark.parametrize("n, d, k", [(4, 3, 2), (1, 5, 1)])
def test_grad_of_small_network(m, n, d, k, rng):
    w, x, b = rng.standard_normal((d, k)), rng.standard_normal((n, d)), rng.standard_normal(k)
    gw, gb = s2sgrad.grad(m.loss, wrt=(0, 2))(w, x, b)
    np.testing.assert_allclose(gw, numeric_grad(m.loss, [w, x, b], 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, numeric_grad(m.loss, [w, x, b], 2), rtol=1e-6, atol=1e-8)


def test_value_and_grad(m, rng):
    x = rng.standard_normal(4)
    value, g = s2sgrad.value_and_grad(m.decorated)(x)
    assert value == pytest.approx(m.decorated(x))
    np.testing.assert_allclose(g, numeric_grad(m.decorated, [x], 0), rtol=1e-6)


def test_decorated_function_runs_unchanged(m):
    x = np.array([0.5, 1.5])
    assert m.decorated(x) == pytest.approx(np.sum(np.exp(x) / (1 + x * x)))


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_reassigned_variables(m, shape, rng):
    check_vjp(m.reassigns, [rng.standard_normal(shape)])


def test_ssa_names_in_generated_code(m):
    src = s2sgrad.source(m.reassigns)
    assert "y_1 = " in src and "x_1 = " in src


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,))])
def test_vjp_pullback_is_reusable(m, shapes, rng):
    x, y = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    out, pullback = s2sgrad.vjp(m.vector, x, y)
    v1, v2 = rng.standard_normal(out.shape), rng.standard_normal(out.shape)
    g1 = pullback(v1)
    g2 = pullback(v2)
    g1_again = pullback(v1)
    for a, b in zip(g1, g1_again):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(g2[0], np.cos(x) * y * v2)
    np.testing.assert_allclose(g2[1], (np.sin(x) * v2).reshape(-1, *y.shape).sum(axis=0))


def test_vjp_single_wrt_gives_bare_gradient(m, rng):
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    out, pullback = s2sgrad.vjp(m.vector, x, y, wrt=1)
    g = pullback(np.ones(3))
    assert isinstance(g, np.ndarray)
    np.testing.assert_allclose(g, np.sin(x))


def test_vjp_with_tuple_output(m, rng):
    x = rng.standard_normal(3)
    check_vjp(m.pair, [x])


def test_grad_rejects_non_scalar_output(m):
    with pytest.raises(ValueError, match="use s2sgrad.vjp"):
        s2sgrad.grad(m.vector)(np.ones(3), np.ones(3))


def test_integer_input_is_rejected(m):
    with pytest.raises(TypeError, match="only floating-point inputs can be differentiated"):
        s2sgrad.grad(m.uses_global)(np.arange(3))
    with pytest.raises(TypeError, match="only floating-point"):
        s2sgrad.grad(m.python_scalars)(2, 3.0)


def test_globals_are_read_live(m):
    x = np.ones(3)
    g = s2sgrad.grad(m.uses_global)
    np.testing.assert_allclose(g(x), 2.0 * np.ones(3))
    m.SCALE = 5.0
    try:
        np.testing.assert_allclose(g(x), 5.0 * np.ones(3))
    finally:
        m.SCALE = 2.0


def test_closures_are_constants_read_live(m):
    inner = m.make_closure(3.0)
    np.testing.assert_allclose(s2sgrad.grad(inner)(np.ones(2)), [3.0, 3.0])
    other = m.make_closure(-1.0)
    np.testing.assert_allclose(s2sgrad.grad(other)(np.ones(2)), [-1.0, -1.0])


def test_python_floats_give_python_floats(m):
    ga, gb = s2sgrad.grad(m.python_scalars, wrt=(0, 1))(1.5, 0.5)
    assert isinstance(ga, float) and isinstance(gb, float)
    assert ga == pytest.approx(numeric_grad(m.python_scalars, [1.5, 0.5], 0), rel=1e-6)
    assert gb == pytest.approx(numeric_grad(m.python_scalars, [1.5, 0.5], 1), rel=1e-6)


def test_independent_input_gets_zeros(m, rng):
    x, y = rng.standard_normal(3), rng.standard_normal((2, 2))
    gx, gy = s2sgrad.grad(m.ignores_second, wrt=(0, 1))(x, y)
    np.testing.assert_allclose(gx, 2 * x)
    assert gy.shape == (2, 2) and not gy.any()


def test_identity_gradient_is_not_the_callers_cotangent(m):
    v = np.ones(3)
    out, pullback = s2sgrad.vjp(m.returns_input, np.zeros(3))
    (g,) = pullback(v)
    assert g is not v
    np.testing.assert_array_equal(g, v)


def test_lambda_is_differentiated():
    f = lambda x: np.sum(np.sin(x) ** 2)  # noqa: E731
    x = np.array([0.1, 0.2])
    np.testing.assert_allclose(s2sgrad.grad(f)(x), 2 * np.sin(x) * np.cos(x))


def test_two_lambdas_on_one_line():
    f, g = (lambda x: np.sum(x * 2.0)), (lambda x: np.sum(x * 3.0))  # noqa: E731
    np.testing.assert_allclose(s2sgrad.grad(f)(np.ones(2)), [2.0, 2.0])
    np.testing.assert_allclose(s2sgrad.grad(g)(np.ones(2)), [3.0, 3.0])


def test_source_is_deterministic(m):
    from s2sgrad.compiler import clear_cache
    first = s2sgrad.source(m.loss, wrt=(0, 2))
    clear_cache()
    assert s2sgrad.source(m.loss, wrt=(0, 2)) == first


def test_source_in_forward_mode_is_tangent_code(m):
    src = s2sgrad.source(m.loss, wrt=0, mode="forward")
    assert "def loss_jvp(w, x, b, w_dot):" in src
    assert "h_dot" in src and "_bar" not in src
    with pytest.raises(ValueError, match="'reverse'.*'forward'"):
        s2sgrad.source(m.loss, mode="backward")


def test_defjvp_and_defvjp_are_public():
    from s2sgrad.rules import jvp_rules, registry
    assert s2sgrad.defjvp is jvp_rules.defjvp
    assert s2sgrad.defvjp is registry.defvjp


def test_source_names_and_comments(m):
    src = s2sgrad.source(m.loss, wrt=0)
    assert "def loss_forward(w, x, b):" in src
    assert "def loss_adjoint(" in src
    assert "# line 9: h = np.tanh(x @ w + b)" in src
    assert "w_bar" in src and "h_bar" in src


def test_cache_returns_same_compiled_pair(m):
    from s2sgrad.compiler import compile_function
    assert compile_function(m.loss, (0,)) is compile_function(m.loss, (0,))
    assert compile_function(m.loss, (0,)) is not compile_function(m.loss, (1,))


def test_wrt_out_of_range(m):
    with pytest.raises(TypeError, match="only 1 positional argument"):
        s2sgrad.grad(m.decorated, wrt=1)(np.ones(2))


def test_gradient_of_a_gradient_is_never_the_first_derivative(m):
    """grad(f) wraps f; the compiler must not mistake the wrapper for f itself."""
    g = s2sgrad.grad(m.decorated)

    def uses_gradient(x):
        return np.sum(g(x))

    x = np.array([0.3, -0.4])
    try:
        second = s2sgrad.grad(uses_gradient)(x)
    except s2sgrad.TransformError as err:
        assert "grad" in str(err)
        return
    h = 1e-5
    expected = [(np.sum(g(x + h * e)) - np.sum(g(x - h * e))) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(second, expected, rtol=1e-5)


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_wrt_as_a_tuple_of_one_gives_a_tuple(m, shape, rng):
    x = rng.standard_normal(shape)
    (g,) = s2sgrad.grad(m.decorated, wrt=(0,))(x)
    np.testing.assert_allclose(g, numeric_grad(m.decorated, [x], 0), rtol=1e-6)
    value, (g2,) = s2sgrad.value_and_grad(m.decorated, wrt=(0,))(x)
    np.testing.assert_allclose(g2, g)
