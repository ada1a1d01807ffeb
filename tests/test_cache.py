"""The disk cache (SPEC 1.6): keys, invalidation, robustness, permissions, processes."""
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
from conftest import check_vjp

import s2sgrad
import s2sgrad.version
from s2sgrad import cache, compiler, functional
from s2sgrad.compiler import clear_cache, compile_function

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The Function the cached modules inline (two of them, below, use it).
CUBE = '''class Cube(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return 3 * x ** 2 * g
'''

MODULE = f'''
import numpy as np
import s2sgrad

SCALE = 3.0


{CUBE}

def helper(a, b):
    return np.sin(a) * b


def loss(x, w):
    y = Cube.apply(x)
    return np.sum(helper(y, w)) * SCALE


def plain(x):
    return np.sum(np.tanh(x) * x)


def floors(x, y):
    return np.sum(np.floor(x) * y)


def countdown(x, n):
    if n > 0:
        out = countdown(x * 1.5, n - 1)
    else:
        out = np.sum(x * x)
    return out
'''


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache directory and an empty memory cache."""
    path = tmp_path / "cache"
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(path))
    monkeypatch.delenv("S2SGRAD_CACHE", raising=False)
    clear_cache()
    yield path
    clear_cache()


@pytest.fixture
def passes(monkeypatch):
    """Counts how many times the compiler runs its passes."""
    calls = []
    original = compiler.driver.run_passes

    def counting(parsed, *args, **kwargs):
        calls.append(parsed.name)
        return original(parsed, *args, **kwargs)
    monkeypatch.setattr(compiler.driver, "run_passes", counting)
    return calls


@pytest.fixture
def m(make_module):
    return make_module(MODULE)


def entries(path):
    return sorted(p for p in os.listdir(path) if p.endswith(cache.SUFFIX)) \
        if os.path.isdir(path) else []


def stray_files(path):
    """Files that are not entries (the empty directory where writes are made is none)."""
    return [p for p in os.listdir(path) if not p.endswith(cache.SUFFIX) and not
            (p == cache.TMP_SUBDIR and not os.listdir(os.path.join(path, p)))]


def only_entry(path):
    """The path of the one entry in the cache directory."""
    (name,) = entries(path)
    return os.path.join(path, name)


# Keys compared with each other only: any fixed options tuple will do.
OPTIONS = (True,)


# -- storing and loading --------------------------------------------------------------
def test_entry_is_written_and_loaded_without_running_the_passes(cache_dir, passes, m, rng):
    first = compile_function(m.plain, (0,))
    assert passes == ["plain"]
    assert len(entries(cache_dir)) == 1
    clear_cache()
    second = compile_function(m.plain, (0,))
    assert passes == ["plain"]  # loaded from disk
    assert second is not first
    assert second.source == first.source
    assert second.name == first.name and second.params == first.params
    x = rng.standard_normal(4)
    check_vjp(m.plain, [x])
    assert compile_function(m.plain, (0,)) is second  # and then from memory


def test_generated_functions_from_disk_are_debuggable(cache_dir, m):
    compile_function(m.plain, (0,))
    clear_cache()
    loaded = compile_function(m.plain, (0,))
    import inspect
    assert inspect.getsource(loaded.adjoint).startswith("def plain_adjoint(")
    assert loaded.forward.__globals__ is m.plain.__globals__  # module globals stay live


def test_function_callee_and_recursion_are_loaded_from_disk(cache_dir, passes, m, rng):
    x, w = rng.standard_normal(3), rng.standard_normal(3)
    expected = compile_function(m.loss, (0, 1)).source
    assert sorted(passes) == ["helper", "loss"]
    compile_function(m.countdown, (0,))
    stored = len(entries(cache_dir))
    assert stored == 3  # loss, helper, countdown (which calls itself)
    clear_cache()
    del passes[:]
    assert compile_function(m.loss, (0, 1)).source == expected
    check_vjp(m.loss, [x, w])
    check_vjp(m.countdown, [x, 3], wrt=(0,))
    assert passes == []
    assert len(entries(cache_dir)) == stored


def test_foreign_globals_of_an_inlined_function_are_rebound(cache_dir, passes, make_module,
                                                            rng, monkeypatch):
    ops = make_module('''
        import numpy as xp
        import s2sgrad

        FACTOR = 2.0


        class Wave(s2sgrad.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return xp.sin(x) * FACTOR

            @staticmethod
            def vjp(ctx, g):
                x, = ctx.saved_tensors
                return xp.cos(x) * FACTOR * g
        ''')
    monkeypatch.setitem(sys.modules, "s2s_cache_ops", ops)
    user = make_module('''
        import numpy as np
        from s2s_cache_ops import Wave

        def f(x):
            return np.sum(Wave.apply(x))
        ''')
    x = rng.standard_normal(5)
    src = compile_function(user.f, (0,)).source
    assert "s2s_m_xp" in src and "s2s_m_FACTOR" in src  # not the caller's names
    clear_cache()
    del passes[:]
    np.testing.assert_allclose(s2sgrad.grad(user.f)(x), 2.0 * np.cos(x))
    assert passes == []
    # The other module's constant changes: the entry no longer matches.
    ops.FACTOR = 5.0
    clear_cache()
    np.testing.assert_allclose(s2sgrad.grad(user.f)(x), 5.0 * np.cos(x))
    assert passes == ["f"]


def _all_bindings(compiled, seen=None):
    """(namespace, name, value) of a pair and the pairs it calls, by identity."""
    seen = set() if seen is None else seen
    seen.add(id(compiled))
    out = {(id(b.namespace), b.name, id(b.value)) for b in compiled.bindings}
    for sub in compiled.callees:
        if id(sub) not in seen:
            out |= _all_bindings(sub, seen)
    return out


def test_a_pair_from_disk_checks_exactly_what_a_fresh_pair_checks(cache_dir, passes,
                                                                  make_module, monkeypatch):
    ops = make_module('''
        import numpy as xp
        import s2sgrad

        FACTOR = 2.0


        def dwave(x):
            return xp.cos(x) * FACTOR


        class Wave(s2sgrad.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return xp.sin(x) * FACTOR

            @staticmethod
            def vjp(ctx, g):
                x, = ctx.saved_tensors
                return dwave(x) * g
        ''')
    monkeypatch.setitem(sys.modules, "s2s_cache_ops2", ops)
    helpers = make_module('''
        import numpy as np


        def act(z):
            return np.tanh(z)
        ''')
    monkeypatch.setitem(sys.modules, "s2s_cache_helpers2", helpers)
    user = make_module('''
        import numpy as np
        import s2s_cache_helpers2 as hh
        from s2s_cache_ops2 import Wave


        def f(x, k=2.0):
            return np.sum(hh.act(Wave.apply(x)) * k)
        ''')
    fresh = compile_function(user.f, (0,))
    expected = _all_bindings(fresh)
    names = {name for _, name, _ in expected}
    # the helper reached as hh.act, the Function's methods, the names its bodies
    # read in their own module (a helper the vjp calls, a constant), the defaults
    assert {"hh", "act", "Wave", "forward", "vjp", "dwave", "FACTOR", "xp",
            "__defaults__"} <= names
    clear_cache()
    del passes[:]
    loaded = compile_function(user.f, (0,))
    assert passes == [] and loaded is not fresh
    assert _all_bindings(loaded) == expected
    x = np.linspace(-1, 1, 4)
    g = s2sgrad.grad(user.f)
    np.testing.assert_allclose(g(x), 2 * (1 - np.tanh(2 * np.sin(x)) ** 2) * 2 * np.cos(x))
    helpers.act = lambda z: z * z   # reached as hh.act: the loaded pair must notice
    np.testing.assert_allclose(g(x), 2 * 2 * (2 * np.sin(x)) * 2 * np.cos(x))
    ops.dwave = lambda z: xp_cos(z) * 3.0   # the vjp's helper, in the Function's module
    np.testing.assert_allclose(g(x), 2 * 2 * (2 * np.sin(x)) * 3 * np.cos(x))


def xp_cos(z):
    return np.cos(z)


def test_strict_mode_facts_survive_the_disk(cache_dir, passes, m, rng):
    x, y = rng.random(3), rng.random(3)
    with pytest.raises(RuntimeError) as first:
        functional.vjp(m.floors, (x, y), strict=True)
    clear_cache()
    del passes[:]
    with pytest.raises(RuntimeError) as second:
        functional.vjp(m.floors, (x, y), strict=True)
    assert passes == []
    assert str(second.value) == str(first.value)
    assert "np.floor" in str(second.value)
    loaded = compile_function(m.floors, (0, 1))
    assert loaded.activity.independent == (0,)


def test_not_inlined_reasons_survive_the_disk(cache_dir, passes, make_module):
    mod = make_module('''
        import numpy as np
        import s2sgrad


        def remember(ctx, x):
            ctx.x = x


        class Opaque(s2sgrad.Function):
            @staticmethod
            def forward(ctx, x):
                remember(ctx, x)
                return np.tanh(x)

            @staticmethod
            def vjp(ctx, g):
                return g * (1 - np.tanh(ctx.x) ** 2)


        def f(x):
            return np.sum(Opaque.apply(x))
        ''')
    first = compile_function(mod.f, (0,))
    assert first.not_inlined
    clear_cache()
    second = compile_function(mod.f, (0,))
    assert second.not_inlined == first.not_inlined
    assert passes == ["f"]
    x = np.linspace(-1, 1, 4)
    np.testing.assert_allclose(s2sgrad.grad(mod.f)(x), 1 - np.tanh(x) ** 2)


def test_generated_text_is_the_same_from_disk_and_deterministic(cache_dir, m, monkeypatch):
    a = s2sgrad.source(m.loss, wrt=(0, 1))
    clear_cache()
    b = s2sgrad.source(m.loss, wrt=(0, 1))
    monkeypatch.setenv("S2SGRAD_CACHE", "0")
    clear_cache()
    c = s2sgrad.source(m.loss, wrt=(0, 1))
    assert a == b == c


# -- keys ----------------------------------------------------------------------------
def test_options_and_wrt_get_their_own_entries(cache_dir, m):
    compile_function(m.loss, (0,))
    compile_function(m.loss, (1,))
    compile_function(m.loss, (0,), False)
    # loss three times, and helper for each wrt and option loss calls it with
    assert len(entries(cache_dir)) == 6
    keys = {cache.function_key(m.loss, (0,), (True,)), cache.function_key(m.loss, (1,), (True,)),
            cache.function_key(m.loss, (0,), (False,))}
    assert len(keys) == 3


def test_key_is_stable_and_depends_on_the_version(cache_dir, m, monkeypatch):
    key = cache.function_key(m.plain, (0,), OPTIONS)
    assert key == cache.function_key(m.plain, (0,), OPTIONS)
    monkeypatch.setattr(s2sgrad.version, "__version__", "999.0")
    assert cache.function_key(m.plain, (0,), OPTIONS) != key


def test_key_depends_on_what_global_names_are_bound_to(cache_dir, make_module):
    mod = make_module('''
        import numpy as np

        act = np.sin

        def f(x):
            return np.sum(act(x))
        ''')
    x = np.linspace(0, 1, 3)
    key = cache.function_key(mod.f, (0,), OPTIONS)
    np.testing.assert_allclose(s2sgrad.grad(mod.f)(x), np.cos(x))
    mod.act = np.cos
    assert cache.function_key(mod.f, (0,), OPTIONS) != key
    clear_cache()
    np.testing.assert_allclose(s2sgrad.grad(mod.f)(x), -np.sin(x))


def test_entry_checks_the_attribute_chains_the_compiler_resolved(cache_dir, passes,
                                                                 make_module):
    mod = make_module('''
        import types
        import numpy as np

        cfg = types.SimpleNamespace(act=np.sin)

        def f(x):
            return np.sum(cfg.act(x))
        ''')
    x = np.linspace(0, 1, 3)
    np.testing.assert_allclose(s2sgrad.grad(mod.f)(x), np.cos(x))
    clear_cache()
    np.testing.assert_allclose(s2sgrad.grad(mod.f)(x), np.cos(x))
    assert passes == ["f"]
    mod.cfg.act = np.cos  # the same object, another attribute: the key cannot see it
    clear_cache()
    np.testing.assert_allclose(s2sgrad.grad(mod.f)(x), -np.sin(x))
    assert passes == ["f", "f"]


def test_key_depends_on_default_values(cache_dir, make_module):
    mod = make_module('''
        import numpy as np

        def make(k):
            def f(x, k=k):
                return np.sum(x * k)
            return f
        ''')
    two, three = mod.make(2.0), mod.make(3.0)
    assert cache.function_key(two, (0,), OPTIONS) != cache.function_key(three, (0,), OPTIONS)
    assert cache.function_key(two, (0,), OPTIONS) == \
        cache.function_key(mod.make(2.0), (0,), OPTIONS)


def test_a_default_value_bound_in_generated_code_is_found_among_the_defaults():
    from s2sgrad.compiler.entry import locate_binding as _locate_binding
    from s2sgrad.compiler.entry import resolve_binding as _resolve_binding
    weights, two = np.ones(3), np.float64(2.0)

    def f(x, w=weights, *, scale=two):
        return np.sum(x * w) * scale
    where = _locate_binding("_s2s_default", weights, f, [], [])
    assert where == ("default", 0)
    assert _resolve_binding(where, f, []) is weights
    where = _locate_binding("_s2s_default_2", f.__kwdefaults__["scale"], f, [], [])
    assert where == ("kwdefault", "scale")
    assert _resolve_binding(where, f, []) is f.__kwdefaults__["scale"]


def test_two_lambdas_on_one_line_have_different_keys(cache_dir):
    f, g = (lambda x: np.sum(x * 2.0)), (lambda x: np.sum(x * 3.0))  # noqa: E731
    assert cache.function_key(f, (0,), OPTIONS) != cache.function_key(g, (0,), OPTIONS)
    np.testing.assert_allclose(s2sgrad.grad(f)(np.ones(2)), [2.0, 2.0])
    clear_cache()
    np.testing.assert_allclose(s2sgrad.grad(g)(np.ones(2)), [3.0, 3.0])


def test_rules_registered_at_run_time_are_part_of_the_key(cache_dir, m):
    from s2sgrad.rules import REGISTRY, defvjp
    key = cache.function_key(m.plain, (0,), OPTIONS)
    before = cache.rules_fingerprint()  # "" unless another test registered rules

    def softsign(x):
        return x / (1 + np.abs(x))
    defvjp(softsign, "x", x="g / (1 + np.abs(x)) ** 2")
    try:
        assert cache.rules_fingerprint() not in ("", before)
        assert cache.function_key(m.plain, (0,), OPTIONS) != key
    finally:
        del REGISTRY.functions[id(softsign)]
    assert cache.rules_fingerprint() == before
    assert cache.function_key(m.plain, (0,), OPTIONS) == key


def test_the_built_in_rules_are_not_counted_as_changes():
    code = "import s2sgrad.cache as c; import s2sgrad; print(repr(c.rules_fingerprint()))"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "''"


def test_function_without_source_is_not_cached(cache_dir):
    namespace = {"np": np}
    exec("def f(x):\n    return np.sum(x * x)\n", namespace)
    assert cache.function_key(namespace["f"], (0,), OPTIONS) is None
    with pytest.raises(s2sgrad.TransformError):
        compile_function(namespace["f"], (0,))
    assert entries(cache_dir) == []


# -- robustness ----------------------------------------------------------------------
def _truncate(data):
    return data[:len(data) // 2]


def _flip(data):
    return data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:]


def _other_format(data):
    return data.replace(b"s2sgrad-cache\x00", b"s2sgrad-cache\x00"[:-1] + b"\x01", 1)


def _other_python(data):
    header = len(b"s2sgrad-cache\x00") + 2
    return data[:header] + b"\x00\x00\r\n" + data[header + 4:]


def _other_key(data):
    import hashlib
    import marshal
    start = len(cache._HEADER) + 32
    payload = marshal.loads(data[start:])
    payload["key"] = "0" * 64
    body = marshal.dumps(payload)
    return cache._HEADER + hashlib.sha256(body).digest() + body


def _other_format_number(data):
    import hashlib
    import marshal
    start = len(cache._HEADER) + 32
    payload = marshal.loads(data[start:])
    payload["format"] = cache.FORMAT + 1
    body = marshal.dumps(payload)
    return cache._HEADER + hashlib.sha256(body).digest() + body


@pytest.mark.parametrize("damage", [
    _truncate, _flip, _other_format, _other_python, _other_key, _other_format_number,
    lambda data: b"", lambda data: os.urandom(len(data)), lambda data: b"\x00" * 4096,
], ids=["truncated", "flipped-byte", "other-format", "other-python", "other-key",
        "format-field", "empty", "garbage", "zeros"])
def test_damaged_entry_is_ignored_and_regenerated(cache_dir, passes, m, rng, damage):
    compile_function(m.plain, (0,))
    path = only_entry(cache_dir)
    with open(path, "rb") as f:
        good = f.read()
    with open(path, "wb") as f:
        f.write(damage(good))
    clear_cache()
    check_vjp(m.plain, [rng.standard_normal(3)])
    assert passes == ["plain", "plain"]  # regenerated
    with open(path, "rb") as f:
        assert cache.decode(f.read(), os.path.basename(path)[:-len(cache.SUFFIX)])  # stored
    clear_cache()
    compile_function(m.plain, (0,))
    assert passes == ["plain", "plain"]


def test_damaged_payload_that_fails_to_rebuild_is_regenerated(cache_dir, passes, m, rng):
    import hashlib
    import marshal
    compile_function(m.plain, (0,))
    path = only_entry(cache_dir)
    with open(path, "rb") as f:
        data = f.read()
    payload = marshal.loads(data[len(cache._HEADER) + 32:])
    payload["closure_names"] = ["nonsense"]  # checksum valid, content wrong
    body = marshal.dumps(payload)
    with open(path, "wb") as f:
        f.write(cache._HEADER + hashlib.sha256(body).digest() + body)
    clear_cache()
    check_vjp(m.plain, [rng.standard_normal(3)])
    assert passes == ["plain", "plain"]


@pytest.mark.parametrize("umask", [0, 0o022, 0o277], ids=oct)
def test_directory_is_private_and_entries_are_private(cache_dir, m, umask):
    old = os.umask(umask)
    try:
        compile_function(m.plain, (0,))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(cache_dir).st_mode) == 0o700
    (name,) = entries(cache_dir)
    mode = stat.S_IMODE(os.stat(cache_dir / name).st_mode)
    assert mode & 0o077 == 0 and mode & 0o400
    assert stray_files(cache_dir) == []
    clear_cache()
    assert compile_function(m.plain, (0,)).source  # readable again


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602], ids=oct)
def test_entry_writable_by_others_is_ignored(cache_dir, passes, m, mode):
    compile_function(m.plain, (0,))
    path = only_entry(cache_dir)
    os.chmod(path, mode)
    clear_cache()
    compile_function(m.plain, (0,))
    assert passes == ["plain", "plain"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # replaced by a private one


def test_entry_owned_by_another_user_is_ignored(cache_dir, passes, m, monkeypatch):
    compile_function(m.plain, (0,))
    path = only_entry(cache_dir)
    clear_cache()
    if os.geteuid() == 0:
        os.chown(path, 4242, -1)  # a real file of another user
        compile_function(m.plain, (0,))
        assert os.stat(path).st_uid == 0  # replaced by our own
    else:
        real = os.geteuid()
        with monkeypatch.context() as patch:
            patch.setattr(os, "geteuid", lambda: real + 1)  # we are someone else
            compile_function(m.plain, (0,))
    assert passes == ["plain", "plain"]


def test_symlinked_entry_is_not_followed(cache_dir, passes, m, tmp_path):
    compile_function(m.plain, (0,))
    path = only_entry(cache_dir)
    elsewhere = tmp_path / "elsewhere.s2s"
    os.replace(path, elsewhere)
    os.symlink(elsewhere, path)
    clear_cache()
    compile_function(m.plain, (0,))
    assert passes == ["plain", "plain"]
    assert not os.path.islink(path)


def test_disabled_with_s2sgrad_cache_0(cache_dir, passes, m, monkeypatch, rng):
    monkeypatch.setenv("S2SGRAD_CACHE", "0")
    check_vjp(m.plain, [rng.standard_normal(3)])
    clear_cache()
    check_vjp(m.plain, [rng.standard_normal(3)])
    assert passes == ["plain", "plain"]
    assert not os.path.exists(cache_dir)
    assert cache.current() is None


def test_unwritable_directory_falls_back_to_memory_with_one_warning(tmp_path, monkeypatch, m,
                                                                   passes, rng):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delenv("S2SGRAD_CACHE", raising=False)
    clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_vjp(m.plain, [rng.standard_normal(3)])
        check_vjp(m.loss, [rng.standard_normal(3), rng.standard_normal(3)])
        clear_cache()
        check_vjp(m.plain, [rng.standard_normal(3)])
    ours = [w for w in caught if issubclass(w.category, cache.CacheWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert str(blocker / "cache") in str(ours[0].message)
    assert "memory" in str(ours[0].message)
    assert passes.count("plain") == 2
    clear_cache()


def test_write_errors_fall_back_to_memory_with_one_warning(cache_dir, monkeypatch, m, passes):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(cache, "_temporary_file", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compile_function(m.plain, (0,))
        compile_function(m.loss, (0,))
        compile_function(m.floors, (0, 1))
    ours = [w for w in caught if issubclass(w.category, cache.CacheWarning)]
    assert len(ours) == 1
    assert "Permission denied" in str(ours[0].message)
    assert entries(cache_dir) == []
    assert compile_function(m.plain, (0,)) is compile_function(m.plain, (0,))


def test_a_failed_write_leaves_no_partial_file(cache_dir, monkeypatch, m):
    compile_function(m.plain, (0,))  # creates the directory

    def crash(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cache.os, "replace", crash)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        compile_function(m.floors, (0, 1))
    assert len(entries(cache_dir)) == 1
    assert stray_files(cache_dir) == []


def test_info_and_clear(cache_dir, m):
    assert cache.info()["entries"] == 0 and not cache.info()["exists"]
    compile_function(m.plain, (0,))
    compile_function(m.loss, (0, 1))
    facts = cache.info()
    assert facts["directory"] == str(cache_dir) and facts["entries"] == 3  # with helper
    assert facts["bytes"] == sum(os.path.getsize(cache_dir / e) for e in entries(cache_dir))
    (cache_dir / "notes.txt").write_text("not ours")
    (cache_dir / (cache.TMP_PREFIX + "leftover.part")).write_bytes(b"x")
    removed = cache.clear()
    assert removed["entries"] == 3 and removed["temporary"] == 1 and removed["left"] == []
    assert entries(cache_dir) == [] and os.listdir(cache_dir) == ["notes.txt"]


# -- other processes -------------------------------------------------------------------
CHILD = '''
import json, os, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import s2sgrad
import s2sgrad.compiler as compiler
ran = []
original = compiler.driver.run_passes
def counting(parsed, *args, **kwargs):
    ran.append(parsed.name)
    return original(parsed, *args, **kwargs)
compiler.driver.run_passes = counting
if os.environ.get("WAIT_FOR"):
    import time
    open(os.environ["WAIT_FOR"] + "." + str(os.getpid()), "w").close()
    _give_up = time.time() + 600   # a parent that died never says go: do not poll forever
    while not os.path.exists(os.environ["WAIT_FOR"]):
        if time.time() > _give_up:
            sys.exit("no go after 600 s")
        time.sleep(0.001)
import {module} as m
x = np.linspace(-1.0, 1.0, 4)
w = np.linspace(0.5, 2.0, 4)
value, grads = s2sgrad.value_and_grad(m.loss, wrt=(0, 1))(x, w)
print(json.dumps({{"value": float(value), "gx": grads[0].tolist(), "gw": grads[1].tolist(),
                  "ran": sorted(ran)}}))
'''


def run_child(directory, cache_path, module="main_mod", extra_env=None, wait=True,
              timeout=120, stderr=False):
    script = os.path.join(directory, f"child_{module}.py")
    text = CHILD.format(module=module)
    if not os.path.exists(script) or open(script).read() != text:
        # Written whole or not at all: a child started a moment ago may be reading it
        # (rewriting it in place once let one read an empty file and exit 0 at once).
        with open(script + ".tmp", "w") as f:
            f.write(text)
        os.replace(script + ".tmp", script)
    env = dict(os.environ, S2SGRAD_CACHE_DIR=str(cache_path), PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("S2SGRAD_CACHE", None)
    env.update(extra_env or {})
    proc = subprocess.Popen([sys.executable, script, str(directory)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    if not wait:
        return proc
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    return (result, err) if stderr else result


def write(path, text):
    path.write_text(textwrap.dedent(text))
    os.utime(path, ns=(time.time_ns(), time.time_ns()))


OPS = '\nimport numpy as np\nimport s2sgrad\n\n\n' + CUBE

HELPERS = textwrap.dedent('''
    import numpy as np


    def helper(a, b):
        return np.sin(a) * b
    ''')

MAIN = textwrap.dedent('''
    import numpy as np
    from helpers_mod import helper
    from ops_mod import Cube


    def loss(x, w):
        y = Cube.apply(x)
        return np.sum(helper(y, w))
    ''')


def expected(x, w, cube=3.0, inner=np.sin, dinner=np.cos, scale=1.0):
    y = x ** 3
    value = scale * np.sum(inner(y) * w)
    gx = scale * dinner(y) * w * cube * x ** 2
    return value, gx, scale * inner(y)


@pytest.fixture
def project(tmp_path):
    src = tmp_path / "project"
    src.mkdir()
    write(src / "ops_mod.py", OPS)
    write(src / "helpers_mod.py", HELPERS)
    write(src / "main_mod.py", MAIN)
    return src, tmp_path / "cache"


def check(result, cube=3.0, inner=np.sin, dinner=np.cos, scale=1.0):
    x, w = np.linspace(-1.0, 1.0, 4), np.linspace(0.5, 2.0, 4)
    value, gx, gw = expected(x, w, cube, inner, dinner, scale)
    assert result["value"] == pytest.approx(value)
    np.testing.assert_allclose(result["gx"], gx, rtol=1e-12)
    np.testing.assert_allclose(result["gw"], gw, rtol=1e-12)


def test_a_second_process_reads_the_entries(project):
    src, cache_path = project
    first = run_child(src, cache_path)
    check(first)
    assert first["ran"] == ["helper", "loss"]
    second = run_child(src, cache_path)
    check(second)
    assert second["ran"] == []  # nothing transformed


def test_editing_the_function_invalidates_its_entry(project):
    src, cache_path = project
    run_child(src, cache_path)
    write(src / "main_mod.py", MAIN.replace("return np.sum(helper(y, w))",
                                            "return 2.0 * np.sum(helper(y, w))"))
    result = run_child(src, cache_path)
    check(result, scale=2.0)
    assert result["ran"] == ["loss"]  # the callee's entry still holds


def test_editing_a_comment_in_the_function_invalidates_its_entry(project):
    src, cache_path = project
    run_child(src, cache_path)
    write(src / "main_mod.py", MAIN.replace("y = Cube.apply(x)", "y = Cube.apply(x)  # cube"))
    result = run_child(src, cache_path)
    check(result)
    assert result["ran"] == ["loss"]


def test_moving_the_function_down_invalidates_its_entry(project):
    src, cache_path = project
    run_child(src, cache_path)
    write(src / "main_mod.py", MAIN.replace("\n\n\ndef loss", "\n\n\n\ndef loss"))
    result = run_child(src, cache_path)
    assert result["ran"] == ["loss"]  # line numbers in the generated comments changed


def test_editing_an_inlined_functions_vjp_invalidates(project):
    src, cache_path = project
    run_child(src, cache_path)
    write(src / "ops_mod.py", OPS.replace("return 3 * x ** 2 * g", "return 4 * x ** 2 * g"))
    result = run_child(src, cache_path)
    check(result, cube=4.0)  # the (wrong) new vjp is what runs: it was inlined again
    assert result["ran"] == ["loss"]


def test_editing_an_inlined_functions_forward_invalidates(project):
    src, cache_path = project
    run_child(src, cache_path)
    write(src / "ops_mod.py", OPS.replace("        ctx.save_for_backward(x)\n        return",
                                          "        ctx.save_for_backward(x)\n\n        return"))
    result = run_child(src, cache_path)
    check(result)
    assert result["ran"] == ["loss"]


def test_editing_a_callee_invalidates(project):
    src, cache_path = project
    run_child(src, cache_path)
    write(src / "helpers_mod.py", HELPERS.replace("np.sin(a)", "np.cos(a)"))
    result = run_child(src, cache_path)
    check(result, inner=np.cos, dinner=lambda y: -np.sin(y))
    assert result["ran"] == ["helper", "loss"]


def test_concurrent_processes_get_correct_results_and_leave_one_valid_entry(project):
    src, cache_path = project
    go = src / "go"
    procs = [run_child(src, cache_path, extra_env={"WAIT_FOR": str(go)}, wait=False)
             for _ in range(4)]
    # Four interpreters importing NumPy and s2sgrad at once on a busy two-core machine
    # (the children write no bytecode caches) once missed a 60 s deadline: it only
    # keeps a stuck child from hanging the suite, and a child that died says why.
    deadline = time.time() + 300
    while len([p for p in os.listdir(src) if p.startswith("go.")]) < len(procs):
        for p in procs:   # a child that died before it got ready: say why, at once
            if p.poll() is not None:
                out, err = p.communicate()
                raise AssertionError(f"a child exited ({p.returncode}) before it was "
                                     f"ready:\n{err}")
        assert time.time() < deadline, "children did not start"
        time.sleep(0.01)
    go.write_text("")  # all start compiling at once
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in results:
        check(r)
    assert len(entries(cache_path)) == 2  # loss and helper, once each
    assert stray_files(cache_path) == []
    after = run_child(src, cache_path)
    check(after)
    assert after["ran"] == []


def test_the_60_line_benchmark_function_round_trips(cache_dir, passes):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import cache_workload
    finally:
        sys.path.remove(os.path.join(ROOT, "benchmarks"))
    args = list(cache_workload.make_inputs())
    first = compile_function(cache_workload.rnn_loss, (0, 1, 2, 3))
    clear_cache()
    second = compile_function(cache_workload.rnn_loss, (0, 1, 2, 3))
    assert passes == ["rnn_loss"] and second.source == first.source
    check_vjp(cache_workload.rnn_loss, args, wrt=(0, 1, 2, 3))
    args[-1] = 0.0  # the other branch of `if smooth > 0.5`
    check_vjp(cache_workload.rnn_loss, args, wrt=(0, 1, 2, 3))
