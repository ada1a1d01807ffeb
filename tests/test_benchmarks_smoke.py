"""The benchmark workloads' hand-written adjoints are right (the oracle of benchmarks/run.py).

Each workload module is imported and its hand-written gradient is compared
with central finite differences of its plain NumPy forward, on reduced sizes.
Nothing is timed here and no peer library (autograd, jax, torch) is needed.
"""
import copy
import importlib
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, numeric_vjp

WORKLOADS = ["scalar_recurrence", "rnn", "mlp", "mlp_structured", "elementwise",
             "branchy_loop",
             "custom_softplus", "loop_beside_product", "seed_square", "seed_cube", "seed_add_mul",
             "seed_exp_reducer", "seed_adder",
             "stencil", "lstm_helper", "rk4", "rk4_checkpoint", "attention", "gmm",
             "softmax_regression"]


def load(name):
    return importlib.import_module(f"benchmarks.workloads.{name}")


def test_the_runner_knows_every_workload():
    files = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "benchmarks", "workloads"))
                   if f.endswith(".py") and not f.startswith("_"))
    assert files == sorted(WORKLOADS)
    spec = importlib.util.spec_from_file_location(
        "_bench_run_names", os.path.join(ROOT, "benchmarks", "run.py"))
    source = open(spec.origin).read()
    for name in WORKLOADS:
        assert f'"{name}"' in source


@pytest.mark.parametrize("name", WORKLOADS)
def test_hand_written_adjoint_matches_finite_differences(name):
    module = load(name)
    for attr in ("NAME", "TITLE", "FUNCTION", "WRT", "forward", "make_inputs", "hand_grad"):
        assert hasattr(module, attr), attr
    assert module.NAME == name
    assert getattr(module, module.FUNCTION) is module.forward
    args = module.make_inputs(small=True)
    before = copy.deepcopy(args)
    grads = module.hand_grad(*args)
    import s2sgrad
    for a, b in zip(s2sgrad.tree_leaves(args), s2sgrad.tree_leaves(before)):
        np.testing.assert_array_equal(a, b)  # the adjoint must not touch its inputs
    assert isinstance(grads, tuple) and len(grads) == len(module.WRT)
    v = module.cotangent(args) if hasattr(module, "cotangent") else 1.0
    for g, i in zip(grads, module.WRT):
        if isinstance(args[i], (list, tuple, dict)):   # structured: leaf by leaf, raveled
            vector, unravel = s2sgrad.ravel(args[i])

            def flat(x, i=i, unravel=unravel):
                return module.forward(*args[:i], unravel(x), *args[i + 1:])
            expected = numeric_vjp(flat, [vector], v, 0)
            np.testing.assert_allclose(s2sgrad.ravel(g)[0], expected, rtol=1e-6, atol=1e-7,
                                       err_msg=f"{name}: gradient of argument {i}")
            continue
        expected = numeric_vjp(module.forward, list(args), v, i)
        assert np.shape(g) == np.shape(args[i])
        np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-7,
                                   err_msg=f"{name}: gradient of argument {i}")


def test_full_size_inputs_are_float64():
    for name in WORKLOADS:
        for a in load(name).make_inputs():
            if isinstance(a, np.ndarray):
                assert a.dtype == np.float64, name


def test_workloads_do_not_import_the_peers():
    """autograd, jax and torch are optional: importing a workload must not load them."""
    code = ("import sys\n"
            + "".join(f"import benchmarks.workloads.{n}\n" for n in WORKLOADS)
            + "import benchmarks.peers\n"
            + "print(sorted(m for m in ('autograd', 'jax', 'torch') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("index", [0, 1])
def test_hvp_benchmark_products_match_finite_differences_of_the_gradient(index):
    """benchmarks/hvp.py times functional.hvp and vhp on the MLP and RNN: their
    values are H v, checked against central differences of s2sgrad.grad."""
    import s2sgrad
    from benchmarks import hvp
    from s2sgrad import functional
    name, fn, weights = hvp.cases(small=True)[index]
    rng = np.random.default_rng(1)
    vs = tuple(rng.standard_normal(np.shape(w)) for w in weights)
    wrt = tuple(range(len(weights)))
    grad = s2sgrad.grad(fn, wrt=wrt)
    eps = 1e-6
    plus = grad(*[w + eps * v for w, v in zip(weights, vs)])
    minus = grad(*[w - eps * v for w, v in zip(weights, vs)])
    expected = [(p - m) / (2 * eps) for p, m in zip(plus, minus)]
    for product in (functional.hvp, functional.vhp):
        out, hv = product(fn, weights, vs)
        np.testing.assert_allclose(out, fn(*weights), rtol=1e-12)
        for got, want in zip(hv, expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_the_jit_summary_reports_the_first_call_and_when_compiled_code_ran(tmp_path):
    """benchmarks/run.py's jit rows: the first call (NumPy, while a worker compiles)
    and 'compiled after' (the worker, and the call that loads its machine code)
    are both figures, the compiled code being checked, not a NumPy fallback."""
    pytest.importorskip("numba")
    env = dict(os.environ, S2SGRAD_CACHE_DIR=str(tmp_path), S2SGRAD_JIT_BACKGROUND="1")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"),
                          "--quick", "--only", "scalar_recurrence",
                          "--impl", "s2sgrad,s2sgrad-jit"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("workload") and
                "compiled after" in ln)
    row = lines[head + 2].split()
    assert row[:2] == ["scalar_recurrence", "numba"], lines[head:head + 3]
    first, compiled = _seconds(row, 4), _seconds(row, 5)
    # The first call ran NumPy: the worker (a Python with numba, and its compile)
    # came after it. Compiled at the first call, the two would be one call apart.
    assert 0 < first and compiled - first > 0.1, row


def _seconds(row, index):
    """The index-th column of a summary row split at spaces (a time, '12 ms', joined
    and in seconds)."""
    figures = []
    k = 0
    while k < len(row) - 1:
        scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}.get(row[k + 1])
        if scale is not None:
            figures.append(float(row[k]) * scale)
            k += 2
        else:
            figures.append(row[k])
            k += 1
    return figures[index]
