"""Forward mode at `Function.apply`: the class's `jvp` inlined, or its `vjp` read
as a function that reverse mode can differentiate (the JVP is then derived)."""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ...errors import deliberate
from .. import sites
from ..loader import Emitted, load
from ..names import NameRegistry, assign_node, name_node, names_in
from ..normalize.scope import is_docstring
from ..sites import store_targets
from .state import none


# -- Function.apply in forward mode ------------------------------------------------------------
@dataclass
class FunctionSite:
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


def forward_site(cls, call: ast.Call, out_names, needs, names: NameRegistry, nf) -> FunctionSite:
    site = FunctionSite(cls=cls, arg_atoms=list(call.args), out_names=list(out_names),
                         needs=needs, cls_expr=copy.deepcopy(call.func.value))
    if call.keywords:
        return _fallback(site, names, "apply() was called with keyword arguments")
    try:
        _inline_forward(site, cls, names, nf)
    except sites.NotInlinable as exc:
        return _fallback(site, names, str(exc))
    return site


def _fallback(site: FunctionSite, names: NameRegistry, reason: str) -> FunctionSite:
    site.inlined = False
    site.reason = reason
    ctx = names.fresh(f"{site.cls.__name__}_ctx")
    site.ctx_name = ctx
    site.forward_body = [
        assign_node(ctx, ast.Call(func=name_node("_s2s_Context"),
                              args=[sites.constant(tuple(site.needs))], keywords=[])),
        assign_node(store_targets(site.out_names), ast.Call(
            func=ast.Attribute(value=copy.deepcopy(site.cls_expr), attr="forward",
                               ctx=ast.Load()),
            args=[name_node(ctx)] + copy.deepcopy(site.arg_atoms), keywords=[])),
    ]
    return site


def _inline_forward(site: FunctionSite, cls, names: NameRegistry, nf) -> None:
    """forward's body with ctx turned into variables; then the jvp (or the vjp as a
    function, for a derived JVP)."""
    ctx, body, result, mapping, out = sites.bind_forward(site, cls, names, nf)
    slots: Dict[str, str] = {}
    saved: List[str] = []
    saved_fwd: List[str] = []
    for s in body:
        out += sites.forward_statement(s, ctx, mapping, slots, {
            "save_for_backward": saved, "save_for_forward": saved_fwd}, site, names)
    rewrite = sites.CtxRewriter(ctx, slots, saved, site.needs, "forward")
    result = rewrite.visit(sites.substitute(result, mapping))
    if len(site.out_names) > 1 and isinstance(result, ast.Tuple) and \
            len(result.elts) == len(site.out_names):
        out += [assign_node(o, e) for o, e in zip(site.out_names, result.elts)]
    else:
        out.append(assign_node(store_targets(site.out_names), result))
    site.forward_body = out
    jvp_fn = cls.jvp_method()
    if jvp_fn is not None:
        _inline_jvp(site, cls, jvp_fn, slots, saved_fwd or saved, names, nf)
    else:
        site.slot_values = list(dict.fromkeys(saved + list(slots.values())))
        site.derived_slots = (slots, saved)


def _inline_jvp(site, cls, jvp_fn, slots, saved, names, nf) -> None:
    parsed = sites.parse_method(jvp_fn, cls, "jvp")
    site.bindings.update(sites.foreign_globals(parsed, nf, names, site))
    params = [a.arg for a in parsed.node.args.posonlyargs + parsed.node.args.args]
    if parsed.node.args.vararg or parsed.node.args.kwarg:
        raise sites.NotInlinable("jvp takes *args")
    ctx, *grads = params
    if len(grads) != len(site.arg_atoms):
        raise deliberate(TypeError(f"{cls.__name__}.jvp takes {len(grads)} tangent(s) but "
                                   f"{cls.__name__}.forward takes {len(site.arg_atoms)} "
                                   f"input(s)"))
    body, result = sites.single_return(
        [s for s in parsed.node.body if not is_docstring(s)], "jvp")
    local = (sites.local_names(parsed.node) | sites.stored_names(body)) - {ctx}
    mapping: Dict[str, ast.expr] = {}
    for n in sorted(local | set(grads)):
        mapping[n] = name_node(names.fresh(n))
    mapping.update(site.foreign)
    rewrite = sites.CtxRewriter(ctx, slots, saved, site.needs, "jvp")
    stmts = [rewrite.visit(sites.substitute(s, mapping)) for s in body]
    site.jvp_body = sites.fold_statements(sites.split_tuple_assigns(stmts))
    site.jvp_result = sites.fold_expression(rewrite.visit(sites.substitute(result, mapping)))
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
    # (the method itself and its code are part of the key: a vjp replaced on the
    # class, or edited and reloaded, is another function)
    key = (cls, vjp_fn, getattr(vjp_fn, "__code__", None), tuple(sorted(slots)), len(saved),
           tuple(needs), n_out)
    hit = _VJP_FUNCTIONS.get(key)
    if hit is not None:
        return hit
    what = cls.vjp_name()
    parsed = sites.parse_method(vjp_fn, cls, what)
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
    body = [s for s in parsed.node.body if not is_docstring(s)]
    rewrite = sites.CtxRewriter(ctx, attr_params, saved_params, tuple(needs), what)
    body = [rewrite.visit(copy.deepcopy(s)) for s in body]
    body = sites.fold_statements(body)
    fdef = ast.FunctionDef(
        name=f"{cls.__name__}_{what}",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in
                                                 grads + saved_params +
                                                 [attr_params[k] for k in sorted(slots)]],
                           vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                           defaults=[]),
        body=body or [ast.Return(value=none())], decorator_list=[], returns=None,
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
