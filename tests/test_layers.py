"""The package's shape: the import-linter layers of pyproject.toml, and no cycle.

The contracts say which layer may import which (public API over backends over
the compiler over rules over runtime helpers; inside the compiler, the drivers
over the passes in pipeline order over the facts they share). The cycle check
below is independent of import-linter: it reads every import statement in
s2sgrad/, those inside functions included, and looks for strongly connected
components of more than one module.
"""
import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "s2sgrad")


def _modules():
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def import_graph():
    """module -> the s2sgrad modules it imports (anywhere in its text)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(open(path).read())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[:len(parts) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
                    break
        graph[name] = edges
    return graph


def cycles(graph):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_the_package():
    graph = import_graph()
    assert len(graph) > 40
    assert cycles(graph) == []


def test_the_cycle_check_can_fail():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_layer_contracts_hold():
    import importlinter  # noqa: F401 - in the test extra: CI installs it
    run = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command;"
                          "lint_imports_command()"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "9 kept, 0 broken" in run.stdout


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(sources):
    """(module, name) for each `from M import _name`, and each `m._name` read through a
    package module `m` imported by name, in the given {module: text}: a name another
    module needs is part of its home's interface and says so (no underscore)."""
    found = []
    for module, text in sources.items():
        tree = ast.parse(text)
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                found += [(module, a.name) for a in node.names if _private(a.name)]
                if node.level or (node.module or "").startswith("s2sgrad"):
                    modules |= {a.asname or a.name for a in node.names}
        found += [(module, f"{node.value.id}.{node.attr}") for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and _private(node.attr)
                  and isinstance(node.value, ast.Name) and node.value.id in modules]
    return found


def test_no_module_imports_another_modules_private_names():
    sources = {name: open(path).read() for name, path in _modules().items()}
    assert len(sources) > 40
    assert private_imports(sources) == []


def test_the_private_import_check_can_fail():
    found = private_imports({"a": "from .b import _helper, public\nfrom __future__ import x\n",
                             "c": "from d import __version__\n",
                             "e": "from . import f as g\nimport numpy as np\n"
                                  "g._table, np._core, g.__doc__\n"})
    assert found == [("a", "_helper"), ("e", "g._table")]


LONGEST_CLASS = 400   # lines: a class longer than this does more than one job (issue 33)


def long_classes(sources, limit=LONGEST_CLASS):
    """(module, class, lines) for each class longer than `limit` lines."""
    return [(module, node.name, node.end_lineno - node.lineno + 1)
            for module, text in sources.items() for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > limit]


def test_no_class_is_longer_than_400_lines():
    sources = {name: open(path).read() for name, path in _modules().items()}
    assert long_classes(sources) == []


def test_the_class_length_check_can_fail():
    text = "class Big:\n" + "    x = 1\n" * 5
    assert long_classes({"m": text}, limit=5) == [("m", "Big", 6)]
    assert long_classes({"m": text}, limit=6) == []


def mixin_stacks(sources):
    """(module, class, bases) for each class made of two or more of the package's own
    classes: a pass written as a stack of mixins shares its state through `self`
    with methods in other files (issue 33); its parts are objects it holds instead."""
    own = {node.name for text in sources.values() for node in ast.walk(ast.parse(text))
           if isinstance(node, ast.ClassDef)}
    found = []
    for module, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if sum(b.split(".")[-1] in own for b in bases) >= 2:
                    found.append((module, node.name, bases))
    return found


def test_no_pass_is_a_stack_of_mixins():
    sources = {name: open(path).read() for name, path in _modules().items()}
    assert mixin_stacks(sources) == []


def test_the_mixin_check_can_fail():
    text = "class A:\n    pass\nclass B:\n    pass\nclass C(A, B, object):\n    pass\n"
    assert mixin_stacks({"m": text}) == [("m", "C", ["A", "B", "object"])]
    assert mixin_stacks({"m": text.replace("A, B, ", "A, ")}) == []


_LAZY_SCRIPT = '''
import sys
import numpy as np
import s2sgrad

def f(x):
    return np.sum(np.sin(x) * x)

g = s2sgrad.grad(f)
passes = ("s2sgrad.compiler.driver", "s2sgrad.compiler.pipeline",
          "s2sgrad.compiler.normalize", "s2sgrad.compiler.transform",
          "s2sgrad.rules.numpy_rules", "scipy")
print(sorted(m for m in passes if m in sys.modules))
x = np.linspace(0.1, 1.0, 4)
assert np.allclose(g(x), np.sin(x) + x * np.cos(x))
print(sorted(m for m in passes[:5] if m in sys.modules) == sorted(passes[:5]))
'''


def test_the_compiler_loads_at_the_first_compile_not_with_s2sgrad(tmp_path):
    """`import s2sgrad` and decorating a function import none of the passes, nor the
    rule table, nor SciPy: they load when the first gradient is compiled, which then
    works."""
    script = tmp_path / "lazy.py"
    script.write_text(_LAZY_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "S2SGRAD_CACHE": "0"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_a_users_rule_given_before_the_table_loads_replaces_the_tables(tmp_path):
    """s2sgrad.defvjp registers the table first (it loads at its first use), so a
    user's rule for a function the table covers is the one that stays."""
    script = tmp_path / "user_rule.py"
    script.write_text('''
import sys
import numpy as np
import s2sgrad
assert "s2sgrad.rules.numpy_rules" not in sys.modules
s2sgrad.defvjp(np.sin, "x", x="g * 2.0")

def f(x):
    return np.sum(np.sin(x))

print(np.allclose(s2sgrad.grad(f, witness=False)(np.ones(3)), 2.0))
print(s2sgrad.grad(lambda v: np.sum(np.cos(v)))(np.zeros(2)).tolist())
''')
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "S2SGRAD_CACHE": "0"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["True", "[-0.0, -0.0]"]


def test_a_pass_imported_by_itself_finds_the_drivers(tmp_path):
    """A driver module imported directly (as the CLI and tests do) still reaches the
    other drivers through compiler.reentry: a derivative inside differentiated code
    compiles."""
    script = tmp_path / "direct.py"
    script.write_text('''
import numpy as np
import s2sgrad
from s2sgrad.compiler.driver import compile_function

def inner(x):
    return np.sum(x ** 3)

def outer(x):
    return np.sum(s2sgrad.grad(inner)(x) * x)

pair = compile_function(outer, (0,))
x = np.array([0.5, 2.0])
print(np.allclose(s2sgrad.grad(outer)(x), 9.0 * x ** 2))
''')
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "S2SGRAD_CACHE": "0"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


# Imported inside functions on purpose: heavy or optional, wanted by few calls.
LAZY_IMPORTS = {"scipy", "scipy.integrate", "numba", "autograd", "autograd.core",
                "autograd.numpy", "scipy.signal", "astor", "numpy", "tempfile"}


def local_imports(sources, allowed=frozenset(LAZY_IMPORTS)):
    """(module, imported) for each import inside a function that is not one of the
    allowed lazy imports: a module the code needs is imported where the module's
    other imports are, so its layers show in one place."""
    found = []
    for module, text in sources.items():
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    found += [(module, a.name) for a in node.names if a.name not in allowed]
                elif isinstance(node, ast.ImportFrom) and \
                        (node.level or node.module not in allowed):
                    found.append((module, "." * node.level + (node.module or "")))
    return found


def test_the_compiler_and_the_runtime_import_at_the_top():
    sources = {name: open(path).read() for name, path in _modules().items()
               if name.startswith(("s2sgrad.compiler.", "s2sgrad.runtime."))
               and name != "s2sgrad.compiler"}   # (its drivers load lazily: PEP 562)
    assert len(sources) > 40
    assert local_imports(sources) == []


def test_the_local_import_check_can_fail():
    text = ("import os\n\ndef f():\n    import scipy\n    from scipy import linalg\n"
            "    from .errors import InternalError\n    import inspect\n")
    assert local_imports({"m": text}) == [("m", ".errors"), ("m", "inspect")]
