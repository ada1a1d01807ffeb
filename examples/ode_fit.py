"""Fitting the parameters of an ODE through scipy.integrate.odeint, in the spirit
of HIPS autograd's ODE example: the loss integrates the model with SciPy's
solver, and s2sgrad differentiates it by the adjoint method (the adjoint system
integrated backwards in time, the dynamics differentiated by s2sgrad at each
step). Training is `scipy.optimize.minimize(method="L-BFGS-B")`.

The system: a damped oscillator with a cubic spring,
    x'' = -k x - c x' - a x^3,
observed (with noise) at 40 times from a known start; the fit recovers k, c, a.
The gradient is checked against central differences before training.

    python examples/ode_fit.py
"""
import numpy as np
from scipy.integrate import odeint
from scipy.optimize import minimize

import s2sgrad

TRUE = np.array([2.0, 0.3, 0.5])   # k, c, a
TIMES = np.linspace(0.0, 6.0, 40)
START = np.array([1.2, 0.0])


def oscillator(state, t, theta):
    x, v = state[0], state[1]
    k, c, a = theta[0], theta[1], theta[2]
    return np.stack([v, -k * x - c * v - a * x ** 3])


def make_loss(observed):
    """The squared error of the model's trajectory against the observations."""
    def loss(theta):
        path = odeint(oscillator, START, TIMES, args=(theta,), rtol=1e-9, atol=1e-9)
        return np.mean((path[:, 0] - observed) ** 2)
    return loss


def largest_difference(loss, theta, eps=1e-4):
    """Between s2sgrad's gradient and central differences (relative)."""
    ours = s2sgrad.grad(loss)(theta)
    theirs = np.array([(loss(theta + eps * e) - loss(theta - eps * e)) / (2 * eps)
                       for e in np.eye(theta.size)])
    return np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs))


def main():
    rng = np.random.default_rng(0)
    clean = odeint(oscillator, START, TIMES, args=(TRUE,), rtol=1e-10, atol=1e-10)[:, 0]
    observed = clean + 0.01 * rng.standard_normal(TIMES.size)
    loss = make_loss(observed)
    guess = np.array([1.0, 0.1, 0.1])
    print(f"gradient vs central differences: largest relative difference "
          f"{largest_difference(loss, guess):.1e}")
    grad = s2sgrad.grad(loss)
    before = loss(guess)
    fit = minimize(lambda th: float(loss(th)), guess, jac=grad, method="L-BFGS-B")
    print(f"loss before: {before:.5f}")
    print(f"loss after:  {fit.fun:.6f} (noise level {np.mean((clean - observed) ** 2):.6f})")
    print(f"k, c, a = {', '.join(f'{v:.3f}' for v in fit.x)} (true: "
          f"{', '.join(f'{v:.3f}' for v in TRUE)})")
    return fit.x


if __name__ == "__main__":
    main()
