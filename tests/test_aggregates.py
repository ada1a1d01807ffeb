"""Lists, tuples and dicts of arrays read as the arrays they hold (compiler.aggregates).

A call given structures runs the function written over their arrays: the view's text
(golden, for the constructs it rewrites), where it declines (anything the function
could tell from a literal), and its gradients against central differences, through
grad, vjp and jit=True, on two shapes each.
"""
import ast
import warnings

import numpy as np
import pytest
from conftest import leaf_differences, numeric_grad

import s2sgrad
from s2sgrad.compiler import aggregates


def _text(f, *args):
    flat = aggregates.flattened(f, args)
    return None if flat is None else ast.unparse(flat.fn.__s2sgrad_tree__)


def _each_leaf(grad, value):
    """(gradient, array) pairs of a structure and its gradient, item by item."""
    if isinstance(value, dict):
        assert isinstance(grad, dict) and list(grad) == list(value)
        for k in value:
            yield from _each_leaf(grad[k], value[k])
    elif isinstance(value, (list, tuple)):
        assert type(grad) is type(value) and len(grad) == len(value)
        for g, v in zip(grad, value):
            yield from _each_leaf(g, v)
    else:
        yield grad, value


def _check_against_differences(f, args, wrt, **options):
    got = s2sgrad.grad(f, wrt, **options)(*args)
    got = got if isinstance(wrt, tuple) else (got,)
    for g, p in zip(got, wrt if isinstance(wrt, tuple) else (wrt,)):
        for g_leaf, leaf in _each_leaf(g, args[p]):
            if isinstance(leaf, np.ndarray):
                np.testing.assert_allclose(g_leaf, leaf_differences(f, args, leaf),
                                           rtol=1e-6, atol=1e-8)
    return got


# -- functions of structures ------------------------------------------------------------
def sigmoid(a):
    return 0.5 * (np.tanh(0.5 * a) + 1.0)


def layer(p, h):
    W, b = p
    return sigmoid(W @ h + b)


def network(params, x):
    h = x
    first = params[0]
    h = layer(first, h)
    for k in range(1, len(params)):   # (a loop over the layers: the literal)
        h = layer(params[k], h)
    return np.sum(h * h) + np.sum(params[-1][1])


def unpacked(params, x):
    (W, b), (V, c) = params
    return np.sum(np.tanh(V @ np.tanh(W @ x + b) + c) ** 2)


def by_key(weights, x):
    scaled = weights["scale"] * x
    return np.sum(np.sin(scaled) * weights["w"]) + len(weights)


def sliced(ws, x):
    total = 0.0
    for w in ws[1:]:
        total = total + np.sum(w * x)
    return total * np.sum(ws[0] ** 2)


def mlp(params, x):
    for W, b in params:
        x = np.tanh(W @ x + b)
    return np.sum(x ** 2)


def early_exit(params, x):
    for W, b in params:
        x = np.tanh(W @ x + b)
        if np.sum(x) > 100.0:
            break
    return np.sum(x ** 2)


def over_keys(weights, x):
    total = 0.0
    for k in weights:
        total = total + np.sum(weights[k] * x) ** 2
    return total


def dict_methods(d, x):
    total = np.sum(d.get("u") * x)
    for k, v in d.items():
        total = total + len(k) * np.sum(np.cos(v * x))
    for v in d.values():
        total = total + np.sum(v)
    for k in d.keys():
        total = total * 0.5 + np.sum(d[k] ** 2)
    for pair in d.items():
        total = total + np.sum(pair[1])
    return total


def late_binding(params, x):
    fs = []
    for p in params:
        fs.append(lambda v: np.sum(p[0] * v))  # noqa: B023 - (each reads the last p)
    return sum(f(x) for f in fs)


def steps_beside(params, x):
    for _ in range(3):   # (reads no item by its variable: stays a loop)
        x = np.tanh(params[0] @ x)
    return np.sum(x)


def returns_early(d, x):
    for _k, v in d.items():
        if np.sum(v) > 10.0:
            return np.sum(v * x)   # (a return in every copy guarded all that follows)
        x = np.tanh(x + v)
    return np.sum(x)


def appends(ws, x):
    ws.append(x)
    return np.sum(ws[0] * x)


def rebinds(ws, x):
    ws = ws[:1]
    return np.sum(ws[0] * x)


def same_object(ws, x):
    return np.sum(ws[0] * x) if ws is not None else 0.0


def writes_an_item(ws, x):
    ws[0] = ws[0] * 2
    return np.sum(ws[0] * x)


def _mlp(rng, shape):
    n, m = shape
    return [(rng.standard_normal((m, n)) * 0.5, rng.standard_normal(m) * 0.1),
            (rng.standard_normal((m, m)) * 0.5, rng.standard_normal(m) * 0.1)]


SHAPES = [(3, 2), (4, 5)]


# -- the view's text ------------------------------------------------------------------
def test_constant_reads_unpacking_and_helpers_become_the_arrays():
    rng = np.random.default_rng(0)
    params = _mlp(rng, (3, 2))
    text = _text(unpacked, params, np.ones(3))
    assert text.splitlines()[:5] == [
        "def unpacked(params_0_0, params_0_1, params_1_0, params_1_1, x):",
        "    W = params_0_0", "    b = params_0_1", "    V = params_1_0", "    c = params_1_1"]
    text = _text(network, params, np.ones(3))
    assert "h = layer_flat(params_0_0, params_0_1, h)" in text     # an alias bound once
    assert "np.sum(params_1_1)" in text                            # params[-1][1]
    assert "k = 1\n    h = layer_flat(params_1_0, params_1_1, h)" in text   # range(1, 2)
    text = _text(mlp, params, np.ones(3))
    assert text.splitlines()[1:5] == ["    W = params_0_0", "    b = params_0_1",
                                      "    x = np.tanh(W @ x + b)", "    W = params_1_0"]
    text = _text(dict_methods, {"u": np.ones(3), "vw": np.ones(3)}, np.ones(3))
    assert "total = np.sum(d_u * x)" in text and "k = 'vw'" in text
    assert "v = d_vw\n    total = total + len(k) * np.sum(np.cos(v * x))" in text
    assert "pair = ('u', d_u)" in text       # (a pair bound to one name: a literal)
    assert "for _ in range(3):" in _text(steps_beside, [params[0][0]], np.ones(3))
    text = _text(returns_early, {"u": np.ones(3), "v": np.ones(3)}, np.ones(3))
    assert "for _k, v in {'u': d_u, 'v': d_v}.items():" in text   # (a return: a loop)
    text = _text(late_binding, params, np.ones(3))   # (a lambda run after the loop)
    assert "for p in [(params_0_0, params_0_1), (params_1_0, params_1_1)]:" in text
    text = _text(early_exit, params, np.ones(3))   # (a break: the loop stays, the literal)
    assert "for W, b in [(params_0_0, params_0_1), (params_1_0, params_1_1)]:" in text
    text = _text(by_key, {"scale": 2.0, "w": np.ones(3)}, np.ones(3))
    assert "weights_scale * x" in text and "+ 2" in text


def test_what_the_function_could_tell_from_a_literal_gets_no_view():
    ws, x = [np.ones(2), np.ones(2)], np.ones(2)
    for f in (appends, rebinds, same_object, writes_an_item):
        assert aggregates.flattened(f, (ws, x)) is None, f.__name__
    assert aggregates.flattened(unpacked, ([np.ones(2), None], x)) is None   # not arrays
    assert aggregates.flattened(unpacked, (np.ones(2), x)) is None          # no structure


def test_structures_that_change_call_by_call_are_data():
    """Beyond MAX_VIEWS structures of one function, no more views (a compile each)."""
    def total(ws):
        return sum(np.sum(w) for w in ws)
    made = [aggregates.flattened(total, ([np.ones(2)] * n,))
            for n in range(1, aggregates.MAX_VIEWS + 3)]
    assert all(m is not None for m in made[:aggregates.MAX_VIEWS])
    assert made[-1] is None
    assert s2sgrad.grad(total)([np.ones(2)] * 12) == [pytest.approx(np.ones(2))] * 12


def test_a_helper_bound_again_gets_a_new_view(make_module):
    mod = make_module("import numpy as np\n\n\ndef h(p):\n    return p[0] * p[1]\n\n\n"
                      "def f(p, x):\n    return np.sum(h(p) * x)\n")
    p, x = (np.array([1.0, 2.0]), np.array([3.0, 4.0])), np.array([0.5, 0.25])
    g = s2sgrad.grad(mod.f)
    first = g(p, x)
    np.testing.assert_allclose(first[0], p[1] * x)
    mod.h = lambda p: p[0] + p[1]
    second = g(p, x)
    np.testing.assert_allclose(second[0], x)
    np.testing.assert_allclose(second[1], x)


# -- gradients ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("jit", [False, True])
def test_gradients_through_the_view_match_differences(shape, jit):
    if jit:
        pytest.importorskip("numba")
    from s2sgrad.backends import JitWarning
    rng = np.random.default_rng(shape[0])
    params, x = _mlp(rng, shape), rng.standard_normal(shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", JitWarning)   # (numba compiles every one)
        for f in (network, unpacked, mlp, early_exit):
            if jit and f is early_exit:   # (numba cannot type the list it walks)
                continue
            _check_against_differences(f, (params, x), (0, 1), jit=jit)
        for f in (over_keys, dict_methods, returns_early):
            if jit and f is returns_early:   # (numba cannot type the dict it walks)
                continue
            _check_against_differences(f, ({"u": rng.standard_normal(shape[0]),
                                            "vw": rng.standard_normal(shape[0])}, x),
                                       (0, 1), jit=jit)
        weights = {"scale": 0.7, "w": rng.standard_normal(shape[0])}
        g = _check_against_differences(by_key, (weights, x), 0, jit=jit)
        assert isinstance(g[0]["scale"], float)   # (a float item: its own differences)
        up, down = (by_key(dict(weights, scale=0.7 + d), x) for d in (1e-6, -1e-6))
        assert g[0]["scale"] == pytest.approx((up - down) / 2e-6, rel=1e-6)
        ws = tuple(rng.standard_normal(shape[0]) for _ in range(3))
        _check_against_differences(sliced, (ws, x), (0, 1), jit=jit)


@pytest.mark.parametrize("shape", SHAPES)
def test_vjp_through_the_view_matches_differences(shape):
    rng = np.random.default_rng(10 + shape[0])
    params, x = _mlp(rng, shape), rng.standard_normal(shape[0])

    def hidden(params, x):
        return layer(params[1], layer(params[0], x))
    out, pullback = s2sgrad.vjp(hidden, params, x, wrt=(0, 1))
    v = rng.standard_normal(out.shape)
    got = pullback(v)
    np.testing.assert_allclose(out, hidden(params, x))
    assert isinstance(got[0], list) and isinstance(got[0][1], tuple)
    for g, leaf in _each_leaf(got[0], params):
        fd = leaf_differences(lambda *a: np.sum(v * hidden(*a)), (params, x), leaf)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got[1], numeric_grad(lambda p, x: np.sum(v * hidden(p, x)),
                                                    [params, x], 1), rtol=1e-6, atol=1e-8)


def test_a_refusal_in_the_view_is_the_general_codes_at_the_users_line(make_module):
    mod = make_module("import numpy as np\n\n\ndef f(p, x):\n    try:\n"
                      "        y = p[0] * x\n    finally:\n        pass\n"
                      "    return np.sum(y)\n")
    with pytest.raises(s2sgrad.TransformError) as view:
        s2sgrad.grad(mod.f, 1)([np.ones(2)], np.ones(2))
    with pytest.raises(s2sgrad.TransformError) as general:
        s2sgrad.grad(mod.f, 1)([np.ones(2), "no view"], np.ones(2))
    assert view.value.lineno == general.value.lineno == 5
    assert str(view.value) == str(general.value)


def dict_literal_keys(x, y):
    s = 0.0
    for k in {"a": x, "bb": y}:
        s = s + len(k) * np.sum(np.sin(x) * y[0])
    return s


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_loop_over_a_dict_literal_walks_its_keys(shape):
    """`for k in {...}` read the literal's items by position (KeyError 0) where a
    dict iterates its keys; it is a loop over the keys now (reverse and forward
    mode against differences)."""
    rng = np.random.default_rng(len(shape))
    x, y = rng.standard_normal(shape), rng.standard_normal(shape)
    got = s2sgrad.grad(dict_literal_keys, (0, 1))(x, y)
    for i in (0, 1):
        np.testing.assert_allclose(got[i], numeric_grad(dict_literal_keys, [x, y], i),
                                   rtol=1e-6, atol=1e-8)
    t = rng.standard_normal(shape)
    _, tangent = s2sgrad.functional.jvp(lambda x: dict_literal_keys(x, y), (x,), (t,))
    np.testing.assert_allclose(tangent, np.sum(got[0] * t), rtol=1e-8)


def test_a_function_made_per_call_takes_its_views_along(make_module):
    """Views are kept weakly by the function they are of: a loss defined inside a
    training loop (a closure per step) leaves none behind."""
    import gc
    import weakref
    mod = make_module("import numpy as np\n\n\ndef make(scale):\n    def loss(p, x):\n"
                      "        return scale * np.sum(p[0] * x)\n    return loss\n")
    refs = []
    for step in range(3):
        f = mod.make(float(step + 1))
        got = s2sgrad.grad(f)([np.ones(2)], np.array([1.0, 2.0]))
        np.testing.assert_allclose(got[0], (step + 1) * np.array([1.0, 2.0]))
        refs.append(weakref.ref(f))
        del f
    gc.collect()
    assert all(r() is None for r in refs)


def test_source_shows_the_code_a_call_given_structures_runs():
    rng = np.random.default_rng(4)
    params, x = _mlp(rng, (3, 2)), np.ones(3)
    text = s2sgrad.source(mlp, 0, args=(params, x))
    assert "gradient with respect to params_0_0, params_0_1, params_1_0, params_1_1" in text
    assert "def mlp_adjoint(" in text and "_s2s_add(" not in text
    assert "_s2s_zeros_like(params)" in s2sgrad.source(mlp, 0)   # (the general code)
    assert s2sgrad.source(mlp, 1, args=(params, x)).count("def mlp_forward(params_0_0") == 1
