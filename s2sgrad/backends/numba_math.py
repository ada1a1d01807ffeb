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
- tanh: e / (e + 2) with e = expm1(2|x|), and the sign of x; expm1 by the same
  reduction as exp, as 2^k expm1(r) + (2^k - 1), whose two terms never cancel
  much for 2|x| >= 0 (and |x| capped at 20, where tanh rounds to 1).

Measured against NumPy over wide ranges (tests/test_numba_math.py): at most
2 units in the last place for sin and cos on |x| < REDUCTION_LIMIT and for exp,
3 for tanh (on |x| < 0.35, where e / (e + 2) adds its roundings to expm1's);
NaN, inf, -0.0, overflow and underflow as NumPy gives them.
Importing this module needs numba.
"""
from __future__ import annotations

import math
import os
from fractions import Fraction

from llvmlite import ir
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


SIN = _taylor(3, 17)       # sin r = r + r z (SIN[0] + z SIN[1] + ...), z = r^2
COS = _taylor(2, 18)       # cos r = 1 + z (COS[0] + z COS[1] + ...)
EXP = tuple(1.0 / math.factorial(n) for n in range(0, 14))      # exp r, to r^13
EXPM1 = EXP[1:]            # expm1 r = r (EXPM1[0] + r EXPM1[1] + ...)


TANH_ONE = 20.0          # tanh(x) rounds to +-1 from |x| = 19.06 on


# -- LLVM IR, spelled as Python ------------------------------------------------------
# Each function is an @intrinsic: numba emits its instructions at the call, with no
# typing of a Python body (an inlined @njit function is typed again at every call,
# which cost 0.6 s of the elementwise workload's first call), and LLVM inlines and
# vectorises them. The functions below are written once, over `_Value`s whose
# operators emit instructions, with `select` for `a if c else b`.
_DOUBLE = ir.DoubleType()
_I64 = ir.IntType(64)


class _Value:
    """An LLVM double or i64 (or i1) of one builder, with Python's operators."""

    __slots__ = ("builder", "value")

    def __init__(self, builder, value):
        self.builder = builder
        self.value = value

    @property
    def is_float(self) -> bool:
        return isinstance(self.value.type, ir.DoubleType)

    def _of(self, other):
        if isinstance(other, _Value):
            return other.value
        return ir.Constant(_DOUBLE if self.is_float else self.value.type, other)

    def _op(self, float_op: str, int_op: str, other, swap: bool = False) -> "_Value":
        a, b = self.value, self._of(other)
        if swap:
            a, b = b, a
        emit = getattr(self.builder, float_op if self.is_float else int_op)
        return _Value(self.builder, emit(a, b))

    def __add__(self, o):
        return self._op("fadd", "add", o)

    def __radd__(self, o):
        return self._op("fadd", "add", o, True)

    def __sub__(self, o):
        return self._op("fsub", "sub", o)

    def __rsub__(self, o):
        return self._op("fsub", "sub", o, True)

    def __mul__(self, o):
        return self._op("fmul", "mul", o)

    def __rmul__(self, o):
        return self._op("fmul", "mul", o, True)

    def __truediv__(self, o):
        return self._op("fdiv", "sdiv", o)

    def __neg__(self):
        return _Value(self.builder, self.builder.fneg(self.value))

    def __and__(self, o):
        return self._op("and_", "and_", o)

    def __lshift__(self, o):
        return self._op("shl", "shl", o)

    def __rshift__(self, o):
        return self._op("ashr", "ashr", o)

    def _compare(self, op: str, o) -> "_Value":
        if self.is_float:   # Python's meaning: NaN compares false, except by !=
            emit = self.builder.fcmp_unordered if op == "!=" else self.builder.fcmp_ordered
        else:
            emit = self.builder.icmp_signed
        return _Value(self.builder, emit(op, self.value, self._of(o)))

    def __lt__(self, o):
        return self._compare("<", o)

    def __le__(self, o):
        return self._compare("<=", o)

    def __gt__(self, o):
        return self._compare(">", o)

    def __ge__(self, o):
        return self._compare(">=", o)

    def __eq__(self, o):   # noqa: D105 - an instruction, not Python equality
        return self._compare("==", o)

    def __ne__(self, o):
        return self._compare("!=", o)

    __hash__ = None


def _intrinsic_call(x: _Value, name: str) -> _Value:
    module = x.builder.module
    fn = module.declare_intrinsic(name, (), ir.FunctionType(_DOUBLE, [_DOUBLE]))
    return _Value(x.builder, x.builder.call(fn, [x.value]))


def _select(condition: _Value, a, b) -> _Value:
    """a if condition else b."""
    builder = condition.builder
    to = a if isinstance(a, _Value) else b
    a = to._of(a) if not isinstance(a, _Value) else a.value
    b = to._of(b) if not isinstance(b, _Value) else b.value
    return _Value(builder, builder.select(condition.value, a, b))


def _nonzero(x: _Value) -> _Value:
    return x != 0


def _rint(x: _Value) -> _Value:
    """round(x), halves to even, as Python's round of a float."""
    return _intrinsic_call(x, "llvm.rint.f64")


def _fabs(x: _Value) -> _Value:
    return _intrinsic_call(x, "llvm.fabs.f64")


def _to_int(x: _Value) -> _Value:
    return _Value(x.builder, x.builder.fptosi(x.value, _I64))


def _float_from_bits(bits: _Value) -> _Value:
    """The float64 whose bits are the int64 `bits` (a bitcast, no memory)."""
    return _Value(bits.builder, bits.builder.bitcast(bits.value, _DOUBLE))


def _horner(x: _Value, coefficients) -> _Value:
    """c0 + x (c1 + x (c2 + ...))."""
    total = None
    for c in reversed(coefficients):
        total = c if total is None else total * x + c
    return total


# -- the functions ---------------------------------------------------------------------
def _reduce(x: _Value):
    """(k, r): x = k pi/2 + r, |r| <= pi/4, k as a float (0 where it is not finite)."""
    k = _rint(x * TWO_OVER_PI)
    k = _select(_fabs(k) < 1.0e9, k, 0.0)
    r = (((x - k * P1) - k * P2) - k * P3) - k * P4
    return k, r


def _sin_cos(x: _Value, quarter_turns: int) -> _Value:
    """sin x (quarter_turns 0) or cos x = sin(x + pi/2) (1), for |x| < REDUCTION_LIMIT."""
    k, r = _reduce(x)
    z = r * r
    s = r + r * z * _horner(z, SIN)
    c = 1.0 + z * _horner(z, COS)
    q = _to_int(k) + quarter_turns if quarter_turns else _to_int(k)
    v = _select(_nonzero(q & 1), c, s)
    v = _select(_nonzero(q & 2), -v, v)
    if not quarter_turns:
        v = _select(x != 0.0, v, x)                  # sin(-0.0) is -0.0
    return _select(_fabs(x) <= 1.0e308, v, x - x)    # NaN for inf and NaN


def _sin(x: _Value) -> _Value:
    return _sin_cos(x, 0)


def _cos(x: _Value) -> _Value:
    return _sin_cos(x, 1)


def _exp(x: _Value) -> _Value:
    """exp x (inf above 709.78, 0 below -745.13, subnormal results rounded twice)."""
    y = _select(x < 710.0, x, 710.0)
    y = _select(y > -746.0, y, -746.0)
    k = _rint(y * LOG2E)
    r = (y - k * L1) - k * L2
    p = _horner(r, EXP)
    n = _to_int(k)
    half = n >> 1
    v = p * _float_from_bits((half + 1023) << 52) * _float_from_bits((n - half + 1023) << 52)
    return _select(x == x, v, x)


def _expm1_nonnegative(y: _Value) -> _Value:
    """exp(y) - 1 for 0 <= y <= 2 TANH_ONE, without cancellation: 2^k expm1(r) +
    (2^k - 1), both terms of one sign once k >= 1 (k = 0 is expm1(r) itself)."""
    k = _rint(y * LOG2E)
    r = (y - k * L1) - k * L2
    p = r * _horner(r, EXPM1)
    scale = _float_from_bits((_to_int(k) + 1023) << 52)
    return scale * p + (scale - 1.0)


def _tanh(x: _Value) -> _Value:
    """tanh x = e / (e + 2) with e = expm1(2|x|), and the sign of x."""
    a = _fabs(x)
    a = _select(a < TANH_ONE, a, TANH_ONE)
    e = _expm1_nonnegative(2.0 * a)
    t = e / (e + 2.0)
    t = _select(x >= 0.0, t, -t)
    t = _select(x != 0.0, t, x)           # tanh(-0.0) is -0.0
    return _select(x == x, t, x)


def _unary(math):
    """numba's function of one number computed by `math`'s instructions."""
    @intrinsic
    def function(typingctx, x):
        if not isinstance(x, (types.Float, types.Integer, types.Boolean)):
            return None

        def codegen(context, builder, signature, args):
            value = context.cast(builder, args[0], signature.args[0], types.float64)
            return math(_Value(builder, value)).value
        return types.float64(x), codegen
    function.__name__ = function.__qualname__ = "fast" + math.__name__
    return function


fast_sin = _unary(_sin)
fast_cos = _unary(_cos)
fast_exp = _unary(_exp)
fast_tanh = _unary(_tanh)


FAST = {"sin": fast_sin, "cos": fast_cos, "exp": fast_exp, "tanh": fast_tanh}
# ufuncs whose fast version is exact only for arguments below a limit
LIMITED = {"sin": REDUCTION_LIMIT, "cos": REDUCTION_LIMIT}


@intrinsic
def vector_width_512(typingctx):
    """Ask LLVM for 512-bit vectors in the calling function (`"prefer-vector-width"`).

    LLVM prefers 256-bit vectors on CPUs with AVX-512, because their 512-bit units
    lower the clock for everything around them; a fused elementwise loop is all of
    its function, and ran 15 % faster with them here. A hint only: a CPU without
    AVX-512 keeps its widest vectors, and an llvmlite whose attributes are not a
    set leaves the function as it was."""
    def codegen(context, builder, signature, args):
        try:
            set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        except TypeError:
            pass
        return context.get_dummy_value()
    return types.none(), codegen


@njit(cache=_CACHE)
def block_sum(values, m):
    """The sum of values[:m], in eight interleaved partial sums (as NumPy's pairwise
    summation starts): SIMD-friendly, and error bounded by m/8 roundings, not m."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    i = 0
    while i + 8 <= m:
        s0 += values[i]
        s1 += values[i + 1]
        s2 += values[i + 2]
        s3 += values[i + 3]
        s4 += values[i + 4]
        s5 += values[i + 5]
        s6 += values[i + 6]
        s7 += values[i + 7]
        i += 8
    total = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    while i < m:
        total += values[i]
        i += 1
    return total


HELPERS = {"block_sum": block_sum,     # called by fused loops as _nb_<name>
           "vector_width_512": vector_width_512}
