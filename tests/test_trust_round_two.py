"""Trust, round two (issue 32): no user text becomes code, fork safety, every
file the cache loads checked, `cache clear` removes only what s2sgrad wrote,
temporary files of dead writers, deep and huge expressions, numba rejections
remembered.

Each test fails without its fix: a comment holding U+2028 ran the rest of the
comment; a child forked while another thread compiled hung on the compiler's
lock; a planted numba module was imported; `cache clear` deleted any directory
named numba; a dead writer's temporary file stayed until eviction; a 350-term
sum was an InternalError; a rejected numba compile was paid again by every
process.
"""
import gc
import importlib.util
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import warnings

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import cache, trust
from s2sgrad.compiler import clear_cache
from s2sgrad.errors import TransformError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOBODY = 65534
needs_root = pytest.mark.skipif(not AS_ROOT, reason="giving files to another user needs root")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(path))
    monkeypatch.delenv("S2SGRAD_CACHE", raising=False)
    monkeypatch.setenv("S2SGRAD_WITNESS", "off")
    clear_cache()
    cache._STORES.clear()
    yield path
    clear_cache()
    cache._STORES.clear()


def load_file(path, name=None):
    """Import the module at `path` (its source written byte for byte)."""
    name = name or f"s2s_trust_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# -- 1. no user text becomes code --------------------------------------------------------
# Every character str.splitlines breaks at (except \n and \r, which end a line of
# Python source too), and control and format characters.
BREAKERS = {"VT": "\v", "FF": "\f", "FS": "\x1c", "GS": "\x1d", "RS": "\x1e", "NEL": "\x85",
            "LS": "\u2028", "PS": "\u2029", "SOH": "\x01", "ESC": "\x1b", "DEL": "\x7f",
            "RLO": "\u202e", "ZWSP": "\u200b"}
PAYLOAD = "    print('INJECTED'); x = x * float('nan')"


def _cases(ch):
    """(what, source of f(x) whose gradient is 2 * sin(x) + 2 * x * cos(x) times k, k)."""
    return {
        "comment": ("def f(x):\n"
                    f"    y = np.sin(x) * 2.0  # note{ch}{PAYLOAD}\n"
                    "    return np.sum(y * x)\n", 1.0),
        "comment line": ("def f(x):\n"
                         f"    # note{ch}{PAYLOAD}\n"
                         "    y = np.sin(x) * 2.0\n"
                         "    return np.sum(y * x)\n", 1.0),
        "string": ("def f(x):\n"
                   f"    y = np.sin(x) * len(\"a{ch}{PAYLOAD}\") / {len('a' + ch + PAYLOAD)}\n"
                   "    return np.sum(2.0 * y * x)\n", 1.0),
        "docstring": ("def f(x):\n"
                      f'    """doc{ch}{PAYLOAD}\n    more{ch}"""\n'
                      "    y = np.sin(x) * 2.0\n"
                      "    return np.sum(y * x)\n", 1.0),
        "default": (f"def f(x, s=\"a{ch}{PAYLOAD}\"):\n"
                    "    y = np.sin(x) * (2.0 * len(s))\n"
                    "    return np.sum(y * x)\n", float(len("a" + ch + PAYLOAD))),
    }


def _check_injection(path, k, capfd):
    x = np.array([0.3, 0.7, -1.1])
    want = k * (2 * np.sin(x) + 2 * x * np.cos(x))
    for attempt in ("fresh", "from disk"):
        clear_cache()
        module = load_file(path)
        got = s2sgrad.grad(module.f)(x)
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=attempt)
        np.testing.assert_allclose(got, numeric_grad(module.f, [x], 0), rtol=1e-6, atol=1e-8)
        assert "INJECTED" not in capfd.readouterr().out, attempt
        source = s2sgrad.source(module.f)
        assert source.count("\n") == len(source.splitlines()), "a line boundary in the text"
        assert "\nprint(" not in source and "\n    print(" not in source


@pytest.mark.parametrize("what", ["comment", "comment line", "string", "docstring", "default"])
@pytest.mark.parametrize("name", sorted(BREAKERS))
def test_no_character_lets_user_text_leave_a_comment_or_string(cache_dir, tmp_path, capfd,
                                                               name, what):
    source, k = _cases(BREAKERS[name])[what]
    path = tmp_path / f"case_{name}.py"
    path.write_text("import numpy as np\n\n\n" + source, encoding="utf-8", newline="")
    _check_injection(path, k, capfd)
    assert [e for e in os.listdir(cache_dir) if e.endswith(cache.SUFFIX)]


@pytest.mark.parametrize("name", ["LS", "NEL", "FF"])
def test_a_file_name_with_a_line_boundary_stays_in_the_header_comment(cache_dir, tmp_path,
                                                                      capfd, name):
    path = tmp_path / f"m{BREAKERS[name]}{PAYLOAD.strip()}#.py"
    path.write_text("import numpy as np\n\n\n" + _cases("")["comment"][0])
    _check_injection(str(path), 1.0, capfd)


def test_comment_and_string_text_is_escaped_not_lost(cache_dir, tmp_path):
    path = tmp_path / "shown.py"
    path.write_text("import numpy as np\n\n\ndef f(x):\n"
                    "    y = np.sin(x) * len('a\u2028b')  # see\u2028below \u00e9\n"
                    "    return np.sum(y)\n", encoding="utf-8")
    text = s2sgrad.source(load_file(path).f)
    assert "# see\\u2028below \u00e9" in text and "'a\\u2028b'" in text


def test_comment_safe_escapes_every_line_boundary_and_control_character():
    for cp in list(range(0x20)) + list(range(0x7f, 0xa0)) + [0x2028, 0x2029, 0x202e, 0xfeff]:
        text = f"a{chr(cp)}b"
        safe = trust.comment_safe(text)
        assert len(safe.splitlines()) == 1 and safe.isprintable(), hex(cp)
    assert trust.comment_safe("x = 1  # \u00e9t\u00e9") == "x = 1  # \u00e9t\u00e9"


# -- 2. fork while another thread compiles --------------------------------------------------
FORK_MODULE = '''
import numpy as np


def make(k):
    def f(x):
        a = np.sin(x) * k
        b = np.cos(a) + a * x
        c = np.tanh(b) * np.exp(-a * a)
        d = a * b + c * x
        for i in range(3):
            d = d + np.sin(d) * 0.1
        return np.sum(d * d + a)
    return f


def small(x):
    return np.sum(np.sin(x) * x)
'''


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_forking_while_another_thread_compiles_never_hangs_the_child(tmp_path, monkeypatch):
    monkeypatch.setenv("S2SGRAD_CACHE", "0")      # every compile runs the passes
    monkeypatch.setenv("S2SGRAD_WITNESS", "off")
    module = load_file(_write(tmp_path / "forking.py", FORK_MODULE))
    gc_before = gc.isenabled()
    stop = threading.Event()
    x = np.array([0.3, -0.4, 0.9])

    def compiling():
        k = 0
        while not stop.is_set():
            k += 1
            s2sgrad.grad(module.make(float(k)))(x)   # a new closure: a new compile
    worker = threading.Thread(target=compiling, daemon=True)
    worker.start()
    hung, failed = 0, 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # fork with threads
            for _ in range(30):
                time.sleep(0.005)
                pid = os.fork()
                if pid == 0:    # the child: compile, check, and leave without pytest
                    code = 1
                    try:
                        clear_cache()
                        g = s2sgrad.grad(module.small)(x)
                        ok = np.allclose(g, np.sin(x) + x * np.cos(x), rtol=1e-12)
                        code = 0 if ok and gc.isenabled() == gc_before else 1
                    finally:
                        os._exit(code)
                deadline = time.monotonic() + 20   # a child takes well under a second
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        failed += os.waitstatus_to_exitcode(status) != 0
                        break
                    if time.monotonic() > deadline:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                        hung += 1
                        break
                    time.sleep(0.01)
                if hung or failed:
                    break
    finally:
        stop.set()
        worker.join(60)
    assert (hung, failed) == (0, 0)
    assert gc.isenabled() == gc_before


def _write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


# -- 3. the whole path to the cache directory ---------------------------------------------
SIMPLE = "import numpy as np\n\n\ndef f(x):\n    return np.sum(np.sin(x) * x)\n"


def _use(directory, tmp_path, monkeypatch):
    """Compile f with `directory` as the cache: (the gradient, the CacheWarnings)."""
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(directory))
    monkeypatch.setenv("S2SGRAD_WITNESS", "off")
    clear_cache()
    cache._STORES.clear()
    module = load_file(_write(tmp_path / f"simple_{uuid.uuid4().hex[:6]}.py", SIMPLE))
    x = np.array([0.5, -1.5])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = s2sgrad.grad(module.f)(x)
    np.testing.assert_allclose(got, np.sin(x) + x * np.cos(x), rtol=1e-12)
    cache._STORES.clear()
    return [w for w in caught if issubclass(w.category, cache.CacheWarning)]


def _entries(path):
    return [n for n in os.listdir(path) if n.endswith(cache.SUFFIX)] \
        if os.path.isdir(path) else []


@needs_root
def test_a_cache_reached_through_another_users_link_is_not_used(tmp_path, monkeypatch):
    victim = tmp_path / "victim" / "cache"
    victim.mkdir(parents=True, mode=0o700)
    (tmp_path / "other").mkdir(mode=0o755)
    link = tmp_path / "other" / "cache"
    link.symlink_to(victim, target_is_directory=True)
    os.lchown(link, NOBODY, NOBODY)
    assert "symbolic link of another user" in trust.path_problem(str(link))
    caught = _use(link, tmp_path, monkeypatch)
    assert len(caught) == 1 and "symbolic link of another user" in str(caught[0].message)
    assert _entries(victim) == []
    assert cache.info(str(link))["problem"]
    assert _use(victim, tmp_path, monkeypatch) == [] and len(_entries(victim)) == 1


@needs_root
@pytest.mark.parametrize("how", ["another user's", "writable by others", "sticky"])
def test_every_parent_of_the_cache_directory_is_checked(tmp_path, monkeypatch, how):
    parent = tmp_path / "parent"
    parent.mkdir(mode=0o755)
    target = parent / "cache"
    target.mkdir(mode=0o700)
    if how == "another user's":
        os.chown(parent, NOBODY, NOBODY)
    else:
        os.chmod(parent, 0o777 | (stat.S_ISVTX if how == "sticky" else 0))
    caught = _use(target, tmp_path, monkeypatch)
    if how == "sticky":     # /tmp: others cannot rename or remove what is not theirs
        assert caught == [] and len(_entries(target)) == 1
    else:
        assert len(caught) == 1 and str(parent) in str(caught[0].message)
        assert _entries(target) == []


# -- 3. numba modules pass the checks every entry passes --------------------------------------
JIT_MODULE = '''
import numpy as np


def f(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + np.sin(x[i]) * x[i]
    return s


def rejected(x, n):
    s = 0.0
    for _ in range(n):
        s = s + np.sum(np.flip(x, axis=1) * x)   # numba has no np.flip with an axis
    return s
'''

JIT_CHILD = '''
import json, sys, time, warnings
sys.path.insert(0, {root!r})
import numpy as np
import importlib.util
spec = importlib.util.spec_from_file_location("jit_case", {module!r})
m = importlib.util.module_from_spec(spec); sys.modules["jit_case"] = m
spec.loader.exec_module(m)
import s2sgrad
from s2sgrad.backends import numba_backend
compiles = []
if {count_compiles!r}:
    import numba.core.dispatcher as d
    original = d.Dispatcher.compile
    def counting(self, sig):
        compiles.append(str(sig))
        return original(self, sig)
    d.Dispatcher.compile = counting
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    start = time.perf_counter()
    if {which!r} == "f":
        x = np.array([0.3, -0.7, 1.2])
        g = s2sgrad.grad(m.f, jit=True)(x)
    else:
        x = np.arange(12.0).reshape(3, 4) / 7
        g = s2sgrad.grad(m.rejected, jit=True)(x, 2)
    seconds = time.perf_counter() - start
print(json.dumps({{"grad": np.asarray(g).tolist(), "seconds": seconds,
                  "warnings": [str(w.message) for w in caught
                               if w.category.__name__ in ("JitWarning", "CacheWarning")],
                  "compiles": len(compiles)}}))
'''


def _jit_child(tmp_path, cache_path, which="f", count_compiles=False):
    pytest.importorskip("numba")
    import json
    module = tmp_path / "jit_case.py"
    if not module.exists():
        _write(module, JIT_MODULE)
    env = dict(os.environ, S2SGRAD_CACHE_DIR=str(cache_path), S2SGRAD_JIT_PLAN="always",
               S2SGRAD_JIT_BACKGROUND="0", S2SGRAD_WITNESS="off")
    proc = subprocess.run([sys.executable, "-c", JIT_CHILD.format(
        root=ROOT, module=str(module), which=which, count_compiles=count_compiles)],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.strip().splitlines()
    return json.loads(out[-1]), "\n".join(out[:-1]) + proc.stderr


def _want_f():
    x = np.array([0.3, -0.7, 1.2])
    return np.sin(x) + x * np.cos(x)


FOREIGN = "print('FOREIGN CODE RAN')\n"


def _modules(cache_path):
    folder = cache_path / "numba"
    return sorted(p for p in folder.iterdir() if p.name.startswith("m_") and
                  p.name.endswith(".py"))


@needs_root
@pytest.mark.parametrize("plant", ["link", "another user's", "0666", "foreign text, ours"])
def test_a_planted_numba_module_is_never_run(tmp_path, plant):
    cache_path = tmp_path / "cache"
    result, _ = _jit_child(tmp_path, cache_path)
    np.testing.assert_allclose(result["grad"], _want_f(), rtol=1e-10)
    (module,) = _modules(cache_path)
    # What is planted carries a valid marker and checksum: only the other checks stop it.
    text = trust.sealed_text(trust.NUMBA_MODULE_MARKER, FOREIGN + module.read_text()
                             .split("\n", 1)[1])
    module.unlink()
    if plant == "link":
        elsewhere = tmp_path / "elsewhere.py"
        elsewhere.write_text(text)
        os.chmod(elsewhere, 0o600)
        module.symlink_to(elsewhere)
    else:
        module.write_text(text)
        os.chmod(module, 0o666 if plant == "0666" else 0o600)
        if plant == "another user's":
            os.chown(module, NOBODY, NOBODY)
    result, output = _jit_child(tmp_path, cache_path)
    assert "FOREIGN CODE RAN" not in output
    np.testing.assert_allclose(result["grad"], _want_f(), rtol=1e-10)
    assert not module.is_symlink() and module.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(module.stat().st_mode) == 0o600
    assert cache.read_sealed(str(module), trust.NUMBA_MODULE_MARKER) is not None
    assert "FOREIGN" not in module.read_text()


def test_the_worker_refuses_a_module_that_is_not_the_one_written(tmp_path):
    from s2sgrad.backends import numba_worker
    folder = tmp_path / "numba"
    folder.mkdir(mode=0o700)
    path = cache.write_sealed(str(folder), "m_abc.py", trust.NUMBA_MODULE_MARKER, "x = 1\n")
    with open(path, "rb") as f:
        import hashlib
        digest = hashlib.sha256(f.read()).hexdigest()
    job = numba_worker.Job(path, "m_abc", False, {}, [], digest)
    assert numba_worker.checked_module_text(job).endswith("x = 1\n")
    cache.write_sealed(str(folder), "m_abc.py", trust.NUMBA_MODULE_MARKER, FOREIGN)
    with pytest.raises(RuntimeError, match="not what s2sgrad wrote"):
        numba_worker.checked_module_text(job)
    os.chmod(path, 0o666)
    with pytest.raises(RuntimeError, match="writable by others"):
        numba_worker.checked_module_text(job)


def test_numba_machine_code_is_checked_before_numba_reads_it(tmp_path):
    folder = tmp_path / "numba"
    (folder / "__pycache__").mkdir(parents=True, mode=0o700)
    index = folder / "__pycache__" / "m_abc.f-3.py311.nbi"
    index.write_bytes(b"pickled index")
    os.chmod(index, 0o644)
    assert trust.machine_code_problem(str(folder), "m_abc") == ""
    os.chmod(index, 0o666)
    assert "writable by others" in trust.machine_code_problem(str(folder), "m_abc")


# -- 4. cache clear removes only what s2sgrad wrote ------------------------------------------
def _clear(cache_path):
    proc = subprocess.run([sys.executable, "-m", "s2sgrad", "cache", "clear"],
                          env=dict(os.environ, S2SGRAD_CACHE_DIR=str(cache_path)),
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_cache_clear_leaves_a_numba_directory_it_did_not_make(tmp_path):
    cache_path = tmp_path / "cache"
    foreign = cache_path / "numba"
    foreign.mkdir(parents=True)
    os.chmod(cache_path, 0o700)
    (foreign / "results.csv").write_text("precious\n")
    (foreign / "m_user.py").write_text("x = 1\n")
    out = _clear(cache_path)
    assert (foreign / "results.csv").read_text() == "precious\n"
    assert (foreign / "m_user.py").exists()
    assert f"left {foreign}: s2sgrad did not make it (no marker): not removed" in out
    store = cache.DiskCache(str(cache_path))
    with pytest.warns(cache.CacheWarning, match="s2sgrad did not make it"):
        assert store.subdirectory(cache.NUMBA_SUBDIR) is None   # and jit=True keeps out


@pytest.mark.parametrize("mode", [0o777, 0o770])
def test_cache_clear_leaves_a_numba_directory_others_can_write(tmp_path, mode):
    cache_path = tmp_path / "cache"
    store = cache.DiskCache(str(cache_path))
    folder = store.subdirectory(cache.NUMBA_SUBDIR)
    cache.write_sealed(folder, "m_aaa.py", trust.NUMBA_MODULE_MARKER, "x = 1\n")
    os.chmod(folder, mode)
    out = _clear(cache_path)
    assert os.path.exists(os.path.join(folder, "m_aaa.py"))
    assert "is writable by" in out and "not removed" in out


def test_cache_clear_removes_its_modules_and_lists_what_it_left(tmp_path):
    cache_path = tmp_path / "cache"
    store = cache.DiskCache(str(cache_path))
    folder = store.subdirectory(cache.NUMBA_SUBDIR)
    cache.write_sealed(folder, "m_aaa.py", trust.NUMBA_MODULE_MARKER, "x = 1\n")
    cache.write_sealed(folder, "m_aaa.rejected", trust.NUMBA_REJECTION_MARKER, "numba 0\nno\n")
    with open(os.path.join(folder, "m_bbb.py"), "w") as f:
        f.write("x = 2\n")                   # named like a module, not written by s2sgrad
    with open(os.path.join(folder, "notes.txt"), "w") as f:
        f.write("mine\n")
    out = _clear(cache_path)
    assert "removed 0 entries, 1 numba module and 1 other numba file" in out
    assert f"left {os.path.join(folder, 'm_bbb.py')}: not written by s2sgrad" in out
    assert f"left {os.path.join(folder, 'notes.txt')}: not written by s2sgrad" in out
    assert sorted(os.listdir(folder)) == [cache.MARKER_NAME, "m_bbb.py", "notes.txt"]


def test_cache_clear_touches_nothing_in_a_directory_it_refuses(cache_dir, tmp_path):
    store = cache.DiskCache(str(cache_dir))
    key = "a" * 64
    assert store.write(key, {"format": cache.FORMAT, "key": key})
    os.chmod(cache_dir, 0o777)
    out = _clear(cache_dir)
    assert "not cleared" in out and "writable by" in out
    assert _entries(cache_dir) == [key + cache.SUFFIX]
    os.chmod(cache_dir, 0o700)


# -- 5. temporary files of dead writers --------------------------------------------------------
def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_dead_writers_temporary_file_goes_at_the_next_write(tmp_path):
    store = cache.DiskCache(str(tmp_path / "c"))
    assert store.write("0" * 64, {"format": cache.FORMAT, "key": "0" * 64})
    writing = tmp_path / "c" / cache.TMP_SUBDIR
    dead = writing / f"{cache.TMP_PREFIX}{_dead_pid()}-killed{cache.TMP_SUFFIX}"
    alive = writing / f"{cache.TMP_PREFIX}{os.getppid()}-busy{cache.TMP_SUFFIX}"
    for path in (dead, alive):
        path.write_bytes(b"half an entry")
        os.chmod(path, 0o600)
    facts = cache.info(str(tmp_path / "c"))
    assert facts["stale"] == [str(dead)] and facts["writing"] == 1   # known dead at once
    assert store.write("1" * 64, {"format": cache.FORMAT, "key": "1" * 64})
    assert not dead.exists() and alive.exists()
    assert cache.clear(str(tmp_path / "c"))["temporary"] == 1 and not alive.exists()


def test_temporary_files_count_toward_the_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("S2SGRAD_CACHE_MAX_MB", str(100_000 / 2 ** 20))
    store = cache.DiskCache(str(tmp_path / "c"))
    keys = [f"{i:064x}" for i in range(4)]
    for key in keys[:3]:
        assert store.write(key, {"format": cache.FORMAT, "key": key, "blob": b"x" * 10_000})
    assert len(_entries(tmp_path / "c")) == 3
    busy = tmp_path / "c" / cache.TMP_SUBDIR / f"{cache.TMP_PREFIX}{os.getppid()}-big.part"
    busy.write_bytes(b"y" * 75_000)          # a write in progress: its bytes count
    os.chmod(busy, 0o600)
    assert cache.scan(str(tmp_path / "c")).temp_bytes == 75_000
    assert store.write(keys[3], {"format": cache.FORMAT, "key": keys[3], "blob": b"z"})
    left = _entries(tmp_path / "c")
    assert keys[3] + cache.SUFFIX in left and len(left) < 4
    found = cache.scan(str(tmp_path / "c"))
    assert found.bytes + found.temp_bytes <= 100_000


# -- 6. deep expressions and huge constants --------------------------------------------------
def test_a_sum_of_350_terms_is_differentiated(cache_dir, tmp_path):
    terms = " + ".join(f"x[{i % 3}] * {i}.0" for i in range(350))
    path = _write(tmp_path / "long_sum.py", f"def f(x):\n    return {terms}\n")
    f = load_file(path).f
    x = np.array([0.3, 0.7, 1.1])
    want = [sum(float(i) for i in range(350) if i % 3 == k) for k in range(3)]
    np.testing.assert_allclose(s2sgrad.grad(f)(x), want, rtol=1e-12)
    np.testing.assert_allclose(s2sgrad.grad(f)(x), numeric_grad(f, [x], 0), rtol=1e-6)


def test_a_deeper_expression_than_the_compiler_can_read_is_a_clear_error(cache_dir, tmp_path):
    terms = " + ".join(["x"] * 1500)     # Python compiles it; the tree is 1,500 deep
    path = _write(tmp_path / "deeper.py", f"def f(x):\n    return {terms}\n")
    f = load_file(path).f
    try:
        g = s2sgrad.grad(f)(2.0)
    except TransformError as exc:   # where a limit is truly needed: at the function
        assert "nested too deeply" in str(exc) and "deeper.py:1" in str(exc)
    else:
        assert g == 1500.0


def test_huge_constants_are_not_folded(cache_dir, tmp_path):
    path = _write(tmp_path / "huge.py", """
        import numpy as np


        def f(x):
            return np.sum(np.sin(x)) * (2 ** 20000 % 7) + len('ab' * 3000)
    """)
    f = load_file(path).f
    x = np.array([0.2, -0.4])
    start = time.perf_counter()
    np.testing.assert_allclose(s2sgrad.grad(f)(x), 4 * np.cos(x), rtol=1e-12)
    assert time.perf_counter() - start < 30
    assert "2 ** 20000" in s2sgrad.source(f)


# -- 7. a numba rejection is remembered ----------------------------------------------------------
@pytest.mark.parametrize("background", ["0"])
def test_a_numba_rejection_is_recorded_and_not_paid_again(tmp_path, background):
    cache_path = tmp_path / "cache"
    first, _ = _jit_child(tmp_path, cache_path, "rejected", count_compiles=True)
    assert first["compiles"] >= 1
    (warning,) = [w for w in first["warnings"] if "NumPy backend" in w]
    # (two: the whole function's, and its loops' outlined, which hold the np.flip too)
    records = list((cache_path / "numba").glob("m_*.rejected"))
    assert len(records) == 2
    import numba
    for record in records:
        text = cache.read_sealed(str(record), trust.NUMBA_REJECTION_MARKER)
        assert text.startswith(f"numba {numba.__version__}\n")
    second, _ = _jit_child(tmp_path, cache_path, "rejected", count_compiles=True)
    assert second["compiles"] == 0                 # straight to NumPy
    assert second["warnings"] == [warning]         # with the same warning
    np.testing.assert_allclose(second["grad"], first["grad"], rtol=1e-12)
    x = np.arange(12.0).reshape(3, 4) / 7
    rejected = load_file(tmp_path / "jit_case.py").rejected
    np.testing.assert_allclose(second["grad"], numeric_grad(rejected, [x, 2], 0), rtol=1e-6,
                               atol=1e-8)
    # a record another version of numba made, or one that is not s2sgrad's, is not used
    for record in records:
        record.write_text("numba 0.0\nwhatever\n")
    third, _ = _jit_child(tmp_path, cache_path, "rejected", count_compiles=True)
    assert third["compiles"] >= 1
