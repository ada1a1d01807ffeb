"""Facts one pass records per statement for a later step to read.

The reverse transform's forward sweep decides, statement by statement, what to
save (and in which slot or stack), which call site a call is, what a loop
keeps; its adjoint sweep reads those decisions back for the same statements.
`StatementFacts` is that record: keyed by the statement itself, which it
holds (so no other statement can ever take over its key, as a recycled `id()`
could), and loud when asked about a statement it has no fact for where one
must exist: a statement rebuilt between the sweeps is an s2sgrad bug, reported
as such (compiler errors become `InternalError`s at the user's line), never a
bare `KeyError` or another statement's fact.
"""
from __future__ import annotations

import ast
from typing import Callable, Dict, Generic, Iterator, List, Optional, Tuple, TypeVar

T = TypeVar("T")


class MissingFact(LookupError):
    """A pass asked for a fact no earlier step recorded for this statement."""


class StatementFacts(Generic[T]):
    """One kind of fact (`what`) per statement."""

    def __init__(self, what: str):
        self.what = what
        self._facts: Dict[int, Tuple[ast.AST, T]] = {}

    def record(self, s: ast.AST, fact: T) -> T:
        self._facts[id(s)] = (s, fact)
        return fact

    def get(self, s: ast.AST, default: Optional[T] = None) -> Optional[T]:
        entry = self._facts.get(id(s))
        return entry[1] if entry is not None and entry[0] is s else default

    def require(self, s: ast.AST) -> T:
        entry = self._facts.get(id(s))
        if entry is None or entry[0] is not s:
            line = getattr(s, "lineno", "?")
            raise MissingFact(f"no {self.what} was recorded for the {type(s).__name__} "
                              f"statement at line {line}: a step rebuilt it after the "
                              f"facts about it were recorded")
        return entry[1]

    def setdefault(self, s: ast.AST, make: Callable[[], T]) -> T:
        entry = self._facts.get(id(s))
        if entry is not None and entry[0] is s:
            return entry[1]
        return self.record(s, make())

    def __contains__(self, s: ast.AST) -> bool:
        entry = self._facts.get(id(s))
        return entry is not None and entry[0] is s

    def values(self) -> List[T]:
        return [fact for _, fact in self._facts.values()]

    def __iter__(self) -> Iterator[ast.AST]:
        return iter([s for s, _ in self._facts.values()])

    def __len__(self) -> int:
        return len(self._facts)
