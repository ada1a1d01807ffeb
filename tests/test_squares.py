"""`v * v`: both parts of the product's rule are g * v, so the adjoint takes the part
of 2 * g once (a person's `2 * g * v`, one pass over v instead of three). Against
central differences on two shapes (one broadcasting), in place, complex, twice."""
import numpy as np
import pytest
from conftest import check_vjp

import s2sgrad

SOURCE = '''
import numpy as np


def energy(x, w):
    c = np.tanh(x * w)
    return np.sum(c * c) * 1e-1 + np.sum(x * x)


def updated(x, w):
    v = x + w
    v *= v
    return np.sum(np.sin(v))


def complex_square(x, w):
    z = x + 1j * w
    return np.sum(np.abs(z * z) + np.real(z * z))


def twice(x, w):
    return np.sum(np.cos(x * x) * w)
'''

SHAPES = [((5,), (5,)), ((3, 4), (4,))]


@pytest.mark.parametrize("xs, ws", SHAPES)
@pytest.mark.parametrize("name", ["energy", "updated", "complex_square", "twice"])
def test_squares_match_differences(make_module, name, xs, ws):
    m = make_module(SOURCE)
    rng = np.random.default_rng(len(xs))
    check_vjp(getattr(m, name), (rng.standard_normal(xs), rng.standard_normal(ws)))


@pytest.mark.parametrize("xs, ws", SHAPES)
def test_second_derivative_of_a_square(make_module, xs, ws):
    m = make_module(SOURCE)
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    v = rng.standard_normal(xs)
    hv = s2sgrad.functional.vhp(m.twice, (x, w), (v, np.zeros(ws)))[1][0]
    eps = 1e-5
    grad = s2sgrad.grad(m.twice)
    np.testing.assert_allclose(hv, (grad(x + eps * v, w) - grad(x - eps * v, w)) / (2 * eps),
                               rtol=1e-5, atol=1e-7)


def test_the_square_takes_one_part(make_module):
    m = make_module(SOURCE)
    text = s2sgrad.source(m.energy, wrt=0)
    assert "2.0 * x" in text and text.count("x_times_x_bar") <= 2, text
    assert "_s2s_copy_adjoint(c_bar)" not in text   # (the part is a new array)
