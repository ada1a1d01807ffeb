"""What the self-checks (s2sgrad.witness) cost on the benchmark workloads.

    python benchmarks/witness_cost.py [--only NAME ...]

For each workload, in one process: the gradient's time once compiled (median of
repeats), then the first call of a fresh `grad` with the witness on over the
same compiled pair, split into the forward-mode code's compile (done once per
function and process, cached like the pair) and the checks' run time (the user's
function once, the tangent code once, the adjoint once more); then a later call,
which runs no check. Ratios are in units of one gradient.
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time

os.environ.setdefault("S2SGRAD_CACHE", "0")   # compile times, not disk hits
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import s2sgrad  # noqa: E402
from s2sgrad.compiler import compile_jvp  # noqa: E402

# The benchmark's workloads (benchmarks/run.py), those with a gradient to check.
WORKLOADS = ["scalar_recurrence", "rnn", "mlp", "mlp_structured", "elementwise",
             "branchy_loop", "custom_softplus", "loop_beside_product"]


def _median(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, repeats: int = 7) -> dict:
    module = importlib.import_module(f"benchmarks.workloads.{name}")
    args = module.make_inputs()
    f, wrt = module.forward, tuple(module.WRT)
    plain = s2sgrad.grad(f, wrt=wrt, witness=False)
    plain(*args)                                    # compile the pair
    gradient = _median(lambda: plain(*args), repeats)
    start = time.perf_counter()
    try:
        compile_jvp(f, wrt)                         # what the witness compiles once
        jvp_compile = time.perf_counter() - start
    except s2sgrad.TransformError as exc:
        jvp_compile = float("nan")
        print(f"  {name}: forward mode refuses it ({exc.reason}); value witness only")
    checked = s2sgrad.grad(f, wrt=wrt, witness="always")
    first = _median(lambda: checked(*args), max(3, repeats // 2))
    later_grad = s2sgrad.grad(f, wrt=wrt, witness=True)
    later_grad(*args)
    later = _median(lambda: later_grad(*args), repeats)
    return {"name": name, "gradient": gradient, "jvp_compile": jvp_compile,
            "checks": first - gradient, "later": later}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", action="append", metavar="NAME")
    p.add_argument("--repeats", type=int, default=7)
    opts = p.parse_args(argv)
    names = opts.only or [w for w in WORKLOADS]
    head = (f"{'workload':<22} {'gradient':>10} {'checks (first call)':>22} "
            f"{'forward-mode compile':>21} {'later call':>12}")
    print(head)
    print("-" * len(head))
    for name in names:
        r = measure(name, opts.repeats)
        g = r["gradient"]
        print(f"{r['name']:<22} {g * 1e3:>8.2f}ms {r['checks'] * 1e3:>9.2f}ms "
              f"({r['checks'] / g:>4.2f}x grad) {r['jvp_compile'] * 1e3:>18.1f}ms "
              f"{r['later'] / g:>10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
