"""The disk cache in hostile or crowded directories, and its bounds.

- An entry is code that will run: it is opened without following links and
  without blocking, and used only if it is a regular file of ours that nobody
  else may write. A FIFO at an entry path used to hang the process for good;
  a directory there used to turn caching off for the whole process.
- A cache directory that others can write (or that is another user's) is not
  used at all: one warning, memory only.
- Bounds: the memory cache is an LRU of S2SGRAD_MEMORY_CACHE_SIZE pairs; the
  disk cache holds at most S2SGRAD_CACHE_MAX_MB, least recently used out.
The cross-process failures run in subprocesses.
"""
import gc
import os
import stat
import subprocess
import sys
import time
import warnings
import weakref

import numpy as np
import pytest
import test_cache
from conftest import check_vjp
from test_cache import ROOT, check, entries, run_child

import s2sgrad
from s2sgrad import cache, compiler
from s2sgrad.compiler import clear_cache, compile_function

# test_cache's fixtures: a cache directory, a pass counter, its module, a project of
# three modules for the subprocesses
cache_dir, passes, m, project = (test_cache.cache_dir, test_cache.passes, test_cache.m,
                                 test_cache.project)
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
OTHER_UID = 4242   # a user id nobody has here: root can give it files


def entry_named(cache_path, name):
    """The entry of the function called `name` (found by decoding each entry)."""
    for e in entries(cache_path):
        with open(os.path.join(cache_path, e), "rb") as f:
            payload = cache.decode(f.read(), e[:-len(cache.SUFFIX)])
        if payload is not None and payload["name"] == name:
            return os.path.join(cache_path, e)
    raise AssertionError(f"no entry for {name}")


def cache_warnings(stderr):
    return [line for line in stderr.splitlines() if "CacheWarning" in line]


# -- what sits at an entry path ----------------------------------------------------------
def test_a_fifo_at_an_entry_path_neither_hangs_nor_is_read(project):
    src, cache_path = project
    run_child(src, cache_path)
    for e in entries(cache_path):
        path = os.path.join(cache_path, e)
        os.unlink(path)
        os.mkfifo(path, 0o600)   # an ordinary open() of it would wait for a writer forever
    result, err = run_child(src, cache_path, timeout=60, stderr=True)
    check(result)
    assert result["ran"] == ["helper", "loss"] and cache_warnings(err) == []
    assert all(stat.S_ISREG(os.lstat(os.path.join(cache_path, e)).st_mode)
               for e in entries(cache_path))  # replaced by real entries
    assert run_child(src, cache_path)["ran"] == []


def test_paths_that_are_not_entries_are_reported_and_cleared(cache_dir, m, tmp_path):
    compile_function(m.plain, (0,))
    fifo = cache_dir / ("f" * 64 + cache.SUFFIX)
    link = cache_dir / ("1" * 64 + cache.SUFFIX)
    empty = cache_dir / ("2" * 64 + cache.SUFFIX)
    full = cache_dir / ("3" * 64 + cache.SUFFIX)
    target = tmp_path / "target"
    target.write_bytes(b"keep me")
    os.mkfifo(fifo)
    os.symlink(target, link)
    empty.mkdir()
    full.mkdir()
    (full / "inside").write_text("someone's")
    facts = cache.info()
    assert facts["entries"] == 1
    assert dict(facts["ignored"]) == {str(fifo): "a FIFO", str(link): "a symbolic link",
                                      str(empty): "a directory", str(full): "a directory"}
    removed = cache.clear()
    assert removed["entries"] == 1 and removed["other"] == 3
    assert [p for p, _ in removed["left"]] == [str(full)]
    assert not fifo.exists() and not os.path.lexists(link) and not empty.exists()
    assert target.read_bytes() == b"keep me"   # the link was unlinked, not followed
    assert (full / "inside").exists()          # never removed recursively


def test_a_directory_at_an_entry_path_turns_off_only_that_entry(project):
    src, cache_path = project
    run_child(src, cache_path)
    loss = entry_named(cache_path, "loss")
    os.unlink(loss)
    os.mkdir(loss)
    (os.path.join(loss, "x") and open(os.path.join(loss, "x"), "w").close())
    for _ in range(2):   # in every new process
        result, err = run_child(src, cache_path, stderr=True)
        check(result)
        assert result["ran"] == ["loss"]   # helper still comes from disk: the store works
        assert cache_warnings(err) == []
    os.unlink(os.path.join(loss, "x"))   # an empty directory of ours is removed, then stored
    assert run_child(src, cache_path)["ran"] == ["loss"]
    assert stat.S_ISREG(os.lstat(loss).st_mode)
    assert run_child(src, cache_path)["ran"] == []


def test_a_directory_at_an_entry_path_in_process(cache_dir, m, passes):
    compile_function(m.plain, (0,))
    path = entries(cache_dir)[0]
    os.unlink(cache_dir / path)
    (cache_dir / path).mkdir()
    (cache_dir / path / "x").write_text("")
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        compile_function(m.plain, (0,))
        compile_function(m.floors, (0, 1))   # another entry is still written
    assert cache.current().writable
    assert len(entries(cache_dir)) == 2   # floors' entry and the directory


# -- directories others can write --------------------------------------------------------
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702], ids=oct)
def test_a_directory_others_can_write_is_not_used(project, mode):
    src, cache_path = project
    run_child(src, cache_path)
    before = {e: os.stat(os.path.join(cache_path, e)).st_mtime_ns for e in entries(cache_path)}
    os.chmod(cache_path, mode)
    try:
        result, err = run_child(src, cache_path, stderr=True)
        check(result)
        assert result["ran"] == ["helper", "loss"]   # nothing loaded
        (warning,) = cache_warnings(err)
        assert str(cache_path) in warning and "writable by" in warning
        assert f"chmod 700 {cache_path}" in warning and "S2SGRAD_CACHE_DIR" in warning
        assert {e: os.stat(os.path.join(cache_path, e)).st_mtime_ns
                for e in entries(cache_path)} == before   # nothing written either
        facts = cache.info(str(cache_path))
        assert "writable by" in facts["problem"] and "chmod 700" in facts["fix"]
    finally:
        os.chmod(cache_path, 0o700)
    assert run_child(src, cache_path)["ran"] == []


def test_the_warning_is_given_once_and_the_process_keeps_working(tmp_path, monkeypatch, m,
                                                                  passes, rng):
    path = tmp_path / "shared"
    path.mkdir()
    os.chmod(path, 0o777)
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(path))
    clear_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_vjp(m.plain, [rng.standard_normal(3)])
        check_vjp(m.loss, [rng.standard_normal(3), rng.standard_normal(3)])
    ours = [w for w in caught if issubclass(w.category, cache.CacheWarning)]
    assert len(ours) == 1 and "chmod 700" in str(ours[0].message)
    assert os.listdir(path) == []   # memory only
    assert cache.current().subdirectory(cache.NUMBA_SUBDIR) is None   # nor jit=True's modules
    clear_cache()


@pytest.mark.skipif(not AS_ROOT, reason="giving a file to another user needs root "
                                        "(the CI runs the tests as root)")
def test_a_directory_of_another_user_is_not_used(project):
    src, cache_path = project
    run_child(src, cache_path)
    os.chown(cache_path, OTHER_UID, -1)
    try:
        result, err = run_child(src, cache_path, stderr=True)
        check(result)
        assert result["ran"] == ["helper", "loss"]
        (warning,) = cache_warnings(err)
        assert f"uid {OTHER_UID}" in warning and "S2SGRAD_CACHE_DIR" in warning
    finally:
        os.chown(cache_path, os.geteuid(), -1)


@pytest.fixture
def shared_parent():
    """A directory other users can pass through (pytest's own are private)."""
    import shutil
    import tempfile
    path = tempfile.mkdtemp(prefix="s2sgrad-shared-")
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(not AS_ROOT, reason="running a process as another user needs root")
def test_another_user_planting_fifos_in_a_shared_directory(project, shared_parent):
    """The attack of the issue: another user who can write the directory
    replaces the entries with FIFOs. The directory is refused (it is
    world-writable), so nothing in it is even opened."""
    src, _ = project
    cache_path = os.path.join(shared_parent, "cache")
    run_child(src, cache_path)
    os.chmod(cache_path, 0o777)
    plant = f'for f in {cache_path}/*{cache.SUFFIX}; do rm "$f" && mkfifo -m 666 "$f"; done'
    try:
        subprocess.run(["/bin/sh", "-c", plant], check=True, user=OTHER_UID, group=OTHER_UID,
                       timeout=60)
        assert len(entries(cache_path)) == 2
        assert all(os.stat(os.path.join(cache_path, e)).st_uid == OTHER_UID
                   for e in entries(cache_path))
        result, err = run_child(src, cache_path, timeout=60, stderr=True)
        check(result)
        assert result["ran"] == ["helper", "loss"] and len(cache_warnings(err)) == 1
        facts = cache.info(cache_path)
        assert facts["problem"] and len(facts["ignored"]) == 2
        assert all(why == "a FIFO" for _, why in facts["ignored"])
    finally:
        os.chmod(cache_path, 0o700)
    removed = cache.clear(cache_path)
    assert removed["other"] == 2 and entries(cache_path) == []


@pytest.mark.parametrize("umask", [0, 0o022], ids=oct)
def test_missing_parents_are_created_private(tmp_path, monkeypatch, m, umask):
    top = tmp_path / "a"
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(top / "b" / "cache"))
    clear_cache()
    old = os.umask(umask)
    try:
        compile_function(m.plain, (0,))
    finally:
        os.umask(old)
    for p in (top, top / "b", top / "b" / "cache"):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o700, p
    assert len(entries(top / "b" / "cache")) == 1
    clear_cache()


# -- bounds: memory ------------------------------------------------------------------------
def _closures(make_module, n):
    mod = make_module('''
        import numpy as np

        def make(c):
            def f(x):
                return np.sum(np.sin(x) * c)
            return f
        ''')
    return mod, [mod.make(float(i)) for i in range(n)]


def test_the_memory_cache_keeps_the_most_recently_used_pairs(make_module, monkeypatch):
    monkeypatch.setenv("S2SGRAD_CACHE", "0")
    monkeypatch.setenv("S2SGRAD_MEMORY_CACHE_SIZE", "50")
    clear_cache()
    _, fns = _closures(make_module, 200)
    x = np.linspace(0, 1, 3)
    alive = []
    hot = compile_function(fns[0], (0,))
    for i, f in enumerate(fns):
        np.testing.assert_allclose(s2sgrad.grad(f)(x), i * np.cos(x))
        alive.append(weakref.ref(f))
        assert compile_function(fns[0], (0,)) is hot   # used all along: never dropped
    assert len(compiler.memory.PAIRS) == 50
    hot = compile_function(fns[-1], (0,))
    assert compile_function(fns[-1], (0,)) is hot   # still in memory
    del fns, f, hot
    gc.collect()
    # the thrown-away closures are freed, except those the 50 kept pairs hold
    assert sum(r() is not None for r in alive) == 50
    clear_cache()


def test_a_memory_cache_of_one_pair_still_compiles_callees_and_recursion(m, monkeypatch,
                                                                         rng):
    monkeypatch.setenv("S2SGRAD_CACHE", "0")
    monkeypatch.setenv("S2SGRAD_MEMORY_CACHE_SIZE", "1")
    clear_cache()
    check_vjp(m.loss, [rng.standard_normal(3), rng.standard_normal(3)])
    check_vjp(m.countdown, [rng.standard_normal(3), 3], wrt=(0,))
    assert len(compiler.memory.PAIRS) == 1
    g = s2sgrad.grad(m.loss, wrt=(0, 1))
    first = g(np.ones(3), np.ones(3))
    np.testing.assert_allclose(g(np.ones(3), np.ones(3)), first)
    clear_cache()


def test_no_memory_limit_with_zero(make_module, monkeypatch):
    monkeypatch.setenv("S2SGRAD_CACHE", "0")
    monkeypatch.setenv("S2SGRAD_MEMORY_CACHE_SIZE", "0")
    clear_cache()
    _, fns = _closures(make_module, 30)
    for f in fns:
        compile_function(f, (0,))
    assert len(compiler.memory.PAIRS) == 30
    clear_cache()


# -- bounds: disk ----------------------------------------------------------------------------
def _payload(key, size=10_000):
    return {"format": cache.FORMAT, "key": key, "blob": os.urandom(size)}


def _keys(n):
    return [f"{i:064x}" for i in range(n)]


@pytest.fixture
def small_cap(tmp_path, monkeypatch):
    """A store whose cap holds five 10 kB entries."""
    monkeypatch.setenv("S2SGRAD_CACHE_MAX_MB", str(52_000 / 2 ** 20))
    return cache.DiskCache(str(tmp_path / "capped"))


def _age(store, keys, start):
    """Give the entries distinct last-use times, oldest first."""
    for i, key in enumerate(keys):
        os.utime(store.entry_path(key), (start + i, start + i))


def test_the_disk_cache_stays_under_its_cap_least_recently_used_first(small_cap):
    store, keys = small_cap, _keys(12)
    cap = cache.max_bytes()
    for key in keys[:5]:
        assert store.write(key, _payload(key))
    assert len(entries(store.path)) == 5
    _age(store, keys[:5], time.time() - 1000)
    assert store.read(keys[0]) is not None   # a hit: keys[0] is now the most recent
    for key in keys[5:]:
        assert store.write(key, _payload(key))
        assert cache.scan(store.path).bytes <= cap
        _age(store, [key], time.time() - 500 + int(key, 16))
    left = {e[:-len(cache.SUFFIX)] for e in entries(store.path)}
    assert keys[0] in left and not left & set(keys[1:5])
    assert keys[-1] in left and store.read(keys[-1]) is not None


def test_eviction_tolerates_files_vanishing_and_removes_stale_temporary_files(small_cap,
                                                                            monkeypatch):
    store, keys = small_cap, _keys(6)
    for key in keys[:5]:
        store.write(key, _payload(key))
    stale = os.path.join(store.path, cache.TMP_PREFIX + "dead" + cache.TMP_SUFFIX)
    fresh = os.path.join(store.path, cache.TMP_PREFIX + "busy" + cache.TMP_SUFFIX)
    for path in (stale, fresh):
        with open(path, "wb") as f:
            f.write(b"half an entry")
    old = time.time() - cache.STALE_SECONDS - 60
    os.utime(stale, (old, old))
    facts = cache.info(store.path)
    assert facts["stale"] == [stale] and facts["writing"] == 1
    real_scan = cache.scan

    def racing_scan(path, now=None):
        found = real_scan(path, now)
        for entry, _, _ in found.entries[:2]:
            os.unlink(entry)   # another process evicted these meanwhile
        return found
    monkeypatch.setattr(cache, "scan", racing_scan)
    assert cache.evict(store.path, 0) == 0
    monkeypatch.setattr(cache, "scan", real_scan)
    assert entries(store.path) == [] and not os.path.exists(stale) and os.path.exists(fresh)
    removed = cache.clear(store.path)
    assert removed["temporary"] == 1 and not os.path.exists(fresh)


def test_no_cap_with_zero(tmp_path, monkeypatch):
    monkeypatch.setenv("S2SGRAD_CACHE_MAX_MB", "0")
    assert cache.max_bytes() is None
    store = cache.DiskCache(str(tmp_path / "nocap"))
    for key in _keys(20):
        store.write(key, _payload(key))
    assert len(entries(store.path)) == 20
    monkeypatch.delenv("S2SGRAD_CACHE_MAX_MB")
    assert cache.max_bytes() == cache.DEFAULT_MAX_MB * 2 ** 20


WRITER = '''
import os, sys
sys.path.insert(0, {root!r})
from s2sgrad import cache
store = cache.DiskCache({path!r})
for i in range(300):
    key = "%02d%062x" % ({who}, i)
    assert store.write(key, {{"format": cache.FORMAT, "key": key, "blob": os.urandom(4000)}})
    if i % 7 == 0:
        other = "%02d%062x" % (({who} + 1) % 3, i // 2)
        payload = store.read(other)   # may be gone: evicted by someone else
        assert payload is None or payload["key"] == other
'''


def test_processes_evicting_at_once_all_work_and_the_cap_holds_again(tmp_path):
    path = str(tmp_path / "shared-cap")
    env = dict(os.environ, S2SGRAD_CACHE_MAX_MB=str(200_000 / 2 ** 20))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER.format(root=ROOT, path=path,
                                                                    who=who)],
                              env=env, stderr=subprocess.PIPE, text=True)
             for who in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    # each process counted the directory when it started and adds its own writes in
    # between, so together they may overshoot; the next process to write counts anew
    later = subprocess.run([sys.executable, "-c", WRITER.format(root=ROOT, path=path, who=9)
                            .replace("range(300)", "range(1)")], env=env, timeout=120)
    assert later.returncode == 0
    assert cache.scan(path).bytes <= 200_000
    for e in entries(path):
        with open(os.path.join(path, e), "rb") as f:
            assert cache.decode(f.read(), e[:-len(cache.SUFFIX)]) is not None
