"""Pass 5 — inline: splice gradient rules and Function bodies into the code.

The transform leaves placeholders: `_s2s_vjp(...)` for a rule of the table and
`_s2s_forward(...)`/`_s2s_vjp(...)` for a user's `Function.apply`. This pass
replaces each with plain code: the rule's template with the call's arguments
substituted, or the body of the user's `forward`/`vjp` with `ctx` turned into
ordinary variables. A `Function` whose body cannot be inlined is called
through its staticmethods instead, with a comment saying why.

Calls to other user functions are not inlined: each callee gets its own
forward/adjoint pair (compiled separately, cached per function), which keeps
generated code proportional to the source and makes recursion possible.
"""
from __future__ import annotations

import ast
import copy
import inspect
from typing import Any, Dict, List, Set

from ..runtime import HELPERS, scalar_math
from .analyze import SCALAR
from .marks import comment
from .names import (
    NameRegistry,
    assign_node,
    clone,
    copy_location,
    name_node,
    name_nodes,
    walk_values,
)
from .sites import (
    FunctionSite,
    RuleVjp,
    constant,
    helper,
    numpy_alias,
    result_elements,
    substitute,
)


def expand_rule(p: RuleVjp, names: NameRegistry, np_name: str, shapes=None) -> List[ast.stmt]:
    """The rule's template with the call's arguments substituted.

    `shapes` (the analysis' Activity) lets broadcasting rules skip
    `unbroadcast` where an argument provably has the result's shape.
    """
    rule = p.rule
    mapping: Dict[str, ast.expr] = {"g": p.g, "ans": p.ans}
    given = set(p.bound)
    for param in rule.params:
        if param in p.bound:
            mapping[param] = p.bound[param]
        else:
            default = rule.signature.parameters[param].default
            kind = rule.signature.parameters[param].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                default = ()
            mapping[param] = constant(None if default is inspect.Parameter.empty else default)
    mapping["np"] = name_node(np_name)
    drop = set(rule.params) - given
    out: List[ast.stmt] = []
    local: Dict[str, ast.expr] = {}
    for stmt in rule.prelude:
        for sub in name_nodes(stmt):
            if sub.ctx.__class__ is ast.Store and sub.id not in local:
                local[sub.id] = name_node(names.fresh(sub.id))
    full = dict(mapping, **local)
    local_names = {v.id for v in local.values()}
    needed_prelude = False
    parts: Dict[str, ast.expr] = {}
    for key in p.wanted:
        param = key.split("[")[0]
        if "[" in key and param in rule.per_item:
            index = int(key.split("[")[1].rstrip("]"))
            parts[key] = substitute(rule.per_item[param], dict(full, item=constant(index)),
                                    drop, HELPERS)
            param = key
        elif param not in parts:
            parts[param] = substitute(rule.grads[param], full, drop, HELPERS)
        if local_names and any(n.id in local_names for n in name_nodes(parts[param])):
            needed_prelude = True
    if needed_prelude:
        out += [substitute(s, full, drop, HELPERS) for s in rule.prelude]
    sequences: Dict[str, str] = {}
    placed: Set[str] = set()   # params whose expression is in the output already
    # A call with a math twin comes from the template (the arguments are atoms).
    twins = shapes is not None and (
        not rule.numpy_calls.isdisjoint(_MATH) or
        any(v.__class__ not in (ast.Name, ast.Constant) for v in p.bound.values()))

    def place(param: str) -> ast.expr:   # (a second use gets a copy: no shared nodes)
        if param in placed:
            return clone(parts[param])
        placed.add(param)
        return parts[param]
    for key, target in p.wanted.items():
        param = key.split("[")[0]
        if "[" in key and key in parts:      # one item's own template
            expr = place(key)
        elif "[" in key:
            if param not in sequences:
                sequences[param] = names.fresh(f"{param}_bar_parts")
                out.append(assign_node(sequences[param], place(param)))
            index = int(key.split("[")[1].rstrip("]"))
            expr = ast.Subscript(value=name_node(sequences[param]), slice=ast.Constant(value=index),
                                 ctx=ast.Load())
        elif rule.broadcast and not _has_result_shape(p, param, shapes):
            expr = _unbroadcast(place(param), clone(p.bound[param]))
        else:
            expr = place(param)
        if twins:
            expr = _scalar_math(expr, np_name, shapes)
        out.append(assign_node(target, expr))
    return out


def _unbroadcast(cotangent: ast.expr, like: ast.expr) -> ast.expr:
    """`unbroadcast(cotangent, like)`, a minus sign taken out of the sum (`x - y`'s
    `-unbroadcast(g, y)`): negating the summed cotangent, not the broadcast one,
    gives the same numbers with one pass over the large array fewer."""
    negated = isinstance(cotangent, ast.UnaryOp) and isinstance(cotangent.op, ast.USub)
    call = ast.Call(func=helper("unbroadcast"),
                    args=[cotangent.operand if negated else cotangent, like], keywords=[])
    return ast.UnaryOp(op=ast.USub(), operand=call) if negated else call


def _has_result_shape(p: RuleVjp, param: str, shapes) -> bool:
    """Whether the argument bound to `param` of a broadcasting rule provably has
    the result's shape, so `unbroadcast` of its cotangent would do nothing: the
    analysis says so, or every other argument is a number (`v * a - 0.1`: a 0-d
    operand never widens the result). Skipping it also spares the forward from
    keeping the argument alive just to tell its shape."""
    if shapes is None:
        return False
    if isinstance(p.ans, ast.Name) and shapes.same_shape(p.bound[param], p.ans):
        return True

    def number(node: ast.expr) -> bool:  # 0.1, -1.0, or a name the analysis knows is 0-d
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            node = node.operand
        return shapes.shape_of(node) == SCALAR or \
            (isinstance(node, ast.Name) and shapes.is_number(node.id))
    return all(number(value) for other, value in p.bound.items() if other != param)


# NumPy functions with a twin on Python numbers (runtime/scalar_math.py), by NumPy's name,
# and the name generated code reads that module by.
_MATH = {twin.__name__: name for name, twin in scalar_math.NUMPY_TWINS.items()}
_SCALAR_MATH = "_s2s_scalar_math"


def _scalar_math(expr: ast.expr, np_name: str, shapes) -> ast.expr:
    """In a gradient template, np.cos(x) on a value known to be a Python number
    becomes _s2s_scalar_math.cos(x): a Python float instead of a NumPy scalar, ten
    times cheaper (math's function, NumPy's value where math's raises: at inf, say).
    (Only in the adjoint: the forward computes what the user wrote.)"""
    for node in walk_values(expr):   # (most templates have no such call: nothing to rebuild)
        if isinstance(node, ast.Call) and _math_twin(node, np_name, shapes, SCALAR):
            return _MathSwap(np_name, shapes, SCALAR).visit(expr)
    return expr


def numpy_on_numbers(fdef: ast.FunctionDef, np_name: str, shapes, scalar) -> None:
    """In a forward: np.sin(x) (a function with a twin on Python numbers) of a value
    known to be a number becomes _s2s_on_number(np.sin, x): NumPy's value, as a
    Python float where x is one (runtime.scalar_math.on_number), so that the
    arithmetic after it stays Python's and fast; every value is the user's own."""
    for node in ast.walk(fdef):
        if isinstance(node, ast.Call) and _math_twin(node, np_name, shapes, scalar):
            node.args = [node.func, node.args[0]]
            node.func = helper("on_number")


def _math_twin(node: ast.Call, np_name: str, shapes, scalar) -> bool:
    func = node.func
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
        func.value.id == np_name and func.attr in _MATH and \
        len(node.args) == 1 and not node.keywords and \
        isinstance(node.args[0], ast.Name) and shapes.shapes.get(node.args[0].id) == scalar


class _MathSwap(ast.NodeTransformer):
    def __init__(self, np_name: str, shapes, scalar):
        self.np_name, self.shapes, self.scalar = np_name, shapes, scalar

    def visit_Call(self, node):
        self.generic_visit(node)
        if _math_twin(node, self.np_name, self.shapes, self.scalar):
            node.func = ast.Attribute(value=name_node(_SCALAR_MATH), attr=_MATH[node.func.attr],
                                      ctx=ast.Load())
        return node


def expand_function(kind: str, site: FunctionSite, payload, names: NameRegistry,
                    np_name: str) -> List[ast.stmt]:
    if kind == "forward":
        out = [clone(s) for s in site.forward_body]
        if not site.inlined:
            out.insert(0, comment(f"{site.cls.__name__}.apply: forward called, not inlined "
                                   f"({site.reason})"))
        return out
    gs, wanted = payload
    out: List[ast.stmt] = []
    n_in = len(site.arg_atoms)
    if not site.inlined:
        call = ast.Call(func=ast.Attribute(value=copy.deepcopy(site.cls_expr),
                                           attr=site.vjp_name, ctx=ast.Load()),
                        args=[name_node(site.slot_names[0])] + list(gs), keywords=[])
        grads = names.fresh(f"{site.cls.__name__}_grads")
        out.append(comment(f"{site.cls.__name__}.apply: {site.vjp_name} called, not inlined"))
        out.append(assign_node(grads, ast.Call(func=helper("check_count"), args=[
            call, ast.Constant(value=n_in),
            ast.Constant(value=f"{site.cls.__name__}.{site.vjp_name}")], keywords=[])))
        elts = [ast.Subscript(value=name_node(grads), slice=ast.Constant(value=i), ctx=ast.Load())
                for i in range(n_in)]
    else:
        mapping, own = _own_gradients(site.vjp_body,
                                      dict(zip(site.vjp_grad_names, gs)), names)
        out += own
        out += [substitute(s, mapping) for s in site.vjp_body]
        result = substitute(site.vjp_result, mapping)
        elts = result_elements(result, n_in, site)
        if elts is None:
            grads = names.fresh(f"{site.cls.__name__}_grads")
            out.append(assign_node(grads, ast.Call(func=helper("check_count"), args=[
                result, ast.Constant(value=n_in),
                ast.Constant(value=f"{site.cls.__name__}.{site.vjp_name}")], keywords=[])))
            elts = [ast.Subscript(value=name_node(grads), slice=ast.Constant(value=i),
                                  ctx=ast.Load()) for i in range(n_in)]
    for i, target in sorted(wanted.items()):
        value = elts[i]
        if i in site.maybe_none:
            value = ast.Call(func=helper("none_to_zero"),
                             args=[value, copy.deepcopy(site.arg_atoms[i])], keywords=[])
        # A vjp may return a gradient of the broadcast shape (`g * a` for an input b
        # that broadcast against a): summed down to the input's shape, as PyTorch's
        # engine does, before it meets any other rule.
        out.append(assign_node(target, _unbroadcast(copy.deepcopy(value),
                                                    _input_shape_witness(site, i))))
    return out


def _input_shape_witness(site: FunctionSite, i: int) -> ast.expr:
    """What tells the shape of the site's i-th input: the value forward saved of it as
    it is (`ctx.save_for_backward(x)`) where the vjp reads that anyway, so the
    adjoint keeps nothing more; else the argument itself."""
    atom = site.arg_atoms[i]
    if site.inlined and isinstance(atom, ast.Name):
        read = {n.id for s in site.vjp_body + [site.vjp_result] for n in ast.walk(s)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for s in site.forward_body:
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                    isinstance(s.targets[0], ast.Name) and s.targets[0].id in read and \
                    s.targets[0].id in site.slot_names and _is_the_name(s.value, atom.id):
                return name_node(s.targets[0].id)
    return copy.deepcopy(atom)


def _is_the_name(value: ast.expr, name: str) -> bool:
    """value is `name`, or forward's snapshot of it (a copy, of the same shape)."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
            value.func.id == "_s2s_snapshot" and len(value.args) == 1:
        value = value.args[0]
    return isinstance(value, ast.Name) and value.id == name


def _own_gradients(body: List[ast.stmt], mapping: Dict[str, ast.expr], names: NameRegistry):
    """(mapping, statements): a vjp that assigns to its gradient parameter (`g = g * d`
    in a loop) works on a local of its own, bound to the adjoint's cotangent, never on
    the adjoint's name; a copy of it where the vjp writes into it (`g *= d`, `g[0] =
    0`): the adjoint's array may be read again."""
    stored: Set[str] = set()
    written: Set[str] = set()
    for s in body:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                stored.add(n.id)
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                written.add(n.target.id)
            elif isinstance(n, ast.Subscript) and not isinstance(n.ctx, ast.Load):
                written |= {b.id for b in ast.walk(n.value) if isinstance(b, ast.Name)}
    out: List[ast.stmt] = []
    for param in [p for p in mapping if p in stored | written]:
        local = names.fresh(param)
        value = mapping[param]
        if param in written:
            value = ast.Call(func=helper("copy_value"), args=[value], keywords=[])
        out.append(assign_node(local, value))
        mapping[param] = name_node(local)
    return mapping, out


# -- the pass ---------------------------------------------------------------------
def inline(transformed) -> Any:
    """Expand every placeholder in the forward and adjoint (in place; returns it)."""
    np_name = numpy_alias(transformed.nf)
    transformed.np_name = np_name
    bindings: Dict[str, Any] = getattr(transformed, "bindings", {})
    bindings.update(getattr(transformed.nf, "bindings", {}))
    for fdef in (transformed.forward, transformed.adjoint):
        fdef.body = _expand_block(fdef.body, transformed.nf.facts,
                                  transformed.names, np_name, bindings,
                                  transformed.activity)
    transformed.bindings = bindings
    return transformed


def _expand_block(stmts, facts, names, np_name, bindings, shapes) -> List[ast.stmt]:
    out: List[ast.stmt] = []
    for s in stmts:
        payload = facts.expansions.get(s)
        if isinstance(payload, RuleVjp):
            if payload.rule.tolerance is not None:   # (a numerical method's derivatives)
                facts.tolerance = max(facts.tolerance or 0.0, payload.rule.tolerance)
            new = expand_rule(payload, names, np_name, shapes)
        elif isinstance(payload, tuple):
            kind, site = payload[0], payload[1]
            bindings.update(site.bindings)
            new = expand_function(kind, site, payload[2:], names, np_name)
        else:
            for attr in ("body", "orelse"):
                if hasattr(s, attr) and isinstance(getattr(s, attr), list):
                    setattr(s, attr, _expand_block(getattr(s, attr), facts, names,
                                                   np_name, bindings, shapes))
            out.append(s)
            continue
        for n in new:
            copy_location(n, s)
            facts.note_origin(n, facts.origin_of(s))
        out.extend(new)
    return out

