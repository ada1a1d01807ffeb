"""Liveness over structured code and dead-statement elimination.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Set

from .statements import Names, inner_blocks, pure, walk_statements


def _uses(s: ast.stmt, names: Names) -> Set[str]:
    used = set(names.loads(s))
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
        used.add(s.target.id)
    # Putting items back into x (or popping from a list) writes into the object x is
    # bound to: a use of x, so that the restore binding x back to the array the
    # forward wrote into stays (else the items go into whatever x was rebound to,
    # an argument or a global).
    return used


def live_block(stmts: List[ast.stmt], live_out: Set[str], record: Dict[ast.stmt, Set[str]],
                names: Names, only: Set[str]):
    """Backward liveness over structured code, of the names in `only`; records the
    live set after each statement.

    A name's liveness does not depend on other names', so asking about the few
    that matter keeps every set small (the sets of all names made this
    quadratic in the function's length). The sets are never changed once made
    (each step builds a new one), so the record shares them instead of copying
    one per statement."""
    live = live_out & only
    for s in reversed(stmts):
        record[s] = live
        live = _live_statement(s, live, record, names, only)
    return live


def _live_statement(s, live_after: Set[str], record, names: Names,
                    only: Set[str]) -> Set[str]:
    if isinstance(s, ast.If):
        return (live_block(s.body, live_after, record, names, only) |
                live_block(s.orelse, live_after, record, names, only) |
                (only.intersection(names.loads(s.test))))
    if isinstance(s, (ast.For, ast.While)):
        header = only.intersection(names.loads(s.iter if isinstance(s, ast.For) else s.test))
        head = live_after | header
        while True:
            body_in = live_block(s.body, head, record, names, only)
            if isinstance(s, ast.For):
                body_in = body_in - names.stores(s.target)   # (a new set: see above)
            new_head = live_after | body_in | header
            if new_head == head:
                return head
            head = new_head
    stores = names.stores(s)
    used = _uses(s, names) & only
    if not used and live_after.isdisjoint(stores):
        return live_after   # (shared: never changed once made)
    return (live_after - stores) | used


def eliminate_dead(fdef: ast.FunctionDef, keep: Set[str],
                   names: Optional[Names] = None) -> bool:
    """Remove pure assignments nobody reads; True if anything was removed. `names`,
    if given, may already know fdef's statements (which only leave it here)."""
    removed_any = False
    names = Names() if names is None else names
    while True:
        used: Dict[str, int] = {}
        for s in walk_statements(fdef.body):
            node = s
            if isinstance(s, (ast.If, ast.While)):
                node = s.test
            elif isinstance(s, ast.For):
                node = s.iter
            for n in names.loads(node):
                used[n] = used.get(n, 0) + 1
            if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and \
                    not pure(s.value):
                # `v_bar += xs_bar.pop()` stays for its effect, so it reads v_bar.
                used[s.target.id] = used.get(s.target.id, 0) + 1
        removed = _remove_dead(fdef.body, used, keep, names)
        if not removed:
            return removed_any
        removed_any = True


def _remove_dead(stmts: List[ast.stmt], used, keep, names: Names) -> bool:
    removed = False
    i = 0
    while i < len(stmts):
        s = stmts[i]
        dead = False
        if isinstance(s, ast.Assign) and all(isinstance(t, (ast.Name, ast.Tuple))
                                             for t in s.targets):
            targets = names.stores(s)
            if targets and not any(used.get(n, 0) > 0 or n in keep for n in targets) and \
                    pure(s.value):
                dead = True
        elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
            if used.get(s.target.id, 0) <= 0 and s.target.id not in keep and pure(s.value):
                dead = True
        if dead:
            del stmts[i]
            removed = True
            continue
        for _, inner in inner_blocks(s):
            removed |= _remove_dead(inner, used, keep, names)
        i += 1
    return removed
