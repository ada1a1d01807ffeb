"""The alias analysis alone (compiler/aliases.py): which names an in-place write may
change. A name it misses is a wrong gradient (the adjoint reads a value the write
changed); a name it adds is a refusal. Programs here are normal-form statements, with
the method calls marked as normalise marks them."""
import ast

import numpy as np

from s2sgrad.compiler.aliases import AliasFacts
from s2sgrad.compiler.facts import ExprFacts
from s2sgrad.runtime import inplace


def _facts(text: str, lists=("stack",), copy=None) -> AliasFacts:
    body = ast.parse(text).body
    exprs = ExprFacts()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            exprs.note(node, method=node.func.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            exprs.note(node, callee={"tanh": np.tanh, "copy_value": inplace.copy_value,
                                     "mystery": object()}.get(node.func.id))
    local = {n.id for n in ast.walk(ast.Module(body=body, type_ignores=[]))
             if isinstance(n, ast.Name)} - {"tanh", "copy_value", "mystery", "range", "c"}
    return AliasFacts(body, local, set(lists), exprs)


def _affected(text: str):
    facts = _facts(text)
    (name, write), = [(n, w) for n, w in facts.writes if n == "acc" and
                      isinstance(w, ast.AugAssign)]
    return facts.affected(name, write)


LOOP = """
stack = []
acc = x * 1.0
for i in range(3):
    acc += x
    {before}
    stack.append(acc)
    {after}
    acc = tanh(acc)
"""


def test_a_binding_later_in_the_loop_ends_the_relation():
    # the stack holds the old acc; the next iteration's write changes the new one
    assert _affected(LOOP.format(before="pass", after="pass")) == set()


def test_a_continue_that_may_skip_the_binding_keeps_it():
    text = LOOP.format(before="pass", after="if c:\n        continue")
    assert _affected(text) == {"stack"}
    text = LOOP.format(before="pass", after="if c:\n        break")
    assert _affected(text) == {"stack"}


def test_a_binding_only_on_one_branch_keeps_it():
    text = LOOP.format(before="pass", after="pass").replace(
        "    acc = tanh(acc)", "    if c:\n        acc = tanh(acc)")
    assert _affected(text) == {"stack"}


def test_a_relation_after_the_binding_is_kept():
    text = """
stack = []
acc = x * 1.0
for i in range(3):
    acc += x
    acc = tanh(acc)
    stack.append(acc)
"""
    assert _affected(text) == {"stack"}


def test_an_appended_copy_holds_nothing_but_a_view_does():
    copied = """
stack = []
acc = x * 1.0
for i in range(3):
    stack.append(copy_value(acc))
    acc += x
"""
    assert _affected(copied) == set()
    assert _affected(copied.replace("copy_value(acc)", "acc.reshape(-1)")) == {"stack"}
    assert _affected(copied.replace("copy_value(acc)", "mystery(acc)")) == {"stack"}
    assert _affected(copied.replace("copy_value(acc)", "acc * 1.0")) == {"stack"}


NESTED = """
stack = []
acc = x * 1.0
for i in range(3):
    acc += x
    for j in range(n):
        stack.append(acc)
        {inner}
        acc = tanh(acc)
"""


def test_a_binding_in_an_inner_loop_ends_a_relation_made_before_it_there():
    # whether the inner loop runs or not, no stacked acc reaches the outer write
    assert _affected(NESTED.format(inner="pass")) == set()
    assert _affected(NESTED.format(inner="if c:\n            continue")) == {"stack"}
    assert _affected(NESTED.format(inner="try:\n            pass\n        except ValueError:\n"
                                         "            pass")) == {"stack"}
    # a relation made after the inner loop has no binding after it
    text = NESTED.format(inner="pass") + "    stack.append(acc)\n"
    assert _affected(text) == {"stack"}
