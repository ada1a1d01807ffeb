"""The gradient table for complex arguments.

Convention (autograd's and JAX's): the gradient of a real loss L of
z = x + iy is dL/dx - i dL/dy (the conjugate of the steepest-ascent direction;
`z - lr * np.conj(grad)` descends). A cotangent g of a value w stands for the
linear functional dw -> Re(g dw), so:

- a holomorphic function's cotangent is g * f'(z), unconjugated, and a linear
  rearrangement's (sum, reshape, matmul, fft) is its transpose, not its
  adjoint: their real rules hold as written (`holomorphic` below);
- the functions that are not holomorphic have rules of their own
  (`defcomplex`): |z| gives g * conj(z) / |z|, Re z gives g, Im z gives -i g,
  conj(z) gives conj(g), angle(z) gives -i g conj(z) / |z|^2;
- a real variable that meets complex values gets the real part of what
  reaches it (the transform adds `_s2s_real_part`), so real variables always
  carry real cotangents.

Only the rules listed here differentiate complex values; any other operation
on a complex value on the gradient path is refused at its line, never given
a real-analysis gradient. Forward mode takes the same rules: a JVP derived from
a holomorphic or linear rule holds for complex values; the others have their
own below, and an operation whose JVP is written for real values only (eigh,
svd) is refused there. Each entry is checked against central differences in
the real and imaginary parts (tests/test_complex.py).
"""
from __future__ import annotations

import numpy as np

from . import numpy_rules  # noqa: F401 - the entries marked here
from .jvp_rules import defjvp, linear, pointwise
from .registry import defcomplex, defvjp, holomorphic

# --- holomorphic, or linear: the real rules as they are -----------------------------
holomorphic(
    np.add, np.subtract, np.multiply, np.divide, np.negative, np.positive, np.matmul,
    np.exp, np.log, np.sin, np.cos, np.tan, np.tanh, np.sinh, np.cosh, np.sqrt, np.square,
    np.reciprocal, np.expm1, np.log1p, np.exp2, np.log2, np.log10, np.power,
    np.arcsin, np.arccos, np.arctan, np.arcsinh, np.arctanh,
    np.sum, np.mean, np.prod, np.cumsum, np.dot, np.outer, np.inner, np.einsum,
    np.trace, np.diagonal, np.diag, np.triu, np.tril,
    np.reshape, np.ravel, np.transpose, np.squeeze, np.expand_dims, np.swapaxes,
    np.moveaxis, np.broadcast_to, np.concatenate, np.stack, np.vstack, np.hstack,
    np.flip, np.roll, np.tile, np.repeat, np.take, np.where, np.copy, np.array, np.asarray,
    np.linalg.inv, np.linalg.solve, np.linalg.det,
    np.fft.fftshift, np.fft.ifftshift, np.pad, np.rot90, np.flipud, np.fliplr, np.diff,
    np.atleast_1d, np.atleast_2d, np.atleast_3d, np.column_stack, np.dstack, np.kron,
    np.tensordot, np.cumprod,
    ".sum()", ".mean()", ".prod()", ".dot()", ".reshape()", ".transpose()", ".ravel()",
    ".cumsum()", ".cumprod()", ".flatten()", ".squeeze()", ".swapaxes()", ".copy()",
    ".diagonal()", ".trace()", ".repeat()", ".take()", ".astype()",
    ".T",
)

# np.bincount's weights enter linearly: its rule (a gather) holds for complex weights
# as written. NumPy refuses complex weights, so no case runs it; it is marked so that a
# helper choosing np.bincount for real values and np.add.at for complex ones (the
# compiler sees both branches) is differentiated again.
holomorphic(np.bincount)
if hasattr(np, "astype"):   # (NumPy >= 2; a cast's cotangent is g cast back)
    holomorphic(np.astype)

# --- not holomorphic: rules of their own, and JVPs of their own (forward mode: the
# change of the value for a change z_dot of the argument; |z|: Re(conj(z) z_dot) / |z|,
# 0 at 0; angle(z): Im(conj(z) z_dot) / |z|^2) --------------------------------------------
def _with_jvp(rule, **jvp: str) -> None:
    defjvp(rule.name, complex_ok=True, **jvp)


_with_jvp(defcomplex(np.absolute, "x", x="g * abs_direction(x)"),
          x="np.real(np.conj(x) * x_dot) / np.where(ans == 0, 1.0, ans)")
_with_jvp(defcomplex(np.real, "val", val="g"), val="np.real(val_dot)")
_with_jvp(defcomplex(".real", "self", self="g"), self="np.real(self_dot)")
_with_jvp(defcomplex(np.imag, "val", val="-1j * g"), val="np.imag(val_dot)")
_with_jvp(defcomplex(".imag", "self", self="-1j * g"), self="np.imag(self_dot)")
_with_jvp(defcomplex(np.conjugate, "x", x="np.conj(g)"), x="np.conj(x_dot)")
_with_jvp(defcomplex(".conj()", "self", self="np.conj(g)"), self="np.conj(self_dot)")
_with_jvp(defcomplex(".conjugate()", "self", self="np.conj(g)"), self="np.conj(self_dot)")
defvjp(np.angle, "z, deg=False", z="0.0 * g")   # 0 or pi on real values: constant
_with_jvp(defcomplex(np.angle, "z, deg=False", z="g * angle_direction(z, deg)"),
          z="np.imag(np.conj(z) * z_dot) / np.where(z == 0, 1.0, np.abs(z) ** 2) * "
            "(180.0 / np.pi if deg else 1.0)")

# --- Hermitian eigendecompositions: not holomorphic, but their real rules are written
# for complex matrices too (eigh_grad: conj(V) (...) V^T made Hermitian; a loss that
# depends on the arbitrary phase of a complex eigenvector is a LinAlgError there) ----------
holomorphic(np.linalg.eigh, np.linalg.eigvalsh)
# ... and so are the singular value decomposition's (svd_grad: U [...] V^H, conjugated;
# its vectors share one phase per pair, which a loss must not depend on)
holomorphic(np.linalg.svd)
if hasattr(np.linalg, "svdvals"):
    holomorphic(np.linalg.svdvals)

# --- discrete Fourier transforms: linear, and the DFT matrix is symmetric, so each
# one's cotangent is the same transform of g (cut or padded back to the input's
# length where n or s changed it) ----------------------------------------------------------
for _f in (np.fft.fft, np.fft.ifft):
    defvjp(_f, "a, n=None, axis=-1, norm=None",
           a=f"fft_grad(g, a, np.fft.{_f.__name__}, (n,), (axis,), norm)")
for _f in (np.fft.fft2, np.fft.ifft2):
    defvjp(_f, "a, s=None, axes=(-2, -1), norm=None",
           a=f"fft_grad(g, a, np.fft.{_f.__name__}, s, axes, norm)")
for _f in (np.fft.fftn, np.fft.ifftn):
    defvjp(_f, "a, s=None, axes=None, norm=None",
           a=f"fft_grad(g, a, np.fft.{_f.__name__}, s, axes, norm)")
holomorphic(np.fft.fft, np.fft.ifft, np.fft.fft2, np.fft.ifft2, np.fft.fftn, np.fft.ifftn)
# rfft: the first n // 2 + 1 terms of fft of a real signal; irfft: the real signal of
# such terms (not holomorphic: its rule is written for complex arguments, as the
# others here are)
defvjp(np.fft.rfft, "a, n=None, axis=-1, norm=None", a="rfft_grad(g, a, n, axis, norm)")
defvjp(np.fft.irfft, "a, n=None, axis=-1, norm=None", a="irfft_grad(g, a, n, axis, norm)")
defvjp(np.fft.rfft2, "a, s=None, axes=(-2, -1), norm=None", a="rfftn_grad(g, a, s, axes, norm)")
defvjp(np.fft.rfftn, "a, s=None, axes=None, norm=None", a="rfftn_grad(g, a, s, axes, norm)")
defvjp(np.fft.irfft2, "a, s=None, axes=(-2, -1), norm=None",
       a="irfftn_grad(g, a, s, axes, norm)")
defvjp(np.fft.irfftn, "a, s=None, axes=None, norm=None", a="irfftn_grad(g, a, s, axes, norm)")
# hfft: irfft of the conjugate (a real signal of a Hermitian spectrum); ihfft: its inverse
defvjp(np.fft.hfft, "a, n=None, axis=-1, norm=None", a="hfft_grad(g, a, n, axis, norm)")
defvjp(np.fft.ihfft, "a, n=None, axis=-1, norm=None", a="ihfft_grad(g, a, n, axis, norm)")
holomorphic(np.fft.rfft, np.fft.irfft, np.fft.rfft2, np.fft.rfftn, np.fft.irfft2,
            np.fft.irfftn, np.fft.hfft, np.fft.ihfft)

# Forward mode: every transform is linear over the reals (irfft and hfft read only the
# Hermitian part), so its tangent is the transform of the tangent.
linear("np.fft.fft", "np.fft.ifft", "np.fft.fft2", "np.fft.ifft2", "np.fft.fftn",
       "np.fft.ifftn", "np.fft.rfft", "np.fft.irfft", "np.fft.rfft2", "np.fft.rfftn",
       "np.fft.irfft2", "np.fft.irfftn", "np.fft.hfft", "np.fft.ihfft")
pointwise("np.angle")   # (0 on real values)
