"""Structured code: parameters as lists, tuples and dicts (pytrees), structures
built and read inside the function and its helpers, comprehensions, builtins on
numbers, models as objects and callables. Every gradient is checked leaf by
leaf against central differences, on two sets of shapes (the biases broadcast
against a batch)."""
import collections
import functools
import math

import numpy as np
import pytest

import s2sgrad
from s2sgrad import TransformError, ravel, tree_flatten, tree_map, tree_unflatten

EPS = 1e-6


def tree_fd(f, args, i):
    """Central differences of scalar f with respect to every leaf of args[i]."""
    leaves, treedef = tree_flatten(args[i])
    grads = []
    for k, leaf in enumerate(leaves):
        base = np.array(leaf, dtype=float)
        g = np.zeros_like(base)
        for j in np.ndindex(base.shape):
            total = 0.0
            for sign in (1.0, -1.0):
                moved = base.copy()
                moved[j] += sign * EPS
                new = list(leaves)
                new[k] = moved if np.ndim(leaf) else float(moved)
                call = list(args)
                call[i] = tree_unflatten(treedef, new)
                total += sign * f(*call)
            g[j] = total / (2 * EPS)
        grads.append(g)
    return tree_unflatten(treedef, grads)


def same_structure(a, b):
    if isinstance(b, dict):
        assert isinstance(a, dict) and list(a) == list(b), (a, b)
        for k in b:
            same_structure(a[k], b[k])
    elif isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), (type(a), type(b))
        for x, y in zip(a, b):
            same_structure(x, y)
    else:
        assert not isinstance(a, (list, tuple, dict))


def check_tree_grad(f, args, wrt=0, expected_like=None):
    g = s2sgrad.grad(f, wrt)(*args)
    ref = tree_fd(f, args, wrt)
    same_structure(g, expected_like if expected_like is not None else ref)
    for got, want in zip(tree_flatten(g)[0], tree_flatten(ref)[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return g


SHAPES = [(3, 4, 2, 5), (1, 3, 3, 2)]   # inputs, hidden, outputs, batch


def make_params(rng, shape):
    d, h, o, _ = shape
    return [(rng.normal(size=(d, h)) * 0.5, rng.normal(size=h) * 0.1),
            (rng.normal(size=(h, o)) * 0.5, rng.normal(size=o) * 0.1)]


@pytest.fixture(params=SHAPES, ids=lambda s: "x".join(map(str, s)))
def model(request):
    rng = np.random.default_rng(7)
    shape = request.param
    return make_params(rng, shape), rng.normal(size=(shape[3], shape[0]))


# -- structured arguments --------------------------------------------------------
def mlp(params, x):
    for W, b in params:
        x = np.tanh(x @ W + b)
    return np.sum(x ** 2)


def test_list_of_tuples_gives_a_list_of_tuples(model):
    params, x = model
    g = check_tree_grad(mlp, (params, x))
    assert isinstance(g, list) and all(isinstance(p, tuple) for p in g)


def unpack_by_index(params, x):
    W, b = params[0]
    h = np.tanh(x @ W + b)
    W, b = params[-1]
    return np.sum(np.sin(h @ W + b))


def test_unpacking_items_by_index(model):
    check_tree_grad(unpack_by_index, model)


def zipped(params, scales, x):
    total = 0.0
    for (W, b), s in zip(params, scales):
        x = np.tanh(x @ W + b) * s
        total = total + np.sum(x)
    return total


def test_nested_targets_over_zip(model):
    params, x = model
    check_tree_grad(zipped, (params, [0.5, 2.0], x))
    check_tree_grad(zipped, (params, [0.5, 2.0], x), wrt=1)


def dict_params(d, x):
    return np.sum(np.tanh(x @ d["w"] + d["b"]) ** 2) + d["scale"] * np.sum(d["w"])


def test_dict_gives_a_dict_with_the_same_keys_in_order(model):
    (W, b), _ = model[0]
    x = model[1]
    d = {"w": W, "scale": 1.5, "b": b}
    g = check_tree_grad(dict_params, (d, x))
    assert list(g) == ["w", "scale", "b"] and isinstance(g["scale"], float)


Pair = collections.namedtuple("Pair", "W b")


def named(p, x):
    W, b = p
    return np.sum(np.tanh(x @ W + b))


def test_namedtuple_keeps_its_type(model):
    (W, b), _ = model[0]
    g = check_tree_grad(named, (Pair(W, b), model[1]))
    assert type(g) is Pair


def with_constants(p, x):
    a, skip, n, flag = p
    return np.sum(a * x[0]) * n if flag else 0.0


def test_none_int_and_bool_leaves_are_constants():
    a, x = np.array([0.3, -0.2]), np.array([[1.0, 2.0]])
    g = s2sgrad.grad(with_constants)([a, None, 3, True], x)
    assert g[1] is None and g[2] is None and g[3] is None
    np.testing.assert_allclose(g[0], 3 * x[0])


def test_value_and_grad_and_vjp_with_structures(model):
    params, x = model
    value, g = s2sgrad.value_and_grad(mlp)(params, x)
    assert np.isclose(value, mlp(params, x))
    ref = tree_fd(mlp, (params, x), 0)
    for got, want in zip(tree_flatten(g)[0], tree_flatten(ref)[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    def layers(params, x):   # a structured output: its cotangent has its structure
        out = []
        for W, b in params:
            x = np.tanh(x @ W + b)
            out.append(x)
        return {"hidden": out[0], "last": out[1]}
    out, pullback = s2sgrad.vjp(layers, params, x, wrt=0)
    v = {"hidden": np.ones_like(out["hidden"]), "last": 2 * np.ones_like(out["last"])}
    gp = pullback(v)            # wrt=0: the gradient itself, not a tuple

    def dotted(params):
        o = layers(params, x)
        return np.sum(o["hidden"]) + 2 * np.sum(o["last"])
    ref = tree_fd(dotted, (params,), 0)
    for got, want in zip(tree_flatten(gp)[0], tree_flatten(ref)[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        pullback({"hidden": v["hidden"]})


def test_functional_vjp_keeps_torchs_tuple_contract():
    with pytest.raises(TypeError, match="s2sgrad.vjp or s2sgrad.grad"):
        s2sgrad.functional.vjp(lambda p: np.sum(p[0]), [np.ones(2)])


# -- structures through helpers and loops ------------------------------------------
def doubled(p):
    return [(W * 2, b) for W, b in p]


def layer_outputs(p, x):
    q = doubled(p)
    return {"out": mlp(q, x), "q": q}


def two_levels(params, x):
    r = layer_outputs(params, x)
    return r["out"] + np.sum(r["q"][0][0]) + np.sum(r["q"][1][1] ** 2)


def test_structures_through_two_levels_of_helpers(model):
    check_tree_grad(two_levels, model)


def scaled_copy(p, s):
    out = []
    for W, b in p:
        out.append((W * s, b + s))
    return out


def through_helper_loop(params, x):
    total = 0.0
    for k in range(2):
        params = scaled_copy(params, 0.5 + k)
        total = total + mlp(params, x)
    return total


def test_helpers_returning_structures_in_a_loop(model):
    check_tree_grad(through_helper_loop, model)


def extended(params, x):
    parts = []
    parts.extend([np.tanh(x @ params[0][0]), params[0][1]])
    parts.extend(params[1])
    return sum(np.sum(p ** 2) for p in parts) + len(parts)


def test_extend_with_a_literal_and_a_list(model):
    check_tree_grad(extended, model)


def dict_loops(d):
    total = 0.0
    for _k, v in d.items():
        total = total + np.sum(v ** 2)
    for v in d.values():
        total = total + np.sum(np.sin(v))
    for k in d.keys():
        total = total + np.sum(d[k]) * 0.5
    return total


def test_dict_items_values_keys_loops(model):
    (W, b), _ = model[0]
    check_tree_grad(dict_loops, ({"w": W, "b": b},))


def over_a_dict(d):
    total = 0.0
    for k in d:
        total = total + np.sum(np.cos(d[k]))
    return total


def test_iterating_a_dict_argument_walks_its_keys(model):
    (W, b), _ = model[0]
    g = check_tree_grad(over_a_dict, ({"w": W, "b": b},))
    assert list(g) == ["w", "b"]
    numbers = s2sgrad.grad(lambda d: sum(d[k] ** 2 for k in d))({"a": 1.5, "b": -2.0})
    assert numbers == {"a": 3.0, "b": -4.0}


# -- comprehensions and generator expressions --------------------------------------
def comprehensions(params, x):
    hidden = [np.tanh(x @ W) for W, _ in params if W.shape[0] == x.shape[1]]
    penalty = sum(np.sum(w ** 2) for layer in params for w in layer)
    biases = {k: b * 2 for k, (_, b) in enumerate(params)}
    return np.sum(hidden[0]) + 0.1 * penalty + sum(np.sum(v) for v in biases.values())


def test_comprehensions_with_conditions_and_nesting(model):
    check_tree_grad(comprehensions, model)


def dict_comprehension(d):
    e = {k: v * 2 for k, v in d.items() if k != "skip"}
    return sum(np.sum(np.sin(v)) for v in e.values()) + np.sum(d["skip"])


def test_dict_comprehension(model):
    (W, b), _ = model[0]
    check_tree_grad(dict_comprehension, ({"w": W, "skip": b, "b": b * 3},))


# -- builtins on numbers -----------------------------------------------------------
def on_numbers(a, b):
    c = max(a, b) + min(a, b) * abs(a - 2 * b) + pow(a, 2) + math.sin(a) + float(b) ** 3
    d = e = c * a
    return d + e + sum([a, b, c]) + max([a * 2, b, 0.1]) + math.exp(b) * math.sqrt(a)


@pytest.mark.parametrize("point", [(1.3, 0.4), (0.7, 1.9)])
def test_builtins_on_python_floats_and_chained_assignment(point):
    check_tree_grad(on_numbers, point, wrt=0)
    check_tree_grad(on_numbers, point, wrt=1)


def tuple_of_floats(p):
    a, b = p
    return max(a, b) ** 2 + min(a, b)


def test_a_tuple_of_floats_gives_a_tuple_of_floats():
    g = check_tree_grad(tuple_of_floats, ((1.5, -0.5),))
    assert isinstance(g, tuple) and all(isinstance(v, float) for v in g)


# -- models as objects and callables -----------------------------------------------
class Model:
    def __init__(self, scale):
        self.scale = scale

    def loss(self, W, x):
        return self.scale * np.sum(np.tanh(x @ W) ** 2)

    def __call__(self, W, x):
        return Model.loss(self, W, x) + np.sum(W)


def test_bound_method_callable_instance_and_partial(model):
    (W, _), _ = model[0]
    x = model[1]
    m = Model(2.0)
    check_tree_grad(m.loss, (W, x))
    check_tree_grad(m, (W, x))
    check_tree_grad(functools.partial(Model.loss, m), (W, x))
    check_tree_grad(functools.partial(m.loss, x=x), (W,))
    g = s2sgrad.grad(m.loss, wrt=-1)(W, x)     # counted from the method's own arguments
    np.testing.assert_allclose(g, tree_fd(m.loss, (W, x), 1), rtol=1e-5, atol=1e-6)
    m.scale = 3.0                               # attributes are read when called
    check_tree_grad(m.loss, (W, x))


GLOBAL_MODEL = Model(0.5)
SCALED = functools.partial(Model.loss, GLOBAL_MODEL)


def calls_objects(W, x):
    return GLOBAL_MODEL.loss(W, x) + GLOBAL_MODEL(W, x) + SCALED(W * 2, x)


def test_methods_instances_and_partials_called_inside(model):
    (W, _), _ = model[0]
    check_tree_grad(calls_objects, (W, model[1]))


def test_rebinding_the_instance_or_the_method_compiles_again(model):
    global GLOBAL_MODEL
    (W, _), _ = model[0]
    x = model[1]
    before = GLOBAL_MODEL
    g = s2sgrad.grad(calls_objects)
    first = g(W, x)
    try:
        GLOBAL_MODEL = Model(5.0)
        np.testing.assert_allclose(g(W, x), tree_fd(calls_objects, (W, x), 0),
                                   rtol=1e-5, atol=1e-6)
        assert not np.allclose(g(W, x), first)
    finally:
        GLOBAL_MODEL = before


def local_lambda(W, x):
    act = lambda v: np.sin(v) ** 2 * W[0, 0]  # noqa: E731 - reads W when called
    h = act(x @ W)
    W = W * 2
    return np.sum(h) + np.sum(act(x @ W))


def test_lambda_bound_to_a_local_name(model):
    (W, _), _ = model[0]
    check_tree_grad(local_lambda, (W, model[1]))


# -- wrt validated like JAX's argnums ----------------------------------------------
def test_wrt_negative_duplicates_and_non_integers():
    f = lambda a, b: np.sum(a * b)  # noqa: E731
    a, b = np.ones(2), np.arange(2.0)
    np.testing.assert_allclose(s2sgrad.grad(f, wrt=-1)(a, b), a)
    with pytest.raises(ValueError, match="more than once"):
        s2sgrad.grad(f, wrt=(0, 0))
    with pytest.raises(TypeError, match="tuple of ints"):
        s2sgrad.grad(f, wrt=1.0)
    with pytest.raises(ValueError, match="out of range"):
        s2sgrad.grad(f, wrt=-3)


# -- the tree helpers --------------------------------------------------------------
def test_tree_helpers_round_trip_and_ravel_for_scipy(model):
    params, x = model
    leaves, treedef = tree_flatten(params)
    assert len(leaves) == 4
    back = tree_unflatten(treedef, leaves)
    same_structure(back, params)
    halved = tree_map(lambda p: p / 2, params)
    np.testing.assert_allclose(halved[1][0], params[1][0] / 2)
    summed = tree_map(lambda p, q: p + q, params, halved)
    np.testing.assert_allclose(summed[0][1], params[0][1] * 1.5)
    vector, unravel = ravel(params)
    assert vector.ndim == 1 and vector.size == sum(np.size(v) for v in leaves)
    same_structure(unravel(vector), params)

    def flat_loss(v):
        return mlp(unravel(v), x)
    value, g = flat_loss(vector), ravel(s2sgrad.grad(mlp)(params, x))[0]
    numeric = np.array([(flat_loss(vector + EPS * e) - flat_loss(vector - EPS * e)) / (2 * EPS)
                        for e in np.eye(vector.size)])
    np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-6)
    assert np.isclose(value, mlp(params, x))


def fields_by_name(params, x):
    total = 0.0
    for layer in params:
        x = np.tanh(x @ layer.W + layer.b)
        total = total + np.sum(x)
    return total


def test_namedtuple_fields_read_by_name(model):
    params, x = model
    g = check_tree_grad(fields_by_name, ([Pair(W, b) for W, b in params], x))
    assert all(type(p) is Pair for p in g)


def test_refused_structured_code_says_why():
    class Holder:
        def __init__(self, W):
            self.W = W

    def attribute_of_an_object(p, x):
        return np.sum(x @ p[0].W)
    with pytest.raises(TypeError, match=r"argument 0\[0\] is a Holder"):
        s2sgrad.grad(attribute_of_an_object)([Holder(np.ones((2, 2)))], np.ones((1, 2)))
    # As a constant (not differentiated) an object's attributes are read as usual.
    g = s2sgrad.grad(attribute_of_an_object, wrt=1)([Holder(np.eye(2))], np.ones((1, 2)))
    np.testing.assert_allclose(g, np.ones((1, 2)))

    def concatenated(x):
        parts = [x] + [x * 2]
        return np.sum(parts[1])
    with pytest.raises(TransformError, match="concatenating lists") as err:
        s2sgrad.grad(concatenated)(np.ones(2))
    assert "^" in str(err.value)


Layer = collections.namedtuple("Layer", ["W", "b"])


def builds_records(x):
    layers = [Layer(x * k, b=x ** 2) for k in (1.0, 2.0)]
    last = Layer(layers[-1].W * 3.0, 0.5)
    return sum(np.sum(np.tanh(ly.W) * ly.b) for ly in layers) + np.sum(last.W) * last.b


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_namedtuples_built_inside_and_their_fields(shape):
    x = np.random.default_rng(1).normal(size=shape)
    check_tree_grad(builds_records, (x,))
    _, tangent = s2sgrad.functional.jvp(builds_records, x, np.ones(shape))
    np.testing.assert_allclose(tangent, np.sum(tree_fd(builds_records, (x,), 0)), rtol=1e-5)


THIRD_THROUGH_DICTS = '''
import numpy as np
import s2sgrad


def g(x, y):
    L = [{"a": np.sum(np.tanh(y)), "b": x}]
    return np.tanh(L[0]["a"]) * x + np.sum(L[0]["b"] * y)


def h1(x, y):
    return np.sum(s2sgrad.grad(g, wrt=1)(x, y) * np.cos(y))


def h2(x, y):
    return np.sum(s2sgrad.grad(h1, wrt=1)(x, y) * np.cos(y))
'''


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_third_derivative_through_a_list_of_dicts(make_module, shape):
    """The cotangent of a dict broadcast back (the transpose of unbroadcast, in the
    derivatives of an adjoint) was a 0-d object array: a term of the third
    derivative was lost (found by the fuzzer, seed 4101)."""
    m = make_module(THIRD_THROUGH_DICTS)
    x, y = 0.17, np.linspace(-0.6, 0.8, int(np.prod(shape))).reshape(shape)
    got = s2sgrad.grad(m.h2, wrt=1)(x, y)
    eps = 1e-5
    expected = np.zeros(shape)
    for k in np.ndindex(shape):
        e = np.zeros(shape)
        e[k] = eps
        expected[k] = (m.h2(x, y + e) - m.h2(x, y - e)) / (2 * eps)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)
