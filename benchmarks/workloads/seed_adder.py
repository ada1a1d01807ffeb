"""Seed example 5 (examples/adder.py): vjp of 2x + 3y with respect to x and y, 2 elements."""
import numpy as np

try:
    from benchmarks.workloads._examples import load_example
except ImportError:  # loaded by file path (s2sgrad show)
    from _examples import load_example

example = load_example("adder")

NAME = "seed_adder"
TITLE = "seed: vjp of 2x + 3y, 2 elements"
FUNCTION = "adder"
WRT = (0, 1)
LOOPS = False
adder = example.adder
forward = adder


def make_inputs(small=False):
    return tuple(a.copy() for a in example.INPUTS)


def cotangent(args):
    return np.ones(2)


def hand_grad(x, y):
    v = cotangent((x, y))
    return 2.0 * v, 3.0 * v


# --- peers -------------------------------------------------------------------

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, _ = load_autograd()
    v = cotangent(args)
    pullback = autograd.make_vjp(lambda x, y: 2 * x + 3 * y, argnum=WRT)
    return lambda: pullback(*args)[0](v)


def _jax_vjp(jax, jit):
    def f(x, y, v):
        return jax.vjp(lambda x, y: 2 * x + 3 * y, x, y)[1](v)
    return jax.jit(f) if jit else f


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, _jax_vjp(jax, False))
    jargs = tuple(jnp.asarray(a) for a in args) + (jnp.asarray(cotangent(args)),)
    return lambda: g(*jargs)


def grad_jax_jit(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, _jax_vjp(jax, True))
    jargs = tuple(jnp.asarray(a) for a in args) + (jnp.asarray(cotangent(args)),)
    return lambda: g(*jargs)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()
    params = tuple(torch.from_numpy(a).clone().requires_grad_(True) for a in args)
    v = torch.from_numpy(cotangent(args))
    return lambda: torch.autograd.grad(2 * params[0] + 3 * params[1], params, grad_outputs=(v,))
