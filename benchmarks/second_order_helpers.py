"""Second derivatives through the table's helpers, which the compiler differentiates
from their source (issue 33, "one source of the mathematics").

    python benchmarks/second_order_helpers.py [--repeat 20]

For one reduction, linear-algebra or gather function each, prints the first call of
`functional.hvp` (which compiles the gradient and its tangent, helpers included) and
the best of --repeat calls of `functional.hvp` (forward over reverse) and
`functional.vhp` (reverse over reverse). Run it on two commits, pinned to one core
(`taskset -c 0`), to compare derived helpers with hand-written second-order rules.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from s2sgrad import functional  # noqa: E402

CASES = {
    "var": (lambda x: np.sum(np.var(x, axis=0) ** 2), (200, 50)),
    "prod": (lambda x: np.sum(np.sin(np.prod(x, axis=1))), (200, 8)),
    "norm": (lambda x: np.sum(np.linalg.norm(x, axis=1) ** 3), (500, 20)),
    "det": (lambda x: np.linalg.det(x + 5 * np.eye(6)), (6, 6)),
    "max": (lambda x: np.sum(np.max(x, axis=1) ** 2), (500, 20)),
    "stack": (lambda x: np.sum(np.stack([x, x * x]) ** 3), (200, 20)),
    "cumprod": (lambda x: np.sum(np.cumprod(0.5 + 0.1 * x, axis=1)), (100, 10)),
    "take": (lambda x: np.sum(np.take(x, [0, 2, 2, 5], axis=1) ** 3), (200, 10)),
    "sort": (lambda x: np.sum(np.sort(x, axis=1) ** 3 * np.arange(10.0)), (200, 10)),
    "median": (lambda x: np.sum(np.median(x * x, axis=1) ** 2), (200, 11)),
    "svdvals": (lambda x: np.sum(np.linalg.svd(x, compute_uv=False) ** 3), (6, 4)),
    "diff": (lambda x: np.sum(np.diff(x, axis=1) ** 3), (200, 10)),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'function':10s} {'first (ms)':>11s} {'hvp (us)':>10s} {'vhp (us)':>10s}")
    for name, (f, shape) in CASES.items():
        x, v = rng.standard_normal(shape), rng.standard_normal(shape)
        start = time.perf_counter()
        functional.hvp(f, x, v)
        first = time.perf_counter() - start
        hvp = vhp = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            functional.hvp(f, x, v)
            hvp = min(hvp, time.perf_counter() - start)
            start = time.perf_counter()
            functional.vhp(f, x, v)
            vhp = min(vhp, time.perf_counter() - start)
        print(f"{name:10s} {first * 1e3:11.1f} {hvp * 1e6:10.1f} {vhp * 1e6:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
