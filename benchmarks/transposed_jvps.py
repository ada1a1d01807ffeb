"""Forward mode's JVP templates against the JVP derived from the VJP (issue 33).

    python benchmarks/transposed_jvps.py [--repeat 20] [--only solve,sort]

Every rule has a VJP; forward mode can take its transpose (reverse mode of the VJP
in g, compiler/tangent/transposed.py), so a rule needs no JVP of its own. The
table still carries hand-written JVP templates for decompositions, solvers, sorts
and statistics. This measures, at sizes a user meets, `functional.jvp` with the
shipped template and with the template removed (the transpose), best of --repeat
calls each, and their ratio: the measurement that says whether a template earns
its place. Run pinned to one core (`taskset -c 0`).
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from s2sgrad import functional  # noqa: E402
from s2sgrad.rules import jvp_rules  # noqa: E402

# name: (rule, the function's body over `a`, the array)
CASES = {
    "solve": ("np.linalg.solve", "np.linalg.solve(a, B200)", lambda r: _spd(200, r)),
    "cholesky": ("np.linalg.cholesky", "np.linalg.cholesky(a)", lambda r: _spd(200, r)),
    "slogdet": ("np.linalg.slogdet", "np.linalg.slogdet(a)[1]", lambda r: _spd(200, r)),
    "eigh": ("np.linalg.eigh", "np.linalg.eigh(a)[1]", lambda r: _spd(100, r)),
    "svd": ("np.linalg.svd", "np.linalg.svd(a, full_matrices=False)[0]",
            lambda r: r.standard_normal((120, 60))),
    "qr": ("np.linalg.qr", "np.linalg.qr(a)[1]", lambda r: r.standard_normal((200, 80))),
    "pinv": ("np.linalg.pinv", "np.linalg.pinv(a)", lambda r: r.standard_normal((120, 60))),
    "lstsq": ("np.linalg.lstsq", "np.linalg.lstsq(a, B300, rcond=None)[0]",
              lambda r: r.standard_normal((300, 50))),
    "sort": ("np.sort", "np.sort(a, axis=1)", lambda r: r.standard_normal((100, 1000))),
    "cumprod": ("np.cumprod", "np.cumprod(a, axis=1)",
                lambda r: r.uniform(0.9, 1.1, (200, 100))),
    "quantile": ("np.quantile", "np.quantile(a, 0.3, axis=1)",
                 lambda r: r.standard_normal((200, 101))),
    "cov": ("np.cov", "np.cov(a)", lambda r: r.standard_normal((50, 1000))),
    "logsumexp": ("scipy.special.logsumexp", "scipy.special.logsumexp(a, axis=1)",
                  lambda r: r.standard_normal((1000, 100))),
    "cdist": ("scipy.spatial.distance.cdist", "scipy.spatial.distance.cdist(a, P200)",
              lambda r: r.standard_normal((300, 3))),
    "solve_triangular": ("scipy.linalg.solve_triangular",
                         "scipy.linalg.solve_triangular(a, B200, lower=True)",
                         lambda r: np.tril(r.standard_normal((200, 200))) + 20 * np.eye(200)),
}
_MODULE = """
import numpy as np
import scipy.linalg
import scipy.spatial.distance
import scipy.special

_RNG = np.random.default_rng(0)
B200 = _RNG.standard_normal((200, 10))
B300 = _RNG.standard_normal((300, 4))
P200 = _RNG.standard_normal((200, 3))


def f(a):
    return {body}
"""
_COUNT = itertools.count()


def _spd(n, rng):
    m = rng.standard_normal((n, n))
    return m @ m.T + n * np.eye(n)


def _function(body: str, where: str):
    """f in a module of its own (a new file each time: no compiled code is shared)."""
    name = f"transposed_jvp_case_{next(_COUNT)}"
    path = os.path.join(where, name + ".py")
    with open(path, "w") as fh:
        fh.write(_MODULE.format(body=body))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


def _best(fn, x, v, repeat):
    tangent = functional.jvp(fn, x, v)[1]       # (compiles)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        functional.jvp(fn, x, v)
        best = min(best, time.perf_counter() - start)
    return best, tangent


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--only", default="", help="comma-separated case names")
    args = p.parse_args(argv)
    only = [c for c in args.only.split(",") if c]
    print(f"{'function':18s} {'template (ms)':>14s} {'transpose (ms)':>15s} {'ratio':>7s}")
    where = tempfile.mkdtemp(prefix="s2sgrad-transposed-")
    for name, (rule, body, make) in CASES.items():
        if only and name not in only:
            continue
        rng = np.random.default_rng(1)
        x = make(rng)
        v = rng.standard_normal(x.shape)
        template, t_tangent = _best(_function(body, where), x, v, args.repeat)
        spec = jvp_rules._SPECS.pop(rule)
        jvp_rules._BUILT.clear()
        try:
            transposed, d_tangent = _best(_function(body, where), x, v, args.repeat)
        finally:
            jvp_rules._SPECS[rule] = spec
            jvp_rules._BUILT.clear()
        agree = np.allclose(t_tangent, d_tangent, rtol=1e-6, atol=1e-8)
        print(f"{name:18s} {template * 1e3:14.3f} {transposed * 1e3:15.3f} "
              f"{transposed / template:6.2f}x" + ("" if agree else "  (tangents DIFFER)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
