"""Seed example 3 (examples/add_mul.py): a Function with two inputs and two outputs.

loss(a, b) = sum(a + b) + sum(a * b), gradient with respect to a and b (3 elements).
"""
import numpy as np

try:
    from benchmarks.workloads._examples import load_example
except ImportError:  # loaded by file path (s2sgrad show)
    from _examples import load_example

example = load_example("add_mul")

NAME = "seed_add_mul"
TITLE = "seed: AddMulFunction, 2 in / 2 out, 3 elements"
FUNCTION = "loss"
WRT = (0, 1)
LOOPS = False
loss = example.loss
forward = loss


def make_inputs(small=False):
    return (np.array([2.0, 3.0, 4.0]), np.array([5.0, 6.0, 7.0]))


def hand_grad(a, b):
    return 1.0 + b, 1.0 + a


# --- peers: AddMul as each library's custom op, as in the PyTorch original ------

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()
    from autograd.extend import defvjp, primitive

    # autograd primitives have one output: the two outputs are two primitives.
    @primitive
    def add(a, b):
        return a + b

    @primitive
    def mul(a, b):
        return a * b

    defvjp(add, lambda ans, a, b: lambda g: g, lambda ans, a, b: lambda g: g)
    defvjp(mul, lambda ans, a, b: lambda g: b * g, lambda ans, a, b: lambda g: a * g)
    g = autograd.grad(lambda a, b: anp.sum(add(a, b)) + anp.sum(mul(a, b)), argnum=WRT)
    return lambda: g(*args)


def _jax_loss(jax, jnp):
    @jax.custom_vjp
    def add_mul(a, b):
        return a + b, a * b

    def fwd(a, b):
        return (a + b, a * b), (a, b)

    def bwd(res, gs):
        a, b = res
        g1, g2 = gs
        return g1 + b * g2, g1 + a * g2

    add_mul.defvjp(fwd, bwd)

    def loss(a, b):
        s, m = add_mul(a, b)
        return jnp.sum(s) + jnp.sum(m)
    return loss


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.grad(_jax_loss(jax, jnp), argnums=WRT))
    jargs = tuple(jnp.asarray(a) for a in args)
    return lambda: g(*jargs)


def grad_jax_jit(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.jit(jax.grad(_jax_loss(jax, jnp), argnums=WRT)))
    jargs = tuple(jnp.asarray(a) for a in args)
    return lambda: g(*jargs)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()

    class AddMulFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a + b, a * b

        @staticmethod
        def backward(ctx, grad_output1, grad_output2):
            a, b = ctx.saved_tensors
            return grad_output1 + b * grad_output2, grad_output1 + a * grad_output2

    params = tuple(torch.from_numpy(a).clone().requires_grad_(True) for a in args)

    def run():
        sum_res, mul_res = AddMulFunction.apply(*params)
        return torch.autograd.grad(sum_res.sum() + mul_res.sum(), params)
    return run
