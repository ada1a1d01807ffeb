"""s2sgrad.Function: class rules, eager apply, inlining into generated code."""
import numpy as np
import pytest
from conftest import check_vjp, import_source

import s2sgrad

FUNCTIONS = '''
import numpy as np
import s2sgrad


class Square(s2sgrad.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input ** 2

    @staticmethod
    def vjp(ctx, grad_output):
        input, = ctx.saved_tensors
        return 2 * input * grad_output


class ScaledExp(s2sgrad.Function):
    """Two inputs, a non-array flag, ctx attributes, needs_input_grad."""
    @staticmethod
    def forward(ctx, x, scale, double):
        out = np.exp(x) * scale
        if double:
            out = out * 2.0
        ctx.out = out
        ctx.scale = scale
        return out

    @staticmethod
    def vjp(ctx, g):
        grad_x = grad_scale = None
        if ctx.needs_input_grad[0]:
            grad_x = g * ctx.out
        if ctx.needs_input_grad[1]:
            grad_scale = np.sum(g * ctx.out) / ctx.scale
        return grad_x, grad_scale, None


class SinCos(s2sgrad.Function):
    """One input, two outputs (one of which may not reach the result)."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.sin(x), np.cos(x)

    @staticmethod
    def backward(ctx, gs, gc):
        x, = ctx.saved_tensors
        return gs * np.cos(x) - gc * np.sin(x)


class Opaque(s2sgrad.Function):
    """forward passes ctx to a helper, so it cannot be inlined."""
    @staticmethod
    def forward(ctx, x):
        remember(ctx, x)
        return np.tanh(x)

    @staticmethod
    def vjp(ctx, g):
        return g * (1 - np.tanh(ctx.x) ** 2)


class CubeWithJvp(s2sgrad.Function):
    """Saves for both modes: reverse mode inlines it and ignores save_for_forward."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)
        return x ** 3

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return 3 * x * x * g

    @staticmethod
    def jvp(ctx, x_dot):
        x, = ctx.saved_tensors
        return 3 * x * x * x_dot


def cube_loss(x, w):
    return np.sum(np.sin(CubeWithJvp.apply(x * w)))


def remember(ctx, x):
    ctx.x = x


class WrongCount(s2sgrad.Function):
    @staticmethod
    def forward(ctx, a, b):
        return a * b

    @staticmethod
    def vjp(ctx, g):
        return g


class Product(s2sgrad.Function):
    """Written for equal shapes: its gradients have the product's shape, which is
    wider than an input that broadcast (PyTorch sums them down: so do we)."""
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def vjp(ctx, g):
        a, b = ctx.saved_tensors
        return g * b, g * a


def broadcast_product(m, y):
    return np.sum(np.sin(Product.apply(m, y)))


def product_of_a_sum(m, x):
    s = np.sum(x * x)           # 0-d: its cotangent must be 0-d before s's own rule
    return np.sum(Product.apply(m, s) * m)


def square_loss(x):
    return Square.apply(x).sum()


def scaled(x, s):
    return ScaledExp.apply(x, s, True) * x


def scaled_x_only(x, s):
    return ScaledExp.apply(x, s, False)


def sincos_both(x):
    s, c = SinCos.apply(x)
    return s * c


def sincos_first(x):
    s, c = SinCos.apply(x)
    return s * 3.0


def sincos_tuple(x):
    pair = SinCos.apply(x)
    return pair[0] + 2.0 * pair[1]


def opaque(x):
    return Opaque.apply(x) * x


def wrong_count(a, b):
    return WrongCount.apply(a, b)


def chained(x):
    y = Square.apply(x)
    z = Square.apply(y + 1.0)
    return np.sum(z * x)
'''


@pytest.fixture(scope="module")
def fm(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("fn"), "s2s_functions", FUNCTIONS)


def test_defining_both_vjp_and_backward_is_a_type_error():
    with pytest.raises(TypeError, match="both vjp and backward"):
        class Both(s2sgrad.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def vjp(ctx, g):
                return g

            @staticmethod
            def backward(ctx, g):
                return g


def test_defining_neither_is_a_type_error():
    with pytest.raises(TypeError, match="must define a vjp"):
        class Neither(s2sgrad.Function):
            @staticmethod
            def forward(ctx, x):
                return x


def test_eager_apply_runs_forward(fm):
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(fm.Square.apply(x), x ** 2)
    s, c = fm.SinCos.apply(x)
    np.testing.assert_allclose(s, np.sin(x))
    np.testing.assert_allclose(c, np.cos(x))


def test_context_records_saved_values_and_flags():
    ctx = s2sgrad.Context((True, False))
    ctx.save_for_backward(1, 2)
    ctx.anything = "kept"
    assert ctx.saved_tensors == (1, 2)
    assert ctx.needs_input_grad == (True, False)
    assert ctx.anything == "kept"


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_square_matches_finite_differences(fm, shape, rng):
    check_vjp(fm.square_loss, [rng.standard_normal(shape)])


def test_vjp_body_is_inlined_not_called(fm):
    src = s2sgrad.source(fm.square_loss)
    adjoint = src.split("def square_loss_adjoint")[1]
    assert "2 * x *" in adjoint
    # not called: named only by the comments that say it was inlined
    assert "Square.vjp(" not in src and "Square.forward(" not in src
    assert "# Square.vjp inlined (" in adjoint
    assert "save_for_backward" not in src and "saved_tensors" not in src


@pytest.mark.parametrize("shapes", [((3,), ()), ((2, 3), ())])
def test_ctx_attributes_and_needs_input_grad(fm, shapes, rng):
    x = rng.standard_normal(shapes[0])
    s = float(rng.uniform(0.5, 2.0))
    check_vjp(fm.scaled, [x, s])
    check_vjp(fm.scaled, [x, s], wrt=[0])
    src = s2sgrad.source(fm.scaled_x_only, wrt=0)
    assert "needs_input_grad" not in src
    assert "np.sum(" not in src.split("_adjoint")[1], "grad_scale must be folded away"


@pytest.mark.parametrize("fname", ["sincos_both", "sincos_first", "sincos_tuple"])
@pytest.mark.parametrize("shape", [(4,), (2, 2)])
def test_two_outputs(fm, fname, shape, rng):
    check_vjp(getattr(fm, fname), [rng.standard_normal(shape)])


def test_unused_output_gets_zero_cotangent(fm):
    src = s2sgrad.source(fm.sincos_first)
    assert "_s2s_zeros_like(c)" in src


def test_backward_alias_is_inlined(fm):
    src = s2sgrad.source(fm.sincos_both)
    assert "np.cos(x) -" in src.replace("gs * ", "")


@pytest.mark.parametrize("shapes", [((4,), (4,)), ((2, 3), (3,))])
def test_save_for_forward_is_inlined_in_reverse_mode(fm, shapes, rng):
    check_vjp(fm.cube_loss, [rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])],
              wrt=[0, 1])
    src = s2sgrad.source(fm.cube_loss, wrt=(0, 1))
    assert "not inlined" not in src and "save_for_forward" not in src
    assert "3 * " in src.split("def cube_loss_adjoint")[1]


def test_not_inlinable_function_is_called_and_says_so(fm, rng):
    x = rng.standard_normal(4)
    check_vjp(fm.opaque, [x])
    src = s2sgrad.source(fm.opaque)
    assert "called, not inlined" in src
    assert "Opaque.forward(" in src and "Opaque.vjp(" in src


@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((4, 1), (1, 5)), ((3,), ())])
def test_a_gradient_of_the_broadcast_shape_is_summed_to_the_inputs(fm, shapes, rng):
    """A vjp returning a gradient of the output's shape for an input that broadcast
    (a crash in finalize before, and a wrong shape flowing into the next rule)."""
    m, y = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_vjp(fm.broadcast_product, [m, y], wrt=[0, 1])


@pytest.mark.parametrize("shape", [(4,), (3,), (2, 3)])
def test_a_broadcast_gradient_meets_the_rule_before_it_summed(fm, shape, rng):
    """With m of x's shape (4,), s's cotangent of m's shape went into np.sum's rule
    and gave x a silently wrong gradient (elementwise products instead of a sum)."""
    check_vjp(fm.product_of_a_sum, [rng.standard_normal(shape), rng.standard_normal(4)],
              wrt=[0, 1])


def test_wrong_gradient_count_is_a_type_error_naming_the_class(fm):
    out, pullback = s2sgrad.vjp(fm.wrong_count, np.ones(2), np.ones(2))
    with pytest.raises(TypeError, match=r"WrongCount\.vjp returns 1 gradient\(s\), expected 2"):
        pullback(np.ones(2))


def test_wrong_literal_count_is_found_at_compile_time(make_module):
    m = make_module('''
import s2sgrad

class Two(s2sgrad.Function):
    @staticmethod
    def forward(ctx, a, b):
        return a * b

    @staticmethod
    def vjp(ctx, g):
        return g, g, g

def f(a, b):
    return Two.apply(a, b)
''')
    with pytest.raises(TypeError, match=r"Two\.vjp returns 3 gradient\(s\), expected 2"):
        s2sgrad.vjp(m.f, 1.0, 2.0)


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_same_function_applied_twice(fm, shape, rng):
    check_vjp(fm.chained, [rng.standard_normal(shape)])


TRAILING_NONES = '''
import numpy as np
import s2sgrad


class Clamp(s2sgrad.Function):
    """A vjp written for forward's whole signature, applied without the defaults."""
    @staticmethod
    def forward(ctx, x, lo=0.3, hi=0.9):
        ctx.save_for_backward((x > lo) & (x < hi))
        return np.clip(x, lo, hi)

    @staticmethod
    def vjp(ctx, g):
        inside, = ctx.saved_tensors
        return g * inside, None, None


class ScaledBy(s2sgrad.Function):
    """Its gradients a tuple made before the return (counted when the pullback runs)."""
    @staticmethod
    def forward(ctx, x, k=2.0):
        ctx.k = k
        return x * k

    @staticmethod
    def vjp(ctx, g):
        grads = (g * ctx.k, None)
        return grads


class ExtraGradient(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x, k=2.0):
        return x * k

    @staticmethod
    def vjp(ctx, g):
        return g * 2.0, g


def clamped(x, w):
    return np.sum(Clamp.apply(x * w) * x) + np.sum(Clamp.apply(x, 0.4, 0.8) * w)


def scaled(x, w):
    return np.sum(ScaledBy.apply(x * w) ** 2)


def extra(x):
    return np.sum(ExtraGradient.apply(x))
'''


@pytest.mark.parametrize("shapes", [((4,), (4,)), ((2, 4), (4,))])
@pytest.mark.parametrize("name", ["clamped", "scaled"])
def test_trailing_none_gradients_for_defaulted_parameters_are_dropped(make_module, name,
                                                                       shapes, rng):
    """PyTorch drops Nones a backward returns past the inputs apply was given (a vjp
    written for forward's defaulted parameters); s2sgrad refused them as a wrong
    count (found by probing)."""
    m = make_module(TRAILING_NONES)
    args = [rng.uniform(0.1, 1.2, s) for s in shapes]
    check_vjp(getattr(m, name), args, wrt=[0, 1])


def test_an_extra_gradient_that_is_not_none_is_still_a_wrong_count(make_module):
    m = make_module(TRAILING_NONES)
    with pytest.raises(TypeError, match=r"ExtraGradient\.vjp returns 2 gradient\(s\), "
                                        r"expected 1"):
        s2sgrad.grad(m.extra)(np.ones(3))
