"""torch.autograd.functional's calls inside a function that is differentiated.

`functional.vjp(f, x, create_graph=True)` in differentiated code is read as code
that computes the vjp (so the outer derivative sees through it, as torch's
create_graph=True); `v=None` means 1 where f returns a scalar; without
create_graph (or False) the result is a constant to the outer derivative.
Every case is checked against central differences of the closed-form inner
derivative, on two shapes.
"""
import numpy as np
import pytest
from conftest import import_source, numeric_grad

import s2sgrad

SOURCE = '''
import numpy as np
from s2sgrad import functional

GRAPH = True


def energy(x):
    return np.sum(x ** 3)


def pair_energy(x, y):
    return np.sum(x ** 2 * y)


def vector(x):
    return x ** 2


def hvp_torch_style(x, v):
    _, g = functional.vjp(energy, x, create_graph=True)
    return np.sum(g * v)


def hvp_pair(x, y, v):
    _, (gx, gy) = functional.vjp(pair_energy, (x, y), create_graph=True)
    return np.sum(gx * v) + np.sum(gy * gy)


def vjp_given_v(x, v):
    _, g = functional.vjp(vector, x, v, create_graph=GRAPH)
    return np.sum(g * x)


def detached(x, v):
    _, g = functional.vjp(energy, x)          # create_graph=False: a constant
    return np.sum(g * x)


def detached_explicit(x, v):
    _, g = functional.vjp(vector, x, v, create_graph=False)
    return np.sum(g * np.sin(x))


def non_scalar_without_v(x, v):
    _, g = functional.vjp(vector, x, create_graph=True)
    return np.sum(g)


def with_hvp(x, v):
    _, hv = functional.hvp(energy, x, v, create_graph=True)
    return np.sum(hv * x)


def with_vhp_pair(x, y, v):
    _, (hx, hy) = functional.vhp(pair_energy, (x, y), (v, v), create_graph=True)
    return np.sum(hx * y) + np.sum(np.sin(hy))


def with_hvp_detached(x, v):
    _, hv = functional.hvp(energy, x, v)
    return np.sum(hv * x)


def two_outputs(x, y):
    return (x * y, np.sin(x))


def tuple_literal_cotangent(x, y, v):
    # v reaches the output only through the tuple literal passed as the cotangent
    _, (gx, gy) = functional.vjp(two_outputs, (x, y), (v, v * 2.0), create_graph=True)
    return np.sum(gx * gy)


def with_jvp(x, v):
    _, jv = functional.jvp(vector, x, v, create_graph=True)
    return np.sum(jv * np.sin(x))


def with_jvp_pair(x, y, v):
    _, jv = functional.jvp(two_outputs, (x, y), (v, v * v), create_graph=True)
    return np.sum(jv[0] * jv[1])


def with_jacobian(x):
    J = functional.jacobian(vector, x, create_graph=True)
    return np.sum(J * J)


def with_jacobian_pair(x, y):
    Jx, Jy = functional.jacobian(pair_energy, (x, y), True)
    return np.sum(Jx * Jy)


def with_hessian(x):
    H = functional.hessian(energy, x, create_graph=True)
    return np.sum(np.sin(H))


def with_hessian_detached(x):
    H = functional.hessian(energy, x)
    return np.sum(H * x)


def jacobian_of_a_pair(x):
    return functional.jacobian(two_outputs, (x, x), create_graph=True)[0][0]


def graph_flag_unknown(x, flag):
    _, g = functional.vjp(energy, x, create_graph=flag)
    return np.sum(g)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("inside"), "s2s_functional_inside", SOURCE)


SHAPES = [(3,), (2, 3)]


def _xv(shape):
    rng = np.random.default_rng(5)
    return rng.uniform(-1.5, 1.5, shape), rng.standard_normal(shape)


@pytest.mark.parametrize("shape", SHAPES)
def test_v_none_means_one_for_a_scalar_output(m, shape):
    x, v = _xv(shape)
    got = s2sgrad.grad(m.hvp_torch_style, wrt=(0, 1))(x, v)
    # d/dx sum(3x^2 v) = 6 x v; d/dv = 3 x^2
    np.testing.assert_allclose(got[0], 6 * x * v, rtol=1e-12)
    np.testing.assert_allclose(got[1], 3 * x ** 2, rtol=1e-12)
    for i in (0, 1):
        np.testing.assert_allclose(got[i], numeric_grad(m.hvp_torch_style, [x, v], i),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_tuple_of_inputs(m, shape):
    x, v = _xv(shape)
    y = np.cos(x)
    got = s2sgrad.grad(m.hvp_pair, wrt=(0, 1, 2))(x, y, v)
    for i in range(3):
        np.testing.assert_allclose(got[i], numeric_grad(m.hvp_pair, [x, y, v], i),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_given_v_with_a_module_level_flag(m, shape):
    x, v = _xv(shape)
    got = s2sgrad.grad(m.vjp_given_v, wrt=(0, 1))(x, v)
    for i in (0, 1):
        np.testing.assert_allclose(got[i], numeric_grad(m.vjp_given_v, [x, v], i),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", SHAPES)
def test_without_create_graph_the_result_is_a_constant(m, shape):
    x, v = _xv(shape)
    g = 3 * x ** 2                            # the inner vjp's value, held fixed
    np.testing.assert_allclose(s2sgrad.grad(m.detached)(x, v), g, rtol=1e-12)
    got = s2sgrad.grad(m.detached_explicit)(x, v)
    np.testing.assert_allclose(got, 2 * x * v * np.cos(x), rtol=1e-12)
    # ... which is the derivative of sum(g * sin(x)) with g = 2 x v frozen
    frozen = 2 * x * v
    np.testing.assert_allclose(
        got, numeric_grad(lambda z: np.sum(frozen * np.sin(z)), [x], 0), rtol=1e-6)


def test_v_none_for_a_non_scalar_output_is_refused_as_torch_does(m):
    x, v = _xv((3,))
    with pytest.raises(ValueError, match="scalar"):
        s2sgrad.grad(m.non_scalar_without_v)(x, v)


def test_create_graph_must_be_known_when_compiling(m):
    x, _ = _xv((3,))
    with pytest.raises(s2sgrad.TransformError, match="create_graph must be True or False"):
        s2sgrad.grad(m.graph_flag_unknown)(x, True)


@pytest.mark.parametrize("shape", SHAPES)
def test_hvp_and_vhp_inside(m, shape):
    x, v = _xv(shape)
    y = np.cos(x)
    got = s2sgrad.grad(m.with_hvp, wrt=(0, 1))(x, v)
    np.testing.assert_allclose(got[0], 12 * x * v, rtol=1e-12)   # d/dx sum(6 x^2 v)
    np.testing.assert_allclose(got[1], 6 * x * x, rtol=1e-12)
    got = s2sgrad.grad(m.with_vhp_pair, wrt=(0, 1, 2))(x, y, v)
    for i in range(3):
        np.testing.assert_allclose(got[i], numeric_grad(m.with_vhp_pair, [x, y, v], i),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", SHAPES)
def test_hvp_without_create_graph_is_a_constant(m, shape):
    x, v = _xv(shape)
    np.testing.assert_allclose(s2sgrad.grad(m.with_hvp_detached)(x, v), 6 * x * v,
                               rtol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_cotangent_written_as_a_tuple_literal_gets_its_gradient(m, shape):
    """Was a silent zero for v: the literal was not a name the call site counted."""
    x, v = _xv(shape)
    y = np.cos(x)
    got = s2sgrad.grad(m.tuple_literal_cotangent, wrt=(0, 1, 2))(x, y, v)
    for i in range(3):
        np.testing.assert_allclose(got[i], numeric_grad(m.tuple_literal_cotangent, [x, y, v], i),
                                   rtol=1e-6, atol=1e-8)
    assert np.any(got[2] != 0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name, n", [("with_jvp", 2), ("with_jvp_pair", 3),
                                     ("with_jacobian", 1), ("with_jacobian_pair", 2),
                                     ("with_hessian", 1)])
def test_jvp_jacobian_and_hessian_inside(m, shape, name, n):
    x, v = _xv(shape)
    args = [x, v] if n == 2 and name == "with_jvp" else \
        [x, np.cos(x), v][:n] if name == "with_jvp_pair" else [x, np.cos(x)][:n]
    f = getattr(m, name)
    got = s2sgrad.grad(f, wrt=tuple(range(n)))(*args)
    for i in range(n):
        np.testing.assert_allclose(got[i], numeric_grad(f, list(args), i), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_hessian_without_create_graph_is_a_constant(m, shape):
    x, _ = _xv(shape)
    H = np.diag(6 * x.ravel()).reshape(x.shape + x.shape)
    expected = np.sum(H, axis=tuple(range(x.ndim)))   # d/dx sum(H * x), H frozen
    np.testing.assert_allclose(s2sgrad.grad(m.with_hessian_detached)(x), expected, rtol=1e-12)


def test_a_jacobian_of_several_outputs_is_refused_when_it_runs(m):
    with pytest.raises(TypeError, match="need func to return one array"):
        s2sgrad.grad(m.jacobian_of_a_pair)(np.ones(3))
