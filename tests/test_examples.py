"""The seed documents' examples print the documented numbers."""
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def run(name):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], capture_output=True,
                          text=True, env=env, cwd=EXAMPLES, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def numbers(text):
    import re
    return [float(t) for t in re.findall(r"-?\d+\.\d*", text)]


@pytest.mark.parametrize("name, expected", [
    ("square.py", [2.0, 4.0, 6.0, 8.0, 10.0]),
    ("cube.py", [0.5327, 0.1885, 0.3232]),
    ("add_mul.py", [6.0, 7.0, 8.0, 3.0, 4.0, 5.0]),
    ("exp_reducer.py", [5.7817, 7.2458, 5.7830, 6.7782,
                        1.4458, 1.3962, 1.3042, 1.6354, 2.1288, 1.0652, 1.5483, 2.5035,
                        2.2046, 1.1292, 1.1432, 1.3059, 1.3225, 1.6652, 1.7753, 2.0152] * 2),
    ("adder.py", [2.4225, 2.3340, 2.0, 2.0, 3.0, 3.0]),
])
def test_example_prints_documented_numbers(name, expected):
    got = numbers(run(name))
    assert got == pytest.approx(expected, abs=1e-12), got


def test_seed_numbers_directly():
    sys.path.insert(0, EXAMPLES)
    try:
        import add_mul
        import cube
        import exp_reducer

        import s2sgrad
        from s2sgrad import functional
        np.testing.assert_allclose(s2sgrad.grad(cube.loss)(cube.X), [0.5327, 0.1885, 0.3232],
                                   atol=5e-5)
        ga, gb = s2sgrad.grad(add_mul.loss, wrt=(0, 1))(np.array([2.0, 3.0, 4.0]),
                                                         np.array([5.0, 6.0, 7.0]))
        np.testing.assert_allclose(ga, [6, 7, 8])
        np.testing.assert_allclose(gb, [3, 4, 5])
        out, vjp = functional.vjp(exp_reducer.exp_reducer, exp_reducer.INPUTS, np.ones(4))
        np.testing.assert_allclose(out, [5.7817, 7.2458, 5.7830, 6.7782], atol=5e-5)
        np.testing.assert_allclose(vjp, np.exp(exp_reducer.INPUTS))
    finally:
        sys.path.remove(EXAMPLES)


def test_mlp_classifier_example_trains_and_checks_its_gradient():
    import re
    out = run("mlp_classifier.py")
    fd = float(re.search(r"central differences: max difference (\S+)", out).group(1))
    assert fd < 1e-6, out
    agreed = re.search(r"HIPS autograd: +max difference (\S+)", out)
    assert agreed is not None and float(agreed.group(1)) < 1e-10, out
    descent = [float(v) for v in re.findall(r"step +\d+ +loss (\S+)", out)]
    lbfgs = [float(v) for v in re.findall(r"iteration +\d+ +loss (\S+)", out)]
    assert len(descent) >= 5 and all(b < a for a, b in zip(descent, descent[1:])), out
    assert len(lbfgs) >= 3 and lbfgs[-1] < 0.5 * lbfgs[0], out


def test_the_autograd_style_rnn_example_checks_its_gradient_and_trains():
    """A closure from a factory, a nested def, a list of (W, b), a function passed to
    a helper, a generator, a partial made inside, scipy.optimize: as written."""
    import re
    out = run("rnn_autograd_style.py")
    fd = float(re.search(r"central differences: max difference (\S+)", out).group(1))
    assert fd < 1e-7, out
    before, after = map(float, re.search(r"loss (\S+) -> (\S+) after", out).groups())
    assert after < 0.1 * before, out


def _fit_report(out):
    """(gradient check, loss before, loss after, noise level) a fitting example prints."""
    import re
    check = float(re.search(r"largest relative difference (\S+)", out).group(1))
    before = float(re.search(r"loss before: (\S+)", out).group(1))
    after, noise = map(float, re.search(r"loss after: +(\S+) \(noise level (\S+)\)",
                                        out).groups())
    return check, before, after, noise


def test_the_complex_fit_example_checks_its_gradient_and_recovers_the_modes():
    """Complex amplitudes and rates of damped oscillations, fitted by descending the
    conjugate gradient: to the noise level, the true modes within 0.01."""
    out = run("complex_fit.py")
    check, before, after, noise = _fit_report(out)
    assert check < 1e-7, out
    assert after < 1.1 * noise < 0.01 * before, out
    import importlib.util
    spec = importlib.util.spec_from_file_location("complex_fit",
                                                  os.path.join(EXAMPLES, "complex_fit.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a, s, _ = module.main()
    np.testing.assert_allclose(s, [-0.3 + 2.0j, -0.8 + 5.0j], atol=0.01)
    np.testing.assert_allclose(a, [1.0 + 0.5j, 0.6 - 0.8j], atol=0.01)


def test_the_ode_fit_example_checks_its_gradient_and_recovers_the_parameters():
    """odeint inside a loss from a factory, differentiated by the adjoint method and
    trained with L-BFGS-B: to the noise level, k, c, a within 0.05 of the truth."""
    import re
    out = run("ode_fit.py")
    check, before, after, noise = _fit_report(out)
    assert check < 1e-6, out
    assert after < 1.1 * noise < 0.01 * before, out
    fitted = [float(v) for v in re.search(r"k, c, a = (\S+), (\S+), (\S+) ", out).groups()]
    np.testing.assert_allclose(fitted, [2.0, 0.3, 0.5], atol=0.05)
