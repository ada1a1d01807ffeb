"""`for ... else` and `while ... else` (the else block runs when no break of the loop
ended it) were refused; they are written with the flag Python keeps
(normalize/loop_else.py). Gradients against central differences on two shapes, the
break taken and not, and forward mode."""
import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import functional


def search(x, limit):
    t = 0.0
    for v in x:
        if np.sum(v) > limit:
            break
        t = t + np.sum(np.sin(v) * v)
    else:
        t = t * 3.0
    return t


def counted(x, limit):
    k, t = 0, 0.0
    while k < len(x):
        if np.sum(x[k]) > limit:
            break
        t = t + np.sum(x[k] ** 2)
        k += 1
    else:
        t = t + np.sum(np.tanh(x))
    return t


def nested(x, limit):
    t = 0.0
    for i in range(len(x)):
        for j in range(len(x)):
            if j > i:
                break
            t = t + np.sum(x[i] * x[j])
        else:
            t = t + np.sum(x[i])
            if np.sum(x[i]) > limit:
                break          # (the outer loop's: the inner one's else block is outside it)
    else:
        t = t - np.sum(np.cos(x))
    return t


@pytest.mark.parametrize("f", [search, counted, nested])
@pytest.mark.parametrize("shape", [(4,), (3, 2)])
@pytest.mark.parametrize("limit", [0.5, 50.0], ids=["breaks", "runs-out"])
def test_loop_else(f, shape, limit):
    x = np.linspace(-0.9, 1.3, int(np.prod(shape))).reshape(shape)
    want = numeric_grad(f, [x, limit], 0)
    np.testing.assert_allclose(s2sgrad.grad(f)(x, limit), want, rtol=1e-6, atol=1e-8)
    u = np.linspace(1.0, -0.5, x.size).reshape(shape)
    _, tangent = functional.jvp(f, (x, limit), (u, 0.0))
    np.testing.assert_allclose(tangent, np.sum(want * u), rtol=1e-6, atol=1e-8)
