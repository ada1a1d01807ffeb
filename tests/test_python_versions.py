"""`requires-python` says what is tested, and nothing newer than it is used unguarded."""
import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Names that exist only from a Python version above the floor (3.11): using one
# needs a guard (`if sys.version_info >= ...` or a try/except around it).
NEWER = {
    "batched": (3, 12),          # itertools.batched
    "monitoring": (3, 12),       # sys.monitoring
    "TypeAliasType": (3, 12),
    "override": (3, 12),         # typing.override
    "get_original_bases": (3, 12),   # types.get_original_bases
}


def _floor():
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    found = re.search(r'requires-python\s*=\s*">=(\d+)\.(\d+)"', text)
    assert found, "requires-python must state a floor"
    return int(found.group(1)), int(found.group(2))


def test_requires_python_is_the_version_tested_here():
    floor = _floor()
    assert floor == (3, 11), "only 3.11 is tested (CI, docs); raise it or test the new floor"
    assert sys.version_info[:2] >= floor
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert 'target-version = "py311"' in text
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "3.11" in readme


def _guarded(tree):
    """Nodes under `if sys.version_info ...` or a try that catches AttributeError,
    ImportError or NameError."""
    safe = set()
    for node in ast.walk(tree):
        body = []
        if isinstance(node, ast.If) and "version_info" in ast.unparse(node.test):
            body = node.body + node.orelse
        elif isinstance(node, ast.Try) and any(
                h.type is None or re.search(r"AttributeError|ImportError|NameError",
                                            ast.unparse(h.type)) for h in node.handlers):
            body = node.body
        for stmt in body:
            safe.update(id(n) for n in ast.walk(stmt))
    return safe


def test_no_api_newer_than_the_floor_unguarded():
    floor = _floor()
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, "s2sgrad")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            tree = ast.parse(open(path).read())
            safe = _guarded(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in NEWER and \
                        NEWER[node.attr] > floor and id(node) not in safe:
                    owner = ast.unparse(node.value)
                    found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: "
                                 f"{owner}.{node.attr}")
    assert not found, found
