"""Helpers for in-place writes and Python lists in generated code.

The forward saves the items an in-place write overwrites; the adjoint, on its
own copy of the array, puts them back (restore semantics). These helpers do
that for arrays and for lists alike.
"""
from __future__ import annotations

import numpy as np

from ..errors import TransformError
from .arrays import cast_into, holds_complex, is_array, runs_foreign
from .registry import helper
from .reverse import add_at, add_items, copy_adjoint, is_basic_index
from .shapes import unbroadcast, zeros_like


class _Missing:
    """What copy_item saves for a dict key that is not there yet (restore deletes it)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


@helper
def copy_item(container, index):
    """container[index], copied if it is an array (a view would change later); for a
    dict key not there yet, MISSING."""
    if isinstance(container, dict) and index not in container:
        return MISSING
    if isinstance(container, (float, int, complex)) and (
            index is Ellipsis or (type(index) is tuple and not index)):
        return container    # a 0-d array's adjoint, which arithmetic left a number
    item = container[index]
    if is_array(item):
        return item.copy()
    if isinstance(item, list):
        return list(item)
    return item


@helper
def lazy_safe_target(target) -> None:
    """Before an in-place write, in code that runs beside Dask arrays: Dask reads a 0-d
    NumPy array by reference (n-d ones by value), so a value computed from it before
    the write, kept for the adjoint, would be computed later from the new value."""
    if type(target) is np.ndarray and target.ndim == 0 and runs_foreign():
        raise TypeError("an in-place write into a 0-d NumPy array beside Dask arrays: "
                        "Dask reads a 0-d array by reference, so the values computed from "
                        "it before the write would change, and the gradient with them. "
                        "Rebind a variable instead (total = ...), or use a 1-d array.")


@helper
def written_grad(adjoint, index, value):
    """The cotangent of `value` in `container[index] = value`, from the container's.

    An integer-array index may name an element more than once; NumPy keeps one
    writer per element, and only that writer reaches the result, so the others get
    zero. Which one NumPy keeps is found by making the same write with positions."""
    if isinstance(adjoint, dict):
        item = adjoint.get(index)
        return zeros_like(value) if item is None else unbroadcast(copy_item(adjoint, index),
                                                                   value)
    if isinstance(adjoint, list) or is_basic_index(index) or (
            isinstance(index, np.ndarray) and index.dtype == bool):
        return unbroadcast(copy_item(adjoint, index), value)
    g = adjoint[index]   # advanced indexing: already a copy
    positions = np.arange(g.size).reshape(g.shape)
    probe = np.full(np.shape(adjoint), -1, dtype=np.intp)
    probe[index] = positions
    winners = probe[index] == positions
    if not winners.all():
        g = np.where(winners, g, 0)
    return unbroadcast(g, value)


@helper
def restore_item(container, index, value) -> None:
    """Put back what an in-place write overwrote (a dict key it added: removed)."""
    if value is MISSING:
        container.pop(index, None)
        return
    container[index] = value


@helper
def zero_item(adjoint, index, like=None) -> None:
    """The overwritten items get no gradient: zero them in the adjoint. For a list,
    `like` is the list with the overwritten items back: their zero has their
    structure, not that of what replaced them (L[0] = [a, b] over an array)."""
    if isinstance(adjoint, list):
        if isinstance(index, slice):
            for k in range(*index.indices(len(adjoint))):
                adjoint[k] = 0.0 if like is None else zeros_like(like[k])
        else:
            adjoint[index] = 0.0 if like is None else zeros_like(like[index])
        return
    if isinstance(adjoint, dict):
        adjoint.pop(index, None)    # the key's old value gets no gradient
        return
    adjoint[index] = 0


@helper
def copy_value(value):
    """A private copy of an array or list the adjoint restores items into (a number
    is itself: copy_adjoint's copy, but for numbers)."""
    if isinstance(value, (np.generic, float, complex)):
        return value
    return copy_adjoint(value)


@helper
def snapshot(value):
    """A copy of a view whose base array is later written in place (arrays inside a
    tuple or list too: `a, b = pair` binds what the tuple holds)."""
    if is_array(value):
        return value.copy()
    if isinstance(value, (tuple, list)):
        items = [snapshot(v) for v in value]
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*items)      # a namedtuple
        return type(value)(items)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    return value


@helper
def restore_value(current, saved):
    """Undo `x op= v`: arrays get their old values back in place, numbers rebind."""
    if is_array(current) and np.shape(saved) == current.shape:
        current[...] = saved
        return current
    return saved


@helper
def add(total, contribution):
    """total + contribution, itemwise when the adjoints are lists (of list values)."""
    return add_items(total, contribution)


@helper
def unshared(value, filename, lineno, col, message, hint, text) -> None:
    """An in-place update of a value that may be another variable's array too.

    For numbers `x += v` rebinds and nothing is shared; an array is updated in
    place, which would change the other variable behind the adjoint's back.
    """
    if isinstance(value, (np.ndarray, list, dict)):
        raise TransformError(message, filename, lineno, col, hint, text)


@helper
def item_updated(new, old):
    """What `L[i] op= v` leaves in a list's or dict's item, given `new = L[i] op v`:
    Python updates the item's array in place, so a result of another shape is
    NumPy's ValueError, and one of another dtype is cast back to the item's (a
    TypeError where NumPy's 'same_kind' rule refuses); a number is rebound."""
    if type(old) is not np.ndarray:
        return new
    shape = np.shape(new)
    if shape != old.shape:
        raise ValueError(f"non-broadcastable output operand with shape {old.shape} "
                         f"doesn't match the broadcast shape {shape}")
    if np.result_type(new) == old.dtype:
        return new
    return np.asarray(cast_into(new, old)).astype(old.dtype)   # (NumPy's TypeError there)


@helper
def item_unshared(container, index, variable_may_share, filename, lineno, col, message,
                  hint, text) -> None:
    """Before `L[i] += v` on a list or dict: refused at the user's line where the item
    is an array that another item holds too (`L.append(L[0])`), which Python's
    in-place update would change with it (the compiler proves the same of the
    variables it sees: normalize's item updates). `variable_may_share`: the compiler
    found a variable that may hold the item; then any item `+=` would change in place
    is refused (numbers, NumPy scalars, tuples and strings are replaced, not changed)."""
    if type(container) is list and type(index) is int:
        n = len(container)
        at = index % n if n else index
        others = (v for k, v in enumerate(container) if k != at)
    elif type(container) is dict:
        others = (v for k, v in container.items() if k != index)
    else:
        return
    item = container[index]
    if variable_may_share:
        if not isinstance(item, _REPLACED_BY_UPDATE):
            raise TransformError(message, filename, lineno, col, hint, text)
    elif isinstance(item, np.ndarray) and any(
            isinstance(v, np.ndarray) and np.may_share_memory(item, v) for v in others):
        raise TransformError(message, filename, lineno, col, hint, text)


# What `item += v` replaces rather than changes in place (item_unshared).
_REPLACED_BY_UPDATE = (int, float, complex, np.generic, tuple, str)


@helper
def no_sequence_arithmetic(left, right, filename, lineno, col, message, hint, text) -> None:
    """`a + b` or `a * n` that would concatenate or repeat lists or tuples carrying a
    gradient: refused at its line (their cotangents would be added as arrays). A
    list with an array is NumPy arithmetic, which is differentiated; `message`
    says which operator (it starts with "concatenating" for `+`)."""
    seq = (list, tuple)
    if message.startswith("concatenating"):
        built = isinstance(left, seq) and isinstance(right, seq)
    else:
        built = (isinstance(left, seq) and type(right) is int) or \
            (isinstance(right, seq) and type(left) is int)
    if built:
        raise TransformError(message, filename, lineno, col, hint, text)


@helper
def indexed_by_values(base, index, filename, lineno, col, message, hint, text) -> None:
    """`base[index]` with an index that varies with the inputs: refused at its line
    when `base` is not an array, list, tuple or dict (whose items give the index no
    gradient) and the index holds a float or complex value (np.r_[x, y] made by a
    parameter `maker[x, y]`: its `[...]` computes with the values)."""
    if is_array(base) or isinstance(base, (list, tuple, dict, str)):
        return
    if _inexact_leaf(index):
        raise TransformError(message, filename, lineno, col, hint, text)


def _inexact_leaf(value) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_inexact_leaf(v) for v in value)
    if isinstance(value, slice):
        return any(_inexact_leaf(v) for v in (value.start, value.stop, value.step))
    if isinstance(value, (bool, int, str)) or value is None or value is Ellipsis:
        return False
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return np.issubdtype(dtype, np.inexact)
    return isinstance(value, (float, complex))


@helper
def real_value(value, filename, lineno, col, message, hint, text) -> None:
    """A value whose dtype the compiler could not see (a call it does not
    differentiate) reaches the gradient path: refused at its line if it is complex,
    or a structure holding a complex value (the rules are those of real analysis)."""
    if holds_complex(value):
        raise TransformError(message, filename, lineno, col, hint, text)


@helper
def field_index(value, name: str) -> int:
    """Where the namedtuple `value` keeps its field `name` (its cotangent is a list
    with one item per field). Any other object's attribute carries no gradient
    s2sgrad can follow: refused rather than given a zero."""
    fields = getattr(type(value), "_fields", None)
    if isinstance(value, tuple) and fields is not None and name in fields:
        return fields.index(name)
    if type(value).__name__ == "Context" and type(value).__module__ == "s2sgrad.function":
        raise TransformError(
            f"s2sgrad cannot follow a gradient through ctx.{name}: a Function's vjp "
            f"that is called (not inlined) is differentiated again here (a second "
            f"derivative), and the values it reads from ctx carry gradients",
            hint="Write the vjp so that it is inlined: no `try`, no `with` other than "
                 "np.errstate, no return inside a loop (the generated code's comment "
                 "says why it is called).")
    raise TransformError(f"s2sgrad has no gradient rule for the attribute .{name} of a "
                         f"{type(value).__name__}",
                         hint="Differentiate with respect to arrays, numbers and lists, "
                              "tuples (namedtuples too) and dicts of them.")


# -- pure forms: the same updates, returning new values (differentiable again) --
@helper
def scatter_add(adjoint, index, g):
    """adjoint with g added at index (repeated indices accumulate), as a new value."""
    out = copy_adjoint(adjoint)
    add_at(out, index, g)
    return out


@helper
def with_zeroed(adjoint, index, like=None):
    """adjoint with the items at index set to zero, as a new value (for a list,
    zeros of the structure of `like`'s items: see zero_item)."""
    out = copy_adjoint(adjoint)
    zero_item(out, index, like)
    return out


@helper
def with_item(container, index, value):
    """container with value written at index, as a new value."""
    out = copy_value(container)
    out[index] = value
    return out


@helper
def push(items, item):
    """items + [item], as a new list."""
    return list(items) + [item]


@helper
def last(items):
    return items[-1]


@helper
def drop_last(items):
    """items without its last item, as a new list."""
    return list(items[:-1])


@helper
def last_grad(cot, items):
    """The cotangent of items[-1] as a cotangent of the whole list."""
    return [zeros_like(item) for item in items[:-1]] + [cot]
