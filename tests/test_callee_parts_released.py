"""The cotangents a callee's adjoint returns at each step of a loop are let go once
added in (compiler/optimize/release.py, release_callee_parts).

Without the `del`, a step's parts (an LSTM cell's weight cotangents) live on into
the next step beside the ones its call makes: a step's worth more memory at the
adjoint's peak. Checked: the text, the gradient against central differences on two
shapes (a broadcast bias in the second), the peak against the same code without
the `del`, numba's code (which has no `del`), and that nothing read later is let go.
"""
import tracemalloc

import numpy as np
import pytest
from conftest import check_vjp

import s2sgrad
from s2sgrad.compiler import clear_cache, compile_function
from s2sgrad.compiler.optimize import release

MODULE = '''
import numpy as np


def cell(W, b, h, x):
    return np.tanh(W @ h + b + x)


def run(W, b, xs):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = cell(W, b, h, x)
    return np.sum(h ** 2)


def run_reading_a_part_later(W, b, xs):
    h = np.zeros(W.shape[0])
    total = 0.0
    for x in xs:
        h = cell(W, b, h, x)
        total = total + np.sum(h)
    return np.sum(h ** 2) + total
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    from conftest import import_source
    return import_source(tmp_path_factory.mktemp("parts"), "s2s_callee_parts", MODULE)


def _args(n, bshape, steps=4, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, n)) * 0.5, rng.standard_normal(bshape) * 0.1,
            rng.standard_normal((steps, n))]


def test_the_parts_are_deleted_after_they_are_added_in(m):
    text = s2sgrad.source(m.run, wrt=(0, 1))
    loop = text[text.index("for _ in"):text.index("return W_bar, b_bar")]
    assert "W_bar += W_bar_part" in loop and "del W_bar_part" in loop, text
    # (one `del` for the call's parts, after the last statement reading one)
    dels = [line for line in loop.splitlines() if line.strip().startswith("del ")]
    assert len(dels) == 1 and "b_bar_part" in dels[0], text


@pytest.mark.parametrize("bshape", [(5,), (1,)], ids=["bias", "broadcast_bias"])
@pytest.mark.parametrize("name", ["run", "run_reading_a_part_later"])
def test_gradient_matches_differences(m, name, bshape):
    check_vjp(getattr(m, name), _args(5, bshape), wrt=(0, 1), rtol=1e-6, atol=1e-8)


def _adjoint_peak(m, args):
    pair = compile_function(m.run, (0, 1))
    _, residuals = pair.forward(*args)
    tracemalloc.start()
    try:
        pair.adjoint(residuals, 1.0)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_peak_holds_one_steps_parts_fewer(m, monkeypatch):
    monkeypatch.setenv("S2SGRAD_CACHE", "0")   # (both compiles run the passes)
    args = _args(200, (200,), steps=3)
    clear_cache()
    with_del = _adjoint_peak(m, args)
    monkeypatch.setattr(release, "release_callee_parts", lambda t: None)
    monkeypatch.setattr("s2sgrad.compiler.optimize.release_callee_parts", lambda t: None)
    clear_cache()
    without = _adjoint_peak(m, args)
    clear_cache()
    part = 200 * 200 * 8   # (W's cotangent of one step)
    assert without - with_del >= 0.9 * part, (without, with_del)


def test_numbas_code_has_no_del_and_the_same_gradient(m):
    pytest.importorskip("numba")
    from s2sgrad.backends import jit_source
    args = _args(4, (4,))
    assert "del " not in jit_source(m.run, *args, wrt=(0, 1)).split("def run_nb_adjoint")[-1]
    np.testing.assert_allclose(s2sgrad.grad(m.run, wrt=(0, 1), jit=True)(*args)[0],
                               s2sgrad.grad(m.run, wrt=(0, 1))(*args)[0], rtol=1e-12)
