"""`np.<ufunc>.outer(a, b)` and `dict(zip(keys, values))`, written out by the
normaliser as what they compute: the ufunc of a reshaped to one more axis per
axis of b (broadcasting makes the table), and the dict comprehension over the
pairs. Each against central differences, in reverse and forward mode."""
import numpy as np
import pytest
from conftest import assert_grads_match_differences

import s2sgrad
from s2sgrad import functional

SOURCE = '''
import numpy as np

def products(x, y):
    return np.sum(np.sin(np.multiply.outer(x, y)))

def differences(x, y):
    return np.sum(np.subtract.outer(x, y) ** 2) * np.sum(np.cos(np.add.outer(y, x)))

def larger(x, y):
    return np.sum(np.maximum.outer(x, y) * np.hypot.outer(x, y))

def named(x, y):
    d = dict(zip(["w", "b"], [x * 2.0, np.tanh(y)]))
    d["w"] = d["w"] + 1.0
    return np.sum(d["w"] ** 2) * np.sum(d["b"])

def keyed(x, y):
    names = ("first", "second", "first")
    d = dict(zip(names, [x, y, np.exp(x)]))
    return sum(np.sum(v) for v in d.values())

def called(x, y):
    return np.sum(np.multiply.outer(np.sin(x), y))
'''

SHAPES = [((3,), (4,)), ((2, 3), (2,))]


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("name", ["products", "differences", "larger"])
def test_ufunc_outer_against_differences(make_module, name, shapes):
    module = make_module(SOURCE)
    f = getattr(module, name)
    rng = np.random.default_rng(7)
    x = rng.uniform(0.2, 1.0, shapes[0])
    y = rng.uniform(-1.0, -0.1, shapes[1])     # (no ties for maximum)
    gx, _ = assert_grads_match_differences(f, (x, y), (0, 1))
    u = np.linspace(-1, 1, x.size).reshape(x.shape)
    _, tangent = functional.jvp(lambda z: f(z, y), (x,), (u,))
    np.testing.assert_allclose(tangent, np.sum(gx * u), rtol=1e-6, atol=1e-8)
    assert np.allclose(s2sgrad.value_and_grad(f)(x, y)[0], f(x, y))


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,))])
@pytest.mark.parametrize("name", ["named", "keyed"])
def test_dict_of_zip_against_differences(make_module, name, shapes):
    module = make_module(SOURCE)
    f = getattr(module, name)
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    assert_grads_match_differences(f, (x, y), (0, 1))
    _, (hv,) = functional.hvp(lambda z: f(z, y), (x,), (np.ones_like(x),))
    g = s2sgrad.grad(f)
    np.testing.assert_allclose(hv, (g(x + 1e-5, y) - g(x - 1e-5, y)) / 2e-5,
                               rtol=1e-4, atol=1e-6)


def test_outer_of_a_call_keeps_its_refusal(make_module):
    """Written out, an operand is read twice: a call might give another value the
    second time, so `outer` of a call is refused at its line, not computed twice."""
    module = make_module(SOURCE)
    with pytest.raises(s2sgrad.TransformError, match="multiply.outer"):
        s2sgrad.grad(module.called)(np.ones(3), np.ones(2))
