"""Second derivatives through every NumPy rule whose adjoint calls a table helper.

A first-order adjoint calls helpers such as `_s2s_stack_grad` or
`_s2s_prod_grad`; differentiating that adjoint again (grad of grad,
functional.hvp/vhp/hessian) needs a rule for each helper
(s2sgrad/rules/helper_rules.py). For every case of tests/rule_cases.py whose
rule calls one, a scalar function sum(w * sin(f(x))) (w fixed, random) is
built around the case, and its Hessian-vector product by forward over reverse
(functional.hvp) and by reverse over reverse (functional.vhp) is compared with
central differences of s2sgrad's own first-order gradient; a few cases are
also compared with differences of differences of the function alone.
"""
import ast
import math

import numpy as np
import pytest
from rule_cases import CASES
from test_rules import ODE_DYNAMICS, _draw

import s2sgrad
from s2sgrad import functional, runtime
from s2sgrad.rules import all_rules
from s2sgrad.runtime import numpy_grads as numpy_helpers

EPS = 1e-5


def _helpers_called(rule):
    """The numpy_grads helpers a rule's template calls."""
    found = set()
    for node in list(rule.grads.values()) + list(rule.prelude):
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
                fn = runtime.HELPERS.get(sub.func.id)
                if fn is not None and getattr(fn, "__module__", "") == numpy_helpers.__name__:
                    found.add(sub.func.id)
    return found


_RULES = {r.name: r for r in all_rules() if not r.name.startswith("_s2s_")}
_CALLS = {name: _helpers_called(rule) for name, rule in _RULES.items()}
# Helpers whose result never carries a gradient: nothing to differentiate.
_NO_GRADIENT = {"unsupported"}


def _cases():
    for name, cases in sorted(CASES.items()):
        if not (_CALLS.get(name, set()) - _NO_GRADIENT):
            continue
        for k, (expr, specs) in enumerate(cases):
            yield pytest.param(name, expr, specs, id=f"{name}-{k}")


CASE_LIST = list(_cases())


# -- building the scalar function -------------------------------------------------------------
def _is_const(spec):
    return isinstance(spec, tuple) and bool(spec) and spec[0] == "const"


def _leaves(value, path=()):
    """(path, leaf) for every array or number in a (nested) tuple/list output."""
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _leaves(item, path + (i,))
    else:
        yield path, value


def _build(expr, specs, make_module, rng, hv=False):
    """A module with f(*differentiable args) = sum_k sum(W_k * sin(leaf_k(expr))), and
    with hv=True also hv(*args, *vs) = <grad f(args), vs>, differentiated code that calls
    s2sgrad.grad."""
    params = list(specs)
    diff = [p for p in params if not _is_const(specs[p])]
    consts = {p: specs[p][1] for p in params if _is_const(specs[p])}
    args = [_draw(specs[p], rng) for p in diff]
    import re
    modules = sorted(set(re.findall(r"\bscipy\.(special|stats|linalg|signal|integrate|spatial)\b",
                                    expr)))
    head = "import math\nimport numpy as np\nimport s2sgrad\n" + \
        "".join(f"import scipy.{m}\n" for m in modules) + \
        (ODE_DYNAMICS if "integrate" in modules else "")
    probe = {"np": np, "math": math}
    if modules:
        import importlib
        for m in modules:
            importlib.import_module(f"scipy.{m}")
        import scipy
        probe["scipy"] = scipy
        exec(ODE_DYNAMICS, probe)  # noqa: S102 - the test table's own dynamics
    probe.update(consts)
    probe.update(zip(diff, args))
    out = eval(expr, probe)  # noqa: S307 - the test's own table
    terms, weights = [], {}
    for k, (path, leaf) in enumerate(_leaves(out)):
        if not np.issubdtype(np.asarray(leaf).dtype, np.inexact):
            continue
        index = "".join(f"[{i}]" for i in path)
        weights[f"W{k}"] = rng.uniform(0.5, 1.5, np.shape(leaf)) if np.ndim(leaf) else \
            float(rng.uniform(0.5, 1.5))
        terms.append(f"np.sum(W{k} * np.sin(out{index}))")
    body = " + ".join(terms)
    source = f"{head}\n\ndef f({', '.join(diff)}):\n    out = {expr}\n    return {body}\n"
    if hv:
        vs = [f"v_{p}" for p in diff]
        names = ", ".join(f"grad_{i}" for i in range(len(diff)))
        wrt = "0" if len(diff) == 1 else f"({', '.join(str(i) for i in range(len(diff)))})"
        dots = " + ".join(f"np.sum(grad_{i} * {v})" for i, v in enumerate(vs))
        source += (f"\n\ndef hv({', '.join(diff + vs)}):\n"
                   f"    {names} = s2sgrad.grad(f, wrt={wrt})({', '.join(diff)})\n"
                   f"    return {dots}\n")
    module = make_module(source)
    for name, value in {**consts, **weights}.items():
        setattr(module, name, value)
    return (module.f, module.hv, args) if hv else (module.f, args)


def _random_like(x, rng):
    return float(rng.standard_normal()) if isinstance(x, float) else \
        rng.standard_normal(np.shape(x))


def _flat(values):
    return np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in values])


def _gradient_differences(f, args, vs, eps=EPS):
    """H v by central differences of s2sgrad's (first-order) gradient."""
    grad = s2sgrad.grad(f, wrt=tuple(range(len(args))))

    def at(sign):
        return _flat(grad(*[a + sign * eps * v for a, v in zip(args, vs)]))
    return (at(1.0) - at(-1.0)) / (2 * eps)


def _value_differences(f, args, vs, eps=1e-3, inner=1e-4):
    """H v by differences of differences of f alone (no derivative code at all)."""
    def numeric_grad(point):
        flat = _flat(point)
        sizes = [int(np.size(a)) for a in point]
        out = np.zeros(flat.size)
        for i in range(flat.size):
            values = []
            for sign in (1.0, -1.0):
                moved = flat.copy()
                moved[i] += sign * inner
                pieces, start = [], 0
                for a, n in zip(point, sizes):
                    chunk = moved[start:start + n]
                    pieces.append(float(chunk[0]) if isinstance(a, float)
                                  else chunk.reshape(np.shape(a)))
                    start += n
                values.append(f(*pieces))
            out[i] = (values[0] - values[1]) / (2 * inner)
        return out
    plus = numeric_grad([a + eps * v for a, v in zip(args, vs)])
    minus = numeric_grad([a - eps * v for a, v in zip(args, vs)])
    return (plus - minus) / (2 * eps)


def _products(f, args, vs):
    inputs, tangents = tuple(args), tuple(vs)
    _, hv = functional.hvp(f, inputs, tangents)
    _, vh = functional.vhp(f, inputs, tangents)
    return _flat(hv), _flat(vh)


def _check(got, expected, what, rtol=1e-5, atol=1e-6):
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol * scale, err_msg=what)


# -- every rule case: forward over reverse and reverse over reverse -----------------------------
@pytest.mark.parametrize("name, expr, specs", CASE_LIST)
def test_hessian_vector_product_matches_differences_of_the_gradient(name, expr, specs,
                                                                     make_module, rng):
    f, args = _build(expr, specs, make_module, rng)
    vs = [_random_like(a, rng) for a in args]
    hv, vh = _products(f, args, vs)
    expected = _gradient_differences(f, args, vs)
    _check(hv, expected, "forward over reverse (functional.hvp)")
    _check(vh, expected, "reverse over reverse (functional.vhp)")
    _check(hv, vh, "forward over reverse vs reverse over reverse", rtol=1e-9, atol=1e-10)


# -- a few against differences of differences of the function alone ---------------------------
_BY_ID = {p.id: p.values for p in CASE_LIST}
_INDEPENDENT = ["np.prod-3", "np.cumprod-2", "np.max-4", "np.std-3", "np.stack-1",
                "np.take-1", "np.linalg.eigh-1", "np.linalg.svd-0", "np.linalg.cholesky-3",
                "np.linalg.det-2", "np.linalg.norm-7", "np.interp-1", "np.corrcoef-1",
                "np.average-3"]


@pytest.mark.parametrize("case", [c for c in _INDEPENDENT if c in _BY_ID])
def test_hessian_vector_product_matches_differences_of_differences(case, make_module, rng):
    name, expr, specs = _BY_ID[case]
    f, args = _build(expr, specs, make_module, rng)
    vs = [_random_like(a, rng) for a in args]
    hv, vh = _products(f, args, vs)
    expected = _value_differences(f, args, vs)
    _check(hv, expected, "forward over reverse", rtol=1e-4, atol=1e-5)
    _check(vh, expected, "reverse over reverse", rtol=1e-4, atol=1e-5)


# -- s2sgrad.grad inside differentiated code (grad of grad) -----------------------------------
_GRAD_OF_GRAD = ["np.stack-2", "np.prod-5", "np.linalg.solve-2", "np.max-1", "np.pad-1",
                 "np.cumprod-1", "np.linalg.qr-3", "np.polyval-1"]


@pytest.mark.parametrize("case", [c for c in _GRAD_OF_GRAD if c in _BY_ID])
def test_grad_of_grad_matches_forward_over_reverse(case, make_module, rng):
    name, expr, specs = _BY_ID[case]
    f, hv_fn, args = _build(expr, specs, make_module, rng, hv=True)
    vs = [_random_like(a, rng) for a in args]
    n = len(args)
    got = s2sgrad.grad(hv_fn, wrt=tuple(range(n)))(*args, *vs)
    expected = _gradient_differences(f, args, vs)
    _check(_flat(got), expected, "grad of grad")
    _check(_flat(got), _products(f, args, vs)[0], "grad of grad vs functional.hvp",
           rtol=1e-9, atol=1e-10)


# -- functions of several outputs, unpacked -------------------------------------------------
_UNPACKED = {
    "eigh": ("w, v = np.linalg.eigh(x)\n    return np.sum(np.sin(w)) + np.sum(v * v * C)",
             {"x": ("spd", (3, 3))}, np.arange(9.0).reshape(3, 3)),
    "svd": ("u, s, vt = np.linalg.svd(x, full_matrices=False)\n"
            "    return np.sum(np.sin(u)) + np.sum(s * s) + np.sum(np.cos(vt))",
            {"x": (3, 2)}, None),
    "qr": ("q, r = np.linalg.qr(x)\n    return np.sum(np.sin(q)) + np.sum(r ** 3)",
           {"x": (3, 2)}, None),
    # some outputs unused: their cotangents are zeros, their tangents absent (None)
    "eigh-values": ("w, v = np.linalg.eigh(x)\n    return np.sum(np.sin(w))",
                    {"x": ("spd", (3, 3))}, None),
    "svd-some": ("u, s, vt = np.linalg.svd(x, full_matrices=False)\n"
                 "    return np.sum(s ** 3) + np.sum(np.sin(vt))", {"x": (2, 3)}, None),
    "qr-r": ("q, r = np.linalg.qr(x)\n    return np.sum(r ** 3)", {"x": ("wellcond", (3, 3))},
             None),
    "slogdet": ("sign, logdet = np.linalg.slogdet(x)\n    return logdet * logdet",
                {"x": ("wellcond", (3, 3))}, None),
    "linspace": ("samples, step = np.linspace(x, y, 4, retstep=True)\n"
                 "    return np.sum(np.sin(samples)) + step ** 2", {"x": (), "y": ()}, None),
    "average": ("avg, total = np.average(x, weights=w, returned=True)\n"
                "    return np.sin(avg) + total ** 2", {"x": (3,), "w": ("positive", (3,))},
                None),
    "broadcast_arrays": ("a, b = np.broadcast_arrays(x, y)\n    return np.sum(np.sin(a * b))",
                         {"x": (3,), "y": (2, 1)}, None),
    "meshgrid": ("gx, gy = np.meshgrid(x, y)\n    return np.sum(np.sin(gx * gy))",
                 {"x": (3,), "y": (2,)}, None),
    "atleast_2d": ("a, b = np.atleast_2d(x, y)\n    return np.sum(np.sin(a)) * np.sum(b * b)",
                   {"x": (3,), "y": ()}, None),
}


@pytest.mark.parametrize("kind", sorted(_UNPACKED))
def test_unpacked_outputs(kind, make_module, rng):
    body, specs, const = _UNPACKED[kind]
    params = list(specs)
    module = make_module(f"import numpy as np\n\n\ndef f({', '.join(params)}):\n"
                         f"    {body}\n")
    module.C = const
    args = [_draw(specs[p], rng) for p in params]
    vs = [_random_like(a, rng) for a in args]
    hv, vh = _products(module.f, args, vs)
    expected = _gradient_differences(module.f, args, vs)
    _check(hv, expected, "forward over reverse")
    _check(vh, expected, "reverse over reverse")


# -- coverage ------------------------------------------------------------------------------
def test_every_helper_a_rule_calls_has_a_second_order_rule():
    """Each helper has a rule with a JVP, has no gradient, or is differentiated from
    its source (the cases above check the derivative it gets either way)."""
    from s2sgrad.rules import jvp_rules, registry
    missing = []
    for helpers in _CALLS.values():
        for h in helpers:
            fn = runtime.HELPERS[h]
            rule = registry.lookup_function(fn)
            if rule is None:
                if not (registry.is_nondiff(fn) or registry.differentiated_from_source(fn)):
                    missing.append(h)
            elif rule.name != f"_s2s_{h}" or jvp_rules.lookup(rule) is None:
                missing.append(h)
    assert not missing, sorted(set(missing))


def test_most_helpers_are_differentiated_from_their_source():
    """One source of the mathematics: a hand-written rule for a helper is the exception
    (a construct the compiler does not differentiate yet, or a shortcut)."""
    from s2sgrad.rules import registry
    called = {h for helpers in _CALLS.values() for h in helpers} - _NO_GRADIENT
    derived = {h for h in called if registry.lookup_function(runtime.HELPERS[h]) is None
               and registry.differentiated_from_source(runtime.HELPERS[h])}
    assert len(derived) >= 95, len(derived)


def test_every_helper_rule_is_exercised_by_a_case():
    exercised = {h for p in CASE_LIST for h in _CALLS[p.values[0]]}
    called = {h for helpers in _CALLS.values() for h in helpers} - _NO_GRADIENT
    assert called <= exercised, sorted(called - exercised)


def test_third_derivative_through_a_derived_helper(make_module, rng):
    """grad of grad of grad through np.prod: the adjoint's helper (prod_grad) is
    differentiated from its source at every order; compared with differences of the
    second derivative."""
    module = make_module("""
        import numpy as np
        import s2sgrad

        def f(x):
            return np.sum(np.sin(np.prod(x, axis=0)))

        def g(x, v):
            return np.sum(s2sgrad.grad(f)(x) * v)

        def h(x, v):
            return np.sum(s2sgrad.grad(g)(x, v) * v)
    """)
    for shape in [(2, 3), (3, 1)]:
        x, v = rng.uniform(0.5, 1.5, shape), rng.standard_normal(shape)
        got = np.sum(s2sgrad.grad(module.h)(x, v) * v)
        expected = (module.h(x + EPS * v, v) - module.h(x - EPS * v, v)) / (2 * EPS)
        _check(np.array([got]), np.array([expected]), "third derivative", rtol=1e-5)
