"""Whether a file or directory may hold code that s2sgrad will run.

Everything the caches load -- `.s2s` entries, the numba modules `jit=True`
imports and the rejections it records -- is code or decides what code runs,
so it is trusted only where nobody but the user could have written it:

- the path to the cache directory, every component of it, is the user's or
  root's and writable by nobody else (a world-writable directory with the
  sticky bit, /tmp, is allowed: others cannot rename or remove what is not
  theirs in it), and a symbolic link on the way is the user's or root's too
  (OpenSSH checks the path to ~/.ssh the same way);
- a file is opened without following a link and without blocking, and read
  only if fstat shows a regular file of the user's that nobody else may write;
- a file s2sgrad wrote carries its marker and a SHA-256 of its content, so that
  a file of another program, or a damaged one, is never taken for one.

Standard library only: the numba worker process checks its module with it
without importing the compiler.
"""
from __future__ import annotations

import hashlib
import os
import stat
from typing import Optional, Tuple

# Never follow a link, never wait (a FIFO planted at an entry path would block an
# ordinary open for good): what is opened is then checked with fstat.
READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
              | getattr(os, "O_CLOEXEC", 0))


def euid() -> Optional[int]:
    """The effective user id (None where the system has none: no owner checks)."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def file_problem(st: os.stat_result) -> str:
    """Why a file with this (l)stat may not be read as s2sgrad's, or ""."""
    mode = st.st_mode
    if not stat.S_ISREG(mode):
        kinds = [(stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                 (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
        return next((what for test, what in kinds if test(mode)), "not a regular file")
    me = euid()
    if me is not None:
        if st.st_uid != me:
            return f"owned by uid {st.st_uid}"
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"writable by others (mode {stat.S_IMODE(mode):04o})"
    return ""


def directory_problem(st: os.stat_result) -> str:
    """Why a directory with this stat may not hold trusted code, or ""."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    me = euid()
    if me is not None and st.st_uid != me:
        return f"belongs to another user (uid {st.st_uid}; you are uid {me})"
    return _writable_by_others(st)


def _writable_by_others(st: os.stat_result) -> str:
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "group and others" if st.st_mode & stat.S_IWGRP and st.st_mode & stat.S_IWOTH \
            else "its group" if st.st_mode & stat.S_IWGRP else "others"
        return f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def _parent_problem(path: str, st: os.stat_result) -> str:
    """Why a directory above the cache directory (or a link on the way to it)
    lets someone else swap what lies below it, or ""."""
    me = euid()
    if me is not None and st.st_uid not in (me, 0):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a directory"
        return f"{path} is {what} of another user (uid {st.st_uid})"
    if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_ISVTX:
        problem = _writable_by_others(st)
        if problem:
            return f"{path} {problem}"
    return ""


def path_problem(path: str) -> str:
    """Why the path to the directory `path` (every component, and every link on
    the way with what it points to) lets another user put files in it or
    replace it, or "". `path` itself must also be the user's alone."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or type(exc).__name__})"
    problem = directory_problem(st)
    if problem:
        return problem
    if euid() is None:
        return ""
    seen = set()
    pending = [os.path.abspath(path)]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        while True:   # `current` and each directory above it
            try:
                lst = os.lstat(current)
                problem = _parent_problem(current, lst)
                if not problem and stat.S_ISLNK(lst.st_mode):
                    target = os.readlink(current)
                    pending.append(os.path.normpath(
                        os.path.join(os.path.dirname(current), target)))
            except OSError as exc:
                problem = f"{current} cannot be examined ({exc.strerror or type(exc).__name__})"
            if problem:
                return f"is reached through a path others can change: {problem}"
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return ""


def read_checked(path: str) -> Tuple[Optional[bytes], str]:
    """(the content of the file at `path`, "") if it is a regular file of the
    user's that nobody else may write, opened without following a link or
    blocking; else (None, why not). A missing file is (None, "missing")."""
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        if os.path.islink(path):
            return None, "a symbolic link"
        return None, exc.strerror or type(exc).__name__
    try:
        problem = file_problem(os.fstat(fd))
        if problem:
            return None, problem
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks), ""
            chunks.append(chunk)
    except OSError as exc:
        return None, exc.strerror or type(exc).__name__
    finally:
        os.close(fd)


# -- text files s2sgrad writes: a first line with its marker and a checksum ------------
def sealed_text(marker: str, body: str) -> str:
    """`body` under a first line `# <marker> sha256=<hex of body>`: a Python
    comment, so that a sealed module stays a module."""
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    return f"# {marker} sha256={digest}\n{body}"


def unsealed_text(data: bytes, marker: str) -> Optional[str]:
    """The body of text `sealed_text(marker, ...)` made, or None when the marker
    or the checksum does not match (another program's file, a damaged one)."""
    head, sep, body = data.partition(b"\n")
    prefix = f"# {marker} sha256=".encode()
    if not sep or not head.startswith(prefix):
        return None
    if hashlib.sha256(body).hexdigest().encode() != head[len(prefix):]:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


# The markers of the files the numba backend keeps in the cache's numba/ directory.
NUMBA_MODULE_MARKER = "s2sgrad numba module"
NUMBA_REJECTION_MARKER = "s2sgrad numba rejection"


def machine_code_problem(folder: str, stem: str) -> str:
    """Why numba's machine code in folder/__pycache__ may not be loaded (numba
    unpickles its index), or "": the directory must be ours alone, and every
    file in it a regular file of ours nobody else may write."""
    pycache = os.path.join(folder, "__pycache__")
    try:
        st = os.lstat(pycache)
        if stat.S_ISLNK(st.st_mode):
            return f"{pycache} is a symbolic link"
        problem = directory_problem(st)
        if problem:
            return f"{pycache} {problem}"
        with os.scandir(pycache) as it:
            for e in it:
                problem = file_problem(e.stat(follow_symlinks=False))
                if problem:
                    return f"{e.path} is {problem}"
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"{pycache} cannot be examined ({exc.strerror or type(exc).__name__})"
    return ""


def comment_safe(text: str) -> str:
    """`text` with every character that is not printable escaped (\\n, \\r, \\f,
    \\v, \\x1c-\\x1e, \\x85, U+2028, U+2029 and the other line boundaries of
    str.splitlines, every control and format character, NUL): what is left can
    never end a comment or a line, however the text is later split."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)
