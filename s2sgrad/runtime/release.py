"""Residuals handed to an adjoint for one call, which may let them go as it reads.

grad and value_and_grad run the adjoint once on what the forward kept: they pass
`Once(residuals)` and drop their own reference, and the generated adjoint's
`_s2s_take` empties it, so that each residual is freed after its last read
(compiler/optimize/release.py). Anything else (a pullback's tuple, read again at
each call) is taken as it is.
"""
from __future__ import annotations

from typing import Any

from .registry import helper


class Once(list):
    """The residuals of one forward, for one adjoint call (a list: unpacking it, as a
    wrapper of the pair may, works as on the tuple)."""

    __slots__ = ()


@helper
def take(residuals: Any) -> Any:
    """The residuals to unpack; a `Once` is emptied (its items are the adjoint's now)."""
    if type(residuals) is Once:
        items = tuple(residuals)
        residuals.clear()
        return items
    return residuals
