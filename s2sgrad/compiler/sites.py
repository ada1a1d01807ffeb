"""Call sites the transforms differentiate: records and Function bodies made ready.

Reverse mode (transform) and forward mode (tangent) meet the same calls: a
rule of the table, a user's `Function.apply`, a call to another user
function. Each becomes a site record; for a Function, its `forward`/`vjp`
bodies are read, `ctx` turned into plain variables, and the result kept on the
site, which the inline pass (pass 5) splices into the code. A Function whose
body cannot be inlined falls back to calling its staticmethods.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import itertools
import linecache
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy

from ..errors import TransformError, deliberate, error_at
from ..rules.registry import Rule
from .callables import instances_read
from .early_returns import fold_returns
from .facts import FunctionFacts
from .names import SHARED_LEAVES, STORE, NameRegistry, assign_node, clone, copy_location, name_node
from .normalize.context_blocks import unwrap_context_blocks
from .normalize.scope import is_docstring
from .parse import parse_function
from .recompute import iterated_parameters
from .recompute import refusal as recompute_refusal
from .resolve import FUNCTION_TYPES, MISSING, Resolver


def store_targets(names: Sequence[str]) -> ast.expr:
    if len(names) == 1:
        return name_node(names[0], True)
    return ast.Tuple([name_node(n, True) for n in names], STORE)


def helper(name: str) -> ast.Name:
    return name_node("_s2s_" + name)


def substitute(node, mapping: Dict[str, ast.expr], drop_keywords=frozenset(),
               helpers: Iterable[str] = ()):
    """A copy of `node` with names replaced by (copies of) expressions, `kw=param`
    dropped for parameters left at their default, and `helpers` (names that are
    not mapped) written `_s2s_<name>`.

    One recursive copy that substitutes as it goes: an `ast.NodeTransformer`
    over a clone did the same in two walks, and rules are expanded at every
    differentiated call."""
    return _substituted(node, mapping, drop_keywords, helpers)


def _substituted(node, mapping, drop, helpers):
    cls = node.__class__
    if cls is ast.Name:
        name = node.id
        if name in mapping:
            new = clone(mapping[name])
            if node.ctx.__class__ is ast.Store and new.__class__ is ast.Name:
                new.ctx = ast.Store()
            return new
        new = clone(node)
        if name in helpers:
            new.id = "_s2s_" + name
        return new
    if cls is list:
        return [_substituted(item, mapping, drop, helpers) for item in node]
    if cls in SHARED_LEAVES and not node.__dict__:
        return node   # a context or operator (shared, as in clone)
    if not isinstance(node, ast.AST):
        return node
    new = cls.__new__(cls)
    d = new.__dict__
    for key, value in node.__dict__.items():
        if key == "keywords" and cls is ast.Call and drop:
            value = [k for k in value
                     if not (k.value.__class__ is ast.Name and k.value.id in drop)]
        d[key] = _substituted(value, mapping, drop, helpers) \
            if isinstance(value, (ast.AST, list)) else value
    return new


def constant(value: Any) -> ast.expr:
    if isinstance(value, tuple):
        return ast.Tuple(elts=[constant(v) for v in value], ctx=ast.Load())
    return ast.Constant(value=value)


# -- rules of the table ---------------------------------------------------------
@dataclass
class RuleVjp:
    """Placeholder payload: the cotangents of one call to a table rule."""

    rule: Rule
    bound: Dict[str, ast.expr]
    g: ast.expr
    ans: ast.expr
    wanted: Dict[str, str]     # "param" or "param[i]" -> name receiving that part


def rule_placeholder(rule: Rule, bound, g, ans, wanted: Dict[str, str], origin,
                     facts: FunctionFacts) -> ast.stmt:
    """`_s2s_vjp(...)` in place of a rule's cotangents; `facts.expansions` tells
    the inliner what to put there."""
    targets = list(wanted.values())
    call = ast.Call(func=name_node("_s2s_vjp"), args=[ast.Constant(value=rule.name), g, ans],
                    keywords=[ast.keyword(arg=k.replace("[", "_").replace("]", ""),
                                          value=name_node(v)) for k, v in wanted.items()])
    node = assign_node(store_targets(targets), call)
    facts.expansions[node] = RuleVjp(rule, dict(bound), g, ans, dict(wanted))
    facts.note_origin(node, facts.origin_of(origin))
    return node


# -- user Functions -------------------------------------------------------------
class NotInlinable(Exception):
    """The body uses ctx (or control flow) in a way the inliner does not handle."""


@dataclass
class FunctionSite:
    """One `Cls.apply(...)` call: how its forward and vjp appear in generated code."""

    cls: type
    cls_expr: ast.expr
    arg_atoms: List[ast.expr]
    out_names: List[str]
    needs: Tuple[bool, ...]
    inlined: bool
    reason: str = ""
    forward_body: List[ast.stmt] = field(default_factory=list)
    slot_names: List[str] = field(default_factory=list)
    vjp_body: List[ast.stmt] = field(default_factory=list)
    vjp_result: Optional[ast.expr] = None
    vjp_name: str = "vjp"
    static_none: Set[int] = field(default_factory=set)
    maybe_none: Set[int] = field(default_factory=set)
    bindings: Dict[str, Any] = field(default_factory=dict)
    foreign: Dict[str, ast.expr] = field(default_factory=dict)
    vjp_grad_names: List[str] = field(default_factory=list)
    names: Optional[NameRegistry] = None
    mutable: Set[str] = field(default_factory=set)   # see CalleeSite.mutable

    def vjp_location(self) -> str:
        """`square.py:18`: the file and the `def` line of the vjp this site inlines."""
        code = getattr(self.cls.vjp_method(), "__code__", None)
        if code is None:
            return "?"
        line = code.co_firstlineno
        for k in range(line, line + 20):   # past the decorators, to the def
            text = linecache.getline(code.co_filename, k).lstrip()
            if text.startswith(("def ", "async def ")):
                line = k
                break
        return f"{os.path.basename(code.co_filename)}:{line}"

    def inlined_from(self) -> str:
        """`Square.vjp inlined (square.py:18)`: what the adjoint's line comment adds."""
        return f"{self.cls.__name__}.{self.vjp_name} inlined ({self.vjp_location()})"

    def forward_statement(self, origin, facts: FunctionFacts) -> ast.stmt:
        node = ast.Assign(targets=[store_targets(self.out_names)],
                          value=ast.Call(func=name_node("_s2s_forward"),
                                         args=[copy.deepcopy(self.cls_expr)]
                                         + copy.deepcopy(self.arg_atoms), keywords=[]),
                          type_comment=None)
        copy_location(node, origin)
        facts.expansions[node] = ("forward", self)
        facts.note_origin(node, facts.origin_of(origin))
        return node

    def adjoint_placeholder(self, gs: List[ast.expr], wanted: Dict[int, str], origin,
                            facts: FunctionFacts) -> ast.stmt:
        targets = [wanted[i] for i in sorted(wanted)]
        node = assign_node(store_targets(targets),
                       ast.Call(func=name_node("_s2s_vjp"),
                                args=[copy.deepcopy(self.cls_expr)] + gs, keywords=[]))
        facts.expansions[node] = ("vjp", self, list(gs), dict(wanted))
        facts.note_origin(node, facts.origin_of(origin))
        return node


def function_site(cls, call: ast.Call, out_names: List[str], needs: Tuple[bool, ...],
                  names: NameRegistry, nf, origin) -> FunctionSite:
    cls_expr = call.func.value
    site = FunctionSite(cls=cls, cls_expr=copy.deepcopy(cls_expr), arg_atoms=list(call.args),
                        out_names=list(out_names), needs=needs, inlined=True, names=names,
                        mutable=set(getattr(nf, "written_in_place", ())))
    vjp_fn = cls.vjp_method()
    site.vjp_name = cls.vjp_name()
    n_out = _vjp_arity(vjp_fn)
    if n_out is not None and n_out != len(out_names):
        raise deliberate(TypeError(f"{cls.__name__}.{site.vjp_name} takes {n_out} gradient(s) "
                                   f"but {cls.__name__}.forward returns {len(out_names)} "
                                   f"output(s)"))
    if call.keywords:
        return _fallback(site, names, "apply() was called with keyword arguments")
    try:
        _inline_function(site, cls, vjp_fn, names, nf)
    except NotInlinable as exc:
        return _fallback(site, names, str(exc))
    return site


def _vjp_arity(fn) -> Optional[int]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return None
    return len(params) - 1


def _fallback(site: FunctionSite, names: NameRegistry, reason: str) -> FunctionSite:
    site.inlined = False
    site.reason = reason
    ctx = names.fresh(f"{site.cls.__name__}_ctx")
    site.slot_names = [ctx]
    site.forward_body = [
        assign_node(ctx, ast.Call(func=helper("Context"),
                              args=[constant(tuple(site.needs))], keywords=[])),
        assign_node(store_targets(site.out_names), ast.Call(
            func=ast.Attribute(value=copy.deepcopy(site.cls_expr), attr="forward",
                               ctx=ast.Load()),
            args=[name_node(ctx)] + [_kept(a, site.mutable) for a in copy.deepcopy(site.arg_atoms)],
            keywords=[])),
    ]
    site.maybe_none = set(range(len(site.arg_atoms)))
    return site


def parse_method(fn, cls, what: str):
    """A Function's method, parsed, its `with np.errstate(...)` blocks written as their
    bodies (they change which warnings NumPy reports, never a value: as in the user's
    own functions, normalize/context_blocks.py)."""
    try:
        parsed = parse_function(fn)
    except TransformError as exc:
        raise NotInlinable(f"the source of {cls.__name__}.{what} is not available "
                           f"({exc.reason})") from None
    if any(isinstance(n, ast.With) for n in ast.walk(parsed.node)):
        params = {a.arg for a in parsed.node.args.posonlyargs + parsed.node.args.args}
        resolver = Resolver(getattr(parsed.fn, "__globals__", {}), {},
                            stored_names(parsed.node.body) | params)
        body = unwrap_context_blocks(parsed.node.body, resolver)
        if body is not None:
            node = copy.copy(parsed.node)
            node.body = body
            parsed = dataclasses.replace(parsed, node=node)
    return parsed


def local_names(fdef: ast.FunctionDef) -> Set[str]:
    out = set()
    for node in ast.walk(fdef):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        if isinstance(node, (ast.FunctionDef, ast.Lambda, ast.ClassDef, ast.AsyncFunctionDef)) \
                and node is not fdef:
            raise NotInlinable("it defines a nested function or class")
        if isinstance(node, (ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await,
                             ast.Try, ast.With)):
            raise NotInlinable(f"it uses '{type(node).__name__}'")
    return out


def stored_names(body: List[ast.stmt]) -> Set[str]:
    """The names a body assigns, the variable its folded early returns assign
    included (single_return's: it must be renamed like any local, or it would be the
    caller's variable of that name, `returned` say)."""
    return {n.id for s in body for n in ast.walk(s)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def single_return(body: List[ast.stmt], what: str) -> Tuple[List[ast.stmt], ast.expr]:
    """The body without its return, and the value returned: early returns in `if`
    branches folded into one variable (early_returns.py)."""
    returns = [n for s in body for n in ast.walk(s) if isinstance(n, ast.Return)]
    if len(returns) == 1 and body and body[-1] is returns[0]:
        return body[:-1], body[-1].value or ast.Constant(value=None)
    taken = {n.id for s in body for n in ast.walk(s) if isinstance(n, ast.Name)}
    result = next(name for name in (f"returned_{k}" if k else "returned"
                                    for k in itertools.count()) if name not in taken)
    if not returns:
        raise NotInlinable(f"{what} has no return statement")
    folded = fold_returns(body, result)
    if folded is None:
        raise NotInlinable(f"{what} returns from inside a loop, `try` or `with`")
    return folded, ast.Name(id=result, ctx=ast.Load())


class CtxRewriter(ast.NodeTransformer):
    """ctx.<attr> / ctx.saved_tensors / ctx.needs_input_grad become plain values."""

    def __init__(self, ctx: str, slots: Dict[str, str], saved: List[str],
                 needs: Tuple[bool, ...], where: str):
        self.ctx, self.slots, self.saved, self.needs, self.where = ctx, slots, saved, needs, where

    def visit_Attribute(self, node: ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == self.ctx:
            if node.attr == "needs_input_grad":
                return constant(tuple(self.needs))
            if node.attr == "saved_tensors":
                return ast.Tuple(elts=[name_node(s) for s in self.saved], ctx=ast.Load())
            if node.attr in self.slots:
                return name_node(self.slots[node.attr])
            if not isinstance(node.ctx, ast.Load):
                raise NotInlinable(f"{self.where} sets ctx.{node.attr} other than by "
                                   f"`ctx.{node.attr} = value` on a line of its own")
            raise NotInlinable(f"{self.where} reads ctx.{node.attr}, which forward never sets")
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name):
        if node.id == self.ctx:
            raise NotInlinable(f"{self.where} uses ctx other than through its attributes")
        return node


def _left_out_defaults(args: ast.arguments, n_params: int, given: int) -> List[ast.expr]:
    """The defaults of forward's parameters a call leaves out (`Clip.apply(x)` for
    `forward(ctx, x, lo=-1.0, hi=1.0)`), as constants: they carry no gradient (the
    vjp's Nones for them are dropped). A default that is not a literal: not inlined."""
    missing = n_params - given
    if missing == 0:
        return []
    if missing > len(args.defaults):
        raise NotInlinable("forward's parameters do not match the call")
    out = []
    for default in args.defaults[len(args.defaults) - missing:]:
        try:
            value = ast.literal_eval(default)
        except ValueError:
            value = ...
        if not isinstance(value, (bool, int, float, complex, str, type(None))):
            raise NotInlinable("a parameter of forward the call leaves out has a default "
                               "that is not a number, string or None")
        out.append(ast.Constant(value=value))
    return out


def bind_forward(site, cls, names: NameRegistry, nf) -> tuple:
    """A Function's `forward` at a call site, ready to splice in (reverse and
    forward mode alike): (ctx's name, its body, its returned expression, the
    mapping of its parameters and locals to fresh names or the call's
    arguments, the assignments copying arguments forward rebinds)."""
    fwd = parse_method(cls.forward, cls, "forward")
    fparams = [a.arg for a in fwd.node.args.posonlyargs + fwd.node.args.args]
    if fwd.node.args.vararg or fwd.node.args.kwarg or len(fparams) < len(site.arg_atoms) + 1:
        raise NotInlinable("forward's parameters do not match the call")
    atoms = list(site.arg_atoms) + _left_out_defaults(fwd.node.args, len(fparams) - 1,
                                                      len(site.arg_atoms))
    site.bindings.update(foreign_globals(fwd, nf, names, site))
    ctx, *inputs = fparams
    body, result = single_return([s for s in fwd.node.body if not is_docstring(s)],
                                  "forward")
    body = split_ctx_targets(body, ctx)
    local = (local_names(fwd.node) | stored_names(body)) - {ctx}
    mapping: Dict[str, ast.expr] = {}
    prologue: List[ast.stmt] = []
    for param, atom in zip(inputs, atoms):
        if param in local:
            fresh = names.fresh(param)
            prologue.append(assign_node(fresh, copy.deepcopy(atom)))
            mapping[param] = name_node(fresh)
        else:
            mapping[param] = atom
    for n in sorted(local - set(inputs)):
        mapping[n] = name_node(names.fresh(n))
    mapping.update(site.foreign)
    return ctx, body, result, mapping, prologue


def _inline_function(site: FunctionSite, cls, vjp_fn, names: NameRegistry, nf) -> None:
    vjp = parse_method(vjp_fn, cls, site.vjp_name)
    ctx, body, result, mapping, prologue = bind_forward(site, cls, names, nf)
    site.bindings.update(foreign_globals(vjp, nf, names, site))
    slots: Dict[str, str] = {}
    saved: List[str] = []
    out: List[ast.stmt] = list(prologue)
    mutable = getattr(nf, "written_in_place", set())
    for s in body:   # (save_for_forward feeds only `jvp`, which reverse mode never runs)
        out += forward_statement(s, ctx, mapping, slots, {"save_for_backward": saved}, site,
                                 names, mutable)
    result = CtxRewriter(ctx, slots, saved, site.needs, "forward").visit(
        substitute(result, mapping))
    if len(site.out_names) > 1 and isinstance(result, ast.Tuple) and \
            len(result.elts) == len(site.out_names):
        out += [assign_node(o, e) for o, e in zip(site.out_names, result.elts)]
    else:
        out.append(assign_node(store_targets(site.out_names), result))
    site.forward_body = out
    site.slot_names = list(dict.fromkeys(saved + list(slots.values())))
    _inline_vjp(site, vjp, slots, saved, names)


def _kept(value: ast.expr, mutable) -> ast.expr:
    """A value forward keeps for vjp: the caller's variable itself, or a copy when
    the caller later writes into that variable's array in place."""
    if isinstance(value, ast.Name) and value.id in mutable:
        return ast.Call(func=name_node("_s2s_snapshot"), args=[value], keywords=[])
    return value


def forward_statement(s, ctx, mapping, slots, saved_by: Dict[str, List[str]], site, names,
                      mutable=frozenset()) -> List[ast.stmt]:
    """A statement of a Function's forward, inlined: ctx attributes become variables
    (`slots`), the values ctx.save_for_backward / save_for_forward keep go to the
    lists `saved_by` names (a method it does not name is dropped), copied where the
    caller later writes into their arrays (`mutable`). Reverse and forward mode's."""
    saved = saved_by.get("save_for_backward", [])
    rewrite = CtxRewriter(ctx, slots, saved, site.needs, "forward")
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and \
            isinstance(s.value.func, ast.Attribute) and \
            isinstance(s.value.func.value, ast.Name) and s.value.func.value.id == ctx:
        method = s.value.func.attr
        if method in ("save_for_backward", "save_for_forward"):
            target = saved_by.get(method)
            if target is None:
                return []
            out = []
            target.clear()
            for arg in s.value.args:
                value = rewrite.visit(substitute(arg, mapping))
                stem = arg.id if isinstance(arg, ast.Name) else "saved"
                slot = names.fresh(f"{stem}_saved")
                out.append(assign_node(slot, _kept(value, mutable)))
                target.append(slot)
            return out
        if method == "mark_non_differentiable":
            return []
        raise NotInlinable(f"forward calls ctx.{method}()")
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
            isinstance(s.targets[0], ast.Attribute) and \
            isinstance(s.targets[0].value, ast.Name) and s.targets[0].value.id == ctx:
        attr = s.targets[0].attr
        if attr in ("saved_tensors", "needs_input_grad"):
            raise NotInlinable(f"forward assigns ctx.{attr}")
        slot = slots.get(attr) or names.fresh(attr)
        value = rewrite.visit(substitute(s.value, mapping))
        slots[attr] = slot
        return [assign_node(slot, _kept(value, mutable))]
    if isinstance(s, ast.If) and _sets_ctx_on_every_path(s, ctx, set(slots)):
        # (`if x > 0: ctx.mode = 1 ... else: ctx.mode = 0`: one variable per
        # attribute, assigned in each branch; a method of ctx stays refused)
        def branch(stmts):
            out = [t for sub in stmts for t in forward_statement(
                sub, ctx, mapping, slots, saved_by, site, names, mutable)]
            return out or [copy_location(ast.Pass(), s)]
        test = rewrite.visit(substitute(s.test, mapping))
        return [copy_location(ast.If(test=test, body=branch(s.body), orelse=branch(s.orelse)
                                     if s.orelse else []), s)]
    if isinstance(s, (ast.If, ast.For, ast.While)):
        for sub in ast.walk(s):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and \
                    sub.value.id == ctx and sub.attr not in ("needs_input_grad",):
                raise NotInlinable("forward uses ctx inside a branch or loop")
    return [rewrite.visit(substitute(s, mapping))]


def _ctx_attributes_set(stmts: List[ast.stmt], ctx: str) -> Optional[Set[str]]:
    """The ctx attributes these statements assign on every path through them (plain
    `ctx.a = v` statements and `if`s); None where ctx is used another way inside a
    nested statement (a method call, a loop, an assignment of another form)."""
    out: Set[str] = set()
    for s in stmts:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Attribute) and \
                isinstance(s.targets[0].value, ast.Name) and s.targets[0].value.id == ctx:
            if s.targets[0].attr in ("saved_tensors", "needs_input_grad"):
                return None
            out.add(s.targets[0].attr)
        elif isinstance(s, ast.If):
            body, orelse = _ctx_attributes_set(s.body, ctx), _ctx_attributes_set(s.orelse, ctx)
            if body is None or orelse is None:
                return None
            out |= body & orelse
        elif any(isinstance(n, ast.Name) and n.id == ctx for n in ast.walk(s)) and \
                not _reads_ctx_attributes_only(s, ctx):
            return None
    return out


def _reads_ctx_attributes_only(s: ast.stmt, ctx: str) -> bool:
    """Does s use ctx only to read its attributes (`y = x * ctx.k`)?"""
    if isinstance(s, (ast.For, ast.While, ast.With, ast.Try)):
        return False
    for node in ast.walk(s):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id == ctx:
            if not isinstance(node.ctx, ast.Load) or node.attr in ("saved_tensors",):
                return False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == ctx:
            return False
    return True


def _sets_ctx_on_every_path(s: ast.If, ctx: str, before: Set[str]) -> bool:
    """Does this `if` assign ctx attributes only in plain statements, each attribute
    on both branches or already assigned before it? (An attribute one path leaves
    unset would be a variable the vjp reads unbound: Python raises there.)"""
    if not any(isinstance(n, ast.Name) and n.id == ctx for n in ast.walk(s)):
        return False
    if not _reads_ctx_attributes_only(ast.Expr(value=s.test), ctx):
        return False
    body, orelse = _ctx_attributes_set(s.body, ctx), _ctx_attributes_set(s.orelse, ctx)
    if body is None or orelse is None:
        return False
    assigned = {n.attr for n in ast.walk(s) if isinstance(n, ast.Attribute) and
                isinstance(n.value, ast.Name) and n.value.id == ctx and
                isinstance(n.ctx, ast.Store)}
    return assigned <= (body & orelse) | before


def _inline_vjp(site: FunctionSite, vjp, slots, saved, names: NameRegistry) -> None:
    vparams = [a.arg for a in vjp.node.args.posonlyargs + vjp.node.args.args]
    if vjp.node.args.vararg or vjp.node.args.kwarg:
        raise NotInlinable(f"{site.vjp_name} takes *args")
    ctx, *grads = vparams
    body, result = single_return([s for s in vjp.node.body if not is_docstring(s)],
                                  site.vjp_name)
    local = (local_names(vjp.node) | stored_names(body)) - {ctx}
    mapping: Dict[str, ast.expr] = {}
    for n in sorted(local | set(grads)):
        mapping[n] = name_node(names.fresh(n))
    mapping.update(site.foreign)
    rewrite = CtxRewriter(ctx, slots, saved, site.needs, site.vjp_name)
    stmts = [rewrite.visit(substitute(s, mapping)) for s in body]
    stmts = fold_statements(split_tuple_assigns(stmts))
    result = fold_expression(rewrite.visit(substitute(result, mapping)))
    site.vjp_grad_names = [mapping[g].id for g in grads]
    site.vjp_body = stmts
    site.vjp_result = result
    n_in = len(site.arg_atoms)
    elts = result_elements(result, n_in, site)
    if elts is None:
        site.maybe_none = set(range(n_in))
        return
    last = _last_values(stmts)
    for i, e in enumerate(elts):
        if _is_none(e) or (isinstance(e, ast.Name) and _is_none(last.get(e.id, False))):
            site.static_none.add(i)
        elif isinstance(e, ast.Name) and last.get(e.id, False) is None:
            site.maybe_none.add(i)


def result_elements(result, n_in: int, site: FunctionSite) -> Optional[List[ast.expr]]:
    if isinstance(result, ast.Tuple):
        elts = list(result.elts)
        if len(elts) > n_in and all(_is_none(e) for e in elts[n_in:]):
            elts = elts[:n_in]   # (Nones for forward's defaulted parameters, as PyTorch drops)
        if len(elts) != n_in:
            _count_error(site, len(result.elts))
        return elts
    if n_in == 1 and _one_gradient(result, site):
        return [result]
    if _is_none(result):
        return [ast.Constant(value=None)] * n_in
    return None


def _one_gradient(result: ast.expr, site: FunctionSite) -> bool:
    """Is a one-input vjp's result its gradient itself, not a tuple holding it? An
    operator's result (`g * np.cos(x)`); the cotangent parameter; a name whose one
    top-level assignment is one of those. A call (a helper may return a tuple: two
    gradients for one input were added into one), a name bound in branches (early
    returns folded: `returned = g, None` in one of them) or to a tuple is not known:
    the caller checks what it holds at run time (check_count)."""
    if isinstance(result, ast.Name):
        value = _last_values(site.vjp_body or []).get(result.id, False)
        if value is False:
            return result.id in site.vjp_grad_names
        result = value
    return isinstance(result, (ast.BinOp, ast.UnaryOp, ast.Subscript, ast.Attribute))


def _count_error(site: FunctionSite, got: int):
    name = site.cls.__name__
    raise deliberate(TypeError(f"{name}.{site.vjp_name} returns {got} gradient(s), expected "
                               f"{len(site.arg_atoms)} (one per input of {name}.forward)"))


def _is_none(e) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def _last_values(stmts) -> Dict[str, Any]:
    """Top-level value of each name at the end; None marks 'unknown' (nested writes)."""
    last: Dict[str, Any] = {}
    for s in stmts:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name):
            last[s.targets[0].id] = s.value
        else:
            for sub in ast.walk(s):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    last[sub.id] = None
    return last


def split_ctx_targets(stmts: List[ast.stmt], ctx: str) -> List[ast.stmt]:
    """`ctx.lo, ctx.hi = lo, hi` -> `ctx.lo = lo; ctx.hi = hi`, the form the forward's
    readers of ctx follow (where no value reads ctx: then the order cannot matter)."""
    out = []
    for s in stmts:
        target = s.targets[0] if isinstance(s, ast.Assign) and len(s.targets) == 1 else None
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(s.value, ast.Tuple) and \
                len(target.elts) == len(s.value.elts) and \
                all(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and
                    t.value.id == ctx for t in target.elts) and \
                not any(isinstance(n, ast.Name) and n.id == ctx for n in ast.walk(s.value)):
            out += [copy_location(ast.Assign(targets=[t], value=v), s)
                    for t, v in zip(target.elts, s.value.elts)]
        else:
            out.append(s)
    return out


def split_tuple_assigns(stmts: List[ast.stmt]) -> List[ast.stmt]:
    """`a, b = (s0, s1)` -> `a = s0; b = s1` (right-hand sides are fresh slot names)."""
    out = []
    for s in stmts:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], (ast.Tuple, ast.List)) and \
                isinstance(s.value, ast.Tuple) and \
                len(s.targets[0].elts) == len(s.value.elts) and \
                all(isinstance(t, ast.Name) for t in s.targets[0].elts) and \
                all(isinstance(v, (ast.Name, ast.Constant)) for v in s.value.elts) and \
                not ({t.id for t in s.targets[0].elts} &
                     {v.id for v in s.value.elts if isinstance(v, ast.Name)}):
            out += [copy_location(assign_node(t.id, v), s)
                    for t, v in zip(s.targets[0].elts, s.value.elts)]
        else:
            out.append(s)
    return out


def _static_value(expr):
    try:
        return True, ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def fold_expression(expr):
    """Fold (True, False)[0] and friends, left by constant needs_input_grad."""
    class Folder(ast.NodeTransformer):
        def visit_Subscript(self, node):
            self.generic_visit(node)
            if isinstance(node.value, ast.Tuple) and isinstance(node.slice, ast.Constant) and \
                    isinstance(node.slice.value, int) and \
                    -len(node.value.elts) <= node.slice.value < len(node.value.elts):
                return node.value.elts[node.slice.value]
            return node

        def visit_UnaryOp(self, node):
            self.generic_visit(node)
            if isinstance(node.op, ast.Not):
                ok, value = _static_value(node.operand)
                if ok:
                    return ast.Constant(value=not value)
            return node

        def visit_BoolOp(self, node):
            self.generic_visit(node)
            ok_all = [_static_value(v) for v in node.values]
            if all(ok for ok, _ in ok_all):
                values = [v for _, v in ok_all]
                result = all(values) if isinstance(node.op, ast.And) else any(values)
                return ast.Constant(value=bool(result))
            return node
    return Folder().visit(expr)


def fold_statements(stmts: List[ast.stmt]) -> List[ast.stmt]:
    out = []
    for s in stmts:
        s = fold_expression(s)
        if isinstance(s, ast.If):
            ok, value = _static_value(s.test)
            if ok:
                out += fold_statements(s.body if value else s.orelse)
                continue
            s.body = fold_statements(s.body) or [ast.Pass()]
            s.orelse = fold_statements(s.orelse)
        out.append(s)
    return out


def foreign_globals(parsed, nf, names: NameRegistry, site: FunctionSite) -> Dict[str, Any]:
    """Globals of a Function's body that the caller's module resolves differently.

    They are bound under reserved names; the ones that agree are reserved so no
    generated temporary can shadow them.
    """
    bindings = {}
    assigned = local_names(parsed.node)
    params = {a.arg for a in parsed.node.args.posonlyargs + parsed.node.args.args}
    for node in ast.walk(parsed.node):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            continue
        n = node.id
        if n in assigned or n in params or n in site.foreign:
            continue
        theirs = Resolver(parsed.globals, parsed.closure, set()).lookup(n)
        if theirs is MISSING:
            continue
        clash = n in nf.resolver.locals or (n in names.taken and
                                            nf.resolver.lookup(n) is MISSING)
        if not clash and nf.resolver.lookup(n) is theirs:
            names.reserve(n)
            continue
        alias = names.fresh(f"m_{n}", reserved=True)
        site.foreign[n] = name_node(alias)
        bindings[alias] = theirs
    return bindings


# -- calls to other user functions -------------------------------------------------
@dataclass
class CalleeSite:
    """A call to another user function, differentiated by its own compiled pair."""

    fn: Any
    wrt: Tuple[int, ...]
    forward_name: str
    adjoint_name: str
    residual_name: str
    call: ast.Call
    out_names: List[str]
    arg_atoms: List[Optional[ast.expr]]
    static_none: Set[int] = field(default_factory=set)
    # (parameter, function) for each parameter the caller passes a function known
    # at compile time (`np.tanh`, a module-level def): the callee is compiled for it.
    statics: Tuple[Tuple[str, Any], ...] = ()
    # Parameters the caller passes an array or a number (see analyze.leaf_names).
    leaves: Tuple[int, ...] = ()
    # The caller's names written in place somewhere: passed as copies, since the
    # callee's residuals would keep the array itself.
    mutable: Set[str] = field(default_factory=set)
    # Parameters the caller passes complex values: the callee is compiled for that.
    complexes: Tuple[str, ...] = ()
    # A helper marked s2sgrad.checkpoint: the forward calls it as the user wrote the
    # call and keeps nothing of it; the adjoint runs its forward again (recomputation).
    recompute: bool = False

    @property
    def slot_names(self) -> List[str]:
        return [] if self.recompute else [self.residual_name]

    def forward_statement(self, origin, facts: FunctionFacts) -> ast.stmt:
        """The call of the callee's forward itself (nothing for the inliner); of the
        helper itself, as written, where it is recomputed."""
        outs = store_targets(self.out_names)
        if self.recompute:
            node = copy_location(assign_node(outs, copy.deepcopy(self.call)), origin)
            facts.note_origin(node, facts.origin_of(origin))
            return node
        target = ast.Tuple(elts=[outs, name_node(self.residual_name, True)], ctx=ast.Store())
        call = ast.Call(func=name_node(self.forward_name),
                        args=[_kept(a, self.mutable) for a in copy.deepcopy(self.call.args)],
                        keywords=[ast.keyword(arg=k.arg, value=_kept(k.value, self.mutable))
                                  for k in copy.deepcopy(self.call.keywords)])
        node = ast.Assign(targets=[target], value=call, type_comment=None)
        copy_location(node, origin)
        facts.note_origin(node, facts.origin_of(origin))
        return node

    def recomputation(self, origin, facts: FunctionFacts) -> ast.stmt:
        """`f_residuals = f_forward(x, W)[1]`: the residuals of a recomputed call, made
        again from its arguments (which the adjoint has restored to the call's)."""
        call = ast.Call(func=name_node(self.forward_name), args=copy.deepcopy(self.call.args),
                        keywords=copy.deepcopy(self.call.keywords))
        value = ast.Subscript(value=call, slice=ast.Constant(value=1), ctx=ast.Load())
        node = assign_node(self.residual_name, value)
        facts.note_origin(node, facts.origin_of(origin))
        return node

    def adjoint_placeholder(self, gs, wanted: Dict[int, str], origin,
                            facts: FunctionFacts) -> ast.stmt:
        """The call of the callee's adjoint itself (nothing for the inliner)."""
        g = gs[0] if len(gs) == 1 else ast.Tuple(elts=list(gs), ctx=ast.Load())
        targets = [wanted[i] for i in self.wrt]
        call = ast.Call(func=name_node(self.adjoint_name), args=[name_node(self.residual_name), g],
                        keywords=[])
        node = assign_node(store_targets(targets), call)
        facts.note_origin(node, facts.origin_of(origin))
        return node


def callee_site(op, s, activity, names: NameRegistry, nf, recompute: bool = False) -> CalleeSite:
    """The site of a call of the user's function; recompute: where op asks for it
    (s2sgrad.checkpoint), the helper is recomputed in the adjoint, if it can be."""
    fn = op.callee
    call = op.call
    written = set(getattr(nf, "written_in_place", ()))
    if recompute:
        reason = recompute_refusal(fn, written)
        if reason is not None:
            raise error_at(call, f"cannot recompute {fn.__name__} (s2sgrad.checkpoint): "
                                 f"{reason}", nf.parsed,
                           "Remove s2sgrad.checkpoint from it, or compute what it draws "
                           "or changes outside it and pass that in.")
    try:
        sig = inspect.signature(fn)
        bound = sig.bind(*call.args, **{k.arg: k.value for k in call.keywords})
    except (TypeError, ValueError) as exc:
        raise error_at(call, f"cannot bind the call to {fn.__name__}: {exc}", nf.parsed) from None
    params = list(sig.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise error_at(call, f"cannot differentiate through {fn.__name__}, which takes "
                             f"*args/**kwargs", nf.parsed,
                       "Give the helper explicit parameters.")
    atoms: List[Optional[ast.expr]] = [bound.arguments.get(p.name) for p in params]
    wrt = tuple(i for i, a in enumerate(atoms)
                if isinstance(a, ast.Name) and a.id in activity.varied)
    statics = function_arguments(params, atoms, nf, fn)
    if recompute:
        _recomputable_arguments(fn, params, atoms, activity, nf, dict(statics), call)
    base = fn.__name__ if fn.__name__ != "<lambda>" else "lambda"
    site = CalleeSite(fn=fn, wrt=wrt,
                      forward_name=_callee_name(names, f"{base}_forward", nf),
                      adjoint_name=_callee_name(names, f"{base}_adjoint", nf),
                      residual_name=names.fresh(f"{base}_residuals"), call=call,
                      out_names=list(op.outputs), arg_atoms=atoms,
                      leaves=tuple(i for i, a in enumerate(atoms) if _is_leaf(a, activity)),
                      mutable=written, recompute=recompute, statics=statics,
                      complexes=tuple(entry for p, a in zip(params, atoms)
                                      for entry in _complex_entries(a, p.name, activity)))
    return site


def _recomputable_arguments(fn, params, atoms, activity, nf, statics, call) -> None:
    """A recomputed call is given again what its arguments held at the call. That holds
    for arrays, numbers and containers, which the adjoint restores; an iterator (a
    generator, `iter(xs)`) would be found consumed: where the helper iterates over a
    parameter, its argument must be proven one of the others."""
    containers = set(nf.lists) | set(nf.tuples) | set(nf.dicts)
    walked = iterated_parameters(fn)
    for p, atom in zip(params, atoms):
        if p.name not in walked or atom is None or isinstance(atom, ast.Constant) or \
                p.name in statics or \
                _is_leaf(atom, activity) or \
                (isinstance(atom, ast.Name) and atom.id in containers):
            continue
        text = ast.unparse(atom)
        raise error_at(call, f"cannot recompute {fn.__name__} (s2sgrad.checkpoint): it "
                             f"iterates over its argument {text}, which is not known to be "
                             f"an array, a list, a tuple or a dict (an iterator would be "
                             f"found consumed the second time)", nf.parsed,
                       f"Pass {text} as an array, a list or a tuple, or remove "
                       f"s2sgrad.checkpoint.")


def _complex_entries(atom: Optional[ast.expr], param: str, activity) -> List[str]:
    """What the callee is told of its parameter `param` given `atom`: where it holds
    complex values (a complex name, or items of one; a complex constant)."""
    if isinstance(atom, ast.Constant):
        return [param] if isinstance(atom.value, complex) else []
    return activity.complex_entries(atom.id, param) if isinstance(atom, ast.Name) else []


def function_arguments(params, atoms, nf, fn=None) -> Tuple[Tuple[str, Any], ...]:
    """The parameters a call binds to a function known now: an argument that names
    one (`np.tanh`, a def of the module), or a default that is one where the call
    passes nothing. The callee reads each as that function (a pair of its own).
    Given the callee `fn`, also those bound to an instance of the user's class whose
    methods fn calls (`model.loss(w)` of a module-level `model`: self.predict(...);
    callables.instances_read)."""
    functions, others = [], []
    for p, atom in zip(params, atoms):
        if atom is None:
            value = p.default
        elif isinstance(atom, (ast.Name, ast.Attribute)) and \
                not nf.resolver.is_local_chain(atom):
            ok, value = nf.resolver.static(atom)
            if not ok:
                continue
        else:
            continue
        (functions if isinstance(value, FUNCTION_TYPES) else others).append((p.name, value))
    return tuple(functions) + (instances_read(fn, others) if fn is not None else ())


def _is_leaf(atom: Optional[ast.expr], activity) -> bool:
    """An argument proven to be an array or a number (not a list, tuple or dict)."""
    if isinstance(atom, ast.Constant):
        return isinstance(atom.value, (int, float)) or atom.value is None
    if isinstance(atom, ast.UnaryOp) and isinstance(atom.operand, ast.Constant):
        return True
    return isinstance(atom, ast.Name) and atom.id in activity.leaves


def _callee_name(names: NameRegistry, stem: str, nf) -> str:
    return names.fresh(stem)


def numpy_alias(nf) -> str:
    """The name generated code uses for NumPy: the user's `np` when it is NumPy."""
    for candidate in ("np", "numpy"):
        if candidate not in nf.resolver.locals and nf.resolver.lookup(candidate) is numpy:
            return candidate
    return "_s2s_np"
