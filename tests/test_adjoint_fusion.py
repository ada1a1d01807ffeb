"""Two adjoint passes: single-use temporaries fused, unbroadcast chains collapsed.

fuse_adjoint_temporaries: an adjoint temporary read once goes into its reader.

NumPy then reuses such intermediates' memory in place (a temporary operand is
written over) instead of keeping each alive until the adjoint returns. The pass
must never move an expression past anything that could change what it reads:
a rebinding, an in-place update (of the name or of an alias), an impure call,
a loop or branch, or the comment that opens the next source line's block.

collapse_unbroadcast_chains: unbroadcast(unbroadcast(g, s), a) is
unbroadcast(g, a) when a broadcasts to s, so s need not be kept as a witness.

product_shapes_from_operands: the cotangent of p = a @ b is unbroadcast to
p's shape read off a and b, which the matmul rule reads anyway, so p need not
be kept either.
"""
import ast
import re
import textwrap

import numpy as np
import pytest
from conftest import assert_grads_match_differences, check_vjp, numeric_grad

import s2sgrad
from s2sgrad.compiler.optimize import (
    collapse_unbroadcast_chains,
    fuse_adjoint_temporaries,
    product_shapes_from_operands,
)

SOURCE = """
import numpy as np


def elementwise(x):
    return np.sum(np.sin(x) * np.exp(-x ** 2) + np.tanh(x))


def two_lines(x, w):
    y = np.exp(-x * w)
    return np.sum(np.cos(y) * y)


def looped(x, n):
    for _ in range(n):
        x = np.tanh(-x * 0.5 + 0.1)
    return np.sum(x * x)


def rnn(W, U, b, xs):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = np.tanh(W @ h + U @ x + b)
    return np.sum(h ** 2)


def three_terms(a, b, c):
    return np.sum(np.sin(a + b + c) * c)


def product_plus(a, b, c):
    return np.sum(np.exp(0.3 * (a @ b + c)))
"""


@pytest.fixture
def m(make_module):
    return make_module(SOURCE)


def _fused(code: str, rewrite=fuse_adjoint_temporaries) -> str:
    fdef = ast.parse(textwrap.dedent(code)).body[0]
    rewrite(fdef)
    return ast.unparse(fdef)


def test_single_use_chain_is_fused():
    out = _fused("""
        def f_adjoint(residuals, g):
            x, e = residuals
            e_bar = g * e
            neg_bar = e_bar * x
            x_bar = -neg_bar
            return x_bar
    """)
    assert "neg_bar" not in out and "e_bar" not in out
    assert "x_bar = -(g * e * x)" in out


@pytest.mark.parametrize("between", [
    "a_bar += g",                       # in-place update of a name it reads
    "b_bar += g",                       # ... or of a possible alias of one
    "e = e_stack.pop()",                # an impure call, and a rebinding of e
    "_s2s_zero_item(a_bar, 0)",         # a helper writing into its argument
    "a_bar[0] = 0.0",                   # a subscript store
    "__s2s_comment__line 3: y = f(x)",  # the next source line's block
])
def test_nothing_moves_past_a_barrier(between):
    line = repr(between) if between.startswith("__s2s_comment__") else between
    out = _fused(f"""
        def f_adjoint(residuals, g):
            a_bar, b_bar, e, e_stack = residuals
            t_bar = a_bar * e
            {line}
            x_bar = t_bar * g
            return x_bar, a_bar, b_bar
    """)
    assert "t_bar = a_bar * e" in out


def test_nothing_moves_into_a_loop():
    out = _fused("""
        def f_adjoint(residuals, g):
            x, n = residuals
            t_bar = g * x
            for _ in range(n):
                x_bar = t_bar * 2.0
            return x_bar
    """)
    assert "t_bar = g * x" in out


def test_returned_names_stay():
    out = _fused("""
        def f_adjoint(residuals, g):
            x, = residuals
            x_bar = g * x
            return x_bar
    """)
    assert "x_bar = g * x" in out and "return x_bar" in out


def test_elementwise_adjoint_has_no_single_use_temporaries(m):
    adjoint = s2sgrad.source(m.elementwise).split("_adjoint(")[1]
    for name in ("exp_bar", "neg_x_pow_2_bar", "x_pow_2_bar", "sin_x_bar"):
        assert f"{name} =" not in adjoint, adjoint
    assert adjoint.count("# line") == 1


@pytest.mark.parametrize("shape", [(5,), (3, 4)])
def test_fused_gradients_match_differences(m, shape):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape)
    check_vjp(m.elementwise, (x,), wrt=(0,))
    check_vjp(m.two_lines, (x, rng.standard_normal(shape[-1])), wrt=(0, 1))
    check_vjp(m.looped, (x, 4), wrt=(0,))


def test_fused_gradient_of_python_floats(m):
    g = s2sgrad.grad(m.two_lines, wrt=(0, 1))(0.4, -1.3)
    for i in (0, 1):
        assert g[i] == pytest.approx(numeric_grad(m.two_lines, [0.4, -1.3], i), rel=1e-7)


# -- collapse_unbroadcast_chains --------------------------------------------------------
def test_chain_is_collapsed():
    out = _fused("""
        def f_adjoint(residuals, g):
            s, a, c, h, h_stack = residuals
            s_bar = _s2s_unbroadcast(g, s)
            h = h_stack.pop()
            c_bar += _s2s_unbroadcast(g, c)
            a_bar = _s2s_unbroadcast(s_bar, a)
            b_bar = _s2s_unbroadcast(s_bar, h)
            return a_bar, b_bar, c_bar
    """, collapse_unbroadcast_chains)
    assert "s_bar" not in out
    assert "a_bar = _s2s_unbroadcast(g, a)" in out and "b_bar = _s2s_unbroadcast(g, h)" in out


@pytest.mark.parametrize("between", [
    "g = g * 2.0",                 # g rebound
    "g += c",                      # g updated in place
    "_s2s_zero_item(g, 0)",        # a call statement
    "x = np.add.at(c, 0, 1.0)",    # writes into an array
])
def test_chain_stays_past_a_barrier(between):
    out = _fused(f"""
        def f_adjoint(residuals, g):
            s, a, c = residuals
            s_bar = _s2s_unbroadcast(g, s)
            {between}
            a_bar = _s2s_unbroadcast(s_bar, a)
            return a_bar
    """, collapse_unbroadcast_chains)
    assert "s_bar = _s2s_unbroadcast(g, s)" in out


def test_chain_stays_when_read_otherwise():
    out = _fused("""
        def f_adjoint(residuals, g):
            s, a = residuals
            s_bar = _s2s_unbroadcast(g, s)
            a_bar = _s2s_unbroadcast(s_bar, a)
            t_bar = s_bar * a
            return a_bar, t_bar
    """, collapse_unbroadcast_chains)
    assert "s_bar = _s2s_unbroadcast(g, s)" in out


def test_rnn_keeps_no_sum_of_products_per_step(m):
    text = s2sgrad.source(m.rnn, wrt=(0, 1, 2))
    forward = text.split("def rnn_adjoint")[0]
    assert "W_at_h_plus_U_at_x_stack" not in forward, forward


@pytest.mark.parametrize("shapes", [((4,), (4,), (4,)), ((3, 4), (4,), (2, 1, 1))])
def test_collapsed_chains_undo_every_broadcast(m, shapes):
    rng = np.random.default_rng(8)
    a, b, c = (rng.standard_normal(s) for s in shapes)
    check_vjp(m.three_terms, (a, b, c), wrt=(0, 1, 2))


@pytest.mark.parametrize("sizes", [(3, 2, 4), (5, 3, 6)])
def test_rnn_gradient(m, sizes):
    hidden, inp, steps = sizes
    rng = np.random.default_rng(4)
    W = rng.standard_normal((hidden, hidden)) * 0.5
    U = rng.standard_normal((hidden, inp)) * 0.5
    b = rng.standard_normal(hidden) * 0.1
    check_vjp(m.rnn, (W, U, b, rng.standard_normal((steps, inp))), wrt=(0, 1, 2))


def test_names_the_user_wrote_stay():
    """A Function's vjp local (`grad_input`) is the user's name: it is not fused away."""
    out = _fused("""
        def f_adjoint(residuals, y_bar):
            x, = residuals
            grad_input = 2 * x * y_bar
            x_bar = grad_input
            return x_bar
    """)
    assert "grad_input = 2 * x * y_bar" in out


def test_arguments_of_calls_are_not_fused():
    """Inside a helper's arguments NumPy cannot reuse the temporary, and the
    formula would read as nested calls: such temporaries keep their line."""
    out = _fused("""
        def f_adjoint(residuals, g):
            x, s = residuals
            s_bar = g / 3.0
            x_bar = _s2s_expand_reduced(s_bar, x)
            return x_bar
    """)
    assert "s_bar = g / 3.0" in out


def test_rnn_keeps_only_what_its_adjoint_reads(m):
    """Per step the adjoint reads h and the input row: only h is stacked (the row is
    read again from the argument, optimize/rows.py)."""
    text = s2sgrad.source(m.rnn, wrt=(0, 1, 2))
    forward, adjoint = text.split("def rnn_adjoint")
    stacks = sorted(set(re.findall(r"(\w+_stack) = \[\]", forward)))
    assert stacks == ["h_stack"], forward
    assert re.search(r"x = xs\[\w+\]", adjoint), adjoint
    assert "_s2s_unbroadcast_matmul(" in text


# Shapes of (a, b, c) for a @ b + c: the product smaller than the sum (so the
# cotangent must be summed down), the same size, and stacked operands.
@pytest.mark.parametrize("shapes", [
    ((4, 3), (3,), (4,)), ((1, 3), (3,), (2, 5)), ((3,), (3, 2), (4, 2)),
    ((2, 3), (3, 1), (5, 2, 4)), ((3,), (3,), (2,)), ((2, 1, 3), (3,), (3, 2, 4)),
    ((2, 3, 4), (1, 4, 2), (2, 3, 2)),
])
def test_product_shape_from_operands_undoes_every_broadcast(m, shapes):
    rng = np.random.default_rng(11)
    a, b, c = (rng.standard_normal(s) for s in shapes)
    check_vjp(m.product_plus, (a, b, c), wrt=(0, 1, 2))


def test_product_shape_is_read_off_the_operands():
    out = _fused("""
        def f_adjoint(residuals, g):
            W, h, p, q_stack = residuals
            p_bar = _s2s_unbroadcast(g, p)
            q = q_stack.pop()
            W_bar = _s2s_matmul_grad_a(p_bar, W, h)
            h_bar = _s2s_matmul_grad_b(p_bar, W, h)
            return W_bar, h_bar
    """, product_shapes_from_operands)
    assert "p_bar = _s2s_unbroadcast_matmul(g, W, h)" in out


@pytest.mark.parametrize("between", [
    "h = h_stack.pop()",           # an operand rebound: the shape could differ
    "W = W.T",
    "p_bar = p_bar * 2.0",         # the cotangent rebound
    "_s2s_zero_item(g, 0)",        # a call statement
    "for _ in range(2):\n                pass",
])
def test_product_shape_stays_past_a_barrier(between):
    out = _fused(f"""
        def f_adjoint(residuals, g):
            W, h, p, h_stack = residuals
            p_bar = _s2s_unbroadcast(g, p)
            {between}
            W_bar = _s2s_matmul_grad_a(p_bar, W, h)
            return W_bar
    """, product_shapes_from_operands)
    assert "p_bar = _s2s_unbroadcast(g, p)" in out


def concatenated(W, b, xs):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = cell(W, b, h, x)
    return np.sum(h ** 2)


def cell(W, b, h, x):
    z = np.concatenate([h, x])
    return np.tanh(W @ z + b)


@pytest.mark.parametrize("hidden, inputs", [(4, 3), (3, 1)])
def test_what_concatenate_reads_only_for_shapes_is_kept_as_shapes(hidden, inputs):
    """np.concatenate's cotangent reads its items only for their sizes: a helper
    called per step keeps the shapes of the h and x it was given, not the arrays
    (a parameter too: each step gives the helper new ones)."""
    rng = np.random.default_rng(hidden)
    args = [rng.standard_normal((hidden, hidden + inputs)) * 0.5,
            rng.standard_normal(hidden) * 0.1, rng.standard_normal((5, inputs))]
    src = s2sgrad.source(concatenated, wrt=(0, 1), args=args)
    forward = src.split("def cell_forward")[1].split("def cell_adjoint")[0]
    assert "_s2s_meta(h)" in forward and "_s2s_meta(x)" in forward, forward
    assert_grads_match_differences(concatenated, args, (0, 1))
