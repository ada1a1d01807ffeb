"""The CuPy cases (tests/test_cupy.py, test_dask.py's cases) on the CPU, with a
strict stand-in for CuPy's arrays (tests/strict_arrays.py): each gradient comes
back as the arguments' kind of array and equals the NumPy gradient, which
test_dask.py checks against central differences. A runtime helper that makes a
NumPy array among them fails here as it would on a GPU."""
import numpy as np
import pytest
from conftest import import_source
from strict_arrays import StrictArray, to_numpy, to_strict
from test_dask import CASES, SHAPES, gradient_on_library_equals_numpys


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("strict"), "strict_cases", CASES)


@pytest.mark.parametrize("name, k", [(n, k) for n in SHAPES for k in range(2)])
def test_gradient_on_strict_arrays_equals_numpys(cases, name, k):
    gradient_on_library_equals_numpys(cases, name, k, to_strict, to_numpy, StrictArray)


def test_the_stand_in_is_as_strict_as_cupy():
    x = to_strict(np.arange(3.0))
    with pytest.raises(TypeError, match="Unsupported type"):
        x + np.ones(3)
    with pytest.raises(TypeError, match="Unsupported type"):
        np.concatenate([x, np.ones(2)])
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(x)
    with pytest.raises(TypeError, match="Unsupported type"):
        x[0:2] = np.zeros(2)
    assert isinstance(x * 2.0 + np.float64(1.0), StrictArray)
    assert isinstance(np.sum(np.tanh(x) * x, axis=0), (float, np.floating, StrictArray))
