"""Helpers of reverse mode that are not about shapes: the N-d cases of matmul/dot,
cotangents of lists and dicts, the seed, the small masks and guards.

Only what does not read well as one line of NumPy lives here. Each helper is
an ordinary NumPy function, so generated code stays plain NumPy and can be
differentiated again.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import InternalError
from .arrays import is_array, is_foreign_array
from .registry import helper
from .shapes import ZERO_IDS, unbroadcast, zero_cotangent_item, zeros_like


@helper
def matmul_grad_a(g, a, b):
    """Cotangent of `a` in a @ b, for every combination of 1-d and N-d operands."""
    if type(a) is np.ndarray and type(b) is np.ndarray:
        # The usual case, without np.ndim's dispatch or unbroadcast's call: this
        # runs once per matrix product per loop step (an RNN's W @ h).
        a_nd, b_nd = a.ndim, b.ndim
        if a_nd == 2 and b_nd == 2:
            return g @ b.T
        if a_nd == 2 and b_nd == 1 and type(g) is np.ndarray and g.ndim == 1:
            return g[:, None] * b   # (the outer product; faster than np.multiply.outer)
    a, b = _operand(a), _operand(b)
    a_nd, b_nd = np.ndim(a), np.ndim(b)
    if a_nd == 2 and b_nd == 2:
        return g @ b.T
    if b_nd == 1:
        ga = np.multiply.outer(g, b) if a_nd == 1 else g[..., None] * b
    elif a_nd == 1:
        ga = (b @ g[..., None])[..., 0]
    else:
        ga = g @ np.swapaxes(b, -1, -2)
    return unbroadcast(ga, a)


@helper
def matmul_grad_b(g, a, b):
    """Cotangent of `b` in a @ b."""
    if type(a) is np.ndarray and type(b) is np.ndarray:
        a_nd, b_nd = a.ndim, b.ndim   # the usual cases first, as in matmul_grad_a
        if a_nd == 2 and b_nd == 2:
            return a.T @ g
        if a_nd == 2 and b_nd == 1 and type(g) is np.ndarray and g.ndim == 1:
            return g @ a   # (= a.T @ g, without the transposed view)
    a, b = _operand(a), _operand(b)
    a_nd, b_nd = np.ndim(a), np.ndim(b)
    if a_nd == 2 and b_nd == 2:
        return a.T @ g
    if a_nd == 1:
        # (a is a row: g[..., m] of each batch times a[j] gives b's [..., j, m])
        gb = np.asarray(a)[:, None] * np.asarray(g)[..., None, :] if b_nd > 1 else g * a
    elif b_nd == 1:
        gb = np.swapaxes(a, -1, -2) @ g[..., None]
        gb = gb[..., 0]
    else:
        gb = np.swapaxes(a, -1, -2) @ g
    return unbroadcast(gb, b)


def _operand(x):
    """A list or tuple operand of a product (np.dot(sorted(x), w)) as the array NumPy
    reads it as: `g * [..]` would repeat the list."""
    return np.asarray(x) if isinstance(x, (list, tuple)) else x


@helper
def dot_grad_a(g, a, b):
    """Cotangent of `a` in np.dot(a, b) (scalar, 1-d, 2-d and N-d cases)."""
    a, b = _operand(a), _operand(b)
    a_nd, b_nd = np.ndim(a), np.ndim(b)
    if a_nd == 0 or b_nd == 0:
        return unbroadcast(g * b, a)
    if b_nd <= 2 and a_nd <= 2:
        return matmul_grad_a(g, a, b)
    # dot(a, b)[i.., k.., m] = sum_j a[i.., j] * b[k.., j, m]
    b_free = tuple(range(b_nd - 2)) + ((b_nd - 1,) if b_nd > 1 else ())
    g_axes = tuple(range(a_nd - 1, np.ndim(g)))
    return np.tensordot(g, b, axes=(g_axes, b_free))


@helper
def dot_grad_b(g, a, b):
    """Cotangent of `b` in np.dot(a, b)."""
    a, b = _operand(a), _operand(b)
    a_nd, b_nd = np.ndim(a), np.ndim(b)
    if a_nd == 0 or b_nd == 0:
        return unbroadcast(g * a, b)
    if b_nd <= 2 and a_nd <= 2:
        return matmul_grad_b(g, a, b)
    ga_axes = tuple(range(a_nd - 1))
    gb = np.tensordot(a, g, axes=(ga_axes, ga_axes))  # (j, k.., m)
    if b_nd == 1:
        return gb
    return np.moveaxis(gb, 0, -2)


@helper
def transpose_grad(g, axes=None):
    """Undo np.transpose(x, axes) on the cotangent."""
    if axes is None:
        return np.transpose(g)
    return np.transpose(g, np.argsort(axes))


@helper
def balanced_max_mask(x, ans, other):
    """Where x won an elementwise max/min; ties split the gradient in half."""
    return (x == ans) / (1.0 + (x == other))


@helper
def safe_log(x):
    """log(x) with log(0) taken as 0, for d/dy x**y at x == 0 (where ans is 0)."""
    return np.log(np.where(x == 0, 1.0, x))


@helper
def check_count(grads, expected: int, method: str):
    """Validate that a Function's vjp returned one gradient per input.

    `method` is "Class.vjp" (or "Class.backward"), for the message. Trailing Nones
    past the inputs the call passed (a vjp written for forward's defaulted
    parameters, `return g, None, None` for `apply(x)`) are dropped, as PyTorch does.
    """
    if isinstance(grads, (tuple, list)) and len(grads) > expected and \
            all(g is None for g in grads[expected:]):
        grads = grads[:expected]
    return one_per(grads, expected, method, "gradient", "input")


@helper
def as_returned(cot, grads, method: str = "the vjp"):
    """Cotangents `cot` (one per input) in the form a Function's vjp returned its
    gradients `grads`: the bare item for a bare gradient, else a tuple with the
    trailing Nones check_count dropped. Check_count's transpose (a called vjp
    differentiated again), and the cotangent forward mode gives the reverse mode of
    a vjp to derive a jvp: there `grads` is checked as check_count checks it."""
    if not isinstance(grads, (tuple, list)):
        return cot[0]
    check_count(grads, len(cot), method)
    return tuple(cot) + (None,) * (len(grads) - len(cot))


def one_per(values, expected: int, method: str, what: str, per: str):
    """`values` as a sequence of `expected` items (one bare value is a 1-tuple),
    or a TypeError naming the Function method that returned the wrong count."""
    if expected == 1 and not isinstance(values, (tuple, list)):
        return (values,)
    got = len(values) if isinstance(values, (tuple, list)) else 1
    if got != expected:
        cls = method.rsplit(".", 1)[0]
        raise TypeError(f"{method} returns {got} {what}(s), expected {expected} "
                        f"(one per {per} of {cls}.forward)")
    return values


@helper
def none_to_zero(grad, like):
    """A Function's vjp may return None for "no gradient": make it a zero."""
    return zeros_like(like) if grad is None else grad


@helper
def copy_adjoint(adjoint):
    """A private copy of an adjoint before it is updated in place. A number stands
    for a 0-d array's adjoint (NumPy's arithmetic on 0-d arrays gives scalars): its
    copy is a 0-d array, which the item write or read that follows updates."""
    if isinstance(adjoint, list):
        return list(adjoint)
    if isinstance(adjoint, dict):
        return dict(adjoint)
    if is_array(adjoint):
        return adjoint.copy()
    if isinstance(adjoint, (np.generic, float, complex)) and not isinstance(adjoint, np.bool_):
        return np.array(adjoint)
    return adjoint


def is_basic_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(isinstance(i, (numbers.Integral, slice, type(None), type(Ellipsis)))
               and not isinstance(i, bool) for i in items)


def split_as_items(g, items):
    """An array cut into the nested lists of `items` (np.array([[x, y]]) or
    np.sum(xs) read them as one array): a list for each list or tuple, an array of
    each leaf's shape."""
    if isinstance(items, (list, tuple)):
        return [split_as_items(g[i], x) for i, x in enumerate(items)]
    return np.reshape(g, np.shape(items))


def join_items(g, items, out) -> None:
    """The transpose of split_as_items: the nested cotangents g written into the
    array out (an item that is a symbolic zero, 0.0 or None, stays zero)."""
    if _symbolic_zero(g):
        return
    if isinstance(items, (list, tuple)):
        for i, x in enumerate(items):
            join_items(g[i], x, out[i, ...])
        return
    out[...] = np.reshape(g, np.shape(out))


@helper
def items_like(cotangent, value):
    """A rule's cotangent of `value` in value's structure: a list or tuple that a
    NumPy function read as one array (np.sum(xs), np.append(xs, v)) gets its array
    cotangent cut into items, as the rest of the adjoint handles it; anything else
    is left as it is."""
    if isinstance(value, (list, tuple)) and isinstance(cotangent, np.ndarray) and \
            cotangent.shape == np.shape(value):
        return split_as_items(cotangent, value)
    return cotangent


@helper
def items_joined(items, cotangent):
    """The transpose of items_like in its cotangent: the items as one array again
    (of the array cotangent's shape)."""
    if not isinstance(items, (list, tuple)) or not isinstance(cotangent, np.ndarray):
        return items   # (items_like left the cotangent as it was)
    out = np.zeros(cotangent.shape, dtype=np.result_type(cotangent.dtype, np.float64))
    join_items(items, items, out)
    return out


def add_items(total, contribution):
    """total + contribution, item by item where the adjoints are lists or tuples
    (the adjoint of a list of arrays is a list; `+` would concatenate). None, the
    cotangent of a None item (a vjp's `(g, None)` differentiated again), adds nothing."""
    if contribution is None:
        return total
    if total is None:
        return contribution
    t = type(total)
    if t is type(contribution):   # (the usual meetings first: two arrays, two lists)
        if t is np.ndarray and id(total.base) not in ZERO_IDS and \
                id(contribution.base) not in ZERO_IDS:
            return total + contribution
        if t is list and len(total) == len(contribution):
            return [_add_leaves(a, b) for a, b in zip(total, contribution)]
    if t is np.ndarray and id(total.base) in ZERO_IDS:
        if np.shape(contribution) == total.shape and isinstance(contribution, np.ndarray):
            return contribution    # (a cotangent the adjoint no longer updates)
        if _symbolic_zero(contribution):
            return total
        return total + contribution
    if type(contribution) is np.ndarray and id(contribution.base) in ZERO_IDS:
        return total
    seq_total = isinstance(total, (list, tuple))
    seq_contribution = isinstance(contribution, (list, tuple))
    if seq_total or seq_contribution:
        if not seq_contribution and _symbolic_zero(contribution):
            return total
        if not seq_total and _symbolic_zero(total):
            return list(contribution)
        if seq_total and isinstance(contribution, np.ndarray) and \
                contribution.shape[:1] == (len(total),):
            contribution = split_as_items(contribution, total)   # (a NumPy rule's)
        elif seq_contribution and isinstance(total, np.ndarray) and \
                total.shape[:1] == (len(contribution),):
            total = split_as_items(total, contribution)
        elif not (seq_total and seq_contribution) or len(total) != len(contribution):
            raise InternalError(f"cotangents of different structures meet: "
                                f"{type(total).__name__} and {type(contribution).__name__}")
        return [add_items(a, b) for a, b in zip(total, contribution)]
    if isinstance(total, dict) or isinstance(contribution, dict):
        if not isinstance(contribution, dict):
            return total            # a symbolic zero (0.0) added to a dict's cotangent
        if not isinstance(total, dict):
            return dict(contribution)
        out = dict(total)
        for k, v in contribution.items():
            out[k] = add_items(out[k], v) if k in out else v
        return out
    return total + contribution


def _add_leaves(a, b):
    """add_items(a, b), two arrays of one shape added here, not in a call of their own
    (the items of a list of (W, b) pairs' cotangents, added once per loop step)."""
    if type(a) is list and type(b) is list and len(a) == len(b):
        return [x + y if type(x) is np.ndarray and type(y) is np.ndarray and
                x.shape == y.shape and id(x.base) not in ZERO_IDS and
                id(y.base) not in ZERO_IDS else add_items(x, y) for x, y in zip(a, b)]
    return add_items(a, b)


def _symbolic_zero(value) -> bool:
    """The 0.0 (or None) standing for a cotangent nothing has reached yet."""
    return value is None or (type(value) in (int, float) and value == 0)


@helper
def items_cotangent(x, *pairs):
    """zeros_like(x), then add_at(cotangent, k, v) for each (k, v) of `pairs`, in one
    call: the cotangent of a list or tuple whose items' cotangents the adjoint has
    (an unpacked tuple of parameters). Where the pairs name each item once, each is
    what add_at would make of it in a zero item, made without the zeros."""
    n = len(pairs)
    if (type(x) is list or type(x) is tuple) and len(x) == n:
        out = [None] * n
        for k, v in pairs:
            k = k + n if type(k) is int and -n <= k < 0 else k
            if type(k) is not int or not 0 <= k < n or out[k] is not None:
                break
            item = x[k]
            if type(v) is np.ndarray and type(item) is np.ndarray and v.shape == item.shape:
                out[k] = v
            else:
                out[k] = _added_to_zero(item, v)
        else:
            return out
    out = zeros_like(x)
    for k, v in pairs:
        add_at(out, k, v)
    return out


def _added_to_zero(item, v):
    """add_items(zero_cotangent_item(item), v), without making the zero first (a helper
    cell in a loop makes these every step: through add_items, lstm_helper's gradient
    took 2.8 ms instead of 2.3). An item that is an array of v's shape is checked
    here, not in a call of its own: a list of (W, b) pairs meets one per leaf."""
    if type(v) is np.ndarray:
        if type(item) is np.ndarray and v.shape == item.shape:
            return v
    elif type(v) is list and (type(item) is list or type(item) is tuple) and \
            len(v) == len(item):
        out = []
        for a, b in zip(item, v):
            out.append(b if type(b) is np.ndarray and type(a) is np.ndarray and
                       b.shape == a.shape else _added_to_zero(a, b))
        return out
    return add_items(zero_cotangent_item(item), v)


@helper
def add_at(adjoint, index, g):
    """adjoint[index] += g, where repeated indices accumulate (scatter-add).

    `adjoint` is an array owned by the adjoint code, or a list for a Python
    list. Basic indices (ints, slices) cannot repeat, so they take the fast path.
    """
    if isinstance(adjoint, list):
        if isinstance(index, slice):
            for k, gk in zip(range(*index.indices(len(adjoint))), g):
                adjoint[k] = add_items(adjoint[k], gk)
        else:
            adjoint[index] = add_items(adjoint[index], g)
        return
    if isinstance(adjoint, dict):
        adjoint[index] = add_items(adjoint[index], g) if index in adjoint else g
        return
    if np.iscomplexobj(g) and not np.iscomplexobj(adjoint):
        # a real value's cotangent (an item of what a complex operation returned, such
        # as svd's s): the real part pairs with its changes, which are real
        g = np.real(g)
    if is_basic_index(index):
        adjoint[index] += g
    elif isinstance(index, np.ndarray) and index.dtype == bool:
        adjoint[index] += g
    else:
        np.add.at(adjoint, index, g)


@helper
def dict_item_grad(cotangent, key, item):
    """The cotangent of a dict's item: cotangent[key], or zero where the dict's
    cotangent has no such key (nothing read that item, or it is a scalar zero)."""
    if isinstance(cotangent, dict) and key in cotangent:
        return cotangent[key]
    return zeros_like(item)


@helper
def dict_item_transpose(g, cotangent, key):
    """The transpose of dict_item_grad in its cotangent: a dict of zeros with g at
    `key` (zero where the cotangent was not a dict: the item's zero read none of it)."""
    if isinstance(cotangent, dict) and key in cotangent:
        out = {k: zeros_like(v) for k, v in cotangent.items()}
        out[key] = g
        return out
    return zeros_like(cotangent)


@helper
def accumulate(total, contribution):
    """total + contribution where either may be None (a Function's None gradient)."""
    if contribution is None:
        return total
    if total is None:
        return contribution
    return total + contribution


@helper
def seed(out):
    """The cotangent 1 of a scalar output (what grad differentiates against)."""
    if isinstance(out, (float, int)) and not isinstance(out, (bool, np.generic)):
        return 1.0
    if is_foreign_array(out):   # (in its library: CuPy refuses NumPy arrays)
        if out.ndim != 0 and out.size != 1:
            raise ValueError(f"grad requires a function that returns a scalar, but it "
                             f"returned shape {out.shape}; use s2sgrad.vjp for non-scalar "
                             f"outputs")
        return np.ones_like(out, dtype=np.result_type(out.dtype, np.float64))
    if np.ndim(out) != 0 and np.size(out) == 1 and isinstance(out, np.ndarray):
        return np.ones(out.shape, dtype=np.result_type(out, np.float64))   # shape (1,), (1, 1)
    if np.ndim(out) != 0:
        raise ValueError(f"grad requires a function that returns a scalar, but it returned "
                         f"shape {np.shape(out)}; use s2sgrad.vjp for non-scalar outputs")
    return np.ones((), dtype=np.result_type(out, np.float64))


@helper
def keys(mapping):
    """The keys of a dict, as a list: what `for k in d.items()` walks (no gradient)."""
    return list(mapping)


@helper
def record(cls, items):
    """A namedtuple built from its items: `Layer(W, b)` in differentiated code. For
    differentiation it is the tuple of its items (its cotangent a list of theirs)."""
    return cls(*items)


@helper
def loop_items(value):
    """What `for x in value` walks by position: a dict's keys (as Python iterates a
    dict), anything else itself. For differentiation it is a copy of `value`: a
    list's items keep their cotangents; keys carry none. An iterator (np.ndindex,
    a generator, map, a set) is walked once, into a list, as the loop would. A
    list is copied: an append or an item written after the loop must not change
    what the adjoint reads of the items the loop walked (their count, for one)."""
    if isinstance(value, (list, dict, _DICT_VIEWS)) or not (
            hasattr(value, "__getitem__") and hasattr(value, "__len__")):
        return list(value)
    return value


_DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))


@helper
def loop_items_grad(cotangent, value):
    """The cotangent loop_items(value) hands back to value: the items' own, or for a
    dict, whose keys the loop walked (numbers a body may compute with: `for k in d:
    s += k * d[k]`), none: a zero in the dict's structure."""
    return zeros_like(value) if isinstance(value, dict) else cotangent


@helper
def loop_items_tangent(tangent, value):
    """The tangent of loop_items(value): none for a dict's keys (or a view of it)."""
    return [0.0] * len(value) if isinstance(value, (dict, _DICT_VIEWS)) else tangent


@helper
def backwards(indices):
    """reversed(range): how pure adjoints walk a loop backwards (no gradient)."""
    return reversed(indices)


@helper
def detached(value):
    """value, a constant to any derivative of the code that computes it (what
    torch's create_graph=False gives inside a differentiated function)."""
    return value
