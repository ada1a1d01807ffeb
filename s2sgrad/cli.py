"""The `s2sgrad` command: inspect and check generated gradient code.

    s2sgrad show path/to/file.py:func [--wrt 0,1] [--no-optimize] [--color/--no-color]
                                      [--mode reverse|forward] [--order N]
                                      [--jit [--shape NAME=D1,D2 ...]]
    s2sgrad check path/to/file.py:func --shape x=3,4 [--range x=LO,HI] [--seed N] [--tol T]
    s2sgrad cache info | s2sgrad cache clear

Errors are one clear message on stderr and exit code 2, never a traceback (a
TransformError keeps its source line and caret).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import keyword
import os
import re
import sys
import textwrap
from importlib.machinery import SourceFileLoader
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .errors import InternalError, TransformError
from .function import is_function_class


class CliError(Exception):
    """A user-facing error: printed as one message, exit code 2."""


def load_target(target: str) -> Callable:
    """`file.py:func`, `pkg.module:func` or `module:Class.method` -> the function."""
    return _load_target(target)[0]


def _load_target(target: str) -> Tuple[Callable, Any]:
    """(function, the class it was found on or None)."""
    if ":" not in target:
        raise CliError(f"target {target!r} must be FILE.py:FUNCTION or package.module:FUNCTION")
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise CliError(f"target {target!r} must be FILE.py:FUNCTION or package.module:FUNCTION")
    module = _load_module(where)
    obj, owner = module, None
    for part in attr.split("."):
        try:
            owner, obj = obj, getattr(obj, part)
        except AttributeError:
            raise CliError(f"{where} has no function {attr!r}") from None
    if isinstance(obj, type):
        hint = (f" (show one of its methods, e.g. {where}:{attr}.forward)"
                if is_function_class(obj) else "")
        raise CliError(f"{where}:{attr} is a class, not a function{hint}")
    if not callable(obj):
        raise CliError(f"{where}:{attr} is a {type(obj).__name__}, not a function")
    return obj, owner if isinstance(owner, type) else None


def _load_module(where: str):
    if where.endswith(".py") or os.sep in where or "/" in where:
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise CliError(f"no such file: {where}")
        directory = os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)
        name = _module_name(path)
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path,
                                                      loader=SourceFileLoader(name, path))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            sys.modules.pop(name, None)
            raise CliError(f"syntax error in {where}:{exc.lineno}: {exc.msg}") from None
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module failed
            sys.modules.pop(name, None)
            raise CliError(f"importing {where} failed: {_one_line(exc)}") from None
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        raise CliError(f"cannot import module {where!r}: {exc}") from None
    except SyntaxError as exc:
        raise CliError(f"syntax error in {exc.filename}:{exc.lineno}: {exc.msg}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        raise CliError(f"importing {where} failed: {_one_line(exc)}") from None


def _module_name(path: str) -> str:
    """The name a program in the file's directory would import it by, when free.

    The same name means the same cache keys as that program. A name already
    taken by another module gets a private one instead.
    """
    stem = os.path.splitext(os.path.basename(path))[0]
    if stem.isidentifier() and not keyword.iskeyword(stem) and not stem.startswith("__"):
        existing = sys.modules.get(stem)
        if existing is None or os.path.abspath(getattr(existing, "__file__", "") or "") == path:
            return stem
    return "_s2s_target_" + re.sub(r"\W", "_", stem)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def parse_wrt(text: str) -> Tuple[int, ...]:
    try:
        positions = tuple(int(p) for p in text.split(",") if p.strip() != "")
    except ValueError:
        raise CliError(f"--wrt takes comma-separated argument positions such as 0,1, "
                       f"not {text!r}") from None
    if not positions:
        raise CliError("--wrt needs at least one argument position")
    return positions


def _highlight(text: str, color: Optional[bool]) -> str:
    """Pygments colours when asked, or by default on a terminal; else the text."""
    if color is None:
        color = (sys.stdout.isatty() and os.environ.get("NO_COLOR") is None
                 and os.environ.get("TERM") != "dumb")
    if not color:
        return text
    try:
        from pygments import highlight
        from pygments.formatters import TerminalFormatter
        from pygments.lexers import PythonLexer
    except ImportError:
        return text
    return highlight(text, PythonLexer(), TerminalFormatter())


def _default_wrt(fn: Callable, owner: Any) -> Tuple[int, ...]:
    """Argument 0, except the first input after `ctx` in a Function's forward/vjp."""
    if owner is not None and is_function_class(owner):
        import inspect
        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = []
        if len(params) > 1:
            return (1,)
    return (0,)


def cmd_show(args) -> int:
    fn, owner = _load_target(args.target)
    wrt = parse_wrt(args.wrt) if args.wrt is not None else _default_wrt(fn, owner)
    if args.shape and not args.jit:
        raise CliError("--shape goes with --jit (the shapes jit=True decides on)")
    if args.jit:
        if args.order >= 2 or args.mode == "forward" or args.no_optimize:
            raise CliError("--jit shows the code of grad(f, jit=True): it does not combine "
                           "with --order, --mode forward or --no-optimize")
        text = _jit_report(fn, wrt, _parse_shapes(args.shape))
    elif args.order >= 2:
        text = _higher_order_source(fn, wrt, args.order, args.mode, not args.no_optimize)
    elif args.mode == "forward":
        from .compiler import compile_jvp
        text = compile_jvp(fn, wrt, not args.no_optimize).source
    else:
        text = _show_reverse(fn, owner, wrt, not args.no_optimize)
    print(_highlight(text, args.color), end="" if text.endswith("\n") else "\n")
    return 0


def _apply_wrapper(fn: Callable, owner: Any, wrt: Tuple[int, ...], directory: str,
                   refused: TransformError) -> Tuple[Callable, Tuple[int, ...], str]:
    """A Function's `forward` that s2sgrad cannot differentiate on its own (it sets
    `ctx` attributes, which exist only where the Function is inlined): a function
    that calls `Cls.apply(...)`, written to `directory`, where forward and vjp are
    inlined; its positions and a header saying so. Any other refusal is raised."""
    import inspect
    if owner is None or not is_function_class(owner) or \
            getattr(owner, "forward", None) is not fn or 0 in wrt or \
            owner.__module__ not in sys.modules:
        raise refused
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):
        raise refused from None
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        raise refused
    names = ", ".join(p.name for p in params)
    cls = owner.__name__
    wrapper = f"{cls}_apply"
    path = os.path.join(directory, f"{wrapper}.py")
    with open(path, "w") as out:
        out.write(f"import sys\n\n{cls} = getattr(sys.modules[{owner.__module__!r}], "
                  f"{cls!r})\n\n\ndef {wrapper}({names}):\n    return {cls}.apply({names})\n")
    name = f"_s2s_show_{cls}"
    spec = importlib.util.spec_from_file_location(name, path, loader=SourceFileLoader(name, path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    why = (refused.msg or "it is refused").splitlines()[0]
    where = f"{os.path.basename(refused.filename or '')}:{refused.lineno}"
    why = where + ": " + why.split(": ", 1)[1] if why.startswith(refused.filename or "\0") \
        else why
    header = (f"# s2sgrad: {cls}.forward is not differentiated on its own ({why});\n"
              f"# shown as s2sgrad inlines it, in a function that calls {cls}.apply({names})\n")
    return getattr(module, wrapper), tuple(i - 1 for i in wrt), header


def _show_reverse(fn: Callable, owner: Any, wrt: Tuple[int, ...], optimize: bool) -> str:
    """The generated pair of fn as `show` prints it (for a Function's forward that
    sets ctx attributes: as inlined, see _apply_wrapper)."""
    import shutil
    import tempfile

    from .arguments import parameter_names
    from .compiler import compile_function
    header, directory, saved = "", None, os.environ.get("S2SGRAD_CACHE")
    try:
        # Shown for array arguments (a list's or dict's cotangents add item by item).
        try:
            text = compile_function(fn, wrt, optimize,
                                    leaves=tuple(range(len(parameter_names(fn))))).source
        except TransformError as refused:
            directory = tempfile.mkdtemp(prefix="s2sgrad-show-")
            fn, wrt, header = _apply_wrapper(fn, owner, wrt, directory, refused)
            os.environ["S2SGRAD_CACHE"] = "0"   # a temporary file: nothing kept on disk
            try:
                text = compile_function(fn, wrt, optimize,
                                        leaves=tuple(range(len(parameter_names(fn))))).source
            except TransformError:
                raise refused from None
        gap = _forward_mode_gap(fn, wrt)
        if gap is not None:
            text = (f"# s2sgrad: the derivative witness does not run for this function: "
                    f"forward mode refuses {gap}\n# (the value witness does)\n" + text)
        return header + text
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
            if saved is None:
                os.environ.pop("S2SGRAD_CACHE", None)
            else:
                os.environ["S2SGRAD_CACHE"] = saved


def _jit_report(fn: Callable, wrt: Tuple[int, ...], shapes: dict) -> str:
    """What jit=True does with fn: the rule it decides by (no shapes), or, for random
    arguments of the given shapes, the decision and the numba code it compiles."""
    from .backends import jit_plan, jit_rule, jit_source
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", "the function"))
    if not shapes:
        rule, by_size = jit_rule(fn, wrt)
        text = f"# jit: {name}: {rule}.\n"
        if by_size:
            text += ("# Give --shape NAME=D1,D2 for its array arguments to see the decision "
                     "and the code numba compiles.\n")
        return text
    import numpy as np

    from .check import drawn_inputs
    args = drawn_inputs(fn, shapes, np.random.default_rng(0), "show --jit")
    if any(i >= len(args) for i in wrt):
        raise CliError(f"--wrt {','.join(map(str, wrt))}: give --shape for the arguments "
                       f"up to position {max(wrt)}")
    plan = jit_plan(fn, *args, wrt=wrt)
    described = ", ".join(f"{k}={','.join(map(str, v))}" for k, v in shapes.items())
    text = f"# jit: {name} at {described}: {plan.reason}\n"
    if plan.compile or plan.outlined:
        from .backends.numba_backend import compiles_behind
        text += ("# numba compiles it in a worker process (with the disk cache on): calls "
                 "run the NumPy backend until it is done.\n" if compiles_behind() else
                 "# numba compiles it at the first call (S2SGRAD_JIT_BACKGROUND=0).\n")
        text += "\n" + jit_source(fn, *args, wrt=wrt)
    return text


def _higher_order_source(fn: Callable, wrt: Tuple[int, ...], order: int, mode: str,
                         optimize: bool) -> str:
    """The (order-1)-th gradient of `fn` as code (calling the pairs one order down,
    shown next), then that code differentiated once more: its adjoint (reverse
    over reverse) or, with --mode forward, its tangent code (forward over reverse)."""
    import inspect

    from .compiler import compile_function, higher
    if order > 2 and len(wrt) > 1:
        raise ValueError(f"--order {order} needs one --wrt position: the gradient with "
                         f"respect to several is not a scalar to differentiate again")
    grad_fn = higher.derived("grad", fn, wrt)
    for _ in range(order - 2):
        grad_fn = higher.derived("grad", grad_fn, wrt)
    if mode == "forward":
        from .compiler import compile_jvp
        code = compile_jvp(grad_fn, wrt, optimize).source
    else:
        code = compile_function(grad_fn, wrt, optimize).source
    first = grad_fn.__s2sgrad_pair__.source
    return inspect.getsource(grad_fn) + "\n\n" + first + "\n\n" + code


def _order(text: str) -> int:
    try:
        order = int(text)
    except ValueError:
        order = 0
    if order < 1:
        raise argparse.ArgumentTypeError(f"--order takes a whole number from 1 up, not {text!r}")
    return order


def _parse_shapes(items: Sequence[str]) -> dict:
    shapes = {}
    for item in items or ():
        name, sep, dims = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise CliError(f"--shape takes NAME=D1,D2,... (for example x=3,4), not {item!r}")
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip() != "")
        except ValueError:
            raise CliError(f"--shape {item!r}: dimensions must be integers") from None
        if any(d < 0 for d in shape):
            raise CliError(f"--shape {item!r}: dimensions must not be negative")
        shapes[name] = shape
    return shapes


def _parse_ranges(items: Sequence[str]) -> dict:
    """--range NAME=LO,HI (one argument) or LO,HI (every argument without its own)."""
    ranges: dict = {}
    for item in items or ():
        name, sep, bounds = item.rpartition("=")
        name = name.strip() if sep else None
        if sep and not name:
            raise CliError(f"--range takes NAME=LO,HI or LO,HI (for example x=0.1,2), "
                           f"not {item!r}")
        parts = bounds.split(",")
        try:
            lo, hi = (float(b) for b in parts)
        except ValueError:
            raise CliError(f"--range takes NAME=LO,HI or LO,HI with two numbers (for "
                           f"example x=0.1,2), not {item!r}") from None
        if not (lo < hi) or not all(abs(b) < float("inf") for b in (lo, hi)):
            raise CliError(f"--range {item!r}: LO must be below HI, both finite")
        ranges[name] = (lo, hi)
    return ranges


def _forward_mode_gap(fn: Callable, wrt: Tuple[int, ...]) -> Optional[str]:
    """Whether the derivative witness can run for fn (forward mode compiles it),
    asked without leaving the tangent code in the disk cache: `show` stores
    exactly the pair it shows."""
    from .witness import forward_mode_gap
    saved = os.environ.get("S2SGRAD_CACHE")
    os.environ["S2SGRAD_CACHE"] = "0"
    try:
        return forward_mode_gap(fn, wrt)
    finally:
        if saved is None:
            del os.environ["S2SGRAD_CACHE"]
        else:
            os.environ["S2SGRAD_CACHE"] = saved


def cmd_check(args) -> int:
    from .check import check_gradient
    fn = load_target(args.target)
    shapes = _parse_shapes(args.shape)
    if args.tol is not None and not args.tol > 0:
        raise CliError(f"--tol must be positive, not {args.tol!r}")
    report = check_gradient(fn, shapes, seed=args.seed, tol=args.tol,
                            wrt=parse_wrt(args.wrt) if args.wrt else None,
                            ranges=_parse_ranges(args.range))
    print(report.table())
    return 0 if report.ok else 1


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def cmd_cache_info(args) -> int:
    from . import cache
    from .compiler import memory_cache_size
    facts = cache.info()
    where = facts["directory"] + ("" if facts["exists"] else " (not created yet)")
    print(f"directory: {where}")
    print(f"entries:   {facts['entries']}")
    size = _size(facts["bytes"])
    cap = facts["max_bytes"]
    limit = f", cap {_size(cap)} (S2SGRAD_CACHE_MAX_MB)" if cap else ", no cap"
    print(f"size:      {size}" + ("" if facts["bytes"] < 1024 else f" ({facts['bytes']} bytes)")
          + limit)
    if not facts["enabled"]:
        state = "off (S2SGRAD_CACHE=0)"
    elif facts["problem"]:
        state = f"not used: the directory {facts['problem']}. {facts['fix']}"
    else:
        state = "on"
    print(f"disk cache: {state}")
    if facts["writing"]:
        print(f"writing:   {facts['writing']} temporary file"
              f"{'' if facts['writing'] == 1 else 's'} of writes in progress")
    stale = facts["stale"]
    if stale:
        print(f"stale:     {len(stale)} temporary file{'' if len(stale) == 1 else 's'} older "
              f"than {cache.STALE_SECONDS // 60} minutes, left by processes that died while "
              f"writing (`s2sgrad cache clear` removes them)")
    ignored = facts["ignored"]
    if ignored:
        print(f"ignored:   {len(ignored)} path{'' if len(ignored) == 1 else 's'} named like "
              f"entries that are not entries of yours (never read; `s2sgrad cache clear` "
              f"removes them):")
        for path, why in ignored:
            print(f"  {path}: {why}")
    size = memory_cache_size()
    print(f"memory:    up to {size} pairs per process (S2SGRAD_MEMORY_CACHE_SIZE)"
          if size else "memory:    no limit (S2SGRAD_MEMORY_CACHE_SIZE=0)")
    modules = len(cache.numba_modules(facts["directory"]))
    if modules:
        print(f"numba:     {modules} compiled module{'' if modules == 1 else 's'} "
              f"(jit=True) in {os.path.join(facts['directory'], cache.NUMBA_SUBDIR)}")
    return 0


def cmd_cache_clear(args) -> int:
    from . import cache
    path = cache.directory()
    try:
        removed = cache.clear(path)
        numba = cache.clear_numba(path) if not removed["refused"] else \
            {"modules": 0, "files": 0, "left": []}
    except OSError as exc:
        raise CliError(f"cannot clear {path}: {exc.strerror or exc}") from None
    n = removed["entries"]
    parts = [f"{n} entr{'y' if n == 1 else 'ies'}"]
    for count, what in ((removed["temporary"], "temporary file"),
                        (removed["other"], "other file"), (numba["modules"], "numba module"),
                        (numba["files"], "other numba file")):
        if count:
            parts.append(f"{count} {what}{'' if count == 1 else 's'}")
    listed = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    print(f"removed {listed} from {path}")
    for other, why in removed["left"] + numba["left"]:
        print(f"left {other}: {why}")
    return 0


class _FORMATTER(argparse.HelpFormatter):
    """Wraps paragraphs; keeps indented lines (the examples) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for line in text.splitlines():
            if line.startswith(" ") or not line:
                out.append(indent + line)
            else:
                out.append(textwrap.fill(line, width, initial_indent=indent,
                                         subsequent_indent=indent))
        return "\n".join(out)


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line too, pointing at --help."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="s2sgrad",
        description="Inspect and check the gradient code s2sgrad generates.",
        epilog="examples:\n"
               "  s2sgrad show examples/square.py:loss\n"
               "  s2sgrad check examples/cube.py:loss --shape x=5\n"
               "  s2sgrad cache info\n\n"
               "Run 's2sgrad COMMAND --help' for the options of a command.",
        formatter_class=_FORMATTER)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    show = sub.add_parser(
        "show", help="print the generated forward and adjoint of a function",
        description="Print the generated forward and adjoint functions (and those of the "
                    "functions it calls). TARGET is FILE.py:FUNC, package.module:FUNC, or "
                    "module:Class.method for a staticmethod such as a Function's forward "
                    "(which is then differentiated as a function of its own).",
        epilog="examples:\n"
               "  s2sgrad show examples/square.py:loss\n"
               "  s2sgrad show examples/add_mul.py:loss --wrt 0,1 --no-optimize\n"
               "  s2sgrad show examples/square.py:loss --mode forward\n"
               "  s2sgrad show examples/square.py:loss --order 2\n"
               "  s2sgrad show benchmarks/workloads/rnn.py:rnn_loss --wrt 0,1,2 --jit\n"
               "  s2sgrad show examples/square.py:SquareFunction.forward",
        formatter_class=_FORMATTER)
    show.add_argument("target", metavar="TARGET",
                      help="FILE.py:FUNC, package.module:FUNC or module:Class.method")
    show.add_argument("--wrt", default=None,
                      help="argument positions to differentiate, e.g. 0,1 (default: 0, or "
                           "the first input after ctx for a Function's method)")
    show.add_argument("--no-optimize", action="store_true",
                      help="show the code before the optimisation pass")
    show.add_argument("--mode", choices=("reverse", "forward"), default="reverse",
                      help="reverse: the forward and adjoint (default); forward: the tangent "
                           "(JVP) code")
    show.add_argument("--order", type=_order, default=1,
                      help="N >= 2: the (N-1)-th gradient's code differentiated once more "
                           "(reverse over reverse; with --mode forward, forward over "
                           "reverse)")
    show.add_argument("--jit", action="store_true",
                      help="what jit=True does: compiled by numba or left to NumPy, and why "
                           "(with --shape: the decision for those shapes and the numba code)")
    show.add_argument("--shape", action="append", metavar="NAME=D1,D2",
                      help="with --jit: an array argument's shape (repeatable; others are "
                           "random numbers or their defaults)")
    color = show.add_mutually_exclusive_group()
    color.add_argument("--color", dest="color", action="store_true", default=None,
                       help="colour the code with pygments (default: only on a terminal)")
    color.add_argument("--no-color", dest="color", action="store_false",
                       help="never colour the code")
    show.set_defaults(func=cmd_show)
    check = sub.add_parser(
        "check", help="compare the gradient with central finite differences",
        description="Draw random inputs of the given shapes and compare the compiled "
                    "gradient (a vector-Jacobian product with a random cotangent) with "
                    "central finite differences. Prints the largest absolute and relative "
                    "error per argument; the relative error is relative to the largest "
                    "gradient entry. Exit code 1 when it exceeds the tolerance. An argument "
                    "without --shape takes the shape its annotation gives (x: (3, 4), or "
                    "Annotated[np.ndarray, (3, 4)]), else it is a scalar float; one "
                    "annotated as an array without a shape needs --shape. Inputs are "
                    "standard normal, or uniform in --range. A function whose two calls "
                    "on the same inputs differ (random numbers) cannot be checked, and "
                    "says so.",
        epilog="examples:\n"
               "  s2sgrad check examples/cube.py:loss --shape x=5\n"
               "  s2sgrad check examples/add_mul.py:loss --shape a=3 --shape b=3 --seed 1\n"
               "  s2sgrad check examples/checks.py:entropy --shape p=4 --range p=0.1,1",
        formatter_class=_FORMATTER)
    check.add_argument("target", metavar="TARGET", help="FILE.py:FUNC or package.module:FUNC")
    check.add_argument("--shape", action="append", metavar="NAME=D1,D2",
                       help="shape of an argument (repeat per argument; omit for a scalar)")
    check.add_argument("--range", action="append", metavar="[NAME=]LO,HI",
                       help="draw an argument uniformly from [LO, HI] instead of the "
                            "standard normal (repeat per argument; without NAME: every "
                            "argument without a range of its own), e.g. x=0.1,2 for sqrt "
                            "or log")
    check.add_argument("--wrt", default=None,
                       help="argument positions (default: every floating-point argument)")
    check.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    check.add_argument("--tol", type=float, default=1e-6,
                       help="largest accepted relative error (default 1e-6)")
    check.set_defaults(func=cmd_check)
    cache = sub.add_parser(
        "cache", help="inspect or clear the disk cache of generated code",
        description="The disk cache keeps generated code between runs, in "
                    "$S2SGRAD_CACHE_DIR (default ~/.cache/s2sgrad), at most "
                    "S2SGRAD_CACHE_MAX_MB megabytes (default 256; least recently used "
                    "entries go first). S2SGRAD_CACHE=0 turns it off.",
        epilog="examples:\n  s2sgrad cache info\n  s2sgrad cache clear",
        formatter_class=_FORMATTER)
    cache_sub = cache.add_subparsers(dest="cache_command", metavar="ACTION")
    info = cache_sub.add_parser(
        "info", help="print the directory, the number of entries and their size",
        description="Print the cache directory and whether it is used, the number of "
                    "entries, their total size and the cap, temporary files of writes in "
                    "progress or left by processes that died, and paths named like entries "
                    "that are ignored (links, FIFOs, directories, other users' files).",
        epilog="example:\n  S2SGRAD_CACHE_DIR=/tmp/s2s s2sgrad cache info",
        formatter_class=_FORMATTER)
    info.set_defaults(func=cmd_cache_info)
    clear = cache_sub.add_parser(
        "clear", help="delete what s2sgrad wrote: entries, temporary files, jit=True's numba "
                      "modules (and say what it left)",
        description="Delete every cache entry, temporary files of interrupted writes, "
                    "whatever else sits at an entry path (links and FIFOs are unlinked, "
                    "never followed; a directory only if it is empty and yours) and, in the "
                    "numba/ subdirectory s2sgrad made (its marker file is in it), the modules "
                    "jit=True wrote and numba's machine code of them. Anything else is left, "
                    "and listed; nothing is removed in a directory s2sgrad refuses to use "
                    "(others can write it or the path to it).",
        epilog="example:\n  s2sgrad cache clear", formatter_class=_FORMATTER)
    clear.set_defaults(func=cmd_cache_clear)
    cache.set_defaults(func=None, parser=cache)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        sub = getattr(args, "parser", None)
        if sub is not None:
            sub.error("an action is required: info or clear")
        parser.error("a command is required: show, check or cache")
    try:
        return args.func(args)
    except CliError as exc:
        _error(str(exc))
    except (TransformError, InternalError) as exc:
        _error(str(exc))  # with the source line and caret
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:   # `s2sgrad show ... | head`: the reader is gone, say nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141   # as a process killed by SIGPIPE
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        _error(_one_line(exc) if not isinstance(exc, (TypeError, ValueError, IndexError))
               else " ".join(str(exc).split()))
    return 2


def _error(message: str) -> None:
    print(f"s2sgrad: error: {message}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
