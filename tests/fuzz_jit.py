"""The fuzzer's programs under jit=True: numba's gradients against the NumPy backend's.

    python tests/fuzz_jit.py --n 60 --seed 1                 # outlined loops (the default)
    python tests/fuzz_jit.py --n 60 --seed 1 --plan always   # whole functions compiled
    python tests/fuzz_jit.py --n 60 --seed 1 --background    # built behind the first call

Each program of `tests/fuzz.py` (same --seed, same programs) runs with
`S2SGRAD_JIT_PLAN` set to --plan: `loops` outlines every function that loops
(numba runs the loops at every size, NumPy the code around them), `always`
compiles every function whole. For every argument, `grad(f, wrt=i, jit=True)`
is compared with `grad(f, wrt=i)`; the NumPy backend itself is checked
against finite differences by `tests/fuzz.py`. With --background, the first call
runs NumPy while a thread builds (and, with no disk cache, compiles) the variant
behind it, as by default outside the tests; `jit_wait` waits for it, and the
second call runs numba's code. A program is

  pass       the same gradients, and numba ran (the loops, or the whole function)
  numpy      numba did not run: the rewrite or the outline refused (no loop, a
             construct numba has no form for), with no warning or with one
  wrong      a gradient differs (beyond rounding), or a JitWarning says the
             compiled result differed from NumPy's (caught, but a bug)
  crashed    jit=True raised where the NumPy backend did not

The last line printed is `FUZZ-JIT programs=N pass=P numpy=M wrong=W crashed=C`.
Programs run in this process: one that corrupts memory (numba does not check
bounds) ends the run; `check_program(seed, index, directory)` reruns it alone.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


def _ran_numba(state) -> bool:
    return state is not None and any(v.failed is None and v.check is None
                                      for v in state.variants.values())


# Constructs the numba rewrite has no form for (lists, dicts, helpers, Functions): off,
# so that the programs exercise numba rather than its refusals; loops weigh more.
OFF = ("apply", "helper_call", "list_index", "for_list_literal",
       "for_list_var", "list_build", "nested_list", "list_append", "tuple_unpack",
       "multi_output_apply", "helper", "helper_default", "kwonly_helper", "kwonly_entry",
       "tuple_param_helper", "multi_return_helper", "list_param_helper",
       "list_return_helper", "struct_append", "struct_read", "list_extend", "dict",
       "dict_write", "dict_loop", "dict_iter", "comprehension", "builtin_reduce",
       "chained_assign", "struct_return_helper", "dict_return_helper",
       "pairs_param_helper", "dict_param_helper", "helper_relay", "struct_entry",
       "nested_entry", "item_write", "namedtuple", "derivative_call", "fancy_write",
       "aug_param", "einsum", "held_update", "closure_recursion", "masked_reduce",
       "ufunc_outer", "dict_zip", "stencil_update", "list_reorder",
       "dict_literal_loop", "dict_get", "early_return_apply",
       # helpers with no numba version yet: cdist, lstsq, SciPy's solvers, vander, polyfit,
       # fill_diagonal's index
       "lstsq", "distance", "scipy_solve", "polynomial", "fill_diagonal")
LOOPS = ("for_range", "for_array", "while")


def numba_weights(structures: bool = False) -> dict:
    """The fuzzer's weights for jit: the constructs numba has no form for off (kept
    with `structures`: lists, tuples and dicts of arrays then run numba through the
    views over their arrays or the NumPy backend, with its gradient, never a
    crash), loops weighing more."""
    import fuzz
    weights = dict(fuzz.FEATURES)
    for name in OFF:
        weights[name] = 0.0 if not structures or name == "einsum" else weights[name]
    for name in LOOPS:
        weights[name] *= 3
    return weights


def _same(got, want) -> bool:
    """Equal up to rounding, NaN where NaN is (structures leaf by leaf)."""
    import numpy as np

    import s2sgrad
    got_leaves, got_tree = s2sgrad.tree_flatten(got)
    want_leaves, want_tree = s2sgrad.tree_flatten(want)
    if got_tree != want_tree:
        return False
    for g, w in zip(got_leaves, want_leaves):
        g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        if g.shape != w.shape or not np.allclose(g, w, rtol=1e-7, atol=1e-9, equal_nan=True):
            return False
    return True


def _run_as(f, i: int, args) -> tuple:
    """(function, positions) jit=True runs for grad(f, wrt=i) on args: f's view over the
    arrays of the lists, tuples and dicts among them (compiler.aggregates), or f."""
    from s2sgrad.compiler import aggregates
    flat = aggregates.flattened(f, tuple(args))
    if flat is None or not flat.positions((i,)):
        return f, (i,)
    return flat.fn, flat.positions((i,))


def check_program(seed: int, index: int, workdir: str, structures: bool = False,
                  background: bool = False) -> tuple:
    """(status, detail) of one program (see the module's docstring); `structures`:
    with lists, tuples and dicts, differentiated too (see numba_weights);
    `background`: built behind the first call (S2SGRAD_JIT_BACKGROUND=1)."""
    import fuzz

    import s2sgrad
    from s2sgrad.backends import JitWarning, jit_wait, numba_backend
    src, kinds, _ = fuzz.generate(seed, index, 0, numba_weights(structures))
    modname = f"fzj_{seed}_{index}".replace("-", "m")
    path = os.path.join(workdir, modname + ".py")
    with open(path, "w") as fh:
        fh.write(src)
    module = fuzz.load_module(path, modname)
    args = fuzz.draw_inputs(kinds, seed, index, 0, 0)
    status, detail = "numpy", ""
    for i, value in enumerate(args):
        if fuzz.is_tree(value) and not structures:
            continue
        try:
            want = s2sgrad.grad(module.f, wrt=i)(*fuzz.copies(args))
        except Exception:  # noqa: BLE001 - refused or failing on NumPy: not jit's business
            return "numpy", "the NumPy backend refused"
        numba_backend.reset()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", JitWarning)
                got = s2sgrad.grad(module.f, wrt=i, jit=True)(*fuzz.copies(args))
                if background:
                    jit_wait(module.f)
                again = s2sgrad.grad(module.f, wrt=i, jit=True)(*fuzz.copies(args))
        except Exception as exc:  # noqa: BLE001
            return "crashed", f"{path} wrt={i}: {traceback.format_exception_only(exc)[-1]}"
        for w in caught:
            if "differs from the NumPy backend" in str(w.message) or "internal error" in \
                    str(w.message):
                return "wrong", f"{path} wrt={i}: {w.message}"
        for g in (got, again):
            if not _same(g, want):
                return "wrong", f"{path} wrt={i}: {g!r} != {want!r}"
        state = numba_backend.known_state(*_run_as(module.f, i, args))
        if _ran_numba(state):
            status = "pass"
        elif state is not None:
            detail = state.disabled or next((v.failed for v in state.variants.values()
                                             if v.failed), "no loop")
    sys.modules.pop(modname, None)
    return status, detail


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plan", choices=("loops", "always"), default="loops")
    parser.add_argument("--structures", action="store_true",
                        help="lists, tuples and dicts too (numba runs the views over their "
                             "arrays; the others run the NumPy backend)")
    parser.add_argument("--background", action="store_true",
                        help="the first call runs NumPy while a thread builds the variant")
    args = parser.parse_args(argv)
    os.environ["S2SGRAD_JIT_PLAN"] = args.plan
    os.environ["S2SGRAD_JIT_BACKGROUND"] = "1" if args.background else "0"
    os.environ["S2SGRAD_CACHE"] = "0"
    counts = {"pass": 0, "numpy": 0, "wrong": 0, "crashed": 0}
    reasons: dict = {}
    with tempfile.TemporaryDirectory() as workdir:
        for index in range(args.n):
            status, detail = check_program(args.seed, index, workdir, args.structures,
                                           args.background)
            counts[status] += 1
            if status == "numpy":
                reasons[detail[:90]] = reasons.get(detail[:90], 0) + 1
            if status in ("wrong", "crashed"):
                print(f"{status}: program {index}: {detail}")
    for why, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"  numpy x{count}: {why}")
    print("FUZZ-JIT programs={} {}".format(
        args.n, " ".join(f"{k}={v}" for k, v in counts.items())))
    return 1 if counts["wrong"] or counts["crashed"] else 0


if __name__ == "__main__":
    sys.exit(main())
