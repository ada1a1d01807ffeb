#!/usr/bin/env python
"""Where jit=True should hand over to NumPy: jit time over NumPy-backend time by size.

    python benchmarks/jit_sizes.py                    # every family (a few minutes)
    python benchmarks/jit_sizes.py elementwise rnn    # some of them

Each family is one benchmark workload (or a one-layer network) at growing array
sizes; each row times s2sgrad.grad with jit=True forced to compile
(S2SGRAD_JIT_PLAN=always) and on the NumPy backend, best of a few calls,
one thread, float64. The limits in s2sgrad/backends/jit_policy.py come from
these tables: a loop family is compiled below LOOP_LIMIT elements, elementwise
code (fused into one loop) at every size, other straight-line code below
STRAIGHT_LIMIT (and never when it multiplies matrices). The last column is what
jit=True does by default at that size.
"""
import os
import sys

for _key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_key] = "1"
os.environ["S2SGRAD_CACHE"] = "0"

import time  # noqa: E402
import warnings  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import s2sgrad  # noqa: E402
from benchmarks.workloads import branchy_loop, custom_softplus, elementwise, rnn  # noqa: E402


def one_layer(W, X):
    return np.sum(np.tanh(X @ W) ** 2)


def families(rng):
    """name -> [(size, function, wrt, args)]: the largest array's size first."""
    out = {"elementwise": [], "one_layer": [], "branchy": [], "softplus": [], "rnn": []}
    for n in (10, 100, 1_000, 10_000, 100_000, 1_000_000):
        out["elementwise"].append((n, elementwise.forward, (0,), (rng.standard_normal(n),)))
    for n in (4, 8, 32, 128, 512):
        W, X = rng.standard_normal((n, n)), rng.standard_normal((64, n))
        out["one_layer"].append((max(W.size, X.size), one_layer, (0,), (W, X)))
    for n in (10, 100, 1_000, 10_000, 100_000):
        args = (rng.standard_normal(n), rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, n), 20)
        out["branchy"].append((n, branchy_loop.forward, (0, 1, 2), args))
    for n in (10, 100, 1_000, 10_000, 100_000):
        args = (rng.standard_normal(n), rng.uniform(-1.5, 1.5, n), rng.standard_normal(n),
                rng.standard_normal((20, n)))
        out["softplus"].append((20 * n, custom_softplus.forward, (1, 2), args))
    for h in (16, 64, 256, 1024):
        args = (rng.standard_normal((h, h)) * 0.9 / np.sqrt(h), rng.standard_normal((h, 8)),
                rng.standard_normal(h) * 0.1, rng.standard_normal((20, 8)),
                rng.standard_normal(h))
        out["rnn"].append((h * h, rnn.forward, (0, 1, 2), args))
    return out


def best_time(f, args, budget: float = 0.3) -> float:
    f(*args)
    best, count, start = float("inf"), 0, time.perf_counter()
    while time.perf_counter() - start < budget or count < 3:
        t0 = time.perf_counter()
        f(*args)
        best = min(best, time.perf_counter() - t0)
        count += 1
    return best


def main(argv) -> int:
    from s2sgrad.backends import JitWarning, jit_policy, numba_backend
    chosen = argv or None
    print("family       largest array   NumPy backend      jit (forced)   jit/NumPy  "
          "default")
    for name, rows in families(np.random.default_rng(0)).items():
        if chosen and name not in chosen:
            continue
        for size, fn, wrt, args in rows:
            numpy_grad = s2sgrad.grad(fn, wrt=wrt)
            jit_grad = s2sgrad.grad(fn, wrt=wrt, jit=True)
            os.environ["S2SGRAD_JIT_PLAN"] = "always"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", JitWarning)
                    jit_grad(*args)
                t_jit = best_time(jit_grad, args)
            finally:
                del os.environ["S2SGRAD_JIT_PLAN"]
            t_numpy = best_time(numpy_grad, args)
            facts = numba_backend.state_for(fn, wrt).facts
            largest = jit_policy.largest_array(args)
            default = "numba" if jit_policy.decide(facts, largest, force="").compile \
                else "NumPy"
            print(f"{name:<12} {size:>13,}  {t_numpy * 1e6:>11.1f} us  {t_jit * 1e6:>11.1f} us"
                  f"  {t_jit / t_numpy:>9.2f}  {default}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
