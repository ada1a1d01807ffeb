"""Workload 6: a custom op, softplus with its own vjp, applied in a 100-step loop.

    h_{t+1} = 0.5 * softplus(w * h_t + c + x_t)        loss = sum(h_T)

softplus is an s2sgrad.Function (forward and vjp written by hand); the peers
use their own mechanisms: autograd.extend.primitive/defvjp, jax.custom_vjp,
torch.autograd.Function. Gradient with respect to w and c (100-vectors).
The loop is driven by an input sequence x_t, so it never settles on a fixed
point and every step's saved value matters to the gradient.
"""
import numpy as np

import s2sgrad

NAME = "custom_softplus"
TITLE = "custom op (softplus with its own vjp), 100-step loop"
FUNCTION = "softplus_loop"
WRT = (1, 2)
LOOPS = True


class Softplus(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.logaddexp(0.0, x)

    @staticmethod
    def vjp(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output / (1.0 + np.exp(-x))


def softplus_loop(h, w, c, xs):
    for x in xs:
        h = 0.5 * Softplus.apply(w * h + c + x)
    return np.sum(h)


forward = softplus_loop


def make_inputs(small=False):
    n, steps = (5, 8) if small else (100, 100)
    rng = np.random.default_rng(6)
    return (rng.standard_normal(n), rng.uniform(-1.5, 1.5, n), rng.standard_normal(n),
            rng.standard_normal((steps, n)))


def hand_grad(h, w, c, xs):
    """Keep the inputs and pre-activations of every step in two preallocated arrays."""
    n_steps = xs.shape[0]
    hs = np.empty((n_steps, h.shape[0]))
    zs = np.empty((n_steps, h.shape[0]))
    for t in range(n_steps):
        hs[t] = h
        z = zs[t]
        np.multiply(w, h, out=z)
        z += c
        z += xs[t]
        h = np.logaddexp(0.0, z)
        h *= 0.5
    h_bar = np.ones_like(h)
    w_bar = np.zeros_like(w)
    c_bar = np.zeros_like(c)
    for t in range(n_steps - 1, -1, -1):
        z_bar = 0.5 * h_bar / (1.0 + np.exp(-zs[t]))
        w_bar += z_bar * hs[t]
        c_bar += z_bar
        h_bar = z_bar * w
    return w_bar, c_bar


# --- peers -------------------------------------------------------------------

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()
    from autograd.extend import defvjp, primitive

    @primitive
    def softplus(x):
        return anp.logaddexp(0.0, x)

    defvjp(softplus, lambda ans, x: lambda g: g / (1.0 + anp.exp(-x)))

    def f(h, w, c, xs):
        for x in xs:
            h = 0.5 * softplus(w * h + c + x)
        return anp.sum(h)
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)


def _jax_softplus(jax, jnp):
    @jax.custom_vjp
    def softplus(x):
        return jnp.logaddexp(0.0, x)

    def fwd(x):
        return jnp.logaddexp(0.0, x), x

    def bwd(x, g):
        return (g / (1.0 + jnp.exp(-x)),)

    softplus.defvjp(fwd, bwd)
    return softplus


def _jax_loop(jax, jnp):
    softplus = _jax_softplus(jax, jnp)

    def f(h, w, c, xs):
        for x in xs:
            h = 0.5 * softplus(w * h + c + x)
        return jnp.sum(h)
    return f


def _jax_args(jnp, args):
    return tuple(jnp.asarray(x) for x in args)


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.grad(_jax_loop(jax, jnp), argnums=WRT))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_jax_jit(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.jit(jax.grad(_jax_loop(jax, jnp), argnums=WRT)))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_jax_lax(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    softplus = _jax_softplus(jax, jnp)

    def f(h, w, c, xs):
        h, _ = jax.lax.scan(lambda h, x: (0.5 * softplus(w * h + c + x), None), h, xs)
        return jnp.sum(h)
    g = jax_blocking(jax, jax.jit(jax.grad(f, argnums=WRT)))
    jargs = _jax_args(jnp, args)
    return lambda: g(*jargs)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()

    class Softplus(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.logaddexp(torch.zeros((), dtype=x.dtype), x)

        @staticmethod
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            return grad_output / (1.0 + torch.exp(-x))

    h0 = torch.from_numpy(args[0])
    params = tuple(torch.from_numpy(x).clone().requires_grad_(True) for x in args[1:3])
    xs = torch.from_numpy(args[3])

    def run():
        w, c = params
        h = h0
        for x in xs:
            h = 0.5 * Softplus.apply(w * h + c + x)
        return torch.autograd.grad(torch.sum(h), params)
    return run
