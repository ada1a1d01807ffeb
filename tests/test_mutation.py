"""In-place writes, augmented assignment, Python lists: gradients and semantics."""
import numpy as np
import pytest
from conftest import check_vjp, import_source

import s2sgrad

SOURCE = '''
import numpy as np
from s2sgrad.rules.registry import defvjp


def stack_rows(arrays):
    return np.stack(arrays)


# A sequence rule: the gradient of each item of a run-time list.
defvjp(stack_rows, "arrays", sequence=("arrays",), arrays="list(g)")


def fill_loop(x):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[i] = np.sin(x[i]) * x[i - 1]
    return np.sum(out * out)


def fill_slices(x, w):
    out = np.zeros((3, 4))
    out[0] = x * w
    out[1:, ::2] = np.tanh(x[::2])
    out[2, 1] = np.sum(x)
    return np.sum(out * np.cos(out))


def mask_write(x):
    y = x * 1.0
    y[x < 0] = 0.1 * x[x < 0]
    return np.sum(y * y)


def item_augmented(x):
    y = np.ones(4)
    for i in range(4):
        y[i] += x[i] * y[i - 1]
        y[i] *= 1.5
    return np.sum(y)


def overwrite_then_read(x):
    y = x * 2.0
    s = np.sum(y * y)
    y[0] = 3.0
    y[1] = y[0] * x[1]
    return s + np.sum(y * x)


def mutate_argument(x, v):
    x[0] = v * 2.0
    x[1] += v
    return np.sum(x * x)


def augassign_argument(x, w):
    x *= w
    x += 1.0
    return np.sum(np.sin(x))


def scalar_augassign(a, b):
    s = a
    for k in range(3):
        s += b * k
        s *= a
    return s


def list_literal(a, b):
    x = [1.0, a, 3.0]
    return x[1] * x[0] + x[2] * b * x[1]


def list_append(x):
    xs = []
    h = x
    for t in range(4):
        h = np.tanh(h * 0.7 + 0.2)
        xs.append(h)
    return np.sum(stack_rows(xs) ** 2) + np.sum(xs[1] * xs[3])


def list_append_sum(x):
    xs = []
    for t in range(3):
        xs.append(np.sin(x * t))
    total = 0.0
    for item in xs:
        total = total + np.sum(item * item)
    return total


def list_alias(x, y):
    a = [x * 2.0, y]
    b = a
    return np.sum(b[0] * a[1]) + np.sum(a[0] * b[1] * y)


def while_fill(x):
    out = np.zeros(5)
    k = 0
    v = x
    while k < 5:
        v = v * 0.9 + 0.05
        out[k] = v
        k += 1
    return np.sum(out * x)


def aliased(x):
    y = x * 2.0
    z = y
    y[0] = 5.0
    return np.sum(z * x)


def view_kept(x):
    y = x * 2.0
    row = y[0:2]
    y[0] = 5.0
    return np.sum(row * x[0:2])
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    module = import_source(tmp_path_factory.mktemp("mut"), "s2s_mutation", SOURCE)
    yield module
    from s2sgrad.rules.registry import REGISTRY
    REGISTRY.functions.pop(id(module.stack_rows), None)  # a test-only rule


@pytest.mark.parametrize("n", [3, 6])
def test_fill_array_in_loop(m, n, rng):
    check_vjp(m.fill_loop, [rng.standard_normal(n)])


@pytest.mark.parametrize("wshape", [(4,), ()])
def test_slice_writes(m, wshape, rng):
    check_vjp(m.fill_slices, [rng.standard_normal(4), rng.standard_normal(wshape)])


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_mask_write(m, shape, rng):
    check_vjp(m.mask_write, [rng.standard_normal(shape)])


def test_augmented_item_assignment(m, rng):
    check_vjp(m.item_augmented, [rng.standard_normal(4)])


def test_overwritten_values_are_restored_for_earlier_reads(m, rng):
    check_vjp(m.overwrite_then_read, [rng.standard_normal(3)])
    check_vjp(m.overwrite_then_read, [rng.standard_normal(5)])


@pytest.mark.parametrize("zero_d", [False, True])
def test_writes_into_argument_mutate_caller_and_differentiate_entry_value(m, zero_d, rng):
    x = rng.standard_normal(4)
    v = np.array(0.7) if zero_d else 0.7
    expected_x = x.copy()
    expected_value = m.mutate_argument(expected_x, v)
    caller = x.copy()
    value, (gx, gv) = s2sgrad.value_and_grad(m.mutate_argument, wrt=(0, 1))(caller, v)
    assert value == pytest.approx(expected_value)
    np.testing.assert_array_equal(caller, expected_x)  # mutated exactly as the original
    check_vjp(m.mutate_argument, [x, v])


@pytest.mark.parametrize("wshape", [(3,), ()])
def test_augmented_assignment_on_argument(m, wshape, rng):
    x = rng.standard_normal(3)
    w = rng.standard_normal(wshape) if wshape else 1.3
    check_vjp(m.augassign_argument, [x, w])
    caller = x.copy()
    s2sgrad.grad(m.augassign_argument)(caller, w)
    np.testing.assert_allclose(caller, x * w + 1.0)


def test_augmented_assignment_on_python_scalars(m):
    check_vjp(m.scalar_augassign, [0.8, 0.3])
    check_vjp(m.scalar_augassign, [np.float64(0.8), np.float64(0.3)])


def test_augmented_assignment_that_would_change_an_argument_array_is_refused(m):
    # With arrays, `s = a; s += ...` writes into the caller's `a`: refused, not wrong.
    with pytest.raises(s2sgrad.TransformError, match="also changes 'a'"):
        s2sgrad.grad(m.scalar_augassign, wrt=(0, 1))(np.array([0.8, 1.1]), np.array([0.3, 0.2]))


def test_list_literal_indexing(m):
    check_vjp(m.list_literal, [0.7, 1.9])
    check_vjp(m.list_literal, [np.array([0.7, 0.1]), np.array([1.9, -1.0])])


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_list_append_in_loop(m, shape, rng):
    check_vjp(m.list_append, [rng.standard_normal(shape)])


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_loop_over_appended_list(m, shape, rng):
    check_vjp(m.list_append_sum, [rng.standard_normal(shape)])


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_list_adjoints_add_item_by_item(m, shape, rng):
    # Two names for one list: adding their adjoints must not concatenate lists.
    check_vjp(m.list_alias, [rng.standard_normal(shape), rng.standard_normal(shape)])


def test_while_loop_fills_array(m, rng):
    check_vjp(m.while_fill, [0.4])
    check_vjp(m.while_fill, [-0.3])


def test_pullback_is_reusable_after_in_place_writes(m, rng):
    x = rng.standard_normal(5)
    out, pullback = s2sgrad.vjp(m.overwrite_then_read, x)
    (g1,) = pullback(1.0)
    (g2,) = pullback(1.0)
    np.testing.assert_array_equal(g1, g2)


@pytest.mark.parametrize("fname", ["aliased", "view_kept"])
def test_write_into_shared_array_is_rejected(m, fname):
    with pytest.raises(s2sgrad.TransformError, match="shares memory|view"):
        s2sgrad.grad(getattr(m, fname))(np.ones(3))
