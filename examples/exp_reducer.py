"""Seed example 4: functional.vjp of a row-wise reduction, with v given.

PyTorch original: inputs = torch.rand(4, 4); v = torch.ones(4);
vjp(exp_reducer, inputs, v) printed the row sums
[5.7817, 7.2458, 5.7830, 6.7782] and the vjp, which is exp(inputs) itself.
The inputs came from torch's random generator; INPUTS below is the matrix
whose exponential is the documented vjp (so both printed results match).
"""
import numpy as np

from s2sgrad import functional


def exp_reducer(x):
    return np.exp(x).sum(axis=1)


EXP_INPUTS = np.array([[1.4458, 1.3962, 1.3042, 1.6354],
                       [2.1288, 1.0652, 1.5483, 2.5035],
                       [2.2046, 1.1292, 1.1432, 1.3059],
                       [1.3225, 1.6652, 1.7753, 2.0152]])
# The printed matrix is rounded; nudge rows 1 and 3 within the rounding so their
# sums also round to the documented 5.7817 and 5.7830.
EXP_INPUTS[[0, 2]] += 0.000025
INPUTS = np.log(EXP_INPUTS)

if __name__ == "__main__":
    np.set_printoptions(precision=4, floatmode="fixed")
    v = np.ones(4)
    output, vjp = functional.vjp(exp_reducer, INPUTS, v)
    print(output)
    print(vjp)
    output, vjp = functional.vjp(exp_reducer, INPUTS, v, create_graph=True)
    print(output)
    print(vjp)
