"""`f(v, *rest)` where `rest` is a tuple the closure or the module holds (the
common `lambda v: loss(v, *args)`), or a slice of one with constant bounds: the
call with its items spelled out (it was refused: "no gradient rule for a call with
*args"). A new tuple bound there compiles again. Against central differences on
two shapes (one broadcasting), forward mode too."""
import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import functional


def loss(v, a, b=0.0):
    return np.sum(np.sin(v) * a + b ** 2 * v)


def around(rest):
    return lambda v: loss(v, *rest)


def around_slice(args):
    return lambda v: loss(v, *args[1:])


EXTRA = (1.0,)


def through_the_module(v):
    return loss(v, *EXTRA)


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,))])
def test_a_closure_tuple_spread_into_a_call(shapes, rng):
    x = rng.standard_normal(shapes[0])
    rest = (rng.standard_normal(shapes[1]), rng.standard_normal(shapes[1]))
    for f in (around(rest), around_slice((x,) + rest)):
        want = numeric_grad(f, [x], 0)
        np.testing.assert_allclose(s2sgrad.grad(f)(x), want, rtol=1e-6, atol=1e-8)
        u = rng.standard_normal(x.shape)
        _, tangent = functional.jvp(f, (x,), (u,))
        np.testing.assert_allclose(tangent, np.sum(want * u), rtol=1e-6, atol=1e-8)


def test_a_new_tuple_in_the_module_compiles_again(rng):
    global EXTRA
    x = rng.standard_normal(4)
    g = s2sgrad.grad(through_the_module)
    np.testing.assert_allclose(g(x), numeric_grad(through_the_module, [x], 0), rtol=1e-6,
                               atol=1e-8)
    saved = EXTRA
    EXTRA = (2.0, rng.standard_normal(4))   # (one item more: b too)
    try:
        np.testing.assert_allclose(g(x), numeric_grad(through_the_module, [x], 0),
                                   rtol=1e-6, atol=1e-8)
    finally:
        EXTRA = saved
    np.testing.assert_allclose(g(x), numeric_grad(through_the_module, [x], 0), rtol=1e-6,
                               atol=1e-8)
