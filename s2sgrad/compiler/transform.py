"""Pass 4 — transform: split a normal-form function into forward and adjoint.

The forward runs the user's statements and keeps what the adjoint needs; the
adjoint walks the statements backwards, turning each active statement into
contributions to the adjoints of its inputs. The adjoint restores variables
that the forward overwrote (a saved copy outside loops, a stack inside loops),
so every rule reads exactly the values its statement saw. Saves that no rule
reads are removed later, by the optimiser.

Symbolic zeros: an adjoint nothing has written yet has no variable at all; the
first contribution assigns it, later ones add. Zeros are materialised only
where control flow joins or a loop carries an adjoint from one iteration to the
next.

Gradient rules and Function bodies appear here as placeholders
(`_s2s_vjp(...)`, `_s2s_forward(...)`) that the inline pass expands.
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ..errors import InternalError, error_at, guard_fields
from ..rules import registry
from . import sites
from .analyze import (
    Activity,
    call_write_guards,
    iter_statements,
    loop_header_op,
    may_build_sequence,
)
from .facts import StatementFacts
from .marks import comment, is_comment, line_comment
from .names import NameRegistry, name_nodes, stored_names
from .normalize import NormalForm
from .ops import UFUNC_AT_SIGNS, Op, describe, names, ufunc_at_kind

_DIFFERENTIABLE_KINDS = {"copy", "pack", "rule", "getitem", "field", "apply", "call"}


@dataclass
class Transformed:
    """Forward and adjoint functions, still containing rule placeholders."""

    nf: NormalForm
    activity: Activity
    forward: ast.FunctionDef
    adjoint: ast.FunctionDef
    names: NameRegistry
    residuals: str
    callees: Dict[str, sites.CalleeSite] = field(default_factory=dict)
    sites: List[object] = field(default_factory=list)


def _name(id_: str, store: bool = False) -> ast.Name:
    return ast.Name(id=id_, ctx=ast.Store() if store else ast.Load())


def _assign(target: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[_name(target, True)], value=value, type_comment=None)


def _call(func: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=_name(func), args=list(args), keywords=[])


def helper_call(helper: str, *args: ast.expr) -> ast.Call:
    return _call("_s2s_" + helper, *args)


def transform(nf: NormalForm, activity: Activity, pure: bool = False) -> Transformed:
    """Forward and adjoint of a normal-form function.

    pure=True writes the adjoint without in-place updates (arrays and lists are
    replaced, not modified), so that it can itself be differentiated.
    """
    return _Reverse(nf, activity, pure).run()


@dataclass
class _LoopInfo:
    kind: str                       # "range" | "items" | "while"
    range_name: Optional[str] = None
    trips: Optional[str] = None
    target: Optional[ast.expr] = None
    item_assigns: List[ast.stmt] = field(default_factory=list)


def field_index(node: ast.Attribute) -> ast.expr:
    """`_s2s_field_index(p, 'W')`: where a namedtuple keeps its field W."""
    return helper_call("field_index", _name(node.value.id), ast.Constant(value=node.attr))


def fold_loop_items(body: List[ast.stmt], act: Activity) -> List[ast.stmt]:
    """`xs_items = _s2s_loop_items(xs); for x in xs_items:` walks xs itself where xs
    is proven an array or carries no gradient (a dict's keys are walked then by
    Python itself): the loop reads xs again and the copy goes."""
    out: List[ast.stmt] = []
    for s in body:
        for attr in ("body", "orelse"):
            block = getattr(s, attr, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                setattr(s, attr, fold_loop_items(block, act))
        if isinstance(s, ast.For) and out and _loop_items_of(out[-1], s.iter) is not None:
            source = _loop_items_of(out[-1], s.iter)
            rebound = any(source in stored_names(b) for b in s.body)   # walks the old value
            if not rebound and (source in act.leaves or source not in act.varied):
                out.pop()
                s.iter = _name(source)
        out.append(s)
    return out


def _loop_items_of(s: ast.stmt, it: ast.expr) -> Optional[str]:
    """The xs of `it = _s2s_loop_items(xs)`, or None."""
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
            isinstance(s.targets[0], ast.Name) and isinstance(it, ast.Name) and \
            s.targets[0].id == it.id and isinstance(s.value, ast.Call) and \
            isinstance(s.value.func, ast.Name) and s.value.func.id == "_s2s_loop_items" and \
            len(s.value.args) == 1 and isinstance(s.value.args[0], ast.Name):
        return s.value.args[0].id
    return None


class _Reverse:
    def __init__(self, nf: NormalForm, activity: Activity, pure: bool = False):
        self.pure = pure
        self.first_iteration = None   # see entry_reads
        self.nf = nf
        self.act = activity
        self.names = nf.names
        self.locals = nf.resolver.locals | nf.names.taken
        self.bar: Dict[str, str] = {}
        self.var_of_bar: Dict[str, str] = {}
        self.state: Dict[str, str] = {}          # adjoint name -> "owned" | "shared"
        # What the forward sweep decided per statement, read back by the adjoint's.
        self.saves: StatementFacts[List[Tuple[str, str, str]]] = StatementFacts("saved value")
        self.loops: StatementFacts[_LoopInfo] = StatementFacts("loop record")
        self.sites: StatementFacts[object] = StatementFacts("call site")
        self.callees: Dict[str, sites.CalleeSite] = {}
        self.stacks: Dict[str, str] = {}
        self.inplace: Set[str] = set()           # adjoints updated in place (need "owned")
        self.resets: Set[str] = set()            # adjoints consumed (see probe)
        self.sequences: Set[str] = self._list_valued(nf)  # adjoints that are lists
        # loop -> its range and trip-count lines
        self.loop_setups: StatementFacts[List[ast.stmt]] = StatementFacts("loop setup")
        self.default_bindings: Dict[str, object] = {}
        self.inits: List[ast.stmt] = []
        self.last_line: Optional[int] = None
        self.line_comment: Optional[ast.Expr] = None   # the adjoint block's, when open
        self.overwritable = self._overwritable(nf.node.body)

    # -- names -----------------------------------------------------------------
    def bar_of(self, var: str) -> str:
        if var not in self.bar:
            self.bar[var] = self.names.fresh(f"{var}_bar")
            self.var_of_bar[self.bar[var]] = var
        return self.bar[var]

    def err(self, node, message, hint=None):
        return error_at(node, message, self.nf.parsed, hint)

    def builtin(self, name: str) -> ast.Name:
        """A builtin the generated code calls (len, range, ...): by its own name,
        unless the function has a variable of that name; then through a bound one."""
        if name not in self.locals:
            return _name(name)
        import builtins
        alias = f"_s2s_builtin_{name}"
        self.default_bindings[alias] = getattr(builtins, name)
        return _name(alias)

    def _list_valued(self, nf: NormalForm) -> Set[str]:
        """Variables that may hold Python lists: their adjoints are lists too, added
        item by item (a + between lists would concatenate them)."""
        out = set(nf.lists) | set(nf.tuples) | set(nf.dicts)   # adjoints item by item
        list_helpers = {"push", "drop_last", "last_grad"}
        changed = True
        while changed:
            changed = False
            for s, _ in iter_statements(nf.node.body):
                if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and
                        isinstance(s.targets[0], ast.Name)) or s.targets[0].id in out:
                    continue
                value = s.value
                listy = (isinstance(value, ast.List) or
                         (isinstance(value, ast.Name) and value.id in out) or
                         (isinstance(value, ast.Call) and getattr(
                             getattr(value, "s2s_callee", None), "__name__", None)
                          in list_helpers and getattr(value.s2s_callee, "__module__", "")
                          .startswith("s2sgrad")))
                if listy:
                    out.add(s.targets[0].id)
                    changed = True
        return out

    def _overwritable(self, body) -> Set[str]:
        """Variables a later assignment may overwrite while the adjoint needs them."""
        counts: Dict[str, int] = {}

        def visit(stmts, in_loop):
            for s in stmts:
                outs = self._outputs(s)
                for o in outs:
                    counts[o] = counts.get(o, 0) + (2 if in_loop else 1)
                if isinstance(s, ast.If):
                    visit(s.body, in_loop)
                    visit(s.orelse, in_loop)
                elif isinstance(s, (ast.For, ast.While)):
                    visit(s.body, True)
        visit(body, False)
        for p in self.nf.all_params:
            if p in counts:
                counts[p] += 1
        return {n for n, c in counts.items() if c > 1}

    def _outputs(self, s) -> List[str]:
        if isinstance(s, (ast.Assign, ast.AugAssign)):
            return describe(s, self.locals).outputs
        if isinstance(s, ast.For):
            return [n.id for n in name_nodes(s.target)]
        return []

    # -- driver ------------------------------------------------------------------
    def run(self) -> Transformed:
        fdef = self.nf.node
        fdef.body = fold_loop_items(fdef.body, self.act)
        body = list(fdef.body)
        ret = body.pop()
        assert isinstance(ret, ast.Return)
        fwd_body = self.forward_block(body, in_loop=False)
        residuals = self.names.fresh("residuals")
        fwd_ret = ast.Return(value=ast.Tuple(elts=[copy.deepcopy(ret.value), _name(residuals)],
                                             ctx=ast.Load()))
        forward = ast.FunctionDef(
            name=self.names.fresh(f"{self.nf.parsed.name}_forward"),
            args=self.forward_arguments(fdef.args), body=self.inits + fwd_body + [fwd_ret],
            decorator_list=[], returns=None, type_comment=None)

        g_param, adj_body = self.seed_output(ret)
        adj_body += self.adjoint_block(body, in_loop=False)
        grads = []
        for i in self.act.wrt:
            p = self.nf.all_params[i]
            b = self.bar_of(p)
            if b not in self.state:
                if self.last_line is not None:
                    adj_body.append(comment(f"'{p}' does not reach the output: its gradient "
                                            f"is zero"))
                adj_body.append(_assign(b, self.zeros_for(p)))
                self.state[b] = "owned"
            grads.append(_name(b))
        value = grads[0] if len(grads) == 1 else ast.Tuple(elts=grads, ctx=ast.Load())
        adj_body.append(ast.Return(value=value))
        ast.copy_location(forward, fdef)
        args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=residuals), ast.arg(arg=g_param)],
                             vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                             defaults=[])
        adjoint = ast.FunctionDef(name=self.names.fresh(f"{self.nf.parsed.name}_adjoint"),
                                  args=args, body=adj_body, decorator_list=[], returns=None,
                                  type_comment=None)
        ast.copy_location(adjoint, fdef)
        t = Transformed(self.nf, self.act, forward, adjoint, self.names, residuals,
                        self.callees, list(self.sites.values()))
        t.bindings = dict(self.default_bindings)
        return t

    def forward_arguments(self, args: ast.arguments) -> ast.arguments:
        """The user's parameters; default values are the function's own (evaluated
        when it was defined), bound by name, not re-evaluated from their text."""
        args = copy.deepcopy(args)
        fn = self.nf.parsed.fn
        values = list(getattr(fn, "__defaults__", None) or ())
        args.defaults = [self._default(value) for value in values]
        kwdefaults = getattr(fn, "__kwdefaults__", None) or {}
        new_kw = []
        for arg, default in zip(args.kwonlyargs, args.kw_defaults):
            new_kw.append(None if default is None else self._default(kwdefaults.get(arg.arg)))
        args.kw_defaults = new_kw
        return args

    def _default(self, value) -> ast.expr:
        """A literal for plain constants (readable); a bound name for anything else."""
        if _is_literal(value):
            return ast.Constant(value=value) if not isinstance(value, tuple) else \
                ast.parse(repr(value), mode="eval").body
        name = self.names.fresh("default", reserved=True)
        self.default_bindings[name] = value
        return _name(name)

    def seed_output(self, ret: ast.Return) -> Tuple[str, List[ast.stmt]]:
        value = ret.value
        if isinstance(value, ast.Name) and value.id in self.locals:
            g = self.bar_of(value.id)
            if value.id in self.act.active:
                self.state[g] = "shared"
            return g, []
        g = self.names.fresh("output_bar")
        out: List[ast.stmt] = []
        if isinstance(value, (ast.Tuple, ast.List)):
            for i, e in enumerate(value.elts):
                if isinstance(e, ast.Name) and e.id in self.act.active:
                    item = ast.Subscript(value=_name(g), slice=ast.Constant(value=i),
                                         ctx=ast.Load())
                    self.accumulate(e.id, item, out)
        return g, out

    # -- forward ------------------------------------------------------------------
    def save_before(self, var: str, in_loop: bool, out: List[ast.stmt], key) -> None:
        """Keep the value an assignment is about to overwrite (pruned if unread)."""
        if var not in self.overwritable:
            return
        self.save_value(var, in_loop, out, key, _name(var))

    def save_value(self, var: str, in_loop: bool, out: List[ast.stmt], key,
                   value: ast.expr) -> None:
        if in_loop:
            stack = self.stacks.get(var)
            if stack is None:
                stack = self.stacks[var] = self.names.fresh(f"{var}_stack")
                init = _assign(stack, ast.List(elts=[], ctx=ast.Load()))
                init.s2s_stack_of = var
                init.s2s_slot = stack
                self.inits.append(init)
            node = ast.Expr(value=ast.Call(
                func=ast.Attribute(value=_name(stack), attr="append", ctx=ast.Load()),
                args=[value], keywords=[]))
            self.saves.setdefault(key, list).append((var, "stack", stack))
        else:
            slot = self.names.fresh(f"{var}_prev")
            node = _assign(slot, value)
            self.saves.setdefault(key, list).append((var, "slot", slot))
        node.s2s_save_of = var
        node.s2s_slot = self.saves.require(key)[-1][2]
        if var not in self.nf.all_params and not any(
                getattr(i, "s2s_init_of", None) == var for i in self.inits):
            init = _assign(var, ast.Constant(value=None))
            init.s2s_init_of = var
            self.inits.append(init)
        out.append(node)

    def forward_block(self, stmts: Sequence[ast.stmt], in_loop: bool) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        for s in stmts:
            if isinstance(s, ast.If):
                node = ast.If(test=s.test, body=self.forward_block(s.body, in_loop),
                              orelse=self.forward_block(s.orelse, in_loop))
                out.append(ast.copy_location(node, s))
            elif isinstance(s, ast.For):
                out.extend(self.forward_for(s, in_loop))
            elif isinstance(s, ast.While):
                out.extend(self.forward_while(s, in_loop))
            elif isinstance(s, (ast.Assign, ast.AugAssign)):
                out.extend(self.forward_assign(s, in_loop))
            elif isinstance(s, ast.Expr) and describe(s, self.locals).kind == "ufunc_at":
                out.extend(self.forward_ufunc_at(s, in_loop))
            else:
                if isinstance(s, ast.Expr):
                    out += self.write_guards(describe(s, self.locals))
                out.append(s)
        return out

    def write_guards(self, op: Op) -> List[ast.stmt]:
        """A called user function that writes into an argument array in place changes
        a value behind this adjoint's back: refused at run time when an array goes
        there (numbers are rebound, which is fine)."""
        return [ast.Expr(value=helper_call("unshared", _name(arg),
                                           *[ast.Constant(value=f) for f in fields]))
                for arg, fields in call_write_guards(op, self.act.ints, self.locals,
                                                     self.nf.parsed)]

    def forward_ufunc_at(self, s: ast.Expr, in_loop: bool) -> List[ast.stmt]:
        """np.add.at(a, idx, b): keep the items of a it changes (restored later)."""
        op = describe(s, self.locals)
        base, index = op.outputs[0], s.value.args[1]
        if in_loop:
            self.overwritable.add(base)
        out: List[ast.stmt] = []
        self.save_value(base, in_loop, out, s,
                        helper_call("copy_item", _name(base), copy.deepcopy(index)))
        out.append(s)
        return out

    def sequence_guard(self, s, value: ast.expr) -> List[ast.stmt]:
        """`a + b` / `a * n` on values that may be lists or tuples: concatenation
        and repetition are not differentiated, so they are refused where they run
        (at compile time when an operand is known to be a list or tuple)."""
        if not may_build_sequence(value, self.act.leaves):
            return []
        add = isinstance(value.op, ast.Add)
        words = ("concatenating lists or tuples that carry a gradient" if add else
                 "repeating a list or tuple that carries a gradient")
        hint = "Build the list with append, extend or a comprehension."

        def known(node) -> bool:
            return isinstance(node, ast.Name) and node.id in self.sequences

        def integer(node) -> bool:
            return isinstance(node, ast.Constant) and type(node.value) is int
        if (add and known(value.left) and known(value.right)) or (not add and (
                (known(value.left) and integer(value.right)) or
                (known(value.right) and integer(value.left)))):
            raise self.err(s, words, hint)
        guard = ast.Expr(value=helper_call(
            "no_sequence_arithmetic", copy.deepcopy(value.left), copy.deepcopy(value.right),
            *[ast.Constant(value=f) for f in guard_fields(self.err(s, words, hint))]))
        return [ast.copy_location(guard, s)]

    def forward_assign(self, s, in_loop: bool) -> List[ast.stmt]:
        op = describe(s, self.locals)
        out: List[ast.stmt] = []
        if op.kind == "rule" and set(op.diff_inputs) & self.act.active:
            out += self.sequence_guard(s, s.value)
        if in_loop:
            # Inside a loop every assignment overwrites the previous iteration's
            # value, also the ones this pass adds (inner trip counts and ranges).
            self.overwritable.update(op.outputs)
        if op.kind == "setitem":
            # x[i] = v: keep the items it overwrites (restored in the adjoint).
            base = s.targets[0].value.id
            self.save_value(base, in_loop, out, s,
                            helper_call("copy_item", _name(base),
                                        _index_expr(s.targets[0].slice)))
            out.append(s)
            return out
        if op.kind == "augassign":
            # x op= v: arrays change in place, so keep a copy of the old value.
            var = s.target.id
            if var in self.act.active:
                out += self.sequence_guard(s, ast.BinOp(left=_name(var), op=s.op,
                                                        right=s.value))
            guard = getattr(s, "s2s_guard", None)
            if guard is not None:
                out.append(ast.Expr(value=helper_call("unshared", _name(var),
                                                      *[ast.Constant(value=g) for g in guard])))
            self.save_value(var, in_loop, out, s, helper_call("copy_value", _name(var)))
            out.append(s)
            return out
        key = s
        if op.kind == "pop":
            self.save_before(op.outputs[0], in_loop, out, key)
            out.append(s)
            return out
        if op.kind == "call":
            out += self.write_guards(op)
        snapshot = getattr(s, "s2s_snapshot", False)   # a later in-place write would see it
        outputs = list(op.outputs)
        site = None
        if op.kind in ("apply", "call") and any(n in self.act.active for n in op.outputs):
            site = self.site_for(s, op)   # keyed by the statement the adjoint walks too
            outputs += site.slot_names
            if in_loop:
                # A callee's residuals or a Function's saved values, once per iteration.
                self.overwritable.update(site.slot_names)
        for o in outputs:
            self.save_before(o, in_loop, out, key)
        if site is not None:
            out.append(site.forward_statement(s))
            if snapshot:
                out.extend(_assign(o, helper_call("snapshot", _name(o))) for o in op.outputs)
        elif snapshot:
            copied = copy.copy(s)
            copied.value = helper_call("snapshot", s.value)
            out.append(copied)
        else:
            out.append(s)
        return out

    def site_for(self, s, op: Op):
        """The inlined Function (apply) or the separately compiled callee (call)."""
        site = self.sites.get(s)
        if site is None:
            if op.kind == "apply":
                needs = tuple(isinstance(a, ast.Name) and a.id in self.act.varied
                              for a in op.call.args)
                site = sites.function_site(op.callee, op.call, op.outputs, needs, self.names,
                                            self.nf, s)
            else:
                site = sites.callee_site(op, s, self.act, self.names, self.nf)
                self.callees[site.forward_name] = site
            self.sites.record(s, site)
        return site

    def setup_assign(self, loop, target: str, value: ast.expr, in_loop: bool) -> List[ast.stmt]:
        """A loop's range or trip counter. Inside an outer loop it is saved per
        iteration like any variable, and restored after the adjoint loop."""
        stmt = ast.copy_location(_assign(target, value), loop)
        self.loop_setups.setdefault(loop, list).append(stmt)
        return self.forward_assign(stmt, in_loop)

    def forward_for(self, s: ast.For, in_loop: bool) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        header = loop_header_op(s)
        has_break = any(isinstance(n, ast.Break) for n, _ in iter_statements(s.body))
        it = s.iter
        callee = getattr(it, "s2s_callee", None)
        info: _LoopInfo
        body_prefix: List[ast.stmt] = []
        if callee is range and isinstance(s.target, ast.Name):
            stem = s.target.id
            rng = self.names.fresh(f"{stem}_range")
            info = _LoopInfo("range", range_name=rng, target=s.target)
            out += self.setup_assign(s, rng, it, in_loop)
            loop_iter: ast.expr = _name(rng)
            target = s.target
        elif any(n in self.act.varied for n in header.diff_inputs):
            # Iterating over a differentiated array or list: loop over indices so
            # the adjoint can scatter each item's gradient back.
            rng, target, body_prefix = self.index_loop(s, out, in_loop)
            info = _LoopInfo("range", range_name=rng, target=target)
            loop_iter = _name(rng)
        else:
            info = _LoopInfo("items")
            loop_iter = it
            target, body_prefix = self.item_target(s.target)
            has_break = True  # the trip count is unknown without len()
        if has_break:
            info.trips = self.names.fresh("trips")
            out += self.setup_assign(s, info.trips, ast.Constant(0), in_loop)
            incr = ast.AugAssign(target=_name(info.trips, True), op=ast.Add(),
                                 value=ast.Constant(1))
            body_prefix = [incr] + body_prefix
        info.item_assigns = [b for b in body_prefix if isinstance(b, ast.Assign)]
        copied = getattr(s, "s2s_snapshot_targets", frozenset())
        for b in info.item_assigns:   # loop targets a later in-place write would change
            if isinstance(b.targets[0], ast.Name) and b.targets[0].id in copied:
                b.s2s_snapshot = True
        self.loops.record(s, info)
        body = list(body_prefix[:1]) if has_break else []
        for b in (body_prefix[1:] if has_break else body_prefix):
            body += self.forward_assign(b, True)
        body += self.forward_block(s.body, True)
        node = ast.For(target=target, iter=loop_iter, body=body, orelse=[], type_comment=None)
        out.append(ast.copy_location(node, s))
        return out

    def index_loop(self, s: ast.For, out: List[ast.stmt], in_loop: bool):
        """`for x in xs` -> `for k in range(len(xs)): x = xs[k]` (also zip/enumerate)."""
        pairs: List[Tuple[ast.expr, ast.expr]] = []   # (target, sequence) pairs
        backwards: Set[int] = set()                    # pairs read by reversed()
        index_targets: List[ast.expr] = []

        def flatten(target, it):
            callee = getattr(it, "s2s_callee", None)
            if callee is enumerate and isinstance(target, ast.Tuple) and len(target.elts) == 2:
                index_targets.append(target.elts[0])
                flatten(target.elts[1], it.args[0])
            elif callee is zip and isinstance(target, ast.Tuple) and \
                    len(target.elts) == len(it.args):
                for t, a in zip(target.elts, it.args):
                    flatten(t, a)
            elif callee is reversed and len(it.args) == 1 and \
                    not isinstance(it.args[0], ast.Call):
                backwards.add(len(pairs))
                pairs.append((target, it.args[0]))
            elif isinstance(it, ast.Call):
                raise self.err(it, "cannot iterate over this expression while "
                                   "differentiating through it",
                               "Iterate over an array, a list, range(), zip() or enumerate().")
            else:
                pairs.append((target, it))
        flatten(s.target, s.iter)
        first = pairs[0][1]
        stem = first.id if isinstance(first, ast.Name) else "item"
        k = self.names.fresh(f"{stem}_index")
        lengths = [ast.Call(func=self.builtin("len"), args=[copy.deepcopy(seq)], keywords=[])
                   for _, seq in pairs]
        n = lengths[0] if len(lengths) == 1 else ast.Call(func=self.builtin("min"), args=lengths,
                                                           keywords=[])
        rng = self.names.fresh(f"{k}_range")
        range_call = ast.Call(func=self.builtin("range"), args=[n], keywords=[])
        range_call.s2s_callee = range
        out += self.setup_assign(s, rng, range_call, in_loop)
        prefix: List[ast.stmt] = []
        for t in index_targets:
            prefix.append(ast.copy_location(_assign(t.id, _name(k)), s))
        def unpack(t, value: ast.expr) -> None:
            # `for W, b in params`: the item gets a name, then each target reads its
            # part (item[0], item[1], nested as deep as the target).
            if isinstance(t, ast.Name):
                prefix.append(ast.copy_location(_assign(t.id, value), s))
                return
            if not isinstance(t, (ast.Tuple, ast.List)) or \
                    any(isinstance(e, ast.Starred) for e in t.elts):
                raise self.err(s, "this loop target over a differentiated sequence",
                               "Unpack the item in the loop body.")
            item = self.names.fresh(f"{stem}_item")
            prefix.append(ast.copy_location(_assign(item, value), s))
            # The item is new here, after the analysis: it carries a gradient exactly
            # when a target it is unpacked into does.
            parts = {n.id for n in name_nodes(t)}
            self.locals.add(item)
            for facts in (self.act.varied, self.act.useful, self.act.active):
                if parts & facts:
                    facts.add(item)
            for j, e in enumerate(t.elts):
                unpack(e, ast.Subscript(value=_name(item), slice=ast.Constant(value=j),
                                        ctx=ast.Load()))

        for i, (t, seq) in enumerate(pairs):
            # reversed(xs) reads xs[-1 - k]: the same items, last first.
            index = ast.BinOp(left=ast.Constant(-1), op=ast.Sub(), right=_name(k)) \
                if i in backwards else _name(k)
            unpack(t, ast.Subscript(value=copy.deepcopy(seq), slice=index, ctx=ast.Load()))
        for p in prefix:
            p.s2s_origin = s
            self.overwritable.add(p.targets[0].id)
        return rng, _name(k, True), prefix

    def item_target(self, target) -> Tuple[ast.expr, List[ast.stmt]]:
        """Loop targets are copied into the user's names so saves can see them."""
        prefix: List[ast.stmt] = []

        def visit(t):
            if isinstance(t, ast.Name):
                item = self.names.fresh(f"{t.id}_item")
                a = ast.copy_location(_assign(t.id, _name(item)), t)
                prefix.append(a)
                self.overwritable.add(t.id)
                return _name(item, True)
            return ast.Tuple(elts=[visit(e) for e in t.elts], ctx=ast.Store())
        return visit(target), prefix

    def forward_while(self, s: ast.While, in_loop: bool) -> List[ast.stmt]:
        trips = self.names.fresh("trips")
        info = _LoopInfo("while", trips=trips)
        self.loops.record(s, info)
        out = self.setup_assign(s, trips, ast.Constant(0), in_loop)
        incr = ast.AugAssign(target=_name(trips, True), op=ast.Add(), value=ast.Constant(1))
        body = [incr] + self.forward_block(s.body, True)
        out.append(ast.copy_location(ast.While(test=s.test, body=body, orelse=[]), s))
        return out

    # -- adjoint ------------------------------------------------------------------
    def reset(self, bar: str) -> None:
        """The adjoint's value was consumed: it is symbolically zero again."""
        self.state.pop(bar, None)
        self.resets.add(bar)

    def accumulate(self, var: str, value: ast.expr, out: List[ast.stmt]) -> None:
        b = self.bar_of(var)
        if b in self.state:
            if var in self.sequences or var not in self.act.leaves:
                # Maybe a list, tuple or dict (an argument, an item of one, what a
                # callee returned): added item by item, as `+` would concatenate.
                out.append(_assign(b, helper_call("add", _name(b), value)))
            elif self.state[b] == "owned" and not self.pure:
                # Nothing else refers to this array: add in place, no allocation.
                out.append(ast.AugAssign(target=_name(b, True), op=ast.Add(), value=value))
            else:
                out.append(_assign(b, ast.BinOp(left=_name(b), op=ast.Add(), right=value)))
            self.state[b] = "owned"
        else:
            out.append(_assign(b, value))
            # Arithmetic makes a new array (or an immutable number): nothing else
            # refers to it. Anything else (a name, a view, a helper) may be shared.
            fresh = isinstance(value, (ast.BinOp, ast.UnaryOp)) and not self.pure
            self.state[b] = "owned" if fresh else "shared"

    def materialize(self, var: str, out: List[ast.stmt]) -> None:
        b = self.bar_of(var)
        out.append(_assign(b, self.zeros_for(var)))
        self.state[b] = "owned"

    def zeros_for(self, var: str) -> ast.expr:
        """A zero cotangent for var; a tuple parameter's constant items (which the
        caller never reads) stay a scalar zero instead of an array of their size."""
        flags = self.act.item_flags.get(var)
        if flags is not None and not _all_vary(flags):
            return helper_call("zeros_like", _name(var), ast.Constant(value=flags))
        return helper_call("zeros_like", _name(var))

    def mark_line(self, s, out: List[ast.stmt], force: bool = False) -> None:
        opened = line_comment(s, self.nf.parsed, self.last_line, force)
        if opened is not None:
            self.last_line = opened[0]
            self.line_comment = opened[1]
            out.append(opened[1])
        site = self.sites.get(s)
        if isinstance(site, sites.FunctionSite) and site.inlined and \
                self.line_comment is not None:
            # The block that differentiates this line names the Function inlined in it.
            text = self.line_comment.value.value
            mark = site.inlined_from()
            if mark not in text:
                self.line_comment.value.value = f"{text}  # {mark}"

    def restores(self, s, out: List[ast.stmt]) -> None:
        for var, kind, name in reversed(self.saves.get(s, [])):
            if kind == "stack":
                value = ast.Call(func=ast.Attribute(value=_name(name), attr="pop",
                                                    ctx=ast.Load()), args=[], keywords=[])
            else:
                value = _name(name)
            node = _assign(var, value)
            node.s2s_restore_of = var
            node.s2s_slot = name
            out.append(node)

    def adjoint_block(self, stmts: Sequence[ast.stmt], in_loop: bool) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        for s in reversed(stmts):
            if isinstance(s, ast.If):
                out.extend(self.adjoint_if(s, in_loop))
            elif isinstance(s, (ast.For, ast.While)):
                out.extend(self.adjoint_loop(s))
            elif isinstance(s, (ast.Assign, ast.AugAssign)):
                out.extend(self.adjoint_assign(s))
            elif isinstance(s, ast.Expr) and describe(s, self.locals).kind == "append":
                self.append_adjoint(s, describe(s, self.locals), out)
            elif isinstance(s, ast.Expr) and describe(s, self.locals).kind == "ufunc_at":
                self.ufunc_at_adjoint(s, describe(s, self.locals), out)
        return out

    def ufunc_at_adjoint(self, s: ast.Expr, op: Op, out: List[ast.stmt]) -> None:
        """np.add.at(a, idx, b): a's cotangent passes through unchanged; b receives
        the cotangent of every element it was added to (a gather: repeated indices
        read the same element again), negated for np.subtract.at."""
        base = op.outputs[0]
        _, index, value = s.value.args
        b = self.bar_of(base)
        if base in self.act.active and b in self.state and \
                isinstance(value, ast.Name) and value.id in self.act.active:
            self.mark_line(s, out)
            gathered: ast.expr = ast.Subscript(value=_name(b), slice=copy.deepcopy(index),
                                               ctx=ast.Load())
            if UFUNC_AT_SIGNS[ufunc_at_kind(s.value.s2s_callee)] < 0:
                gathered = ast.UnaryOp(op=ast.USub(), operand=gathered)
            part = self.names.fresh(f"{value.id}_bar_part")
            out.append(_assign(part, helper_call("unbroadcast", gathered, _name(value.id))))
            self.accumulate(value.id, _name(part), out)
        saved = self._saved_value(s, out)
        if saved is not None:
            if self.pure:
                node = _assign(base, helper_call("with_item", _name(base), index, saved))
            else:
                node = ast.Expr(value=helper_call("restore_item", _name(base), index, saved))
                node.s2s_restore_item = base
            node.s2s_restore_of = base
            node.s2s_slot = self.saves.require(s)[-1][2]
            out.append(node)

    def adjoint_assign(self, s) -> List[ast.stmt]:
        op = describe(s, self.locals)
        out: List[ast.stmt] = []
        if op.kind == "setitem":
            self.setitem_adjoint(s, op, out)
            return out
        if op.kind == "augassign":
            self.augassign_adjoint(s, op, out)
            return out
        if op.kind == "pop":
            self.pop_adjoint(s, op, out)
            return out
        active_outs = [o for o in op.outputs if o in self.act.active]
        live = [o for o in active_outs if self.bar_of(o) in self.state]
        if live and op.kind in _DIFFERENTIABLE_KINDS and \
                any(n in self.act.active for n in op.diff_inputs):
            self.mark_line(s, out)
            self.contributions(s, op, out)
        for o in active_outs:
            self.reset(self.bar_of(o))
        self.restores(s, out)
        return out

    def contributions(self, s, op: Op, out: List[ast.stmt]) -> None:
        kind = op.kind
        if kind == "copy":
            src = op.diff_inputs[0]
            if src in self.act.active:
                self.accumulate(src, _name(self.bar_of(op.outputs[0])), out)
            return
        g_name = self.bar_of(op.outputs[0]) if op.outputs else None
        if kind == "pack":
            value = s.value
            items = list(zip(value.keys, value.values)) if isinstance(value, ast.Dict) else \
                [(ast.Constant(value=i), e) for i, e in enumerate(value.elts)]
            for key, e in items:
                if isinstance(e, ast.Name) and e.id in self.act.active:
                    if isinstance(value, ast.Dict):
                        item: ast.expr = helper_call("dict_item_grad", _name(g_name),
                                                     copy.deepcopy(key), _name(e.id))
                    else:
                        item = ast.Subscript(value=_name(g_name), slice=key, ctx=ast.Load())
                    self.accumulate(e.id, item, out)
            return
        if kind in ("getitem", "field"):
            self.getitem_contribution(s, op, out)
            return
        if kind == "rule":
            self.rule_contribution(s, op, out)
            return
        if kind in ("apply", "call"):
            self.site_contribution(s, op, out)
            return
        raise AssertionError(kind)  # pragma: no cover

    def _saved_value(self, s, out: List[ast.stmt]) -> Optional[ast.expr]:
        """The value the forward saved for statement s (popped from its stack)."""
        saves = self.saves.get(s, [])
        if not saves:
            return None
        var, kind, name = saves[-1]
        if kind == "slot":
            return _name(name)
        old = self.names.fresh(f"{var}_old")
        pop = _assign(old, ast.Call(func=ast.Attribute(value=_name(name), attr="pop",
                                                        ctx=ast.Load()), args=[], keywords=[]))
        pop.s2s_restore_of = old
        pop.s2s_slot = name
        pop.s2s_restore_temp = True
        out.append(pop)
        return _name(old)

    def setitem_adjoint(self, s, op: Op, out: List[ast.stmt]) -> None:
        """x[i] = v: v receives x_bar[i]; the overwritten items get no gradient."""
        target = s.targets[0]
        base = target.value.id
        index = _index_expr(target.slice)
        b = self.bar_of(base)
        zero_list = None
        if base in self.act.active and b in self.state:
            self.mark_line(s, out)
            value = s.value
            part = None
            if isinstance(value, ast.Name) and value.id in self.act.active:
                part = self.names.fresh(f"{value.id}_bar_part")
                if self._basic_index(target.slice):
                    item = helper_call("copy_item", _name(b), copy.deepcopy(index))
                    # A list's item is the value itself; an array's may broadcast it.
                    grad = item if base in self.sequences else \
                        helper_call("unbroadcast", item, _name(value.id))
                else:  # an index array may repeat: only the last writer counts
                    grad = helper_call("written_grad", _name(b), copy.deepcopy(index),
                                       _name(value.id))
                out.append(_assign(part, grad))
            if self.pure:
                out.append(_assign(b, helper_call("with_zeroed", _name(b),
                                                  copy.deepcopy(index))))
                self.state[b] = "owned"
            else:
                self.inplace.add(b)
                if self.state[b] == "shared":
                    out.append(_assign(b, helper_call("copy_adjoint", _name(b))))
                    self.state[b] = "owned"
                if base in self.sequences:
                    zero_list = (b, index)    # once the old items are back (below)
                else:
                    out.append(ast.Expr(value=helper_call("zero_item", _name(b),
                                                          copy.deepcopy(index))))
            if part is not None:
                # After the zeroing: the value may be the array itself (x[i] = x).
                self.accumulate(value.id, _name(part), out)
        saved = self._saved_value(s, out)
        if saved is not None:
            if self.pure:
                node = _assign(base, helper_call("with_item", _name(base), index, saved))
            else:
                node = ast.Expr(value=helper_call("restore_item", _name(base), index, saved))
                node.s2s_restore_item = base
            node.s2s_restore_of = base
            node.s2s_slot = self.saves.require(s)[-1][2]
            out.append(node)
        if zero_list is not None:
            b, index = zero_list
            like = [_name(base)] if saved is not None else []
            out.append(ast.Expr(value=helper_call("zero_item", _name(b), copy.deepcopy(index),
                                                  *like)))

    def _basic_index(self, index: ast.expr) -> bool:
        """An index that cannot name an element twice: ints, slices, None, `...`."""
        if isinstance(index, ast.Tuple):
            return all(self._basic_index(e) for e in index.elts)
        if isinstance(index, ast.Slice):
            return True
        if isinstance(index, ast.Constant):
            return index.value is None or index.value is Ellipsis or (
                isinstance(index.value, int) and not isinstance(index.value, bool))
        if isinstance(index, ast.UnaryOp) and isinstance(index.operand, ast.Constant):
            return self._basic_index(index.operand)
        return isinstance(index, ast.Name) and index.id in self.act.ints

    def augassign_adjoint(self, s, op: Op, out: List[ast.stmt]) -> None:
        """x op= v reads like x_new = op(x_old, v), x_old being the saved copy."""
        var = s.target.id
        saved = self._saved_value(s, out)
        b = self.bar_of(var)
        if var in self.act.active and b in self.state and op.rule is not None:
            self.mark_line(s, out)
            rule_op = Op("rule", [var], diff_inputs=op.diff_inputs, rule=op.rule,
                         bound=dict(zip(op.rule.params, [saved, s.value])))
            self.rule_contribution(s, rule_op, out, reset=[var], old={var: saved})
        else:
            self.reset(b)
        if saved is not None:
            node = _assign(var, saved)
            node.s2s_restore_of = var
            node.s2s_slot = self.saves.require(s)[-1][2]
            out.append(node)

    def append_adjoint(self, s, op: Op, out: List[ast.stmt]) -> None:
        """xs.append(v): v receives the last item of xs_bar, which is removed."""
        xs = op.outputs[0]
        value = op.call.args[0]
        b = self.bar_of(xs)
        if xs in self.act.active and b in self.state:
            self.mark_line(s, out)
            if not isinstance(value, ast.Name) and \
                    any(n in self.act.active for n in names(value)):
                raise InternalError(f"the item appended to {xs!r} is not a variable "
                                    f"({ast.unparse(value)})")
            wanted = isinstance(value, ast.Name) and value.id in self.act.active
            part = self.names.fresh(f"{value.id}_bar_part") if wanted else None
            if self.pure:
                if wanted:
                    out.append(_assign(part, helper_call("last", _name(b))))
                out.append(_assign(b, helper_call("drop_last", _name(b))))
            else:
                self.inplace.add(b)
                if self.state[b] == "shared":
                    out.append(_assign(b, helper_call("copy_adjoint", _name(b))))
                    self.state[b] = "owned"
                pop = ast.Call(func=ast.Attribute(value=_name(b), attr="pop", ctx=ast.Load()),
                               args=[], keywords=[])
                out.append(_assign(part, pop) if wanted else ast.Expr(value=pop))
            if wanted:
                self.accumulate(value.id, _name(part), out)
        if self.pure:
            node = _assign(xs, helper_call("drop_last", _name(xs)))
        else:
            node = ast.Expr(value=ast.Call(func=ast.Attribute(value=_name(xs), attr="pop",
                                                              ctx=ast.Load()),
                                           args=[], keywords=[]))
            node.s2s_restore_item = xs
        node.s2s_restore_of = xs
        node.s2s_slot = f"{xs}.append"
        out.append(node)

    def pop_adjoint(self, s, op: Op, out: List[ast.stmt]) -> None:
        """v = xs.pop(): xs_bar gets v_bar back as its last item; xs gets v back."""
        v, xs = op.outputs
        vb, xb = self.bar_of(v), self.bar_of(xs)
        if xs in self.act.active and (vb in self.state or xb in self.state):
            self.mark_line(s, out)
            if xb not in self.state:
                self.materialize(xs, out)
            elif self.state[xb] == "shared" and not self.pure:
                out.append(_assign(xb, helper_call("copy_adjoint", _name(xb))))
                self.state[xb] = "owned"
            item = _name(vb) if vb in self.state else helper_call("zeros_like", _name(v))
            self.inplace.add(xb)
            self._push(xb, item, out)
        self.reset(vb)
        node = self._push(xs, _name(v), out)
        node.s2s_restore_of = xs
        node.s2s_slot = f"{xs}.pop"
        if not self.pure:
            node.s2s_restore_item = xs
        self.restores(s, out)

    def _push(self, xs: str, item: ast.expr, out: List[ast.stmt]) -> ast.stmt:
        if self.pure:
            node = _assign(xs, helper_call("push", _name(xs), item))
        else:
            node = ast.Expr(value=ast.Call(func=ast.Attribute(value=_name(xs), attr="append",
                                                              ctx=ast.Load()),
                                           args=[item], keywords=[]))
        out.append(node)
        return node

    def getitem_contribution(self, s, op: Op, out: List[ast.stmt]) -> None:
        """v = x[i] (and v = p.W, the item of a namedtuple named W): x_bar[i] += v_bar."""
        base = s.value.value
        if not (isinstance(base, ast.Name) and base.id in self.act.active):
            return
        b = self.bar_of(base.id)
        g = _name(self.bar_of(op.outputs[0]))
        index = field_index(s.value) if op.kind == "field" else _index_expr(s.value.slice)
        if self.pure:
            if b not in self.state:
                self.materialize(base.id, out)
            out.append(_assign(b, helper_call("scatter_add", _name(b), index, g)))
            self.state[b] = "owned"
            return
        self.inplace.add(b)
        if b not in self.state:
            self.materialize(base.id, out)
        elif self.state[b] == "shared":
            out.append(_assign(b, helper_call("copy_adjoint", _name(b))))
            self.state[b] = "owned"
        out.append(ast.Expr(value=helper_call("add_at", _name(b), index, g)))

    def rule_contribution(self, s, op: Op, out: List[ast.stmt], reset: Sequence[str] = (),
                          old: Optional[Dict[str, ast.expr]] = None) -> None:
        """Splice the rule's VJP. `reset` adjoints are consumed before the parts are
        added (x op= v, where the output and an input are the same variable); `old`
        names the saved value standing in for such an input."""
        rule = op.rule
        wanted: Dict[str, str] = {}
        targets: List[Tuple[str, str]] = []
        for param in rule.differentiable():
            atom = op.bound.get(param)
            if atom is None:
                continue
            if param in rule.sequence and isinstance(atom, (ast.Tuple, ast.List)):
                for i, e in enumerate(atom.elts):
                    if isinstance(e, ast.Name) and e.id in self.act.active:
                        key = f"{param}[{i}]"
                        wanted[key] = self.names.fresh(f"{e.id}_bar_part")
                        targets.append((e.id, wanted[key]))
                continue
            if param in rule.sequence and isinstance(atom, ast.Name):
                # A list built at run time: its adjoint is a list, added itemwise.
                self.sequences.add(atom.id)
            var = _var_for(atom, old)
            if var is not None and var in self.act.active:
                wanted[param] = self.names.fresh(f"{var}_bar_part")
                targets.append((var, wanted[param]))
        if not wanted:
            for v in reset:
                self.reset(self.bar_of(v))
            return
        gs = [_name(self.bar_of(o)) for o in op.outputs]
        if len(op.outputs) > 1:
            for o in op.outputs:
                if self.bar_of(o) not in self.state:
                    self.materialize(o, out)
            g: ast.expr = ast.Tuple(elts=gs, ctx=ast.Load())
            ans: ast.expr = ast.Tuple(elts=[_name(o) for o in op.outputs], ctx=ast.Load())
        else:
            g, ans = gs[0], _name(op.outputs[0])
        ctx = self.first_iteration
        # Only where skipping pays for the test: products (matmul, dot, einsum), whose
        # adjoint is a product again; elementwise parts are cheaper than the branch.
        late = set(ctx[1].get(s, ())) if ctx is not None and not reset and \
            not registry.is_elementwise(rule) else set()
        late_keys = {k for k, part in wanted.items()
                     if any(v in late and p == part for v, p in targets)}
        if late_keys:
            now = {k: v for k, v in wanted.items() if k not in late_keys}
            if now:
                out.append(sites.rule_placeholder(rule, op.bound, g, ans, now, s))
            later = [ast.copy_location(sites.rule_placeholder(
                rule, op.bound, g, ans, {k: wanted[k] for k in late_keys}, s), s)]
            for var, part in targets:
                if var in late and part in {wanted[k] for k in late_keys}:
                    self.accumulate(var, _name(part), later)
            out.append(ast.If(test=copy.deepcopy(ctx[0]), body=later, orelse=[]))
            for var, part in targets:
                if not (var in late and part in {wanted[k] for k in late_keys}):
                    self.accumulate(var, _name(part), out)
            return
        out.append(sites.rule_placeholder(rule, op.bound, g, ans, wanted, s))
        for v in reset:
            self.reset(self.bar_of(v))
        for var, part in targets:
            self.accumulate(var, _name(part), out)

    def site_contribution(self, s, op: Op, out: List[ast.stmt]) -> None:
        site = self.sites.require(s)
        for o in op.outputs:
            if self.bar_of(o) not in self.state:
                self.materialize(o, out)
        gs = [_name(self.bar_of(o)) for o in op.outputs]
        parts: List[Tuple[str, str]] = []
        wanted: Dict[int, str] = {}
        for i, arg in enumerate(site.arg_atoms):
            if isinstance(arg, ast.Name) and arg.id in self.act.active and \
                    i not in site.static_none:
                wanted[i] = self.names.fresh(f"{arg.id}_bar_part")
                parts.append((arg.id, wanted[i]))
        if not wanted:
            return
        out.append(site.adjoint_placeholder(gs, wanted, s))
        for var, part in parts:
            self.accumulate(var, _name(part), out)

    def adjoint_if(self, s: ast.If, in_loop: bool) -> List[ast.stmt]:
        before = dict(self.state)
        last = self.last_line
        body = self.adjoint_block(s.body, in_loop)
        state_body = self.state
        self.state, self.last_line = dict(before), last
        orelse = self.adjoint_block(s.orelse, in_loop)
        state_else = self.state
        self.last_line = None
        merged = {}
        for b in sorted(set(state_body) | set(state_else)):
            var = self._var_of(b)
            if b not in state_body:
                self._materialize_into(var, body)
                state_body[b] = "owned"
            elif b not in state_else:
                self._materialize_into(var, orelse)
                state_else[b] = "owned"
            both_owned = state_body[b] == state_else[b] == "owned"
            merged[b] = "owned" if both_owned else "shared"
        self.state = merged
        if not body and not orelse:
            return []
        node = ast.If(test=copy.deepcopy(s.test), body=body or [ast.Pass()], orelse=orelse)
        return [node]

    def _var_of(self, bar: str) -> str:
        return self.var_of_bar[bar]

    def _materialize_into(self, var: str, block: List[ast.stmt]) -> None:
        block.append(_assign(self.bar_of(var), self.zeros_for(var)))

    def reversed_body(self, s) -> List[ast.stmt]:
        """The adjoint of one iteration: the body backwards, then the item loads."""
        info = self.loops.require(s)
        outer = self.first_iteration
        self.first_iteration = self.entry_reads(s, info)
        try:
            body = self.adjoint_block(s.body, in_loop=True)
        finally:
            self.first_iteration = outer
        for b in reversed(info.item_assigns):
            body += self.adjoint_assign(b)
        return body

    def entry_reads(self, s: ast.For, info: _LoopInfo):
        """(test, reads) for a top-level loop over a range: `reads` maps each body
        statement to the loop-carried names it reads before the body writes them
        and whose value on entering the loop carries no gradient (`h = X` before
        `for W, b in params: h = np.tanh(h @ W + b)`). In the first iteration
        those reads see that entry value, so what their adjoint contributes there
        is dead: it runs only when `test` (not the first iteration) holds."""
        if self.pure or info.kind != "range" or not isinstance(info.target, ast.Name) or \
                not any(st is s for st in self.nf.node.body):
            return None
        written = {n.id for b in info.item_assigns for n in name_nodes(b.targets[0])}
        written.add(info.target.id)
        written |= {n for b in s.body for n in stored_names(b)}
        entry_quiet = {n for n in written if self._quiet_at_entry(n, s)}
        reads: StatementFacts[Set[str]] = StatementFacts("first-iteration reads")
        seen = {n.id for b in info.item_assigns for n in name_nodes(b.targets[0])}
        seen.add(info.target.id)
        for b in s.body:
            if isinstance(b, (ast.Assign, ast.Expr)):
                loads = {n.id for n in name_nodes(b.value) if isinstance(n.ctx, ast.Load)}
                dead = (loads - seen) & entry_quiet
                if dead:
                    reads.record(b, dead)
            seen |= set(stored_names(b))
        if not reads:
            return None
        first = ast.Subscript(value=_name(info.range_name), slice=ast.Constant(0),
                              ctx=ast.Load())
        test = ast.Compare(left=_name(info.target.id), ops=[ast.NotEq()], comparators=[first])
        return test, reads

    def _quiet_at_entry(self, name: str, loop: ast.For) -> bool:
        """Whether every value `name` can hold when a top-level loop starts is
        free of the inputs: only assigned before it from values that do not vary."""
        if name in getattr(self.nf, "written_in_place", ()):
            return False   # an in-place write (to it or an alias) may carry the inputs in
        params = set(self.nf.all_params)
        if name in params and name in self.act.varied and \
                self.nf.all_params.index(name) in self.act.wrt:
            return False
        defined = False
        for top in self.nf.node.body:
            if top is loop:
                break
            for st, _ in iter_statements([top]):
                if name not in stored_names(st):
                    continue
                op = describe(st, self.locals) if not isinstance(st, (ast.For, ast.If,
                                                                      ast.While)) else None
                if op is None or set(op.diff_inputs) & self.act.varied:
                    return False
                defined = True
        return defined or name in params

    def probe(self, s) -> Tuple[Set[str], Set[str]]:
        """Run the reversed body without keeping its code: (end state, in-place targets)."""
        saved = (set(self.names.taken), dict(self.state), self.last_line, set(self.inplace),
                 set(self.resets))
        self.inplace, self.resets = set(), set()
        try:
            self.reversed_body(s)
            # Accumulators (carried, never consumed in the body) are kept owned too,
            # so that they are added to in place.
            accumulators = set(self.state) - self.resets
            return set(self.state), set(self.inplace) | accumulators
        finally:
            self.names.taken, self.state, self.last_line, inplace, resets = saved
            self.inplace, self.resets = inplace, resets

    def adjoint_loop(self, s) -> List[ast.stmt]:
        """Adjoints that one iteration hands to the previous one are live across
        the loop boundary: they are materialised before the loop, and an iteration
        that consumes one without writing it again leaves an explicit zero."""
        info = self.loops.require(s)
        out: List[ast.stmt] = []
        end_state, inplace = self.probe(s)
        carried = set(self.state) | end_state
        while True:
            # An adjoint live at the start of an iteration can make more adjoints
            # live at its end (v = xs.pop() needs xs_bar once v_bar is live): iterate.
            entry = self.state
            self.state = {b: entry.get(b, "shared") for b in carried}
            more_end, more_inplace = self.probe(s)
            self.state = entry
            inplace |= more_inplace
            if more_end <= carried:
                break
            carried |= more_end
        for b in sorted(carried - set(self.state)):
            self.materialize(self._var_of(b), out)
        for b in sorted(carried & inplace):
            if self.state.get(b) == "shared":
                out.append(_assign(b, helper_call("copy_adjoint", _name(b))))
        self.state = {b: ("owned" if b in inplace else "shared") for b in carried}
        header: List[ast.stmt] = []
        self.last_line = None
        self.mark_line(s, header, force=True)
        self.last_line = None
        body = self.reversed_body(s)
        for b in sorted(carried):
            if b not in self.state:
                self.materialize(self._var_of(b), body)
            elif b in inplace and self.state[b] == "shared":
                body.append(_assign(b, helper_call("copy_adjoint", _name(b))))
        self.state = {b: ("owned" if b in inplace else "shared") for b in carried}
        self.inplace |= inplace
        self.last_line = None
        if not any(not is_comment(b) for b in body):
            for setup in reversed(self.loop_setups.get(s, [])):
                self.restores(setup, out)
            return out
        if info.kind == "range":
            rng: ast.expr = _name(info.range_name)
            if info.trips:
                rng = ast.Subscript(value=rng, slice=ast.Slice(lower=None, upper=_name(info.trips),
                                                               step=None), ctx=ast.Load())
            target = copy.deepcopy(info.target)
            target.ctx = ast.Store()
            # Pure code is differentiated again: its backwards iteration must be
            # recognisably non-differentiable (a range), not any reversed(...).
            it = helper_call("backwards", rng) if self.pure else \
                ast.Call(func=self.builtin("reversed"), args=[rng], keywords=[])
        else:
            target = _name("_", True)
            it = ast.Call(func=self.builtin("range"), args=[_name(info.trips)], keywords=[])
        out += header
        out.append(ast.For(target=target, iter=it, body=body, orelse=[], type_comment=None))
        for setup in reversed(self.loop_setups.get(s, [])):
            self.restores(setup, out)
        return out


def _all_vary(flags) -> bool:
    return all(_all_vary(f) for f in flags) if isinstance(flags, tuple) else bool(flags)


def _is_literal(value) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return type(value) in (type(None), bool, int, float, str)
    if type(value) is tuple:
        return all(_is_literal(v) for v in value)
    return False


def _var_for(atom, old: Optional[Dict[str, ast.expr]]) -> Optional[str]:
    """The variable an argument stands for (the saved copy stands for its variable)."""
    if old:
        for var, value in old.items():
            if value is atom:
                return var
    return atom.id if isinstance(atom, ast.Name) else None


def _index_expr(index: ast.expr) -> ast.expr:
    """The index of `x[...]` as an ordinary expression (slices become slice())."""
    if isinstance(index, ast.Slice):
        parts = [index.lower, index.upper, index.step]
        args = [p if p is not None else ast.Constant(value=None) for p in parts]
        if isinstance(args[2], ast.Constant) and args[2].value is None:
            args.pop()  # slice(lower, upper); slice(x) alone would mean slice(None, x)
        return ast.Call(func=_name("slice"), args=args, keywords=[])
    if isinstance(index, ast.Tuple):
        return ast.Tuple(elts=[_index_expr(e) for e in index.elts], ctx=ast.Load())
    return copy.deepcopy(index)


_ = names
