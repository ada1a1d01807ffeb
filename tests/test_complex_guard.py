"""Complex values near real-valued code: exact or loud.

The rules of real analysis would give np.abs(z) of a complex z the gradient
g * np.sign(z), which is not its gradient. Complex values therefore must never
reach the gradient path unnoticed, wherever they come from:

- a complex argument (`f(x, c)` with complex c, differentiated or not): the
  pair is specialised to it, and the operations on it take the rules for
  complex arguments (rules/complex_rules.py) or are refused at their line;
- np.fft.fft of a constant and the like: known complex, likewise;
- a value a function of yours returns where no gradient passes through the call:
  the function is compiled for its result's kind, and complex values take the
  rules for complex arguments like the others;
- a value whose dtype the compiler cannot see (a function without source, a
  method of another library's object): checked where it is made, at run time.

Before these checks, `np.sum(np.abs(x * c))` returned a wrong gradient with
only a ComplexWarning, and `np.abs(1j * x)` through a helper a wrong *real* one.
Where the complex value stays off the gradient path (np.abs of it, or a value
nothing differentiated reads), gradients are checked against central differences
on two shapes.
"""
import numpy as np
import pytest
from conftest import check_vjp, import_source, numeric_grad

import s2sgrad
from s2sgrad import TransformError, functional

SOURCE = '''
import numpy as np


def weights(n):
    return np.exp(1j * np.arange(n))


def real_weights(n):
    return np.cos(np.arange(n)) + 2.0


def imaginary_weights(n):
    return 1j * real_weights(n)


# a function the compiler cannot read (made by eval, no source): its result's dtype
# is unseen
unseen_weights = eval("lambda n: np.exp(1j * np.arange(n))", {"np": np})


def unseen_made(x):
    c = unseen_weights(x.shape[-1])
    return np.sum(np.abs(x * c))


def abs_of_product(x, c):
    return np.sum(np.abs(x * c) ** 3)


def energy(x, c):
    y = x * c
    return np.sum(np.real(y * np.conj(y)))


def helper_made(x):
    c = weights(x.shape[-1])
    return np.sum(np.abs(x * c))


def helper_made_imaginary(x):
    c = imaginary_weights(x.shape[-1])   # (np.abs(1j * x) had a wrong *real* gradient)
    return np.sum(np.abs(x * c))


def helper_made_real(x):
    w = real_weights(x.shape[-1])
    return np.sum(np.abs(x * w) ** 1.5)


def helper_made_realised(x):
    c = weights(x.shape[-1])
    return np.sum(np.sin(x * np.real(c)) + x * np.abs(c))


def spectrum(x, s):
    F = np.fft.fft(s)
    return np.sum(np.abs(x * F) ** 2)


def spectrum_magnitude(x, s):
    F = np.fft.fft(s)
    return np.sum(x ** 2 * np.abs(F))


def complex_beside(x, c):
    return np.sum(x ** 2) * np.abs(np.sum(c))


def listed(params, c):
    w, b = params
    return np.sum(np.abs(np.tanh(w * c[0] + b)) ** 2)
'''


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("complex_guard"), "complex_guard_mod", SOURCE)


SHAPES = [(3,), (2, 4)]


def _c(shape, rng):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _wirtinger_grad(f, z, h=1e-6):
    """dL/dx - i dL/dy by central differences (autograd's and JAX's convention)."""
    g = np.zeros(z.shape, dtype=complex)
    for k in np.ndindex(z.shape):
        e = np.zeros(z.shape, dtype=complex)
        e[k] = h
        g[k] = (f(z + e) - f(z - e)) / (2 * h) - 1j * (f(z + 1j * e) - f(z - 1j * e)) / (2 * h)
    return g


@pytest.mark.parametrize("name", ["abs_of_product", "energy"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_complex_argument_on_the_gradient_path_takes_the_complex_rules(mod, rng, name,
                                                                          shape):
    """(Before the complex rules these were refused; before the guard, wrong.)"""
    f = getattr(mod, name)
    x, c = rng.standard_normal(shape), _c(shape, rng)
    want_x = numeric_grad(f, (x, c), 0)
    for got in (s2sgrad.grad(f)(x, c), s2sgrad.value_and_grad(f)(x, c)[1],
                s2sgrad.vjp(f, x, c, wrt=0)[1](1.0), s2sgrad.grad(f)(x, c=c)):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(s2sgrad.grad(f, wrt=1)(x, c),
                               _wirtinger_grad(lambda w: f(x, w), c), rtol=1e-6, atol=1e-8)


def test_an_operation_without_a_complex_rule_is_refused_at_its_line(make_module, rng):
    m = make_module("""
import numpy as np


def f(x, c):
    y = x * c
    return np.linalg.norm(y) + np.sum(np.maximum(np.real(y), 0.0))
""")
    with pytest.raises(TransformError, match="is not differentiated for complex values") \
            as info:
        s2sgrad.grad(m.f)(rng.standard_normal(3), _c(3, rng))
    assert "np.linalg.norm(y)" in info.value.text


def test_a_complex_argument_of_a_list_is_differentiated(mod, rng):
    params = [rng.standard_normal(3), rng.standard_normal(3)]
    c = [_c(3, rng)]
    got = s2sgrad.grad(mod.listed)(params, c)
    for i in range(2):
        def f(p, i=i):
            q = list(params)
            q[i] = p
            return mod.listed(q, c)
        np.testing.assert_allclose(got[i], numeric_grad(f, (params[i],), 0), rtol=1e-6,
                                   atol=1e-8)


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_complex_argument_off_the_gradient_path_is_fine(mod, rng, shape):
    x, c = rng.standard_normal(shape), _c((4,), rng)
    got = s2sgrad.grad(mod.complex_beside)(x, c)
    np.testing.assert_allclose(got, numeric_grad(mod.complex_beside, (x, c), 0),
                               rtol=1e-6, atol=1e-8)
    assert got.dtype == np.float64
    # the same function on a real c runs its own (real) pair
    real_c = rng.standard_normal(4)
    np.testing.assert_allclose(s2sgrad.grad(mod.complex_beside)(x, real_c),
                               numeric_grad(mod.complex_beside, (x, real_c), 0),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", SHAPES)
def test_an_unseen_complex_value_is_refused_where_it_is_made(mod, rng, shape):
    x = rng.standard_normal(shape)
    with pytest.raises(TransformError, match="a complex value reaches the gradient path") \
            as info:
        s2sgrad.grad(mod.unseen_made)(x)
    assert "c = " in info.value.text
    with pytest.raises(TransformError, match="a complex value reaches the gradient path"):
        functional.jvp(mod.unseen_made, x, np.ones_like(x))


@pytest.mark.parametrize("name", ["helper_made", "helper_made_imaginary"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_complex_value_from_a_helper_takes_the_complex_rules(mod, rng, name, shape):
    # (np.abs(x * c) with c complex: the real rule's g * sign(x * c) is wrong here)
    x = rng.standard_normal(shape)
    f = getattr(mod, name)
    np.testing.assert_allclose(s2sgrad.grad(f)(x), numeric_grad(f, (x,), 0),
                               rtol=1e-6, atol=1e-8)
    check_vjp(f, (x,))
    v = rng.standard_normal(shape)
    _, tangent = functional.jvp(f, x, v)
    np.testing.assert_allclose(tangent, np.sum(numeric_grad(f, (x,), 0) * v),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["helper_made_real", "helper_made_realised"])
@pytest.mark.parametrize("shape", SHAPES)
def test_real_values_from_helpers_keep_their_gradients(mod, rng, name, shape):
    f = getattr(mod, name)
    x = rng.uniform(0.5, 1.5, shape)
    np.testing.assert_allclose(s2sgrad.grad(f)(x), numeric_grad(f, (x,), 0),
                               rtol=1e-6, atol=1e-8)
    check_vjp(f, (x,))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_fourier_transform_of_a_constant_is_known_complex(mod, rng, shape):
    """np.fft.fft of a constant is complex: x * F takes the complex rules (np.abs's
    is not np.sign's)."""
    x, s = rng.standard_normal(shape), rng.standard_normal(shape[-1])
    for name in ("spectrum", "spectrum_magnitude"):
        f = getattr(mod, name)
        np.testing.assert_allclose(s2sgrad.grad(f)(x, s), numeric_grad(f, (x, s), 0),
                                   rtol=1e-6, atol=1e-8)


def test_the_check_is_in_the_generated_code_only_where_needed(mod):
    checked = s2sgrad.source(mod.helper_made_real)
    assert "_s2s_real_value(w" in checked
    assert "_s2s_real_value" not in s2sgrad.source(mod.complex_beside)
    # a realised value (np.real, np.abs) is not traced back to its source
    assert "_s2s_real_value" not in s2sgrad.source(mod.helper_made_realised)


@pytest.mark.parametrize("shape", SHAPES)
def test_jit_takes_complex_arguments_to_the_numpy_pair(mod, rng, shape):
    """The numba pair is not specialised to complex arguments: such calls run the
    NumPy backend's pair, which is (so the same refusal, or the same gradient)."""
    x, c = rng.standard_normal(shape), _c(shape, rng)
    want = numeric_grad(mod.abs_of_product, (x, c), 0)
    np.testing.assert_allclose(s2sgrad.grad(mod.abs_of_product, jit=True)(x, c), want,
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(
        s2sgrad.vjp(mod.abs_of_product, x, c, wrt=0, jit=True)[1](1.0), want,
        rtol=1e-6, atol=1e-8)
    c4 = _c((4,), rng)
    np.testing.assert_allclose(s2sgrad.grad(mod.complex_beside, jit=True)(x, c4),
                               numeric_grad(mod.complex_beside, (x, c4), 0),
                               rtol=1e-6, atol=1e-8)
