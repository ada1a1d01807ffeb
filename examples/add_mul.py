"""Seed example 3: a Function with two inputs and two outputs.

PyTorch original: sum_res, mul_res = AddMulFunction.apply(a, b);
loss = sum_res.sum() + mul_res.sum(); loss.backward() printed
tensor([6., 7., 8.]) and tensor([3., 4., 5.]).
"""
import numpy as np

import s2sgrad


class AddMulFunction(s2sgrad.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a + b, a * b

    @staticmethod
    def vjp(ctx, grad_output1, grad_output2):
        a, b = ctx.saved_tensors
        grad_a = grad_output1 + b * grad_output2
        grad_b = grad_output1 + a * grad_output2
        return grad_a, grad_b


def loss(a, b):
    sum_res, mul_res = AddMulFunction.apply(a, b)
    return sum_res.sum() + mul_res.sum()


if __name__ == "__main__":
    a = np.array([2.0, 3.0, 4.0])
    b = np.array([5.0, 6.0, 7.0])
    grad_a, grad_b = s2sgrad.grad(loss, wrt=(0, 1))(a, b)
    print(grad_a)
    print(grad_b)
