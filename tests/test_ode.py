"""scipy.integrate.odeint differentiated by the adjoint method (reverse mode) and
forward sensitivities (forward mode), the user's dynamics differentiated by
s2sgrad at each step: checked against central differences on two state sizes,
and against HIPS autograd's odeint where it is installed.
"""
import numpy as np
import pytest

import s2sgrad
from s2sgrad import functional

pytest.importorskip("scipy")

MODEL = '''
import numpy as np
from scipy.integrate import odeint


def dynamics(y, t, W, b):
    return np.tanh(W @ y + b) - 0.3 * y * np.cos(t)


def loss(y0, W, b):
    t = np.linspace(0.0, 1.5, 6)
    ys = odeint(dynamics, y0, t, args=(W, b), rtol=1e-11, atol=1e-11)
    return np.sum(ys[1:] ** 2) + np.sum(ys[-1])


def time_first(t, y, k):
    return -k * y ** 3 + np.sin(t)


def loss_time_first(y0, k):
    ys = odeint(time_first, y0, np.array([0.0, 0.5, 2.0]), (k,), tfirst=True,
                rtol=1e-11, atol=1e-11)
    return np.sum(np.sin(ys))


def with_full_output(y0, k):
    ys, info = odeint(time_first, y0, np.array([0.0, 1.0]), (k,), tfirst=True,
                      full_output=1)
    return np.sum(ys)
'''


@pytest.fixture
def m(make_module):
    return make_module(MODEL)


def _inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, n), rng.standard_normal((n, n)) * 0.6, \
        rng.standard_normal(n) * 0.3


def _differences(f, args, i, eps=1e-4):
    """Central differences with a step well above the solver's tolerance (its
    adaptive steps make the solution's error jump with a tiny step)."""
    out = np.zeros(np.shape(args[i]))
    for k in np.ndindex(out.shape):
        up = [np.array(a, dtype=float, copy=True) for a in args]
        down = [np.array(a, dtype=float, copy=True) for a in args]
        up[i][k] += eps
        down[i][k] -= eps
        out[k] = (f(*up) - f(*down)) / (2 * eps)
    return out


@pytest.mark.parametrize("n", [2, 3])
def test_the_adjoint_method_matches_differences(m, n):
    args = _inputs(n, n)
    grads = s2sgrad.grad(m.loss, wrt=(0, 1, 2))(*args)
    for i in range(3):
        np.testing.assert_allclose(grads[i], _differences(m.loss, args, i),
                                   rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape", [(2,), (4,)])
def test_time_first_dynamics(m, shape):
    y0 = np.linspace(0.2, 0.9, shape[0])
    k = np.float64(0.7)
    g_y0, g_k = s2sgrad.grad(m.loss_time_first, wrt=(0, 1))(y0, k)
    np.testing.assert_allclose(g_y0, _differences(m.loss_time_first, (y0, k), 0),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g_k, _differences(m.loss_time_first, (y0, k), 1),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("n", [2, 3])
def test_forward_sensitivities_match_differences(m, n):
    args = _inputs(n, 10 + n)
    rng = np.random.default_rng(n)
    v = tuple(rng.standard_normal(np.shape(a)) for a in args)
    _, tangent = functional.jvp(m.loss, args, v)
    eps = 1e-4
    up = [a + eps * d for a, d in zip(args, v)]
    down = [a - eps * d for a, d in zip(args, v)]
    np.testing.assert_allclose(tangent, (m.loss(*up) - m.loss(*down)) / (2 * eps),
                               rtol=1e-5, atol=1e-7)


def test_the_adjoint_reads_as_a_call(m):
    text = s2sgrad.source(m.loss, wrt=(0, 1, 2))
    assert "_s2s_odeint_adjoint(" in text and "odeint(dynamics, y0, t" in text


def test_full_output_is_refused_loudly(m):
    with pytest.raises(NotImplementedError, match="full_output=0"):
        s2sgrad.grad(m.with_full_output)(np.array([0.3, 0.5]), 0.5)


def test_matches_autograd(m, make_module):
    autograd = pytest.importorskip("autograd")
    theirs = make_module(MODEL.replace("import numpy as np", "import autograd.numpy as np")
                         .replace("W @ y", "np.dot(W, y)")
                         .replace("from scipy.integrate import odeint",
                                  "from autograd.scipy.integrate import odeint")
                         .replace(", args=(W, b), rtol=1e-11, atol=1e-11)",
                                  ", (W, b), rtol=1e-11, atol=1e-11)"))
    args = _inputs(3, 5)
    # (autograd's odeint gives y0's gradient here; for the args it raises a
    # ValueError with this NumPy: those are checked against differences above)
    np.testing.assert_allclose(s2sgrad.grad(m.loss)(*args),
                               autograd.grad(theirs.loss, 0)(*args), rtol=1e-6, atol=1e-8)


def test_the_self_check_allows_the_solvers_accuracy_and_no_more(m, make_module):
    """The derivative witness compares reverse and forward mode; through odeint
    both are as exact as the solver, so the pair says so (Rule.tolerance), for a
    caller of a function that integrates too, and a pair without odeint is exact."""
    from s2sgrad.compiler import compile_function
    caller = make_module(MODEL + '''

def outer(y0, W, b):
    return loss(y0, W, b) * 2.0 + np.sum(y0)


def plain(y0):
    return np.sum(np.sin(y0))
''')
    assert compile_function(m.loss, (0,)).derivative_tolerance() == 1e-3
    assert compile_function(caller.outer, (0,)).derivative_tolerance() == 1e-3
    assert compile_function(caller.plain, (0,)).derivative_tolerance() is None
    # with the solver's default tolerance the two modes differ by more than rounding
    loose = make_module(MODEL.replace(", rtol=1e-11, atol=1e-11", ""))
    args = _inputs(3, 1)
    grads = s2sgrad.grad(loose.loss, wrt=(0, 1, 2), witness="always")(*args)
    np.testing.assert_allclose(grads[0], _differences(loose.loss, args, 0), rtol=1e-3)
