"""Copies and single-use temporaries: `a = b` between generated names is
propagated, and a cotangent part read once goes into its reader.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Sequence, Set

from ..facts import ResidualMarks
from ..names import name_nodes, replace_loads
from .statements import (
    BAR,
    COMPOUND_CLASSES,
    PART,
    VERIFY,
    NameIndex,
    assignment_sites,
    check_kept_counts,
    drop_marked,
    fwd_params,
    inner_blocks,
    simple_stores,
    value_loads,
    walk_statements,
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
    # (The other functions only have names renamed in place below: their Name
    # nodes, listed once, stay theirs.)
    also_names = [index.function(other) for other in also]
    for names in also_names:
        also_stores |= {n.id for n in names if n.ctx.__class__ is not Load}
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
        for s in walk_statements(fdef.body):
            if not (s.__class__ is Assign and len(s.targets) == 1 and
                    s.targets[0].__class__ is Name and s.value.__class__ is Name):
                continue
            a, b = s.targets[0].id, s.value.id
            if a in user_names or a in params or counts.get(a) != 1 or PART.match(b) or \
                    BAR.match(a):
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
            fdef.body = drop_marked(fdef.body, lambda s: s, removed)
            for a in mapping:
                del counts[a]
            if loads_of is None:
                # Each name's reads, found once: from here on names change in place
                # (n.id) and statements leave, nothing else.
                loads_of = {}
                for names in (index.function(fdef), *also_names):
                    for n in names:
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
    # How often each name occurs, is read, and is assigned by a simple statement:
    # counted once, then kept up to date by the steps below (each removes a few
    # occurrences it knows of), so that a round does not count the function again.
    occurrences: Optional[Dict[str, int]] = None
    load_counts: Dict[str, int] = {}
    counts: Optional[Dict[str, int]] = None
    while True:
        dropped: List[str] = []
        fdef.body = _drop_self_assignments(fdef.body, dropped, marks)
        if occurrences is None:
            occurrences, load_counts = _name_occurrences(index.function(fdef))
        else:   # (a round has run: counts too are known)
            for name in dropped:   # `x = x`: one store and one read of x
                occurrences[name] -= 2
                load_counts[name] -= 1
                counts[name] -= 1
        # Keeps both counts as they are after the copies it propagates.
        copied: List[str] = []
        copies = _propagate_local_copies(fdef.body, fdef, occurrences, load_counts, index,
                                         copied)
        if counts is None:
            counts = _simple_store_counts(fdef)
        else:
            for name in copied:   # `a = b` removed: a's one store
                counts[name] -= 1
        if VERIFY:
            _verify_counts(fdef, occurrences, load_counts, counts)
        # The parts assigned once and read once (neither count changes below).
        single = {n for n, c in counts.items()
                  if c == 1 and load_counts.get(n) == 1 and PART.match(n)}
        substituted: List[str] = []
        if single:
            _substitute_in_block(fdef.body, single, index, substituted)
        for name in substituted:   # `name = E` went into its one read: a store and a read
            occurrences[name] -= 2
            load_counts[name] -= 1
            counts[name] -= 1
        if not (dropped or copies or substituted):
            return



def _name_occurrences(names) -> tuple:
    """(occurrences, reads) per name of the Name nodes `names`."""
    occurrences: Dict[str, int] = {}
    reads: Dict[str, int] = {}
    Load = ast.Load
    for n in names:
        name = n.id
        occurrences[name] = occurrences.get(name, 0) + 1
        if n.ctx.__class__ is Load:
            reads[name] = reads.get(name, 0) + 1
    return occurrences, reads


def _simple_store_counts(fdef: ast.FunctionDef) -> Dict[str, int]:
    """How many statements other than if/for/while assign each name in fdef."""
    counts: Dict[str, int] = {}
    for s in walk_statements(fdef.body):
        for n in simple_stores(s) if s.__class__ not in COMPOUND_CLASSES else ():
            counts[n] = counts.get(n, 0) + 1
    return counts


def _verify_counts(fdef: ast.FunctionDef, occurrences: Dict[str, int],
                   load_counts: Dict[str, int], counts: Dict[str, int]) -> None:
    """The optimiser-check mode: the counts kept up to date equal a fresh count."""
    fresh_occurrences, fresh_loads = _name_occurrences(name_nodes(fdef))
    check_kept_counts("substitute_single_use", fdef,
                      (("occurrences", occurrences, fresh_occurrences),
                       ("reads", load_counts, fresh_loads),
                       ("assignments", counts, _simple_store_counts(fdef))))


def _drop_self_assignments(stmts: List[ast.stmt], dropped: List[str],
                           marks: ResidualMarks) -> List[ast.stmt]:
    """`x_bar = x_bar` is what an identity contribution leaves behind."""
    def self_assignment(s: ast.stmt) -> bool:
        if s.__class__ is ast.Assign and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Name) and \
                s.targets[0].id == s.value.id and marks.of(s).slot is None:
            dropped.append(s.targets[0].id)
            return True
        return False
    return drop_marked(stmts, self_assignment, (True,))


def _propagate_local_copies(stmts: List[ast.stmt], fdef: ast.FunctionDef,
                            occurrences: Dict[str, int], load_counts: Dict[str, int],
                            index: NameIndex, copied: List[str]) -> int:
    """`occurrences`: how often each name occurs in fdef (`load_counts`: is read),
    kept up to date; `copied` gets the target of each copy removed. Below, names
    change in place (n.id) and statements leave the block, nothing else: the
    index's Name nodes stay valid."""
    done = 0
    for s in stmts:
        for _, inner in inner_blocks(s):
            done += _propagate_local_copies(inner, fdef, occurrences, load_counts, index,
                                            copied)
    i = 0
    while i < len(stmts):
        s = stmts[i]
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Name) and \
                BAR.match(s.targets[0].id) and BAR.match(s.value.id):
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
                copied.append(a)
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
        if simple_stores(s, names) & {a, b}:
            return None
    return seen if len(seen) == total - 1 else None


def _substitute_in_block(stmts: List[ast.stmt], single: Set[str], index: NameIndex,
                         substituted: List[str]) -> None:
    """`single`: the cotangent parts assigned once and read once; `substituted` gets
    each one put into its reader."""
    i = 0
    Assign, Name = ast.Assign, ast.Name
    while i < len(stmts):
        s = stmts[i]
        for _, inner in inner_blocks(s):
            _substitute_in_block(inner, single, index, substituted)
        if s.__class__ is Assign and len(s.targets) == 1 and \
                s.targets[0].__class__ is Name and s.targets[0].id in single:
            name = s.targets[0].id
            reads = set(value_loads(s, index))
            for j in range(i + 1, len(stmts)):
                use = stmts[j]
                if not isinstance(use, (ast.Assign, ast.AugAssign, ast.Return)):
                    break
                if isinstance(use, ast.AugAssign) and isinstance(use.target, ast.Name) and \
                        use.target.id in reads:
                    break
                if name in value_loads(use, index):   # its one read (load_counts): there
                    replace_loads(use, name, s.value, copy=False)
                    index.changed(use)
                    del stmts[i]
                    i -= 1
                    substituted.append(name)
                    break
                if simple_stores(use) & (reads | {name}):
                    break
        i += 1
