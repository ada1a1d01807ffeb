"""np.sum(..., where=, initial=) and np.mean(..., where=): written as the sum of
np.where(mask, a, 0) (plus the initial value) and that sum over the mask's count,
before the normaliser runs (they were refused: the rules take neither keyword)."""
import numpy as np
import pytest
from conftest import check_grad_and_tangent, import_source

import s2sgrad

SOURCE = '''
import numpy as np

MASK = np.array([True, False, True])


def masked_sum(x, w):
    return np.sum(np.sin(x) * w, where=MASK) + np.sum(x ** 2, where=x > 0.0)


def sum_with_initial(x, w):
    return np.sum(x * w, axis=-1, initial=1.5, keepdims=True).sum() * np.sum(w, initial=-0.5)


def masked_mean(x, w):
    y = x * w
    return np.mean(y, where=MASK) + np.sum(np.mean(y, axis=-1, where=MASK, keepdims=True))


def mean_of_a_call(x, w):
    return np.mean(np.sin(x * w), where=MASK)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("masked"), "s2s_masked", SOURCE)


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((4, 3), (3,))])
@pytest.mark.parametrize("name", ["masked_sum", "sum_with_initial", "masked_mean"])
def test_masked_reductions(m, name, shapes, rng):
    x, w = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_grad_and_tangent(getattr(m, name), [x, w], rng)


def test_the_values_are_numpys(m, rng):
    x, w = rng.standard_normal((4, 3)), rng.standard_normal(3)
    for name in ("masked_sum", "sum_with_initial", "masked_mean"):
        value, _ = s2sgrad.value_and_grad(getattr(m, name))(x, w)
        np.testing.assert_allclose(value, getattr(m, name)(x, w), rtol=1e-13)


def test_a_mean_of_a_computed_value_stays_refused(m):
    # (its written-out form reads the value twice: only names, items and operators)
    with pytest.raises(s2sgrad.TransformError, match="np.mean with these arguments"):
        s2sgrad.grad(m.mean_of_a_call)(np.ones(3), np.ones(3))
