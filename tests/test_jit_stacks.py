"""Stacks of numbers as preallocated arrays in numba code (`numba_stacks`).

The pass alone on small functions (which stacks qualify, what the code becomes),
then jit=True's gradients of loops whose stacks it rewrites, against the NumPy
backend and central differences, with the rewritten code checked in the source.
"""
import ast
import textwrap
import warnings

import numpy as np
import pytest
from conftest import numeric_grad
from test_jit import pendulum  # a scalar recurrence

import s2sgrad
from s2sgrad.backends import JitWarning, jit_source, numba_backend
from s2sgrad.backends.numba_stacks import preallocate_stacks


def _lines(src: str, stacks=("s",)) -> list:
    fn = ast.parse(textwrap.dedent(src)).body[0]
    return ast.unparse(preallocate_stacks(fn, set(stacks))).splitlines()[1:]


def test_a_stack_pushed_once_per_step_becomes_an_array_and_an_index():
    assert _lines("""
        def f(x, r):
            s = []
            for i in range(r[0], r[1]):
                s.append(x)
                x = x * 2.0
            for i in range(3):
                x = s.pop()
            return x
        """) == [
        "    steps = len(range(r[0], r[1]))",
        "    s = np.empty(steps)",
        "    s_top = 0",
        "    for i in range(r[0], r[1]):",
        "        s[s_top] = x",
        "        s_top += 1",
        "        x = x * 2.0",
        "    for i in range(3):",
        "        s_top -= 1",
        "        x = s[s_top]",
        "    return x"]


@pytest.mark.parametrize("src", [
    # pushed in a nested loop: more pushes than the outer loop's steps
    """
    def f(x, n):
        s = []
        for i in range(n):
            for j in range(2):
                s.append(x)
        return x
    """,
    # pushed once at the loop's top level, and again in an inner loop and in
    # another loop (a fuzzer program: the array overflowed)
    """
    def f(x, n):
        s = []
        for i in range(n):
            for j in range(3):
                s.append(x)
                x = x + 1.0
            s.append(x)
        for i in range(n):
            for j in range(2):
                s.append(x)
        return x
    """,
    # two pushes a step
    """
    def f(x, n):
        s = []
        for i in range(n):
            s.append(x)
            s.append(x)
        return x
    """,
    # a while loop: no trip count before it
    """
    def f(x):
        s = []
        while x < 3.0:
            s.append(x)
            x = x + 1.0
        return x
    """,
    # the iterable is a call: len() before the loop would call it once more
    """
    def f(x, g):
        s = []
        for i in g(x):
            s.append(x)
        return x
    """,
    # the stack is used otherwise than pushed and popped
    """
    def f(x, n):
        s = []
        for i in range(n):
            s.append(x)
        return len(s)
    """,
])
def test_stacks_the_pass_cannot_prove_stay_lists(src):
    assert "np.empty" not in "\n".join(_lines(src))


def early_exit(x, a, rates):
    total = 0.0
    for r in rates:                  # a loop over an array's rows, with a break
        total = total + np.sin(x * r) * a
        x = x * 0.9 + 0.1 * r
        if total > 2.5:
            break
    return total * x


@pytest.fixture(autouse=True)
def _fresh():
    numba_backend.reset()
    yield
    numba_backend.reset()


def _check(f, args, wrt):
    pytest.importorskip("numba")
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        got = s2sgrad.grad(f, wrt=wrt, jit=True)(*args)
    want = s2sgrad.grad(f, wrt=wrt)(*args)
    for i, g, w in zip(wrt, got, want):
        assert type(g) is type(w)
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(g, numeric_grad(f, list(args), i), rtol=1e-6, atol=1e-8)
    return jit_source(f, *args, wrt=wrt)


@pytest.mark.parametrize("n_steps", [0, 1, 40])
def test_a_scalar_recurrence_with_preallocated_stacks(n_steps):
    source = _check(pendulum, (0.4, 0.1, 3.0, 0.2, 0.05, n_steps), (0, 1, 2, 3))
    if n_steps == 40:
        assert "x_stack = np.empty(steps)" in source and ".append(" not in source
    elif n_steps == 1:   # sin_x's one push was its None: what it holds is not known
        assert "x_stack = np.empty(steps)" in source and "sin_x_stack = []" in source
    else:                # the NumPy run pushed nothing
        assert "x_stack = []" in source


@pytest.mark.parametrize("rates", [np.linspace(0.1, 1.0, 12), np.array([2.0, 3.0, 0.5])])
def test_a_loop_over_an_array_that_breaks_pushes_fewer(rates):
    x = 0.7
    source = _check(early_exit, (x, 1.3, rates), (0, 1, 2))
    assert "x_stack = np.empty(steps)" in source and "total_stack = np.empty(steps)" in source


def rebound_and_written(x, ys):
    acc = np.tanh(x) * 1.0
    for r in ys:
        acc[-1] += 0.3 * np.tanh(np.sum(r))
        acc = acc + 0.3 * np.tanh(r * acc)
    return np.sum(acc ** 2)


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_items_a_write_changes_have_a_stack_of_their_own(shape):
    """acc is rebound (its arrays kept) and written at an index (its items kept): one
    list of both kinds was a typing error in numba (the fuzzer's most frequent)."""
    rng = np.random.default_rng(len(shape))
    x, ys = rng.uniform(-1, 1, shape), rng.uniform(-1, 1, (4,) + shape[-1:])
    source = _check(rebound_and_written, (x, ys), (0, 1))
    assert "acc_items_stack" in s2sgrad.source(rebound_and_written, (0, 1))
    assert "acc_items_stack" in source
