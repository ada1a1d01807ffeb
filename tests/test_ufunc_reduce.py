"""A ufunc's reduce and accumulate (np.add.reduce, np.multiply.accumulate, ...) are the
NumPy functions that call them (np.sum, np.cumprod, ...): read as those, values equal
to the bit, gradients against central differences on two shapes. They were refused."""
import numpy as np
import pytest
from conftest import assert_grads_match_differences, import_source, numeric_grad

import s2sgrad
from s2sgrad import functional

SOURCE = '''
import numpy as np


def column_sums(x):
    M = np.outer(x, x[:3])
    return np.sum(np.add.reduce(M) ** 2) + np.add.reduce(x)


def row_products_and_maxima(x):
    M = np.outer(x, x[:3])
    return np.sum(np.multiply.reduce(M, axis=1)) + np.sum(np.maximum.reduce(M, 1))


def running(x):
    return np.sum(np.add.accumulate(x) * x) + np.sum(np.multiply.accumulate(x[::-1]))


def keywords(x):
    M = np.outer(x, x)
    return np.minimum.reduce(M, axis=None) + np.sum(np.add.reduce(M, keepdims=True, axis=1))


def running_maximum(x):
    return np.sum(np.maximum.accumulate(x))
'''
NAMES = ["column_sums", "row_products_and_maxima", "running", "keywords"]


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("ufunc_reduce"), "s2s_ufunc_reduce_case",
                         SOURCE)


@pytest.mark.parametrize("witness", [True, False])
@pytest.mark.parametrize("n", [4, 5])
@pytest.mark.parametrize("name", NAMES)
def test_gradient_and_value(m, rng, name, n, witness):
    f, x = getattr(m, name), rng.uniform(0.2, 1.2, n)
    assert_grads_match_differences(f, [x], (0,), rtol=1e-5, atol=1e-7, witness=witness)
    value, _ = s2sgrad.value_and_grad(f)(x.copy())
    assert value == f(x.copy())
    v = rng.standard_normal(n)
    _, tangent = functional.jvp(f, x.copy(), v)
    np.testing.assert_allclose(tangent, numeric_grad(f, [x], 0) @ v, rtol=1e-5, atol=1e-7)


def test_a_reduction_no_function_is_stays_refused(m):
    with pytest.raises(s2sgrad.TransformError, match="accumulate"):
        s2sgrad.grad(m.running_maximum)(np.array([0.3, 0.9, 0.5]))


def test_a_reduce_method_of_another_object_is_left_to_its_own_rule(tmp_path):
    # `module.cfg.reduce(x)` where cfg is a dict (no key for the table of ufuncs): the
    # rewrite's lookup raised inside the compiler (InternalError) before its guard.
    import_source(tmp_path, "s2s_reduce_holder", '''
class Cfg(dict):
    def reduce(self, x):
        return x * 2.0


cfg = Cfg()
''')
    m = import_source(tmp_path, "s2s_reduce_user", '''
import numpy as np
import s2s_reduce_holder


def f(x):
    return np.sum(s2s_reduce_holder.cfg.reduce(x) ** 2)
''')
    x = np.array([0.5, 1.5, -1.0])
    np.testing.assert_allclose(s2sgrad.grad(m.f)(x), 8.0 * x)
