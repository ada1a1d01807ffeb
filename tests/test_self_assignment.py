"""`x[idx] = x`: a value written into itself (found by the fuzzer, seed 6843).

The adjoint of `x[idx] = v` gives v the cotangent of the written items and zeroes
them in x's cotangent. Where v is x itself, the zeroing must come first: for a
name the compiler could not prove an array (read by `sorted`, so perhaps a list)
the zeroing waited until x's old items were back, after v's share had been
added, and the gradient through the write was silently zero. Each case against
central differences, in reverse mode (optimised and not) and forward mode."""
import numpy as np
import pytest
from conftest import numeric_grad

import s2sgrad
from s2sgrad import functional
from s2sgrad.compiler import compile_function

SOURCE = '''
import numpy as np

G4 = np.array([0.1, 0.6, -0.3, 0.2])

def reversed_then_sorted(b):
    out = np.tanh(G4 * np.sum(b * b)) * 1.0
    out[::-1] = out
    return np.sum(np.array(sorted(out)) * G4)

def shifted_then_sorted(b):
    out = np.tanh(G4 * np.sum(b)) + b[0]
    out[1:] = out[:-1]
    return np.sum(np.array(sorted(out)) * G4)

def list_reversed_into_itself(b):
    L = [b[0] * 2.0, np.sin(b[1]), b[0] * b[1]]
    L[::-1] = L
    return L[0] * 3.0 + L[1] - L[2] * L[2]
'''


@pytest.mark.parametrize("b", [np.array([0.02, -0.77]), np.array([0.4, 0.1])])
@pytest.mark.parametrize("name", ["reversed_then_sorted", "shifted_then_sorted",
                                  "list_reversed_into_itself"])
def test_a_value_written_into_itself_against_differences(make_module, name, b):
    m = make_module(SOURCE)
    f = getattr(m, name)
    want = numeric_grad(f, (b,), 0)
    for optimize in (True, False):
        pair = compile_function(f, (0,), optimize)
        _, residuals = pair.forward(b.copy())
        np.testing.assert_allclose(pair.adjoint(residuals, 1.0), want, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(s2sgrad.grad(f, witness="always")(b), want, rtol=1e-6,
                               atol=1e-9)
    u = np.array([0.3, -1.1])
    _, tangent = functional.jvp(f, (b,), (u,))
    np.testing.assert_allclose(tangent, want @ u, rtol=1e-6, atol=1e-9)
