"""Branches, loops, early returns, break/continue: gradients against finite differences."""
import numpy as np
import pytest
from conftest import check_vjp, import_source

import s2sgrad

SOURCE = '''
import numpy as np


def branch(x):
    if np.sum(x) > 0:
        y = np.sin(x)
    elif np.sum(x) > -1:
        y = x * x
    else:
        y = np.exp(x)
    return np.sum(y * x)


def branch_reassigns(x, w):
    y = x * w
    if np.mean(x) > 0:
        y = y * 2.0
        z = y + w
    else:
        z = w
    return np.sum(y * z)


def ifexp(x):
    y = np.sin(x) if np.sum(x) > 0 else np.cos(x) * 2.0
    return np.sum(y)


def early_return(x):
    if np.max(x) > 1.0:
        return np.sum(x ** 2)
    y = np.tanh(x)
    if np.min(x) < -1.0:
        return np.sum(y) * 3.0
    return np.sum(y * x)


def range_loop(x, n):
    h = x
    for i in range(n):
        h = np.tanh(h * 1.5 + 0.1)
    return np.sum(h)


def range_loop_index(x):
    s = 0.0
    for i in range(1, len(x), 2):
        s = s + x[i] * x[i - 1]
    return s


def flag_assigned(x):
    t = 0.0
    for v in x.ravel():
        inside = -0.5 < v <= 0.5
        both = v > -1.0 and not v > 1.0
        if inside:
            t = t + v ** 2
        elif both:
            t = t + np.sin(v) * 3.0
        else:
            t = t + abs(v)
        t = t + inside * v
    return t


def loop_over_rows(m, w):
    total = 0.0
    for row in m:
        total = total + np.sum(np.tanh(row @ w))
    return total


def loop_zip_enumerate(a, b):
    s = 0.0
    for i, (u, v) in enumerate(zip(a, b)):
        s = s + u * v * (i + 1)
    return s


def loop_reversed(x, w):
    s = 0.0
    for r in reversed(x):
        s = s * w + np.sin(r)
    return np.sum(s)


def loop_enumerate_reversed_zip(a, b):
    s = 0.0
    for i, (u, v) in enumerate(zip(reversed(a), b)):
        s = s + np.tanh(u) * v * (i + 1)
    return np.sum(s)


def loop_reversed_list(x):
    parts = [x, 2.0 * x, np.sin(x)]
    s = 0.0
    for p in reversed(parts):
        s = s * 0.5 + p
    return np.sum(s * s)


def loop_over_list(x):
    s = 0.0
    for k in [0.5, 1.0, 2.0]:
        s = s + np.sum(np.sin(x * k))
    return s


def while_loop(x):
    y = x
    steps = 0
    while np.sum(y * y) < 10.0 and steps < 50:
        y = y * 1.3 + 0.1
        steps = steps + 1
    return np.sum(y)


def break_continue(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] < -0.5:
            continue
        s = s + np.sin(x[i]) * s + x[i]
        if s > 2.0:
            break
    return s


def nested_loops(x, n):
    acc = x
    for i in range(n):
        for j in range(2):
            acc = acc * 0.9 + np.sin(acc) * (j + 1)
    return np.sum(acc)


def loop_with_branch(x):
    v = x
    for t in range(6):
        if np.sum(v) > 0:
            v = v * 0.8 - 0.3
        else:
            v = np.minimum(np.maximum(v, -1.0), 1.0) * 1.1 + 0.2
    return np.sum(v * v)


def return_in_loop(x):
    s = x * 0.0
    for i in range(5):
        s = s + np.tanh(x * i)
        if np.sum(s) > 1.5:
            return np.sum(s * s)
    return np.sum(s)


def scalar_recurrence(a, x0):
    x = x0
    for t in range(200):
        x = x + 0.01 * np.sin(a * x)
    return x


def inner_trips_vary(x, a):
    n = 0
    while np.sum(a * a) < 4.0 and n < 3:
        k = 0
        while np.sum(x * x) < 4.0 and k < 3:
            x = x * 1.5 + 0.4
            k += 1
        a = a * 1.1
        n += 1
    return np.sum(x * a)


def accumulate_in_loop(x):
    acc = np.zeros(x.shape)
    for i in range(4):
        acc += x * i
    return np.sum(acc * acc)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("cf"), "s2s_control_flow", SOURCE)


@pytest.mark.parametrize("scale", [1.0, -0.3, -3.0])
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_if_elif_else(m, scale, shape, rng):
    x = rng.uniform(0.2, 1.0, shape) * scale
    check_vjp(m.branch, [x])


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,))])
def test_branch_reassigns_variables(m, sign, shapes, rng):
    x = np.abs(rng.standard_normal(shapes[0])) * sign
    check_vjp(m.branch_reassigns, [x, rng.standard_normal(shapes[1])])


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_conditional_expression(m, sign, shape, rng):
    check_vjp(m.ifexp, [np.abs(rng.standard_normal(shape)) * sign])


@pytest.mark.parametrize("x", [[2.0, 0.5], [0.1, 0.2], [-2.0, 0.5], [0.3, -0.2, 0.1]])
def test_early_and_multiple_returns(m, x):
    check_vjp(m.early_return, [np.array(x)])


@pytest.mark.parametrize("n", [0, 1, 5])
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_range_loop(m, n, shape, rng):
    check_vjp(m.range_loop, [rng.standard_normal(shape), n], wrt=[0])


@pytest.mark.parametrize("size", [5, 6])
def test_range_with_step_and_indexing(m, size, rng):
    check_vjp(m.range_loop_index, [rng.standard_normal(size)])


@pytest.mark.parametrize("shapes", [((4, 3), (3, 2)), ((1, 2), (2,))])
def test_loop_over_array_rows(m, shapes, rng):
    check_vjp(m.loop_over_rows, [rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])])


@pytest.mark.parametrize("sizes", [(4, 4), (3, 5)])
def test_zip_and_enumerate(m, sizes, rng):
    check_vjp(m.loop_zip_enumerate, [rng.standard_normal(sizes[0]),
                                     rng.standard_normal(sizes[1])])


@pytest.mark.parametrize("shapes", [((4,), ()), ((3, 2), (2,))])
def test_reversed_iteration_over_array(m, shapes, rng):
    # Rows of x, last first; w broadcasts against each row (a scalar, then a vector).
    check_vjp(m.loop_reversed, [rng.standard_normal(shapes[0]),
                                rng.standard_normal(shapes[1]) * 0.5])


@pytest.mark.parametrize("sizes", [((4,), (4,)), ((5, 2), (3, 2))])
def test_reversed_inside_zip_and_enumerate(m, sizes, rng):
    # Unequal lengths: zip stops at the shorter, reversed(a) starts at a's last row.
    check_vjp(m.loop_enumerate_reversed_zip, [rng.standard_normal(sizes[0]),
                                              rng.standard_normal(sizes[1])])


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_reversed_over_a_list_of_arrays(m, shape, rng):
    check_vjp(m.loop_reversed_list, [rng.standard_normal(shape)])


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_loop_over_constant_list(m, shape, rng):
    check_vjp(m.loop_over_list, [rng.standard_normal(shape)])


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_while_with_data_dependent_exit(m, shape, rng):
    check_vjp(m.while_loop, [rng.uniform(0.1, 0.5, shape)])


@pytest.mark.parametrize("x", [[0.3, -0.9, 0.5, 1.5, 0.2], [-1.0, 0.1, 0.2], [0.9, 0.8, 0.7, 0.6]])
def test_break_and_continue(m, x):
    check_vjp(m.break_continue, [np.array(x)])


@pytest.mark.parametrize("n", [0, 3])
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_nested_loops(m, n, shape, rng):
    check_vjp(m.nested_loops, [rng.standard_normal(shape), n], wrt=[0])


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
def test_loop_containing_branch(m, shape, rng):
    check_vjp(m.loop_with_branch, [rng.standard_normal(shape)])


@pytest.mark.parametrize("scale", [0.1, 1.0])
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_return_inside_loop(m, scale, shape, rng):
    check_vjp(m.return_in_loop, [rng.uniform(0.1, 1.0, shape) * scale])


@pytest.mark.parametrize("x", [[0.07, 0.08], [1.0, 1.2], [0.5, 0.5]])
def test_nested_while_with_inner_trip_count_varying_per_outer_iteration(m, x):
    # Found by the property test: the inner trip count must be saved per outer step.
    check_vjp(m.inner_trips_vary, [np.array(x), 0.3])


def test_scalar_recurrence_with_python_floats(m):
    check_vjp(m.scalar_recurrence, [1.3, 0.4])


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_augmented_assignment_on_owned_array(m, shape, rng):
    check_vjp(m.accumulate_in_loop, [rng.standard_normal(shape)])


def test_loop_code_is_readable(m):
    src = s2sgrad.source(m.range_loop)
    assert "h_stack.append(h)" in src
    assert "h = h_stack.pop()" in src
    assert "for i in reversed(i_range):" in src
    assert "# line " in src


def test_scalar_loop_keeps_only_what_it_needs(m):
    src = s2sgrad.source(m.scalar_recurrence, wrt=(0, 1))
    forward = src.split("def scalar_recurrence_adjoint")[0]
    # sin(a*x) needs a*x (for cos) and x; nothing else may be kept per step.
    assert forward.count(".append(") <= 2, forward
    assert "lambda" not in src


def test_pullback_of_a_loop_is_reusable(m, rng):
    x = rng.standard_normal(3)
    out, pullback = s2sgrad.vjp(m.range_loop, x, 4, wrt=0)
    g1 = pullback(1.0)
    g2 = pullback(2.0)
    np.testing.assert_allclose(g2, 2.0 * g1)
    np.testing.assert_array_equal(pullback(1.0), g1)


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_comparison_assigned_to_a_name_is_a_flag(m, shape, rng):
    # A chained comparison or and/or of comparisons kept in a name carries no gradient
    # though its operands do; it was refused ("no gradient rule for Compare"), and so
    # was the Hessian of any function with such a test (its adjoint keeps the flag).
    x = np.linspace(-1.4, 1.3, int(np.prod(shape))).reshape(shape) + 0.03
    check_vjp(m.flag_assigned, [x])
    u = rng.standard_normal(shape)
    _, (hv,) = s2sgrad.functional.hvp(m.flag_assigned, (x,), (u,))
    grad = s2sgrad.grad(m.flag_assigned)
    expected = (grad(x + 1e-6 * u) - grad(x - 1e-6 * u)) / 2e-6
    np.testing.assert_allclose(hv, expected, rtol=1e-5, atol=1e-6)
