"""Builtins the compiler writes into generated code (len, range, min, zip, reversed)
stay the builtins when the user's module, closure or function binds those names.

`from numpy import *` binds min, max, abs, round, sum, ... to NumPy's functions:
a loop over `zip(x, y)` made the generated forward call `min(len(x), len(y))`,
which read NumPy's min there (np.min(4, 3): "axis 3 is out of bounds"). The code
the compiler writes now reads such a builtin through an alias bound to it; numba
compiles the alias as the builtin itself where the function binds no variable of
that name.
"""
import warnings

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad.functional import jvp

STAR = '''
import numpy as np
from numpy import *  # noqa: F401,F403


def zipped(x, y):
    acc = 0.0
    for a, b in zip(x, y):
        acc = acc + np.sin(a) * b
    return np.sum(acc)
'''

UNPACKED = '''
import numpy as np
from numpy import *  # noqa: F401,F403


def unpacked(x, y):
    e0, e1 = x, np.tanh(x * 0.5)
    if np.sum(y) > -5.0:
        e1 = e1 + 0.3 * y
    return -0.7 * np.sum(np.tanh(e1)) + np.sum(y * e0)
'''

OWN_LEN = '''
import numpy as np

len = lambda value: 2          # noqa: E731 - a module's own len


def rows(x, w):
    acc = np.zeros(x.shape[-1])
    for r in x:
        acc = acc + np.tanh(r * w + acc)
    return np.sum(acc ** 2)
'''

LOCAL_NAMES = '''
import numpy as np


def local_min(x, y):
    min = 0.5                  # a variable named like the builtin
    acc = 0.0
    for a, b in zip(x, y):
        acc = acc + np.sin(a) * b * min
    return np.sum(acc)
'''

LOCAL_LEN = '''
import numpy as np


def local_len(x, y):
    acc = np.zeros(4)
    for i in range(1, 4):
        len = 0.5 + 0.1 * i     # a variable named like the builtin
        for r in y:
            acc = acc + 0.3 * np.tanh(r * acc + x) * len
    return np.sum(acc ** 2)
'''

NESTED = '''
import numpy as np


def nested(x, y):
    acc = np.zeros(4)
    for i in range(1, 4):
        acc = 0.5 * acc + 0.5 * np.tanh(acc)
        for r in y:
            acc = acc + 0.3 * np.tanh(r * acc + x)
    return np.sum(acc ** 2)
'''


def _check(f, args, wrt):
    got = s2sgrad.grad(f, wrt)(*args)
    got = got if isinstance(got, tuple) else (got,)
    for g, i in zip(got, wrt if isinstance(wrt, tuple) else (wrt,)):
        np.testing.assert_allclose(g, numeric_grad(f, list(args), i), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shapes", [((4,), (3,)), ((3, 2), (3, 1))])   # rows broadcast
def test_a_zip_loop_in_a_module_that_star_imports_numpy(make_module, rng, shapes):
    m = make_module(STAR)
    assert m.min is np.min                      # what the module's min is
    x, y = (rng.standard_normal(s) for s in shapes)
    _check(m.zipped, (x, y), (0, 1))
    # forward mode against the same derivative
    u = rng.standard_normal(x.shape)
    _, tangent = jvp(m.zipped, (x, y), (u, np.zeros_like(y)))
    eps = 1e-6
    want = (m.zipped(x + eps * u, y) - m.zipped(x - eps * u, y)) / (2 * eps)
    np.testing.assert_allclose(tangent, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,))])   # y broadcasts
def test_a_temporary_never_takes_the_name_of_a_module_global(make_module, rng, shapes):
    """`np.tanh(x * 0.5)` unpacked into e1 got the temporary `tanh`, which the module's
    `from numpy import *` also binds: the compiler then read `e1 = tanh` as e1 bound
    to the function np.tanh, and dropped it (UnboundLocalError; fuzz batch 20261201)."""
    m = make_module(UNPACKED)
    x, y = (rng.standard_normal(s) for s in shapes)
    _check(m.unpacked, (x, y), (0, 1))


@pytest.mark.parametrize("shape", [(3, 4), (5, 2)])
def test_a_loop_over_rows_in_a_module_with_its_own_len(make_module, rng, shape):
    m = make_module(OWN_LEN)
    x, w = rng.standard_normal(shape), rng.standard_normal(shape[-1])
    _check(m.rows, (x, w), (0, 1))


@pytest.mark.parametrize("n", [3, 5])
def test_a_variable_named_like_a_builtin_the_code_calls(make_module, rng, n):
    m = make_module(LOCAL_NAMES)
    x, y = rng.standard_normal(n), rng.standard_normal(n + 1)
    _check(m.local_min, (x, y), (0, 1))
    assert "_s2s_builtin_min" in s2sgrad.source(m.local_min, wrt=(0, 1))


@pytest.mark.parametrize("shapes", [((4,), (3,)), ((1,), (5,))])   # x broadcasts
def test_numba_compiles_the_builtins_read_through_an_alias(make_module, rng, monkeypatch,
                                                            shapes):
    """A function that calls range itself reads the range of an inner loop's trips
    through the alias: numba compiles it as range (before: 'the helper
    _s2s_builtin_range has no numba version', and NumPy ran)."""
    pytest.importorskip("numba")
    from s2sgrad.backends import numba_backend
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")
    m = make_module(NESTED)
    assert "_s2s_builtin_range" in s2sgrad.source(m.nested, wrt=(0, 1))
    x, y = (rng.standard_normal(s) for s in shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no JitWarning: numba ran it
        got = s2sgrad.grad(m.nested, (0, 1), jit=True)(x, y)
    state = numba_backend.known_state(m.nested, (0, 1))
    assert state.disabled is None and [v.failed for v in state.variants.values()] == [None]
    for g, i in zip(got, (0, 1)):
        np.testing.assert_allclose(g, numeric_grad(m.nested, [x, y], i), rtol=1e-6,
                                   atol=1e-8)


def test_numba_refuses_an_alias_of_a_name_the_function_binds(make_module, rng, monkeypatch):
    """The local len shadows the builtin in numba's code too: its alias stays, numba
    is refused with a warning, and the NumPy backend's gradient is returned."""
    pytest.importorskip("numba")
    from s2sgrad.backends import JitWarning
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")
    m = make_module(LOCAL_LEN)
    x, y = rng.standard_normal(4), rng.standard_normal(3)
    with pytest.warns(JitWarning, match="_s2s_builtin_len"):
        got = s2sgrad.grad(m.local_len, (0, 1), jit=True)(x, y)
    for g, i in zip(got, (0, 1)):
        np.testing.assert_allclose(g, numeric_grad(m.local_len, [x, y], i), rtol=1e-6,
                                   atol=1e-8)
