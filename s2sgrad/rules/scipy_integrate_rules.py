"""Gradient rules for scipy.integrate, registered lazily (registry._PENDING).

odeint's cotangents come from the adjoint method and its tangent from forward
sensitivities (runtime/ode.py), each differentiating the user's dynamics with
s2sgrad at run time; the times `t` are not differentiated.
"""
from __future__ import annotations

from scipy import integrate

from .registry import defvjp

_OPTIONS = ("args=(), Dfun=None, col_deriv=0, full_output=0, ml=None, mu=None, rtol=None, "
            "atol=None, tcrit=None, h0=0.0, hmax=0.0, hmin=0.0, ixpr=0, mxstep=0, mxhnil=0, "
            "mxordn=12, mxords=5, printmessg=0, tfirst=False")

defvjp(integrate.odeint, f"func, y0, t, {_OPTIONS}",
       prelude="gy0, gargs = odeint_adjoint(g, ans, func, y0, t, args, rtol, atol, mxstep, "
               "full_output, tfirst)",
       y0="gy0", args="gargs", sequence=("args",), name="scipy.integrate.odeint",
       tolerance=1e-3,   # (the adjoint and the tangent each as exact as the solver)
       ).sequence_result = True   # (full_output=True: a pair)
