"""Seed example 2: a Function that cubes its input, saving it in the context.

PyTorch original: torch.manual_seed(0); x = torch.randn(3, requires_grad=True);
y = CubeFunction.apply(x); y.sum().backward(); print(x.grad) printed
tensor([0.5327, 0.1885, 0.3232]). The input came from torch's random generator,
which NumPy does not share; X below is the input that gives those gradients
(x = sqrt(grad / 3)).
"""
import numpy as np

import s2sgrad


class CubeFunction(s2sgrad.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input ** 3

    @staticmethod
    def vjp(ctx, grad_output):
        input, = ctx.saved_tensors
        grad_input = 3 * input ** 2 * grad_output
        return grad_input


def loss(x):
    y = CubeFunction.apply(x)
    return y.sum()


X = np.sqrt(np.array([0.5327, 0.1885, 0.3232]) / 3)

if __name__ == "__main__":
    np.set_printoptions(precision=4, floatmode="fixed")
    print(s2sgrad.grad(loss)(X))
