"""Arithmetic written into a temporary's own array.

NumPy reuses a temporary's array for the next operation only when it is the
left operand (or either operand of a commutative one): `1.0 - t * t` allocates
a second array of `t`'s size beside the product's. The optimiser
(compiler/optimize/inplace.py) writes such a difference `_s2s_subtract_into(1.0,
t * t)`, which computes it into the product's array: the same ufunc on the same
operands, so the same numbers to the bit.
"""
from __future__ import annotations

import numpy as np

from .registry import helper

# Below this many items a new array costs less than `out=`'s keyword (NumPy keeps
# small blocks for reuse): a helper called at each step of a loop stays cheap.
SMALL = 4096


@helper
def subtract_into(c, e):
    """c - e, written into e's array where e is arithmetic's new float or complex
    array (nothing else refers to it) of more than SMALL items; anything else (a
    number, a NumPy scalar, an int or bool array, whose difference has another type,
    another library's array) as `c - e` gives it."""
    if type(e) is np.ndarray and e.size > SMALL and e.dtype.kind in "fc":
        return np.subtract(c, e, out=e)
    return c - e
