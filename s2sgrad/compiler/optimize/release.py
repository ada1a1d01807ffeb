"""Residuals let go once read for the last time: an adjoint called once frees them.

A hand-written adjoint drops each intermediate when it is done with it; an
adjoint that holds every residual to its end keeps them all beside its own
cotangents, the peak of a memory-bound gradient. The adjoint unpacks its
residuals with `_s2s_take(residuals)`, which empties a container the caller
hands over for one call (`runtime.release.Once`: grad and value_and_grad do),
and deletes each residual that may be an array (not a number, a shape kept as
`_s2s_meta`, or an argument: the caller holds those) after the statement that
reads it last, when code follows.
Given the forward's tuple (a pullback called again, a callee's residuals)
nothing is emptied: the `del` then only ends a local name.
"""
from __future__ import annotations

import ast
from typing import Dict, List

from ..marks import is_comment
from ..names import helper_call, name_node
from ..transform import Transformed


def release_residuals(t: Transformed) -> None:
    """`_s2s_take(residuals)` at the adjoint's unpacking, `del` after last reads."""
    body = t.adjoint.body
    if not body or not _unpacks(body[0], t.residuals):
        return
    body[0].value = helper_call("take", name_node(t.residuals))
    unpacked = [e.id for e in body[0].targets[0].elts]
    last: Dict[str, int] = {}
    wanted = set(unpacked)
    for i, s in enumerate(body[1:], 1):
        for n in ast.walk(s):
            if n.__class__ is ast.Name and n.id in wanted:
                last[n.id] = i
    end = len(body) - 1   # (the return)
    after: Dict[int, List[str]] = {}
    kept_anyway = t.kept_as_shapes | _arguments(t.forward)
    for name in unpacked:
        k = last.get(name, 0)
        if k < end and not t.activity.is_number(name) and name not in kept_anyway and \
                any(not is_comment(s) for s in body[k + 1:end]):
            after.setdefault(k, []).append(name)
    for k in sorted(after, reverse=True):
        node = ast.Delete(targets=[ast.Name(n, ast.Del()) for n in after[k]])
        body.insert(k + 1, ast.copy_location(node, body[k]))


def _unpacks(s: ast.stmt, residuals: str) -> bool:
    return isinstance(s, ast.Assign) and len(s.targets) == 1 and \
        isinstance(s.targets[0], ast.Tuple) and \
        all(isinstance(e, ast.Name) for e in s.targets[0].elts) and \
        isinstance(s.value, ast.Name) and s.value.id == residuals


def _arguments(forward: ast.FunctionDef) -> set:
    """The forward's parameters and the names its top level binds to one of them
    (`Wi = params_0_0`): the caller holds their arrays, deleting frees nothing."""
    names = {a.arg for a in forward.args.posonlyargs + forward.args.args +
             forward.args.kwonlyargs}
    for s in forward.body:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Name) and \
                s.value.id in names:
            names.add(s.targets[0].id)
    return names


def release_callee_parts(t: Transformed) -> None:
    """`del` after their last read of the cotangents a callee's adjoint returns at
    each step of a loop (`W_bar_part`, added into `W_bar`): otherwise each lives on
    into the next step, beside the one the next call makes, until that call's result
    is unpacked (an LSTM cell's four weight parts: a step's worth more memory)."""
    adjoints = {site.adjoint_name for site in t.callees.values()}
    if not adjoints:
        return
    stores: Dict[str, int] = {}
    loads: Dict[str, int] = {}
    for n in ast.walk(t.adjoint):
        if n.__class__ is ast.Name:
            counts = loads if n.ctx.__class__ is ast.Load else stores
            counts[n.id] = counts.get(n.id, 0) + 1
    for loop in [n for n in ast.walk(t.adjoint) if isinstance(n, (ast.For, ast.While))]:
        _release_in(loop.body, adjoints, stores, loads)


def _release_in(body: List[ast.stmt], adjoints: set, stores: Dict[str, int],
                loads: Dict[str, int]) -> None:
    """In one loop body: the names bound only by a callee adjoint's call in it (at its
    top level) and read only by the statements after that call (so made anew at every
    step, and read nowhere else), deleted together after the last statement that
    reads one of them."""
    read_in = [_loaded(s) for s in body]
    after: Dict[int, List[str]] = {}
    for a, s in enumerate(body):
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
                isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Name) and
                s.value.func.id in adjoints):
            continue
        target = s.targets[0]
        names = [e.id for e in (target.elts if isinstance(target, ast.Tuple) else [target])
                 if isinstance(e, ast.Name)]
        freed, last = [], a
        for name in names:
            later = [j for j in range(a + 1, len(body)) if name in read_in[j]]
            if stores.get(name) != 1 or not later or \
                    sum(read_in[j][name] for j in later) != loads.get(name, 0):
                continue
            freed.append(name)
            last = max(last, later[-1])
        if freed:   # (one `del` for the call's parts, after the last reads one)
            after.setdefault(last, []).extend(freed)
    for k in sorted(after, reverse=True):
        node = ast.Delete(targets=[ast.Name(n, ast.Del()) for n in after[k]])
        body.insert(k + 1, ast.copy_location(node, body[k]))


def _loaded(s: ast.stmt) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for n in ast.walk(s):
        if n.__class__ is ast.Name and n.ctx.__class__ is ast.Load:
            out[n.id] = out.get(n.id, 0) + 1
    return out
