"""The gradient that checks itself (s2sgrad.witness): each witness catches a pair
broken on purpose, a failed pair is dropped from both caches, and what cannot be
checked (random numbers, a construct forward mode refuses) is said, not failed."""
import dataclasses
import os

import numpy as np
import pytest

import s2sgrad
from s2sgrad import optimizer_check, runtime, witness
from s2sgrad.compiler import compile_function, discard
from s2sgrad.compiler.memory import PAIRS

SOURCE = '''
import numpy as np
import s2sgrad


def loss(W, x):
    return np.sum(np.tanh(W @ x) ** 2)


def noisy(x):
    return np.sum(x ** 2) + np.random.standard_normal()


def opaque(x):
    return np.cumsum(x)[::-1]


s2sgrad.defvjp(opaque, "x", x="np.cumsum(g)[::-1]")


def uses_opaque(x):
    return np.sum(np.sin(opaque(x)) ** 2)


def joined(*xs):
    return np.concatenate(xs)[::-1]


s2sgrad.defvjp(joined, "*xs", xs="[g[::-1][:len(xs[0])], g[::-1][len(xs[0]):]]",
               sequence=("xs",))


def uses_joined(x):
    return np.sum(np.sin(joined(x, x * 2.0)) ** 2)


def looped(W, x):
    h = x
    for _ in range(3):
        h = np.tanh(W @ h)
    return np.sum(h ** 2)


def in_place(x):
    out = np.zeros(3)
    for i in range(3):
        out[i] = np.sin(x[i]) * x[i - 1]
    return np.sum(out ** 2)
'''


@pytest.fixture
def m(make_module):
    return make_module(SOURCE)


def _args(rng):
    return rng.standard_normal((3, 4)), rng.standard_normal(4)


def test_the_value_witness_catches_a_forward_that_computes_something_else(m, rng):
    compiled = compile_function(m.loss, (0,))
    forward = compiled.forward

    def off_by_a_little(*args):
        out, residuals = forward(*args)
        return out * (1 + 1e-6), residuals
    broken = dataclasses.replace(compiled, forward=off_by_a_little, witnessed=set())
    checked = witness.witnessed_pair(broken, m.loss, "first")
    with pytest.raises(witness.WitnessError, match="value witness") as info:
        checked.forward(*_args(rng))
    assert "loss" in str(info.value) and "largest difference" in str(info.value)


def test_the_derivative_witness_catches_an_adjoint_off_by_a_little(m, rng):
    compiled = compile_function(m.loss, (0, 1))
    adjoint = compiled.adjoint

    def scaled(residuals, cotangent):
        gW, gx = adjoint(residuals, cotangent)
        return gW, gx * 1.001
    broken = dataclasses.replace(compiled, adjoint=scaled, witnessed=set())
    checked = witness.witnessed_pair(broken, m.loss, "first")
    out, residuals = checked.forward(*_args(rng))
    with pytest.raises(witness.WitnessError, match="derivative witness") as info:
        checked.adjoint(residuals, 1.0)    # the caller's cotangent is the test's v
    assert "<gradient, u>" in str(info.value)
    # The same pair, unbroken, passes, and later calls of that kind skip the checks.
    fine = witness.witnessed_pair(dataclasses.replace(compiled, witnessed=set()), m.loss,
                                  "first")
    out, residuals = fine.forward(*_args(rng))
    fine.adjoint(residuals, 1.0)
    assert np.isfinite(out) and len(fine.witnessed) == 1


def test_a_wrong_rule_is_caught_through_the_api_and_never_cached(m, rng, monkeypatch,
                                                                  tmp_path):
    """A helper of the matmul rule made wrong: reverse mode uses it, forward mode
    (the product itself) does not, so the dot-product test fails; the gradient is
    not returned and neither cache keeps the pair."""
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(tmp_path))
    right = runtime.HELPERS["matmul_grad_b"]
    monkeypatch.setitem(runtime.HELPERS, "matmul_grad_b",
                        lambda g, a, b: right(g, a, b) * 1.01)
    W, x = _args(rng)
    with pytest.raises(witness.WitnessError, match="derivative witness"):
        s2sgrad.grad(m.loss, wrt=1, witness=True)(W, x)
    assert not [p for p in PAIRS.values() if getattr(p, "fn", None) is m.loss]
    entries = [f for _, _, files in os.walk(tmp_path) for f in files if f.endswith(".s2s")]
    assert entries == []
    monkeypatch.setitem(runtime.HELPERS, "matmul_grad_b", right)
    g = s2sgrad.grad(m.loss, wrt=1)(W, x)
    eps = 1e-6
    expected = [(m.loss(W, x + eps * e) - m.loss(W, x - eps * e)) / (2 * eps)
                for e in np.eye(4)]
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("background", ["0", "1"])
@pytest.mark.parametrize("name", ["loss", "looped"])
def test_jit_true_runs_the_witnesses_on_its_numpy_runs(m, rng, monkeypatch, tmp_path,
                                                      background, name):
    """jit=True's pair is the NumPy pair rewritten for numba, and numba's first result
    is checked against that pair's: so the NumPy runs of that pair (the first calls,
    while numba compiles, and the reference) are witnessed like the NumPy backend's.
    A wrong rule is caught by grad and by vjp, whether the first call prepares numba's
    code itself (S2SGRAD_JIT_BACKGROUND=0) or a thread does behind it."""
    import warnings
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("S2SGRAD_JIT_BACKGROUND", background)
    right = runtime.HELPERS["matmul_grad_b"]
    monkeypatch.setitem(runtime.HELPERS, "matmul_grad_b",
                        lambda g, a, b: right(g, a, b) * 1.01)
    f = getattr(m, name)
    W, x = rng.standard_normal((4, 4)) / 2, rng.standard_normal(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # (a JitWarning where numba has no helper)
        with pytest.raises(witness.WitnessError, match="derivative witness"):
            s2sgrad.grad(f, wrt=1, jit=True, witness=True)(W, x)
        with pytest.raises(witness.WitnessError, match="derivative witness"):
            _, pullback = s2sgrad.vjp(f, W, x, wrt=1, jit=True, witness=True)
            pullback(1.0)
        s2sgrad.backends.jit_wait()
    monkeypatch.setitem(runtime.HELPERS, "matmul_grad_b", right)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = s2sgrad.grad(f, wrt=1, jit=True, witness=True)(W, x)
    eps = 1e-6
    expected = [(f(W, x + eps * e) - f(W, x - eps * e)) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-8)


def test_witness_off_returns_the_broken_gradient(m, rng, monkeypatch):
    """Off (the option, or S2SGRAD_WITNESS=off): nothing runs, nothing is caught."""
    right = runtime.HELPERS["matmul_grad_b"]
    monkeypatch.setitem(runtime.HELPERS, "matmul_grad_b",
                        lambda g, a, b: right(g, a, b) * 1.01)
    W, x = _args(rng)
    s2sgrad.grad(m.loss, wrt=1, witness=False)(W, x)
    monkeypatch.setenv("S2SGRAD_WITNESS", "off")
    assert witness.mode() == "off"
    s2sgrad.value_and_grad(m.loss, wrt=1)(W, x)


@pytest.mark.skipif(optimizer_check.ENABLED, reason="the optimiser check compares two "
                    "runs of a function drawing random numbers")
def test_random_numbers_are_noted_not_failed(m, rng):
    g = s2sgrad.grad(m.noisy, witness="always")(rng.standard_normal(3))
    assert g.shape == (3,)
    assert "other values on each call" in " ".join(witness.report(m.noisy, (0,)))


def _differences(f, x, eps=1e-6):
    return [(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size)]


def test_a_construct_forward_mode_refuses_is_noted(m, rng):
    x = rng.standard_normal(4)
    g = s2sgrad.grad(m.uses_joined, witness="always")(x)
    np.testing.assert_allclose(g, _differences(m.uses_joined, x), rtol=1e-6, atol=1e-8)
    lines = witness.report(m.uses_joined, (0,))
    assert lines[0] == "value witness: passed"
    assert "derivative witness: not run (forward mode refuses" in lines[1]
    assert witness.forward_mode_gap(m.uses_joined, (0,)) is not None


def test_a_rule_whose_jvp_is_its_vjp_transposed_is_noted_as_unchecked(m, rng):
    # opaque has no JVP of its own: forward mode transposes its VJP, so the two
    # transforms agree on it by construction. The witness still checks the rest
    # of the function, and says which rule it does not.
    x = rng.standard_normal(5)
    g = s2sgrad.grad(m.uses_opaque, witness="always")(x)
    np.testing.assert_allclose(g, _differences(m.uses_opaque, x), rtol=1e-6, atol=1e-8)
    lines = witness.report(m.uses_opaque, (0,))
    assert lines[0] == "value witness: passed"
    assert lines[1] == ("derivative witness: passed (not of opaque, whose JVP is derived "
                        "from its VJP)")
    assert witness.forward_mode_gap(m.uses_opaque, (0,)) is None


def test_the_witness_runs_once_per_kind_of_arguments(m, rng, monkeypatch):
    calls = []
    real = witness._value_and_tangent

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(witness, "_value_and_tangent", counting)
    grad = s2sgrad.grad(m.in_place, witness=True)
    for _ in range(3):
        grad(rng.standard_normal(3))
    assert len(calls) == 1
    grad(rng.standard_normal(3).astype(np.float32))   # another dtype: checked again
    assert len(calls) == 2
    always = s2sgrad.grad(m.in_place, witness="always")
    always(rng.standard_normal(3))
    always(rng.standard_normal(3))
    assert len(calls) == 4


def test_a_pullback_stays_reusable_after_the_witness_ran_it(m, rng):
    """The derivative witness runs the adjoint once; the user's pullback after it
    must give the same (in-place writes in loops restore a copy, not the forward's)."""
    x = rng.standard_normal(3)
    _, pullback = s2sgrad.vjp(m.in_place, x, witness="always")
    first, second = pullback(1.0), pullback(1.0)
    np.testing.assert_allclose(first, second)
    eps = 1e-6
    expected = [(m.in_place(x + eps * e) - m.in_place(x - eps * e)) / (2 * eps)
                for e in np.eye(3)]
    np.testing.assert_allclose(first[0], expected, rtol=1e-6, atol=1e-8)


def test_discard_drops_a_pair_from_memory(m):
    compiled = compile_function(m.loss, (0,))
    assert any(p is compiled for p in PAIRS.values())
    discard(compiled)
    assert not any(p is compiled for p in PAIRS.values())
    assert compile_function(m.loss, (0,)) is not compiled


@pytest.mark.parametrize("value, expected", [(None, "first"), (True, "first"),
                                             (False, "off"), ("always", "always")])
def test_modes(value, expected, monkeypatch):
    monkeypatch.delenv("S2SGRAD_WITNESS", raising=False)
    assert witness.mode(value) == expected
    with pytest.raises(ValueError, match="witness="):
        witness.mode("sometimes")


def test_signatures_tell_apart_what_the_long_form_does():
    # The short form (arrays and Python numbers) and the long one give one key per
    # kind of arguments: shape, dtype, int/float/bool, structure.
    a3, a4 = np.zeros(3), np.zeros(4)
    calls = [((a3,), {}), ((a4,), {}), ((a3.astype(np.float32),), {}), ((1.0,), {}),
             ((1,), {}), ((True,), {}), ((a3, 1.0), {}), (((a3, 1.0),), {}),
             (([a3, 1.0],), {}), ((a3,), {"k": 1.0}), ((np.float64(1.0),), {}), ((), {})]
    keys = [witness.signature(args, kwargs) for args, kwargs in calls]
    assert len(set(keys)) == len(keys)
    assert witness.signature((np.ones(3),), {}) == keys[0]
