"""The disk cache of generated code (SPEC 1.6).

A program should not pay the transform again every time it starts. Each
compiled forward/adjoint pair is stored in one file under `$S2SGRAD_CACHE_DIR`
(default `~/.cache/s2sgrad`), named by a hash of:

- s2sgrad itself: its version and the size and modification time of every one
  of its source files (the same test Python applies to its own .pyc files), the
  gradient rules registered at run time, and the versions of Python, NumPy and
  astor;
- the function: its source lines, file name and line, qualified name, bytecode,
  default values, and what each global or closure name it reads is bound to (a
  module, a class, a function, the value of a constant);
- the options: `wrt` and whether the code is optimised.

The entry then lists what the generated code depends on beyond the function
itself -- the `s2sgrad.Function` classes whose `forward` and `vjp` it inlines
and the user functions it calls -- each with the fingerprint of its sources;
an entry whose dependencies changed is regenerated, and so is one in which a
dotted name the compiler resolved (`np.sin`, `cfg.act`) now resolves to
something else. The entry holds the generated source, its compiled code
object, what is needed to bind its closure again and every binding the code
was generated for (see `compiler.entry`), so loading it runs no pass and the
loaded pair is checked on every call like a fresh one (`compiler.bindings`).

Trust (see DiskCache): an entry is code that runs, so the directory must be
the user's and writable by nobody else, else it is not used (one warning,
memory only); entries are opened with O_NOFOLLOW | O_NONBLOCK and used only if
fstat shows a regular file of the user's that nobody else may write. The
SHA-256 detects corruption, not tampering.

Robustness: entries are written to a temporary file and renamed over the old
one (atomic; concurrent writers leave one valid entry); the directory and any
missing parent are created 0700 whatever the umask; an entry that does not
verify is ignored and regenerated; a directory at one entry path keeps only
that entry out; a directory that cannot be written falls back to memory with
one warning. `S2SGRAD_CACHE=0` disables the disk cache.

Bounds: at most $S2SGRAD_CACHE_MAX_MB (default 256) of entries; a hit touches
an entry, and a write that goes beyond the cap removes the least recently
used down to 90% of it (`evict`, safe with other processes doing the same).
`info` and `clear` also see temporary files (stale ones are left by killed
writers) and whatever else sits at an entry path.
"""
from __future__ import annotations

import builtins
import functools
import hashlib
import importlib.util
import inspect
import linecache
import marshal
import operator
import os
import shutil
import stat
import sys
import tempfile
import time
import types
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .introspect import function_methods, last_source_line, unwrap
from .rules import REGISTRY as _REGISTRY

FORMAT = 4
SUFFIX = ".s2s"
TMP_PREFIX = ".tmp-s2s-"
TMP_SUFFIX = ".part"
_HEADER = b"s2sgrad-cache\x00" + FORMAT.to_bytes(2, "little") + importlib.util.MAGIC_NUMBER
_DIGEST = 32
# Never follow a link, never wait (a FIFO planted at an entry path would block an
# ordinary open for good): what is opened is then checked with fstat.
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0))
_MISSING = object()

DEFAULT_MAX_MB = 256
# A temporary file older than this is left over from a process that died while
# writing (a write takes milliseconds): `cache info` reports it, `cache clear`
# and eviction remove it.
STALE_SECONDS = 600
# Eviction counts the directory again at most this often (other processes write
# and evict too); in between, a process adds up what it wrote itself.
RESCAN_SECONDS = 30.0
# Eviction goes down to this fraction of the cap, so it runs once per many writes.
LOW_WATER = 0.9


class CacheWarning(UserWarning):
    """The disk cache cannot be used (unwritable, or a directory others can
    write); compiled code is kept in memory only."""


# -- configuration -------------------------------------------------------------------
def enabled() -> bool:
    """False when S2SGRAD_CACHE is 0 (or false/no/off)."""
    value = os.environ.get("S2SGRAD_CACHE", "1").strip().lower()
    return value not in ("0", "false", "no", "off")


def directory() -> str:
    """$S2SGRAD_CACHE_DIR, else ~/.cache/s2sgrad."""
    path = os.environ.get("S2SGRAD_CACHE_DIR")
    if not path:
        path = os.path.join(os.path.expanduser("~"), ".cache", "s2sgrad")
    return os.path.abspath(os.path.expanduser(path))


def max_bytes() -> Optional[int]:
    """The size cap of the entries, from S2SGRAD_CACHE_MAX_MB (megabytes, default
    256; 0 or a negative number: no cap). None means no cap."""
    text = os.environ.get("S2SGRAD_CACHE_MAX_MB", "").strip()
    try:
        mb = float(text) if text else DEFAULT_MAX_MB
    except ValueError:
        mb = DEFAULT_MAX_MB
    return int(mb * 1024 * 1024) if mb > 0 else None


_STORES: Dict[str, "DiskCache"] = {}


def current() -> Optional["DiskCache"]:
    """The cache for the configured directory, or None when disabled."""
    if not enabled():
        return None
    path = directory()
    store = _STORES.get(path)
    if store is None:
        store = _STORES[path] = DiskCache(path)
    return store


def _euid() -> Optional[int]:
    return os.geteuid() if hasattr(os, "geteuid") else None


def directory_problem(st: os.stat_result) -> str:
    """Why a directory with this stat may not hold trusted code, or ""."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    euid = _euid()
    if euid is not None and st.st_uid != euid:
        return f"belongs to another user (uid {st.st_uid}; you are uid {euid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "group and others" if st.st_mode & stat.S_IWGRP and st.st_mode & stat.S_IWOTH \
            else "its group" if st.st_mode & stat.S_IWGRP else "others"
        return f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def _fix_for(path: str, problem: str) -> str:
    if problem.startswith("is writable"):
        return (f"Run `chmod 700 {path}`, or set S2SGRAD_CACHE_DIR to a directory only you "
                f"can write.")
    return "Set S2SGRAD_CACHE_DIR to a directory of your own that only you can write."


def make_private_dirs(path: str) -> None:
    """Create `path` and any missing parent with mode 0700, whatever the umask
    (os.makedirs gives parents the umask's mode, 0777 under umask 000)."""
    missing = []
    p = path
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:
            if not os.path.isdir(p):
                raise
        else:
            os.chmod(p, 0o700)  # the umask may have taken bits away


# -- the store ---------------------------------------------------------------------
class DiskCache:
    """One cache directory: verified reads, atomic writes, a size cap.

    Trust: an entry is code that will run, so it is read only from a directory
    that only the current user can write (checked once per process; otherwise
    one CacheWarning, memory only) and only if it is a regular file owned by
    the user and writable by nobody else. The SHA-256 in each entry detects
    corruption (a torn or damaged file), not tampering: someone who can write
    the directory could write a valid entry, which is why such directories
    are refused.
    """

    def __init__(self, path: str):
        self.path = path
        self.writable = True
        self._problem: Optional[str] = None   # None: not checked yet; "": usable
        self._warned = False
        self._bytes: Optional[int] = None     # entry bytes, as last counted + our writes
        self._counted_at = 0.0

    def entry_path(self, key: str) -> str:
        return os.path.join(self.path, key + SUFFIX)

    # -- the directory ----------------------------------------------------------------
    def usable(self, create: bool = False) -> bool:
        """Whether the directory exists (is made, with `create`) and may be used.

        A directory that is not ours alone is refused for good (one warning); a
        missing one is not remembered (it may be made later). With `create`,
        OSError means it could not be made.
        """
        if self._problem is not None:
            return self._problem == ""
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            if not create:
                return False
            make_private_dirs(self.path)
            st = os.stat(self.path)
        problem = directory_problem(st)
        self._problem = problem
        if problem:
            self.writable = False
            self._warn(f"s2sgrad: not using the cache directory {self.path}: it {problem}, "
                       f"so entries in it could have been written by someone else, and an "
                       f"entry is code that runs. Generated code is kept in memory only. "
                       f"{_fix_for(self.path, problem)}")
        return not problem

    def subdirectory(self, name: str) -> Optional[str]:
        """A private subdirectory (made 0700 if missing), or None when the cache
        directory cannot be used or the subdirectory is not ours alone (a link,
        another user's, writable by others)."""
        try:
            if not self.usable(create=True):
                return None
            sub = os.path.join(self.path, name)
            try:
                os.mkdir(sub, 0o700)
            except FileExistsError:
                pass
            else:
                os.chmod(sub, 0o700)
            st = os.lstat(sub)
        except OSError:
            return None
        return sub if not directory_problem(st) else None

    # -- reading ----------------------------------------------------------------------
    def read(self, key: str) -> Optional[dict]:
        """The payload stored under `key`, or None if absent or not trustworthy.

        Opened without following a link and without blocking; anything but a
        regular file of ours that nobody else may write is ignored. A hit
        touches the entry (its mtime is the last use, for eviction).
        """
        if not self.usable():
            return None
        try:
            fd = os.open(self.entry_path(key), _READ_FLAGS)
        except OSError:
            return None
        try:
            if not trusted(os.fstat(fd)):
                return None
            data = _read_all(fd)
            payload = decode(data, key)
            if payload is not None:
                _touch(fd)
            return payload
        except OSError:
            return None
        finally:
            os.close(fd)

    # -- writing ----------------------------------------------------------------------
    def write(self, key: str, payload: dict) -> bool:
        """Store atomically (temporary file + rename); False when not stored.

        An obstacle at this one entry's path (a directory) is removed if it is
        an empty directory of ours, else this entry is not stored: one bad
        path never turns the cache off. Errors writing the directory itself
        (read-only, full, not permitted) do: memory only, one warning.
        """
        if not self.writable:
            return False
        try:
            data = encode(payload)
        except ValueError:  # something marshal cannot store: memory only
            return False
        for attempt in (0, 1):
            try:
                if not self.usable(create=True):
                    return False
                stored = self._write_file(key, data)
                if stored:
                    self._account(len(data))
                return stored
            except FileNotFoundError as exc:
                # The directory vanished (or `cache clear` took our temporary file):
                # make it again once.
                self._problem = None
                if attempt:
                    self._unwritable(exc)
                    return False
            except OSError as exc:
                self._unwritable(exc)
                return False
        return False

    def _write_file(self, key: str, data: bytes) -> bool:
        target = self.entry_path(key)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=TMP_SUFFIX, dir=self.path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            try:
                os.replace(tmp, target)
            except OSError:
                if not _is_directory(target):
                    raise
                # A directory at this entry's path: this entry only is not stored.
                if not _remove_empty_directory(target):
                    os.unlink(tmp)
                    return False
                os.replace(tmp, target)
            return True
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def _unwritable(self, exc: OSError) -> None:
        self.writable = False
        reason = exc.strerror or type(exc).__name__
        self._warn(f"s2sgrad: cannot write the cache directory {self.path} ({reason}); "
                   f"generated code is kept in memory only. Set S2SGRAD_CACHE_DIR to a "
                   f"writable directory, or S2SGRAD_CACHE=0 to turn the disk cache off.")

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(message, CacheWarning, stacklevel=4)

    # -- the size cap -----------------------------------------------------------------
    def _account(self, size: int) -> None:
        """After a write: count it, and evict beyond the cap."""
        cap = max_bytes()
        if cap is None:
            return
        now = time.monotonic()
        if self._bytes is None or now - self._counted_at > RESCAN_SECONDS:
            self._bytes = scan(self.path).bytes
            self._counted_at = now
        else:
            self._bytes += size
        if self._bytes > cap:
            self._bytes = evict(self.path, int(cap * LOW_WATER))
            self._counted_at = time.monotonic()


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _touch(fd: int) -> None:
    """Mark an entry used now (its mtime orders eviction)."""
    try:
        if os.utime in os.supports_fd:
            os.utime(fd)
    except OSError:
        pass  # a read-only file system: eviction order is only approximate


def _is_directory(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _remove_empty_directory(path: str) -> bool:
    """Remove an empty directory of ours at `path` (never through a link)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or (_euid() is not None and st.st_uid != _euid()):
            return False
        os.rmdir(path)
        return True
    except OSError:
        return False


def trusted(st: os.stat_result) -> bool:
    """A regular file, owned by the current user and writable by nobody else."""
    return not _file_problem(st)


def _file_problem(st: os.stat_result) -> str:
    """Why a file at an entry path is not a trusted entry, or ""."""
    mode = st.st_mode
    if not stat.S_ISREG(mode):
        kinds = [(stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                 (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
        return next((what for test, what in kinds if test(mode)), "not a regular file")
    euid = _euid()
    if euid is not None:
        if st.st_uid != euid:
            return f"owned by uid {st.st_uid}"
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"writable by others (mode {stat.S_IMODE(mode):04o})"
    return ""


def encode(payload: dict) -> bytes:
    body = marshal.dumps(payload)
    return _HEADER + hashlib.sha256(body).digest() + body


def decode(data: bytes, key: str) -> Optional[dict]:
    """The payload if the header, checksum, format and key all match."""
    start = len(_HEADER) + _DIGEST
    if len(data) < start or not data.startswith(_HEADER):
        return None
    body = data[start:]
    if hashlib.sha256(body).digest() != data[len(_HEADER):start]:
        return None
    try:
        payload = marshal.loads(body)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT \
            or payload.get("key") != key:
        return None
    return payload


# -- what is in the directory ---------------------------------------------------------
class Scan:
    """The files of a cache directory that are s2sgrad's by name, sorted out."""

    def __init__(self):
        self.entries: List[Tuple[str, int, float]] = []   # (path, bytes, mtime)
        self.bytes = 0
        self.writing: List[str] = []      # temporary files of writes in progress
        self.stale: List[str] = []        # temporary files older than STALE_SECONDS
        self.ignored: List[Tuple[str, str]] = []   # (path, why) at entry/temporary paths


def _ours(name: str) -> bool:
    return name.endswith(SUFFIX) or name.startswith(TMP_PREFIX)


def scan(path: str, now: Optional[float] = None) -> Scan:
    """Sort the directory's files (never following a link; files that vanish
    meanwhile are skipped)."""
    out = Scan()
    now = time.time() if now is None else now
    try:
        it = os.scandir(path)
    except OSError:
        return out
    with it:
        for e in it:
            if not _ours(e.name):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                out.ignored.append((e.path, exc.strerror or type(exc).__name__))
                continue
            problem = _file_problem(st)
            if problem:
                out.ignored.append((e.path, problem))
            elif e.name.startswith(TMP_PREFIX):
                (out.stale if now - st.st_mtime > STALE_SECONDS else out.writing).append(e.path)
            else:
                out.entries.append((e.path, st.st_size, st.st_mtime))
                out.bytes += st.st_size
    out.ignored.sort()
    return out


def evict(path: str, target: int) -> int:
    """Remove the least recently used entries until they take at most `target`
    bytes, and stale temporary files; returns the bytes left. Safe with other
    processes doing the same: an entry that is already gone is skipped, and
    one another process is reading stays readable through its open file."""
    found = scan(path)
    for tmp in found.stale:
        _unlink(tmp)
    total = found.bytes
    for entry, size, _ in sorted(found.entries, key=lambda e: e[2]):
        if total <= target:
            break
        _unlink(entry)
        total -= size
    return total


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def info(path: Optional[str] = None) -> dict:
    """What `s2sgrad cache info` reports: the directory and whether it is used,
    the entries and their size, the cap, temporary files (in progress and
    stale) and the paths that look like entries but are ignored."""
    path = path or directory()
    try:
        st = os.stat(path)
    except OSError:
        st = None
    problem = directory_problem(st) if st is not None else ""
    found = scan(path) if st is not None and stat.S_ISDIR(st.st_mode) else Scan()
    return {"directory": path, "entries": len(found.entries), "bytes": found.bytes,
            "enabled": enabled(), "exists": st is not None and stat.S_ISDIR(st.st_mode),
            "problem": problem, "fix": _fix_for(path, problem) if problem else "",
            "max_bytes": max_bytes(), "writing": len(found.writing), "stale": found.stale,
            "ignored": found.ignored}


def clear(path: Optional[str] = None) -> dict:
    """Remove every entry, temporary file and other file at an entry path (links,
    FIFOs, other users' files: unlinked, never followed; an empty directory of
    ours is removed, any other directory is left and reported). Returns how
    many of each, and what was left with why."""
    path = path or directory()
    found = scan(path)
    removed = {"entries": 0, "temporary": 0, "other": 0, "left": []}
    for entry, _, _ in found.entries:
        removed["entries"] += _unlink(entry)
    for tmp in found.writing + found.stale:
        removed["temporary"] += _unlink(tmp)
    for other, why in found.ignored:
        try:
            st = os.lstat(other)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            if _remove_empty_directory(other):
                removed["other"] += 1
            else:
                removed["left"].append((other, f"{why} (not removed: not an empty directory "
                                               f"of yours; remove it yourself)"))
            continue
        try:
            removed["other"] += _unlink(other)
        except OSError as exc:
            removed["left"].append((other, f"{why} (not removed: {exc.strerror})"))
    return removed


# The numba backend's generated modules (m_<hash>.py) and the machine code numba
# keeps beside them (in __pycache__) live in this subdirectory.
NUMBA_SUBDIR = "numba"


def numba_modules(path: Optional[str] = None) -> List[str]:
    """Paths of the numba backend's cached modules under the cache directory."""
    folder = os.path.join(path or directory(), NUMBA_SUBDIR)
    if os.path.islink(folder) or not os.path.isdir(folder):
        return []
    with os.scandir(folder) as it:
        return [e.path for e in it if e.is_file(follow_symlinks=False)
                and e.name.startswith("m_") and e.name.endswith(".py")]


def clear_numba(path: Optional[str] = None) -> int:
    """Remove the numba backend's cached modules and their machine code; returns
    how many modules. Only the subdirectory s2sgrad made is touched, never
    through a symbolic link."""
    folder = os.path.join(path or directory(), NUMBA_SUBDIR)
    if os.path.islink(folder) or not os.path.isdir(folder):
        return 0
    count = len(numba_modules(path))
    shutil.rmtree(folder)
    return count


# -- keys ----------------------------------------------------------------------------
_ENVIRONMENT: Optional[str] = None


def environment() -> str:
    """Fingerprint of s2sgrad's sources and of the Python, NumPy and astor versions."""
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        import astor
        import numpy
        root = os.path.dirname(os.path.abspath(__file__))
        files: List[Tuple[str, int, int]] = []
        _scan_sources(root, "", files)
        parts = [sys.version, sys.implementation.cache_tag or "", numpy.__version__,
                 getattr(astor, "__version__", "?"), repr(sorted(files))]
        _ENVIRONMENT = _hash(parts)
    return _ENVIRONMENT


# Sources that do not take part in generating or loading code: the command line,
# the gradient checker, and the backends that rewrite an already loaded pair.
_NOT_CODEGEN = {"__main__.py", "cli.py", "check.py", "backends"}


def _scan_sources(path: str, rel: str, out: List[Tuple[str, int, int]]) -> None:
    with os.scandir(path) as it:
        for e in it:
            if not rel and e.name in _NOT_CODEGEN:
                continue
            if e.name.endswith(".py"):
                st = e.stat()
                out.append((rel + e.name, st.st_size, st.st_mtime_ns))
            elif e.name != "__pycache__" and not e.name.startswith(".") and e.is_dir():
                _scan_sources(e.path, rel + e.name + "/", out)


def function_key(fn: Callable, wrt: Sequence[int], options: tuple) -> Optional[str]:
    """The disk key of `fn` differentiated w.r.t. `wrt`, or None (no source)."""
    from .version import __version__
    fingerprint = function_fingerprint(fn)
    if fingerprint is None:
        return None
    return _hash([str(FORMAT), __version__, environment(), rules_fingerprint(), fingerprint,
                  repr(tuple(wrt)), repr(tuple(options))])


def function_fingerprint(fn: Callable, root: Optional[Callable] = None) -> Optional[str]:
    """Source, position, bytecode and resolved names of `fn`, and of every
    decorator layer around it; None without source.

    `root` is the function being compiled when `fn` is inlined into it: the
    inlined body's names are also resolved in `root`'s namespace.
    """
    wrappers = _wrappers_fingerprint(fn)
    if wrappers is None:
        return None
    fn = unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    text = source_text(fn)
    if text is None:
        return None
    parts = [os.path.basename(code.co_filename), str(code.co_firstlineno),
             getattr(fn, "__qualname__", code.co_name), text, _code_fingerprint(code),
             _names_fingerprint(code, fn), _defaults_fingerprint(fn), wrappers]
    if root is not None:
        parts.append(_names_fingerprint(code, unwrap(root)))
    return _hash(parts)


def _wrappers_fingerprint(fn: Callable) -> Optional[str]:
    """The decorator layers `unwrap` peels off `fn`, each by its own source,
    bytecode and closure ("" when there are none); None when one has no source.

    The compiler differentiates the innermost function only after deciding
    that every layer passes the call through unchanged (`parse`): a layer
    edited to compute something (`return 2 * fn(*args)`) must not find the
    entry made for the layer that did not.
    """
    parts: List[str] = []
    seen = set()
    while hasattr(fn, "__wrapped__") and id(fn) not in seen:
        seen.add(id(fn))
        code = getattr(fn, "__code__", None)
        if isinstance(fn, types.FunctionType) and code is not None:
            text = source_text(fn)
            if text is None:
                return None
            parts += [code.co_filename, text, _code_fingerprint(code),
                      _names_fingerprint(code, fn), _defaults_fingerprint(fn)]
        else:   # functools' caches and other C-level wrappers: by kind
            parts.append(_describe(fn) + f" of type {type(fn).__qualname__}")
        fn = fn.__wrapped__
    return _hash(parts) if parts else ""


def dependency_fingerprint(kind: str, obj: Any, root: Callable) -> str:
    """Fingerprint of an inlined Function class or a called function."""
    if kind == "function":
        parts = [f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"]
        for meth in function_methods(obj):
            target = unwrap(getattr(obj, meth))
            parts.append(meth)
            parts.append(function_fingerprint(target, root) or _describe(target))
        return _hash(parts)
    return function_fingerprint(obj) or _hash([_describe(obj)])


def source_text(fn: Callable) -> Optional[str]:
    """The source lines the function was compiled from (as the parser sees them)."""
    code = fn.__code__
    if not hasattr(code, "co_positions"):  # Python < 3.11: no end positions
        try:
            return "".join(inspect.getsourcelines(fn)[0])
        except (OSError, TypeError):
            return None
    filename = code.co_filename
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, getattr(fn, "__globals__", None))
    if not lines:
        return None
    first = code.co_firstlineno
    last = last_source_line(code, first)
    if last > len(lines):
        return None
    return "".join(lines[first - 1:last])


def _code_fingerprint(code: types.CodeType) -> str:
    out: List[str] = []
    _code_parts(code, out)
    return "\x00".join(out)


def _code_parts(code: types.CodeType, out: List[str]) -> None:
    out.append(code.co_code.hex())
    out.append(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                     code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_parts(const, out)
        else:
            out.append(_const(const))


def _const(value: Any) -> str:
    if isinstance(value, frozenset):  # set order depends on string hashing
        return "frozenset{" + ",".join(sorted(_const(v) for v in value)) + "}"
    if isinstance(value, tuple):
        return "(" + ",".join(_const(v) for v in value) + ")"
    return f"{type(value).__name__}:{value!r}"


def _names_fingerprint(code: types.CodeType, fn: Callable) -> str:
    """What each global, builtin or closure name the code reads is bound to."""
    names = set()
    _global_names(code, names)
    namespace = getattr(fn, "__globals__", {})
    builtins_ns = namespace.get("__builtins__", builtins)
    if not isinstance(builtins_ns, dict):
        builtins_ns = vars(builtins_ns)
    cells = {}
    if getattr(fn, "__closure__", None):
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__))
    parts = []
    for name in sorted(names | set(cells)):
        if name in cells:
            try:
                value = cells[name].cell_contents
            except ValueError:
                parts.append(f"{name}=<empty cell>")
                continue
        elif name in namespace:
            value = namespace[name]
        elif name in builtins_ns:
            value = builtins_ns[name]
        else:
            continue
        parts.append(f"{name}={_describe(value)}")
    return _hash(parts)


def _defaults_fingerprint(fn: Callable) -> str:
    """Default values: not in the source text when they are computed (`k=k`)."""
    defaults = getattr(fn, "__defaults__", None) or ()
    kwdefaults = getattr(fn, "__kwdefaults__", None) or {}
    return _hash([_describe(v) for v in defaults]
                 + [f"{k}={_describe(v)}" for k, v in sorted(kwdefaults.items())])


def _global_names(code: types.CodeType, out: set) -> None:
    out.update(code.co_names)
    out.update(code.co_freevars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _global_names(const, out)


_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def _describe(value: Any, depth: int = 0) -> str:
    """A deterministic description of what a name is bound to."""
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, _SCALARS):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, (tuple, list)) and depth < 2 and len(value) <= 64:
        inner = ", ".join(_describe(v, depth + 1) for v in value)
        return f"{type(value).__name__}[{inner}]"
    bound = _describe_bound(value, depth)
    if bound is not None:
        return bound
    kind = type(value)
    if isinstance(value, type) or callable(value):
        name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        if isinstance(name, str):
            module = getattr(value, "__module__", None)
            return f"{kind.__module__}.{kind.__qualname__} {module}.{name}"
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple) and dtype is not None:
        return f"{kind.__module__}.{kind.__qualname__} {dtype} {shape}"
    return f"{kind.__module__}.{kind.__qualname__}"


def _describe_bound(value: Any, depth: int) -> Optional[str]:
    """A partial or a bound method described by what it binds, or None for
    anything else.

    Generated code calls the function a partial or bound method runs with the
    bound values as constants (`compiler.callables`), so two of them are the
    same to the cache only if the function and every bound value are: a
    number by value, an array by dtype and shape, an instance by its class
    (its attributes are read when the code runs, not when it is generated).
    One nested too deep to describe is described as itself, which no other
    process can match: its entry is never reused.
    """
    if isinstance(value, functools.partial):
        if depth >= 4:
            return f"<partial nested too deep #{os.getpid()}:{id(value)}>"
        args = ", ".join(_describe(v, depth + 1) for v in value.args)
        keywords = ", ".join(f"{k}={_describe(v, depth + 1)}"
                             for k, v in sorted(value.keywords.items()))
        return f"functools.partial({_describe(value.func, depth + 1)}; {args}; {keywords})"
    if isinstance(value, types.MethodType):
        if depth >= 4:
            return f"<method nested too deep #{os.getpid()}:{id(value)}>"
        return (f"method {_describe(value.__func__, depth + 1)} of "
                f"{_describe(value.__self__, depth + 1)}")
    return None


def _hash(parts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for p in parts:
        data = p.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


# -- gradient rules registered at run time --------------------------------------------
_RULES_MEMO: Optional[Tuple[Dict[str, Any], str]] = None


def _registry_state() -> Dict[str, Any]:
    from dataclasses import fields
    state = {}
    for f in fields(_REGISTRY):
        value = getattr(_REGISTRY, f.name)
        state[f.name] = dict(value) if isinstance(value, dict) else frozenset(value)
    return state


def _same(snapshot: Dict[str, Any]) -> bool:
    """Is the registry still exactly (same objects) what `snapshot` recorded?"""
    for name, old in snapshot.items():
        new = getattr(_REGISTRY, name)
        if isinstance(old, dict):
            if len(old) != len(new) or old.keys() != new.keys() or \
                    not all(map(operator.is_, old.values(), new.values())):
                return False
        elif old != new:
            return False
    return True


def rules_fingerprint() -> str:
    """Empty while the registry is the built-in table, else a hash of the changes."""
    global _RULES_MEMO
    if _same(_BUILTIN_RULES):
        return ""
    if _RULES_MEMO is not None and _same(_RULES_MEMO[0]):
        return _RULES_MEMO[1]
    state = _registry_state()
    changes = []
    for name, now in state.items():
        before = _BUILTIN_RULES.get(name)
        if isinstance(now, dict):
            for k in set(before) | set(now):
                old, new = before.get(k, _MISSING), now.get(k, _MISSING)
                if old is not new:
                    changes.append(f"{name}: {_describe_rule_entry(old)} -> "
                                   f"{_describe_rule_entry(new)}")
        elif now != before:
            changes.append(f"{name}: {sorted(map(_describe, before))} -> "
                           f"{sorted(map(_describe, now))}")
    digest = _hash(sorted(changes))
    _RULES_MEMO = (state, digest)
    return digest


def _describe_rule_entry(entry: Any) -> str:
    if entry is _MISSING:
        return "-"
    if isinstance(entry, tuple):
        return "(" + ", ".join(_describe_rule_entry(e) for e in entry) + ")"
    if type(entry).__name__ == "Rule":
        import ast
        return repr((entry.name, str(entry.signature), sorted(entry.texts.items()),
                     [ast.dump(s) for s in entry.prelude], entry.broadcast,
                     sorted(entry.sequence), entry.outputs, entry.view,
                     _describe(entry.func), sorted(entry.extra_names)))
    return _describe(entry)


# -- dotted names the compiler resolved ------------------------------------------------
def attribute_chains(node: Any, local_names: Sequence[str]) -> List[str]:
    """Every `a.b.c` in a function's AST whose root `a` is not a local variable.

    The compiler resolves such chains statically (`np.sin`, `cfg.activation`,
    `ops.Cube.apply`) to pick gradient rules; what they resolve to is checked
    again before an entry is used.
    """
    import ast
    local = set(local_names)
    chains = set()
    stack, AST, Attribute = [node], ast.AST, ast.Attribute
    while stack:   # (ast.walk, without its generator and field iterator)
        sub = stack.pop()
        for field in sub._fields:
            value = getattr(sub, field, None)
            if value.__class__ is list:
                stack.extend(v for v in value if isinstance(v, AST))
            elif isinstance(value, AST) and value._fields:
                stack.append(value)
        if sub.__class__ is Attribute:
            parts, cur = [], sub
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id not in local:
                chains.add(".".join([cur.id] + parts[::-1]))
    return sorted(chains)


def describe_chain(fn: Callable, chain: str) -> str:
    """What `chain` resolves to from `fn`'s namespace, described."""
    head, *rest = chain.split(".")
    obj = lookup(unwrap(fn), head)
    for part in rest:
        if obj is _MISSING:
            break
        try:
            obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - as the compiler's resolver: not static
            obj = _MISSING
    return "<missing>" if obj is _MISSING else _describe(obj)


# -- finding dependencies again in a new process ----------------------------------------
def locate(obj: Any, fn: Callable, names: Sequence[str] = ()) -> Optional[tuple]:
    """How to find `obj` again from `fn`'s namespace, as marshal-able data.

    ("ns", name): a closure, global or builtin name of `fn`;
    ("qual", module, qualname): an attribute path from an imported module;
    ("module", name): an imported module. `names` are tried first.

    Only a name `fn` (or, for `names`, the body the caller asks for) reads is
    a place: a function, class or module is found among those by identity.
    A value (a number, an array, an instance) is found by `names` only: the
    same small int or interned string sits under many unrelated names (a
    partial's `a=2` is not the global `EPOCHS = 2`), so finding one by
    identity would bind, in the next process, whatever that name holds then.
    """
    fn = unwrap(fn)
    if isinstance(obj, types.ModuleType) and sys.modules.get(obj.__name__) is obj:
        return ("module", obj.__name__)
    for name in names:
        if lookup(fn, name) is obj:
            return ("ns", name)
    if not _named(obj):
        return None
    code = fn.__code__
    if fn.__closure__:
        for name, cell in zip(code.co_freevars, fn.__closure__):
            try:
                if cell.cell_contents is obj:
                    return ("ns", name)
            except ValueError:
                pass
    referenced: set = set()
    _global_names(code, referenced)
    for name in sorted(referenced):
        if fn.__globals__.get(name, _MISSING) is obj:
            return ("ns", name)
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str) and "<locals>" not in qualname:
        if _walk(sys.modules.get(module), qualname) is obj:
            return ("qual", module, qualname)
    return None


def _named(obj: Any) -> bool:
    """A function, class or module: an object whose identity is what it is
    (found again by name, its fingerprint compared), unlike a value."""
    return isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, type,
                            types.ModuleType)) or \
        (callable(obj) and isinstance(getattr(obj, "__qualname__", None), str)
         and not isinstance(obj, (functools.partial, types.MethodType)))


def resolve(locator: tuple, fn: Callable) -> Any:
    """The object a locator names now, or MISSING."""
    kind = locator[0]
    if kind == "ns":
        return lookup(unwrap(fn), locator[1])
    if kind == "qual":
        return _walk(sys.modules.get(locator[1]), locator[2])
    if kind == "module":
        return sys.modules.get(locator[1], _MISSING)
    return _MISSING


def lookup(fn: Callable, name: str) -> Any:
    """`name` as `fn`'s body would read it: closure, globals, builtins."""
    code = getattr(fn, "__code__", None)
    if code is not None and fn.__closure__ and name in code.co_freevars:
        try:
            return fn.__closure__[code.co_freevars.index(name)].cell_contents
        except ValueError:
            return _MISSING
    namespace = getattr(fn, "__globals__", {})
    if name in namespace:
        return namespace[name]
    builtins_ns = namespace.get("__builtins__", builtins)
    if isinstance(builtins_ns, dict):
        return builtins_ns.get(name, _MISSING)
    return getattr(builtins_ns, name, _MISSING)


def _walk(base: Any, qualname: str) -> Any:
    if base is None:
        return _MISSING
    obj = base
    for part in qualname.split("."):
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


MISSING = _MISSING
# The built-in table as imported (the s2sgrad sources it comes from are in the key);
# rules registered later are part of every key.
_BUILTIN_RULES: Dict[str, Any] = _registry_state()
