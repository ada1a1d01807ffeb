"""Programs outside probes found silently wrong or crashing (issue 31, "Exact or loud").

Every gradient here is compared with central differences of the original Python
function, on two argument shapes where the code allows; higher derivatives with
central differences of a first derivative that is itself checked against
differences in this file or elsewhere in the suite.
"""
import numpy as np
import pytest
from conftest import check_vjp, import_source, numeric_grad

import s2sgrad
from s2sgrad import functional

SOURCE = '''
import functools

import numpy as np
import scipy.special
import s2sgrad


def _pair(h, c):
    return h * c, c


def _cell(h, c, w):
    return np.tanh(h * w + c), c * 0.9 + h


def tuple_call_in_loop(x):
    h, c = x, x
    for _ in range(2):
        h, c = _pair(h, c)
    return np.sum(h)


def tuple_call_in_branch(x):
    h, c = x, x * 0.5
    if np.sum(x) > -100.0:
        h, c = _pair(h, c)
    return np.sum(h * c)


def tuple_call_with_keywords(x):
    h, c = x, x + 1.0
    for _ in range(3):
        h, c = _cell(c=c, w=0.7, h=h)
    return np.sum(h + c)


def tuple_call_one_target_an_argument(x):
    h, c = x, x
    for _ in range(2):
        h, d = _pair(h, c)
    return np.sum(h * d)


class PairFunction(s2sgrad.Function):
    @staticmethod
    def forward(ctx, h, c):
        ctx.save_for_backward(h, c)
        return h * c, c

    @staticmethod
    def vjp(ctx, gh, gc):
        h, c = ctx.saved_tensors
        return gh * c, gh * h + gc


def tuple_apply_in_loop(x):
    h, c = x, x
    for _ in range(2):
        h, c = PairFunction.apply(h, c)
    return np.sum(h)


def r_joined(x):
    return np.sum(np.cos(np.r_[x, x ** 2]))


def r_with_slices(x):
    return np.sum(np.sin(np.r_[x, 0:3, x[0], 2.0]) ** 2)


def r_with_directive(x):
    return np.sum(np.r_['0,2', x, x * 3.0] ** 3)


def c_joined(x):
    return np.sum(np.sin(np.c_[x, 2.0 * x]) * np.cos(np.c_[x, 2.0 * x]) ** 2)


def enumerate_positional_start(x):
    s = 0.0
    for k, v in enumerate(x, 1):
        s = s + k * np.sum(v)
    return s


def enumerate_keyword_start(x):
    st = 2
    s = 0.0
    for k, v in enumerate(x, start=st):
        s = s + k * np.sum(v ** 2)
        st = 10
    return s


def enumerate_start_in_generator(x):
    return sum(k * np.sum(np.sin(v)) for k, v in enumerate(x, 3))


def matmul_row_by_batch(a, b):
    return np.sum(np.sin(np.matmul(a, b)))


def power_zero(x):
    return np.sum(np.power(x, 0.0) + x ** 0)


def power_of_arrays(x, y):
    return np.sum(np.power(x, y))


def power_of_a_varied_exponent(x):
    return np.sum(np.power(x, np.cos(x)))


def nested_array_literal(x):
    return np.sum(np.array([[x]]) ** 3)


def _cube_sum(x):
    return np.sum(x ** 3)


def unpacked_gradient_inside(x):
    g0, = s2sgrad.grad(_cube_sum, wrt=(0,))(x)
    return np.sum(g0 * np.sin(x))


def return_inside_loop(x):
    for i in range(3):
        if np.sum(x) > 10.0 * (i + 1):
            return np.sum(x ** 2)
        x = x * 2.0
    return np.sum(x ** 3)


def and_in_condition(x):
    if np.sum(x) > -100.0 and np.max(x) < 100.0:
        return np.sum(np.sin(x) * x)
    return np.sum(x)


def _fun(L):
    return np.sum(np.sin(L[0])) + np.sum(np.cos(L[1]))


def _d_fun(L):
    g = s2sgrad.grad(_fun)(L)
    return np.sum(np.sin(g[0])) + np.sum(np.sin(g[1]))


def third_through_structure(L):
    g = s2sgrad.grad(_d_fun)(L)
    return np.sum(g[0]) + np.sum(g[1])


def _fun_dict(D):
    return np.sum(np.sin(D["a"])) + np.sum(np.cos(D["b"]))


def _d_fun_dict(D):
    g = s2sgrad.grad(_fun_dict)(D)
    return np.sum(np.sin(g["a"])) + np.sum(np.sin(g["b"]))


def third_through_dict(D):
    g = s2sgrad.grad(_d_fun_dict)(D)
    return np.sum(g["a"]) + np.sum(g["b"])


def append_to_a_list(a, b):
    return np.sum(np.append(a, b) ** 2)


def indexing_an_unknown_object(x):
    return np.sum(np.s_[x] ** 2)


def star_args(*args):
    return np.sum(args[0] * np.sin(args[1]))


def star_rest(x, *rest):
    s = np.sum(x ** 2)
    for r in rest:
        s = s + np.sum(np.cos(r) * x)
    return s


def times10(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return 10.0 * fn(*args, **kwargs)
    return wrapper


def passes_through(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        """Only forwards the call."""
        return fn(*args, **kwargs)
    return wrapper


@times10
def scaled_by_a_decorator(x):
    return np.sum(x ** 2)


def calls_a_decorated_function(x):
    return scaled_by_a_decorator(x) + 1.0


@times10
@s2sgrad.differentiable
def scaled_over_our_own_mark(x):
    return np.sum(x ** 2)


@passes_through
def forwarded_by_a_decorator(x):
    return np.sum(x ** 2)


@functools.lru_cache(maxsize=None)
def cached_square(x):
    return x * x


G3 = np.array([0.3, -0.2, 0.5])
G4 = np.array([0.1, 0.6, -0.3, 0.2])


def restored_then_rebound(x, y):
    acc = np.tanh(x @ G3 + G4) * 1.0
    if np.sum(acc) > -10.0:
        acc = acc + 0.3 * np.tanh(y @ G3 + G4)
    acc[0] -= np.sum(acc)
    acc = np.sqrt(1.0 + acc * np.tanh(y @ y) ** 2) / (1.0 + acc ** 2)
    return np.sum(np.tanh(acc))


def restored_in_a_loop(x, y):
    s = 0.0
    for t in [0.7, 3.0]:
        out = np.tanh(x * t)
        out[0] = np.sum(y)
        s = s + np.sum(out ** 2)
    return s


def sum_of_a_list_in_a_dict(P, x):
    return np.sum(P["head"]) * np.sum(x) + np.sum(np.append(P["head"], x) ** 2)


def indexed_item_of_a_dict(P):
    s = 0.0
    for i in range(2):
        s = s + np.sum(np.sin(P["enc"][i]) ** 2)
    return s


SLICER = np.s_


def indexing_a_global_alias(x):
    return np.sum(SLICER[x] ** 2)


def sum_of_an_enumerated_comprehension(z):
    return np.sum([np.sin(t) * k for k, t in enumerate(z)])


def centred(y):
    return np.sum(y - np.mean(y))


class OneTupleVjp(s2sgrad.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.cos(a)

    @staticmethod
    def vjp(ctx, g):
        a, = ctx.saved_tensors
        return g * -np.sin(a),          # a one-tuple, as torch allows


def with_one_tuple_vjp(x):
    return np.sum(OneTupleVjp.apply(x) * x)


def _doubles_in_place(u):
    u *= 2.0
    return np.sum(u)


@passes_through
def _clean(u):
    return np.sum(np.sin(u))


@passes_through
def _writer(u):
    u *= 2.0
    return np.sum(u)


def calls_a_decorated_writer(x):
    v = x * 1.0
    return _clean(v) + _writer(v) + np.sum(v ** 2)


def _scaled_helper(u, k=1.0):
    return np.sum(np.tanh(u) * k)


partial_of_a_decorated = functools.partial(scaled_by_a_decorator)


def calls_a_partial_of_a_decorated_function(x):
    return partial_of_a_decorated(x) + 1.0


lambdas = (lambda x: 2.0 * x, lambda x: x ** 3)
scaled, squared = lambda x: x * 6.0, lambda x: x * x * 3.0
make_scaled = lambda k: (lambda x: k * x * x)  # noqa: E731

def tuple_item_read_after_its_name_is_rebound(x, s):
    P = (s, np.sin(x))
    s = x * 3.0
    a, b = P
    return np.sum(a * x + s * b)


def tuple_unpacked_into_its_own_items(x, y):
    P = (y, x)
    x, y = P
    return np.sum(x * np.cos(y))


def functional_of_a_tuple_built_before_a_rebinding(x, w):
    P = (w, x)
    w = w * 2.0
    jac = s2sgrad.functional.jacobian(lambda a, b: np.sum(a * b), P, create_graph=True)
    return np.sum(jac[0] * w) + np.sum(jac[1])

def inner_loop_reuses_the_outer_variable(x):
    y = 0.0
    for i in range(3):
        y = y + np.sum(x[i] ** 2)
        for i in range(2):
            y = y * 1.5
    return y


def outer_variable_read_after_an_inner_loop_over_it(x):
    y = 0.0
    for i in range(3):
        for i in range(1, 3):
            y = y + np.sum(x[i] * x[0])
        y = y + np.sum(x[i] ** 2)
    return y


SCALES = [0.5, 2.0]


def throwaway_loop_variable_read_beside_a_list_loop(x, w):
    y = 0.0
    for _ in range(3):
        y = y + np.sum(x[_] ** 2)
        for v in SCALES:
            y = y + np.sum(v * w * x[0])
    return y


def first_iteration_skip_with_a_nested_loop_over_the_same_name(W, x):
    h = np.zeros(np.shape(x))
    s = 0.0
    for _ in range(3):
        h = np.tanh(W @ h + x)
        for _ in range(2):
            s = s + np.sum(h * h)
    return s



def tuple_slot_overwritten(x, y):
    L = []
    L.append((x, 2.0 * x))
    L[0] = y * y
    return np.sum(L)


def second_order_of_a_tuple_slot_overwritten(x, y):
    return np.sum(s2sgrad.grad(tuple_slot_overwritten)(x, y) * np.sin(x))


def list_item_replaced_by_a_view_of_itself(x):
    mats = [x * 1.5, np.cos(x)]
    mats[0] = mats[0][:, None]
    return np.sum(np.sin(mats[0] * mats[1]))


def indexing_a_parameter_object(x, maker):
    return np.sum(np.sin(maker[x, 2.0 * x]))


def indexing_a_parameter_list_by_a_computed_integer(x, items):
    k = int(np.sum(x > 0.0))
    return np.sum(items[k] * x)


def _product_of_items(t):
    return t[1] * t[0]


def results_tuple_passed_whole_twice(x):
    r = np.linalg.qr(x + 2.0 * np.eye(x.shape[-1]))
    return np.sum(np.sin(_product_of_items(r))) + np.sum(_product_of_items(r) ** 2)


def modf_tuple_passed_whole_twice(x):
    parts = np.modf(0.5 * x)
    return np.sum(_product_of_items(parts) + np.tanh(_product_of_items(parts)) + parts[0])


def split_list_passed_whole_twice(x):
    parts = np.split(x, 2)
    return np.sum(np.sin(_product_of_items(parts))) + np.sum(_product_of_items(parts) ** 2)


def meshgrid_list_passed_whole_twice(x, y):
    grid = np.meshgrid(x, y)
    return np.sum(np.sin(_product_of_items(grid))) + np.sum(_product_of_items(grid) ** 2)


def logsumexp_with_sign_indexed(x, w):
    out = scipy.special.logsumexp(x, b=w, return_sign=True)
    return np.sum(np.sin(out[0])) + np.sum(np.sin(_product_of_items(out)))


def logsumexp_with_sign_hvv(x, w, v):
    first = np.sum(s2sgrad.grad(logsumexp_with_sign_indexed)(x, w) * v)
    return first


def logsumexp_with_sign_vhv(x, w, v):
    return np.sum(s2sgrad.grad(logsumexp_with_sign_hvv)(x, w, v) * v)


def loop_over_ndindex(x):
    out = np.zeros(x.shape)
    for i in np.ndindex(*x.shape[:-1]):
        out[i] = np.sin(x[i]) * x[i]
    return np.sum(out * out)


def loop_over_a_generator(x):
    acc = 0.0
    for row in (r * 2.0 for r in x):
        acc = acc + np.sum(np.tanh(row))
    return acc
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("exact"), "s2s_exact_or_loud", SOURCE)


def _args(shapes, rng, low=None):
    out = []
    for s in shapes:
        value = rng.standard_normal(s) * 0.5 if s else float(rng.standard_normal()) * 0.5
        out.append(value)
    return out


CASES = [
    ("tuple_call_in_loop", [[(3,)], [(2, 3)]]),
    ("tuple_call_in_branch", [[(3,)], [(2, 3)]]),
    ("tuple_call_with_keywords", [[(3,)], [(2, 3)]]),
    ("tuple_call_one_target_an_argument", [[(3,)], [(2, 3)]]),
    ("tuple_apply_in_loop", [[(3,)], [(2, 3)]]),
    ("r_joined", [[(3,)], [(2, 3)]]),
    ("r_with_slices", [[(3,)], [(5,)]]),
    ("r_with_directive", [[(3,)], [(4,)]]),
    ("c_joined", [[(3,)], [(2, 3)]]),
    ("enumerate_positional_start", [[(3,)], [(3, 2)]]),
    ("enumerate_keyword_start", [[(3,)], [(3, 2)]]),
    ("enumerate_start_in_generator", [[(3,)], [(3, 2)]]),
    ("matmul_row_by_batch", [[(3,), (2, 3, 4)], [(4,), (4, 2)]]),
    ("power_of_arrays", [[(3,), (3,)], [(2, 3), (3,)]]),
    ("unpacked_gradient_inside", [[(3,)], [(2, 2)]]),
    ("and_in_condition", [[(3,)], [(2, 2)]]),
    ("tuple_item_read_after_its_name_is_rebound", [[(3,), (3,)], [(2, 3), (3,)]]),
    ("tuple_unpacked_into_its_own_items", [[(3,), (3,)], [(2, 3), (3,)]]),
    ("functional_of_a_tuple_built_before_a_rebinding", [[(3,), (3,)], [(2, 3), (2, 3)]]),
    ("inner_loop_reuses_the_outer_variable", [[(3,)], [(3, 2)]]),
    ("outer_variable_read_after_an_inner_loop_over_it", [[(3,)], [(3, 2)]]),
    ("throwaway_loop_variable_read_beside_a_list_loop", [[(3,), ()], [(3, 2), (2,)]]),
    ("first_iteration_skip_with_a_nested_loop_over_the_same_name", [[(3, 3), (3,)],
                                                                    [(2, 2), (2,)]]),
    ("second_order_of_a_tuple_slot_overwritten", [[(3,), (3,)], [(2, 3), (2, 3)]]),
    # iterators without len() walked by a loop (np.ndindex crashed: no len())
    ("loop_over_ndindex", [[(3, 2)], [(2, 2, 3)]]),
    ("loop_over_a_generator", [[(3,)], [(3, 2)]]),
    ("list_item_replaced_by_a_view_of_itself", [[(3,)], [(2,)]]),
    # a function's tuple of results passed whole to a helper twice: its cotangents
    # were added with `+`, which concatenated them (the second contribution lost)
    ("results_tuple_passed_whole_twice", [[(3, 3)], [(2, 3, 3)]]),
    ("modf_tuple_passed_whole_twice", [[(3,)], [(2, 3)]]),
    # a list for every argument (np.split, np.meshgrid) or for some (return_sign=True)
    ("split_list_passed_whole_twice", [[(4,)], [(2, 3)]]),
    ("meshgrid_list_passed_whole_twice", [[(3,), (2,)], [(4,), (1,)]]),
]


@pytest.mark.parametrize("name, shapes", [(n, s) for n, cases in CASES for s in cases],
                         ids=[f"{n}-{i}" for n, cases in CASES for i in range(len(cases))])
def test_gradient_matches_finite_differences(m, name, shapes, rng):
    f = getattr(m, name)
    args = _args(shapes, rng)
    if name == "power_of_arrays":
        args[0] = np.abs(args[0]) + 0.5
    check_vjp(f, args)


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_logsumexp_with_its_sign_to_third_order(m, shape, rng):
    """logsumexp(..., return_sign=True) is a pair: its cotangents add item by item
    (`+` of the pair concatenated them in a third derivative, 20 % off)."""
    x = rng.standard_normal(shape)
    w = rng.uniform(0.5, 2.0, shape)
    check_vjp(m.logsumexp_with_sign_indexed, [x, w])
    v = rng.standard_normal(shape)
    second = m.logsumexp_with_sign_vhv
    got = np.sum(s2sgrad.grad(second)(x, w, v) * v)
    eps = 1e-5
    np.testing.assert_allclose(
        got, (second(x + eps * v, w, v) - second(x - eps * v, w, v)) / (2 * eps),
        rtol=1e-5, atol=1e-6)


def test_every_result_that_is_a_list_or_tuple_is_declared():
    """A rule whose result is a list or tuple for some case of the table says so
    (outputs=, sequence_results): else it is taken for one array."""
    import scipy  # noqa: F401 - the SciPy cases
    from rule_cases import CASES
    from test_rules import _draw

    from s2sgrad.rules import all_rules
    rules = {r.name: r for r in all_rules()}
    undeclared = []
    rng = np.random.default_rng(0)
    import test_rules
    for name, cases in CASES.items():
        for expr, specs in cases:
            env = dict(vars(test_rules))
            for p, spec in specs.items():
                env[p] = spec[1] if isinstance(spec, tuple) and spec and spec[0] == "const" \
                    else _draw(spec, rng)
            try:
                out = eval(expr, env)  # noqa: S307 - the test table's own expressions
            except Exception:  # noqa: BLE001 - a case that needs more than its specs
                continue
            rule = rules.get(name)
            if isinstance(out, (list, tuple)) and rule is not None and \
                    not (rule.outputs or rule.sequence_result):
                undeclared.append(name)
    assert not undeclared, sorted(set(undeclared))


def test_the_reported_tuple_call_value(make_module):
    """The issue's program: x ** 3 through `h, c = pair(h, c)` twice."""
    mod = make_module('''
def pair(h, c): return h * c, c
def looped(x):
    h, c = x, x
    for _ in range(2):
        h, c = pair(h, c)
    return h
''')
    assert s2sgrad.grad(mod.looped)(0.7) == pytest.approx(1.47)
    out, pullback = s2sgrad.vjp(mod.looped, np.array([0.7, -0.3]))
    np.testing.assert_allclose(pullback(np.ones(2))[0], 3 * np.array([0.7, -0.3]) ** 2)
    _, vjp = functional.vjp(mod.looped, np.array(0.7), np.array(1.0))
    assert float(vjp) == pytest.approx(1.47)
    assert s2sgrad.grad(mod.looped, jit=True)(0.7) == pytest.approx(1.47)


@pytest.mark.parametrize("name", ["tuple_call_in_loop", "tuple_call_with_keywords",
                                  "tuple_apply_in_loop", "r_joined", "c_joined",
                                  "return_inside_loop", "and_in_condition",
                                  "nested_array_literal", "power_of_a_varied_exponent",
                                  # grad of grad: the transpose of zeroing a list item
                                  # whose write changed its shape doubled it
                                  "list_item_replaced_by_a_view_of_itself"])
def test_hessian_matches_differences_of_the_gradient(m, name, rng):
    """Second derivatives (reverse over reverse, and forward over reverse for hvp):
    against central differences of the gradient, which the test above checks."""
    f = getattr(m, name)
    if name == "power_of_a_varied_exponent":
        x = np.abs(rng.standard_normal(3)) + 0.5
    elif name == "nested_array_literal":
        x = np.array(0.7)
    else:
        x = rng.standard_normal(3) * 0.5
    x = np.asarray(x, dtype=float)
    g = s2sgrad.grad(f)
    eps = 1e-5
    cols = []
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = eps
        e = e.reshape(x.shape)
        cols.append(((np.asarray(g(x + e)) - np.asarray(g(x - e))) / (2 * eps)).ravel())
    expected = np.array(cols).T
    hessian = np.asarray(functional.hessian(f, x)).reshape(x.size, x.size)
    np.testing.assert_allclose(hessian, expected, rtol=1e-5, atol=1e-6)
    v = rng.standard_normal(x.shape)
    _, hv = functional.hvp(f, x, v)
    np.testing.assert_allclose(np.ravel(hv), expected @ np.ravel(v), rtol=1e-5, atol=1e-6)
    second = s2sgrad.grad(lambda z: np.sum(s2sgrad.grad(f)(z) * v))(x)
    np.testing.assert_allclose(np.ravel(second), expected.T @ np.ravel(v), rtol=1e-5,
                               atol=1e-6)


def test_jvp_of_a_gradient_with_a_return_inside_a_loop(m, rng):
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    g = s2sgrad.grad(m.return_inside_loop)
    _, tangent = functional.jvp(g, x, v)
    eps = 1e-6
    np.testing.assert_allclose(tangent, (g(x + eps * v) - g(x - eps * v)) / (2 * eps),
                               rtol=1e-6, atol=1e-6)


def _numeric_structure_grad(f, items, wrap, eps=1e-6):
    out = []
    for k in range(len(items)):
        gk = np.zeros_like(items[k])
        for i in np.ndindex(items[k].shape):
            plus = [a.copy() for a in items]
            minus = [a.copy() for a in items]
            plus[k][i] += eps
            minus[k][i] -= eps
            gk[i] = (f(wrap(plus)) - f(wrap(minus))) / (2 * eps)
        out.append(gk)
    return out


@pytest.mark.parametrize("wrap", [list, tuple], ids=["list", "tuple"])
@pytest.mark.parametrize("shape", [(2,), (2, 3)])
def test_third_derivative_through_a_structure(m, wrap, shape, rng):
    """grad of a function of grad of a function of grad: the third derivative
    (the issue's numbers: [-0.6229, -0.6468] for the first item)."""
    items = [rng.standard_normal(shape), rng.standard_normal(shape)]
    got = s2sgrad.grad(m.third_through_structure)(wrap(items))
    assert type(got) is wrap
    expected = _numeric_structure_grad(
        lambda L: float(np.sum(s2sgrad.grad(m._d_fun)(L)[0]) +
                        np.sum(s2sgrad.grad(m._d_fun)(L)[1])), items, wrap)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    first = s2sgrad.grad(m._d_fun)(wrap(items))   # the second derivative, checked
    for g, e in zip(first, _numeric_structure_grad(m._d_fun, items, wrap)):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7)
    if shape == (2,) and wrap is list:
        value = s2sgrad.grad(m.third_through_structure)(
            [np.array([0.3, -1.2]), np.array([0.7, 2.0])])
        np.testing.assert_allclose(value[0], [-0.6229, -0.6468], atol=1e-4)


def test_third_derivative_through_a_dict(m, rng):
    a, b = rng.standard_normal(3), rng.standard_normal(3)
    got = s2sgrad.grad(m.third_through_dict)({"a": a, "b": b})
    assert list(got) == ["a", "b"]
    expected = _numeric_structure_grad(
        lambda D: float(m.third_through_dict(D)), [a, b],
        lambda items: {"a": items[0], "b": items[1]})
    np.testing.assert_allclose(got["a"], expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["b"], expected[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("container", [list, tuple])
@pytest.mark.parametrize("n", [2, 3])
def test_append_to_a_list_argument(m, container, n, rng):
    values = [float(v) for v in rng.standard_normal(n)]
    b = rng.standard_normal(2)
    got = s2sgrad.grad(m.append_to_a_list, wrt=(0, 1))(container(values), b)
    assert type(got[0]) is container
    expected = _numeric_structure_grad(
        lambda a: m.append_to_a_list(container(float(v) for v in a), b),
        [np.array(values)], lambda items: items[0])[0]
    np.testing.assert_allclose(got[0], expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[1], 2 * b)


def test_enumerate_start_value_and_gradient(m):
    """The issue's numbers: value 1.4 and gradient [1, 2, 3] for x = [0.1, 0.2, 0.3]."""
    x = np.array([0.1, 0.2, 0.3])
    value, grad = s2sgrad.value_and_grad(m.enumerate_positional_start)(x)
    assert value == pytest.approx(1.4)
    np.testing.assert_allclose(grad, [1.0, 2.0, 3.0])
    value, grad = s2sgrad.value_and_grad(m.enumerate_positional_start)([0.1, 0.2, 0.3])
    assert value == pytest.approx(1.4)
    np.testing.assert_allclose(grad, [1.0, 2.0, 3.0])
    _, tangent = functional.jvp(m.enumerate_start_in_generator, x, np.ones(3))
    eps = 1e-6
    f = m.enumerate_start_in_generator
    assert float(tangent) == pytest.approx((f(x + eps) - f(x - eps)) / (2 * eps), rel=1e-6)


@pytest.mark.parametrize("x", [0.0, np.float64(0.0), np.zeros(3), np.array([0.0, 1.5])])
def test_power_zero_has_zero_slope_everywhere(m, x):
    """d/dx x ** 0 is 0 at 0 too (not 0 * inf)."""
    g = s2sgrad.grad(m.power_zero)(x)
    np.testing.assert_array_equal(np.asarray(g), np.zeros(np.shape(x)))


def test_power_slope_folds_for_constant_exponents(make_module):
    """x ** 3 keeps its plain adjoint `g * 3 * x ** 2` after optimisation."""
    mod = make_module('''
import numpy as np
def cube(x):
    return np.sum(x ** 3)
''')
    source = s2sgrad.source(mod.cube)
    assert "power_slope" not in source and "* 3 * x ** 2" in source


def test_lambdas_on_one_line_are_told_apart(m):
    assert s2sgrad.grad(m.lambdas[0])(2.0) == 2.0
    assert s2sgrad.grad(m.lambdas[1])(2.0) == 12.0
    assert s2sgrad.grad(m.scaled)(7.0) == 6.0
    assert s2sgrad.grad(m.squared)(7.0) == 42.0
    assert s2sgrad.grad(m.make_scaled(3.0))(7.0) == 42.0


def test_indexing_an_unknown_object_with_a_value_is_refused(m):
    with pytest.raises(s2sgrad.TransformError, match=r"np\.s_.*cannot tell"):
        s2sgrad.grad(m.indexing_an_unknown_object)(np.ones(3))


@pytest.mark.parametrize("shapes", [[(3,), (3,)], [(2, 3), (3,)]])
def test_star_args_are_positions(m, shapes, rng):
    """`def f(*args)` and `def f(x, *rest)`: every positional argument is a position
    of wrt, as in autograd and JAX."""
    args = _args(shapes, rng)
    check_vjp(m.star_args, args)
    check_vjp(m.star_rest, args + [rng.standard_normal(shapes[1])])
    check_vjp(m.star_rest, args[:1])   # no *rest items at all
    grads = s2sgrad.grad(m.star_rest, wrt=(0, 2))(*args, args[1])
    expected = [s2sgrad.grad(m.star_rest, wrt=i)(*args, args[1]) for i in (0, 2)]
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(g, e)
    direction = [rng.standard_normal(np.shape(a)) for a in args]
    _, tangent = functional.jvp(m.star_rest, tuple(args), tuple(direction))
    eps = 1e-6
    plus = m.star_rest(*[a + eps * d for a, d in zip(args, direction)])
    minus = m.star_rest(*[a - eps * d for a, d in zip(args, direction)])
    assert float(tangent) == pytest.approx((plus - minus) / (2 * eps), rel=1e-6)


def test_a_decorator_that_computes_is_refused(m):
    """`@times10` would be dropped by differentiating the function it wraps."""
    for f in (m.scaled_by_a_decorator, m.calls_a_decorated_function,
              m.scaled_over_our_own_mark):   # (functools.wraps copies our mark outward)
        with pytest.raises(s2sgrad.TransformError, match="wrapped by a decorator"):
            s2sgrad.grad(f)(np.ones(3))


def test_decorators_that_only_forward_are_seen_through(m):
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(s2sgrad.grad(m.forwarded_by_a_decorator)(x), 2 * x)
    assert s2sgrad.grad(m.cached_square)(3.0) == pytest.approx(6.0)


@pytest.mark.parametrize("name, shapes", [("restored_then_rebound", [(4, 3), (3,)]),
                                          ("restored_then_rebound", [(2, 4, 3), (3,)]),
                                          ("restored_in_a_loop", [(3,), (2,)]),
                                          ("restored_in_a_loop", [(2, 3), (4,)])])
def test_a_pullback_called_again_gives_the_same_gradient(m, name, shapes, rng):
    """The adjoint restores overwritten items into its own copies of the forward's
    arrays, also of one it gets back from a saved name or a stack: the forward's
    stay as they were, so a second pullback is the first (the found programs gave
    other numbers on the second call)."""
    f = getattr(m, name)
    args = _args(shapes, rng)
    _, pullback = s2sgrad.vjp(f, *args, witness=False)
    first = pullback(1.0)
    for g, e in zip(pullback(1.0), first):
        np.testing.assert_array_equal(g, e)
    check_vjp(f, args)


def test_a_list_inside_a_dict_read_by_numpy(m, rng):
    """np.sum(P["head"]) and np.append(P["head"], x) on a list in a dict argument:
    the array cotangent of the list is cut into its items (it crashed)."""
    head = [rng.standard_normal(3), rng.standard_normal(3)]
    x = rng.standard_normal(2)
    got = s2sgrad.grad(m.sum_of_a_list_in_a_dict)({"head": head}, x)
    expected = _numeric_structure_grad(
        lambda items: m.sum_of_a_list_in_a_dict({"head": items}, x), head, list)
    for g, e in zip(got["head"], expected):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7)
    second = s2sgrad.grad(lambda P: np.sum(s2sgrad.grad(m.sum_of_a_list_in_a_dict)(P, x)
                                           ["head"][0] ** 2))({"head": head})
    def first(items):
        return float(np.sum(s2sgrad.grad(m.sum_of_a_list_in_a_dict)({"head": items}, x)
                            ["head"][0] ** 2))
    for g, e in zip(second["head"], _numeric_structure_grad(first, head, list)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_an_item_of_a_dict_indexed_by_a_loop_index_is_differentiated(m, rng):
    enc = [rng.standard_normal(3), rng.standard_normal(3)]
    got = s2sgrad.grad(m.indexed_item_of_a_dict)({"enc": enc})
    expected = _numeric_structure_grad(lambda items: m.indexed_item_of_a_dict(
        {"enc": items}), enc, list)
    for g, e in zip(got["enc"], expected):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("maker", [np.r_, np.c_], ids=["r_", "c_"])
def test_indexing_a_parameter_object_with_values_is_refused_in_both_modes(m, maker):
    """maker[x, 2 * x] with np.r_ passed in: its `[...]` computes with the values
    (a silent zero gradient before); an array, list, tuple or dict indexed by a
    computed integer is still differentiated (next test)."""
    x = np.array([0.3, 0.5])
    with pytest.raises(s2sgrad.TransformError, match="indexing maker with values"):
        s2sgrad.grad(m.indexing_a_parameter_object)(x, maker)
    with pytest.raises(s2sgrad.TransformError, match="indexing maker with values"):
        functional.jvp(lambda z: m.indexing_a_parameter_object(z, maker), x, np.ones(2))


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_list_indexed_by_a_computed_integer_is_differentiated(m, shape, rng):
    items = [rng.standard_normal(shape) for _ in range(7)]
    x = rng.standard_normal(shape)
    check_vjp(lambda z: m.indexing_a_parameter_list_by_a_computed_integer(z, items), [x])


def test_indexing_a_global_object_alias_is_refused(m):
    with pytest.raises(s2sgrad.TransformError, match="SLICER"):
        s2sgrad.grad(m.indexing_a_global_alias)(np.ones(3))


@pytest.mark.parametrize("shape", [(4,), (3, 2)])
def test_a_comprehension_read_as_one_array(m, shape, rng):
    check_vjp(m.sum_of_an_enumerated_comprehension, [rng.standard_normal(shape)])


@pytest.mark.parametrize("shape", [(3,), (2, 4)])
def test_a_gradient_that_cancels_to_zero_passes_the_witness(m, shape, rng):
    y = rng.standard_normal(shape)
    g = s2sgrad.grad(m.centred, witness="always")(y)
    np.testing.assert_allclose(g, np.zeros(shape), atol=1e-12)


@pytest.mark.parametrize("shape", [(), (3,)])
def test_forward_mode_of_a_vjp_returning_a_one_tuple(m, shape, rng):
    x = rng.standard_normal(shape)
    v = rng.standard_normal(shape)
    _, tangent = functional.jvp(m.with_one_tuple_vjp, x, v)
    eps = 1e-6
    f = m.with_one_tuple_vjp
    assert float(tangent) == pytest.approx((f(x + eps * v) - f(x - eps * v)) / (2 * eps),
                                           rel=1e-6)
    check_vjp(f, [np.atleast_1d(x)])


def test_a_decorated_helper_writing_into_its_argument_is_refused(m):
    """Its write facts are its own, not those of another function the same
    decorator wraps (they were cached by the shared wrapper's code)."""
    x = np.array([0.3, -0.2, 0.5])
    assert m._clean(x) == pytest.approx(np.sum(np.sin(x)))   # (the clean one is analysed)
    with pytest.raises(s2sgrad.TransformError, match="_writer writes into its parameter"):
        s2sgrad.grad(m.calls_a_decorated_writer)(x)


def test_a_partial_of_a_computing_decorator_is_refused(m):
    with pytest.raises(s2sgrad.TransformError, match="wrapped by a decorator"):
        s2sgrad.grad(m.partial_of_a_decorated)(np.ones(3))
    with pytest.raises(s2sgrad.TransformError, match="wrapped by a decorator"):
        s2sgrad.grad(m.calls_a_partial_of_a_decorated_function)(np.ones(3))


def test_a_third_derivative_through_a_loop_over_pairs_with_an_inner_loop(make_module):
    """The third derivative of a loop over (array, number) pairs with an inner loop:
    the second-order code's nested `for _` loops once clobbered the outer `_`."""
    mod = make_module('''
import numpy as np
import s2sgrad


def g(P):
    acc = 0.0
    for a, b in P:
        for k in range(2):
            acc += b
        acc = acc + np.tanh(a @ a)
    return acc


def g1(P):
    return np.sum(s2sgrad.grad(g)(P)[0][0])


def g2(P):
    return np.sum(s2sgrad.grad(g1)(P)[0][0])
''')
    for a0, a1 in ((np.array([-0.52, 0.21]), np.array([-0.76, 0.12])),
                   (np.array([0.3, -0.4, 0.2]), np.array([0.1, 0.5, -0.3]))):
        P = [(a0, 0.28), (a1, -0.81)]
        got = s2sgrad.grad(mod.g2, witness=False)(P)[0][0]
        h = 1e-6
        want = [(mod.g2([(a0 + h * e, 0.28), P[1]]) - mod.g2([(a0 - h * e, 0.28), P[1]]))
                / (2 * h) for e in np.eye(a0.size)]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_cotangent_summed_from_zeros_is_copied_before_it_is_written_in_place(make_module):
    """`w = P["b"]; L = [w[1]]; L.extend([w, w])`: w's cotangent is the sum of two
    zero items (the helper that adds structures hands back one of them as it is),
    then its row is added in place: a copy first, not a write into a shared zero."""
    mod = make_module('''
import numpy as np


def f(P):
    w = P["b"]
    L = [w[1]]
    L.extend([w, w])
    return np.sum(np.sin(L[0]))
''')
    for shape in ((2, 3), (3, 2, 2)):
        b = np.random.default_rng(3).standard_normal(shape)
        got = s2sgrad.grad(mod.f)({"b": b})["b"]
        want = np.zeros(shape)
        want[1] = np.cos(b[1])
        np.testing.assert_allclose(got, want, rtol=1e-12)


LOOP_VARIABLE_BOUND_BEFORE = '''
import numpy as np


def bound_then_looped(x):
    i = 1
    y = x[i] * 2.0
    for i in range(3):
        y = y + x[i] ** 2
    return np.sum(y)


def looped_twice(x):
    y = x[0] * 0.0
    for i in range(2):
        y = y + x[i] * 3.0
    z = x[i] ** 2          # i after the first loop: 1
    for i in range(3):
        y = y + x[i]
    return np.sum(y + z)


def nested_then_looped(w, v):
    r = 0.0
    for _ in range(2):
        for _ in range(2):
            r = r * 0.9
        r = r + 0.3 * np.sum(np.tanh(w[_] * 1.5))
    acc = v * 0.0
    for _ in range(3):
        acc = acc + 0.3 * np.tanh(v)
    return r + np.sum(acc)
'''


@pytest.mark.parametrize("name", ["bound_then_looped", "looped_twice", "nested_then_looped"])
@pytest.mark.parametrize("shape", [(3,), (3, 2)])
def test_a_loop_gives_its_variable_back_the_value_it_had_before(make_module, name, shape):
    """The adjoint sets a range loop's variable from the range and leaves it at the
    first item; the adjoint of the code before the loop read that instead of the
    value the variable had there (`i = 1; y = x[i]; for i in range(3): ...`, or a
    second loop over `i` after a first whose adjoint keeps `i` on a stack): a
    silently wrong gradient, also of ordinary code. (Found by the fuzzer, seed 401.)"""
    mod = make_module(LOOP_VARIABLE_BOUND_BEFORE)
    rng = np.random.default_rng(7)
    f = getattr(mod, name)
    args = (rng.standard_normal(shape),) if name != "nested_then_looped" else \
        (rng.standard_normal((2,) + shape), rng.standard_normal(shape))
    for i in range(len(args)):
        check_vjp(f, args, wrt=(i,))
        got = s2sgrad.grad(f, wrt=i, witness=False)(*args)   # (no self-check to catch it)
        np.testing.assert_allclose(got, numeric_grad(f, list(args), i), rtol=1e-6, atol=1e-8)
