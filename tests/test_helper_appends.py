"""A helper that appends to a list its caller passes, inlined at the call.

Python appends to the caller's own list; compiled on its own the helper would do
that behind the caller's back, so its body is inlined where it is called
(normalize/helper_inline.py). Each gradient is checked against central
differences on two shapes (the second broadcasting against W), forward mode and
a Hessian-vector product too; what cannot be inlined exactly is refused.
"""
import numpy as np
import pytest
from conftest import check_jvp, check_vjp, numeric_grad

import s2sgrad
from s2sgrad import functional

HELPERS = '''
import numpy as np

SCALE = 0.5


def squash(v):
    return np.tanh(v) * SCALE


def add_layer(acts, W, scale=1.0):
    """Append one layer (a docstring, a default)."""
    h = acts[-1]
    acts.append(squash(h @ W) * scale + 0.1 * h)


def add_two(acts, W, shift):
    for k in range(2):
        acts.append(np.sin(acts[-1] @ W) + shift * k)
    return len(acts)


def add_undefined(acts, W):
    acts.append(acts[-1] @ W * NOT_HERE)   # (a NameError when Python runs it)


def add_pair(acts, W):
    acts.extend([acts[-1] * 0.5, np.cos(acts[-1] @ W)])
'''

MODULE = '''
import numpy as np
from {helpers} import add_layer, add_two, add_pair, add_undefined

NOT_HERE = 2.0       # (the caller's name: the helper's module has none)

SCALE = 3.0          # (not the helpers' SCALE: theirs is what they read)


def layers(W, x):
    acts = [x]
    add_layer(acts, W)
    add_layer(acts, W, scale=0.7)
    return np.sum(acts[-1] ** 2) + np.sum(acts[1]) * SCALE


def looped(W, x):
    acts = [x]
    n = 0
    for _ in range(3):
        n = add_two(acts, W, 0.2)
    add_pair(acts, W)
    return np.sum(acts[-1] * acts[-2]) + n * 0.01 * np.sum(acts[0])


def early(acts, W):
    if len(acts) > 3:
        return None
    acts.append(acts[-1] @ W)
    return None


def uses_early(W, x):
    acts = [x]
    early(acts, W)
    return np.sum(acts[-1])


def keeps_a_view(acts, W):
    seen = acts
    acts.append(acts[-1] @ W)
    return len(seen)


def aliased(W, x):
    acts = [x]
    n = keeps_a_view(acts, W)
    return np.sum(acts[-1]) * n


def reads_what_its_module_lacks(W, x):
    acts = [x]
    add_undefined(acts, W)
    return np.sum(acts[-1])


def into_an_item(W, x):
    state = [[x]]
    add_layer(state[0], W)
    return np.sum(state[0][-1])
'''

SHAPES = [(3,), (2, 3)]


@pytest.fixture
def mod(make_module):
    helpers = make_module(HELPERS)
    return make_module(MODULE.format(helpers=helpers.__name__))


def _args(shape, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((3, 3)) * 0.5, rng.standard_normal(shape)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["layers", "looped"])
def test_appending_helpers_are_differentiated(mod, name, shape):
    check_vjp(getattr(mod, name), _args(shape))


def test_the_helper_body_stands_at_the_call_with_its_own_names(mod):
    text = s2sgrad.source(mod.layers, wrt=(0, 1))
    assert "add_layer" not in text.split("def ")[1].split("\n")[1]   # (inlined, not called)
    line = MODULE.splitlines().index("    add_layer(acts, W)") + 1
    assert f"# line {line}: add_layer(acts, W)" in text
    assert "acts.append(" in text


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_mode_and_a_second_derivative(mod, shape):
    W, x = _args(shape, seed=1)
    check_jvp(mod.looped, [W, x], _args(shape, seed=2))
    grad_W = s2sgrad.grad(mod.layers, wrt=0)
    v = np.random.default_rng(3).standard_normal(W.shape)
    _, hv = functional.hvp(lambda w: mod.layers(w, x), W, v)
    fd = numeric_grad(lambda w: float(np.sum(grad_W(w, x) * v)), [W], 0, eps=1e-5)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)


def test_a_helper_that_cannot_be_inlined_exactly_is_refused_at_the_call(mod):
    with pytest.raises(s2sgrad.TransformError,
                       match="appends to the list passed as acts.*returns other than"):
        s2sgrad.grad(mod.uses_early)(*_args((3,)))


def test_a_name_the_helpers_module_lacks_is_not_read_from_the_caller(mod):
    """Python raises NameError in the helper; inlined, the caller's NOT_HERE would be
    read instead: refused at the call, never a gradient of other code."""
    with pytest.raises(s2sgrad.TransformError, match="NOT_HERE, which its module"):
        s2sgrad.grad(mod.reads_what_its_module_lacks, wrt=(0, 1))(*_args((3,)))


def test_a_name_in_the_helper_that_would_see_the_append_is_refused(mod):
    """(Python: len(seen) counts the new item; a copy would not: refused, not guessed.)"""
    with pytest.raises(s2sgrad.TransformError, match="in-place update of 'acts' also changes"):
        s2sgrad.grad(mod.aliased, wrt=(0, 1))(*_args((3,)))


def test_a_list_that_is_not_a_variable_of_the_caller_is_still_refused(mod):
    with pytest.raises(s2sgrad.TransformError, match="writes into its parameter 'acts'"):
        s2sgrad.grad(mod.into_an_item, wrt=(0, 1))(*_args((3,)))


def test_rebinding_the_helper_compiles_again(make_module):
    helpers = make_module(HELPERS)
    m = make_module(MODULE.format(helpers=helpers.__name__))
    W, x = _args((3,), seed=4)
    grad = s2sgrad.grad(m.layers, wrt=1)
    before = grad(W, x)

    def add_layer(acts, W, scale=1.0):
        acts.append(np.sin(acts[-1] @ W) * scale)
    m.add_layer = add_layer
    after = grad(W, x)
    np.testing.assert_allclose(after, numeric_grad(m.layers, [W, x], 1), rtol=1e-6,
                               atol=1e-8)
    assert not np.allclose(before, after)


def test_only_a_function_that_may_append_is_parsed_for_it():
    """The cheap test before a helper's source is parsed (compile time: a third-order
    fuzz program spent a third of its normalisation parsing helpers that append to
    nothing) may say True wrongly, never False wrongly."""
    import functools

    from s2sgrad.compiler.normalize.helper_inline import may_append

    def plain(x):
        return np.tanh(x) * 2.0

    def appends(acts, x):
        acts.append(x)

    def extends_in_a_comprehension(acts, xs):
        return [acts.extend([x]) for x in xs]

    def nested(acts, x):
        def inner():
            acts.append(x)
        inner()

    @functools.wraps(appends)
    def wrapper(*args):
        return appends(*args)

    assert not may_append(plain)
    assert may_append(appends) and may_append(extends_in_a_comprehension)
    assert may_append(nested) and may_append(wrapper)
    assert may_append(s2sgrad.grad(plain))   # read through s2sgrad's own wrapper
    assert may_append(len)                    # no Python code to look at: parsed
