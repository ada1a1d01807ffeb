"""Softmax, log-softmax and logsumexp written out with the maximum subtracted,
recognised as one operation each (normalize/fused.py).

Each form is checked against central differences on two shapes (a matrix and a
3-d array, the axis given as a positive or a negative number), in forward mode
and to second order; the value is bit for bit the written-out code's; forms the
recognition must leave alone (an intermediate read elsewhere, axes that differ)
are still differentiated, statement by statement.
"""
import numpy as np
import pytest
from conftest import check_jvp, check_vjp, numeric_grad

import s2sgrad
from s2sgrad import functional

MODULE = '''
import numpy as np


def log_softmax(z, w):
    z = z - np.max(z, axis=AXIS, keepdims=True)
    logp = z - np.log(np.sum(np.exp(z), axis=AXIS, keepdims=True))
    return np.sum(logp * w)


def softmax(s, w):
    s = s - np.max(s, axis=AXIS, keepdims=True)
    p = np.exp(s)
    p = p / np.sum(p, axis=AXIS, keepdims=True)
    return np.sum(np.tanh(p * w))


def logsumexp_kept(a, w):
    m = np.max(a, axis=AXIS, keepdims=True)
    return np.sum((m + np.log(np.sum(np.exp(a - m), axis=AXIS, keepdims=True))) * w)


def logsumexp_squeezed(a, w):
    m = np.max(a, axis=1, keepdims=True)
    ll = m[:, 0] + np.log(np.sum(np.exp(a - m), axis=1))
    return np.sum(ll ** 2) + np.sum(w)


def log_first(a, w):
    m = np.max(a, axis=-1, keepdims=True)
    ll = np.log(np.sum(np.exp(a - m), axis=-1)) + m[..., 0]
    return np.sum(np.sin(ll)) + np.sum(w)


def shifted_read_again(z, w):
    z = z - np.max(z, axis=AXIS, keepdims=True)
    logp = z - np.log(np.sum(np.exp(z), axis=AXIS, keepdims=True))
    return np.sum(logp * w) + np.sum(z ** 2)


def axes_differ(z, w):
    z = z - np.max(z, axis=0, keepdims=True)
    logp = z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))
    return np.sum(logp * w)
'''

FUSED = {"log_softmax": "_s2s_log_softmax", "softmax": "_s2s_softmax",
         "logsumexp_kept": "_s2s_logsumexp", "logsumexp_squeezed": "_s2s_logsumexp",
         "log_first": "_s2s_logsumexp"}
# (shape of the first argument, AXIS, shape of w)
SHAPES = [((4, 5), 1, (4, 5)), ((2, 3, 4), -1, (3, 4))]


@pytest.fixture(params=SHAPES, ids=["matrix", "3d"])
def case(request, make_module):
    shape, axis, wshape = request.param
    m = make_module(MODULE.replace("AXIS", str(axis)))
    rng = np.random.default_rng(len(shape))
    return m, shape, wshape, rng


def _args(name, shape, wshape, rng):
    a = rng.standard_normal(shape) * 2.0
    if name in ("logsumexp_squeezed",):
        a = rng.standard_normal(shape[-2:]) * 2.0 if len(shape) == 3 else a
    return [a, rng.standard_normal(wshape)]


@pytest.mark.parametrize("name", list(FUSED) + ["shifted_read_again", "axes_differ"])
def test_gradient_matches_differences(case, name):
    m, shape, wshape, rng = case
    check_vjp(getattr(m, name), _args(name, shape, wshape, rng), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", list(FUSED))
def test_each_form_is_one_call_with_the_same_value(case, name):
    m, shape, wshape, rng = case
    f = getattr(m, name)
    text = s2sgrad.source(f, wrt=(0,))
    assert FUSED[name] in text and "extremum_grad" not in text
    args = _args(name, shape, wshape, rng)
    value, _ = s2sgrad.value_and_grad(f)(*args)
    assert value == f(*args)   # (bit for bit: the same operations in the same order)


@pytest.mark.parametrize("name", ["shifted_read_again", "axes_differ"])
def test_forms_that_are_not_the_pattern_are_left_alone(case, name):
    m, *_ = case
    assert "_s2s_log_softmax" not in s2sgrad.source(getattr(m, name), wrt=(0,))


@pytest.mark.parametrize("name", list(FUSED))
def test_forward_mode(case, name):
    m, shape, wshape, rng = case
    args = _args(name, shape, wshape, rng)
    check_jvp(getattr(m, name), args, [rng.standard_normal(np.shape(a)) for a in args])


@pytest.mark.parametrize("name", ["log_softmax", "softmax", "logsumexp_kept"])
def test_hessian_vector_product(case, name):
    m, shape, wshape, rng = case
    f = getattr(m, name)
    x, w = _args(name, shape, wshape, rng)
    v = rng.standard_normal(x.shape)
    _, hv = functional.hvp(lambda z: f(z, w), x, v)
    grad = s2sgrad.grad(f, wrt=0)
    expected = numeric_grad(lambda z: float(np.sum(grad(z, w) * v)), [x], 0, eps=1e-5)
    np.testing.assert_allclose(hv, expected, rtol=1e-5, atol=1e-6)
