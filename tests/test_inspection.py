"""What the generated code and the errors tell a reader: inlined Functions are
named where they are inlined, and a refused call points at the call."""
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SOURCE = '''
import numpy as np
import s2sgrad


class Cube(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return 3 * x * x * g


def uses_cube(x):
    y = Cube.apply(x) + 1.0
    return np.sum(y * x)


namespace = {}
exec("import numpy as np\\ndef made(x):\\n    return np.sin(x) * x\\n", namespace)
made = namespace["made"]


def calls_made(x):
    y = made(x)
    return np.sum(y)
'''


@pytest.fixture
def m(make_module):
    return make_module(SOURCE)


def test_an_inlined_function_is_named_in_the_header_and_at_its_line(m):
    text = s2sgrad.source(m.uses_cube)
    header = text.splitlines()[1]
    assert header == "# s2sgrad: inlined Functions: Cube (its vjp at %s:13)" % (
        os.path.basename(m.__file__))
    line = next(ln for ln in text.splitlines() if "line 19:" in ln)
    assert line.strip() == ("# line 19: y = Cube.apply(x) + 1.0  # Cube.vjp inlined (%s:13)"
                            % os.path.basename(m.__file__))


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_the_marked_code_is_still_right(m, shape):
    x = np.random.default_rng(2).standard_normal(shape)
    np.testing.assert_allclose(s2sgrad.grad(m.uses_cube)(x), numeric_grad(m.uses_cube, [x], 0),
                               rtol=1e-6, atol=1e-8)


def test_a_call_to_a_function_without_source_is_refused_at_the_call(m):
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(m.calls_made)(np.ones(3))
    err = info.value
    assert err.filename == m.__file__ and err.lineno == 29
    lines = str(err).splitlines()
    assert lines[0].startswith(f"{m.__file__}:29:9: cannot differentiate through this call "
                               f"to made: cannot read the source of made")
    assert lines[1].strip() == "y = made(x)" and lines[2].strip() == "^"
    assert lines[2].index("^") == lines[1].index("made")


def test_the_cli_shows_the_mark(m):
    run = subprocess.run([sys.executable, "-m", "s2sgrad", "show", f"{m.__file__}:uses_cube"],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "# s2sgrad: inlined Functions: Cube (its vjp at" in run.stdout
    assert "# Cube.vjp inlined (" in run.stdout


def test_show_prints_any_order(tmp_path):
    path = tmp_path / "three.py"
    path.write_text("import numpy as np\n\n\ndef f(x):\n    y = np.sin(x)\n"
                    "    return y * x ** 2\n")
    run = subprocess.run([sys.executable, "-m", "s2sgrad", "show", f"{path}:f", "--order", "3",
                          "--no-color"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("def grad_grad_f(x):")
    assert "def grad_grad_f_adjoint(" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "s2sgrad", "show", f"{path}:f", "--order", "0"],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--order takes a whole number from 1 up" in bad.stderr
