"""Compare a compiled gradient with central finite differences (`s2sgrad check`)."""
from __future__ import annotations

import ast
import inspect
import typing
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


class CheckError(ValueError):
    """The check cannot be done as asked (no shapes, a function that is not
    deterministic, inputs outside its domain): one message saying what to give."""


_ARRAY_NAMES = ("ndarray", "NDArray", "ArrayLike", "Array")


def _annotation_shape(annotation) -> Tuple[str, Optional[Tuple[int, ...]]]:
    """What a parameter's annotation says: ("shape", dims) for a tuple of ints (`x: (3, 4)`,
    or in `Annotated[np.ndarray, (3, 4)]`), ("scalar", None) for float, ("array", None)
    for an array type without a shape, ("", None) for anything else or none."""
    if annotation is inspect.Parameter.empty:
        return "", None
    if _is_dims(annotation):
        return "shape", tuple(int(d) for d in annotation)
    for meta in getattr(annotation, "__metadata__", ()):   # typing.Annotated
        if _is_dims(meta):
            return "shape", tuple(int(d) for d in meta)
    if isinstance(annotation, str):   # from __future__ import annotations
        text = annotation.strip()
        try:
            node = ast.parse(text, mode="eval").body
        except SyntaxError:
            return "", None
        if isinstance(node, ast.Subscript) and "Annotated" in ast.unparse(node.value):
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            for item in items[1:]:
                try:
                    value = ast.literal_eval(item)
                except ValueError:
                    continue
                if _is_dims(value):
                    return "shape", tuple(int(d) for d in value)
            node = items[0]
        try:
            value = ast.literal_eval(node)
        except ValueError:
            value = None
        if _is_dims(value):
            return "shape", tuple(int(d) for d in value)
        name = ast.unparse(node).split("[")[0].rsplit(".", 1)[-1]
        if name == "float":
            return "scalar", None
        return ("array", None) if name in _ARRAY_NAMES else ("", None)
    base = getattr(annotation, "__origin__", annotation)
    if getattr(annotation, "__metadata__", None):   # Annotated without a shape
        base = annotation.__origin__
        base = getattr(base, "__origin__", base)
    if base is float:
        return "scalar", None
    name = getattr(base, "__name__", "")
    return ("array", None) if name in _ARRAY_NAMES or base is np.ndarray else ("", None)


def _is_dims(value) -> bool:
    return isinstance(value, tuple) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in value)


def _annotations(fn: Callable) -> dict:
    """Parameter annotations, evaluated where that works (Annotated keeps its extras)."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - a name the annotations use is not importable
        return {}


def random_inputs(fn: Callable, shapes: Dict[str, Tuple[int, ...]],
                  rng: np.random.Generator,
                  ranges: Optional[Dict[Optional[str], Tuple[float, float]]] = None
                  ) -> Tuple[list, list]:
    """(arguments, their parameters): random arrays of the given shapes.

    Every parameter up to the last one that has a shape or no default: a random
    array of the given shape (or of the shape its annotation gives: `x: (3, 4)`,
    `Annotated[np.ndarray, (3, 4)]`), a random scalar, or (for a default) the
    default. Values are standard normal, or uniform in `ranges[name]` (the key
    None: every argument without a range of its own)."""
    args, params, _ = _draw(fn, shapes, rng, ranges or {})
    return args, params


def _draw(fn: Callable, shapes: Dict[str, Tuple[int, ...]], rng: np.random.Generator,
          ranges: Dict[Optional[str], Tuple[float, float]]) -> Tuple[list, list, list]:
    """random_inputs, and the names of the parameters drawn as scalars for want of a
    shape (a function that then fails is told about --shape)."""
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = ", ".join(p.name for p in params)
    for option, given in (("--shape", shapes), ("--range", ranges)):
        unknown = set(given) - {p.name for p in params} - {None}
        if unknown:
            raise ValueError(f"{option} names {sorted(unknown)} are not parameters of "
                             f"{fn.__name__} ({names})")
    hints = _annotations(fn)
    said = {p.name: _annotation_shape(hints.get(p.name, p.annotation)) for p in params}
    needed = [i for i, p in enumerate(params)
              if p.name in shapes or p.default is inspect.Parameter.empty
              or said[p.name][0] == "shape" or p.name in ranges]
    unshaped = [p.name for p in params[:max(needed, default=-1) + 1]
                if p.name not in shapes and said[p.name][0] == "array"
                and p.default is inspect.Parameter.empty]
    if unshaped:
        example = " ".join(f"--shape {n}=3" for n in unshaped)
        raise CheckError(f"{fn.__name__}: {', '.join(unshaped)} "
                         f"{'is an array' if len(unshaped) == 1 else 'are arrays'} "
                         f"(annotated) of no known shape: give {example} (NAME=D1,D2,... "
                         f"per array argument), or annotate the shape "
                         f"(Annotated[np.ndarray, (3,)])")
    args, scalars = [], []
    for p in params[:max(needed, default=-1) + 1]:
        lo_hi = ranges.get(p.name, ranges.get(None))
        if p.name in shapes:
            args.append(_random(rng, shapes[p.name], lo_hi))
        elif said[p.name][0] == "shape":
            args.append(_random(rng, said[p.name][1], lo_hi))
        elif p.default is not inspect.Parameter.empty and p.name not in ranges:
            args.append(p.default)
        else:
            args.append(float(_random(rng, None, lo_hi)))
            if said[p.name][0] != "scalar":
                scalars.append(p.name)
    return args, params, scalars


def _random(rng: np.random.Generator, shape, lo_hi: Optional[Tuple[float, float]]):
    if lo_hi is None:
        return rng.standard_normal(shape)
    return rng.uniform(lo_hi[0], lo_hi[1], shape)


def _copies(args: Sequence) -> list:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _largest_difference(a, b) -> Optional[float]:
    """None when two outputs are equal (NaN equal to NaN), else how far apart."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        diffs = [_largest_difference(x, y) for x, y in zip(a, b)]
        diffs = [d for d in diffs if d is not None]
        return max(diffs) if diffs else None
    try:
        x = np.asarray(a, dtype=np.float64)
        y = np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError):
        return None if a is b or a == b else float("inf")
    if x.shape != y.shape:
        return float("inf")
    if np.array_equal(x, y, equal_nan=True):
        return None
    with np.errstate(invalid="ignore"):
        d = np.abs(x - y)
    return float(np.nanmax(d)) if np.any(np.isfinite(d)) else float("inf")


def _finite(value) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_finite(v) for v in value)
    try:
        return bool(np.all(np.isfinite(np.asarray(value, dtype=np.float64))))
    except (TypeError, ValueError):
        return True


def drawn_inputs(fn: Callable, shapes: Dict[str, Tuple[int, ...]], rng: np.random.Generator,
                 command: str = "check") -> list:
    """random_inputs that fn runs on: a function that fails on them (for want of a
    --shape, say) is a CheckError saying what to give (`command` drew them)."""
    args, _, scalars = _draw(fn, shapes, rng, {})
    _run_drawn(fn, args, scalars, command)
    return args


def _run_drawn(fn: Callable, args: list, scalars: list, command: str = "check"):
    """fn on the drawn inputs; a failure is a CheckError naming the arguments drawn as
    numbers for want of a shape."""
    name = getattr(fn, "__name__", "the function")
    try:
        with np.errstate(all="ignore"):
            return fn(*_copies(args))
    except Exception as exc:  # noqa: BLE001 - the user's function failed on these inputs
        what = " ".join(f"{type(exc).__name__}: {exc}".split())
        if scalars:
            example = " ".join(f"--shape {n}=3" for n in scalars)
            raise CheckError(
                f"{name} failed on the inputs {command} drew ({what}); the arguments "
                f"without --shape ({', '.join(scalars)}) were random numbers: give the "
                f"shape of each array argument (NAME=D1,D2,...), e.g. {example}, or "
                f"annotate it (x: Annotated[np.ndarray, (3,)]); arguments that are lists, "
                f"tuples or dicts cannot be drawn: call the API with real ones") from None
        raise CheckError(f"{name} failed on the inputs {command} drew: {what}") from None


def _first_run(fn: Callable, args: list, scalars: list, ranges: dict):
    """fn on the drawn inputs, twice: a function that fails for want of shapes, gives
    two results (random numbers) or NaN is a CheckError saying what to give."""
    name = getattr(fn, "__name__", "the function")
    first = _run_drawn(fn, args, scalars)
    with np.errstate(all="ignore"):
        second = fn(*_copies(args))
    difference = _largest_difference(first, second)
    if difference is not None:
        raise CheckError(
            f"{name} is not deterministic: two calls on the same inputs returned "
            f"different values (largest difference {difference:.3g}), so finite "
            f"differences cannot check its gradient. Draw its random numbers from a "
            f"generator with a fixed seed (np.random.default_rng(0)) or pass them in as "
            f"an argument")
    if not _finite(first):
        given = "in the given --range" if ranges else "standard normal"
        raise CheckError(
            f"{name} returned NaN or infinity on the inputs check drew ({given}): "
            f"some input is outside its domain (sqrt, log, arcsin, ...); give --range "
            f"NAME=LO,HI for such arguments (e.g. --range x=0.1,2), or --range LO,HI "
            f"for all of them")
    return first


def check_gradient(fn: Callable, shapes: Dict[str, Tuple[int, ...]], seed: int = 0,
                   tol: float = 1e-6, wrt: Optional[Sequence[int]] = None,
                   ranges: Optional[Dict[Optional[str], Tuple[float, float]]] = None
                   ) -> CheckReport:
    """Random inputs of the given shapes (in `ranges`, see random_inputs); compiled
    VJP against finite differences. A function that cannot be checked so (it fails
    on scalars for want of --shape, it is not deterministic, its value is NaN) raises
    CheckError saying what to give."""
    rng = np.random.default_rng(seed)
    ranges = ranges or {}
    args, params, scalars = _draw(fn, shapes, rng, ranges)
    if wrt is not None:
        positions = tuple(wrt)
    else:
        positions = tuple(i for i, a in enumerate(args) if _is_float(a))
        if not positions:
            raise CheckError(f"{fn.__name__} has no floating-point argument to check; give "
                             f"--shape for its array arguments")
    _first_run(fn, args, scalars, ranges)
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
