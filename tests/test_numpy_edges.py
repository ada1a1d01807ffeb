"""Edges of the NumPy rule table: dtypes, 0-d values, kinks, ties, zeros,
undefined gradients, and indexing (each against finite differences or a
value derived by hand from the mathematics, never from the code)."""
import math

import numpy as np
import pytest
from conftest import check_vjp
from rule_cases import CASES
from test_rules import _draw, _source

import s2sgrad


def _grad(make_module, body, *args, wrt=0, params="x"):
    m = make_module(f"import numpy as np\n\ndef f({params}):\n    return {body}\n")
    return s2sgrad.grad(m.f, wrt=wrt)(*args)


# -- dtypes, 0-d arrays, Python floats, integers ------------------------------------------
def _float32_cases():
    for name, cases in sorted(CASES.items()):
        expr, specs = cases[0]
        yield pytest.param(name, expr, specs, id=name)


@pytest.mark.parametrize("name, expr, specs", list(_float32_cases()))
def test_float32_inputs_get_float32_gradients(name, expr, specs, make_module, rng):
    params = list(specs)
    m = make_module(_source(params, expr))
    args64 = [_draw(specs[p], rng) for p in params]
    wrt = tuple(i for i, p in enumerate(params)
                if not (isinstance(specs[p], tuple) and specs[p] and specs[p][0] == "const"))
    args32 = [np.float32(a) if isinstance(a, float) and i in wrt
              else a.astype(np.float32) if isinstance(a, np.ndarray) and i in wrt else a
              for i, a in enumerate(args64)]
    out, pullback = s2sgrad.vjp(m.f, *args32, wrt=wrt)
    v = (tuple(np.ones(np.shape(o)) for o in out) if isinstance(out, tuple)
         else np.ones(np.shape(out)))
    grads32 = pullback(v)
    grads64 = s2sgrad.vjp(m.f, *args64, wrt=wrt)[1](v)
    for i, g32, g64 in zip(wrt, grads32, grads64):
        assert np.asarray(g32).dtype == np.float32, (name, i, np.asarray(g32).dtype)
        assert np.shape(g32) == np.shape(args32[i])
        scale = max(1.0, float(np.max(np.abs(g64))) if np.size(g64) else 1.0)
        np.testing.assert_allclose(g32, g64, rtol=2e-3, atol=2e-3 * scale)


@pytest.mark.parametrize("body", ["np.sum(np.sin(x) * np.prod(x))", "np.linalg.norm(x)",
                                  "np.max(np.cumsum(x))", "np.einsum(',,', x, x, 2.0)"])
def test_zero_d_arrays_and_python_floats(body, make_module):
    x0 = np.array(0.7)
    m = make_module(f"import numpy as np\n\ndef f(x):\n    return {body}\n")
    g = s2sgrad.grad(m.f)(x0)
    assert isinstance(g, np.ndarray) and g.shape == ()
    gf = s2sgrad.grad(m.f)(0.7)
    assert isinstance(gf, float)
    check_vjp(m.f, [0.7])
    check_vjp(m.f, [np.array(0.7)])


@pytest.mark.parametrize("value", [np.arange(3), 3, np.array([1, 2], dtype=np.int32),
                                   np.array([True, False])])
def test_integer_inputs_are_rejected(value, make_module):
    m = make_module("import numpy as np\n\ndef f(x):\n    return np.sum(np.exp2(x) * np.cbrt(x))\n")
    with pytest.raises(TypeError, match="floating-point"):
        s2sgrad.grad(m.f)(value)


def test_astype_float32_passes_the_cotangent_through(make_module):
    # d/dx float32(x) = 1: rounding is piecewise constant with slope one a.e.
    g = _grad(make_module, "np.sum(x.astype(np.float32) * 3.0)", np.array([0.1, 0.2]))
    np.testing.assert_allclose(g, [3.0, 3.0])
    g = _grad(make_module, "np.sum(x.astype(int) * 3.0 + x)", np.array([0.1, 2.7]))
    np.testing.assert_allclose(g, [1.0, 1.0])


# -- kinks: the documented subgradients ----------------------------------------------------
def test_abs_and_fabs_at_zero_give_zero(make_module):
    x = np.array([-2.0, 0.0, 3.0])
    np.testing.assert_array_equal(_grad(make_module, "np.sum(np.abs(x))", x), [-1.0, 0.0, 1.0])
    np.testing.assert_array_equal(_grad(make_module, "np.sum(np.fabs(x))", x), [-1.0, 0.0, 1.0])
    np.testing.assert_array_equal(_grad(make_module, "np.sum(abs(x))", x), [-1.0, 0.0, 1.0])


def test_sqrt_and_cbrt_at_zero_are_infinite(make_module):
    with np.errstate(divide="ignore"):
        assert np.isposinf(_grad(make_module, "np.sqrt(x)", 0.0))
        assert np.isposinf(_grad(make_module, "np.cbrt(x)", 0.0))


@pytest.mark.parametrize("fn", ["np.maximum", "np.minimum", "np.fmax", "np.fmin"])
def test_elementwise_max_min_ties_split_equally(fn, make_module):
    x, y = np.array([1.0, 2.0]), np.array([1.0, 5.0])
    gx = _grad(make_module, f"np.sum({fn}(x, y))", x, y, params="x, y", wrt=0)
    gy = _grad(make_module, f"np.sum({fn}(x, y))", x, y, params="x, y", wrt=1)
    big = fn in ("np.maximum", "np.fmax")
    np.testing.assert_array_equal(gx, [0.5, 0.0 if big else 1.0])
    np.testing.assert_array_equal(gy, [0.5, 1.0 if big else 0.0])


@pytest.mark.parametrize("body, expected", [
    ("np.max(x)", [0.0, 0.5, 0.5, 0.0]),
    ("np.amax(x)", [0.0, 0.5, 0.5, 0.0]),
    ("x.max()", [0.0, 0.5, 0.5, 0.0]),
    ("np.min(x)", [0.5, 0.0, 0.0, 0.5]),
    ("np.ptp(x)", [-0.5, 0.5, 0.5, -0.5]),
    ("np.max(x, initial=3.0)", [0.0, 1 / 3, 1 / 3, 0.0]),
    ("np.linalg.norm(x, ord=np.inf)", [0.0, 0.5, 0.5, 0.0]),
])
def test_reduction_ties_split_equally(body, expected, make_module):
    x = np.array([-1.0, 3.0, 3.0, -1.0])
    np.testing.assert_allclose(_grad(make_module, body, x), expected)


def test_max_ties_along_an_axis(make_module):
    x = np.array([[1.0, 1.0, 0.0], [2.0, 0.0, 2.0]])
    g = _grad(make_module, "np.sum(np.max(x, axis=1) * np.array([1.0, 4.0]))", x)
    np.testing.assert_allclose(g, [[0.5, 0.5, 0.0], [2.0, 0.0, 2.0]])


def test_clip_at_a_bound_splits_like_maximum(make_module):
    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.0])
    g = _grad(make_module, "np.sum(np.clip(x, 0.0, 1.0))", x)
    np.testing.assert_allclose(g, [0.0, 0.5, 1.0, 0.5, 0.0])


@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (None, 0.5), (-0.5, None), (0, 2),
                                    (1.0, 1.0), (np.float64(-1.0), np.float64(1.0))])
def test_clip_cotangent_without_ties_is_the_masks_to_the_bit(bounds):
    """Number bounds and no element on one: the cotangent is g times `lo < a < hi`
    (runtime.numpy_grads.strictly_inside), the masks' value bit for bit (NaN gets 0,
    float64 stays); a tie, or lo == hi, takes the masks (halves)."""
    from s2sgrad.runtime import numpy_grads
    from s2sgrad.runtime.reverse import balanced_max_mask
    rng = np.random.default_rng(5)
    lo, hi = bounds
    for trial in range(60):
        a, g = rng.standard_normal((2, 7))
        a[2] = 1.0 if trial % 3 == 0 else a[2]
        a[4] = np.nan if trial % 5 == 0 else a[4]
        mid = a if lo is None else np.maximum(a, lo)
        mask = np.ones_like(a)
        if hi is not None:
            mask = mask * balanced_max_mask(mid, np.minimum(mid, hi), hi)
        if lo is not None:
            mask = mask * balanced_max_mask(a, mid, lo)
        got = numpy_grads.clip_grad_a(g, a, lo, hi)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, g * mask)


def test_norms_hypot_and_std_at_zero_take_the_zero_subgradient(make_module):
    z = np.zeros(3)
    for body in ("np.linalg.norm(x)", "np.linalg.norm(x, ord=1)", "np.linalg.norm(x, ord=np.inf)",
                 "np.linalg.norm(x, ord=3)", "np.std(x)", "np.sum(np.hypot(x, x))",
                 "np.linalg.norm(np.outer(x, x) + x[0], ord=2)",
                 "np.linalg.norm(np.outer(x, x), ord='nuc')"):
        np.testing.assert_array_equal(_grad(make_module, body, z), z, err_msg=body)
    np.testing.assert_array_equal(_grad(make_module, "np.std(x)", np.full(4, 2.5)), np.zeros(4))


def test_vector_norm_below_one_raises_at_zero_entries(make_module):
    with pytest.raises(ValueError, match="undefined"):
        _grad(make_module, "np.linalg.norm(x, ord=0.5)", np.array([1.0, 0.0, 2.0]))


# -- zeros in products ---------------------------------------------------------------------
@pytest.mark.parametrize("x, expected", [
    ([2.0, 0.0, 3.0], [0.0, 6.0, 0.0]),          # one zero: only its own factor survives
    ([0.0, 5.0, 0.0], [0.0, 0.0, 0.0]),          # two zeros: everything vanishes
    ([2.0, 4.0, 3.0], [12.0, 6.0, 8.0]),
])
def test_prod_with_zeros_is_exact(x, expected, make_module):
    np.testing.assert_array_equal(_grad(make_module, "np.prod(x)", np.array(x)), expected)
    np.testing.assert_array_equal(_grad(make_module, "x.prod()", np.array(x)), expected)


def test_cumprod_with_zeros_is_exact(make_module):
    # y = (x0, x0 x1, x0 x1 x2); d sum(y) = (1 + x1 + x1 x2, x0 + x0 x2, x0 x1)
    x = np.array([2.0, 0.0, 3.0])
    np.testing.assert_array_equal(_grad(make_module, "np.sum(np.cumprod(x))", x), [1.0, 8.0, 0.0])
    x = np.array([0.0, 2.0, 0.0, 4.0])
    np.testing.assert_array_equal(_grad(make_module, "np.sum(np.cumprod(x))", x),
                                  [1.0 + 2.0, 0.0, 0.0, 0.0])


def _cumprod_derivative(x, w, at):
    """d^n/dx_at of sum(w * cumprod(x)) by the mathematics: the sum over k >= max(at) of
    w_k times the product of x_i, i <= k, i not in `at` (0 when an index repeats)."""
    if len(set(at)) < len(at):
        return 0.0
    return sum(w[k] * np.prod([x[i] for i in range(k + 1) if i not in at])
               for k in range(max(at), len(x)))


@pytest.mark.parametrize("x", [[0.5, 0.0, -1.5, 2.0], [0.5, 0.0, 0.0, 2.0, -1.0],
                               [0.0, 2.0, -1.0, 0.0], [1.5, -2.0, 0.0]])
def test_cumprod_with_zeros_has_exact_second_and_third_derivatives(x, make_module):
    # Past its first zero a slice's gradient is 0, but its slope in that zero is not:
    # forward over reverse once gave 0 for those entries of a Hessian-vector product.
    m = make_module("import numpy as np\nimport s2sgrad\n\n"
                    "W = np.array([1.0, -2.0, 0.5, 3.0, 0.7])\n\n"
                    "def f(x):\n    return np.sum(W[:x.size] * np.cumprod(x))\n\n"
                    "def hu(x, u):\n    return np.sum(s2sgrad.grad(f)(x) * u)\n\n"
                    "def third(x, u):\n    return np.sum(s2sgrad.grad(hu)(x, u) * u)\n")
    x = np.array(x)
    n, w = x.size, m.W[:x.size]
    u = np.linspace(-1.0, 1.0, n) + 0.1
    hessian = np.array([[_cumprod_derivative(x, w, (j, k)) for k in range(n)] for j in range(n)])
    np.testing.assert_allclose(s2sgrad.functional.hessian(m.f, x), hessian, atol=1e-12)
    np.testing.assert_allclose(s2sgrad.functional.hvp(m.f, x, u)[1], hessian @ u, atol=1e-12)
    tensor = np.array([[[_cumprod_derivative(x, w, (j, k, q)) for q in range(n)]
                        for k in range(n)] for j in range(n)])
    np.testing.assert_allclose(s2sgrad.grad(m.third)(x, u), np.einsum("jkq,k,q->j", tensor, u, u),
                               atol=1e-12)


def test_cumprod_with_many_zeros(make_module):
    # A level per zero, but a bounded number of them: a slice with 1,500 zeros once
    # recursed 1,500 deep (RecursionError). x = (2, 0, 0.5, 0, 0.5, 0, ...): the terms of
    # sum(cumprod(x)) that hold no zero but the one differentiated are those of k <= 2
    # (first order) and k <= 4 (second), so the first six entries give the answers.
    m = make_module("import numpy as np\n\ndef f(x):\n    return np.sum(np.cumprod(x))\n")
    x = np.zeros(3000)
    x[0], x[2::2] = 2.0, 0.5
    ones = np.ones(6)
    want = np.zeros(3000)
    want[:6] = [_cumprod_derivative(x[:6], ones, (j,)) for j in range(6)]
    np.testing.assert_allclose(s2sgrad.grad(m.f)(x), want, atol=1e-12)
    assert want[1] == 3.0   # 2 + 2 * 0.5
    u = np.zeros(3000)
    u[1] = u[3] = 1.0
    hv = s2sgrad.functional.hvp(m.f, x, u)[1]
    np.testing.assert_allclose(hv[:6], [_cumprod_derivative(x[:6], ones, (j, 1)) +
                                        _cumprod_derivative(x[:6], ones, (j, 3))
                                        for j in range(6)], atol=1e-12)
    np.testing.assert_allclose(hv[6:], 0.0, atol=1e-12)


def test_cumprod_with_zeros_along_an_axis_has_an_exact_hessian(make_module):
    # rows with no zero, one zero and two zeros in one call (the helper works per slice)
    m = make_module("import numpy as np\n\n"
                    "def f(x):\n    return np.sum(np.arange(1.0, 5.0) * np.cumprod(x, axis=1))\n")
    x = np.array([[0.5, 1.5, -1.0, 2.0], [0.5, 0.0, -1.5, 2.0], [0.0, 2.0, 0.0, 3.0]])
    w = np.arange(1.0, 5.0)
    want = np.zeros((3, 4, 3, 4))
    for r in range(3):
        want[r, :, r, :] = [[_cumprod_derivative(x[r], w, (j, k)) for k in range(4)]
                            for j in range(4)]
    np.testing.assert_allclose(s2sgrad.functional.hessian(m.f, x), want, atol=1e-12)


def _sinc_derivative(x, order):
    """d^order/dx^order of sinc(x) = sum_k (-1)^k (pi x)^2k / (2k + 1)!, term by term."""
    total = 0.0
    for k in range(40):
        power = 2 * k - order
        if power < 0:
            continue
        falling = np.prod([2 * k - i for i in range(order)])
        total += (-1) ** k * np.pi ** (2 * k) * falling * x ** power / math.factorial(2 * k + 1)
    return total


def test_sinc_has_exact_derivatives_of_every_order_at_and_near_zero(make_module):
    # sinc' is (cos(pi x) - sinc(x)) / x away from 0; at 0 it was the constant 0, whose
    # slope (the second derivative, -pi^2 / 3) came out 0 in Hessians.
    m = make_module("import numpy as np\nimport s2sgrad\n\n"
                    "def f(x):\n    return np.sum(np.sinc(x))\n\n"
                    "def f1(x):\n    return np.sum(s2sgrad.grad(f)(x))\n\n"
                    "def f2(x):\n    return np.sum(s2sgrad.grad(f1)(x))\n")
    for x in (np.array([0.0, 1e-9, 0.05, 0.0999, 0.1, 0.5, -2.3]), np.zeros((2, 2))):
        flat = x.ravel()
        want = [np.array([_sinc_derivative(v, k) for v in flat]).reshape(x.shape)
                for k in (1, 2, 3)]
        np.testing.assert_allclose(s2sgrad.grad(m.f)(x), want[0], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(s2sgrad.functional.hessian(m.f, x),
                                   np.diag(want[1].ravel()).reshape(x.shape * 2),
                                   rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(s2sgrad.grad(m.f2)(x), want[2], rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name, shift", [("xlogy", 0.0), ("xlog1py", 1.0)])
def test_xlogy_at_zero_has_its_mixed_second_derivative(name, shift, make_module):
    # x log(y) at x == 0 < y: the value's slope in y is x / y = 0, but that slope's own
    # slope in x is 1 / y; a guard for x == 0 made it 0.
    m = make_module(f"import numpy as np\nfrom scipy import special\n\n"
                    f"def f(v):\n    return np.sum(special.{name}(v[0], v[1]))\n")
    for v in (np.array([0.0, 2.0]), np.array([[0.0, 0.0], [0.5, 3.0]])):
        x, y = v[0], v[1] + shift
        hessian = np.zeros(v.shape * 2)
        cross = 1.0 / y
        for i in np.ndindex(np.shape(x)):
            hessian[(0,) + i + (1,) + i] = hessian[(1,) + i + (0,) + i] = cross[i]
            hessian[(1,) + i + (1,) + i] = -x[i] / y[i] ** 2
        np.testing.assert_allclose(s2sgrad.functional.hessian(m.f, v), hessian, rtol=1e-12,
                                   atol=1e-14)


def test_det_of_a_singular_matrix_is_exact(make_module):
    m = make_module("import numpy as np\n\ndef f(x):\n    return np.linalg.det(x)\n")
    x = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, -1.0, 2.0]])  # rank 2
    g = s2sgrad.grad(m.f)(x)
    cof = np.array([[np.linalg.det(np.delete(np.delete(x, i, 0), j, 1)) * (-1) ** (i + j)
                     for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(g, cof, atol=1e-12)
    check_vjp(m.f, [x])


def _cofactors(x):
    """The cofactor matrix from its definition (signed minors)."""
    n = x.shape[0]
    return np.array([[np.linalg.det(np.delete(np.delete(x, i, 0), j, 1)) * (-1) ** (i + j)
                      for j in range(n)] for i in range(n)])


def _rank_deficient(n, rng):
    """A random n x n matrix of rank n - 1."""
    return rng.standard_normal((n, n - 1)) @ rng.standard_normal((n - 1, n))


@pytest.mark.parametrize("n", [3, 4])
def test_det_of_a_singular_matrix_has_an_exact_hessian(n, make_module, rng):
    # The cofactors' slope at a matrix of rank n - 1: their SVD form once took the zero
    # singular value's slope as 0 while its singular vectors moved (wrong Hessians).
    m = make_module("import numpy as np\n\ndef f(x):\n    return np.linalg.det(x)\n")
    x = _rank_deficient(n, rng)
    for _ in range(2):
        e = rng.standard_normal((n, n))
        # the cofactors are polynomials of degree n - 1 <= 3 in t: central differences
        # with two steps (Richardson) are exact for them up to rounding
        h = 1e-3
        d1 = (_cofactors(x + h * e) - _cofactors(x - h * e)) / (2 * h)
        d2 = (_cofactors(x + 2 * h * e) - _cofactors(x - 2 * h * e)) / (4 * h)
        want = (4 * d1 - d2) / 3
        np.testing.assert_allclose(s2sgrad.functional.hvp(m.f, x, e)[1], want, atol=1e-9)
        np.testing.assert_allclose(s2sgrad.functional.jvp(s2sgrad.grad(m.f), x, e)[1], want,
                                   atol=1e-9)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_svd_recomposed_at_a_rank_deficient_matrix_is_exact(shape, make_module, rng):
    # U S V^T is the matrix itself, so its gradient is the weight in both modes; a simple
    # zero singular value takes the slope of its signed continuation, as its vectors do.
    m = make_module("import numpy as np\n\ndef f(x, w):\n    u, s, vt = np.linalg.svd(x)\n"
                    "    return np.sum((u * s[..., None, :]) @ vt * w)\n")
    n = shape[-1]
    x = np.stack([_rank_deficient(n, rng) for _ in range(int(np.prod(shape[:-2])))])
    x = x.reshape(shape)
    w = rng.standard_normal(shape)
    np.testing.assert_allclose(s2sgrad.grad(m.f)(x, w), w, atol=1e-9)
    e = rng.standard_normal(shape)
    np.testing.assert_allclose(s2sgrad.functional.jvp(lambda v: m.f(v, w), x, e)[1],
                               np.sum(w * e), atol=1e-9)


# -- decompositions with repeated values -------------------------------------------------------
def test_eigh_repeated_eigenvalue_cotangents_are_averaged(make_module):
    a = np.diag([1.0, 2.0, 2.0])
    g = _grad(make_module, "np.linalg.eigh(x)[0][2]", a)
    np.testing.assert_allclose(g, np.diag([0.0, 0.5, 0.5]), atol=1e-12)
    g = _grad(make_module, "np.linalg.eigvalsh(x)[1] + np.linalg.eigvalsh(x)[2]", a)
    np.testing.assert_allclose(g, np.diag([0.0, 1.0, 1.0]), atol=1e-12)


def test_eigh_projector_onto_a_repeated_eigenspace(make_module):
    m = make_module("import numpy as np\n\ndef f(x):\n    w, v = np.linalg.eigh(x)\n"
                    "    return v[:, 1:] @ v[:, 1:].T\n")
    check_vjp(m.f, [np.diag([1.0, 2.0, 2.0])])
    check_vjp(m.f, [np.array([[1.0, 0.0, 0.0], [0.3, 2.0, 0.0], [0.2, 0.0, 2.0]])])


def test_eigh_eigenvector_of_a_repeated_eigenvalue_raises(make_module):
    with pytest.raises(np.linalg.LinAlgError, match="undefined"):
        _grad(make_module, "np.sum(np.linalg.eigh(x)[1][:, 2])", np.diag([1.0, 2.0, 2.0]))


def test_svd_repeated_singular_values(make_module):
    a = np.diag([3.0, 1.0, 1.0])
    g = _grad(make_module, "np.linalg.svd(x)[1][1]", a)
    np.testing.assert_allclose(g, np.diag([0.0, 0.5, 0.5]), atol=1e-12)
    with pytest.raises(np.linalg.LinAlgError, match="undefined"):
        _grad(make_module, "np.sum(np.linalg.svd(x)[0][:, 1])", a)


def test_svd_full_matrices_extra_columns_raise(make_module):
    x = np.arange(6.0).reshape(3, 2) + np.eye(3, 2)
    check_vjp(make_module("import numpy as np\n\ndef f(x):\n"
                          "    u, s, vt = np.linalg.svd(x)\n    return u[:, :2] * s, vt\n").f, [x])
    with pytest.raises(np.linalg.LinAlgError, match="full_matrices"):
        _grad(make_module, "np.sum(np.linalg.svd(x)[0][:, 2])", x)


def test_singular_matrix_raises_for_inverse_based_rules(make_module):
    x = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(np.linalg.LinAlgError):
        _grad(make_module, "np.linalg.slogdet(x)[1]", x)


def test_unused_outputs_of_multi_output_functions(make_module):
    m = make_module("import numpy as np\n\ndef f(x):\n    w, v = np.linalg.eigh(x)\n"
                    "    q, r = np.linalg.qr(x)\n    return np.sum(w) + np.sum(r)\n")
    x = np.array([[3.0, 0.5, 0.1], [0.5, 2.0, 0.3], [0.1, 0.3, 1.0]])
    check_vjp(m.f, [x])


# -- unsupported arguments raise instead of returning a wrong gradient ---------------------------
@pytest.mark.parametrize("body", [
    "np.sum(np.pad(x, 1, mode='mean'))",
    "np.quantile(x, 0.5, method='nearest')",
    "np.median(x, overwrite_input=True)",
    "np.sum(np.linalg.svd(np.outer(x, x), hermitian=True)[1])",
    "np.sum(np.linalg.qr(np.outer(x, x), mode='raw')[0])",
])
def test_unsupported_arguments_raise(body, make_module):
    with pytest.raises(NotImplementedError):
        _grad(make_module, body, np.array([1.0, 2.0, 3.0]))


def test_interp_with_a_differentiated_period_raises(make_module):
    m = make_module("import numpy as np\n\ndef f(p):\n"
                    "    return np.sum(np.interp([0.5, 2.5], [0.0, 1.0, 2.0], [1.0, 3.0, 2.0], "
                    "period=p))\n")
    with pytest.raises(NotImplementedError, match="period"):
        s2sgrad.grad(m.f)(3.0)


def test_var_with_a_differentiated_mean_argument_raises(make_module):
    m = make_module("import numpy as np\n\ndef f(x, c):\n"
                    "    return np.var(x, mean=np.mean(x) * c)\n")
    with pytest.raises(NotImplementedError, match="mean="):
        s2sgrad.grad(m.f, wrt=1)(np.array([1.0, 2.0, 4.0]), 1.0)


def test_list_literals_of_variables_are_differentiated(make_module):
    # Once a compiler gap (refused rather than dropped): each item gets its adjoint.
    assert _grad(make_module, "np.sum([x, 2.0 * x])", 1.0) == pytest.approx(3.0)


# -- indexing: scatter-add adjoints, checked by finite differences ------------------------------
_INDEXING = [
    ("x[1]", (4,)), ("x[-1]", (4,)), ("x[1, 2]", (3, 4)), ("x[1:3]", (5,)), ("x[::2]", (5,)),
    ("x[::-1]", (5,)), ("x[3:0:-2]", (5,)), ("x[-2::-3]", (7,)), ("x[None]", (3,)),
    ("x[..., 1]", (2, 3, 4)), ("x[:, None, 1:]", (2, 3)), ("x[1, ::-1]", (2, 3)),
    ("x[..., None, ::2]", (2, 5)), ("x[[0, 2, 2]]", (3,)), ("x[[0, 0, 1], [1, 1, 2]]", (2, 3)),
    ("x[np.array([[0, 1], [1, 1]])]", (3,)), ("x[:, [2, 0, 2]]", (2, 3)),
    ("x[1:, [0, 0]]", (3, 2)), ("x[x > 0]", (6,)), ("x[x > 0]", (2, 3)),
    ("x[np.array([True, False, True])]", (3, 2)), ("x[:, np.array([True, False, True])]", (2, 3)),
    ("x[[1, 0]][:, ::2]", (2, 5)), ("x[[0, 1], ::-1]", (2, 3)), ("x[0][1]", (2, 3)),
    ("x[..., [True, False, True]]", (2, 3)), ("x[[[0], [1]], [0, 2]]", (2, 3)),
    ("x[1, [0, 0, 2], 1:]", (2, 3, 3)), ("x[[-1, -1]] * x[-1]", (3,)),
    ("x[2:0:-1, [1, 1]] + x[0, 1]", (3, 2)), ("x[()]", ()),
    ("x[np.array([True, False]), 1:]", (2, 3)), ("x[1:, np.array([True, False, True])]", (3, 3)),
    ("x[..., None, [0, 0]]", (2, 3)), ("x[[-1, -3, -1]]", (3,)), ("x[-1:-4:-1]", (5,)),
    ("x[np.array(1)]", (3,)), ("x[np.int64(2), ::2]", (3, 4)), ("x[x > 0.5, None]", (5,)),
    ("x[:, :, [1, 0, 1]][..., ::-1]", (2, 2, 2)),
    ("x[np.array([[True, False], [True, True]])]", (2, 2)),
]


@pytest.mark.parametrize("expr, shape", _INDEXING, ids=[e for e, _ in _INDEXING])
def test_indexing_matches_finite_differences(expr, shape, make_module, rng):
    m = make_module(f"import numpy as np\n\ndef f(x):\n    return {expr} * 2.0\n")
    x = rng.standard_normal(shape) if shape else np.array(rng.standard_normal())
    check_vjp(m.f, [x])


def test_repeated_indices_accumulate(make_module):
    g = _grad(make_module, "np.sum(x[[0, 0, 2, 0]])", np.zeros(3))
    np.testing.assert_array_equal(g, [3.0, 0.0, 1.0])
    g = _grad(make_module, "np.sum(x[[1, 1], [0, 0]] * np.array([2.0, 5.0]))", np.zeros((2, 2)))
    np.testing.assert_array_equal(g, [[0.0, 0.0], [7.0, 0.0]])


# -- functions left out on purpose (README) raise, never return a wrong gradient -----------
@pytest.mark.parametrize("body", [
    "np.sum(np.unique(x))", "np.sum(np.histogram(x)[1])", "np.sum(np.unwrap(x))",
    "np.sum(np.linalg.tensorinv(np.outer(x, x) + np.eye(3), ind=1))",
    "np.sum(np.abs(np.roots(x)))", "np.sum(np.choose([0, 1, 0], [x, 2 * x]))",
    "np.sum(np.block([x, x]))", "np.linalg.cond(np.outer(x, x) + np.eye(3))",
    "np.sum(np.vectorize(np.sin)(x))", "np.sum(np.apply_along_axis(np.sum, 0, x))",
])
def test_left_out_functions_raise(body, make_module):
    with pytest.raises(s2sgrad.TransformError):
        _grad(make_module, body, np.array([0.3, 1.2, 2.0]))


def test_readme_defvjp_example(make_module):
    from s2sgrad import runtime
    from s2sgrad.rules import registry
    saved = dict(registry.REGISTRY.functions), dict(runtime.HELPERS)
    lib = make_module("import numpy as np\n"
                      "def softplus(x):\n    return np.log1p(np.exp(x))\n"
                      "def scale(x, y):\n    return x * y\n"
                      "def cube(x):\n    return x ** 3\n"
                      "def powsum(x, y, n=2):\n    return x ** n + y\n", name="mylib")
    try:
        s2sgrad.defvjp(lib.softplus, "x", x="g / (1.0 + np.exp(-x))")
        s2sgrad.defvjp(lib.scale, "x, y", x="g * y", y="g * x", broadcast=True)
        s2sgrad.defvjp(lib.cube, lambda g, ans, x: g * 3 * x ** 2)
        s2sgrad.defvjp(lib.powsum, lambda g, ans, x, y, n=2: (g * n * x ** (n - 1), None))
        m = make_module("import numpy as np\nimport mylib\n\ndef loss(x, y):\n"
                        "    return np.sum(mylib.scale(mylib.softplus(x), y))\n\n"
                        "def other(x, y):\n"
                        "    return np.sum(mylib.cube(x) + mylib.powsum(x, y, n=3))\n")
        x = np.array([0.5, -1.0, 2.0])
        np.testing.assert_allclose(s2sgrad.grad(m.loss)(x, 2.0), 2.0 / (1.0 + np.exp(-x)))
        gx, gy = s2sgrad.grad(m.other, wrt=(0, 1))(x, np.ones(3))
        np.testing.assert_allclose(gx, 6 * x ** 2)
        np.testing.assert_array_equal(gy, np.zeros(3))  # None: the rule says zero
    finally:
        registry.REGISTRY.functions.clear()
        registry.REGISTRY.functions.update(saved[0])
        runtime.HELPERS.clear()
        runtime.HELPERS.update(saved[1])
