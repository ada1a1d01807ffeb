"""Everyday code that once gave a silently wrong gradient (issue 12).

Each program is checked against central differences of the original Python
function on two argument shapes (one broadcasting where that applies), or, where
s2sgrad cannot differentiate it exactly, must raise a TransformError at the
user's line.
"""
import numpy as np
import pytest
from conftest import check_vjp, import_source

import s2sgrad

SOURCE = '''
import collections
import math

import numpy as np
import s2sgrad

scale = 100.0        # a global with a parameter's name: must never stand in for it
C = 1j
Pair = collections.namedtuple("Pair", ["a", "b"])
G23 = np.array([[0.2, -0.5, 0.3], [0.6, 0.1, -0.4]])


def list_loop(x):
    acc = 0.0
    for term in [x, x ** 2, np.sin(x)]:
        acc = acc + np.sum(term * term)
    return acc


def mlp(W1, b1, W2, b2, x):
    params = [(W1, b1), (W2, b2)]
    for W, b in params:
        x = np.tanh(x @ W + b)
    return np.sum(x ** 2)


def nested_targets(x, y):
    pairs = [(x, y), (y * 2.0, x)]
    s = 0.0
    for k, (a, b) in enumerate(pairs):
        s = s + np.sum(a * b ** 2) * (k + 1)
    return s


def zipped_pairs(x, y):
    s = 0.0
    for (a, b), w in zip([(x, y), (y, x)], [0.5, 2.0]):
        s = s + w * np.sum(np.sin(a) * b)
    return s


def _product(p):
    return p[0] * p[1]


def tuple_argument(x, y):
    return np.sum(_product((x, np.cos(y))) ** 2)


def _pair(x):
    return x * 2.0, np.exp(x)


def returned_tuple(x, y):
    a, b = _pair(x)
    return np.sum(a * b * y)


def element_update(theta):
    e1 = theta @ theta
    fwd = theta + theta
    fwd[1] += np.log(1.0 + np.exp(e1))
    return np.sum(fwd) + 0.1 * e1


def matmul_then_elementwise(a, b):
    m = a @ b
    return np.sum(np.exp(m * 0.1) + b[0])


def keyword_only(x, *, scale=2.0):
    return scale * np.sum(x ** 2)


def keyword_only_rebound(x, *, scale=2.0):
    scale = scale * 3.0
    return scale * np.sum(x ** 2)


def walrus_if(x):
    if (s := np.sum(x)) > -100.0:
        return s ** 2
    return s


def walrus_while(x):
    k = 0
    y = x
    while (s := np.sum(y * y)) < 50.0 and k < 4:
        y = y * 1.5
        k += 1
    return s + np.sum(y)


def walrus_while_counts_down(x):
    n = 3
    s = 0.0
    while (n := n - 1) >= 0:   # (the condition's assignment, once run only before the loop)
        s = s + np.sum(np.sin(x[n] * x))
    return s


def walrus_ifexp(x):
    y = np.sum(np.sin(x)) if (t := np.sum(x * x)) > 0.0 else -1.0
    return y * t


def walrus_short_circuit(x):
    a = np.sum(x)
    if a > 100.0 or (t := a * 2.0) > 0.0:
        return a
    return a * 2.0


def add_at(x):
    y = np.zeros(3)
    np.add.at(y, np.array([0, 0, 2]), x)
    return np.sum(y ** 2)


def subtract_at(x, w):
    y = w * 1.0
    z = y ** 2
    np.subtract.at(y, [2, 0, 2], x * 2.0)
    return np.sum(y ** 3) + np.sum(z)


def multiply_at(x):
    y = x * 1.0
    np.multiply.at(y, [0], 2.0)
    return np.sum(y)


def repeated_write(x, w):
    y = w * 1.0
    y[[0, 0, 1]] = x
    return np.sum(y * np.array([1.0, 2.0, 3.0]))


def repeated_add(x, w):
    y = w * 1.0
    y[[0, 0, 1]] += x
    return np.sum(y ** 2)


def repeated_mul(x, w):
    y = w * 1.0
    y[[0, 0, 1]] *= x
    return np.sum(y ** 2)


def _scaled(u, k=0.25, *, scale=0.5):
    return np.sum(u * scale * k + scale ** 2)


def keyword_only_callee(x, y):
    return _scaled(y, k=np.sum(x), scale=np.sum(x) * 2.0) + _scaled(x, scale=np.sum(y))


def keyword_only_reassigned(x, *, s=0.7):
    s *= 0.5
    return np.sum(x * s)


class SinCos(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.sin(x), np.cos(x)

    @staticmethod
    def vjp(ctx, gs, gc):
        x, = ctx.saved_tensors
        return gs * np.cos(x) - gc * np.sin(x)


def output_of_apply_indexed(x):
    return np.sum(SinCos.apply(x * 2.0)[0] * SinCos.apply(x)[1])


def iterated_then_rebound(x, w):
    acc = w * np.sum(x)
    for r in acc:
        acc = r * w
    return acc @ acc


def written_with_itself(x):
    v = np.mean(x, axis=0)
    v[[2, 0, 2]] = v
    return np.sum(v * np.array([1.0, 2.0, 3.0]))


def _doubles_in_place(u):
    u += u
    return np.sum(u)


def callee_writes_argument(x):
    v = x * 1.0
    s = _doubles_in_place(v)
    return s + np.sum(v)


def callee_updates_number(x):
    return _doubles_in_place(np.sum(x) * 1.0) * 2.0


def python_numbers(x):
    return (max(np.sum(x), 0.1) + min(np.sum(x * x), 0.2) + math.sin(np.sum(x)) *
            pow(float(np.sum(x * x)) + 1.0, 1.5) + math.exp(np.mean(x)) + abs(np.sum(x)))


def python_floats(a, b):
    return math.hypot(a, b) + max(a, b) ** 2 + math.log(1.0 + a * a) + abs(b) + min(a, 2.0)


def sum_of_list(x):
    terms = []
    for i in range(3):
        terms.append(x * (i + 1.0))
    return np.sum(terms) + np.sum(np.mean(terms, axis=0) ** 2)


def view_not_read_after_the_write(x):
    a = x * 1.0
    r = a[1:]
    s = np.sum(r * r * r)
    a[1] += 2.0
    return s + np.sum(a ** 2)


def rows_iterated_then_written(x):
    a = x * 1.0
    s = 0.0
    for row in a:
        s = s + np.sum(row * row)
    a[0] *= 3.0
    return s + np.sum(a ** 3)


def view_read_after_the_write(x):
    a = x * 1.0
    r = a[1:]
    a[1] += 2.0
    return np.sum(r * r)


def updated_in_one_branch(x, y):
    s = y * 1.0
    if np.sum(x) > 100.0:
        s = np.tanh(x)
    else:
        s += x
    return np.sum(s * y)


def updated_after_aliasing_in_a_loop(x):
    y = x * 2.0
    total = 0.0
    for i in range(3):
        y += 1.0
        z = y
        total = total + np.sum(z * x)
    return total


def _positive_sum(u):
    return np.sum(u) > -100.0


def call_in_a_condition(x):
    y = x * 1.0
    if _positive_sum(y):
        y = y * 3.0
    k = 0
    while _positive_sum(y) and k < 2:
        y = y * 0.5
        k += 1
    return np.sum(y ** 2)


def _doubles_and_tests(u, w):
    w += w
    return np.sum(u) > -100.0


def mutating_call_in_a_condition(x):
    y = x * 1.0
    if _doubles_and_tests(y, y):
        pass
    return np.sum(y)


def call_in_and_or(x):
    if np.sum(x) > 0.0 or _positive_sum(x):
        return np.sum(x)
    return 0.0


def _pair_list(u):
    return [u * 2.0, np.sin(u)]


def returned_list(x):
    a, b = _pair_list(x)
    return np.sum(a * b) + np.sum(_pair_list(x))


def appended_then_read(x, y):
    xs = []
    xs.append(x * y)
    xs.append(y)
    return np.sum(xs[0] * xs[1])


def written_in_nested_loops(x, y):
    acc = 0.0
    for t in [0.7, 3.0]:
        k = 0
        while k < 2:
            k += 1
            out = np.tanh(y * t)
            out[0] = np.sum(x)
            acc = acc + np.sum(out ** 2)
    return acc


def complex_constant(x):
    return np.linalg.norm(x * 1j + 1.0)   # (np.abs of it is differentiated)


def complex_global(x):
    return np.linalg.norm(x * C)


def test_reassigned_in_then(x, w):
    c = np.sum(x) > 0.0
    if c:
        c = False
        y = np.sum(x * w) * 2.0
    else:
        y = np.sum(x * w) * 3.0
    return y


def test_reassigned_in_else(x, w):
    c = np.sum(x) > 0.0
    if c:
        y = np.sum(x * w) * 2.0
    else:
        c = True
        y = np.sum(x * w) * 3.0
    return y


def early_return_then_return_in_while(x, w):
    for b in [x, x]:
        if np.sum(b) > 50.0:
            return 0.5 * np.sum(x)
    while True:
        return np.sum(x * w * x)
    return 0.0


def flag_tested_then_set(x, w):
    done = False
    for v in [x, x]:
        if np.sum(v) > 50.0:
            done = True
            break
    if done:
        y = np.sum(x)
    else:
        done = True
        y = np.sum(x * w) * 3.0
    return y


def record_replaces_an_item(x):
    items = []
    items.append(x)
    items[0] = Pair(0.3, 0.5)
    return items[0].b * np.sum(x * x)


def dict_item_updated_in_place(y):
    d0 = {"bias": y, "b": 0.5}
    w2 = d0["bias"]
    w2 *= 0.5
    return 0.5 + np.sum(y)


def _bumps_scale(u, *, scale=1.5):
    scale += np.sum(u)
    return u


def callee_in_a_comparison_writes_argument(x):
    s = np.array(0.2)
    flag = _bumps_scale(x, scale=s) > 0.4
    return np.sum(np.where(flag, x, 0.0)) + s


def _positive_part(u):
    return np.maximum(u, 0.0)


def callee_in_a_comparison(x):
    return np.sum(np.where(_positive_part(x) > 0.1, x * x, x))


def _centred_pair(u):
    return [1.0, u - np.mean(u, keepdims=True)]


def overwritten_item_of_a_callees_list(x, z):
    pair = _centred_pair(G23 + x)
    pair[1] = z
    return pair[0] + np.sum(pair[1] * z)

'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("sound"), "s2s_soundness_cases", SOURCE)


def _args(shapes, rng):
    return [rng.standard_normal(s) * 0.5 if s else float(rng.standard_normal()) * 0.5
            for s in shapes]


# (function, argument shapes per case: the second broadcasts where the code allows)
CASES = [
    ("list_loop", [[(3,)], [(2, 4)]]),
    ("mlp", [[(3, 2), (2,), (2, 2), (2,), (3,)], [(4, 3), (1,), (3, 2), (2,), (5, 4)]]),
    ("nested_targets", [[(3,), (3,)], [(2, 3), (3,)]]),
    ("zipped_pairs", [[(3,), (3,)], [(2, 3), (3,)]]),
    ("tuple_argument", [[(3,), (3,)], [(2, 3), (3,)]]),
    ("returned_tuple", [[(3,), (3,)], [(3,), (2, 3)]]),
    ("element_update", [[(3,)], [(5,)]]),
    ("matmul_then_elementwise", [[(3,), (3, 2)], [(2, 3), (3, 4)]]),
    ("keyword_only", [[(3,)], [(2, 2)]]),
    ("keyword_only_rebound", [[(3,)], [(2, 2)]]),
    ("walrus_if", [[(3,)], [(2, 2)]]),
    ("walrus_while", [[(3,)], [(2, 2)]]),
    ("walrus_while_counts_down", [[(3,)], [(3, 2)]]),
    ("walrus_ifexp", [[(3,)], [(2, 2)]]),
    ("add_at", [[(3,)], [()]]),
    ("subtract_at", [[(3,), (3,)], [(), (3,)]]),
    ("repeated_write", [[(3,), (3,)], [(), (3,)]]),
    ("repeated_add", [[(3,), (3,)], [(), (3,)]]),
    ("repeated_mul", [[(3,), (3,)], [(), (3,)]]),
    ("keyword_only_callee", [[(3,), (3,)], [(2, 3), (3,)]]),
    ("keyword_only_reassigned", [[(3,)], [(2, 2)]]),
    ("output_of_apply_indexed", [[(3,)], [(2, 2)]]),
    ("iterated_then_rebound", [[(3,), (4,)], [(2, 2), (3,)]]),
    ("written_with_itself", [[(2, 3)], [(4, 3)]]),
    ("callee_updates_number", [[(3,)], [(2, 2)]]),
    ("python_numbers", [[(3,)], [(2, 2)]]),
    ("python_floats", [[(), ()]]),
    ("sum_of_list", [[(3,)], [(2, 2)]]),
    ("view_not_read_after_the_write", [[(3,)], [(4, 2)]]),
    ("rows_iterated_then_written", [[(3,)], [(3, 2)]]),
    ("updated_in_one_branch", [[(3,), (3,)], [(3,), (2, 3)]]),
    ("call_in_a_condition", [[(3,)], [(2, 2)]]),
    ("returned_list", [[(3,)], [(2, 2)]]),
    ("appended_then_read", [[(3,), (3,)], [(2, 3), (3,)]]),
    ("written_in_nested_loops", [[(3,), (3,)], [(2,), (2, 3)]]),
    ("record_replaces_an_item", [[(3,)], [(2, 2)]]),
    ("callee_in_a_comparison", [[(3,)], [(2, 2)]]),
    ("overwritten_item_of_a_callees_list", [[(), (3,)], [(), (2, 3)]]),
]


@pytest.mark.parametrize("name, shapes", [(n, s) for n, cases in CASES for s in cases],
                         ids=[f"{n}-{i}" for n, cases in CASES for i in range(len(cases))])
def test_gradient_matches_finite_differences(m, name, shapes, rng):
    check_vjp(getattr(m, name), _args(shapes, rng))


@pytest.mark.parametrize("name", ["test_reassigned_in_then", "test_reassigned_in_else",
                                  "early_return_then_return_in_while",
                                  "flag_tested_then_set"])
@pytest.mark.parametrize("shapes", [[(3,), (3,)], [(2, 3), (3,)]])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_branch_test_reassigned_in_the_branch(m, name, shapes, sign, rng):
    """The adjoint chooses the branch the forward took, though the branch (or an
    early return's flag) reassigns the variable tested (both branches: sign)."""
    x = np.abs(rng.standard_normal(shapes[0])) * sign + 0.1 * sign
    w = rng.standard_normal(shapes[1])
    check_vjp(getattr(m, name), [x, w])


def test_documented_values(m):
    """The numbers the issue reports, right."""
    theta = np.array([0.3, -0.2, 0.7])
    np.testing.assert_allclose(s2sgrad.grad(m.element_update)(theta), [2.45, 1.70, 3.05],
                               atol=5e-3)
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(s2sgrad.grad(m.keyword_only)(x), [4.0, 8.0])
    np.testing.assert_allclose(s2sgrad.grad(m.keyword_only)(x, scale=3.0), [6.0, 12.0])
    np.testing.assert_allclose(s2sgrad.grad(m.repeated_write)(np.ones(3), np.ones(3)),
                               [0.0, 1.0, 2.0])


FORWARD_MODE = {"add_at", "subtract_at", "repeated_write", "repeated_add", "repeated_mul",
                "keyword_only_callee", "keyword_only", "iterated_then_rebound",
                "written_with_itself", "mlp", "list_loop", "python_numbers", "python_floats",
                "sum_of_list", "returned_list", "appended_then_read",
                "written_in_nested_loops", "updated_in_one_branch", "call_in_a_condition",
                "record_replaces_an_item", "callee_in_a_comparison",
                "overwritten_item_of_a_callees_list"}


@pytest.mark.parametrize("name, shapes", [(n, s) for n, cases in CASES for s in cases
                                          if n in FORWARD_MODE],
                         ids=[f"{n}-{i}" for n, cases in CASES for i in range(len(cases))
                              if n in FORWARD_MODE])
def test_forward_mode_matches_finite_differences(m, name, shapes, rng):
    """The tangent code of the same programs, along a random direction."""
    f = getattr(m, name)
    args = _args(shapes, rng)
    direction = _args(shapes, rng)
    _, tangent = s2sgrad.functional.jvp(f, tuple(args), tuple(direction))
    eps = 1e-6
    plus = f(*[a + eps * d for a, d in zip(args, direction)])
    minus = f(*[a - eps * d for a, d in zip(args, direction)])
    np.testing.assert_allclose(tangent, (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-7)


def test_a_callee_writing_into_an_argument_array_is_refused(m):
    """The caller's adjoint would not see the write: refused at run time, at the
    callee's line (numbers are rebound, not written: callee_updates_number passes)."""
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(m.callee_writes_argument)(np.array([0.3, -0.2, 0.7]))
    message = str(info.value)
    assert "_doubles_in_place writes into its parameter 'u'" in message
    assert "u += u" in message and "^" in message


@pytest.mark.parametrize("name, line, what", [
    ("walrus_short_circuit", "(t := a * 2.0)", "only on some paths"),
    ("multiply_at", "np.multiply.at", "in place"),
    ("complex_constant", "np.linalg.norm(x * 1j + 1.0)", "complex"),
    ("view_read_after_the_write", "a[1] += 2.0", "also changes 'r'"),
    ("mutating_call_in_a_condition", "w += w", "writes into its parameter 'w'"),
    ("call_in_and_or", "_positive_sum(x)", "inside a condition"),
    ("updated_after_aliasing_in_a_loop", "y += 1.0", "also changes 'z'"),
    ("complex_global", "np.linalg.norm(x * C)", "complex"),
    ("dict_item_updated_in_place", "w2 *= 0.5", "also changes 'y'"),
    ("callee_in_a_comparison_writes_argument", "scale += np.sum(u)",
     "writes into its parameter 'scale'"),
])
def test_refused_with_the_users_line(m, name, line, what):
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(getattr(m, name))(np.array([0.3, -0.2, 0.7]))
    message = str(info.value)
    assert what in message and line in message and "^" in message
    assert "s2s_soundness_cases.py:" in message


@pytest.mark.parametrize("value", [np.array([1.0 + 2.0j, 3.0]), 1.0 + 1.0j,
                                   np.complex128(2.0)])
def test_complex_inputs_are_refused(m, value):
    with pytest.raises(TypeError, match="complex"):
        s2sgrad.grad(m.keyword_only)(value)
    with pytest.raises(TypeError, match="complex"):
        s2sgrad.functional.vjp(lambda x: x * 2.0, value)


def test_a_compiler_bug_is_an_internal_error_at_the_users_line(make_module, monkeypatch):
    """An exception inside a pass that is not a deliberate refusal names the
    function, the user's line and the original exception, and asks for a report."""
    import sys
    mod = make_module('''
import numpy as np

def f(x):
    y = np.sin(x)
    return np.sum(y * 2.0)
''')
    statements = sys.modules["s2sgrad.compiler.transform.adjoint_statements"]
    original = statements.AdjointStatements.rule_contribution

    def broken(self, s, op, out, *args, **kwargs):
        if op.rule.name == "np.sin":
            raise KeyError(12345)
        return original(self, s, op, out, *args, **kwargs)
    monkeypatch.setattr(statements.AdjointStatements, "rule_contribution", broken)
    with pytest.raises(s2sgrad.InternalError) as info:
        s2sgrad.grad(mod.f)(np.ones(3))
    message = str(info.value)
    assert not isinstance(info.value, s2sgrad.TransformError)
    assert isinstance(info.value.__cause__, KeyError)
    assert ":5:" in message and "y = np.sin(x)" in message and "^" in message
    assert "KeyError: 12345" in message and "bug in s2sgrad" in message


def test_optimizer_check_mode_catches_a_difference(make_module, monkeypatch):
    """S2SGRAD_CHECK_OPTIMIZER=1 runs the plain pair beside the optimised one; a pair
    that computes something else (here: another function's) is reported."""
    from s2sgrad import optimizer_check
    from s2sgrad.compiler import compile_function
    mod = make_module('''
import numpy as np

def f(x):
    return np.sum(np.sin(x) * x)

def g(x):
    return np.sum(np.sin(x) * x * 1.01)
''')
    monkeypatch.setattr(optimizer_check, "ENABLED", True)
    same = optimizer_check.checked_pair(compile_function(mod.f, (0,)),
                                        lambda: compile_function(mod.f, (0,), False))
    x = np.array([0.3, -0.2, 0.7])
    out, res = same.forward(x)
    np.testing.assert_allclose(same.adjoint(res, 1.0), np.sin(x) + x * np.cos(x))
    other = optimizer_check.checked_pair(compile_function(mod.f, (0,)),
                                         lambda: compile_function(mod.g, (0,), False))
    with pytest.raises(optimizer_check.OptimizerMismatch, match="the output"):
        other.forward(x)


_KEPT_BY_A_METHOD = '''
import logging
import numpy as np
import s2sgrad

LOG = logging.getLogger("s2sgrad-test-kept")

class Box:
    def __init__(self):
        self.items = []

    def keep(self, v):
        self.items.append(v)

def boxed(x):
    b = Box()
    b.keep(x * 2.0)          # (a method s2sgrad does not see into keeps x's value)
    return np.sum(b.items[0] ** 2)

def context(x):
    ctx = s2sgrad.function.Context((True,))
    ctx.save_for_backward(x * 2.0)
    y, = ctx.saved_tensors
    return np.sum(y ** 2)

def logged(x):
    y = np.sin(x)
    LOG.debug("y = %s", y)   # (reporting only: kept nowhere)
    return np.sum(y * x)
'''


@pytest.mark.parametrize("name", ["boxed", "context"])
def test_a_value_kept_by_a_method_s2sgrad_cannot_see_into_is_refused(make_module, name):
    # A method of another object, called with a differentiated value and its result
    # dropped, may keep the value: only a list of method names counted as writes, and
    # `ctx.save_for_backward(2 * x)` then `ctx.saved_tensors` gave a gradient of 0.
    m = make_module(_KEPT_BY_A_METHOD)
    with pytest.raises(s2sgrad.TransformError, match="in place|in ctx") as info:
        s2sgrad.grad(getattr(m, name))(np.array([0.3, 0.5]))
    assert info.value.lineno is not None


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_a_logging_call_on_a_differentiated_value_is_allowed(make_module, shape, rng):
    from conftest import assert_grads_match_differences
    m = make_module(_KEPT_BY_A_METHOD)
    assert_grads_match_differences(m.logged, [rng.standard_normal(shape)], (0,))
