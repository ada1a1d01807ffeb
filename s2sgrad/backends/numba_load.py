"""numba itself, and the generated modules it compiles: imported once, kept on disk.

numba is imported only when a call is to be compiled (a function whose calls
all go to NumPy never imports it). A generated module is written to the disk
cache so that numba's `cache=True` keeps its machine code beside it, checked
like every cache entry; numba's rejection of a module is recorded beside it so
that a later process does not spend seconds on a compile that fails.
"""
from __future__ import annotations

import os
import types
from typing import Any, List, Optional, Tuple

import numpy as np

from .. import cache as disk_cache
from .. import trust
from ..trust import comment_safe
from .numba_worker import summary

_NUMBA: List[Any] = []          # [numba module] once imported, [None, why] if unavailable


def numba_module():
    """numba, or None when it cannot be imported (cached)."""
    if not _NUMBA:
        try:
            import numba

            from . import numba_helpers  # noqa: F401 - registers the overloads
        except Exception as exc:  # noqa: BLE001 - any import failure means: no numba
            _NUMBA.append(None)
            _NUMBA.append(first_line(exc))
        else:
            _NUMBA.append(numba)
    return _NUMBA[0]


def missing_reason() -> str:
    return _NUMBA[1] if len(_NUMBA) > 1 else "numba is not installed"


def forget() -> None:
    """Import numba again at the next need (tests; s2sgrad.compiler.clear_cache)."""
    _NUMBA.clear()


def first_line(exc: BaseException) -> str:
    """The error's type and first line; for numba's "returned a result with an exception
    set" (a SystemError), the error it carries: what numba could not do (box a dict
    of mixed values, say)."""
    if isinstance(exc, SystemError) and exc.__cause__ is not None:
        exc = exc.__cause__
    return summary(type(exc).__name__, str(exc))


def is_numba_error(exc: BaseException) -> bool:
    numba = numba_module()
    if numba is None:
        return False
    from numba.core.errors import NumbaError
    return isinstance(exc, NumbaError)


def cache_dir() -> Optional[str]:
    """Where generated numba modules and their machine code are kept, or None.

    $S2SGRAD_CACHE_DIR/numba (the disk cache's directory), unless S2SGRAD_CACHE=0
    or S2SGRAD_JIT_CACHE=0; a cache directory or subdirectory that is not ours
    alone (another user's, writable by others, a link) is not used.
    """
    if os.environ.get("S2SGRAD_JIT_CACHE", "1") == "0":
        return None
    store = disk_cache.current()
    return store.subdirectory(disk_cache.NUMBA_SUBDIR) if store is not None else None


class RecordedRejection(Exception):
    """numba rejected this code in an earlier process (recorded beside its module,
    with numba's version): NumPy runs it at once, with the same warning."""


def load_module(source: str, ns: dict, name: str, disk: bool) -> Tuple[dict, bool]:
    """Execute the generated source; (its namespace, whether numba may cache it on disk).

    With a cache directory, the source is written to a file named by its hash
    (with numba's and s2sgrad's versions and what its names are bound to), so
    numba's `cache=True` keeps the machine code beside it: a later process
    loads it instead of compiling. The file is checked like a cache entry
    (a regular file of ours nobody else may write, s2sgrad's marker and
    checksum) and must hold exactly this source, else it is written again;
    what runs is always the text generated here, never the file's. numba's
    machine code is used only from a `__pycache__` that passes the same checks.
    Otherwise the code is exec'd from memory. RecordedRejection: numba rejected
    it before.
    """
    import hashlib
    directory = cache_dir() if disk else None
    if directory is not None:
        numba = numba_module()
        bound = sorted((k, _describe(v)) for k, v in ns.items() if k != "__builtins__")
        digest = hashlib.sha256(repr((source, bound, numba.__version__, np.__version__,
                                      _backend_fingerprint())).encode()).hexdigest()[:40]
        stem = f"m_{digest}"
        path = os.path.join(directory, stem + disk_cache.MODULE_SUFFIX)
        rejected = recorded_rejection(path)
        if rejected is not None:
            raise RecordedRejection(rejected)
        body = f"# s2sgrad: numba code for {comment_safe(name)}; regenerated when missing\n" \
            + source
        try:
            if disk_cache.read_sealed(path, trust.NUMBA_MODULE_MARKER) != body:
                disk_cache.write_sealed(directory, stem + disk_cache.MODULE_SUFFIX,
                                        trust.NUMBA_MODULE_MARKER, body)
            _private_pycache(directory)
            from .numba_worker import import_file
            module = import_file(path, f"s2sgrad_jit_{digest}", ns,
                                 trust.sealed_text(trust.NUMBA_MODULE_MARKER, body))
            return module.__dict__, not trust.machine_code_problem(directory, stem)
        except (OSError, SyntaxError):
            pass
    code = compile(source, f"<s2sgrad-numba {name}>", "exec")
    exec(code, ns)
    return ns, False


def _private_pycache(directory: str) -> None:
    """numba's machine code directory, made 0700 before numba makes it with the
    umask's mode (it is then checked: see trust.machine_code_problem)."""
    pycache = os.path.join(directory, "__pycache__")
    try:
        os.mkdir(pycache, 0o700)
    except FileExistsError:
        return
    os.chmod(pycache, 0o700)


def _rejection_path(module: str) -> str:
    return module[:-len(disk_cache.MODULE_SUFFIX)] + disk_cache.REJECTION_SUFFIX


def recorded_rejection(module: str) -> Optional[str]:
    """Why numba rejected the module at `module` in an earlier process, if that
    was recorded with the numba version this process has."""
    text = disk_cache.read_sealed(_rejection_path(module), trust.NUMBA_REJECTION_MARKER)
    if text is None:
        return None
    version, _, why = text.partition("\n")
    numba = numba_module()
    if numba is None or version != f"numba {numba.__version__}" or not why.strip():
        return None
    return why.strip()


def record_rejection(module: Optional[str], why: Optional[str]) -> None:
    """Record beside a module's file that numba rejected it (and why, with numba's
    version): later processes skip the compile that fails (seconds each)."""
    numba = numba_module()
    if module is None or why is None or numba is None:
        return
    try:
        disk_cache.write_sealed(os.path.dirname(module),
                                os.path.basename(_rejection_path(module)),
                                trust.NUMBA_REJECTION_MARKER,
                                f"numba {numba.__version__}\n{why}\n")
    except OSError:
        pass


_FINGERPRINT: List[str] = []


def _backend_fingerprint() -> str:
    """A hash of the backend's sources: cached machine code links the helpers'."""
    if not _FINGERPRINT:
        import hashlib
        h = hashlib.sha256()
        here = os.path.dirname(os.path.abspath(__file__))
        for fname in sorted(os.listdir(here)):
            if fname.endswith(".py"):
                with open(os.path.join(here, fname), "rb") as f:
                    h.update(fname.encode() + f.read())
        _FINGERPRINT.append(h.hexdigest())
    return _FINGERPRINT[0]


def _describe(value: Any) -> str:
    """What a name of generated numba code is bound to, for the cache key."""
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    mod = getattr(value, "__module__", None) or type(value).__module__
    qual = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{mod}.{qual}"
