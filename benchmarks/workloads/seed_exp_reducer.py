"""Seed example 4 (examples/exp_reducer.py): vjp of exp(x).sum(axis=1), 4x4, v = ones.

A vector output: s2sgrad.vjp and each peer's vjp, cotangent given.
"""
import numpy as np

try:
    from benchmarks.workloads._examples import load_example
except ImportError:  # loaded by file path (s2sgrad show)
    from _examples import load_example

example = load_example("exp_reducer")

NAME = "seed_exp_reducer"
TITLE = "seed: vjp of exp(x).sum(axis=1), 4x4"
FUNCTION = "exp_reducer"
WRT = (0,)
LOOPS = False
exp_reducer = example.exp_reducer
forward = exp_reducer


def make_inputs(small=False):
    return (example.INPUTS.copy(),)


def cotangent(args):
    """The v of v^T J (this workload's output is a vector)."""
    return np.ones(args[0].shape[0])


def hand_grad(x):
    v = cotangent((x,))
    return (v[:, None] * np.exp(x),)


# --- peers -------------------------------------------------------------------

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()
    v = cotangent(args)
    pullback = autograd.make_vjp(lambda x: anp.exp(x).sum(axis=1))
    return lambda: (pullback(*args)[0](v),)


def _jax_vjp(jax, jnp, jit):
    def f(x, v):
        return jax.vjp(lambda x: jnp.exp(x).sum(axis=1), x)[1](v)
    return jax.jit(f) if jit else f


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, _jax_vjp(jax, jnp, False))
    x, v = jnp.asarray(args[0]), jnp.asarray(cotangent(args))
    return lambda: g(x, v)


def grad_jax_jit(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, _jax_vjp(jax, jnp, True))
    x, v = jnp.asarray(args[0]), jnp.asarray(cotangent(args))
    return lambda: g(x, v)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()
    x = torch.from_numpy(args[0]).clone().requires_grad_(True)
    v = torch.from_numpy(cotangent(args))
    return lambda: torch.autograd.grad(torch.exp(x).sum(dim=1), (x,), grad_outputs=(v,))
