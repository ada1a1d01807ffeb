"""`with np.errstate(...)` blocks are differentiated as their bodies (the manager
changes which warnings NumPy reports, never a value); any other `with` is refused
at its line."""
import numpy as np
import pytest
from conftest import check_grad_and_tangent, import_source

import s2sgrad

SOURCE = '''
import warnings
import numpy as np


def masked_log(x, w):
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(x > 0, np.log(np.abs(x)), 0.0)
        z = np.where(x > 0, w / x, w)
    return np.sum(y * w) + np.sum(np.tanh(z))


def in_a_loop(x, w):
    acc = x * 0.0
    for k in range(3):
        if k > 0:
            with np.errstate(over="ignore"), np.errstate(under="ignore"):
                acc = acc + np.exp(np.tanh(x * k)) * w
        else:
            acc = acc + w
    return np.sum(acc ** 2)


def caught(x, w):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = np.log(np.abs(x)) * w
    return np.sum(y)


def named(x, w):
    with np.errstate(divide="ignore") as state:
        y = np.log(np.abs(x)) * w
    return np.sum(y) + 0.0 * len(str(state))
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("with"), "s2s_context_blocks", SOURCE)


@pytest.mark.parametrize("shapes", [((5,), (5,)), ((3, 4), (4,))])
@pytest.mark.parametrize("name", ["masked_log", "in_a_loop"])
def test_errstate_blocks_are_differentiated(m, name, shapes, rng):
    x, w = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_grad_and_tangent(getattr(m, name), [x, w], rng)


def test_errstate_blocks_under_jit(m, rng):
    x, w = rng.standard_normal(6), rng.standard_normal(6)
    np.testing.assert_allclose(s2sgrad.grad(m.masked_log, (0, 1), jit=True)(x, w),
                               s2sgrad.grad(m.masked_log, (0, 1))(x, w), rtol=1e-12)


@pytest.mark.parametrize("name, line", [("caught", 25), ("named", 32)])
def test_other_context_managers_are_refused_at_their_line(m, name, line):
    with pytest.raises(s2sgrad.TransformError, match="'With' statements are not supported") \
            as info:
        s2sgrad.grad(getattr(m, name))(np.ones(3), np.ones(3))
    assert info.value.lineno == line
