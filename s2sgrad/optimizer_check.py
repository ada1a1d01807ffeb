"""The optimiser checked against the plain transform, on every call (a test mode).

With `S2SGRAD_CHECK_OPTIMIZER=1` in the environment, every pair the public API
uses is run twice: optimised, as usual, and compiled with `optimize=False`, on
copies of the same arguments and cotangents. Outputs, gradients and tangents
must agree, or `OptimizerMismatch` says where they differ. The optimiser's
passes rest on facts (shapes, aliasing, single uses) that the plain transform
never uses, so a disagreement is a wrong fact. CI runs the suite in this mode.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import numpy as np

from .runtime.arrays import is_foreign_array

ENABLED = os.environ.get("S2SGRAD_CHECK_OPTIMIZER", "") not in ("", "0")
RTOL, ATOL = 1e-7, 1e-9


class OptimizerMismatch(AssertionError):
    """The optimised code and the plain transform computed different values."""


def checked_pair(compiled: Any, plain: Callable[[], Any]) -> Any:
    """`compiled` itself, or (in check mode) a copy whose forward and adjoint also
    run the pair `plain()` returns and compare. Generated code never sees the
    copy: only the caller of the public API does."""
    if not ENABLED:
        return compiled
    other = plain()
    name = compiled.name

    def forward(*args, **kwargs):
        copies = fresh_copy((args, kwargs))
        out, residuals = compiled.forward(*args, **kwargs)
        out_plain, residuals_plain = other.forward(*copies[0], **copies[1])
        _agree(out, out_plain, f"{name}: the output")
        return out, (residuals, residuals_plain)

    def adjoint(residuals, cotangent):
        mine, theirs = residuals
        grads = compiled.adjoint(mine, fresh_copy(cotangent))
        _agree(grads, other.adjoint(theirs, fresh_copy(cotangent)), f"{name}: the gradient")
        return grads
    return dataclasses.replace(compiled, forward=forward, adjoint=adjoint,
                               cached_as=compiled.cached_as + other.cached_as)


def checked_jvp(compiled: Any, plain: Callable[[], Any]) -> Any:
    """The same for forward mode: the tangent code against its plain version."""
    if not ENABLED:
        return compiled
    other = plain()
    name = compiled.name

    def jvp(*args, **kwargs):
        copies = fresh_copy((args, kwargs))
        result = compiled.jvp(*args, **kwargs)
        _agree(result, other.jvp(*copies[0], **copies[1]), f"{name}: the output and tangent")
        return result
    return dataclasses.replace(compiled, jvp=jvp)


def fresh_copy(value: Any) -> Any:
    """Arrays copied, containers rebuilt, anything else shared."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        items = [fresh_copy(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [fresh_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: fresh_copy(v) for k, v in value.items()}
    return value


def _agree(a: Any, b: Any, what: str) -> None:
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if len(a) != len(b):
            raise OptimizerMismatch(f"{what}: {len(a)} items optimised, {len(b)} plain")
        for i, (x, y) in enumerate(zip(a, b)):
            _agree(x, y, f"{what}[{i}]")
        return
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            raise OptimizerMismatch(f"{what}: keys {list(a)} optimised, {list(b)} plain")
        for k in a:
            _agree(a[k], b[k], f"{what}[{k!r}]")
        return
    if a is None or b is None:
        if a is not b:
            raise OptimizerMismatch(f"{what}: {a!r} optimised, {b!r} plain")
        return
    if is_foreign_array(a) or is_foreign_array(b):
        x, y = a, b   # (compared by their library: CuPy converts to NumPy only when asked)
    else:
        try:
            x, y = np.asarray(a), np.asarray(b)
        except Exception:  # noqa: BLE001 - not numeric: identity or equality decides
            if a is not b and a != b:
                raise OptimizerMismatch(f"{what}: {a!r} optimised, {b!r} plain") from None
            return
        if x.dtype.kind not in "biufc" or y.dtype.kind not in "biufc":
            return
    if x.shape != y.shape:
        raise OptimizerMismatch(f"{what}: shape {x.shape} optimised, {y.shape} plain")
    finite = y.size and bool(np.isfinite(y).all())   # (Dask's max takes no `initial`)
    scale = max(float(np.max(np.abs(y))) if finite else 1.0, 1.0)
    if not bool(np.allclose(x, y, rtol=RTOL, atol=ATOL * scale, equal_nan=True)):
        worst = float(np.nanmax(np.abs(x - y))) if x.size else 0.0
        raise OptimizerMismatch(f"{what} differs between the optimised and the plain code "
                                f"(largest difference {worst:.3g}):\noptimised: {x}\nplain: {y}")
