"""functional.jvp, jacobian, hessian, hvp and vhp keep torch.autograd.functional's contract."""
import numpy as np
import pytest
from conftest import import_source, numeric_vjp
from test_functional import SOURCE as VJP_SOURCE  # the functions functional.vjp is tested on

from s2sgrad import functional

SOURCE = VJP_SOURCE + '''
import s2sgrad


def constant_output(x):
    return np.ones(2), x * 2.0


def many_outputs(x):
    return np.outer(np.sin(x), np.arange(1.0, 6.0)) * x[0]


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def quadratic(x, A):
    return 0.5 * x @ A @ x


def looped(x):
    h = x
    for i in range(3):
        h = h * h * 0.5 + np.sin(h) * i
    return np.sum(h)


def two_inputs(x, y):
    return np.sum(x ** 2 * y) + np.sum(np.sin(y)) * x[0]


def two_inputs_flat(z):
    return two_inputs(z[:3], z[3:])


def linear(x, y):
    return np.sum(3.0 * x) + np.sum(y)


def product(x, y):
    return np.sum(x * y)


def not_scalar(x):
    return x * 2.0


def perturbation(x):
    return x * s2sgrad.grad(lambda y: x + y)(1.0)


def in_place(x):
    y = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = np.sin(x[i]) * x[i - 1]
    return np.sum(y * y)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("functional_more"), "s2s_functional_more", SOURCE)


EPS = 1e-6


def numeric_jvp(f, args, tangents):
    plus = f(*[a + EPS * t for a, t in zip(args, tangents)])
    minus = f(*[a - EPS * t for a, t in zip(args, tangents)])
    if isinstance(plus, tuple):
        return tuple((np.asarray(p) - np.asarray(q)) / (2 * EPS) for p, q in zip(plus, minus))
    return (np.asarray(plus) - np.asarray(minus)) / (2 * EPS)


def numeric_jacobian(f, x, i_out=None):
    """d f / d x by central differences (f returns an array)."""
    x = np.asarray(x, dtype=float)
    cols = []
    for j in range(x.size):
        e = np.zeros_like(x)
        e.reshape(-1)[j] = EPS
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * EPS))
    out_shape = np.shape(cols[0])
    return np.stack(cols, axis=-1).reshape(out_shape + x.shape)


def numeric_hessian(f, x):
    """Central differences of the (first-order, reverse-mode) gradient."""
    import s2sgrad
    return numeric_jacobian(s2sgrad.grad(f), x)


def rosenbrock_hessian(x):
    n = x.size
    H = np.zeros((n, n))
    for i in range(n - 1):
        H[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        H[i, i + 1] -= 400 * x[i]
        H[i + 1, i] -= 400 * x[i]
        H[i + 1, i + 1] += 200
    return H


# -- jvp ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 4), (2, 5)])
def test_jvp_exp_reducer(m, shape, rng):
    x, v = rng.random(shape), rng.standard_normal(shape)
    out, jvp = functional.jvp(m.exp_reducer, x, v)
    np.testing.assert_allclose(out, np.exp(x).sum(axis=1))
    np.testing.assert_allclose(jvp, numeric_jvp(m.exp_reducer, [x], [v]), rtol=1e-6)
    assert isinstance(jvp, np.ndarray) and jvp.shape == (shape[0],)


def test_jvp_tuple_inputs_and_outputs(m, rng):
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    vx, vy = rng.standard_normal(3), rng.standard_normal(3)
    out, jvp = functional.jvp(m.two_outputs, (x, y), (vx, vy))
    assert isinstance(out, tuple) and isinstance(jvp, tuple) and len(jvp) == 2
    expected = numeric_jvp(m.two_outputs, [x, y], [vx, vy])
    for a, b in zip(jvp, expected):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    out, jvp = functional.jvp(m.adder, (x, y), (vx, vy))
    np.testing.assert_allclose(jvp, 2 * vx + 3 * vy)
    assert isinstance(jvp, np.ndarray)


def test_jvp_broadcasting_inputs(m, rng):
    x, y = rng.standard_normal((2, 3)), rng.standard_normal(3)
    vx, vy = rng.standard_normal((2, 3)), rng.standard_normal(3)
    _, jvp = functional.jvp(m.two_outputs, (x, y), (vx, vy))
    for a, b in zip(jvp, numeric_jvp(m.two_outputs, [x, y], [vx, vy])):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def test_jvp_v_may_be_omitted_for_a_single_element_input(m):
    out, jvp = functional.jvp(m.scalar, np.array([1.5]))
    assert jvp == pytest.approx(3.0)
    out, jvp = functional.jvp(m.scalar, 2.0)
    assert out == 4.0 and jvp == pytest.approx(4.0)
    with pytest.raises(RuntimeError, match="The vector v can only be None if the input to the "
                                           "user-provided function is a single array with a "
                                           "single element."):
        functional.jvp(m.scalar, np.ones(2))


def test_jvp_v_validation(m):
    x = np.ones(3)
    with pytest.raises(RuntimeError, match=r"v is a tuple of invalid length: should be 2 but "
                                           r"got 1\."):
        functional.jvp(m.adder, (x, x), (x,))
    with pytest.raises(RuntimeError, match=r"The given v should contain a single array\."):
        functional.jvp(m.scalar, x, (x, x))
    with pytest.raises(RuntimeError, match=r"^v has invalid size: should be \(3,\) but got "
                                           r"\(2,\)\.$"):
        functional.jvp(m.scalar, x, np.ones(2))
    with pytest.raises(RuntimeError, match=r"^Entry 1 in v has invalid size: should be \(3,\) "
                                           r"but got \(4,\)\.$"):
        functional.jvp(m.adder, (x, x), (x, np.ones(4)))


def test_jvp_type_errors(m):
    with pytest.raises(TypeError, match="The inputs given to jvp must be either an array or a "
                                        "tuple of arrays but the given inputs has type list."):
        functional.jvp(m.scalar, [1.0, 2.0])
    with pytest.raises(TypeError, match="but the value at index 1 has type str."):
        functional.jvp(m.adder, (np.ones(2), "a"))
    with pytest.raises(TypeError, match="only floating-point"):
        functional.jvp(m.scalar, np.arange(3))


def test_jvp_strict(m):
    x = np.ones(3)
    _, jvp = functional.jvp(m.ignores, (x, x), (x, x))
    np.testing.assert_allclose(jvp, 2 * x)
    with pytest.raises(RuntimeError, match="The output of the user-provided function is "
                                           "independent of input 1. This is not allowed in "
                                           "strict mode."):
        functional.jvp(m.ignores, (x, x), (x, x), strict=True)
    with pytest.raises(RuntimeError, match="np.floor"):
        functional.jvp(m.floors, (x, x), (x, x), strict=True)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not "
                                           "require gradients. The outputs must be computed in "
                                           "a differentiable manner from the input when running "
                                           "in strict mode."):
        functional.jvp(m.constant_output, x, x, strict=True)
    out, jvp = functional.jvp(m.constant_output, x, x)
    np.testing.assert_array_equal(jvp[0], np.zeros(2))


def test_jvp_create_graph_gives_the_same_values(m, rng):
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    a = functional.jvp(m.scalar, x, v)
    b = functional.jvp(m.scalar, x, v, create_graph=True)
    assert a == b


def test_jvp_keeps_float32(m):
    x = np.ones(3, np.float32)
    out, jvp = functional.jvp(m.exp_reducer, x[None], x[None])
    assert jvp.dtype == np.float32


# -- jacobian -------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", [None, "forward-mode", "reverse-mode"])
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_jacobian_matches_differences(m, strategy, shape, rng):
    x = rng.standard_normal(shape)
    J = functional.jacobian(m.many_outputs, x.ravel(), strategy=strategy)
    np.testing.assert_allclose(J, numeric_jacobian(m.many_outputs, x.ravel()), rtol=1e-6,
                               atol=1e-8)
    J = functional.jacobian(m.exp_reducer, x.reshape(1, -1), strategy=strategy)
    assert J.shape == (1, 1, x.size)
    np.testing.assert_allclose(J, numeric_jacobian(m.exp_reducer, x.reshape(1, -1)),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("strategy", ["forward-mode", "reverse-mode"])
def test_jacobian_tuple_structure(m, strategy, rng):
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    J = functional.jacobian(m.two_outputs, (x, y), strategy=strategy)
    assert isinstance(J, tuple) and len(J) == 2 and all(len(row) == 2 for row in J)
    np.testing.assert_allclose(J[0][0], np.diag(y), atol=1e-12)
    np.testing.assert_allclose(J[0][1], np.diag(x), atol=1e-12)
    np.testing.assert_allclose(J[1][0], np.diag(np.cos(x)), atol=1e-12)
    np.testing.assert_allclose(J[1][1], np.zeros((3, 3)))
    J = functional.jacobian(m.adder, (x, y), strategy=strategy)      # output single
    assert isinstance(J, tuple) and len(J) == 2
    np.testing.assert_allclose(J[1], 3 * np.eye(3))
    J = functional.jacobian(m.exp_reducer, x[None], strategy=strategy)  # neither a tuple
    assert isinstance(J, np.ndarray) and J.shape == (1, 1, 3)
    J1 = functional.jacobian(lambda a: m.two_outputs(a, y), x, strategy=strategy)
    assert isinstance(J1, tuple) and len(J1) == 2 and J1[0].shape == (3, 3)


def test_jacobian_chooses_forward_mode_for_few_inputs_and_many_outputs(m, monkeypatch, rng):
    calls = []
    forward, reverse = functional._jacobian_forward, functional._jacobian_reverse
    monkeypatch.setattr(functional, "_jacobian_forward",
                        lambda *a: calls.append("forward") or forward(*a))
    monkeypatch.setattr(functional, "_jacobian_reverse",
                        lambda *a: calls.append("reverse") or reverse(*a))
    functional.jacobian(m.many_outputs, rng.standard_normal(2))      # 2 in, 10 out
    functional.jacobian(m.exp_reducer, rng.standard_normal((1, 4)))  # 4 in, 1 out
    functional.jacobian(m.exp_reducer, rng.standard_normal((1, 4)), strategy="forward-mode")
    assert calls == ["forward", "reverse", "forward"]


def test_jacobian_vectorize_gives_the_same_values(m, rng):
    x = rng.standard_normal(3)
    a = functional.jacobian(m.many_outputs, x)
    b = functional.jacobian(m.many_outputs, x, vectorize=True)
    np.testing.assert_array_equal(a, b)


def test_jacobian_strict_and_errors(m):
    x = np.ones(3)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is "
                                           "independent of input 1. This is not allowed in "
                                           "strict mode."):
        functional.jacobian(m.ignores, (x, x), strict=True)
    with pytest.raises(RuntimeError, match="Output 1 of the user-provided function is "
                                           "independent of input 1"):
        functional.jacobian(m.two_outputs, (x, x), strict=True, strategy="forward-mode")
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not "
                                           "require gradients"):
        functional.jacobian(m.constant_output, x, strict=True)
    J = functional.jacobian(m.ignores, (x, x))
    np.testing.assert_array_equal(J[1], np.zeros((3, 3)))
    with pytest.raises(ValueError, match='Expected strategy to be either "forward-mode" or '
                                         '"reverse-mode"'):
        functional.jacobian(m.scalar, x, strategy="sideways")
    with pytest.raises(TypeError, match="The inputs given to jacobian must be either an array "
                                        "or a tuple of arrays"):
        functional.jacobian(m.scalar, [1.0])


# -- hessian ---------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", [None, "forward-mode", "reverse-mode"])
@pytest.mark.parametrize("n", [2, 5])
def test_rosenbrock_hessian_closed_form(m, strategy, n, rng):
    x = rng.uniform(-1.0, 1.5, n)
    H = functional.hessian(m.rosenbrock, x, outer_jacobian_strategy=strategy)
    np.testing.assert_allclose(H, rosenbrock_hessian(x), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("strategy", ["forward-mode", "reverse-mode"])
@pytest.mark.parametrize("n", [2, 4])
def test_quadratic_form_hessian(m, strategy, n, rng):
    A = rng.standard_normal((n, n))
    x = rng.standard_normal(n)
    H = functional.hessian(lambda z: m.quadratic(z, A), x, outer_jacobian_strategy=strategy)
    np.testing.assert_allclose(H, 0.5 * (A + A.T), rtol=1e-12, atol=1e-12)
    H = functional.hessian(m.quadratic, (x, A), outer_jacobian_strategy=strategy)
    np.testing.assert_allclose(H[0][0], 0.5 * (A + A.T), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(H[0][1], numeric_jacobian(
        lambda a: 0.5 * (a + a.T) @ x, A), rtol=1e-6, atol=1e-8)
    assert H[1][1].shape == (n, n, n, n)


@pytest.mark.parametrize("strategy", ["forward-mode", "reverse-mode"])
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_loop_hessian_matches_differences(m, strategy, shape, rng):
    x = rng.uniform(-0.8, 0.8, shape)
    H = functional.hessian(m.looped, x, outer_jacobian_strategy=strategy)
    assert H.shape == shape + shape
    np.testing.assert_allclose(H, numeric_hessian(m.looped, x), rtol=1e-4, atol=1e-5)
    # closed form: the loop unrolled by hand
    def unrolled(z):
        h = z
        for i in range(3):
            h = h * h * 0.5 + np.sin(h) * i
        return h
    def derivative(z):   # d h / d z, elementwise
        h, d = z, np.ones_like(z)
        for i in range(3):
            h, d = h * h * 0.5 + np.sin(h) * i, d * (h + np.cos(h) * i)
        return d
    second = numeric_jacobian(lambda z: derivative(z), x)
    np.testing.assert_allclose(H, second, rtol=1e-5, atol=1e-6)
    assert np.allclose(unrolled(x).sum(), m.looped(x))


def test_hessian_tuple_inputs(m, rng):
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    for strategy in ("forward-mode", "reverse-mode"):
        H = functional.hessian(m.two_inputs, (x, y), outer_jacobian_strategy=strategy)
        assert isinstance(H, tuple) and len(H) == 2 and len(H[0]) == 2
        full = numeric_hessian(m.two_inputs_flat, np.concatenate([x, y]))
        np.testing.assert_allclose(np.block([[H[0][0], H[0][1]], [H[1][0], H[1][1]]]), full,
                                   rtol=1e-5, atol=1e-6)


def test_hessian_of_in_place_loop(m, rng):
    x = rng.standard_normal(4)
    H = functional.hessian(m.in_place, x)
    np.testing.assert_allclose(H, numeric_hessian(m.in_place, x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(H, H.T, atol=1e-10)


def test_hessian_errors_and_strict(m):
    x = np.ones(3)
    with pytest.raises(RuntimeError, match="The array returned by the function given to "
                                           "hessian should contain a single element"):
        functional.hessian(m.not_scalar, x)
    with pytest.raises(RuntimeError, match="The function given to hessian should return a "
                                           "single array"):
        functional.hessian(m.two_outputs, (x, x))
    with pytest.raises(RuntimeError, match="While computing the hessian, found that the "
                                           "jacobian of the user-provided function with respect "
                                           "to input 0 is independent of the input"):
        functional.hessian(m.linear, (x, x), strict=True)
    H = functional.hessian(m.linear, (x, x))
    np.testing.assert_array_equal(H[0][0], np.zeros((3, 3)))
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is "
                                           "independent of input 0"):
        functional.hessian(m.product, (x, x), strict=True)
    with pytest.raises(ValueError, match="Expected strategy"):
        functional.hessian(m.scalar, x, outer_jacobian_strategy="up")


# -- hvp and vhp -----------------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["hvp", "vhp"])
@pytest.mark.parametrize("n", [3, 6])
def test_hvp_vhp_rosenbrock_closed_form(m, fn, n, rng):
    x, v = rng.uniform(-1, 1, n), rng.standard_normal(n)
    out, hv = getattr(functional, fn)(m.rosenbrock, x, v)
    assert out == pytest.approx(m.rosenbrock(x))
    H = rosenbrock_hessian(x)
    np.testing.assert_allclose(hv, H @ v if fn == "hvp" else v @ H, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("fn", ["hvp", "vhp"])
def test_hvp_vhp_tuple_inputs_and_quadratic(m, fn, rng):
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    vx, vy = rng.standard_normal(3), rng.standard_normal(3)
    out, res = getattr(functional, fn)(m.two_inputs, (x, y), (vx, vy))
    assert isinstance(res, tuple) and len(res) == 2
    H = numeric_hessian(m.two_inputs_flat, np.concatenate([x, y]))
    v = np.concatenate([vx, vy])
    expected = H @ v if fn == "hvp" else v @ H
    np.testing.assert_allclose(np.concatenate(res), expected, rtol=1e-5, atol=1e-6)
    A = rng.standard_normal((3, 3))
    _, res = getattr(functional, fn)(lambda z: m.quadratic(z, A), x, vx)
    sym = 0.5 * (A + A.T)
    np.testing.assert_allclose(res, sym @ vx, rtol=1e-12)


@pytest.mark.parametrize("fn", ["hvp", "vhp"])
def test_hvp_vhp_loop_and_in_place(m, fn, rng):
    for f in (m.looped, m.in_place):
        x, v = rng.uniform(-0.8, 0.8, 4), rng.standard_normal(4)
        _, res = getattr(functional, fn)(f, x, v)
        H = numeric_hessian(f, x)
        np.testing.assert_allclose(res, H @ v if fn == "hvp" else v @ H, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fn", ["hvp", "vhp"])
def test_hvp_vhp_errors_and_strict(m, fn):
    call = getattr(functional, fn)
    x = np.ones(3)
    with pytest.raises(RuntimeError, match=f"The function given to {fn} should return a "
                                           f"single array"):
        call(m.two_outputs, (x, x), (x, x))
    with pytest.raises(RuntimeError, match=f"The array returned by the function given to {fn} "
                                           f"should contain a single element"):
        call(m.not_scalar, x, x)
    with pytest.raises(RuntimeError, match="The vector v can only be None"):
        call(m.scalar, x)
    out, res = call(m.scalar, np.array([3.0]))
    np.testing.assert_allclose(res, [2.0])
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function with respect "
                                           "to input 0 is independent of the input"):
        call(m.linear, (x, x), (x, x), strict=True)
    _, res = call(m.linear, (x, x), (x, x))
    np.testing.assert_array_equal(res[0], np.zeros(3))


def test_hvp_is_forward_over_reverse_and_vhp_reverse_over_reverse(m, monkeypatch, rng):
    used = []
    from s2sgrad import compiler
    original = compiler.compile_jvp   # (what functional calls: compiler.compile_jvp)
    monkeypatch.setattr(compiler, "compile_jvp",
                        lambda *a, **k: used.append(a[0].__name__) or original(*a, **k))
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    functional.hvp(m.rosenbrock, x, v)
    assert used == ["value_and_grad_rosenbrock"]
    functional.vhp(m.rosenbrock, x, v)
    assert used == ["value_and_grad_rosenbrock"]


# -- nesting ---------------------------------------------------------------------------------
def test_classic_perturbation_case_forward_over_reverse(m):
    # d/dx [ x * (d/dy (x + y))(y=1) ] = 1, by forward mode over the inner reverse mode
    _, jvp = functional.jvp(m.perturbation, 3.0, 1.0)
    assert jvp == pytest.approx(1.0)
    J = functional.jacobian(m.perturbation, 3.0, strategy="forward-mode")
    assert J == pytest.approx(1.0)


def test_vjp_contract_unchanged(m, rng):
    x = rng.random((4, 4))
    v = rng.standard_normal(4)
    out, vjp = functional.vjp(m.exp_reducer, x, v)
    np.testing.assert_allclose(vjp, numeric_vjp(m.exp_reducer, [x], v, 0), rtol=1e-6)
