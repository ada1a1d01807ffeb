"""A def or lambda that reads the function's variables, passed to a helper.

`apply(act, x)` where `act` closes over `W` calls a copy of `apply` made for
it: its calls of the parameter call `act` lifted, `W` passed at the call
(normalize/closures.py). Every gradient is checked against central
differences on two shapes (one broadcasting); forward mode and a second
derivative too; uses of the parameter other than calls keep the refusal.
"""
import numpy as np
import pytest
from conftest import check_jvp, check_vjp, numeric_grad

import s2sgrad
from s2sgrad import functional

MODULE = '''
import numpy as np


def apply(fn, x, times=2):
    out = x
    for _ in range(times):
        out = fn(out) * 0.5 + out * 0.5
    return out


def apply_kw(x, *, fn, scale=1.5):
    return fn(x * scale) + fn(x)


def both(f, g, x):
    return f(g(x)) - g(x) * 0.3


def nested(fn, x):
    inner = lambda u: fn(u) * 2.0
    return inner(x) + np.sum(fn(x))


def def_closure(W, x):
    def act(z):
        return np.tanh(z * W) + 0.1 * z
    return np.sum(apply(act, x) ** 2)


def lambda_closure(W, x, s):
    return np.sum(apply(lambda z: np.sin(z * W) * s, x, 3))


def keyword_closure(W, x):
    shift = np.sum(W) * 0.2
    act = lambda z: np.tanh(z + shift) * W
    return np.sum(apply_kw(x, fn=act))


def two_closures(W, x):
    a = lambda z: np.sin(z) * W
    def b(z):
        return z * np.sum(W) + 0.5
    return np.sum(both(a, b, x))


def called_inside_a_lambda(W, x):
    act = lambda z: np.cos(z * W)
    return np.sum(nested(act, x))


def late_binding(W, x):
    k = np.sum(W)
    act = lambda z: np.tanh(z * k)
    k = k * 0.5 + 0.2          # Python's closure reads this value at the call
    return np.sum(apply(act, x))


def spread(W, x):
    return np.sum(apply(x=x, **{"times": 3, "fn": lambda z: np.tanh(z * W)}))


def invoked(W, x):
    return np.sum((lambda z: np.tanh(z * W) * z)(x))


def keeps_it(fn, x):
    fns = [fn]
    return fns[0](x)


def passes_it_on(fn, x):
    return apply(fn, x)


def stores_it(W, x):
    return np.sum(keeps_it(lambda z: z * W, x))


def relays_it(W, x):
    return np.sum(passes_it_on(lambda z: z * W, x))
'''

# (W's shape, x's shape): W broadcasts against x in the second
SHAPES = [((3,), (3,)), ((4,), (2, 4))]


@pytest.fixture
def mod(make_module):
    return make_module(MODULE)


def _args(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) * 0.7 for s in shapes]


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("name", ["def_closure", "keyword_closure", "two_closures",
                                  "called_inside_a_lambda", "late_binding", "spread",
                                  "invoked"])
def test_a_closure_passed_to_a_helper_gets_its_variables_gradients(mod, name, shapes):
    check_vjp(getattr(mod, name), _args(shapes))


@pytest.mark.parametrize("shapes", SHAPES)
def test_a_lambda_closing_over_a_number(mod, shapes):
    W, x = _args(shapes)
    check_vjp(mod.lambda_closure, [W, x, 0.8])


def test_the_helper_is_a_copy_made_for_the_closure(mod):
    text = s2sgrad.source(mod.def_closure, wrt=(0, 1))
    assert "for the closures passed to it" not in text   # (the generated pair, not the copy)
    assert "act_forward" in text and "W_bar" in text
    # the original helper is untouched and still called as it is elsewhere
    np.testing.assert_allclose(mod.apply(np.sin, np.ones(2)),
                               (np.sin(np.sin(1.0) * 0.5 + 0.5) * 0.5
                                + (np.sin(1.0) * 0.5 + 0.5) * 0.5) * np.ones(2))


@pytest.mark.parametrize("shapes", SHAPES)
def test_forward_mode_through_the_copy(mod, shapes):
    check_jvp(mod.def_closure, _args(shapes, seed=1), _args(shapes, seed=2))


def test_a_second_derivative_through_the_copy(mod):
    W, x = _args(SHAPES[0], seed=3)
    grad_W = s2sgrad.grad(mod.def_closure, wrt=0)
    v = np.random.default_rng(4).standard_normal(W.shape)
    _, hv = functional.hvp(lambda w: mod.def_closure(w, x), W, v)
    expected = numeric_grad(lambda w: float(np.dot(grad_W(w, x), v)), [W], 0, eps=1e-5)
    np.testing.assert_allclose(hv, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name, what", [("stores_it", "other than by calling it"),
                                        ("relays_it", "other than by calling it")])
def test_a_helper_that_keeps_or_passes_the_function_on_is_refused(mod, name, what):
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(getattr(mod, name), wrt=0)(np.ones(3), np.ones(3))
    message = str(info.value)
    assert "reads W of the function around it" in message and what in message
    assert info.value.lineno is not None


FACTORY = '''
import numpy as np


def apply(fn, x):
    return fn(x) * 0.5 + x


def make(k, W):
    def f(x):
        g = lambda u: np.sin(u * W) * k
        return np.sum(g(x) ** 2) + np.sum(apply(g, x))
    return f
'''


@pytest.mark.parametrize("shapes", SHAPES)
def test_a_lambda_reading_a_variable_of_the_enclosing_factory(make_module, shapes):
    """(Once a NameError in the generated code: the lambda, lifted to the module,
    no longer saw the factory's cell.)"""
    W, x = _args(shapes, seed=5)
    f = make_module(FACTORY).make(0.7, W)
    check_vjp(f, [x])
