"""Fusing elementwise statements into one loop (numba_fuse), and jit=True through it.

`fuse_elementwise` rewrites the numba backend's code: a run of top-level
statements `name = <elementwise expression>` over float64 arrays of one shape
becomes one `for` loop over flat views, behind a run-time test that the arrays
share one shape (otherwise the statements run as they were). Its claims are
checked here by running code, not by reading it:

- unit tests fuse small functions written in the numba rewrite's style and run
  the original and the fused function on the same arguments (1-d, 2-d, empty,
  broadcasting), with the rewrite's `_nb_*` helpers defined in plain Python.
  The loop's flat views hand out Python floats, as numba's elements are: an
  operation the pass leaves as a Python operator keeps Python's meaning
  (`1.0 / 0.0` raises, `(-1.0) ** 0.5` is complex), so one that should have had
  NumPy's meaning and did not shows up as an exception or a complex number.
- structural tests check only what does not depend on how the loop body is
  spelled (a `for` loop exists, a name is or is not stored, a statement kept
  its place): the ufunc calls inside the loop may change (fast math).
- a hypothesis test fuses random straight-line programs and compares (in-place
  updates, copies, sums, rebinding, calls that end a run, broadcasting, mixed ranks).
- end-to-end tests compare s2sgrad.grad / value_and_grad / vjp with jit=True
  (numba forced at every size) with the NumPy backend and central differences,
  at ordinary values and where the math matters (0, large arguments, overflow,
  NaN). The backend checks the first call of each compiled variant itself; the
  calls after it are not checked, so every variant is called again on other data.
"""
import ast
import os
import re
import textwrap
import warnings

import numpy as np
import pytest
from conftest import numeric_grad, numeric_vjp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import s2sgrad
from s2sgrad.backends import JitWarning, jit_plan, jit_source, numba_backend
from s2sgrad.backends.numba_fuse import MIN_STATEMENTS, fuse_elementwise

A1 = ("a", 1, "float64")
A2 = ("a", 2, "float64")
NUM = ("s", "float64")
INT = ("s", "int64")

# -- the harness: the rewrite's helpers in plain Python ----------------------------------
_UFUNCS = ("sin", "cos", "tan", "exp", "log", "tanh", "sqrt", "abs", "square", "arctan",
           "log1p", "expm1", "sinh", "cosh")


def _nb_op_iadd(a, b):
    a += b
    return a


def _nb_op_isub(a, b):
    a -= b
    return a


def _nb_op_imul(a, b):
    a *= b
    return a


HELPERS = {
    "_nb_op_add": lambda a, b: a + b,
    "_nb_op_sub": lambda a, b: a - b,
    "_nb_op_mul": lambda a, b: a * b,
    "_nb_op_div": lambda a, b: a / b,
    "_nb_op_pow": lambda a, b: a ** b,
    "_nb_op_neg": lambda a: -a,
    "_nb_op_iadd": _nb_op_iadd,
    "_nb_op_isub": _nb_op_isub,
    "_nb_op_imul": _nb_op_imul,
    "_nb_np_sum": np.sum,
    "_nb_unknown": lambda a: a * 3.0,       # a call the pass knows nothing about
    "_nb_block_sum": lambda values, m: np.sum(values[:m]),   # a fused loop's partial sum
    "_nb_vector_width_512": lambda: None,   # a code-generation hint: nothing to run
    **{"_nb_np_" + name: getattr(np, name) for name in _UFUNCS},
}


class _Elements(np.ndarray):
    """A flat view whose elements are Python floats, as numba's scalars are."""

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return float(item) if isinstance(item, np.floating) else item


class _LoopNumPy:
    """numpy for the fused code, except that np.ravel's flat views give Python floats."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def ravel(a):
        return np.ravel(a).view(_Elements)


def _namespace(source, numpy_module):
    ns = {"np": numpy_module, **HELPERS}
    # fast-math helpers the loop may call: NumPy's ufunc of the same name
    for name in set(re.findall(r"\b_nb_fast_(\w+)", source)):
        ns["_nb_fast_" + name] = getattr(np, name)
    return ns


def _function(source, numpy_module=np, filename="<original>"):
    ns = _namespace(source, numpy_module)
    exec(compile(source, filename, "exec"), ns)
    return ns["f"]


def _fuse(source, kinds):
    """(the fused FunctionDef, its source) of the function in source."""
    fn = ast.parse(textwrap.dedent(source)).body[0]
    fused = ast.fix_missing_locations(fuse_elementwise(fn, dict(kinds)))
    return fused, ast.unparse(fused)


def _copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _call(fn, args):
    """(result, or the exception raised; the arguments after the call), on copies."""
    args = _copies(args)
    with np.errstate(all="ignore"):
        try:
            return fn(*args), args
        except Exception as exc:  # noqa: BLE001 - compared by the caller
            return exc, args


def _as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def _assert_same_values(got, want, rtol, what="", sum_atol=0.0):
    """Equal up to rounding (NaN where NaN); numbers (sums) within sum_atol * |value|."""
    got, want = _as_tuple(got), _as_tuple(want)
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        assert np.shape(g) == np.shape(w), (what, k, np.shape(g), np.shape(w))
        assert not np.iscomplexobj(g), (what, k, g)
        atol = sum_atol * max(1.0, abs(float(w))) if np.ndim(w) == 0 and \
            np.isfinite(w) else 0.0
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=f"{what} output {k}")


def _check_fused(source, kinds, arg_sets, rtol=1e-13):
    """Fuse, run original and fused on every argument set, compare; the fused tree."""
    source = textwrap.dedent(source)
    fused_tree, fused_source = _fuse(source, kinds)
    original = _function(source)
    fused = _function(fused_source, _LoopNumPy(), "<fused>")
    for args in arg_sets:
        want, want_args = _call(original, args)
        got, got_args = _call(fused, args)
        assert not isinstance(want, Exception), f"the original raised {want!r}"
        assert not isinstance(got, Exception), f"{got!r} from\n{fused_source}"
        what = f"shapes {[np.shape(a) for a in args]}\n{fused_source}\n"
        # a sum may be added up in another order (block by block): rounding, n terms
        size = max([np.size(a) for a in args if isinstance(a, np.ndarray)] + [1])
        _assert_same_values(got, want, rtol, what, sum_atol=rtol * size)
        _assert_same_values(tuple(got_args), tuple(want_args), rtol, "arguments after " + what)
        # a result that is another name for an argument or for another result stays so
        ids_want = [id(w) for w in _as_tuple(want) + tuple(want_args)]
        ids_got = [id(g) for g in _as_tuple(got) + tuple(got_args)]
        assert [ids_want.count(i) for i in ids_want] == [ids_got.count(i) for i in ids_got], \
            "aliasing differs\n" + fused_source
    return fused_tree


def _kind(value):
    if isinstance(value, np.ndarray):
        return ("a", value.ndim, value.dtype.name)
    if isinstance(value, (float, np.floating)):
        return NUM
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return INT
    return None


def _kinds_of(source, args):
    """What each name holds after one NumPy run (how the numba backend learns kinds)."""
    tree = ast.parse(textwrap.dedent(source))
    tree.body[0].body[-1] = ast.Return(value=ast.Call(
        func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[]))
    ast.fix_missing_locations(tree)
    ns = _namespace("", np)
    exec(compile(tree, "<kinds>", "exec"), ns)
    with np.errstate(all="ignore"):
        names = ns["f"](*_copies(args))
    return {n: k for n, k in ((n, _kind(v)) for n, v in names.items()) if k is not None}


# -- reading the fused tree without depending on the loop body's spelling -----------------
def _loops(node):
    """The number of loop nests in node (a loop over blocks of a loop counts once)."""
    return sum(1 if isinstance(child, ast.For) else _loops(child)
               for child in ast.iter_child_nodes(node))


def _has_guard(fn):
    return any(isinstance(n, ast.If) for n in ast.walk(fn))


def _stored(fn):
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _position(fn, statement):
    """The index of the top-level statement `statement` (source text) in fn, or None."""
    text = ast.unparse(ast.parse(textwrap.dedent(statement)))
    return next((i for i, s in enumerate(fn.body) if ast.unparse(s) == text), None)


def _loop_positions(fn, skip=()):
    return [i for i, s in enumerate(fn.body) if i not in skip and
            any(isinstance(n, ast.For) for n in ast.walk(s))]


def _rng(seed=0):
    return np.random.default_rng(seed)


# == 1. fused and original compute the same ================================================
CHAIN = """
def f(x, g, c):
    sin_x = _nb_np_sin(x)
    e = np.exp(-x ** 2)
    t = _nb_op_add(sin_x * e, g)
    h = t * c + np.tanh(x) / (1.0 + x * x)
    g2 = _nb_op_mul(t, 2.0)
    g2 = _nb_op_iadd(g2, h * 2.0)
    r = np.sum(sin_x * g2 + h)
    return (r, g2, t)
"""


@pytest.mark.parametrize("x_shape, g_shape", [
    ((7,), (7,)), ((3, 4), (3, 4)), ((2, 3, 2), (2, 3, 2)), ((0,), (0,)), ((0, 3), (0, 3)),
    ((1,), (1,)), ((4100,), (4100,)), ((70, 65), (70, 65))])
def test_chain_is_one_loop_with_the_same_results(x_shape, g_shape):
    rng = _rng(1)
    args = (rng.standard_normal(x_shape), rng.standard_normal(g_shape), 0.7)
    fused = _check_fused(CHAIN, _kinds_of(CHAIN, args), [args, (args[0] * 3.0, args[1], -2)])
    assert _loops(fused) == 1
    # r = np.sum(<elementwise>): its terms computed in the loop, never as an expression
    # over whole arrays outside the run-time test's fallback
    assert _position(fused, "r = np.sum(sin_x * g2 + h)") is None
    assert "r" in _stored(fused)


@pytest.mark.parametrize("x_shape, g_shape", [((3, 4), (1, 4)), ((3, 4), (3, 1)),
                                              ((1, 4), (3, 4)), ((2, 0), (1, 0))])
def test_broadcasting_takes_the_original_statements(x_shape, g_shape):
    """Same rank, other shapes: the run-time test fails and the statements run as they
    were (had the loop run, the smaller array's flat view would be read past its end)."""
    rng = _rng(2)
    args = (rng.standard_normal(x_shape), rng.standard_normal(g_shape), 0.7)
    kinds = _kinds_of(CHAIN, args)
    assert kinds["x"] == kinds["g"] == A2
    fused = _check_fused(CHAIN, kinds, [args])
    assert _loops(fused) == 1 and _has_guard(fused)


def test_mixed_ranks_are_not_fused_together():
    rng = _rng(3)
    args = (rng.standard_normal((3, 4)), rng.standard_normal(4), 0.7)
    kinds = _kinds_of(CHAIN, args)
    fused = _check_fused(CHAIN, kinds, [args, (args[0][:1], args[1], 0.1)])
    # only the statements over x alone (sin_x, e) can share a loop: no array of rank 1
    for loop in (n for n in ast.walk(fused) if isinstance(n, ast.For)):
        assert "g" not in {n.id for n in ast.walk(loop) if isinstance(n, ast.Name)}


SPECIAL = np.array([0.0, -0.0, -1.5, 2.0, 1e3, -1e3, 999999.0, 1e6, -1e6, 1e7, 2.0 ** 40,
                    800.0, -800.0, 30.0, -30.0, np.nan, np.inf, -np.inf])


def test_special_values_give_the_same_results():
    """Zero, large arguments of sin (a fast version may stop being exact: then the
    statements run unfused), overflow of exp, NaN and infinities."""
    g = np.linspace(-1.0, 1.0, SPECIAL.size)
    args = (SPECIAL, g, 0.5)
    fused = _check_fused(CHAIN, _kinds_of(CHAIN, args),
                         [args, (SPECIAL[:7], g[:7], 0.5), (SPECIAL[7:], g[7:], 0.5)])
    assert _loops(fused) == 1


def test_temporaries_are_never_stored():
    source = """
    def f(x, k):
        t = x * k + 1.0
        u = t * t - x / k
        return u
    """
    fused = _check_fused(source, {"x": A1, "k": NUM, "t": A1, "u": A1},
                         [(np.linspace(-2, 2, 9), 1.5), (np.zeros(0), 2.0), (np.ones(1), 3)])
    assert _loops(fused) == 1
    assert "t" not in _stored(fused)         # no array t: one element at a time
    assert "u" in _stored(fused)             # read after the run: written once


def test_rebinding_an_argument_in_the_run():
    """x read by the run, then given a new value in it (`x_bar = x_bar + ...`)."""
    source = """
    def f(x, y):
        t = x * y
        x = x + t
        x = x * 2.0 - y
        u = x * t
        return (x, u)
    """
    rng = _rng(4)
    fused = _check_fused(source, {n: A1 for n in "xytu"},
                         [(rng.standard_normal(6), rng.standard_normal(6)),
                          (rng.standard_normal(3), rng.standard_normal(3))])
    assert _loops(fused) == 1


# == 2. what is fused, what is not, and what keeps its place ==============================
@pytest.mark.parametrize("count", [MIN_STATEMENTS - 1, MIN_STATEMENTS, MIN_STATEMENTS + 2])
def test_a_run_is_fused_from_min_statements(count):
    lines = [f"    v{k} = {'x' if k == 0 else f'v{k - 1}'} * y + {k}.5" for k in range(count)]
    source = "def f(x, y):\n" + "\n".join(lines) + f"\n    return v{count - 1}\n"
    kinds = {"x": A1, "y": A1, **{f"v{k}": A1 for k in range(count)}}
    rng = _rng(5)
    fused = _check_fused(source, kinds, [(rng.standard_normal(5), rng.standard_normal(5))])
    if count >= MIN_STATEMENTS:
        assert _loops(fused) == 1
    else:
        assert ast.dump(fused) == ast.dump(ast.parse(source).body[0])


@pytest.mark.parametrize("statement", ["t = np.sin(x) * y + x", "t = _nb_op_mul(x, y)",
                                       "t = np.sum(x * y + np.exp(x))"])
def test_a_single_statement_is_left_as_it_is(statement):
    source = f"def f(x, y):\n    {statement}\n    return t\n"
    kinds = {"x": A1, "y": A1, "t": NUM if "sum" in statement else A1}
    fused, _ = _fuse(source, kinds)
    assert ast.dump(fused) == ast.dump(ast.parse(source).body[0])


PAIR = """
def f(x, y):
    t = x * y
    u = t + y
    return u
"""


@pytest.mark.parametrize("kinds", [
    {"x": A1, "t": A1, "u": A1},                                          # y unknown
    {"x": A1, "y": ("a", 1, "int64"), "t": A1, "u": A1},
    {"x": A1, "y": ("a", 1, "float32"), "t": A1, "u": A1},
    {"x": ("a", 1, "float32"), "y": ("a", 1, "float32"), "t": ("a", 1, "float32"),
     "u": ("a", 1, "float32")},
    {"x": A2, "y": A1, "t": A2, "u": A2},                                 # mixed ranks
    {"x": ("a", 0, "float64"), "y": ("a", 0, "float64"), "t": ("a", 0, "float64"),
     "u": ("a", 0, "float64")},                                           # 0-d arrays
    {"x": A1, "y": ("s", "complex128"), "t": A1, "u": A1},
], ids=["no kind", "int64 array", "float32 array", "float32 arrays", "mixed ranks",
        "0-d arrays", "complex number"])
def test_without_usable_kinds_nothing_is_fused(kinds):
    control, _ = _fuse(PAIR, {"x": A1, "y": A1, "t": A1, "u": A1})
    assert _loops(control) == 1
    fused, _ = _fuse(PAIR, kinds)
    assert ast.dump(fused) == ast.dump(ast.parse(PAIR).body[0])


def test_int64_numbers_join_a_run():
    source = """
    def f(x, k):
        t = x * k
        u = t + k / 2
        return u
    """
    fused = _check_fused(source, {"x": A1, "k": INT, "t": A1, "u": A1},
                         [(np.linspace(-1, 1, 5), 3), (np.ones(2), -7)])
    assert _loops(fused) == 1


BARRIERS = {
    "write into an array": "t[0] = 1.0",
    "unknown call": "u = _nb_unknown(u)",
    "a loop": "for k in range(2):\n        u = u * 0.5",
    "a non-elementwise numpy call": "u = np.cumsum(u) * u",
}


@pytest.mark.parametrize("barrier", list(BARRIERS.values()), ids=list(BARRIERS))
def test_a_barrier_ends_the_run_and_keeps_its_place(barrier):
    source = f"""
def f(x, y):
    t = x * y
    u = t + x
    {barrier}
    v = u * t
    w = v - y
    return (t, w)
"""
    rng = _rng(6)
    fused = _check_fused(source, {n: A1 for n in "xytuvw"},
                         [(rng.standard_normal(6), rng.standard_normal(6)),
                          (rng.standard_normal(1), rng.standard_normal(1))])
    at = _position(fused, barrier)
    assert at is not None, "the barrier is no longer a statement of the function"
    loops = _loop_positions(fused, skip=(at,))
    assert [p < at for p in loops] == [True, False], (loops, at)


def test_a_reader_of_the_loop_moves_after_it_and_a_pure_statement_does_not_end_the_run():
    source = """
    def f(x, k):
        t = x * x
        r = np.sum(t)
        s = k * 3.0
        u = t * s + x
        w = u - x
        return (r, w)
    """
    fused = _check_fused(source, {"x": A1, "k": NUM, "t": A1, "r": NUM, "s": NUM, "u": A1,
                                  "w": A1},
                         [(np.linspace(-1, 2, 7), 0.5), (np.zeros(0), 1.0)])
    assert _loops(fused) == 1
    loop = _loop_positions(fused)[0]
    assert _position(fused, "r = np.sum(t)") > loop          # reads t: after the loop
    assert _position(fused, "s = k * 3.0") < loop            # read by the loop: before it
    assert "u" not in _stored(fused)                          # u was computed in the loop


@pytest.mark.parametrize("source", [
    """
    def f(x, c, k):
        t = x * c
        c = k * 2.0
        u = t + x
        return (u, c)
    """,
    """
    def f(x, c, k):
        t = x * c
        u = t + x
        c = k * 2.0
        v = u * c
        w = v + t
        return (w, c)
    """,
    """
    def f(x, c, k):
        t = x * c
        u = t + x
        s = np.sum(u)
        c = s * k
        v = u * c
        return (v, c)
    """,
], ids=["writes what the loop read", "then read by the run", "after a reduction"])
def test_a_write_of_a_name_the_loop_reads_is_not_hoisted(source):
    """The loop reads c before the statement gives c a new value: the statement stays
    after the loop (hoisted, the loop would read the new value)."""
    kinds = {"x": A1, "c": NUM, "k": NUM, "t": A1, "u": A1, "v": A1, "w": A1, "s": NUM}
    fused = _check_fused(source, kinds, [(np.linspace(-1, 2, 5), 0.5, 4.0),
                                         (np.linspace(0, 1, 3), -1.5, 0.25)])
    assert _loops(fused) >= 1
    assert _position(fused, "c = k * 2.0" if "k * 2.0" in source else "c = s * k") > \
        _loop_positions(fused)[0]


@pytest.mark.parametrize("update", ["t = x + y", "t = _nb_op_iadd(t, x)"])
def test_a_name_a_moved_statement_read_keeps_its_value_for_it(update):
    """r = np.sum(t) runs after the loop: t may not get its next value in the loop."""
    source = f"""
def f(x, y):
    t = x * y
    s = t + x
    r = np.sum(t)
    {update}
    u = t * s
    return (r, u)
"""
    rng = _rng(10)
    fused = _check_fused(source, {"x": A1, "y": A1, "t": A1, "s": A1, "u": A1, "r": NUM},
                         [(rng.standard_normal(5), rng.standard_normal(5))])
    assert _loops(fused) >= 1


@pytest.mark.parametrize("moved", ["q = np.sum(t) + r", "r = np.sum(t)\n    q = r * 2.0"],
                         ids=["reads the old r", "gives r a value first"])
def test_a_sum_keeps_its_order_among_the_statements_moved_after_the_loop(moved):
    """r = np.sum(<elementwise>) may be added up inside the loop; a statement moved after
    the loop that reads r before it, or gives r a value before it, still sees its r."""
    source = f"""
def f(x, y, r):
    t = x * y
    u = t + x
    {moved}
    r = np.sum(u * x + y)
    return (q, r)
"""
    rng = _rng(11)
    fused = _check_fused(source, {"x": A1, "y": A1, "r": NUM, "t": A1, "u": A1, "q": NUM},
                         [(rng.standard_normal(6), rng.standard_normal(6), 0.25),
                          (rng.standard_normal(3000), rng.standard_normal(3000), -1.0)])
    assert _loops(fused) == 1


def test_in_place_update_of_an_argument_is_not_fused():
    source = """
    def f(x, y):
        t = x * y
        u = t + y
        x = _nb_op_iadd(x, u)
        v = x * y
        w = v + u
        return (x, w)
    """
    rng = _rng(7)
    fused = _check_fused(source, {n: A1 for n in "xytuvw"},
                         [(rng.standard_normal(5), rng.standard_normal(5))])
    assert _position(fused, "x = _nb_op_iadd(x, u)") is not None
    assert _loops(fused) == 2


def test_in_place_update_of_an_array_the_run_created_joins_it():
    source = """
    def f(x, y):
        t = x * y
        t = _nb_op_iadd(t, x)
        t = _nb_op_imul(t, y)
        u = t * 2.0
        return (t, u)
    """
    rng = _rng(8)
    fused = _check_fused(source, {n: A1 for n in "xytu"},
                         [(rng.standard_normal(5), rng.standard_normal(5)),
                          (rng.standard_normal((2, 2))[0], rng.standard_normal(2))])
    assert _loops(fused) == 1
    assert _position(fused, "t = _nb_op_iadd(t, x)") is None


@pytest.mark.parametrize("copy", ["c = a", "c = a\n    d = c"])
def test_a_copy_keeps_the_in_place_update_out_of_the_loop(copy):
    """`c = a` makes c another name for a's array: the in-place update must change
    both, so it runs on the array itself, not on a new one written by the loop."""
    source = f"""
def f(x, y):
    a = x * y
    b = a + x
    {copy}
    a = _nb_op_iadd(a, b)
    return (a, c)
"""
    rng = _rng(9)
    fused = _check_fused(source, {n: A1 for n in "xyabcd"},
                         [(rng.standard_normal(4), rng.standard_normal(4))])
    assert _position(fused, "a = _nb_op_iadd(a, b)") is not None


def test_division_and_powers_of_elements_have_numpys_meaning():
    """x / 0 is inf or nan, (-x) ** 0.5 and (-x) ** 0.3 are nan, 0 ** -0.5 is inf: no
    ZeroDivisionError and no complex number (Python's meaning for these elements)."""
    source = """
    def f(x, y):
        q = x / y
        p = q - x ** 0.5 + x ** y + _nb_op_div(y, x) + x ** 2
        return (q, p)
    """
    x = np.array([1.0, 0.0, -2.0, 0.0, -0.5, 3.0])
    y = np.array([0.0, 0.0, 0.3, -0.5, -1.0, 2.0])
    fused = _check_fused(source, {n: A1 for n in "xyqp"}, [(x, y), (y, x)])
    assert _loops(fused) == 1
    with np.errstate(all="ignore"):
        q, p = _function(ast.unparse(fused), _LoopNumPy())(x, y)
    assert np.isinf(q[0]) and np.isnan(q[1]) and np.isnan(p[2])


def test_arithmetic_on_numbers_alone_keeps_pythons_meaning():
    source = """
    def f(x, c, d):
        t = x * 2.0
        u = t + c / d
        return u
    """
    fused, fused_source = _fuse(source, {"x": A1, "c": NUM, "d": NUM, "t": A1, "u": A1})
    assert _loops(fused) == 1
    _check_fused(source, {"x": A1, "c": NUM, "d": NUM, "t": A1, "u": A1},
                 [(np.ones(3), 1.0, 4.0)])
    fn = _function(fused_source, _LoopNumPy(), "<fused>")
    with pytest.raises(ZeroDivisionError):
        fn(np.ones(3), 1.0, 0.0)
    with pytest.raises(ZeroDivisionError):
        _function(textwrap.dedent(source))(np.ones(3), 1.0, 0.0)


@pytest.mark.parametrize("source", [
    """
    def f(x, g):
        g = g + np.sin(x)
        g = g * 2.0
        return g
    """,
    """
    def f(x, g):
        r = np.sum(g)
        t = np.sin(x) * r
        r = np.sum(t * x)
        return (t, r)
    """], ids=["array read, then redefined", "number read, then summed into"])
def test_too_large_arguments_rerun_the_statements_on_the_old_values(source):
    """An argument of sin or cos too large for the fast version: the statements run again
    unfused, from the values the names had before the run (the loop's results must not
    stand before that is decided: g, and the number r, are read, then redefined)."""
    kinds = {"x": A1, "g": A1, "t": A1, "r": NUM}
    fused = _check_fused(source, kinds, [(np.array([0.5, 0.25]), np.array([1.0, 2.0])),
                                         (np.array([0.5, 1e6]), np.array([1.0, 2.0])),
                                         (np.array([1e7, -3e6]), np.array([1.0, 2.0]))])
    assert _loops(fused) == 1


@pytest.mark.parametrize("later", ["rows = t.shape[0]", "rows = np.sum(t.T)"])
def test_an_array_read_later_only_through_an_attribute_is_written(later):
    """`t.shape` reads t: the loop must write t (a regression: the attribute's value was
    not counted as a read, t was never written and the function raised)."""
    source = f"""
def f(x, y):
    t = x * y
    u = t + x
    {later}
    return (u, rows)
"""
    kinds = {"x": A1, "y": A1, "t": A1, "u": A1, "rows": INT if "shape" in later else NUM}
    fused = _check_fused(source, kinds, [(np.ones(3), np.ones(3)), (np.ones(0), np.ones(0))])
    assert _loops(fused) == 1


def test_a_run_nothing_reads_after_it():
    """A run whose results nothing reads (a regression: with a tested argument of sin,
    `if not unfused:` was written with an empty body, and fusing raised SyntaxError)."""
    source = """
    def f(x):
        t = np.sin(x)
        u = t * 2.0
        return x
    """
    _check_fused(source, {"x": A1, "t": A1, "u": A1}, [(np.array([0.5, 1e6]),)])


# == 3. random programs ====================================================================
UNARY = ["np.sin({})", "np.cos({})", "_nb_np_sin({})", "np.exp({})", "np.tanh({})",
         "np.log(np.abs({}) + 1.0)", "({}) ** 2", "-({})", "_nb_op_neg({})"]
BINARY = ["({} + {})", "({} - {})", "({} * {})", "({} / {})", "_nb_op_add({}, {})",
          "_nb_op_sub({}, {})", "_nb_op_mul({}, {})", "_nb_op_div({}, {})"]
CONSTANTS = ["0.5", "-1.5", "2.0", "3", "0.0"]
IN_PLACE = ["_nb_op_iadd", "_nb_op_isub", "_nb_op_imul"]


@st.composite
def _expressions(draw, names, depth=0):
    """(source, names read)."""
    if depth >= 3 or draw(st.integers(0, 2)) == 0:
        if names and draw(st.integers(0, 3)) > 0:
            name = draw(st.sampled_from(names))
            return name, {name}
        return draw(st.sampled_from(CONSTANTS)), set()
    if draw(st.booleans()):
        inner, reads = draw(_expressions(names, depth + 1))
        return draw(st.sampled_from(UNARY)).format(inner), reads
    left, left_reads = draw(_expressions(names, depth + 1))
    right, right_reads = draw(_expressions(names, depth + 1))
    return draw(st.sampled_from(BINARY)).format(left, right), left_reads | right_reads


@st.composite
def _programs(draw):
    """(source, number of array arguments, number of float arguments, deps): deps maps
    each name to the array arguments its value has the shape of (none: a number)."""
    n_arrays, n_numbers = draw(st.integers(1, 3)), draw(st.integers(0, 2))
    deps = {f"x{k}": {f"x{k}"} for k in range(n_arrays)}
    deps.update({f"c{k}": set() for k in range(n_numbers)})
    rebinds = draw(st.booleans())
    lines, defined = [], []

    def expression(names=None):
        text, reads = draw(_expressions(sorted(deps) if names is None else names))
        return text, set().union(*(deps[n] for n in reads))

    for k in range(draw(st.integers(2, 8))):
        kind = draw(st.sampled_from(["assign"] * 5 + ["sum", "in place"] * 2 +
                                    ["copy", "barrier", "number"] +
                                    (["rebind"] * 2 if rebinds else [])))
        numbers = [n for n in deps if not deps[n]]
        if kind == "number" and numbers:
            # a number given a new value (a statement that moves, maybe past the loop)
            target = draw(st.sampled_from(numbers))
            lines.append(f"{target} = {target} * {expression(numbers)[0]}")
            continue
        arrays = [n for n in defined if deps[n]]
        if kind in ("in place", "rebind") and arrays:
            target = draw(st.sampled_from(arrays + (list(deps)[:n_arrays]
                                                    if kind == "rebind" else [])))
            text, shape_of = expression()
            if kind == "in place":
                lines.append(f"{target} = {draw(st.sampled_from(IN_PLACE))}({target}, {text})")
                continue
            if shape_of <= deps[target]:    # a name keeps its rank (kinds are per name)
                lines.append(f"{target} = {target} + {text}")
                continue
        target = f"r{k}" if kind == "sum" else f"v{k}"
        if kind == "copy":
            source = draw(st.sampled_from(sorted(deps)))
            lines.append(f"{target} = {source}")
            shape_of = deps[source]
        elif kind == "barrier":
            source = draw(st.sampled_from(sorted(deps)))
            lines.append(f"{target} = _nb_unknown({source})")
            shape_of = deps[source]
        else:
            text, shape_of = expression()
            lines.append(f"{target} = np.sum({text})" if kind == "sum" else f"{target} = {text}")
            shape_of = set() if kind == "sum" else shape_of
        deps[target] = shape_of
        defined.append(target)
    returned = draw(st.lists(st.sampled_from(defined or sorted(deps)), min_size=1, max_size=3,
                             unique=True))
    params = [f"x{k}" for k in range(n_arrays)] + [f"c{k}" for k in range(n_numbers)]
    body = "".join(f"    {line}\n" for line in lines)
    source = f"def f({', '.join(params)}):\n{body}    return ({', '.join(returned)},)\n"
    return source, n_arrays, n_numbers, deps


SHAPE_SETS = {"1-d": [(6,)] * 3, "2-d": [(2, 3)] * 3, "broadcasting": [(2, 3), (1, 3), (2, 1)],
              "mixed ranks": [(2, 3), (3,), (2, 3)]}
RAISES = (ArithmeticError, ValueError)   # 1.0 / 0.0, a ** 2 overflowing; an
#                                            in-place update that would broadcast


@settings(max_examples=150, deadline=None,
          derandomize=not os.environ.get("S2SGRAD_PROPERTY_RANDOM"),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=_programs(), seed=st.integers(0, 2 ** 16),
       special=st.sampled_from([None, 0.0, 1e6, -3e7, np.nan, 800.0]))
def test_random_programs_compute_the_same_fused(program, seed, special):
    source, n_arrays, n_numbers, deps = program
    rng = _rng(seed)
    original = _function(source)
    for shapes in SHAPE_SETS.values():
        arrays = [rng.standard_normal(s) * 1.5 for s in shapes[:n_arrays]]
        if special is not None:
            arrays[0].flat[0] = special
        args = arrays + [float(v) for v in rng.standard_normal(n_numbers)]
        ranks = {f"x{k}": a.ndim for k, a in enumerate(arrays)}
        kinds = {n: ("a", max(ranks[a] for a in d), "float64") if d else NUM
                 for n, d in deps.items()}
        fused_tree, fused_source = _fuse(source, kinds)
        fused = _function(fused_source, _LoopNumPy(), "<fused>")
        want, want_args = _call(original, args)
        got, got_args = _call(fused, args)
        what = f"{source}\nfused:\n{fused_source}\nshapes {shapes[:n_arrays]}"
        if isinstance(want, Exception):
            assert isinstance(want, RAISES), what
            assert isinstance(got, RAISES), f"{got!r}\n{what}"
            continue
        assert not isinstance(got, Exception), f"{got!r}\n{what}"
        _assert_same_values(got, want, 1e-12, what)
        _assert_same_values(tuple(got_args), tuple(want_args), 1e-12, "arguments " + what)


# == 4. jit=True end to end ===============================================================
def wave(x):
    return np.sum(np.sin(x) * np.exp(-x ** 2) + np.tanh(x))


def mix(x, y):
    return np.sum(np.cos(x) * y + x / (1.0 + y * y))


def trig(x):
    return np.sum(np.sin(x) * np.cos(x) + np.sin(x) * x)


def growth(x):
    return np.sum(np.exp(x) * np.sin(x) + np.tanh(x) * np.cos(x))


def field(x, y):
    return np.sin(x) * y + np.tanh(x * y) * x


def ratio(x, y):
    return np.sum(np.sin(x) / y + x * y)


def reread(x):
    y = np.sin(x) * x
    z = np.cos(x) * x
    w = np.exp(np.transpose(y) * 0.001)
    return np.sum(w) + np.sum(z * x)


def shape_read(x):
    y = np.sin(x) * x
    z = np.cos(x) * x + y
    w = np.tanh(x) * z
    return np.sum(w) * y.shape[0]


def _wave_grad(x):
    e = np.exp(-x * x)
    return np.cos(x) * e - 2.0 * x * np.sin(x) * e + (1.0 - np.tanh(x) ** 2)


def _trig_grad(x):
    return np.cos(x) ** 2 - np.sin(x) ** 2 + x * np.cos(x) + np.sin(x)


def _growth_grad(x):
    t = np.tanh(x)
    return np.exp(x) * (np.sin(x) + np.cos(x)) + (1.0 - t * t) * np.cos(x) - t * np.sin(x)


@pytest.fixture(scope="module")
def jit_always():
    """numba at every size (S2SGRAD_JIT_PLAN=always), compiled variants kept for the
    module's tests: numba compiles are slow."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("S2SGRAD_JIT_PLAN", "always")
        numba_backend.reset()
        yield
        numba_backend.reset()


def _no_jit_warning(fn, *args, **kwargs):
    """fn(*args, **kwargs), a JitWarning (a fallback to NumPy) raised as an error."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("error", JitWarning)
        return fn(*args, **kwargs)


def _numpy(fn, *args, **kwargs):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kwargs)


def _close(got, want, rtol=1e-12, what=""):
    assert type(got) is type(want), (type(got), type(want))
    assert np.shape(got) == np.shape(want)
    finite = np.isfinite(want)
    scale = float(np.max(np.abs(np.where(finite, want, 0.0)), initial=0.0))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 1e-2 * scale,
                               equal_nan=True, err_msg=what)


def _check_grad(f, args, wrt, fd=True):
    """jit=True against the NumPy backend (and central differences); the jit gradient."""
    assert jit_plan(f, *args, wrt=wrt).compile, "numba was not asked to run this call"
    got = _as_tuple(_no_jit_warning(s2sgrad.grad(f, wrt, jit=True), *args))
    want = _as_tuple(_numpy(s2sgrad.grad(f, wrt), *args))
    positions = _as_tuple(wrt)
    for i, g, w in zip(positions, got, want):
        _close(g, w, 1e-12, f"jit vs NumPy backend, argument {i}, shapes "
                            f"{[np.shape(a) for a in args]}")
        if fd:
            d = numeric_grad(f, list(args), i)
            scale = max(1.0, float(np.max(np.abs(d), initial=0.0)))
            np.testing.assert_allclose(g, d, rtol=1e-6, atol=1e-6 * scale,
                                       err_msg=f"jit vs differences, argument {i}")
    return got


def _has_loop(source):
    return re.search(r"^\s*for \w+ in range\(", source, re.M) is not None


def test_grad_of_one_array(jit_always):
    pytest.importorskip("numba")
    rng = _rng(10)
    for shape in [(9,), (23,), (3, 5), (2, 7)]:   # two variants (ranks), two calls each
        _check_grad(wave, (rng.uniform(-2.0, 2.0, shape),), 0)
    assert _has_loop(jit_source(wave, np.ones(4)))
    assert _has_loop(jit_source(wave, np.ones((2, 2))))


def test_grad_of_two_arrays_of_one_shape(jit_always):
    pytest.importorskip("numba")
    rng = _rng(11)
    for shape in [(3, 4), (2, 5), (1, 1)]:
        args = (rng.uniform(-2.0, 2.0, shape), rng.uniform(-1.5, 1.5, shape))
        _check_grad(mix, args, (0, 1))
    source = jit_source(mix, *args, wrt=(0, 1))
    assert _has_loop(source)
    assert re.search(r"^\s*if\b", source, re.M), "no run-time test of the shapes"


def test_grad_when_the_shapes_differ_takes_the_fallback(jit_always):
    pytest.importorskip("numba")
    rng = _rng(12)
    x = rng.uniform(-2.0, 2.0, (3, 4))
    same = (x, rng.uniform(-1.5, 1.5, (3, 4)))
    _check_grad(mix, same, (0, 1))                         # the loop runs
    for y_shape in [(1, 4), (3, 1)]:                      # same rank: the guard fails
        _check_grad(mix, (x, rng.uniform(-1.5, 1.5, y_shape)), (0, 1))
    _check_grad(mix, (x[:1], rng.uniform(-1.5, 1.5, (3, 4))), (0, 1))
    _check_grad(mix, (x, rng.uniform(-1.5, 1.5, 4)), (0, 1))   # mixed ranks
    _check_grad(mix, (x, rng.uniform(-1.5, 1.5, 4)), (0, 1))
    # arrays that are not C-contiguous
    _check_grad(mix, (rng.uniform(-2.0, 2.0, (3, 8))[:, ::2], same[1].T.copy().T), (0, 1))


def test_value_and_grad(jit_always):
    pytest.importorskip("numba")
    rng = _rng(13)
    # more elements than a fused sum's block (SUM_BLOCK, 2048): summed block by block
    for shape in [(9,), (17,), (2049,), (5000,)]:
        x = rng.uniform(-2.0, 2.0, shape)
        value, g = _no_jit_warning(s2sgrad.value_and_grad(wave, jit=True), x)
        want_value, want_g = s2sgrad.value_and_grad(wave)(x)
        rounding = 1e-14 * x.size              # another order of the sum's additions
        assert value == pytest.approx(wave(x), rel=1e-12, abs=rounding)
        assert value == pytest.approx(want_value, rel=1e-12, abs=rounding)
        _close(g, want_g)
        np.testing.assert_allclose(g, _wave_grad(x), rtol=1e-10, atol=1e-14)


def test_vjp_of_a_non_scalar_output(jit_always):
    pytest.importorskip("numba")
    rng = _rng(14)
    for shape in [(7,), (11,), (2, 3)]:
        x, y = rng.uniform(-2.0, 2.0, shape), rng.uniform(-1.5, 1.5, shape)
        v = rng.standard_normal(shape)
        out, pullback = _no_jit_warning(s2sgrad.vjp, field, x, y, wrt=(0, 1), jit=True)
        _close(out, field(x, y))
        first = _no_jit_warning(pullback, v)
        again = _no_jit_warning(pullback, 2.0 * v)
        want = s2sgrad.vjp(field, x, y, wrt=(0, 1))[1](v)
        for i, g, g2, w in zip((0, 1), first, again, want):
            _close(g, w, what=f"argument {i}")
            _close(g2, 2.0 * w, what=f"argument {i}, cotangent doubled")
            np.testing.assert_allclose(g, numeric_vjp(field, [x, y], v, i), rtol=1e-6,
                                       atol=1e-7)


def test_gradients_where_the_math_matters(jit_always):
    pytest.importorskip("numba")
    rng = _rng(15)
    warm = rng.uniform(-2.0, 2.0, 9)
    cases = [
        (wave, SPECIAL[np.isfinite(SPECIAL)], _wave_grad),
        (trig, np.array([0.0, -2.0, 1e3, -1e3 + 0.3, 3e5, 999999.0, 1e6, -1e6, 1e7,
                         2.0 ** 40, 123456.789]), _trig_grad),
        (growth, np.array([0.0, -1.0, 30.0, -30.0, 700.0, 709.0, 710.0, 800.0, -800.0,
                           -745.0, -750.0]), _growth_grad),
    ]
    for f, x, exact in cases:
        _check_grad(f, (warm,), 0)                 # compiled, and checked by the backend
        for values in (x, x[::-1].copy(), x[:3]):  # later calls: checked here only
            g = _check_grad(f, (values,), 0, fd=False)[0]
            want = _numpy(exact, values)
            finite = np.isfinite(want)
            np.testing.assert_allclose(g[finite], want[finite], rtol=1e-10, atol=1e-13,
                                       err_msg=f"{f.__name__} at {values[finite]}")
            if f is not growth:
                assert np.isfinite(g).all()


def test_nan_propagates_as_in_the_numpy_backend(jit_always):
    pytest.importorskip("numba")
    rng = _rng(16)
    _check_grad(wave, (rng.uniform(-2.0, 2.0, 6),), 0)
    x = np.array([0.3, np.nan, -1.2, 0.0, np.nan, 2.5])
    g = _check_grad(wave, (x,), 0, fd=False)[0]
    assert np.array_equal(np.isnan(g), np.isnan(x))
    x2, y2 = rng.uniform(-2.0, 2.0, (3, 4)), rng.uniform(-1.5, 1.5, (3, 4))
    _check_grad(mix, (x2, y2), (0, 1))
    y2[1, 2] = np.nan
    gx, gy = _check_grad(mix, (x2, y2), (0, 1), fd=False)
    assert np.array_equal(np.isnan(gx), np.isnan(y2))
    assert np.array_equal(np.isnan(gy), np.isnan(y2))


def test_division_by_zero_in_compiled_code_is_numpys(jit_always):
    """numba divides two floats with Python's meaning (ZeroDivisionError): the loop's
    divisions of elements must be NumPy's (inf, nan), as in the NumPy backend."""
    pytest.importorskip("numba")
    rng = _rng(19)
    x, y = rng.uniform(-2.0, 2.0, (2, 4)), rng.uniform(0.5, 1.5, (2, 4))
    x[0, 0] = 0.0
    _check_grad(ratio, (x, y), (0, 1))
    assert _has_loop(jit_source(ratio, x, y, wrt=(0, 1)))
    for zeros in ([0, 0], [1, 3]):                 # 0 / 0 and sin(x) / 0
        y_zero = y.copy()
        y_zero[tuple(zeros)] = 0.0
        gx, gy = _check_grad(ratio, (x, y_zero), (0, 1), fd=False)
        assert not np.isfinite(gx[tuple(zeros)]) and not np.isfinite(gy[tuple(zeros)])


def test_large_arguments_after_the_first_call(jit_always):
    """A run of the adjoint reads x_bar and redefines it; an argument of sin >= 1e6 on a
    call the backend does not check must rerun the statements from the old x_bar."""
    pytest.importorskip("numba")
    rng = _rng(17)
    x = rng.uniform(-1.0, 1.0, (3, 4))
    _check_grad(reread, (x,), 0)
    x[0, 0] = 1e6
    got = _no_jit_warning(s2sgrad.grad(reread, jit=True), x)
    _close(got, _numpy(s2sgrad.grad(reread), x))


def test_an_array_read_only_through_its_shape(jit_always):
    """y is read after its run only as y.shape[0] (a regression: the loop did not write
    y, numba's y was undefined, and the backend fell back with a JitWarning)."""
    pytest.importorskip("numba")
    rng = _rng(18)
    for shape in [(3, 4), (5, 2)]:
        _check_grad(shape_read, (rng.uniform(-1.0, 1.0, shape),), 0)
    assert _has_loop(jit_source(shape_read, np.ones((2, 2))))


# -- what is not fused: functions with loops, runs that broadcast in the first run ---
def looped(x, y):
    for _ in range(3):
        x = np.sin(x) * y
    return np.sum(np.cos(x) * y + x * x)


def outer_sum(x, y):
    return np.sum(np.sin(x) * y + x * np.cos(y))


def test_a_function_that_loops_is_not_fused(jit_always):
    """Its arrays are below the loop limit, where a fused loop saves little and costs
    its compile: the numba code is the rewrite's, with no flat views."""
    pytest.importorskip("numba")
    rng = _rng(31)
    args = (rng.standard_normal(6), rng.standard_normal(6))
    assert "np.ravel" not in jit_source(looped, *args, wrt=(0, 1))
    got = _no_jit_warning(s2sgrad.grad(looped, wrt=(0, 1), jit=True), *args)
    want = s2sgrad.grad(looped, wrt=(0, 1))(*args)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-12)
        np.testing.assert_allclose(g, numeric_grad(looped, list(args), i), rtol=1e-6,
                                   atol=1e-8)


@pytest.mark.parametrize("shapes, fused", [(((3, 4), (3, 4)), True),
                                           (((3, 4), (1, 4)), False)])
def test_runs_that_broadcast_in_the_first_run_are_not_fused(jit_always, shapes, fused):
    """The first NumPy run's shapes decide whether a loop is worth compiling; the
    gradient is right either way, and on both shapes after the first. (A variant is
    built once per type signature: forget those of other tests first.)"""
    pytest.importorskip("numba")
    numba_backend.reset()
    rng = _rng(32)
    args = tuple(rng.standard_normal(s) for s in shapes)
    assert ("np.ravel" in jit_source(outer_sum, *args, wrt=(0, 1))) == fused
    g = s2sgrad.grad(outer_sum, wrt=(0, 1), jit=True)
    for call in (args, tuple(rng.standard_normal(s) for s in shapes),
                 tuple(rng.standard_normal(s) for s in ((3, 4), (3, 4)))):
        got = _no_jit_warning(g, *call)
        for i, w in enumerate(s2sgrad.grad(outer_sum, wrt=(0, 1))(*call)):
            np.testing.assert_allclose(got[i], w, rtol=1e-12)
            np.testing.assert_allclose(got[i], numeric_grad(outer_sum, list(call), i),
                                       rtol=1e-6, atol=1e-8)
