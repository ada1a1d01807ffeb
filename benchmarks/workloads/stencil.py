"""Workload: a 2-D diffusion stencil, 128x128, 100 steps, slices and in-place updates.

    u[1:-1, 1:-1] += 0.2 * kappa * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2]
                                    + u[1:-1, 2:] - 4 u[1:-1, 1:-1])

Gradient of 0.5 * |u_T - target|^2 with respect to the initial field and the
(spatially varying) diffusivity. Written the way a scientist writes it: a copy,
then in-place updates of an interior slice; the adjoint must keep what each
step overwrites.
"""
import numpy as np

NAME = "stencil"
TITLE = "2-D diffusion stencil, 128x128, 100 steps"
FUNCTION = "diffusion_loss"
WRT = (0, 1)
LOOPS = True


def diffusion_loss(u0, kappa, target, steps):
    u = u0.copy()
    for _ in range(steps):
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1]
        u[1:-1, 1:-1] += 0.2 * kappa * lap
    return 0.5 * np.sum((u - target) ** 2)


forward = diffusion_loss


def make_inputs(small=False):
    rng = np.random.default_rng(11)
    n, steps = (6, 3) if small else (128, 100)
    u0 = rng.standard_normal((n, n))
    kappa = rng.uniform(0.5, 1.0, (n - 2, n - 2))
    target = rng.standard_normal((n, n)) * 0.1
    return u0, kappa, target, steps


def _laplacian(u):
    return u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1]


def hand_grad(u0, kappa, target, steps):
    """The fields of every step kept in one array; the adjoint of the stencil is the
    stencil's transpose (the Laplacian is symmetric), scattered into the border."""
    us = np.empty((steps + 1,) + u0.shape)
    us[0] = u0
    for t in range(steps):
        us[t + 1] = us[t]
        us[t + 1][1:-1, 1:-1] += 0.2 * kappa * _laplacian(us[t])
    u_bar = us[steps] - target
    kappa_bar = np.zeros_like(kappa)
    for t in range(steps - 1, -1, -1):
        step_bar = 0.2 * u_bar[1:-1, 1:-1]
        kappa_bar += step_bar * _laplacian(us[t])
        lap_bar = step_bar * kappa
        u_bar[:-2, 1:-1] += lap_bar
        u_bar[2:, 1:-1] += lap_bar
        u_bar[1:-1, :-2] += lap_bar
        u_bar[1:-1, 2:] += lap_bar
        u_bar[1:-1, 1:-1] -= 4.0 * lap_bar
    return u_bar, kappa_bar
