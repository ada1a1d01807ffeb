"""Issue 34's rule-table part: SciPy loaded lazily, bound methods as rule keys, the
refusals of what has no exact gradient, grad of a one-element output, and the
generated coverage page. (Every new rule's values are checked with all the others
by test_rules.py, test_forward_mode.py and test_second_order_rules.py.)"""
import os
import subprocess
import sys

import numpy as np
import pytest

import s2sgrad
from s2sgrad.rules import coverage, registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- SciPy's rules load lazily ------------------------------------------------------------------
def test_import_does_not_import_scipy():
    code = ("import sys, s2sgrad\n"
            "assert not any(m == 'scipy' or m.startswith('scipy.') for m in sys.modules), "
            "sorted(m for m in sys.modules if m.startswith('scipy'))\n"
            "import numpy as np, scipy.special\n"
            "from s2sgrad.rules import registry\n"
            "assert registry.lookup_function(scipy.special.gamma).name == "
            "'scipy.special.gamma'\n"
            "assert 'scipy.stats' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_lazy_rules_do_not_change_the_cache_fingerprint():
    import scipy.special
    import scipy.stats  # noqa: F401

    from s2sgrad import cache
    assert registry.lookup_function(scipy.special.j0) is not None
    assert cache.rules_fingerprint() == ""


def test_a_users_rule_for_a_scipy_function_wins(make_module, restore_registry):
    import scipy.special

    rule = s2sgrad.defvjp(scipy.special.gamma, "x", x="g * 7.0")
    assert rule.name == "scipy.special.gamma"
    m = make_module("import numpy as np\nimport scipy.special\n"
                    "def f(x):\n    return np.sum(scipy.special.gamma(x))\n")
    np.testing.assert_allclose(s2sgrad.grad(m.f)(np.array([1.5, 2.5])), [7.0, 7.0])
    assert registry.lookup_function(scipy.special.gamma) is rule


def test_bound_methods_are_one_key():
    import scipy.stats
    a, b = scipy.stats.norm.pdf, scipy.stats.norm.pdf
    assert a is not b and registry.rule_key(a) == registry.rule_key(b)
    assert registry.lookup_function(a) is registry.lookup_function(b) is not None
    assert registry.lookup_function(scipy.stats.t.pdf).name == "scipy.stats.t.pdf"


def test_defvjp_of_a_bound_method(make_module):
    m = make_module('''
import numpy as np
import s2sgrad

class Scale:
    def __init__(self, k):
        self.k = k

    def apply(self, x):
        return self.k * x

S = Scale(3.0)
s2sgrad.defvjp(S.apply, "x", x="g * 3.0")

def f(x):
    return np.sum(S.apply(x) ** 2)
''')
    try:
        np.testing.assert_allclose(s2sgrad.grad(m.f)(np.array([1.0, 2.0])), [18.0, 36.0])
    finally:
        registry.REGISTRY.functions.pop(registry.rule_key(m.S.apply), None)


# -- refused, never a silent zero ----------------------------------------------------------
_REFUSED = [
    # (complex eigenvalues: the output is complex, which grad refuses first; on the
    # gradient path of a real loss, the rule refuses them: tests/test_complex_guard.py)
    ("np.linalg.eig(x)[0]", np.array([[0.0, -1.0], [1.0, 0.0]]), TypeError,
     "real-valued output"),
    ("np.linalg.eig(x)[0]", np.eye(3), np.linalg.LinAlgError, "repeated eigenvalues"),
    ("np.linalg.eigvals(x)", np.array([[1.0, -2.0], [2.0, 1.0]]), TypeError,
     "real-valued output"),
    ("scipy.special.betainc(x, 2.0, 0.3)", np.array([1.5, 2.0]), NotImplementedError,
     "betainc with respect to a"),
    ("scipy.special.jv(x, 1.5)", np.array([0.5, 1.0]), NotImplementedError, "order v"),
    ("scipy.special.gammainc(x, 1.0)", np.array([0.5, 1.0]), NotImplementedError,
     "gammainc with respect to a"),
    ("scipy.stats.t.cdf(0.3, x)", np.array([2.0, 3.0]), NotImplementedError,
     "t.cdf with respect to df"),
    ("np.gradient(np.arange(4.0) ** 2, x)", np.array([0.0, 1.0, 3.0, 4.0]),
     NotImplementedError, "spacing"),
    ("scipy.stats.multivariate_normal.logpdf(x, cov=2.0)", np.array([0.5, 1.0]),
     NotImplementedError, "full \\(d, d\\) covariance"),
    ("scipy.stats.dirichlet.logpdf(x, np.array([1.5, 2.0, 3.0]))", np.array([0.3, 0.5]),
     NotImplementedError, "K - 1 components"),
    ("scipy.linalg.sqrtm(x)", np.array([[-1.0, 0.2], [0.1, 2.0]]), TypeError,
     "real-valued output"),
]


@pytest.mark.parametrize("expr, x, error, message", _REFUSED,
                         ids=[e for e, *_ in _REFUSED])
def test_no_exact_gradient_raises(expr, x, error, message, make_module):
    pytest.importorskip("scipy")
    m = make_module("import numpy as np\nimport scipy.special, scipy.stats, scipy.linalg\n"
                    f"def f(x):\n    return np.sum({expr})\n")
    with pytest.raises(error, match=message):
        s2sgrad.grad(m.f)(x)


def test_forward_mode_refuses_too(make_module):
    pytest.importorskip("scipy")
    from s2sgrad import functional
    m = make_module("import numpy as np\nimport scipy.special\n"
                    "def f(v):\n    return scipy.special.iv(v, 1.5)\n")
    with pytest.raises(NotImplementedError, match="order v"):
        functional.jvp(m.f, np.array([0.5, 1.0]), np.ones(2))


def test_partition_follows_the_values_whatever_order_partition_left(make_module):
    m = make_module("import numpy as np\n"
                    "def f(x, w):\n    return np.sum(np.partition(x, 3) * w)\n")
    x = np.array([5.0, -1.0, 3.0, 8.0, 0.5, 2.0])
    w = np.arange(1.0, 7.0)
    g = s2sgrad.grad(m.f)(x, w)
    expected = np.zeros(6)
    out = np.partition(x, 3)
    for i, v in enumerate(out):
        expected[np.flatnonzero(x == v)[0]] = w[i]
    np.testing.assert_allclose(g, expected)


# -- grad of a one-element output --------------------------------------------------------------
def test_grad_of_a_one_element_array(make_module):
    m = make_module('''
import numpy as np
import s2sgrad

def f(x):
    return np.sum(x * x, keepdims=True)

def g(x):
    return (x[None, :1] * x[None, 1:2]) * 3.0

def h(x):
    return np.sum(s2sgrad.grad(f)(x) * x)

def two(x):
    return x[:2]
''')
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(s2sgrad.grad(m.f)(x), 2 * x)
    np.testing.assert_allclose(s2sgrad.grad(m.g)(x), [6.0, 3.0, 0.0])
    value, grad = s2sgrad.value_and_grad(m.f)(x)
    assert value.shape == (1,) and value[0] == 14.0
    np.testing.assert_allclose(grad, 2 * x)
    np.testing.assert_allclose(s2sgrad.grad(m.h)(x), 4 * x)        # grad of grad
    from s2sgrad import functional
    np.testing.assert_allclose(functional.hessian(m.f, x), 2 * np.eye(3))
    with pytest.raises(ValueError, match="returns a scalar"):
        s2sgrad.grad(m.two)(x)


def test_grad_of_a_one_element_array_matches_autograd(make_module):
    autograd = pytest.importorskip("autograd")
    import autograd.numpy as anp
    m = make_module("import numpy as np\n"
                    "def f(x):\n    return np.sin(x[:1]) * np.sum(x)\n")
    x = np.array([0.3, 1.2, -0.7])
    want = autograd.grad(lambda x: anp.sin(x[:1]) * anp.sum(x))(x)
    np.testing.assert_allclose(s2sgrad.grad(m.f)(x), want)


def test_jit_grad_of_a_one_element_array(make_module):
    pytest.importorskip("numba")
    m = make_module('''
import numpy as np

def f(x):
    s = np.zeros(1)
    for i in range(x.shape[0]):
        s = s + x[i] * x[i]
    return s
''')
    np.testing.assert_allclose(s2sgrad.grad(m.f, jit=True)(np.array([1.0, 2.0])), [2.0, 4.0])


# -- the coverage page is generated, and up to date ---------------------------------------------
def test_coverage_page_is_up_to_date():
    pytest.importorskip("autograd")
    pytest.importorskip("scipy")
    path = os.path.join(ROOT, coverage.PAGE)
    with open(path, encoding="utf-8") as f:
        assert f.read() == coverage.page(), \
            "docs/coverage-autograd.md is stale: run python -m s2sgrad.rules.coverage"


def test_coverage_rows_come_from_the_registry():
    pytest.importorskip("scipy")
    table, _ = coverage.rows()
    names = {r[0] for r in table if r[1] is True}
    assert {"np.sum", "np.partition", "np.gradient", "np.linalg.eig", "scipy.special.gamma",
            "scipy.stats.norm.logpdf", "scipy.linalg.expm", "scipy.signal.convolve"} <= names
    for name, ours, _, how in table:
        if ours is True:   # every rule has forward mode, but those whose results are
            # complex (forward mode takes real values only), and says so
            assert not how.startswith("none") or "complex" in how, name
