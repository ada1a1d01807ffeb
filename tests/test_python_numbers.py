"""Python floats get NumPy's derivatives. A pair specialised to Python numbers
computes on floats (fast), but Python's arithmetic is not NumPy's: the adjoint of
np.log(x) at x = 0.0 divided by zero (ZeroDivisionError, where NumPy gives inf),
of np.cos at inf called math.cos (ValueError), of np.power(x, 2.5) at x < 0 gave a
complex number (a TypeError later, and forward mode's real part of it silently).
Every entry point now gives, for a Python float, what it gives for the same value
as a NumPy array; at ordinary points, central differences."""
import math
import warnings

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import functional
from s2sgrad.runtime import scalar_math


def log_plus(x):
    return np.log(x) + x


def root(x):
    return x ** 0.5 * 2.0


def power(x):
    return np.power(x, 2.5)


def two_args(x, a):
    return np.sin(x) * a + np.log(a) + np.arctan2(x, a)


def scalar_loop(x, a):
    for _ in range(3):
        x = x + 0.1 * np.cos(x) * a
    return x


SINGULAR = [(log_plus, (0.0,)), (root, (0.0,)), (power, (-2.0,)), (two_args, (0.0, 0.0)),
            (scalar_loop, (math.inf, 1.0)), (log_plus, (-1.0,))]


def _as_arrays(args):
    return tuple(np.array(a) for a in args)


def _same(got, want):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-12)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@pytest.mark.parametrize("f, args", SINGULAR)
@pytest.mark.parametrize("entry", ["grad", "value_and_grad", "vjp", "jit"])
def test_a_python_float_gets_what_an_array_gets(f, args, entry):
    wrt = tuple(range(len(args)))

    def run(values):
        if entry == "grad":
            return s2sgrad.grad(f, wrt)(*values)
        if entry == "value_and_grad":
            return s2sgrad.value_and_grad(f, wrt)(*values)[1]
        if entry == "vjp":
            return s2sgrad.vjp(f, *values, wrt=wrt)[1](1.0)
        return s2sgrad.grad(f, wrt, jit=True)(*values)
    want = run(_as_arrays(args))
    got = run(args)
    assert all(type(g) is float for g in got), [type(g) for g in got]
    _same(got, want)


@pytest.mark.parametrize("f, args", SINGULAR)
def test_functional_entry_points_on_python_floats(f, args):
    ones = tuple(1.0 for _ in args)
    for fn in (functional.jvp, functional.hvp, functional.vjp):
        if fn is functional.vjp:
            got, want = fn(f, args)[1], fn(f, _as_arrays(args))[1]
        else:
            got, want = fn(f, args, ones)[1], fn(f, _as_arrays(args), ones)[1]
        _same(got, want)


@pytest.mark.parametrize("f, args", SINGULAR[:3])
def test_grad_of_grad_of_a_python_float_raises_nothing(f, args):
    got = s2sgrad.grad(s2sgrad.grad(f))(*args)
    want = s2sgrad.grad(s2sgrad.grad(f))(*_as_arrays(args))
    assert type(got) is float
    _same(got, want)


@pytest.mark.parametrize("f, args", [(two_args, (0.7, 1.3)), (scalar_loop, (0.4, -0.8)),
                                     (power, (1.7,))])
def test_ordinary_points_against_differences(f, args):
    wrt = tuple(range(len(args)))
    for values in (args, _as_arrays(args)):   # (the pair for numbers, and for arrays)
        got = s2sgrad.grad(f, wrt)(*values)
        for i in wrt:
            want = numeric_grad(f, [np.array(a) for a in values], i)
            np.testing.assert_allclose(got[i], want, rtol=1e-6, atol=1e-8)


def test_the_scalar_adjoint_calls_numbers_functions():
    s2sgrad.grad(scalar_loop, (0, 1))(0.4, -0.8)
    from s2sgrad.compiler import compile_function
    text = compile_function(scalar_loop, (0, 1), scalars=("x", "a")).module_source
    assert "_s2s_scalar_math.sin(x)" in text, text


POINTS = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -3.0, 710.0, -750.0, 1e308, math.inf,
          -math.inf, math.nan]


@pytest.mark.parametrize("name", sorted(scalar_math.NUMPY_TWINS))
def test_each_numbers_function_is_numpys_on_every_input(name):
    fn, twin = getattr(scalar_math, name), scalar_math.NUMPY_TWINS[name]
    for x in POINTS:
        got, want = fn(x), float(twin(x))
        assert type(got) is float
        assert (math.isnan(got) and math.isnan(want)) or \
            got == pytest.approx(want, rel=4e-16, abs=0.0), (name, x, got, want)


def reciprocal(x):
    return 1.0 / x + x


def test_a_function_that_raises_on_python_floats_has_a_derivative_that_does_too():
    # (1.0 / 0.0 raises in the function itself: no value, so no gradient either)
    with pytest.raises(ZeroDivisionError):
        reciprocal(0.0)
    with pytest.raises(ZeroDivisionError):
        s2sgrad.grad(reciprocal)(0.0)
    np.testing.assert_allclose(s2sgrad.grad(reciprocal)(0.5), -1.0 / 0.25 + 1.0, rtol=1e-12)


def error_functions(x, a):
    return math.erf(x * a) + 2.0 * math.erfc(x - a)


@pytest.mark.parametrize("x, a", [(0.3, 1.2), (-1.1, 0.4), (0.0, 2.0)])
def test_math_erf_and_erfc(x, a):
    # d erf(u) = 2 / sqrt(pi) exp(-u^2) du, d erfc(u) = -that
    slope = 2.0 / math.sqrt(math.pi)
    want = (slope * math.exp(-(x * a) ** 2) * a - 2.0 * slope * math.exp(-(x - a) ** 2),
            slope * math.exp(-(x * a) ** 2) * x + 2.0 * slope * math.exp(-(x - a) ** 2))
    got = s2sgrad.grad(error_functions, (0, 1))(x, a)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got, [numeric_grad(error_functions, [x, a], i) for i in (0, 1)],
                               rtol=1e-6)
    _, tangent = functional.jvp(lambda v: error_functions(v, a), (x,), (1.0,))
    np.testing.assert_allclose(tangent, want[0], rtol=1e-12)
    np.testing.assert_allclose(s2sgrad.grad(error_functions, (0, 1))(np.float64(x), a), want,
                               rtol=1e-12)


def reciprocal_sine(x, a):
    return a / np.sin(x) + np.exp(x) * a


def pendulum(x, v, a, b, n):
    for _ in range(n):
        v = v + 0.01 * (-a * np.sin(x) - b * v)
        x = x + 0.01 * v
    return x


def test_the_forward_keeps_numpys_values_as_python_floats():
    """np.sin(x) of a Python number in the forward is NumPy's value as a float
    (`_s2s_on_number`): the value is the function's own to the bit, and the
    arithmetic after it Python's, not NumPy scalars' (several times slower)."""
    from s2sgrad.compiler import compile_function
    text = compile_function(pendulum, (2, 3), scalars=("x", "v", "a", "b", "n")).source
    forward = text.split("_adjoint(")[0]
    assert "sin_x = _s2s_on_number(np.sin, x)" in forward, forward
    for args in [(1.0, 0.0, 4.0, 0.1, 60), (-0.3, 0.5, 2.0, 0.3, 17)]:
        value, grads = s2sgrad.value_and_grad(pendulum, (2, 3))(*args)
        assert value == pendulum(*args) and type(value) is float
        for i, g in zip((2, 3), grads):
            assert type(g) is float
            np.testing.assert_allclose(g, numeric_grad(pendulum, list(args), i), rtol=1e-6)
    # s2sgrad.source(args=...) shows the code such a call runs
    assert "_s2s_on_number(np.sin, x)" in s2sgrad.source(pendulum, (2, 3),
                                                          args=(1.0, 0.0, 4.0, 0.1, 5))
    # not in a pair that is differentiated again, nor without Python numbers
    assert "_s2s_on_number" not in compile_function(pendulum, (2, 3)).source
    assert "_s2s_on_number" not in compile_function(
        pendulum, (2, 3), scalars=("x", "v", "a", "b", "n"), pure=True).source


@pytest.mark.parametrize("x", [0.0, 0.4])
def test_on_numpy_numbers_the_forward_computes_as_numpy_does(x):
    """At x = 0.0, a / np.sin(x) divides by a Python 0.0 (ZeroDivisionError): the
    pair runs again on NumPy numbers, where on_number keeps NumPy scalars, and
    gives NumPy's inf, as the function does."""
    value, grads = s2sgrad.value_and_grad(reciprocal_sine, (0, 1))(x, 2.0)
    assert value == reciprocal_sine(x, 2.0)
    want = s2sgrad.grad(reciprocal_sine, (0, 1))(*_as_arrays((x, 2.0)))
    _same(grads, want)
    assert scalar_math.on_number(np.sin, np.float64(x)).__class__ is np.float64
    assert scalar_math.on_number(np.sin, np.float32(x)).__class__ is np.float32
    assert scalar_math.on_number(np.exp, 1).__class__ is float
