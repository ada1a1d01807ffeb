"""Reverse mode: the forward sweep: the user's statements, and before each what the adjoint
will need restored (a saved copy, or a stack inside loops); call sites."""
from __future__ import annotations

import ast
from typing import List, Sequence, Set, Tuple

from .. import sites
from ..analyze import (
    call_write_guards,
    iter_statements,
    loop_header_op,
)
from ..facts import RESIZED_WHILE_WALKED
from ..names import (
    assign_node,
    clone,
    copy_location,
    helper_call,
    index_expr,
    name_node,
    name_nodes,
)
from ..ops import Op, OpKind
from .records import (
    LoopInfo,
    index_value_checks,
    is_literal,
    real_among_complex,
    real_value_checks,
    sequence_guard,
)


class ForwardSweep:
    """The forward sweep: the user's statements, and before each what the adjoint
    will need restored (a saved copy, or a stack inside loops); call sites.

    A part of `Reverse` (reverse.py), whose state it reads as `self.core`, and which
    calls it as `self.forward`."""

    def __init__(self, core):
        self.core = core

    def forward_arguments(self, args: ast.arguments) -> ast.arguments:
        """The user's parameters; default values are the function's own (evaluated
        when it was defined), bound by name, not re-evaluated from their text."""
        args = clone(args)
        fn = self.core.nf.parsed.fn
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
        if is_literal(value):
            return ast.Constant(value=value) if not isinstance(value, tuple) else \
                ast.parse(repr(value), mode="eval").body
        name = self.core.names.fresh("default", reserved=True)
        self.core.default_bindings[name] = value
        return name_node(name)

    def seed_output(self, ret: ast.Return) -> Tuple[str, List[ast.stmt]]:
        core = self.core
        value = ret.value
        if isinstance(value, ast.Name) and value.id in core.locals:
            g = core.bar_of(value.id)
            if value.id in core.act.active:
                core.state[g] = "shared"
            if real_among_complex(core.act, value.id):
                return g, [assign_node(g, helper_call("real_part", name_node(g)))]
            return g, []
        g = core.names.fresh("output_bar")
        out: List[ast.stmt] = []
        if isinstance(value, (ast.Tuple, ast.List)):
            for i, e in enumerate(value.elts):
                if isinstance(e, ast.Name) and e.id in core.act.active:
                    item: ast.expr = ast.Subscript(value=name_node(g),
                                                   slice=ast.Constant(value=i), ctx=ast.Load())
                    if real_among_complex(core.act, e.id):
                        item = helper_call("real_part", item)
                    core.accumulate(e.id, item, out)
        return g, out

    # -- forward ------------------------------------------------------------------
    def save_before(self, var: str, in_loop: bool, out: List[ast.stmt], key) -> None:
        """Keep the value an assignment is about to overwrite (pruned if unread)."""
        if var not in self.core.overwritable:
            return
        self.save_value(var, in_loop, out, key, name_node(var))

    def save_value(self, var: str, in_loop: bool, out: List[ast.stmt], key,
                   value: ast.expr, items: bool = False) -> None:
        """Keep `value` (var's, or with `items` the items of var a write changes) for
        the adjoint: on a stack in a loop, in a slot outside. Items have a stack of
        their own: a stack holds one kind of value (numba's lists are typed)."""
        core = self.core
        if in_loop:
            stack = core.stacks.get((var, items))
            if stack is None:
                stack = core.stacks[(var, items)] = core.names.fresh(
                    f"{var}_items_stack" if items else f"{var}_stack")
                init = assign_node(stack, ast.List(elts=[], ctx=ast.Load()))
                core.inits.append(core.marks.mark(init, stack_of=var, slot=stack))
            node = ast.Expr(value=ast.Call(
                func=ast.Attribute(value=name_node(stack), attr="append", ctx=ast.Load()),
                args=[value], keywords=[]))
            core.saves.setdefault(key, list).append((var, "stack", stack))
        else:
            slot = core.names.fresh(f"{var}_prev")
            node = assign_node(slot, value)
            core.saves.setdefault(key, list).append((var, "slot", slot))
        core.marks.mark(node, save_of=var, slot=core.saves.require(key)[-1][2])
        if var not in core.nf.all_params and var not in core.initialised:
            init = assign_node(var, ast.Constant(value=None))
            core.inits.append(core.marks.mark(init, init_of=var))
            core.initialised.add(var)
        out.append(node)

    def forward_block(self, stmts: Sequence[ast.stmt], in_loop: bool) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        for s in stmts:
            if isinstance(s, ast.If):
                node = ast.If(test=s.test, body=self.forward_block(s.body, in_loop),
                              orelse=self.forward_block(s.orelse, in_loop))
                out.append(copy_location(node, s))
            elif isinstance(s, ast.For):
                out.extend(self.forward_for(s, in_loop))
            elif isinstance(s, ast.While):
                out.extend(self.forward_while(s, in_loop))
            elif isinstance(s, (ast.Assign, ast.AugAssign)):
                out.extend(self.forward_assign(s, in_loop))
            elif isinstance(s, ast.Expr) and self.core.op_of(s).kind == OpKind.UFUNC_AT:
                out.extend(self.forward_ufunc_at(s, in_loop))
            else:
                if isinstance(s, ast.Expr):
                    out += self.write_guards(self.core.op_of(s))
                out.append(s)
        return out

    def write_guards(self, op: Op) -> List[ast.stmt]:
        """A called user function that writes into an argument array in place changes
        a value behind this adjoint's back: refused at run time when an array goes
        there (numbers are rebound, which is fine)."""
        core = self.core
        return [ast.Expr(value=helper_call("unshared", name_node(arg),
                                           *[ast.Constant(value=f) for f in fields]))
                for arg, fields in call_write_guards(op, core.act.ints, core.locals,
                                                     core.nf.parsed)]

    def lazy_guard(self, var: str, s: ast.stmt) -> List[ast.stmt]:
        """Before an in-place write of var, in a pair for other libraries' arrays (pure):
        a 0-d NumPy array there is refused (runtime.inplace.lazy_safe_target)."""
        if not self.core.pure:
            return []
        return [copy_location(ast.Expr(value=helper_call("lazy_safe_target",
                                                         name_node(var))), s)]

    def forward_ufunc_at(self, s: ast.Expr, in_loop: bool) -> List[ast.stmt]:
        """np.add.at(a, idx, b): keep the items of a it changes (restored later)."""
        op = self.core.op_of(s)
        base, index = op.outputs[0], s.value.args[1]
        if in_loop:
            self.core.overwritable.add(base)
        out: List[ast.stmt] = []
        self.save_value(base, in_loop, out, s,
                        helper_call("copy_item", name_node(base), clone(index)), items=True)
        out.append(s)
        return out

    def forward_assign(self, s, in_loop: bool) -> List[ast.stmt]:
        core = self.core
        op = core.op_of(s)
        out: List[ast.stmt] = index_value_checks(s, op, core.act, core.err)
        if op.kind == OpKind.RULE and set(op.diff_inputs) & core.act.active:
            out += sequence_guard(s, s.value, core.act, core.sequences, core.err)
        if in_loop:
            # Inside a loop every assignment overwrites the previous iteration's
            # value, also the ones this pass adds (inner trip counts and ranges).
            core.overwritable.update(op.outputs)
        if op.kind == OpKind.SETITEM:
            # x[i] = v: keep the items it overwrites (restored in the adjoint).
            base = s.targets[0].value.id
            out += self.lazy_guard(base, s)
            self.save_value(base, in_loop, out, s,
                            helper_call("copy_item", name_node(base),
                                        index_expr(s.targets[0].slice)), items=True)
            out.append(s)
            return out
        if op.kind == OpKind.AUGASSIGN:
            # x op= v: arrays change in place, so keep a copy of the old value.
            var = s.target.id
            if var in core.act.active:
                out += sequence_guard(s, ast.BinOp(left=name_node(var), op=s.op,
                                                   right=s.value),
                                      core.act, core.sequences, core.err)
            out += self.lazy_guard(var, s)
            guard = core.facts.stmts.of(s).guard
            if guard is not None:
                out.append(ast.Expr(value=helper_call("unshared", name_node(var),
                                                      *[ast.Constant(value=g) for g in guard])))
            self.save_value(var, in_loop, out, s, helper_call("copy_value", name_node(var)))
            out.append(s)
            return out
        key = s
        if op.kind == OpKind.POP:
            self.save_before(op.outputs[0], in_loop, out, key)
            out.append(s)
            return out
        if op.kind == OpKind.CALL:
            out += self.write_guards(op)
        snapshot = core.facts.stmts.of(s).snapshot   # a later in-place write would see it
        outputs = list(op.outputs)
        site = None
        if op.kind in (OpKind.APPLY, OpKind.CALL) and any(n in core.act.active for n in op.outputs):
            site = self.site_for(s, op)   # keyed by the statement the adjoint walks too
            outputs += site.slot_names
            if in_loop:
                # A callee's residuals or a Function's saved values, once per iteration.
                core.overwritable.update(site.slot_names)
        for o in outputs:
            self.save_before(o, in_loop, out, key)
        if site is not None:
            out.append(site.forward_statement(s, core.facts))
            # A callee's residuals (a Function's saved values) may hold the very array it
            # returns (`return result`, kept for its rule): an output the caller writes
            # into later gets a copy of its own, or the write would change them too.
            out.extend(assign_node(o, helper_call("snapshot", name_node(o)))
                       for o in op.outputs if snapshot or o in core.nf.written_in_place)
        elif snapshot:
            copied = core.facts.shallow_copy(s)
            copied.value = helper_call("snapshot", s.value)
            out.append(copied)
        else:
            out.append(s)
        return out + real_value_checks(s, op, core.act, core.err)

    def site_for(self, s, op: Op):
        """The inlined Function (apply) or the separately compiled callee (call)."""
        core = self.core
        site = core.sites.get(s)
        if site is None:
            if op.kind == OpKind.APPLY:
                needs = tuple(isinstance(a, ast.Name) and a.id in core.act.varied
                              for a in op.call.args)
                site = sites.function_site(op.callee, op.call, op.outputs, needs, core.names,
                                           core.nf, s)
            else:
                site = sites.callee_site(op, s, core.act, core.names, core.nf,
                                         recompute=op.recompute and core.recompute)
                core.callees[site.forward_name] = site
            core.sites.record(s, site)
        return site

    def setup_assign(self, loop, target: str, value: ast.expr, in_loop: bool) -> List[ast.stmt]:
        """A loop's range or trip counter. Inside an outer loop it is saved per
        iteration like any variable, and restored after the adjoint loop."""
        stmt = copy_location(assign_node(target, value), loop)
        self.core.loop_setups.setdefault(loop, list).append(stmt)
        return self.forward_assign(stmt, in_loop)

    def forward_for(self, s: ast.For, in_loop: bool) -> List[ast.stmt]:
        core = self.core
        out: List[ast.stmt] = []
        header = loop_header_op(s, core.facts.exprs)
        has_break = any(isinstance(n, ast.Break) for n, _ in iter_statements(s.body))
        it = s.iter
        callee = core.facts.exprs.of(it).callee
        info: LoopInfo
        body_prefix: List[ast.stmt] = []
        if callee is range and isinstance(s.target, ast.Name):
            stem = s.target.id
            rng = core.names.fresh(f"{stem}_range")
            info = LoopInfo("range", range_name=rng, target=s.target)
            out += self.setup_assign(s, rng, it, in_loop)
            # The adjoint sets the variable from the range, and leaves it at the first
            # item: what it held before the loop is put back after (the adjoint of
            # the code before the loop may read it: `i = 1; y = x[i]; for i in ...`).
            self.save_before(stem, in_loop, out, core.loop_setups.require(s)[-1])
            loop_iter: ast.expr = name_node(rng)
            target = s.target
        elif any(n in core.act.varied for n in header.diff_inputs):
            # Iterating over a differentiated array or list: loop over indices so
            # the adjoint can scatter each item's gradient back.
            resized = core.facts.stmts.of(s).resized_by
            if resized is not None:   # (walked by position: see StmtFact.resized_by)
                raise core.err(resized, *RESIZED_WHILE_WALKED)
            rng, target, body_prefix = self.index_loop(s, out, in_loop)
            info = LoopInfo("range", range_name=rng, target=target)
            loop_iter = name_node(rng)
        else:
            fact = core.facts.stmts.of(s)
            if fact.resized_by is not None and fact.walks_a_copy(s):
                raise core.err(fact.resized_by, *RESIZED_WHILE_WALKED)
            info = LoopInfo("items")
            loop_iter = it
            target, body_prefix = self.item_target(s.target)
            has_break = True  # the trip count is unknown without len()
        if has_break:
            info.trips = core.names.fresh("trips")
            out += self.setup_assign(s, info.trips, ast.Constant(0), in_loop)
            incr = ast.AugAssign(target=name_node(info.trips, True), op=ast.Add(),
                                 value=ast.Constant(1))
            body_prefix = [incr] + body_prefix
        info.item_assigns = [b for b in body_prefix if isinstance(b, ast.Assign)]
        copied = core.facts.stmts.of(s).snapshot_targets
        for b in info.item_assigns:   # loop targets a later in-place write would change
            if isinstance(b.targets[0], ast.Name) and b.targets[0].id in copied:
                core.facts.stmts.note(b, snapshot=True)
        core.loops.record(s, info)
        body = list(body_prefix[:1]) if has_break else []
        for b in (body_prefix[1:] if has_break else body_prefix):
            body += self.forward_assign(b, True)
        body += self.forward_block(s.body, True)
        node = ast.For(target=target, iter=loop_iter, body=body, orelse=[], type_comment=None)
        out.append(copy_location(node, s))
        return out

    def index_loop(self, s: ast.For, out: List[ast.stmt], in_loop: bool):
        """`for x in xs` -> `for k in range(len(xs)): x = xs[k]` (also zip/enumerate)."""
        core = self.core
        pairs: List[Tuple[ast.expr, ast.expr]] = []   # (target, sequence) pairs
        backwards: Set[int] = set()                    # pairs read by reversed()
        index_targets: List[ast.expr] = []

        def flatten(target, it):
            callee = core.facts.exprs.of(it).callee
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
                raise core.err(it, "cannot iterate over this expression while "
                               "differentiating through it",
                               "Iterate over an array, a list, range(), zip() or enumerate().")
            else:
                pairs.append((target, it))
        flatten(s.target, s.iter)
        first = pairs[0][1]
        stem = first.id if isinstance(first, ast.Name) else "item"
        k = core.names.fresh(f"{stem}_index")
        lengths = [ast.Call(func=core.builtin("len"), args=[clone(seq)], keywords=[])
                   for _, seq in pairs]
        n = lengths[0] if len(lengths) == 1 else ast.Call(func=core.builtin("min"), args=lengths,
                                                          keywords=[])
        rng = core.names.fresh(f"{k}_range")
        range_call = ast.Call(func=core.builtin("range"), args=[n], keywords=[])
        core.facts.exprs.note(range_call, callee=range)
        out += self.setup_assign(s, rng, range_call, in_loop)
        prefix: List[ast.stmt] = []
        for t in index_targets:
            prefix.append(copy_location(assign_node(t.id, name_node(k)), s))
        def unpack(t, value: ast.expr) -> None:
            # `for W, b in params`: the item gets a name, then each target reads its
            # part (item[0], item[1], nested as deep as the target).
            if isinstance(t, ast.Name):
                prefix.append(copy_location(assign_node(t.id, value), s))
                return
            if not isinstance(t, (ast.Tuple, ast.List)) or \
                    any(isinstance(e, ast.Starred) for e in t.elts):
                raise core.err(s, "this loop target over a differentiated sequence",
                               "Unpack the item in the loop body.")
            item = core.names.fresh(f"{stem}_item")
            prefix.append(copy_location(assign_node(item, value), s))
            # The item is new here, after the analysis: it carries a gradient exactly
            # when a target it is unpacked into does.
            parts = {n.id for n in name_nodes(t)}
            core.locals.add(item)
            for facts in (core.act.varied, core.act.useful, core.act.active):
                if parts & facts:
                    facts.add(item)
            for j, e in enumerate(t.elts):
                unpack(e, ast.Subscript(value=name_node(item), slice=ast.Constant(value=j),
                                        ctx=ast.Load()))

        for i, (t, seq) in enumerate(pairs):
            # reversed(xs) reads xs[-1 - k]: the same items, last first.
            index = ast.BinOp(left=ast.Constant(-1), op=ast.Sub(), right=name_node(k)) \
                if i in backwards else name_node(k)
            unpack(t, ast.Subscript(value=clone(seq), slice=index, ctx=ast.Load()))
        for p in prefix:
            core.facts.note_origin(p, s)
            core.overwritable.add(p.targets[0].id)
        return rng, name_node(k, True), prefix

    def item_target(self, target) -> Tuple[ast.expr, List[ast.stmt]]:
        """Loop targets are copied into the user's names so saves can see them."""
        prefix: List[ast.stmt] = []

        def visit(t):
            if isinstance(t, ast.Name):
                item = self.core.names.fresh(f"{t.id}_item")
                a = copy_location(assign_node(t.id, name_node(item)), t)
                prefix.append(a)
                self.core.overwritable.add(t.id)
                return name_node(item, True)
            return ast.Tuple(elts=[visit(e) for e in t.elts], ctx=ast.Store())
        return visit(target), prefix

    def forward_while(self, s: ast.While, in_loop: bool) -> List[ast.stmt]:
        trips = self.core.names.fresh("trips")
        info = LoopInfo("while", trips=trips)
        self.core.loops.record(s, info)
        out = self.setup_assign(s, trips, ast.Constant(0), in_loop)
        incr = ast.AugAssign(target=name_node(trips, True), op=ast.Add(), value=ast.Constant(1))
        body = [incr] + self.forward_block(s.body, True)
        out.append(copy_location(ast.While(test=s.test, body=body, orelse=[]), s))
        return out
