"""What `import s2sgrad` costs, as a whole process, against `import numpy`.

    python benchmarks/import_time.py [--repeats N]

Each statement runs in a fresh interpreter (`python -c ...`), N times; the
median wall time of each is reported, with the bare interpreter's for scale,
and the ratio s2sgrad / numpy (issue 35 asks for at most 2). The first run of
each writes the bytecode caches, as a user's first import does; it is left out.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def median_seconds(statement: str, repeats: int) -> float:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # a user's import reads .pyc files
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, "-c", statement]
    subprocess.run(command, env=env, check=True)   # (writes the bytecode caches)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args(argv)
    bare = median_seconds("pass", args.repeats)
    numpy = median_seconds("import numpy", args.repeats)
    ours = median_seconds("import s2sgrad", args.repeats)
    print(f"python -c pass           {bare * 1e3:7.1f} ms")
    print(f"python -c 'import numpy'   {numpy * 1e3:7.1f} ms")
    print(f"python -c 'import s2sgrad' {ours * 1e3:7.1f} ms")
    print(f"s2sgrad / numpy: {ours / numpy:.2f}x (goal: at most 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
