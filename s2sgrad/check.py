"""Compare a compiled gradient with central finite differences (`s2sgrad check`)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .api import vjp
from .witness import report as witness_report


@dataclass
class ArgumentError:
    name: str
    shape: Tuple[int, ...]
    max_abs: float
    max_rel: float


@dataclass
class CheckReport:
    tol: float
    rows: List[ArgumentError] = field(default_factory=list)
    witness: List[str] = field(default_factory=list)   # what the self-checks did

    @property
    def ok(self) -> bool:
        return all(r.max_rel <= self.tol for r in self.rows)

    def table(self) -> str:
        head = f"{'argument':<12} {'shape':<12} {'max abs error':>14} {'max rel error':>14}"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            flag = "" if r.max_rel <= self.tol else "  <-- above tolerance"
            lines.append(f"{r.name:<12} {str(r.shape):<12} {r.max_abs:>14.3e} "
                         f"{r.max_rel:>14.3e}{flag}")
        verdict = "OK" if self.ok else "FAILED"
        witnesses = f" ({'; '.join(self.witness)})" if self.witness else ""
        lines.append(f"{verdict}: tolerance {self.tol:g} on the relative error{witnesses}")
        return "\n".join(lines)


def _is_float(value) -> bool:
    if isinstance(value, (bool, int)):
        return False
    if isinstance(value, float):
        return True
    return isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating)


def central_difference_vjp(f: Callable, args: Sequence, v, positions: Sequence[int],
                           eps: float = 1e-6) -> List[np.ndarray]:
    """v . df/dargs[i] by central differences, one coordinate at a time."""
    out = []
    for i in positions:
        x = np.array(args[i], dtype=np.float64)
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[idx] += eps
            minus[idx] -= eps
            hi = _dot(v, f(*_replace(args, i, plus if x.ndim else float(plus))))
            lo = _dot(v, f(*_replace(args, i, minus if x.ndim else float(minus))))
            g[idx] = (hi - lo) / (2 * eps)
        out.append(g)
    return out


def _replace(args, i, value):
    args = list(args)
    args[i] = value
    return args


def _dot(v, out) -> float:
    if isinstance(out, tuple):
        return sum(_dot(vi, oi) for vi, oi in zip(v, out))
    return float(np.sum(np.asarray(v) * np.asarray(out)))


def random_inputs(fn: Callable, shapes: Dict[str, Tuple[int, ...]],
                  rng: np.random.Generator) -> Tuple[list, list]:
    """(arguments, their parameters): random arrays of the given shapes.

    Every parameter up to the last one that has a shape or no default: a random
    array of the given shape, a random scalar, or (for a default) the default."""
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = set(shapes) - {p.name for p in params}
    if unknown:
        raise ValueError(f"--shape names {sorted(unknown)} are not parameters of "
                         f"{fn.__name__} ({', '.join(p.name for p in params)})")
    needed = [i for i, p in enumerate(params)
              if p.name in shapes or p.default is inspect.Parameter.empty]
    args = []
    for p in params[:max(needed, default=-1) + 1]:
        if p.name in shapes:
            args.append(rng.standard_normal(shapes[p.name]))
        elif p.default is not inspect.Parameter.empty:
            args.append(p.default)
        else:
            args.append(float(rng.standard_normal()))
    return args, params


def check_gradient(fn: Callable, shapes: Dict[str, Tuple[int, ...]], seed: int = 0,
                   tol: float = 1e-6, wrt: Optional[Sequence[int]] = None) -> CheckReport:
    """Random inputs of the given shapes; compiled VJP against finite differences."""
    rng = np.random.default_rng(seed)
    args, params = random_inputs(fn, shapes, rng)
    if wrt is not None:
        positions = tuple(wrt)
    else:
        positions = tuple(i for i, a in enumerate(args) if _is_float(a))
        if not positions:
            raise ValueError(f"{fn.__name__} has no floating-point argument to check; give "
                             f"--shape for its array arguments")
    out, pullback = vjp(fn, *args, wrt=positions, witness="always")
    v = tuple(rng.standard_normal(np.shape(o)) for o in out) if isinstance(out, tuple) \
        else rng.standard_normal(np.shape(out))
    grads = pullback(v)
    numeric = central_difference_vjp(fn, args, v, positions)
    report = CheckReport(tol=tol, witness=witness_report(fn, positions))
    for i, g, n in zip(positions, grads, numeric):
        err = np.abs(np.asarray(g, dtype=np.float64) - n)
        scale = max(float(np.max(np.abs(n), initial=0.0)),
                    float(np.max(np.abs(np.asarray(g, dtype=np.float64)), initial=0.0)), 1e-12)
        max_abs = float(np.max(err, initial=0.0))
        report.rows.append(ArgumentError(params[i].name, tuple(np.shape(args[i])), max_abs,
                                         max_abs / scale))
    return report
