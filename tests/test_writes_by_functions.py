"""Writes into an argument made by a function, not by an item assignment.

`np.put_along_axis(out, order, v)`, `np.sum(a, 0, None, y)`, `np.exp(x, out=y,
where=m)`, `np.random.shuffle(y)`, `rng.shuffle(y)` and `np.nan_to_num(y,
copy=False)` change an array s2sgrad cannot see being changed: each gave a silently
wrong gradient (zeros, or the gradient of the unchanged array) before it was
refused. `np.copyto(y, x)` and a ufunc's `out=y` (or positional output) without
other keywords are written as the item assignment `y[...] = ...` and differentiated
(normalize/sugar.py). A write that involves no differentiated value still runs, and
the gradient around it is exact.
"""
import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad

SOURCE = '''
import numpy as np
from numpy import copyto as copy_into, tanh

W = np.arange(5.0)


def put_along_axis(x):
    out = np.zeros_like(x)
    np.put_along_axis(out, np.argsort(x, axis=-1), x * 2.0, axis=-1)
    return np.sum(out * W)


def ufunc_positional_out(x):
    y = x * 1.0
    np.exp(y, y)
    return np.sum(y * W)


def ufunc_out_assigned(x):
    y = np.zeros(x.shape)
    z = np.add(x, 1.0, y)
    return np.sum(y * W) + np.sum(z)


def keyword_out_assigned(x):
    y = np.zeros(x.shape)
    z = np.multiply(x, 2.0, out=y)
    return np.sum(y * W)


def reduction_positional_out(x):
    y = np.zeros(5)
    np.sum(x[:, None] * np.ones((5, 3)), 1, None, y)
    return np.sum(y * W)


def clip_positional_out(x):
    y = np.zeros(5)
    z = np.clip(x, -1.0, 1.0, y)
    return np.sum(y * W)


def ufunc_out_where(x):
    y = np.zeros(5)
    np.exp(x, out=y, where=x > 0.0)
    return np.sum(y * W)


def copyto_where(x):
    y = np.zeros(5)
    np.copyto(y, x, where=x > 0.0)
    return np.sum(y * W)


def copyto(x):
    y = np.zeros(x.shape)
    np.copyto(y, np.sin(x))
    y[..., 0] = 2.0
    return np.sum(y * W * x)


def copyto_broadcast(x):
    y = np.ones((3,) + x.shape)
    np.copyto(y, np.tanh(x))
    return np.sum(y * np.arange(3.0)[:, None] * x) if x.ndim == 1 else \
        np.sum(y * x)


def imported_by_name(x):
    y = np.zeros(x.shape)
    copy_into(y, np.sin(x))
    tanh(y, out=y)
    return np.sum(y * W * x)


def ufunc_out_chain(x):
    y = np.empty_like(x)
    np.tanh(x, out=y)
    np.multiply(y, x, out=(y,))
    np.add(y, 1.0, y)
    return np.sum(y * y * W)


def shuffle(x):
    y = x * 1.0
    np.random.shuffle(y)
    return np.sum(y * W)


def generator_shuffle(x):
    y = x * 1.0
    np.random.default_rng(0).shuffle(y)
    return np.sum(y * W)


def nan_to_num_in_place(x):
    y = x * np.array([1.0, np.nan, 1.0, 1.0, 1.0])
    np.nan_to_num(y, copy=False)
    return np.sum(y * W)


def constant_write_then_product(x):
    buf = np.zeros(5)
    np.add(W, 1.0, buf)
    np.put_along_axis(buf, np.array([0, 1]), np.array([7.0, 8.0]), axis=0)
    return np.sum(buf * np.sin(x))


def nan_to_num_copied(x):
    y = np.nan_to_num(x * 2.0, copy=True)
    return np.sum(y * W)
'''

REFUSED = ["put_along_axis", "ufunc_out_where", "copyto_where", "reduction_positional_out",
           "clip_positional_out", "shuffle", "generator_shuffle", "nan_to_num_in_place"]
WRITTEN = ["ufunc_positional_out", "ufunc_out_assigned", "keyword_out_assigned", "copyto",
           "copyto_broadcast", "ufunc_out_chain", "imported_by_name"]


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    from conftest import import_source
    return import_source(tmp_path_factory.mktemp("writes"), "s2s_writes_by_functions", SOURCE)


@pytest.mark.parametrize("name", REFUSED)
def test_a_write_made_by_a_function_is_refused_at_its_line(m, name, rng):
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(getattr(m, name))(rng.standard_normal(5))
    assert info.value.filename == m.__file__
    assert "in place" in str(info.value)


@pytest.mark.parametrize("shape", [(5,), (2, 5)])
@pytest.mark.parametrize("name", ["constant_write_then_product", "nan_to_num_copied"])
def test_a_write_without_differentiated_values_runs(m, name, shape, rng):
    f = getattr(m, name)
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(s2sgrad.grad(f)(x), numeric_grad(f, [x], 0),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", [(5,), (2, 5)])
@pytest.mark.parametrize("name", WRITTEN)
def test_copyto_and_a_ufuncs_out_are_differentiated(m, name, shape, rng):
    f = getattr(m, name)
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(s2sgrad.grad(f)(x.copy()), numeric_grad(f, [x], 0),
                               rtol=1e-6, atol=1e-8)


def test_copyto_refuses_what_numpy_refuses(make_module):
    m = make_module("""
import numpy as np

def f(x):
    y = np.zeros(x.shape, dtype=int)
    np.copyto(y, x)
    return np.sum(y * x)
""")
    x = np.array([0.5, 1.5])
    with pytest.raises(TypeError) as numpy_says:
        m.f(x)
    with pytest.raises(TypeError) as info:
        s2sgrad.grad(m.f)(x)
    assert str(info.value) == str(numpy_says.value)


def test_an_out_write_seen_through_a_view_is_refused_at_its_line(make_module):
    m = make_module("""
import numpy as np

def f(x):
    y = x * 1.0
    v = y[1:]
    np.copyto(v, np.cos(x[:-1]))
    return np.sum(y * x)
""")
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(m.f)(np.ones(4))
    assert "in-place update of 'v' also changes 'y'" in str(info.value)
