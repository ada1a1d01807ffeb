"""Workload: an LSTM whose cell is a helper function, parameters a list of
(W, b) tuples, 30 steps, hidden size 32, input size 16.

Gradient of |h_T - target|^2 with respect to the list of parameters. Written
the way autograd's examples are: a helper per cell, a pytree of parameters.
"""
import numpy as np

NAME = "lstm_helper"
TITLE = "LSTM cell in a helper, list of (W, b), 30 steps"
FUNCTION = "lstm_loss"
WRT = (0,)
LOOPS = True


def sigmoid(a):
    return 0.5 * (np.tanh(0.5 * a) + 1.0)


def lstm_cell(params, h, c, x):
    (Wi, bi), (Wf, bf), (Wo, bo), (Wg, bg) = params
    z = np.concatenate([h, x])
    i = sigmoid(Wi @ z + bi)
    f = sigmoid(Wf @ z + bf)
    o = sigmoid(Wo @ z + bo)
    g = np.tanh(Wg @ z + bg)
    c = f * c + i * g
    h = o * np.tanh(c)
    return h, c


def lstm_loss(params, xs, target):
    hidden = params[0][1].shape[0]
    h = np.zeros(hidden)
    c = np.zeros(hidden)
    for x in xs:
        h, c = lstm_cell(params, h, c, x)
    return np.sum((h - target) ** 2)


forward = lstm_loss


def make_inputs(small=False):
    rng = np.random.default_rng(5)
    hidden, inp, steps = (3, 2, 4) if small else (32, 16, 30)
    scale = 1.0 / np.sqrt(hidden + inp)
    params = [(rng.standard_normal((hidden, hidden + inp)) * scale,
               rng.standard_normal(hidden) * 0.1) for _ in range(4)]
    xs = rng.standard_normal((steps, inp))
    target = rng.standard_normal(hidden) * 0.5
    return params, xs, target


def hand_grad(params, xs, target):
    """Backpropagation through time with the gates of every step kept."""
    (Wi, bi), (Wf, bf), (Wo, bo), (Wg, bg) = params
    hidden = bi.shape[0]
    h, c = np.zeros(hidden), np.zeros(hidden)
    tape = []
    for x in xs:
        z = np.concatenate([h, x])
        i = sigmoid(Wi @ z + bi)
        f = sigmoid(Wf @ z + bf)
        o = sigmoid(Wo @ z + bo)
        g = np.tanh(Wg @ z + bg)
        c_prev = c
        c = f * c + i * g
        tc = np.tanh(c)
        h = o * tc
        tape.append((z, i, f, o, g, c_prev, tc))
    grads = [np.zeros_like(W) for W in (Wi, Wf, Wo, Wg)]
    biases = [np.zeros_like(b) for b in (bi, bf, bo, bg)]
    h_bar = 2.0 * (h - target)
    c_bar = np.zeros(hidden)
    for z, i, f, o, g, c_prev, tc in reversed(tape):
        o_bar = h_bar * tc
        c_bar = c_bar + h_bar * o * (1.0 - tc * tc)
        pre = (c_bar * g * i * (1.0 - i), c_bar * c_prev * f * (1.0 - f),
               o_bar * o * (1.0 - o), c_bar * i * (1.0 - g * g))
        z_bar = np.zeros_like(z)
        for k, (W, a_bar) in enumerate(zip((Wi, Wf, Wo, Wg), pre)):
            grads[k] += np.outer(a_bar, z)
            biases[k] += a_bar
            z_bar += W.T @ a_bar
        h_bar = z_bar[:hidden]
        c_bar = c_bar * f
    return ([(W, b) for W, b in zip(grads, biases)],)


def grad_autograd(args):
    from benchmarks.peers import load_autograd
    autograd, anp = load_autograd()

    def cell(params, h, c, x):
        (Wi, bi), (Wf, bf), (Wo, bo), (Wg, bg) = params
        z = anp.concatenate([h, x])

        def sig(a):
            return 0.5 * (anp.tanh(0.5 * a) + 1.0)
        c = sig(Wf @ z + bf) * c + sig(Wi @ z + bi) * anp.tanh(Wg @ z + bg)
        return sig(Wo @ z + bo) * anp.tanh(c), c

    def f(params, xs, target):
        h = anp.zeros(params[0][1].shape[0])
        c = anp.zeros(params[0][1].shape[0])
        for x in xs:
            h, c = cell(params, h, c, x)
        return anp.sum((h - target) ** 2)
    g = autograd.grad(f)
    return lambda: (g(*args),)
