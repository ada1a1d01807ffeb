"""Constructs of code written the way autograd's users write it (issue 34): nested
defs, chained item assignments, container constructors, dict.get. Each gradient
against central differences of the original function, on two shapes."""
import numpy as np
import pytest
from conftest import check_vjp, import_source, numeric_grad

import s2sgrad

SOURCE = '''
import functools

import numpy as np
import s2sgrad


def rnn(W, xs):
    bias = 0.1

    def cell(h, x):
        z = np.tanh(W @ h + x + bias)
        return z
    h = np.zeros(W.shape[0])
    for x in xs:
        h = cell(h, x)
    return np.sum(h ** 2)


def lstm_like(W, xs):
    def step(h, c, x):
        c2 = c * 0.9 + np.tanh(W @ h + x)
        return np.tanh(c2), c2
    h, c = np.zeros(W.shape[0]), np.zeros(W.shape[0])
    for x in xs:
        h, c = step(h, c, x)
    return np.sum(h * c)


def late_binding(x):
    scale = 0.5

    def scaled(v):
        return np.sin(v) * scale
    first = scaled(x)
    scale = 2.0                        # a closure reads the value when called
    return np.sum(first + scaled(x))


def gradient_of_a_nested_def(x):
    def energy(v):
        return np.sum(np.cos(v) * v)
    return np.sum(s2sgrad.grad(energy)(x) * x)


def nested_recursion(x):
    def fact(v, n):
        return v if n == 0 else v * fact(v, n - 1)
    return np.sum(fact(x, 2))


def chained_items(x):
    y = np.zeros(x.shape[0] + 1)
    y[0] = y[1] = x[2] * 2.0
    y[2:] = x[1:]
    return np.sum(y ** 2 * np.arange(1.0, x.shape[0] + 2.0))


def chained_names(x):
    a = b = np.sin(x)
    return np.sum(a * b)


def constructors(x):
    w, v = np.sin(x), np.cos(x)
    pair = tuple((w, v))
    items = list([x, x ** 2])
    rows = list(np.split(x, x.shape[0]))
    copied = list(items)
    d = dict(a=x, b=2.0 * x)
    e = dict(d)
    return np.sum(pair[0] * pair[1] + items[1] * copied[0] + d["a"] * e["b"]) + \
        np.sum(rows[0] * rows[-1])


def dict_get(x):
    d = {"a": x, "c": np.tanh(x)}
    return np.sum(d.get("a") * d.get("b", 3.0) + d.get("c", 0.0) ** 2)


def nested_rebound(x):
    def g(v):
        return v * 2.0
    g = np.sin
    return np.sum(g(x))
def softplus(z):
    return np.log1p(np.exp(z))


def layer(W, x, nonlinearity):
    return nonlinearity(W @ x)


def layer_with_a_default(W, x, act=softplus):
    return act(W @ x)


def two_layers(W, x, act):
    return np.sum(layer(W.T, layer(W, x, act), np.sin) ** 2)


def net(W, x):
    return np.sum(layer(W, x, np.tanh)) + np.sum(layer(W, x, softplus)) + two_layers(W, x, np.cos)


def net_with_defaults(W, x):
    return np.sum(layer_with_a_default(W, x)) + np.sum(layer_with_a_default(W, x, np.tanh))


def second_order_through_it(W, x):
    return np.sum(s2sgrad.grad(net)(W, x) ** 2)

def scaled(z, a, b=1.0):
    return a * z ** 2 + b * z


def partial_made_here(x, w):
    h = functools.partial(scaled, a=np.sin(w))
    w = w * 10.0                      # the partial keeps the value it was given
    g = functools.partial(scaled, x, b=0.5)
    return np.sum(h(x)) + np.sum(g(w)) + np.sum(w)


def partial_in_a_loop(x, w):
    acc = 0.0
    for k in range(3):
        h = functools.partial(scaled, a=w * k)
        acc = acc + np.sum(h(x, b=np.cos(w)))
    return acc


def pair(a, b):
    return np.sum(a * np.tanh(b))


def spread_arguments(x, w):
    args = (x, w * 2.0)
    return pair(*args) + pair(*(w, x)) + np.sum(np.maximum(*[x, w]))


def spread_from_a_list(x, w):
    args = [x, w * 2.0]                # (a list only read as a tuple is read)
    total = pair(*args)
    for a in args:
        total = total + np.sum(a * args[1]) * len(args)
    return total


def spread_from_a_changed_list(x, w):
    args = [x]
    args.append(w)                     # its length is then known only when it runs
    return pair(*args)


def partial_used_as_a_value(x):
    h = functools.partial(scaled, a=2.0)
    fs = [h]
    return np.sum(fs[0](x))
def hidden_states(W, x):
    h = x
    for _ in range(3):
        h = np.tanh(W @ h)
        yield h


def neighbours(v):
    for i in range(len(v) - 1):
        yield v[i], v[i + 1]
    return 0.0                        # (a generator's return value is not yielded)


def consumed_by_sum(W, x):
    return sum(np.sum(h ** 2) for h in hidden_states(W, x))


def consumed_by_a_loop(W, x):
    total = 0.0
    for h in hidden_states(W, x):
        total = total + np.sum(np.sin(h))
    return total + sum(a * b for a, b in neighbours(W @ x))


def consumed_by_list(W, x):
    hs = list(hidden_states(W, x))
    return np.sum(hs[-1] * hs[0])
def top_level_with_a_function(W, x, act=softplus):
    return np.sum(act(W @ x) ** 2) + np.sum(layer(W, x, act))
def partial_rebound(x):
    h = functools.partial(scaled, a=2.0)
    y = h(x)
    h = np.sin
    return np.sum(y) + np.sum(h(x))


def partial_in_either_branch(x):
    if np.sum(x) > 0:
        h = functools.partial(scaled, a=2.0)
    else:
        h = functools.partial(scaled, a=5.0)
    return np.sum(h(x))


def starred_known(x, w):
    xs = [x, w]
    zs = [*xs, x * 2.0, *(w, np.sin(x))]
    return np.sum(zs[0] * zs[2] + zs[1] * zs[3] + zs[4])


def keywords_spread(x, w):
    opts = {"scale": w, "shift": np.sin(x)}
    loose = dict(scale=2.0, act=np.tanh)
    y = scaled_act(x, **opts) + scaled_act(w, **loose) + scaled_act(x, **{"scale": w})
    return np.sum(y ** 2) + np.sum(opts["shift"])


def keywords_of_a_changed_dict(x, w):
    opts = {"scale": w}
    opts["shift"] = x                  # keys no longer those of the literal
    return np.sum(scaled_act(x, **opts))


def function_names(x, w):
    act = np.tanh
    act = act                         # (read as the function it names: a crash once)
    same = act
    y = same(x * w)
    act = scaled_act                  # bound again: calls after it are of scaled_act
    y = act(y, scale=2.0)
    for f in (np.sin, scaled_act, np.tanh):
        y = f(y) * 0.9 + 0.1 * w
    for f in [np.cos]:
        y = y + f(w)
    return np.sum(y ** 2)


def functions_in_a_list(x, w):
    fns = [np.tanh, scaled_act, np.sin]
    y = fns[0](x) + fns[-1](w) * fns[1](x, scale=0.5)
    acts = (np.cos, fns_helper)
    for act in acts:
        y = act(y) * 0.8 + 0.1 * w
    return np.sum(y ** 2)


def fns_helper(v):
    return np.tanh(v) * v


def a_changed_list_of_functions(x):
    acts = [np.tanh, np.sin]
    acts.append(np.cos)                 # what it holds changes: refused
    for act in acts:
        x = act(x)
    return np.sum(x)


def copied_partial(x, w):
    h = functools.partial(scaled, a=2.0)
    g = h                              # the same partial under another name
    h = np.sin
    return np.sum(g(x) * h(w))


def a_function_name_in_a_branch(x):
    act = np.tanh
    if np.sum(x) > 0:
        act = np.sin
    return np.sum(act(x))


def scaled_act(x, scale=1.0, shift=0.0, act=np.sin):
    return act(x * scale) + shift


def starred_runtime(x, ws):
    h = [*ws]                  # a list of unknown length: built by extend and append
    h.append(x)
    zs = [x, *h, *ws]
    return np.sum(np.stack([*zs, np.tanh(x)]) ** 2) + np.sum(zs[1] * zs[-1])
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("real"), "s2s_real_code", SOURCE)


@pytest.mark.parametrize("name", ["rnn", "lstm_like"])
@pytest.mark.parametrize("n, steps", [(3, 4), (2, 6)])
def test_a_cell_defined_inside(m, name, n, steps, rng):
    check_vjp(getattr(m, name), [rng.standard_normal((n, n)) * 0.5,
                                 rng.standard_normal((steps, n))])


@pytest.mark.parametrize("shape", [(3,), (2, 4)])
def test_a_nested_def_reads_outer_values_when_called(m, shape, rng):
    check_vjp(m.late_binding, [rng.standard_normal(shape)])


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_the_gradient_of_a_nested_def_inside(m, shape, rng):
    check_vjp(m.gradient_of_a_nested_def, [rng.standard_normal(shape)])


def test_what_a_nested_def_cannot_be_is_refused_at_its_line(m):
    with pytest.raises(s2sgrad.TransformError, match="calls itself"):
        s2sgrad.grad(m.nested_recursion)(np.ones(2))
    with pytest.raises(s2sgrad.TransformError, match="FunctionDef"):
        s2sgrad.grad(m.nested_rebound)(np.ones(2))


@pytest.mark.parametrize("name", ["chained_items", "chained_names", "constructors",
                                  "dict_get"])
@pytest.mark.parametrize("n", [3, 6])
def test_containers_and_chained_assignments(m, name, n, rng):
    check_vjp(getattr(m, name), [rng.standard_normal(n)])


@pytest.mark.parametrize("name", ["net", "net_with_defaults", "second_order_through_it"])
@pytest.mark.parametrize("n, k", [(3, 2), (2, 4)])
def test_a_function_passed_as_an_argument(m, name, n, k, rng):
    """`layer(W, x, np.tanh)`: the helper is compiled for the function it is given
    (a pair per function, like a shape), and for a default function it is not."""
    W, x = rng.standard_normal((n, k)) * 0.5, rng.standard_normal(k)
    check_vjp(getattr(m, name), [W, x], wrt=(0,), rtol=1e-5, atol=1e-7)


def test_a_pair_made_for_a_function_says_so(m):
    text = s2sgrad.source(m.net)
    assert "(for nonlinearity=np.tanh)" in text and "(for nonlinearity=softplus)" in text


@pytest.mark.parametrize("name", ["partial_made_here", "partial_in_a_loop", "spread_arguments",
                                  "spread_from_a_list"])
@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_partials_made_inside_and_spread_arguments(m, name, shape, rng):
    """`h = functools.partial(f, a=w)` then `h(x)`: the call of f with the values
    the partial was given; `f(*args)` of a tuple or list literal, or of a name
    bound to a tuple literal, or to a list literal only read as a tuple is: the call
    with the items spelled out."""
    check_vjp(getattr(m, name), [rng.standard_normal(shape), rng.standard_normal(shape)])


def test_spreading_a_list_whose_length_changes_is_refused_at_the_call(m):
    with pytest.raises(s2sgrad.TransformError, match=r"\*args") as info:
        s2sgrad.grad(m.spread_from_a_changed_list)(np.ones(3), np.ones(3))
    assert "pair(*args)" in info.value.text


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_starred_items_in_list_literals(m, shape, rng):
    """`[*xs, v]`: items of literals and known tuples spelled out, any other list
    extended (before: a RecursionError reported as an internal error)."""
    x, w = rng.standard_normal(shape), rng.standard_normal(shape)
    check_vjp(m.starred_known, [x, w])
    ws = [rng.standard_normal(shape), rng.standard_normal(shape)]
    got = s2sgrad.grad(m.starred_runtime, wrt=(0, 1))(x, ws)
    h = 1e-6
    for k in np.ndindex(shape):
        e = np.zeros(shape)
        e[k] = h
        want_x = (m.starred_runtime(x + e, ws) - m.starred_runtime(x - e, ws)) / (2 * h)
        np.testing.assert_allclose(got[0][k], want_x, rtol=1e-6, atol=1e-8)
        for j in range(2):
            up = [v + e if i == j else v for i, v in enumerate(ws)]
            down = [v - e if i == j else v for i, v in enumerate(ws)]
            want = (m.starred_runtime(x, up) - m.starred_runtime(x, down)) / (2 * h)
            np.testing.assert_allclose(got[1][j][k], want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_keywords_spread_from_a_dict(m, shape, rng):
    """`f(x, **opts)` of a dict literal, or of a name bound once to one (or to
    `dict(k=v)`) and read only by `**opts` and `opts["key"]`: the call with the
    keywords spelled out (a function among them: the callee compiled for it)."""
    check_vjp(m.keywords_spread, [rng.standard_normal(shape), rng.standard_normal(shape)])
    with pytest.raises(s2sgrad.TransformError, match=r"\*\*kwargs"):
        s2sgrad.grad(m.keywords_of_a_changed_dict)(np.ones(shape), np.ones(shape))


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_name_bound_to_a_function_and_a_loop_over_functions(m, shape, rng):
    """`act = np.tanh; act(x)`, and `for f in (np.sin, g): y = f(y)` unrolled as
    Python runs it; a name bound to either function in a branch stays refused."""
    check_vjp(m.function_names, [rng.standard_normal(shape), rng.standard_normal(shape)])
    with pytest.raises(s2sgrad.TransformError, match="act"):
        s2sgrad.grad(m.a_function_name_in_a_branch)(np.ones(shape))
    # a function taken from a list or tuple bound once and never changed
    check_vjp(m.functions_in_a_list, [rng.standard_normal(shape), rng.standard_normal(shape)])
    with pytest.raises(s2sgrad.TransformError, match="act"):
        s2sgrad.grad(m.a_changed_list_of_functions)(np.ones(shape))


@pytest.mark.parametrize("shape", [(2,), (2, 3)])
def test_a_starred_item_of_unknown_length_in_a_tuple_is_refused(make_module, shape):
    """`(*ws, x)` where ws's length is not known is refused at its line; given a list
    of arrays, whose length the call fixes (compiler.aggregates), it is differentiated
    (against differences)."""
    mod = make_module("import numpy as np\n\n\ndef f(x, ws):\n"
                      "    t = (*ws, x)\n    return np.sum(t[0] * t[-1])\n")
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(shape), rng.standard_normal(shape[-1:])
    with pytest.raises(s2sgrad.TransformError, match="starred item") as info:
        s2sgrad.grad(mod.f)(x, [w, "not an array"])   # (no view: the general code)
    assert info.value.lineno == 5
    got = s2sgrad.grad(mod.f, (0, 1))(x, [w])
    for i, g in enumerate((got[0], got[1][0])):
        want = numeric_grad(lambda x, w: mod.f(x, [w]), [x, w], i)
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_a_name_bound_to_another_name_for_a_function(m, shape, rng):
    check_vjp(m.copied_partial, [rng.standard_normal(shape), rng.standard_normal(shape)])


def test_a_partial_made_inside_and_used_as_a_value_is_refused(m):
    with pytest.raises(s2sgrad.TransformError, match="other than by calling it"):
        s2sgrad.grad(m.partial_used_as_a_value)(np.ones(3))


def test_a_name_bound_to_a_partial_and_to_something_else_is_not_taken_for_it(m, rng):
    """After a partial's name is bound to something else, a call of it is not read as
    the earlier partial (it was, and gave a wrong gradient silently): `h = np.sin`
    is a call of np.sin; bound to partials in the two branches of an if, refused."""
    check_vjp(m.partial_rebound, [np.array([0.3, -0.5, 0.8])])
    check_vjp(m.partial_rebound, [rng.standard_normal((2, 3))])
    with pytest.raises(s2sgrad.TransformError, match="which one it holds here is not known"):
        s2sgrad.grad(m.partial_in_either_branch)(np.array([0.3, -0.5, 0.8]))


@pytest.mark.parametrize("name", ["consumed_by_sum", "consumed_by_a_loop", "consumed_by_list"])
@pytest.mark.parametrize("n", [3, 4])
def test_a_generator_function_consumed(m, name, n, rng):
    """A generator function called in differentiated code is compiled as the function
    returning the list of what it yields (its consumers see the same values)."""
    W, x = rng.standard_normal((n, n)) * 0.5, rng.standard_normal(n)
    check_vjp(getattr(m, name), [W, x])


def test_a_generator_function_itself_is_refused_with_what_to_do(m):
    with pytest.raises(s2sgrad.TransformError, match="consumes what it yields"):
        s2sgrad.grad(m.hidden_states)(np.eye(3), np.ones(3))


@pytest.mark.parametrize("n, k", [(3, 2), (2, 4)])
def test_the_differentiated_function_takes_a_function(m, n, k, rng):
    """grad(f)(W, x) with f's default act=softplus, grad(f)(W, x, np.tanh) and act= by
    keyword: a pair for each function (a kind of call, like a shape)."""
    W, x = rng.standard_normal((n, k)) * 0.5, rng.standard_normal(k)
    f = m.top_level_with_a_function
    g = s2sgrad.grad(f)

    def differences(**called):
        out = np.zeros_like(W)
        for i in np.ndindex(W.shape):
            step = np.zeros_like(W)
            step[i] = 1e-6
            out[i] = (f(W + step, x, **called) - f(W - step, x, **called)) / 2e-6
        return out
    np.testing.assert_allclose(g(W, x), differences(), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g(W, x, np.tanh), differences(act=np.tanh), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(g(W, x, act=np.sin), differences(act=np.sin), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(g(W, x), differences(), rtol=1e-6, atol=1e-8)
    out, pullback = s2sgrad.vjp(f, W, x, np.cos, wrt=(0,))
    np.testing.assert_allclose(pullback(1.0)[0], differences(act=np.cos), rtol=1e-6, atol=1e-8)
