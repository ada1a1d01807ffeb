#!/usr/bin/env python
"""Benchmark s2sgrad's gradients against a hand-written NumPy adjoint and the peers.

    python benchmarks/run.py                  # every workload (a few minutes)
    python benchmarks/run.py --quick          # fewer repeats, under a minute
    python benchmarks/run.py --only rnn,mlp --impl hand,s2sgrad --json out.json

Every implementation's gradient is first checked against the hand-written
adjoint; a mismatch is reported on stderr and its cell says WRONG instead of a
time. See the "Benchmarks" section of README.md for how to read the table.
"""
# Pin one thread before anything imports numpy, jax or torch: these variables
# are read once, when the libraries load.
import os
import sys

XLA_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
PINNED_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "JAX_PLATFORMS": "cpu",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "S2SGRAD_CACHE": "0",          # first-call times are cold compiles, never disk hits
}


def _pin_threads() -> None:
    already = [m for m in ("numpy", "jax", "torch") if m in sys.modules]
    for key, value in PINNED_ENV.items():
        os.environ[key] = value
    flags = os.environ.get("XLA_FLAGS", "")
    if XLA_THREAD_FLAGS not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " + XLA_THREAD_FLAGS).strip()
    if already and os.environ.get("_S2SGRAD_BENCH_REEXEC") != "1":
        # Imported too late to pin (e.g. run through runpy): start again, pinned.
        os.environ["_S2SGRAD_BENCH_REEXEC"] = "1"
        os.execv(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:])


_pin_threads()

import argparse  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from typing import Any, Callable, List, Optional  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import s2sgrad  # noqa: E402
import s2sgrad.compiler  # noqa: E402

WORKLOADS = [
    "scalar_recurrence", "rnn", "mlp", "mlp_structured", "elementwise", "branchy_loop",
    "custom_softplus", "loop_beside_product",
    "stencil", "lstm_helper", "rk4", "rk4_checkpoint", "attention", "gmm",
    "softmax_regression",
    "seed_square", "seed_cube", "seed_add_mul", "seed_exp_reducer", "seed_adder",
]

# (column name, builder attribute in the workload module); "forward", "hand" and
# "s2sgrad" are built here, the peers by the workload.
IMPLS = [
    ("forward", None),
    ("hand", None),
    ("s2sgrad", None),
    ("s2sgrad-jit", None),
    ("autograd", "grad_autograd"),
    ("jax-eager", "grad_jax_eager"),
    ("jax-jit", "grad_jax_jit"),
    ("jax-lax", "grad_jax_lax"),
    ("torch", "grad_torch"),
]
NUMPY_BASED = {"forward", "hand", "s2sgrad", "autograd"}   # tracemalloc sees their arrays
PEER_MODULES = {"s2sgrad-jit": "numba", "autograd": "autograd", "jax-eager": "jax",
                "jax-jit": "jax", "jax-lax": "jax", "torch": "torch"}

# In --quick mode, these (workload, impl) cells are skipped: for jax-jit, JAX traces
# the Python loop and XLA compiles it unrolled (10 s to a minute); JAX eager takes
# seconds per call on the 1000-step scalar loop.
QUICK_SKIP = {("scalar_recurrence", "jax-jit"): "slow unrolled compile",
              ("branchy_loop", "jax-jit"): "slow unrolled compile",
              ("custom_softplus", "jax-jit"): "slow unrolled compile",
              ("loop_beside_product", "jax-jit"): "slow unrolled compile",
              ("scalar_recurrence", "jax-eager"): "seconds per call"}

RTOL = 1e-6
ATOL = 1e-9     # relative to the largest entry of the hand-written gradient


@dataclass
class Settings:
    min_time: float      # a repeat runs the call this long (number of calls chosen to fit)
    repeats: int         # repeats; the median of their per-call times is reported
    budget: float        # seconds one cell may spend in timing repeats (fewer repeats if slow)
    quick: bool


FULL = Settings(min_time=0.2, repeats=7, budget=8.0, quick=False)
QUICK = Settings(min_time=0.01, repeats=3, budget=0.6, quick=True)


@dataclass
class Cell:
    workload: str
    impl: str
    status: str = "ok"            # ok | WRONG | unsupported | not installed | error | skipped
    message: str = ""
    median_s: Optional[float] = None
    min_s: Optional[float] = None
    times_s: List[float] = field(default_factory=list)
    calls_per_repeat: int = 0
    vs_hand: Optional[float] = None
    vs_forward: Optional[float] = None
    first_call_s: Optional[float] = None
    compiled_after_s: Optional[float] = None     # s2sgrad-jit: until compiled code ran
    peak_bytes: Optional[int] = None
    mem_vs_hand: Optional[float] = None
    max_abs_err: Optional[float] = None


# --- measuring ------------------------------------------------------------------

def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def time_call(fn: Callable[[], Any]) -> tuple:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


@dataclass
class Plan:
    """How one implementation is timed: `number` calls per repeat, `repeats` repeats."""
    fn: Callable[[], Any]
    cell: "Cell"
    number: int
    repeats: int
    times: List[float]


def calibrate(fn: Callable[[], Any], cell: "Cell", settings: Settings) -> Plan:
    """timeit-style: choose the calls per repeat (>= min_time) and the repeats (budget)."""
    one, _ = time_call(fn)                      # warm-up, and a first estimate
    number = max(1, int(settings.min_time / max(one, 1e-9)))
    repeats = settings.repeats
    times = []
    if number == 1:
        times.append(one)                       # a slow call: the warm-up is a sample too
        repeats -= 1
    if one * number * repeats > settings.budget:
        least = 0 if settings.quick else 2
        repeats = max(least, int(settings.budget / (one * number)))
    if not times and repeats == 0:
        repeats = 1
    return Plan(fn, cell, number, repeats, times)


def run_plans(plans: List[Plan]) -> None:
    """Time the implementations of a workload in turns, one repeat each per round.

    Interleaving the repeats means a burst of load from other processes falls
    on every implementation alike, so the ratios between them stay fair.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(max((p.repeats for p in plans), default=0)):
            for p in plans:
                if r >= p.repeats:
                    continue
                fn, number = p.fn, p.number
                start = time.perf_counter()
                for _ in range(number):
                    fn()
                p.times.append((time.perf_counter() - start) / number)
    finally:
        if gc_was_enabled:
            gc.enable()
    for p in plans:
        p.cell.median_s = statistics.median(p.times)
        p.cell.min_s = min(p.times)
        p.cell.times_s = p.times
        p.cell.calls_per_repeat = p.number


def peak_memory(fn: Callable[[], Any]) -> int:
    """Peak bytes allocated during one call, above what was allocated before it."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del result
    return max(0, peak - base)


def to_numpy(value: Any) -> Any:
    if hasattr(value, "detach"):                 # torch
        return value.detach().cpu().numpy()
    if isinstance(value, (float, int)):
        return float(value)
    return np.asarray(value)


def as_tuple(grads: Any) -> tuple:
    """The gradients' leaves in order: structured parameters (a list of (W, b)
    tuples) are compared leaf by leaf."""
    return tuple(s2sgrad.tree_leaves(grads))


def compare(got: Any, ref: tuple) -> tuple:
    """(ok, message, max abs error) comparing a gradient tuple with the hand-written one."""
    got = tuple(to_numpy(g) for g in as_tuple(got))
    if len(got) != len(ref):
        return False, f"{len(got)} gradients, expected {len(ref)}", None
    worst = 0.0
    problems = []
    for i, (g, r) in enumerate(zip(got, ref)):
        if np.shape(g) != np.shape(r):
            problems.append(f"gradient {i} has shape {np.shape(g)}, expected {np.shape(r)}")
            continue
        g64 = np.asarray(g, dtype=np.float64)
        r64 = np.asarray(r, dtype=np.float64)
        scale = max(1.0, float(np.max(np.abs(r64)))) if r64.size else 1.0
        err = float(np.max(np.abs(g64 - r64))) if r64.size else 0.0
        worst = max(worst, err)
        if not np.allclose(g64, r64, rtol=RTOL, atol=ATOL * scale):
            bad = np.abs(g64 - r64) > ATOL * scale + RTOL * np.abs(r64)
            problems.append(f"gradient {i}: max abs error {err:.3g} "
                            f"({int(np.sum(bad))} of {r64.size} entries beyond "
                            f"rtol={RTOL:g}, atol={ATOL:g}*{scale:.3g})")
    return not problems, "; ".join(problems), worst


def shout(text: str) -> None:
    bar = "!" * 78
    print(f"\n{bar}\n{text}\n{bar}", file=sys.stderr, flush=True)


# --- the implementations of one workload ------------------------------------------

def s2sgrad_runner(module, args, jit: bool = False) -> Callable[[], Any]:
    """s2sgrad on the workload's plain forward, as a user calls it (jit=True: numba)."""
    if hasattr(module, "cotangent"):
        v = module.cotangent(args)

        def run():
            _, pullback = s2sgrad.vjp(module.forward, *args, wrt=module.WRT, jit=jit)
            return pullback(v)
        return run
    g = s2sgrad.grad(module.forward, wrt=module.WRT, jit=jit)
    return lambda: g(*args)


def jit_first_call(fn: Callable[[], Any]) -> tuple:
    """The first s2sgrad-jit call, cold, and how long until compiled code ran: (first
    call's seconds, seconds from its start to the end of the first call after
    numba's worker finished -- the call that loads the machine code -- or None when
    the plan leaves the calls to NumPy, result). A JitWarning (numba failed where
    jit_plan chose it) is an error; a call the plan leaves to NumPy is timed like any
    other."""
    import tempfile
    import warnings
    from unittest import mock

    from s2sgrad.backends import JitWarning, jit_wait, reset
    s2sgrad.compiler.clear_cache()
    reset()                                    # no compiled variant from an earlier run
    # numba's worker compiles a module file: a disk cache, empty (cold), as by default
    with tempfile.TemporaryDirectory(prefix="s2sgrad-bench-jit-") as tmp, \
            mock.patch.dict(os.environ, S2SGRAD_CACHE="1", S2SGRAD_CACHE_DIR=tmp), \
            warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        first, result = time_call(fn)
        started = time.perf_counter()
        jit_wait()
        fn()
        ready = first + time.perf_counter() - started
    return first, ready, result


def jit_warm_first_call(name: str) -> Optional[float]:
    """The jit first call in a new process that finds the numba code of an earlier
    process in the disk cache (S2SGRAD_CACHE_DIR): the second of two fresh runs."""
    import tempfile
    code = ("import sys, time; sys.path.insert(0, %r)\n"
            "import numpy, s2sgrad, numba\n"
            "from benchmarks.workloads import %s as w\n"
            "args = w.make_inputs()\n"
            "g = s2sgrad.grad(w.forward, wrt=w.WRT, jit=True)\n"
            "t0 = time.perf_counter(); g(*args); print(time.perf_counter() - t0)\n"
            "from s2sgrad.backends import jit_wait; jit_wait()  # the worker's code on disk\n"
            % (ROOT, name))
    with tempfile.TemporaryDirectory(prefix="s2sgrad-bench-jit-") as tmp:
        env = dict(os.environ, S2SGRAD_CACHE="1", S2SGRAD_CACHE_DIR=tmp)
        seconds = None
        for _ in range(2):
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                  text=True, env=env, timeout=600)
            if proc.returncode != 0:
                return None
            seconds = float(proc.stdout.strip().splitlines()[-1])
        return seconds


def jit_compiled(module) -> bool:
    """Whether numba's code ran for the workload (else the plan left it to NumPy)."""
    from s2sgrad.backends.numba_backend import known_state
    state = known_state(module.forward, tuple(module.WRT))
    return state is not None and any(v.failed is None and (v.check is None or v.vjp_checked)
                                     for v in state.variants.values())


def build(module, impl: str, attr: Optional[str], args) -> Callable[[], Any]:
    if impl == "forward":
        return lambda: module.forward(*args)
    if impl == "hand":
        return lambda: module.hand_grad(*args)
    if impl == "s2sgrad":
        return s2sgrad_runner(module, args)
    if impl == "s2sgrad-jit":
        import numba  # noqa: F401 - imported before timing, as the peers are by their builders
        return s2sgrad_runner(module, args, jit=True)
    return getattr(module, attr)(args)


def run_workload(name: str, settings: Settings, impls: List[str]) -> List[Cell]:
    module = importlib.import_module(f"benchmarks.workloads.{name}")
    args = module.make_inputs()
    cells: List[Cell] = []
    plans: List[Plan] = []
    ref = None
    for impl, attr in IMPLS:
        if impl not in impls and impl not in ("forward", "hand"):
            continue
        if attr is not None and not hasattr(module, attr):
            continue                               # e.g. jax-lax only where there is a loop
        cell = Cell(name, impl)
        cells.append(cell)
        if settings.quick and (name, impl) in QUICK_SKIP:
            cell.status = "skipped"
            cell.message = f"skipped (--quick: {QUICK_SKIP[name, impl]})"
            continue
        peer = PEER_MODULES.get(impl)
        if peer is not None and importlib.util.find_spec(peer) is None:
            cell.status, cell.message = "not installed", "not installed"
            continue
        try:
            fn = build(module, impl, attr, args)
        except ImportError as exc:
            cell.status, cell.message = "not installed", f"not installed ({first_line(exc)})"
            continue
        except Exception as exc:  # noqa: BLE001 - reported in the table
            cell.status, cell.message = "error", "error: " + first_line(exc)
            continue
        if impl == "s2sgrad":
            s2sgrad.compiler.clear_cache()         # a cold compile (and S2SGRAD_CACHE=0)
        try:
            if impl == "s2sgrad-jit":
                cell.first_call_s, ready, result = jit_first_call(fn)
                cell.compiled_after_s = ready if jit_compiled(module) else None
            else:
                cell.first_call_s, result = time_call(fn)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            if impl == "s2sgrad-jit" and type(exc).__name__ == "JitWarning":
                cell.status, cell.message = "unsupported", "NumPy fallback: " + first_line(exc)
            elif impl.startswith("s2sgrad"):
                cell.status, cell.message = "unsupported", "unsupported: " + first_line(exc)
            else:
                cell.status, cell.message = "error", "error: " + first_line(exc)
            continue
        if impl == "hand":
            ref = tuple(to_numpy(g) for g in as_tuple(result))
        elif impl != "forward":
            if ref is None:
                cell.status, cell.message = "error", "error: no hand-written gradient to check"
                continue
            ok, why, worst = compare(result, ref)
            cell.max_abs_err = worst
            if not ok:
                cell.status, cell.message = "WRONG", "WRONG"
                shout(f"WRONG GRADIENT: {name} / {impl} disagrees with the hand-written "
                      f"adjoint:\n{why}")
                continue
        del result
        plans.append(calibrate(fn, cell, settings))
    run_plans(plans)
    by_impl = {p.cell.impl: p for p in plans}
    for p in plans:
        if p.cell.impl in NUMPY_BASED:
            p.cell.peak_bytes = peak_memory(p.fn)
    forward = by_impl.get("forward")
    hand = by_impl.get("hand")
    for p in plans:
        c = p.cell
        if c.impl == "forward":
            continue
        if hand is not None:
            c.vs_hand = c.median_s / hand.cell.median_s
            if c.peak_bytes is not None and hand.cell.peak_bytes:
                c.mem_vs_hand = c.peak_bytes / hand.cell.peak_bytes
        if forward is not None:
            c.vs_forward = c.median_s / forward.cell.median_s
    return cells


# --- reporting --------------------------------------------------------------------

def twin_ratios(cells: List[Cell], names: List[str]) -> List[str]:
    """For a workload written as another with structured arguments (FLAT_TWIN), each
    implementation's time over its time on the flat twin."""
    lines = []
    for name in names:
        twin = getattr(importlib.import_module(f"benchmarks.workloads.{name}"),
                       "FLAT_TWIN", None)
        if twin is None or twin not in names:
            continue
        for c in cells:
            if c.workload != name or c.status != "ok" or c.impl in ("forward", "hand"):
                continue
            flat = next((f for f in cells if f.workload == twin and f.impl == c.impl and
                         f.status == "ok"), None)
            if flat is not None:
                lines.append(f"{name} / {twin} ({c.impl}): "
                             f"{c.median_s / flat.median_s:.3f}x the flat arguments' time")
    return lines


def jit_summary(cells: List[Cell], names: List[str]) -> List[str]:
    """jit=True against the NumPy backend and against jax.jit, per workload: gradient
    time, first call, and what jit_plan decided (numba, or NumPy) for the inputs."""
    from s2sgrad.backends import jit_plan
    rows = [("workload", "jit decided", "jit/NumPy", "jit/jax.jit", "first: jit",
             "compiled after", "cache warm", "first: jax.jit", "jit/jax.jit first",
             "compiled/jax.jit first")]
    for name in names:
        got = {c.impl: c for c in cells if c.workload == name and c.status == "ok"}
        jit = got.get("s2sgrad-jit")
        if jit is None:
            continue
        module = importlib.import_module(f"benchmarks.workloads.{name}")
        try:
            plan = jit_plan(module.forward, *module.make_inputs(), wrt=module.WRT,
                            vjp=hasattr(module, "cotangent"))   # timed through vjp
            decided = "numba" if plan.compile else \
                "numba loops, NumPy around" if plan.outlined else "NumPy"
        except Exception as exc:  # noqa: BLE001 - shown in the table
            decided = "error: " + first_line(exc)
        numpy_cell, jax_cell = got.get("s2sgrad"), got.get("jax-jit")

        def ratio(a, b):
            return fmt_ratio(a / b) if a is not None and b else "-"
        compiled = jit.compiled_after_s
        warm = jit_warm_first_call(name) if compiled and not hasattr(module, "cotangent") \
            else None
        jax_first = jax_cell.first_call_s if jax_cell else None
        rows.append((name, decided,
                     ratio(jit.median_s, numpy_cell and numpy_cell.median_s),
                     ratio(jit.median_s, jax_cell and jax_cell.median_s),
                     fmt_time(jit.first_call_s), fmt_time(compiled), fmt_time(warm),
                     fmt_time(jax_first), ratio(jit.first_call_s, jax_first),
                     ratio(compiled, jax_first)))
    if len(rows) == 1:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["jit=True (numba) against the NumPy backend and jax.jit (gradient time; first "
             "call: cold, the NumPy backend's result while a worker process compiles; "
             "'compiled after': from the first call's start until a call ran the compiled "
             "code (the worker's compile, and the call that loads its machine code); 'cache "
             "warm': the first call of a new process that finds the numba code on disk):"]
    for k, r in enumerate(rows):
        lines.append("  ".join(f"{v:<{w}}" if i < 2 else f"{v:>{w}}"
                               for i, (v, w) in enumerate(zip(r, widths))).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def fmt_time(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_ratio(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}x" if x < 100 else f"{x:.0f}x"


def fmt_bytes(n: Optional[int], ratio: Optional[float], impl: str) -> str:
    if n is None:
        return "n/a" if impl not in NUMPY_BASED else "-"
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            text = f"{n / scale:.3g} {unit}"
            break
    else:
        text = f"{n} B"
    return text + (f" ({ratio:.2g}x)" if ratio is not None else "")


HEADER = ("workload", "impl", "median", "vs hand", "grad/fwd", "first call", "peak mem (vs hand)")


def table(cells: List[Cell]) -> str:
    rows = []
    last = None
    for c in cells:
        label = c.workload if c.workload != last else ""
        last = c.workload
        if c.status == "ok":
            rows.append((label, c.impl, fmt_time(c.median_s), fmt_ratio(c.vs_hand),
                         fmt_ratio(c.vs_forward), fmt_time(c.first_call_s),
                         fmt_bytes(c.peak_bytes, c.mem_vs_hand, c.impl)))
        else:
            rows.append((label, c.impl, c.message))
    widths = [max(len(HEADER[i]), *(len(r[i]) for r in rows if len(r) > 3 and i < len(r)))
              for i in range(len(HEADER))]
    widths[0] = max(widths[0], *(len(r[0]) for r in rows))
    widths[1] = max(widths[1], *(len(r[1]) for r in rows))

    def line(r):
        if len(r) == 3:                         # a message spans the number columns
            return f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]}"
        parts = [f"{r[0]:<{widths[0]}}", f"{r[1]:<{widths[1]}}"]
        parts += [f"{v:>{w}}" for v, w in zip(r[2:], widths[2:])]
        return "  ".join(parts).rstrip()
    out = [line(HEADER), "  ".join("-" * w for w in widths)]
    last = None
    for r, c in zip(rows, cells):
        if last is not None and c.workload != last:
            out.append("")
        last = c.workload
        out.append(line(r))
    return "\n".join(out)


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                "s2sgrad"], cwd=ROOT, text=True, capture_output=True,
                               timeout=10).stdout.strip()
        return head + (" (s2sgrad/ has uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for row in f:
                if row.startswith("model name"):
                    return row.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions() -> dict:
    found = {"python": platform.python_version(), "numpy": np.__version__,
             "s2sgrad": f"{s2sgrad.__version__} @ {git_commit()}"}
    for name in ("numba", "autograd", "jax", "jaxlib", "torch"):
        if importlib.util.find_spec(name) is None:
            found[name] = "not installed"
            continue
        try:
            from importlib.metadata import version
            found[name] = version(name)
        except Exception:  # noqa: BLE001
            found[name] = "installed"
    return found


def load_average() -> Optional[float]:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def environment() -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "load_average": load_average(),
            "threads": {k: os.environ.get(k) for k in
                        ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                         "XLA_FLAGS")},
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")}


# --- main ---------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="fewer, shorter repeats (and no unrolled jax-jit on long loops)")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="run only these workloads (comma-separated or repeated)")
    p.add_argument("--impl", action="append", metavar="NAME",
                   help="time only these implementations (forward and hand always run); "
                        "names: " + ", ".join(i for i, _ in IMPLS[2:]))
    p.add_argument("--json", metavar="FILE", help="also save the results as JSON")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    return p.parse_args(argv)


def split_names(values) -> List[str]:
    return [n.strip() for v in values or () for n in v.split(",") if n.strip()]


def main(argv=None) -> int:
    opts = parse_args(argv)
    if opts.list:
        for name in WORKLOADS:
            module = importlib.import_module(f"benchmarks.workloads.{name}")
            print(f"{name:<18} {module.TITLE}  ({module.__name__.split('.')[-1]}.py:"
                  f"{module.FUNCTION})")
        return 0
    names = split_names(opts.only) or WORKLOADS
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        print(f"unknown workload(s): {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}",
              file=sys.stderr)
        return 2
    impls = split_names(opts.impl) or [i for i, _ in IMPLS]
    known = {i for i, _ in IMPLS}
    if any(i not in known for i in impls):
        print(f"unknown implementation(s); choose from {', '.join(sorted(known))}",
              file=sys.stderr)
        return 2
    settings = QUICK if opts.quick else FULL
    info = {"versions": versions(), "environment": environment(),
            "settings": asdict(settings)}
    v, e = info["versions"], info["environment"]
    print(f"s2sgrad benchmarks{' (--quick)' if settings.quick else ''}: "
          f"{e['cpu']}, {e['cores']} cores, one thread; float64")
    print("  " + ", ".join(f"{k} {val}" for k, val in v.items()))
    print(f"  median of up to {settings.repeats} repeats of >= {settings.min_time:g} s each; "
          f"'vs hand' = time / hand-written adjoint's; 'grad/fwd' = time / NumPy forward's")
    busy = e["load_average"]
    if busy is not None and busy > 0.5:
        print(f"  note: load average {busy} before starting: other processes share the "
              f"{e['cores']} cores, so timings are noisier than on an idle machine")
    print(flush=True)
    started = time.perf_counter()
    cells: List[Cell] = []
    for name in names:
        t0 = time.perf_counter()
        cells.extend(run_workload(name, settings, impls))
        print(f"  ... {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr,
              flush=True)
    print(table(cells))
    twins = twin_ratios(cells, names)
    if twins:
        print("\n" + "\n".join(twins))
    jits = jit_summary(cells, names)
    if jits:
        print("\n" + "\n".join(jits))
    wrong = [c for c in cells if c.status == "WRONG"]
    print(f"\n{len(cells)} cells in {time.perf_counter() - started:.0f} s", end="")
    print(f"; {len(wrong)} WRONG: " + ", ".join(f"{c.workload}/{c.impl}" for c in wrong)
          if wrong else "")
    if opts.json:
        info["environment"]["load_average_after"] = load_average()
        with open(opts.json, "w") as f:
            json.dump({**info, "results": [asdict(c) for c in cells]}, f, indent=1)
        print(f"saved {opts.json}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
