"""What a function of the user's returns, read from its source (compiler/returns.py):
a result proven an array or a number is a leaf in its caller, whose cotangent adds
with `+` and whose arithmetic needs no guard against list concatenation.

Each proof is tested on the function shapes it must accept and those it must not
(a branch, a parameter, a list, a wrapper, a tuple-returning NumPy function), and
the gradients of callers that rely on it against central differences."""
import functools

import numpy as np
import pytest
from conftest import assert_grads_match_differences, numeric_grad

import s2sgrad
from s2sgrad.compiler import compile_function
from s2sgrad.compiler.returns import returned_leaves

SOURCE = '''
import functools
import numpy as np

def arithmetic(y, W):
    return np.tanh(W @ y) - 0.5 * y

def pair(h, c):
    c = c * 0.5 + np.sin(h)
    h = np.tanh(c)
    return h, c

def mixed(a, b):
    return a * 2.0, b, [a]

def negated(a):
    return -a

def branching(a):
    if a.sum() > 0:
        return a * 2.0
    return a

def parameter(a):
    a = a
    return a

def appended(xs, a):
    ys = [a]
    ys += xs
    return ys

def listed(a):
    return [a, a]

def eigen(a):
    return np.linalg.eigh(a @ a.T)

def ufunc(a):
    return np.exp(a)

def keeps(f):
    @functools.wraps(f)
    def wrapper(*args):
        return [f(*args)]
    return wrapper

@keeps
def wrapped(a):
    return a * 2.0

def rk4_like(y0, W, steps):
    y = y0
    for _ in range(steps):
        k1 = arithmetic(y, W)
        k2 = arithmetic(y + 0.05 * k1, W)
        y = y + 0.1 * (k1 + k2)
    return np.sum(y ** 2)

def cell_loop(h, c, xs):
    for x in xs:
        h, c = pair(h + x, c)
    return np.sum(h * c)

def concatenated(a, b):
    return [a] + [b]

def uses_concatenated(x):
    p = concatenated(x, x * 2.0)
    return np.sum(p[0] * p[1])
'''


def test_what_the_source_proves(make_module):
    m = make_module(SOURCE)
    assert returned_leaves(m.arithmetic) is True
    assert returned_leaves(m.pair) == (True, True)
    assert returned_leaves(m.mixed) == (True, False, False)
    assert returned_leaves(m.negated) is True
    assert returned_leaves(m.ufunc) is True
    for unproven in (m.branching, m.parameter, m.appended, m.listed, m.eigen, m.wrapped,
                     m.rk4_like, np.sin, len, functools.partial(m.arithmetic)):
        assert returned_leaves(unproven) is None, unproven


def test_a_helpers_result_needs_no_guard_in_its_caller(make_module):
    m = make_module(SOURCE)
    text = compile_function(m.rk4_like, (0, 1)).source
    assert "no_sequence_arithmetic" not in text
    assert "_s2s_add(" not in text


@pytest.mark.parametrize("n", [3, 5])
def test_callers_relying_on_the_proof_against_differences(make_module, n):
    m = make_module(SOURCE)
    rng = np.random.default_rng(n)
    y0, W = rng.standard_normal(n), rng.standard_normal((n, n)) / n
    assert_grads_match_differences(m.rk4_like, (y0, W, 4), (0, 1))
    h, c, xs = rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal((3, n))
    for i in range(3):
        np.testing.assert_allclose(s2sgrad.grad(m.cell_loop, i)(h, c, xs),
                                   numeric_grad(m.cell_loop, (h, c, xs), i), rtol=1e-6,
                                   atol=1e-9)
    xb = np.float64(0.3) + rng.standard_normal(n)    # (a row broadcast against the state)
    np.testing.assert_allclose(s2sgrad.grad(m.cell_loop, 2)(h, c, xb[None, :]),
                               numeric_grad(m.cell_loop, (h, c, xb[None, :]), 2), rtol=1e-6,
                               atol=1e-9)


def test_a_list_built_by_an_operator_is_still_refused(make_module):
    """`[a] + [b]` in a helper is arithmetic to the proof; the helper's own guard
    refuses the concatenation of lists carrying a gradient where it runs."""
    m = make_module(SOURCE)
    with pytest.raises(s2sgrad.TransformError, match="concatenating lists"):
        s2sgrad.grad(m.uses_concatenated)(np.ones(3))
