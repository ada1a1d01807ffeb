"""Compiler gaps found while writing the NumPy rule table (issue 4).

Each test states the correct behaviour and is expected to fail until the
compiler (s2sgrad/compiler/, owned elsewhere) handles it. strict=True: when
the gap is closed the test passes and pytest reports it, so the marker (and,
for the first two, the guard in rules/registry.py::RuleSignature) can go.
"""
import numpy as np
import pytest
from conftest import check_vjp


@pytest.mark.xfail(strict=True, reason=(
    "transform.rule_contribution only gives adjoints to arguments that are plain names; "
    "a list literal of variables passed to a rule parameter would get a silent zero "
    "gradient, so RuleSignature refuses the call (TransformError) until this is fixed"))
def test_list_literal_argument_of_a_rule(make_module):
    m = make_module("import numpy as np\n\ndef f(a, b):\n    return np.sum([a, 2.0 * b])\n")
    check_vjp(m.f, [1.5, -0.5])


@pytest.mark.xfail(strict=True, reason=(
    "sequence parameters are split into per-item adjoints one level deep only; nested "
    "literals such as np.array([[a, b], [c, d]]) are refused by RuleSignature"))
def test_nested_list_literal_in_np_array(make_module):
    m = make_module("import numpy as np\n\ndef f(a, b):\n"
                    "    w = np.arange(4.0).reshape(2, 2)\n"
                    "    return np.sum(np.array([[a, b], [b, a]]) * w)\n")
    check_vjp(m.f, [1.5, -0.5])


@pytest.mark.xfail(strict=True, reason=(
    "WRONG GRADIENT: a list or tuple literal operand of a Python operator (x * [a, b]) is "
    "bound positionally (ops._bind_positional) and its variables get no adjoint: the "
    "gradient with respect to them is silently 0"))
def test_list_literal_operand_of_an_operator(make_module):
    m = make_module("import numpy as np\n\ndef f(x, a):\n    return np.sum(x * [a, 2.0 * a])\n")
    check_vjp(m.f, [np.array([1.0, 2.0]), 3.0])
