"""Each compiler pass on its own, on tiny inputs."""
import ast

import astor
import numpy as np
import pytest
from conftest import import_source

from s2sgrad.compiler.analyze import analyze
from s2sgrad.compiler.emit import to_source
from s2sgrad.compiler.inline import inline
from s2sgrad.compiler.loader import Emitted, load
from s2sgrad.compiler.marks import comment
from s2sgrad.compiler.normalize import normalize
from s2sgrad.compiler.optimize import eliminate_dead, fold_block, optimize, substitute_single_use
from s2sgrad.compiler.parse import parse_function
from s2sgrad.compiler.transform import transform

SOURCE = '''
import numpy as np


def nested(x, y):
    return np.sum(np.sin(x * y) + x)


def ssa(x):
    x = x * 2.0
    x = x + 1.0
    return x


def partly(x, n, flag):
    k = n * 2
    z = np.floor(x) + x * k
    w = x.shape[0]
    return z * w


def independent(x, y):
    return np.floor(y) + x


class Holder:
    @staticmethod
    def method(x):
        return np.exp(x)
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    return import_source(tmp_path_factory.mktemp("passes"), "s2s_pass_cases", SOURCE)


def test_parse_keeps_user_positions(m):
    p = parse_function(m.nested)
    assert p.node.lineno == 5 and p.filename == m.__file__
    ret = p.node.body[0]
    assert ret.lineno == 6 and ret.col_offset == 4
    assert p.line_text(6).strip() == "return np.sum(np.sin(x * y) + x)"


def test_parse_dedents_methods_and_maps_columns(m):
    p = parse_function(m.Holder.method)
    assert p.node.name == "method" and not p.node.decorator_list
    assert p.node.body[0].col_offset == 8


def test_normalize_one_operation_per_statement(m):
    nf = normalize(parse_function(m.nested))
    text = ast.unparse(nf.node)
    assert "x_times_y = x * y" in text
    assert "sin_x_times_y = np.sin(x_times_y)" in text
    for stmt in nf.node.body[:-1]:
        value = stmt.value
        for child in ast.iter_child_nodes(value):
            assert isinstance(child, (ast.Name, ast.Constant, ast.operator, ast.expr_context,
                                      ast.Attribute, ast.keyword)), ast.unparse(stmt)


def test_normalize_versions_reassigned_names(m):
    nf = normalize(parse_function(m.ssa))
    targets = [s.targets[0].id for s in nf.node.body if isinstance(s, ast.Assign)]
    assert targets == ["x_1", "x_2"]
    assert nf.result == "x_2"


def test_analyze_activity(m):
    nf = normalize(parse_function(m.partly))
    act = analyze(nf, (0,))
    assert {"x", "z"} <= act.active
    assert "k" not in act.varied and "w" not in act.varied
    assert "floor_x" not in act.varied
    assert act.independent == ()


def test_analyze_independent_input_reason(m):
    nf = normalize(parse_function(m.independent))
    act = analyze(nf, (0, 1))
    assert act.independent == (1,)
    assert "np.floor" in act.reasons[1]


def test_transform_leaves_rule_placeholders(m):
    nf = normalize(parse_function(m.nested))
    t = transform(nf, analyze(nf, (0, 1)))
    adjoint = astor.to_source(t.adjoint)
    assert "_s2s_vjp('np.sin'" in adjoint
    assert "_s2s_vjp('np.add'" in adjoint
    forward = astor.to_source(t.forward)
    assert forward.rstrip().endswith("return result, residuals")


def test_inline_expands_templates(m):
    nf = normalize(parse_function(m.nested))
    t = inline(transform(nf, analyze(nf, (0, 1))))
    adjoint = astor.to_source(t.adjoint)
    assert "_s2s_vjp(" not in adjoint
    assert "np.cos(x_times_y)" in adjoint


def test_fold_constant_branches_and_tuples():
    tree = ast.parse("if (True, False)[1]:\n    a = 1\nelse:\n    a = len((1, 2, 3))\n")
    out = fold_block(tree.body)
    assert ast.unparse(ast.Module(body=out, type_ignores=[])) == "a = 3"


def test_single_use_parts_are_substituted():
    f = ast.parse("def f(g, x):\n    x_bar_part = g * x\n    x_bar = x_bar_part\n"
                  "    return x_bar\n").body[0]
    substitute_single_use(f)
    assert ast.unparse(f).splitlines()[1].strip() == "x_bar = g * x"


def test_dead_code_is_removed_but_effects_kept():
    f = ast.parse("def f(x):\n    a = np.sin(x)\n    b = a * 2\n    print(x)\n"
                  "    s = stack.pop()\n    return x\n").body[0]
    eliminate_dead(f, keep=set())
    text = ast.unparse(f)
    assert "np.sin" not in text and "a * 2" not in text
    assert "print(x)" in text and "stack.pop()" in text


def test_optimize_keeps_only_residuals_the_adjoint_reads(m):
    nf = normalize(parse_function(m.nested))
    t = optimize(inline(transform(nf, analyze(nf, (0,)))))
    ret = t.forward.body[-1]
    kept = [ast.unparse(e) for e in ret.value.elts[1].elts]
    assert "x_times_y" in kept and "y" in kept
    # sin(x*y) has the shape of x*y, which is kept anyway: it is not kept itself.
    assert "sin_x_times_y" not in kept
    # sin(x*y) + x is needed only for its shape: shape and dtype suffice.
    assert "_s2s_meta(plus)" in kept or "_s2s_meta(result)" in kept, kept


def test_emit_restores_comments_and_is_deterministic():
    f = ast.parse("def f(x):\n    y = x\n    return y\n").body[0]
    f.body.insert(0, comment("line 3: y = x"))
    text = to_source([f])
    assert "    # line 3: y = x\n" in text
    assert to_source([f]) == text


def test_emit_loads_with_live_globals_and_helpers():
    text = "def f(x):\n    return _s2s_unbroadcast(x * K, np.ones(2))\n"
    g = {"K": 2.0, "np": np}
    fns = load(Emitted(source=text, function_names=["f"], filename="<test>", globals=g))
    np.testing.assert_allclose(fns["f"](np.ones((3, 2))), [6.0, 6.0])
    g["K"] = 3.0
    np.testing.assert_allclose(fns["f"](np.ones((3, 2))), [9.0, 9.0])
    assert "_s2s_unbroadcast" not in g
