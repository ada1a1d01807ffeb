"""Item-level activity of tuples passed from one call to the next.

`out, res = f_forward(x, W); f_adjoint(res, g)` is the shape of every derived
gradient: `res` holds values that vary with x and constants such as W. The
callee that receives `res` is compiled without the constant items' cotangents
(in reverse-over-reverse code that skips an outer product per constant matrix).
These tests check the values (finite differences) and that the work is gone.
"""
import numpy as np
import pytest
from conftest import check_vjp, import_source, numeric_grad

import s2sgrad
from s2sgrad import functional
from s2sgrad.compiler import compile_function, higher
from s2sgrad.compiler.analyze import analyze
from s2sgrad.compiler.normalize import normalize
from s2sgrad.compiler.parse import parse_function

SOURCE = '''
import numpy as np


def split(x, W):
    h = np.tanh(W @ x)
    return np.sum(h), (x, W, h)


def combine(aux, scale):
    x, W, h = aux
    return np.sum(h * x) * scale + np.sum(W * W) * scale


def two_step(x, W, scale):
    total, aux = split(x, W)
    return total + combine(aux, scale)


def three_liner(x, W):
    h = np.tanh(W @ x)
    y = np.sin(h) * x
    return np.sum(y ** 2)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("items"), "s2s_item_activity", SOURCE)


def test_output_items_say_which_items_vary(m):
    nf = normalize(parse_function(m.split))
    activity = analyze(nf, (0,))
    assert activity.output_items[1] == (True, False, True)
    assert analyze(nf, (1,)).output_items[1] == (False, True, True)


def test_structure_makes_a_constant_item_inactive(m):
    nf = normalize(parse_function(m.combine))
    full = analyze(nf, (0,))
    partial = analyze(nf, (0,), structure=((0, (True, False, True)),))
    assert "W" in full.varied and "W" not in partial.varied
    assert "h" in partial.varied and "x" in partial.varied
    assert partial.item_flags == {"aux": (True, False, True)}


@pytest.mark.parametrize("shapes", [((3,), (3, 3), ()), ((4,), (4, 4), (2, 1))])
@pytest.mark.parametrize("wrt", [[0], [1], [0, 1], [0, 1, 2]])
def test_first_order_through_a_tuple_handed_on(m, shapes, wrt, rng):
    # A scale of shape (2, 1) broadcasts the scalar result to a (2, 1) output.
    scale = 0.7 if shapes[2] == () else rng.standard_normal(shapes[2])
    args = [rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1]), scale]
    check_vjp(m.two_step, args, wrt=wrt)


def test_callee_skips_the_constant_items_gradient(m):
    pair = compile_function(m.two_step, (0,))
    combine = next(c for c in pair.callees if c.name == "combine")
    adjoint = combine.source.split("def combine_adjoint")[1]
    assert "W_bar" not in adjoint
    assert "_s2s_zeros_like(aux, (True, False, True))" in adjoint or "aux_bar" not in adjoint


@pytest.mark.parametrize("n", [3, 6])
def test_reverse_over_reverse_skips_the_constant_matrix(m, n, rng):
    x, W, v = rng.standard_normal(n), rng.standard_normal((n, n)) / n, rng.standard_normal(n)
    grad_fn = higher.derived("grad", m.three_liner, (0,))
    second = compile_function(grad_fn, (0,))
    sources = [second.source] + [c.source for c in second.callees]
    assert not any("W_bar" in s for s in sources), "W is a constant: no cotangent for it"
    # The values: v^T H by reverse over reverse against differences of the gradient.
    g = s2sgrad.grad(m.three_liner)
    expected = numeric_grad(lambda x: float(v @ g(x, W)), [x], 0)
    _, vh = functional.vhp(lambda x: m.three_liner(x, W), x, v)
    np.testing.assert_allclose(vh, expected, rtol=1e-6, atol=1e-8)
    _, hv = functional.hvp(lambda x: m.three_liner(x, W), x, v)
    np.testing.assert_allclose(hv, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shapes", [((4,), (4, 4)), ((3,), (2, 3))])
def test_nested_residuals_of_a_closure_skip_the_constant_matrix(m, shapes, rng):
    # vhp of a lambda closing over W: the lambda's residuals hold f's residuals,
    # one level down; W's cotangent is still never formed.
    x, W = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    v = rng.standard_normal(shapes[0])

    def fx(x):
        return m.split(x, W)[0] * 2.0 + m.three_liner(x, np.eye(len(x)) * 0.5)

    from s2sgrad.functional import _derived
    pair = compile_function(_derived("value_and_grad", fx, 1), (0,))
    _, vh = functional.vhp(fx, x, v)
    assert "W_bar" not in pair.source
    g = s2sgrad.grad(fx)
    expected = numeric_grad(lambda x: float(v @ g(x)), [x], 0)
    np.testing.assert_allclose(vh, expected, rtol=1e-6, atol=1e-8)
