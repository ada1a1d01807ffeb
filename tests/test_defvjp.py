"""s2sgrad.defvjp: rules for third-party functions (template and callable forms)."""
import uuid

import numpy as np
import pytest
from conftest import check_vjp

import s2sgrad
from s2sgrad.runtime.shapes import unbroadcast

# A "third-party" library: its functions are opaque to s2sgrad (a try statement,
# which the compiler refuses), so only a registered rule can differentiate them.
_LIB = '''
import numpy as np

def scale_mul(x, y):
    try:
        return x * np.broadcast_to(y, np.shape(x))
    finally:
        pass

def cube(x):
    try:
        return np.asarray(x) ** 3
    finally:
        pass

def powsum(x, y, n=2):
    try:
        return x ** n + y
    finally:
        pass

def hypot_like(x, y):
    try:
        return np.sqrt(x * x + y * y)
    finally:
        pass

def weighted(xs, w):
    try:
        return sum(wk * x for wk, x in zip(w, xs))
    finally:
        pass
'''


@pytest.fixture(autouse=True)
def _restore_registry(restore_registry):
    """Rules registered by a test are removed after it (the table stays as shipped)."""
    yield


@pytest.fixture
def lib(make_module):
    return make_module(_LIB, name=f"mylib_{uuid.uuid4().hex[:8]}")


def _user(make_module, lib, body, params="x"):
    return make_module(f"import numpy as np\nimport {lib.__name__} as mylib\n\n"
                       f"def f({params}):\n    return {body}\n")


def test_unregistered_third_party_function_is_an_error(make_module, lib):
    m = _user(make_module, lib, "np.sum(mylib.cube(x))")
    with pytest.raises(s2sgrad.TransformError):
        s2sgrad.grad(m.f)(np.array([1.0, 2.0]))


def test_template_form(make_module, lib, rng):
    s2sgrad.defvjp(lib.scale_mul, "x, y", x="g * y", y="g * x", broadcast=True)
    m = _user(make_module, lib, "np.sin(mylib.scale_mul(x, y))", "x, y")
    check_vjp(m.f, [rng.standard_normal((2, 3)), rng.standard_normal(3)])
    text = s2sgrad.source(m.f, wrt=(0, 1))
    assert "_s2s_vjp_" not in text and "_s2s_unbroadcast(" in text  # the template, inline


def test_callable_form(make_module, lib, rng):
    s2sgrad.defvjp(lib.cube, lambda g, ans, x: g * 3 * x ** 2)
    m = _user(make_module, lib, "mylib.cube(x) * 2.0")
    check_vjp(m.f, [rng.standard_normal((2, 2))])
    text = s2sgrad.source(m.f)
    assert f"_s2s_vjp_{lib.__name__}_cube(" in text


def test_callable_form_several_parameters_and_options(make_module, lib, rng):
    def powsum_vjp(g, ans, x, y, n=2):
        return g * n * x ** (n - 1), g

    s2sgrad.defvjp(lib.powsum, powsum_vjp)
    m = _user(make_module, lib, "mylib.powsum(x, y, n=3) + mylib.powsum(y, x)", "x, y")
    check_vjp(m.f, [rng.standard_normal(3), rng.standard_normal(3)])


def test_callable_none_means_zero(make_module, lib, rng):
    s2sgrad.defvjp(lib.powsum, lambda g, ans, x, y: (g * 2 * x, None))
    m = _user(make_module, lib, "np.sum(mylib.powsum(x, y) * x)", "x, y")
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    gx, gy = s2sgrad.grad(m.f, wrt=(0, 1))(x, y)
    np.testing.assert_allclose(gx, 2 * x * x + x ** 2 + y)
    np.testing.assert_array_equal(gy, np.zeros(3))


def test_per_parameter_callables_in_the_template_form(make_module, lib, rng):
    s2sgrad.defvjp(lib.hypot_like, "x, y", x=lambda g, ans, x, y: g * x / ans,
                   y="g * y / ans")
    m = _user(make_module, lib, "mylib.hypot_like(x, y)", "x, y")
    check_vjp(m.f, [rng.standard_normal(4), rng.standard_normal(4)])


def test_reregistering_replaces_the_rule(make_module, lib):
    s2sgrad.defvjp(lib.cube, lambda g, ans, x: g * 0.0)
    s2sgrad.defvjp(lib.cube, lambda g, ans, x: g * 3 * x ** 2)
    m = _user(make_module, lib, "np.sum(mylib.cube(x))")
    np.testing.assert_allclose(s2sgrad.grad(m.f)(np.array([1.0, 2.0])), [3.0, 12.0])


def test_defvjp_rejects_bad_rules(lib):
    with pytest.raises(TypeError):
        s2sgrad.defvjp(lib.cube, lambda g, ans, *xs: g)
    with pytest.raises(TypeError):
        s2sgrad.defvjp(3.0, "x", x="g")
    with pytest.raises(ValueError, match="unknown name"):
        s2sgrad.defvjp(lib.cube, "x", x="g * undefined_name")
    with pytest.raises(ValueError, match="unknown parameters"):
        s2sgrad.defvjp(lib.cube, "x", z="g")


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_per_item_templates_compute_only_the_items_with_a_gradient(make_module, lib, rng,
                                                                   shape):
    whole = []

    def all_items(g, ans, xs, w):
        whole.append(len(xs))
        return [unbroadcast(g * w[k], xs[k]) for k in range(len(xs))]

    s2sgrad.defvjp(lib.weighted, "xs, w", xs=all_items, sequence=("xs",),
                   per_item=dict(xs="unbroadcast(g * w[item], xs[item])"))
    m = make_module(f"import numpy as np\nimport {lib.__name__} as mylib\n\n"
                    "def f(x, y, w):\n"
                    "    return np.sin(mylib.weighted([x, np.ones(x.shape[-1]), y * y], w))\n\n"
                    "def g(x, y, w):\n"
                    "    xs = [x, np.ones(x.shape[-1])]\n"
                    "    xs.append(y * y)\n"
                    "    return np.sin(mylib.weighted(xs, w))\n")
    x, y, w = rng.standard_normal(shape), rng.standard_normal(shape[-1]), rng.standard_normal(3)
    check_vjp(m.f, [x, y, w], wrt=(0, 1))   # the items written out: one template each
    assert whole == []
    text = s2sgrad.source(m.f, wrt=(0, 1))
    assert "w[0]" in text and "w[2]" in text and "w[1]" not in text
    check_vjp(m.g, [x, y, w], wrt=(0, 1))   # a list built apart: the whole template
    assert whole and set(whole) == {3}


def test_per_item_templates_are_checked(lib):
    with pytest.raises(ValueError, match="per-item templates are for sequence parameters"):
        s2sgrad.defvjp(lib.weighted, "xs, w", xs="g", per_item=dict(xs="g * w[item]"))
    with pytest.raises(ValueError, match="unknown name"):
        s2sgrad.defvjp(lib.weighted, "xs, w", xs="g", sequence=("xs",),
                       per_item=dict(xs="g * w[position]"))


def test_rule_count_includes_at_least_150_numpy_entries():
    assert s2sgrad.rules.count() >= 150


def test_forward_mode_of_a_rule_differentiated_again(make_module):
    """jvp(create_graph=True) of code calling a rule of the user's, differentiated in
    reverse: the rule's JVP is the transpose of its VJP, a pair the tangent code calls;
    that pair is pure (it was compiled with `del` statements, which reverse mode
    refused when it read the pair's code again)."""
    module = make_module('''
import numpy as np
import s2sgrad


def user_softsign(x):
    return x / (1.0 + np.abs(x))


s2sgrad.defvjp(user_softsign, "x", x="g / (1.0 + np.abs(x)) ** 2", broadcast=True)


def f(x):
    tangent = s2sgrad.functional.jvp(lambda u: user_softsign(u) * u, x, x,
                                     create_graph=True)[1]
    return np.sum(np.tanh(tangent))
''')
    from conftest import numeric_grad
    for x in (np.array([0.3, -0.8, 1.2]), np.array([[0.5, -1.5], [2.0, 0.1]])):
        got = s2sgrad.grad(module.f)(x)
        np.testing.assert_allclose(got, numeric_grad(module.f, [x], 0), rtol=1e-6, atol=1e-8)
