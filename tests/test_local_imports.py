"""Imports inside the differentiated function (`from scipy.special import gammaln`,
`import numpy as np` at the top of its body) were refused ("'ImportFrom' statements
are not supported"); the compiler imports once and reads the names as globals.
Gradients against central differences on two shapes, in reverse and forward mode; a
module attribute rebound later compiles the function again; failures are loud."""
import sys
import types

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import functional


def poisson_loss(w, X):
    import numpy.linalg
    import scipy.special as sp
    from scipy.special import gammaln
    counts = np.linspace(0.0, 4.0, X.shape[0])
    eta = X @ w
    return np.sum(np.exp(eta) - counts * eta + gammaln(counts + 1)) + \
        np.sum(sp.expit(eta)) + numpy.linalg.norm(w)


def imports_under_a_loop(x):
    t = 0.0
    for k in range(3):
        import math

        from numpy import tanh as th
        t = t + math.cos(k) * np.sum(th(x * (k + 1)))
    return t


@pytest.mark.parametrize("shape", [((6, 3), (3,)), ((4, 2), (2,))])
def test_functions_imported_inside_are_differentiated(shape, rng):
    X, w = rng.standard_normal(shape[0]) * 0.5, rng.standard_normal(shape[1]) * 0.5
    want = numeric_grad(poisson_loss, [w, X], 0)
    np.testing.assert_allclose(s2sgrad.grad(poisson_loss)(w, X), want, rtol=1e-6, atol=1e-8)
    u = rng.standard_normal(w.shape)
    _, tangent = functional.jvp(lambda v: poisson_loss(v, X), (w,), (u,))
    np.testing.assert_allclose(tangent, np.sum(want * u), rtol=1e-6, atol=1e-8)
    assert not [line for line in s2sgrad.source(poisson_loss).splitlines()
                if line.lstrip().startswith(("import ", "from "))]


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_an_import_in_a_loop_body(shape, rng):
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(s2sgrad.grad(imports_under_a_loop)(x),
                               numeric_grad(imports_under_a_loop, [x], 0), rtol=1e-6, atol=1e-8)


helpers = types.ModuleType("s2s_local_import_helpers")
helpers.act = np.tanh
sys.modules[helpers.__name__] = helpers


def through_helpers(x):
    from s2s_local_import_helpers import act
    return np.sum(act(x) * x)


@pytest.mark.parametrize("x", [np.linspace(-0.8, 0.9, 4), np.linspace(-1.0, 1.0, 6)])
def test_an_imported_name_rebound_in_its_module_compiles_again(x):
    g = s2sgrad.grad(through_helpers)
    np.testing.assert_allclose(g(x), numeric_grad(through_helpers, [x], 0), rtol=1e-6,
                               atol=1e-8)
    helpers.act = np.sin
    try:
        np.testing.assert_allclose(g(x), numeric_grad(through_helpers, [x], 0), rtol=1e-6,
                                   atol=1e-8)
    finally:
        helpers.act = np.tanh
    np.testing.assert_allclose(g(x), numeric_grad(through_helpers, [x], 0), rtol=1e-6,
                               atol=1e-8)


def missing_module(x):
    from s2s_no_such_module import thing
    return thing(x)


def import_name_reassigned(x):
    import math as m
    m = 3.0  # noqa: F811 - the import and the assignment both bind m
    return np.sum(x * m)


@pytest.mark.parametrize("f, message", [
    (missing_module, "this import fails when the function is compiled: "
                     "ModuleNotFoundError"),
    (import_name_reassigned, "the name 'm' is bound by this import and assigned elsewhere"),
])
def test_imports_that_cannot_be_done_once_are_refused_at_the_statement(f, message):
    with pytest.raises(s2sgrad.TransformError, match=message) as info:
        s2sgrad.grad(f)(np.ones(3))
    assert f"{__file__}:" in str(info.value) and "^" in str(info.value)
