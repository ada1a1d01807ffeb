"""The compiler: parse -> normalise -> analyse -> transform -> inline -> optimise -> emit.

`compile_function` (compiler.driver) runs the passes in order (compiler.pipeline)
and returns a `CompiledFunction` (the generated forward/adjoint pair plus the
facts the API needs); `compile_jvp` (compiler.forward) does the same for
forward mode. Results are cached in memory per (function, closure, wrt,
options) and on disk (see `s2sgrad.cache`): a process that finds a valid entry
loads the stored code and runs no pass.

The drivers, and with them every pass and the rule table, are imported at the
first use of one of their names (`compile_function`, `compile_jvp`, `higher`,
...), not with s2sgrad: `import s2sgrad` and decorating functions cost what
importing NumPy costs, and a program that never differentiates anything never
loads the compiler. Loading them installs the drivers into compiler.reentry,
where passes that need a derivative or a callee's code reach them. What the API
asks on every call (`all_hold`, `flat_bindings`, `FUNCTION_TYPES`) is imported
here directly: those modules are small.
"""
from __future__ import annotations

import importlib
import importlib.util
import threading
from typing import TYPE_CHECKING, Any

from .bindings import all_hold, flat_bindings
from .resolve import FUNCTION_TYPES

if TYPE_CHECKING:   # (for readers and type checkers: these load at first use)
    from . import higher
    from .compiled import CompiledFunction
    from .driver import cache_key, cached, clear_cache, compile_function, discard
    from .forward import CompiledJvp, compile_jvp
    from .memory import memory_cache_size

# name -> the module of this package that defines it
_LATE = {"higher": "higher", "CompiledFunction": "compiled", "cache_key": "driver",
         "cached": "driver", "clear_cache": "driver", "compile_function": "driver",
         "discard": "driver", "CompiledJvp": "forward", "compile_jvp": "forward",
         "memory_cache_size": "memory"}
_LOADING = threading.RLock()
_STARTED = False   # the drivers are loaded, or being loaded by the thread holding _LOADING

__all__ = ["FUNCTION_TYPES", "CompiledFunction", "CompiledJvp", "all_hold", "cache_key",
           "cached", "clear_cache", "compile_function", "compile_jvp", "discard",
           "flat_bindings", "higher", "memory_cache_size"]


def load_drivers() -> None:
    """Import the drivers (and so every pass) and install them into reentry; once."""
    global _STARTED
    with _LOADING:
        if _STARTED:
            return
        _STARTED = True
        try:
            modules = {m: importlib.import_module(f".{m}", __name__) for m in set(_LATE.values())}
            reentry = importlib.import_module(".reentry", __name__)
            reentry.install(derived=modules["higher"].derived,
                            compile_pair=modules["driver"].compile_function,
                            compile_tangent=modules["forward"].compile_jvp,
                            tangent_in_progress=modules["forward"].in_progress)
            for name, module in _LATE.items():
                globals()[name] = modules[module] if name == module else \
                    getattr(modules[module], name)
        except BaseException:
            _STARTED = False
            raise


def __getattr__(name: str) -> Any:
    """A driver's name at its first use (PEP 562): the drivers load then. A module
    of the package (`compiler.driver`) is imported when asked for."""
    if name in _LATE:
        load_drivers()
        if name in globals():
            return globals()[name]
    elif not name.startswith("_") and \
            importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
