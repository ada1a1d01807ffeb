"""Functions for the `s2sgrad check` and `s2sgrad show` examples of docs/cli.md.

    s2sgrad check examples/checks.py:layer               # shapes from the annotations
    s2sgrad check examples/checks.py:entropy --shape p=4 --range p=0.1,1
    s2sgrad check examples/checks.py:noisy --shape x=3   # not deterministic: said so
    s2sgrad show examples/checks.py:Scale.forward        # a forward that sets ctx.k
"""
from typing import Annotated

import numpy as np

import s2sgrad


def layer(x: Annotated[np.ndarray, (4,)], W: Annotated[np.ndarray, (3, 4)]):
    return np.sum(np.tanh(W @ x))


def entropy(p):
    return -np.sum(p * np.log(p))


def noisy(x):
    return np.sum(x * np.random.standard_normal(x.shape))


class Scale(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def vjp(ctx, g):
        return g * ctx.k, None


def scaled(x):
    return np.sum(Scale.apply(x, 3.0) ** 2)
