"""Workload: one attention block: Q, K, V projections, a softmax with the row
maximum subtracted, a residual connection and layer normalisation; 128 tokens,
width 64.

Gradient of |Y - target|^2 with respect to the input and every parameter.
"""
import numpy as np

NAME = "attention"
TITLE = "attention block (QKV, softmax, residual, layernorm), 128x64"
FUNCTION = "attention_loss"
WRT = (0, 1, 2, 3, 4, 5)
LOOPS = False


def attention_loss(X, Wq, Wk, Wv, gamma, beta, target):
    Q = X @ Wq
    K = X @ Wk
    V = X @ Wv
    S = Q @ K.T / np.sqrt(X.shape[1])
    S = S - np.max(S, axis=1, keepdims=True)
    P = np.exp(S)
    P = P / np.sum(P, axis=1, keepdims=True)
    A = P @ V + X
    mu = np.mean(A, axis=1, keepdims=True)
    var = np.mean((A - mu) ** 2, axis=1, keepdims=True)
    Y = (A - mu) / np.sqrt(var + 1e-5) * gamma + beta
    return np.sum((Y - target) ** 2)


forward = attention_loss


def make_inputs(small=False):
    rng = np.random.default_rng(3)
    tokens, width = (4, 3) if small else (128, 64)
    X = rng.standard_normal((tokens, width))
    Wq, Wk, Wv = (rng.standard_normal((width, width)) / np.sqrt(width) for _ in range(3))
    gamma = 1.0 + 0.1 * rng.standard_normal(width)
    beta = 0.1 * rng.standard_normal(width)
    target = rng.standard_normal((tokens, width))
    return X, Wq, Wk, Wv, gamma, beta, target


def hand_grad(X, Wq, Wk, Wv, gamma, beta, target):
    """The adjoint a person writes: the softmax's and layernorm's in closed form."""
    d = X.shape[1]
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    S = Q @ K.T / np.sqrt(d)
    P = np.exp(S - np.max(S, axis=1, keepdims=True))
    P /= np.sum(P, axis=1, keepdims=True)
    A = P @ V + X
    mu = np.mean(A, axis=1, keepdims=True)
    inv = 1.0 / np.sqrt(np.mean((A - mu) ** 2, axis=1, keepdims=True) + 1e-5)
    xhat = (A - mu) * inv
    Y_bar = 2.0 * (xhat * gamma + beta - target)
    gamma_bar = np.sum(Y_bar * xhat, axis=0)
    beta_bar = np.sum(Y_bar, axis=0)
    xhat_bar = Y_bar * gamma
    A_bar = inv * (xhat_bar - np.mean(xhat_bar, axis=1, keepdims=True)
                   - xhat * np.mean(xhat_bar * xhat, axis=1, keepdims=True))
    P_bar = A_bar @ V.T
    V_bar = P.T @ A_bar
    S_bar = P * (P_bar - np.sum(P_bar * P, axis=1, keepdims=True)) / np.sqrt(d)
    Q_bar = S_bar @ K
    K_bar = S_bar.T @ Q
    X_bar = A_bar + Q_bar @ Wq.T + K_bar @ Wk.T + V_bar @ Wv.T
    return X_bar, X.T @ Q_bar, X.T @ K_bar, X.T @ V_bar, gamma_bar, beta_bar


def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def f(X, Wq, Wk, Wv, gamma, beta, target):
        S = (X @ Wq) @ (X @ Wk).T / anp.sqrt(X.shape[1])
        S = S - anp.max(S, axis=1, keepdims=True)
        P = anp.exp(S)
        P = P / anp.sum(P, axis=1, keepdims=True)
        A = P @ (X @ Wv) + X
        mu = anp.mean(A, axis=1, keepdims=True)
        var = anp.mean((A - mu) ** 2, axis=1, keepdims=True)
        return anp.sum(((A - mu) / anp.sqrt(var + 1e-5) * gamma + beta - target) ** 2)
    g = autograd.grad(f, argnum=WRT)
    return lambda: g(*args)
