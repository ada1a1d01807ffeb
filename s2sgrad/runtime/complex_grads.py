"""Helpers of the rules for complex arguments (rules/complex_rules.py).

The convention is autograd's and JAX's: the gradient of a real loss L of
z = x + iy is dL/dx - i dL/dy, so a real function's cotangent g gives np.abs(z)
the cotangent g * conj(z) / |z|, and a real variable whose value meets complex
ones gets the real part of what reaches it.
"""
from __future__ import annotations

import numpy as np

from .registry import helper


@helper
def abs_direction(x):
    """d|z| as a cotangent factor: conj(z) / |z| (0 at z == 0, the zero subgradient),
    which is np.sign(x) for real x; one formula, so that its derivative is derived."""
    size = np.abs(x)
    return np.where(size == 0, 0.0, np.conj(x) / np.where(size == 0, 1.0, size))


@helper
def angle_direction(z, deg=False):
    """d angle(z) as a cotangent factor: -i conj(z) / |z|^2 (0 at z == 0), in degrees
    with deg; 0 for real z (angle is 0 or pi there)."""
    if not np.iscomplexobj(z):
        return np.zeros(np.shape(z))
    size2 = np.real(z * np.conj(z))
    out = np.where(size2 == 0, 0.0, -1j * np.conj(z) / np.where(size2 == 0, 1.0, size2))
    return out * (180.0 / np.pi) if deg else out


@helper
def real_part(v):
    """The cotangent of a real variable from complex parts: their real part (item by
    item for the cotangent of a list or tuple; None, a zero, stays None)."""
    if isinstance(v, (list, tuple)):
        return type(v)(real_part(item) for item in v)
    if v is None:
        return None
    return np.real(v) if np.iscomplexobj(v) else v


def _fit(x, shape, axes):
    """x cut or padded with zeros along `axes` to the lengths of `shape`."""
    index = [slice(None)] * x.ndim
    pads = [(0, 0)] * x.ndim
    for ax in axes:
        n = shape[ax]
        if x.shape[ax] > n:
            index[ax] = slice(0, n)
        elif x.shape[ax] < n:
            pads[ax] = (0, n - x.shape[ax])
    x = x[tuple(index)]
    return np.pad(x, pads) if any(p != (0, 0) for p in pads) else x


def fft_axes(ndim, s, axes):
    """The axes an n-d transform runs over (NumPy's rule: all, or the last len(s))."""
    if axes is None:
        return tuple(range(ndim - len(s), ndim)) if s is not None else tuple(range(ndim))
    return tuple(ax % ndim for ax in axes)


@helper
def fft_grad(g, a, transform, s, axes, norm):
    """The cotangent of a discrete Fourier transform (np.fft.fft, ifft, fft2, ifft2,
    fftn, ifftn) of `a`: the same transform of g (the DFT matrix is symmetric, and
    the convention takes the transpose, not the adjoint), cut or padded back to a's
    lengths where `s` (or n) padded or cut a."""
    a = np.asarray(a)
    if s is not None and all(n is None for n in s):
        s = None
    axes = fft_axes(a.ndim, s, axes)
    inverse = transform in (np.fft.ifft, np.fft.ifft2, np.fft.ifftn)
    if inverse:
        out = np.fft.ifftn(g, axes=axes, norm=norm)
    else:
        out = np.fft.fftn(g, axes=axes, norm=norm)
    return _fit(out, a.shape, axes)


@helper
def rfft_grad(g, a, n, axis, norm):
    """The cotangent of np.fft.rfft(a, n, axis, norm): rfft keeps the first n // 2 + 1
    terms of the fft of a real signal, so g padded with zeros to n, transformed, and
    fitted to a's length (the transform takes its real part: a is real)."""
    a = np.asarray(a)
    if np.iscomplexobj(a):
        raise NotImplementedError("the gradient of np.fft.rfft of a complex array (rfft "
                                  "discards its imaginary part): use np.fft.fft")
    axis = axis % a.ndim
    length = a.shape[axis] if n is None else n
    full = list(np.shape(g))
    full[axis] = length
    out = np.fft.fft(_fit(np.asarray(g), full, (axis,)), axis=axis, norm=norm)
    return _fit(out, a.shape, (axis,))


_DUAL_NORM = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}


@helper
def rfftn_grad(g, a, s, axes, norm):
    """The cotangent of np.fft.rfftn(a, s, axes, norm) (and rfft2): the fftn of a real
    signal cut to its first n // 2 + 1 terms along the last axis, so g padded back
    with zeros there, transformed, and fitted to a's lengths."""
    a = np.asarray(a)
    if np.iscomplexobj(a):
        raise NotImplementedError("the gradient of np.fft.rfftn of a complex array (it "
                                  "discards the imaginary part): use np.fft.fftn")
    if s is not None and all(n is None for n in s):
        s = None
    axes = fft_axes(a.ndim, s, axes)
    lengths = [a.shape[ax] for ax in axes] if s is None else list(s)
    full = list(np.shape(g))
    full[axes[-1]] = lengths[-1]
    out = np.fft.fftn(_fit(np.asarray(g), full, (axes[-1],)), axes=axes, norm=norm)
    return _fit(out, a.shape, axes)


@helper
def irfft_grad(g, a, n, axis, norm):
    """The cotangent of np.fft.irfft(a, n, axis, norm), a real signal made from the
    first n // 2 + 1 terms of a Hermitian spectrum: each term but the first (and the
    middle one for even n) stands for itself and its conjugate, so its cotangent is
    twice the rfft of g, conjugated (scaled as irfft is); the imaginary parts of the
    first and middle terms, which irfft ignores, get none."""
    a = np.asarray(a)
    out = _irfft_cotangent(g, a.shape, n, axis % a.ndim, norm)
    return out if np.iscomplexobj(a) else np.real(out)   # (a real spectrum: its part)


def _irfft_cotangent(g, shape, n, axis, norm):
    """irfft_grad's cotangent of a spectrum of `shape`, complex."""
    length = 2 * (shape[axis] - 1) if n is None else n
    terms = length // 2 + 1
    g = np.real(g)   # (the signal is real: the real part of its cotangent is what counts)
    out = np.conj(np.fft.rfft(g, n=length, axis=axis, norm=_DUAL_NORM[norm]))
    weight = np.full(terms, 2.0)
    weight[0] = 1.0
    if length % 2 == 0:
        weight[-1] = 1.0
    along = [1] * out.ndim
    along[axis] = terms
    out = out * weight.reshape(along)
    index = [slice(None)] * out.ndim
    for k in {0, terms - 1} if length % 2 == 0 else {0}:   # (irfft reads their real parts)
        index[axis] = k
        out[tuple(index)] = np.real(out[tuple(index)])
    return _fit(out, shape, (axis,))


@helper
def irfftn_grad(g, a, s, axes, norm):
    """The cotangent of np.fft.irfftn(a, s, axes, norm) (and irfft2): ifftn along the
    other axes, then irfft along the last one, so irfft_grad's cotangent along the
    last axis, then the ifftn of that along the others (its own transpose), fitted
    to a's lengths."""
    a = np.asarray(a)
    if s is not None and all(n is None for n in s):
        s = None
    axes = fft_axes(a.ndim, s, axes)
    shape = list(a.shape)   # (of the spectrum irfft reads: the others' lengths from s)
    if s is not None:
        for ax, n in zip(axes[:-1], s[:-1]):
            shape[ax] = n
    out = _irfft_cotangent(np.asarray(g), shape, None if s is None else s[-1], axes[-1],
                           norm)
    if len(axes) > 1:
        out = _fit(np.fft.ifftn(out, axes=axes[:-1], norm=norm), a.shape, axes[:-1])
    return out if np.iscomplexobj(a) else np.real(out)


@helper
def hfft_grad(g, a, n, axis, norm):
    """The cotangent of np.fft.hfft(a, n, axis, norm), which NumPy computes as
    irfft(conj(a), n, axis) with the dual normalisation: irfft_grad's, conjugated
    (the cotangent of conj(a) is the conjugate)."""
    return np.conj(irfft_grad(g, a, n, axis, _DUAL_NORM[norm]))


@helper
def ihfft_grad(g, a, n, axis, norm):
    """The cotangent of np.fft.ihfft(a, n, axis, norm), NumPy's conj(rfft(a, n, axis))
    with the dual normalisation: rfft_grad of the conjugated cotangent."""
    return rfft_grad(np.conj(g), a, n, axis, _DUAL_NORM[norm])
