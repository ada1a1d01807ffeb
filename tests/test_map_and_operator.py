"""`map(f, xs)`, the operator module's functions and functools.reduce over a
literal, as the expressions they stand for (they were refused: "no gradient rule for
map", "for operator.mul", "for functools.reduce"). Gradients
against central differences on two shapes (one broadcasting), forward mode along a
direction; a list's `operator.mul` repeats it, as `*` does, and is refused as `*` is."""
import functools
import operator
from functools import reduce
from operator import getitem, neg

import numpy as np
import pytest
from conftest import check_grad_and_tangent

import s2sgrad


def square(v):
    return v * v


def mapped_sum(x, w):
    rows = list(map(np.sin, x))
    total = sum(map(square, rows))
    for r in map(lambda t: np.tanh(t * w), x):
        total = total + r
    return np.sum(total) + np.sum(np.array(list(map(np.multiply, x, x[::-1]))))


def mapped_item(x, w):
    item = w * 2.0   # (map's own variable never shadows the function's)
    return sum(np.sum(v) for v in map(lambda t: t * item, x))


def operators(x, w):
    a = operator.mul(x, w)
    b = operator.add(a, operator.truediv(x, 2.0))
    c = operator.pow(operator.sub(b, w), 2)
    return np.sum(neg(c)) + np.sum(getitem(x, 0) * w) + np.sum(operator.matmul(x, x.T))


def reduced(x, w):
    m = np.outer(x.ravel()[:2], w[:1] + 1.0)
    chain = functools.reduce(np.dot, [m, m.T, m])
    total = reduce(operator.add, (x, x ** 2), np.sin(x) * w)
    return np.sum(chain) + np.sum(total) + np.sum(reduce(lambda a, b: a * b + 1.0, [x, w]))


CASES = [mapped_sum, mapped_item, operators, reduced]


@pytest.mark.parametrize("f", CASES)
@pytest.mark.parametrize("shapes", [((3, 3), (3,)), ((2, 2), (1,))])
def test_against_differences(f, shapes, rng):
    x, w = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    check_grad_and_tangent(f, [x, w], rng)


def repeated_list(x):
    return np.sum(np.array(operator.mul([x, x * 2.0], 2)))


def reduce_over_a_variable(x):
    xs = [x, x * 2.0]
    return np.sum(reduce(operator.add, xs))


def test_reduce_over_a_list_of_unknown_length_stays_refused():
    with pytest.raises(s2sgrad.TransformError, match="no gradient rule for reduce"):
        s2sgrad.grad(reduce_over_a_variable)(np.ones(3))


def test_operator_mul_of_a_list_is_judged_as_star_is():
    with pytest.raises(s2sgrad.TransformError, match="repeating a list or tuple"):
        s2sgrad.grad(repeated_list)(np.ones(3))
