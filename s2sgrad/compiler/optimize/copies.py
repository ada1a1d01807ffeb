"""Copies and single-use temporaries: `a = b` between generated names is
propagated, and a cotangent part read once goes into its reader.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Sequence, Set

from ..facts import ResidualMarks
from ..names import replace_loads
from .statements import (
    _BAR,
    _PART,
    NameIndex,
    _drop_marked,
    _inner_blocks,
    _loads,
    _simple_stores,
    _walk_statements,
    assignment_sites,
    fwd_params,
)


def propagate_copies(fdef: ast.FunctionDef, user_names: Set[str],
                     also: Sequence[ast.FunctionDef] = (),
                     marks: Optional[ResidualMarks] = None,
                     index: Optional[NameIndex] = None) -> None:
    """Drop `a = b` between generated names when both are assigned once, outside
    loops (never a save or a restore: `marks`)."""
    marks = ResidualMarks() if marks is None else marks
    index = NameIndex() if index is None else index
    params = fwd_params(fdef)
    changed = True
    also_stores = set()
    Load = ast.Load
    for other in also:
        also_stores |= {n.id for n in index.function(other) if n.ctx.__class__ is not Load}
    loads_of: Optional[Dict[str, List[ast.Name]]] = None
    # Assignment sites, counted once: a round removes the one site of each name it
    # renames and changes only reads, so the counts are kept by dropping those names.
    counts = assignment_sites(fdef.body)
    while changed:
        changed = False
        renamed: Set[str] = set()
        removed: Set[ast.stmt] = set()
        mapping: Dict[str, str] = {}
        Assign, Name = ast.Assign, ast.Name
        for s in _walk_statements(fdef.body):
            if not (s.__class__ is Assign and len(s.targets) == 1 and
                    s.targets[0].__class__ is Name and s.value.__class__ is Name):
                continue
            a, b = s.targets[0].id, s.value.id
            if a in user_names or a in params or counts.get(a) != 1 or _PART.match(b) or \
                    _BAR.match(a):
                continue
            if counts.get(b, 0) > 1 or (b in params and counts.get(b, 0) > 0):
                continue
            mark = marks.of(s)
            if mark.restore_of or mark.save_of:
                continue
            if a in also_stores or b in also_stores or a in renamed or b in renamed:
                continue  # one renaming per name and round: counts stay valid
            removed.add(s)
            mapping[a] = b
            renamed |= {a, b}
            changed = True
        if mapping:
            fdef.body = _drop_marked(fdef.body, lambda s: s, removed)
            for a in mapping:
                del counts[a]
            if loads_of is None:
                # Each name's reads, found once: from here on names change in place
                # (n.id) and statements leave, nothing else.
                loads_of = {}
                for target in (fdef, *also):
                    for n in index.function(target):
                        if n.ctx.__class__ is ast.Load:
                            loads_of.setdefault(n.id, []).append(n)
            for a, b in mapping.items():  # (no b is also renamed: see `renamed`)
                for n in loads_of.pop(a, ()):
                    n.id = b
                    loads_of.setdefault(b, []).append(n)


# -- single-use temporaries -----------------------------------------------------
def substitute_single_use(fdef: ast.FunctionDef, marks: Optional[ResidualMarks] = None,
                          index: Optional[NameIndex] = None) -> None:
    """`x_bar_part = E; x_bar = x_bar + x_bar_part` -> `x_bar = x_bar + E`.

    Also propagates block-local copies between adjoints (`a_bar = b_bar` whose
    uses all follow in the same block before b_bar changes).
    """
    marks = ResidualMarks() if marks is None else marks
    index = NameIndex() if index is None else index
    while True:
        dropped: List[int] = []
        fdef.body = _drop_self_assignments(fdef.body, dropped, marks)
        occurrences: Dict[str, int] = {}
        load_counts: Dict[str, int] = {}
        Load = ast.Load
        for n in index.function(fdef):
            name = n.id
            occurrences[name] = occurrences.get(name, 0) + 1
            if n.ctx.__class__ is Load:
                load_counts[name] = load_counts.get(name, 0) + 1
        # Keeps both counts as they are after the copies it propagates.
        copies = _propagate_local_copies(fdef.body, fdef, occurrences, load_counts, index)
        counts: Dict[str, int] = {}
        for s in _walk_statements(fdef.body):
            for n in _simple_stores(s) if not isinstance(s, (ast.If, ast.For, ast.While)) else ():
                counts[n] = counts.get(n, 0) + 1
        # The parts assigned once and read once (neither count changes below).
        single = {n for n, c in counts.items()
                  if c == 1 and load_counts.get(n) == 1 and _PART.match(n)}
        substituted = _substitute_in_block(fdef.body, single, index) if single else 0
        if not (dropped or copies or substituted):
            return


def _drop_self_assignments(stmts: List[ast.stmt], dropped: List[int],
                           marks: ResidualMarks) -> List[ast.stmt]:
    """`x_bar = x_bar` is what an identity contribution leaves behind."""
    def self_assignment(s: ast.stmt) -> bool:
        if s.__class__ is ast.Assign and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Name) and \
                s.targets[0].id == s.value.id and marks.of(s).slot is None:
            dropped.append(1)
            return True
        return False
    return _drop_marked(stmts, self_assignment, (True,))


def _propagate_local_copies(stmts: List[ast.stmt], fdef: ast.FunctionDef,
                            occurrences: Dict[str, int], load_counts: Dict[str, int],
                            index: NameIndex) -> int:
    """`occurrences`: how often each name occurs in fdef (`load_counts`: is read),
    kept up to date. Below, names change in place (n.id) and statements leave
    the block, nothing else: the index's Name nodes stay valid."""
    done = 0
    for s in stmts:
        for _, inner in _inner_blocks(s):
            done += _propagate_local_copies(inner, fdef, occurrences, load_counts, index)
    i = 0
    while i < len(stmts):
        s = stmts[i]
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Name) and \
                _BAR.match(s.targets[0].id) and _BAR.match(s.value.id):
            a, b = s.targets[0].id, s.value.id
            reads = _copy_is_local(stmts, i, a, b, occurrences.get(a, 0), index)
            if reads is not None:
                # These are all the reads of a (its occurrences are counted): after
                # this copy, in this block.
                for n in reads:
                    n.id = b
                del stmts[i]  # (with its store of a and read of b)
                occurrences[b] = occurrences.get(b, 0) + occurrences.get(a, 0) - 2
                occurrences[a] = 0
                load_counts[b] = load_counts.get(b, 0) + len(reads) - 1
                load_counts[a] = 0
                done += 1
                continue
        i += 1
    return done


def _copy_is_local(stmts, i, a, b, total: int,
                   index: NameIndex) -> Optional[List[ast.Name]]:
    """Every read of `a` comes after stmts[i] in this block, before `b` or `a` change:
    those reads (Name nodes), else None.

    `total` is how often `a` occurs in the whole function."""
    seen: List[ast.Name] = []
    Load = ast.Load
    for s in stmts[i + 1:]:
        names = index.deep(s)
        reads = [n for n in names if n.id == a and n.ctx.__class__ is Load]
        if reads and isinstance(s, (ast.If, ast.For, ast.While)):
            return None
        seen += reads
        if len(seen) == total - 1:
            return seen
        if _simple_stores(s, names) & {a, b}:
            return None
    return seen if len(seen) == total - 1 else None


def _substitute_in_block(stmts: List[ast.stmt], single: Set[str], index: NameIndex) -> int:
    """`single`: the cotangent parts assigned once and read once."""
    done = 0
    i = 0
    Assign, Name = ast.Assign, ast.Name
    while i < len(stmts):
        s = stmts[i]
        for _, inner in _inner_blocks(s):
            done += _substitute_in_block(inner, single, index)
        if s.__class__ is Assign and len(s.targets) == 1 and \
                s.targets[0].__class__ is Name and s.targets[0].id in single:
            name = s.targets[0].id
            reads = set(_loads(s.value))
            for j in range(i + 1, len(stmts)):
                use = stmts[j]
                if not isinstance(use, (ast.Assign, ast.AugAssign, ast.Return)):
                    break
                if isinstance(use, ast.AugAssign) and isinstance(use.target, ast.Name) and \
                        use.target.id in reads:
                    break
                if name in _loads(use.value):   # its one read (load_counts): moved there
                    replace_loads(use, name, s.value, copy=False)
                    index.changed(use)
                    del stmts[i]
                    i -= 1
                    done += 1
                    break
                if _simple_stores(use) & (reads | {name}):
                    break
        i += 1
    return done
