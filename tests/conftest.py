"""Shared test helpers: an independent finite-difference oracle.

Every gradient in the suite is compared with central differences computed
here from the *original* Python function, never from generated code.
"""
import atexit
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import traceback
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


def assert_grads_match_differences(f, args, positions, rtol=1e-6, atol=1e-8,
                                   witness=True, optimize=True):
    """s2sgrad.grad(f, positions)(*args) against central differences, argument by
    argument; the gradients. `optimize=False`: the plain (unoptimised) pair, run
    directly; `witness`: grad's self-check, on or off. Arrays are copied for each
    run (a function that writes into its arguments must not see another's)."""
    import s2sgrad

    def fresh():
        return [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    if optimize:
        grads = s2sgrad.grad(f, tuple(positions), witness=witness)(*fresh())
    else:
        compiled = s2sgrad.compiler.compile_function(f, tuple(positions), optimize_code=False)
        _, residuals = compiled.forward(*fresh())
        grads = compiled.adjoint(residuals, 1.0)
        if len(positions) == 1:     # (the adjoint of one position returns its gradient)
            grads = (grads,)
    for i, g in zip(positions, grads):
        np.testing.assert_allclose(g, numeric_grad(f, fresh(), i), rtol=rtol, atol=atol,
                                   err_msg=f"{getattr(f, '__name__', f)}: argument {i}")
    return grads


def leaf_differences(f, args, leaf, eps=1e-6):
    """Central differences of f(*args) in each element of `leaf`, an array inside args
    (a list's, tuple's or dict's item: changed in place and restored)."""
    fd = np.zeros_like(leaf)
    for idx in np.ndindex(leaf.shape):
        leaf[idx] += eps
        up = f(*args)
        leaf[idx] -= 2 * eps
        down = f(*args)
        leaf[idx] += eps
        fd[idx] = (up - down) / (2 * eps)
    return fd


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


def check_grad_and_tangent(f, args, rng, rtol=1e-6, atol=1e-8):
    """s2sgrad.grad of scalar f at every argument, and functional.jvp along a random
    direction of the first, against central differences."""
    import s2sgrad
    from s2sgrad import functional
    positions = tuple(range(len(args)))
    grads = s2sgrad.grad(f, positions)(*args)
    wanted = [numeric_grad(f, list(args), i) for i in positions]
    for i in positions:
        np.testing.assert_allclose(grads[i], wanted[i], rtol=rtol, atol=atol,
                                   err_msg=f"gradient of argument {i}")
    u = rng.standard_normal(np.shape(args[0]))
    assert len(args) == 2, "one argument besides the first (f(v, *rest) is refused)"
    other = args[1]
    _, tangent = functional.jvp(lambda v: f(v, other), (args[0],), (u,))
    np.testing.assert_allclose(tangent, np.sum(wanted[0] * u), rtol=rtol, atol=atol)


def check_jvp(f, args, tangents, eps=EPS, rtol=1e-6, atol=1e-8):
    """functional.jvp of f at args along tangents against central differences along
    them (and its output against f's)."""
    from s2sgrad import functional
    out, tangent = functional.jvp(f, tuple(args), tuple(tangents))
    up = f(*[a + eps * t for a, t in zip(args, tangents)])
    down = f(*[a - eps * t for a, t in zip(args, tangents)])
    np.testing.assert_allclose(out, f(*args), rtol=1e-12)
    np.testing.assert_allclose(tangent, (up - down) / (2 * eps), rtol=rtol, atol=atol)
    return tangent


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


@pytest.fixture
def restore_registry():
    """Rules a test registers (defvjp, defjvp, Function helpers) are removed after it:
    the table stays as shipped, so the cache fingerprint of later tests is empty."""
    from s2sgrad import runtime
    from s2sgrad.rules import jvp_rules, registry
    registry.load_table()   # (the table registers at its first use: before the snapshot)
    live = (registry.REGISTRY.functions, runtime.HELPERS, registry._USER_HELPERS,
            jvp_rules._SPECS)
    saved = [dict(table) for table in live]
    yield
    for table, old in zip(live, saved):
        table.clear()
        table.update(old)
    jvp_rules._BUILT.clear()


# S2SGRAD_CHECK_OPTIMIZER=1 (see s2sgrad/optimizer_check.py) compiles a second,
# unoptimised pair beside every pair the API uses. Tests that count compiles or
# disk entries would count those too; they run in the default mode only.
_COUNTS_COMPILES = ("tests/test_cache.py", "tests/test_cache_reload.py",
                    "tests/test_cache_trust.py",
                    "test_hvp_is_forward_over_reverse_and_vhp_reverse_over_reverse",
                    "test_trust_round_two.py::test_a_cache_reached_through_another_users_link",
                    "test_trust_round_two.py::test_every_parent_of_the_cache_directory")


@pytest.fixture(autouse=True)
def _witness_off_where_compiles_are_counted(request, monkeypatch):
    if any(part in request.node.nodeid for part in _COUNTS_COMPILES + _COUNTS_ENTRIES):
        monkeypatch.setenv("S2SGRAD_WITNESS", "off")


# Tests of the command line that count what `s2sgrad check` or `show` leave on disk.
_COUNTS_ENTRIES = ("tests/test_cli.py::test_cache_info",
                   "tests/test_cli.py::test_show_is_served_from_the_disk_cache")


# The slow suites: left out of the quick run (the README's `python -m pytest -n auto`,
# which pyproject.toml's `-m 'not slow'` keeps under five minutes on two cores) and run
# by `.ci/run` after it (`pytest -m slow`). Node ids, or their beginnings: each took
# several seconds to a minute, most of it numba compiling or processes starting.
_SLOW = (
    # long fuzz batches (one small batch, test_last_line_and_determinism, stays quick)
    "tests/test_fuzz.py::test_a_one_percent_wrong_rule_is_caught",
    "tests/test_fuzz.py::test_fixed_seed_batch_has_no_wrong_gradients_and_no_crashes",
    "tests/test_fuzz.py::test_structured_arguments_are_checked_leaf_by_leaf",
    "tests/test_fuzz.py::test_random_programs_give_numpys_gradients_on_dask_arrays",
    "tests/test_fuzz.py::test_family_alone_is_clean",
    "tests/test_fuzz.py::test_family_catches_its_mutation",
    "tests/test_fuzz.py::test_families_are_on_by_default_and_deterministic",
    "tests/test_fuzz_jit.py::",
    # numba compiles of every workload, size and plan
    "tests/test_jit_outline.py::test_a_loop_next_to_a_large_product_runs_in_numba",
    "tests/test_jit_outline.py::test_broadcasting_inside_the_outlined_loops",
    "tests/test_jit_outline.py::test_outlined_at_every_size_the_loop_workloads_agree",
    "tests/test_jit.py::test_clip_cotangent_of_the_clipped_array_alone",
    "tests/test_jit_fusion.py::test_grad_when_the_shapes_differ_takes_the_fallback",
    "tests/test_jit_fusion.py::test_vjp_of_a_non_scalar_output",
    "tests/test_jit_worker.py::test_numpy_runs_while_a_worker_compiles_then_the_cached_code",
    "tests/test_jit_worker.py::test_vjp_runs_numpy_while_a_worker_compiles_forward_and_pullback",
    "tests/test_jit_worker.py::test_grad_and_vjp_of_one_variant_each_get_their_worker",
    "tests/test_jit_worker.py::test_the_next_process_loads_the_code_without_a_worker",
    "tests/test_jit_worker.py::test_beyond_the_workers_allowed_the_first_call_compiles",
    "tests/test_trust_round_two.py::test_a_planted_numba_module_is_never_run",
    "tests/test_trust_round_two.py::test_a_numba_rejection_is_recorded_and_not_paid_again",
    "tests/test_benchmarks_smoke.py::test_the_jit_summary_reports_the_first_call_and_when",
    "tests/test_jit_policy.py::test_show_jit_prints_the_rule_and_for_shapes_the_decision",
    "tests/test_jit_policy.py::test_vjp_follows_the_same_decision",
    "tests/test_jit_policy.py::test_small_straight_line_code_is_compiled",
    "tests/test_jit.py::test_compiled_code_is_kept_on_disk_for_the_next_process",
    "tests/test_jit.py::test_new_arrays_and_reductions_of_expressions_call_cached_helpers",
    "tests/test_jit.py::test_calls_to_other_user_functions",
    "tests/test_jit_fusion.py::test_grad_of_two_arrays_of_one_shape",
    "tests/test_jit_fusion.py::test_an_array_read_only_through_its_shape",
    "tests/test_jit_fusion.py::test_large_arguments_after_the_first_call",
    "tests/test_jit_fusion.py::test_random_programs_compute_the_same_fused",
    "tests/test_jit_fusion.py::test_runs_that_broadcast_in_the_first_run_are_not_fused",
    "tests/test_jit_fusion.py::test_division_by_zero_in_compiled_code_is_numpys",
    "tests/test_trust_round_two.py::test_forking_while_another_thread_compiles_never_hangs",
    # a dask.distributed cluster of worker processes
    "tests/test_dask.py::test_distributed_example_fits_on_a_local_cluster_and_agrees",
)


def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        if item.nodeid.startswith(_SLOW):
            item.add_marker(slow)
    # -m 'not slow' (pyproject's addopts) is applied after this hook adds the marks.
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


# -- every process a test starts is reaped ----------------------------------------------
# A test that fails (or times out) between starting children and waiting for them
# must not leave them running: the suite once left three children polling every
# millisecond for a file that never came. Every subprocess.Popen (subprocess.run
# included) is recorded; after each test, the children still running that the test
# itself started are killed with everything they started, and after a failure every
# one is (s2sgrad's own numba workers included).
_PACKAGE = os.path.join(ROOT, "s2sgrad") + os.sep
_STARTED = []


class _RecordedPopen(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        by_package = any(frame.filename.startswith(_PACKAGE)
                         for frame in traceback.extract_stack(limit=30))
        _STARTED.append((self, by_package))


subprocess.Popen = _RecordedPopen


def _descendants(pid):
    """The processes started by pid, and theirs (from /proc; empty elsewhere)."""
    children = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def reap(proc):
    """Kill a process that is still running, and everything it started; wait for it."""
    if proc.poll() is not None:
        return
    for pid in reversed(_descendants(proc.pid)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.kill()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        item._s2s_failed = True


@pytest.fixture(autouse=True)
def _reap_children(request):
    start = len(_STARTED)
    yield
    started, _STARTED[start:] = _STARTED[start:], []
    failed = getattr(request.node, "_s2s_failed", False)
    for proc, by_package in started:
        if failed or not by_package:
            reap(proc)

