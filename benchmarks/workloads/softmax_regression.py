"""Workload: softmax regression, 20,000 examples, 100 features, 10 classes; a
log-softmax with the row maximum subtracted, the mean cross-entropy.

Gradient with respect to the weights and the biases.
"""
import numpy as np

NAME = "softmax_regression"
TITLE = "softmax regression, 20,000x100, 10 classes"
FUNCTION = "softmax_loss"
WRT = (0, 1)
LOOPS = False


def softmax_loss(W, b, X, Y):
    Z = X @ W + b
    Z = Z - np.max(Z, axis=1, keepdims=True)
    logp = Z - np.log(np.sum(np.exp(Z), axis=1, keepdims=True))
    return -np.sum(Y * logp) / X.shape[0]


forward = softmax_loss


def make_inputs(small=False):
    rng = np.random.default_rng(6)
    n, d, k = (8, 4, 3) if small else (20000, 100, 10)
    X = rng.standard_normal((n, d))
    W = rng.standard_normal((d, k)) * 0.1
    b = rng.standard_normal(k) * 0.1
    Y = np.eye(k)[rng.integers(0, k, n)]
    return W, b, X, Y


def hand_grad(W, b, X, Y):
    """(softmax - labels) / n, through the affine map."""
    Z = X @ W + b
    P = np.exp(Z - np.max(Z, axis=1, keepdims=True))
    P /= np.sum(P, axis=1, keepdims=True)
    Z_bar = (P * np.sum(Y, axis=1, keepdims=True) - Y) / X.shape[0]
    return X.T @ Z_bar, np.sum(Z_bar, axis=0)


def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(W, b, X, Y):
        Z = X @ W + b
        Z = Z - anp.max(Z, axis=1, keepdims=True)
        return -anp.sum(Y * (Z - anp.log(anp.sum(anp.exp(Z), axis=1, keepdims=True)))) \
            / X.shape[0]
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)
