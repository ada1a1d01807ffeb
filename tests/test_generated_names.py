"""Each generated module keeps its own lines in linecache.

Two texts generated for one function under options its file name does not show
(forward mode's `demand` and `structure`, reverse mode's argument structure)
once went into linecache under one name, so the first code's tracebacks showed
the second's lines, and a derivative of it read the wrong source."""
import linecache

import numpy as np

from s2sgrad.compiler import compile_function, compile_jvp


def pair(x, y):
    a = np.sin(x) * y
    b = np.exp(x) + y
    return a, b


def takes_tuple(xy, w):
    x, y = xy
    return np.sum(np.sin(x) * y * w)


def _lines_of(fn) -> str:
    return "".join(linecache.getlines(fn.__code__.co_filename)).rstrip()


def test_two_jvps_of_one_function_keep_their_own_lines():
    everything = compile_jvp(pair, (0, 1))
    first_only = compile_jvp(pair, (0, 1), demand=(True, False))
    assert everything.module_source != first_only.module_source
    for compiled in (everything, first_only):
        assert _lines_of(compiled.jvp) == compiled.module_source.rstrip()
    x, y = np.linspace(0.1, 0.9, 4), np.linspace(1.0, 2.0, 4)
    (a, b), (a_dot, b_dot) = everything.jvp(x, y, np.ones(4), np.zeros(4))
    np.testing.assert_allclose(a_dot, np.cos(x) * y, rtol=1e-12)
    np.testing.assert_allclose(b_dot, np.exp(x), rtol=1e-12)


def test_two_pairs_of_one_function_keep_their_own_lines():
    both = compile_function(takes_tuple, (0, 1))
    first_item = compile_function(takes_tuple, (0, 1), structure=((0, (True, False)),))
    assert both.module_source != first_item.module_source
    for compiled in (both, first_item):
        assert _lines_of(compiled.adjoint) == compiled.module_source.rstrip()
