"""The `s2sgrad` command: inspect and check generated gradient code.

    s2sgrad show path/to/file.py:func [--wrt 0,1] [--no-optimize]
    s2sgrad check path/to/file.py:func --shape x=3,4 [--seed N] [--tol T]

Errors are one clear message on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from typing import Callable, List, Optional, Sequence, Tuple

from .errors import TransformError


class CliError(Exception):
    """A user-facing error: printed as one message, exit code 2."""


def load_target(target: str) -> Callable:
    """`file.py:func`, `pkg.module:func` or `module:Class.method` -> the function."""
    if ":" not in target:
        raise CliError(f"target {target!r} must be FILE.py:FUNCTION or package.module:FUNCTION")
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise CliError(f"target {target!r} must be FILE.py:FUNCTION or package.module:FUNCTION")
    module = _load_module(where)
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CliError(f"{where} has no function {attr!r}") from None
    if not callable(obj):
        raise CliError(f"{where}:{attr} is a {type(obj).__name__}, not a function")
    return obj


def _load_module(where: str):
    if where.endswith(".py") or os.sep in where or "/" in where:
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise CliError(f"no such file: {where}")
        directory = os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)
        name = "_s2s_target_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise CliError(f"syntax error in {where}:{exc.lineno}: {exc.msg}") from None
        except Exception as exc:  # noqa: BLE001 - the user's module failed to import
            raise CliError(f"importing {where} failed: {type(exc).__name__}: {exc}") from None
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        raise CliError(f"cannot import module {where!r}: {exc}") from None
    except SyntaxError as exc:
        raise CliError(f"syntax error in {exc.filename}:{exc.lineno}: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001
        raise CliError(f"importing {where} failed: {type(exc).__name__}: {exc}") from None


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
    if color is None:
        color = sys.stdout.isatty() and os.environ.get("NO_COLOR") is None
    if not color:
        return text
    try:
        from pygments import highlight
        from pygments.formatters import TerminalFormatter
        from pygments.lexers import PythonLexer
    except ImportError:
        return text
    return highlight(text, PythonLexer(), TerminalFormatter())


def cmd_show(args) -> int:
    from .compiler import compile_function
    fn = load_target(args.target)
    wrt = parse_wrt(args.wrt)
    compiled = compile_function(fn, wrt, not args.no_optimize)
    text = compiled.source
    print(_highlight(text, args.color), end="" if text.endswith("\n") else "\n")
    return 0


def _parse_shapes(items: Sequence[str]) -> dict:
    shapes = {}
    for item in items or ():
        name, sep, dims = item.partition("=")
        if not sep or not name:
            raise CliError(f"--shape takes NAME=D1,D2,... (for example x=3,4), not {item!r}")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(",") if d.strip() != "")
        except ValueError:
            raise CliError(f"--shape {item!r}: dimensions must be integers") from None
    return shapes


def cmd_check(args) -> int:
    from .check import check_gradient
    fn = load_target(args.target)
    shapes = _parse_shapes(args.shape)
    report = check_gradient(fn, shapes, seed=args.seed, tol=args.tol,
                            wrt=parse_wrt(args.wrt) if args.wrt else None)
    print(report.table())
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s2sgrad",
        description="Inspect and check the gradient code s2sgrad generates.",
        epilog="example: s2sgrad show examples/square.py:loss")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    show = sub.add_parser(
        "show", help="print the generated forward and adjoint of a function",
        description="Print the generated forward and adjoint functions.",
        epilog="example: s2sgrad show examples/add_mul.py:loss --wrt 0,1",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("target", help="FILE.py:FUNC, package.module:FUNC or module:Class.method")
    show.add_argument("--wrt", default="0", help="argument positions to differentiate, e.g. 0,1")
    show.add_argument("--no-optimize", action="store_true",
                      help="show the code before the optimisation pass")
    color = show.add_mutually_exclusive_group()
    color.add_argument("--color", dest="color", action="store_true", default=None,
                       help="colour the code (default: only on a terminal)")
    color.add_argument("--no-color", dest="color", action="store_false",
                       help="never colour the code")
    show.set_defaults(func=cmd_show)
    check = sub.add_parser(
        "check", help="compare the gradient with central finite differences",
        description="Draw random inputs of the given shapes and compare the compiled "
                    "gradient with central finite differences. Exit code 1 when the error "
                    "exceeds the tolerance.",
        epilog="example: s2sgrad check examples/cube.py:loss --shape x=5")
    check.add_argument("target", help="FILE.py:FUNC or package.module:FUNC")
    check.add_argument("--shape", action="append", metavar="NAME=D1,D2",
                       help="shape of an argument (repeat per argument; omit for a scalar)")
    check.add_argument("--wrt", default=None, help="argument positions (default: all float)")
    check.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    check.add_argument("--tol", type=float, default=1e-6,
                       help="largest accepted relative error (default 1e-6)")
    check.set_defaults(func=cmd_check)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except CliError as exc:
        print(f"s2sgrad: error: {exc}", file=sys.stderr)
    except TransformError as exc:
        print(f"s2sgrad: error: {exc}", file=sys.stderr)
    except (TypeError, ValueError, IndexError) as exc:
        print(f"s2sgrad: error: {exc}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
