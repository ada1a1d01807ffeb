"""Arrays held by a list, tuple or dict and then updated in place.

`L = [a]; a *= 2` changes L[0] too (one object). The normaliser once read
`a *= 2` as `a = a * 2` (a new array) whenever nothing but `a` seemed to refer
to the array, so L[0] kept the old values: the forward dropped the update and
the gradient was wrong in reverse mode (the value witness caught it) and in
forward mode (silently). Such an update is now in place and the alias check
judges it: refused at the line when the container is read afterwards, and
differentiated when it is not (or when the value is a number, rebound).
"""
import numpy as np
import pytest
from conftest import check_grad_and_tangent, import_source

import s2sgrad
from s2sgrad import functional

SOURCE = '''
import numpy as np


def list_literal(x):
    a = x * 1.0
    L = [a]
    a *= 2.0
    return np.sum(L[0] ** 2)


def tuple_literal(x):
    a = x * 1.0
    T = (a, x)
    a += np.sin(x)
    return np.sum(T[0] * T[1])


def dict_literal(x):
    a = x * 1.0
    d = {"k": a}
    a *= a
    return np.sum(d["k"])


def appended(x):
    a = x * 1.0
    L = []
    L.append(a)
    a -= 0.5 * x ** 2
    return np.sum(L[0] ** 2)


def stored_in_dict(x):
    a = x * 1.0
    d = {}
    d["k"] = a
    a *= 3.0
    return np.sum(d["k"] ** 2)


def nested_literal(x):
    a = x * 1.0
    P = [(a, x)]
    a *= 2.0
    return np.sum(P[0][0] ** 2)


def views_in_a_tuple(x):
    A = np.outer(x, x) + 1.0
    rows = (A[0], A[1])
    A[0] = A[0] * 3.0
    return np.sum(rows[0] * rows[1])


def dict_updated(x):
    d = {"a": x}
    d.update({"a": x ** 2})
    return np.sum(d["a"])


def dict_setdefault(x):
    d = {}
    d.setdefault("k", x * 2.0)
    return np.sum(d["k"] ** 2)


def held_across_an_inner_loop(x):
    total = 0.0
    for i in range(2):
        buf = np.tanh(x * (i + 1))
        pick = [buf * 2.0, buf]
        for j in range(2):
            total = total + np.sum(pick[1] ** 2)
            buf += 0.5
    return total


def concatenated(x):
    a = x * 1.0
    L = [x] + [a]
    a *= 2.0
    return np.sum(L[1] ** 2)


def extended_by_literal(x):
    a = x * 1.0
    L = [x]
    L += [a]
    a *= 2.0
    return np.sum(L[1] ** 2)


def extended_in_forward_mode(x, w):
    L = [x * w]
    L += [np.sin(x), x * 2.0]
    return np.sum(np.stack(L) ** 2)


def number_accumulated(x, w):
    acc = 0.0
    history = []
    for i in range(x.shape[0]):
        acc += np.sum(np.tanh(x[i] * w))
        history.append(acc)
    return sum(h * (k + 1) for k, h in enumerate(history))


def container_not_read_later(x, w):
    a = x * w
    pair = [a, w]
    s = np.sum(pair[0] * pair[1])
    a *= 2.0
    return s + np.sum(a ** 2)


def literal_rebound_each_step(x, w):
    total = 0.0
    for i in range(3):
        buf = np.tanh(x * (i + 1)) + w
        pick = [buf * 2.0, buf][1]
        buf += 0.5 * pick
        total = total + np.sum(buf ** 2)
    return total
'''

REFUSED = {"list_literal": "in-place update of 'a' also changes",
           "tuple_literal": "in-place update of 'a' also changes",
           "dict_literal": "in-place update of 'a' also changes",
           "appended": "in-place update of 'a' also changes",
           "stored_in_dict": "in-place update of 'a' also changes",
           "nested_literal": "in-place update of 'a' also changes what 'P' holds",
           "views_in_a_tuple": "in-place update of 'A' also changes what 'rows' holds",
           # (pick is bound anew in each outer iteration, but the inner loop reads it
           # after the update of its previous iteration)
           "held_across_an_inner_loop": "in-place update of 'buf' also changes 'pick'",
           # (dict methods that write were skipped: a zero gradient, and a wrong one)
           "dict_updated": r"the method \.update\(\) modifies",
           "dict_setdefault": r"the method \.setdefault\(\) modifies"}


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("held"), "s2s_held_arrays", SOURCE)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_update_the_container_sees_is_refused_at_its_line(m, name):
    f = getattr(m, name)
    x = np.array([0.3, -1.2, 0.8])
    with pytest.raises(s2sgrad.TransformError, match=REFUSED[name]):
        s2sgrad.grad(f)(x)
    with pytest.raises(s2sgrad.TransformError, match=REFUSED[name]):
        functional.jvp(f, (x,), (np.ones(3),))


@pytest.mark.parametrize("name", ["concatenated", "extended_by_literal"])
def test_a_list_built_by_concatenation_sees_the_update(m, name):
    # (reverse mode refuses list concatenation; forward mode differentiates it, and
    # once missed that the new list holds `a`, or read `xs += [a]`'s literal as a
    # constant: a silently wrong tangent)
    x = np.array([0.3, -1.2, 0.8])
    with pytest.raises(s2sgrad.TransformError, match="in-place update of 'a' also changes 'L'"):
        functional.jvp(getattr(m, name), (x,), (np.ones(3),))


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_a_list_extended_by_a_literal_in_forward_mode(m, shape, rng):
    x, w, u = rng.standard_normal(shape), rng.standard_normal(shape), rng.standard_normal(shape)
    _, tangent = functional.jvp(lambda v: m.extended_in_forward_mode(v, w), (x,), (u,))
    eps = 1e-6
    want = (m.extended_in_forward_mode(x + eps * u, w) -
            m.extended_in_forward_mode(x - eps * u, w)) / (2 * eps)
    np.testing.assert_allclose(tangent, want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((4, 2), (2,))])
@pytest.mark.parametrize("name", ["number_accumulated", "container_not_read_later",
                                  "literal_rebound_each_step"])
def test_updates_nothing_else_sees_are_differentiated(m, name, shapes, rng):
    x, w = (rng.standard_normal(s) for s in shapes)
    check_grad_and_tangent(getattr(m, name), [x, w], rng)
