"""Calls of a def or lambda nested in a differentiated function, and derivatives of
them: the outer variables it reads are extra trailing parameters of the function the
compiler lifts it to, and each call passes every parameter of its own before them.

Found by probing: a nested def with a default, called without it, was lifted as
`def cell(u, k, s=2)` (the default moved onto the outer variable) and called
`cell(x, s)`: the outer value took k's place, silently (the witness caught the
forward's value; with it off the gradient was wrong). A keyword argument was
refused ("multiple values for argument 'k'"). And `functional.vjp(cell, x, v,
create_graph=True)` of a closure passed the outer variables after v, where the
derivative's code takes v last: wrong gradients, silently, for vjp and hvp.
"""
import numpy as np
import pytest
from conftest import import_source, numeric_grad

import s2sgrad

SOURCE = '''
import numpy as np
import s2sgrad
from s2sgrad import functional

W3 = np.array([0.7, -0.2, 0.4])


def default_left_out(x, c):
    scale = 1.5 * np.tanh(c)
    def cell(u, k=2):
        return np.sin(scale * u) ** k
    return np.sum(cell(x))


def default_by_keyword(x, c):
    scale = 1.5 * np.tanh(c)
    def cell(u, k=2):
        return np.sin(scale * u) ** k
    return np.sum(cell(x, k=3)) + np.sum(cell(x, 3)) + np.sum(cell(x))


def negative_default(x, c):
    shift = np.tanh(c)
    def cell(u, k=-0.7, m=2.0):
        return np.tanh(u * k + shift) * m
    return np.sum(cell(x, m=0.5) + cell(x) * cell(x, 0.3))


def lambda_default(x, c):
    scale = np.cos(c)
    g = s2sgrad.grad(lambda v, k=2.0: np.sum(np.sin(scale * v) ** k))(x)
    return np.sum(g ** 2)


def named_lambda_called_with_defaults(x, c):
    shift = np.sin(c)
    g = lambda v, k=2.0, m=-0.5: np.tanh(v * k) + m * shift  # noqa: E731
    return np.sum(g(x) + g(x, 3.0) * g(x, m=1.5))


def named_lambda_default_from_a_variable(x, c):
    k = 2.0
    g = lambda v, k=k: v * k * c  # noqa: E731
    return np.sum(g(x))


def grad_of_closure_with_default(x, c):
    scale = 1.5 * np.tanh(c)
    def inner(v, k=2):
        return np.sum(np.sin(scale * v) ** k)
    return np.sum(s2sgrad.grad(inner)(x) ** 2)


def vjp_of_closure(x, c):
    scale = 1.5 * np.tanh(c)
    def inner(v):
        return np.sin(scale * v)
    out, g = functional.vjp(inner, x, W3[:x.shape[-1]] + 0.0 * x, create_graph=True)
    return np.sum(g ** 2) + np.sum(out)


def vjp_of_closure_with_default(x, c):
    scale = 1.5 * np.tanh(c)
    def inner(v, k=2.0):
        return np.sin(scale * v) ** k
    out, g = functional.vjp(inner, x, np.cos(x), create_graph=True)
    return np.sum(g ** 2)


def vjp_of_named_lambda(x, c):
    scale = 1.5 * np.tanh(c)
    act = lambda u: np.tanh(scale * u) * u
    scale = scale * 0.5 + 0.1   # (a lambda reads the value when it is called)
    out, g = functional.vjp(act, x, np.cos(x), create_graph=True)
    return np.sum(g ** 2)


def jvp_of_closure(x, c):
    scale = 1.5 * np.tanh(c)
    def inner(v, k=2.0):
        return np.sin(scale * v) * k
    out, t = functional.jvp(inner, x, np.cos(x), create_graph=True)
    return np.sum(t ** 2)


def hvp_of_closure(x, c):
    scale = 1.5 * np.tanh(c)
    def inner(v):
        return np.sum(np.sin(scale * v) ** 2)
    out, hv = functional.hvp(inner, x, np.cos(x), create_graph=True)
    return np.sum(hv ** 2)


def lambda_calling_a_nested_def(x, c):
    def inner(v):
        return np.sin(v * c)
    return np.sum(s2sgrad.grad(lambda u: np.sum(inner(u)))(x))


def default_from_a_variable(x, c):
    n = 3.0
    def inner(v, k=n):
        return np.sum(np.sin(v * c) ** k)
    return np.sum(s2sgrad.grad(inner)(x))
'''

NAMES = ["default_left_out", "default_by_keyword", "negative_default", "lambda_default",
         "named_lambda_called_with_defaults",
         "grad_of_closure_with_default", "vjp_of_closure", "vjp_of_closure_with_default",
         "vjp_of_named_lambda", "jvp_of_closure", "hvp_of_closure"]
# c a number, x a vector; c of x's shape; c broadcast against a matrix x
SHAPES = [((3,), ()), ((2,), (2,)), ((2, 3), (3,))]


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("closure_arguments"), "closure_arguments",
                         SOURCE)


@pytest.mark.parametrize("witness", [True, False], ids=["witness", "no_witness"])
@pytest.mark.parametrize("shapes", SHAPES, ids=["vector", "same", "broadcast"])
@pytest.mark.parametrize("name", NAMES)
def test_closure_calls_and_derivatives_match_differences(mod, name, shapes, witness):
    if name == "vjp_of_closure" and len(shapes[0]) > 1:
        shapes = ((3,), shapes[1])   # (its v is a vector of x's length)
    rng = np.random.default_rng(7)
    args = [rng.uniform(0.2, 1.1, s) if s else float(rng.uniform(0.2, 1.1)) for s in shapes]
    f = getattr(mod, name)
    grads = s2sgrad.grad(f, wrt=(0, 1), witness=witness)(*args)
    for i, g in enumerate(grads):
        expected = numeric_grad(f, list(args), i)
        assert np.shape(g) == np.shape(args[i])
        np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-8,
                                   err_msg=f"{name}: gradient of argument {i}")


@pytest.mark.parametrize("name, says", [
    ("lambda_calling_a_nested_def", "uses inner, defined inside this function too"),
    ("default_from_a_variable", "defaults that are not constants"),
    ("named_lambda_default_from_a_variable", "defaults that are not constants"),
])
def test_what_a_lifted_function_could_not_see_is_refused_at_the_line(mod, name, says):
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(getattr(mod, name))(np.array([0.3, 0.5]), 0.7)
    text = str(info.value)
    assert says in text
    assert "closure_arguments.py:" in text and "^" in text


def test_forward_mode_of_a_closure_with_its_default(mod):
    x, c = np.array([0.3, 0.5, 0.9]), 0.4
    f = mod.default_by_keyword
    _, tangent = s2sgrad.functional.jvp(lambda u: f(u, c), x, np.ones(3))
    expected = numeric_grad(f, [x, c], 0) @ np.ones(3)
    np.testing.assert_allclose(tangent, expected, rtol=1e-6, atol=1e-8)
