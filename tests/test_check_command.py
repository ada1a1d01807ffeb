"""`s2sgrad check`: shapes from annotations (or a message naming --shape), --range, and a
function that is not deterministic said to be so."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from s2sgrad.check import CheckError, check_gradient, random_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = '''
from typing import Annotated

import numpy as np


def mlp(x, W):
    return np.sum(np.tanh(x @ W))


def mlp_annotated(x: np.ndarray, W: np.ndarray):
    return np.sum(np.tanh(x @ W))


def mlp_shaped(x: Annotated[np.ndarray, (3,)], W: (3, 2), scale: float = 2.0):
    return scale * np.sum(np.tanh(x @ W))


def roots(x, y):
    return np.sum(np.sqrt(x) + np.log(x)) * y


def noisy(x):
    return np.sum(x * np.random.standard_normal(x.shape))


def seeded(x):
    rng = np.random.default_rng(0)
    return np.sum(x * rng.standard_normal(x.shape))
'''


@pytest.fixture
def cases(make_module):
    return make_module(CASES)


def test_shapes_come_from_annotations(cases):
    args, _ = random_inputs(cases.mlp_shaped, {}, np.random.default_rng(0))
    assert [np.shape(a) for a in args] == [(3,), (3, 2)]
    report = check_gradient(cases.mlp_shaped, {})
    assert report.ok and [r.shape for r in report.rows] == [(3,), (3, 2)]
    # --shape wins over the annotation
    report = check_gradient(cases.mlp_shaped, {"x": (2, 3)})
    assert report.ok and report.rows[0].shape == (2, 3)


def test_an_array_without_a_shape_names_shape(cases):
    with pytest.raises(CheckError, match=r"--shape x=3 --shape W=3"):
        check_gradient(cases.mlp_annotated, {})
    # unannotated: the function fails on scalars, and the message says why and what to give
    with pytest.raises(CheckError) as info:
        check_gradient(cases.mlp, {})
    text = str(info.value)
    assert "TypeError" in text and "without --shape (x, W)" in text and "--shape x=3" in text


def test_range_keeps_inputs_in_the_domain(cases):
    with pytest.raises(CheckError, match=r"NaN or infinity.*--range"):
        check_gradient(cases.roots, {"x": (4,)})
    report = check_gradient(cases.roots, {"x": (4,)}, ranges={"x": (0.5, 2.0)})
    assert report.ok
    args, _ = random_inputs(cases.roots, {"x": (50,)}, np.random.default_rng(1),
                            ranges={"x": (0.5, 2.0), None: (-3.0, -2.0)})
    assert np.all((args[0] >= 0.5) & (args[0] <= 2.0)) and -3.0 <= args[1] <= -2.0
    with pytest.raises(ValueError, match="not parameters"):
        check_gradient(cases.roots, {"x": (4,)}, ranges={"z": (0.0, 1.0)})


def test_a_function_that_is_not_deterministic_is_said_to_be(cases):
    with pytest.raises(CheckError, match="not deterministic: two calls on the same inputs"):
        check_gradient(cases.noisy, {"x": (3,)})
    assert check_gradient(cases.seeded, {"x": (3,)}).ok   # a fixed seed: checked as usual


def run(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "s2sgrad", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


def test_command_line(tmp_path):
    (tmp_path / "fns.py").write_text(textwrap.dedent(CASES))
    target = str(tmp_path / "fns.py")
    proc = run("check", target + ":mlp")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--shape" in proc.stderr and "Traceback" not in proc.stderr
    proc = run("check", target + ":mlp_shaped")
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr
    proc = run("check", target + ":roots", "--shape", "x=4", "--range", "x=0.5,2",
               "--range", "1,2")
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr
    proc = run("check", target + ":noisy", "--shape", "x=3")
    assert proc.returncode == 2 and "not deterministic" in proc.stderr, proc.stderr
    for bad, fragment in (("x=2,1", "LO must be below HI"), ("x=1", "two numbers"),
                          ("=1,2", "NAME=LO,HI")):
        proc = run("check", target + ":roots", "--shape", "x=4", "--range", bad)
        assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr
    help_text = run("check", "--help").stdout
    assert "--range" in help_text and "annotation" in help_text
