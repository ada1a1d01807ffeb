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
import copy
import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Generic, Iterator, List, Optional, Tuple, TypeVar

from ..errors import note_origin, origin_of

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


@dataclass(frozen=True)
class ResidualMark:
    """What a statement the reverse transform generated does with a kept value.

    The optimiser prunes saved copies, keeps stack pushes and pops paired, gives
    the adjoint private copies and links the residuals by these marks alone,
    never by matching statement shapes."""

    slot: Optional[str] = None          # the slot or stack written (forward) or read (adjoint)
    save_of: Optional[str] = None       # forward: keeps this variable's value in `slot`
    init_of: Optional[str] = None       # forward: `v = None`, so that saving v always works
    stack_of: Optional[str] = None      # forward: creates the stack of this variable
    restore_of: Optional[str] = None    # adjoint: puts this variable's value back
    restore_item: Optional[str] = None  # adjoint: writes back into this array or list


NO_MARK = ResidualMark()


class ResidualMarks(StatementFacts[ResidualMark]):
    """The marks of one transform's forward and adjoint statements."""

    def __init__(self):
        super().__init__("residual mark")

    def mark(self, s: ast.stmt, **fields) -> ast.stmt:
        """Add `fields` to the mark of s (a new record: marks are immutable); s."""
        known = self.get(s)   # (a first mark is built directly: replace() is slow)
        self.record(s, ResidualMark(**fields) if known is None else replace(known, **fields))
        return s

    def of(self, s: ast.AST) -> ResidualMark:
        """The mark of s; NO_MARK (every field empty) for an unmarked statement."""
        entry = self._facts.get(id(s))   # (StatementFacts.get, inlined: asked constantly)
        return entry[1] if entry is not None and entry[0] is s else NO_MARK


@dataclass(frozen=True)
class ExprFact:
    """What normalise resolved an expression of the normal form to.

    Later passes (activity, both transforms, hoisting, aliasing) read these
    instead of resolving names again: the resolution happened once, against the
    function's globals and closure as they were when it was compiled."""

    callee: Any = None            # the object a call calls (a NumPy function, a helper, ...)
    method: Optional[str] = None  # a method call on a local value: the method's name
    opaque: bool = False          # evaluated as it is: not differentiated through
    static: bool = False          # a value the compiler knows (a module attribute, ...)


NO_FACT = ExprFact()


class NodeTable(weakref.WeakKeyDictionary):
    """A table keyed weakly by AST nodes (an entry goes with its node), whose `get`
    looks the node up directly: the passes ask for nearly every node, and
    WeakKeyDictionary.get guards against keys that are not weakly referable,
    which nodes always are."""

    def get(self, node, default=None):
        return self.data.get(weakref.ref(node), default)


class NodeFacts(Generic[T]):
    """One frozen fact record per node, held weakly: a fact goes with its node, and
    a node a pass builds anew has none until a pass says so."""

    def __init__(self, empty: T):
        self.empty = empty   # the record of a node nothing was noted about: its class's
        self._make = type(empty)   # defaults (a first fact is built directly)
        assert empty == self._make(), "NodeFacts' empty record must be its class's defaults"
        self._facts: "NodeTable[ast.AST, T]" = NodeTable()

    def note(self, node: ast.AST, **fields) -> ast.AST:
        """Add `fields` to the fact about node; node."""
        known = self._facts.get(node)
        self._facts[node] = self._make(**fields) if known is None else replace(known, **fields)
        return node

    def of(self, node: ast.AST) -> T:
        return self._facts.get(node, self.empty)

    def same(self, source: ast.AST, target: ast.AST) -> ast.AST:
        """target (a node rebuilt from source) gets source's fact; target."""
        fact = self._facts.get(source)
        if fact is not None:
            self._facts[target] = fact
        return target


class ExprFacts(NodeFacts[ExprFact]):
    """ExprFact per expression node (`carry` copies the facts of an expression to
    its copy, node by node)."""

    def __init__(self):
        super().__init__(NO_FACT)

    def carry(self, source: ast.AST, copy: ast.AST) -> ast.AST:
        """Give each node of `copy` (a structural copy of source) its original's fact."""
        facts = self._facts
        pairs = [(source, copy)]
        while pairs:
            a, b = pairs.pop()
            fact = facts.get(a)
            if fact is not None:
                facts[b] = fact
            for field in a._fields:
                x, y = getattr(a, field, None), getattr(b, field, None)
                if isinstance(x, ast.AST) and isinstance(y, ast.AST):
                    pairs.append((x, y))
                elif isinstance(x, list) and isinstance(y, list):
                    pairs += [(p, q) for p, q in zip(x, y)
                              if isinstance(p, ast.AST) and isinstance(q, ast.AST)]
        return copy


# The one table of expression facts: every pass reads what normalise found.
expr_facts = ExprFacts()


@dataclass(frozen=True)
class StmtFact:
    """What normalise (and the forward sweep) found out about one statement that
    its transforms act on."""

    # An in-place update `s += v` whose target may share memory with another
    # name: the arguments of the run-time check the forward makes before it.
    guard: Optional[tuple] = None
    snapshot: bool = False              # the value it binds is copied: a later write would see it
    snapshot_targets: frozenset = frozenset()  # a loop: its targets copied per item


NO_STMT_FACT = StmtFact()


# StmtFact per statement.
stmt_facts: NodeFacts[StmtFact] = NodeFacts(NO_STMT_FACT)


def shallow_copy(s: ast.stmt) -> ast.stmt:
    """copy.copy(s) that keeps what is known about s: its StmtFact and the user's
    statement it stands for (a copy made to replace one field, say)."""
    new = stmt_facts.same(s, copy.copy(s))
    return note_origin(new, origin_of(s))
