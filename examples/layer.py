"""The three-line function of docs/forward-mode.md: one tanh layer and a sum of squares.

    s2sgrad show examples/layer.py:f --mode forward
"""
import numpy as np


def f(x, W):
    h = np.tanh(W @ x)
    y = np.sin(h) * x
    return np.sum(y ** 2)
