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
        x = rng.uniform(0.5, 2.0, size=shape) if shape else float(rng.uniform(0.5, 2.0))
        if kind == "away_from_zero":
            sign = rng.choice([-1.0, 1.0], size=shape) if shape else 1.0
            return x * sign
        if kind == "unit":
            return x / 2.5
        return x
    return rng.standard_normal(spec) if spec else float(rng.standard_normal())


def _cases():
    for name, cases in CASES.items():
        for k, (expr, specs) in enumerate(cases):
            yield pytest.param(name, expr, specs, id=f"{name}-{k}")


@pytest.mark.parametrize("name, expr, specs", list(_cases()))
def test_rule_matches_finite_differences(name, expr, specs, make_module, rng):
    params = list(specs)
    module = make_module(f"import numpy as np\n\ndef f({', '.join(params)}):\n"
                         f"    return {expr}\n")
    args = [_draw(specs[p], rng) for p in params]
    wrt = [i for i, p in enumerate(params)
           if not (isinstance(specs[p], tuple) and specs[p] and specs[p][0] == "const")]
    check_vjp(module.f, args, wrt=wrt)


def test_every_rule_has_test_cases():
    # Rules of s2sgrad's own helpers (_s2s_*) are tested in test_runtime_rules.py.
    missing = sorted(r.name for r in all_rules()
                     if r.name not in CASES and not r.name.startswith("_s2s_"))
    assert not missing, f"rules without test inputs in tests/rule_cases.py: {missing}"


def test_every_case_names_a_rule():
    names = {r.name for r in all_rules()}
    assert set(CASES) <= names, sorted(set(CASES) - names)


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
