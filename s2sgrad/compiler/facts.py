"""Facts the passes of one compile record about its nodes for later ones to read.

`FunctionFacts` is that record, made by normalise and carried by the normal
form to the transforms, the inliner and the optimiser: what each call was
resolved to (`ExprFact`), which statements guard or copy (`StmtFact`), each
statement's Op, and what the inliner puts in place of each placeholder. It
belongs to its compile: a compile started inside a compile has its own, and no
table of the process holds nodes.

The reverse transform's forward sweep also decides, statement by statement,
what to save (and in which slot or stack), which call site a call is, what a
loop keeps; its adjoint sweep reads those decisions back (`StatementFacts`),
keyed by the statement itself, and loud when asked about a statement it has no
fact for where one must exist: a statement rebuilt between the sweeps is an
s2sgrad bug, reported as such (compiler errors become `InternalError`s at the
user's line), never a bare `KeyError` or another statement's fact.
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Generic, Iterator, List, Optional, TypeVar

T = TypeVar("T")


class MissingFact(LookupError):
    """A pass asked for a fact no earlier step recorded for this statement."""


class StatementFacts(Generic[T]):
    """One kind of fact (`what`) per statement (nodes hash by identity)."""

    def __init__(self, what: str):
        self.what = what
        self._facts: Dict[ast.AST, T] = {}

    def record(self, s: ast.AST, fact: T) -> T:
        self._facts[s] = fact
        return fact

    def get(self, s: ast.AST, default: Optional[T] = None) -> Optional[T]:
        return self._facts.get(s, default)

    def require(self, s: ast.AST) -> T:
        try:
            return self._facts[s]
        except KeyError:
            line = getattr(s, "lineno", "?")
            raise MissingFact(f"no {self.what} was recorded for the {type(s).__name__} "
                              f"statement at line {line}: a step rebuilt it after the "
                              f"facts about it were recorded") from None

    def setdefault(self, s: ast.AST, make: Callable[[], T]) -> T:
        known = self._facts.get(s)
        return known if known is not None else self.record(s, make())

    def __contains__(self, s: ast.AST) -> bool:
        return s in self._facts

    def values(self) -> List[T]:
        return list(self._facts.values())

    def __iter__(self) -> Iterator[ast.AST]:
        return iter(list(self._facts))

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
    accumulates: Optional[str] = None   # adjoint: `b = b + part`, b a cotangent whose parts
    #                                     all have its variable's shape


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
        return self._facts.get(s, NO_MARK)   # (StatementFacts.get, inlined: asked constantly)


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


class NodeFacts(Generic[T]):
    """One frozen fact record per node of one compile: a fact goes with the
    compile that noted it (the table belongs to its `FunctionFacts`), and a node a
    pass builds anew has none until a pass says so."""

    def __init__(self, empty: T):
        self.empty = empty   # the record of a node nothing was noted about: its class's
        self._make = type(empty)   # defaults (a first fact is built directly)
        assert empty == self._make(), "NodeFacts' empty record must be its class's defaults"
        # (Keyed by the nodes themselves, which the table holds: no other node can
        # take over a key, as a recycled id() could.)
        self._facts: Dict[ast.AST, T] = {}

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


@dataclass(frozen=True)
class StmtFact:
    """What normalise (and the forward sweep) found out about one statement that
    its transforms act on."""

    # An in-place update `s += v` whose target may share memory with another
    # name: the arguments of the run-time check the forward makes before it.
    guard: Optional[tuple] = None
    snapshot: bool = False              # the value it binds is copied: a later write would see it
    # The copy matters only to the adjoint: no statement of the function reads the
    # value once a write has changed it. Kept a view where the adjoint reads no more
    # than its shape (optimize.residuals.keep_views).
    snapshot_for_adjoint: bool = False
    snapshot_targets: frozenset = frozenset()  # a loop: its targets copied per item
    # A loop over a list: a statement of its body that makes the list longer or shorter,
    # and the list (`walked`; the loop may walk a copy of it, _s2s_loop_items'). Walked
    # by position or as a copy, the loop would not see the change Python's loop sees.
    resized_by: Optional[ast.stmt] = None
    walked: Optional[str] = None

    def walks_a_copy(self, loop: ast.For) -> bool:
        """Whether the resized list's loop walks a copy of it (not the list itself)."""
        return not (isinstance(loop.iter, ast.Name) and loop.iter.id == self.walked)


NO_STMT_FACT = StmtFact()

# (message, hint) of the error at a `resized_by` statement
RESIZED_WHILE_WALKED = (
    "this makes the list the loop walks longer or shorter while the loop walks it",
    "Python's loop walks the list as it changes, the differentiated loop the items it "
    "had when it started: walk a copy (for item in list(xs):) or build the new items "
    "into another list.")


class FunctionFacts:
    """What the passes of one compile found out about its nodes, in one record that
    the normal form carries from normalise to the inliner: the facts of one
    compile are never another's (a compile started inside a compile has its own)."""

    def __init__(self):
        self.exprs = ExprFacts()                               # normalise's resolutions
        self.stmts: NodeFacts[StmtFact] = NodeFacts(NO_STMT_FACT)   # guards, snapshots
        self.ops: Dict[ast.stmt, Any] = {}    # each statement's Op (ops.describe), once
        self.expansions: Dict[ast.stmt, Any] = {}   # placeholder -> what the inliner puts
        # The user's statement each node the compiler made stands for: the line a
        # generated block's comment names.
        self.origins: Dict[ast.AST, ast.AST] = {}
        # The relative accuracy of the rules the inliner expanded whose derivatives a
        # numerical method computes (Rule.tolerance); None: all exact.
        self.tolerance: Optional[float] = None

    def note_origin(self, node: ast.AST, origin: Optional[ast.AST]) -> ast.AST:
        """Record that `node` (made by the compiler) stands for the user's `origin`."""
        if origin is not None and origin is not node:
            self.origins[node] = origin
        else:
            self.origins.pop(node, None)
        return node

    def origin_of(self, node: ast.AST) -> ast.AST:
        """The user's statement `node` stands for: node itself if it is the user's."""
        return self.origins.get(node, node)

    def shallow_copy(self, s: ast.stmt) -> ast.stmt:
        """copy.copy(s) that keeps what is known about s: its StmtFact and the user's
        statement it stands for (a copy made to replace one field, say)."""
        return self.note_origin(self.stmts.same(s, copy.copy(s)), self.origin_of(s))
