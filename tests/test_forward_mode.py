"""Forward mode: the tangent (JVP) source transform, its rule table and its code."""
import numpy as np
import pytest
from conftest import import_source
from rule_cases import CASES
from test_rules import _draw, _source

import s2sgrad
from s2sgrad import TransformError, functional
from s2sgrad.compiler import compile_jvp
from s2sgrad.rules import all_rules, jvp_rules

EPS = 1e-6


def _flat(value):
    if isinstance(value, (tuple, list)):
        parts = [_flat(v) for v in value]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.ravel(np.asarray(value, dtype=np.float64))


def _random_like(x, rng):
    if isinstance(x, float):
        return float(rng.standard_normal())
    return rng.standard_normal(np.shape(x))


def check_jvp(f, args, wrt=None, seed=0, rtol=1e-5, atol=1e-6):
    """The generated tangent code against central differences along the tangent."""
    rng = np.random.default_rng(seed)
    wrt = tuple(range(len(args))) if wrt is None else tuple(wrt)
    tangents = [_random_like(args[i], rng) for i in wrt]
    code = compile_jvp(f, wrt)
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    saved = [t.copy() if isinstance(t, np.ndarray) else t for t in tangents]
    out, tangent = code.call(copies, tangents)
    for t, s in zip(tangents, saved):  # the caller's tangents are never written
        np.testing.assert_array_equal(t, s)

    def shifted(sign):
        moved = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        for j, i in enumerate(wrt):
            moved[i] = moved[i] + sign * EPS * tangents[j]
        return f(*moved)
    expected_out = f(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    np.testing.assert_allclose(_flat(out), _flat(expected_out), rtol=1e-12, atol=1e-12)
    numeric = (_flat(shifted(1)) - _flat(shifted(-1))) / (2 * EPS)
    got = _flat(tangent)
    assert got.shape == numeric.shape, (got.shape, numeric.shape)
    np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol)
    return out, tangent


# -- the rule table ----------------------------------------------------------------------------
def test_every_rule_has_a_jvp_or_is_listed_as_unsupported():
    missing = sorted(r.name for r in all_rules()
                     if jvp_rules.lookup(r) is None and r.name not in jvp_rules.UNSUPPORTED)
    assert not missing, f"rules without a JVP (derived or in rules/jvp_rules.py): {missing}"


def test_unsupported_entries_name_rules():
    names = {r.name for r in all_rules()}
    assert set(jvp_rules.UNSUPPORTED) <= names


def test_coverage_says_how_each_jvp_is_obtained():
    how = jvp_rules.coverage()
    assert how["np.sin"].startswith("pointwise")
    assert how["np.sum"].startswith("linear")
    assert how["np.matmul"].startswith("multilinear")
    assert how["np.max"].startswith("reduction")
    assert how["np.linalg.inv"] == "template"


def _cases():
    for name, cases in CASES.items():
        for k, (expr, specs) in enumerate(cases):
            yield pytest.param(name, expr, specs, id=f"{name}-{k}")


@pytest.mark.parametrize("name, expr, specs", list(_cases()))
def test_jvp_rule_matches_finite_differences(name, expr, specs, make_module, rng):
    params = list(specs)
    module = make_module(_source(params, expr))
    args = [_draw(specs[p], rng) for p in params]
    wrt = [i for i, p in enumerate(params)
           if not (isinstance(specs[p], tuple) and specs[p] and specs[p][0] == "const")]
    if name in jvp_rules.UNSUPPORTED:   # forward mode refuses it, at the user's line
        with pytest.raises(TransformError) as info:
            check_jvp(module.f, args, wrt=wrt)
        assert info.value.lineno is not None
        return
    check_jvp(module.f, args, wrt=wrt)


def test_float32_tangents_keep_their_dtype(make_module):
    m = make_module("import numpy as np\ndef f(x):\n    return np.sin(x) * x + np.sum(x)\n")
    x = np.linspace(0.1, 1.0, 4).astype(np.float32)
    _, t = functional.jvp(m.f, x, np.ones(4, np.float32))
    assert t.dtype == np.float32
    np.testing.assert_allclose(t, np.cos(x) * x + np.sin(x) + 4, rtol=1e-5)


def test_integer_results_have_zero_tangent(make_module):
    m = make_module("import numpy as np\n"
                    "def f(x):\n    return x.astype(int) * 1.0 + np.full(3, x[0], dtype=int)\n")
    _, t = functional.jvp(m.f, np.array([0.5, 1.5, 2.5]), np.ones(3))
    np.testing.assert_array_equal(t, np.zeros(3))


@pytest.mark.parametrize("n", [3, 6])
def test_a_rule_without_jvp_gets_its_vjp_transposed(make_module, restore_registry, n, rng):
    # One line of VJP is the whole rule: forward mode differentiates the VJP (linear
    # in g) with respect to g, and its reverse mode is the JVP.
    m = make_module('''
import numpy as np
import s2sgrad

def opaque(x):
    return np.cumsum(x)[::-1]

s2sgrad.defvjp(opaque, "x", x="np.cumsum(g)[::-1]")

def f(x):
    y = np.sin(x)
    return opaque(y) * x
''')
    assert jvp_rules.lookup(s2sgrad.rules.registry.lookup_function(m.opaque)).transposed
    check_jvp(m.f, [rng.standard_normal(n)])
    code = compile_jvp(m.f, (0,))
    assert "opaque: the transpose of its VJP" in code.module_source
    assert code.transposed_rules() == ["opaque"]


def test_a_transposed_jvp_follows_the_vjp_it_is_given(make_module, restore_registry, rng):
    # The JVP is the VJP's transpose, so a VJP and its JVP agree by construction:
    # a wrong VJP gives the transpose of that wrong map (the derivative witness
    # says it does not check such a rule; see test_witness.py).
    m = make_module('''
import numpy as np
import s2sgrad

def doubled(x):
    return 2.0 * x

s2sgrad.defvjp(doubled, "x", x="3.0 * g")

def f(x):
    return doubled(x)
''')
    x, u = rng.standard_normal(4), rng.standard_normal(4)
    _, tangent = functional.jvp(m.f, x, u)
    np.testing.assert_allclose(tangent, 3.0 * u)


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_transposed_jvp_of_a_list_parameter_with_constant_items(make_module,
                                                                  restore_registry, shape, rng):
    m = make_module('''
import numpy as np
import s2sgrad

def stacked(xs, w):
    return np.stack(xs) * w

s2sgrad.defvjp(stacked, "xs, w", xs="list(g * w)", w="np.sum(g * np.stack(xs), axis=0)",
               sequence=("xs",))

def f(a, w):
    return stacked([np.sin(a), np.ones(a.shape), a * w], w)
''')
    check_jvp(m.f, [rng.standard_normal(shape), rng.standard_normal(shape[-1:])])


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_derived_jvps_differentiate_again(make_module, restore_registry, shape, rng):
    # The gradient of a jvp taken with create_graph=True, where the JVPs are derived
    # from VJPs (a rule's transposed, a Function's without jvp): the tangent code's
    # zero cotangent (zero_tangent) carries no gradient.
    m = make_module('''
import numpy as np
import s2sgrad
from s2sgrad import functional

def revcumsum(x):
    return np.cumsum(x[..., ::-1], axis=-1)[..., ::-1]

s2sgrad.defvjp(revcumsum, "x", x="np.cumsum(g, axis=-1)")

class Damped(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        e = np.exp(-x)
        ctx.save_for_backward(x, e)
        return x * e

    @staticmethod
    def vjp(ctx, g):
        x, e = ctx.saved_tensors
        return g * (1.0 - x) * e

def f(x):
    return np.sin(revcumsum(x)) * Damped.apply(x)

def squared_jvp(x, v):
    return np.sum(functional.jvp(f, x, v, create_graph=True)[1] ** 2)
''')
    x, v = rng.standard_normal(shape), rng.standard_normal(shape)
    got = s2sgrad.grad(m.squared_jvp)(x, v)
    eps = 1e-6
    expected = np.zeros(x.size)
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        e = e.reshape(shape)
        expected[k] = (m.squared_jvp(x + e, v) - m.squared_jvp(x - e, v)) / (2 * eps)
    np.testing.assert_allclose(got.ravel(), expected, rtol=1e-6, atol=1e-8)


def test_a_rule_whose_vjp_cannot_be_transposed_raises_at_the_users_line(
        make_module, restore_registry):
    m = make_module('''
import numpy as np
import s2sgrad

def joined(*xs):
    return np.concatenate(xs)[::-1]

s2sgrad.defvjp(joined, "*xs", xs="[g[::-1][:3], g[::-1][3:]]", sequence=("xs",))

def f(x):
    y = np.sin(x)
    return joined(y, x)
''')
    with pytest.raises(s2sgrad.TransformError) as info:
        compile_jvp(m.f, (0,))
    message = str(info.value)
    assert "no forward-mode (JVP) rule for joined" in message
    assert "return joined(y, x)" in message and "^" in message
    # reverse mode still works
    s2sgrad.vjp(m.f, np.ones(3))


def test_defjvp_registers_a_template(make_module, restore_registry):
    m = make_module('''
import numpy as np
import s2sgrad
from s2sgrad.rules import jvp_rules

def softplus(x):
    return np.log1p(np.exp(x))

s2sgrad.defvjp(softplus, "x", x="g / (1.0 + np.exp(-x))")
jvp_rules.defjvp(softplus, x="x_dot / (1.0 + np.exp(-x))")

def f(x):
    return softplus(x) * x
''')
    check_jvp(m.f, [np.array([0.3, -1.2, 2.0])])


@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,))])
def test_a_user_broadcasting_rule_gets_its_vjp_transposed(make_module, restore_registry,
                                                         shapes, rng):
    m = make_module('''
import numpy as np
import s2sgrad

def scale(x, y):
    return x * y

def rowdot(x, y):
    return np.sum(x * y, axis=-1)

s2sgrad.defvjp(scale, "x, y", x="g * y", y="g * x", broadcast=True)
s2sgrad.defvjp(rowdot, "x, y", x="g[..., None] * y", y="g[..., None] * x", broadcast=True)

def f(x, y):
    return scale(x, y) + x

def g(x, y):
    return rowdot(x, y)
''')
    # broadcast=True does not make a function elementwise (rowdot reduces), so
    # neither gets the pointwise JVP; both get their VJP transposed, which
    # unbroadcasts each cotangent to its argument as reverse mode does.
    args = [rng.standard_normal(s) for s in shapes]
    for fn in (m.f, m.g):
        check_jvp(fn, args)
    name = s2sgrad.rules.registry.lookup_function(m.scale).name
    jvp_rules.pointwise(name)   # (declared elementwise: its template, the tangent for g)
    s2sgrad.compiler.forward.clear_cache()
    check_jvp(m.f, args)
    assert "transpose" not in compile_jvp(m.f, (0, 1)).module_source


# -- language constructs -----------------------------------------------------------------------
SOURCE = '''
import numpy as np
import s2sgrad


def branches(x, y):
    if np.sum(x) > 0:
        z = np.sin(x) * y
    elif np.sum(x) > -1:
        z = x ** 3
    else:
        z = 2.0
    return np.sum(z * x)


def one_sided(x):
    if x[0] > 0:
        y = x * 2.0
    else:
        y = 1.0
    return np.sum(y * x)


def looped(x, w):
    h = x
    for i in range(3):
        h = np.tanh(h * w + 0.1 * i) * h
    return h


def over_rows(x):
    total = 0.0
    for row in x:
        total = total + np.sum(row ** 2)
    for i, (a, b) in enumerate(zip(x, x[::-1])):
        total = total * 0.5 + np.sum(a * b) * i
    for r in reversed(x):
        total = total + np.sum(r)
    return total


def whiles(x):
    s = x * 1.0
    k = 0
    while k < 4:
        k += 1
        if k == 2:
            continue
        s = s * x + k
        if np.sum(s) > 50.0:
            break
    return s


def early(x):
    for i in range(5):
        if np.sum(x) * i > 3.0:
            return x * i
        x = x * 1.5
    return -x


def in_place(x):
    y = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = np.sin(x[i]) * x[i - 1]
    y[1:] += x[:-1] ** 2
    return y * y


def aliased(x):
    y = x + 0.0
    y[0] = 5.0
    y[1:] *= x[1:]
    return y


def augmented(x):
    y = x * 1.0
    y += x ** 2
    y *= x
    y /= 1.0 + x * x
    y -= 0.5
    return y


def lists(x):
    items = []
    for i in range(x.shape[0]):
        items.append(x[i] * (i + 1))
    items[1] = items[0] * items[2]
    last = items.pop()
    out = [last, items[-1]]
    return np.stack(out + items)


def helper(a, b=2.0):
    return a * b + np.sin(a)


def calls(x, y):
    z = helper(x)
    w = helper(y, b=x)
    return z * w + helper(b=y, a=3.0)


def rec(x, n):
    if n == 0:
        return x
    return np.sin(rec(x, n - 1)) + x


def _scaled_recursion(scale):
    def scaled_rec(x, n):
        if n == 0:
            return x * scale
        return np.sin(scaled_rec(x, n - 1)) * scale
    return scaled_rec


scaled_rec = _scaled_recursion(1.3)


def even(x, n):
    if n == 0:
        return x
    return odd(x * 1.1, n - 1)


def odd(x, n):
    return np.cos(even(x, n - 1))


def tuples(x):
    a, b = np.sin(x), np.cos(x)
    pair = (a, b)
    c, d = pair
    return c * d, np.sum(c)


def broadcast(x, y):
    return np.sum((x + y) * (x - y) / (1.0 + y ** 2), axis=0)


class Cube(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return 3.0 * x ** 2 * g


class CubeJvp(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_forward(x)
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def vjp(ctx, g):
        raise AssertionError("forward mode must use jvp")

    @staticmethod
    def jvp(ctx, t):
        x, = ctx.saved_tensors
        return 3.0 * x ** 2 * t


class MulAdd(s2sgrad.Function):
    @staticmethod
    def forward(ctx, a, b, k):
        ctx.save_for_backward(a, b)
        ctx.k = k
        return a * b * k, a + b

    @staticmethod
    def backward(ctx, g1, g2):
        a, b = ctx.saved_tensors
        ga = g1 * b * ctx.k + g2 if ctx.needs_input_grad[0] else None
        gb = g1 * a * ctx.k + g2
        return ga, gb, None


class MulAddJvp(s2sgrad.Function):
    @staticmethod
    def forward(ctx, a, b, k):
        ctx.save_for_backward(a, b)
        ctx.k = k
        return a * b * k, a + b

    @staticmethod
    def vjp(ctx, g1, g2):
        raise AssertionError("forward mode must use jvp")

    @staticmethod
    def jvp(ctx, ta, tb, tk):
        a, b = ctx.saved_tensors
        return (ta * b + a * tb) * ctx.k, ta + tb


class NoneTangent(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2.0, np.floor(x)

    @staticmethod
    def vjp(ctx, g1, g2):
        return 2.0 * g1

    @staticmethod
    def jvp(ctx, t):
        return 2.0 * t, None


class Opaque(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_forward(x)
        for _ in range(1):
            ctx.scale = 3.0        # ctx inside a loop: not inlined, called
        return x * 3.0 + x ** 2

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return g * (ctx.scale + 2 * x)

    @staticmethod
    def jvp(ctx, t):
        x, = ctx.saved_tensors
        return t * (ctx.scale + 2 * x)


class OpaqueNoJvp(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        for _ in range(1):
            ctx.scale = 3.0
        return x * 3.0

    @staticmethod
    def vjp(ctx, g):
        return g * ctx.scale


def with_cube(x):
    return np.sum(Cube.apply(x) * np.cos(x))


def with_cube_jvp(x):
    return CubeJvp.apply(x) * np.cos(x)


def with_muladd(x, y):
    p, q = MulAdd.apply(x, y, 2.0)
    return p * q


def with_muladd_jvp(x, y):
    p, q = MulAddJvp.apply(x, y, 2.0)
    return p * q


def with_none(x):
    a, b = NoneTangent.apply(x)
    return a + b


def with_opaque(x):
    return Opaque.apply(x) * x


def with_opaque_no_jvp(x):
    return OpaqueNoJvp.apply(x) * x


def perturbation(x):
    return x * s2sgrad.grad(lambda y: x + y)(1.0)


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def grad_dot(x, v):
    return np.sum(s2sgrad.grad(rosenbrock)(x) * v)


def weighted(out):
    return np.sum(out * np.arange(1.0, 1.0 + np.size(out)).reshape(np.shape(out)))


def scalar_looped(x):
    return weighted(looped(x, 0.8))


def scalar_in_place(x):
    return weighted(in_place(x))


def scalar_whiles(x):
    return weighted(whiles(x))


def scalar_with_cube(x):
    return weighted(with_cube(x))


def scalar_early(x):
    return weighted(early(x))


def scalar_augmented(x):
    return weighted(augmented(x))
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("forward"), "s2s_forward_cases", SOURCE)


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
@pytest.mark.parametrize("sign", [1.0, -1.0, -0.05])
def test_branches(m, shape, sign, rng):
    x = np.abs(rng.standard_normal(shape)) * sign
    check_jvp(m.branches, [x, rng.standard_normal(shape[-1])])


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_tangent_zero_on_one_branch_is_materialised(m, sign, rng):
    x = np.abs(rng.standard_normal(3)) * sign
    check_jvp(m.one_sided, [x])


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((3,), ())])
def test_loops_carry_tangents(m, shapes, rng):
    x = rng.standard_normal(shapes[0])
    w = rng.standard_normal(shapes[1]) if shapes[1] else 0.7
    check_jvp(m.looped, [x, w])


@pytest.mark.parametrize("shape", [(3, 2), (4, 1)])
def test_iteration_over_arrays_zip_enumerate_reversed(m, shape, rng):
    check_jvp(m.over_rows, [rng.standard_normal(shape)])


@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_while_break_continue(m, scale, rng):
    check_jvp(m.whiles, [np.abs(rng.standard_normal(3)) * scale])


@pytest.mark.parametrize("scale", [0.2, 5.0])
def test_early_return_from_a_loop(m, scale, rng):
    check_jvp(m.early, [np.abs(rng.standard_normal(3)) * scale])


@pytest.mark.parametrize("n", [3, 5])
def test_item_assignment_in_loops(m, n, rng):
    check_jvp(m.in_place, [rng.standard_normal(n)])


def test_in_place_writes_never_change_other_tangents(m, rng):
    x = rng.standard_normal(4)
    out, t = check_jvp(m.aliased, [x])
    assert t[0] == 0.0


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_augmented_assignment(m, shape, rng):
    check_jvp(m.augmented, [rng.standard_normal(shape)])


@pytest.mark.parametrize("n", [3, 4])
def test_lists_append_pop_and_item_assignment(m, n, rng):
    check_jvp(m.lists, [rng.standard_normal(n)])


def test_calls_with_defaults_and_keywords(m, rng):
    check_jvp(m.calls, [rng.standard_normal(3), rng.standard_normal(3)])
    check_jvp(m.calls, [rng.standard_normal((2, 3)), rng.standard_normal(3)])


def test_recursion(m, rng):
    check_jvp(m.rec, [rng.standard_normal(3), 3], wrt=[0])
    check_jvp(m.even, [rng.standard_normal(2), 4], wrt=[0])
    source = compile_jvp(m.rec, (0,)).source
    assert "rec_jvp(x, n_minus_1, x_dot)" in source  # calls itself


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_recursion_of_a_closure(m, shape, rng):
    # The function reads a cell of its closure and calls itself: the inner calls once
    # ran a copy made before the cell was bound (x * None, a TypeError).
    x = rng.standard_normal(shape)
    check_jvp(m.scaled_rec, [x, 3], wrt=[0])
    u = rng.standard_normal(shape)
    g = s2sgrad.grad(lambda v: np.sum(m.scaled_rec(v, 2)))
    want = (g(x + 1e-5 * u) - g(x - 1e-5 * u)) / 2e-5
    got = functional.hvp(lambda v: np.sum(m.scaled_rec(v, 2)), x, u)[1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_tuples(m, rng):
    check_jvp(m.tuples, [rng.standard_normal(3)])


@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((4, 1), (1, 3))])
def test_broadcasting(m, shapes, rng):
    check_jvp(m.broadcast, [rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])])


def test_python_floats(m):
    out, t = check_jvp(m.looped, [0.4, 1.3])
    assert isinstance(t, float)


# -- Functions ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_function_without_jvp_derives_it_from_vjp(m, shape, rng):
    check_jvp(m.with_cube, [rng.standard_normal(shape)])
    check_jvp(m.with_muladd, [rng.standard_normal(shape), rng.standard_normal(shape)])
    check_jvp(m.with_muladd, [rng.standard_normal(shape), rng.standard_normal(shape)], wrt=[1])
    source = compile_jvp(m.with_cube, (0,)).source
    assert "no jvp; its tangent is the reverse mode of Cube.vjp" in source
    assert "def Cube_vjp_adjoint(" in source


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_function_jvp_is_inlined(m, shape, rng):
    check_jvp(m.with_cube_jvp, [rng.standard_normal(shape)])
    check_jvp(m.with_muladd_jvp, [rng.standard_normal(shape), rng.standard_normal(shape)])
    source = compile_jvp(m.with_cube_jvp, (0,)).source
    assert "3.0 * x ** 2 * x_dot" in source
    assert "_s2s_call_jvp" not in source and "CubeJvp.forward(" not in source


def test_function_jvp_returning_none_is_a_zero(m, rng):
    check_jvp(m.with_none, [rng.standard_normal(3) * 3])


def test_function_not_inlined_calls_its_jvp(m, rng):
    check_jvp(m.with_opaque, [rng.standard_normal(3)])
    source = compile_jvp(m.with_opaque, (0,)).source
    assert "not inlined" in source and "_s2s_call_jvp(Opaque" in source


def test_function_without_jvp_and_without_inlinable_vjp_raises_naming_the_class(m):
    with pytest.raises(s2sgrad.TransformError) as info:
        compile_jvp(m.with_opaque_no_jvp, (0,))
    message = str(info.value)
    assert "OpaqueNoJvp has no jvp" in message and "OpaqueNoJvp.apply(x)" in message


def test_the_class_check_still_requires_one_of_vjp_or_backward():
    with pytest.raises(TypeError, match="must define a vjp"):
        class OnlyJvp(s2sgrad.Function):  # noqa: F841
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def jvp(ctx, t):
                return t


def test_apply_outside_compiled_code_accepts_save_for_forward(m):
    np.testing.assert_allclose(m.CubeJvp.apply(np.array([2.0])), [8.0])


# -- generated code --------------------------------------------------------------------------
def test_generated_code_is_readable_and_deterministic(m):
    from s2sgrad.compiler import forward
    first = compile_jvp(m.branches, (0, 1)).source
    forward.clear_cache()
    second = compile_jvp(m.branches, (0, 1)).source
    assert first == second
    assert "def branches_jvp(x, y, x_dot, y_dot):" in first
    assert "# line 7: if np.sum(x) > 0:" in first
    assert "# line 8: z = np.sin(x) * y" in first
    assert "sin_x_dot = x_dot * np.cos(x)" in first
    assert "return result, result_dot" in first


def test_names_do_not_clash_with_users_dot_names(make_module, rng):
    mod = make_module("import numpy as np\n"
                      "def f(x, x_dot):\n    x_dot_dot = x * x_dot\n    return x_dot_dot\n")
    check_jvp(mod.f, [rng.standard_normal(3), rng.standard_normal(3)])


def test_unsupported_constructs_raise_like_reverse_mode(make_module):
    mod = make_module("import numpy as np\n"
                      "def f(x):\n    return np.sum(sorted({v * 2 for v in x}))\n")
    with pytest.raises(s2sgrad.TransformError, match="set comprehension"):
        compile_jvp(mod.f, (0,))


# -- forward over reverse ----------------------------------------------------------------------
def test_nested_derivatives_do_not_confuse_perturbations_forward_over_reverse(m):
    # d/dx [ x * (d/dy (x + y))(y=1) ] = 1
    out, t = functional.jvp(m.perturbation, 2.0, 1.0)
    assert out == pytest.approx(2.0)
    assert t == pytest.approx(1.0)


def test_tangent_of_a_gradient_inside_differentiated_code(m, rng):
    x, v = rng.uniform(-1, 1, 4), rng.standard_normal(4)
    _, t = functional.jvp(m.grad_dot, (x, v), (v, np.zeros(4)))
    h = s2sgrad.grad(m.rosenbrock)
    numeric = (h(x + EPS * v) - h(x - EPS * v)) / (2 * EPS)
    assert t == pytest.approx(float(numeric @ v), rel=1e-6)


@pytest.mark.parametrize("fname", ["looped", "in_place", "whiles", "with_cube", "early",
                                   "augmented"])
def test_forward_over_reverse_matches_differences_of_the_gradient(m, fname, rng):
    scalar = getattr(m, "scalar_" + fname)
    shape = (3,)
    x = np.abs(rng.standard_normal(shape)) * 0.6
    v = rng.standard_normal(shape)
    _, hv = functional.hvp(scalar, x, v)
    g = s2sgrad.grad(scalar)
    numeric = (g(x + EPS * v) - g(x - EPS * v)) / (2 * EPS)
    np.testing.assert_allclose(hv, numeric, rtol=1e-5, atol=1e-6)


# -- the command line -----------------------------------------------------------------------
def test_cli_show_forward_mode_and_second_order(capsys):
    from s2sgrad.cli import main
    assert main(["show", "examples/square.py:loss", "--mode", "forward", "--no-color"]) == 0
    text = capsys.readouterr().out
    assert "def loss_jvp(x, x_dot):" in text and "forward mode" in text
    assert main(["show", "examples/square.py:loss", "--order", "2", "--no-color"]) == 0
    text = capsys.readouterr().out
    assert "def grad_loss(x):" in text and "def grad_loss_adjoint(" in text
    assert "def loss_adjoint_adjoint(" in text
    assert main(["show", "examples/square.py:loss", "--order", "2", "--mode", "forward",
                 "--no-color"]) == 0
    text = capsys.readouterr().out
    assert "def grad_loss_jvp(x, x_dot):" in text and "def loss_adjoint_jvp(" in text


def test_a_list_item_replaced_by_a_constant_list_keeps_its_structure(make_module, rng):
    """`L[0] = [c, d]` with constants: its tangent is a list of zeros, so that an
    item of it can be read (the fuzzer's seed 32, program 286, crashed here)."""
    mod = make_module("""
import numpy as np


def f(x, s=0.3):
    L = []
    for i in range(3):
        L.append([np.sum(x) * (1.0 + i), x[0] * x[1]])
    L[0] = [np.log(1.0 + s ** 2), 2.0]
    return L[1][0] * np.tanh(L[0][1]) + L[2][1] + L[0][0]
""")
    for shape in [(3,), (4,)]:
        check_jvp(mod.f, [rng.standard_normal(shape)], wrt=[0])
