"""Function bodies with early returns: folded into one result, and inlined."""
import ast
import textwrap

import numpy as np
import pytest
from conftest import assert_grads_match_differences
from test_forward_mode import check_jvp

import s2sgrad
from s2sgrad import compiler, functional
from s2sgrad.compiler.early_returns import fold_returns


def _inlined_and_right(f, x, rng, hessian=True):
    """f's Functions inlined; its gradient (optimised and plain), its JVP and (with
    `hessian`) its Hessian times a random v against central differences."""
    assert compiler.compile_function(f, (0,)).not_inlined == []
    assert_grads_match_differences(f, [x], (0,))
    assert_grads_match_differences(f, [x], (0,), optimize=False)
    check_jvp(f, [x])
    if hessian:
        v = rng.standard_normal(np.shape(x))
        eps = 1e-5
        expected = (functional.vjp(f, x + eps * v)[1] - functional.vjp(f, x - eps * v)[1]) / \
            (2 * eps)
        np.testing.assert_allclose(functional.hvp(f, x, v)[1], expected, rtol=1e-6,
                                   atol=1e-7)


_BODIES = {
    "shortcut": """
        if x < 0:
            return -x
        y = x * 2
        return y + 1
    """,
    "both_branches": """
        if x > 3:
            y = x - 3
            return y
        else:
            z = x + 3
        if x > 1:
            return z * 2
        return z
    """,
    "nested": """
        if x > 0:
            if x > 5:
                return 5
            x = x + 1
        w = x * 3
        return w
    """,
    "falls_off_the_end": """
        if x > 0:
            return x
        x = x + 1
    """,
}


def _run(body, x):
    namespace = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), "<folded>", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("name", sorted(_BODIES))
def test_folded_bodies_return_what_the_original_returns(name):
    source = "def f(x):\n" + textwrap.indent(textwrap.dedent(_BODIES[name]), "    ")
    original = {}
    exec(source, original)
    body = ast.parse(source).body[0].body
    folded = fold_returns(body, "returned")
    assert folded is not None
    assert not any(isinstance(n, ast.Return) for s in folded for n in ast.walk(s))
    fdef = ast.parse("def g(x):\n    pass\n").body[0]
    fdef.body = folded + [ast.Return(value=ast.Name(id="returned", ctx=ast.Load()))]
    module = ast.fix_missing_locations(ast.Module(body=[fdef], type_ignores=[]))
    namespace = {}
    exec(compile(module, "<folded>", "exec"), namespace)
    for x in (-2, 0, 0.5, 2, 4, 7):
        assert namespace["g"](x) == original["f"](x), (name, x)


def test_a_return_inside_a_loop_is_not_folded():
    body = ast.parse("def f(x):\n    for i in range(3):\n        if x > i:\n"
                     "            return i\n    return x\n").body[0].body
    assert fold_returns(body, "returned") is None


_SHRINK = '''
class Shrink(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        if np.ndim(x) == 0:
            return x / (1.0 + x * x)
        return x / (1.0 + np.square(x))

    @staticmethod
    def vjp(ctx, g):
        if not np.any(g):
            return np.zeros_like(g)
        x, = ctx.saved_tensors
        s = 1.0 + x * x
        return g * (1.0 - x * x) / (s * s)
'''

_FUNCTIONS = '''
import numpy as np
import s2sgrad
''' + _SHRINK + '''
class Looped(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.sinh(x)

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        for _ in range(1):
            return g * np.cosh(x)

def f(x):
    return np.sum(np.cos(Shrink.apply(x)) * x)

def h(x):
    return np.sum(Looped.apply(x) * x)
'''


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_a_function_with_early_returns_is_inlined_and_right(make_module, shape, rng):
    m = make_module(_FUNCTIONS)
    x = rng.uniform(-1.5, 1.5, size=shape)
    _inlined_and_right(m.f, x, rng)


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_a_vjp_returning_inside_a_loop_is_called(make_module, shape, rng):
    m = make_module(_FUNCTIONS)
    x = rng.uniform(-1.0, 1.0, size=shape)
    reasons = compiler.compile_function(m.h, (0,)).not_inlined
    assert reasons == ["Looped: vjp returns from inside a loop, `try` or `with`"]
    assert_grads_match_differences(m.h, [x], (0,))
    check_jvp(m.h, [x])


_FALLS_OFF = '''
import numpy as np

def loop_returns(x):
    for _ in range(2):
        return np.sin(x) * x          # (the loop always returns: nothing after it)

def branch_returns(x, flag):
    if flag:
        return np.cos(x) * x
    x = x + 1.0                       # (falls off the end: None)

def caller(x):
    return loop_returns(x) * 2.0 + branch_returns(x, True)
'''


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_function_that_may_fall_off_its_end_returns_what_python_returns(make_module,
                                                                          shape, rng):
    # The implicit `return None` at the end was appended after the early returns'
    # tails were lifted, so it overwrote every path's result: the forward returned
    # None, and a called vjp written so gave a zero gradient.
    m = make_module(_FALLS_OFF)
    x = rng.uniform(-1.0, 1.0, size=shape)
    v = rng.standard_normal(shape)
    for f in (m.loop_returns, m.caller):
        out, _ = functional.vjp(f, x, v)
        np.testing.assert_array_equal(out, f(x))
    out, (gx, _) = functional.vjp(m.branch_returns, (x, 1.0), v)
    np.testing.assert_array_equal(out, m.branch_returns(x, 1.0))
    np.testing.assert_allclose(gx, v * (np.cos(x) - np.sin(x) * x), rtol=1e-12)
    eps = 1e-6
    for f in (m.loop_returns, m.caller):
        _, got = functional.vjp(f, x, v)
        numeric = np.zeros(x.size)
        for k in range(x.size):
            e = np.zeros(x.size)
            e[k] = eps
            e = e.reshape(shape)
            numeric[k] = np.sum((f(x + e) - f(x - e)) * v) / (2 * eps)
        np.testing.assert_allclose(np.ravel(got), numeric, rtol=1e-6, atol=1e-8)


_DEFAULTS = '''
import numpy as np
import s2sgrad

class Clip(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x, lo=-1.0, hi=1.0):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return np.clip(x, lo, hi)

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        inside = (x > ctx.lo) & (x < ctx.hi)
        if np.all(inside):
            return g, None, None
        return g * inside, None, None

class Named(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x, k=2.0):
        ctx.save_for_backward(x)
        ctx.k = k
        return np.sin(x) * k

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        out = (g * np.cos(x) * ctx.k, None)
        return out

def clipped(x):
    return np.sum(Clip.apply(x * 2.0) * x) + np.sum(Clip.apply(x, -0.5) * x)

def named(x):
    return np.sum(Named.apply(x) * x)
'''


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_forward_defaults_left_out_by_the_call_are_inlined(make_module, shape, rng):
    # `Clip.apply(x)` for forward(ctx, x, lo=-1.0, hi=1.0): the defaults are bound as
    # constants and the Function inlined (before, it was called, and forward mode
    # refused it: "forward's parameters do not match the call").
    m = make_module(_DEFAULTS)
    x = rng.uniform(-0.9, 0.9, size=shape)
    _inlined_and_right(m.clipped, x, rng, hessian=False)


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_a_one_input_vjp_returning_a_name_that_holds_a_tuple(make_module, shape, rng):
    # `out = (g * ..., None); return out`: the name holds a tuple, not the gradient;
    # what it holds is checked when the code runs (a folded `returned = g, None` too).
    m = make_module(_DEFAULTS)
    x = rng.uniform(-1.0, 1.0, size=shape)
    assert_grads_match_differences(m.named, [x], (0,))
    check_jvp(m.named, [x])


_CALLER_RETURNS_EARLY = '''
import numpy as np
import s2sgrad
''' + _SHRINK + '''
def f(a, y):
    total = 0.0
    for _ in range(2):
        total = total + 0.3 * np.tanh(a)
        if np.all(y > 5.0):
            return y * total          # (the caller's own flag: `returned`)
    return np.sum(np.tanh(Shrink.apply(a) * a) + total)
'''


@pytest.mark.parametrize("shape", [(), (3,)])
def test_a_folded_return_variable_is_renamed_where_it_is_inlined(make_module, shape, rng):
    # The variable the folded returns assign (`returned`) was not renamed where the
    # body was inlined, and it was the caller's flag of the same name: set to the
    # Function's value, it said the caller had returned early, and the gradient
    # was 0 (found by the fuzzer).
    m = make_module(_CALLER_RETURNS_EARLY)
    a = rng.uniform(0.5, 1.0, size=shape)
    y = np.full(shape, -0.7)
    assert_grads_match_differences(m.f, [a, y], (0,), witness=False)
    assert_grads_match_differences(m.f, [a, y], (0,), witness=False, optimize=False)


_CTX_IN_BRANCHES = '''
import numpy as np
import s2sgrad

class Mode(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.scale = 1.5
        if np.all(x > 0):
            ctx.mode = 1
            return np.log(x)
        elif np.all(x > -10.0):
            ctx.mode = 0
            ctx.scale = 2.5
        else:
            ctx.mode = 0
        return x * ctx.scale

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        if ctx.mode:
            return g / x
        return g * ctx.scale

class OnePath(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        if np.all(x > 0):
            ctx.flag = True
        return x * 3.0

    @staticmethod
    def vjp(ctx, g):
        return g * 3.0

def positive(x):
    return np.sum(Mode.apply(x * x + 0.1) * x)

def shifted(x):
    return np.sum(Mode.apply(x - 5.0) * x)

def one_path(x):
    return np.sum(OnePath.apply(x) * x)
'''


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_ctx_attributes_set_in_both_branches_are_inlined(make_module, shape, rng):
    # forward sets ctx.mode in each branch (folded early returns put the assignments
    # there): one variable per attribute, assigned on every path; forward mode
    # derives the JVP (it refused: "forward uses ctx inside a branch or loop").
    m = make_module(_CTX_IN_BRANCHES)
    x = rng.uniform(0.3, 1.2, size=shape)
    for f in (m.positive, m.shifted):
        _inlined_and_right(f, x, rng)


def test_a_ctx_attribute_one_path_leaves_unset_keeps_forward_called(make_module, rng):
    # In Python the vjp would find no attribute on the other path: not inlined (an
    # unbound variable would read None there), called, and right.
    m = make_module(_CTX_IN_BRANCHES)
    x = rng.uniform(0.3, 1.2, size=(3,))
    reasons = compiler.compile_function(m.one_path, (0,)).not_inlined
    assert reasons == ["OnePath: forward uses ctx inside a branch or loop"]
    assert_grads_match_differences(m.one_path, [x], (0,))


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_third_derivatives_through_a_vjp_returning_a_held_tuple(make_module, shape, rng):
    # The held tuple `(g * ..., None)` goes through check_count; differentiated three
    # times, the None item's cotangent met a number in add_items and raised (found by
    # the fuzzer's higher-order family).
    m = make_module(_DEFAULTS)
    x = rng.uniform(-1.0, 1.0, size=shape)
    v = rng.standard_normal(shape)

    def hv(y):
        return functional.hvp(m.named, y, v)[1]

    def third(y):
        return np.sum(hv(y) * np.tanh(y))
    eps = 1e-5
    numeric = np.zeros(x.size)
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        numeric[k] = (third(x + e.reshape(shape)) - third(x - e.reshape(shape))) / (2 * eps)
    m2 = make_module(_DEFAULTS + f'''
from s2sgrad import functional
V = np.array({v.tolist()!r})

def third(y):
    return np.sum(functional.hvp(named, y, V, create_graph=True)[1] * np.tanh(y))
''')
    np.testing.assert_allclose(np.ravel(s2sgrad.grad(m2.third)(x)), numeric, rtol=1e-5,
                               atol=1e-7)


_ERRSTATE = '''
import numpy as np
import s2sgrad

class SafeLog(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        with np.errstate(divide="ignore"):
            return np.log(x)

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        with np.errstate(divide="ignore", invalid="ignore"):
            return g / x

def f(x):
    return np.sum(SafeLog.apply(x * x + 0.5) * x)
'''


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_errstate_blocks_in_a_function_are_inlined(make_module, shape, rng):
    # `with np.errstate(...)` changes which warnings NumPy reports, never a value: the
    # block is its body, as in the user's own functions (it made the body be called,
    # and its second derivatives were refused).
    m = make_module(_ERRSTATE)
    x = rng.uniform(-1.0, 1.0, size=shape)
    _inlined_and_right(m.f, x, rng)


_HELPER_PAIR = '''
import numpy as np
import s2sgrad

def pack(g, x):
    return g * np.cos(x), g * 5.0

class Two(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.sin(x)

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return pack(g, x)

def f(x):
    return np.sum(Two.apply(x) * x)
'''


def test_a_one_input_vjp_returning_a_helpers_pair_is_a_count_error(make_module):
    # A call may return a tuple: its result was taken for the one gradient, and the
    # pair's two arrays were added into it (a wrong gradient, no error). Now checked
    # when the code runs, as PyTorch does.
    m = make_module(_HELPER_PAIR)
    x = np.array([0.3, 0.5, 0.9])
    for witness in (True, False):
        with pytest.raises(TypeError, match=r"Two.vjp returns 2 gradient\(s\), expected 1"):
            s2sgrad.grad(m.f, witness=witness)(x)
    with pytest.raises(TypeError, match=r"Two.vjp returns 2 gradient\(s\), expected 1"):
        functional.jvp(m.f, x, np.ones(3))
