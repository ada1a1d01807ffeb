"""Branches whose test is known before the code runs (`hasattr(np, "trapezoid")`):
the branch Python takes is differentiated, the other never resolved (NumPy 2 has no
np.trapz: code written for both versions was refused for naming it). Gradients are
compared with central differences on two shapes; the module's attribute appearing
later compiles the function again."""
import types

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import functional


def trapezoid_statement(y):
    if hasattr(np, "trapezoid"):
        return np.sum(np.trapezoid(y ** 2, dx=0.5, axis=-1))
    return np.sum(np.trapz(y ** 2, dx=0.5, axis=-1))


def trapezoid_expression(y):
    trap = np.trapezoid if hasattr(np, "trapezoid") else np.trapz
    return np.sum(trap(np.sin(y), axis=-1))


def nested_known_tests(y):
    z = y * 1.0
    for _ in range(2):
        if not hasattr(np, "no_such_function") and True:
            z = z + np.tanh(z)
        else:
            z = np.no_such_function(z)
        z = z * (0.5 if hasattr(np, "tanh") or np.no_such_function() else 2.0)
    return np.sum(z ** 2)


@pytest.mark.parametrize("f", [trapezoid_statement, trapezoid_expression,
                               nested_known_tests])
@pytest.mark.parametrize("shape", [(5,), (3, 4)])
def test_the_branch_python_takes_is_differentiated(f, shape):
    y = np.linspace(-0.9, 1.3, int(np.prod(shape))).reshape(shape)
    want = numeric_grad(f, [y], 0)
    np.testing.assert_allclose(s2sgrad.grad(f)(y), want, rtol=1e-6, atol=1e-8)
    u = np.linspace(1.0, -0.5, y.size).reshape(shape)
    _, tangent = functional.jvp(f, (y,), (u,))
    np.testing.assert_allclose(tangent, np.sum(want * u), rtol=1e-6, atol=1e-8)
    code = [line for line in s2sgrad.source(f).splitlines()
            if not line.lstrip().startswith("#")]   # (comments quote the user's lines)
    assert not [line for line in code if "trapz" in line or "no_such" in line]


compat = types.ModuleType("compat")


def _squares(x):
    return np.sum(x ** 2)


def _cubes(x):
    return np.sum(x ** 3)


compat.slow = _squares


def through_compat(x):
    if hasattr(compat, "fast"):
        return compat.fast(x)
    return compat.slow(x)


@pytest.mark.parametrize("x", [np.linspace(0.2, 1.0, 4), np.linspace(-1.0, 1.0, 6)])
def test_a_module_gaining_or_losing_the_attribute_compiles_again(x):
    g = s2sgrad.grad(through_compat)
    np.testing.assert_allclose(g(x), numeric_grad(_squares, [x], 0), rtol=1e-6, atol=1e-8)
    compat.fast = _cubes
    try:
        np.testing.assert_allclose(g(x), numeric_grad(_cubes, [x], 0), rtol=1e-6,
                                   atol=1e-8)
    finally:
        del compat.fast
    np.testing.assert_allclose(g(x), numeric_grad(_squares, [x], 0), rtol=1e-6, atol=1e-8)


SCALE = 2.0


def assigned_only_where_never_run(x):
    if hasattr(np, "no_such_function"):
        SCALE = 3.0   # noqa: F841 - makes SCALE local: reading it below is an error
    return np.sum(x * SCALE)


def test_a_name_only_a_dropped_branch_assigns_is_not_read_from_the_module():
    x = np.linspace(0.2, 1.0, 4)
    with pytest.raises(UnboundLocalError):
        assigned_only_where_never_run(x)   # (Python's own answer)
    with pytest.raises((UnboundLocalError, TypeError, NameError)):
        s2sgrad.grad(assigned_only_where_never_run)(x)
