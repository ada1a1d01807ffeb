"""The differential fuzzer (tests/fuzz.py): it catches a wrong rule, and a fixed batch is clean.

The fuzzer runs in a subprocess: it switches the disk cache off and may register
a deliberately wrong gradient rule, neither of which may leak into this session.
"""
import os
import re
import subprocess
import sys

FUZZ = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz.py")
ROOT = os.path.dirname(os.path.dirname(FUZZ))
LAST_LINE = re.compile(r"^FUZZ programs=(\d+) pass=(\d+) wrong=(\d+) refused=(\d+) "
                       r"crashed=(\d+) timeout=(\d+)$")


def run_fuzz(*args, timeout=120):
    proc = subprocess.run([sys.executable, FUZZ, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    m = LAST_LINE.match(lines[-1])
    assert m, f"last line is not the summary: {lines[-1]!r}"
    keys = ["programs", "pass", "wrong", "refused", "crashed", "timeout"]
    return dict(zip(keys, map(int, m.groups()))), proc.stdout


def passing_indices(stdout):
    return [int(i) for i, status in re.findall(r"index=(\d+) (\w+)", stdout) if status == "pass"]


def test_a_one_percent_wrong_rule_is_caught(tmp_path):
    """Programs that pass with the real rules fail once np.tanh's rule is 1% off."""
    counts, out = run_fuzz("--n", "24", "--seed", "7", "--jobs", "2", "--verbose",
                           "--keep", str(tmp_path / "clean"))
    clean = passing_indices(out)[:10]
    assert len(clean) >= 4, out[-2000:]
    counts, out = run_fuzz("--n", "0", "--seed", "7", "--jobs", "2", "--mutate", "tanh",
                           "--index", ",".join(map(str, clean)),
                           "--keep", str(tmp_path / "mutated"))
    assert counts["programs"] == len(clean)
    # most generated programs differentiate through np.tanh (values are kept bounded with
    # it); a few have it only on paths that do not reach the result
    assert counts["wrong"] >= len(clean) // 2, (counts, out[-3000:])
    assert "disagrees with finite differences" in out


def test_last_line_and_determinism(tmp_path):
    a, out_a = run_fuzz("--n", "12", "--seed", "3", "--jobs", "1", "--verbose",
                        "--keep", str(tmp_path / "a"))
    b, out_b = run_fuzz("--n", "12", "--seed", "3", "--jobs", "2", "--verbose",
                        "--keep", str(tmp_path / "b"))
    assert a == b
    assert a["programs"] == 12 and sum(v for k, v in a.items() if k != "programs") <= 12
    status = sorted(re.findall(r"index=(\d+) (\w+)", out_a))
    assert status == sorted(re.findall(r"index=(\d+) (\w+)", out_b))


def test_fixed_seed_batch_has_no_wrong_gradients_and_no_crashes(tmp_path):
    """A few hundred random programs: every gradient (reverse mode, optimised and
    plain, and forward mode) agrees with finite differences, nothing crashes or hangs,
    and at most 5 % are refused."""
    counts, out = run_fuzz("--n", "300", "--seed", "20261201", "--jobs", "2",
                           "--keep", str(tmp_path), timeout=300)
    assert counts["programs"] == 300
    assert counts["wrong"] == 0 and counts["crashed"] == 0, out[-6000:]
    assert counts["timeout"] == 0, out[-3000:]
    assert counts["refused"] <= 15, out[-3000:]


def test_structured_arguments_are_checked_leaf_by_leaf(tmp_path):
    """Entry arguments that are lists of (W, b) tuples or dicts of arrays get their
    gradient compared with finite differences leaf by leaf: a 1% wrong rule shows."""
    counts, out = run_fuzz("--n", "30", "--seed", "3", "--jobs", "1", "--mutate", "tanh",
                           "--keep", str(tmp_path))
    assert counts["wrong"] > 0, out[-3000:]
    structured = re.findall(r"argument \d+ \(params, shape ([\[{][^\n]*)\):\n"
                            r"\s+optimised gradient disagrees with finite differences", out)
    assert any(s.startswith("[") for s in structured), out[-3000:]
    assert any(s.startswith("{") for s in structured), out[-3000:]


def test_random_programs_give_numpys_gradients_on_dask_arrays(tmp_path):
    """--dask: every gradient of a batch of random programs is computed again with its
    arrays as chunked Dask arrays and must equal the NumPy gradient (a program whose
    own code cannot run on Dask, or a function Dask lacks, is counted apart)."""
    import pytest
    pytest.importorskip("dask.array", reason="the dask extra is not installed")
    counts, out = run_fuzz("--n", "60", "--seed", "7", "--jobs", "2", "--dask",
                           "--keep", str(tmp_path), timeout=300)
    assert counts["wrong"] == 0 and counts["crashed"] == 0, out[-6000:]
    dask = re.search(r"^FUZZ-DASK gradients same=(\d+) s2sgrad-refused=(\d+)", out, re.M)
    assert dask, out[-2000:]
    same, refused = map(int, dask.groups())
    assert same >= 60 and refused <= same // 10, out[-2000:]
