"""sin, cos, exp and tanh of one float64 that LLVM can vectorise, for fused loops.

numba compiles `np.sin(x)` on a number to a call of the C library's `sin`: a
call per element that no loop vectoriser can turn into SIMD code. NumPy's own
array kernels are SIMD for exp and tanh but not for float64 sin and cos, and
XLA (jax.jit) uses vectorised approximations for all four. These versions are
branch-free arithmetic, so a fused elementwise loop that calls them becomes
SIMD code.

How each is computed (the constants are derived below, not copied):

- sin, cos: x = k (pi/2) + r with |r| <= pi/4, k = rint(x 2/pi); pi/2 is split
  into four parts of 30 bits, so that k times each part is exact for
  |k| < 2^23 and the subtractions cancel exactly (Cody and Waite's reduction).
  sin r and cos r are their Taylor series to r^17 and r^18 (the next term is
  below 1e-17 of the result on |r| <= pi/4); k mod 4 picks +-sin r or +-cos r.
  The reduction is exact only for |x| < REDUCTION_LIMIT: a fused loop tests its
  arguments against it and, if any is larger, runs the NumPy statements again.
- exp: x = k ln2 + r with |r| <= ln2/2 (ln2 in two parts), exp r by its Taylor
  series to r^13, times 2^k built from its bits in two halves (so that results
  in the subnormal range and overflow to inf come out as NumPy's do).
- tanh: for |x| < 0.55 its Taylor series (its coefficients from the Bernoulli
  numbers, to x^39); from there on 1 - 2 / (exp(2|x|) + 1), with the sign of x.

Measured against NumPy over wide ranges (tests/test_numba_math.py): at most
2 units in the last place for sin and cos on |x| < REDUCTION_LIMIT, exp and
tanh likewise; NaN, inf, -0.0, overflow and underflow as NumPy gives them.
Importing this module needs numba.
"""
from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

_CACHE = os.environ.get("S2SGRAD_JIT_CACHE", "1") != "0"

# pi to 60 digits, the one number below not derived from exact arithmetic.
_PI = Fraction("3.14159265358979323846264338327950288419716939937510582097494459")
_LN2 = Fraction("0.693147180559945309417232121458176568075500134360255254120680009")


def _split(value: Fraction, parts: int, bits: int):
    """value as `parts` floats of `bits` significant bits each (the last one rounded)."""
    out = []
    rest = value
    for _ in range(parts - 1):
        m, e = math.frexp(float(rest))
        head = math.ldexp(math.floor(m * 2 ** bits) / 2 ** bits, e)
        out.append(head)
        rest -= Fraction(head)
    out.append(float(rest))
    return tuple(out)


P1, P2, P3, P4 = _split(_PI / 2, 4, 30)
TWO_OVER_PI = float(2 / _PI)
REDUCTION_LIMIT = 1.0e6          # |x| below this: k < 2^23, every k * Pi exact
L1, L2 = _split(_LN2, 2, 32)
LOG2E = float(1 / _LN2)


def _taylor(first: int, last: int):
    """-1, +1, -1, ... over n! for n = first, first + 2, ..., last."""
    return tuple(float(Fraction((-1) ** (j + 1), math.factorial(n)))
                 for j, n in enumerate(range(first, last + 1, 2)))


S3, S5, S7, S9, S11, S13, S15, S17 = _taylor(3, 17)
C2, C4, C6, C8, C10, C12, C14, C16, C18 = _taylor(2, 18)
E2, E3, E4, E5, E6, E7, E8, E9, E10, E11, E12, E13 = (
    1.0 / math.factorial(n) for n in range(2, 14))


def _bernoulli(n: int):
    """B_0 .. B_n as Fractions (B_1 = -1/2)."""
    b = [Fraction(0)] * (n + 1)
    for m in range(n + 1):
        a = [Fraction(0)] * (m + 1)
        for j in range(m + 1):
            a[j] = Fraction(1, j + 1)
            for k in range(j, 0, -1):
                a[k - 1] = k * (a[k - 1] - a[k])
        b[m] = a[0]
    b[1] = -b[1]
    return b


def _tanh_series(terms: int):
    """Coefficients of x, x^3, ...: 2^2n (2^2n - 1) B_2n / (2n)!."""
    b = _bernoulli(2 * terms)
    return tuple(float(Fraction(4 ** n * (4 ** n - 1)) * b[2 * n] / math.factorial(2 * n))
                 for n in range(1, terms + 1))


T = _tanh_series(20)
TANH_SERIES_LIMIT = 0.55


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float64 whose bits are the int64 `bits` (a bitcast, no memory)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


def _fast(fn):
    return njit(cache=_CACHE, inline="always")(fn)


@_fast
def _reduce(x):
    """(k, r): x = k pi/2 + r, |r| <= pi/4, k as a float (0 where it is not finite)."""
    k = round(x * TWO_OVER_PI)
    k = k if abs(k) < 1.0e9 else 0.0
    r = (((x - k * P1) - k * P2) - k * P3) - k * P4
    return k, r


@_fast
def _sin_cos_r(r):
    z = r * r
    s = r + r * z * (S3 + z * (S5 + z * (S7 + z * (S9 + z * (S11 + z * (
        S13 + z * (S15 + z * S17)))))))
    c = 1.0 + z * (C2 + z * (C4 + z * (C6 + z * (C8 + z * (C10 + z * (
        C12 + z * (C14 + z * (C16 + z * C18))))))))
    return s, c


@_fast
def fast_sin(x):
    """sin x for |x| < REDUCTION_LIMIT (NaN for inf and NaN)."""
    k, r = _reduce(x)
    s, c = _sin_cos_r(r)
    q = int(k) & 3
    v = c if q & 1 else s
    v = -v if q & 2 else v
    v = v if x != 0.0 else x                 # sin(-0.0) is -0.0
    return v if abs(x) <= 1.0e308 else x - x


@_fast
def fast_cos(x):
    """cos x for |x| < REDUCTION_LIMIT (NaN for inf and NaN)."""
    k, r = _reduce(x)
    s, c = _sin_cos_r(r)
    q = (int(k) + 1) & 3
    v = c if q & 1 else s
    v = -v if q & 2 else v
    return v if abs(x) <= 1.0e308 else x - x


@_fast
def fast_exp(x):
    """exp x (inf above 709.78, 0 below -745.13, subnormal results rounded twice)."""
    y = x if x < 710.0 else 710.0
    y = y if y > -746.0 else -746.0
    k = round(y * LOG2E)
    r = (y - k * L1) - k * L2
    p = 1.0 + r * (1.0 + r * (E2 + r * (E3 + r * (E4 + r * (E5 + r * (E6 + r * (
        E7 + r * (E8 + r * (E9 + r * (E10 + r * (E11 + r * (E12 + r * E13))))))))))))
    n = int(k)
    half = n >> 1
    v = p * _float_from_bits((half + 1023) << 52) * _float_from_bits((n - half + 1023) << 52)
    return v if x == x else x


@_fast
def fast_tanh(x):
    a = abs(x)
    z = x * x
    series = x * (T[0] + z * (T[1] + z * (T[2] + z * (T[3] + z * (T[4] + z * (
        T[5] + z * (T[6] + z * (T[7] + z * (T[8] + z * (T[9] + z * (
            T[10] + z * (T[11] + z * (T[12] + z * (T[13] + z * (T[14] + z * (
                T[15] + z * (T[16] + z * (T[17] + z * (T[18] + z * T[19])))))))))))))))))))
    e = fast_exp(2.0 * a)
    t = 1.0 - np.divide(2.0, e + 1.0)       # no ZeroDivisionError test to vectorise past
    t = t if x >= 0.0 else -t
    t = t if a == a else x
    return series if a < TANH_SERIES_LIMIT else t


FAST = {"sin": fast_sin, "cos": fast_cos, "exp": fast_exp, "tanh": fast_tanh}
# ufuncs whose fast version is exact only for arguments below a limit
LIMITED = {"sin": REDUCTION_LIMIT, "cos": REDUCTION_LIMIT}
