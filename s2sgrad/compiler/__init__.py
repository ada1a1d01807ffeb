"""The compiler: parse -> normalise -> analyse -> transform -> inline -> optimise -> emit.

`compile_function` (compiler.driver) runs the passes in order (compiler.pipeline)
and returns a `CompiledFunction` (the generated forward/adjoint pair plus the
facts the API needs); `compile_jvp` (compiler.forward) does the same for
forward mode. Results are cached in memory per (function, closure, wrt,
options) and on disk (see `s2sgrad.cache`): a process that finds a valid entry
loads the stored code and runs no pass. Importing the package installs the
drivers into compiler.reentry, where passes that need a derivative or a
callee's code reach them.
"""
from __future__ import annotations

from . import higher, reentry
from .bindings import all_hold, flat_bindings
from .compiled import CompiledFunction
from .driver import cache_key, cached, clear_cache, compile_function, discard
from .forward import CompiledJvp, compile_jvp, in_progress
from .memory import memory_cache_size
from .resolve import FUNCTION_TYPES

reentry.install(derived=higher.derived, compile_pair=compile_function,
                compile_tangent=compile_jvp, tangent_in_progress=in_progress)

__all__ = ["FUNCTION_TYPES", "CompiledFunction", "CompiledJvp", "all_hold", "cache_key",
           "cached", "clear_cache", "compile_function", "compile_jvp", "discard",
           "flat_bindings", "higher", "memory_cache_size"]
