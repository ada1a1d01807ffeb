"""What each normal-form statement does, as far as differentiation cares.

The analysis and the transform both ask the same questions of a statement —
which names does it write, which does it read with a gradient, which without,
and by which rule — so the answer is computed here, once, as an `Op`.
"""
from __future__ import annotations

import ast
import enum
import functools
import inspect
import types
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from .. import runtime
from ..function import checkpoint, is_function_class
from ..introspect import is_library
from ..rules import registry
from ..rules.registry import Rule
from ..runtime import inplace as runtime_inplace
from . import reentry
from .facts import ExprFacts, FunctionFacts
from .names import OPERATOR_SYMBOLS, dotted, walk_values

registry.load_table()   # (every pass reads the rules: they register when the passes load)

# Functions that write into one of their arguments: never silently skipped.
_MUTATORS = {id(f): f for f in (np.copyto, np.put, np.place, np.putmask, np.fill_diagonal,
                                 np.put_along_axis, np.random.shuffle,
                                 runtime.add_at, runtime_inplace.zero_item,
                                 runtime_inplace.restore_item)}
# Methods called for an effect that reports their arguments and keeps nothing s2sgrad
# would read back (logging, writing text): the one exception to "a method of an object
# s2sgrad cannot see into, called with a differentiated value, may keep it".
_REPORTING_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical",
                                "exception", "log", "write", "writelines", "flush"})
# NumPy's functions called for an effect that only reads their arguments: a NumPy
# function whose result is dropped and that is not one of these may be writing into
# an argument (np.put_along_axis was, silently), so it is treated as a write.
_READING_EFFECTS = frozenset({"save", "savez", "savez_compressed", "savetxt", "set_printoptions",
                              "seterr", "seed", "printoptions", "errstate", "info"})


class OpKind(enum.Enum):
    """What a normal-form statement does, as differentiation sees it (Op.kind).

    Compared only with members: comparing with a string raises, so that no test
    of a kind can silently be false."""

    RULE = "rule"              # an operator or a call with a gradient rule
    CALL = "call"              # a call of a function of yours: compiled as a callee
    APPLY = "apply"            # Function.apply: its vjp inlined, or called
    METHOD = "method"          # a method call without a rule
    NONDIFF = "nondiff"        # no gradient by nature: comparisons, integer operators, ...
    UNKNOWN = "unknown"        # no rule: refused where a gradient would pass
    OPAQUE = "opaque"          # an expression kept whole (a comprehension, a *args call)
    MUTATE = "mutate"          # a write into an argument or a value in place
    EFFECT = "effect"          # a statement run for its effect, only reading values
    COPY = "copy"              # y = x (and a loop's item of an iterable)
    CONST = "const"            # a literal or a value the compiler knows
    PACK = "pack"              # a tuple, list or dict literal
    GETITEM = "getitem"        # y = x[i]
    FIELD = "field"            # y = p.W, a namedtuple's field
    SETITEM = "setitem"        # x[i] = v
    AUGASSIGN = "augassign"    # x op= v
    AUGITEM = "augitem"        # x[i] op= v
    APPEND = "append"          # xs.append(v)
    POP = "pop"                # v = xs.pop()
    UFUNC_AT = "ufunc_at"      # np.add.at(a, i, b): a scatter-add
    RETURN = "return"          # return v
    ITERATE = "iterate"        # a for loop binding its target
    CONTROL = "control"        # the test of an if or a while

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            raise TypeError(f"an operation kind compared with the string {other!r}: "
                            f"use OpKind members")
        return self is other

    def __hash__(self) -> int:
        return hash((OpKind, self.value))   # (never a string's: no comparison with one)


@dataclass
class Op:
    """One statement's differentiation-relevant facts."""

    kind: OpKind
    outputs: List[str]
    diff_inputs: List[str] = field(default_factory=list)
    other_inputs: List[str] = field(default_factory=list)
    rule: Optional[Rule] = None
    bound: Dict[str, ast.expr] = field(default_factory=dict)
    callee: object = None
    label: str = ""
    call: Optional[ast.Call] = None
    # A call of a helper marked s2sgrad.checkpoint: recomputed in the adjoint.
    recompute: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.kind, OpKind):
            raise TypeError(f"Op kind {self.kind!r} is not an OpKind")


def names(node: Optional[ast.AST]) -> List[str]:
    """Local-variable reads in an atom or index expression, in order."""
    if node is None:
        return []
    out = []
    for sub in walk_values(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in out:
            out.append(sub.id)
    return out


_UNSUPPORTED = (OpKind.UNKNOWN, OpKind.OPAQUE, OpKind.METHOD)


def describe(stmt: ast.stmt, local_names, facts: FunctionFacts) -> Op:
    """Classify a normal-form statement of the compile that `facts` belongs to.

    Each statement once (`facts.ops`): the analysis and both transforms ask about
    the same statements again and again; a statement rebuilt by a pass is a new
    key, described afresh, never by another's Op. Operations without a rule count
    every input as differentiable, so that activity flows through them and the
    analysis reports them (an error) instead of silently treating them as constants.
    """
    cached = facts.ops.get(stmt)
    if cached is not None:
        return cached
    op = _describe(stmt, local_names, facts.exprs)
    if op.kind in _UNSUPPORTED:
        op.diff_inputs = op.diff_inputs + op.other_inputs
    op.diff_inputs = [n for n in op.diff_inputs if n in local_names]
    op.other_inputs = [n for n in op.other_inputs if n in local_names and n not in op.diff_inputs]
    facts.ops[stmt] = op
    return op


def _targets(stmt: ast.Assign) -> List[str]:
    t = stmt.targets[0]
    if isinstance(t, ast.Name):
        return [t.id]
    return [e.id for e in t.elts]


def _describe(stmt: ast.stmt, local_names, exprs: ExprFacts) -> Op:
    if isinstance(stmt, ast.Assign):
        target = stmt.targets[0]
        if isinstance(target, ast.Subscript):
            base = target.value.id
            return Op(OpKind.SETITEM, [base], diff_inputs=[base] + names(stmt.value),
                      other_inputs=names(target.slice), label="item assignment")
        outs = _targets(stmt)
        value = stmt.value
        if len(outs) == 1 and isinstance(value, ast.Call) and \
                exprs.of(value).method == "pop" and not value.args and \
                not value.keywords and isinstance(value.func.value, ast.Name) and \
                value.func.value.id in local_names:
            base = value.func.value.id
            return Op(OpKind.POP, [outs[0], base], diff_inputs=[base], label="list.pop",
                      call=value)
        op = _value_op(value, outs, local_names, exprs)
        if writes_output(value, op.callee):
            op.kind = OpKind.MUTATE
        return op
    if isinstance(stmt, ast.AugAssign):
        target = stmt.target
        if isinstance(target, ast.Subscript):
            base = target.value.id
            return Op(OpKind.AUGITEM, [base], diff_inputs=[base] + names(stmt.value),
                      other_inputs=names(target.slice), label="augmented item assignment",
                      rule=registry.REGISTRY.operators.get(type(stmt.op)))
        return Op(OpKind.AUGASSIGN, [target.id], diff_inputs=[target.id] + names(stmt.value),
                  label="augmented assignment",
                  rule=registry.REGISTRY.operators.get(type(stmt.op)))
    if isinstance(stmt, ast.Expr):
        call = stmt.value
        if isinstance(call, ast.Call) and exprs.of(call).method == "append" and \
                isinstance(call.func.value, ast.Name) and call.func.value.id in local_names \
                and len(call.args) == 1 and not call.keywords:
            base = call.func.value.id
            return Op(OpKind.APPEND, [base], diff_inputs=[base] + names(call.args[0]),
                      label="list.append", call=call)
        scatter = _ufunc_at(call, local_names, exprs)
        if scatter is not None:
            return scatter
        op = _value_op(stmt.value, [], local_names, exprs)
        if op.kind == OpKind.METHOD and exprs.of(call).method not in _REPORTING_METHODS:
            # (a method of an object s2sgrad does not see into, its result dropped: it
            # may keep its argument, `ctx.save_for_backward(x)`, `cache.store(x)`, and a
            # later read of what it kept would get no gradient; a write, unless known
            # to report only)
            op.kind = OpKind.MUTATE
        elif op.kind in (OpKind.UNKNOWN, OpKind.RULE, OpKind.NONDIFF) and \
                writes_output(call, op.callee):
            op.kind = OpKind.MUTATE
        elif op.callee is not None and id(op.callee) in _MUTATORS:
            op.kind = OpKind.MUTATE
        elif op.kind in (OpKind.UNKNOWN, OpKind.NONDIFF) and _numpy_effect(op.callee):
            op.kind = OpKind.MUTATE
        else:
            op.kind = OpKind.EFFECT
        return op
    if isinstance(stmt, ast.Return):
        return Op(OpKind.RETURN, [], diff_inputs=names(stmt.value))
    return Op(OpKind.EFFECT, [], other_inputs=names(stmt))


# ufunc.at(a, indices, b) that s2sgrad differentiates: a[indices] op= b, unbuffered
# (repeated indices accumulate); the sign b's cotangent gets.
UFUNC_AT_SIGNS = {"add": 1.0, "subtract": -1.0}


def ufunc_at_kind(callee) -> Optional[str]:
    """'add' for np.add.at (any ufunc's name), None for anything else."""
    owner = getattr(callee, "__self__", None)
    if isinstance(owner, np.ufunc) and getattr(callee, "__name__", None) == "at":
        return owner.__name__
    return None


def _ufunc_at(call, local_names, exprs: ExprFacts) -> Optional[Op]:
    """np.add.at(a, idx, b) on a local array a: an in-place scatter-add."""
    if not isinstance(call, ast.Call):
        return None
    kind = ufunc_at_kind(exprs.of(call).callee)
    if kind is None:
        return None
    args = call.args
    base = args[0] if args else None
    if kind not in UFUNC_AT_SIGNS or len(args) != 3 or call.keywords or \
            not (isinstance(base, ast.Name) and base.id in local_names):
        return Op(OpKind.MUTATE, [], other_inputs=names(call), label=f"np.{kind}.at", call=call)
    return Op(OpKind.UFUNC_AT, [base.id], diff_inputs=[base.id] + names(args[2]),
              other_inputs=names(args[1]), label=f"np.{kind}.at", call=call)


def writes_output(call, callee) -> bool:
    """Whether a call writes into an argument it is given: an output array (`out=`,
    or positionally: np.exp(x, y), np.sum(a, 0, None, y), np.clip(a, 0, 1, y)), or
    np.nan_to_num's copy=False (any value but a true constant: it may be false)."""
    if not isinstance(call, ast.Call):
        return False
    if any(k.arg == "out" and not (isinstance(k.value, ast.Constant) and k.value.value is None)
           for k in call.keywords):
        return True
    if callee is None or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    if callee is np.nan_to_num:    # copy=False: replaces NaN and inf in its argument
        copy = call.args[1] if len(call.args) > 1 else next(
            (k.value for k in call.keywords if k.arg == "copy"), None)
        return copy is not None and not (isinstance(copy, ast.Constant) and copy.value)
    if len(call.args) < 2:   # (an output array is never the first argument)
        return False
    if isinstance(callee, np.ufunc):
        return len(call.args) > callee.nin
    if not _in_numpy(callee):   # another function's parameter `out` may be anything
        return False
    try:
        position = _out_position(callee)
    except TypeError:   # (an unhashable callable)
        position = None
    return position is not None and len(call.args) > position


@functools.lru_cache(maxsize=1024)
def _out_position(callee) -> Optional[int]:
    """The position of a NumPy function's `out` parameter (read from its signature
    once: every assignment that calls it asks)."""
    try:
        params = list(inspect.signature(callee).parameters.values())
    except (TypeError, ValueError):
        return None
    for i, p in enumerate(params):
        if p.kind in (p.VAR_POSITIONAL, p.KEYWORD_ONLY, p.VAR_KEYWORD):
            return None
        if p.name == "out":
            return i
    return None


def _numpy_effect(callee) -> bool:
    """A NumPy function called for its effect, other than one known to only read."""
    if isinstance(callee, np.ufunc):
        return True
    if not _in_numpy(callee) or callee.__module__.startswith("numpy.testing"):
        return False
    return getattr(callee, "__name__", "") not in _READING_EFFECTS


def _in_numpy(callee) -> bool:
    module = getattr(callee, "__module__", None) or ""
    return module == "numpy" or module.startswith("numpy.")


def _value_op(value: ast.expr, outs: List[str], local_names, exprs: ExprFacts) -> Op:
    if isinstance(value, ast.Name):
        if value.id in local_names:
            return Op(OpKind.COPY, outs, diff_inputs=[value.id])
        return Op(OpKind.CONST, outs)
    if isinstance(value, ast.Constant) or exprs.of(value).static:
        return Op(OpKind.CONST, outs)
    if isinstance(value, (ast.Tuple, ast.List)):
        flat = [e.id for e in value.elts if isinstance(e, ast.Name)]
        return Op(OpKind.PACK, outs, diff_inputs=flat, other_inputs=names(value))
    if isinstance(value, ast.Dict) and all(k is not None for k in value.keys):
        flat = [e.id for e in value.values if isinstance(e, ast.Name)]
        return Op(OpKind.PACK, outs, diff_inputs=flat,
                  other_inputs=names(ast.Tuple(elts=list(value.keys), ctx=ast.Load())))
    if exprs.of(value).opaque:
        kind = OpKind.NONDIFF if _is_flag(value) else OpKind.OPAQUE
        label = {ast.Compare: "a comparison", ast.BoolOp: "an and/or expression",
                 ast.ListComp: "a list comprehension", ast.GeneratorExp: "a generator expression",
                 ast.SetComp: "a set comprehension", ast.DictComp: "a dict comprehension",
                 ast.Dict: "a dict", ast.Set: "a set", ast.Lambda: "a lambda",
                 ast.Call: "a call with *args or **kwargs"}.get(
            type(value), f"a {type(value).__name__} expression")
        return Op(kind, outs, other_inputs=names(value), label=label)
    if isinstance(value, ast.BoolOp) and _is_flag(value):
        return Op(OpKind.NONDIFF, outs, other_inputs=names(value), label="a condition")
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, (ast.Not, ast.Invert)):
        return Op(OpKind.NONDIFF, outs, other_inputs=names(value), label="a logical operator")
    if isinstance(value, ast.BinOp):
        rule = registry.REGISTRY.operators.get(type(value.op))
        label = f"the operator {OPERATOR_SYMBOLS[type(value.op)]}"
        if rule is None:
            if isinstance(value.op, (ast.FloorDiv, ast.BitAnd, ast.BitOr, ast.BitXor,
                                     ast.LShift, ast.RShift)):
                return Op(OpKind.NONDIFF, outs, other_inputs=names(value), label=label)
            return Op(OpKind.UNKNOWN, outs, other_inputs=names(value), label=label)
        bound = _bind_positional(rule, [value.left, value.right])
        return _rule_op(rule, bound, outs, label)
    if isinstance(value, ast.UnaryOp):
        rule = registry.REGISTRY.operators[type(value.op)]
        return _rule_op(rule, _bind_positional(rule, [value.operand]), outs,
                        "unary " + ("-" if isinstance(value.op, ast.USub) else "+"))
    if isinstance(value, ast.Subscript):
        return Op(OpKind.GETITEM, outs, diff_inputs=names(value.value),
                  other_inputs=names(value.slice), label="indexing")
    if isinstance(value, ast.Attribute):
        base = names(value.value)
        attr = value.attr
        if attr in registry.REGISTRY.nondiff_attributes:
            return Op(OpKind.NONDIFF, outs, other_inputs=base, label=f".{attr}")
        rule = registry.REGISTRY.attributes.get(attr)
        if rule is not None:
            return _rule_op(rule, {"self": value.value}, outs, f".{attr}")
        if isinstance(value.value, ast.Name) and value.value.id in local_names:
            # A field of a namedtuple (params.W): its item, found by name at run time.
            return Op(OpKind.FIELD, outs, diff_inputs=base, label=f"the attribute .{attr}")
        return Op(OpKind.UNKNOWN, outs, other_inputs=base, label=f"the attribute .{attr}")
    if isinstance(value, ast.Call):
        return _call_op(value, outs, local_names, exprs)
    return Op(OpKind.UNKNOWN, outs, other_inputs=names(value), label=type(value).__name__)


def _is_flag(node: ast.expr) -> bool:
    """A comparison, `not`, or and/or of such: True or False, never a value that
    carries a gradient (`a and b` of others returns a or b itself)."""
    if isinstance(node, ast.Compare) or \
            (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return True
    if isinstance(node, ast.Constant):
        return isinstance(node.value, bool)
    return isinstance(node, ast.BoolOp) and all(_is_flag(v) for v in node.values)


def _bind_positional(rule: Rule, args: List[ast.expr]) -> Dict[str, ast.expr]:
    return dict(zip(rule.params, args))


def _rule_op(rule: Rule, bound: Dict[str, ast.expr], outs, label) -> Op:
    diff, other = [], []
    for param, value in bound.items():
        (diff if param in rule.grads else other).extend(names(value))
    return Op(OpKind.RULE, outs, diff_inputs=diff, other_inputs=other, rule=rule, bound=bound,
              label=label)


def bind(rule: Rule, call: ast.Call, skip_first: Optional[ast.expr] = None):
    """Bind a call's atoms to the rule's parameters; None if they do not fit."""
    args = list(call.args)
    if skip_first is not None:
        args = [skip_first] + args
    kwargs = {k.arg: k.value for k in call.keywords}
    try:
        bound = rule.signature.bind(*args, **kwargs)
    except TypeError:
        return None
    out = {}
    for param, value in bound.arguments.items():
        kind = rule.signature.parameters[param].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            value = ast.Tuple(elts=list(value), ctx=ast.Load())
        out[param] = value
    return out


def _call_op(call: ast.Call, outs, local_names, exprs: ExprFacts) -> Op:
    everything = names(call)
    method = exprs.of(call).method
    if method is not None:
        base = call.func.value
        label = f"the method .{method}()"
        if method in registry.REGISTRY.nondiff_methods:
            return Op(OpKind.NONDIFF, outs, other_inputs=everything, label=label)
        rule = registry.REGISTRY.methods.get(method)
        if rule is not None and not exprs.of(call).opaque:
            bound = bind(rule, call, skip_first=base)
            if bound is None:
                return Op(OpKind.UNKNOWN, outs, other_inputs=everything,
                          label=f"{label} with these arguments")
            op = _rule_op(rule, bound, outs, label)
            op.call = call
            return op
        return Op(OpKind.METHOD, outs, other_inputs=everything, label=f"the method .{method}()")
    callee = exprs.of(call).callee
    if callee is None:
        return Op(OpKind.UNKNOWN, outs, other_inputs=everything,
                  label=f"the call {ast.unparse(call.func)}(...)")
    if callee is runtime.loop_items or callee is runtime.record:
        # What a loop walks, a namedtuple of its items: copies, for differentiation.
        source = names(call.args[-1])
        if not source:
            return Op(OpKind.NONDIFF, outs, other_inputs=everything, label="a record")
        return Op(OpKind.COPY, outs, diff_inputs=source, label="iteration")
    label = _callable_name(callee, call)
    if isinstance(callee, types.MethodType) and is_function_class(callee.__self__) and \
            callee.__func__.__name__ == "apply":
        return Op(OpKind.APPLY, outs, diff_inputs=names(ast.Tuple(elts=call.args, ctx=ast.Load())),
                  other_inputs=everything, callee=callee.__self__, label=label, call=call)
    rule = registry.lookup_function(callee)
    if rule is not None and not exprs.of(call).opaque:
        bound = bind(rule, call)
        if bound is None:
            return Op(OpKind.UNKNOWN, outs, other_inputs=everything, callee=callee,
                      label=f"{label} with these arguments")
        op = _rule_op(rule, bound, outs, label)
        op.callee, op.call = callee, call
        return op
    if registry.is_nondiff(callee):
        return Op(OpKind.NONDIFF, outs, other_inputs=everything, callee=callee, label=label)
    if getattr(callee, "__s2sgrad_derived__", None) is not None:
        # A call to s2sgrad.grad(f) & co. inside differentiated code: its code.
        callee = reentry.readable(callee)
        return Op(OpKind.CALL, outs, diff_inputs=names(ast.Tuple(
            elts=list(call.args) + [k.value for k in call.keywords], ctx=ast.Load())),
            other_inputs=everything, callee=callee, label=label, call=call)
    # A helper marked s2sgrad.checkpoint: its function, recomputed in the adjoint.
    recompute = isinstance(callee, checkpoint) and \
        isinstance(callee.__wrapped__, types.FunctionType)
    if recompute:
        callee = callee.__wrapped__
    if isinstance(callee, types.FunctionType) and (
            recompute or not is_library(callee, own=True) or
            registry.differentiated_from_source(callee)):
        return Op(OpKind.CALL, outs, diff_inputs=names(ast.Tuple(
            elts=list(call.args) + [k.value for k in call.keywords], ctx=ast.Load())),
            other_inputs=everything, callee=callee, label=label, call=call,
            recompute=recompute)
    return Op(OpKind.UNKNOWN, outs, other_inputs=everything, callee=callee, label=label)


def _callable_name(obj, call: ast.Call) -> str:
    text = dotted(call.func)
    if text is not None:
        return text
    try:
        return ast.unparse(call.func)
    except Exception:  # pragma: no cover - unparse handles every normal-form func
        return getattr(obj, "__name__", repr(obj))
