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
from s2sgrad.functional import hvp

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


def zero_d_target(x):
    total = np.zeros(())
    for i in range(3):
        np.copyto(total, np.tanh(np.sum(x) * 0.7 + total))
    return np.sum(total ** 2) + np.sum(x * x)


def zero_d_ellipsis(x):
    total = np.zeros(())
    total[...] = np.tanh(np.sum(x * x) + total)
    return np.sum(total ** 2)


def copyto_in_a_loop(x):
    buf = np.zeros(x.shape)
    for i in range(3):
        np.copyto(buf, np.tanh(x * W[:x.shape[-1]] + buf))
        np.multiply(buf, 0.9, out=buf)
    return np.sum(buf ** 2)
'''

REFUSED = ["put_along_axis", "ufunc_out_where", "copyto_where", "reduction_positional_out",
           "clip_positional_out", "shuffle", "generator_shuffle", "nan_to_num_in_place"]
# (a 0-d target: NumPy's arithmetic gives its adjoint as a scalar, which the item
# write's adjoint then zeroes: "'numpy.float64' object does not support item assignment")
WRITTEN = ["ufunc_positional_out", "ufunc_out_assigned", "keyword_out_assigned", "copyto",
           "copyto_broadcast", "ufunc_out_chain", "imported_by_name", "zero_d_target",
           "zero_d_ellipsis", "copyto_in_a_loop"]


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


@pytest.mark.parametrize("shape", [(5,), (2, 5)])
@pytest.mark.parametrize("name", ["copyto_in_a_loop", "zero_d_target"])
def test_numba_compiles_copyto_and_out_in_a_loop(m, name, shape, rng, monkeypatch):
    """`y[...] = _s2s_cast_into(v, y)` in numba's code: the whole-array index as a
    slice (numba has no Ellipsis index), cast_into checked when numba types it; a 0-d
    target is numba's typing error, and the NumPy backend runs it, with a warning."""
    pytest.importorskip("numba")
    import warnings

    from s2sgrad.backends import JitWarning, numba_backend
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")
    numba_backend.reset()           # (no variant or warning of another shape's test)
    f = getattr(m, name)
    x = rng.standard_normal(shape)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", JitWarning)
        got = s2sgrad.grad(f, jit=True)(x.copy())
    failed = [v.failed for v in numba_backend.known_state(f, (0,)).variants.values()]
    if name == "copyto_in_a_loop":
        assert failed == [None] and not caught       # numba ran it
    else:
        assert failed[0] is not None and caught
    np.testing.assert_allclose(got, numeric_grad(f, [x], 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", [(5,), (2, 5)])
def test_a_write_into_a_0d_numpy_array_beside_dask_arrays_is_refused(m, shape, rng):
    """Dask reads a 0-d NumPy array by reference (n-d ones by value): a value computed
    from it before an in-place write, kept for the adjoint, was computed later from
    the new value, a silently wrong gradient (fuzz seed 6306). Such a write is refused
    where it runs; into an n-d array, the gradient is NumPy's."""
    da = pytest.importorskip("dask.array", reason="the dask extra is not installed")
    x = rng.standard_normal(shape)
    for name in ("zero_d_target", "zero_d_ellipsis"):
        with pytest.raises(TypeError, match="0-d NumPy array beside Dask arrays"):
            s2sgrad.grad(getattr(m, name))(da.from_array(x))
        # on NumPy arrays, and differentiated twice (pure code, no Dask): no refusal
        f = getattr(m, name)
        np.testing.assert_allclose(s2sgrad.grad(f)(x), numeric_grad(f, [x], 0),
                                   rtol=1e-6, atol=1e-8)
        u, eps = rng.standard_normal(shape), 1e-5
        _, hv = hvp(f, x, u)
        want = (s2sgrad.grad(f)(x + eps * u) - s2sgrad.grad(f)(x - eps * u)) / (2 * eps)
        np.testing.assert_allclose(hv, want, rtol=1e-5, atol=1e-7)
    f = m.copyto_in_a_loop
    got = np.asarray(s2sgrad.grad(f)(da.from_array(x)))
    np.testing.assert_allclose(got, numeric_grad(f, [x], 0), rtol=1e-6, atol=1e-8)
