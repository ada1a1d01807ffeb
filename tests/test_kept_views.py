"""Slices kept as views where the copy was only the adjoint's (issue 35, item 1).

A slice of an array that is later updated in place used to be copied when taken
(`_s2s_snapshot`), so that the update could not change it. Where no statement
reads the slice once the update has run, and the adjoint reads no more of it
than its shape, the copy protects nothing: the slice stays a view
(optimize.residuals.keep_views). Where the adjoint reads its values (a product's
other factor), or the function reads it after the update, it is still copied.
Every gradient against central differences, on two shapes."""
import numpy as np
import pytest
from conftest import assert_grads_match_differences

import s2sgrad
from s2sgrad import functional
from s2sgrad.compiler import compile_function

SOURCE = '''
import numpy as np

def stencil(u0, kappa, steps):
    u = u0.copy()
    for _ in range(steps):
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1]
        u[1:-1, 1:-1] += 0.2 * kappa * lap
    return 0.5 * np.sum(u ** 2)

def weighted(x, w):
    u = x.copy()
    s = 0.0
    for k in range(3):
        s = s + np.sum(u[1:] * w)       # w's gradient reads the slice's values
        u[1:] = np.tanh(u[1:] + k)
    return s + np.sum(u)

def named_view(x, w):
    u = x.copy()
    head = u[:-1]                       # a user's variable, read before the update only
    t = np.sum(head) * w
    u[:-1] = np.sin(u[1:]) * w
    return np.sum(u * u) + t

def read_again(x):
    u = x.copy()
    head = u[:2] * 1.0
    v = u[:2]
    u[:2] = 0.0
    return np.sum(head) + np.sum(u) + np.sum(v)
'''


def _snapshots(text: str, name: str) -> int:
    forward = text.split(f"def {name}_adjoint")[0]
    return forward.count("_s2s_snapshot(")


def test_the_stencils_slices_are_views(make_module):
    m = make_module(SOURCE)
    assert _snapshots(compile_function(m.stencil, (0, 1)).source, "stencil") == 0
    text = compile_function(m.named_view, (0, 1)).source
    assert "head = u[:-1]\n" in text             # read for its sum only: a view
    assert "_s2s_snapshot(u[1:])" in text          # np.sin's adjoint reads it: a copy


def test_a_slice_whose_values_the_adjoint_reads_is_still_copied(make_module):
    m = make_module(SOURCE)
    assert _snapshots(compile_function(m.weighted, (0, 1)).source, "weighted") >= 1
    unoptimized = compile_function(m.weighted, (0, 1), False).source
    assert _snapshots(unoptimized, "weighted") >= 1


@pytest.mark.parametrize("n", [5, 7])
def test_stencil_against_differences(make_module, n):
    m = make_module(SOURCE)
    rng = np.random.default_rng(n)
    u0 = rng.standard_normal((n, n + 1))
    args = (u0, 0.7, 4)
    assert_grads_match_differences(m.stencil, args, (0, 1))
    _, (hv,) = functional.hvp(lambda u: m.stencil(u, 0.7, 4), (u0,), (np.ones_like(u0),))
    g = s2sgrad.grad(m.stencil)
    np.testing.assert_allclose(hv, (g(u0 + 1e-5, 0.7, 4) - g(u0 - 1e-5, 0.7, 4)) / 2e-5,
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("shapes", [((5,), (4,)), ((4, 3), (3,))])
@pytest.mark.parametrize("name", ["weighted", "named_view"])
def test_views_and_copies_against_differences(make_module, name, shapes):
    m = make_module(SOURCE)
    f = getattr(m, name)
    rng = np.random.default_rng(len(shapes[0]))
    x = rng.standard_normal(shapes[0])
    w = rng.standard_normal(shapes[1] if name == "weighted" else ())
    w = w if name == "weighted" else float(w)
    assert_grads_match_differences(f, (x, w), (0, 1))


@pytest.mark.parametrize("n", [3, 4])
def test_a_view_read_after_the_update_is_refused_as_before(make_module, n):
    m = make_module(SOURCE)
    with pytest.raises(s2sgrad.TransformError, match="in-place update"):
        s2sgrad.grad(m.read_again)(np.arange(float(n)))
