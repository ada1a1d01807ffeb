"""Workload 5: a 200-step loop over a 100-vector with a data-dependent branch and clipping.

    if sum(v) > 0:  v = v * a - 0.1
    else:           v = clip(v, -1, 1) * b + 0.1

The inputs make the loop take each branch about half of the time and clip
many elements. Gradient with respect to v, a and b.
"""
import numpy as np

NAME = "branchy_loop"
TITLE = "200-step loop, 100-vector, data-dependent branch and clipping"
FUNCTION = "branchy"
WRT = (0, 1, 2)
LOOPS = True


def branchy(v, a, b, n_steps):
    for _ in range(n_steps):
        if np.sum(v) > 0:
            v = v * a - 0.1
        else:
            v = np.clip(v, -1.0, 1.0) * b + 0.1
    return np.sum(v ** 2)


forward = branchy


def make_inputs(small=False):
    # The small inputs (for the finite-difference test) take each branch about
    # half of the time too, with no sum near zero and no entry near +-1.
    n, steps, seed = (8, 16, 10) if small else (100, 200, 5)
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n)
    a = rng.uniform(0.5, 1.5, n)
    b = rng.uniform(0.5, 1.5, n)
    return v, a, b, steps


def hand_grad(v, a, b, n_steps):
    """Record the branch taken and the state before each step; replay backwards."""
    states = [None] * n_steps
    positive = [False] * n_steps
    for t in range(n_steps):
        states[t] = v
        if np.sum(v) > 0:
            positive[t] = True
            v = v * a
            v -= 0.1
        else:
            v = np.clip(v, -1.0, 1.0)
            v *= b
            v += 0.1
    v_bar = 2.0 * v
    a_bar = np.zeros_like(a)
    b_bar = np.zeros_like(b)
    for t in range(n_steps - 1, -1, -1):
        vt = states[t]
        if positive[t]:
            a_bar += v_bar * vt
            v_bar *= a
        else:
            b_bar += v_bar * np.clip(vt, -1.0, 1.0)
            v_bar *= b
            v_bar[np.abs(vt) > 1.0] = 0.0
    return v_bar, a_bar, b_bar


# --- peers -------------------------------------------------------------------

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(v, a, b, n_steps):
        for _ in range(n_steps):
            if anp.sum(v) > 0:
                v = v * a - 0.1
            else:
                v = anp.clip(v, -1.0, 1.0) * b + 0.1
        return anp.sum(v ** 2)
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)


def _jax_args(jnp, args):
    return tuple(jnp.asarray(x) for x in args[:3]) + (args[3],)


def grad_jax_eager(args):
    """The Python `if` works in eager mode: the primal values are concrete."""
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()

    def f(v, a, b, n_steps):
        for _ in range(n_steps):
            if jnp.sum(v) > 0:
                v = v * a - 0.1
            else:
                v = jnp.clip(v, -1.0, 1.0) * b + 0.1
        return jnp.sum(v ** 2)
    g = jax_blocking(jax, jax.grad(f, argnums=WRT))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def _jax_step(jax, jnp, a, b):
    def step(v):
        return jax.lax.cond(jnp.sum(v) > 0,
                            lambda v: v * a - 0.1,
                            lambda v: jnp.clip(v, -1.0, 1.0) * b + 0.1,
                            v)
    return step


def grad_jax_jit(args):
    """Under jax.jit the `if` must become lax.cond; the loop is unrolled."""
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()

    def f(v, a, b, n_steps):
        step = _jax_step(jax, jnp, a, b)
        for _ in range(n_steps):
            v = step(v)
        return jnp.sum(v ** 2)
    g = jax_blocking(jax, jax.jit(jax.grad(f, argnums=WRT), static_argnums=(3,)))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_jax_lax(args):
    """lax.fori_loop around lax.cond, under jax.jit."""
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()

    def f(v, a, b, n_steps):
        step = _jax_step(jax, jnp, a, b)
        v = jax.lax.fori_loop(0, n_steps, lambda _, v: step(v), v)
        return jnp.sum(v ** 2)
    g = jax_blocking(jax, jax.jit(jax.grad(f, argnums=WRT), static_argnums=(3,)))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()
    params = tuple(torch.from_numpy(x).clone().requires_grad_(True) for x in args[:3])
    n_steps = args[3]

    def run():
        v, a, b = params
        for _ in range(n_steps):
            if torch.sum(v) > 0:
                v = v * a - 0.1
            else:
                v = torch.clamp(v, -1.0, 1.0) * b + 0.1
        return torch.autograd.grad(torch.sum(v ** 2), params)
    return run
