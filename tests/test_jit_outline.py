"""jit=True per loop: numba runs a function's loops, NumPy the code around them.

`s2sgrad/backends/numba_outline.py` cuts grad's fused function around its
loops; the first tests check that pass alone (what moves, what must stay, what
makes a function not outlined). The rest run functions the per-function rule
leaves to NumPy (a large matrix product next to a loop over a small vector)
and check the gradients against the NumPy backend and central differences,
and what ran (numba's loops, or the NumPy loops for large arrays) through the
backend's state.
"""
import ast
import textwrap
import warnings

import numpy as np
import pytest
from conftest import numeric_grad
from test_jit import pendulum, rnn, while_loop  # the numba backend's own loop cases

import s2sgrad
from benchmarks.workloads.branchy_loop import branchy
from s2sgrad.backends import (
    JitWarning,
    jit_plan,
    jit_policy,
    jit_source,
    numba_backend,
    numba_variants,
)
from s2sgrad.backends import numba_outline as outline
from s2sgrad.backends.numba_rewrite import Unsupported


# -- the pass alone --------------------------------------------------------------------
def _fn(src: str) -> ast.FunctionDef:
    return ast.parse(textwrap.dedent(src)).body[0]


def _cut(src: str, barred=()) -> outline.Outlined:
    fn = _fn(src)
    return outline.outline(fn, fn, "f", set(barred))


def _lines(fn: ast.FunctionDef) -> list:
    return [ast.unparse(s) for s in fn.body]


def test_split_calls_gives_nested_calls_statements_of_their_own_in_order():
    fn = _fn("""
        def f(C, h):
            r = np.sum(C) + np.sum(np.tanh(h))
            s = np.dot(np.exp(C), h)
            return r + s
        """)
    split = outline.split_calls(fn, {"C", "h", "r", "s"})
    assert _lines(split) == ["sum_C = np.sum(C)", "tanh_h = np.tanh(h)",
                             "sum_tanh_h = np.sum(tanh_h)", "r = sum_C + sum_tanh_h",
                             "exp_C = np.exp(C)", "s = np.dot(exp_C, h)", "return r + s"]
    # a statement with a call that is not pure (a method) is left as it is: its calls
    # keep their order around the one that writes
    kept = _fn("def f(L, C):\n    r = np.sum(L.pop()) + np.sum(C)\n    return r\n")
    assert _lines(outline.split_calls(kept, set())) == [
        "r = np.sum(L.pop()) + np.sum(C)", "return r"]


def test_straight_line_code_between_the_loops_moves_out_when_nothing_changes():
    cut = _cut("""
        def f(A, xs):
            C = A @ A
            h = np.zeros(3)
            for x in xs:
                h = np.tanh(h * x)
            sum_C = np.sum(C)
            sum_h = np.sum(h)
            r = sum_C + sum_h
            g = np.ones_like(C) * 2.0
            for x in xs:
                h = h * x
            return r, (g @ A, h)
        """)
    assert _lines(cut.host) == [
        "C = A @ A", "h = np.zeros(3)", "sum_C = np.sum(C)", "g = np.ones_like(C) * 2.0",
        "h, sum_h = _nb_loops(h, xs)", "r = sum_C + sum_h", "return (r, (g @ A, h))"]
    assert cut.inputs == ("h", "xs") and cut.outputs == ("h", "sum_h")


def test_what_a_loop_updates_in_place_is_not_read_outside_it_early():
    # y is a view of x: the loop writes into x through y, so np.sum(x) stays after it
    cut = _cut("""
        def f(x, n):
            y = x[1:]
            for i in range(n):
                y[0] += 1.0
            s = np.sum(x)
            for i in range(n):
                s = s * 2.0
            return s
        """)
    assert "s = np.sum(x)" in _lines(cut.loops)
    assert "s = np.sum(x)" not in _lines(cut.host)


def test_points_to_follows_views_helpers_and_lists_not_new_arrays():
    fn = _fn("""
        def f(a, b):
            v = a[1:]
            c = np.tanh(b)
            d = _s2s_unbroadcast(c, a)
            L = []
            L.append(b)
            e = L.pop()
            return v
        """)
    pts = outline.points_to(fn.body, ["a", "b"])
    assert pts["v"] & pts["a"]                      # a view
    assert not pts["c"] & pts["b"]                  # np.tanh makes a new array
    assert pts["d"] & pts["c"] and pts["d"] & pts["a"]   # a helper may return either
    assert pts["e"] & pts["b"]                      # what was pushed comes back
    assert not pts["c"] & pts["a"] and not pts["a"] & pts["b"]


def test_statements_that_write_never_move():
    cut = _cut("""
        def f(x, v, n):
            for i in range(n):
                x = x * 2.0
            v[0] = 1.0
            _s2s_add_at(v, 1, x)
            for i in range(n):
                x = x + v
            return x
        """)
    assert "v[0] = 1.0" in _lines(cut.loops) and "_s2s_add_at(v, 1, x)" in _lines(cut.loops)


def test_initialisations_move_into_the_loops_and_barred_names_do_not_cross():
    src = """
        def f(xs):
            x = None
            x_stack = []
            r = range(len(xs))
            for i in r:
                x_stack.append(x)
                x = xs[i]
            y = x * 2.0
            return y
        """
    cut = _cut(src, barred={"x_stack", "r"})
    assert _lines(cut.loops)[:3] == ["x = None", "x_stack = []", "r = range(len(xs))"]
    with pytest.raises(Unsupported, match="x would cross"):
        _cut(src, barred={"x_stack", "r", "x"})
    with pytest.raises(Unsupported, match="no loop"):
        _cut("def f(x):\n    y = x * 2\n    return y\n")


# -- the backend ---------------------------------------------------------------------
numba = pytest.importorskip("numba")


def mixed(A, B, xs):
    C = A @ B
    h = np.zeros(C.shape[0])
    for x in xs:
        h = np.tanh(h * x + 0.5)
    return np.sum(C * C) * 0.001 + np.sum(h * h)


def mixed_rows(A, w, xs):
    C = np.tanh(A @ A.T)
    h = w * 0.0
    for x in xs:                      # x (a row) broadcasts against h's rows
        h = np.sin(h + x) * 0.9
    return np.sum(C) * 0.01 + np.sum(h * w)


@pytest.fixture(autouse=True)
def _fresh():
    numba_backend.reset()
    yield
    numba_backend.reset()


def _loops_variant(f, positions):
    state = numba_backend.known_state(f, positions)
    assert state is not None
    found = [v for k, v in state.variants.items() if k[-1] == "loops"]
    assert len(found) == 1, state.variants
    return found[0]


def _check(f, args, wrt, fd=True):
    """jit=True (twice, no warning) against the NumPy backend and central differences."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        got = s2sgrad.grad(f, wrt=wrt, jit=True)(*args)
        again = s2sgrad.grad(f, wrt=wrt, jit=True)(*args)
    want = s2sgrad.grad(f, wrt=wrt)(*args)
    for i, g, g2, w in zip(wrt, got, again, want):
        assert type(g) is type(w) and np.shape(g) == np.shape(args[i])
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(g, g2)
        if fd:
            num = numeric_grad(f, list(args), i)
            scale = max(1.0, float(np.max(np.abs(num))))
            np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-5 * scale)
    return got


def _mixed_args(n, steps, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, n)) / n, rng.standard_normal((n, n)),
            rng.standard_normal(steps) * 0.3)


@pytest.mark.parametrize("n", [101, 30])
def test_a_loop_next_to_a_large_product_runs_in_numba(monkeypatch, n):
    if n == 30:     # below the product limit the whole function would compile: lower it
        monkeypatch.setattr(jit_policy, "LOOP_PRODUCT_LIMIT", 100)
    args = _mixed_args(n, 7)
    plan = jit_plan(mixed, *args, wrt=(0, 1, 2))
    assert plan.outlined and not plan.compile and "loops outlined" in plan.reason
    _check(mixed, args, (0, 1, 2))
    v = _loops_variant(mixed, (0, 1, 2))
    assert v.check is None and v.failed is None          # numba's loops ran, and agreed
    assert v.loops.stats.cache_misses or v.loops.stats.cache_hits or v.loops.signatures
    host = jit_source(mixed, *args, wrt=(0, 1, 2))
    assert "C = A @ B" in host and "def mixed_nb_loops(" in host
    assert "np.sum(C * C)" not in host.split("def mixed_nb_loops(")[1]   # NumPy sums C


@pytest.mark.parametrize("rows", [1, 3])
def test_broadcasting_inside_the_outlined_loops(rows):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((110, 110)) / 110          # 12,100 elements: left to NumPy
    w = rng.standard_normal((rows, 4))
    xs = rng.standard_normal((5, 4)) * 0.5
    assert jit_plan(mixed_rows, A, w, xs, wrt=(0, 1, 2)).outlined
    _check(mixed_rows, (A, w, xs), (0, 1, 2))
    assert _loops_variant(mixed_rows, (0, 1, 2)).check is None


def test_the_loops_run_on_numpy_when_the_arrays_they_are_given_are_large(monkeypatch):
    monkeypatch.setattr(jit_policy, "LOOP_LIMIT", 64)
    big = _mixed_args(101, 4)                 # h has 101 elements: NumPy's loops
    _check(mixed, big, (0, 1, 2), fd=False)
    v = _loops_variant(mixed, (0, 1, 2))
    assert v.check is not None and not v.loops.signatures     # numba never ran
    numba_backend.reset()
    monkeypatch.setattr(jit_policy, "LOOP_PRODUCT_LIMIT", 50)
    small = _mixed_args(8, 4)                 # the same function, h of 8: numba's loops
    _check(mixed, small, (0, 1, 2))
    assert _loops_variant(mixed, (0, 1, 2)).check is None


def decay(n, rate):
    """A helper numba cannot compile (np.flip with an axis)."""
    return np.flip(np.array([[rate ** k for k in range(n)]]), axis=1)[0]


def decayed_rnn(x, W, steps):
    scale = decay(x.shape[0], 0.9)     # before the loop: the host's, on NumPy
    h = x
    for _ in range(steps):
        h = np.tanh(W @ h) * scale
    return np.sum(h ** 2)


def flipped_in_loop(x, steps):
    s = 0.0
    for _ in range(steps):
        s = s + np.sum(np.flip(x, axis=1) * x)   # numba has no np.flip with an axis
    return s


@pytest.mark.parametrize("n", [3, 6])
@pytest.mark.parametrize("background", ["0", "1"])
def test_what_numba_cannot_call_outside_the_loops_leaves_the_loops_to_numba(
        monkeypatch, n, background):
    """The whole function does not compile (the user's helper holds what numba has no
    version of): its loops run on numba, outlined, with no warning; the helper runs on
    NumPy's side."""
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", background)
    rng = np.random.default_rng(n)
    args = (rng.uniform(-1, 1, n), rng.standard_normal((n, n)) / n, 12)
    for _ in range(2):   # (in the background mode: NumPy, then numba's outlined loops)
        _check(decayed_rnn, args, (0, 1))
        s2sgrad.backends.jit_wait(decayed_rnn)
    _check(decayed_rnn, args, (0, 1))
    state = numba_backend.known_state(decayed_rnn, (0, 1))
    whole = [v for k, v in state.variants.items() if k[-1] != "loops"]
    assert len(whole) == 1 and "flip" in whole[0].failed   # (numba's error in decay)
    v = _loops_variant(decayed_rnn, (0, 1))
    assert v.failed is None and v.check is None and v.loops.signatures   # numba's loops ran
    plan = jit_plan(decayed_rnn, *args, wrt=(0, 1))
    assert plan.outlined and "not compiled whole" in plan.reason and "flip" in plan.reason
    assert "decay(" in jit_source(decayed_rnn, *args, wrt=(0, 1)).split("def decayed_rnn_nb")[0]


def test_what_numba_cannot_take_inside_the_loops_still_warns_with_the_whole_reason():
    x = np.random.default_rng(2).uniform(-1, 1, (3, 4))
    with pytest.warns(JitWarning, match="flip"):
        got = s2sgrad.grad(flipped_in_loop, jit=True)(x, 3)
    want = s2sgrad.grad(flipped_in_loop)(x, 3)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(want, numeric_grad(flipped_in_loop, [x, 3], 0), rtol=1e-6,
                               atol=1e-8)
    assert "flip" in jit_plan(flipped_in_loop, x, 3).reason


@pytest.mark.parametrize("how", ["wrong value", "raises"])
def test_wrong_or_failing_compiled_loops_give_numpys_gradient_and_a_warning(monkeypatch, how):
    @numba.njit
    def wrong_mul(a, b):
        return a * b * 1.5

    @numba.njit
    def failing_mul(a, b):
        if np.size(a) >= 0:
            raise ValueError("boom")
        return a * b

    original = numba_variants.module_namespace

    def sabotaged(self, *args):
        ns = original(self, *args)
        ns["_nb_op_mul"] = wrong_mul if how == "wrong value" else failing_mul
        return ns
    monkeypatch.setattr(numba_variants, "module_namespace", sabotaged)
    args = _mixed_args(101, 6)
    want = s2sgrad.grad(mixed, wrt=(0, 1, 2))(*args)
    expected = "differs from the NumPy backend" if how == "wrong value" else "raised ValueError"
    with pytest.warns(JitWarning, match=expected):
        got = s2sgrad.grad(mixed, wrt=(0, 1, 2), jit=True)(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert _loops_variant(mixed, (0, 1, 2)).failed is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)     # one warning per function
        again = s2sgrad.grad(mixed, wrt=(0, 1, 2), jit=True)(*args)
    for g, w in zip(again, want):
        np.testing.assert_array_equal(g, w)


def test_functions_that_write_into_their_arguments_are_not_outlined():
    def scale_in_place(A, x, n):
        C = A @ A
        for _ in range(n):
            x *= 0.5
        return np.sum(C) + np.sum(np.sin(x))
    rng = np.random.default_rng(3)
    A, x = rng.standard_normal((101, 101)), rng.standard_normal(4)
    assert not jit_plan(scale_in_place, A, x.copy(), 3, wrt=(0, 1)).outlined
    got = s2sgrad.grad(scale_in_place, wrt=(0, 1), jit=True)(A, x.copy(), 3)
    want = s2sgrad.grad(scale_in_place, wrt=(0, 1))(A, x.copy(), 3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def swing(x0, v0, a, b, dt, n_steps):
    x = x0
    v = v0
    for _ in range(n_steps):
        v = v + dt * (-a * np.sin(x) - b * v)
        x = x + dt * v
    return np.sum(x * x)


def _cases():
    rng = np.random.default_rng(7)
    return [
        (pendulum, (0.3, 0.1, 2.0, 0.3, 0.05, 20), (0, 1, 2, 3)),
        (swing, (rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), 2.0,
                 rng.uniform(0.1, 0.5, 4), 0.05, 10), (0, 1, 3)),   # b broadcasts
        (rnn, (rng.standard_normal((4, 4)) * 0.4, rng.standard_normal((4, 3)),
               rng.standard_normal(4), rng.standard_normal((6, 3)), rng.standard_normal(4)),
         (0, 1, 2)),
        (rnn, (rng.standard_normal((2, 2)) * 0.4, rng.standard_normal((2, 5)),
               rng.standard_normal(2), rng.standard_normal((3, 5)), rng.standard_normal(2)),
         (0, 1, 2, 3)),
        (while_loop, (rng.standard_normal(5) * 0.3, 1.3), (0, 1)),
        (while_loop, (rng.standard_normal((2, 3)) * 0.3, rng.uniform(1.1, 1.4, 3)), (0, 1)),
        (branchy, (rng.standard_normal(6), rng.uniform(0.5, 1.5, 6),
                   rng.uniform(0.5, 1.5, 6), 8), (0, 1, 2)),
    ]


@pytest.mark.parametrize("case", range(7))
def test_outlined_at_every_size_the_loop_workloads_agree(monkeypatch, case):
    """S2SGRAD_JIT_PLAN=loops: every function that loops runs outlined."""
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "loops")
    f, args, wrt = _cases()[case]
    assert jit_plan(f, *args, wrt=wrt).outlined
    _check(f, args, wrt)
    v = _loops_variant(f, wrt)
    assert v.check is None and v.failed is None


class TwoOut(s2sgrad.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.a, ctx.b = a, b
        return np.tanh(a) * b, 2.0 * b

    @staticmethod
    def vjp(ctx, g0, g1):
        return g0 * (1.0 - np.tanh(ctx.a) ** 2) * ctx.b, g0 * np.tanh(ctx.a) + 2.0 * g1


RATES = np.array([0.3, -0.2, 0.5])


def second_output_beside_a_loop(x, y):
    acc = np.zeros(3)
    k = 0
    while k < 3:            # (on constants: the adjoint has no loop)
        k += 1
        acc = 0.5 * acc + 0.5 * np.tanh(RATES)
    return np.sum(np.sin(TwoOut.apply(x, y)[1])) + np.sum(acc * y) + np.sum(x * x)


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (2, 3))])
def test_the_host_binds_the_helpers_its_rewrite_brings_in(monkeypatch, shapes):
    """The zeros of the tuple a Function returns (`_s2s_zeros_like(outputs)`) are the
    host's alone (the NumPy pair builds them otherwise): the host's namespace binds
    every helper its text reads (the fuzzer found a NameError and a fall-back)."""
    monkeypatch.setenv("S2SGRAD_JIT_PLAN", "loops")
    rng = np.random.default_rng(len(shapes[0]))
    args = (rng.uniform(-1, 1, shapes[0]), rng.uniform(-1, 1, shapes[1]))
    assert jit_plan(second_output_beside_a_loop, *args, wrt=(0, 1)).outlined
    _check(second_output_beside_a_loop, args, (0, 1))
    v = _loops_variant(second_output_beside_a_loop, (0, 1))
    assert v.check is None and v.failed is None


def test_show_jit_prints_the_host_and_the_loops(tmp_path):
    import subprocess
    import sys
    src = tmp_path / "prog.py"
    src.write_text("import numpy as np\n\n\n" + textwrap.dedent('''
        def mixed(A, B, xs):
            C = A @ B
            h = np.zeros(C.shape[0])
            for x in xs:
                h = np.tanh(h * x + 0.5)
            return np.sum(C * C) * 0.001 + np.sum(h * h)
        '''))
    out = subprocess.run([sys.executable, "-m", "s2sgrad", "show", f"{src}:mixed", "--jit",
                          "--wrt", "0,1,2", "--shape", "A=200,200", "--shape", "B=200,200",
                          "--shape", "xs=9"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "loops outlined: numba runs its loops when the arrays they are given have " \
           "fewer than 100,000 elements" in out.stdout
    assert "def mixed_host(A, B, xs, _nb_loops):" in out.stdout
    assert "def mixed_nb_loops(" in out.stdout
    rule = subprocess.run([sys.executable, "-m", "s2sgrad", "show", f"{src}:mixed", "--jit",
                           "--wrt", "0,1,2"], capture_output=True, text=True, timeout=120)
    assert rule.returncode == 0, rule.stderr
    assert "fewer than 10,000 elements, from there on grad runs it outlined: numba runs " \
           "its loops when the arrays they are given have fewer than 100,000 elements" \
           in rule.stdout


def test_a_value_numba_cannot_return_is_named_in_the_warning():
    """numba raises SystemError("... returned a result with an exception set") when it
    cannot box what compiled code returns (a dict of an array and a list, found by the
    jit fuzzer, seed 11004, program 55); the warning names the error it carries."""
    from s2sgrad.backends.numba_load import first_line
    try:
        try:
            raise TypeError("cannot convert native LiteralStrKey[Dict] to Python object")
        except TypeError as cause:
            raise SystemError("CPUDispatcher(f) returned a result with an exception "
                              "set") from cause
    except SystemError as exc:
        assert first_line(exc).startswith("TypeError: cannot convert native")
    assert first_line(SystemError("plain")) == "SystemError: plain"
