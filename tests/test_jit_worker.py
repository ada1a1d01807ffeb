"""jit=True with numba compiling in a worker process (S2SGRAD_JIT_BACKGROUND=1).

The rest of the suite compiles at the first call (conftest sets
S2SGRAD_JIT_BACKGROUND=0), so that every test sees the compiled code. Here
the default is on: the first call of a variant runs the NumPy backend while a
worker process compiles the generated module into numba's disk cache; the
call after the worker is done loads that machine code, and its result is
compared with the NumPy backend's like any first compiled result. Each test
checks the values against the NumPy backend and central differences, and what
ran (a worker, machine code loaded from the cache, NumPy) through the
backend's state.
"""
import inspect
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from conftest import numeric_grad, numeric_vjp

import s2sgrad
from s2sgrad.backends import (
    JitWarning,
    jit_source,
    jit_wait,
    numba_backend,
    numba_variants,
    numba_worker,
)

numba = pytest.importorskip("numba")


def damped(v, a, b, n):
    for _ in range(n):
        v = v + 0.1 * (-a * np.sin(v) - b * v * v)
    return np.sum(v * v)


def flipped(x, n):
    s = 0.0
    for _ in range(n):
        s = s + np.sum(np.flip(x, axis=1) * x)   # numba has no np.flip with an axis
    return s


def scaled_in_place(x, w, n):
    for _ in range(n):
        x *= w
    return np.sum(np.sin(x))


@pytest.fixture(autouse=True)
def background(monkeypatch, tmp_path):
    """Workers on; no compiled variant, warning or machine code from another test (a
    disk cache of its own, and the generated modules imported from it)."""
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "1")
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("s2sgrad_jit_")]:
        monkeypatch.delitem(sys.modules, name)
    numba_backend.reset()
    yield
    numba_backend.reset()


def _inputs(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, shape), rng.uniform(0.5, 1.5, shape),
            rng.uniform(0.1, 0.3, shape[-1:]), 12)


def _variant(f, positions):
    state = numba_backend.known_state(f, positions)
    assert state is not None
    if state.behind is not None:   # the first call's variant is built behind it
        state.behind.join()
    found = list(state.variants.values())
    if len(found) == 2:   # the whole function numba could not take, and its loops outlined
        found = [v for key, v in state.variants.items() if key[-1] != "loops"]
    assert len(found) == 1
    return found[0]


def _loaded_from_cache(dispatcher) -> int:
    return sum(dispatcher.stats.cache_hits.values())


@pytest.mark.parametrize("shape", [(6,), (3, 5)])   # b broadcasts along the last axis
def test_numpy_runs_while_a_worker_compiles_then_the_cached_code(shape):
    args = _inputs(shape)
    g = s2sgrad.grad(damped, (0, 1, 2), jit=True)
    want = s2sgrad.grad(damped, (0, 1, 2))(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        first = g(*args)
        v = _variant(damped, (0, 1, 2))
        assert v.worker is not None and v.check is not None     # compiling elsewhere
        for got, w in zip(first, want):
            np.testing.assert_array_equal(got, w)                # the NumPy backend's
        assert jit_wait(damped)
        assert v.worker is None and v.failed is None
        args2 = _inputs(shape, seed=1)
        second = g(*args2)
    assert v.check is None and _loaded_from_cache(v.fused) == 1   # not compiled here
    want2 = s2sgrad.grad(damped, (0, 1, 2))(*args2)
    for i, (got, w) in enumerate(zip(second, want2)):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got, numeric_grad(damped, list(args2), i),
                                   rtol=1e-6, atol=1e-8)


def rate(v, a):
    return -a * np.sin(v) - 0.1 * v * v


def step(v, a, h):
    k1 = rate(v, a)
    k2 = rate(v + 0.5 * h * k1, a)
    return v + h * k2


def stepped(v, a, n):
    for _ in range(n):
        v = step(v, a, 0.1)
    return np.sum(v * v)


@pytest.mark.parametrize("shape", [(6,), (3, 5)])   # a broadcasts along the last axis
def test_a_function_calling_helpers_compiles_in_a_worker_too(shape):
    """Its callees' split modules are on disk like its own: a worker rebuilds them (a
    helper calling a helper), the first call runs NumPy instead of waiting for
    numba (rk4's took 7.6 s), and the machine code is loaded from the cache."""
    rng = np.random.default_rng(3)
    args = (rng.uniform(-1, 1, shape), rng.uniform(0.5, 1.5, shape[-1:]), 15)
    g = s2sgrad.grad(stepped, (0, 1), jit=True)
    want = s2sgrad.grad(stepped, (0, 1))(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        first = g(*args)
        v = _variant(stepped, (0, 1))
        assert v.worker is not None and v.check is not None     # compiling elsewhere
        for got, w in zip(first, want):
            np.testing.assert_array_equal(got, w)                # the NumPy backend's
        assert jit_wait(stepped)
        assert v.worker is None and v.failed is None
        second = g(*args)
    assert v.check is None and _loaded_from_cache(v.fused) == 1   # not compiled here
    for i, got in enumerate(second):
        np.testing.assert_allclose(got, want[i], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got, numeric_grad(stepped, list(args), i),
                                   rtol=1e-6, atol=1e-8)


def loop_beside_a_product(A, B, xs):
    C = A @ B
    h = np.zeros(C.shape[0])
    for x in xs:
        h = np.tanh(h * x + 0.5)
    return np.sum(C) * 0.01 + np.sum(h * h)


@pytest.mark.parametrize("n", [101, 120])
def test_outlined_loops_compile_in_a_worker_while_numpy_runs_them(n):
    rng = np.random.default_rng(n)
    args = (rng.standard_normal((n, n)) / n, rng.standard_normal((n, n)),
            rng.standard_normal(6) * 0.3)
    g = s2sgrad.grad(loop_beside_a_product, (0, 1, 2), jit=True)
    want = s2sgrad.grad(loop_beside_a_product, (0, 1, 2))(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        first = g(*args)           # NumPy, while a thread builds the outlined variant
        for got, w in zip(first, want):
            np.testing.assert_array_equal(got, w)
        v = _variant(loop_beside_a_product, (0, 1, 2))
        state = numba_backend.known_state(loop_beside_a_product, (0, 1, 2))
        (key, _), = state.variants.items()
        assert key[-1] == "loops" and v.worker is None and v.check is not None
        host = g(*args)            # the host's call of its loops starts the worker
        assert v.worker is not None and v.check is not None
        for got, w in zip(host, want):
            np.testing.assert_array_equal(got, w)         # the NumPy loops ran
        assert jit_wait(loop_beside_a_product)
        second = g(*args)
    assert v.check is None and _loaded_from_cache(v.loops) == 1   # compiled elsewhere
    for i, (got, w) in enumerate(zip(second, want)):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-14)
        if i == 2:
            num = numeric_grad(loop_beside_a_product, list(args), i)
            np.testing.assert_allclose(got, num, rtol=1e-5,
                                       atol=1e-6 * float(np.max(np.abs(num))))


def test_jit_wait_returns_false_at_its_timeout():
    args = _inputs((4,))
    s2sgrad.grad(damped, jit=True)(*args)
    assert not jit_wait(damped, timeout=0.0)    # numba alone takes longer to import
    assert jit_wait(timeout=300)                 # every function's workers
    assert _variant(damped, (0,)).worker is None


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_vjp_runs_numpy_while_a_worker_compiles_forward_and_pullback(shape):
    args = _inputs(shape)
    rng = np.random.default_rng(3)
    out, pullback = s2sgrad.vjp(damped, *args, wrt=(0, 1), jit=True)
    v = _variant(damped, (0, 1))
    assert v.worker is not None and not v.vjp_checked
    cot = float(rng.standard_normal())
    want = s2sgrad.vjp(damped, *args, wrt=(0, 1))[1](cot)
    for got, w in zip(pullback(cot), want):
        np.testing.assert_array_equal(got, w)
    assert jit_wait(damped)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        out2, pullback2 = s2sgrad.vjp(damped, *args, wrt=(0, 1), jit=True)
        grads = pullback2(cot)
    assert v.vjp_checked and v.failed is None
    assert _loaded_from_cache(v.value) == 1 and _loaded_from_cache(v.pullback) == 1
    np.testing.assert_allclose(out2, out, rtol=1e-12)
    for i, g in zip((0, 1), grads):
        np.testing.assert_allclose(g, numeric_vjp(damped, list(args), cot, i),
                                   rtol=1e-6, atol=1e-8)


def test_grad_and_vjp_of_one_variant_each_get_their_worker():
    """A vjp call while grad's worker compiles runs NumPy; once that worker is done,
    the vjp's functions go to a worker of their own, and both end up compiled."""
    args = _inputs((2, 4), seed=6)
    g = s2sgrad.grad(damped, jit=True)
    g(*args)
    v = _variant(damped, (0,))
    fused_worker = v.worker
    cot = 0.7
    out, pullback = s2sgrad.vjp(damped, *args, wrt=0, jit=True)
    want = s2sgrad.vjp(damped, *args, wrt=0)[1](cot)
    np.testing.assert_array_equal(pullback(cot), want)
    assert jit_wait(damped)
    out, pullback = s2sgrad.vjp(damped, *args, wrt=0, jit=True)    # NumPy: its worker starts
    assert v.worker is not None and v.worker is not fused_worker
    np.testing.assert_array_equal(pullback(cot), want)
    assert jit_wait(damped)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        out, pullback = s2sgrad.vjp(damped, *args, wrt=0, jit=True)
        got_vjp = pullback(cot)
        got_grad = g(*args)
    assert v.vjp_checked and v.check is None and v.failed is None
    assert _loaded_from_cache(v.pullback) == 1 and _loaded_from_cache(v.fused) == 1
    np.testing.assert_allclose(got_vjp, want, rtol=1e-12)
    np.testing.assert_allclose(got_grad, numeric_grad(damped, list(args), 0), rtol=1e-6,
                               atol=1e-8)


def test_code_numba_rejects_in_the_worker_gives_one_warning_and_numpy():
    x = np.random.default_rng(4).standard_normal((3, 4))
    g = s2sgrad.grad(flipped, jit=True)
    want = s2sgrad.grad(flipped)(x, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        np.testing.assert_array_equal(g(x, 3), want)     # NumPy, no warning yet
    with pytest.warns(JitWarning, match="TypingError"):
        jit_wait(flipped)                                 # the worker's outcome
    v = _variant(flipped, (0,))
    assert v.failed is not None and "flip" in v.failed
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)        # one warning per function
        np.testing.assert_array_equal(g(x, 3), want)
    np.testing.assert_allclose(want, numeric_grad(flipped, [x, 3], 0), rtol=1e-6, atol=1e-8)


def test_a_worker_that_crashes_leaves_the_compile_to_this_process(monkeypatch):
    monkeypatch.setattr(numba_worker.sys, "executable", "/bin/false")
    args = _inputs((5,))
    g = s2sgrad.grad(damped, jit=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        g(*args)
        v = _variant(damped, (0,))
        assert v.worker is not None
        assert jit_wait(damped)
        assert v.failed is None
        got = g(*args)                        # compiled here, and checked
    assert v.check is None and _loaded_from_cache(v.fused) == 0
    np.testing.assert_allclose(got, s2sgrad.grad(damped)(*args), rtol=1e-12)


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_without_a_disk_cache_the_thread_behind_the_first_call_compiles(monkeypatch, shape):
    """No worker can load a module that is not on disk: the thread that built the
    variant compiles it, while the user's calls run NumPy; the next call runs the
    machine code, checked against the NumPy backend's result."""
    monkeypatch.setenv("S2SGRAD_JIT_CACHE", "0")
    args = _inputs(shape)
    g = s2sgrad.grad(damped, (0, 1), jit=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        first = g(*args)
        v = _variant(damped, (0, 1))
        assert v.worker is None and v.check is not None and len(v.fused.signatures) == 1
        second = g(*args)
    assert v.check is None and v.failed is None           # ran, and agreed with NumPy
    for i, (a, b) in enumerate(zip(first, second)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(b, numeric_grad(damped, list(args), i), rtol=1e-6,
                                   atol=1e-8)


def test_a_function_writing_into_its_arguments_writes_once_while_compiling():
    rng = np.random.default_rng(5)
    x0, w = rng.uniform(0.5, 1.0, 6), 1.1
    g = s2sgrad.grad(scaled_in_place, (0, 1), jit=True)
    for call in range(2):                       # NumPy while compiling, then the compiled
        x = x0.copy()
        got = g(x, w, 3)
        np.testing.assert_allclose(x, x0 * w ** 3, rtol=1e-14)     # written once
        want = s2sgrad.grad(scaled_in_place, (0, 1))(x0.copy(), w, 3)
        for gi, wi in zip(got, want):
            np.testing.assert_allclose(gi, wi, rtol=1e-12)
        np.testing.assert_allclose(got[1], numeric_grad(scaled_in_place, [x0, w, 3], 1),
                                   rtol=1e-6)
        if call == 0:
            assert jit_wait(scaled_in_place)
    assert _variant(scaled_in_place, (0, 1)).check is None


def test_a_module_bound_to_other_objects_is_not_sent_to_a_worker(monkeypatch):
    """A worker binds the helpers numba_helpers defines: code whose names were bound
    to anything else compiles here (where its wrong result is caught)."""
    @numba.njit
    def wrong_sin(x):
        return np.sin(x) * 1.5

    original = numba_variants.module_namespace

    def sabotaged(self, *args):
        ns = original(self, *args)
        ns["_nb_np_sin"] = wrong_sin
        return ns
    monkeypatch.setattr(numba_variants, "module_namespace", sabotaged)
    args = _inputs((5,))
    source = jit_source(damped, *args)
    assert "_nb_np_sin(v)" in source
    with pytest.warns(JitWarning, match="differs from the NumPy backend"):
        got = s2sgrad.grad(damped, jit=True)(*args)
    assert _variant(damped, (0,)).worker is None
    np.testing.assert_allclose(got, s2sgrad.grad(damped)(*args), rtol=1e-12)


def test_beyond_the_workers_allowed_the_thread_behind_the_first_call_compiles(monkeypatch):
    monkeypatch.setattr(numba_backend, "_MAX_WORKERS", 1)
    args = _inputs((4,))
    s2sgrad.grad(damped, jit=True)(*args)
    assert _variant(damped, (0,)).worker is not None
    x = np.random.default_rng(7).standard_normal((3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        first = s2sgrad.grad(scaled_in_place, (0, 1), jit=True)(x.copy(), 0.9, 2)
        v = _variant(scaled_in_place, (0, 1))
        assert v.worker is None and len(v.fused.signatures) == 1   # compiled behind
        got = s2sgrad.grad(scaled_in_place, (0, 1), jit=True)(x.copy(), 0.9, 2)
    assert v.check is None and v.failed is None          # ran, and checked here
    for i, (a, g) in enumerate(zip(first, got)):
        np.testing.assert_allclose(g, a, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(g, numeric_grad(scaled_in_place, [x, 0.9, 2], i),
                                   rtol=1e-6, atol=1e-8)


def test_reset_stops_the_workers():
    s2sgrad.grad(damped, jit=True)(*_inputs((4,)))
    worker = _variant(damped, (0,)).worker
    assert worker is not None
    numba_backend.reset()
    assert worker.done()


@pytest.mark.parametrize("function", [damped, stepped])
def test_the_next_process_loads_the_code_without_a_worker(tmp_path, function):
    """A worker's machine code stays in the disk cache: a new process finds it, loads
    it behind its first call (no worker), and checks it at the next; for a function
    calling helpers too (its callees' modules are on disk: before, every process
    compiled it)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "worker_case.py").write_text(
        "import numpy as np\n\n\n" + "\n\n".join(
            textwrap.dedent(inspect.getsource(f)) for f in (damped, rate, step, stepped)))
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(code)!r})
        import numpy as np, s2sgrad
        from s2sgrad.backends import jit_wait, numba_backend
        from worker_case import {function.__name__} as f
        rng = np.random.default_rng(0)
        args = (rng.uniform(-1, 1, 6), rng.uniform(0.5, 1.5, 6), rng.uniform(0.1, 0.3, 6), 12)
        args = args if f.__name__ == "damped" else (args[0], args[1], 12)
        first = s2sgrad.grad(f, jit=True)(*args)
        state = numba_backend.known_state(f, (0,))
        state.behind.join()
        v = next(iter(state.variants.values()))
        loaded = sum(v.fused.stats.cache_hits.values()) == 1
        print("worker" if v.worker is not None else "loaded" if loaded else "?")
        jit_wait()
        got = s2sgrad.grad(f, jit=True)(*args)
        assert v.check is None and v.failed is None
        want = s2sgrad.grad(f)(*args)
        print(max(float(np.max(np.abs(a - want))) for a in (first, got)))
        """)
    env = dict(os.environ, S2SGRAD_CACHE_DIR=str(tmp_path / "cache"),
               S2SGRAD_JIT_BACKGROUND="1")
    seen = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        how, err = proc.stdout.split()
        assert float(err) < 1e-12
        seen.append(how)
    assert seen == ["worker", "loaded"]


def test_numba_is_imported_behind_the_first_call_not_in_the_users_thread(tmp_path):
    """The first call costs what the NumPy backend's first call costs: the pair's
    layout, numba's import and the rewrite are a thread's, behind the user's."""
    code = textwrap.dedent("""
        import builtins, sys, threading
        import numpy as np
        import s2sgrad
        from s2sgrad.backends import jit_wait
        from s2sgrad.backends.numba_backend import known_state
        importers = []
        real_import = builtins.__import__
        def spy(name, *args, **kwargs):
            if name == "numba" and "numba" not in sys.modules:
                importers.append(threading.current_thread().name)
            return real_import(name, *args, **kwargs)
        builtins.__import__ = spy
        def f(x):
            for _ in range(3):
                x = np.sin(x) * x
            return np.sum(x)
        x = np.linspace(0.1, 1.0, 7)
        first = s2sgrad.grad(f, jit=True)(x)
        behind = known_state(f, (0,)).behind is not None
        assert jit_wait(f)
        second = s2sgrad.grad(f, jit=True)(x)
        np.testing.assert_allclose(second, first, rtol=1e-12)
        print(behind, importers)
    """)
    script = tmp_path / "first_call.py"
    script.write_text(code)
    env = dict(os.environ, S2SGRAD_CACHE_DIR=str(tmp_path), S2SGRAD_JIT_BACKGROUND="1")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "['s2sgrad-jit", "f']"], proc.stdout


def test_a_warning_of_the_thread_behind_is_given_in_the_users_thread(monkeypatch):
    """numba rejects the code the thread compiles (no disk cache: no worker): the
    JitWarning waits for the user's next call (or jit_wait), raised there."""
    monkeypatch.setenv("S2SGRAD_JIT_CACHE", "0")
    x = np.random.default_rng(4).uniform(-1, 1, (3, 4))
    g = s2sgrad.grad(flipped, jit=True)
    want = s2sgrad.grad(flipped)(x, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        np.testing.assert_array_equal(g(x, 3), want)     # NumPy, no warning from the thread
        v = _variant(flipped, (0,))
        assert v.failed is not None and "flip" in v.failed
    with pytest.warns(JitWarning, match="flip") as caught:
        np.testing.assert_array_equal(g(x, 3), want)
    assert caught[0].filename == __file__                # the user's line
    np.testing.assert_allclose(want, numeric_grad(flipped, [x, 3], 0), rtol=1e-6, atol=1e-8)
