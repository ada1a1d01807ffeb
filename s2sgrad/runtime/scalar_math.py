"""NumPy's elementary functions on Python numbers, at the math module's speed.

Gradient templates evaluated on values known to be Python numbers (a scalar
loop's `np.cos(x)` in the adjoint of `np.sin(x)`) call these instead of NumPy's:
a NumPy call on a float costs ten times math's and returns a NumPy scalar that
makes every later operation slow too. The math module is not NumPy on every
input: `math.cos(inf)`, `math.log(0.0)` and `math.exp(1000.0)` raise where NumPy
returns nan, -inf and inf (with its warning), so a gradient at such a point raised
ValueError instead of being what NumPy computes. Each function here is math's where
math's is defined and NumPy's answer (as a float) elsewhere; tanh and atan, defined
everywhere, are math's own. numba compiles this module as math, whose functions
numba's code computes as NumPy does (no exceptions).
"""
from __future__ import annotations

import math as _math

import numpy as _np

from .registry import new_helper as _helper


def _faithful(exact, numpy_twin):
    """math's `exact` where it is defined, NumPy's value (a float) where it raises."""
    def fn(x):
        try:
            return exact(x)
        except (ValueError, OverflowError):
            return float(numpy_twin(x))
    fn.__name__ = fn.__qualname__ = exact.__name__
    fn.__doc__ = f"math.{exact.__name__} of a number, as np.{numpy_twin.__name__} is outside " \
                 f"math's domain."
    return fn


# The NumPy function each one computes, by this module's name for it.
NUMPY_TWINS = {"sin": _np.sin, "cos": _np.cos, "tan": _np.tan, "exp": _np.exp,
               "expm1": _np.expm1, "log": _np.log, "log1p": _np.log1p, "sqrt": _np.sqrt,
               "sinh": _np.sinh, "cosh": _np.cosh, "asin": _np.arcsin, "acos": _np.arccos,
               "tanh": _np.tanh, "atan": _np.arctan}
_DEFINED_EVERYWHERE = ("tanh", "atan")   # math's own: they raise nowhere

for _name, _twin in NUMPY_TWINS.items():
    globals()[_name] = getattr(_math, _name) if _name in _DEFINED_EVERYWHERE else \
        _faithful(getattr(_math, _name), _twin)


@_helper
def on_number(fn, x):
    """fn(x) of a NumPy function (the forward's `np.sin(x)` of a Python number), as a
    Python float where x is a Python number: NumPy's value to the bit, but not a
    NumPy scalar, which would make every later operation on it (and on what it
    reaches) several times slower. Anything else, as fn gives it: the pair's
    second run on NumPy numbers (arguments.numpy_where_numbers_fail) then computes
    with NumPy's arithmetic, as the user's code does."""
    kind = type(x)
    if kind is float or kind is int:
        return float(fn(x))
    return fn(x)
