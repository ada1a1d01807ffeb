"""Items of tuple and list literals, and starred assignment targets.

`(x, x ** 2)[0]`, `[a, np.cos(x)][-1]` and `(x, x ** 2, np.sin(x))[1:]` indexed the
literal in place, an operation that read no variable: the gradient was silently
zero, in reverse and forward mode alike (so the derivative witness, which compares
the two, passed it). `first, *rest = x` was refused. Gradients against central
differences on two shapes (one broadcasting), and forward mode along a direction."""
import numpy as np
import pytest
from conftest import check_grad_and_tangent


def item_of_tuple(x, w):
    a = (x, x ** 2)[0]
    b = (x * w, np.sin(x))[-1]
    return np.sum(a * 3.0 + b * w)


def slice_of_literal(x, w):
    pair = (x, x ** 2, np.sin(x) * w)[1:]
    last = [x * 2.0, np.cos(x) + w][1:][0]
    return np.sum(pair[0] * pair[1]) + np.sum(last ** 2)


def starred_first(x, w):
    first, *rest = x
    return np.sum(first * w) + sum(np.sum(r ** 2 * w) for r in rest)


def starred_middle(x, w):
    a, *mid, c = (x, x ** 2, np.sin(x) * w, np.cos(x))
    return np.sum(a * c) + np.sum(mid[0] * mid[1])


def starred_last(x, w):
    *init, last = [x * 1.0, np.tanh(x * w), x ** 3]
    total = last
    for r in init:
        total = total + np.sin(r)
    return np.sum(total * w)


def starred_empty_rest(x, w):
    head, *tail = (x * w, np.exp(x))
    rows, *more = x
    return np.sum(head * tail[0]) + np.sum(rows) + len(more)


CASES = [item_of_tuple, slice_of_literal, starred_first, starred_middle, starred_last,
         starred_empty_rest]


@pytest.mark.parametrize("f", CASES)
@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,))])
def test_against_differences(f, shapes, rng):
    x, w = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_grad_and_tangent(f, [x, w], rng)

