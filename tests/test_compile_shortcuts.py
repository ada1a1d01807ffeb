"""The compile-time shortcuts of stop 27 give exactly what the longer ways gave.

Each shortcut skips work whose result is known: a fold of statements already
folded, a round of pruning that can drop nothing, a recount of names the steps
kept counted, a copy of a parsed tree nobody else holds, a walk of a template
without the calls looked for. Each test here runs the long way beside the short
one (or checks the fact the shortcut rests on) and compares.
"""
import ast
import importlib
import os
import sys

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad.compiler import clear_cache, compile_function
from s2sgrad.compiler.names import (
    assign_node,
    copy_location,
    name_node,
    sanitize,
)
from s2sgrad.compiler.parse import parse_function
from s2sgrad.errors import InternalError

optimize_mod = importlib.import_module("s2sgrad.compiler.optimize")
folding_mod = importlib.import_module("s2sgrad.compiler.optimize.folding")
copies_mod = importlib.import_module("s2sgrad.compiler.optimize.copies")
fusion_mod = importlib.import_module("s2sgrad.compiler.optimize.fusion")
residuals_mod = importlib.import_module("s2sgrad.compiler.optimize.residuals")
normalize_pkg = importlib.import_module("s2sgrad.compiler.normalize")
normalize_support = importlib.import_module("s2sgrad.compiler.normalize.scope")
registry = importlib.import_module("s2sgrad.rules.registry")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "benchmarks"))
import cache_workload  # noqa: E402 - the 61-line function of benchmarks/cache_timing.py


# -- programs that reach every shortcut -------------------------------------------------
def rnn_like(W, U, b, xs, h0):
    h = h0
    total = 0.0
    for t in range(3):
        pre = W @ xs[t] + U @ h + b
        h = np.tanh(pre)
        total = total + np.sum(h * h)
    return total + np.sum(np.sin(b))


def item_writes(x, y):
    z = x * 1.0
    for i in range(3):
        z[i] = z[i] * y[i] + np.sin(y[i])
        z[i + 1] = z[i] * 2.0
    return np.sum(z * z)


def augmented(x, y):
    a = x * 2.0
    a += y
    b = a * a
    b *= 3.0
    return np.sum(b) + np.sum(np.exp(x))


def branches(x, s):
    total = np.sum(x)
    if s > 0.5:
        total = total + np.sum(np.cos(x) * s)
    else:
        total = total - s * np.sum(x * x)
    t = np.tanh(total)
    return t * t + np.sum(np.cos(x)) / (1.0 + s * s)


def fill_slices(x, w):
    grid = np.ones((4, 4))
    grid[1] = np.sin(x) * w
    grid[2:, 1::2] = np.exp(0.1 * w[1::2])
    grid[0, 3] = np.sum(x * w)
    return np.sum(np.sin(grid) * grid)


def mutate_argument(x, v):
    x[0] = v * 2.0
    x[1] += v
    return np.sum(x * x)


def nested_while(x, a):
    outer = 0
    while outer < 2 and np.max(np.abs(a)) < 5.0:
        inner = 0
        while inner < 2 and np.sum(x) < 9.0:
            x = np.tanh(x) * 1.2 + a
            inner += 1
        a = a * 0.9 + 0.05
        outer += 1
    return np.sum(x * x * a)


def written_in_nested_loops(x, y):
    acc = 0.0
    for scale in (0.5, 2.0):
        for step in range(2):
            cur = np.cos(y * scale) + step
            cur[1] = np.sum(x * x)
            acc = acc + np.sum(cur * y)
    return acc


CASES = [
    (rnn_like, (0, 1, 2), lambda r: (0.3 * r.standard_normal((4, 3)),
                                     0.3 * r.standard_normal((4, 4)),
                                     r.standard_normal(4), r.standard_normal((3, 3)),
                                     r.standard_normal(4))),
    (item_writes, (0, 1), lambda r: (r.standard_normal(5), r.standard_normal(5))),
    (augmented, (0, 1), lambda r: (r.standard_normal((2, 3)), r.standard_normal(3))),
    (branches, (0, 1), lambda r: (r.standard_normal(4), 0.7)),
    (cache_workload.rnn_loss, (0, 1, 2, 3),
     lambda r: cache_workload.make_inputs(0)),
    (fill_slices, (0, 1), lambda r: (r.standard_normal(4), r.standard_normal(4))),
    (mutate_argument, (0, 1), lambda r: (r.standard_normal(3), 0.4)),
    (nested_while, (0, 1), lambda r: (0.1 * r.standard_normal(3), 0.2 * r.standard_normal(3))),
    (written_in_nested_loops, (0, 1), lambda r: (r.standard_normal(3), r.standard_normal(3))),
]


def generated(fn, wrt) -> str:
    clear_cache()
    return compile_function(fn, wrt).module_source


@pytest.fixture(autouse=True)
def no_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(tmp_path / "cache"))
    yield
    clear_cache()


# -- the optimiser's shortcuts give the long way's code ---------------------------------
def _long_way(monkeypatch):
    """Undo the shortcuts: prune and eliminate again in every round, fold the whole
    adjoint after shape witnesses are shared, count names afresh (the check mode's
    comparison) and copy the parsed tree for normalisation."""
    monkeypatch.setattr(optimize_mod, "SETTLE", False)
    original_share = optimize_mod.share_shape_witnesses

    def share_unknown_statements(*args, **kwargs):
        shared = original_share(*args, **kwargs)
        return shared | {None} if shared else shared
    monkeypatch.setattr(optimize_mod, "share_shape_witnesses", share_unknown_statements)
    monkeypatch.setattr(normalize_pkg, "has_augmented_assignment", lambda stmts: True)


@pytest.mark.parametrize("fn, wrt, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_shortcuts_generate_the_code_of_the_long_way(fn, wrt, make, monkeypatch):
    short = generated(fn, wrt)
    with monkeypatch.context() as m:
        _long_way(m)
        long = generated(fn, wrt)
    assert short == long


@pytest.mark.parametrize("fn, wrt, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_kept_counts_equal_fresh_counts(fn, wrt, make, monkeypatch):
    """The check mode recounts after every round (and raises on a difference)."""
    monkeypatch.setattr(copies_mod, "VERIFY", True)
    monkeypatch.setattr(fusion_mod, "VERIFY", True)
    generated(fn, wrt)


def test_drifted_counts_are_caught_in_check_mode(monkeypatch):
    monkeypatch.setattr(copies_mod, "VERIFY", True)
    original = copies_mod._propagate_local_copies

    def forgets_a_copy(stmts, fdef, occurrences, load_counts, index, copied):
        done = original(stmts, fdef, occurrences, load_counts, index, copied)
        copied.clear()   # as if it had not said which copies it removed
        return done
    monkeypatch.setattr(copies_mod, "_propagate_local_copies", forgets_a_copy)
    with pytest.raises(Exception, match="drifted from a fresh count"):
        generated(cache_workload.rnn_loss, (0, 1, 2, 3))


@pytest.mark.parametrize("fn, wrt, make", CASES, ids=[c[0].__name__ for c in CASES])
def test_gradients_match_central_differences(fn, wrt, make):
    args = make(np.random.default_rng(3))
    copies = [np.array(a) if isinstance(a, np.ndarray) else a for a in args]
    grads = s2sgrad.grad(fn, wrt=wrt)(*copies)   # (some cases write into their arguments)
    for k, i in enumerate(wrt):
        numeric = numeric_grad(fn, args, i)
        np.testing.assert_allclose(grads[k], numeric, rtol=1e-5, atol=1e-7)


# -- pruning saves: when asking again would drop nothing ---------------------------------
def test_pruning_is_final_only_for_plain_dead_restores(monkeypatch):
    seen = []
    original = optimize_mod.prune_saves

    def recording(t, names=None):
        pruned = original(t, names)
        seen.append(pruned)
        return pruned
    monkeypatch.setattr(optimize_mod, "prune_saves", recording)
    generated(cache_workload.rnn_loss, (0, 1, 2, 3))
    assert seen[0].changed and seen[0].final   # the RNN's dead restores: plain ones
    assert len(seen) == 1    # and the confirming round is not run
    seen.clear()
    generated(fill_slices, (0, 1))
    # Dropping item restores (`grid[2:, 1::2] = saved`: a read of `grid`) can make an
    # earlier restore of `grid` dead: pruning runs again until it drops nothing.
    assert seen[0].changed and not seen[0].final
    assert len(seen) > 1 and not seen[-1].changed
    assert bool(residuals_mod.Pruned(False, True)) is False
    assert bool(residuals_mod.Pruned(True, False)) is True


# -- folding reaches its fixpoint in one pass ---------------------------------------------
FOLDABLE = """
def f(x, a, b):
    y = (1 + 2) * x ** 1 + len((a, b)) + (a, b)[0] + ((a, b), x)[0][1]
    z = _s2s_zeros_like(len((a,))) + -(-(2 ** 3)) + (1 < 2 < 3) + (x ** 1) ** 1
    if 1 > 2:
        w = x + 0 * 1
    else:
        w = (3 if True else 4) + x
    for i in range(2 * 2):
        w = w + (not False) * x
    return y + z + w
"""


def test_folding_twice_is_folding_once():
    once = folding_mod.fold_block(ast.parse(FOLDABLE).body[0].body)
    twice = folding_mod.fold_block(folding_mod.fold_block(ast.parse(FOLDABLE).body[0].body))
    assert [ast.dump(s) for s in once] == [ast.dump(s) for s in twice]
    assert "len" not in ast.unparse(ast.Module(body=once, type_ignores=[]))


def test_fold_statement_folds_a_simple_statement_as_fold_block_does():
    for s_block, s_alone in zip(ast.parse(FOLDABLE).body[0].body[:2],
                                ast.parse(FOLDABLE).body[0].body[:2]):
        folding_mod.fold_block([s_block])
        folding_mod.fold_statement(s_alone)
        assert ast.dump(s_alone) == ast.dump(s_block)
    with pytest.raises(ValueError, match="simple statements"):
        folding_mod.fold_statement(ast.parse(FOLDABLE).body[0].body[2])


# -- normalise works on the parser's own tree ---------------------------------------------
def test_normalise_rewrites_an_own_tree_once_and_refuses_a_second_time():
    parsed = parse_function(branches)
    assert parsed.own_tree and not parsed.tree_used
    normalize_pkg.normalize(parsed)
    assert parsed.tree_used
    with pytest.raises(InternalError, match="normalised already"):
        normalize_pkg.normalize(parsed)


def test_normalise_copies_a_tree_it_may_have_to_redo():
    parsed = parse_function(augmented)
    before = ast.dump(parsed.node, include_attributes=True)
    normalize_pkg.normalize(parsed)
    assert not parsed.tree_used
    assert ast.dump(parsed.node, include_attributes=True) == before


def test_normalise_copies_a_tree_shared_with_other_parses():
    parsed = parse_function(branches)
    parsed.own_tree = False   # (as a tree found in a parse of the whole file)
    before = ast.dump(parsed.node, include_attributes=True)
    normalize_pkg.normalize(parsed)
    assert not parsed.tree_used
    assert ast.dump(parsed.node, include_attributes=True) == before


def test_augmented_assignments_are_found_in_every_block():
    def has(source):
        return normalize_support.has_augmented_assignment(ast.parse(source).body)
    assert not has("x = 1\nif x:\n    y = x + 1\n")
    assert has("for i in range(3):\n    if i:\n        pass\n    else:\n        s += i\n")
    assert has("while x:\n    try:\n        pass\n    except E:\n        x -= 1\n")
    assert has("def g():\n    t = 0\n    t *= 2\n")
    assert has("with c:\n    x @= y\n")


# -- the small shared helpers ---------------------------------------------------------------
def _placed(node):
    """The position attributes a node has, set on it (None included)."""
    return {k: v for k, v in node.__dict__.items()
            if k in ("lineno", "col_offset", "end_lineno", "end_col_offset")}


def test_copy_location_is_ast_copy_location():
    tree = ast.parse(FOLDABLE)
    sources = [n for n in ast.walk(tree)] + [ast.Name("bare", ast.Load()), ast.Load(),
                                              ast.arguments(posonlyargs=[], args=[],
                                                            kwonlyargs=[], kw_defaults=[],
                                                            defaults=[])]
    no_end = ast.Name("x", ast.Load())
    no_end.lineno, no_end.col_offset = 7, 3
    sources.append(no_end)
    for old in sources:
        for make in (lambda: ast.Name("t", ast.Load()), lambda: ast.Pass(),
                     lambda: ast.keyword("k", ast.Constant(1)), lambda: ast.Load(),
                     lambda: ast.comprehension(ast.Name("i", ast.Store()),
                                               ast.Name("r", ast.Load()), [], 0)):
            ours, theirs = make(), make()
            assert copy_location(ours, old) is ours
            ast.copy_location(theirs, old)
            assert _placed(ours) == _placed(theirs), (ast.dump(old), type(ours))


def test_node_builders_build_what_the_keyword_constructors_build():
    assert ast.dump(name_node("x")) == ast.dump(ast.Name(id="x", ctx=ast.Load()))
    assert ast.dump(name_node("x", True)) == ast.dump(ast.Name(id="x", ctx=ast.Store()))
    value = ast.BinOp(left=name_node("a"), op=ast.Add(), right=ast.Constant(1))
    assert ast.dump(assign_node("y", value)) == ast.dump(
        ast.Assign(targets=[ast.Name(id="y", ctx=ast.Store())], value=value, type_comment=None))
    target = ast.Tuple(elts=[name_node("p", True), name_node("q", True)], ctx=ast.Store())
    assert assign_node(target, value).targets == [target]
    fdef = ast.parse("def f(a):\n    return a\n").body[0]
    fdef.body.insert(0, ast.fix_missing_locations(ast.copy_location(
        assign_node("b", name_node("a")), fdef.body[0])))
    code = compile(ast.Module(body=[fdef], type_ignores=[]), "<t>", "exec")
    assert code.co_consts   # (the built nodes compile)


def test_sanitize_memo_answers_as_before():
    for stem in ["x", "a.b", "1st", "lambda", "None", "__weird__ name", "", "x" * 50]:
        assert sanitize(stem) == sanitize.__wrapped__(stem)
        assert sanitize(stem).isidentifier()


def test_rule_numpy_calls_are_read_from_its_templates():
    sin = registry.lookup_function(np.sin)
    assert "cos" in sin.numpy_calls
    exp = registry.lookup_function(np.exp)
    assert not exp.numpy_calls & {"sin", "cos", "tan", "sqrt", "log"}


def test_math_twins_still_replace_numpy_calls_on_python_floats():
    def scalar(a, b):
        return np.sin(a) * np.cos(b) + np.exp(a * b)
    clear_cache()
    source = compile_function(scalar, (0, 1), scalars=("a", "b")).module_source
    assert "math.cos(a)" in source or "_s2s_math.cos(a)" in source
    g = s2sgrad.grad(scalar, wrt=(0, 1))(0.3, 0.7)
    np.testing.assert_allclose(g[0], np.cos(0.3) * np.cos(0.7) + 0.7 * np.exp(0.21), rtol=1e-12)
    np.testing.assert_allclose(g[1], -np.sin(0.3) * np.sin(0.7) + 0.3 * np.exp(0.21),
                               rtol=1e-12)


# -- a loop's probes: one, when the first changes nothing ---------------------------------
def test_a_probe_from_the_same_state_ends_the_same_way(monkeypatch):
    """What lets adjoint_loop skip a second probe that would start where the first
    did: run every probe twice from the same state and compare (over loops whose
    probes carry adjoints in, out and around)."""
    control = importlib.import_module("s2sgrad.compiler.transform.adjoint_control")
    original = control.AdjointControl.probe
    runs = []

    def twice(self, s):
        start = dict(self.core.state)
        first = original(self, s)
        assert self.core.state == start   # (a probe puts the state back)
        again = original(self, s)
        assert again == first
        runs.append(first)
        return first
    monkeypatch.setattr(control.AdjointControl, "probe", twice)
    for fn, wrt, _ in CASES:
        generated(fn, wrt)
    assert len(runs) >= 8


def test_one_probe_when_the_first_ends_where_it_started(monkeypatch):
    control = importlib.import_module("s2sgrad.compiler.transform.adjoint_control")
    original = control.AdjointControl.probe
    calls = []

    def counting(self, s):
        calls.append(s.lineno)
        return original(self, s)
    monkeypatch.setattr(control.AdjointControl, "probe", counting)
    generated(cache_workload.rnn_loss, (0, 1, 2, 3))
    assert len(calls) == 1   # the RNN's loop: no adjoint becomes live across it
    calls.clear()
    generated(rnn_like, (0, 1, 2))
    assert len(calls) >= 2   # W_bar, U_bar, b_bar become live: probed again


def test_what_may_not_fold_folds_to_itself():
    """fold_block skips a statement in which no node folds as it is: over the
    generated code of the programs above and the optimiser's own source, folding
    such a statement (a copy) changes nothing; the foldable sample is seen."""
    from s2sgrad.compiler.names import clone
    sources = [generated(fn, wrt) for fn, wrt, _ in CASES]
    sources += [open(folding_mod.__file__).read(), open(copies_mod.__file__).read(), FOLDABLE]
    skipped = 0
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.stmt, ast.expr)) and not folding_mod._may_fold(node):
                skipped += 1
                copy = clone(node)
                assert ast.dump(folding_mod._fold(copy)) == ast.dump(node)
    assert skipped > 1000
    sample = ast.parse(FOLDABLE).body[0].body
    assert all(folding_mod._may_fold(s) for s in sample[:2])
    assert folding_mod._may_fold(sample[2].test) and folding_mod._may_fold(sample[3].iter)
