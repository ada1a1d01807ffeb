"""List and tuple literals of differentiated values (once gaps of the compiler).

Each item of a literal must receive its adjoint: as an operand of an operator,
as an argument of a rule, and nested inside a sequence argument.
"""
import pytest
from conftest import check_vjp, import_source

SOURCE = '''
import numpy as np


def summed_list(a, b):
    return np.sum([a, 2.0 * b])


def nested_array(a, b):
    return np.sum(np.array([[a, b], [b, a]]) * np.arange(4.0).reshape(2, 2))


def operator_operand(x, a):
    return np.sum(x * [a, 2.0 * a])


def tuple_operand(x, a, b):
    return np.sum((a, b) @ x)


def method_argument(x, a, b):
    return np.sum(x.dot([a, b]) ** 2)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("lit"), "s2s_literals", SOURCE)


@pytest.mark.parametrize("vector", [False, True])
def test_list_literal_argument_of_a_rule(m, vector, rng):
    a, b = (rng.standard_normal(3), rng.standard_normal(3)) if vector else (1.5, -0.5)
    check_vjp(m.summed_list, [a, b])


@pytest.mark.parametrize("values", [(1.5, -0.5), (0.3, 2.0)])
def test_nested_list_literal_in_np_array(m, values):
    check_vjp(m.nested_array, list(values))


@pytest.mark.parametrize("shape", [(2,), (3, 2)])
def test_list_literal_operand_of_an_operator(m, shape, rng):
    check_vjp(m.operator_operand, [rng.standard_normal(shape), 3.0])


@pytest.mark.parametrize("shape", [(2,), (2, 3)])
def test_tuple_literal_operand_of_matmul(m, shape, rng):
    check_vjp(m.tuple_operand, [rng.standard_normal(shape), 0.7, -1.2])


@pytest.mark.parametrize("rows", [1, 3])
def test_list_literal_argument_of_a_method(m, rows, rng):
    check_vjp(m.method_argument, [rng.standard_normal((rows, 2)), 0.7, -1.2])
