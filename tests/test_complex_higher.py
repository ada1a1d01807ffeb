"""Complex values across calls and derivatives of derivatives of complex code.

Two things are checked against central differences in float64, on two shapes:

- what a function of yours returns is complex where its code makes it so, and the
  caller takes the rules for complex arguments for it (a caller that took such a
  value for a real one gave np.abs the real rule: a silently wrong gradient);
- second derivatives (forward over reverse and reverse over reverse) of real-valued
  functions with complex intermediate values, for every case of test_complex.py:
  the adjoint of complex code is itself differentiated, its helpers included.
"""
import zlib

import numpy as np
import pytest
from conftest import numeric_grad
from test_complex import CASES

import s2sgrad
from s2sgrad import functional

EPS = 1e-5

HELPERS = '''
import numpy as np


def rotate(x):
    return np.exp(1j * x) * x


def rotate_pair(x):
    return np.exp(1j * x) * x, np.cos(x)


def nested_pair(x):
    return (np.cos(x), (x * 2.0, np.exp(0.5j * x))), x


def magnitude_of_returned(x):
    z = rotate(x)
    return np.sum(np.abs(z + 1.0) ** 2)


def items_unpacked(x):
    a, r = rotate_pair(x)
    return np.sum(np.abs(a) ** 2 * np.maximum(r, 0.1))


def items_read(x):
    t = rotate_pair(x)
    return np.sum(np.abs(t[0]) ** 2 * np.maximum(t[1], 0.1))


def nested_items(x):
    (c, (d, e)), y = nested_pair(x)
    return np.sum(np.maximum(c, 0.0) * d + np.abs(e - 0.3) + np.sign(y) * y)


def through_two(x):
    return magnitude_of_returned(x) + np.sum(np.angle(rotate(x) + 0.5))
'''
HELPER_NAMES = ["magnitude_of_returned", "items_unpacked", "items_read", "nested_items",
                "through_two"]


def _numeric_grad(f, x):
    return numeric_grad(f, [x], 0, EPS)


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
@pytest.mark.parametrize("name", HELPER_NAMES)
def test_complex_values_your_functions_return_take_complex_rules(make_module, name, shape):
    m = make_module(HELPERS)
    f = getattr(m, name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = rng.uniform(0.2, 1.3, shape)
    expected = _numeric_grad(f, x)
    np.testing.assert_allclose(s2sgrad.grad(f)(x), expected, rtol=1e-6, atol=1e-8)
    v = rng.normal(size=shape)
    _, tangent = functional.jvp(f, x, v)
    np.testing.assert_allclose(tangent, np.sum(expected * v), rtol=1e-6, atol=1e-8)
    # second order: the Hessian along v against differences of the gradient
    hv = (s2sgrad.grad(f)(x + EPS * v) - s2sgrad.grad(f)(x - EPS * v)) / (2 * EPS)
    np.testing.assert_allclose(functional.hvp(f, x, v)[1], hv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(functional.vhp(f, x, v)[1], hv, rtol=1e-5, atol=1e-6)


OPAQUE = '''
import numpy as np


# A function without source (made by eval): the compiler cannot read it, so the
# dtype of what it returns is unseen.
PHASE = eval("lambda x: np.exp(1j * np.asarray(x))", {"np": np})




def scaled_and_phase(x):
    return x * 2.0, PHASE(0.7)


def f(x):
    a, c = scaled_and_phase(x)
    return np.sum(np.abs(a * c))
'''


def test_an_unseen_complex_value_a_function_returns_is_refused_at_its_line(make_module):
    m = make_module(OPAQUE)
    with pytest.raises(s2sgrad.TransformError, match="complex value") as info:
        s2sgrad.grad(m.f)(np.array([0.5, 1.5]))
    assert info.value.lineno == 13   # the return of scaled_and_phase


# -- second derivatives of complex code ---------------------------------------------------
def _real_module(make_module, expr, shapes):
    """f(<real and imaginary parts of each complex parameter, real ones>, V) = the
    loss of test_complex.py, whose inputs are real: the complex parameters are built
    inside, so the code is real at its boundary and complex within."""
    params, lines = [], []
    for p in shapes:
        if p == "x":
            params.append(p)
        else:
            params += [f"{p}_re", f"{p}_im"]
            lines.append(f"    {p} = {p}_re + 1j * {p}_im")
    source = ("import numpy as np\n\nV = None\n\n\n"
              f"def f({', '.join(params)}):\n" + "\n".join(lines) +
              f"\n    return np.sum(np.sin(np.real(({expr}) * V)))\n")
    return make_module(source), params


def _real_inputs(label, shapes, params):
    rng = np.random.default_rng(zlib.crc32(label.encode()))
    values = {}
    for p in shapes:
        mag = rng.uniform(0.4, 1.2, shapes[p])
        if p == "x":
            values[p] = mag * rng.choice([-1.0, 1.0], shapes[p])
        else:
            z = mag * np.exp(1j * rng.uniform(-1.2, 1.2, shapes[p]))
            values[f"{p}_re"], values[f"{p}_im"] = z.real.copy(), z.imag.copy()
    return tuple(values[p] for p in params), rng


# Cases differentiated twice in reverse mode only: the adjoints of eigh, eigvalsh, svd
# and det compute the vectors of complex matrices, whose arbitrary phase forward mode
# cannot check a function for (forward over reverse refuses them, at the line).
REVERSE_ONLY = {"eigh", "eigh batched upper", "eigh projector", "svd", "svd product",
                "svd values", "svdvals", "eigvalsh", "linalg"}
NOT_TWICE: set = set()
EXTRA = [("inv solve", "np.linalg.inv(z) + np.linalg.solve(z, w) @ w",
          {"z": (3, 3), "w": (3, 3)})]
QUICK = {"multiply", "divide real", "power complex exponent", "exp", "named", "fft",
         "irfft", "rfft2", "angle", "methods", "cumprod", "kron tensordot", "inv solve"}
SECOND = [pytest.param(label, expr, shapes, id=label,
                       marks=() if label in QUICK else pytest.mark.slow)
          for label, expr, shapes in CASES + EXTRA if label not in NOT_TWICE]


@pytest.mark.parametrize("label, expr, shapes", SECOND)
def test_second_derivatives_of_complex_code_match_differences(make_module, label, expr,
                                                              shapes):
    m, params = _real_module(make_module, expr, shapes)
    args, rng = _real_inputs(label, shapes, params)
    shape = np.shape(eval(expr, {"np": np}, _values(shapes, args, params)))  # noqa: S307
    m.V = np.exp(1j * rng.uniform(-2, 2, shape))
    vs = tuple(rng.normal(size=np.shape(a)) for a in args)
    grad = s2sgrad.grad(m.f, wrt=tuple(range(len(args))))

    def directional(t):
        return grad(*[a + t * v for a, v in zip(args, vs)])
    expected = [(p - q) / (2 * EPS) for p, q in zip(directional(EPS), directional(-EPS))]
    if label in REVERSE_ONLY:
        with pytest.raises(s2sgrad.TransformError, match="forward mode does not"):
            functional.hvp(m.f, args, vs)
    for how in (functional.vhp,) if label in REVERSE_ONLY else (functional.hvp,
                                                                 functional.vhp):
        _, got = how(m.f, args, vs)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=how.__name__)


def _values(shapes, args, params):
    """The complex parameters' values from their parts (to size the weight V)."""
    values = dict(zip(params, args))
    for p in shapes:
        if p != "x":
            values[p] = values[f"{p}_re"] + 1j * values[f"{p}_im"]
    return values


BRANCHES = '''
import numpy as np


def f(x):
    z = np.exp(1j * x)
    if np.sum(x) > 0:
        z = np.abs(z * (x + 1.0))   # real from here on this path
    u = z * (0.5 + 0.3j)
    return np.sum(np.abs(u + 0.2) ** 2 + np.real(u * (1.0 + 1.0j)))


def g(x):
    if np.sum(x) > 0.0:
        r = np.mean(x)
    else:
        x2 = np.imag(np.exp(0.7j * x) ** 2)
        r = np.sum(x2 * x2)
    return r
'''


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_a_name_real_on_one_path_and_complex_on_another(make_module, shape, sign):
    """The analysis holds such a name complex on every path: the cotangent an
    operation making it real passes on is still a real value's (its real part), and
    so on in derivatives of every order (third, reverse over reverse over reverse)."""
    import s2sgrad as s
    m = make_module(BRANCHES)
    x = sign * np.linspace(0.3, 0.9, int(np.prod(shape))).reshape(shape)
    for fn in (m.f, m.g):
        np.testing.assert_allclose(s.grad(fn)(x), _numeric_grad(fn, x), rtol=1e-6, atol=1e-8)
    v = np.cos(np.arange(x.size)).reshape(shape)

    def second(y):
        return np.sum(s.grad(m.g)(y) * v)

    def third(y):
        return np.sum(s.grad(second)(y) * v)
    np.testing.assert_allclose(s.grad(third)(x), _numeric_grad(third, x), rtol=1e-5,
                               atol=1e-7)


FUNCTIONS = '''
import numpy as np
import s2sgrad


class Rotate(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        return x * (0.6 + 0.8j)

    @staticmethod
    def vjp(ctx, g):
        return np.real(g * (0.6 + 0.8j))


class Square(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return 2.0 * x * g


def rotated(x):
    y = Rotate.apply(x)
    return np.sum(np.abs(y + 1.0) ** 2)


def squared(x):
    return np.sum(np.abs(Square.apply(x) - 0.5))
'''


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_a_function_whose_forward_makes_complex_values_is_refused_where_it_is_used(
        make_module, shape):
    """A Function's forward that may make complex values (a complex literal here) has
    its results checked where they are made: the rules after it are real analysis's,
    so a complex result is refused at that line, not given a wrong gradient. One of
    NumPy arithmetic needs no check (and its generated code has none)."""
    m = make_module(FUNCTIONS)
    x = np.linspace(0.3, 0.9, int(np.prod(shape))).reshape(shape)
    with pytest.raises(s2sgrad.TransformError, match="complex value") as info:
        s2sgrad.grad(m.rotated)(x)
    assert info.value.lineno == 29
    np.testing.assert_allclose(s2sgrad.grad(m.squared)(x), _numeric_grad(m.squared, x),
                               rtol=1e-6, atol=1e-8)
    assert "_s2s_real_value" not in s2sgrad.source(m.squared)
