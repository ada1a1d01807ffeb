"""Third derivatives through every rule of the table, against differences.

Second derivatives of the table's helpers are derived by differentiating the
helpers' own source (rules/helper_rules.py), so any order comes from one
definition of each rule. For every case of tests/rule_cases.py, with the scalar
function f of tests/test_second_order_rules.py (sum(W * sin(rule(x)))) and a random
direction v, s2sgrad differentiates t(x) = v' H(x) v, itself computed as grad of
grad, once more; its derivative along v is compared with central differences of t.
"""
import numpy as np
import pytest
from rule_cases import CASES
from test_second_order_rules import _build, _check, _flat, _random_like

import s2sgrad

EPS = 1e-5

# Rules whose third derivative s2sgrad refuses (TransformError), and why: each names
# where the mathematics is still written by hand or what the compiler does not read
# yet. A case here that starts to differentiate fails the test below: move it out.
REFUSED = {
    "scipy.integrate.odeint": "no second-order rule for the adjoint method",
}
# Cases of a REFUSED rule that differentiate (the refused construct is not reached).
DIFFERENTIATED: set = set()
CASE_LIST = [pytest.param(name, expr, specs, id=f"{name}-{k}")
             for name, cases in sorted(CASES.items()) for k, (expr, specs) in enumerate(cases)]


@pytest.mark.slow
@pytest.mark.parametrize("name, expr, specs", CASE_LIST)
def test_third_derivative_matches_differences(name, expr, specs, make_module, rng, request):
    case = request.node.callspec.id
    if name in REFUSED and case not in DIFFERENTIATED:
        with pytest.raises(s2sgrad.TransformError):
            _third_along(expr, specs, make_module, rng)
        return
    got, expected = _third_along(expr, specs, make_module, rng)
    _check(np.array([got]), np.array([expected]), "third derivative along v", rtol=1e-4,
           atol=1e-5)


def _third_along(expr, specs, make_module, rng):
    """d/dt of v' H(x + t v) v by s2sgrad (grad of grad of grad), and by differences."""
    f, hv, args = _build(expr, specs, make_module, rng, hv=True)
    n = len(args)
    vs = [_random_like(a, rng) for a in args]
    module = make_module(
        "import numpy as np\nimport s2sgrad\n\n"
        f"def vhv({', '.join(f'a{i}' for i in range(n))}):\n"
        f"    hs = s2sgrad.grad(HV, wrt={tuple(range(n))!r})"
        f"({', '.join([f'a{i}' for i in range(n)] + [f'VS[{i}]' for i in range(n)])})\n"
        f"    return {' + '.join(f'np.sum(hs[{i}] * VS[{i}])' for i in range(n))}\n")
    module.HV, module.VS = hv, vs
    third = s2sgrad.grad(module.vhv, wrt=tuple(range(n)))(*args)
    got = float(np.dot(_flat(third), _flat(vs)))
    plus = module.vhv(*[a + EPS * v for a, v in zip(args, vs)])
    minus = module.vhv(*[a - EPS * v for a, v in zip(args, vs)])
    return got, (plus - minus) / (2 * EPS)
