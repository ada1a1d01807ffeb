"""Forward mode — the tangent (JVP) transform.

From the same normal form and activity analysis as the reverse transform,
this pass writes one plain NumPy function that runs the user's statements and,
next to each, the statement that computes its tangent:

    def f_jvp(x, y, x_dot):
        # line 4: z = np.sin(x) * y
        sin_x = np.sin(x)
        sin_x_dot = x_dot * np.cos(x)
        z = sin_x * y
        z_dot = sin_x_dot * y
        ...
        return result, result_dot

Tangents flow forward alongside the values, so control flow is the easy
direction: branches and loops are kept as they are, a tangent that is zero on
one path and not on another is materialised where the paths join (or where a
loop goes round again), `x[i] = v` becomes `x_dot[i] = v_dot`, lists carry
lists of tangents, calls to other user functions call those functions' own
`_jvp` functions, and `Function.apply` inlines the class's `jvp` (or derives
it from `vjp`). Symbolic zeros: a tangent nothing has made nonzero yet has no
variable and costs nothing.

The tangent rules are `s2sgrad/rules/jvp_rules.py`; a call without one raises
TransformError at the user's line, never a silent zero.

A tangent is written in place only when this code owns it (it made it, and
nothing read it since); otherwise it is copied first (`_s2s_with_item`,
`_s2s_push`), so a tangent shared with another variable or with the caller is
never changed behind their back.
"""
from __future__ import annotations

import ast
import copy
import inspect
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..errors import TransformError, deliberate, error_at
from ..rules import jvp_rules, registry
from ..runtime import HELPERS
from . import reentry, sites
from .analyze import Activity, call_write_guards, iter_statements
from .loader import Emitted, load
from .marks import comment, line_comment
from .names import NameRegistry, names_in
from .normalize import NormalForm
from .ops import UFUNC_AT_SIGNS, Op, describe, ufunc_at_kind
from .optimize import eliminate_dead, fold_block, fwd_params, propagate_copies, tidy
from .parse import ParsedFunction
from .sites import _assign, _name, _targets
from .transform import field_index

_HINT_RULE = ("Use reverse mode (s2sgrad.grad / functional.vjp) for this function, or "
              "register a JVP with s2sgrad.rules.jvp_rules.defjvp.")


def any_live(struct: Any) -> bool:
    """Can any part of a value with this liveness structure be nonzero?"""
    if isinstance(struct, tuple):
        return any(any_live(s) for s in struct)
    return bool(struct)


def _merge(a: Any, b: Any) -> Any:
    """The liveness structure that covers both (elementwise or)."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(_merge(x, y) for x, y in zip(a, b))
    return any_live(a) or any_live(b)


class _Peephole(ast.NodeTransformer):
    """`a + -b` -> `a - b` (what adding a negated contribution leaves behind)."""

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Add) and isinstance(node.right, ast.UnaryOp) and \
                isinstance(node.right.op, ast.USub):
            return ast.copy_location(ast.BinOp(left=node.left, op=ast.Sub(),
                                               right=node.right.operand), node)
        return node


def _optimize(fdef: ast.FunctionDef, nf: NormalForm, t: "_Tangent") -> None:
    prune_zeros(fdef)
    fdef.body = [_Peephole().visit(s) for s in fdef.body]
    fdef.body = fold_block(fdef.body)
    propagate_copies(fdef, set(nf.resolver.locals))
    eliminate_dead(fdef, keep=fwd_params(fdef))
    fdef.body = tidy(fdef.body)


# -- pruning materialised zeros nobody reads ----------------------------------------------------
def prune_zeros(fdef: ast.FunctionDef) -> None:
    """Remove `v_dot = _s2s_zero_tangent(v)` (and `v = None` inits) whose variable is
    dead afterwards: joins materialise every tangent that is live on one side, but
    only the ones read later need a value."""
    while True:
        record: Dict[int, Set[str]] = {}
        _live(fdef.body, set(), record, None)
        dropped = []
        fdef.body = _filter(fdef.body, lambda s, record=record, dropped=dropped:
                            _keep(s, record, dropped))
        if not dropped:
            return


def _keep(s, record, dropped) -> bool:
    if getattr(s, "s2s_materialize", False) and isinstance(s, ast.Assign):
        target = s.targets[0].id
        if target not in record.get(id(s), {target}):
            dropped.append(s)
            return False
    return True


def _filter(stmts, keep):
    out = []
    for s in stmts:
        if not keep(s):
            continue
        for attr in ("body", "orelse"):
            inner = getattr(s, attr, None)
            if isinstance(inner, list) and not isinstance(s, ast.Expr):
                setattr(s, attr, _filter(inner, keep) or ([ast.Pass()] if attr == "body"
                                                          else []))
        out.append(s)
    return out


def _loads(node) -> Set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stores(node) -> Set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, (ast.Store, ast.Del))}


def _live(stmts, live_out: Set[str], record, loop) -> Set[str]:
    """Backward liveness over structured code with break/continue (loop = (live at
    the loop's exit, live at its head)); records the live set after each statement."""
    live = set(live_out)
    for s in reversed(stmts):
        record[id(s)] = set(live)
        if isinstance(s, ast.Break):
            live = set(loop[0]) if loop else set(live)
        elif isinstance(s, ast.Continue):
            live = set(loop[1]) if loop else set(live)
        elif isinstance(s, ast.Return):
            live = _loads(s)
        elif isinstance(s, ast.If):
            live = _live(s.body, live, record, loop) | _live(s.orelse, live, record, loop) | \
                _loads(s.test)
        elif isinstance(s, (ast.For, ast.While)):
            header = _loads(s.iter if isinstance(s, ast.For) else s.test)
            after = set(live)
            head = after | header
            while True:
                body_in = _live(s.body, head, record, (after, head))
                if isinstance(s, ast.For):
                    body_in -= _stores(s.target)
                new_head = after | body_in | header
                if new_head == head:
                    break
                head = new_head
            live = head
        else:
            used = _loads(s)
            if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
                used.add(s.target.id)
            stored = _stores(s)
            if isinstance(s, ast.Assign) and not all(isinstance(t, (ast.Name, ast.Tuple))
                                                     for t in s.targets):
                stored = set()        # x[i] = v writes into x: x stays live
            live = (live - stored) | used
    return live


# -- small AST helpers ----------------------------------------------------------------------
def _helper(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=_name("_s2s_" + name), args=list(args), keywords=[])


def _none() -> ast.Constant:
    return ast.Constant(value=None)


def _index_expr(index: ast.expr) -> ast.expr:
    """The index of `x[...]` as an ordinary expression (slices become slice())."""
    if isinstance(index, ast.Slice):
        parts = [index.lower, index.upper, index.step]
        args = [p if p is not None else ast.Constant(value=None) for p in parts]
        if isinstance(args[2], ast.Constant) and args[2].value is None:
            args.pop()
        return ast.Call(func=_name("slice"), args=args, keywords=[])
    if isinstance(index, ast.Tuple):
        return ast.Tuple(elts=[_index_expr(e) for e in index.elts], ctx=ast.Load())
    return copy.deepcopy(index)


class _Replace(ast.NodeTransformer):
    """Replace given nodes (by identity) with new expressions."""

    def __init__(self, mapping: Dict[int, ast.expr]):
        self.mapping = mapping

    def visit(self, node):
        new = self.mapping.get(id(node))
        if new is not None:
            return copy.deepcopy(new)
        return super().visit(node)


def _replace(expr: ast.expr, mapping: Dict[int, ast.expr]) -> ast.expr:
    """A copy of `expr` with the nodes in `mapping` (keyed by id) replaced."""
    # deepcopy would change the ids: replace on the original, in a shallow rebuild.
    return _rebuild(expr, mapping)


def _rebuild(node, mapping):
    new = mapping.get(id(node))
    if new is not None:
        return copy.deepcopy(new)
    if not isinstance(node, ast.AST):
        return node
    fields = {}
    for name, value in ast.iter_fields(node):
        if isinstance(value, list):
            fields[name] = [_rebuild(v, mapping) for v in value]
        else:
            fields[name] = _rebuild(value, mapping)
    out = type(node)(**fields)
    ast.copy_location(out, node)
    for attr in ("s2s_callee", "s2s_method", "s2s_static", "s2s_opaque"):
        if hasattr(node, attr):
            setattr(out, attr, getattr(node, attr))
    return out


_FRESH_HELPERS = {"_s2s_zero_tangent", "_s2s_with_item", "_s2s_push", "_s2s_drop_last",
                  "_s2s_copy_value", "_s2s_snapshot", "_s2s_scatter_add", "_s2s_with_zeroed",
                  "_s2s_zeros_like"}


def _is_fresh(expr: ast.expr) -> bool:
    """Does evaluating `expr` always give a new object (never one it read)?"""
    if isinstance(expr, (ast.BinOp, ast.UnaryOp)):
        return True
    if isinstance(expr, (ast.List, ast.Tuple)):
        return False
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id in _FRESH_HELPERS:
            return True
        callee = getattr(expr, "s2s_callee", None)
        if callee is not None:
            if registry.is_constructor(callee):
                return True
            rule = registry.lookup_function(callee)
            return bool(rule is not None and not rule.view and not rule.outputs)
    return False


# -- Function.apply in forward mode ------------------------------------------------------------
@dataclass
class _FunctionSite:
    cls: type
    arg_atoms: List[ast.expr]
    out_names: List[str]
    needs: Tuple[bool, ...]
    inlined: bool = True
    reason: str = ""
    forward_body: List[ast.stmt] = field(default_factory=list)
    ctx_name: Optional[str] = None            # the Context object when not inlined
    jvp_body: Optional[List[ast.stmt]] = None  # inlined jvp, grad parameters mapped
    jvp_result: Optional[ast.expr] = None
    jvp_grads: List[str] = field(default_factory=list)
    slot_values: List[str] = field(default_factory=list)   # saved values and ctx attrs
    derived: Optional[Tuple[Any, List[str], int]] = None   # (vjp as a function, slots, n_out)
    derived_slots: Tuple[Dict[str, str], List[str]] = field(default_factory=lambda: ({}, []))
    cls_expr: Optional[ast.expr] = None
    foreign: Dict[str, ast.expr] = field(default_factory=dict)
    bindings: Dict[str, Any] = field(default_factory=dict)


def _forward_site(cls, call: ast.Call, out_names, needs, names: NameRegistry, nf) -> _FunctionSite:
    site = _FunctionSite(cls=cls, arg_atoms=list(call.args), out_names=list(out_names),
                         needs=needs, cls_expr=copy.deepcopy(call.func.value))
    if call.keywords:
        return _fallback(site, names, "apply() was called with keyword arguments")
    try:
        _inline_forward(site, cls, names, nf)
    except sites.NotInlinable as exc:
        return _fallback(site, names, str(exc))
    return site


def _fallback(site: _FunctionSite, names: NameRegistry, reason: str) -> _FunctionSite:
    site.inlined = False
    site.reason = reason
    ctx = names.fresh(f"{site.cls.__name__}_ctx")
    site.ctx_name = ctx
    site.forward_body = [
        _assign(ctx, ast.Call(func=_name("_s2s_Context"),
                              args=[sites._constant(tuple(site.needs))], keywords=[])),
        _assign(_targets(site.out_names), ast.Call(
            func=ast.Attribute(value=copy.deepcopy(site.cls_expr), attr="forward",
                               ctx=ast.Load()),
            args=[_name(ctx)] + copy.deepcopy(site.arg_atoms), keywords=[])),
    ]
    return site


def _inline_forward(site: _FunctionSite, cls, names: NameRegistry, nf) -> None:
    """forward's body with ctx turned into variables; then the jvp (or the vjp as a
    function, for a derived JVP)."""
    ctx, body, result, mapping, out = sites.bind_forward(site, cls, names, nf)
    slots: Dict[str, str] = {}
    saved: List[str] = []
    saved_fwd: List[str] = []
    for s in body:
        out += _forward_statement(s, ctx, mapping, slots, saved, saved_fwd, site, names)
    rewrite = sites._CtxRewriter(ctx, slots, saved, site.needs, "forward")
    result = rewrite.visit(sites.substitute(result, mapping))
    if len(site.out_names) > 1 and isinstance(result, ast.Tuple) and \
            len(result.elts) == len(site.out_names):
        out += [_assign(o, e) for o, e in zip(site.out_names, result.elts)]
    else:
        out.append(_assign(_targets(site.out_names), result))
    site.forward_body = out
    jvp_fn = cls.jvp_method()
    if jvp_fn is not None:
        _inline_jvp(site, cls, jvp_fn, slots, saved_fwd or saved, names, nf)
    else:
        site.slot_values = list(dict.fromkeys(saved + list(slots.values())))
        site.derived_slots = (slots, saved)


def _forward_statement(s, ctx, mapping, slots, saved, saved_fwd, site, names) -> List[ast.stmt]:
    rewrite = sites._CtxRewriter(ctx, slots, saved, site.needs, "forward")
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and \
            isinstance(s.value.func, ast.Attribute) and \
            isinstance(s.value.func.value, ast.Name) and s.value.func.value.id == ctx:
        method = s.value.func.attr
        if method in ("save_for_backward", "save_for_forward"):
            target = saved if method == "save_for_backward" else saved_fwd
            out = []
            target.clear()
            for arg in s.value.args:
                value = rewrite.visit(sites.substitute(arg, mapping))
                stem = arg.id if isinstance(arg, ast.Name) else "saved"
                slot = names.fresh(f"{stem}_saved")
                out.append(_assign(slot, value))
                target.append(slot)
            return out
        if method == "mark_non_differentiable":
            return []
        raise sites.NotInlinable(f"forward calls ctx.{method}()")
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
            isinstance(s.targets[0], ast.Attribute) and \
            isinstance(s.targets[0].value, ast.Name) and s.targets[0].value.id == ctx:
        attr = s.targets[0].attr
        if attr in ("saved_tensors", "needs_input_grad"):
            raise sites.NotInlinable(f"forward assigns ctx.{attr}")
        slot = slots.get(attr) or names.fresh(attr)
        value = rewrite.visit(sites.substitute(s.value, mapping))
        slots[attr] = slot
        return [_assign(slot, value)]
    if isinstance(s, (ast.If, ast.For, ast.While)):
        for sub in ast.walk(s):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and \
                    sub.value.id == ctx and sub.attr not in ("needs_input_grad",):
                raise sites.NotInlinable("forward uses ctx inside a branch or loop")
    return [rewrite.visit(sites.substitute(s, mapping))]


def _inline_jvp(site, cls, jvp_fn, slots, saved, names, nf) -> None:
    parsed = sites._parse_method(jvp_fn, cls, "jvp")
    site.bindings.update(sites._foreign_globals(parsed, nf, names, site))
    params = [a.arg for a in parsed.node.args.posonlyargs + parsed.node.args.args]
    if parsed.node.args.vararg or parsed.node.args.kwarg:
        raise sites.NotInlinable("jvp takes *args")
    ctx, *grads = params
    if len(grads) != len(site.arg_atoms):
        raise deliberate(TypeError(f"{cls.__name__}.jvp takes {len(grads)} tangent(s) but "
                                   f"{cls.__name__}.forward takes {len(site.arg_atoms)} "
                                   f"input(s)"))
    body, result = sites._single_return(
        [s for s in parsed.node.body if not sites._is_docstring(s)], "jvp")
    local = sites._local_names(parsed.node) - {ctx}
    mapping: Dict[str, ast.expr] = {}
    for n in sorted(local | set(grads)):
        mapping[n] = _name(names.fresh(n))
    mapping.update(site.foreign)
    rewrite = sites._CtxRewriter(ctx, slots, saved, site.needs, "jvp")
    stmts = [rewrite.visit(sites.substitute(s, mapping)) for s in body]
    site.jvp_body = sites._fold(sites._split_tuple_assigns(stmts))
    site.jvp_result = sites._fold_expr(rewrite.visit(sites.substitute(result, mapping)))
    site.jvp_grads = [mapping[g].id for g in grads]
    written = {n.id for s in site.jvp_body for n in ast.walk(s)
               if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if written & set(site.jvp_grads):
        raise sites.NotInlinable("jvp assigns to its tangent argument")


_VJP_FUNCTIONS: Dict[tuple, Tuple[Any, int]] = {}


def vjp_as_function(cls, slots: Dict[str, str], saved: List[str], needs, n_out: int):
    """`cls.vjp` as a plain function of (grad_outputs..., saved values..., ctx attrs...),
    so that reverse mode can differentiate it with respect to its cotangents: the vjp
    is linear in them, and the VJP of that linear map is the JVP (double-vjp)."""
    vjp_fn = cls.vjp_method()
    key = (cls, tuple(sorted(slots)), len(saved), tuple(needs), n_out)
    hit = _VJP_FUNCTIONS.get(key)
    if hit is not None:
        return hit
    what = "vjp" if vjp_fn is getattr(cls, "vjp", None) else "backward"
    parsed = sites._parse_method(vjp_fn, cls, what)
    params = [a.arg for a in parsed.node.args.posonlyargs + parsed.node.args.args]
    if parsed.node.args.vararg or parsed.node.args.kwarg:
        raise sites.NotInlinable(f"{what} takes *args")
    ctx, *grads = params
    if len(grads) != n_out:
        raise sites.NotInlinable(f"{what} takes {len(grads)} gradient(s) for {n_out} output(s)")
    taken = names_in(parsed.node)
    reg = NameRegistry(taken)
    saved_params = [reg.fresh(f"saved_{i}") for i in range(len(saved))]
    attr_params = {attr: reg.fresh(f"ctx_{attr}") for attr in sorted(slots)}
    body = [s for s in parsed.node.body if not sites._is_docstring(s)]
    rewrite = sites._CtxRewriter(ctx, attr_params, saved_params, tuple(needs), what)
    body = [rewrite.visit(copy.deepcopy(s)) for s in body]
    body = sites._fold(body)
    fdef = ast.FunctionDef(
        name=f"{cls.__name__}_{what}",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in
                                                 grads + saved_params +
                                                 [attr_params[k] for k in sorted(slots)]],
                           vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                           defaults=[]),
        body=body or [ast.Return(value=_none())], decorator_list=[], returns=None,
        type_comment=None)
    source = (f"# s2sgrad: {cls.__name__}.{what} as a function of its cotangents "
              f"(its reverse mode gives {cls.__name__}'s JVP)\n"
              f"{ast.unparse(ast.fix_missing_locations(fdef))}\n")
    filename = f"<s2sgrad {cls.__name__}.{what} as a function #{len(_VJP_FUNCTIONS)}>"
    fn = load(Emitted(source=source, function_names=[fdef.name], filename=filename,
                      globals=getattr(vjp_fn, "__globals__", {}),
                      closure_cells=dict(parsed.closure)))[fdef.name]
    _VJP_FUNCTIONS[key] = (fn, len(grads))
    return fn, len(grads)


# -- the transform -------------------------------------------------------------------------
@dataclass
class _State:
    live: Set[str]
    owned: Set[str]
    defined: Set[str]
    reachable: bool = True
    # Tuple-valued variables whose items' liveness is known: var -> (bool | tuple, ...)
    struct: Dict[str, tuple] = field(default_factory=dict)

    def copy(self) -> "_State":
        return _State(set(self.live), set(self.owned), set(self.defined), self.reachable,
                      dict(self.struct))


def _merge_struct(a: _State, b: _State) -> Dict[str, tuple]:
    out = {}
    for var in set(a.struct) & set(b.struct):
        merged = _merge(a.struct[var], b.struct[var])
        if isinstance(merged, tuple):
            out[var] = merged
    for var in set(a.struct) ^ set(b.struct):
        side = a if var in a.struct else b
        other = b if side is a else a
        if var not in other.live:       # zero on the other side: its structure holds
            out[var] = side.struct[var]
    return out


@dataclass
class _Loop:
    entry: Set[str]                   # live at the loop head
    owned_entry: Set[str]
    exit_live: Set[str] = field(default_factory=set)
    breaks: List[_State] = field(default_factory=list)
    continues: List[_State] = field(default_factory=list)


class _Tangent:
    def __init__(self, nf: NormalForm, activity: Activity, optimize_code: bool = True,
                 structure: Optional[Dict[int, Any]] = None,
                 demand: Optional[Tuple[bool, ...]] = None):
        self.nf = nf
        self.act = activity
        self.parsed: ParsedFunction = nf.parsed
        self.optimize_code = optimize_code
        self.names = nf.names
        self.locals = nf.resolver.locals | nf.names.taken
        self.tan: Dict[str, str] = {}
        self.state = _State(set(), set(), set(nf.all_params))
        self.bindings: Dict[str, Any] = dict(getattr(nf, "bindings", {}))
        self.late: Dict[str, Tuple[Any, Tuple[int, ...], str]] = {}
        self.inits: List[str] = []
        self.last_line: Optional[int] = None
        self.loop: Optional[_Loop] = None
        self.np_name = sites.numpy_alias(nf)
        self.sites: Dict[Any, Any] = {}
        self.compiled: Dict[str, Any] = {}        # callees compiled already, by bound name
        self.not_inlined: List[str] = []
        self.structure = dict(structure or {})
        self.demand = demand
        self.output_live: Any = True
        self.output_varied: Any = True
        self.in_place = self._written_in_place(nf.node.body)
        self.lists = set(nf.lists) | self._appended(nf.node.body)

    # -- names, errors, state --------------------------------------------------------------
    def err(self, node, message, hint=None) -> TransformError:
        return error_at(node, message, self.parsed, hint)

    def dot(self, var: str) -> str:
        if var not in self.tan:
            self.tan[var] = self.names.fresh(f"{var}_dot")
        return self.tan[var]

    def is_live(self, var: str) -> bool:
        return var in self.state.live

    def live_atom(self, atom) -> bool:
        return isinstance(atom, ast.Name) and atom.id in self.state.live

    def zero_of(self, atom: ast.expr) -> ast.expr:
        if isinstance(atom, ast.Constant):
            if isinstance(atom.value, (int, float)) and not isinstance(atom.value, bool):
                return ast.Constant(value=0.0)
            if atom.value is None or isinstance(atom.value, (str, bool)):
                return _none()
        return _helper("zero_tangent", copy.deepcopy(atom))

    def tangent_of(self, atom: ast.expr) -> ast.expr:
        """The tangent of an atom: its variable when live, else an explicit zero."""
        if self.live_atom(atom):
            return _name(self.dot(atom.id))
        if isinstance(atom, (ast.Tuple, ast.List)):
            return type(atom)(elts=[self.tangent_of(e) for e in atom.elts], ctx=ast.Load())
        return self.zero_of(atom)

    def read(self, atoms: Sequence[ast.expr], fresh: bool) -> None:
        """Tangents read into something that may refer to them lose their ownership."""
        if fresh:
            return
        for atom in atoms:
            for sub in ast.walk(atom):
                if isinstance(sub, ast.Name):
                    self.state.owned.discard(sub.id)

    def set_live(self, var: str, owned: bool, struct: Any = True) -> None:
        """var's tangent may be nonzero from here on (items as in `struct`)."""
        if not any_live(struct):
            self.kill(var)
            return
        self.state.live.add(var)
        if owned:
            self.state.owned.add(var)
        else:
            self.state.owned.discard(var)
        if isinstance(struct, tuple):
            self.state.struct[var] = struct
        else:
            self.state.struct.pop(var, None)

    def kill(self, var: str) -> None:
        self.state.live.discard(var)
        self.state.owned.discard(var)
        self.state.struct.pop(var, None)

    def liveness(self, atom) -> Any:
        """True/False, or the items' liveness of a tuple-valued variable."""
        if not self.live_atom(atom):
            return False
        return self.state.struct.get(atom.id, True)

    def materialize(self, var: str, out: List[ast.stmt],
                    defined: Optional[Set[str]] = None) -> None:
        defined = self.state.defined if defined is None else defined
        if var not in defined and var not in self.inits:
            self.inits.append(var)
        node = _assign(self.dot(var), _helper("zero_tangent", _name(var)))
        node.s2s_materialize = True
        out.append(node)

    def mark_line(self, s, out: List[ast.stmt], force: bool = False) -> None:
        opened = line_comment(s, self.parsed, self.last_line, force)
        if opened is not None:
            self.last_line = opened[0]
            out.append(opened[1])

    def _written_in_place(self, body) -> Set[str]:
        out = set()
        for s, _ in iter_statements(body):
            if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Subscript) and \
                    isinstance(s.targets[0].value, ast.Name):
                out.add(s.targets[0].value.id)
            elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
                out.add(s.target.id)
            elif isinstance(s, (ast.Assign, ast.Expr)):
                op = describe(s, self.locals)
                if op.kind in ("append", "pop"):
                    out.add(op.outputs[-1] if op.kind == "pop" else op.outputs[0])
        return out

    def _appended(self, body) -> Set[str]:
        """Names used as lists (appended to, popped from): their items are not views."""
        out = set()
        for s, _ in iter_statements(body):
            if isinstance(s, (ast.Assign, ast.Expr)):
                op = describe(s, self.locals)
                if op.kind == "append":
                    out.add(op.outputs[0])
                elif op.kind == "pop":
                    out.add(op.outputs[1])
        return out

    # -- probing (loops) -------------------------------------------------------------------
    def _snapshot(self):
        return (set(self.names.taken), dict(self.tan), self.state.copy(), dict(self.bindings),
                dict(self.late), list(self.inits), self.last_line, self.loop,
                dict(self.sites), list(self.not_inlined))

    def _restore(self, snap) -> None:
        (self.names.taken, self.tan, self.state, self.bindings, self.late, self.inits,
         self.last_line, self.loop, self.sites, self.not_inlined) = snap

    # -- driver ------------------------------------------------------------------------------
    def run(self) -> ast.FunctionDef:
        fdef = self.nf.node
        params = self.nf.all_params
        self.own_name = self.names.fresh(f"{self.parsed.name}_jvp")
        tangent_params = []
        for i in self.act.wrt:
            p = params[i]
            tangent_params.append(self.dot(p))
            if p in self.act.active:
                self.set_live(p, owned=False, struct=self.structure.get(i, True))
        body = list(fdef.body)
        out = self.block(body)
        new_args = self._arguments(fdef.args, tangent_params)
        inits = []
        for v in self.inits:
            if v not in params:
                node = _assign(v, _none())
                node.s2s_materialize = True
                inits.append(node)
        jvp = ast.FunctionDef(name=self.own_name, args=new_args,
                              body=inits + out, decorator_list=[], returns=None,
                              type_comment=None)
        ast.copy_location(jvp, fdef)
        return jvp

    def _arguments(self, args: ast.arguments, tangent_params: List[str]) -> ast.arguments:
        """Every positional parameter (no defaults: callers pass them all), the tangents,
        then keyword-only parameters with their defaults."""
        positional = [ast.arg(arg=a.arg) for a in args.posonlyargs + args.args]
        tangents = [ast.arg(arg=t) for t in tangent_params]
        fn = self.parsed.fn
        kwdefaults = getattr(fn, "__kwdefaults__", None) or {}
        kw_defaults = []
        for a, default in zip(args.kwonlyargs, args.kw_defaults):
            if default is None:
                kw_defaults.append(None)
            else:
                kw_defaults.append(self._constant(kwdefaults.get(a.arg)))
        return ast.arguments(posonlyargs=[], args=positional + tangents, vararg=None,
                             kwonlyargs=[ast.arg(arg=a.arg) for a in args.kwonlyargs],
                             kw_defaults=kw_defaults, kwarg=None, defaults=[])

    def _constant(self, value) -> ast.expr:
        from .transform import _is_literal
        if _is_literal(value):
            return ast.Constant(value=value) if not isinstance(value, tuple) else \
                ast.parse(repr(value), mode="eval").body
        name = self.names.fresh("_s2s_default")
        self.bindings[name] = value
        return _name(name)

    # -- blocks -----------------------------------------------------------------------------
    def block(self, stmts: Sequence[ast.stmt]) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        for s in stmts:
            if not self.state.reachable:
                break
            if isinstance(s, ast.If):
                out += self.if_(s)
            elif isinstance(s, ast.For):
                out += self.for_(s)
            elif isinstance(s, ast.While):
                out += self.while_(s)
            elif isinstance(s, (ast.Break, ast.Continue)):
                out += self.jump(s)
            elif isinstance(s, ast.Return):
                out += self.return_(s)
            elif isinstance(s, (ast.Assign, ast.AugAssign)):
                out += self.assign(s)
            elif isinstance(s, ast.Expr):
                out += self.expression(s)
            else:
                out.append(s)
        return out

    def if_(self, s: ast.If) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        before = self.state.copy()
        last = self.last_line
        body = self.block(s.body)
        sb = self.state
        self.state, self.last_line = before.copy(), last
        orelse = self.block(s.orelse)
        se = self.state
        self.last_line = None
        if sb.reachable and se.reachable:
            live = sb.live | se.live
            for var in sorted(live - sb.live):
                self.materialize(var, body, sb.defined)
                sb.owned.add(var)
            for var in sorted(live - se.live):
                self.materialize(var, orelse, se.defined)
                se.owned.add(var)
            struct = _merge_struct(sb, se)
            self.state = _State(live, sb.owned & se.owned, sb.defined & se.defined,
                                struct=struct)
        elif sb.reachable:
            self.state = sb
        elif se.reachable:
            self.state = se
        else:
            self.state = _State(before.live, before.owned, before.defined, reachable=False)
        node = ast.If(test=copy.deepcopy(s.test), body=body or [ast.Pass()], orelse=orelse)
        out.append(ast.copy_location(node, s))
        return out

    def jump(self, s) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        loop = self.loop
        if loop is not None:
            if isinstance(s, ast.Break):
                loop.breaks.append(self.state.copy())
                need = loop.exit_live
            else:
                loop.continues.append(self.state.copy())
                need = loop.entry
            for var in sorted(need - self.state.live):
                self.materialize(var, out)
                self.set_live(var, owned=True)
            if isinstance(s, ast.Continue):
                for var in sorted(loop.owned_entry - self.state.owned):
                    out.append(_assign(self.dot(var), _helper("copy_value", _name(self.dot(var)))))
        out.append(s)
        self.state.reachable = False
        return out

    # -- loops --------------------------------------------------------------------------------
    def _loop(self, s, header) -> List[ast.stmt]:
        """Shared by for and while: `header(state)` sets the loop targets' tangents and
        returns (iter expression, target) for a for loop."""
        assigned = self._assigned(s)
        for var in assigned:
            self.state.struct.pop(var, None)
        before = self.state.copy()
        written = {v for v in self.in_place if v in assigned}
        entry = set(before.live)
        for _ in range(50):
            ctx = _Loop(entry=set(entry), owned_entry=set())
            end, ctx = self._probe(s, header, entry, set(), before, ctx)
            more = set(end.live) if end.reachable else set()
            for c in ctx.continues:
                more |= c.live
            if more <= entry:
                break
            entry |= more
        exit_live = set(entry)
        for b in ctx.breaks:
            exit_live |= b.live
        # Ownership at the head: tangents written in place in the body, kept owned.
        owned = set(before.owned) | {v for v in entry - before.live if v in before.defined}
        # (Not those the code may not have defined yet at the head: a copy there would
        # read an unbound name; the body copies them where it writes them.)
        owned |= {v for v in written if v in entry and v in before.defined}
        for _ in range(50):
            ctx = _Loop(entry=set(entry), owned_entry=set(owned), exit_live=set(exit_live))
            end, ctx = self._probe(s, header, entry, owned, before, ctx)
            keep = set(owned)
            if end.reachable:
                keep &= end.owned | (entry - end.live)
            for c in ctx.continues:
                keep &= c.owned | (entry - c.live)
            if keep == owned:
                break
            owned = keep
        out: List[ast.stmt] = []
        for var in sorted(entry - before.live):
            if var in before.defined:
                self.materialize(var, out, before.defined)
        for var in sorted(owned - before.owned):
            if var in before.live:
                out.append(_assign(self.dot(var), _helper("copy_value", _name(self.dot(var)))))
        owned = {v for v in owned if v in before.live or v in before.defined or
                 v not in entry}
        self.state = _State(set(entry), set(owned), set(before.defined),
                            struct=dict(before.struct))
        loop = _Loop(entry=set(entry), owned_entry=set(owned), exit_live=set(exit_live))
        outer, self.loop = self.loop, loop
        self.last_line = None
        head, body_prefix = header(self.state, emit=True)
        body = body_prefix + self.block(s.body)
        if self.state.reachable:
            for var in sorted(entry - self.state.live):
                self.materialize(var, body)
                self.set_live(var, owned=True)
            for var in sorted(owned - self.state.owned):
                if var in self.state.live:
                    body.append(_assign(self.dot(var),
                                        _helper("copy_value", _name(self.dot(var)))))
        self.loop = outer
        exit_owned = set(owned)
        for b in loop.breaks:
            exit_owned &= b.owned
        self.state = _State(exit_live, exit_owned, set(before.defined),
                            struct=dict(before.struct))
        self.last_line = None
        return out, head, body or [ast.Pass()]

    def _probe(self, s, header, entry, owned, before, ctx):
        snap = self._snapshot()
        try:
            self.state = _State(set(entry), set(owned), set(before.defined),
                                struct=dict(before.struct))
            self.loop = ctx
            header(self.state, emit=False)
            self.block(s.body)
            return self.state.copy(), ctx
        finally:
            self._restore(snap)

    @staticmethod
    def _assigned(s) -> Set[str]:
        out = set()
        for sub in ast.walk(s):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                out.add(sub.id)
            elif isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Store) and \
                    isinstance(sub.value, ast.Name):
                out.add(sub.value.id)
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and \
                    isinstance(sub.func.value, ast.Name) and sub.func.attr in ("append", "pop"):
                out.add(sub.func.value.id)
        return out

    def while_(self, s: ast.While) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        self.mark_line(s, out)

        def header(state, emit):
            return None, []
        pre, _, body = self._loop(s, header)
        node = ast.While(test=copy.deepcopy(s.test), body=body, orelse=[])
        return out + pre + [ast.copy_location(node, s)]

    def for_(self, s: ast.For) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        self.mark_line(s, out)
        leaves: List[Tuple[ast.expr, Optional[ast.expr], Optional[ast.expr]]] = []
        _iteration_leaves(s.target, s.iter, leaves)
        result = {}

        def header(state, emit):
            """The loop's iterable and target, zipping in the tangents of live sequences."""
            mapping_iter: Dict[int, ast.expr] = {}
            mapping_target: Dict[int, ast.expr] = {}
            for target, seq, node in leaves:
                names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
                for n in names:
                    state.defined.add(n)
                wanted = any(n in self.act.active for n in names)
                if seq is not None and wanted and isinstance(seq, ast.Name) and \
                        seq.id in state.live:
                    walked = {seq.id} | {src for n, src in _loop_item_sources(
                        self.nf.node.body) if n == seq.id}
                    if any(_writes_items_of(n, s.body) for n in walked):
                        # The loop reads the items live, as they are written; the
                        # zipped tangent would be the one from before the loop.
                        raise self.err(s.iter, f"forward mode cannot follow a loop over "
                                               f"{seq.id!r} that writes into {seq.id!r}",
                                       "Use reverse mode (grad, vjp), or loop over a copy.")
                    seq_dot = _rebuild(node, {id(seq): _name(self.dot(seq.id))})
                    mapping_iter[id(node)] = ast.Call(func=_name("zip"),
                                                      args=[copy.deepcopy(node), seq_dot],
                                                      keywords=[])
                    mapping_target[id(target)] = ast.Tuple(
                        elts=[copy.deepcopy(target), _tangent_target(target, self)],
                        ctx=ast.Store())
                    for n in names:
                        state.live.add(n)
                        state.owned.discard(n)
                        state.struct.pop(n, None)
                    state.owned.discard(seq.id)
                else:
                    for n in names:
                        state.live.discard(n)
                        state.owned.discard(n)
                        state.struct.pop(n, None)
            if emit:
                result["iter"] = _rebuild(s.iter, mapping_iter)
                result["target"] = _rebuild(s.target, mapping_target)
                _store_ctx(result["target"])
            return None, []
        pre, _, body = self._loop(s, header)
        node = ast.For(target=result["target"], iter=result["iter"], body=body, orelse=[],
                       type_comment=None)
        return out + pre + [ast.copy_location(node, s)]

    # -- statements ----------------------------------------------------------------------------
    def expression(self, s: ast.Expr) -> List[ast.stmt]:
        op = describe(s, self.locals)
        if op.kind == "append":
            return self.append(s, op)
        if op.kind == "ufunc_at":
            return self.ufunc_at(s, op)
        return self.write_guards(op) + [s]

    def write_guards(self, op: Op) -> List[ast.stmt]:
        """See transform._Reverse.write_guards: a callee writing into an argument
        array would change a value behind the tangents' back."""
        return [ast.Expr(value=_helper("unshared", _name(arg),
                                       *[ast.Constant(value=f) for f in fields]))
                for arg, fields in call_write_guards(op, self.act.ints, self.locals,
                                                     self.parsed)]

    def ufunc_at(self, s: ast.Expr, op: Op) -> List[ast.stmt]:
        """np.add.at(a, idx, b): a's tangent gets b's added the same way."""
        base = op.outputs[0]
        _, index, value = s.value.args
        out: List[ast.stmt] = [s]
        if base not in self.act.active or not self.live_atom(value):
            return out
        item = self.tangent_of(value)
        if UFUNC_AT_SIGNS[ufunc_at_kind(s.value.s2s_callee)] < 0:
            item = ast.UnaryOp(op=ast.USub(), operand=item)
        self.read([value], fresh=False)
        if self.is_live(base) and base not in self.state.owned:
            out.append(_assign(self.dot(base), _helper(
                "scatter_add", _name(self.dot(base)), copy.deepcopy(index), item)))
            self.state.owned.add(base)
            return out
        self._own(base, out)
        out.append(ast.Expr(value=_helper("add_at", _name(self.dot(base)),
                                          copy.deepcopy(index), item)))
        return out

    def return_(self, s: ast.Return) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        value = s.value
        self.mark_line(s, out)
        if isinstance(value, ast.Tuple):
            wanted = self.demand if self.demand is not None and \
                len(self.demand) == len(value.elts) else (True,) * len(value.elts)
            tangents = [self.tangent_of(e) if w else _none()
                        for e, w in zip(value.elts, wanted)]
            self.output_live = tuple(self.liveness(e) if w else False
                                     for e, w in zip(value.elts, wanted))
            self.output_varied = tuple(isinstance(e, ast.Name) and e.id in self.act.varied
                                       for e in value.elts)
            tangent = ast.Tuple(elts=tangents, ctx=ast.Load())
        elif isinstance(value, ast.List):   # `return [a, b]`: a list of tangents
            tangent = self.tangent_of(value)
            self.output_live = any(any_live(self.liveness(e)) for e in value.elts)
            self.output_varied = any(isinstance(e, ast.Name) and e.id in self.act.varied
                                     for e in value.elts)
        else:
            tangent = self.tangent_of(value)
            self.output_live = self.liveness(value)
            self.output_varied = isinstance(value, ast.Name) and value.id in self.act.varied
        out.append(ast.copy_location(ast.Return(value=ast.Tuple(
            elts=[copy.deepcopy(value), tangent], ctx=ast.Load())), s))
        self.state.reachable = False
        return out

    def assign(self, s) -> List[ast.stmt]:
        op = describe(s, self.locals)
        out: List[ast.stmt] = []
        self.mark_line(s, out)
        if op.kind == "setitem":
            out += self.setitem(s, op)
        elif op.kind == "augassign":
            out += self.augassign(s, op)
        elif op.kind == "augitem":
            raise self.err(s, "an augmented item assignment the compiler did not expand")
        elif op.kind == "pop":
            out += self.pop(s, op)
        elif op.kind == "apply":
            out += self.apply(s, op)
        elif op.kind == "call":
            out += self.write_guards(op)
            out += self.call(s, op)
        else:
            out += self.simple(s, op)
        self.state.defined.update(op.outputs)
        return out

    def _primal(self, s) -> ast.stmt:
        if getattr(s, "s2s_snapshot", False):
            new = copy.copy(s)
            new.value = _helper("snapshot", s.value)
            return new
        return s

    def simple(self, s, op: Op) -> List[ast.stmt]:
        active = [o for o in op.outputs if o in self.act.active]
        kind = op.kind
        if not active or kind not in ("copy", "pack", "getitem", "field", "rule"):
            out = [self._primal(s)]
            for o in op.outputs:
                self.kill(o)
            return out
        inputs_live = [n for n in op.diff_inputs if n in self.state.live]
        if not inputs_live:
            for o in op.outputs:
                self.kill(o)
            return [self._primal(s)]
        snapshot = getattr(s, "s2s_snapshot", False)
        value = s.value
        target = s.targets[0]
        overlap = set(op.outputs) & set(op.diff_inputs + op.other_inputs)
        pre: List[ast.stmt] = []
        post: List[ast.stmt] = []
        primal = self._primal(s)
        ans_names = list(op.outputs)
        if overlap:
            # `h, c = f(h, c)`: the primal goes to temporaries, the tangent reads the
            # old values, then both are assigned.
            temps = [self.names.fresh(f"{o}_new") for o in op.outputs]
            primal = _assign(_targets(temps), primal.value)
            post.append(_assign(_targets(op.outputs), _tuple_or_name(temps)))
            ans_names = temps
        struct: Any = True
        if kind == "copy" and isinstance(value, ast.Call) and \
                getattr(value.func, "id", None) == "_s2s_loop_items":
            expr = _helper("loop_items_tangent", _name(self.dot(inputs_live[0])),
                           _name(inputs_live[0]))
            fresh, stmts = False, []
        elif kind == "copy" and isinstance(value, ast.Call):   # _s2s_record(cls, items)
            expr, fresh = _name(self.dot(inputs_live[0])), False
            struct = self.liveness(_name(inputs_live[0]))
            stmts = []
        elif kind == "copy":
            expr, fresh = _name(self.dot(inputs_live[0])), False
            struct = self.liveness(_name(inputs_live[0]))
            stmts: List[ast.stmt] = []
        elif kind == "pack" and isinstance(value, ast.Dict):
            expr = ast.Dict(keys=copy.deepcopy(value.keys),
                            values=[self.tangent_of(e) for e in value.values])
            fresh, stmts = True, []
        elif kind == "pack":
            expr = type(value)(elts=[self.tangent_of(e) for e in value.elts], ctx=ast.Load())
            fresh, stmts = isinstance(value, ast.List), []
            if isinstance(value, ast.Tuple):
                struct = tuple(self.liveness(e) for e in value.elts)
        elif kind == "field":   # p.W of a namedtuple: the tangent's item of that name
            if not self.live_atom(value.value):
                for o in op.outputs:
                    self.kill(o)
                return [primal] + post
            expr = ast.Subscript(value=_name(self.dot(value.value.id)),
                                 slice=field_index(value), ctx=ast.Load())
            fresh, stmts = False, []
        elif kind == "getitem":
            base = value.value
            if not self.live_atom(base):
                for o in op.outputs:
                    self.kill(o)
                return [primal] + post
            items = self.state.struct.get(base.id)
            index = value.slice
            if items is not None and isinstance(index, ast.Constant) and \
                    isinstance(index.value, int) and -len(items) <= index.value < len(items):
                struct = items[index.value]
                if not any_live(struct):   # an item that is structurally zero
                    for o in op.outputs:
                        self.kill(o)
                    return [primal] + post
            expr = ast.Subscript(value=_name(self.dot(base.id)),
                                 slice=copy.deepcopy(value.slice), ctx=ast.Load())
            protect = snapshot or (base.id in self.in_place and base.id not in self.lists)
            if protect:
                expr = _helper("snapshot", expr)
            fresh, stmts = protect, []
        else:
            ans = _tuple_or_name(ans_names) if len(ans_names) > 1 else _name(ans_names[0])
            stmts, expr = self.rule_tangent(s, op, value, ans)
            if expr is None:
                for o in op.outputs:
                    self.kill(o)
                return [primal] + post
            fresh = _is_fresh(expr)
            if snapshot and not fresh:
                expr, fresh = _helper("snapshot", expr), True
        self.read([_name(n) for n in inputs_live], fresh)
        if isinstance(target, ast.Name):
            tangent_target = _name(self.dot(target.id), True)
        else:
            tangent_target = ast.Tuple(elts=[_name(self.dot(e.id), True) for e in target.elts],
                                       ctx=ast.Store())
        out = pre + [primal] + stmts + [_assign(tangent_target, expr)] + post
        for o in op.outputs:
            if o in self.act.active:
                self.set_live(o, owned=fresh and len(op.outputs) == 1,
                              struct=struct if len(op.outputs) == 1 else True)
            else:
                self.kill(o)
        return out

    # -- rules ------------------------------------------------------------------------------
    def rule_tangent(self, s, op: Op, value: ast.expr, ans: ast.expr
                     ) -> Tuple[List[ast.stmt], Optional[ast.expr]]:
        """The tangent of one call to a table rule: (statements, expression) or (.., None)."""
        rule = op.rule
        jr = jvp_rules.lookup(rule)
        node = getattr(op.call, "func", None) or value
        if jr is None:
            why = jvp_rules.UNSUPPORTED.get(rule.name)
            raise self.err(node, f"s2sgrad has no forward-mode (JVP) rule for {op.label}"
                                 + (f": {why}" if why else ""), _HINT_RULE)
        slots: List[Tuple[str, Optional[int], ast.expr]] = []
        for param in rule.differentiable():
            atom = op.bound.get(param)
            if atom is None:
                continue
            if param in rule.sequence and isinstance(atom, (ast.Tuple, ast.List)):
                for i, e in enumerate(atom.elts):
                    if self.live_atom(e):
                        slots.append((param, i, e))
            elif self.live_atom(atom):
                slots.append((param, None, atom))
        if not slots:
            return [], None
        live_params = []
        for p, _, _ in slots:
            if p not in live_params:
                live_params.append(p)
        stmts: List[ast.stmt] = []
        terms: List[ast.expr] = []
        handled: Set[str] = set()
        for p in live_params:
            refuse = jvp_rules.unsupported_part(rule, p)
            if refuse is not None:
                terms.append(self._expand(rule, op, refuse, ans, stmts, []))
                handled.add(p)
        diff_atoms = {p: op.bound.get(p) for p in rule.differentiable() if p in op.bound}
        if jr.linear and any(p in jr.linear for p in live_params if p not in handled):
            mapping = {}
            for p in jr.linear:
                atom = diff_atoms.get(p)
                if atom is None:
                    continue
                self._tangent_mapping(rule, p, atom, mapping)
            terms.append(_rebuild(value, mapping))
        if jr.multilinear:
            for p, _i, atom in slots:
                if p in handled:
                    continue
                terms.append(_rebuild(value, {id(atom): _name(self.dot(atom.id))}))
        for p in live_params:
            if p in handled or p not in jr.parts:
                continue
            terms.append(self._expand(rule, op, jr.parts[p], ans, stmts,
                                      jr.prelude + jr.part_preludes.get(p, [])))
        if jr.joint is not None and any(p in jr.joint_params for p in live_params
                                        if p not in handled):
            terms.append(self._expand(rule, op, jr.joint, ans, stmts, jr.prelude))
        missing = [p for p in live_params if p not in handled and p not in jr.parts and
                   p not in jr.linear and p not in jr.joint_params and not jr.multilinear]
        if missing:
            raise self.err(node, f"s2sgrad has no forward-mode (JVP) rule for {op.label} with "
                                 f"respect to its argument {missing[0]!r}", _HINT_RULE)
        if not terms:
            return stmts, None
        expr = terms[0]
        for t in terms[1:]:
            if rule.outputs:
                expr = _helper("add", expr, t)
            else:
                expr = ast.BinOp(left=expr, op=ast.Add(), right=t)
        if jr.broadcast and len(op.outputs) == 1 and \
                not self._full_shape(op, jr, live_params, handled, ans):
            expr = _helper("broadcast_tangent", expr, copy.deepcopy(ans))
        if jr.cast == "always" or (jr.cast == "dtype" and "dtype" in op.bound):
            expr = _helper("cast_tangent", expr, copy.deepcopy(ans))
        return stmts, expr

    def _full_shape(self, op: Op, jr, live_params, handled, ans) -> bool:
        """Does the sum of pointwise contributions provably have the result's shape?

        It has the broadcast shape of everything it reads; the result of an
        elementwise function has the broadcast shape of all its arguments. So it
        is enough that the contributions read `ans`, or every argument that is
        not a scalar, or that an operand provably has the result's shape.
        """
        if isinstance(ans, ast.Name):
            for p in live_params:
                atom = op.bound.get(p)
                if isinstance(atom, ast.Name) and self.act.same_shape(atom, ans):
                    return True
        covered: Set[str] = set()
        for p in live_params:
            if p in handled or p not in jr.parts:
                continue
            nodes = [jr.parts[p]] + jr.part_preludes.get(p, []) + jr.prelude
            for node in nodes:
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Name):
                        covered.add(sub.id[:-4] if sub.id.endswith("_dot") else sub.id)
        if "ans" in covered:
            return True
        for param, atom in op.bound.items():
            if param in covered or self._scalar(atom):
                continue
            return False
        return True

    def _scalar(self, atom) -> bool:
        if isinstance(atom, ast.Constant):
            return isinstance(atom.value, (int, float)) and not isinstance(atom.value, bool)
        if isinstance(atom, ast.UnaryOp) and isinstance(atom.operand, ast.Constant):
            return self._scalar(atom.operand)
        if isinstance(atom, ast.Name):
            from .analyze import SCALAR
            return atom.id in self.act.ints or self.act.shape_of(atom) == SCALAR
        return False

    def _tangent_mapping(self, rule, param, atom, mapping: Dict[int, ast.expr]) -> None:
        """Replace a differentiable argument (or each item of a sequence) by its tangent."""
        if param in rule.sequence and isinstance(atom, (ast.Tuple, ast.List)):
            for e in atom.elts:
                mapping[id(e)] = self.tangent_of(e) if not isinstance(e, (ast.Tuple, ast.List)) \
                    else self.zero_of(e)
        else:
            mapping[id(atom)] = self.tangent_of(atom)

    def _expand(self, rule, op: Op, template: ast.expr, ans: ast.expr, out: List[ast.stmt],
                prelude: List[ast.stmt]) -> ast.expr:
        """A JVP template with the call's arguments, tangents and `ans` substituted."""
        mapping: Dict[str, ast.expr] = {"ans": ans}
        given = set(op.bound)
        for param in rule.params:
            if param in op.bound:
                mapping[param] = op.bound[param]
            else:
                parameter = rule.signature.parameters[param]
                default = parameter.default
                if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                    default = ()
                mapping[param] = sites._constant(None if default is inspect.Parameter.empty
                                                  else default)
            mapping[f"{param}_dot"] = self._param_tangent(rule, param, op.bound.get(param))
        for h in HELPERS:
            mapping.setdefault(h, _name("_s2s_" + h))
        mapping["np"] = _name(self.np_name)
        drop = set(rule.params) - given
        local: Dict[str, ast.expr] = {}
        for stmt in prelude:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and \
                        sub.id not in local:
                    local[sub.id] = _name(self.names.fresh(sub.id))
        full = dict(mapping, **local)
        used = {n.id for n in ast.walk(template) if isinstance(n, ast.Name)}
        if used & set(local):
            out += [sites.substitute(p, full, drop) for p in prelude]
        return sites.substitute(template, full, drop)

    def _param_tangent(self, rule, param, atom) -> ast.expr:
        """A parameter's tangent in a template: None when it is not differentiated."""
        if atom is None or param not in rule.grads:
            return _none()
        if param in rule.sequence and isinstance(atom, (ast.Tuple, ast.List)):
            if not any(self.live_atom(e) for e in atom.elts):
                return _none()
            return ast.List(elts=[_name(self.dot(e.id)) if self.live_atom(e) else _none()
                                  for e in atom.elts], ctx=ast.Load())
        if self.live_atom(atom):
            return _name(self.dot(atom.id))
        return _none()

    # -- in-place updates and lists --------------------------------------------------------------
    def _own(self, var: str, out: List[ast.stmt]) -> None:
        """Make var's tangent a private object before it is updated in place."""
        if var not in self.state.live:
            self.materialize(var, out)
            self.set_live(var, owned=True)
        elif var not in self.state.owned:
            out.append(_assign(self.dot(var), _helper("copy_value", _name(self.dot(var)))))
            self.state.owned.add(var)

    def setitem(self, s, op: Op) -> List[ast.stmt]:
        target = s.targets[0]
        base = target.value.id
        value = s.value
        out: List[ast.stmt] = [s]
        if base not in self.act.active:
            return out
        if not self.is_live(base) and not self.live_atom(value):
            return out
        item = self.tangent_of(value)
        if not self.live_atom(value):
            item = ast.Constant(value=0.0) if not isinstance(value, (ast.Tuple, ast.List)) \
                else item
        self.read([value], fresh=False)
        if self.is_live(base) and base not in self.state.owned:
            out.append(_assign(self.dot(base), _helper(
                "with_item", _name(self.dot(base)), _index_expr(target.slice), item)))
            self.state.owned.add(base)
            return out
        self._own(base, out)
        store = ast.Subscript(value=_name(self.dot(base)), slice=copy.deepcopy(target.slice),
                              ctx=ast.Store())
        out.append(ast.Assign(targets=[store], value=item, type_comment=None))
        return out

    def augassign(self, s: ast.AugAssign, op: Op) -> List[ast.stmt]:
        var = s.target.id
        out: List[ast.stmt] = []
        guard = getattr(s, "s2s_guard", None)
        if guard is not None:
            out.append(ast.Expr(value=_helper("unshared", _name(var),
                                              *[ast.Constant(value=g) for g in guard])))
        if var not in self.act.active or not (self.is_live(var) or self.live_atom(s.value)):
            out.append(s)
            if var in self.act.active and not self.is_live(var):
                self.kill(var)
            return out
        rule = op.rule
        if rule is None:
            raise self.err(s, f"s2sgrad has no forward-mode rule for {op.label}", _HINT_RULE)
        # The tangent reads the old value: it is computed before the update.
        old = _name(var)
        rule_op = Op("rule", [var], diff_inputs=op.diff_inputs, rule=rule,
                     bound=dict(zip(rule.params, [old, s.value])), label=op.label)
        value = ast.BinOp(left=old, op=s.op, right=s.value)
        ans_name = self.names.fresh(f"{var}_new")
        stmts, expr = self.rule_tangent(s, rule_op, value, _name(ans_name))
        uses_ans = expr is not None and any(isinstance(n, ast.Name) and n.id == ans_name
                                            for n in ast.walk(ast.Module(
                                                body=stmts + [ast.Expr(value=expr)],
                                                type_ignores=[])))
        if uses_ans:
            out.append(_assign(ans_name, copy.deepcopy(value)))
        new_dot = self.names.fresh(f"{var}_dot_new")
        if expr is None:
            out.append(s)
            self.kill(var)
            return out
        out += stmts + [_assign(new_dot, expr), s, _assign(self.dot(var), _name(new_dot))]
        self.read([s.value, old], fresh=True)
        self.set_live(var, owned=_is_fresh(expr))
        return out

    def append(self, s: ast.Expr, op: Op) -> List[ast.stmt]:
        xs = op.outputs[0]
        item = op.call.args[0]
        out: List[ast.stmt] = []
        if xs in self.act.active and (self.is_live(xs) or self.live_atom(item)):
            tangent = self.tangent_of(item)
            self.read([item], fresh=False)
            if self.is_live(xs) and xs not in self.state.owned:
                out.append(_assign(self.dot(xs), _helper("push", _name(self.dot(xs)), tangent)))
                self.state.owned.add(xs)
            else:
                self._own(xs, out)
                out.append(ast.Expr(value=ast.Call(
                    func=ast.Attribute(value=_name(self.dot(xs)), attr="append",
                                       ctx=ast.Load()), args=[tangent], keywords=[])))
        # The tangent list is made (zeros of xs's items) before xs grows by the item.
        out.append(s)
        return out

    def pop(self, s, op: Op) -> List[ast.stmt]:
        v, xs = op.outputs
        out: List[ast.stmt] = []
        if xs in self.act.active and self.is_live(xs):
            if xs in self.state.owned:
                out.append(_assign(self.dot(v), ast.Call(
                    func=ast.Attribute(value=_name(self.dot(xs)), attr="pop", ctx=ast.Load()),
                    args=[], keywords=[])))
            else:
                out.append(_assign(self.dot(v), _helper("last", _name(self.dot(xs)))))
                out.append(_assign(self.dot(xs), _helper("drop_last", _name(self.dot(xs)))))
                self.state.owned.add(xs)
            self.set_live(v, owned=False)
            if v not in self.act.active:
                self.kill(v)
        else:
            self.kill(v)
        return [s] + out

    # -- calls to other user functions -----------------------------------------------------------
    def call(self, s, op: Op) -> List[ast.stmt]:
        fn = op.callee
        call = op.call
        active = [o for o in op.outputs if o in self.act.active]
        try:
            sig = inspect.signature(fn)
            bound = sig.bind(*call.args, **{k.arg: k.value for k in call.keywords})
        except (TypeError, ValueError) as exc:
            raise self.err(call, f"cannot bind the call to {fn.__name__}: {exc}") from None
        params = list(sig.parameters.values())
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            raise self.err(call, f"cannot differentiate through {fn.__name__}, which takes "
                                 f"*args/**kwargs", "Give the helper explicit parameters.")
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                      p.POSITIONAL_OR_KEYWORD)]
        # Keyword-only parameters come after the positional ones in `wrt` (the
        # callee's all_params): a tangent passed to one is differentiated too.
        atoms = [bound.arguments.get(p.name) for p in params]
        wrt = tuple(i for i, a in enumerate(atoms)
                    if isinstance(a, ast.Name) and a.id in self.act.varied)
        if not active or not any(self.live_atom(atoms[i]) for i in wrt):
            for o in op.outputs:
                self.kill(o)
            return [s]
        args: List[ast.expr] = []
        for p, a in zip(positional, atoms):
            args.append(copy.deepcopy(a) if a is not None else self._constant(p.default))
        tangents = [self.tangent_of(atoms[i]) for i in wrt]
        keywords = [ast.keyword(arg=p.name, value=copy.deepcopy(bound.arguments[p.name]))
                    for p in params if p.kind is p.KEYWORD_ONLY and p.name in bound.arguments]
        self.read([atoms[i] for i in wrt], fresh=False)
        base = fn.__name__ if fn.__name__ != "<lambda>" else "lambda"
        recursive = fn is self.parsed.fn and wrt == tuple(self.act.wrt) and \
            not self.structure and self.demand is None
        # Specialise the callee: which items of tuple arguments carry tangents, and
        # which outputs' tangents this code reads at all.
        structure = tuple((i, self.state.struct[atoms[i].id]) for i in wrt
                          if self.live_atom(atoms[i]) and atoms[i].id in self.state.struct)
        demand = None
        if len(op.outputs) > 1 and not all(o in self.act.active for o in op.outputs):
            demand = tuple(o in self.act.active for o in op.outputs)
        spec = (structure, demand)
        if recursive:
            name = self.own_name          # a recursive call calls this very function
        else:
            key = (id(s), wrt, spec)
            name = self.sites.get(key)
            if name is None:
                name = self.names.fresh(f"{base}_jvp")
                self.sites[key] = name
        live_out: Any = True
        if recursive:
            pass
        elif not reentry.tangent_in_progress(fn, wrt, self.optimize_code, structure, demand):
            callee = reentry.compile_tangent(fn, wrt, self.optimize_code, structure, demand)
            self.bindings[name] = callee.jvp
            self.compiled[name] = callee
            live_out = callee.output_live
        else:
            self.late[name] = (fn, wrt, "jvp", structure, demand)
        outs = op.outputs
        target = s.targets[0]
        primal_target = copy.deepcopy(target)
        if isinstance(target, ast.Name):
            tangent_target: ast.expr = _name(self.dot(target.id), True)
        else:
            tangent_target = ast.Tuple(elts=[_name(self.dot(e.id), True) for e in target.elts],
                                       ctx=ast.Store())
        node = ast.Assign(targets=[ast.Tuple(elts=[primal_target, tangent_target],
                                             ctx=ast.Store())],
                          value=ast.Call(func=_name(name), args=args + tangents,
                                         keywords=keywords), type_comment=None)
        for i, o in enumerate(outs):
            if len(outs) == 1:
                part = live_out
            elif isinstance(live_out, tuple) and len(live_out) == len(outs):
                part = live_out[i]
            else:
                part = any_live(live_out)
            if o in self.act.active:
                self.set_live(o, owned=False, struct=part)
            else:
                self.kill(o)
        return [node]

    # -- Function.apply ------------------------------------------------------------------------
    def apply(self, s, op: Op) -> List[ast.stmt]:
        cls = op.callee
        call = op.call
        site = self.sites.get(id(s))
        if site is None:
            needs = tuple(isinstance(a, ast.Name) and a.id in self.act.varied for a in call.args)
            site = _forward_site(cls, call, op.outputs, needs, self.names, self.nf)
            self.sites[id(s)] = site
            if not site.inlined:
                self.not_inlined.append(f"{cls.__name__}: {site.reason}")
        self.bindings.update(site.bindings)
        out: List[ast.stmt] = []
        if not site.inlined:
            out.append(comment(f"{cls.__name__}.apply: forward called, not inlined "
                               f"({site.reason})"))
        out += [copy.deepcopy(b) for b in site.forward_body]
        active = [o for o in op.outputs if o in self.act.active]
        live_args = [a for a in site.arg_atoms if self.live_atom(a)]
        if not active or not live_args:
            for o in op.outputs:
                self.kill(o)
            return out
        tangents = [self.tangent_of(a) for a in site.arg_atoms]
        self.read(live_args, fresh=False)
        outs = site.out_names
        targets = [self.dot(o) for o in outs]
        if site.jvp_body is not None:
            mapping = {g: t for g, t in zip(site.jvp_grads, tangents)}
            body = [sites.substitute(b, mapping) for b in site.jvp_body]
            result = sites.substitute(site.jvp_result, mapping)
            out += body
            out += self._assign_results(cls, "jvp", result, outs, targets)
        elif not site.inlined and cls.jvp_method() is not None:
            out.append(comment(f"{cls.__name__}.apply: jvp called, not inlined"))
            value = ast.Call(func=_name("_s2s_call_jvp"),
                             args=[copy.deepcopy(site.cls_expr), _name(site.ctx_name)]
                             + tangents, keywords=[])
            out += self._assign_results(cls, "jvp", value, outs, targets)
        else:
            out += self._derived_jvp(s, site, tangents, outs, targets)
        for o in outs:
            if o in self.act.active:
                self.set_live(o, owned=False)
            else:
                self.kill(o)
        return out

    def _assign_results(self, cls, what, result, outs, targets,
                        never_none: bool = False) -> List[ast.stmt]:
        """One tangent per output (a None from a user's jvp is a zero)."""
        out: List[ast.stmt] = []
        if len(outs) == 1:
            elts = [result]
        elif isinstance(result, (ast.Tuple, ast.List)) and len(result.elts) == len(outs):
            elts = list(result.elts)
        else:
            tmp = self.names.fresh(f"{cls.__name__}_tangents")
            out.append(_assign(tmp, _helper("check_tangents", result,
                                            ast.Constant(value=len(outs)),
                                            ast.Constant(value=f"{cls.__name__}.{what}"))))
            elts = [ast.Subscript(value=_name(tmp), slice=ast.Constant(value=i), ctx=ast.Load())
                    for i in range(len(outs))]
        for o, t, e in zip(outs, targets, elts):
            if isinstance(e, ast.Constant) and e.value is None:
                e = _helper("zero_tangent", _name(o))
            elif not never_none and _maybe_none(e):
                e = _helper("none_to_zero_tangent", e, _name(o))
            out.append(_assign(t, e))
        return out

    def _derived_jvp(self, s, site: _FunctionSite, tangents, outs, targets) -> List[ast.stmt]:
        """No jvp: the tangent is the reverse mode of the vjp (linear in its cotangent)
        applied to the input tangents."""
        cls = site.cls
        if not site.inlined:
            raise self.err(s.value if hasattr(s, "value") else s,
                           f"{cls.__name__} has no jvp, and its JVP cannot be derived from its "
                           f"vjp: {site.reason}",
                           f"Define {cls.__name__}.jvp(ctx, *tangents) (PyTorch's name) for "
                           f"forward mode.")
        slots, saved = site.derived_slots
        try:
            fn, n_out = vjp_as_function(cls, slots, saved, site.needs, len(outs))
        except (sites.NotInlinable, TransformError) as exc:
            reason = getattr(exc, "reason", str(exc))
            raise self.err(s.value, f"{cls.__name__} has no jvp, and its JVP cannot be derived "
                                    f"from its vjp: {reason}",
                           f"Define {cls.__name__}.jvp(ctx, *tangents) (PyTorch's name) for "
                           f"forward mode.") from None
        try:
            pair = reentry.compile_pair(fn, tuple(range(n_out)))
        except TransformError as exc:
            raise self.err(s.value, f"{cls.__name__} has no jvp, and its JVP cannot be derived "
                                    f"from its vjp, which s2sgrad cannot differentiate: "
                                    f"{exc.reason}",
                           f"Define {cls.__name__}.jvp(ctx, *tangents) (PyTorch's name) for "
                           f"forward mode.") from None
        stem = f"{cls.__name__}_vjp"
        fwd = self.names.fresh(f"{stem}_forward")
        adj = self.names.fresh(f"{stem}_adjoint")
        res = self.names.fresh(f"{stem}_residuals")
        self.bindings[fwd] = pair.forward
        self.bindings[adj] = pair.adjoint
        self.compiled[fwd] = pair
        out: List[ast.stmt] = [comment(f"{cls.__name__}.apply: no jvp; its tangent is the "
                                       f"reverse mode of {cls.__name__}.vjp (linear in its "
                                       f"cotangent) applied to the input tangents")]
        zeros = [_helper("zero_tangent", _name(o)) for o in outs]
        slot_args = [_name(v) for v in saved] + [_name(slots[k]) for k in sorted(slots)]
        call_fwd = ast.Call(func=_name(fwd), args=zeros + slot_args, keywords=[])
        out.append(_assign(ast.Tuple(elts=[_name("_", True), _name(res, True)],
                                     ctx=ast.Store()), call_fwd))
        n_in = len(site.arg_atoms)
        cot = tangents[0] if n_in == 1 else ast.Tuple(elts=list(tangents), ctx=ast.Load())
        result = ast.Call(func=_name(adj), args=[_name(res), cot], keywords=[])
        out += self._assign_results(cls, "vjp", result, outs, targets, never_none=True)
        return out


def _maybe_none(e: ast.expr) -> bool:
    """Could a jvp's result item be None at run time (so it needs a zero)?"""
    return not isinstance(e, (ast.BinOp, ast.UnaryOp))


def _tuple_or_name(names: Sequence[str]) -> ast.expr:
    if len(names) == 1:
        return _name(names[0])
    return ast.Tuple(elts=[_name(n) for n in names], ctx=ast.Load())


def _store_ctx(node: ast.AST) -> None:
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Name, ast.Tuple, ast.List)):
            sub.ctx = ast.Store()


def _tangent_target(target: ast.expr, t: _Tangent) -> ast.expr:
    if isinstance(target, ast.Name):
        return _name(t.dot(target.id), True)
    return ast.Tuple(elts=[_tangent_target(e, t) for e in target.elts], ctx=ast.Store())


def _loop_item_sources(body: List[ast.stmt]) -> List[Tuple[str, str]]:
    """(n, xs) for every `n = _s2s_loop_items(xs)`: n is xs, walked by a loop."""
    out = []
    for node in ast.walk(ast.Module(body=list(body), type_ignores=[])):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call) \
                and getattr(node.value.func, "id", None) == "_s2s_loop_items" and \
                node.value.args and isinstance(node.value.args[0], ast.Name):
            out.append((node.targets[0].id, node.value.args[0].id))
    return out


def _writes_items_of(name: str, body: List[ast.stmt]) -> bool:
    """Whether statements write into `name`'s items or grow or shrink it in place."""
    for node in ast.walk(ast.Module(body=list(body), type_ignores=[])):
        target = None
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Subscript):
                    target = t.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("append", "extend", "insert", "pop", "remove", "clear"):
            target = node.func.value
        if isinstance(target, ast.Name) and target.id == name:
            return True
    return False


def _iteration_leaves(target, it, out, wrapper=None) -> None:
    """(target, sequence, node) for each loop target: the sequence it walks (None for
    range/enumerate indices) and the iterable node that yields it (the sequence itself,
    or reversed(sequence)), which the tangent code zips with the tangent's."""
    callee = getattr(it, "s2s_callee", None)
    if callee is enumerate and isinstance(target, ast.Tuple) and len(target.elts) == 2:
        out.append((target.elts[0], None, None))
        _iteration_leaves(target.elts[1], it.args[0], out)
    elif callee is zip and isinstance(target, ast.Tuple) and len(target.elts) == len(it.args):
        for t, a in zip(target.elts, it.args):
            _iteration_leaves(t, a, out)
    elif callee is reversed and len(it.args) == 1 and isinstance(it.args[0], ast.Name):
        out.append((target, it.args[0], it))
    elif isinstance(it, ast.Call) or not isinstance(it, ast.Name):
        out.append((target, None, None))
    else:
        out.append((target, it, it))


_ = (types, Callable, List)
