"""The disk cache of generated code (SPEC 1.6).

A program should not pay the transform again every time it starts. Each
compiled forward/adjoint pair is stored in one file under `$S2SGRAD_CACHE_DIR`
(default `~/.cache/s2sgrad`), named by a hash of:

- s2sgrad itself: its version and the size and modification time of every one
  of its source files (the same test Python applies to its own .pyc files), the
  gradient rules registered at run time, and the versions of Python, NumPy and
  astor;
- the function: its source lines (the text, never the file's size and time),
  file name and line, qualified name, bytecode, default values, those of each
  decorator layer around it, and what each global or closure name it reads is
  bound to (a module, a class, a function, the value of a constant, a partial
  or bound method with what it binds);
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

Trust (see DiskCache and s2sgrad.trust): an entry is code that runs, so the
directory and the whole path to it (every parent, every link on the way) must
be the user's (parents: or root's) and writable by nobody else, else it is not
used (one warning, memory only); every file it loads (entries, the numba
backend's modules and records) is opened with O_NOFOLLOW | O_NONBLOCK, used
only if fstat shows a regular file of the user's that nobody else may write,
and carries s2sgrad's marker and SHA-256 (which detects another program's file
and corruption, not tampering). `clear` removes only what s2sgrad wrote.

Robustness: entries are written to a temporary file and renamed over the old
one (atomic; concurrent writers leave one valid entry); the directory and any
missing parent are created 0700 whatever the umask; an entry that does not
verify is ignored and regenerated; a directory at one entry path keeps only
that entry out; a directory that cannot be written falls back to memory with
one warning. `S2SGRAD_CACHE=0` disables the disk cache.

Bounds: at most $S2SGRAD_CACHE_MAX_MB (default 256) of entries; a hit touches
an entry, and a write that goes beyond the cap removes the least recently
used down to 90% of it (`evict`, safe with other processes doing the same).
Temporary files of writes in progress count toward the cap; those of writers
that are gone (killed) are removed at the next write (`_clean_writing`: they
live in a subdirectory of their own, cheap to list). `info` and `clear` also
see them and whatever else sits at an entry path.
"""
from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import importlib.util
import inspect
import linecache
import marshal
import operator
import os
import stat
import sys
import time
import types
import warnings
from dataclasses import fields
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import trust, version
from .introspect import function_methods, last_source_line, unwrap
from .rules import REGISTRY as _REGISTRY
from .rules import load_table

FORMAT = 5   # 5: a callee of an entry records the parameters given complex values
SUFFIX = ".s2s"
TMP_PREFIX = ".tmp-s2s-"
TMP_SUFFIX = ".part"
_HEADER = b"s2sgrad-cache\x00" + FORMAT.to_bytes(2, "little") + importlib.util.MAGIC_NUMBER
_DIGEST = 32
_READ_FLAGS = trust.READ_FLAGS
_MISSING = object()
# Writes in progress: temporary files named .tmp-s2s-<pid>-<random>.part, in this
# subdirectory (listing it at every write is cheap: it holds only those), so that
# the next write finds the files of writers that died (their pid is gone).
TMP_SUBDIR = ".s2s-writing"

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


_euid = trust.euid
directory_problem = trust.directory_problem
path_problem = trust.path_problem


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
        problem = directory_problem(st) or path_problem(self.path)
        self._problem = problem
        if problem:
            self.writable = False
            self._warn(f"s2sgrad: not using the cache directory {self.path}: it {problem}, "
                       f"so entries in it could have been written by someone else, and an "
                       f"entry is code that runs. Generated code is kept in memory only. "
                       f"{_fix_for(self.path, problem)}")
        return not problem

    def subdirectory(self, name: str) -> Optional[str]:
        """A private subdirectory s2sgrad made (0700, holding its marker file), or
        None when the cache directory cannot be used, the subdirectory is not
        ours alone (a link, another user's, writable by others), or s2sgrad did
        not make it (files in it and no marker: one CacheWarning). `cache clear`
        removes only a marked subdirectory, and in it only what s2sgrad wrote."""
        sub = self._private_subdirectory(name)
        if sub is None:
            return None
        if not _marked(sub):
            self._warn(f"s2sgrad: not using {sub}: s2sgrad did not make it (it holds files "
                       f"and no {MARKER_NAME}), so its files are not s2sgrad's. Move it away "
                       f"to let jit=True keep its numba modules there.")
            return None
        return sub

    def _private_subdirectory(self, name: str) -> Optional[str]:
        """The subdirectory `name` (made 0700 if missing) if it is ours alone."""
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
                    self._account(len(data), self._clean_writing())
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
        folder = self._private_subdirectory(TMP_SUBDIR) or self.path
        fd, tmp = _temporary_file(folder)
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
    def _clean_writing(self) -> int:
        """After a write: remove the temporary files of writers that are gone
        (killed while writing); returns the bytes of those still being written,
        which count toward the cap. Cheap: the subdirectory holds only them."""
        folder = os.path.join(self.path, TMP_SUBDIR)
        found = Scan()
        _scan_temporary(folder, time.time(), found)
        for tmp in found.stale:
            try:
                _unlink(tmp)
            except OSError:
                pass
        return found.temp_bytes

    def _account(self, size: int, temporary: int = 0) -> None:
        """After a write: count it, and evict beyond the cap (entries and the
        temporary files of writes in progress together)."""
        cap = max_bytes()
        if cap is None:
            return
        now = time.monotonic()
        if self._bytes is None or now - self._counted_at > RESCAN_SECONDS:
            found = scan(self.path)
            self._bytes, temporary = found.bytes, found.temp_bytes
            self._counted_at = now
        else:
            self._bytes += size
        if self._bytes + temporary > cap:
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


_file_problem = trust.file_problem


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
        self.temp_bytes = 0               # ... and their bytes (they count toward the cap)
        self.stale: List[str] = []        # temporary files of writers that are gone
        self.ignored: List[Tuple[str, str]] = []   # (path, why) at entry/temporary paths


def _ours(name: str) -> bool:
    return name.endswith(SUFFIX) or name.startswith(TMP_PREFIX)


def _writer_gone(name: str) -> bool:
    """Whether the process that writes the temporary file `name` (its pid is in
    the name) has exited. A name without a pid (older s2sgrad) says nothing."""
    pid_text = name[len(TMP_PREFIX):].split("-", 1)[0]
    if os.name != "posix" or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except OSError:   # it exists (another user's: not permitted)
        return False
    return False


def _sort_temporary(path: str, name: str, st: os.stat_result, now: float, out: Scan) -> None:
    if now - st.st_mtime > STALE_SECONDS or _writer_gone(name):
        out.stale.append(path)
    else:
        out.writing.append(path)
        out.temp_bytes += st.st_size


def _scan_temporary(folder: str, now: float, out: Scan) -> None:
    """The temporary files in the writing subdirectory (only if it is ours alone:
    never through a link)."""
    try:
        if directory_problem(os.lstat(folder)):
            return
        it = os.scandir(folder)
    except OSError:
        return
    with it:
        for e in it:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            problem = _file_problem(st) or ("" if e.name.startswith(TMP_PREFIX)
                                            else "not a temporary file of s2sgrad's")
            if problem:
                out.ignored.append((e.path, problem))
            else:
                _sort_temporary(e.path, e.name, st, now, out)


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
                _sort_temporary(e.path, e.name, st, now, out)
            else:
                out.entries.append((e.path, st.st_size, st.st_mtime))
                out.bytes += st.st_size
    _scan_temporary(os.path.join(path, TMP_SUBDIR), now, out)
    out.ignored.sort()
    return out


def evict(path: str, target: int) -> int:
    """Remove the temporary files of writers that are gone, then the least
    recently used entries until entries and the temporary files of writes in
    progress take at most `target` bytes; returns the entries' bytes left. Safe
    with other processes doing the same: an entry that is already gone is
    skipped, and one another process is reading stays readable through its
    open file."""
    found = scan(path)
    for tmp in found.stale:
        _unlink(tmp)
    total = found.bytes + found.temp_bytes
    for entry, size, _ in sorted(found.entries, key=lambda e: e[2]):
        if total <= target:
            break
        _unlink(entry)
        total -= size
    return max(total - found.temp_bytes, 0)


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
    problem = (directory_problem(st) or path_problem(path)) if st is not None else ""
    found = scan(path) if st is not None and stat.S_ISDIR(st.st_mode) else Scan()
    return {"directory": path, "entries": len(found.entries), "bytes": found.bytes,
            "enabled": enabled(), "exists": st is not None and stat.S_ISDIR(st.st_mode),
            "problem": problem, "fix": _fix_for(path, problem) if problem else "",
            "max_bytes": max_bytes(), "writing": len(found.writing), "stale": found.stale,
            "temp_bytes": found.temp_bytes, "ignored": found.ignored}


def clear(path: Optional[str] = None) -> dict:
    """Remove every entry, temporary file and other file at an entry path (links,
    FIFOs, other users' files: unlinked, never followed; an empty directory of
    ours is removed, any other directory is left and reported). Returns how
    many of each, and what was left with why. A directory s2sgrad refuses to
    use (others can write it or the path to it) is not touched at all."""
    path = path or directory()
    removed: Dict[str, Any] = {"entries": 0, "temporary": 0, "other": 0, "left": [],
                               "refused": ""}
    try:
        st = os.stat(path)
    except OSError:
        return removed
    problem = directory_problem(st) or path_problem(path)
    if problem:
        removed["refused"] = problem
        removed["left"].append((path, f"not cleared: it {problem}, so s2sgrad neither uses "
                                      f"it nor removes anything in it"))
        return removed
    found = scan(path)
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
    _remove_empty_directory(os.path.join(path, TMP_SUBDIR))
    return removed


# -- the numba backend's files ----------------------------------------------------------
# The numba backend's generated modules (m_<hash>.py), the rejections it records
# (m_<hash>.rejected) and the machine code numba keeps beside them (in
# __pycache__) live in this subdirectory, which s2sgrad marks as its own.
NUMBA_SUBDIR = "numba"
MARKER_NAME = ".s2sgrad-made-this"
_MARKER = b"s2sgrad made this directory; `s2sgrad cache clear` removes what s2sgrad wrote in it\n"
MODULE_SUFFIX = ".py"
REJECTION_SUFFIX = ".rejected"


def _marked(folder: str) -> bool:
    """Whether s2sgrad made `folder` (its marker is there), marking it when it is
    empty (just made, here or by another process at once: the marker appears
    whole, by a hard link, or not at all)."""
    marker = os.path.join(folder, MARKER_NAME)
    data, why = trust.read_checked(marker)
    if data is not None or why != "missing":
        return data == _MARKER
    try:
        if any(not n.startswith(TMP_PREFIX) for n in os.listdir(folder)):
            return False
        fd, tmp = _temporary_file(folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MARKER)
            try:
                os.link(tmp, marker)
            except FileExistsError:
                pass
        finally:
            _unlink(tmp)
    except OSError:
        return False
    return trust.read_checked(marker)[0] == _MARKER


def numba_folder(path: Optional[str] = None) -> Tuple[Optional[str], str]:
    """(the numba subdirectory, "") if s2sgrad made it and it is ours alone, else
    (None, why not; "" when there is none)."""
    folder = os.path.join(path or directory(), NUMBA_SUBDIR)
    try:
        st = os.lstat(folder)
    except OSError:
        return None, ""
    if stat.S_ISLNK(st.st_mode):
        return None, "a symbolic link (never followed)"
    problem = directory_problem(st)
    if problem:
        return None, f"it {problem}"
    if trust.read_checked(os.path.join(folder, MARKER_NAME))[0] != _MARKER:
        return None, "s2sgrad did not make it (no marker)"
    return folder, ""


def _temporary_file(folder: str) -> Tuple[int, str]:
    """(descriptor, path) of a new private file in `folder`, named so that its
    writer's pid says when it is abandoned (tempfile is imported here, not at
    `import s2sgrad`: most processes never write)."""
    import tempfile
    return tempfile.mkstemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", suffix=TMP_SUFFIX,
                            dir=folder)


def write_sealed(folder: str, name: str, marker: str, body: str) -> str:
    """Write `body` under its marker and checksum (trust.sealed_text) to
    folder/name, atomically and 0600; returns the path."""
    path = os.path.join(folder, name)
    fd, tmp = _temporary_file(folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(trust.sealed_text(marker, body))
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    return path


def read_sealed(path: str, marker: str) -> Optional[str]:
    """The body of a file `write_sealed` wrote, if it passes every check (a
    regular file of ours nobody else may write, not a link, its marker and
    checksum), else None."""
    data, _ = trust.read_checked(path)
    return None if data is None else trust.unsealed_text(data, marker)


def numba_modules(path: Optional[str] = None) -> List[str]:
    """Paths of the numba backend's cached modules under the cache directory."""
    folder, _ = numba_folder(path)
    if folder is None:
        return []
    with os.scandir(folder) as it:
        return sorted(e.path for e in it if e.is_file(follow_symlinks=False)
                      and e.name.startswith("m_") and e.name.endswith(MODULE_SUFFIX))


def clear_numba(path: Optional[str] = None) -> dict:
    """Remove what the numba backend wrote: in the numba subdirectory s2sgrad made
    (never through a link, never one others can write), its modules and recorded
    rejections that carry s2sgrad's marker and checksum, numba's machine code of
    those modules, temporary files and the marker; the subdirectory itself once
    empty. Returns {"modules": n, "files": n, "left": [(path, why)]}."""
    out: Dict[str, Any] = {"modules": 0, "files": 0, "left": []}
    folder, why = numba_folder(path)
    if folder is None:
        if why:
            out["left"].append((os.path.join(path or directory(), NUMBA_SUBDIR),
                                f"{why}: not removed"))
        return out
    pycache = os.path.join(folder, "__pycache__")
    for e in sorted(os.scandir(folder), key=lambda e: e.name):
        name = e.name
        if name == MARKER_NAME or name == "__pycache__":
            continue
        if name.startswith("m_") and name.endswith(MODULE_SUFFIX):
            mine = read_sealed(e.path, trust.NUMBA_MODULE_MARKER) is not None
            kind = "modules"
        elif name.startswith("m_") and name.endswith(REJECTION_SUFFIX):
            mine = read_sealed(e.path, trust.NUMBA_REJECTION_MARKER) is not None
            kind = "files"
        else:
            mine = name.startswith(TMP_PREFIX) and not _file_problem(e.stat(follow_symlinks=False))
            kind = "files"
        if mine:
            out[kind] += _unlink(e.path)
        else:
            out["left"].append((e.path, "not written by s2sgrad"))
    try:
        st = os.lstat(pycache)
    except OSError:
        st = None
    if st is not None and (stat.S_ISLNK(st.st_mode) or directory_problem(st)):
        out["left"].append((pycache, "not numba's directory of s2sgrad's modules"))
    elif st is not None:
        for e in sorted(os.scandir(pycache), key=lambda e: e.name):
            if e.name.startswith("m_") and e.name.endswith((".nbi", ".nbc")) and \
                    not _file_problem(e.stat(follow_symlinks=False)):
                out["files"] += _unlink(e.path)
            else:
                out["left"].append((e.path, "not numba's machine code of s2sgrad's modules"))
        _remove_empty_directory(pycache)
    if not out["left"]:
        _unlink(os.path.join(folder, MARKER_NAME))
        _remove_empty_directory(folder)
    return out


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
    fingerprint = function_fingerprint(fn)
    if fingerprint is None:
        return None
    return _hash([str(FORMAT), version.__version__, environment(), rules_fingerprint(), fingerprint,
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
            parts += [os.path.basename(code.co_filename), text, _code_fingerprint(code),
                      _names_fingerprint(code, fn), _defaults_fingerprint(fn)]
        else:   # functools' caches and other C-level wrappers: by kind
            parts.append(describe_value(fn) + f" of type {type(fn).__qualname__}")
        fn = fn.__wrapped__
    return _hash(parts) if parts else ""


def dependency_fingerprint(kind: str, obj: Any, root: Callable) -> str:
    """Fingerprint of an inlined Function class or a called function."""
    if kind == "function":
        parts = [f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"]
        for meth in function_methods(obj):
            target = unwrap(getattr(obj, meth))
            parts.append(meth)
            parts.append(function_fingerprint(target, root) or describe_value(target))
        return _hash(parts)
    return function_fingerprint(obj) or _hash([describe_value(obj)])


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
        parts.append(f"{name}={describe_value(value)}")
    return _hash(parts)


def _defaults_fingerprint(fn: Callable) -> str:
    """Default values: not in the source text when they are computed (`k=k`)."""
    defaults = getattr(fn, "__defaults__", None) or ()
    kwdefaults = getattr(fn, "__kwdefaults__", None) or {}
    return _hash([describe_value(v) for v in defaults]
                 + [f"{k}={describe_value(v)}" for k, v in sorted(kwdefaults.items())])


def _global_names(code: types.CodeType, out: set) -> None:
    out.update(code.co_names)
    out.update(code.co_freevars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _global_names(const, out)


_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def describe_value(value: Any, depth: int = 0) -> str:
    """A deterministic description of what a name is bound to."""
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, _SCALARS):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, (tuple, list)) and depth < 2 and len(value) <= 64:
        inner = ", ".join(describe_value(v, depth + 1) for v in value)
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
        args = ", ".join(describe_value(v, depth + 1) for v in value.args)
        keywords = ", ".join(f"{k}={describe_value(v, depth + 1)}"
                             for k, v in sorted(value.keywords.items()))
        return f"functools.partial({describe_value(value.func, depth + 1)}; {args}; {keywords})"
    if isinstance(value, types.MethodType):
        if depth >= 4:
            return f"<method nested too deep #{os.getpid()}:{id(value)}>"
        return (f"method {describe_value(value.__func__, depth + 1)} of "
                f"{describe_value(value.__self__, depth + 1)}")
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
            changes.append(f"{name}: {sorted(map(describe_value, before))} -> "
                           f"{sorted(map(describe_value, now))}")
    digest = _hash(sorted(changes))
    _RULES_MEMO = (state, digest)
    return digest


def _describe_rule_entry(entry: Any) -> str:
    if entry is _MISSING:
        return "-"
    if isinstance(entry, tuple):
        return "(" + ", ".join(_describe_rule_entry(e) for e in entry) + ")"
    if type(entry).__name__ == "Rule":
        return repr((entry.name, str(entry.signature), sorted(entry.texts.items()),
                     [ast.dump(s) for s in entry.prelude], entry.broadcast,
                     sorted(entry.sequence), entry.outputs, entry.view,
                     describe_value(entry.func), sorted(entry.extra_names)))
    return describe_value(entry)


# -- dotted names the compiler resolved ------------------------------------------------
def attribute_chains(node: Any, local_names: Sequence[str]) -> List[str]:
    """Every `a.b.c` in a function's AST whose root `a` is not a local variable.

    The compiler resolves such chains statically (`np.sin`, `cfg.activation`,
    `ops.Cube.apply`) to pick gradient rules; what they resolve to is checked
    again before an entry is used.
    """
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
    return "<missing>" if obj is _MISSING else describe_value(obj)


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
load_table()   # (the table as shipped: what a user's rule is told from)
_BUILTIN_RULES: Dict[str, Any] = _registry_state()
