"""functional.vjp keeps torch.autograd.functional.vjp's contract."""
import numpy as np
import pytest
from conftest import import_source, numeric_vjp

from s2sgrad import functional

SOURCE = '''
import numpy as np


def exp_reducer(x):
    return np.exp(x).sum(axis=1)


def adder(x, y):
    return 2 * x + 3 * y


def two_outputs(x, y):
    return x * y, np.sin(x)


def scalar(x):
    return np.sum(x ** 2)


def floors(x, y):
    return np.floor(x) * y


def ignores(x, y):
    return x * 2.0
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("functional"), "s2s_functional_cases", SOURCE)


@pytest.mark.parametrize("shape", [(4, 4), (2, 5)])
def test_exp_reducer(m, shape, rng):
    x = rng.random(shape)
    v = rng.standard_normal(shape[0])
    out, vjp = functional.vjp(m.exp_reducer, x, v)
    np.testing.assert_allclose(out, np.exp(x).sum(axis=1))
    np.testing.assert_allclose(vjp, numeric_vjp(m.exp_reducer, [x], v, 0), rtol=1e-6)
    assert isinstance(vjp, np.ndarray)


def test_tuple_inputs_give_tuple_vjp(m, rng):
    x, y = rng.random(2), rng.random(2)
    out, vjp = functional.vjp(m.adder, (x, y), np.ones(2))
    assert isinstance(vjp, tuple) and len(vjp) == 2
    np.testing.assert_allclose(vjp[0], [2.0, 2.0])
    np.testing.assert_allclose(vjp[1], [3.0, 3.0])


def test_tuple_of_one_input_stays_a_tuple(m, rng):
    x = rng.random((3, 2))
    _, vjp = functional.vjp(m.exp_reducer, (x,), np.ones(3))
    assert isinstance(vjp, tuple) and len(vjp) == 1


def test_tuple_outputs_take_tuple_v(m, rng):
    x, y = rng.random(3), rng.random(3)
    v = (rng.standard_normal(3), rng.standard_normal(3))
    out, (gx, gy) = functional.vjp(m.two_outputs, (x, y), v)
    assert isinstance(out, tuple)
    np.testing.assert_allclose(gx, numeric_vjp(m.two_outputs, [x, y], v, 0), rtol=1e-6)
    np.testing.assert_allclose(gy, numeric_vjp(m.two_outputs, [x, y], v, 1), rtol=1e-6)


def test_v_may_be_omitted_for_single_element_output(m, rng):
    x = rng.random(3)
    out, vjp = functional.vjp(m.scalar, x)
    np.testing.assert_allclose(vjp, 2 * x)


def test_v_none_with_many_elements_is_an_error(m, rng):
    with pytest.raises(RuntimeError) as err:
        functional.vjp(m.exp_reducer, rng.random((3, 3)))
    assert str(err.value) == ("The vector v can only be None if the user-provided function "
                              "returns a single array with a single element.")


def test_v_wrong_length(m, rng):
    x, y = rng.random(3), rng.random(3)
    with pytest.raises(RuntimeError) as err:
        functional.vjp(m.two_outputs, (x, y), (np.ones(3),))
    assert str(err.value) == "v is a tuple of invalid length: should be 2 but got 1."


def test_v_wrong_shape(m, rng):
    with pytest.raises(RuntimeError) as err:
        functional.vjp(m.exp_reducer, rng.random((4, 4)), np.ones(3))
    assert str(err.value) == "v has invalid size: should be (4,) but got (3,)."


def test_v_wrong_shape_in_tuple_output(m, rng):
    x, y = rng.random(3), rng.random(3)
    with pytest.raises(RuntimeError) as err:
        functional.vjp(m.two_outputs, (x, y), (np.ones(3), np.ones(2)))
    assert str(err.value) == "Entry 1 in v has invalid size: should be (3,) but got (2,)."


@pytest.mark.parametrize("bad", [[1.0, 2.0], "x", {"a": 1}])
def test_inputs_must_be_arrays(m, bad):
    with pytest.raises(TypeError) as err:
        functional.vjp(m.scalar, bad)
    message = str(err.value)
    assert message.startswith("The inputs given to vjp must be either an array or a tuple of "
                              f"arrays but the given inputs has type {type(bad).__name__}.")
    # PyTorch's sentence, and for a list or dict where to go instead
    assert ("use s2sgrad.vjp or s2sgrad.grad" in message) == isinstance(bad, (list, dict))


def test_integer_inputs_are_rejected(m):
    with pytest.raises(TypeError, match="only floating-point inputs can be differentiated"):
        functional.vjp(m.scalar, np.arange(3))


def test_python_float_counts_as_zero_d_array(m):
    out, vjp = functional.vjp(m.scalar, 3.0)
    assert vjp == pytest.approx(6.0)


def test_strict_raises_for_independent_input_with_reason(m, rng):
    x, y = rng.random(3), rng.random(3)
    with pytest.raises(RuntimeError) as err:
        functional.vjp(m.floors, (x, y), np.ones(3), strict=True)
    text = str(err.value)
    assert text.startswith("The output of the user-provided function is independent of "
                           "input 0. This is not allowed in strict mode.")
    import inspect
    line = inspect.getsourcelines(m.floors)[1] + 1
    assert f"only reaches the output through np.floor at line {line}" in text


def test_strict_reports_unused_input(m, rng):
    with pytest.raises(RuntimeError, match="independent of input 1"):
        functional.vjp(m.ignores, (rng.random(2), rng.random(2)), np.ones(2), strict=True)


def test_non_strict_gives_zeros_for_independent_inputs(m, rng):
    x, y = rng.random(3), rng.random(3)
    _, (gx, gy) = functional.vjp(m.floors, (x, y), np.ones(3))
    assert not gx.any()
    np.testing.assert_allclose(gy, np.floor(x))


def test_create_graph_gives_same_values(m, rng):
    x = rng.random((4, 4))
    v = np.ones(4)
    a = functional.vjp(m.exp_reducer, x, v)
    b = functional.vjp(m.exp_reducer, x, v, create_graph=True)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
