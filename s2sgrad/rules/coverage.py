"""NumPy and SciPy coverage against HIPS autograd, function by function, from the rule table.

    python -m s2sgrad.rules.coverage            # writes docs/coverage-autograd.md
    python -m s2sgrad.rules.coverage --check    # exit 1 if that file is out of date
    python -m s2sgrad.rules.coverage -          # prints the page

The s2sgrad side is the registry itself (every function with a gradient rule,
its aliases, and the SciPy rules, loaded for the purpose); the autograd side is
autograd's own table of VJPs (`autograd.core.primitive_vjps`) after importing
autograd.numpy and autograd.scipy, when autograd is installed. Functions are
matched by identity (the NumPy or SciPy function object each side wraps), so a
row means the same function on both sides. Nothing here is written by hand but
the reasons for what s2sgrad leaves out (REFUSED).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import types
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from . import jvp_rules, registry

PAGE = os.path.join("docs", "coverage-autograd.md")

# Functions autograd differentiates and s2sgrad does not, with the reason (none today:
# a function autograd gains is listed "not yet written" until it has a rule here).
REFUSED: Dict[str, str] = {}


def _scipy_name(func: Callable) -> Optional[str]:
    """The public dotted name of a SciPy function or bound method."""
    import scipy
    if isinstance(func, types.MethodType):
        owner = func.__self__
        for sub in ("stats",):
            module = importlib.import_module(f"scipy.{sub}")
            for attr, value in vars(module).items():
                if value is owner:
                    return f"scipy.{sub}.{attr}.{func.__func__.__name__}"
        return None
    name = getattr(func, "__name__", None)
    for sub in ("special", "linalg", "signal", "stats", "integrate", "spatial.distance"):
        module = getattr(scipy, sub, None) or importlib.import_module(f"scipy.{sub}")
        if name is not None and getattr(module, name, None) is func:
            return f"scipy.{sub}.{name}"
    return None


def _name(func: Callable) -> Optional[str]:
    mod = getattr(func, "__module__", None) or ""
    if isinstance(func, types.MethodType) or mod.startswith("scipy") or \
            (isinstance(func, np.ufunc) and getattr(np, func.__name__, None) is not func):
        return _scipy_name(func)
    if isinstance(func, np.ufunc) or mod.startswith("numpy"):
        return registry.display_name(func)
    return None


def s2sgrad_functions() -> Dict[object, Tuple[str, registry.Rule]]:
    """key -> (name, rule) for every NumPy/SciPy function with a rule (aliases too)."""
    registry.load_scipy_rules()
    out = {}
    for table in (registry.REGISTRY, registry.LAZY):
        for store in (table.functions, table.aliases):
            for key, (func, rule) in store.items():
                if rule.name.startswith("_s2s_") or key in out:
                    continue
                name = _name(func)
                if name is not None:
                    out[key] = (name, rule)
    return out


def autograd_functions() -> Optional[Dict[object, Tuple[str, str]]]:
    """key -> (name, "yes" or "composed") for every NumPy/SciPy function autograd has a
    VJP for, or writes in terms of functions that have one (np.stack, np.concatenate,
    ...); None without autograd."""
    try:
        import autograd.core
    except ImportError:
        return None
    for module in ("autograd.numpy", "autograd.numpy.linalg", "autograd.numpy.fft",
                   "autograd.scipy.special", "autograd.scipy.stats", "autograd.scipy.linalg",
                   "autograd.scipy.signal", "autograd.scipy.integrate",
                   "autograd.scipy.stats.multivariate_normal", "autograd.scipy.stats.dirichlet"):
        try:
            importlib.import_module(module)
        except (ImportError, AttributeError):
            pass
    out = {}
    for primitive in autograd.core.primitive_vjps:
        func = getattr(primitive, "fun", primitive)
        if getattr(func, "__module__", "") == "autograd.scipy.signal" and \
                func.__name__ == "convolve":
            import scipy.signal  # autograd's own N-d convolve, standing in for SciPy's
            func = scipy.signal.convolve
        name = _name(func)
        if name is not None:
            out[registry.rule_key(func)] = (name, "yes")
    import autograd.numpy as anp
    for attr, value in vars(anp).items():
        func = getattr(np, attr, None)
        if isinstance(value, types.FunctionType) and callable(func) and \
                value.__module__ == "autograd.numpy.numpy_wrapper":
            name = _name(func)
            if name is not None and registry.rule_key(func) not in out:
                out[registry.rule_key(func)] = (name, "composed")
    return out


def rows() -> Tuple[List[Tuple[str, bool, object, str]], Optional[int]]:
    """(name, in s2sgrad, in autograd ("yes", "composed", False; None: not installed),
    forward mode / reason)."""
    ours = s2sgrad_functions()
    theirs = autograd_functions()
    out = []
    for key, (name, rule) in ours.items():
        jr = jvp_rules.lookup(rule)
        how = jr.how.split(":")[0].split(",")[0] if jr is not None else \
            "none: " + jvp_rules.UNSUPPORTED.get(rule.name, "no JVP rule")
        out.append((name, True, None if theirs is None else
                    (theirs[key][1] if key in theirs else False), how))
    nondiff = set(registry.REGISTRY.nondiff_functions) | set(registry.LAZY.nondiff_functions)
    for key, (name, kind) in (theirs or {}).items():
        if key in nondiff:
            out.append((name, "zero", kind, "zero gradient (piecewise constant)"))
        elif key not in ours:
            why = REFUSED.get(name, "not yet written")
            out.append((name, False, kind, why))
    return sorted(out, key=lambda r: (_group(r[0]), r[0])), (None if theirs is None else
                                                            len(theirs))


def _group(name: str) -> int:
    return 0 if name.startswith("np.") else 1


def page() -> str:
    table, n_theirs = rows()
    both = sum(1 for r in table if r[1] and r[2])
    ours_only = sum(1 for r in table if r[1] and not r[2])
    theirs_only = sum(1 for r in table if not r[1])
    lines = [
        "# NumPy and SciPy coverage against autograd",
        "",
        "<!-- generated by `python -m s2sgrad.rules.coverage` from the rule table: "
        "do not edit -->",
        "",
        "Every NumPy and SciPy function with a gradient rule in s2sgrad, beside HIPS "
        "autograd's table of VJPs (matched by the function object each wraps; aliases such "
        "as `np.abs` and `np.absolute` are rows of their own when both are registered). "
        "Every s2sgrad rule has a forward-mode rule (the last column says how it is "
        "obtained) and second-order rules for the helpers it calls; each is tested "
        "against central differences on at least two shapes (tests/rule_cases.py).",
        "",
    ]
    if n_theirs is None:
        lines += ["autograd is not installed: only s2sgrad's column is filled.", ""]
    else:
        lines += [f"- covered by both: **{both}**",
                  f"- s2sgrad only: **{ours_only}**",
                  f"- autograd only: **{theirs_only}**"
                  + (" (why each is left out: last column)" if theirs_only else ""),
                  ""]
    lines += ["| function | s2sgrad | autograd | forward mode (s2sgrad) / why not |",
              "|---|---|---|---|"]
    mark = {True: "yes", False: "-", None: "?", "yes": "yes", "zero": "yes (no gradient)",
            "composed": "yes (composed of others)"}
    for name, ours, theirs, how in table:
        lines.append(f"| `{name}` | {mark[ours]} | {mark[theirs]} | {how} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m s2sgrad.rules.coverage",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=PAGE,
                        help=f"where to write the page ('-': print it; default {PAGE})")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the page at PATH is not what would be written")
    args = parser.parse_args(argv)
    text = page()
    if args.path == "-":
        sys.stdout.write(text)
        return 0
    if args.check:
        try:
            with open(args.path, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        if current != text:
            print(f"{args.path} is out of date: run python -m s2sgrad.rules.coverage",
                  file=sys.stderr)
            return 1
        return 0
    with open(args.path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
