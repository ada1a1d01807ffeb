"""Loop-invariant code motion (compiler/hoist.py) moves only what cannot raise.

A loop may run zero times; what moves before it then runs where the user's code
never did. `w * G2` moved out of a `while` whose test was false raised on shapes
the user never multiplied (fuzz seed 4318): the function ran, its gradient did
not. Each gradient here is checked against central differences on two shapes.
"""
import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad

G2 = np.array([0.4, -0.7])


def loop_not_taken(h, c, d, w):
    acc = np.zeros(np.shape(h))
    k = 0
    while k < 3 and np.sum(d) > 100.0:
        k += 1
        out = np.cos(d[1:]) * 1.0
        out[1:] = w * G2               # shapes that never meet when the loop runs
        acc += 0.3 * np.tanh(c) + np.sum(out)
    return np.sum(0.5 * c + 0.5 * np.sin(h * acc + c))


def loop_taken(x, W, n):
    h = x
    for _ in range(n):
        h = np.tanh(h + 0.3 * np.tanh(W @ x) + x * W[0])
    return np.sum(h * h)


@pytest.mark.parametrize("shape", [(4,), (3,)])
def test_an_invariant_of_a_loop_that_never_runs_is_not_computed(shape):
    rng = np.random.default_rng(2)
    args = [rng.uniform(-1, 1, shape) for _ in range(4)]
    got = s2sgrad.grad(loop_not_taken, wrt=(0, 1, 2))(*args)
    for i in range(3):
        np.testing.assert_allclose(got[i], numeric_grad(loop_not_taken, args, i),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("n, m", [(4, 3), (3, 3)])
def test_what_still_moves_keeps_the_gradient(n, m):
    rng = np.random.default_rng(5)
    args = [rng.uniform(-1, 1, m), rng.uniform(-1, 1, (m, m)), n]
    got = s2sgrad.grad(loop_taken, wrt=(0, 1))(*args)
    text = s2sgrad.source(loop_taken, wrt=(0, 1))
    forward = text.split("def loop_taken_adjoint")[0]
    # np.tanh(W @ x) reads no name the loop changes, but W @ x may raise on shapes:
    # it stays in the loop; nothing else of the body moves either
    assert "for " in forward and forward.index("W @ x") > forward.index("for ")
    for i in range(2):
        np.testing.assert_allclose(got[i], numeric_grad(loop_taken, args, i),
                                   rtol=1e-6, atol=1e-8)
