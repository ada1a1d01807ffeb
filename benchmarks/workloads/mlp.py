"""Workload 3: an MLP, batch 256, 784 -> 512 -> 512 -> 10, tanh, softmax cross-entropy.

Gradient with respect to all weights and biases. Dominated by matrix
products: every implementation calls the same BLAS, so this measures what
each adds around it (copies, temporaries, unbroadcasting).
"""
import numpy as np

NAME = "mlp"
TITLE = "MLP 256x784 -> 512 -> 512 -> 10, tanh, softmax CE"
FUNCTION = "mlp_loss"
WRT = (0, 1, 2, 3, 4, 5)
LOOPS = False


def mlp_loss(W1, b1, W2, b2, W3, b3, X, Y):
    h1 = np.tanh(X @ W1 + b1)
    h2 = np.tanh(h1 @ W2 + b2)
    logits = h2 @ W3 + b3
    logits = logits - logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.sum(Y * log_probs) / X.shape[0]


forward = mlp_loss


def make_inputs(small=False):
    rng = np.random.default_rng(3)
    batch, sizes = (5, (12, 7, 6, 3)) if small else (256, (784, 512, 512, 10))
    args = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        args.append(rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in))
        args.append(rng.standard_normal(fan_out) * 0.1)
    X = rng.standard_normal((batch, sizes[0]))
    Y = np.eye(sizes[-1])[rng.integers(0, sizes[-1], batch)]
    return tuple(args) + (X, Y)


def hand_grad(W1, b1, W2, b2, W3, b3, X, Y):
    """Textbook backpropagation; softmax minus one-hot; in-place where safe."""
    n = X.shape[0]
    h1 = X @ W1
    h1 += b1
    np.tanh(h1, out=h1)
    h2 = h1 @ W2
    h2 += b2
    np.tanh(h2, out=h2)
    p = h2 @ W3
    p += b3
    p -= p.max(axis=1, keepdims=True)
    np.exp(p, out=p)
    p /= p.sum(axis=1, keepdims=True)
    d3 = p
    d3 -= Y
    d3 /= n
    dW3 = h2.T @ d3
    db3 = d3.sum(axis=0)
    d2 = d3 @ W3.T
    d2 *= 1.0 - h2 * h2
    dW2 = h1.T @ d2
    db2 = d2.sum(axis=0)
    d1 = d2 @ W2.T
    d1 *= 1.0 - h1 * h1
    dW1 = X.T @ d1
    db1 = d1.sum(axis=0)
    return dW1, db1, dW2, db2, dW3, db3


# --- peers (the same program in each library) ----------------------------------

def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(W1, b1, W2, b2, W3, b3, X, Y):
        h1 = anp.tanh(X @ W1 + b1)
        h2 = anp.tanh(h1 @ W2 + b2)
        logits = h2 @ W3 + b3
        logits = logits - logits.max(axis=1, keepdims=True)
        log_probs = logits - anp.log(anp.sum(anp.exp(logits), axis=1, keepdims=True))
        return -anp.sum(Y * log_probs) / X.shape[0]
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)


def _jax_loss(jnp):
    def f(W1, b1, W2, b2, W3, b3, X, Y):
        h1 = jnp.tanh(X @ W1 + b1)
        h2 = jnp.tanh(h1 @ W2 + b2)
        logits = h2 @ W3 + b3
        logits = logits - logits.max(axis=1, keepdims=True)
        log_probs = logits - jnp.log(jnp.sum(jnp.exp(logits), axis=1, keepdims=True))
        return -jnp.sum(Y * log_probs) / X.shape[0]
    return f


def grad_jax_eager(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.grad(_jax_loss(jnp), argnums=WRT))
    jargs = tuple(jnp.asarray(a) for a in args)
    return lambda: g(*jargs)


def grad_jax_jit(args):
    from benchmarks.peers import jax_blocking, load_jax
    jax, jnp = load_jax()
    g = jax_blocking(jax, jax.jit(jax.grad(_jax_loss(jnp), argnums=WRT)))
    jargs = tuple(jnp.asarray(a) for a in args)
    return lambda: g(*jargs)


def grad_torch(args):
    from benchmarks.peers import load_torch
    torch = load_torch()
    tensors = [torch.from_numpy(a) for a in args]
    params = tuple(t.clone().requires_grad_(True) for t in tensors[:6])
    X, Y = tensors[6:]

    def run():
        W1, b1, W2, b2, W3, b3 = params
        h1 = torch.tanh(X @ W1 + b1)
        h2 = torch.tanh(h1 @ W2 + b2)
        logits = h2 @ W3 + b3
        logits = logits - logits.amax(dim=1, keepdim=True)
        log_probs = logits - torch.log(torch.sum(torch.exp(logits), dim=1, keepdim=True))
        loss = -torch.sum(Y * log_probs) / X.shape[0]
        return torch.autograd.grad(loss, params)
    return run
