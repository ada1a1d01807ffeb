"""A minus sign outside the sum that undoes broadcasting, and no guard where a
constant factor proves `*` is arithmetic.

`x - y` gives y the cotangent `-unbroadcast(g, y)` (negating the small summed
array, not the large broadcast one), and a cotangent reached through a minus
accumulates with `-` (`b_bar -= ...`). `-0.5 * s` cannot repeat a list (a list
times a float is a TypeError), so it needs no `no_sequence_arithmetic` guard,
as `0.5 * s` never did."""
import numpy as np
import pytest
from conftest import assert_grads_match_differences, numeric_grad

import s2sgrad
from s2sgrad.compiler import compile_function

SOURCE = '''
import numpy as np

def centred(x, m):
    d = x - m
    return np.sum(d ** 2 * np.arange(d.shape[-1]))

def twice(x, m):
    a = np.sin(x) - m
    b = np.cos(x) - m
    return np.sum(a * b)

def scaled(x):
    s = np.sum(x ** 2, axis=-1)
    return np.sum(-0.5 * s + np.exp(-2.0 * s))
'''


@pytest.mark.parametrize("shapes", [((4, 3), (3,)), ((2, 3), (2, 3)), ((5, 2), (1, 2))])
@pytest.mark.parametrize("name", ["centred", "twice"])
def test_a_subtracted_broadcast_operand_against_differences(make_module, name, shapes):
    module = make_module(SOURCE)
    f = getattr(module, name)
    rng = np.random.default_rng(3)
    x, m = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    assert_grads_match_differences(f, (x, m), (0, 1))


def test_the_minus_is_outside_the_sum_and_accumulates_as_a_subtraction(make_module):
    module = make_module(SOURCE)
    text = compile_function(module.twice, (0, 1)).source
    assert "_s2s_unbroadcast(-" not in text
    assert "-_s2s_unbroadcast(" in text
    assert "+ -" not in text.split("def twice_adjoint")[1]
    assert "m_bar -= " in text or "m_bar = m_bar - " in text


@pytest.mark.parametrize("shape", [(3,), (4, 2)])
def test_a_negative_constant_factor_needs_no_sequence_guard(make_module, shape):
    module = make_module(SOURCE)
    text = compile_function(module.scaled, (0,)).source
    assert "no_sequence_arithmetic" not in text
    x = np.random.default_rng(1).standard_normal(shape)
    np.testing.assert_allclose(s2sgrad.grad(module.scaled)(x),
                               numeric_grad(module.scaled, (x,), 0), rtol=1e-6, atol=1e-8)


def test_a_list_times_a_negative_int_is_still_refused(make_module):
    module = make_module('''
def f(x, n):
    xs = [x]
    return sum(xs * -n)
''')
    with pytest.raises(s2sgrad.TransformError, match="repeating a list"):
        s2sgrad.grad(module.f)(1.5, -2)
