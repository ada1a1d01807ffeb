"""Workload: the RK4 integrator of `rk4.py` with its step marked `s2sgrad.checkpoint`:
the gradient keeps the state per step and recomputes the stages, as the hand-written
adjoint (rk4.hand_grad) does.

Same sizes, inputs, hand-written adjoint and peers as `rk4`; only the mark differs.
"""
import numpy as np

import s2sgrad

from . import rk4
from .rk4 import grad_autograd, hand_grad, make_inputs  # noqa: F401 - the runner's

NAME = "rk4_checkpoint"
TITLE = "RK4 integrator, the step checkpointed, 500 steps"
FUNCTION = "rk4_loss"
WRT = (0, 1)
LOOPS = True


# The step of rk4.py, marked: the gradient keeps y per step and recomputes the stages.
rk4_step = s2sgrad.checkpoint(rk4.rk4_step)


def rk4_loss(y0, W, target, steps):
    y = y0
    for _ in range(steps):
        y = rk4_step(y, W, 0.01)
    return np.sum((y - target) ** 2)


forward = rk4_loss
