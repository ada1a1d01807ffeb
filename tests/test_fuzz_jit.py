"""A few of the fuzzer's programs under jit=True, against the NumPy backend.

`tests/fuzz_jit.py` runs many (see its docstring); these are the first
programs of two seeds, outlined (numba runs the loops, NumPy the rest) and
compiled whole, so that every run of the suite differentiates some random
loops through both numba paths, preallocated stacks included. (The seeds are ones
whose first programs numba compiles: a change of the generator's constructs changes
the programs; 9 and 11 compiled one each after this stop's, 12 and 14 four and three.)
"""
import os

import fuzz_jit
import pytest

pytest.importorskip("numba")


@pytest.mark.parametrize("plan, seed", [("loops", 12), ("always", 14)])
def test_fuzzer_programs_give_numpys_gradients_under_jit(monkeypatch, tmp_path, plan, seed):
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", plan)
    monkeypatch.setenv("S2SGRAD_CACHE", "0")
    results = [fuzz_jit.check_program(seed, index, str(tmp_path)) for index in range(6)]
    bad = [(i, detail) for i, (status, detail) in enumerate(results)
           if status in ("wrong", "crashed")]
    assert not bad, bad
    assert sum(status == "pass" for status, _ in results) >= 2, results
    assert os.listdir(tmp_path)


@pytest.mark.parametrize("plan, seed", [("loops", 12), ("always", 14)])
def test_fuzzer_programs_built_behind_the_first_call_give_numpys_gradients(
        monkeypatch, tmp_path, plan, seed):
    """As by default outside the tests: the first call runs NumPy while a thread builds
    the variant (with no disk cache, the thread compiles it too); the call after
    jit_wait runs numba's code, checked against NumPy's."""
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", plan)
    monkeypatch.setenv("S2SGRAD_CACHE", "0")
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", "1")
    results = [fuzz_jit.check_program(seed, index, str(tmp_path), background=True)
               for index in range(6)]
    bad = [(i, detail) for i, (status, detail) in enumerate(results)
           if status in ("wrong", "crashed")]
    assert not bad, bad
    assert sum(status == "pass" for status, _ in results) >= 2, results


def test_fuzzer_programs_with_structures_and_keyword_only_give_numpys_gradients_under_jit(
        monkeypatch, tmp_path):
    """The constructs the jit fuzzer otherwise leaves out, structured arguments
    differentiated too: jit=True's pair is compiled for arrays, so they run the NumPy
    backend (a list of (W, b) once ended in InternalError), and a keyword-only
    parameter's default was passed by position (TypeError)."""
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")
    monkeypatch.setenv("S2SGRAD_CACHE", "0")
    results = [fuzz_jit.check_program(13, index, str(tmp_path), structures=True)
               for index in range(8)]
    bad = [(i, detail) for i, (status, detail) in enumerate(results)
           if status in ("wrong", "crashed")]
    assert not bad, bad


def test_a_partial_entry_and_a_helper_given_a_function_run_numpy_under_jit(make_module,
                                                                          monkeypatch):
    """Two kinds of pair the numba backend does not compile (a partial's, and one
    made for the function a helper is given): jit=True runs the NumPy backend for
    them with its gradient, never a crash (the fuzzer found both)."""
    import warnings

    import numpy as np

    import s2sgrad
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "loops")
    monkeypatch.setenv("S2SGRAD_CACHE", "0")
    m = make_module('''
import functools
import numpy as np


def apply_fn(fn, v, c):
    return fn(v * c) + v


def looped(x, scale=1.0):
    acc = 0.0
    for i in range(3):
        acc = acc + np.sum(np.tanh(x * scale)) + np.sum(apply_fn(np.sin, x, 0.5))
    return acc


entry = functools.partial(looped, scale=-1.2)
''')
    for x in (np.array([0.1, 0.2, 0.3]), np.linspace(-1.0, 1.0, 7)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for f in (m.entry, m.looped):
                np.testing.assert_allclose(s2sgrad.grad(f, jit=True)(x), s2sgrad.grad(f)(x),
                                           rtol=1e-12)
