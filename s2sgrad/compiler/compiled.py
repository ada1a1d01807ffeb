"""The record a compile produces: a function's generated forward/adjoint pair."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Set, Tuple

from . import bindings as _bindings
from .analyze import Activity
from .bindings import Binding
from .emit import joined_source


@dataclass
class CompiledFunction:
    """A function's generated forward/adjoint pair.

    forward(*args) -> (output, residuals); adjoint(residuals, cotangent) ->
    the gradient (one value when one input is differentiated, else a tuple).
    """

    fn: Callable
    wrt: Tuple[int, ...]
    forward: Callable
    adjoint: Callable
    module_source: str
    activity: Activity
    params: List[str]
    name: str
    callees: List["CompiledFunction"] = field(default_factory=list)
    not_inlined: List[str] = field(default_factory=list)
    # (parameter, function) pairs it was compiled for (see driver.compile_function).
    statics: tuple = ()
    # What the code was generated for: names, dotted attributes, Function methods,
    # the function's code and defaults (see compiler.bindings).
    bindings: List[Binding] = field(default_factory=list)
    # The argument kinds (structure, shapes, dtypes) whose calls passed the API's
    # self-checks (s2sgrad.witness). A wrapper for another callable starts its own.
    witnessed: Set[tuple] = field(default_factory=set)
    # Where the pair is cached: (memory key, disk store, disk key) for it and any
    # pair run beside it (the optimiser check's plain one), so that a pair that fails
    # a self-check is dropped from both caches (compiler.driver.discard).
    cached_as: Tuple[tuple, ...] = ()
    # The relative accuracy of its derivatives where a rule's come from a numerical
    # method (an ODE solver): see derivative_tolerance. None: exact.
    tolerance: Optional[float] = None

    def derivative_tolerance(self, seen: Optional[set] = None) -> Optional[float]:
        """The largest tolerance of this pair and the pairs it calls."""
        seen = set() if seen is None else seen
        seen.add(id(self))
        found = [self.tolerance] + [c.derivative_tolerance(seen) for c in self.callees
                                    if id(c) not in seen]
        found = [t for t in found if t is not None]
        return max(found) if found else None

    def current(self) -> bool:
        """Whether everything the code was generated for (here and in the functions
        it calls) is still bound to the same object: rebinding a global function,
        a closure variable, a module attribute or a name an inlined Function body
        reads must not leave a pair that computes the old one."""
        return _bindings.current(self)

    @property
    def source(self) -> str:
        """This function's generated code followed by that of the functions it calls."""
        return joined_source(self)
