"""The s2sgrad command, through a subprocess, on every command and error path."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "s2sgrad", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


def test_show_square_example_inlines_the_vjp():
    proc = run("show", "examples/square.py:loss")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "def loss_forward(x):" in out and "def loss_adjoint(" in out
    assert "grad_input = 2 * x * y_bar" in out
    assert "SquareFunction.vjp" not in out and "SquareFunction.forward" not in out
    assert "# line 25: y = SquareFunction.apply(x)" in out
    assert "\x1b[" not in out  # piped: no colour


def test_show_module_target_with_wrt(tmp_path):
    (tmp_path / "s2s_cli_mod.py").write_text(
        "import numpy as np\n\ndef f(a, b):\n    return np.sum(a * b)\n")
    proc = run("show", "s2s_cli_mod:f", "--wrt", "0,1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "return a_bar, b_bar" in proc.stdout


def test_show_no_optimize_differs():
    a = run("show", "examples/add_mul.py:loss", "--wrt", "0,1").stdout
    b = run("show", "examples/add_mul.py:loss", "--wrt", "0,1", "--no-optimize").stdout
    assert a != b and "def loss_adjoint" in b


def test_check_passes_and_prints_a_table():
    proc = run("check", "examples/cube.py:loss", "--shape", "x=5")
    assert proc.returncode == 0, proc.stderr
    assert "max rel error" in proc.stdout and "OK" in proc.stdout


def test_check_fails_above_tolerance(tmp_path):
    (tmp_path / "bad.py").write_text('''
import numpy as np
import s2sgrad

class Wrong(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return 3 * x * g

def f(x):
    return np.sum(Wrong.apply(x))
''')
    proc = run("check", str(tmp_path / "bad.py") + ":f", "--shape", "x=3")
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout


def test_errors_are_one_message_and_exit_2(tmp_path):
    cases = [
        ("show", "missing.py:f"),
        ("show", "examples/square.py:nope"),
        ("show", "no_such_module_xyz:f"),
        ("show", "examples/square.py"),
        ("show", "examples/square.py:loss", "--wrt", "a"),
    ]
    (tmp_path / "broken.py").write_text("def f(x:\n    return x\n")
    cases.append(("show", str(tmp_path / "broken.py") + ":f"))
    for args in cases:
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, args
        assert proc.stderr.startswith("s2sgrad: error: "), (args, proc.stderr)


def test_transform_error_is_shown_with_caret(tmp_path):
    (tmp_path / "unsupported.py").write_text(
        "import numpy as np\n\ndef f(x):\n    return np.sum(np.fft.fft(x).real)\n")
    proc = run("show", str(tmp_path / "unsupported.py") + ":f")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "unsupported.py:4:19" in proc.stderr and "^" in proc.stderr


def test_help_has_examples():
    for args in (("--help",), ("show", "--help"), ("check", "--help")):
        proc = run(*args)
        assert proc.returncode == 0
        assert "example:" in proc.stdout
