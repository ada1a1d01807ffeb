"""The shortcuts that make compiling cheaper give what the longer ways gave.

`emit.to_source` writes the functions without copying them first and notes
the `_s2s_` names it writes; `loader.compile_emitted` puts the source in its
factory as text; the optimiser and the normaliser walk nodes with lists
instead of generators. Each is compared here with the way it replaced.
"""
import ast
import importlib
import types

import numpy as np

import s2sgrad
from s2sgrad.compiler import clear_cache, compile_function, emit, loader
from s2sgrad.compiler.emit import to_source
from s2sgrad.compiler.loader import Emitted, compile_emitted, free_names
from s2sgrad.compiler.marks import comment
from s2sgrad.compiler.names import clone
from s2sgrad.compiler.ops import OpKind

# Internals by module (the package's `normalize` and `optimize` are pass functions).
names_mod = importlib.import_module("s2sgrad.compiler.names")
normalize_mod = importlib.import_module("s2sgrad.compiler.normalize.scope")
statements_corpus = importlib.import_module("s2sgrad.compiler.normalize.statements")
statements_mod = importlib.import_module("s2sgrad.compiler.optimize.statements")


def _sample(x, W, n):
    h = np.tanh(W @ x)
    total = 0.0
    for i in range(n):
        if i % 2 == 0:
            total = total + np.sum(h * i)
        else:
            total = total - np.sum(np.sin(h)) / (i + 1)
    ys = []
    for j in range(2):
        ys.append(h[j] ** 2)
    return total + ys[0] + ys[1] * 2


def _compiled():
    clear_cache()
    return compile_function(_sample, (0, 1))


def _code_facts(code: types.CodeType):
    """Everything about a code object a traceback, debugger or caller can see."""
    facts = [code.co_name, code.co_qualname if hasattr(code, "co_qualname") else None,
             code.co_firstlineno, code.co_code, code.co_names, code.co_varnames,
             code.co_freevars, code.co_cellvars, code.co_flags, code.co_argcount,
             list(code.co_lines())]
    if hasattr(code, "co_positions"):
        facts.append(list(code.co_positions()))
    for const in code.co_consts:
        facts.append(_code_facts(const) if isinstance(const, types.CodeType) else repr(const))
    return facts


def _factory_facts(factory: types.CodeType):
    """What the factory's functions are made of (where the factory's own return
    is written does not matter: it cannot raise)."""
    return [factory.co_name, factory.co_argcount, factory.co_varnames, factory.co_cellvars,
            factory.co_freevars, factory.co_names] + \
        [_code_facts(c) for c in factory.co_consts if isinstance(c, types.CodeType)]


def _emitted(source, names=("f",), filename="<test>"):
    return Emitted(source=source, function_names=list(names), filename=filename,
                   globals={"np": np})


# -- the factory written as text ------------------------------------------------------
def test_textual_factory_compiles_what_the_tree_compiled():
    c = _compiled()
    e = _emitted(c.module_source, [c.forward.__name__, c.adjoint.__name__],
                 "<s2sgrad test factory>")
    code, closure_names = compile_emitted(e)
    assert loader._factory_text(e.source, closure_names, e.function_names) is not None
    assert _factory_facts(code) == _factory_facts(loader._factory_from_tree(e, closure_names))
    assert closure_names == sorted(free_names(e.source, e.function_names))


def test_generated_lines_and_columns_are_those_of_the_source():
    c = _compiled()
    lines = c.module_source.splitlines()
    for fn in (c.forward, c.adjoint):
        first = lines[fn.__code__.co_firstlineno - 1]
        assert first.startswith(f"def {fn.__name__}(")
        if not hasattr(fn.__code__, "co_positions"):
            continue
        spans = 0
        for start, end, col, end_col in fn.__code__.co_positions():
            if start is None or col is None or start != end or col == end_col:
                continue
            text = lines[start - 1]
            assert 0 <= col < end_col <= len(text)
            assert text[col:end_col].strip()
            spans += 1
        assert spans > 10


def test_traceback_points_at_the_generated_line():
    def f(x):
        y = np.log(x)
        return np.sum(1.0 / (y - y))

    clear_cache()
    pair = compile_function(f, (0,))
    with np.errstate(all="raise"):
        try:
            pair.forward(np.ones(3))
        except FloatingPointError as error:
            tb = error.__traceback__
            while tb.tb_next is not None:
                tb = tb.tb_next
            line = pair.module_source.splitlines()[tb.tb_lineno - 1]
            assert "/" in line
        else:  # pragma: no cover - numpy raised nothing
            raise AssertionError("expected a floating point error")


def test_triple_quoted_string_falls_back_to_the_tree():
    source = '# header\ndef f(x):\n    s = """a\ndef g():\n    pass"""\n    return x, s\n'
    e = _emitted(source)
    assert loader._factory_text(source, ["_s2s_np"], ["f"]) is None
    code, names = compile_emitted(e)
    assert _factory_facts(code) == _factory_facts(loader._factory_from_tree(e, names))
    fn = types.FunctionType(code, e.globals, "_s2s_factory")()[0]
    assert fn(1) == (1, "a\ndef g():\n    pass")


def test_other_unusual_text_falls_back():
    base = "# header\ndef f(x):\n    return x\n"
    assert loader._factory_text(base, [], ["f"]) is not None
    for bad in ("# header\ndef f(x):\n    return x + \\\n1\n",          # continuation
                "def f(x):\n    return x\n",                          # no header line
                "# header\ndef f(x):\n\treturn x\n",                    # tab
                "# header\nx = 1\ndef f(x):\n    return x\n",           # top-level code
                "# header\ndef f(x):\n    return x"):                   # no final newline
        assert loader._factory_text(bad, [], ["f"]) is None, bad


def test_text_that_does_not_compile_reports_as_before():
    e = _emitted("# header\ndef f(x):\n    return x +\n")
    try:
        compile_emitted(e)
    except SyntaxError as error:
        assert error.filename == "<test>"
    else:  # pragma: no cover
        raise AssertionError("expected a SyntaxError")


# -- to_source ------------------------------------------------------------------------
def _reference_to_source(functions, header=""):
    """What to_source did before: copy, swap comments for markers, swap back."""
    import re

    import astor
    mark = "__s2s_comment__"
    texts = []
    module = ast.Module(body=[clone(f) for f in functions], type_ignores=[])
    for node in ast.walk(module):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str) and node.value.value.startswith(mark):
            texts.append(node.value.value[len(mark):])
            node.value.value = f"{mark}{len(texts) - 1}"
    raw = astor.to_source(module, pretty_source="".join)
    pattern = re.compile(r"^(\s*)(?:'''|\"\"\"|'|\")" + mark + r"(\d+)(?:'''|\"\"\"|'|\")\s*$")
    lines = []
    for line in raw.splitlines():
        m = pattern.match(line)
        lines.append(f"{m.group(1)}# {texts[int(m.group(2))]}" if m else line)
    text = "\n".join(lines).rstrip() + "\n"
    return header + text


def _dump_all(functions):
    return [(type(n).__name__, sorted(k for k in n.__dict__)) for f in functions
            for n in ast.walk(f)] + [ast.dump(f, include_attributes=True) for f in functions]


def test_to_source_matches_the_copying_version_and_leaves_the_tree_alone():
    tree = ast.parse("def f(x, y):\n"
                     "    a = -x + (y - 1) * 2 ** -x\n"
                     "    if not (a > 0 and y < 1):\n"
                     "        a = _s2s_helper(a, 'text', (1,), {'k': [a]})\n"
                     "    return (lambda t: -t)(a), f'{a!r:>3}'\n")
    fdef = tree.body[0]
    fdef.body.insert(1, comment("line 2: a = -x  # \"quoted\" 'both'"))
    fdef.body[2].body.insert(0, comment("inside"))
    before = _dump_all([fdef])
    header = "# s2sgrad: test\n"
    assert to_source([fdef], header) == _reference_to_source([fdef], header)
    assert _dump_all([fdef]) == before
    text = to_source([fdef], header)
    assert loader.helper_names(text) == ["_s2s_helper"]
    assert to_source([fdef]) == _reference_to_source([fdef])


def test_to_source_of_a_tree_sharing_a_node():
    tree = ast.parse("def f(x):\n    y = -x\n    return y\n")
    fdef = tree.body[0]
    shared = ast.UnaryOp(op=ast.USub(), operand=ast.BinOp(
        left=ast.Name(id="x", ctx=ast.Load()), op=ast.Add(), right=ast.Constant(1)))
    fdef.body[0].value = ast.BinOp(left=shared, op=ast.Pow(), right=shared)
    before = _dump_all([fdef])
    assert to_source([fdef]) == _reference_to_source([fdef])
    assert _dump_all([fdef]) == before


def test_generated_pairs_are_written_as_before():
    c = _compiled()
    assert c.module_source.startswith("# s2sgrad: generated from _sample")
    x, W = np.linspace(0.1, 0.5, 3), np.eye(3) * 0.5
    g = s2sgrad.grad(_sample, wrt=(0, 1))(x, W, 3)
    eps = 1e-6
    numeric = np.array([(_sample(x + eps * e, W, 3) - _sample(x - eps * e, W, 3)) / (2 * eps)
                        for e in np.eye(3)])
    np.testing.assert_allclose(g[0], numeric, rtol=1e-5, atol=1e-8)


def test_helper_names_of_text_not_made_by_to_source_are_parsed():
    text = "# h\ndef f(x):\n    return _s2s_np.sum(x) + _s2s_copy_value(x)  # _s2s_nothing\n"
    assert sorted(loader.helper_names(text)) == ["_s2s_copy_value", "_s2s_np"]


# -- walks ------------------------------------------------------------------------------
def _corpus():
    return ast.parse(open(statements_corpus.__file__).read())


def test_walk_is_ast_walk():
    tree = _corpus()
    for node in [tree, *list(ast.walk(tree))[:400]]:
        assert [id(n) for n in names_mod.walk(node)] == [id(n) for n in ast.walk(node)]


_MARKERS = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def _reference_walk_scope(node):
    todo = list(ast.iter_child_nodes(node))
    while todo:
        sub = todo.pop()
        yield sub
        if not isinstance(sub, normalize_mod.SCOPES):
            todo.extend(ast.iter_child_nodes(sub))


def test_walk_values_is_ast_walk_without_contexts_and_operators():
    tree = _corpus()
    for node in [tree, *[n for n in ast.walk(tree) if not isinstance(n, _MARKERS)][:400]]:
        assert [id(n) for n in names_mod.walk_values(node)] == \
            [id(n) for n in ast.walk(node) if not isinstance(n, _MARKERS)]


def test_walk_scope_and_assigned_names():
    tree = _corpus()
    for node in [tree, *list(ast.walk(tree))[:400]]:
        # (contexts and operators, which no question here is about, are not entered)
        assert [id(n) for n in normalize_mod.walk_scope(node)] == \
            [id(n) for n in _reference_walk_scope(node) if not isinstance(n, _MARKERS)]
        statements = (ast.stmt, ast.excepthandler, ast.match_case)
        assert [id(n) for n in normalize_mod.scope_statements(node)] == \
            [id(n) for n in _reference_walk_scope(node) if isinstance(n, statements)]
        expected = {sub.id for sub in [node, *_reference_walk_scope(node)]
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del))}
        assert normalize_mod.assigned_names([node]) == expected


def test_walk_statements_order():
    tree = _corpus()
    expected = []

    def visit(stmts):
        for s in stmts:
            expected.append(s)
            for attr in ("body", "orelse"):
                inner = getattr(s, attr, None)
                if isinstance(inner, list):
                    visit(inner)
    visit(tree.body)
    assert statements_mod.walk_statements(tree.body) == expected


def test_names_memo_matches_loads_and_stores():
    tree = _corpus()
    memo = statements_mod.Names()
    for node in list(ast.walk(tree))[:600]:
        if isinstance(node, ast.stmt):
            assert memo.loads(node) == statements_mod._loads(node)
            assert memo.stores(node) == statements_mod.stored_in(node)
            assert memo.loads(node) is memo.loads(node)


def test_parsed_and_generated_trees_are_written_without_a_copy(monkeypatch):
    def no_copy(node):
        raise AssertionError("copied")

    tree = ast.parse("def f(x, y):\n    return -x + y * 2, [x, y]\n")  # shares Load()
    expected = _reference_to_source(tree.body)
    monkeypatch.setattr(emit, "clone", no_copy)
    assert to_source(tree.body) == expected
    assert not any(attr in n.__dict__ for n in ast.walk(tree) for attr in ("_pp", "_p_op"))
    assert _compiled().module_source.startswith("# s2sgrad: generated from _sample")


def _reference_name_nodes(node, args=None):
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name):
            out.append(n)
            continue
        if args is not None and isinstance(n, ast.arg):
            args.add(n.arg)
        for field in reversed(n._fields):
            value = getattr(n, field, None)
            if isinstance(value, list):
                stack.extend(item for item in reversed(value) if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST):
                stack.append(value)
    return out


def test_name_nodes_order_and_parameters():
    tree = _corpus()
    tree.body.append(ast.parse("def g(a, /, b=1, *c, d: int = 2, **e):\n"
                               "    global q\n    {**e, 'k': [x for x in c]}\n").body[0])
    for node in [tree, *list(ast.walk(tree))[:3000]]:
        want_args, got_args = set(), set()
        want = _reference_name_nodes(node, want_args)
        assert [id(n) for n in names_mod.name_nodes(node, got_args)] == [id(n) for n in want]
        assert got_args == want_args


# -- the optimiser's NameIndex --------------------------------------------------------
def test_name_index_answers_what_fresh_walks_answer():
    tree = _corpus()   # real code: with, try, nested functions, comprehensions
    c = _compiled()
    generated = ast.parse(c.module_source)
    index = statements_mod.NameIndex()
    for fdef in [n for t in (tree, generated) for n in ast.walk(t)
                 if isinstance(n, ast.FunctionDef)]:
        assert [id(n) for n in index.function(fdef)] == \
            [id(n) for n in names_mod.name_nodes(fdef)]
        for s in statements_mod.walk_statements(fdef.body):
            assert [id(n) for n in index.deep(s)] == [id(n) for n in names_mod.name_nodes(s)]
        # asked again: the same (cached) answers
        assert [id(n) for n in index.function(fdef)] == \
            [id(n) for n in names_mod.name_nodes(fdef)]


def test_name_index_after_changed_and_stale_answers_in_check_mode(monkeypatch):
    monkeypatch.setattr(statements_mod, "VERIFY", False)   # as without the check run
    fdef = ast.parse("def f(a, b):\n    c = a + b\n    return c\n").body[0]
    index = statements_mod.NameIndex()
    assign = fdef.body[0]
    assert [n.id for n in index.own(assign)] == ["c", "a", "b"]
    assign.value.right = ast.Name(id="z", ctx=ast.Load())   # a step puts a new node in
    index.changed(assign)
    assert [n.id for n in index.own(assign)] == ["c", "a", "z"]
    assign.value.left = ast.Name(id="w", ctx=ast.Load())    # ... and forgets to say so
    assert [n.id for n in index.own(assign)] == ["c", "a", "z"]   # (not checked)
    monkeypatch.setattr(statements_mod, "VERIFY", True)
    try:
        index.own(assign)
    except statements_mod.StaleNames as error:
        assert "line" in str(error) and "NameIndex.changed" in str(error)
    else:  # pragma: no cover
        raise AssertionError("a stale entry went unnoticed in check mode")
    index.changed(assign)
    for n in index.function(fdef):   # renaming in place keeps the nodes: nothing stale
        n.id = n.id.upper()
    assert [n.id for n in index.function(fdef)] == ["C", "W", "Z", "C"]


def test_activity_closures_are_the_fixpoints():
    import random

    from s2sgrad.compiler import analyze as analyze_mod
    from s2sgrad.compiler.ops import Op

    def fixpoint_forward(seeds, ops):
        out, changed = set(seeds), True
        while changed:
            changed = False
            for op in ops:
                if op.outputs and set(op.diff_inputs) & out and not set(op.outputs) <= out:
                    out |= set(op.outputs)
                    changed = True
        return out

    def fixpoint_backward(seeds, ops, diff_only):
        out, changed = set(seeds), True
        while changed:
            changed = False
            for op in ops:
                if op.kind == OpKind.CONTROL and not diff_only:
                    continue
                inputs = op.diff_inputs + ([] if diff_only else op.other_inputs)
                if set(op.outputs) & out and not set(inputs) <= out:
                    out |= set(inputs)
                    changed = True
        return out

    rng = random.Random(3)
    names = [f"v{i}" for i in range(12)]
    for _ in range(200):
        kinds = [OpKind.RULE, OpKind.COPY, OpKind.CONTROL]
        ops = [Op(rng.choice(kinds), rng.sample(names, rng.randint(0, 2)),
                  diff_inputs=rng.sample(names, rng.randint(0, 3)),
                  other_inputs=rng.sample(names, rng.randint(0, 2)))
               for _ in range(rng.randint(1, 10))]
        pairs = [(None, op) for op in ops]
        seeds = set(rng.sample(names, 2))
        assert analyze_mod._forward_closure(seeds, pairs, True) == fixpoint_forward(seeds, ops)
        for diff_only in (True, False):
            assert analyze_mod._backward_closure(seeds, pairs, diff_only) == \
                fixpoint_backward(seeds, ops, diff_only)


def test_collector_paused_while_compiling_and_restored():
    import gc

    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return np.sum(x * x)

    def broken(x):
        return np.sum(undefined_name(x))  # noqa: F821 - refused when compiled

    clear_cache()
    gc.enable()
    s2sgrad.grad(f)(np.ones(2))
    assert gc.isenabled()
    compiler_memory = importlib.import_module("s2sgrad.compiler.memory")
    observed = []
    original = compiler_memory.PairCache.enter

    def enter(self):
        original(self)
        observed.append(gc.isenabled())
    compiler_memory.PairCache.enter = enter
    try:
        clear_cache()
        s2sgrad.grad(f)(np.ones(2))
        try:
            s2sgrad.grad(broken)(np.ones(2))
        except Exception:  # noqa: BLE001 - whatever the refusal, the collector is back
            pass
    finally:
        compiler_memory.PairCache.enter = original
    assert observed and not any(observed)
    assert gc.isenabled()
    gc.disable()   # a user who turned it off keeps it off
    try:
        clear_cache()
        s2sgrad.grad(f)(np.ones(3))
        assert not gc.isenabled()
    finally:
        gc.enable()
