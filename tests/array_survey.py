"""Every case of the gradient table on another array library, against NumPy's gradient.

    python tests/array_survey.py [NAME ...]              # Dask; only rules matching NAME
    python tests/array_survey.py --library strict        # array_api_strict arrays

For each case of tests/rule_cases.py (SciPy's aside) the function
`np.sum(<case>)` is differentiated on NumPy arrays and on the same values as
Dask arrays of two chunks per axis (under a scheduler that records every
computation) or as arrays of the strict array API. Each case is one of:

  ok        the Dask gradient equals NumPy's and nothing was computed while it
            was built;
  computes  it equals NumPy's, but something was computed on the way (the
            places are listed: a condition on a value, usually);
  fails     an exception (Dask lacks the function or its chunking; the message
            says which);
  WRONG     it differs from NumPy's: a bug, the worst kind.

The last line is `SURVEY library=.. cases=N ok=.. computes=.. fails=.. wrong=..`.
"""
from __future__ import annotations

import collections
import importlib.util
import os
import sys
import tempfile
import traceback

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)

import dask  # noqa: E402
import dask.array as da  # noqa: E402
from rule_cases import CASES  # noqa: E402
from test_rules import _draw, _source  # noqa: E402

import s2sgrad  # noqa: E402


def _load(directory: str, index: int, source: str):
    name = f"dask_survey_case_{index}"
    path = os.path.join(directory, name + ".py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _chunked(a):
    if isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return da.from_array(a, chunks=tuple(max(1, (n + 1) // 2) for n in a.shape))
    return a


def _strict(a):
    import array_api_strict
    if isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return array_api_strict.asarray(a)
    return a


def _values(g):
    if hasattr(g, "compute"):
        return np.asarray(g.compute())
    if hasattr(type(g), "__array_namespace__") and not isinstance(g, np.ndarray):
        return np.asarray(g.__array_namespace__().asarray(g, copy=True))
    return np.asarray(g)


def survey(only=(), library="dask") -> collections.Counter:
    convert = _chunked if library == "dask" else _strict
    computed = []

    def recording(*args, **kwargs):
        frames = [f for f in traceback.extract_stack()[:-1] if "s2sgrad" in f.filename]
        where = frames[-1] if frames else None
        computed.append(f"{os.path.basename(where.filename)}:{where.lineno}" if where else "?")
        return dask.get(*args, **kwargs)

    rng = np.random.default_rng(0)
    totals: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="s2sgrad-dask-survey-") as directory:
        index = 0
        for name, cases in CASES.items():
            if only and not any(o in name for o in only):
                continue
            for k, (expr, specs) in enumerate(cases):
                if "scipy" in expr:
                    continue
                params = list(specs)
                args = [_draw(specs[p], rng) for p in params]
                wrt = tuple(i for i, p in enumerate(params)
                            if not (isinstance(specs[p], tuple) and specs[p] and
                                    specs[p][0] == "const"))
                if not wrt:
                    continue
                index += 1
                module = _load(directory, index, _source(params, f"np.sum({expr})"))
                try:
                    expected = s2sgrad.grad(module.f, wrt=wrt)(*args)
                except Exception:   # (a case that only runs inside a larger expression)
                    continue
                computed.clear()
                try:
                    with dask.config.set(scheduler=recording):
                        grads = s2sgrad.grad(module.f, wrt=wrt)(*[convert(a) for a in args])
                    places = list(computed)
                    same = all(np.allclose(_values(g), e, equal_nan=True)
                               for g, e in zip(grads, expected))
                except Exception as e:
                    status, detail = "fails", f"{type(e).__name__}: {str(e).splitlines()[0]}"
                else:
                    status = "ok" if same and not places else "computes" if same else "WRONG"
                    detail = ", ".join(f"{p} x{n}" for p, n in
                                       collections.Counter(places).most_common())
                totals[status] += 1
                if status != "ok":
                    print(f"{status:8s} {name} #{k}: {expr}  {detail[:160]}")
    return totals


def main() -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="only rules whose name contains one")
    parser.add_argument("--library", choices=("dask", "strict"), default="dask")
    opts = parser.parse_args()
    totals = survey(opts.names, opts.library)
    print(f"SURVEY library={opts.library} cases={sum(totals.values())} ok={totals['ok']} "
          f"computes={totals['computes']} fails={totals['fails']} wrong={totals['WRONG']}")
    return 1 if totals["WRONG"] else 0


if __name__ == "__main__":
    sys.exit(main())
