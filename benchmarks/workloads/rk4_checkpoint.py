"""Workload: the RK4 integrator of `rk4.py` with its step marked `s2sgrad.checkpoint`:
the gradient keeps the state per step and recomputes the stages, as the hand-written
adjoint (rk4.hand_grad) does.

Same sizes, inputs, hand-written adjoint and peers as `rk4`; only the mark differs.
"""
import numpy as np

import s2sgrad

from .rk4 import grad_autograd, hand_grad, make_inputs, rhs  # noqa: F401 - the runner's

NAME = "rk4_checkpoint"
TITLE = "RK4 integrator, the step checkpointed, 500 steps"
FUNCTION = "rk4_loss"
WRT = (0, 1)
LOOPS = True


@s2sgrad.checkpoint
def rk4_step(y, W, h):
    k1 = rhs(y, W)
    k2 = rhs(y + 0.5 * h * k1, W)
    k3 = rhs(y + 0.5 * h * k2, W)
    k4 = rhs(y + h * k3, W)
    return y + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def rk4_loss(y0, W, target, steps):
    y = y0
    for _ in range(steps):
        y = rk4_step(y, W, 0.01)
    return np.sum((y - target) ** 2)


forward = rk4_loss
