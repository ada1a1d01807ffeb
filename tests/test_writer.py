"""The source writer writes exactly the text astor writes (compiler/writer.py).

Generated text is a product surface and the content of the disk cache, so the
writer that replaced astor for speed must not change a character. Each case is
written both ways and compared; constructs the writer does not know must make
`to_source` fall back to astor, with the same text as before.
"""
import ast
import textwrap

import pytest
from astor.code_gen import SourceGenerator
from astor.string_repr import pretty_string

from s2sgrad.compiler import emit
from s2sgrad.compiler.marks import COMMENT_MARK
from s2sgrad.compiler.writer import SourceWriter, Unsupported

EXPRESSIONS = [
    "a + b * c", "(a + b) * c", "a - (b - c)", "a - b - c", "a / (b * c)", "a ** b ** c",
    "(a ** b) ** c", "-a ** 2", "(-a) ** 2", "-1 ** 2", "(-1) ** 2", "2 ** -1", "-(-a)",
    "not a", "not (a and b)", "a and b or c", "a and (b or c)", "~a & b", "a | b ^ c & d",
    "a << 1 >> 2", "a @ b @ c", "a @ (b @ c)", "a // b % c", "+a - -b",
    "a < b <= c", "(a < b) == c", "a is not None", "a not in b", "a if b else c",
    "(a if b else c) + 1", "a if (b if c else d) else e", "x[0]", "x[1:2]", "x[::2]",
    "x[:, None]", "x[..., 0]", "x[i, j]", "x[(i, j),]", "x[a + 1:b - 1:-1]", "x[::None]",
    "(a + b).T", "(a + b)[0]", "f(a)(b)", "f(x).sum(axis=0)",
    "np.sum(x, axis=(0, 1), keepdims=True)",
    "f(*args, **kwargs)", "f(a, *b, c=1, **d)", "f(**d)", "f()", "f((a, b))", "f((a,))",
    "(a,)", "()", "(a, (b, c))", "[a, [b], []]", "{a: b, **c}", "{1: 2}", "{a, b}",
    "1.5e-07", "1e300 * 10", "3j", "(1+2j)", "0.0", "-0.0", "True", "None", "...",
    "'abc'", "'a' + 'b'", "f('a long string of more than twenty characters')",
    "b'bytes'", "x.y.z", "(1).real", "a if b else (c, d)", "-x.T", "(a, b)[0]",
]

STATEMENTS = """
def f(a, b=1, *args, c, d=2, **kw):
    x = y = a
    x += b * 2
    x @= b
    (p, q), r = t
    p, = t
    x[0] = 1
    x[i, j] += 2
    if a:
        pass
    elif b:
        x = 1
    elif c:
        x = 2
    else:
        x = 3
    if a:
        x = 1
    else:
        if b:
            x = 2
        x = 3
    for i in range(3):
        continue
    for i, (j, k) in zip(a, b):
        break
    else:
        x = 0
    for i in a + b:
        x = i
    while x < 3:
        x += 1
    else:
        y = 2
    f(x)
    return x, y


def g(a, /, b):
    return


def h(x=(1, 2), *, y=[3]):
    return -x
"""


def _astor(functions):
    generator = SourceGenerator(" " * 4, False, pretty_string)
    generator.visit(ast.Module(body=list(functions), type_ignores=[]))
    return "".join(generator.result)


def _writer(functions):
    writer = SourceWriter()
    writer.module(functions)
    return "".join(writer.result)


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_expression_written_as_astor_writes_it(text):
    for statement in (f"y = {text}", f"return {text}", f"f({text}, 1)", f"f({text})",
                      f"x[{text}] = 1", f"y = g[{text}]"):
        fdef = ast.parse(f"def f():\n    {statement}\n").body[0]
        assert _writer([fdef]) == _astor([fdef]), statement


def test_statements_written_as_astor_writes_them():
    functions = ast.parse(STATEMENTS).body
    assert _writer(functions) == _astor(functions)


def test_built_trees_need_astor_parentheses():
    # Trees the passes build, not parsed: a negative constant under **, a tuple
    # as an attribute's value, a constant as a dict key.
    cases = [
        ast.BinOp(left=ast.Constant(-2.0), op=ast.Pow(), right=ast.Name("x", ast.Load())),
        ast.Attribute(value=ast.Tuple(elts=[ast.Name("a", ast.Load())], ctx=ast.Load()),
                      attr="count", ctx=ast.Load()),
        ast.UnaryOp(op=ast.USub(), operand=ast.Constant(3)),
        ast.BinOp(left=ast.Constant(float("inf")), op=ast.Sub(),
                  right=ast.Constant(float("nan"))),
        ast.Constant(complex(-1.5, -2.0)),
        ast.Constant(complex(2.0, 0.0)),
        ast.Constant(10 ** 400),
    ]
    for value in cases:
        fdef = ast.FunctionDef(name="f", args=ast.arguments(
            posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
            defaults=[]), body=[ast.Return(value=value)], decorator_list=[], returns=None)
        assert _writer([fdef]) == _astor([fdef]), ast.dump(value)


def test_comments_and_helper_names():
    fdef = ast.parse("def f(x):\n    y = _s2s_unbroadcast(x, x)\n    return y\n").body[0]
    fdef.body.insert(0, ast.Expr(value=ast.Constant(COMMENT_MARK + "line 3: y = x")))
    text = emit.to_source([fdef])
    assert text.splitlines()[1] == "    # line 3: y = x"
    assert emit.to_source([fdef], "# header\n").startswith("# header\ndef f(x):\n")
    writer = SourceWriter()
    writer.module([fdef])
    assert list(writer.names) == ["_s2s_unbroadcast"]


@pytest.mark.parametrize("code", [
    "def f(x):\n    return lambda y: y + x\n",
    "def f(x):\n    return [v * 2 for v in x]\n",
    "def f(x):\n    return f'{x!r:>10}'\n",
    "def f(x) -> int:\n    return x\n",
    "def f(x):\n    with open(x) as g:\n        return g\n",
    "def f(x):\n    del x\n    assert x, 'message'\n    raise ValueError('no') from None\n",
    "def f(x):\n    global z\n    return z\n",
])
def test_unknown_constructs_fall_back_to_astor(code):
    fdef = ast.parse(textwrap.dedent(code)).body[0]
    text = emit.to_source([fdef])
    expected = _astor([ast.parse(textwrap.dedent(code)).body[0]])
    assert text == "\n".join(expected.splitlines()).strip() + "\n"


def test_unknown_constructs_are_refused_by_the_writer():
    fdef = ast.parse("def f(x):\n    return lambda y: y + x\n").body[0]
    with pytest.raises(Unsupported):
        _writer([fdef])


def test_strings_the_writer_writes_as_astor_does():
    code = ("def f(x):\n    'a docstring that astor writes triple-quoted'\n"
            "    y = 'a line\\nbreak inside a string long enough'\n"
            "    print('short', 'a string long enough to matter here')\n    return y\n")
    functions = ast.parse(code).body
    assert _writer(functions) == _astor(functions)
