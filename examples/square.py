"""Seed example 1: a Function that squares its input, with its own vjp.

PyTorch original: y = SquareFunction.apply(x); y.sum().backward(); print(x.grad)
prints tensor([2., 4., 6., 8., 10.]).
"""
import numpy as np

import s2sgrad


class SquareFunction(s2sgrad.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input ** 2

    @staticmethod
    def vjp(ctx, grad_output):
        input, = ctx.saved_tensors
        grad_input = 2 * input * grad_output
        return grad_input


def loss(x):
    y = SquareFunction.apply(x)
    return y.sum()


if __name__ == "__main__":
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    print(s2sgrad.grad(loss)(x))
