"""The vectorisable sin, cos, exp and tanh of fused loops, against NumPy's.

Fused elementwise loops call `numba_math.fast_*` instead of the C library, so
their accuracy is the gradient's accuracy: each is measured in units in the
last place (ulp) against NumPy over wide ranges, at the edges of its branches
and reductions, and on the special values (0, -0.0, inf, NaN, subnormals,
overflow and underflow). Needs numba (installed by the test extra).
"""
import math
import re

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from s2sgrad.backends import numba_fuse, numba_math  # noqa: E402

REFERENCE = {"sin": np.sin, "cos": np.cos, "exp": np.exp, "tanh": np.tanh}
MAX_ULP = {"sin": 2.0, "cos": 2.0, "exp": 2.0, "tanh": 3.0}


def _loop(name):
    fast = numba_math.FAST[name]

    @numba.njit
    def run(x, out):
        for i in range(x.size):
            out[i] = fast(x[i])
    return run


LOOPS = {}


def fast(name, x):
    if name not in LOOPS:
        LOOPS[name] = _loop(name)
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(x)
    LOOPS[name](x, out)
    return out


def ulp_error(got, want):
    """|got - want| in units of want's last place (subnormals: of the smallest normal
    number's spacing, i.e. absolute 5e-324 steps)."""
    spacing = np.spacing(np.maximum(np.abs(want), np.finfo(float).tiny))
    with np.errstate(invalid="ignore"):
        return np.abs(got - want) / spacing


def same_specials(got, want):
    """Equal, both NaN, or both infinite of one sign; -0.0 told from 0.0."""
    both_nan = np.isnan(got) & np.isnan(want)
    equal = (got == want) & (np.signbit(got) == np.signbit(want))
    return both_nan | equal


RANGES = {
    "sin": [1.0, 4.0, 100.0, 1e4, 9.9e5],
    "cos": [1.0, 4.0, 100.0, 1e4, 9.9e5],
    "exp": [1e-3, 1.0, 20.0, 700.0],
    "tanh": [0.1, 0.55, 2.0, 20.0, 400.0],
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_fast_math_is_within_two_ulp_over_wide_ranges(name):
    rng = np.random.default_rng(7)
    for scale in RANGES[name]:
        x = rng.uniform(-scale, scale, 200_000)
        err = ulp_error(fast(name, x), REFERENCE[name](x))
        assert err.max() <= MAX_ULP[name], (name, scale, float(err.max()),
                                            x[np.argmax(err)])


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_near_multiples_of_half_pi(name):
    """Where the reduction cancels most: the doubles nearest k pi/2, and a few ulp around."""
    k = np.arange(-600_000, 600_000, 997, dtype=np.float64)
    centres = k * (math.pi / 2)
    centres = centres[np.abs(centres) < numba_math.REDUCTION_LIMIT]
    x = (centres[:, None] + np.arange(-3, 4) * np.spacing(centres)[:, None]).ravel()
    got, want = fast(name, x), REFERENCE[name](x)
    # near a zero of the function the result is tiny: measure against its own ulp,
    # but never ask for more than 1e-300 absolute
    err = np.abs(got - want) / np.maximum(np.spacing(np.abs(want)), 1e-300)
    assert err.max() <= MAX_ULP[name], (float(err.max()), x[np.argmax(err)])


def test_exp_overflow_underflow_and_subnormals():
    x = np.array([709.78, 709.7827, 709.79, 1000.0, -708.3, -708.5, -720.0, -740.0,
                  -745.13, -745.14, -746.0, -1e4])
    got = fast("exp", x)
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp(x)
    normal = want >= np.finfo(float).tiny
    assert np.all(same_specials(got[~np.isfinite(want)], want[~np.isfinite(want)]))
    assert ulp_error(got[normal & np.isfinite(want)], want[normal & np.isfinite(want)]).max() \
        <= MAX_ULP["exp"]
    # subnormal results: two roundings at most one step of 5e-324 apart
    sub = ~normal
    assert np.all(np.abs(got[sub] - want[sub]) <= 5e-324)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_special_values_as_numpy_gives_them(name):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310, -1e-310, 1e-300, -1e-20,
                  5e-324])
    got = fast(name, x)
    with np.errstate(all="ignore"):
        want = REFERENCE[name](x)
    ok = same_specials(got, want) | (ulp_error(got, want) <= MAX_ULP[name]) & \
        (np.signbit(got) == np.signbit(want))
    assert np.all(ok), (x[~ok], got[~ok], want[~ok])


def test_tanh_where_expm1_changes_its_reduction_and_where_it_rounds_to_one():
    """k = 0 -> 1 at 2|x| = ln2 / 2, k = 1 -> 2 at 3 ln2 / 2, and the cap at 20."""
    edges = [math.log(2) / 4, 3 * math.log(2) / 4, 19.06, numba_math.TANH_ONE]
    x = np.concatenate([e + np.arange(-50, 51) * np.spacing(e) for e in edges])
    x = np.concatenate([x, -x])
    assert ulp_error(fast("tanh", x), np.tanh(x)).max() <= MAX_ULP["tanh"]


def test_constants_are_what_they_claim():
    # pi/2 in four parts of at most 30 bits (every k * part exact for |k| < 2^23)
    parts = (numba_math.P1, numba_math.P2, numba_math.P3)
    for p in parts:
        mantissa = math.frexp(p)[0] * 2 ** 30
        assert mantissa == int(mantissa)
    assert abs(sum(parts) + numba_math.P4 - math.pi / 2) < 1e-16
    assert numba_math.REDUCTION_LIMIT * numba_math.TWO_OVER_PI < 2 ** 23
    # tanh is 1.0 in float64 from where the cap is
    assert np.tanh(numba_math.TANH_ONE) == 1.0
    assert numba_math.L1 + numba_math.L2 == pytest.approx(math.log(2), rel=1e-16)
    # the fusion pass names the same functions and the same limit
    assert set(numba_fuse.FAST) == set(numba_math.FAST)
    assert numba_fuse.LIMITED == {n: numba_math.REDUCTION_LIMIT
                                  for n in ("sin", "cos")}


def test_a_fused_loop_vectorises():
    """The point of these functions: LLVM turns a loop over them into SIMD code."""
    run = _loop("sin")
    x = np.ones(8)
    run(x, np.empty(8))
    asm = "\n".join(run.inspect_asm().values())
    # packed double arithmetic on 256- or 512-bit registers (SSE2's 128-bit xmm
    # registers are packed too, but every x86-64 has them: ask for AVX or better
    # only where the machine has it)
    wide = re.findall(r"v(?:mul|add|sub|fmadd\w*|fnmadd\w*)pd\s+%[yz]mm", asm)
    packed = re.findall(r"(?:mul|add|sub)pd\s+%xmm", asm)
    assert wide or (not _cpu_has("avx") and packed), asm[:2000]


def _cpu_has(flag: str) -> bool:
    """Does /proc/cpuinfo list this flag (False where there is no /proc/cpuinfo)?"""
    try:
        with open("/proc/cpuinfo") as f:
            return f" {flag}" in f.read()
    except OSError:
        return False


def test_the_512_bit_hint_gives_512_bit_vectors_where_the_cpu_has_them():
    hint = numba_math.vector_width_512
    sin = numba_math.fast_sin

    @numba.njit
    def run(x, out):
        hint()
        for i in range(x.size):
            out[i] = sin(x[i])
    x = np.linspace(-3.0, 3.0, 37)
    out = np.empty_like(x)
    run(x, out)
    np.testing.assert_array_max_ulp(out, np.sin(x), maxulp=2)   # a hint, same values
    asm = "\n".join(run.inspect_asm().values())
    if _cpu_has("avx512f"):
        assert re.search(r"v\w+pd\s+[^\n]*%zmm", asm), asm[:2000]
