"""Seed example 5: functional.vjp of a function of two inputs.

PyTorch original: inputs = (torch.rand(2), torch.rand(2)); v = torch.ones(2);
vjp(adder, inputs, v) printed (tensor([2.4225, 2.3340]),
(tensor([2., 2.]), tensor([3., 3.]))). The inputs came from torch's random
generator; the ones below give the same output.
"""
import numpy as np

from s2sgrad import functional


def adder(x, y):
    return 2 * x + 3 * y


INPUTS = (np.array([0.4725, 0.5280]), np.array([0.4925, 0.4260]))

if __name__ == "__main__":
    np.set_printoptions(precision=4, floatmode="fixed")
    v = np.ones(2)
    output, (vjp_x, vjp_y) = functional.vjp(adder, INPUTS, v)
    print(output)
    print(vjp_x)
    print(vjp_y)
