"""The s2sgrad command, through a subprocess, on every command and error path."""
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_PYGMENTS = importlib.util.find_spec("pygments") is not None


def _env(env=None):
    full = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full.pop("NO_COLOR", None)
    full.update(env or {})
    return full


def run(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, "-m", "s2sgrad", *args], capture_output=True,
                          text=True, cwd=cwd, env=_env(env), timeout=120)


def run_many(commands, env=None):
    """Several commands at once (in parallel); CompletedProcess-like results in order."""
    procs = [subprocess.Popen([sys.executable, "-m", "s2sgrad", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(env))
             for args in commands]
    results = []
    for args, p in zip(commands, procs):
        out, err = p.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(args, p.returncode, out, err))
    return results


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("s2sgrad"), proc.stderr
    assert "error: " in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr  # exactly one line
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)


def test_show_square_example_inlines_the_vjp():
    proc = run("show", "examples/square.py:loss")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "def loss_forward(x):" in out and "def loss_adjoint(" in out
    assert "grad_input = 2 * x * y_bar" in out
    # inlined, not called: named only in the comments that say so
    assert "SquareFunction.vjp(" not in out and "SquareFunction.forward(" not in out
    assert "# line 25: y = SquareFunction.apply(x)  # SquareFunction.vjp inlined (square.py:18)" \
        in out
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


def test_show_function_staticmethod_differentiates_its_input():
    # forward keeps its input in ctx (save_for_backward), which s2sgrad cannot follow
    # in forward differentiated alone: shown as s2sgrad inlines it, in a caller.
    proc = run("show", "examples/square.py:SquareFunction.forward")
    assert proc.returncode == 0, proc.stderr
    assert "is not differentiated on its own (square.py:14: the method " \
           ".save_for_backward() keeps a differentiated value in ctx" in proc.stdout
    assert "gradient with respect to input" in proc.stdout
    assert "SquareFunction (its vjp at square.py:18)" in proc.stdout


def test_show_package_module_target_and_callees(tmp_path):
    pkg = tmp_path / "s2s_cli_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(
        "import numpy as np\n\ndef inner(a):\n    return np.tanh(a)\n\n"
        "def outer(x):\n    return np.sum(inner(x) * x)\n")
    proc = run("show", "s2s_cli_pkg.model:outer", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "def outer_adjoint(" in proc.stdout and "def inner_adjoint(" in proc.stdout


def test_show_colour_only_when_asked_or_on_a_terminal():
    plain = run("show", "examples/square.py:loss")
    assert "\x1b[" not in plain.stdout
    forced = run("show", "examples/square.py:loss", "--color")
    assert forced.returncode == 0, forced.stderr
    if HAVE_PYGMENTS:
        assert "\x1b[" in forced.stdout
        assert "\x1b[" not in run("show", "examples/square.py:loss", "--no-color").stdout
    else:  # without pygments: plain text, never an error
        assert forced.stdout == plain.stdout
    both = run("show", "examples/square.py:loss", "--color", "--no-color")
    assert both.returncode == 2 and "not allowed with" in both.stderr


def _run_on_terminal(*args, env=None):
    import pty
    import select
    full = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full.pop("NO_COLOR", None)
    full.update(env or {})
    main, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "s2sgrad", *args], stdout=child,
                            stderr=subprocess.PIPE, cwd=ROOT, env=full)
    os.close(child)
    out = b""
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(main)
    return proc.returncode, out.decode()


def test_show_colours_by_default_on_a_terminal():
    code, out = _run_on_terminal("show", "examples/square.py:loss")
    assert code == 0
    assert "loss_adjoint" in out
    assert ("\x1b[" in out) == HAVE_PYGMENTS
    code, out = _run_on_terminal("show", "examples/square.py:loss", env={"NO_COLOR": "1"})
    assert code == 0 and "\x1b[" not in out
    code, out = _run_on_terminal("show", "examples/square.py:loss", "--no-color")
    assert code == 0 and "\x1b[" not in out


def test_check_table_has_abs_and_rel_error_per_argument():
    proc = run("check", "examples/add_mul.py:loss", "--shape", "a=3", "--shape", "b=3",
               "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "max abs error" in lines[0] and "max rel error" in lines[0]
    rows = {line.split()[0]: line.split() for line in lines[2:4]}
    assert set(rows) == {"a", "b"}
    for row in rows.values():
        assert float(row[-1]) < 1e-6 and float(row[-2]) < 1e-6
    assert lines[-1].startswith("OK")


def test_check_scalar_arguments_defaults_and_wrt(tmp_path):
    (tmp_path / "scal.py").write_text(
        "import numpy as np\n\ndef f(x, s, power=2, w=None):\n"
        "    return np.sum(x ** power * s) + np.sum(w * x)\n")
    proc = run("check", str(tmp_path / "scal.py") + ":f", "--shape", "x=2,3",
               "--shape", "w=2,3")
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()[2:-1]]
    assert names == ["x", "s", "w"]  # power keeps its integer default
    proc = run("check", str(tmp_path / "scal.py") + ":f", "--shape", "x=2,3",
               "--shape", "w=2,3", "--wrt", "1")
    assert [line.split()[0] for line in proc.stdout.splitlines()[2:-1]] == ["s"]


def test_check_tolerance_decides_exit_code(tmp_path):
    (tmp_path / "fine.py").write_text(
        "import numpy as np\n\ndef f(x):\n    return np.sum(np.exp(x))\n")
    target = str(tmp_path / "fine.py") + ":f"
    assert run("check", target, "--shape", "x=4").returncode == 0
    strict = run("check", target, "--shape", "x=4", "--tol", "1e-30")
    assert strict.returncode == 1
    assert "above tolerance" in strict.stdout and "FAILED" in strict.stdout


def test_cache_info_and_clear(tmp_path):
    env = {"S2SGRAD_CACHE_DIR": str(tmp_path / "c")}
    info = run("cache", "info", env=env)
    assert info.returncode == 0, info.stderr
    assert f"directory: {tmp_path / 'c'}" in info.stdout
    assert "entries:   0" in info.stdout and "disk cache: on" in info.stdout
    assert run("show", "examples/add_mul.py:loss", "--wrt", "0,1", env=env).returncode == 0
    assert run("show", "examples/square.py:loss", env=env).returncode == 0
    info = run("cache", "info", env=env)
    assert "entries:   2" in info.stdout
    size = sum(os.path.getsize(tmp_path / "c" / n) for n in os.listdir(tmp_path / "c")
               if n.endswith(".s2s"))
    assert f"({size} bytes)" in info.stdout or f"{size} bytes" in info.stdout
    clear = run("cache", "clear", env=env)
    assert clear.returncode == 0 and "removed 2 entries" in clear.stdout
    assert "entries:   0" in run("cache", "info", env=env).stdout
    off = run("cache", "info", env=dict(env, S2SGRAD_CACHE="0"))
    assert "disk cache: off" in off.stdout


def test_cache_info_reports_and_clear_removes_what_is_not_an_entry(tmp_path):
    import time

    from s2sgrad import cache
    env = {"S2SGRAD_CACHE_DIR": str(tmp_path / "c"), "S2SGRAD_CACHE_MAX_MB": "64"}
    assert run("show", "examples/square.py:loss", env=env).returncode == 0
    folder = tmp_path / "c"
    fifo = folder / ("f" * 64 + cache.SUFFIX)
    os.mkfifo(fifo)
    stale = folder / (cache.TMP_PREFIX + "killed" + cache.TMP_SUFFIX)
    stale.write_bytes(b"half")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    info = run("cache", "info", env=env)
    assert info.returncode == 0, info.stderr
    assert "entries:   1" in info.stdout and "cap 64.0 MiB" in info.stdout
    assert "stale:     1 temporary file older than 10 minutes" in info.stdout
    assert f"  {fifo}: a FIFO" in info.stdout
    assert "memory:    up to 1024 pairs" in info.stdout
    clear = run("cache", "clear", env=env)
    assert clear.returncode == 0, clear.stderr
    assert "removed 1 entry, 1 temporary file and 1 other file" in clear.stdout
    assert os.listdir(folder) == []
    os.chmod(folder, 0o777)
    info = run("cache", "info", env=env)
    assert ("disk cache: not used: the directory is writable by group and others "
            "(mode 0777)") in info.stdout
    assert f"chmod 700 {folder}" in info.stdout


def test_cache_clear_also_removes_the_jit_modules(tmp_path):
    """jit=True keeps numba modules (and numba's machine code beside them) in
    <cache>/numba, a directory s2sgrad marks as its own; `cache info` counts them
    and `cache clear` removes them (and only them: see test_trust_round_two)."""
    from s2sgrad import cache, trust
    store = cache.DiskCache(str(tmp_path / "c"))
    numba_dir = store.subdirectory(cache.NUMBA_SUBDIR)
    assert numba_dir == str(tmp_path / "c" / "numba")
    for name in ("m_aaa.py", "m_bbb.py"):
        cache.write_sealed(numba_dir, name, trust.NUMBA_MODULE_MARKER, "x = 1\n")
    os.mkdir(os.path.join(numba_dir, "__pycache__"), 0o700)
    with open(os.path.join(numba_dir, "__pycache__", "m_aaa.f-1.py311.nbi"), "wb") as f:
        f.write(b"index")
    env = {"S2SGRAD_CACHE_DIR": str(tmp_path / "c")}
    info = run("cache", "info", env=env)
    assert info.returncode == 0, info.stderr
    assert "numba:     2 compiled modules" in info.stdout
    clear = run("cache", "clear", env=env)
    assert clear.returncode == 0, clear.stderr
    assert "removed 0 entries, 2 numba modules and 1 other numba file" in clear.stdout
    assert "left" not in clear.stdout
    assert not os.path.exists(numba_dir) and (tmp_path / "c").exists()
    assert "numba:" not in run("cache", "info", env=env).stdout


def test_cache_clear_does_not_follow_a_linked_numba_directory(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "m_keep.py").write_text("x = 1\n")
    (tmp_path / "c").mkdir(mode=0o700)
    (tmp_path / "c" / "numba").symlink_to(elsewhere, target_is_directory=True)
    clear = run("cache", "clear", env={"S2SGRAD_CACHE_DIR": str(tmp_path / "c")})
    assert clear.returncode == 0 and "removed 0 entries from" in clear.stdout
    assert "numba: a symbolic link (never followed): not removed" in clear.stdout
    assert (elsewhere / "m_keep.py").exists()


def test_cache_info_on_an_unusable_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run("cache", "info", env={"S2SGRAD_CACHE_DIR": str(blocker / "c")})
    assert proc.returncode == 0 and "entries:   0" in proc.stdout
    assert "not created yet" in proc.stdout


def test_show_is_served_from_the_disk_cache(tmp_path):
    env = {"S2SGRAD_CACHE_DIR": str(tmp_path / "c")}
    first = run("show", "examples/add_mul.py:loss", "--wrt", "0,1", env=env)
    second = run("show", "examples/add_mul.py:loss", "--wrt", "0,1", env=env)
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout
    assert len([n for n in os.listdir(tmp_path / "c") if n.endswith(".s2s")]) == 1


def test_errors_are_one_message_and_exit_2(tmp_path):
    (tmp_path / "broken.py").write_text("def f(x:\n    return x\n")
    (tmp_path / "raises.py").write_text("import numpy as np\nraise RuntimeError('boom\\nagain')\n")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "ok.py").write_text("import numpy as np\nK = 3\n\ndef f(x):\n    return x\n")
    cases = [
        (("show", "missing.py:f"), "no such file: missing.py"),
        (("show", "examples/square.py:nope"), "has no function 'nope'"),
        (("show", "no_such_module_xyz:f"), "cannot import module 'no_such_module_xyz'"),
        (("show", "examples/square.py"), "must be FILE.py:FUNCTION"),
        (("show", "examples/square.py:"), "must be FILE.py:FUNCTION"),
        (("show", "examples/square.py:loss", "--wrt", "a"), "--wrt takes"),
        (("show", "examples/square.py:loss", "--wrt", "3"), "out of range"),
        (("show", "examples/square.py:SquareFunction"), "is a class"),
        (("show", str(tmp_path / "ok.py") + ":K"), "is a int, not a function"),
        (("show", str(tmp_path / "broken.py") + ":f"), "syntax error in"),
        (("show", str(tmp_path / "raises.py") + ":f"), "RuntimeError: boom again"),
        (("show", str(tmp_path / "exits.py") + ":f"), "SystemExit"),
        (("check", "examples/cube.py:loss", "--shape", "y=5"), "not parameters of loss"),
        (("check", "examples/cube.py:loss", "--shape", "x=a"), "must be integers"),
        (("check", "examples/cube.py:loss", "--shape", "x"), "NAME=D1,D2"),
        (("check", "examples/cube.py:loss", "--shape", "x=5", "--tol", "-1"), "--tol"),
        (("check", "missing.py:f", "--shape", "x=5"), "no such file"),
        ((), "a command is required"),
        (("cache",), "an action is required"),
        (("cache", "drop"), "invalid choice"),
        (("show",), "required: TARGET"),
        (("show", "examples/square.py:loss", "--bogus"), "unrecognized arguments"),
        (("check", "examples/cube.py:loss", "--seed", "x"), "invalid int value"),
    ]
    for (args, fragment), proc in zip(cases, run_many([c for c, _ in cases])):
        assert proc.args == args
        assert_one_line_error(proc, fragment)


def test_transform_error_is_shown_with_caret(tmp_path):
    (tmp_path / "unsupported.py").write_text(
        "import numpy as np\n\ndef f(x):\n    return np.sum(np.unwrap(x))\n")
    for command in (("show",), ("check", "--shape", "x=3")):
        proc = run(command[0], str(tmp_path / "unsupported.py") + ":f", *command[1:])
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        assert proc.stderr.startswith("s2sgrad: error: ")
        assert "unsupported.py:4:19" in proc.stderr and "^" in proc.stderr


def test_every_command_has_help_with_examples_that_work(tmp_path):
    helps = [("--help",), ("show", "--help"), ("check", "--help"), ("cache", "--help"),
             ("cache", "info", "--help"), ("cache", "clear", "--help")]
    examples = []
    for args, proc in zip(helps, run_many(helps)):
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("usage: s2sgrad")
        head, sep, tail = proc.stdout.partition("\nexample")
        assert sep, (args, proc.stdout)
        lines = [line.strip() for line in tail.splitlines()[1:] if line.strip()]
        assert lines, args
        examples += [line.split()[1:] for line in lines if line.startswith("s2sgrad ")]
    assert len(examples) >= 8
    env = {"S2SGRAD_CACHE_DIR": str(tmp_path / "c")}
    for args, proc in zip(examples, run_many(examples, env=env)):
        assert proc.returncode == 0, (args, proc.stderr)


def test_main_is_the_console_script(capsys):
    from s2sgrad import cli
    assert cli.main(["cache", "info"]) == 0
    assert "directory:" in capsys.readouterr().out


def test_the_readme_shows_what_show_prints():
    """The README's example of `s2sgrad show examples/square.py:loss` is its output
    (tests/test_docs.py runs every block; this one is checked here by itself too)."""
    from test_docs import blocks
    shown = [b for b in blocks("README.md")
             if b.lang == "bash" and b.text == "s2sgrad show examples/square.py:loss\n"]
    assert len(shown) == 1 and shown[0].output is not None
    proc = run("show", "examples/square.py:loss")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown[0].output.text


def test_show_jit_shapes_that_leave_a_structure_undrawn_say_what_to_give():
    # mlp_structured's params is a list of (W, b): --shape cannot draw it, and the
    # function fails on the number drawn in its place: said in one line, naming it.
    proc = run("show", "benchmarks/workloads/mlp_structured.py:mlp_loss", "--jit",
               "--shape", "X=4,3")
    assert_one_line_error(proc, "params")
    assert "show --jit drew" in proc.stderr and "(params, Y)" in proc.stderr
    assert "lists, tuples or dicts" in proc.stderr
