"""Seed example 1 (examples/square.py): grad of SquareFunction(x).sum(), 5 elements.

A tiny workload: it measures the fixed cost of one gradient call.
"""
import numpy as np

try:
    from benchmarks.workloads._examples import load_example
except ImportError:  # loaded by file path (s2sgrad show)
    from _examples import load_example

example = load_example("square")

NAME = "seed_square"
TITLE = "seed: SquareFunction, 5 elements"
FUNCTION = "loss"
WRT = (0,)
LOOPS = False
loss = example.loss
forward = loss


def make_inputs(small=False):
    return (np.array([1.0, 2.0, 3.0, 4.0, 5.0]),)


def hand_grad(x):
    return (2.0 * x,)


# --- peers: the square as each library's custom op, as in the PyTorch original --

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()
    from autograd.extend import defvjp, primitive

    @primitive
    def square(x):
        return x ** 2

    defvjp(square, lambda ans, x: lambda g: 2 * x * g)
    g = autograd.grad(lambda x: anp.sum(square(x)))
    return lambda: (g(*args),)


def _jax_loss(jax, jnp):
    @jax.custom_vjp
    def square(x):
        return x ** 2

    square.defvjp(lambda x: (x ** 2, x), lambda x, g: (2 * x * g,))
    return lambda x: jnp.sum(square(x))


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.grad(_jax_loss(jax, jnp), argnums=WRT))
    x = jnp.asarray(args[0])
    return lambda: g(x)


def grad_jax_jit(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.jit(jax.grad(_jax_loss(jax, jnp), argnums=WRT)))
    x = jnp.asarray(args[0])
    return lambda: g(x)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()

    class SquareFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return input ** 2

        @staticmethod
        def backward(ctx, grad_output):
            input, = ctx.saved_tensors
            return 2 * input * grad_output

    x = torch.from_numpy(args[0]).clone().requires_grad_(True)
    return lambda: torch.autograd.grad(SquareFunction.apply(x).sum(), (x,))
