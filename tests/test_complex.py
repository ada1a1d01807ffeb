"""Complex arguments: every rule for complex values against central differences.

Convention (autograd's and JAX's): the gradient of a real loss L of a complex z
is dL/dx - i dL/dy, computed here by differences in the real and imaginary
parts separately. Each entry of rules/complex_rules.py is exercised on two
shapes (one broadcasting where the function broadcasts), through a loss
L = sum(Re(F(z, w, x) * V)) with a fixed complex V, so that every direction of
the cotangent is used; real arguments beside complex ones get real gradients.
HIPS autograd, where installed, is a second reference.
"""
import zlib

import numpy as np
import pytest
from conftest import check_vjp

import s2sgrad
from s2sgrad import TransformError

H = 1e-6

# (name, expression in z, w (complex) and x (real), {name: shape})
CASES = [
    ("add", "z + w", {"z": (3,), "w": (2, 3)}),
    ("subtract", "z - x", {"z": (2, 3), "x": (3,)}),
    ("multiply", "z * w", {"z": (4,), "w": (4,)}),
    ("multiply real", "z * x", {"z": (2, 3), "x": (2, 1)}),
    ("divide", "z / w", {"z": (3,), "w": (2, 3)}),
    ("divide real", "x / z", {"x": (3,), "z": (3,)}),
    ("negative", "-z + 1j", {"z": (3,)}),
    ("power", "z ** 3", {"z": (2, 2)}),
    ("power complex exponent", "z ** w", {"z": (3,), "w": (3,)}),
    ("ufuncs by name", "np.add(z, w) - np.subtract(z, x) + np.multiply(z, w) * "
                       "np.divide(w, z) + np.negative(z) + np.positive(w) + np.power(z, 2)",
     {"z": (2, 3), "w": (3,), "x": (2, 3)}),
    ("named", "np.absolute(z) + np.conjugate(w) * z.conjugate() + np.matmul(z, w) * 0.5",
     {"z": (3,), "w": (3,)}),
    ("exp", "np.exp(z)", {"z": (3,)}),
    ("log", "np.log(z)", {"z": (2, 3)}),
    ("sin cos tan", "np.sin(z) + np.cos(w) * np.tan(z * 0.3)", {"z": (3,), "w": (3,)}),
    ("hyperbolic", "np.tanh(z) + np.sinh(w) * np.cosh(z)", {"z": (2, 2), "w": (2,)}),
    ("sqrt square reciprocal", "np.sqrt(z) + np.square(w) + np.reciprocal(z)",
     {"z": (3,), "w": (3,)}),
    ("exp log variants", "np.expm1(z) + np.log1p(z) + np.exp2(w) + np.log2(z) + np.log10(w)",
     {"z": (3,), "w": (3,)}),
    ("inverse trig", "np.arcsin(0.3 * z) + np.arccos(0.3 * w) + np.arctan(0.3 * z)",
     {"z": (3,), "w": (3,)}),
    ("inverse hyperbolic", "np.arcsinh(z) + np.arctanh(0.3 * w)", {"z": (2,), "w": (2,)}),
    ("abs", "np.abs(z) * x", {"z": (2, 3), "x": (3,)}),
    ("abs builtin", "abs(z) ** 2", {"z": (4,)}),
    ("real imag", "np.real(z) * np.imag(w) + z.real - w.imag", {"z": (3,), "w": (3,)}),
    ("conj", "np.conj(z) * w + z.conj() * 2.0", {"z": (3,), "w": (3,)}),
    ("angle", "np.angle(z) * x + np.angle(w, deg=True)", {"z": (3,), "w": (3,), "x": (3,)}),
    ("sum mean prod", "np.sum(z, axis=0) + np.mean(w) + np.prod(z, axis=0)",
     {"z": (2, 3), "w": (3,)}),
    ("cumsum", "np.cumsum(z, axis=1)", {"z": (2, 3)}),
    ("cumprod", "np.cumprod(z, axis=0) + z.cumprod(axis=1)", {"z": (3, 2)}),
    # rearrangements and products, linear or holomorphic
    ("pad rot90 flips", "np.pad(z, ((1, 0), (0, 2)))[1:, :2] + np.rot90(w) + "
                        "np.flipud(z) * np.fliplr(w)", {"z": (2, 2), "w": (2, 2)}),
    ("diff", "np.diff(z, axis=1) * np.diff(x, n=2)", {"z": (2, 4), "x": (5,)}),
    ("atleast", "np.atleast_1d(z) + np.atleast_2d(w) + np.atleast_3d(z)[0, :, 0]",
     {"z": (3,), "w": (1, 3)}),
    ("stacks", "np.column_stack([z, w])[:, 0] + np.dstack([z, x])[0, :, 1]",
     {"z": (3,), "w": (3,), "x": (3,)}),
    ("more methods", "z.cumsum(axis=0)[0] + z.flatten()[:2] + w.squeeze() + "
                     "z.swapaxes(0, 1)[0] + z.copy()[1] + z.diagonal() * w.trace() + "
                     "z.repeat(2)[:2] + z.take([0, 3])", {"z": (2, 2), "w": (1, 2)}),
    ("astype", "z.astype(np.complex128) * x.astype(complex) + z.real.astype(complex)" +
     (" + np.astype(w, np.complex128)" if hasattr(np, "astype") else ""),
     {"z": (3,), "x": (3,), "w": (3,)}),
    ("kron tensordot", "np.kron(z, w)[:3] + np.tensordot(z, w, axes=0)[0]",
     {"z": (3,), "w": (3,)}),
    ("matmul", "z @ w", {"z": (2, 3), "w": (3, 2)}),
    ("matmul real", "x @ z", {"x": (2, 3), "z": (3,)}),
    ("dot outer inner", "np.dot(z, w) + np.sum(np.outer(z, w)) + np.inner(z, x)",
     {"z": (3,), "w": (3,), "x": (3,)}),
    ("einsum", "np.einsum('ij,j->i', z, w)", {"z": (2, 3), "w": (3,)}),
    ("trace diagonal", "np.trace(z) + np.sum(np.diagonal(w)) + np.sum(np.diag(z))",
     {"z": (3, 3), "w": (3, 3)}),
    ("triangles", "np.triu(z) + np.tril(w, -1)", {"z": (3, 3), "w": (3, 3)}),
    ("shapes", "np.reshape(z, (3, 2)).T + w + np.expand_dims(np.ravel(z)[:3], 0)",
     {"z": (2, 3), "w": (2, 3)}),
    ("transpose", "np.transpose(z) * w", {"z": (2, 3), "w": (3, 2)}),
    ("axes", "np.swapaxes(z, 0, 1) + np.moveaxis(w, 0, -1) + np.squeeze(z[None])",
     {"z": (2, 2), "w": (2, 2)}),
    ("broadcast", "np.broadcast_to(z, (2, 3)) * w", {"z": (3,), "w": (2, 3)}),
    ("join", "np.concatenate([z, w]) + np.hstack([w, z])", {"z": (2,), "w": (2,)}),
    ("stack", "np.stack([z, w]) + np.vstack([w, z])", {"z": (3,), "w": (3,)}),
    ("rearrange", "np.flip(z) + np.roll(w, 1) + np.tile(z[:1], 3) + np.repeat(w[1:2], 3)",
     {"z": (3,), "w": (3,)}),
    ("take where", "np.take(z, [2, 0]) + np.where(x[:2] > 0, z[:2], w[:2])",
     {"z": (3,), "w": (3,), "x": (3,)}),
    ("index", "z[1:] * w[0] + z[::-1][:2]", {"z": (3,), "w": (3,)}),
    ("copy array", "np.copy(z) + np.array(w) + np.asarray(z)", {"z": (3,), "w": (3,)}),
    ("linalg", "np.linalg.inv(z) + np.linalg.solve(z, w) * np.linalg.det(z)",
     {"z": (3, 3), "w": (3, 3)}),
    ("methods", "z.sum(axis=0) + w.mean() + z.prod(axis=0) + z.dot(w[0]).reshape(-1) + "
                "z.transpose().ravel()[:3] + z.T[0]", {"z": (3, 3), "w": (3, 3)}),
    ("fft", "np.fft.fft(z) + np.fft.ifft(w, n=4)[:3]", {"z": (3,), "w": (5,)}),
    ("fft2 fftn", "np.fft.fft2(z) + np.fft.ifftn(w, axes=(0,))", {"z": (2, 3), "w": (2, 3)}),
    ("ifft2 fftn",
     "np.fft.ifft2(z, s=(3, 2)) + np.fft.fftn(w, s=(3, 2), axes=(0, 1), norm='ortho')",
     {"z": (2, 3), "w": (2, 3)}),
    ("fft of real", "np.fft.fft(x) * z + np.fft.rfft(x, n=6)[:3]", {"x": (3,), "z": (3,)}),
    ("fftshift", "np.fft.fftshift(z) + np.fft.ifftshift(w)", {"z": (4,), "w": (4,)}),
    ("irfft", "np.fft.irfft(z) * x", {"z": (5,), "x": (8,)}),
    ("irfft axis", "np.fft.irfft(w, n=5, axis=0, norm='ortho')", {"w": (3, 2)}),
    ("rfft2", "np.fft.rfft2(x) * z", {"x": (3, 4), "z": (3, 3)}),
    ("rfftn s", "np.fft.rfftn(x, s=(4, 5), axes=(0, 1), norm='ortho')", {"x": (3, 4)}),
    ("rfftn axes", "np.fft.rfftn(x, axes=(0, 2))", {"x": (2, 3, 5)}),
    ("irfft2", "np.fft.irfft2(z) * x", {"z": (3, 3), "x": (3, 4)}),
    ("irfftn s", "np.fft.irfftn(z, s=(4, 6), axes=(0, 1), norm='forward')", {"z": (3, 3)}),
    ("irfftn axes", "np.fft.irfftn(w, axes=(0, 2))", {"w": (2, 3, 4)}),
    ("irfftn of real", "np.fft.irfftn(x, s=(3, 4), axes=(0, 1))", {"x": (2, 3)}),
    ("hfft", "np.fft.hfft(z) * x", {"z": (4,), "x": (6,)}),
    ("hfft n axis", "np.fft.hfft(w, n=7, axis=0, norm='ortho')", {"w": (4, 2)}),
    ("ihfft", "np.fft.ihfft(x) * z", {"x": (6,), "z": (4,)}),
    ("ihfft n axis", "np.fft.ihfft(x, n=5, axis=0, norm='forward')", {"x": (4, 3)}),
    # Hermitian eigendecompositions (of the lower triangle; phase-free losses of the
    # vectors: |v|^2, v v^H), one batched
    ("eigh", "np.linalg.eigh(z)[0] * x + np.sum(np.abs(np.linalg.eigh(w)[1]) ** 2 * x, 0)",
     {"z": (3, 3), "w": (3, 3), "x": (3,)}),
    ("eigh batched upper",
     "np.linalg.eigvalsh(z, UPLO='U') + np.abs(np.linalg.eigh(z)[1][..., 0]) ** 2",
     {"z": (2, 3, 3)}),
    ("eigh projector",
     "(lambda v: v[:, :1] @ np.conj(v[:, :1]).T)(np.linalg.eigh(z)[1])",
     {"z": (3, 3)}),
    # singular value decompositions (tall, wide, batched; |u|^2 and u s vh are free of
    # the phase each pair of vectors shares)
    ("svd", "np.linalg.svd(z, full_matrices=False)[1] * x + "
            "np.sum(np.abs(np.linalg.svd(w, full_matrices=False)[0]) ** 2, 1)",
     {"z": (4, 3), "w": (3, 5), "x": (3,)}),
    ("svd product",
     "(lambda r: r[0][..., :2] @ (r[1][..., :2, None] * r[2][..., :2, :]))("
     "np.linalg.svd(z, full_matrices=False))", {"z": (2, 4, 3)}),
    ("svd values", "np.linalg.svd(z, compute_uv=False) ** 2", {"z": (3, 4)}),
    ("eigvalsh", "np.linalg.eigvalsh(z) * x + np.linalg.eigvalsh(w, UPLO='U')[0]",
     {"z": (3, 3), "w": (2, 3, 3), "x": (3,)}),
] + ([("svdvals", "np.linalg.svdvals(z) * x", {"z": (2, 4, 3), "x": (3,)})]
     if hasattr(np.linalg, "svdvals") else [])


def _module(make_module, expr, params):
    return make_module(f"import numpy as np\n\n\ndef f({', '.join(params)}, V):\n"
                       f"    return np.sum(np.real(({expr}) * V))\n")


def _draw(name, shape, rng):
    value = rng.uniform(0.4, 1.2, shape)
    if name == "x":
        return value * rng.choice([-1.0, 1.0], shape)
    return value * np.exp(1j * rng.uniform(-1.2, 1.2, shape))


def _differences(f, args, i):
    """dL/dx - i dL/dy of argument i (dL/dx for a real one)."""
    a = args[i]
    out = np.zeros(np.shape(a), dtype=complex if np.iscomplexobj(a) else float)
    for k in np.ndindex(np.shape(a)):
        for step, factor in ((H, 1.0), (1j * H, -1j)) if np.iscomplexobj(a) else ((H, 1.0),):
            up, down = [np.array(b, copy=True) for b in args], [np.array(b, copy=True)
                                                                  for b in args]
            up[i][k] += step
            down[i][k] -= step
            out[k] += factor * (f(*up) - f(*down)) / (2 * H)
    return out


def _case(label, expr, shapes, make_module):
    """(module with f(*params, V), params, their values, V): V a fixed complex
    weight of the expression's value, the loss sum(Re(F * V))."""
    rng = np.random.default_rng(zlib.crc32(label.encode()))   # (hash() varies by process)
    params = list(shapes)
    m = _module(make_module, expr, params)
    args = [_draw(p, shapes[p], rng) for p in params]
    out_shape = np.shape(eval(expr, {"np": np}, dict(zip(params, args))))
    return m, params, args, rng.standard_normal(out_shape) + \
        1j * rng.standard_normal(out_shape)


@pytest.mark.parametrize("label, expr, shapes", CASES, ids=[c[0] for c in CASES])
def test_complex_rule_matches_differences(label, expr, shapes, make_module):
    m, params, args, V = _case(label, expr, shapes, make_module)
    wrt = tuple(range(len(params)))
    grads = s2sgrad.grad(m.f, wrt=wrt)(*args, V)
    for i, p in enumerate(params):
        want = _differences(m.f, args + [V], i)
        assert np.iscomplexobj(grads[i]) == (p != "x"), (p, grads[i].dtype)
        np.testing.assert_allclose(grads[i], want, rtol=1e-5, atol=1e-6, err_msg=p)


# (autograd has no VJP for np.positive, no .real, .conj() or .conjugate() of its boxes,
# no deg= for np.angle)
_AUTOGRAD_CASES = [c for c in CASES if c[0] in (
    "add", "subtract", "multiply", "multiply real", "divide", "divide real", "power",
    "power complex exponent", "exp", "log", "sin cos tan", "hyperbolic", "abs",
    "sum mean prod", "cumsum", "matmul", "matmul real", "linalg", "fft", "fft2 fftn",
    "eigh", "svd")] + [
    ("real imag conj angle", "np.real(z) * np.imag(w) + np.conj(z) * np.angle(w)",
     {"z": (3,), "w": (3,)})]


@pytest.mark.parametrize("label, expr, shapes", _AUTOGRAD_CASES,
                         ids=[c[0] for c in _AUTOGRAD_CASES])
def test_complex_rule_matches_autograd(label, expr, shapes, make_module):
    autograd = pytest.importorskip("autograd")
    import autograd.numpy as anp
    m, params, args, V = _case(label, expr, shapes, make_module)
    ns = {"np": anp}
    exec(f"def f({', '.join(params)}, V):\n    return anp.sum(anp.real(({expr}) * V))\n",
         dict(ns, anp=anp), ns)
    for i in range(len(params)):
        ours = s2sgrad.grad(m.f, wrt=i)(*args, V)
        theirs = autograd.grad(ns["f"], i)(*args, V)
        np.testing.assert_allclose(ours, theirs, rtol=1e-7, atol=1e-9)


def test_value_and_grad_and_vjp_take_complex_cotangents(make_module):
    m = make_module("""
import zlib

import numpy as np


def spectrum(z):
    return np.fft.fft(z * np.exp(z))
""")
    rng = np.random.default_rng(1)
    z = _draw("z", (4,), rng)
    v = rng.standard_normal(4) + 1j * rng.standard_normal(4)
    out, pullback = s2sgrad.vjp(m.spectrum, z)
    np.testing.assert_allclose(out, m.spectrum(z))

    def loss(u):
        return np.sum(np.real(m.spectrum(u) * v))
    np.testing.assert_allclose(pullback(v)[0], _differences(loss, [z], 0), rtol=1e-6,
                               atol=1e-7)


def test_a_complex_output_is_not_a_loss(make_module):
    m = make_module("import numpy as np\n\n\ndef f(z):\n    return np.sum(z * z)\n")
    with pytest.raises(TypeError, match="real-valued output"):
        s2sgrad.grad(m.f)(np.array([1.0 + 1.0j, 2.0]))


def test_descending_the_conjugate_gradient_fits_a_complex_parameter(make_module):
    """What a user does with the gradient: z -= lr * conj(grad) descends."""
    m = make_module("""
import zlib

import numpy as np


def loss(z, t, y):
    return np.sum(np.abs(np.exp(1j * t) * z[0] + z[1] - y) ** 2)
""")
    t = np.linspace(0.0, 3.0, 20)
    truth = np.array([0.7 - 0.4j, -0.2 + 0.9j])
    y = np.exp(1j * t) * truth[0] + truth[1]
    z = np.zeros(2, dtype=complex)
    grad = s2sgrad.grad(m.loss)
    for _ in range(300):
        z = z - 0.02 * np.conj(grad(z, t, y))
    np.testing.assert_allclose(z, truth, atol=1e-6)


@pytest.mark.parametrize("source, what", [
    ("np.linalg.norm(z)", "np.linalg.norm"),
    ("np.sum(np.maximum(np.abs(z), 1.0)) + np.sum(np.sort(z).real)", "np.sort"),
    ("np.max(z)", "np.max"),
])
def test_functions_without_a_complex_rule_are_refused_at_their_line(make_module, source, what):
    m = make_module(f"import numpy as np\n\n\ndef f(z):\n    return np.real({source})\n")
    with pytest.raises(TransformError, match="not differentiated for complex values") as info:
        s2sgrad.grad(m.f)(np.array([1.0 + 1.0j, 2.0 - 0.5j]))
    assert what in info.value.reason and info.value.lineno == 5


@pytest.mark.parametrize("source", ["np.sum(np.real(np.linalg.eigh(z)[1][:, 0]))",
                                    "np.sum(np.imag(np.linalg.svd(z)[0][0]))",
                                    "np.sum(np.real(np.linalg.svd(z)[2]))"])
def test_a_loss_that_depends_on_a_vectors_phase_is_an_error(make_module, source):
    """eigh and svd return complex vectors with an arbitrary phase each: a loss that
    changes with it has no gradient, and says so rather than return one."""
    m = make_module(f"import numpy as np\n\n\ndef f(z):\n    return {source}\n")
    z = np.array([[2.0, 0.5 - 0.3j, 0.1j], [0.2 + 0.4j, 1.0, 0.3], [0.1, 0.6j, -1.5]])
    with pytest.raises(np.linalg.LinAlgError, match="phase"):
        s2sgrad.grad(m.f)(z)


# eigh's and svd's vectors of complex matrices have an arbitrary phase that forward
# mode cannot check a loss for: refused there (reverse mode differentiates them,
# above); their values are differentiated
_REAL_JVP_ONLY = ("eigh", "eigh batched upper", "eigh projector", "svd", "svd product")


@pytest.mark.parametrize("label, expr, shapes", CASES, ids=[c[0] for c in CASES])
def test_forward_mode_matches_differences(label, expr, shapes, make_module):
    """functional.jvp of each case along a random direction (complex for complex
    arguments, real for real ones) against central differences along it."""
    m, params, args, V = _case(label, expr, shapes, make_module)
    rng = np.random.default_rng(zlib.crc32(label.encode()) + 1)
    tangents = tuple(_draw(p, shapes[p], rng) * (1.0 if p != "x" else 1.0) for p in params)
    f = lambda *a: m.f(*a, V)   # noqa: E731
    if label in _REAL_JVP_ONLY:
        with pytest.raises(TransformError, match="forward mode does not differentiate"):
            s2sgrad.functional.jvp(m.f, tuple(args) + (V,), tangents + (0.0 * V,))
        return
    out, tangent = s2sgrad.functional.jvp(m.f, tuple(args) + (V,), tangents + (0.0 * V,))
    up = f(*[a + H * t for a, t in zip(args, tangents)])
    down = f(*[a - H * t for a, t in zip(args, tangents)])
    np.testing.assert_allclose(out, f(*args), rtol=1e-12)
    np.testing.assert_allclose(tangent, (up - down) / (2 * H), rtol=1e-5, atol=1e-6)


def test_forward_mode_tangents_of_complex_outputs(make_module):
    m = make_module("import numpy as np\n\n\ndef f(z, x):\n"
                    "    return np.exp(z) * x + np.conj(z) ** 2\n")
    z, x = np.array([0.3 + 0.4j, -0.2 + 1.0j]), np.array([0.5, 1.5])
    tz, tx = np.array([1.0 - 0.5j, 0.2 + 0.1j]), np.array([0.3, -0.7])
    _, tangent = s2sgrad.functional.jvp(m.f, (z, x), (tz, tx))
    expected = np.exp(z) * tz * x + np.exp(z) * tx + 2 * np.conj(z) * np.conj(tz)
    np.testing.assert_allclose(tangent, expected, rtol=1e-12)
    with pytest.raises(TypeError, match="tangent of a real input is real"):
        s2sgrad.functional.jvp(m.f, (z, x), (tz, tx * 1j))


REAL_RESULTS = '''
import numpy as np


def values_into_real(x):
    z = x * (0.3 - 1.1j) + np.exp(1j * x)
    m = np.outer(z.ravel(), np.conj(z.ravel())) + np.diag(np.arange(1.0, z.size + 1.0))
    x = x + 0.1 * np.sum(np.linalg.eigvalsh(m))
    w, v = np.linalg.eigh(m)
    u, s, vh = np.linalg.svd(m)
    x = x * np.sum(w) * 0.05 + np.sum(s) * 0.02 + np.sum(np.abs(v[0]) ** 2)
    x = x + 0.03 * np.sum(np.linalg.svd(m, compute_uv=False))
    x = x + 0.2 * np.sin(x)
    for k in (0.5, 1.5):
        x = np.tanh(x * 0.8) * k + 0.1 * x
    return np.sum(np.tanh(x))
'''


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_real_results_of_complex_decompositions_flow_into_real_variables(make_module, shape):
    """eigvalsh's values, eigh's w and svd's s are real for a complex matrix: a real
    variable computed from them keeps a real cotangent (once a crash: a complex
    cotangent added into a real variable's)."""
    m = make_module(REAL_RESULTS)
    x = np.random.default_rng(12).uniform(-1.0, 1.0, shape)
    g = s2sgrad.grad(m.values_into_real)(x)
    np.testing.assert_allclose(g, _differences(m.values_into_real, [x], 0), rtol=1e-6,
                               atol=1e-8)
    assert g.dtype == np.float64


# The fuzzer's program (seed 950, index 108) that crashed: svd(..., compute_uv=False) of
# a complex matrix, its values added into a real variable read again by helpers.
FUZZ_SVD_VALUES = '''
import collections
import functools
import math

import numpy as np

import s2sgrad

Layer = collections.namedtuple("Layer", ["W", "b"])
C1 = 0.7
C2 = -0.4
G2 = np.array([0.4, -0.7])
G3 = np.array([0.3, -0.2, 0.5])
G4 = np.array([0.1, 0.6, -0.3, 0.2])
G23 = np.array([[0.2, -0.5, 0.3], [0.6, 0.1, -0.4]])


def push_to(L, v, c=0.5):
    L.append(np.tanh(v) * c + v * C1)


def make0(c):
    def act0(u):
        return np.sin(u) * c + np.tanh(u) * (1.0 - c)
    return act0


act0 = make0(0.8)


def cmix5(u, k):
    r = np.abs(u + 3.0)
    return u * np.exp(0.3j * u) * k + r * u, r


FNS9 = [np.sin, act0]



def f(x, y):
    s1 = 0.5 * np.tanh(np.sum(x))
    g0 = lambda u: np.tanh(u * s1) + u
    s1 = s1 * 0.5 + 0.1
    s3 = 0.5 * np.tanh(s1)
    g2 = lambda u: np.tanh(u * s3) + u
    zc4 = x * (0.3 - 1.1j) + np.exp(1j * x * 0.5)
    zc4, r6 = cmix5(zc4, x)
    zc4 = zc4 + r6 * (0.5 - 0.2j)
    zw7 = zc4 * 1.0
    zw7[0] = zw7[0] * 0.5 + np.abs(zc4[0] + 3.0) * x[0]
    zc4 = zw7 + zc4 * 0.5
    x = x + 0.3 * 0.1 * np.sum(np.linalg.svd(np.outer(zc4.ravel(), zc4.ravel()[::-1]) +\
 np.diag(np.arange(1.0, zc4.size + 1.0)), compute_uv=False))
    x = x + 0.2 * FNS9[1](x)
    for w10, act8 in zip([1.5, 1.5], FNS9):
        x = act8(x * 0.8) * w10 + 0.1 * x
    v11 = v12 = -1.2 * G4 * (s3 * G4)
    return np.mean((s3 - y if (np.maximum(np.mean(v12), s1)) > -0.1291 else np.sqrt(1.0 + y **\
 2))) + 1.5 * np.sum(np.tanh(v11)) + 1.5 * np.sum(np.tanh(s3)) + 0.5 * np.sum(np.tanh(v12)) +\
 0.3 * np.sum(g0((y * x)[0])) + 0.3 * np.sum(g2(g2(y) * 0.5))


'''


def test_singular_values_of_a_complex_matrix_are_real(make_module):
    """svd(a, compute_uv=False) gives real values: the real variable they reach keeps a
    real cotangent (once a complex one, added in place into a real array: a crash)."""
    m = make_module(FUZZ_SVD_VALUES)
    args = [np.array([0.9409985965970344, 0.0862751311230936, 0.8760011055995156]).reshape((3,)), np.array([-0.3417271563567563, 0.1293148082728095, -0.8677728594271243, 0.3265245053272392, -0.08621621937143176, -0.2594674573786291]).reshape((2, 3))]  # noqa: E501
    check_vjp(m.f, args, wrt=(0,), rtol=1e-5, atol=1e-7)


def test_functional_higher_derivatives_take_real_inputs_only(make_module):
    """Derivatives of derivatives of complex code are computed (test_complex_higher.py);
    their inputs are real: complex ones are refused with the remedy."""
    m = make_module("import numpy as np\n\n\ndef f(x):\n    return np.abs(x * 1j + 1.0)\n")
    with pytest.raises(TypeError, match="complex"):
        s2sgrad.functional.hvp(lambda x: np.sum(m.f(x)), np.array([0.5 + 1j, 1.0]), np.ones(2))


def test_every_rule_for_complex_values_has_a_case():
    """Each entry of rules/complex_rules.py (marked holomorphic or given a complex
    rule) is named in an expression of CASES (methods and attributes as .name)."""
    from s2sgrad.rules.registry import REGISTRY, load_table
    load_table()
    rules = [rule for _, rule in REGISTRY.functions.values()] + \
        [rule for _, rule in REGISTRY.aliases.values()] + \
        list(REGISTRY.methods.values()) + list(REGISTRY.attributes.values())
    text = " ".join(expr for _, expr, _ in CASES)
    missing = set()
    for rule in rules:
        if rule.name.startswith("_s2s_") or rule.name == "np.bincount":
            continue   # (s2sgrad's own helpers: tests/test_complex_higher.py; NumPy
            # refuses complex weights in np.bincount, see complex_rules.py)
        if rule.holomorphic or rule.on_complex is not None:
            name = rule.name
            token = ("." + name.split(".", 1)[1]) if name.startswith("ndarray.") else \
                "np." + name.split("np.", 1)[-1]
            if token not in text:
                missing.add(name)
    assert not missing, sorted(missing)


CALLEES = '''
import zlib

import numpy as np


def magnitude(z):
    return np.abs(z)          # a real result of a complex argument


def rotate(z, angle):
    return z * np.exp(1j * angle)


def caller(z, x):
    r = magnitude(z * x)      # the caller cannot tell r is real
    w = rotate(z, x)
    return np.sum(np.real(r * (1.0 + 2.0j) * w)) + np.sum(magnitude(w) ** 2)
'''


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_your_functions_are_compiled_for_the_complex_values_they_are_given(make_module,
                                                                           shape):
    """A helper called with complex arguments gets a pair of its own for them; a real
    result of it (np.abs) takes the real part of the cotangent the caller passes."""
    m = make_module(CALLEES)
    rng = np.random.default_rng(5)
    z, x = _draw("z", shape, rng), _draw("x", shape[-1:], rng)
    gz, gx = s2sgrad.grad(m.caller, wrt=(0, 1))(z, x)
    np.testing.assert_allclose(gz, _differences(m.caller, [z, x], 0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gx, _differences(m.caller, [z, x], 1), rtol=1e-6, atol=1e-8)
    assert gx.dtype == np.float64
    # forward mode compiles the helpers' tangent code for the complex values too
    tz, tx = _draw("z", shape, rng), _draw("x", shape[-1:], rng)
    _, tangent = s2sgrad.functional.jvp(m.caller, (z, x), (tz, tx))
    expected = (m.caller(z + H * tz, x + H * tx) - m.caller(z - H * tz, x - H * tx)) / (2 * H)
    np.testing.assert_allclose(tangent, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["build", "in_place"])
def test_forward_mode_through_writes_into_complex_arrays(make_module, name):
    m = make_module(WRITES)
    rng = np.random.default_rng(9)
    z, x = _draw("z", (3,), rng), _draw("x", (3,), rng)
    tz, tx = _draw("z", (3,), rng), _draw("x", (3,), rng)
    f = getattr(m, name)
    _, tangent = s2sgrad.functional.jvp(f, (z, x), (tz, tx))
    expected = (f(z + H * tz, x + H * tx) - f(z - H * tz, x - H * tx)) / (2 * H)
    np.testing.assert_allclose(tangent, expected, rtol=1e-6, atol=1e-8)


WRITES = '''
import zlib

import numpy as np


def build(z, x):
    y = np.zeros(4, dtype=complex)
    y[0] = z[0] * 2.0
    y[1:3] = z[1:] * x[:2]
    y[3] = x[2] + np.abs(z[2])       # a real value into a complex array
    y[np.array([0, 0, 2])] = np.array([1.0, 2.0, 3.0]) * z[0]
    return np.sum(np.abs(y * (1 + 1j)) ** 2 + np.imag(y * (0.3 + 0.7j)))


def in_place(z, x):
    y = z * 1.0
    y[1] += x[0] * 1j
    y[0] *= x[1]
    return np.sum(np.real(y * np.conj(y) * x))


def sign(z):
    return np.sum(np.real(np.sign(z) * z))
'''


def test_writes_into_complex_arrays(make_module):
    """x[i] = v into a complex array (a real v gets the real part of its cotangent),
    x[i] += v, np.zeros(n, dtype=complex)."""
    m = make_module(WRITES)
    rng = np.random.default_rng(3)
    z, x = _draw("z", (3,), rng), _draw("x", (3,), rng)
    for f in (m.build, m.in_place):
        gz, gx = s2sgrad.grad(f, wrt=(0, 1))(z, x)
        np.testing.assert_allclose(gz, _differences(f, [z, x], 0), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gx, _differences(f, [z, x], 1), rtol=1e-6, atol=1e-8)
        assert gx.dtype == np.float64


def test_the_sign_of_a_complex_value_is_not_taken_for_a_constant(make_module):
    """np.sign has no gradient on real values (piecewise constant); on complex ones it
    is z / |z|: refused, not given a zero."""
    m = make_module(WRITES)
    with pytest.raises(TransformError, match="np.sign of a complex value"):
        s2sgrad.grad(m.sign)(np.array([1.0 + 1.0j, 2.0 - 1.0j]))
