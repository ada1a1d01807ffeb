"""How much the caches save: first call, disk-cache load, in-memory hit.

    python benchmarks/cache_timing.py [--repeat 5]

For each seed example and for a 60-line function (benchmarks/cache_workload.py),
every measurement runs in a fresh Python process that has already imported
NumPy, s2sgrad and the user's module, and times one `compile_function` call:

- first call: empty cache directory -- parse, all passes, code generation,
  `compile()`, and writing the disk entry;
- disk load: a new process finding the entry written before -- the key, the
  checks on the entry and its dependencies, unmarshalling the code object and
  binding its closure. The child replaces the passes with a function that
  raises, so a disk load that ran them would fail;
- memory hit: the same process asking again (median of many calls).

Each figure is the median over --repeat processes, first calls and disk
loads taking turns. The script exits with 1 when, for the 60-line function, a
disk load is not at least 10x faster than the first call (for the two-line
examples both are a few milliseconds of fixed cost: their ratio is shown, not
checked).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(ROOT, "examples")

TARGETS = [
    ("square.loss", os.path.join(EXAMPLES, "square.py"), "loss", (0,)),
    ("cube.loss", os.path.join(EXAMPLES, "cube.py"), "loss", (0,)),
    ("add_mul.loss", os.path.join(EXAMPLES, "add_mul.py"), "loss", (0, 1)),
    ("exp_reducer", os.path.join(EXAMPLES, "exp_reducer.py"), "exp_reducer", (0,)),
    ("adder", os.path.join(EXAMPLES, "adder.py"), "adder", (0, 1)),
    ("rnn_loss (60 lines)", os.path.join(HERE, "cache_workload.py"), "rnn_loss", (0, 1, 2, 3)),
]


def child(mode: str, path: str, func: str, wrt: tuple) -> dict:
    """Runs in the subprocess: import everything, then time one compile."""
    import importlib.util

    import s2sgrad.compiler as compiler
    sys.path.insert(0, os.path.dirname(path))
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    fn = getattr(module, func)
    if mode == "load":
        def passes_must_not_run(*args, **kwargs):
            raise AssertionError("the disk cache missed: the passes ran")
        compiler.driver.run_passes = passes_must_not_run
    t0 = time.perf_counter()
    compiler.compile_function(fn, wrt)
    first = time.perf_counter() - t0
    hits = []
    for _ in range(50):
        t0 = time.perf_counter()
        for _ in range(100):
            compiler.compile_function(fn, wrt)
        hits.append((time.perf_counter() - t0) / 100)
    return {"seconds": first, "hit": statistics.median(hits)}


def run_child(mode: str, path: str, func: str, wrt: tuple, cache_dir: str) -> dict:
    env = dict(os.environ, S2SGRAD_CACHE_DIR=cache_dir, S2SGRAD_CACHE="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, path,
                           func, ",".join(map(str, wrt))],
                          capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} run of {func} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def source_lines(path: str, func: str) -> int:
    import ast
    with open(path) as f:
        tree = ast.parse(f.read())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func)
    return node.end_lineno - node.lineno + 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="processes per figure")
    parser.add_argument("--child", nargs=4, metavar=("MODE", "PATH", "FUNC", "WRT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, path, func, wrt = args.child
        print(json.dumps(child(mode, path, func, tuple(int(i) for i in wrt.split(",")))))
        return 0

    print(f"Python {sys.version.split()[0]}, {args.repeat} fresh processes per figure "
          f"(median)\n")
    head = (f"{'function':<22}{'lines':>6}{'first call':>13}{'disk load':>12}"
            f"{'memory hit':>13}{'first/disk':>12}")
    print(head)
    print("-" * len(head))
    ok = True
    with tempfile.TemporaryDirectory(prefix="s2sgrad-bench-") as tmp:
        for label, path, func, wrt in TARGETS:
            firsts, loads, hits = [], [], []
            warm = os.path.join(tmp, "warm-" + func + label.split(".")[0])
            run_child("first", path, func, wrt, warm)  # writes the entry
            for r in range(args.repeat):  # taking turns: load on the machine hits both
                cold = os.path.join(tmp, f"cold-{func}-{label.split('.')[0]}-{r}")
                firsts.append(run_child("first", path, func, wrt, cold)["seconds"])
                result = run_child("load", path, func, wrt, warm)
                loads.append(result["seconds"])
                hits.append(result["hit"])
            first, load, hit = (statistics.median(x) for x in (firsts, loads, hits))
            ratio = first / load
            if source_lines(path, func) >= 10:
                ok &= ratio >= 10
            print(f"{label:<22}{source_lines(path, func):>6}{first * 1e3:>10.2f} ms"
                  f"{load * 1e3:>9.2f} ms{hit * 1e6:>10.1f} us{ratio:>11.0f}x")
    print("\nfirst call: transform + compile + store; disk load: a new process reading the "
          "entry;\nmemory hit: the same process asking again.")
    if not ok:
        print("FAILED: a disk load of the 60-line function is less than 10x faster than "
              "its first call")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
