"""Workload 2: a small RNN, 50 steps, hidden size 16, input size 8.

    h_{t+1} = tanh(W h_t + U x_t + b),   loss = sum((h_T - target)^2)

Gradient with respect to W, U and b. Small matrices, many steps: per-operation
overhead dominates.
"""
import numpy as np

NAME = "rnn"
TITLE = "small RNN, 50 steps, hidden 16"
FUNCTION = "rnn_loss"
WRT = (0, 1, 2)
LOOPS = True


def rnn_loss(W, U, b, xs, target):
    h = np.zeros(W.shape[0])
    for x in xs:
        h = np.tanh(W @ h + U @ x + b)
    return np.sum((h - target) ** 2)


forward = rnn_loss


def make_inputs(small=False):
    rng = np.random.default_rng(2)
    hidden, inp, steps = (4, 3, 6) if small else (16, 8, 50)
    W = rng.standard_normal((hidden, hidden)) * (0.9 / np.sqrt(hidden))
    U = rng.standard_normal((hidden, inp)) / np.sqrt(inp)
    b = rng.standard_normal(hidden) * 0.1
    xs = rng.standard_normal((steps, inp))
    target = rng.standard_normal(hidden) * 0.5
    return W, U, b, xs, target


def hand_grad(W, U, b, xs, target):
    """Backpropagation through time, written out: states kept in one array."""
    steps = xs.shape[0]
    hs = np.empty((steps + 1, W.shape[0]))
    hs[0] = 0.0
    for t in range(steps):
        hs[t + 1] = np.tanh(W @ hs[t] + U @ xs[t] + b)
    dW = np.zeros_like(W)
    dU = np.zeros_like(U)
    db = np.zeros_like(b)
    h_bar = 2.0 * (hs[steps] - target)
    for t in range(steps - 1, -1, -1):
        z_bar = h_bar * (1.0 - hs[t + 1] * hs[t + 1])
        dW += np.outer(z_bar, hs[t])
        dU += np.outer(z_bar, xs[t])
        db += z_bar
        h_bar = W.T @ z_bar
    return dW, dU, db


# --- peers -------------------------------------------------------------------

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(W, U, b, xs, target):
        h = anp.zeros(W.shape[0])
        for x in xs:
            h = anp.tanh(W @ h + U @ x + b)
        return anp.sum((h - target) ** 2)
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)


def _jax_rnn(jnp):
    def f(W, U, b, xs, target):
        h = jnp.zeros(W.shape[0])
        for x in xs:
            h = jnp.tanh(W @ h + U @ x + b)
        return jnp.sum((h - target) ** 2)
    return f


def _jax_args(jnp, args):
    return tuple(jnp.asarray(a) for a in args)


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.grad(_jax_rnn(jnp), argnums=WRT))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_jax_jit(args):
    """The same Python loop under jax.jit (unrolled over the steps)."""
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.jit(jax.grad(_jax_rnn(jnp), argnums=WRT)))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_jax_lax(args):
    """What a JAX user writes: lax.scan over the inputs, under jax.jit."""
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()

    def f(W, U, b, xs, target):
        def step(h, x):
            return jnp.tanh(W @ h + U @ x + b), None
        h, _ = jax.lax.scan(step, jnp.zeros(W.shape[0]), xs)
        return jnp.sum((h - target) ** 2)
    g = jax_blocking(jax, jax.jit(jax.grad(f, argnums=WRT)))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()
    W, U, b, xs, target = (torch.from_numpy(a) for a in args)
    params = tuple(p.clone().requires_grad_(True) for p in (W, U, b))

    def run():
        W, U, b = params
        h = torch.zeros(W.shape[0], dtype=torch.float64)
        for x in xs:
            h = torch.tanh(W @ h + U @ x + b)
        return torch.autograd.grad(torch.sum((h - target) ** 2), params)
    return run
