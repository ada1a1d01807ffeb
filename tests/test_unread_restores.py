"""Items an in-place write overwrote are kept only for an adjoint that reads them.

The adjoint puts the overwritten items back (`_s2s_restore_item`) so that what it
reads of the array afterwards is what the forward read there. When it never
reads the array after the first restore (the stencil's adjoint reads only its
cotangents and the saved Laplacian), the restores are dead and the forward keeps
no copy per step (optimize/residuals.py: `_restored_but_unread`). Each case
against central differences on two shapes (one broadcasting).
"""
import numpy as np
import pytest
from conftest import assert_grads_match_differences

import s2sgrad


def diffusion(u0, kappa, steps):
    u = u0.copy()
    for _ in range(steps):
        lap = u[:-2] + u[2:] - 2.0 * u[1:-1]
        u[1:-1] += 0.2 * kappa * lap
    return np.sum(u ** 2)


def diffusion_read_by_a_call(u0, kappa, steps):
    u = u0.copy()
    for _ in range(steps):
        lap = u[:-2] + u[2:] - 2.0 * u[1:-1]
        u[1:-1] += 0.2 * kappa * lap
    return np.sum(np.sin(u))


def nonlinear_steps(u0, kappa, steps):
    u = u0.copy()
    for _ in range(steps):
        u[1:-1] = u[1:-1] * np.tanh(kappa * u[:-2])
    return np.sum(u ** 2)


def read_each_step(u0, kappa, steps):
    u = u0.copy()
    s = 0.0
    for _ in range(steps):
        s = s + np.sum(np.sin(u))
        u[1:-1] += 0.2 * kappa * (u[:-2] - u[1:-1])
    return s


def appended(x, steps):
    xs = []
    for k in range(steps):
        xs.append(x * (k + 1.0))
    total = 0.0
    for item in xs:
        total = total + np.sum(np.tanh(item))
    return total


SHAPES = [((9,), (7,)), ((6, 4), (1,))]   # (u0, kappa): the second broadcasts


def _args(u_shape, k_shape, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(u_shape), rng.uniform(0.5, 1.0, k_shape), 4]


def _adjoint_and_forward(fn, args):
    text = s2sgrad.source(fn, (0, 1), args=args)
    forward, adjoint = text.split("_adjoint(", 1)
    return forward, adjoint


@pytest.mark.parametrize("fn", [diffusion, nonlinear_steps])
@pytest.mark.parametrize("u_shape, k_shape", SHAPES)
def test_a_stencil_keeps_no_copy_of_what_its_steps_overwrite(fn, u_shape, k_shape):
    args = _args(u_shape, k_shape, len(u_shape))
    assert_grads_match_differences(fn, args, (0, 1))
    forward, adjoint = _adjoint_and_forward(fn, args)
    assert "_s2s_restore_item" not in adjoint
    assert "_s2s_copy_item(u," not in forward   # (was: the interior, per step)


@pytest.mark.parametrize("fn", [diffusion_read_by_a_call, read_each_step])
@pytest.mark.parametrize("u_shape, k_shape", SHAPES)
def test_an_adjoint_that_reads_the_array_has_its_items_put_back(fn, u_shape, k_shape):
    args = _args(u_shape, k_shape, 7)
    assert_grads_match_differences(fn, args, (0, 1))
    _, adjoint = _adjoint_and_forward(fn, args)
    assert "_s2s_restore_item(u," in adjoint


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_list_the_adjoint_pops_from(shape):
    x = np.random.default_rng(5).standard_normal(shape)
    assert_grads_match_differences(appended, [x, 3], (0,))


def test_a_pullback_called_twice_gives_the_same_gradient():
    args = _args((9,), (7,), 1)
    _, pullback = s2sgrad.vjp(lambda u0, kappa: diffusion(u0, kappa, 4), *args[:2])
    first = pullback(1.0)
    again = pullback(1.0)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
