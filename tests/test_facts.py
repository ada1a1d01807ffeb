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


def test_each_compile_has_its_own_facts(make_module):
    """The facts normalise notes (what a call calls, which statement copies its
    value) belong to that compile's normal form: another compile of the same
    function never sees them, and a statement of one is unknown to the other."""
    from s2sgrad.compiler.normalize import normalize
    from s2sgrad.compiler.parse import parse_function
    mod = make_module('''
import numpy as np

def f(x):
    y = np.sin(x)
    return np.sum(y)
''')
    one, two = (normalize(parse_function(mod.f)) for _ in range(2))
    assert one.facts is not two.facts
    call_one = one.node.body[0].value
    assert one.facts.exprs.of(call_one).callee is np.sin
    assert two.facts.exprs.of(call_one).callee is None
    assert two.facts.exprs.of(two.node.body[0].value).callee is np.sin


def test_no_module_level_table_of_the_compiler_holds_syntax_nodes(make_module, monkeypatch):
    """Facts live in the record of their compile (FunctionFacts), not in tables
    of the process: while a compile's nodes are alive (looked at between its
    passes, in both modes), no module-level container of s2sgrad holds an AST
    node (the user's statement a generated node stands for included)."""
    import weakref

    from s2sgrad.compiler import forward, pipeline
    from s2sgrad.compiler.facts import NodeFacts
    mod = make_module('''
import numpy as np

def helper(x):
    return np.sin(x) * x

def f(x):
    y = helper(x) * 2.0
    for i in range(2):
        y = y + x[i]
    y[0] += 1.0
    return np.sum(y * y)
''')

    def holds_nodes(value):
        if isinstance(value, (NodeFacts, StatementFacts)):
            value = value._facts
        if isinstance(value, (dict, weakref.WeakKeyDictionary)):
            return any(isinstance(k, ast.AST) or isinstance(v, ast.AST)
                       for k, v in list(value.items()))
        return False
    offenders, looked = set(), []

    def look():
        looked.append(1)
        offenders.update(f"{name}.{attr}" for name, module in list(sys.modules.items())
                         if name.startswith("s2sgrad")
                         for attr, value in list(vars(module).items()) if holds_nodes(value))

    def looking(original):
        def between(*args, **kwargs):
            look()
            return original(*args, **kwargs)
        return between
    monkeypatch.setattr(pipeline, "inline", looking(pipeline.inline))
    monkeypatch.setattr(forward, "optimize_tangent", looking(forward.optimize_tangent))
    x = np.arange(3.0) + 0.5
    s2sgrad.grad(mod.f)(x)
    s2sgrad.functional.jvp(mod.f, (x,), (np.ones(3),))
    assert len(looked) >= 3 and offenders == set()


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
    sweep = sys.modules["s2sgrad.compiler.transform.forward_sweep"]
    original = sweep.ForwardSweep.site_for

    def forgetful(self, s, op):
        site = original(self, s, op)
        self.core.sites._facts.clear()     # as if the statement had been rebuilt
        return site
    monkeypatch.setattr(sweep.ForwardSweep, "site_for", forgetful)
    with pytest.raises(s2sgrad.InternalError) as info:
        s2sgrad.grad(mod.f)(np.ones(3))
    message = str(info.value)
    assert isinstance(info.value.__cause__, MissingFact)
    assert "no call site was recorded" in message and "y = helper(x)" in message


def test_operation_kinds_are_members_never_strings():
    # A kind compared with a string would be silently false: it raises instead,
    # and an Op is never made with a string for its kind.
    import pytest

    from s2sgrad.compiler.ops import Op, OpKind
    op = Op(OpKind.RULE, ["y"])
    assert op.kind == OpKind.RULE and op.kind != OpKind.CALL
    assert op.kind in (OpKind.RULE, OpKind.COPY) and op.kind in {OpKind.RULE}
    with pytest.raises(TypeError):
        op.kind == "rule"   # noqa: B015
    with pytest.raises(TypeError):
        op.kind in ("call", "rule")   # noqa: B015
    with pytest.raises(TypeError):
        Op("rule", ["y"])
    assert "rule" not in {OpKind.RULE: 1}   # (a string's hash differs: no comparison)
