"""`s2sgrad.checkpoint`: a helper recomputed in the adjoint instead of kept.

The forward calls a checkpointed helper as the user wrote the call and keeps only its
arguments (restored per loop step like any variable); the adjoint calls the helper's
forward again right before its adjoint (`s2sgrad/compiler/sites.py`,
`CalleeSite.recomputation`). A helper whose second run could differ from its first is
refused (`s2sgrad/compiler/recompute.py`). Each gradient is checked against central
differences on two shapes (one broadcasting) and against the pair that keeps the
helper's residuals (the unoptimised pair recomputes nothing).
"""
import textwrap
import warnings

import numpy as np
import pytest
from conftest import check_vjp, numeric_grad

import s2sgrad
from s2sgrad.backends import JitWarning, numba_backend
from s2sgrad.compiler import compile_function


def rhs(y, W):
    return np.tanh(y @ W) - 0.5 * y


@s2sgrad.checkpoint
def rk2_step(y, W, h):
    k1 = rhs(y, W)
    k2 = rhs(y + 0.5 * h * k1, W)
    return y + h * k2


def integrate(y0, W, steps):
    y = y0
    for _ in range(steps):
        y = rk2_step(y, W, 0.1)
    return np.sum(y ** 2)


@s2sgrad.checkpoint
def cell(h, c, x, W):
    a = np.tanh(x @ W + h)
    c = 0.5 * c + 0.5 * a
    return np.tanh(c) * 0.9, c


def recurrent(h, W, xs):
    c = h * 0.0
    for x in xs:
        h, c = cell(h, c, x, W=W)
    return np.sum(h * c) + np.sum(h)


def once(x, W):
    y = rk2_step(x, W, h=0.3) * 2.0
    return np.sum(np.sin(y))


def written_after(x, W):
    s = 0.0
    for _ in range(3):
        y = rk2_step(x, W, 0.1)
        s = s + np.sum(y ** 2)
        x += 0.1 * y          # the argument changes after the call: restored for it
    return s


def from_a_list(x, W):
    ys = [x]
    for _ in range(3):
        ys.append(rk2_step(ys[-1], W, 0.1))
    return sum(np.sum(v ** 2) for v in ys)


def _args(shape, seed=0):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    return rng.standard_normal(shape) * 0.5, rng.standard_normal((n, n)) / np.sqrt(n)


def _check(f, args, wrt):
    got = s2sgrad.grad(f, wrt=wrt)(*args)
    kept = compile_function(f, wrt, optimize_code=False)
    out, residuals = kept.forward(*args)
    want = kept.adjoint(residuals, 1.0)
    for i, g, w in zip(wrt, got, want):
        assert np.shape(g) == np.shape(args[i])
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(g, numeric_grad(f, list(args), i), rtol=1e-6, atol=1e-8)
    return got


@pytest.mark.parametrize("shape", [(3,), (2, 4)])   # (2, 4): rows broadcast against W
def test_a_checkpointed_step_in_a_loop_is_recomputed_and_exact(shape):
    y0, W = _args(shape)
    _check(integrate, (y0, W, 6), (0, 1))
    text = s2sgrad.source(integrate, wrt=(0, 1))
    forward, adjoint = text.split("def integrate_adjoint")[0], \
        text.split("def integrate_adjoint")[1].split("# s2sgrad: generated from")[0]
    assert "rk2_step(y, W, 0.1)" in forward and "residuals_stack" not in forward
    assert "rk2_step_residuals = rk2_step_forward(y, W, 0.1)[1]" in adjoint
    assert "y_stack.append(y)" in forward        # the argument is what is kept


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_checkpointed_cell_with_two_outputs_and_a_keyword(shape):
    h, W = _args(shape, 1)
    xs = np.random.default_rng(2).standard_normal((5,) + shape)
    _check(recurrent, (h, W, xs), (0, 1, 2))
    assert "cell_forward(h, c, x, W=W)[1]" in s2sgrad.source(recurrent, wrt=(0, 1, 2))


@pytest.mark.parametrize("shape", [(4,), (3, 4)])
def test_a_checkpointed_call_outside_loops(shape):
    _check(once, _args(shape, 3), (0, 1))


@pytest.mark.parametrize("f", [written_after, from_a_list])
@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_arguments_written_in_place_or_read_from_lists_are_restored(f, shape):
    x, W = _args(shape, 5)
    got = s2sgrad.grad(f, wrt=(0, 1))(x.copy(), W)
    for i in (0, 1):
        want = numeric_grad(lambda a, b: f(a.copy(), b), [x.copy(), W], i)
        np.testing.assert_allclose(got[i], want, rtol=1e-6, atol=1e-8)
    adjoint = s2sgrad.source(f, wrt=(0, 1)).split("_adjoint(residuals")[1]
    assert "rk2_step_forward(" in adjoint.split("# s2sgrad: generated from")[0]


def test_the_mark_runs_the_function_and_is_differentiated_itself():
    y, W = _args((3,))
    np.testing.assert_array_equal(rk2_step(y, W, 0.1), rk2_step.__wrapped__(y, W, 0.1))
    assert rk2_step.__name__ == "rk2_step" and "checkpoint" in repr(rk2_step)

    check_vjp(rk2_step, (y, W, 0.2), wrt=(0, 1))     # the mark differentiated itself
    with pytest.raises(TypeError, match="takes a function"):
        s2sgrad.checkpoint(3)


def test_derivatives_of_derivatives_through_a_checkpointed_helper():
    """A pair differentiated again keeps its residuals (pure pairs recompute nothing)."""
    W = _args((3,))[1]

    def f(x):
        return integrate(x, W, 3)
    x = np.array([0.3, -0.2, 0.5])
    hvp = s2sgrad.grad(lambda x: np.sum(s2sgrad.grad(f)(x) * np.array([1.0, 0.5, -1.0])))(x)
    eps = 1e-5
    direction = np.array([1.0, 0.5, -1.0])
    fd = [(np.sum(s2sgrad.grad(f)(x + eps * e) * direction) -
           np.sum(s2sgrad.grad(f)(x - eps * e) * direction)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(hvp, fd, rtol=1e-5, atol=1e-7)


# -- refused: what a second run could compute differently --------------------------------
REFUSED = {
    "draws": ("y = np.tanh(u) + np.random.normal(size=u.shape) * 0.0", "random numbers"),
    "generator": ("y = np.tanh(u) + rng.standard_normal(u.shape) * 0.0", "standard_normal"),
    "writes_argument": ("u[0] = 1.0\n    y = np.tanh(u)", "writes into u"),
    "updates_argument": ("u += 1.0\n    y = np.tanh(u)", "updates u in place"),
    "out_argument": ("y = np.tanh(u, out=u)", "writes into u"),
    "appends_global": ("LOG.append(1)\n    y = np.tanh(u)", "changes LOG in place"),
    "global_statement": ("global COUNT\n    COUNT = 1\n    y = np.tanh(u)", "global"),
    "impure_helper": ("y = np.tanh(u) + noisy(u)", "random numbers"),
    "unknown_module": ("y = np.tanh(u) + time.time() * 0.0", "time"),
    "updates_a_view": ("v = np.asarray(u)\n    v += 1.0\n    y = np.tanh(v)",
                       "updates v in place"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_helper_that_could_recompute_other_values_is_refused_at_the_call(make_module,
                                                                           case):
    body, reason = REFUSED[case]
    mod = make_module(textwrap.dedent("""
        import time
        import numpy as np
        import s2sgrad

        rng = np.random.default_rng(0)
        LOG = []
        COUNT = 0

        def noisy(u):
            return np.random.uniform(size=u.shape) * 0.0

        @s2sgrad.checkpoint
        def step(u):
            {body}
            return y

        def f(x):
            s = 0.0
            for _ in range(2):
                x = step(x)
                s = s + np.sum(x)
            return s
        """).replace("{body}", body))
    x = np.array([0.1, 0.2])
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(mod.f)(x)
    text = str(info.value)
    assert "cannot recompute step (s2sgrad.checkpoint)" in text and reason in text
    assert "x = step(x)" in text and "^" in text      # the call, with a caret under it


def test_what_a_checkpointed_helper_may_do(make_module):
    """Writes into arrays it made (by np.zeros_like, by a ufunc), a Function's forward
    (writing into its ctx), loops, math and builtins: recomputed, and exact."""
    mod = make_module(textwrap.dedent("""
        import math
        import numpy as np
        import s2sgrad

        class Scale(s2sgrad.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a)
                ctx.k = 3.0
                return a * 3.0

            @staticmethod
            def vjp(ctx, g):
                return g * ctx.k

        @s2sgrad.checkpoint
        def step(u, k=2):
            out = np.zeros_like(u)
            out[0] = u[0] * math.cos(0.5)
            acc = 0.0
            for i in range(k):
                acc += np.sum(u) * 0.1
            out[1:] = Scale.apply(u[1:])
            w = np.log(1.0 + u ** 2)     # (a ufunc's new array: updated in place)
            w += 0.5 * out
            return np.tanh(out + acc + len(u)) * w

        def f(x):
            for _ in range(3):
                x = step(x)
            return np.sum(x ** 2)
        """))
    for x in (np.array([0.1, -0.2, 0.3]), np.array([0.4, 0.1])):
        g = s2sgrad.grad(mod.f)(x)
        np.testing.assert_allclose(g, numeric_grad(mod.f, [x], 0), rtol=1e-6, atol=1e-8)
    assert "step_forward(x)[1]" in s2sgrad.source(mod.f)


# -- jit=True: numba calls the helper's forward for its value -------------------------
@pytest.fixture
def _fresh_numba():
    numba_backend.reset()
    yield
    numba_backend.reset()


@pytest.mark.parametrize("background", ["0", "1"])
def test_jit_runs_a_checkpointed_step_on_numba(monkeypatch, _fresh_numba, background):
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", background)
    y0, W = _args((3,), 4)
    args = (y0, W, 8)
    want = s2sgrad.grad(integrate, wrt=(0, 1))(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)
        for _ in range(2):
            s2sgrad.grad(integrate, wrt=(0, 1), jit=True)(*args)
            s2sgrad.backends.jit_wait(integrate)
        got = s2sgrad.grad(integrate, wrt=(0, 1), jit=True)(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    state = numba_backend.known_state(integrate, (0, 1))
    assert any(v.failed is None and v.check is None for v in state.variants.values())


def test_a_helper_iterating_over_an_iterator_is_refused_and_over_a_list_recomputed(
        make_module):
    """A second run would find an iterator consumed: the argument of a parameter the
    helper walks must be proven a list, a tuple or an array."""
    mod = make_module(textwrap.dedent("""
        import numpy as np
        import s2sgrad

        def total(vs):
            return sum(vs)

        @s2sgrad.checkpoint
        def step(u, vs):
            return np.tanh(u + total(vs))

        def from_a_generator(x):
            for _ in range(2):
                x = step(x, (v * 0.5 for v in x))
            return np.sum(x)

        def from_a_list(x):
            for _ in range(2):
                x = step(x, [x[0] * 0.5, x[1]])
            return np.sum(x)
        """))
    with pytest.raises(s2sgrad.TransformError, match="iterates over its argument"):
        s2sgrad.grad(mod.from_a_generator)(np.array([0.1, 0.2]))
    for x in (np.array([0.1, 0.2]), np.array([0.3, -0.1, 0.4])):
        g = s2sgrad.grad(mod.from_a_list)(x)
        np.testing.assert_allclose(g, numeric_grad(mod.from_a_list, [x], 0), rtol=1e-6,
                                   atol=1e-8)
