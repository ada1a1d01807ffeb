"""jit=True decides per call what numba compiles and what it leaves to NumPy.

The rule (s2sgrad/backends/jit_policy.py) is checked on its own at its limits;
then on real functions: the decision, that a call left to NumPy builds no numba
variant and warns nothing, and that every gradient, compiled or not, agrees
with central differences (two shapes each, one broadcasting).
"""
import ast
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from conftest import numeric_grad, numeric_vjp

import s2sgrad
from s2sgrad.backends import JitWarning, jit_plan, numba_backend, numba_load
from s2sgrad.backends.jit_policy import (
    LOOP_LIMIT,
    LOOP_PRODUCT_LIMIT,
    STRAIGHT_LIMIT,
    VJP_MIN_OPERATIONS,
    CodeFacts,
    code_facts,
    decide,
    largest_array,
)


def smooth(x, y):
    return np.sum(np.sin(x) * np.exp(-x * x) + np.tanh(x * y))


def layer(W, X):
    return np.sum(np.tanh(X @ W) ** 2)


def recurrence(v, a, steps):
    for _ in range(steps):
        v = np.tanh(v * a) + 0.1 * v
    return np.sum(v * v)


def rnn(W, b, xs):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = np.tanh(W @ h + x + b)
    return np.sum(h * h)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("S2SGRAD_JIT_PLAN", raising=False)
    numba_backend.reset()
    yield
    numba_backend.reset()


def _variants(fn, wrt):
    return numba_backend.state_for(fn, wrt).variants


def _jit_grad_checked(fn, args, wrt):
    """jit=True's gradient, with no JitWarning, against central differences."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        grads = s2sgrad.grad(fn, wrt=wrt, jit=True)(*args)
    grads = grads if isinstance(grads, tuple) else (grads,)
    for i, g in zip(wrt, grads):
        np.testing.assert_allclose(g, numeric_grad(fn, list(args), i), rtol=1e-6, atol=1e-7)
    return grads


# -- the rule -------------------------------------------------------------------------
@pytest.mark.parametrize("facts, limit", [
    (CodeFacts(loops=3), LOOP_LIMIT),
    (CodeFacts(loops=3, products=True), LOOP_PRODUCT_LIMIT),
    (CodeFacts(), STRAIGHT_LIMIT),
])
def test_compiled_below_the_limit_numpy_from_it(facts, limit):
    assert decide(facts, limit - 1).compile
    assert not decide(facts, limit).compile
    assert not decide(facts, 10 * limit).compile
    assert decide(facts, 1).compile


def test_straight_line_matrix_products_are_left_to_blas_at_every_size():
    facts = CodeFacts(products=True)
    for size in (1, 16, 10 ** 6):
        plan = decide(facts, size)
        assert not plan.compile and "matrix products" in plan.reason


def test_the_reasons_name_the_facts_decided_on():
    plan = decide(CodeFacts(loops=12), 50)
    assert plan.compile and "line 12" in plan.reason and "50 elements" in plan.reason
    plan = decide(CodeFacts(), 2_000_000)
    assert not plan.compile and "2,000,000 elements" in plan.reason


def test_the_environment_forces_either_way(monkeypatch):
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")
    assert decide(CodeFacts(products=True), 10 ** 7).compile
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "numpy")
    assert not decide(CodeFacts(loops=1), 1).compile


def test_largest_array_looks_into_tuples_and_counts_numbers_as_one():
    assert largest_array([1.0, np.zeros(3)]) == 3
    assert largest_array([(np.zeros((4, 5)), [np.zeros(2)]), 2.0]) == 20
    assert largest_array([2.0]) == 1
    assert largest_array([]) == 0


def test_code_facts_finds_loops_and_products_in_the_code_and_its_callees():
    def facts_of(src, callees=()):
        return code_facts([ast.parse(src).body[0]], callees)
    plain = facts_of("def f(x):\n    return np.sin(x) * 2\n")
    assert not plain.has_loops and not plain.products and plain.operations == 2
    assert facts_of("def f(x):\n    for i in range(3):\n        x = x + 1\n    return x\n"
                    ).has_loops
    assert facts_of("def f(x):\n    while x < 3:\n        x = x + 1\n    return x\n"
                    ).has_loops
    assert facts_of("def f(a, b):\n    return a @ b\n").products
    assert facts_of("def f(a, b):\n    return np.dot(a, b)\n").products
    assert facts_of("def f(a, b):\n    return _s2s_unbroadcast_matmul(a, a, b)\n").products
    inherited = facts_of("def f(x):\n    return g(x)\n",
                         [CodeFacts(loops=0, products=True, operations=5)])
    assert inherited.has_loops and inherited.products and inherited.operations == 6


def test_short_straight_line_code_under_vjp_is_left_to_numpy():
    short = CodeFacts(operations=VJP_MIN_OPERATIONS - 1)
    assert decide(short, 10).compile                 # grad: one compiled call
    plan = decide(short, 10, vjp=True)               # vjp: the forward runs twice
    assert not plan.compile and "under vjp" in plan.reason
    assert decide(CodeFacts(operations=VJP_MIN_OPERATIONS), 10, vjp=True).compile
    assert decide(CodeFacts(loops=1, operations=3), 10, vjp=True).compile


# -- on real functions ---------------------------------------------------------------
@pytest.mark.parametrize("shapes", [((2000,), (2000,)), ((50, 40), (40,))])
def test_large_straight_line_code_runs_numpy_without_a_warning(shapes):
    rng = np.random.default_rng(0)
    args = tuple(rng.standard_normal(s) for s in shapes)
    plan = jit_plan(smooth, *args, wrt=(0, 1))
    assert not plan.compile and "straight-line" in plan.reason
    _jit_grad_checked(smooth, args, (0, 1))
    assert not _variants(smooth, (0, 1))          # numba built nothing


@pytest.mark.parametrize("shapes", [((7,), (7,)), ((3, 4), (4,))])
def test_small_straight_line_code_is_compiled(shapes):
    rng = np.random.default_rng(1)
    args = tuple(rng.standard_normal(s) for s in shapes)
    assert jit_plan(smooth, *args, wrt=(0, 1)).compile
    _jit_grad_checked(smooth, args, (0, 1))
    assert any(v.fused is not None for v in _variants(smooth, (0, 1)).values())


@pytest.mark.parametrize("n", [4, 30])
def test_a_matrix_product_without_a_loop_is_left_to_numpy(n):
    rng = np.random.default_rng(2)
    args = (rng.standard_normal((n, n)) / n, rng.standard_normal((5, n)))
    assert not jit_plan(layer, *args, wrt=(0, 1)).compile
    _jit_grad_checked(layer, args, (0, 1))
    assert not _variants(layer, (0, 1))


@pytest.mark.parametrize("n, compiled", [(10, True), (LOOP_LIMIT, False)])
def test_loops_are_compiled_unless_their_arrays_are_large(n, compiled):
    rng = np.random.default_rng(3)
    v, a = rng.standard_normal(n), rng.uniform(0.5, 1.5, n)
    plan = jit_plan(recurrence, v, a, 5, wrt=(0, 1))
    assert plan.compile is compiled and "loops" in plan.reason
    if compiled:
        _jit_grad_checked(recurrence, (v, a, 5), (0, 1))
    else:   # finite differences over 1e5 elements would be slow: against the NumPy backend
        with warnings.catch_warnings():
            warnings.simplefilter("error", JitWarning)
            got = s2sgrad.grad(recurrence, wrt=(0, 1), jit=True)(v, a, 5)
        want = s2sgrad.grad(recurrence, wrt=(0, 1))(v, a, 5)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        assert not _variants(recurrence, (0, 1))
        small = (v[:6], a[:6], 5)
        for i, w in zip((0, 1), s2sgrad.grad(recurrence, wrt=(0, 1))(*small)):
            np.testing.assert_allclose(w, numeric_grad(recurrence, list(small), i),
                                       rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("hidden, compiled", [(6, True), (101, False)])
def test_loops_with_matrix_products_have_the_lower_limit(hidden, compiled):
    rng = np.random.default_rng(4)
    args = (rng.standard_normal((hidden, hidden)) * 0.5 / np.sqrt(hidden),
            rng.standard_normal(hidden) * 0.1, rng.standard_normal((3, hidden)))
    plan = jit_plan(rnn, *args, wrt=(0, 1))
    assert plan.compile is compiled and "matrix products" in plan.reason
    _jit_grad_checked(rnn, args, (0, 1))
    assert bool(_variants(rnn, (0, 1))) is compiled


def test_the_decision_is_made_per_call_as_sizes_change():
    rng = np.random.default_rng(5)
    small = (rng.standard_normal(5), rng.standard_normal(5))
    large = (rng.standard_normal(1500), rng.standard_normal(1500))
    g = s2sgrad.grad(smooth, wrt=(0, 1), jit=True)
    for args in (small, large, small):
        got = g(*args)
        for i, gi in zip((0, 1), got):
            np.testing.assert_allclose(gi, numeric_grad(smooth, list(args), i),
                                       rtol=1e-6, atol=1e-7)
    assert len(_variants(smooth, (0, 1))) == 1     # one compiled variant, for the small


@pytest.mark.parametrize("n", [3000, 8])
def test_vjp_follows_the_same_decision(n):
    rng = np.random.default_rng(6)
    args = (rng.standard_normal(n), rng.standard_normal(n))
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        out, pullback = s2sgrad.vjp(smooth, *args, wrt=(0, 1), jit=True)
        grads = pullback(2.0)
    np.testing.assert_allclose(out, smooth(*args), rtol=1e-12)
    for i, g in zip((0, 1), grads):
        np.testing.assert_allclose(g, numeric_vjp(smooth, list(args), 2.0, i),
                                   rtol=1e-6, atol=1e-6)
    plan = jit_plan(smooth, *args, wrt=(0, 1), vjp=True)
    assert bool(_variants(smooth, (0, 1))) is plan.compile is (n < STRAIGHT_LIMIT)


def test_forcing_compilation_compiles_large_calls(monkeypatch):
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "always")
    rng = np.random.default_rng(7)
    args = (rng.standard_normal(1200), rng.standard_normal(1200))
    assert jit_plan(smooth, *args, wrt=(0, 1)).compile
    _jit_grad_checked(smooth, args, (0, 1))
    assert _variants(smooth, (0, 1))


def test_without_numba_only_calls_meant_for_numba_warn(monkeypatch):
    monkeypatch.setattr(numba_load, "_NUMBA", [None, "ImportError: No module named 'numba'"])
    rng = np.random.default_rng(8)
    large = (rng.standard_normal(1500), rng.standard_normal(1500))
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        s2sgrad.grad(smooth, wrt=(0, 1), jit=True)(*large)     # NumPy by decision: silent
    small = (rng.standard_normal(4), rng.standard_normal(4))
    with pytest.warns(JitWarning, match="numba"):
        got = s2sgrad.grad(smooth, wrt=(0, 1), jit=True)(*small)
    for i, g in zip((0, 1), got):
        np.testing.assert_allclose(g, numeric_grad(smooth, list(small), i), rtol=1e-6,
                                   atol=1e-7)
    plan = jit_plan(smooth, *small, wrt=(0, 1))
    assert not plan.compile and "numba" in plan.reason


def test_a_call_left_to_numpy_does_not_even_import_numba(tmp_path):
    # The first call of a NumPy-decided function pays no numba import. (A sum along
    # an axis: straight-line code that is not all elementwise, left to NumPy when large.)
    script = tmp_path / "big.py"
    script.write_text(
        "import sys\nimport numpy as np\nimport s2sgrad\n\n"
        "def f(x):\n    return np.sum(np.sin(x) * x, axis=0)\n\n"
        "x = np.linspace(0.0, 1.0, 5000)\n"
        "g = s2sgrad.grad(f, jit=True)(x)\n"
        "assert np.allclose(g, np.sin(x) + x * np.cos(x))\n"
        "print('numba' in sys.modules)\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "S2SGRAD_CACHE": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# -- s2sgrad show --jit ------------------------------------------------------------------
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ELEMENTWISE = os.path.join(ROOT, "benchmarks", "workloads", "elementwise.py") + \
    ":elementwise_loss"


def _cli(*argv, **env):
    return subprocess.run([sys.executable, "-m", "s2sgrad", *argv], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=dict(os.environ, **env))


def test_show_jit_prints_the_rule_and_for_shapes_the_decision_and_code(tmp_path):
    target = ELEMENTWISE
    rule = _cli("show", target, "--jit")
    assert rule.returncode == 0, rule.stderr
    assert "elementwise code" in rule.stdout and "every size" in rule.stdout
    assert f"{STRAIGHT_LIMIT:,}" in rule.stdout        # for arrays other than float64
    small = _cli("show", target, "--jit", "--shape", "x=20")
    assert small.returncode == 0, small.stderr
    assert "compiled by numba" in small.stdout
    assert "def elementwise_loss_nb_fused(x):" in small.stdout
    assert "at the first call (S2SGRAD_JIT_BACKGROUND=0)" in small.stdout   # (conftest)
    behind = _cli("show", target, "--jit", "--shape", "x=20", S2SGRAD_JIT_BACKGROUND="1")
    assert "in a worker process" in behind.stdout, behind.stderr
    large = _cli("show", target, "--jit", "--shape", "x=200000")
    assert large.returncode == 0, large.stderr
    assert "compiled by numba" in large.stdout and "fuse into one loop" in large.stdout
    assert "for i in range(start, stop):" in large.stdout    # the fused loop, in blocks
    # straight-line code that is not all elementwise (a max) stays with NumPy when large
    source = tmp_path / "peak.py"
    source.write_text("import numpy as np\n\n\ndef peak(x):\n"
                      "    return np.max(np.sin(x)) + np.sum(x * x)\n")
    rule = _cli("show", f"{source}:peak", "--jit")
    assert "straight-line code" in rule.stdout and f"{STRAIGHT_LIMIT:,}" in rule.stdout
    large = _cli("show", f"{source}:peak", "--jit", "--shape", "x=200000")
    assert large.returncode == 0, large.stderr
    assert "left to NumPy" in large.stdout and "200,000 elements" in large.stdout
    assert "def " not in large.stdout


def test_show_jit_refuses_what_it_cannot_combine_with_one_line():
    target = ELEMENTWISE
    for argv in (("--shape", "x=3"), ("--jit", "--order", "2"),
                 ("--jit", "--shape", "y=3")):
        result = _cli("show", target, *argv)
        assert result.returncode == 2, (argv, result.stdout)
        assert "Traceback" not in result.stderr
        assert result.stderr.strip().count("\n") == 0, result.stderr


@pytest.mark.parametrize("shapes", [((200, 50), (300, 200)), ((300, 1), (200, 300))])
def test_a_function_the_plan_leaves_to_numpy_runs_the_numpy_backend_itself(
        monkeypatch, shapes):
    """Once the pair's layout says every grad call runs NumPy (a straight-line matrix
    product), jit=True's calls are the NumPy backend's, without the numba backend's
    per-call work (binding, sizes, variants): its entry is not called again."""
    numba_backend.reset()
    rng = np.random.default_rng(5)
    W, X = (rng.standard_normal(s) / 10 for s in shapes)
    g = s2sgrad.grad(layer, (0, 1), jit=True)
    first = g(W, X)
    state = numba_backend.known_state(layer, (0, 1))
    if state.behind is not None:
        state.behind.join()
    assert numba_backend.numpy_only(state) and not numba_backend.numpy_only(None)

    def refused(*args, **kwargs):
        raise AssertionError("the numba backend's entry ran")
    monkeypatch.setattr(numba_backend.JitFunction, "value_and_grad", refused)
    got = g(W, X)
    for a, b in zip(first, got):
        np.testing.assert_allclose(b, a, rtol=1e-12)
    small = (W[:4, :1], X[:3, :4])
    for i, gi in enumerate(g(*small)):
        np.testing.assert_allclose(gi, numeric_grad(layer, list(small), i), rtol=1e-6,
                                   atol=1e-8)
