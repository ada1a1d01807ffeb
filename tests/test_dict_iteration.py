"""A dict walked by zip(), enumerate(), max() and min(): Python walks its keys.

`for i, k in enumerate(d)`, `for k, v in zip(d, x)`, `d[max(d)]` and `min(d)` over a
dict built in the function were read by position (`d[0]`, `d[1:]`): a KeyError
where the keys are strings (found by probing), and the items instead of the keys
where they are numbers. Now each walks the keys, as `for k in d` already did.

And `for k in d: s += k * d[k]` over a dict the compiler does not see built (a
helper's parameter): the loop walks the keys through _s2s_loop_items, whose
adjoint handed the keys' cotangents back to the dict as a list
(InternalError: "cotangents of different structures meet: dict and list"); now a
dict gets none back from its keys.
"""
import numpy as np
import pytest
from conftest import assert_grads_match_differences, import_source, numeric_grad

from s2sgrad import functional

SOURCE = '''
import numpy as np


def enumerated_keys(x, w):
    d = {"b": np.sum(x ** 2), "a": np.sum(x * w)}
    s = 0.0
    for i, k in enumerate(d):
        s = s + d[k] * (i + 1.0)
    return s


def keys_zipped_with_rows(x, w):
    d = {"first": np.tanh(x[0] * w), "second": x[1] ** 2}
    s = 0.0
    for k, row in zip(d, x):
        s = s + np.sum(d[k] * row)
    return s


def largest_and_smallest_key(x, w):
    d = {"a": np.sum(x ** 2), "c": np.sum(np.sin(x) * w), "b": np.sum(w)}
    return d[max(d)] * 2.0 + d[min(d)]


def number_keys(x, w):
    d = {2: np.sum(x * w), 0: np.sum(x ** 2), 1: np.sum(w ** 2)}
    s = 0.0
    for i, k in enumerate(d):
        s = s + d[k] * k + i * np.sum(x)
    return s * max(d) + d[min(d)]


def number_keys_walked(d, x):
    s = 0.0
    for k in d:
        s = s + k * np.sum(d[k] * x)
    return s


def number_keys_in_a_helper(x, w):
    return number_keys_walked({1: np.sin(x) * w, 3: x ** 2}, w)


def max_of_an_array_and_of_a_generator(x, w):
    rows = np.tanh(x * w)
    return max(np.sum(rows, axis=1)) + min(np.sum(r * w) for r in rows)
'''

NAMES = ["enumerated_keys", "keys_zipped_with_rows", "largest_and_smallest_key",
         "number_keys", "number_keys_in_a_helper", "max_of_an_array_and_of_a_generator"]
SHAPES = [((2, 3), (3,)), ((3, 2), (1, 2))]   # (the second broadcasting: w against rows)


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("dict_iteration"), "dict_iteration", SOURCE)


def _args(shapes):
    rng = np.random.default_rng(5)
    return [rng.uniform(0.2, 1.1, s) for s in shapes]


@pytest.mark.parametrize("witness", [True, False], ids=["witness", "no_witness"])
@pytest.mark.parametrize("shapes", SHAPES, ids=["same", "broadcast"])
@pytest.mark.parametrize("name", NAMES)
def test_a_dict_walked_by_builtins_matches_differences(mod, name, shapes, witness):
    assert_grads_match_differences(getattr(mod, name), _args(shapes), (0, 1), witness=witness)


@pytest.mark.parametrize("name", NAMES)
def test_forward_mode_of_a_dict_walked_by_builtins(mod, name):
    x, w = _args(SHAPES[0])
    v = np.random.default_rng(8).standard_normal(x.shape)
    f = getattr(mod, name)
    _, tangent = functional.jvp(lambda a: f(a, w), x, v)
    np.testing.assert_allclose(tangent, np.sum(numeric_grad(f, [x, w], 0) * v),
                               rtol=1e-6, atol=1e-8)
