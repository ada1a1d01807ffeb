"""Complex values near real-valued code: exact or loud.

s2sgrad's rules are those of real analysis: np.abs(z) of a complex z would get
g * np.sign(z), which is not its gradient. Complex values therefore must never
reach the gradient path unnoticed, wherever they come from:

- a complex argument the gradient is not taken for (`f(x, c)` with complex c):
  the pair is specialised to it and refuses c on the gradient path at compile time;
- a value whose dtype the compiler cannot see (a helper it does not
  differentiate, np.fft.fft of a constant): checked where it is made, at run time.

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
    return np.sum(np.tanh(w * c[0] + b))
'''


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("complex_guard"), "complex_guard_mod", SOURCE)


SHAPES = [(3,), (2, 4)]


def _c(shape, rng):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


@pytest.mark.parametrize("name", ["abs_of_product", "energy"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_complex_argument_on_the_gradient_path_is_refused_at_its_line(mod, rng, name,
                                                                         shape):
    f = getattr(mod, name)
    x, c = rng.standard_normal(shape), _c(shape, rng)
    for call in (lambda: s2sgrad.grad(f)(x, c), lambda: s2sgrad.value_and_grad(f)(x, c),
                 lambda: s2sgrad.vjp(f, x, c, wrt=0)[1](1.0), lambda: s2sgrad.grad(f)(x, c=c)):
        with pytest.raises(TransformError, match="complex values are not differentiated") \
                as info:
            call()
        assert info.value.filename.endswith("complex_guard_mod.py")
        assert "x * c" in info.value.text


def test_a_complex_argument_of_a_list_is_refused(mod, rng):
    params = [rng.standard_normal(3), rng.standard_normal(3)]
    with pytest.raises(TransformError, match="complex values are not differentiated"):
        s2sgrad.grad(mod.listed)(params, [_c(3, rng)])


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


@pytest.mark.parametrize("name", ["helper_made", "helper_made_imaginary"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_complex_value_from_a_helper_is_refused_where_it_is_made(mod, rng, name, shape):
    x = rng.standard_normal(shape)
    f = getattr(mod, name)
    with pytest.raises(TransformError, match="a complex value reaches the gradient path") \
            as info:
        s2sgrad.grad(f)(x)
    assert "c = " in info.value.text
    with pytest.raises(TransformError, match="a complex value reaches the gradient path"):
        functional.jvp(f, x, np.ones_like(x))


@pytest.mark.parametrize("name", ["helper_made_real", "helper_made_realised"])
@pytest.mark.parametrize("shape", SHAPES)
def test_real_values_from_helpers_keep_their_gradients(mod, rng, name, shape):
    f = getattr(mod, name)
    x = rng.uniform(0.5, 1.5, shape)
    np.testing.assert_allclose(s2sgrad.grad(f)(x), numeric_grad(f, (x,), 0),
                               rtol=1e-6, atol=1e-8)
    check_vjp(f, (x,))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_fourier_transform_on_the_gradient_path_is_refused(mod, rng, shape):
    x, s = rng.standard_normal(shape), rng.standard_normal(shape[-1])
    with pytest.raises(TransformError, match="complex values are not differentiated"):
        s2sgrad.grad(mod.spectrum)(x, s)
    got = s2sgrad.grad(mod.spectrum_magnitude)(x, s)
    np.testing.assert_allclose(got, numeric_grad(mod.spectrum_magnitude, (x, s), 0),
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
    with pytest.raises(TransformError, match="complex values are not differentiated"):
        s2sgrad.grad(mod.abs_of_product, jit=True)(x, c)
    with pytest.raises(TransformError, match="complex values are not differentiated"):
        s2sgrad.vjp(mod.abs_of_product, x, c, wrt=0, jit=True)
    c4 = _c((4,), rng)
    np.testing.assert_allclose(s2sgrad.grad(mod.complex_beside, jit=True)(x, c4),
                               numeric_grad(mod.complex_beside, (x, c4), 0),
                               rtol=1e-6, atol=1e-8)
