"""The same gradients on CuPy arrays, on a GPU (skipped without one).

CuPy takes part in NumPy's dispatch as Dask does, so the cases are
tests/test_dask.py's: each gradient is compared with the NumPy gradient, which
test_dask.py checks against central finite differences.
"""
import numpy as np
import pytest
from conftest import import_source
from test_dask import CASES, SHAPES, checked_numpy_gradient

import s2sgrad

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
    fn = getattr(cases, name)
    args, wrt, value, expected = checked_numpy_gradient(cases, name, k)
    on_gpu = [cupy.asarray(a) for a in args]
    gpu_value, grads = s2sgrad.value_and_grad(fn, wrt=wrt)(*on_gpu)
    np.testing.assert_allclose(float(gpu_value), value, rtol=1e-10)
    for g, a, e in zip(grads, on_gpu, expected):
        assert isinstance(g, cupy.ndarray) and g.shape == a.shape and g.dtype == a.dtype
        assert g.device == a.device
        np.testing.assert_allclose(cupy.asnumpy(g), e, rtol=1e-10, atol=1e-12)
