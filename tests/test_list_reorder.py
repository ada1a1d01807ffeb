"""`xs.reverse()` and `xs.sort(key=..., reverse=...)` of a list the function builds,
written as the slice assignments they are (`xs[:] = xs[::-1]`, `xs[:] = sorted(xs,
...)`): refused before ("modifies a differentiated value in place"). Each against
central differences, in reverse and forward mode; a list another name holds too
keeps the alias refusal, as an array updated in place does."""
import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import functional

SOURCE = '''
import numpy as np

def reversed_squares(x):
    acc = []
    for v in x:
        acc.append(v * v)
    acc.reverse()
    return np.sum(np.array(acc) * np.arange(len(acc)))

def sorted_twice(x):
    L = [x[0] * 2.0, np.sin(x[1]), x[2] - x[0]]
    L.sort(reverse=True)
    first = L[0]
    L.sort(key=abs)
    return first * 3.0 + L[1] - L[2] ** 2

def arrays_reversed(x):
    rows = [x, np.tanh(x), x * 2.0]
    rows.reverse()
    return np.sum(rows[0] * rows[1]) + np.sum(rows[2])

def keys_sorted(x):
    d = {}
    for i, v in enumerate(x):
        d[f"k{i}"] = v ** 2 * np.sin(v)
    return sum(d[k] * (j + 1.0) for j, k in enumerate(sorted(d)))

def held_elsewhere(x):
    L = [x[0], x[1]]
    held = L
    L.reverse()
    return held[0] * 2.0 + L[1]
'''


@pytest.mark.parametrize("x", [np.array([0.3, -0.5, 0.8]), np.array([1.2, 0.1, -0.4, 0.6])])
@pytest.mark.parametrize("name", ["reversed_squares", "sorted_twice", "arrays_reversed"])
def test_reordered_lists_against_differences(make_module, name, x):
    f = getattr(make_module(SOURCE), name)
    want = numeric_grad(f, (x,), 0)
    np.testing.assert_allclose(s2sgrad.grad(f, witness="always")(x), want, rtol=1e-6, atol=1e-9)
    u = np.linspace(-1.0, 1.0, x.size)
    _, tangent = functional.jvp(f, (x,), (u,))
    np.testing.assert_allclose(tangent, want @ u, rtol=1e-6, atol=1e-9)
    assert s2sgrad.value_and_grad(f)(x)[0] == pytest.approx(f(x), rel=1e-12)


def test_a_list_another_name_holds_keeps_the_alias_refusal(make_module):
    f = make_module(SOURCE).held_elsewhere
    with pytest.raises(s2sgrad.TransformError, match="in-place update of 'L'"):
        s2sgrad.grad(f)(np.array([0.3, 0.4]))


@pytest.mark.parametrize("x", [np.array([0.3, -0.5, 0.8]), np.array([1.2, 0.1, -0.4, 0.6])])
def test_sorted_keys_of_a_dict_in_forward_mode_and_second_order(make_module, x):
    """sorted(d) sorts the keys, which carry no derivative: forward mode (and so the
    HVP, forward over reverse) once took the dict's tangents for the keys'
    (InternalError: "a derivative of 3 items was expected, not dict")."""
    f = make_module(SOURCE).keys_sorted
    u = np.linspace(-1.0, 1.0, x.size)
    want = numeric_grad(f, (x,), 0)
    np.testing.assert_allclose(s2sgrad.grad(f)(x), want, rtol=1e-6, atol=1e-9)
    _, tangent = functional.jvp(f, (x,), (u,))
    np.testing.assert_allclose(tangent, want @ u, rtol=1e-6, atol=1e-9)
    g = s2sgrad.grad(f)
    _, hv = functional.hvp(f, (x,), (u,))
    np.testing.assert_allclose(hv[0] if isinstance(hv, tuple) else hv,
                               (g(x + 1e-5 * u) - g(x - 1e-5 * u)) / 2e-5, rtol=1e-5, atol=1e-7)
