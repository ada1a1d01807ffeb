"""Fit a complex-valued model: damped oscillations from a noisy signal.

A signal made of two damped oscillations, y(t) = sum_k a_k exp(s_k t), has
complex amplitudes a_k and complex rates s_k (decay and frequency). Given
samples of it, we recover a and s by gradient descent on the mean squared
error, differentiating the complex parameters directly: s2sgrad follows the
convention of autograd and JAX (the gradient of a real loss L of z = x + iy is
dL/dx - i dL/dy), so `z - lr * conj(grad)` is a descent step.

The gradient is checked against central differences in the real and imaginary
parts first; then the fit runs with Adam on the real and imaginary parts.

    python examples/complex_fit.py
"""
import numpy as np

import s2sgrad


def signal(a, s, t):
    """sum_k a_k exp(s_k t), for every time t."""
    return np.sum(a[:, None] * np.exp(s[:, None] * t[None, :]), axis=0)


def loss(a, s, t, y):
    residual = signal(a, s, t) - y
    return np.mean(np.abs(residual) ** 2)


def check_gradient(a, s, t, y, h=1e-6) -> float:
    """Largest relative difference between s2sgrad's gradient and differences."""
    grads = s2sgrad.grad(loss, wrt=(0, 1))(a, s, t, y)
    worst = 0.0
    for which, z in enumerate((a, s)):
        for k in range(z.size):
            e = np.zeros_like(z)
            e[k] = h

            def at(step, which=which, z=z):
                args = [a, s]
                args[which] = z + step
                return loss(*args, t, y)
            want = (at(e) - at(-e)) / (2 * h) - 1j * (at(1j * e) - at(-1j * e)) / (2 * h)
            worst = max(worst, abs(grads[which][k] - want) / max(abs(want), 1e-12))
    return worst


def fit(a, s, t, y, steps=3000, lr=0.01):
    """Adam on the real and imaginary parts, from the conjugate of the gradient."""
    value_and_grad = s2sgrad.value_and_grad(loss, wrt=(0, 1))
    params = [a.copy(), s.copy()]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros(p.shape) for p in params]
    for step in range(1, steps + 1):
        value, grads = value_and_grad(params[0], params[1], t, y)
        for i, g in enumerate(grads):
            d = np.conj(g)                       # the direction of steepest ascent
            m[i] = 0.9 * m[i] + 0.1 * d
            v[i] = 0.999 * v[i] + 0.001 * np.abs(d) ** 2
            m_hat = m[i] / (1 - 0.9 ** step)
            v_hat = v[i] / (1 - 0.999 ** step)
            params[i] = params[i] - lr * m_hat / (np.sqrt(v_hat) + 1e-8)
    return params[0], params[1], loss(params[0], params[1], t, y)


def main():
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 4.0, 120)
    a_true = np.array([1.0 + 0.5j, 0.6 - 0.8j])
    s_true = np.array([-0.3 + 2.0j, -0.8 + 5.0j])
    y = signal(a_true, s_true, t) + 0.01 * (rng.standard_normal(t.size) +
                                            1j * rng.standard_normal(t.size))
    a0 = np.array([0.8 + 0.2j, 0.4 - 0.4j])
    s0 = np.array([-0.2 + 1.8j, -0.6 + 4.6j])
    print(f"gradient check: largest relative difference {check_gradient(a0, s0, t, y):.1e}")
    print(f"loss before: {loss(a0, s0, t, y):.4f}")
    a, s, final = fit(a0, s0, t, y)
    print(f"loss after:  {final:.6f} (noise level {2 * 0.01 ** 2:.6f})")
    order = np.argsort(s.imag)
    print("rates      :", np.round(s[order], 3), " true:", s_true)
    print("amplitudes :", np.round(a[order], 3), " true:", a_true)
    return a[order], s[order], final


if __name__ == "__main__":
    main()
