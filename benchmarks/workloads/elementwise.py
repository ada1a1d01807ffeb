"""Workload 4: elementwise on 1e6 floats, summed.

    loss = sum(sin(x) * exp(-x^2) + tanh(x))

Memory-bandwidth bound: the count of full-size temporaries decides the time.
"""
import numpy as np

NAME = "elementwise"
TITLE = "elementwise on 1e6 floats"
FUNCTION = "elementwise_loss"
WRT = (0,)
LOOPS = False


def elementwise_loss(x):
    return np.sum(np.sin(x) * np.exp(-x ** 2) + np.tanh(x))


forward = elementwise_loss


def make_inputs(small=False):
    rng = np.random.default_rng(4)
    return (rng.standard_normal(7 if small else 1_000_000),)


def hand_grad(x):
    """d/dx = cos(x) e - 2 x sin(x) e + 1 - tanh(x)^2, with e = exp(-x^2); in place."""
    e = x * x
    np.negative(e, out=e)
    np.exp(e, out=e)
    g = np.cos(x)
    t = np.sin(x)
    t *= x
    t *= 2.0
    g -= t
    g *= e
    np.tanh(x, out=t)
    t *= t
    g += 1.0
    g -= t
    return (g,)


# --- peers -------------------------------------------------------------------

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(x):
        return anp.sum(anp.sin(x) * anp.exp(-x ** 2) + anp.tanh(x))
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)


def _jax_f(jnp):
    def f(x):
        return jnp.sum(jnp.sin(x) * jnp.exp(-x ** 2) + jnp.tanh(x))
    return f


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.grad(_jax_f(jnp), argnums=WRT))
    jargs = tuple(jnp.asarray(a) for a in args)
    return lambda: g(*jargs)


def grad_jax_jit(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.jit(jax.grad(_jax_f(jnp), argnums=WRT)))
    jargs = tuple(jnp.asarray(a) for a in args)
    return lambda: g(*jargs)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()
    x = torch.from_numpy(args[0]).clone().requires_grad_(True)

    def run():
        loss = torch.sum(torch.sin(x) * torch.exp(-x ** 2) + torch.tanh(x))
        return torch.autograd.grad(loss, (x,))
    return run
