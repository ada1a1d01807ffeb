"""Workload 1: a scalar recurrence, 1000 steps, on Python floats.

A damped pendulum, integrated with the semi-implicit Euler method:

    v_{t+1} = v_t + dt * (-a * sin(x_t) - b * v_t)
    x_{t+1} = x_t + dt * v_{t+1}

The loss is the final angle; the gradient is with respect to the parameters a
(gravity over length) and b (damping). Every step is a handful of scalar
operations, so this measures the per-operation overhead of each
implementation, not arithmetic. The pendulum still swings at the end (it does
not settle on a fixed point), so every step's saved values matter to the
gradient and a wrong one shows in the check.
"""
import math

import numpy as np

NAME = "scalar_recurrence"
TITLE = "scalar recurrence (pendulum), 1000 steps, Python floats"
FUNCTION = "simulate"
WRT = (2, 3)
LOOPS = True   # has a jax-lax variant (fori_loop)


def simulate(x0, v0, a, b, dt, n_steps):
    x = x0
    v = v0
    for _ in range(n_steps):
        v = v + dt * (-a * np.sin(x) - b * v)
        x = x + dt * v
    return x


forward = simulate


def make_inputs(small=False):
    return (1.0, 0.0, 4.0, 0.1, 0.01, 30 if small else 1000)


def hand_grad(x0, v0, a, b, dt, n_steps):
    """What an expert writes: Python floats and math, the trajectory in two lists."""
    xs = [0.0] * n_steps
    vs = [0.0] * n_steps
    x = x0
    v = v0
    for t in range(n_steps):
        xs[t] = x
        vs[t] = v
        v = v + dt * (-a * math.sin(x) - b * v)
        x = x + dt * v
    x_bar = 1.0
    v_bar = 0.0
    a_bar = 0.0
    b_bar = 0.0
    for t in range(n_steps - 1, -1, -1):
        x = xs[t]
        d = (v_bar + dt * x_bar) * dt      # adjoint of the new v, times dt
        a_bar -= d * math.sin(x)
        b_bar -= d * vs[t]
        x_bar -= d * a * math.cos(x)
        v_bar = d / dt * (1.0 - dt * b)
    return a_bar, b_bar


# --- peers -------------------------------------------------------------------

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(x0, v0, a, b, dt, n_steps):
        x = x0
        v = v0
        for _ in range(n_steps):
            v = v + dt * (-a * anp.sin(x) - b * v)
            x = x + dt * v
        return x
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)


def _jax_simulate(jnp):
    def f(x0, v0, a, b, dt, n_steps):
        x = x0
        v = v0
        for _ in range(n_steps):
            v = v + dt * (-a * jnp.sin(x) - b * v)
            x = x + dt * v
        return x
    return f


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.grad(_jax_simulate(jnp), argnums=WRT))
    return lambda: g(*args)


def grad_jax_jit(args):
    """The same Python loop under jax.jit: traced once, unrolled n_steps times."""
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.jit(jax.grad(_jax_simulate(jnp), argnums=WRT),
                                  static_argnums=(5,)))
    return lambda: g(*args)


def grad_jax_lax(args):
    """What a JAX user writes for a long loop: lax.fori_loop under jax.jit."""
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()

    def f(x0, v0, a, b, dt, n_steps):
        def step(_, state):
            x, v = state
            v = v + dt * (-a * jnp.sin(x) - b * v)
            return x + dt * v, v
        return jax.lax.fori_loop(0, n_steps, step, (x0, v0))[0]
    g = jax_blocking(jax, jax.jit(jax.grad(f, argnums=WRT), static_argnums=(5,)))
    return lambda: g(*args)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()
    x0, v0, a, b, dt, n_steps = args
    ta = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    tx0 = torch.tensor(x0, dtype=torch.float64)

    def run():
        x = tx0
        v = v0
        for _ in range(n_steps):
            v = v + dt * (-ta * torch.sin(x) - tb * v)
            x = x + dt * v
        return torch.autograd.grad(x, (ta, tb))
    return run
