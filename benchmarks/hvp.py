"""Second order against first: Hessian-vector products over the gradient's time.

    python benchmarks/hvp.py [--repeat 7]

For the MLP and RNN workloads (their weights as the inputs, the data fixed),
one run prints the time of the gradient (`s2sgrad.grad`), of
`functional.hvp` (forward over reverse: the tangent code of the gradient code)
and of `functional.vhp` (reverse over reverse), and their ratios to the
gradient; with JAX installed, `jax.jvp(jax.grad(f))` against `jax.grad`, and
with PyTorch, `torch.autograd.functional.hvp` against `torch.autograd.grad`,
each a ratio within its own library. Each figure is the best of --repeat
timed calls after one warm-up call (which compiles).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import s2sgrad  # noqa: E402
from benchmarks.workloads import mlp, rnn  # noqa: E402
from s2sgrad import functional  # noqa: E402

DATA: dict = {}


def mlp_of_weights(W1, b1, W2, b2, W3, b3):
    return mlp.mlp_loss(W1, b1, W2, b2, W3, b3, DATA["X"], DATA["Y"])


def rnn_of_weights(W, U, b):
    return rnn.rnn_loss(W, U, b, DATA["xs"], DATA["target"])


def cases(small: bool = False):
    W1, b1, W2, b2, W3, b3, X, Y = mlp.make_inputs(small)
    W, U, b, xs, target = rnn.make_inputs(small)
    DATA.update(X=X, Y=Y, xs=xs, target=target)
    return [("mlp", mlp_of_weights, (W1, b1, W2, b2, W3, b3)),
            ("rnn", rnn_of_weights, (W, U, b))]


def best(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _peer_losses(xp, name):
    """The workload's loss in another array library (xp: jax.numpy or torch)."""
    if name == "mlp":
        def f(W1, b1, W2, b2, W3, b3):
            X, Y = xp.asarray(DATA["X"]), xp.asarray(DATA["Y"])
            h1 = xp.tanh(X @ W1 + b1)
            h2 = xp.tanh(h1 @ W2 + b2)
            logits = h2 @ W3 + b3
            top = logits.max(axis=1, keepdims=True)
            logits = logits - getattr(top, "values", top)   # torch's max: (values, indices)
            log_probs = logits - xp.log(xp.sum(xp.exp(logits), axis=1, keepdims=True))
            return -xp.sum(Y * log_probs) / X.shape[0]
        return f

    def f(W, U, b):
        h = W[:, 0] * 0.0
        for x in xp.asarray(DATA["xs"]):
            h = xp.tanh(W @ h + U @ x + b)
        return xp.sum((h - xp.asarray(DATA["target"])) ** 2)
    return f


def jax_ratio(name, weights, vs, repeat):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return "not installed"
    jax.config.update("jax_enable_x64", True)
    f = _peer_losses(jnp, name)
    argnums = tuple(range(len(weights)))
    g = jax.jit(jax.grad(f, argnums=argnums))
    hv = jax.jit(lambda w, v: jax.jvp(lambda *a: jax.grad(f, argnums=argnums)(*a), w, v)[1])
    tg = best(lambda: jax.block_until_ready(g(*weights)), repeat)
    th = best(lambda: jax.block_until_ready(hv(weights, vs)), repeat)
    return f"{th / tg:.2f}x"


def torch_ratio(name, weights, vs, repeat):
    try:
        import torch
    except ImportError:
        return "not installed"
    f = _peer_losses(torch, name)
    ws = tuple(torch.tensor(w, requires_grad=True) for w in weights)
    tv = tuple(torch.tensor(v) for v in vs)

    def grad():
        return torch.autograd.grad(f(*ws), ws)
    tg = best(grad, repeat)
    th = best(lambda: torch.autograd.functional.hvp(f, ws, tv), repeat)
    return f"{th / tg:.2f}x"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    opts = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'workload':<9}{'grad':>11}{'hvp':>11}{'hvp/grad':>10}{'vhp':>11}{'vhp/grad':>10}"
          f"   {'jax jvp(grad)/grad':<20} torch hvp/grad")
    for name, fn, weights in cases():
        vs = tuple(rng.standard_normal(np.shape(w)) for w in weights)
        wrt = tuple(range(len(weights)))
        g = s2sgrad.grad(fn, wrt=wrt)
        tg = best(lambda g=g, w=weights: g(*w), opts.repeat)
        th = best(lambda f=fn, w=weights, v=vs: functional.hvp(f, w, v), opts.repeat)
        tv = best(lambda f=fn, w=weights, v=vs: functional.vhp(f, w, v), opts.repeat)
        print(f"{name:<9}{tg * 1e3:>9.2f}ms{th * 1e3:>9.2f}ms{th / tg:>9.2f}x"
              f"{tv * 1e3:>9.2f}ms{tv / tg:>9.2f}x   "
              f"{jax_ratio(name, weights, vs, opts.repeat):<20} "
              f"{torch_ratio(name, weights, vs, opts.repeat)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
