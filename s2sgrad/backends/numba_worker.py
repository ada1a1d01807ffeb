"""numba compiles generated code in another process, into its disk cache.

Why a process: numba needs a second or more for a function with loops,
and the user's calls need not wait for it (the NumPy backend runs them
meanwhile). A thread cannot do it: CPython gives the GIL back to a thread
busy with small NumPy calls long before a compiling thread gets it, so a
compile beside a loop of calls took over a minute (measured). A worker
process runs on another core; it compiles the module file `numba_load.load_module`
wrote, with `cache=True` as the calling process does, and the calling
process then loads the machine code from numba's cache instead of compiling.

`Worker` is the calling side; `main` the worker's, run as a file. The job
is pickled on the worker's stdin: the module's file and name, what its
names are bound to, and (function name, numba signature) pairs. The worker
prints one JSON line: {"ok": true}, or {"rejected": why} when numba's
compiler rejects the code.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import types
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

# The modules generated code may name (everything else it reads is an argument).
MODULES = ("numpy", "math", "cmath")
# How generated code is compiled, here and in the calling process: float arithmetic
# as NumPy's (x / 0.0 is inf with no exception, as in the NumPy code it replaces).
NJIT_OPTIONS = {"cache": True, "error_model": "numpy"}


@dataclass
class Callee:
    """The module of a function a job's code calls (its forward and adjoint, split for
    callers), on disk like the job's own: a worker imports it first and binds the
    caller's names to its functions, as the calling process did."""

    path: str
    module_name: str
    sha256: str
    modules: Dict[str, str]
    callees: Dict[str, Tuple["Callee", str]] = field(default_factory=dict)


@dataclass
class Job:
    """What a worker compiles: one generated module file, some of its functions."""

    path: str
    module_name: str
    blas: bool
    modules: Dict[str, str]                      # name in the code -> module imported
    signatures: List[Tuple[str, Any]] = field(default_factory=list)   # (function, numba sig)
    sha256: str = ""                             # of the file the calling process wrote
    # name in the code -> (the callee's module, the function of it the name is bound to)
    callees: Dict[str, Tuple[Callee, str]] = field(default_factory=dict)


def import_file(path: str, module_name: str, names: dict, text: str) -> types.ModuleType:
    """Run `text`, the content the generated module file at `path` was checked to
    have, as that module, with `names` bound before its code runs (numba's cache
    finds its functions through sys.modules, and their file by the code's file
    name). The file itself is never imported: Python would read it, or a .pyc
    beside it, again after the check."""
    module = sys.modules.get(module_name)
    if module is not None:
        return module
    code = compile(text, path, "exec")
    module = types.ModuleType(module_name)
    module.__dict__.update(names)
    module.__file__ = path
    module.__dict__["__s2sgrad_sha256__"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def checked_module_text(job: Job) -> str:
    """The job's module file as the calling process wrote it, after the checks
    every file of the cache passes (a regular file of ours nobody else may
    write, not a link, s2sgrad's marker and checksum, the digest the calling
    process sent) and with numba's machine code beside it checked too; else
    RuntimeError (the worker then exits, and the calling process compiles the
    code it generated itself)."""
    # (here, not at the top: this file also runs as the worker's script, where the
    # package is set up only after its top-level code)
    from .. import trust
    data, why = trust.read_checked(job.path)
    if data is not None and hashlib.sha256(data).hexdigest() != job.sha256:
        why = "its content is not what s2sgrad wrote"
    if data is not None and not why and \
            trust.unsealed_text(data, trust.NUMBA_MODULE_MARKER) is None:
        why = "it has no valid s2sgrad marker and checksum"
    if not why:
        stem = os.path.splitext(os.path.basename(job.path))[0]
        why = trust.machine_code_problem(os.path.dirname(job.path), stem)
    if why:
        raise RuntimeError(f"refusing the module {job.path}: {why}")
    return data.decode("utf-8")


def cached(dispatcher: Any, signature: tuple) -> bool:
    """Whether numba's disk cache holds machine code of `dispatcher` for `signature`
    (an earlier process compiled it): then loading it here beats starting a worker.

    numba has no public question for this; its Cache's index file is read the
    way `Cache.load_overload` reads it (numba 0.68). Should that change, the
    answer is False: a worker starts, finds the code and exits.
    """
    try:
        cache = dispatcher._cache
        key = cache._index_key(signature, dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - see above
        return False


def summary(kind: str, message: str) -> str:
    """"Kind: the line that says what failed" of an error's message (a worker's, and
    numba_load.first_line)."""
    import re
    text = re.sub(r"\x1b\[[0-9;]*m", "", message).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # numba's messages start with "Failed in nopython mode pipeline (step: ...)":
    # the line after it says what failed.
    for ln in lines:
        if not ln.startswith("Failed in ") and not ln.startswith("During:"):
            return f"{kind}: {ln}"
    return f"{kind}: {lines[0]}" if lines else kind


class Worker:
    """A worker process compiling one Job; `outcome()` once it is `done()`."""

    def __init__(self, job: Job):
        payload = pickle.dumps(job)
        # Files, not pipes, for what it prints: a pipe nobody reads until the end
        # would stop a worker that prints much (numba's debug settings).
        self._output = tempfile.TemporaryFile()
        self._errors = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)],
            stdin=subprocess.PIPE, stdout=self._output, stderr=self._errors)
        try:
            self.proc.stdin.write(payload)
            self.proc.stdin.close()
        except OSError:            # it exited already: outcome() says how
            pass

    def done(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, timeout: Optional[float] = None) -> bool:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def outcome(self) -> Tuple[str, str]:
        """("compiled", ""), ("rejected", numba's reason), or ("crashed", what it
        printed last): a crash says nothing about the code, which then compiles in
        the calling process."""
        self.proc.wait()
        self._output.seek(0)
        lines = self._output.read().decode("utf-8", "replace").strip().splitlines()
        self._output.close()
        try:
            answer = json.loads(lines[-1]) if lines else {}
        except ValueError:
            answer = {}
        if self.proc.returncode == 0 and answer.get("ok"):
            result = ("compiled", "")
        elif self.proc.returncode == 0 and "rejected" in answer:
            result = ("rejected", str(answer["rejected"]))
        else:
            self._errors.seek(0)
            tail = self._errors.read().decode("utf-8", "replace").strip().splitlines()
            result = ("crashed", f"exit code {self.proc.returncode}" +
                      (f": {tail[-1]}" if tail else ""))
        self._errors.close()
        return result

    def stop(self) -> None:
        if not self.done():
            self.proc.kill()
        self.proc.wait()
        for stream in (self._output, self._errors):
            if not stream.closed:
                stream.close()


def compile_job(job: Job) -> None:
    """(In the worker.) Compile the job's functions into numba's disk cache."""
    import numba
    module = _imported(job, job.blas, {})
    for function, signature in job.signatures:
        numba.njit(**NJIT_OPTIONS)(getattr(module, function)).compile(signature)


def _imported(job, blas: bool, done: Dict[str, types.ModuleType]) -> types.ModuleType:
    """(In the worker.) The job's module (or a callee's), its callees' first, each with
    its names bound as the calling process bound them."""
    import numba

    from .numba_helpers import namespace
    names = namespace(blas, {name: importlib.import_module(module)
                             for name, module in job.modules.items()})
    for name, (callee, function) in job.callees.items():
        if callee.module_name not in done:
            done[callee.module_name] = _imported(callee, False, done)
        names[name] = numba.njit(**NJIT_OPTIONS)(getattr(done[callee.module_name],
                                                         function))
    return import_file(job.path, job.module_name, names, checked_module_text(job))


def main() -> int:
    from numba.core.errors import NumbaError
    job = pickle.loads(sys.stdin.buffer.read())
    try:
        compile_job(job)
    except NumbaError as exc:
        print(json.dumps({"rejected": summary(type(exc).__name__, str(exc))}))
        return 0
    print(json.dumps({"ok": True}))
    return 0


def _bare_packages() -> None:
    """s2sgrad and s2sgrad.backends as empty packages over their directories: the
    worker imports the numba helpers under their own names (numba's cache keys on
    them) without the package's compiler, rules and SciPy (0.4 s of its start)."""
    backends = os.path.dirname(os.path.abspath(__file__))
    for name, path in (("s2sgrad", os.path.dirname(backends)), ("s2sgrad.backends", backends)):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [path]
            sys.modules[name] = package


if __name__ == "__main__":       # run as a file by Worker: python .../numba_worker.py
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]           # this directory: its modules are not top-level ones
    _bare_packages()
    from s2sgrad.backends.numba_worker import main as worker_main
    sys.exit(worker_main())
