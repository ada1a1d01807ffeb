"""Rows of an argument read again in the adjoint, not kept per loop step.

    for x in xs:                        for t in range(xs.shape[0]):
        h = np.tanh(W @ h + U @ x)          x = xs[t]; ...

The reverse transform keeps the loop variable's value of every step on a stack
(`x_stack.append(x)`, `x = x_stack.pop()`), as it keeps any variable a loop
assigns. A row of an array is a view: one NumPy object (112 bytes) per step, the
list's slot beside it, kept only to be read again as `xs[t]`. Where that is
provably the same value, the adjoint's loop takes it from the array instead,
`x = xs[k]` at the top of its step, and the stack goes. Proven from the code:

- `xs` is a parameter the analysis knows is an array (rows in the order a `for`
  gives them; `_s2s_loop_items(xs)` bound once is xs itself), bound nowhere and
  written into nowhere in the function (nor through any alias of it:
  `written_in_place` has the aliases' writes);
- the loop assigns `x` once, as the first statement after the save (`x =
  x_item` of `for x_item in xs`, of `zip(..., xs, ...)` or `enumerate(xs)`, or
  `x = xs[t]` of `for t in R` with t the loop's own variable), and nothing in
  the loop before it reads `x`;
- the adjoint reads `x` only inside that loop: the value the pop put back after
  the loop's last step (the one before the loop) is read by nothing;
- the stack is pushed once and popped once, by these two statements.
"""
from __future__ import annotations

import ast
from typing import Dict, Iterator, List, Optional, Set, Tuple

from ..names import name_node
from ..transform import Transformed
from .statements import NameIndex, fwd_params, walk_statements

__all__ = ["rows_read_again"]


def rows_read_again(t: Transformed, index: NameIndex) -> None:
    """Drop the stacks of loop variables bound to rows of an unchanged argument."""
    counted: Dict[ast.For, str] = {}   # adjoint loops given a row number: its name
    for loop, save in list(_saves_in_loops(t)):
        _one(t, index, loop, save, counted)


def _saves_in_loops(t: Transformed) -> Iterator[Tuple[ast.For, ast.stmt]]:
    """(loop, statement) for each save onto a stack in a forward loop's own body."""
    for s in walk_statements(t.forward.body):
        if s.__class__ is ast.For:
            for inner in s.body:
                if t.marks.of(inner).save_of is not None:
                    yield s, inner


def _one(t: Transformed, index: NameIndex, loop: ast.For, save: ast.stmt,
         counted: Dict[ast.For, str]) -> None:
    k = next(i for i, s in enumerate(loop.body) if s is save)
    mark = t.marks.of(save)
    var, stack = mark.save_of, mark.slot
    if var is None or stack is None or k + 1 >= len(loop.body):
        return
    array, row_index = _row_of(loop, loop.body[k + 1], var, t)
    if array is None:
        return
    if any(n.id == var for s in loop.body[:k] for n in index.deep(s)):
        return   # the loop reads the previous step's value before binding it
    if _stores(t.forward, var, index) != 1 + _inits(t, var) or \
            _stores(t.forward, array, index) or _stores(t.adjoint, array, index):
        return
    pop_loop, pop = _pop_of(t, stack, var)
    if pop_loop is None or _uses(t, stack, index) != 3:   # init, push, pop
        return
    if any(n.id == var and isinstance(n.ctx, ast.Load)
           for s in t.adjoint.body for n in _outside(s, pop_loop, index)):
        return
    if row_index is None:   # `for _ in range(trips)`: give the loop its step's number
        if pop_loop not in counted:
            row = _counted(pop_loop, t, index)
            if row is None:
                return
            counted[pop_loop] = row
            index.changed(pop_loop)
        row_index = counted[pop_loop]
    elif not (isinstance(pop_loop.target, ast.Name) and pop_loop.target.id == row_index):
        return
    read = ast.Assign(targets=[name_node(var, True)], value=ast.Subscript(
        value=name_node(array), slice=name_node(row_index), ctx=ast.Load()))
    ast.copy_location(read, pop)
    pop_loop.body = [read] + [s for s in pop_loop.body if s is not pop]
    loop.body = [s for s in loop.body if s is not save]
    t.forward.body = [s for s in t.forward.body if t.marks.of(s).stack_of != var or
                      t.marks.of(s).slot != stack]


def _row_of(loop: ast.For, bind: ast.stmt, var: str,
            t: Transformed) -> Tuple[Optional[str], Optional[str]]:
    """(array, index name) when `bind` is `var = xs[i]` of the loop `for i in ...`, or
    (array, None) when it is `var = item` of `for item in xs` (or of zip(...) or
    enumerate(...) over such arrays: the loop counts its steps); else (None, None)."""
    if bind.__class__ is not ast.Assign or len(bind.targets) != 1 or \
            not isinstance(bind.targets[0], ast.Name) or bind.targets[0].id != var:
        return None, None
    value = bind.value
    params = set(fwd_params(t.forward))
    arrays = t.activity.leaves & params - t.nf.written_in_place
    if isinstance(loop.target, ast.Name) and isinstance(value, ast.Subscript) and \
            isinstance(value.value, ast.Name) and isinstance(value.slice, ast.Name) and \
            value.slice.id == loop.target.id:
        array = _array_behind(value.value.id, arrays, t)
        return (array, loop.target.id) if array is not None else (None, None)
    if not isinstance(value, ast.Name):
        return None, None
    iterable = _iterated(loop, value.id)
    if isinstance(iterable, ast.Name):
        return _array_behind(iterable.id, arrays, t), None
    return None, None


def _iterated(loop: ast.For, item: str) -> Optional[ast.expr]:
    """What the loop takes `item` from: `for item in xs`, the matching argument of
    `for a, item in zip(as, xs)`, or `for i, item in enumerate(xs)`."""
    target, it = loop.target, loop.iter
    if isinstance(target, ast.Name):
        return it if target.id == item else None
    if not (isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts)
            and isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords):
        return None
    ids = [e.id for e in target.elts]
    if item not in ids:
        return None
    k = ids.index(item)
    if it.func.id == "zip" and len(it.args) == len(ids):
        return it.args[k]
    if it.func.id == "enumerate" and len(it.args) == 1 and len(ids) == 2 and k == 1:
        return it.args[0]
    return None


def _array_behind(name: str, arrays: Set[str], t: Transformed) -> Optional[str]:
    """`name` if it is one of `arrays`, or the array A of `name = _s2s_loop_items(A)`
    bound once (loop_items gives an array itself: its rows are A's), else None."""
    if name in arrays:
        return name
    if name in t.nf.written_in_place:
        return None
    binds = [s for s in walk_statements(t.forward.body)
             if s.__class__ is ast.Assign and any(
                 isinstance(n, ast.Name) and n.id == name for tg in s.targets
                 for n in ast.walk(tg))]
    if len(binds) != 1 or len(binds[0].targets) != 1 or \
            not isinstance(binds[0].targets[0], ast.Name):
        return None
    value = binds[0].value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
            value.func.id == _LOOP_ITEMS and len(value.args) == 1 and \
            isinstance(value.args[0], ast.Name) and value.args[0].id in arrays:
        return value.args[0].id
    return None


_LOOP_ITEMS = "_s2s_loop_items"   # (runtime.reverse.loop_items: an array as it is)


def _stores(fdef: ast.FunctionDef, name: str, index: NameIndex) -> int:
    return sum(1 for n in index.function(fdef)
               if n.id == name and not isinstance(n.ctx, ast.Load))


def _inits(t: Transformed, var: str) -> int:
    return sum(1 for s in walk_statements(t.forward.body) if t.marks.of(s).init_of == var)


def _uses(t: Transformed, name: str, index: NameIndex) -> int:
    return sum(1 for fdef in (t.forward, t.adjoint) for n in index.function(fdef)
               if n.id == name)


def _pop_of(t: Transformed, stack: str, var: str
            ) -> Tuple[Optional[ast.For], Optional[ast.stmt]]:
    """The adjoint's loop whose own body holds `var = stack.pop()`, and that statement."""
    for s in walk_statements(t.adjoint.body):
        if s.__class__ is ast.For:
            for inner in s.body:
                mark = t.marks.of(inner)
                if mark.restore_of == var and mark.slot == stack:
                    return s, inner
    return None, None


def _outside(s: ast.stmt, loop: ast.For, index: NameIndex) -> List[ast.Name]:
    """The Name nodes of s and its blocks, leaving out those of `loop`'s body."""
    if s is loop:
        return list(index.own(s))
    out = list(index.own(s))
    for field in ("body", "orelse", "finalbody", "handlers"):
        for inner in getattr(s, field, None) or ():
            if isinstance(inner, ast.stmt):
                out += _outside(inner, loop, index)
    return out


def _counted(loop: ast.For, t: Transformed, index: NameIndex) -> Optional[str]:
    """`for _ in range(trips)` (the adjoint of `for item in xs`; its target read
    nowhere in the loop) made `for k in range(trips - 1, -1, -1)`: the step's row
    number, last first."""
    it = loop.iter
    if not (isinstance(loop.target, ast.Name) and isinstance(it, ast.Call) and
            isinstance(it.func, ast.Name) and it.func.id in _RANGES and
            len(it.args) == 1 and not it.keywords and isinstance(it.args[0], ast.Name)):
        return None
    if any(n.id == loop.target.id for s in loop.body for n in index.deep(s)):
        return None
    k = t.names.fresh("row")
    loop.target = name_node(k, True)
    loop.iter = ast.Call(func=name_node("range"), args=[
        ast.BinOp(left=name_node(it.args[0].id), op=ast.Sub(), right=ast.Constant(value=1)),
        ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=1)),
        ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=1))], keywords=[])
    return k


# What the adjoint of `for item in xs` counts its steps with (a trip count: an int).
_RANGES = ("range", "_s2s_builtin_range")
