"""Record and compare the code s2sgrad generates, to prove a refactoring changed none.

    S2SGRAD_RECORD_CODEGEN=before.txt python -m pytest -q     # on the old commit
    S2SGRAD_RECORD_CODEGEN=after.txt python -m pytest -q      # on the new one
    python tests/codegen_record.py before.txt after.txt

Every text handed to `compile_emitted` (every forward/adjoint pair, tangent and
derived function made in the session, before it is compiled) is recorded, with
the random parts of temporary module names blanked. The comparison is of the
multisets of texts: it prints the texts only one side made and exits with 1 when
there are any. The benchmark workloads and examples are recorded too
(--workloads FILE), outside pytest.
"""
from __future__ import annotations

import atexit
import collections
import hashlib
import os
import re
import sys
from typing import List

_RANDOM = re.compile(r"[0-9a-f]{32}|_[0-9a-f]{8}(?=\b|_)|#\d+|pytest-\d+|"
                     r"/tmp/[^'\"]*?/(?=[^/'\"]+\.py)")
_SEPARATOR = "\n\x1e\n"


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def normalised(text: str) -> str:
    """text with the random parts of temporary paths and names, and the checkout's
    own path, blanked (generated code quotes the user's file in its error text)."""
    return _RANDOM.sub("*", text.replace(_ROOT, "<root>"))


def install(path: str) -> None:
    """Wrap compile_emitted wherever s2sgrad's modules imported it."""
    import importlib
    texts: List[str] = []
    original = None
    for where in ("s2sgrad.compiler.loader", "s2sgrad.compiler.emit"):
        try:
            module = importlib.import_module(where)
        except ImportError:
            continue
        original = getattr(module, "compile_emitted", None)
        if original is not None:
            break
    if original is None:
        raise RuntimeError("compile_emitted not found: update tests/codegen_record.py")

    def recording(emitted, *args, **kwargs):
        texts.append(normalised(emitted.source))
        return original(emitted, *args, **kwargs)
    for name, module in list(sys.modules.items()):
        if name.startswith("s2sgrad") and getattr(module, "compile_emitted", None) is original:
            module.compile_emitted = recording

    def write():
        with open(path, "w") as f:
            f.write(_SEPARATOR.join(texts))
    atexit.register(write)


def read(path: str) -> collections.Counter:
    with open(path) as f:
        data = f.read()
    # Blanked again: a recording made before a pattern was added compares too.
    return collections.Counter(normalised(t) for t in data.split(_SEPARATOR) if t)


def record_workloads(path: str) -> None:
    """The generated code of every benchmark workload and example, in order."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, root)
    import importlib

    import s2sgrad
    folder = os.path.join(root, "benchmarks", "workloads")
    texts = []
    for name in sorted(f[:-3] for f in os.listdir(folder)
                       if f.endswith(".py") and not f.startswith("_")):
        w = importlib.import_module(f"benchmarks.workloads.{name}")
        fn = getattr(w, w.FUNCTION)
        texts.append(normalised(s2sgrad.source(fn, wrt=tuple(w.WRT))))
    with open(path, "w") as f:
        f.write(_SEPARATOR.join(texts))


def compare(before: str, after: str) -> int:
    a, b = read(before), read(after)
    only_a, only_b = a - b, b - a
    for label, side in (("only before", only_a), ("only after", only_b)):
        for text, n in sorted(side.items()):
            digest = hashlib.sha256(text.encode()).hexdigest()[:12]
            print(f"--- {label} ({n}x, {digest}) ---\n{text}\n")
    print(f"CODEGEN before={sum(a.values())} after={sum(b.values())} "
          f"only_before={sum(only_a.values())} only_after={sum(only_b.values())}")
    return 1 if only_a or only_b else 0


def main(argv: List[str]) -> int:
    if len(argv) == 2 and argv[0] == "--workloads":
        record_workloads(argv[1])
        return 0
    if len(argv) != 2:
        print(__doc__)
        return 2
    return compare(*argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

