"""Every entry of the gradient table against central finite differences."""
import numpy as np
import pytest
from conftest import check_vjp
from rule_cases import CASES

from s2sgrad.rules import all_rules


def _draw(spec, rng):
    if isinstance(spec, tuple) and spec and isinstance(spec[0], str):
        kind, shape = spec
        if kind == "const":
            return shape
        if kind == "spd":  # symmetric positive definite (stacks of) matrices
            m = rng.standard_normal(shape)
            return m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])
        if kind == "wellcond":  # square matrices far from singular
            return rng.standard_normal(shape) + 2 * shape[-1] * np.eye(shape[-1])
        if kind == "sorted":  # strictly increasing, steps in [0.5, 1.5]
            return np.cumsum(rng.uniform(0.5, 1.5, size=shape))
        if kind == "with_zeros":  # exact zeros (every third entry): a rule's special case
            x = rng.standard_normal(shape)
            x.flat[::3] = 0.0
            return x
        if kind == "rank_deficient":  # (stacks of) n x n matrices of rank n - 1
            n = shape[-1]
            return rng.standard_normal(shape[:-1] + (n - 1,)) @ \
                rng.standard_normal(shape[:-2] + (n - 1, n))
        x = rng.uniform(0.5, 2.0, size=shape) if shape else float(rng.uniform(0.5, 2.0))
        if kind == "away_from_zero":
            sign = rng.choice([-1.0, 1.0], size=shape) if shape else 1.0
            return x * sign
        if kind == "unit":
            return x / 2.5
        return x
    return rng.standard_normal(spec) if spec else float(rng.standard_normal())


def _source(params, expr, numpy="numpy"):
    """The module text of one case (SciPy imported when the case uses it, and the
    dynamics odeint's cases integrate defined)."""
    import re
    head = f"import {numpy} as np\n"
    modules = sorted(set(re.findall(r"\bscipy\.(special|stats|linalg|signal|integrate|spatial)\b",
                                    expr)))
    if numpy == "numpy":
        head += "".join(f"import scipy.{m}\n" for m in modules)
    elif modules:
        head += "import autograd.scipy as scipy\n"
        head += "".join(f"import autograd.scipy.{m}\n" for m in modules)
        for dist in sorted(set(re.findall(r"\bscipy\.stats\.(\w+)\.", expr))):
            head += f"import autograd.scipy.stats.{dist}\n"
    if re.search(r"\bmath\.", expr):
        head += "import math\n"
    if "integrate" in modules:
        head += ODE_DYNAMICS
    return f"{head}\ndef f({', '.join(params)}):\n    return {expr}\n"


ODE_DYNAMICS = """

def _decay(y, t, k):
    return -k * y + np.sin(3.0 * t) * np.tanh(y)


def _coupled(t, y, a, b):
    return np.dot(a, y) * 0.3 + b * np.cos(t)
"""


def _cases():
    for name, cases in CASES.items():
        for k, (expr, specs) in enumerate(cases):
            yield pytest.param(name, expr, specs, id=f"{name}-{k}")


@pytest.mark.parametrize("name, expr, specs", list(_cases()))
def test_rule_matches_finite_differences(name, expr, specs, make_module, rng):
    params = list(specs)
    module = make_module(_source(params, expr))
    args = [_draw(specs[p], rng) for p in params]
    wrt = [i for i, p in enumerate(params)
           if not (isinstance(specs[p], tuple) and specs[p] and specs[p][0] == "const")]
    check_vjp(module.f, args, wrt=wrt)


def test_every_rule_has_test_cases():
    # Rules of s2sgrad's own helpers (_s2s_*) are tested in test_runtime_rules.py; a
    # user's rule (s2sgrad.defvjp in a test or fuzz program run before) is not the table's.
    from s2sgrad.rules.registry import is_shipped
    missing = sorted(r.name for r in all_rules() if is_shipped(r) and
                     r.name not in CASES and not r.name.startswith("_s2s_"))
    assert not missing, f"rules without test inputs in tests/rule_cases.py: {missing}"


def test_every_case_names_a_rule():
    names = {r.name for r in all_rules()}
    assert set(CASES) <= names, sorted(set(CASES) - names)


def test_calls_taken_for_one_array_return_one(rng):
    """Where the compiler takes a NumPy or SciPy call for one array or number (its rule
    declares neither outputs nor a sequence result), its cotangents add with `+`; a call
    that returned a tuple there would have them concatenated (a third derivative of
    scipy.linalg.pinv(return_rank=True) was wrong so). Every call of every case."""
    import ast
    import importlib
    import re

    import scipy

    from s2sgrad.compiler.returns import one_library_array
    from s2sgrad.rules import registry
    probe = {"np": np, "scipy": scipy}
    for name, cases in CASES.items():
        for expr, specs in cases:
            for module in set(re.findall(r"\bscipy\.(special|stats|linalg|signal|integrate|"
                                         r"spatial)\b", expr)):
                importlib.import_module(f"scipy.{module}")
            exec(ODE_DYNAMICS, probe)  # noqa: S102 - the test table's own dynamics
            values = dict(probe, **{p: _draw(spec, rng) for p, spec in specs.items()})
            for call in ast.walk(ast.parse(expr, mode="eval")):
                if not isinstance(call, ast.Call):
                    continue
                try:
                    fn = eval(ast.unparse(call.func), values)  # noqa: S307 - the table's
                except Exception:  # noqa: BLE001 - a method of a value: not a library call
                    continue
                rule = registry.lookup_function(fn) if callable(fn) else None
                if one_library_array(fn, rule):
                    value = eval(ast.unparse(call), values)  # noqa: S307 - the table's
                    assert not isinstance(value, (tuple, list)), \
                        f"{name}: {ast.unparse(call)} returns a {type(value).__name__}, but " \
                        f"its rule declares neither outputs= nor sequence_result"


def test_cases_cover_two_shapes_each():
    for name, cases in CASES.items():
        assert len(cases) >= 2, name


def test_float32_gradient_keeps_dtype(make_module):
    import s2sgrad
    m = make_module("import numpy as np\ndef f(x):\n    return np.sum(np.sin(x) * x)\n")
    x = np.linspace(0.1, 1.0, 4).astype(np.float32)
    g = s2sgrad.grad(m.f)(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-5)


# -- comparison with HIPS autograd (when installed) ---------------------------------------
def _autograd_vjps(expr, specs, args, wrt, v):
    """autograd's VJPs of the same expression, written against autograd.numpy."""
    import warnings

    import autograd
    params = list(specs)
    src = _source(params, expr, numpy="autograd.numpy")
    ns: dict = {}
    exec(compile(src, f"<autograd case {expr}>", "exec"), ns)  # noqa: S102 - test text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [autograd.make_vjp(ns["f"], i)(*args)[0](v) for i in wrt]


def _ours(expr, specs, make_module, rng):
    """s2sgrad's VJPs, and what autograd needs to compute its own on the same point."""
    from conftest import random_cotangent

    import s2sgrad
    params = list(specs)
    module = make_module(_source(params, expr))
    args = [_draw(specs[p], rng) for p in params]
    wrt = tuple(i for i, p in enumerate(params)
                if not (isinstance(specs[p], tuple) and specs[p] and specs[p][0] == "const"))
    out, pullback = s2sgrad.vjp(module.f, *args, wrt=wrt)
    v = random_cotangent(out, np.random.default_rng(0))
    return pullback(v), (expr, specs, args, wrt, v)


def _autograd_cases(different: bool):
    from autograd_differences import AUTOGRAD_DIFFERENT
    for param in _cases():
        if (param.id in AUTOGRAD_DIFFERENT) == different:
            yield param


@pytest.mark.parametrize("name, expr, specs", list(_autograd_cases(False)))
def test_rule_matches_autograd(name, expr, specs, make_module, rng):
    pytest.importorskip("autograd")
    ours, point = _ours(expr, specs, make_module, rng)
    theirs = _autograd_vjps(*point)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=f"argument {i}")


@pytest.mark.parametrize("name, expr, specs", list(_autograd_cases(True)))
def test_autograd_differences_are_real(name, expr, specs, make_module, rng):
    """Every case listed in autograd_differences.py really fails or differs in autograd."""
    pytest.importorskip("autograd")
    ours, point = _ours(expr, specs, make_module, rng)
    try:
        theirs = _autograd_vjps(*point)
    except Exception:
        return  # autograd raised (no rule, or arguments it does not accept)
    same = all(np.shape(a) == np.shape(b) and np.allclose(a, b, rtol=1e-6, atol=1e-7)
               for a, b in zip(ours, theirs))
    assert not same, f"{name}: autograd agrees here; remove it from AUTOGRAD_DIFFERENT"


def test_every_shipped_template_names_only_known_names():
    """The shipped tables' templates are not checked at import (for its speed): here.
    Every name is a parameter, g, ans, np, a runtime helper or a prelude's local."""
    from s2sgrad.rules import registry
    registry.load_scipy_rules()
    assert registry.check_shipped_names() > 300


def test_the_shipped_name_check_can_fail(monkeypatch):
    from s2sgrad.rules import registry
    with pytest.raises(ValueError, match="not_a_helper"):   # a user's rule: at once
        registry.make_rule("probe", "x", {"x": "g * not_a_helper(x)"})
    monkeypatch.setattr(registry, "_SHIPPING", True)        # a shipped one: by the test
    monkeypatch.setattr(registry, "_UNCHECKED", [])
    registry.make_rule("probe", "x", {"x": "g * not_a_helper(x)"})
    with pytest.raises(ValueError, match="not_a_helper"):
        registry.check_shipped_names()


def test_a_rule_parameter_named_like_the_cotangent_is_refused():
    """In a template `g` is the cotangent and `ans` the result: a parameter of either
    name would be read instead, silently (sorted's helper once had one)."""
    from s2sgrad.rules import registry
    for bad in ("g, x", "x, ans"):
        with pytest.raises(ValueError, match="may not be named"):
            registry.make_rule("probe", bad, {"x": "g * 2.0"})
