"""Shared test helpers: an independent finite-difference oracle.

Every gradient in the suite is compared with central differences computed
here from the *original* Python function, never from generated code.
"""
import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
import textwrap
import uuid

import numpy as np
import pytest

# The disk cache of the whole test session (and of the subprocesses it starts)
# lives in a temporary directory, never in the user's ~/.cache.
_CACHE_DIR = tempfile.mkdtemp(prefix="s2sgrad-test-cache-")
os.environ["S2SGRAD_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, True)

# The self-checks (s2sgrad.witness) run on every call of the suite's gradients, not
# only on the first per kind of arguments; tests that count compiles or cache
# entries turn them off (the derivative witness compiles the tangent code too).
os.environ.setdefault("S2SGRAD_WITNESS", "always")

# jit=True compiles at the first call, so that a test's first call runs the compiled
# code; tests/test_jit_worker.py turns the default (a worker process) back on.
os.environ["S2SGRAD_JIT_BACKGROUND"] = "0"

# Tests may import the benchmark workloads (benchmarks.workloads.*), whatever
# directory pytest was started from.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

EPS = 1e-6


def _set(args, i, value):
    """A fresh argument list (arrays copied: the function may write into them)."""
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    args[i] = value
    return args


def _copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _inner(v, out):
    if isinstance(out, (tuple, list)):
        return sum(_inner(vi, oi) for vi, oi in zip(v, out))
    return float(np.sum(np.asarray(v, dtype=np.float64) * np.asarray(out, dtype=np.float64)))


def numeric_vjp(f, args, v, i, eps=EPS):
    """v . d f(*args) / d args[i] by central differences (float64)."""
    x = args[i]
    if isinstance(x, float):
        hi = _inner(v, f(*_set(args, i, x + eps)))
        lo = _inner(v, f(*_set(args, i, x - eps)))
        return (hi - lo) / (2 * eps)
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += eps
        minus[idx] -= eps
        g[idx] = (_inner(v, f(*_set(args, i, plus))) - _inner(v, f(*_set(args, i, minus)))) \
            / (2 * eps)
    return g


def numeric_grad(f, args, i, eps=EPS):
    return numeric_vjp(f, args, 1.0, i, eps)


def random_cotangent(out, rng):
    if isinstance(out, tuple):
        return tuple(random_cotangent(o, rng) for o in out)
    if np.ndim(out) == 0:
        return float(rng.standard_normal())
    return rng.standard_normal(np.shape(out))


def check_vjp(f, args, wrt=None, seed=0, rtol=1e-6, atol=1e-7):
    """Compare s2sgrad.vjp with central differences for every position in wrt."""
    import s2sgrad
    rng = np.random.default_rng(seed)
    positions = tuple(range(len(args))) if wrt is None else tuple(wrt)
    args = _copies(args)
    out, pullback = s2sgrad.vjp(f, *_copies(args), wrt=positions)
    expected_out = f(*_copies(args))
    if isinstance(out, tuple):
        for o, e in zip(out, expected_out):
            np.testing.assert_allclose(o, e, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(out, expected_out, rtol=1e-12, atol=1e-12)
    v = random_cotangent(out, rng)
    grads = pullback(v)
    for i, g in zip(positions, grads):
        expected = numeric_vjp(f, list(args), v, i)
        assert np.shape(g) == np.shape(args[i]), (np.shape(g), np.shape(args[i]))
        np.testing.assert_allclose(g, expected, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of argument {i}")
    return grads


def import_source(directory, name: str, source: str):
    """Write `source` to directory/name.py and import it as module `name`
    (s2sgrad reads functions' source, so test cases live in real files)."""
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def make_module(tmp_path):
    """Write source to a real file and import it (s2sgrad needs real source)."""
    def make(source: str, name: str = None):
        return import_source(tmp_path, name or f"s2s_case_{uuid.uuid4().hex[:8]}", source)
    return make


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# S2SGRAD_CHECK_OPTIMIZER=1 (see s2sgrad/optimizer_check.py) compiles a second,
# unoptimised pair beside every pair the API uses. Tests that count compiles or
# disk entries would count those too; they run in the default mode only.
_COUNTS_COMPILES = ("tests/test_cache.py", "tests/test_cache_reload.py",
                    "tests/test_cache_trust.py",
                    "test_hvp_is_forward_over_reverse_and_vhp_reverse_over_reverse")


@pytest.fixture(autouse=True)
def _witness_off_where_compiles_are_counted(request, monkeypatch):
    if any(part in request.node.nodeid for part in _COUNTS_COMPILES + _COUNTS_ENTRIES):
        monkeypatch.setenv("S2SGRAD_WITNESS", "off")


# Tests of the command line that count what `s2sgrad check` or `show` leave on disk.
_COUNTS_ENTRIES = ("tests/test_cli.py::test_cache_info",
                   "tests/test_cli.py::test_show_is_served_from_the_disk_cache")


def pytest_collection_modifyitems(config, items):
    from s2sgrad import optimizer_check
    if not optimizer_check.ENABLED:
        return
    skip = pytest.mark.skip(reason="counts compiles or cache entries; the optimizer check "
                                   "mode compiles a plain pair beside each one")
    for item in items:
        if any(part in item.nodeid for part in _COUNTS_COMPILES):
            item.add_marker(skip)


# S2SGRAD_RECORD_CODEGEN=FILE records the text of every pair the session
# generates (tests/codegen_record.py compares two such records: a refactoring
# of the compiler must leave every generated line as it was).
if os.environ.get("S2SGRAD_RECORD_CODEGEN"):
    from codegen_record import install as _install_recorder
    _install_recorder(os.environ["S2SGRAD_RECORD_CODEGEN"])
