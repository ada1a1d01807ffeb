"""Workload 3b: the MLP of workload 3 with its parameters as a list of (W, b) tuples.

The way autograd's and JAX's users write models: `loss(params, X, Y)` with
`params = [(W1, b1), (W2, b2), (W3, b3)]`, a loop over the layers, and a
gradient of the same structure. Same sizes, same arithmetic as `mlp`: the
ratio of the two (printed by run.py) is what structure costs.
"""
try:
    from benchmarks.workloads import mlp as flat
except ImportError:  # loaded by file path (s2sgrad show)
    import mlp as flat
import numpy as np

NAME = "mlp_structured"
TITLE = "MLP as in mlp, parameters a list of (W, b) tuples"
FUNCTION = "mlp_loss"
WRT = (0,)
LOOPS = True
FLAT_TWIN = "mlp"     # run.py reports this workload's time over its twin's


def mlp_loss(params, X, Y):
    h = X
    for W, b in params[:-1]:
        h = np.tanh(h @ W + b)
    W, b = params[-1]
    logits = h @ W + b
    logits = logits - logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.sum(Y * log_probs) / X.shape[0]


forward = mlp_loss


def make_inputs(small=False):
    W1, b1, W2, b2, W3, b3, X, Y = flat.make_inputs(small)
    return ([(W1, b1), (W2, b2), (W3, b3)], X, Y)


def hand_grad(params, X, Y):
    dW1, db1, dW2, db2, dW3, db3 = flat.hand_grad(*[p for layer in params for p in layer],
                                                  X, Y)
    return ([(dW1, db1), (dW2, db2), (dW3, db3)],)


def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(params, X, Y):
        h = X
        for W, b in params[:-1]:
            h = anp.tanh(h @ W + b)
        W, b = params[-1]
        logits = h @ W + b
        logits = logits - logits.max(axis=1, keepdims=True)
        log_probs = logits - anp.log(anp.sum(anp.exp(logits), axis=1, keepdims=True))
        return -anp.sum(Y * log_probs) / X.shape[0]
    g = autograd.grad(f, argnum=0)
    return lambda: (g(*args),)
