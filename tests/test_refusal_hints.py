"""Every refusal says what to write instead, and what it says works.

One row per refusal a user meets: the refused code, a fragment of the message,
a fragment of the hint (the error's last line), and the code the hint asks for.
The test checks that the refused code raises TransformError at its line with a
caret and that hint, then that the suggested code compiles, differentiates
(central finite differences) and, where the refused code runs in plain Python,
computes the same value.
"""
import textwrap

import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad

X = np.array([0.3, -0.5, 0.8])

HEADER = """\
import numpy as np
import s2sgrad
"""

# name: (refused f, message fragment, hint fragment, suggested f)
ROWS = {
    "try": ("""
        def f(x):
            try:
                y = np.sin(x)
            except ValueError:
                y = x
            return np.sum(y)
        """, "'Try' statements are not supported", "Move the try/except outside", """
        def f(x):
            return np.sum(np.sin(x))
        """),
    "with": ("""
        import warnings

        def f(x):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                y = np.log1p(x * x)
            return np.sum(y)
        """, "'With' statements are not supported", "Move the with-block outside", """
        def f(x):
            return np.sum(np.log1p(x * x))
        """),
    "global": ("""
        SCALE = 2.0

        def f(x):
            global SCALE
            SCALE = 3.0
            return np.sum(SCALE * x ** 2)
        """, "'Global' statements are not supported", "Pass the value in as an argument", """
        def f(x, scale=3.0):
            return np.sum(scale * x ** 2)
        """),
    "nested def rebinding the outer variable": ("""
        def f(x):
            total = 0.0

            def add(v):
                nonlocal total
                total = total + np.sum(v * v)
            add(x)
            return total
        """, "a nested function with nonlocal or global",
        "Return the new value instead of rebinding the outer one", """
        def f(x):
            total = 0.0

            def add(total, v):
                return total + np.sum(v * v)
            total = add(total, x)
            return total
        """),
    "nested class": ("""
        def f(x):
            class Box:
                pass
            return np.sum(x ** 2)
        """, "'ClassDef' statements are not supported", "Define classes at module level", """
        class Box:
            pass

        def f(x):
            return np.sum(x ** 2)
        """),
    "import": ("""
        def f(x):
            from s2s_no_such_module import scale
            return np.sum(x * scale(x))
        """, "this import fails when the function is compiled", "Install the module", """
        def f(x):
            return np.sum(x * x)
        """),
    "del": ("""
        def f(x):
            y = x * 2.0
            z = np.sin(y)
            del y
            return np.sum(z)
        """, "'Delete' statements are not supported", "Drop the del statement", """
        def f(x):
            y = x * 2.0
            z = np.sin(y)
            return np.sum(z)
        """),
    "yield": ("""
        def values(x):
            y = yield np.sum(x)
            yield y

        def f(x):
            return sum(values(x))
        """, "a yield whose value is used", "Yield each value as a statement", """
        def values(x):
            yield np.sum(x)

        def f(x):
            return sum(values(x))
        """),
    "attribute assignment": ("""
        class Box:
            pass

        BOX = Box()

        def f(x):
            BOX.last = np.sum(x)
            return BOX.last * 2.0
        """, "assignment to an attribute is not supported",
        "Keep the value in a local variable and return it", """
        def f(x):
            last = np.sum(x)
            return last * 2.0
        """),
    "walrus outside a condition": ("""
        def f(x):
            y = (s := np.sum(x)) * 2.0
            return y + s
        """, "assignment expressions (:=) are not supported", "Assign in a separate statement", """
        def f(x):
            s = np.sum(x)
            y = s * 2.0
            return y + s
        """),
    "self.method() in a method": ("""
        class Model:
            def __init__(self):
                self.W = np.eye(3)

            def predict(self, x):
                return np.tanh(self.W @ x)

            def loss(self, x):
                return np.sum(self.predict(x) ** 2)

        MODELS = [Model()]

        def f(x):   # (an item of a list: the instance not known when compiling)
            return MODELS[0].loss(x)
        """, "no gradient rule for the method .loss()", "Model.method(self, ...)", """
        class Model:
            def __init__(self):
                self.W = np.eye(3)

            def predict(self, x):
                return np.tanh(self.W @ x)

            def loss(self, x):
                return np.sum(Model.predict(self, x) ** 2)

        MODELS = [Model()]

        def f(x):
            return Model.loss(MODELS[0], x)
        """),
    "starred call": ("""
        def g(a, b):
            return a * b

        def f(x):
            s = [x]
            s.append(np.sin(x))
            return np.sum(g(*s))
        """, "no gradient rule for a call with *args or **kwargs", "g(s[0], s[1]) for g(*s)", """
        def g(a, b):
            return a * b

        def f(x):
            s = (x, np.sin(x))
            return np.sum(g(s[0], s[1]))
        """),
    "keyword unpacking": ("""
        def g(a, b):
            return a * b

        def f(x):
            d = {"a": x}
            d["b"] = np.cos(x)         # (a dict literal as it is is spelled out)
            return np.sum(g(**d))
        """, "no gradient rule for a call with *args or **kwargs", "spelled out", """
        def g(a, b):
            return a * b

        def f(x):
            d = {"a": x, "b": np.cos(x)}
            return np.sum(g(a=d["a"], b=d["b"]))
        """),
    "set comprehension": ("""
        def f(x):
            return sum({v * v for v in x})
        """, "no gradient rule for a set comprehension", "a set or set comprehension as a list", """
        def f(x):
            squares = []
            for v in x:
                squares.append(v * v)
            return sum(squares)
        """),
    "list concatenation": ("""
        def f(x):
            parts = [x] + [np.sin(x)]
            return np.sum(parts[0] * parts[1])
        """, "concatenating lists or tuples that carry a gradient",
        "Build the list with append, extend or a comprehension", """
        def f(x):
            parts = [x]
            parts.append(np.sin(x))
            return np.sum(parts[0] * parts[1])
        """),
    "list.insert": ("""
        def f(x):
            parts = [np.sin(x)]
            parts.insert(0, x)
            return np.sum(parts[0] * parts[1])
        """, "modifies a differentiated value in place", "Compute a new value", """
        def f(x):
            parts = [x]
            parts.extend([np.sin(x)])
            return np.sum(parts[0] * parts[1])
        """),
    "np.put_along_axis": ("""
        def f(x):
            order = np.argsort(x)
            out = np.zeros_like(x)
            np.put_along_axis(out, order, x * 2.0, axis=0)
            return np.sum(out * np.arange(3.0))
        """, "writes into one of its arguments in place", "Compute the value as a result", """
        def f(x):
            order = np.argsort(x)
            out = np.zeros_like(x)
            out[order] = x * 2.0
            return np.sum(out * np.arange(3.0))
        """),
    "out= with where=": ("""
        def f(x):
            y = np.zeros(3)
            np.exp(x, out=y, where=x > 0.0)
            return np.sum(y * np.arange(3.0))
        """, "np.exp with these arguments writes into one of its arguments", "np.exp(x)", """
        def f(x):
            y = np.where(x > 0.0, np.exp(x), 0.0)
            return np.sum(y * np.arange(3.0))
        """),
    "array .sort()": ("""
        def f(x):
            y = x * 1.0
            y.sort()
            return np.sum(y * np.arange(3.0))
        """, "modifies a differentiated value in place", "Compute a new value", """
        def f(x):
            y = np.sort(x * 1.0)
            return np.sum(y * np.arange(3.0))
        """),
    "no rule, no source": ("""
        def f(x):
            return np.sum(np.i0(x))
        """, "no gradient rule for np.i0", "wrap the computation in an s2sgrad.Function", """
        import scipy.special

        class I0(s2sgrad.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return np.i0(x)

            @staticmethod
            def vjp(ctx, g):
                x, = ctx.saved_tensors
                return g * scipy.special.i1(x)

        def f(x):
            return np.sum(I0.apply(x))
        """),
    "complex constant": ("""
        def f(x):
            return np.linalg.norm(x * 1j + 1.0)
        """, "is not differentiated for complex values",
        "keep real and imaginary parts in separate float arrays", """
        def f(x):
            return np.sqrt(np.sum(x * x + 1.0))
        """),
    "decorator that computes": ("""
        import functools

        def times10(fn):
            @functools.wraps(fn)
            def wrapper(*args):
                return 10.0 * fn(*args)
            return wrapper

        @times10
        def f(x):
            return np.sum(x ** 2)
        """, "is wrapped by a decorator whose code", "or drop the decorator", """
        def f(x):
            return 10.0 * np.sum(x ** 2)
        """),
}


def _module(make_module, text: str):
    return make_module(HEADER + textwrap.dedent(text))


@pytest.mark.parametrize("name", sorted(ROWS))
def test_refusal_names_the_line_and_its_fix_works(name, make_module):
    bad_text, message, hint, good_text = ROWS[name]
    bad = _module(make_module, bad_text)
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(bad.f)(X.copy())
    text = str(info.value)
    assert message in text, text
    lines = text.splitlines()
    assert hint in lines[-1], f"hint {hint!r} not in {lines[-1]!r}"
    assert info.value.lineno is not None, text
    assert info.value.offset is None or "^" in text, text   # a caret wherever a column is known
    assert info.value.filename == bad.__file__, info.value.filename

    good = _module(make_module, good_text)
    g = s2sgrad.grad(good.f)(X.copy())
    np.testing.assert_allclose(g, numeric_grad(good.f, [X.copy()], 0), rtol=1e-6, atol=1e-8)
    try:
        before = bad.f(X.copy())
    except Exception:  # noqa: BLE001 - refused code that does not run as Python either
        return
    if name not in ("yield", "global"):   # (a generator; a global the call changes)
        np.testing.assert_allclose(good.f(X.copy()), before, rtol=1e-12)


def test_every_hint_of_the_unsupported_constructs_is_in_the_table():
    """The hints analyze.py chooses by construct kind each have a row (a hint added
    there needs a row here)."""
    from s2sgrad.compiler import analyze
    shown = " ".join(hint for _, _, hint, _ in ROWS.values())
    hints = {kind.value: text for kind, text in analyze._UNSUPPORTED_HINTS.items()}
    hints["mutate_call"] = analyze.MUTATING_CALL_HINT
    for kind, text in hints.items():
        first = {"unknown": "Register a rule", "opaque": "g(s[0], s[1])",
                 "method": "Model.method(self, ...)", "mutate": "Compute a new value",
                 "mutate_call": "Compute the value as a result"}[kind]
        assert first in text, (kind, text)
        assert kind == "unknown" or first in shown, kind


def test_show_of_a_function_forward_that_sets_ctx_attributes(tmp_path):
    """`s2sgrad show FILE.py:Class.forward` on a forward that sets ctx attributes
    (examples/checks.py's Scale) shows the Function as s2sgrad inlines it (it cannot
    be differentiated on its own)."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
               S2SGRAD_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "s2sgrad", "show",
                           os.path.join(root, "examples", "checks.py") + ":Scale.forward",
                           "--no-color"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "shown as s2sgrad inlines it" in proc.stdout
    assert "x_bar = _s2s_unbroadcast(result_bar * k, x)" in proc.stdout   # (k may widen x)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".s2s")]
