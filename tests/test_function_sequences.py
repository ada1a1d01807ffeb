"""Sequences of functions the differentiated code loops over, indexes or zips.

A module-level tuple or list of functions (`ACTIVATIONS = (np.tanh, relu)`),
read inside the function, is unrolled as Python runs it: each item gets a name
of its own bound in the generated code. The pair rests on the name holding that
tuple, or the list holding those items: rebinding the name, replacing an item
or appending one compiles again. `zip(fns, other)` over such a sequence (or a
local literal of functions) is unrolled the same way. Every gradient is checked
against central differences, on two shapes.
"""
import numpy as np
import pytest
from conftest import check_vjp

import s2sgrad
from s2sgrad import functional

SHAPES = [(3,), (2, 4)]

MODULE = '''
import numpy as np


def relu_ish(u):
    return np.log1p(np.exp(u))


ACTS_TUPLE = (np.tanh, relu_ish, np.sin)
ACTS_LIST = [np.sin, np.tanh]
WEIGHTS = [0.5, 2.0]
COEFFS = [1.5, -0.5]


def over_tuple(x):
    y = x
    for act in ACTS_TUPLE:
        y = act(y) * 1.1 + 0.1 * y
    return np.sum(y ** 2)


def over_list(x):
    y = x * 0.7
    for act in ACTS_LIST:
        y = act(y) + y
    return np.sum(y)


def by_index(x):
    return np.sum(ACTS_TUPLE[1](x) * ACTS_LIST[-1](x))


def zipped_with_weights(x):
    s = 0.0
    for act, w in zip(ACTS_LIST, WEIGHTS):
        s = s + w * np.sum(act(x * w))
    return s


def zipped_local(x):
    fns = [np.tanh, np.cos, relu_ish]
    y = x
    for w, fn in zip([0.3, 1.2, -0.4], fns):
        y = y + w * fn(y)
    return np.sum(y)


def net(params, x):
    h = x
    for (W, b), act in zip(params, ACTS_LIST):
        h = act(W @ h + b)
    return np.sum(h ** 2)


def enumerated(x):
    y = x
    for i, act in enumerate(ACTS_TUPLE):
        y = act(y) * WEIGHTS[i % 2] + 0.1 * y * i
    return np.sum(y)


def enumerated_from_one(x):
    y = x * 0.5
    for k, fn in enumerate([np.sin, relu_ish], start=1):
        y = y + fn(y) / k
    return np.sum(y ** 2)


def enumerated_local(x):
    fns = [np.tanh, relu_ish]
    y = x + 0.2 * fns[1](x)
    for i, act in enumerate(fns, 1):
        y = act(y * 0.8) + 0.1 * i * y
    return np.sum(y)


def numbers_not_functions(x):
    y = x
    for c in COEFFS:
        y = y * c + np.sin(y)
    return np.sum(y)
'''


@pytest.fixture
def mod(make_module):
    return make_module(MODULE)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["over_tuple", "over_list", "by_index", "zipped_with_weights",
                                  "zipped_local", "enumerated", "enumerated_from_one",
                                  "enumerated_local",
                                  "numbers_not_functions"])
def test_gradient_matches_differences(mod, name, shape):
    x = np.random.default_rng(len(name)).uniform(-1.0, 1.0, shape)
    check_vjp(getattr(mod, name), (x,))


def check_tangent(f, shape, seed):
    """Forward mode's tangent of f in a random direction against central differences."""
    x = np.random.default_rng(seed).uniform(-1.0, 1.0, shape)
    v = np.random.default_rng(seed + 1).standard_normal(shape)
    _, tangent = functional.jvp(f, (x,), (v,))
    eps = 1e-6
    np.testing.assert_allclose(tangent, (f(x + eps * v) - f(x - eps * v)) / (2 * eps),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_mode_over_a_module_tuple(mod, shape):
    check_tangent(mod.over_tuple, shape, 7)
    check_tangent(mod.enumerated, shape, 8)


def test_the_items_get_names_of_their_own(mod):
    text = s2sgrad.source(mod.over_tuple)
    assert "tanh(y)" in text and "relu_ish_forward(y)" in text and "ACTS_TUPLE" not in text


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def test_changing_the_list_compiles_again(mod):
    """The pair was generated for the list's items: replacing one, appending one
    or rebinding the name gives the gradient of what the function computes now."""
    x = np.linspace(-0.8, 0.9, 5)
    grad = s2sgrad.grad(mod.over_list)
    np.testing.assert_allclose(grad(x), _fd(mod.over_list, x), rtol=1e-6, atol=1e-8)
    for change in (lambda: mod.ACTS_LIST.__setitem__(1, np.cos),
                   lambda: mod.ACTS_LIST.append(np.exp),
                   lambda: setattr(mod, "ACTS_LIST", [np.tanh])):
        before = grad(x)
        change()
        after = grad(x)
        np.testing.assert_allclose(after, _fd(mod.over_list, x), rtol=1e-6, atol=1e-8)
        assert not np.allclose(before, after)


def test_rebinding_the_tuple_compiles_again(mod):
    x = np.linspace(-0.5, 0.7, 4)
    grad = s2sgrad.grad(mod.by_index)
    grad(x)
    mod.ACTS_TUPLE = (np.sin, np.cos, np.tanh)
    np.testing.assert_allclose(grad(x), _fd(mod.by_index, x), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("n", [3, 4])
def test_zip_with_a_list_of_parameter_tuples(mod, n):
    rng = np.random.default_rng(n)
    params = [(rng.standard_normal((n, n)) * 0.5, rng.standard_normal(n)) for _ in range(2)]
    x = rng.standard_normal(n)
    g = s2sgrad.grad(mod.net)(params, x)
    eps = 1e-6
    for layer in range(2):
        for part in range(2):
            expected = np.zeros_like(params[layer][part])
            for i in np.ndindex(expected.shape):
                def shifted(d, layer=layer, part=part, i=i):
                    p = [[a.copy(), b.copy()] for a, b in params]
                    p[layer][part][i] += d
                    return mod.net([tuple(q) for q in p], x)
                expected[i] = (shifted(eps) - shifted(-eps)) / (2 * eps)
            np.testing.assert_allclose(g[layer][part], expected, rtol=1e-6, atol=1e-8)


ZIPPED = '''
import numpy as np

FNS = ({functions})


def f(x, ws):
    s = 0.0
    for fn, w in zip(FNS, ws):
        s = s + w * np.sum(fn(x))
    return s
'''


def test_a_zipped_sequence_shorter_than_the_functions_is_loud(make_module):
    """zip stops at the shortest sequence; the unrolled loop takes as many steps
    as there are functions, so a shorter sequence the compiler cannot see (an array)
    is an IndexError at run time, never a step silently left out. A list's length
    the call fixes (compiler.aggregates): two steps, exactly."""
    m = make_module(ZIPPED.format(functions="np.tanh, np.sin, np.cos"))
    x = np.linspace(0.1, 0.5, 3)
    g = s2sgrad.grad(m.f)(x, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(g, _fd(lambda z: m.f(z, [1.0, 2.0, 3.0]), x), rtol=1e-6)
    with pytest.raises(IndexError):
        s2sgrad.grad(m.f)(x, np.array([1.0, 2.0]))
    g = s2sgrad.grad(m.f)(x, [1.0, 2.0])
    np.testing.assert_allclose(g, _fd(lambda z: m.f(z, [1.0, 2.0]), x), rtol=1e-6)


# -- a def or lambda of the function passed to a helper -----------------------------------
PASSED = '''
import numpy as np


def apply_twice(g, x):
    return g(g(x))


def apply_with(x, fn=np.sin):
    return fn(x) * x


def local_def(x):
    def sq(z):
        return z * z * 0.5 + np.sin(z)
    return np.sum(apply_twice(sq, x))


def lambda_literal(x):
    return np.sum(apply_twice(lambda z: np.tanh(z) * 1.5, x))


def lambda_named(x):
    soft = lambda z: np.log1p(np.exp(z))   # noqa: E731
    return np.sum(apply_with(x, fn=soft) + apply_twice(soft, x))


def reads_outer(x):
    w = np.sum(x)

    def scaled(z):
        return z * w
    return np.sum(apply_twice(scaled, x))


def def_stored_in_a_list(x):
    def sq(z):
        return z * z * 0.5 + np.sin(z)
    fns = [sq, np.tanh]
    table = {"fn": sq, "c": 0.5}
    return np.sum(fns[0](x)) + np.sum(fns[1](x)) + np.sum(apply_twice(sq, x)) * table["c"]


def def_reading_outer_stored(x):
    w = np.sum(x)

    def scaled(z):
        return z * w
    fns = [scaled]
    return np.sum(fns[0](x))
'''


@pytest.fixture
def passed(make_module):
    return make_module(PASSED)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["local_def", "lambda_literal", "lambda_named"])
def test_a_function_of_the_function_passed_to_a_helper(passed, name, shape):
    x = np.random.default_rng(len(name)).uniform(-1.0, 1.0, shape)
    check_vjp(getattr(passed, name), (x,))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_def_stored_in_a_list_or_dict(passed, shape):
    """A nested def used as a value (the def statement runs nothing where it stands:
    the generated code crashed with a NameError) is the function itself."""
    x = np.random.default_rng(7).uniform(-1.0, 1.0, shape)
    check_vjp(passed.def_stored_in_a_list, (x,))


def test_a_def_reading_the_functions_variables_stored_is_refused(passed):
    with pytest.raises(s2sgrad.TransformError, match="scaled is used as a value here"):
        s2sgrad.grad(passed.def_reading_outer_stored)(np.ones(3))


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_mode_through_a_passed_def(passed, shape):
    check_tangent(passed.local_def, shape, 3)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_passed_def_reading_the_functions_variables(passed, shape):
    """(Refused before: now the helper is copied for the closure, w passed to it;
    tests/test_closures_passed.py has the rest.)"""
    x = np.random.default_rng(11).uniform(-1.0, 1.0, shape)
    check_vjp(passed.reads_outer, (x,))


def test_a_dict_zipped_with_functions_is_refused_not_read_by_index(make_module):
    """zip walks a dict's keys; the unrolled loop reads its items by position, so a
    dict there is a TypeError, never the values read as if they were the keys."""
    m = make_module(ZIPPED.format(functions="np.tanh, np.sin"))
    x = np.linspace(0.1, 0.5, 3)
    for ws in ([1.0, 2.0], (1.0, 2.0), np.array([1.0, 2.0])):
        np.testing.assert_allclose(s2sgrad.grad(m.f)(x, ws),
                                   np.cosh(x) ** -2 + 2.0 * np.cos(x), rtol=1e-12)
    with pytest.raises(TypeError, match="not a dict"):
        s2sgrad.grad(m.f)(x, {1: 1.0, 0: 2.0})
