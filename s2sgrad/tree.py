"""Structured values (pytrees): nested lists, tuples and dicts of arrays and numbers.

A model's parameters are often a list of `(W, b)` tuples or a dict; its gradient
has the same structure. These helpers take structures apart and put them back
together, in the spirit of `jax.tree_util` and `autograd.misc.flatten`:

    leaves, treedef = tree_flatten(params)       # the arrays and numbers, in order
    params = tree_unflatten(treedef, leaves)     # and back
    step = tree_map(lambda p, g: p - 0.1 * g, params, grads)
    vector, unravel = ravel(params)              # one float vector (for scipy.optimize)

Containers are lists, tuples (namedtuples keep their type) and dicts (their keys
in insertion order); `None` is a container with nothing in it; everything else
is a leaf.
"""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

import numpy as np

__all__ = ["TreeDef", "tree_flatten", "tree_unflatten", "tree_map", "tree_leaves", "ravel"]


class TreeDef:
    """The shape of a structure without its leaves: compared and hashed by value."""

    __slots__ = ("kind", "meta", "children")

    def __init__(self, kind: str, meta: Any = None, children: Tuple["TreeDef", ...] = ()):
        self.kind = kind          # "leaf", "none", "list", "tuple", "dict"
        self.meta = meta          # dict keys, or a namedtuple's type
        self.children = children

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def _key(self):
        return (self.kind, self.meta, self.children)

    def __eq__(self, other) -> bool:
        return isinstance(other, TreeDef) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == "list":
            return f"[{inner}]"
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.meta, self.children)) \
                + "}"
        name = self.meta.__name__ if self.meta is not None else ""
        return f"{name}({inner}{',' if len(self.children) == 1 and not name else ''})"


_LEAF = TreeDef("leaf")
_NONE = TreeDef("none")


def _is_namedtuple(value) -> bool:
    return isinstance(value, tuple) and type(value) is not tuple and hasattr(value, "_fields")


def tree_flatten(tree: Any) -> Tuple[List[Any], TreeDef]:
    """(leaves in order, the structure): depth first, dict items in key order."""
    leaves: List[Any] = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree, leaves) -> TreeDef:
    if tree is None:
        return _NONE
    if type(tree) is list:
        return TreeDef("list", None, tuple(_flatten(t, leaves) for t in tree))
    if type(tree) is tuple or _is_namedtuple(tree):
        meta = type(tree) if _is_namedtuple(tree) else None
        return TreeDef("tuple", meta, tuple(_flatten(t, leaves) for t in tree))
    if type(tree) is dict:
        keys = tuple(tree)
        return TreeDef("dict", keys, tuple(_flatten(tree[k], leaves) for k in keys))
    leaves.append(tree)
    return _LEAF


def tree_unflatten(treedef: TreeDef, leaves) -> Any:
    """The structure `treedef` with `leaves` put back, in order."""
    leaves = list(leaves)
    if len(leaves) != treedef.num_leaves:
        raise ValueError(f"tree_unflatten: the structure {treedef!r} holds "
                         f"{treedef.num_leaves} leaves, but {len(leaves)} were given")
    it = iter(leaves)
    return _build(treedef, it)


def _build(treedef: TreeDef, it) -> Any:
    kind = treedef.kind
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    items = [_build(c, it) for c in treedef.children]
    if kind == "list":
        return items
    if kind == "dict":
        return dict(zip(treedef.meta, items))
    if treedef.meta is not None:
        return treedef.meta(*items)
    return tuple(items)


def tree_leaves(tree: Any) -> List[Any]:
    return tree_flatten(tree)[0]


def tree_map(f: Callable, tree: Any, *rest: Any) -> Any:
    """`f` applied to each leaf (and the corresponding leaves of `rest`, which must
    have the same structure), in a structure like `tree`."""
    leaves, treedef = tree_flatten(tree)
    others = []
    for i, other in enumerate(rest):
        other_leaves, other_def = tree_flatten(other)
        if other_def != treedef:
            raise ValueError(f"tree_map: argument {i + 1} has the structure {other_def!r}, "
                             f"but the first has {treedef!r}")
        others.append(other_leaves)
    return tree_unflatten(treedef, [f(*xs) for xs in zip(leaves, *others)])


def _is_float_leaf(leaf) -> bool:
    if isinstance(leaf, (bool, np.bool_)):
        return False
    if isinstance(leaf, (float, np.floating)):
        return True
    return isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f"


def ravel(tree: Any) -> Tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """(one flat vector of every floating-point leaf, unravel): unravel(vector) puts
    a vector of that length back into the structure, each leaf with its shape and
    dtype (Python floats come back as floats). Integer and boolean leaves are
    constants: they are not in the vector and unravel returns them as they were.

    For optimisers that want one vector (scipy.optimize.minimize(fun, x0, jac=True)),
    with the gradient raveled the same way: `ravel(grads)[0]`.
    """
    leaves, treedef = tree_flatten(tree)
    parts, layout = [], []
    for leaf in leaves:
        if _is_float_leaf(leaf):
            arr = np.asarray(leaf)
            layout.append((arr.shape, arr.dtype, type(leaf) is float))
            parts.append(arr.ravel())
        else:
            layout.append(None)
    dtype = np.result_type(*[p.dtype for p in parts]) if parts else np.float64
    vector = np.concatenate([p.astype(dtype, copy=False) for p in parts]) if parts else \
        np.zeros(0, dtype)
    constants = list(leaves)

    def unravel(vec) -> Any:
        vec = np.asarray(vec)
        if vec.shape != vector.shape:
            raise ValueError(f"unravel: expected a vector of shape {vector.shape}, got "
                             f"{vec.shape}")
        out, start = [], 0
        for leaf, spec in zip(constants, layout):
            if spec is None:
                out.append(leaf)
                continue
            shape, leaf_dtype, is_python_float = spec
            size = int(np.prod(shape, dtype=np.int64))
            piece = vec[start:start + size].reshape(shape).astype(leaf_dtype)
            start += size
            out.append(float(piece) if is_python_float else piece)
        return tree_unflatten(treedef, out)
    return vector, unravel
