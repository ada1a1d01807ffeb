"""Facts the reverse transform records per statement (compiler/facts.py).

The forward sweep records, per statement, what it saved, which call site a
call is and what a loop keeps; the adjoint sweep reads them back. A lookup for
a statement with no fact must fail loudly (an InternalError at the user's line),
never give a KeyError or another statement's fact.
"""
import ast
import sys

import numpy as np
import pytest

import s2sgrad
from s2sgrad.compiler.facts import MissingFact, StatementFacts


def _stmt(text):
    return ast.parse(text).body[0]


def test_a_fact_belongs_to_its_statement_only():
    facts = StatementFacts("saved value")
    a, b = _stmt("x = 1"), _stmt("x = 1")
    facts.record(a, ["slot"])
    assert facts.get(a) == ["slot"] and a in facts
    assert facts.get(b) is None and b not in facts
    assert facts.setdefault(b, list) == [] and len(facts) == 2


def test_a_recycled_identity_does_not_give_another_statements_fact():
    facts = StatementFacts("loop record")
    a, b = _stmt("y = 2"), _stmt("y = 3")
    facts.record(a, "a's")
    facts._facts[id(b)] = (a, "a's")   # what an id() reused by b would look like
    assert facts.get(b) is None
    with pytest.raises(MissingFact):
        facts.require(b)


def test_a_missing_fact_names_the_statement():
    facts = StatementFacts("call site")
    s = _stmt("\n\nz = f(x)")
    with pytest.raises(MissingFact, match="no call site was recorded for the Assign statement "
                                          "at line 3"):
        facts.require(s)


def test_a_lost_fact_is_reported_as_a_bug_at_the_users_line(make_module, monkeypatch):
    mod = make_module('''
import numpy as np

def helper(x):
    return np.sin(x)

def f(x):
    y = helper(x)
    return np.sum(y * y)
''')
    transform = sys.modules["s2sgrad.compiler.transform"]
    original = transform.Reverse.site_for

    def forgetful(self, s, op):
        site = original(self, s, op)
        self.sites._facts.clear()     # as if the statement had been rebuilt
        return site
    monkeypatch.setattr(transform.Reverse, "site_for", forgetful)
    with pytest.raises(s2sgrad.InternalError) as info:
        s2sgrad.grad(mod.f)(np.ones(3))
    message = str(info.value)
    assert isinstance(info.value.__cause__, MissingFact)
    assert "no call site was recorded" in message and "y = helper(x)" in message
