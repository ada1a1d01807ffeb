"""Forward mode from a VJP's transpose, where the VJP branches on its cotangent.

A VJP is linear in its cotangent g, and forward mode takes its transpose (reverse
mode in g, compiler/tangent/transposed.py). The forward half of that pair runs once
at some g, and its adjoint follows the branches taken there. At g = 0 a VJP that
tests its cotangent (`if not np.any(g): return zeros`, a shortcut users write; the
singular values' term of np.linalg.lstsq's VJP, skipped when their cotangent is 0)
took the special case, and the tangent came out silently 0 or short of a term. The
pair now runs at a generic g (runtime.tangent.generic_cotangent).
"""
import numpy as np
import pytest
from rule_cases import CASES
from test_forward_mode import check_jvp
from test_rules import _draw, _source

from s2sgrad import functional
from s2sgrad.rules import all_rules, jvp_rules
from s2sgrad.runtime.tangent import generic_cotangent

_SHORTCUT_FUNCTION = '''
import numpy as np
import s2sgrad

class Cube(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        if not np.any(g):     # no cotangent, no work
            return np.zeros_like(g)
        return 3.0 * x ** 2 * g

def f(x):
    return np.sum(np.sin(Cube.apply(x)) * x)

def y(x):
    return Cube.apply(x) * 2.0
'''


def _hessian_by_differences(f, x, eps=1e-5):
    import s2sgrad
    grad = s2sgrad.grad(f)
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        e = e.reshape(x.shape)
        cols.append(np.ravel(grad(x + e) - grad(x - e)) / (2 * eps))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_a_function_whose_vjp_shortcuts_a_zero_cotangent(make_module, shape, rng):
    m = make_module(_SHORTCUT_FUNCTION)
    x = rng.uniform(0.3, 1.2, size=shape)
    check_jvp(m.f, [x])
    check_jvp(m.y, [x])
    v = rng.standard_normal(shape)
    expected = _hessian_by_differences(m.f, x) @ np.ravel(v)
    np.testing.assert_allclose(np.ravel(functional.hvp(m.f, x, v)[1]), expected,
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.ravel(functional.vhp(m.f, x, v)[1]), expected,
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", [(5,), (3, 2)])
def test_a_rule_whose_vjp_tests_its_cotangent(make_module, restore_registry, shape, rng):
    m = make_module('''
import numpy as np
import s2sgrad

def scaled(x):
    return 2.0 * x

s2sgrad.defvjp(scaled, "x", x="2.0 * g if np.any(g) else np.zeros_like(g)")

def f(x):
    return scaled(x) * np.cos(x)
''')
    check_jvp(m.f, [rng.standard_normal(shape)])


_CALLED_FUNCTION = '''
import numpy as np
import s2sgrad

class SafeLog(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.log(x)

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        if not np.any(g):
            return np.zeros_like(g)
        for _ in range(1):      # (a return inside a loop: called, not inlined)
            return g / x

def f(x):
    return SafeLog.apply(x * x) * np.cos(x)
'''


@pytest.mark.parametrize("shape", [(3,), (2, 4)])
def test_a_called_vjp_that_shortcuts_a_zero_cotangent(make_module, shape, rng):
    # Not inlined (its body is called): forward mode transposes the call.
    m = make_module(_CALLED_FUNCTION)
    check_jvp(m.f, [rng.uniform(0.5, 1.5, size=shape)])


def test_generic_cotangents_have_the_structure_and_no_zero():
    value = (np.zeros((3, 2)), 1.5, 4, [np.zeros(3, np.float32), None],
             {"a": np.zeros(2, complex)}, np.arange(3))
    got = generic_cotangent(value)
    assert got[0].shape == (3, 2) and np.all(got[0] != 0) and len(np.unique(got[0])) == 6
    assert isinstance(got[1], float) and got[1] != 0
    assert got[2] == 0.0                         # an integer carries no gradient
    assert got[3][0].dtype == np.float32 and np.all(got[3][0] != 0) and got[3][1] is None
    assert got[4]["a"].dtype == complex and np.all(got[4]["a"].imag != 0)
    assert got[5].dtype == np.float64 and not np.any(got[5])


# Rules with a JVP template of their own whose VJP is not transposed here: odeint's
# VJP integrates an adjoint system the compiler does not differentiate (forward mode
# integrates the tangent system instead).
_NOT_TRANSPOSED = {"scipy.integrate.odeint"}
# Cases whose transpose raises, loud: svd(full_matrices=True) of a non-square matrix,
# the singular values read. Its VJP raises where the extra singular vectors' cotangent
# is not 0 (their derivative does not exist), and the transpose runs at a generic
# cotangent of all three results. (The shipped template gives those columns NaN.)
_RAISES = {("np.linalg.svd", 4)}


def _template_cases():
    rules = {r.name: r for r in all_rules()}
    for name in sorted(CASES):
        spec = jvp_rules._SPECS.get(name)
        if name not in rules or name in _NOT_TRANSPOSED or spec is None or \
                spec["kind"] != "template" or not jvp_rules.transposable(rules[name]):
            continue
        for k, (expr, specs) in enumerate(CASES[name]):
            if (name, k) not in _RAISES:
                yield pytest.param(name, k, expr, specs, id=f"{name}-{k}")


@pytest.mark.slow
@pytest.mark.parametrize("name, k, expr, specs", list(_template_cases()))
def test_every_vjp_transposed_agrees_with_differences(name, k, expr, specs, make_module,
                                                      monkeypatch):
    # Two derivations of one derivative checked against each other: a rule with a
    # JVP template of its own, here taken as its VJP's transpose instead. A wrong
    # VJP, or a transposition that loses a branch, fails here.
    rule = next(r for r in all_rules() if r.name == name)
    monkeypatch.delitem(jvp_rules._SPECS, name)
    monkeypatch.setattr(jvp_rules, "_BUILT", {})
    assert jvp_rules.lookup(rule).transposed
    rng = np.random.default_rng(k)
    params = list(specs)
    module = make_module(_source(params, expr))
    args = [_draw(specs[p], rng) for p in params]
    wrt = [i for i, p in enumerate(params)
           if not (isinstance(specs[p], tuple) and specs[p] and specs[p][0] == "const")]
    check_jvp(module.f, args, wrt=wrt)


_CALLED_LINEAR = '''
import numpy as np
import s2sgrad

class Twice(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        return 2.0 * x

    @staticmethod
    def vjp(ctx, g):
        if not np.any(g):
            return np.zeros_like(g)
        for _ in range(1):      # (a return inside a loop: called, not inlined)
            return 2.0 * g, None

def f(x):
    return np.sum(np.sin(Twice.apply(x)) * x)
'''


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_the_hessian_through_a_called_vjp(make_module, shape, rng):
    # Forward over reverse differentiates the adjoint, which calls the vjp and checks
    # what it returned (_s2s_check_count, a trailing None dropped): that check has a
    # rule (it had none: the Hessian raised).
    m = make_module(_CALLED_LINEAR)
    x = rng.uniform(-1.0, 1.0, size=shape)
    v = rng.standard_normal(shape)
    expected = _hessian_by_differences(m.f, x) @ np.ravel(v)
    np.testing.assert_allclose(np.ravel(functional.hvp(m.f, x, v)[1]), expected,
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.ravel(functional.hessian(m.f, x)), np.ravel(
        _hessian_by_differences(m.f, x)), rtol=1e-6, atol=1e-7)


def test_a_second_derivative_through_a_called_function_keeping_values_in_ctx(make_module,
                                                                             rng):
    # Twice differentiated, a called Function's forward keeps differentiated values in
    # ctx, which s2sgrad cannot follow to the vjp that reads them: refused at the
    # user's save_for_backward, saying what to change (reverse over reverse gave a
    # wrong second derivative there, silently, once check_count had a rule).
    import s2sgrad
    m = make_module(_CALLED_FUNCTION + "\n\ndef total(x):\n    return np.sum(f(x))\n")
    x = rng.uniform(0.5, 1.5, size=(3,))
    for second in (lambda: functional.hvp(m.total, x, np.ones(3)),
                   lambda: functional.vhp(m.total, x, np.ones(3)),
                   lambda: functional.hessian(m.total, x)):
        with pytest.raises(s2sgrad.TransformError, match="keeps a differentiated value in "
                                                         "ctx") as info:
            second()
        assert "inlined" in info.value.hint and info.value.lineno is not None
