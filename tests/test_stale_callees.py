"""Callees reached through a partial, a bound method, a closure or a decorator
are never served stale from the disk cache (issue 31, item 5).

Each scenario is a module whose `f` calls such a callee. A first process
differentiates every `f` with the disk cache on and stores the entries; the
modules are then edited (a partial's argument, which instance a method alias
is bound to, a closure's value, a decorator's body) and a second process,
sharing the cache directory, differentiates them again. Its gradient must be
the edited code's, checked against the closed form and against central
differences of `f` as Python runs it -- or, where s2sgrad refuses the new
code, a TransformError. The modules also hold unrelated globals equal to the
old values (`EPOCHS = 2`), which the entry format once found a partial's
argument under. Scenarios whose edit changes only what the code reads when it
runs must still be loaded from disk, without running the passes: the entries
are reused, soundly, not dropped -- the values the partial or method binds
(an array of the same shape bound to new numbers, another instance of the
same class) are found through it.

All scenarios run in two subprocesses (one per phase), each scenario a module
of its own: a process per scenario would pay for importing NumPy each time.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import s2sgrad
from s2sgrad.compiler import clear_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
X = [0.5, 1.0, 2.0]

MODEL = '''
class Model:
    def __init__(self, w):
        self.w = w

    def act(self, x):
        return self.w * x ** 2

    def __call__(self, x):
        return self.w * x ** 3
'''

# f calls a partial of h bound at module level, beside a global of the same value.
PARTIAL_OF_H = '''
        import functools
        import numpy as np

        EPOCHS = 2


        def h(x, a=1):
            return a * x ** 2


        act = functools.partial(h, a=2)


        def f(x):
            return np.sum(act(x))
        '''

# name: (source, [(old, new)], gradient before, gradient after, loaded from disk after
# the edit); gradients are expressions in x, "error" a TransformError.
SCENARIOS = {
    "partial-keyword": (PARTIAL_OF_H, [("a=2)", "a=3)")], "4 * x", "6 * x", False),
    "partial-keyword-global-read": ('''
        import functools
        import numpy as np

        EPOCHS = 2


        def h(x, a=1):
            return a * x ** 2


        act = functools.partial(h, a=2)


        def f(x):
            return np.sum(act(x)) * (EPOCHS - 1)
        ''', [("a=2)", "a=3)")], "4 * x", "6 * x", False),
    "partial-positional": ('''
        import functools
        import numpy as np

        SCALE = 2.5


        def h(a, x):
            return a * x ** 2


        act = functools.partial(h, 2.5)


        def f(x):
            return np.sum(act(x))
        ''', [("partial(h, 2.5)", "partial(h, 3.5)")], "5 * x", "7 * x", False),
    "partial-function-rebound": ('''
        import functools
        import numpy as np


        def h(x, a=1):
            return a * x ** 2


        def h3(x, a=1):
            return a * x ** 3


        act = functools.partial(h, a=2)


        def f(x):
            return np.sum(act(x))
        ''', [("partial(h, a=2)", "partial(h3, a=2)")], "4 * x", "6 * x ** 2", False),
    "partial-unchanged": (PARTIAL_OF_H, [("# end", "# end, edited after f")], "4 * x",
                          "4 * x", True),
    "partial-array-argument": ('''
        import functools
        import numpy as np


        def h(x, w):
            return w * x ** 2


        W = np.full(3, 2.0)
        act = functools.partial(h, w=W)


        def f(x):
            return np.sum(act(x))
        ''', [("np.full(3, 2.0)", "np.full(3, 3.0)")], "4 * x", "6 * x", True),
    "bound-method-alias": (MODEL + textwrap.dedent('''
        import numpy as np

        model_a = Model(2.0)
        model_b = Model(3.0)
        act = model_a.act


        def f(x):
            return np.sum(act(x))
        '''), [("act = model_a.act", "act = model_b.act")], "4 * x", "6 * x", True),
    "callable-instance": (MODEL + textwrap.dedent('''
        import numpy as np

        model_a = Model(2.0)
        model_b = Model(3.0)
        act = model_a


        def f(x):
            return np.sum(act(x))
        '''), [("act = model_a\\n", "act = model_b\\n")], "6 * x ** 2", "9 * x ** 2", True),
    "closure-value": ('''
        import numpy as np

        C = 2.0


        def make(c):
            def g(x):
                return c * x ** 2
            return g


        act = make(2.0)


        def f(x):
            return np.sum(act(x))
        ''', [("make(2.0)", "make(3.0)")], "4 * x", "6 * x", False),
    "closure-function": ('''
        import numpy as np


        def make(fn):
            def g(x):
                return 2.0 * fn(x)
            return g


        def square(x):
            return x ** 2


        def cube(x):
            return x ** 3


        act = make(square)


        def f(x):
            return np.sum(act(x))
        ''', [("make(square)", "make(cube)")], "4 * x", "6 * x ** 2", False),
    "partial-of-a-closure": ('''
        import functools
        import numpy as np


        def make(c):
            def g(x, a):
                return c * a * x ** 2
            return g


        act = functools.partial(make(2.0), a=1.0)


        def f(x):
            return np.sum(act(x))
        ''', [("make(2.0)", "make(3.0)")], "4 * x", "6 * x", False),
    "partial-inside-a-closure": ('''
        import functools
        import numpy as np

        EPOCHS = 2


        def h(x, a=1):
            return a * x ** 2


        def make(p):
            def g(x):
                return p(x)
            return g


        act = make(functools.partial(h, a=2))


        def f(x):
            return np.sum(act(x))
        ''', [("a=2)", "a=3)")], "4 * x", "6 * x", False),
    "decorator-edited": ('''
        import functools
        import numpy as np


        def deco(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                return fn(*args, **kwargs)
            return wrapper


        @deco
        def act(x):
            return x ** 2


        def f(x):
            return np.sum(act(x))
        ''', [("return fn(*args, **kwargs)", "return 2.0 * fn(*args, **kwargs)")],
        "2 * x", "error", False),
}

CHILD = '''
import json, os, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import s2sgrad
import s2sgrad.compiler as compiler
ran = []
original = compiler.driver.run_passes
def counting(parsed, *args, **kwargs):
    ran.append(parsed.name)
    return original(parsed, *args, **kwargs)
compiler.driver.run_passes = counting
x = np.array({x!r})
out = {{}}
for name in json.loads(sys.argv[2]):
    del ran[:]
    m = __import__(name)
    try:
        out[name] = {{"grad": s2sgrad.grad(m.f)(x).tolist(), "ran": list(ran)}}
    except s2sgrad.TransformError as exc:
        out[name] = {{"error": str(exc), "ran": list(ran)}}
print(json.dumps(out))
'''


def _module(name: str) -> str:
    return "stale_" + name.replace("-", "_")


def _run(directory, cache_path):
    script = os.path.join(directory, "child.py")
    with open(script, "w") as f:
        f.write(CHILD.format(x=X))
    env = dict(os.environ, S2SGRAD_CACHE_DIR=str(cache_path), PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("S2SGRAD_CACHE", None)
    names = json.dumps([_module(n) for n in SCENARIOS])
    run = subprocess.run([sys.executable, script, str(directory), names], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _source(name: str) -> str:
    return textwrap.dedent(SCENARIOS[name][0]).strip() + "\n# end\n"


def _edited(name: str) -> str:
    text = _source(name)
    for old, new in SCENARIOS[name][1]:
        old, new = old.replace("\\n", "\n"), new.replace("\\n", "\n")
        assert text.count(old) == 1, (name, old)
        text = text.replace(old, new)
    return text


def _load(directory, name: str):
    """The scenario's module as Python runs it, in this process (for differences)."""
    namespace = {"__name__": _module(name) + "_here"}
    exec(compile(open(os.path.join(directory, _module(name) + ".py")).read(),
                 "<here>", "exec"), namespace)
    return namespace["f"]


def _central_differences(f, x, eps=1e-6):
    out = np.zeros_like(x)
    for i in range(x.size):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        out[i] = (f(up) - f(down)) / (2 * eps)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both phases: before (entries stored) and after the edits (entries found)."""
    directory = tmp_path_factory.mktemp("stale_callees")
    cache_path = directory / "cache"
    for name in SCENARIOS:
        (directory / (_module(name) + ".py")).write_text(_source(name))
    before = _run(directory, cache_path)
    stored = len([p for p in os.listdir(cache_path) if p.endswith(".s2s")])
    for name in SCENARIOS:
        (directory / (_module(name) + ".py")).write_text(_edited(name))
    after = _run(directory, cache_path)
    return directory, before, after, stored


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_second_process_differentiates_the_edited_code(runs, name):
    directory, before, after, _ = runs
    x = np.array(X)
    _, _, old, new, loaded = SCENARIOS[name]
    np.testing.assert_allclose(before[_module(name)]["grad"], eval(old), rtol=1e-12)
    result = after[_module(name)]
    if new == "error":
        assert "error" in result, result
        assert "decorator" in result["error"]
        return
    assert "error" not in result, result["error"]
    np.testing.assert_allclose(result["grad"], eval(new), rtol=1e-12)
    f = _load(directory, name)
    np.testing.assert_allclose(result["grad"], _central_differences(f, x), rtol=1e-6)
    if loaded:   # the entries hold for the edited module and are used
        assert result["ran"] == [], result


def test_partials_and_bound_methods_are_stored_on_disk(runs):
    """The first process stores the pairs of the callers of partials and bound
    methods (not memory only): their entries are what the second one reuses."""
    _, before, after, stored = runs
    assert stored >= len(SCENARIOS)
    for name in ("partial-unchanged", "bound-method-alias", "callable-instance"):
        assert before[_module(name)]["ran"], name       # compiled in the first process
        assert after[_module(name)]["ran"] == [], name  # loaded in the second


# -- the same questions in one process -----------------------------------------------
def test_a_decorated_function_does_not_share_the_bare_functions_pair(make_module):
    """The memory cache keys a decorated function by its layers too: the pair made
    for the bare function is never served for a wrapper that computes more."""
    m = make_module('''
        import functools
        import numpy as np


        def h(x):
            return np.sum(x ** 2)


        def twice(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                return 2.0 * fn(*args, **kwargs)
            return wrapper


        g = twice(h)
        ''')
    clear_cache()
    x = np.array(X)
    np.testing.assert_allclose(s2sgrad.grad(m.h)(x), 2 * x, rtol=1e-12)
    try:
        gradient = s2sgrad.grad(m.g)(x)
    except s2sgrad.TransformError as exc:
        assert "decorator" in str(exc)
    else:
        np.testing.assert_allclose(gradient, 4 * x, rtol=1e-12)


def test_a_partials_arguments_are_described_by_value():
    import functools

    from s2sgrad import cache

    def h(x, a=1):
        return a * x

    two, three = functools.partial(h, a=2), functools.partial(h, a=3)
    assert cache.describe_value(two) != cache.describe_value(three)
    assert cache.describe_value(two) == cache.describe_value(functools.partial(h, a=2))
    assert cache.locate(2, h) is None   # a value is never found by identity
