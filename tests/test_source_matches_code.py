"""The source s2sgrad differentiates is the code that runs (issue 31, item 7).

s2sgrad reads a function's source from its file, Python runs the code object
compiled when the module was imported. Where the two differ -- the file edited
after import without a reload, a stale .pyc (a same-size edit with the
modification time put back), exec under an existing file's name, a stale
linecache entry -- compiling raises a TransformError naming the function and
the file, instead of giving the gradient of other code. Functions whose source
is their code (methods with private names and super(), closures, lambdas,
decorators, `from __future__ import annotations`, asserts pytest rewrote,
s2sgrad's own generated derivatives) differentiate as before: every gradient
here is checked against its closed form.
"""
import functools
import importlib
import importlib.util
import linecache
import os
import py_compile
import sys
import textwrap

import numpy as np
import pytest

import s2sgrad
from s2sgrad import cache
from s2sgrad.compiler import clear_cache, source_check

X = np.array([0.5, 1.0, 2.0])

CUBE = "import numpy as np\n\n\ndef f(x):\n    return np.sum(x ** 3)\n"
FOURTH = CUBE.replace("x ** 3", "x ** 4")   # the same size


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty memory cache, the disk cache in a directory of the test's own."""
    monkeypatch.setenv("S2SGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("S2SGRAD_CACHE", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    clear_cache()
    yield tmp_path
    clear_cache()


def _import(directory, name, text):
    path = directory / f"{name}.py"
    path.write_text(text)
    importlib.invalidate_caches()
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def _refused(f):
    with pytest.raises(s2sgrad.TransformError) as info:
        s2sgrad.grad(f)(X)
    message = str(info.value)
    assert "differs from the code that runs" in message
    assert f.__code__.co_filename in message and "f" in message
    assert "reload" in message
    return message


# -- the code that runs is not the source -----------------------------------------------
def test_a_module_edited_after_import_is_refused(fresh):
    m = _import(fresh, "edited_after_import", CUBE)
    (fresh / "edited_after_import.py").write_text(FOURTH.replace("return", "return 1.0 *"))
    assert m.f(X) == pytest.approx(np.sum(X ** 3))   # Python still runs x ** 3
    _refused(m.f)
    importlib.reload(m)   # the fix the message gives
    np.testing.assert_allclose(s2sgrad.grad(m.f)(X), 4 * X ** 3, rtol=1e-12)


def test_a_same_size_edit_with_the_time_put_back_and_a_stale_pyc_is_refused(fresh):
    path = fresh / "stale_pyc.py"
    path.write_text(CUBE)
    stamp = os.stat(path).st_mtime_ns
    py_compile.compile(str(path), cfile=importlib.util.cache_from_source(str(path)))
    m = _import(fresh, "stale_pyc", CUBE)
    np.testing.assert_allclose(s2sgrad.grad(m.f)(X), 3 * X ** 2, rtol=1e-12)   # stored
    clear_cache()
    path.write_text(FOURTH)
    os.utime(path, ns=(stamp, stamp))
    importlib.invalidate_caches()
    sys.modules.pop("stale_pyc")
    m = importlib.import_module("stale_pyc")   # Python takes the .pyc: x ** 3 runs
    assert m.f(X) == pytest.approx(np.sum(X ** 3))
    _refused(m.f)   # not the disk entry of x ** 3, not the gradient of x ** 4


def test_the_disk_key_depends_on_the_source_text_not_on_size_and_time(fresh):
    """A second process (memory empty, no .pyc, linecache empty) finds the file
    edited to the same size with its time put back, and the x ** 3 entry on
    disk: the key is not the old one, the gradient is the new code's."""
    path = fresh / "same_size.py"
    m = _import(fresh, "same_size", CUBE)
    stamp = os.stat(path).st_mtime_ns
    before = cache.function_key(m.f, (0,), ())
    np.testing.assert_allclose(s2sgrad.grad(m.f)(X), 3 * X ** 2, rtol=1e-12)
    path.write_text(FOURTH)
    os.utime(path, ns=(stamp, stamp))
    assert os.stat(path).st_size == len(CUBE)
    pyc = importlib.util.cache_from_source(str(path))
    if os.path.exists(pyc):
        os.unlink(pyc)
    linecache.cache.pop(str(path), None)
    clear_cache()
    importlib.invalidate_caches()
    sys.modules.pop("same_size")
    m = importlib.import_module("same_size")
    assert m.f(X) == pytest.approx(np.sum(X ** 4))
    assert cache.function_key(m.f, (0,), ()) != before
    np.testing.assert_allclose(s2sgrad.grad(m.f)(X), 4 * X ** 3, rtol=1e-12)


def test_code_made_by_exec_under_an_existing_files_name_is_refused(fresh):
    m = _import(fresh, "exec_target", CUBE)
    namespace = {"np": np}
    exec(compile(FOURTH, m.__file__, "exec"), namespace)   # f on the same line
    f = namespace["f"]
    assert f(X) == pytest.approx(np.sum(X ** 4))
    _refused(f)


def test_a_stale_linecache_entry_is_refused(fresh):
    m = _import(fresh, "stale_lines", CUBE)
    path = m.__file__
    st = os.stat(path)
    linecache.cache[path] = (st.st_size, st.st_mtime, FOURTH.splitlines(True), path)
    try:
        _refused(m.f)
    finally:
        linecache.checkcache(path)
        linecache.cache.pop(path, None)
    np.testing.assert_allclose(s2sgrad.grad(m.f)(X), 3 * X ** 2, rtol=1e-12)


def test_a_lambda_replaced_in_the_file_is_refused(fresh):
    m = _import(fresh, "edited_lambda", "import numpy as np\n\nf = lambda x: np.sum(x ** 3)\n")
    (fresh / "edited_lambda.py").write_text("import numpy as np\n\n"
                                             "f = lambda x: np.sum(x ** 5)\n")
    _refused(m.f)


def test_a_method_edited_after_import_is_refused(fresh):
    source = textwrap.dedent('''
        import numpy as np


        class Model:
            def loss(self, x):
                return np.sum(self.__scale * x ** 3)

            __scale = 1.0
        ''')
    m = _import(fresh, "edited_method", source)
    (fresh / "edited_method.py").write_text(source.replace("x ** 3", "x ** 2"))
    with pytest.raises(s2sgrad.TransformError, match="Model.loss"):
        s2sgrad.grad(m.Model.loss, wrt=1)(m.Model(), X)


# -- no false alarms -------------------------------------------------------------------------
SHAPES = textwrap.dedent('''
    from __future__ import annotations

    import functools

    import numpy as np


    class Base:
        def scale(self, x):
            return 2.0 * x


    class Model(Base):
        __private = 3.0

        def loss(self, x: np.ndarray) -> float:
            __scaled = 3.0 * Base.scale(self, x)   # a private local: _Model__scaled
            inner = lambda v: v ** 2
            return np.sum(inner(__scaled))

        def private(self):
            return self.__private

        def uses_super(self, x):
            return super().scale(x)

        @staticmethod
        def static(x):
            return np.sum(x ** 3)


    def make(c):
        def g(x):
            h = lambda v: v ** 2
            return c * np.sum(h(x))
        return g


    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper


    @deco
    def decorated(x):
        return np.sum(np.sin(x))


    def comprehension(x):
        parts = [x ** k for k in (1, 2)]
        return np.sum(parts[0] * parts[1])


    def factory():
        class Local:
            def __init__(self, w):
                self.w = w

            def run(self, x):
                return np.sum(self.w * x ** 2)
        return Local


    lam = (lambda x:
           np.sum(np.cos(x)))
    ''')


@pytest.fixture
def shapes(fresh):
    return _import(fresh, "source_shapes", SHAPES)


def test_no_false_alarm_for_methods_with_private_names_and_super(shapes):
    from s2sgrad.compiler.parse import parse_function
    assert "__class__" in shapes.Model.uses_super.__code__.co_freevars
    parse_function(shapes.Model.uses_super)   # checked: no TransformError
    assert "_Model__private" in shapes.Model.private.__code__.co_names
    parse_function(shapes.Model.private)
    # loss = sum((3 * 2x)^2) = 36 sum(x^2)
    np.testing.assert_allclose(s2sgrad.grad(shapes.Model.loss, wrt=1)(shapes.Model(), X),
                               72 * X, rtol=1e-12)
    np.testing.assert_allclose(s2sgrad.grad(shapes.Model.static)(X), 3 * X ** 2, rtol=1e-12)
    np.testing.assert_allclose(s2sgrad.grad(shapes.Model().loss)(X), 72 * X, rtol=1e-12)


def test_no_false_alarm_for_closures_lambdas_decorators_and_comprehensions(shapes):
    np.testing.assert_allclose(s2sgrad.grad(shapes.make(1.5))(X), 3.0 * X, rtol=1e-12)
    np.testing.assert_allclose(s2sgrad.grad(shapes.decorated)(X), np.cos(X), rtol=1e-12)
    np.testing.assert_allclose(s2sgrad.grad(shapes.comprehension)(X), 3 * X ** 2,
                               rtol=1e-12)
    np.testing.assert_allclose(s2sgrad.grad(shapes.lam)(X), -np.sin(X), rtol=1e-12)
    local = shapes.factory()
    np.testing.assert_allclose(s2sgrad.grad(local.run, wrt=1)(local(2.0), X), 4 * X,
                               rtol=1e-12)


def test_no_false_alarm_for_generated_derivatives(shapes):
    """grad(grad(f)): s2sgrad differentiates the source it wrote for grad(f)."""
    def second(x):
        return np.sum(s2sgrad.grad(shapes.Model.static)(x) * x)
    # d/dx sum(3 x^2 * x) = 9 x^2
    np.testing.assert_allclose(s2sgrad.grad(second)(X), 9 * X ** 2, rtol=1e-12)


def _asserting(x):
    assert x.shape == (3,), "a vector"
    return np.sum(x ** 2)


def test_no_false_alarm_for_asserts_pytest_rewrote(fresh):
    assert source_check._rewritten_by_pytest(_asserting.__code__)   # this file's are
    np.testing.assert_allclose(s2sgrad.grad(_asserting)(X), 2 * X, rtol=1e-12)


def test_a_partial_and_a_bound_method_of_the_module(shapes):
    f = functools.partial(shapes.Model.loss, shapes.Model())
    np.testing.assert_allclose(s2sgrad.grad(f)(X), 72 * X, rtol=1e-12)


# -- cost ---------------------------------------------------------------------------------
def test_the_verdict_is_remembered_per_code_object(shapes, monkeypatch):
    clear_cache()
    s2sgrad.grad(shapes.Model.static)(X)
    asked, compiled = [], []
    text_of, recompile = source_check._text_of, source_check._recompile

    def asking(*args):
        asked.append(args)
        return text_of(*args)

    def compiling(*args, **kwargs):
        compiled.append(args)
        return recompile(*args, **kwargs)
    monkeypatch.setattr(source_check, "_text_of", asking)
    monkeypatch.setattr(source_check, "_recompile", compiling)
    clear_cache()
    monkeypatch.setenv("S2SGRAD_CACHE", "0")   # compile again, parse again
    np.testing.assert_allclose(s2sgrad.grad(shapes.Model.static)(X), 3 * X ** 2, rtol=1e-12)
    assert asked and not compiled   # checked again, from the remembered verdict


def test_the_comparison_sees_a_changed_constant():
    import ast

    def g(x):
        return x ** 3
    node = ast.parse("def g(x):\n    return x ** 4\n").body[0]
    assert not source_check._compiles_to(node, g.__code__, "g")
    same = ast.parse("def g(x):\n    return x ** 3\n").body[0]
    assert source_check._compiles_to(same, g.__code__, "g")
