"""The same gradients on CuPy arrays, on a GPU (skipped without one).

CuPy takes part in NumPy's dispatch as Dask does, so the cases are
tests/test_dask.py's: each gradient is compared with the NumPy gradient, which
test_dask.py checks against central finite differences.
"""
import pytest
from conftest import import_source
from test_dask import CASES, SHAPES, gradient_on_library_equals_numpys

cupy = pytest.importorskip("cupy", reason="CuPy is not installed (pip install '.[cuda]' "
                                          "on a machine with an NVIDIA GPU)")
try:
    _GPUS = cupy.cuda.runtime.getDeviceCount()
except Exception:  # noqa: BLE001 - no driver, no device: the same for these tests
    _GPUS = 0
pytestmark = pytest.mark.skipif(_GPUS == 0, reason="no GPU on this machine")


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("cupy"), "cupy_cases", CASES)


@pytest.mark.parametrize("name, k", [(n, k) for n in SHAPES for k in range(2)])
def test_gradient_on_cupy_equals_numpys(cases, name, k):
    gradient_on_library_equals_numpys(cases, name, k, cupy.asarray, cupy.asnumpy, cupy.ndarray)
