"""Workload: an RK4 integrator of dy/dt = tanh(W y) - y / 2, the step a helper
function, 500 steps, state size 8.

Gradient of |y_T - target|^2 with respect to the initial state and W: many
small steps, each a call to a user helper that calls another (the right-hand
side) four times.
"""
import numpy as np

NAME = "rk4"
TITLE = "RK4 integrator, the step a helper, 500 steps"
FUNCTION = "rk4_loss"
WRT = (0, 1)
LOOPS = True


def rhs(y, W):
    return np.tanh(W @ y) - 0.5 * y


def rk4_step(y, W, h):
    k1 = rhs(y, W)
    k2 = rhs(y + 0.5 * h * k1, W)
    k3 = rhs(y + 0.5 * h * k2, W)
    k4 = rhs(y + h * k3, W)
    return y + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def rk4_loss(y0, W, target, steps):
    y = y0
    for _ in range(steps):
        y = rk4_step(y, W, 0.01)
    return np.sum((y - target) ** 2)


forward = rk4_loss


def make_inputs(small=False):
    rng = np.random.default_rng(9)
    n, steps = (3, 4) if small else (8, 500)
    y0 = rng.standard_normal(n)
    W = rng.standard_normal((n, n)) / np.sqrt(n)
    target = rng.standard_normal(n) * 0.5
    return y0, W, target, steps


def _rhs_vjp(r, u, W):
    """(cotangent of u, of W) of rhs(u, W) for the cotangent r."""
    t = np.tanh(W @ u)
    a_bar = r * (1.0 - t * t)
    return W.T @ a_bar - 0.5 * r, np.outer(a_bar, u)


def hand_grad(y0, W, target, steps):
    """The state of every step kept; each step's stages recomputed backwards."""
    h = 0.01
    ys = np.empty((steps + 1, y0.shape[0]))
    ys[0] = y0
    for t in range(steps):
        ys[t + 1] = rk4_step(ys[t], W, h)
    y_bar = 2.0 * (ys[steps] - target)
    W_bar = np.zeros_like(W)
    for t in range(steps - 1, -1, -1):
        y = ys[t]
        k1 = rhs(y, W)
        u2 = y + 0.5 * h * k1
        k2 = rhs(u2, W)
        u3 = y + 0.5 * h * k2
        k3 = rhs(u3, W)
        u4 = y + h * k3
        k1_bar, k2_bar = (h / 6.0) * y_bar, (h / 3.0) * y_bar
        k3_bar, k4_bar = (h / 3.0) * y_bar, (h / 6.0) * y_bar
        u_bar, w_bar = _rhs_vjp(k4_bar, u4, W)
        W_bar += w_bar
        y_bar = y_bar + u_bar
        k3_bar = k3_bar + h * u_bar
        u_bar, w_bar = _rhs_vjp(k3_bar, u3, W)
        W_bar += w_bar
        y_bar = y_bar + u_bar
        k2_bar = k2_bar + 0.5 * h * u_bar
        u_bar, w_bar = _rhs_vjp(k2_bar, u2, W)
        W_bar += w_bar
        y_bar = y_bar + u_bar
        k1_bar = k1_bar + 0.5 * h * u_bar
        u_bar, w_bar = _rhs_vjp(k1_bar, y, W)
        W_bar += w_bar
        y_bar = y_bar + u_bar
    return y_bar, W_bar


def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(y0, W, target, steps):
        def rhs_(y):
            return anp.tanh(W @ y) - 0.5 * y
        y = y0
        for _ in range(steps):
            k1 = rhs_(y)
            k2 = rhs_(y + 0.005 * k1)
            k3 = rhs_(y + 0.005 * k2)
            k4 = rhs_(y + 0.01 * k3)
            y = y + (0.01 / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        return anp.sum((y - target) ** 2)
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)
