"""Softmax, log-softmax, logsumexp and the sigmoid written out, recognised as one
operation each.

Code written for numerical stability subtracts the maximum first:

    m = np.max(z, axis=1, keepdims=True)            # (normal form, one per line)
    z_1 = z - m
    e = np.exp(z_1)
    s = np.sum(e, axis=1, keepdims=True)
    l = np.log(s)
    logp = z_1 - l

Differentiated statement by statement, the adjoint carries a cotangent through
every intermediate and one through the maximum (an extremum's gradient over the
whole array) that is zero in exact arithmetic: the result does not change when
a constant is added along the axis. Such a run of statements becomes one call,
`logp = _s2s_log_softmax(z, 1)` (runtime/fused.py: the same operations in the
same order, so the same values bit for bit) with one adjoint, the one a person
writes. Likewise `e / s` (softmax) and `m + l` or `m[:, 0] + l` (logsumexp).

The logistic sigmoid, `1 / (1 + np.exp(-x))` or `0.5 * (np.tanh(0.5 * x) + 1.0)`
(in normal form four statements), becomes `_s2s_sigmoid_exp(x, 1)` or
`_s2s_sigmoid_tanh(x, 1.0)`, which compute the same operations (the constant
as written) and whose adjoint is `g * s * (1 - s)`, the one torch and JAX
use: it keeps only s, and has no nan where exp(-x) overflows.

Only where that is exact: the statements follow each other in one block, each
intermediate is bound once and read nowhere else, the axis is one integer
constant and the same throughout, nothing is guarded or copied, and the calls
are NumPy's own (normalise resolved them).
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Sequence

import numpy as np

from ...runtime import fused as runtime_fused
from ..facts import NO_STMT_FACT, FunctionFacts
from ..names import copy_location, name_node

_MAX = (np.max, np.amax)


def fuse_reductions(body: List[ast.stmt], facts: FunctionFacts) -> List[ast.stmt]:
    """body with each recognised run replaced by one call (a new list; the
    statements themselves are not changed)."""
    reads: Dict[str, int] = {}
    binds: Dict[str, int] = {}
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Name):
            counts = reads if isinstance(node.ctx, ast.Load) else binds
            counts[node.id] = counts.get(node.id, 0) + 1
    return _Fuser(facts, reads, binds).block(body)


class _Fuser:
    def __init__(self, facts: FunctionFacts, reads: Dict[str, int], binds: Dict[str, int]):
        self.facts, self.reads, self.binds = facts, reads, binds

    def block(self, stmts: List[ast.stmt]) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        i = 0
        while i < len(stmts):
            s = stmts[i]
            if isinstance(s, (ast.If, ast.For, ast.While)):
                new = self.facts.shallow_copy(s)
                new.body, new.orelse = self.block(s.body), self.block(s.orelse)
                out.append(new)
                i += 1
                continue
            matched = self.match(stmts, i)
            if matched is None:
                out.append(s)
                i += 1
                continue
            fused, used = matched
            out.append(fused)
            i += used
        return out

    # -- one run of statements -------------------------------------------------------------
    def match(self, stmts: List[ast.stmt], i: int):
        """(the fused statement, how many it replaces) for a run starting at i, or None."""
        first = _assign(stmts[i])
        if first is None:
            return None
        window = stmts[i:i + 7]
        found = self.sigmoid(window)
        if found is not None:
            return self.fused(window, *found)
        m, call = first
        if not isinstance(call, ast.Call):
            return None
        axis = self.reduction(call, _MAX, keepdims=True)
        if axis is None or not isinstance(call.args[0], ast.Name):
            return None
        x = call.args[0].id
        for form in (self.log_softmax, self.softmax, self.logsumexp):
            found = form(window, m, x, axis)
            fused = found and self.fused(window, *found)
            if fused:
                return fused
        return None

    def fused(self, window: List[ast.stmt], value: ast.Call, n: int):
        """(`target = value` in place of the first n statements, n), where none of
        them is guarded or copied; else None."""
        if not all(self.facts.stmts.of(s) == NO_STMT_FACT for s in window[:n]):
            return None
        last = window[n - 1]
        new = ast.Assign(targets=[name_node(last.targets[0].id, True)], value=value,
                         type_comment=None)
        copy_location(new, last)
        self.facts.note_origin(new, self.facts.origin_of(last))
        return new, n

    def sigmoid(self, w):
        # n = -x; e = exp(n); d = one + e; s = one / d   (either order in the sum), or
        # h = 0.5 * x; t = tanh(h); u = t + one; s = 0.5 * u   (either order in each)
        if len(w) < 4:
            return None
        negated = _assign(w[0])
        if negated is not None and isinstance(negated[1], ast.UnaryOp) and \
                isinstance(negated[1].op, ast.USub) and isinstance(negated[1].operand, ast.Name):
            n, x = negated[0], negated[1].operand.id
            e = self.unary(w[1], np.exp, n)
            d, one = self.plus_one(w[2], e) if e else (None, None)
            s = d and _assign(w[3])
            if not s or not (isinstance(s[1], ast.BinOp) and isinstance(s[1].op, ast.Div) and
                             _same_constant(s[1].left, one) and
                             isinstance(s[1].right, ast.Name) and s[1].right.id == d):
                return None
            if not self.private({n: 1, e: 1, d: 1}, x):
                return None
            return self.call(runtime_fused.sigmoid_exp, "sigmoid_exp", [x, one]), 4
        h, x = _halved(w[0])
        t = h and self.unary(w[1], np.tanh, h)
        u, one = self.plus_one(w[2], t) if t else (None, None)
        s, halved = _halved(w[3]) if u else (None, None)
        if not s or halved != u or not self.private({h: 1, t: 1, u: 1}, x):
            return None
        return self.call(runtime_fused.sigmoid_tanh, "sigmoid_tanh", [x, one]), 4

    @staticmethod
    def plus_one(s, source: str):
        """(target, the constant) of `target = source + 1` or `1 + source` (1 or 1.0)."""
        got = _assign(s)
        if got is None or not (isinstance(got[1], ast.BinOp) and isinstance(got[1].op, ast.Add)):
            return None, None
        left, right = got[1].left, got[1].right
        for name, one in ((left, right), (right, left)):
            if isinstance(name, ast.Name) and name.id == source and _is_one(one):
                return got[0], one.value
        return None, None

    def log_softmax(self, w, m, x, axis):
        # m = max(x); y = x - m; e = exp(y); s = sum(e); l = log(s); r = y - l
        if len(w) < 6:
            return None
        y = self.binop(w[1], x, ast.Sub, m)
        e = y and self.unary(w[2], np.exp, y)
        s = e and self.summed(w[3], e, axis, keepdims=True)
        lg = s and self.unary(w[4], np.log, s)
        r = lg and self.binop(w[5], y, ast.Sub, lg)
        if not r or not self.private({m: 1, y: 2, e: 1, s: 1, lg: 1}, x):
            return None
        return self.call(runtime_fused.log_softmax, "log_softmax", [x, axis]), 6

    def softmax(self, w, m, x, axis):
        # m = max(x); y = x - m; e = exp(y); s = sum(e); r = e / s
        if len(w) < 5:
            return None
        y = self.binop(w[1], x, ast.Sub, m)
        e = y and self.unary(w[2], np.exp, y)
        s = e and self.summed(w[3], e, axis, keepdims=True)
        r = s and self.binop(w[4], e, ast.Div, s)
        if not r or not self.private({m: 1, y: 1, e: 2, s: 1}, x):
            return None
        return self.call(runtime_fused.softmax, "softmax", [x, axis]), 5

    def logsumexp(self, w, m, x, axis):
        # m = max(x); [top = m[.., 0]]; y = x - m; e = exp(y); s = sum(e); l = log(s);
        # r = top + l (or l + top); top anywhere before r, or m itself (keepdims)
        for squeezed_at in (1, 2, 3, 4, 5, None):
            n = 6 if squeezed_at is None else 7
            if len(w) < n:
                continue
            rest = list(w[1:n])
            top = m
            if squeezed_at is not None:
                sq = rest.pop(squeezed_at - 1)
                top = self.squeezed(sq, m, axis)
                if top is None:
                    continue
            y = self.binop(rest[0], x, ast.Sub, m)
            e = y and self.unary(rest[1], np.exp, y)
            keep = squeezed_at is None
            s = e and self.summed(rest[2], e, axis, keepdims=keep)
            lg = s and self.unary(rest[3], np.log, s)
            r = lg and (self.binop(rest[4], top, ast.Add, lg) or
                        self.binop(rest[4], lg, ast.Add, top))
            if not r:
                continue
            uses = {m: 2, y: 1, e: 1, s: 1, lg: 1}
            if squeezed_at is not None:
                uses[top] = 1
            if not self.private(uses, x):
                continue
            max_first = self.binop(rest[4], top, ast.Add, lg) is not None
            return self.call(runtime_fused.logsumexp, "logsumexp",
                             [x, axis, keep, max_first]), n
        return None

    # -- pieces --------------------------------------------------------------------------
    def private(self, uses: Dict[str, int], x: str) -> bool:
        """Each intermediate bound once and read only where the run reads it, none of
        them x."""
        return x not in uses and all(self.binds.get(n, 0) == 1 and self.reads.get(n, 0) == k
                                     for n, k in uses.items())

    def reduction(self, call: ast.Call, functions: Sequence, keepdims: bool) -> Optional[int]:
        """The axis of `f(v, axis=k, keepdims=...)` for f among functions, or None."""
        if self.facts.exprs.of(call).callee not in functions or len(call.args) not in (1, 2):
            return None
        named = {k.arg: k.value for k in call.keywords}
        if None in named or set(named) - {"axis", "keepdims"}:
            return None
        axis = call.args[1] if len(call.args) == 2 else named.get("axis")
        if "axis" in named and len(call.args) == 2:
            return None
        keep = named.get("keepdims")
        kept = isinstance(keep, ast.Constant) and keep.value is True
        if kept != keepdims or (keep is not None and not isinstance(keep, ast.Constant)):
            return None
        return _int_constant(axis)

    def summed(self, s, source: str, axis: int, keepdims: bool) -> Optional[str]:
        got = _assign(s)
        if got is None or not isinstance(got[1], ast.Call):
            return None
        target, call = got
        if self.reduction(call, (np.sum,), keepdims) != axis or \
                not (isinstance(call.args[0], ast.Name) and call.args[0].id == source):
            return None
        return target

    def unary(self, s, function, source: str) -> Optional[str]:
        got = _assign(s)
        if got is None or not isinstance(got[1], ast.Call):
            return None
        target, call = got
        if self.facts.exprs.of(call).callee is not function or call.keywords or \
                len(call.args) != 1 or not (isinstance(call.args[0], ast.Name) and
                                            call.args[0].id == source):
            return None
        return target

    @staticmethod
    def binop(s, left: str, op: type, right: str) -> Optional[str]:
        got = _assign(s)
        if got is None:
            return None
        target, value = got
        if isinstance(value, ast.BinOp) and isinstance(value.op, op) and \
                isinstance(value.left, ast.Name) and value.left.id == left and \
                isinstance(value.right, ast.Name) and value.right.id == right:
            return target
        return None

    @staticmethod
    def squeezed(s, m: str, axis: int) -> Optional[str]:
        """`top = m[:, 0]` (axis 1), `m[0]` (axis 0), `m[..., 0]` (axis -1): the
        maximum with the kept axis taken away."""
        got = _assign(s)
        if got is None or not isinstance(got[1], ast.Subscript):
            return None
        target, value = got
        if not (isinstance(value.value, ast.Name) and value.value.id == m):
            return None
        index = value.slice
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        *lead, last = parts
        if not (isinstance(last, ast.Constant) and last.value == 0 and
                type(last.value) is int):
            return None
        if axis >= 0 and len(lead) == axis and all(
                isinstance(p, ast.Slice) and p.lower is None and p.upper is None and
                p.step is None for p in lead):
            return target
        if axis == -1 and len(lead) == 1 and isinstance(lead[0], ast.Constant) and \
                lead[0].value is Ellipsis:
            return target
        return None

    def call(self, function, name: str, args: list) -> ast.Call:
        node = ast.Call(func=name_node(f"_s2s_{name}"),
                        args=[name_node(a) if isinstance(a, str) else ast.Constant(value=a)
                              for a in args], keywords=[])
        self.facts.exprs.note(node, callee=function)
        return node


def _assign(s: ast.stmt):
    """(target name, value) of `name = value`, or None."""
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
        return s.targets[0].id, s.value
    return None


def _halved(s):
    """(target, operand) of `target = 0.5 * operand` or `operand * 0.5`; else Nones."""
    got = _assign(s)
    if got is None or not (isinstance(got[1], ast.BinOp) and isinstance(got[1].op, ast.Mult)):
        return None, None
    left, right = got[1].left, got[1].right
    for name, half in ((left, right), (right, left)):
        if isinstance(name, ast.Name) and isinstance(half, ast.Constant) and \
                type(half.value) is float and half.value == 0.5:
            return got[0], name.id
    return None, None


def _is_one(node) -> bool:
    """`1` or `1.0` (not True, not a complex 1)."""
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and \
        node.value == 1


def _same_constant(node, value) -> bool:
    """node writes `value`, of its type (`1` and `1.0` differ for objects of the user's)."""
    return isinstance(node, ast.Constant) and type(node.value) is type(value) and \
        node.value == value


def _int_constant(node) -> Optional[int]:
    """The int a node writes (`1`, or `-1`, a minus and a constant), or None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_constant(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None
