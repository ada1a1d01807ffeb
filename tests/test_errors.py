"""Unsupported code raises TransformError at the user's file:line:col, with a caret."""
import inspect

import numpy as np
import pytest
from conftest import import_source

import s2sgrad
from s2sgrad import TransformError

SOURCE = '''
import numpy as np
import math


def unknown_function(x):
    y = np.sin(x)
    return np.sum(np.unwrap(y))


def with_try(x):
    try:
        y = x * 2
    except ValueError:
        y = x
    return y.sum()


def comprehension(x):
    ys = {xi * 2 for xi in x}
    return np.sum(np.array(sorted(ys))) * x[0]


def in_place(x):
    y = np.sin(x)
    z = y
    y += 1.0
    return np.sum(z)


def math_call(x):
    return math.lgamma(x)


def mutating_method(x):
    y = np.sin(x)
    y.sort()
    return np.sum(y)


def unknown_but_inactive(x, n):
    noise = np.fft.fft(np.ones(n)).real
    return np.sum(x * 2.0) + np.sum(noise)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("errors"), "s2s_error_cases", SOURCE)


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if text in line:
            return start + k, line.index(text)
    raise AssertionError(text)


@pytest.mark.parametrize("fname, snippet, words", [
    ("unknown_function", "np.unwrap", "no gradient rule for np.unwrap"),
    ("with_try", "try:", "'Try' statements are not supported"),
    ("comprehension", "{xi * 2", "no gradient rule"),
    ("math_call", "math.lgamma", "no gradient rule for math.lgamma"),
    ("mutating_method", "y.sort", "modifies a differentiated value in place"),
])
def test_error_points_at_the_users_code(m, fname, snippet, words):
    fn = getattr(m, fname)
    with pytest.raises(TransformError) as err:
        s2sgrad.grad(fn)(np.array([0.3, 0.7]) if fname != "math_call" else 0.5)
    e = err.value
    line, col = _line_of(fn, snippet)
    assert e.filename == m.__file__
    assert e.lineno == line
    assert e.offset == col + 1
    text = str(e)
    assert f"{m.__file__}:{line}:{col + 1}:" in text
    assert words in text
    source_line, caret_line = text.splitlines()[1:3]
    assert snippet in source_line
    assert caret_line.index("^") == source_line.index(snippet)
    assert isinstance(e, SyntaxError)


def test_in_place_update_of_aliased_array_is_rejected(m):
    with pytest.raises(TransformError, match="in-place"):
        s2sgrad.grad(m.in_place)(np.array([0.3, 0.7]))


def test_error_gives_a_suggestion(m):
    with pytest.raises(TransformError) as err:
        s2sgrad.grad(m.unknown_function)(np.ones(2))
    assert "s2sgrad.defvjp" in str(err.value) or "s2sgrad.Function" in str(err.value)


def test_unknown_function_on_non_differentiated_values_is_fine(m):
    g = s2sgrad.grad(m.unknown_but_inactive)(np.array([1.0, 2.0]), 3)
    np.testing.assert_allclose(g, [2.0, 2.0])


def test_source_unavailable_is_a_transform_error():
    namespace = {}
    exec("def f(x):\n    return x * 2\n", namespace)
    with pytest.raises(TransformError, match="cannot read the source"):
        s2sgrad.grad(namespace["f"])(1.0)


MORE = '''
import numpy as np


def generator(x):
    yield x * 2


async def coroutine(x):
    return x


def with_block(x):
    with open("f") as fh:
        y = x
    return y


def deletes(x):
    y = x * 2
    del y
    return x


def builds_array(x):
    ys = np.array(sorted({np.sin(v) for v in x}))
    return np.sum(ys)


def outer(x):
    k = 2.0

    def inner(v):
        nonlocal k
        k = v
        return v
    return inner(x)


def lambda_inside(x):
    f = lambda v: v * 2  # noqa: E731
    return f(x)


def lambda_with_default(x):
    f = lambda v, k=2.0: v * k  # noqa: E731
    return f(x)


def lambda_with_variable_default(x):
    k = 2.0
    f = lambda v, k=k: v * k  # noqa: E731
    return f(x)
'''



@pytest.fixture(scope="module")
def more(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("errors2"), "s2s_error_cases2", MORE)


@pytest.mark.parametrize("fname, snippet, words, hint", [
    ("generator", "def generator", "generator function", "consumes what it yields"),
    ("with_block", "with open", "'With' statements", "outside"),
    ("deletes", "del y", "'Delete' statements", "Drop the del"),
    ("builds_array", "{np.sin(v)", "set comprehension", "for loop that appends"),
    ("outer", "def inner", "nested function with nonlocal or global", "Return the new value"),
])
def test_unsupported_construct_points_at_code_with_suggestion(more, fname, snippet, words,
                                                              hint):
    fn = getattr(more, fname)
    with pytest.raises(TransformError) as err:
        s2sgrad.grad(fn)(np.array([0.3, 0.7]))
    text = str(err.value)
    line, col = _line_of(fn, snippet)
    assert err.value.lineno == line and err.value.offset == col + 1
    assert words in text and hint in text
    assert "^" in text.splitlines()[2]


def test_async_function_is_rejected(more):
    with pytest.raises(TransformError, match="async"):
        s2sgrad.grad(more.coroutine)(1.0)


def test_lambda_defined_inside_is_differentiated_unless_a_default_is_a_variable(more):
    x = np.array([0.5, -1.5])
    assert np.allclose(s2sgrad.grad(lambda x: np.sum(more.lambda_inside(x)))(x), [2.0, 2.0])
    assert np.allclose(s2sgrad.grad(lambda x: np.sum(more.lambda_with_default(x)))(x),
                       [2.0, 2.0])
    with pytest.raises(TransformError, match="defaults that are not constants") as err:
        s2sgrad.grad(lambda x: np.sum(more.lambda_with_variable_default(x)))(x)
    assert "^" in str(err.value)
