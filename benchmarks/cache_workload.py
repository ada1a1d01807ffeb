"""A 60-line NumPy function for benchmarks/cache_timing.py.

A two-layer recurrent model with a normalised readout and a mixed loss: the
kind of function s2sgrad is for, written with only straight-line code,
if/else and `for` loops over `range`.
"""
import numpy as np

STEPS = 4


def rnn_loss(W_in, W_rec, b, W_out, xs, targets, weight_decay, smooth):
    h = np.zeros(W_rec.shape[0])
    total = 0.0
    for t in range(STEPS):
        x = xs[t]
        pre = W_in @ x + W_rec @ h + b
        if smooth > 0.5:
            h = np.tanh(pre)
        else:
            h = np.maximum(pre, 0.0) + 0.01 * np.minimum(pre, 0.0)
        mean = np.mean(h)
        centred = h - mean
        var = np.mean(centred * centred)
        normed = centred / np.sqrt(var + 1e-5)
        logits = W_out @ normed
        shifted = logits - np.mean(logits)
        exp_l = np.exp(shifted)
        probs = exp_l / np.sum(exp_l)
        target = targets[t]
        ce = -np.sum(target * np.log(probs + 1e-12))
        err = probs - target
        sq = np.sum(err * err)
        if t == STEPS - 1:
            step_loss = ce + 0.5 * sq
        else:
            step_loss = 0.5 * ce + 0.25 * sq
        total = total + step_loss
    reg_in = np.sum(W_in * W_in)
    reg_rec = np.sum(W_rec * W_rec)
    reg_out = np.sum(W_out * W_out)
    reg = weight_decay * (reg_in + reg_rec + reg_out)
    spectral = np.sum(np.abs(W_rec @ W_rec.T)) / W_rec.shape[0]
    bias_pen = np.sum(np.sqrt(b * b + 1e-3))
    smooth_h = np.sum(np.log(1.0 + np.exp(-np.abs(h))) + np.maximum(h, 0.0))
    feature = np.tanh(W_out @ h)
    gate = 1.0 / (1.0 + np.exp(-feature))
    gated = np.sum(gate * feature)
    cosine = np.sum(W_in[:, 0] * b) / (np.sqrt(np.sum(b * b)) + 1.0)
    if gated > 0.0:
        aux = 0.1 * gated + 0.01 * smooth_h
    else:
        aux = 0.05 * smooth_h - 0.1 * gated
    mix = 0.5 * np.mean(np.sin(W_rec)) + 0.5 * np.mean(np.cos(W_out))
    stable = np.log(np.sum(np.exp(feature - np.mean(feature)))) + np.mean(feature)
    penalty = 0.001 * spectral + 0.001 * bias_pen + 0.01 * cosine
    hidden = np.tanh(W_rec @ h + b)
    scores = W_out @ hidden
    weights = np.exp(scores - np.mean(scores))
    weights = weights / np.sum(weights)
    context = np.sum(weights * scores)
    spread = np.mean((scores - context) ** 2)
    if spread > 1.0:
        attention = context - 0.1 * np.sqrt(spread)
    else:
        attention = context + 0.05 * spread
    drift = W_in.T @ (h - hidden)
    drift_pen = np.sum(drift * drift) / (1.0 + np.sum(np.abs(drift)))
    readout = 0.01 * attention + 0.001 * drift_pen
    scaled = total / STEPS
    result = scaled + reg + aux + penalty + 0.01 * mix + 0.001 * stable + readout
    return result


def make_inputs(seed=0, n_in=5, n_hidden=8, n_out=3):
    rng = np.random.default_rng(seed)
    W_in = 0.3 * rng.standard_normal((n_hidden, n_in))
    W_rec = 0.3 * rng.standard_normal((n_hidden, n_hidden))
    b = 0.1 * rng.standard_normal(n_hidden)
    W_out = 0.3 * rng.standard_normal((n_out, n_hidden))
    xs = rng.standard_normal((STEPS, n_in))
    targets = np.eye(n_out)[rng.integers(0, n_out, STEPS)]
    return W_in, W_rec, b, W_out, xs, targets, 1e-3, 1.0
