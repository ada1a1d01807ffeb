"""A few of the fuzzer's programs under jit=True, against the NumPy backend.

`tests/fuzz_jit.py` runs many (see its docstring); these are the first
programs of two seeds, outlined (numba runs the loops, NumPy the rest) and
compiled whole, so that every run of the suite differentiates some random
loops through both numba paths, preallocated stacks included.
"""
import os

import fuzz_jit
import pytest

pytest.importorskip("numba")


@pytest.mark.parametrize("plan, seed", [("loops", 4), ("always", 3)])
def test_fuzzer_programs_give_numpys_gradients_under_jit(monkeypatch, tmp_path, plan, seed):
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", plan)
    monkeypatch.setenv("S2SGRAD_CACHE", "0")
    results = [fuzz_jit.check_program(seed, index, str(tmp_path)) for index in range(6)]
    bad = [(i, detail) for i, (status, detail) in enumerate(results)
           if status in ("wrong", "crashed")]
    assert not bad, bad
    assert sum(status == "pass" for status, _ in results) >= 2, results
    assert os.listdir(tmp_path)
