"""A helper's result proven new ties nothing in its caller (compiler/returns.py,
returns_new): `h = layer(W, x); h[h < 0] = 0.0` writes into h alone, where every
call's result was taken to share memory with its arguments and the write was
refused. A result that may be a view, an argument or a global's still counts as
shared: the same writes are refused (or copied) as before. Gradients against
central differences on two shapes (a broadcast bias in the second).
"""
import numpy as np
import pytest
from conftest import check_jvp, check_vjp

import s2sgrad
from s2sgrad.compiler.returns import returns_new

MODULE = '''
import numpy as np

G = np.ones(3)


def layer(W, x, b):
    return W @ x + b * 0.0 - b


def layer_named(W, x, b):
    h = W @ x
    z = h - b
    return z


def squashed(W, x, b):
    return np.tanh(W @ x - b), np.exp(-(W @ x))


def relu_after_layer(W, x, b):
    h = layer(W, x, b)
    h[h < 0] = 0.0
    return np.sum(h ** 2)


def scaled_after_layer(W, x, b):
    h = layer_named(W, x, b)
    h *= 2.0
    h[0] = h[0] * x[0]
    return np.sum(np.sin(h)) + np.sum(x * b)


def unpacked_after(W, x, b):
    s, e = squashed(W, x, b)
    s[s < 0] = 0.0
    e[0] = 1.0
    return np.sum(s * e) + np.sum(np.cos(x))


def ratio(W, x, b):
    u = W @ x - b
    return u / (1.0 + np.sin(u) ** 2)   # (the quotient's rule keeps the quotient)


def squash(W, x, b):
    return np.tanh(W @ x - b)            # (tanh's rule keeps tanh)


def kept_result_scaled(W, x, b):
    h = ratio(W, x, b)
    h *= 1.5
    return np.sum(np.tanh(h))


def kept_result_updated_in_a_loop(W, x, b):
    h = squash(W, x, b)
    h += 0.5 * b
    c = np.cos(h)
    for _ in range(2):
        h = h + 0.3 * np.tanh(c * h)
    return np.sum(np.tanh(h))


def view_of(x):
    return x[1:]


def itself(x):
    return x


def reshaped(x):
    return np.reshape(x, (-1,))


def summed(a, b):
    return a + b


def into(a, b):
    return np.add(a, b, out=a)


def the_global(x):
    return G


def branching(x):
    if x[0] > 0:
        return x
    return -x


def via_helper(x):
    return itself(x) - 0.0 + view_of(x)[0]
'''

PROVEN = ["layer", "layer_named", "squashed", "ratio", "squash"]
NOT_PROVEN = ["view_of", "itself", "reshaped", "summed", "into", "the_global", "branching",
              "via_helper"]
SHAPES = [((3, 3), (3,), (3,)), ((3, 3), (3,), (1,))]


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    from conftest import import_source
    return import_source(tmp_path_factory.mktemp("new"), "s2s_new_results", MODULE)


@pytest.mark.parametrize("name", PROVEN)
def test_new_results_are_proven(m, name):
    assert returns_new(getattr(m, name))


@pytest.mark.parametrize("name", NOT_PROVEN)
def test_views_arguments_globals_and_joins_are_not(m, name):
    assert not returns_new(getattr(m, name))


def _args(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


@pytest.mark.parametrize("shapes", SHAPES, ids=["bias", "broadcast_bias"])
@pytest.mark.parametrize("name", ["relu_after_layer", "scaled_after_layer", "unpacked_after"])
def test_writes_into_a_helpers_new_result_are_differentiated(m, name, shapes):
    check_vjp(getattr(m, name), _args(shapes, len(name)), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ["relu_after_layer", "scaled_after_layer"])
def test_forward_mode(m, name):
    args = _args(SHAPES[0], 5)
    rng = np.random.default_rng(6)
    check_jvp(getattr(m, name), args, [rng.standard_normal(np.shape(a)) for a in args])


@pytest.mark.parametrize("helper", ["view_of", "itself", "reshaped"])
def test_a_write_into_what_may_be_the_argument_is_still_refused(m, make_module, helper):
    module = make_module(MODULE + f'''

def f(x):
    y = x * 2.0
    h = {helper}(y)
    h[0] = 0.0
    return np.sum(y * y) + np.sum(h)
''')
    with pytest.raises(s2sgrad.TransformError, match="shares memory"):
        s2sgrad.grad(module.f)(np.array([0.5, -1.0, 2.0]))


def test_a_result_the_helper_also_keeps_elsewhere_is_not_new(make_module):
    module = make_module('''
import numpy as np

KEPT = []


def keeps(W, x):
    h = W @ x
    KEPT.append(h)
    return h


def stores(W, x, box):
    h = W @ x
    box[0] = h
    return h


def passes_on(W, x):
    h = W @ x
    z = record(h)
    return h - z


def record(v):
    KEPT.append(v)
    return 0.0
''')
    for name in ("keeps", "stores", "passes_on"):
        assert not returns_new(getattr(module, name)), name


@pytest.mark.parametrize("witness", [True, False], ids=["witness", "no_witness"])
@pytest.mark.parametrize("shapes", SHAPES, ids=["bias", "broadcast_bias"])
@pytest.mark.parametrize("name", ["kept_result_scaled", "kept_result_updated_in_a_loop"])
def test_a_result_the_callee_keeps_is_copied_before_the_caller_writes_it(m, name, shapes,
                                                                          witness):
    """The callee's residuals hold the array it returns (a quotient's or tanh's rule
    keeps its result): `h *= 1.5` in the caller changed them too, and the callee's
    adjoint read the scaled values (found by the fuzzer, seed 13500: silently wrong
    with the witness off). The caller's h is a copy now where it is written later."""
    from conftest import numeric_grad
    f = getattr(m, name)
    args = _args(shapes, 3)
    grads = s2sgrad.grad(f, wrt=(0, 1, 2), witness=witness)(*[a.copy() for a in args])
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g, numeric_grad(f, [a.copy() for a in args], i),
                                   rtol=1e-6, atol=1e-8, err_msg=f"argument {i}")
