"""Workload 8: a 100-step recurrence on a 300-vector beside a 300x300 matrix product.

    C = tanh(A B),   h_{t+1} = 0.95 h_t + 0.05 r_t sin(h_t),
    loss = 1e-3 sum(C^2) + sum(h_T^2)

Gradient with respect to A, B, h_0 and the rates r. The product wants BLAS, the
loop a compiler: jit=True leaves the function to NumPy whole (its largest array
has 90,000 elements, beyond the limit for code that loops and multiplies
matrices) and outlines its loops, which numba runs (`numba_outline`).
"""
import numpy as np

NAME = "loop_beside_product"
TITLE = "100-step loop on a 300-vector beside a 300x300 matrix product"
FUNCTION = "loop_beside_product"
WRT = (0, 1, 2, 3)
LOOPS = True


def loop_beside_product(A, B, h, rates):
    C = np.tanh(A @ B)
    for r in rates:
        h = 0.95 * h + 0.05 * r * np.sin(h)
    return np.sum(C * C) * 1e-3 + np.sum(h * h)


forward = loop_beside_product


def make_inputs(small=False):
    n, steps = (5, 6) if small else (300, 100)   # jax.jit unrolls: 400 steps took 24 GB
    rng = np.random.default_rng(8)
    A = rng.standard_normal((n, n)) / np.sqrt(n)
    B = rng.standard_normal((n, n)) / np.sqrt(n)
    h = rng.standard_normal(n)
    rates = rng.uniform(0.5, 1.5, steps)
    return A, B, h, rates


def hand_grad(A, B, h, rates):
    """The product's adjoint in BLAS; the states in one array, replayed backwards."""
    C = np.tanh(A @ B)
    states = np.empty((len(rates) + 1, h.shape[0]))
    states[0] = h
    for t, r in enumerate(rates):
        states[t + 1] = 0.95 * states[t] + 0.05 * r * np.sin(states[t])
    M_bar = 2e-3 * C * (1.0 - C * C)
    h_bar = 2.0 * states[-1]
    rates_bar = np.empty_like(rates)
    for t in range(len(rates) - 1, -1, -1):
        ht = states[t]
        rates_bar[t] = 0.05 * np.dot(h_bar, np.sin(ht))
        h_bar = h_bar * (0.95 + 0.05 * rates[t] * np.cos(ht))
    return M_bar @ B.T, A.T @ M_bar, h_bar, rates_bar


# --- peers -------------------------------------------------------------------

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(A, B, h, rates):
        C = anp.tanh(A @ B)
        for r in rates:
            h = 0.95 * h + 0.05 * r * anp.sin(h)
        return anp.sum(C * C) * 1e-3 + anp.sum(h * h)
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)


def _jax_f(jnp):
    def f(A, B, h, rates):
        C = jnp.tanh(A @ B)
        for r in rates:
            h = 0.95 * h + 0.05 * r * jnp.sin(h)
        return jnp.sum(C * C) * 1e-3 + jnp.sum(h * h)
    return f


def _jax_args(jnp, args):
    return tuple(jnp.asarray(a) for a in args)


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.grad(_jax_f(jnp), argnums=WRT))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_jax_jit(args):
    """The same Python loop under jax.jit (unrolled over the steps)."""
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.jit(jax.grad(_jax_f(jnp), argnums=WRT)))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_jax_lax(args):
    """What a JAX user writes: lax.scan over the rates, under jax.jit."""
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()

    def f(A, B, h, rates):
        C = jnp.tanh(A @ B)

        def step(h, r):
            return 0.95 * h + 0.05 * r * jnp.sin(h), None
        h, _ = jax.lax.scan(step, h, rates)
        return jnp.sum(C * C) * 1e-3 + jnp.sum(h * h)
    g = jax_blocking(jax, jax.jit(jax.grad(f, argnums=WRT)))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()
    A, B, h0, rates = (torch.from_numpy(a) for a in args)
    params = tuple(p.clone().requires_grad_(True) for p in (A, B, h0, rates))

    def run():
        A, B, h, rates = params
        C = torch.tanh(A @ B)
        for t in range(rates.shape[0]):
            h = 0.95 * h + 0.05 * rates[t] * torch.sin(h)
        loss = torch.sum(C * C) * 1e-3 + torch.sum(h * h)
        return torch.autograd.grad(loss, params)
    return run
