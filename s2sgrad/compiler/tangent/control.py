"""Forward mode: branches, loops, jumps and returns, where tangents that are
zero on one path and not on another are materialised."""
from __future__ import annotations

import ast
import copy
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ..facts import RESIZED_WHILE_WALKED
from ..names import assign_node, copy_location, helper_call, name_node
from .state import (
    Loop,
    State,
    any_live,
    iteration_leaves,
    loop_item_sources,
    merge_struct,
    none,
    rebuild,
    store_ctx,
    tangent_target,
    writes_items_of,
)


class ControlFlowTangents:
    """Branches, loops, jumps and returns: where tangents that are zero on one path
    and not on another are materialised.

    A part of the `Tangent` transform (transform.py), which owns the state these
    methods read and write (`self.core`) and calls them as `self.control`."""

    def __init__(self, core):
        self.core = core   # the Tangent whose state (names, liveness, facts) this reads

    # -- blocks -----------------------------------------------------------------------------
    def block(self, stmts: Sequence[ast.stmt]) -> List[ast.stmt]:
        core = self.core
        out: List[ast.stmt] = []
        for s in stmts:
            if not core.state.reachable:
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
                out += core.assign(s)
            elif isinstance(s, ast.Expr):
                out += core.expression(s)
            else:
                out.append(s)
        return out

    def if_(self, s: ast.If) -> List[ast.stmt]:
        core = self.core
        out: List[ast.stmt] = []
        before = core.state.copy()
        last = core.last_line
        body = self.block(s.body)
        sb = core.state
        core.state, core.last_line = before.copy(), last
        orelse = self.block(s.orelse)
        se = core.state
        core.last_line = None
        if sb.reachable and se.reachable:
            live = sb.live | se.live
            for var in sorted(live - sb.live):
                core.materialize(var, body, sb.defined)
                sb.owned.add(var)
            for var in sorted(live - se.live):
                core.materialize(var, orelse, se.defined)
                se.owned.add(var)
            struct = merge_struct(sb, se)
            core.state = State(live, sb.owned & se.owned, sb.defined & se.defined,
                               struct=struct)
        elif sb.reachable:
            core.state = sb
        elif se.reachable:
            core.state = se
        else:
            core.state = State(before.live, before.owned, before.defined, reachable=False)
        node = ast.If(test=copy.deepcopy(s.test), body=body or [ast.Pass()], orelse=orelse)
        out.append(copy_location(node, s))
        return out

    def jump(self, s) -> List[ast.stmt]:
        core = self.core
        out: List[ast.stmt] = []
        loop = core.loop
        if loop is not None:
            if isinstance(s, ast.Break):
                loop.breaks.append(core.state.copy())
                need = loop.exit_live
            else:
                loop.continues.append(core.state.copy())
                need = loop.entry
            for var in sorted(need - core.state.live):
                core.materialize(var, out)
                core.set_live(var, owned=True)
            if isinstance(s, ast.Continue):
                for var in sorted(loop.owned_entry - core.state.owned):
                    out.append(assign_node(core.dot(var),
                                           helper_call("copy_value", name_node(core.dot(var)))))
        out.append(s)
        core.state.reachable = False
        return out

    # -- loops --------------------------------------------------------------------------------
    def _loop(self, s, header) -> List[ast.stmt]:
        """Shared by for and while: `header(state)` sets the loop targets' tangents and
        returns (iter expression, target) for a for loop."""
        core = self.core
        assigned = self._assigned(s)
        for var in assigned:
            core.state.struct.pop(var, None)
        before = core.state.copy()
        written = {v for v in core.in_place if v in assigned}
        entry = set(before.live)
        for _ in range(50):
            ctx = Loop(entry=set(entry), owned_entry=set())
            end, ctx = self._probe(s, header, entry, set(), before, ctx)
            more = set(end.live) if end.reachable else set()
            # (A tangent live where a break leaves is live after the loop, which the
            # header may leave too: it must be defined there, so at the head as well.)
            for c in ctx.continues + ctx.breaks:
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
            ctx = Loop(entry=set(entry), owned_entry=set(owned), exit_live=set(exit_live))
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
                core.materialize(var, out, before.defined)
        for var in sorted(owned - before.owned):
            if var in before.live:
                out.append(assign_node(core.dot(var),
                                       helper_call("copy_value", name_node(core.dot(var)))))
        owned = {v for v in owned if v in before.live or v in before.defined or
                 v not in entry}
        core.state = State(set(entry), set(owned), set(before.defined),
                           struct=dict(before.struct))
        loop = Loop(entry=set(entry), owned_entry=set(owned), exit_live=set(exit_live))
        outer, core.loop = core.loop, loop
        core.last_line = None
        head, body_prefix = header(core.state, emit=True)
        body = body_prefix + self.block(s.body)
        if core.state.reachable:
            for var in sorted(entry - core.state.live):
                core.materialize(var, body)
                core.set_live(var, owned=True)
            for var in sorted(owned - core.state.owned):
                if var in core.state.live:
                    body.append(assign_node(core.dot(var),
                                            helper_call("copy_value", name_node(core.dot(var)))))
        core.loop = outer
        exit_owned = set(owned)
        for b in loop.breaks:
            exit_owned &= b.owned
        core.state = State(exit_live, exit_owned, set(before.defined),
                           struct=dict(before.struct))
        core.last_line = None
        return out, head, body or [ast.Pass()]

    def _probe(self, s, header, entry, owned, before, ctx):
        core = self.core
        snap = core.snapshot()
        try:
            core.state = State(set(entry), set(owned), set(before.defined),
                               struct=dict(before.struct))
            core.loop = ctx
            header(core.state, emit=False)
            self.block(s.body)
            return core.state.copy(), ctx
        finally:
            core.restore(snap)

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
        self.core.mark_line(s, out)

        def header(state, emit):
            return None, []
        pre, _, body = self._loop(s, header)
        node = ast.While(test=copy.deepcopy(s.test), body=body, orelse=[])
        return out + pre + [copy_location(node, s)]

    def for_(self, s: ast.For) -> List[ast.stmt]:
        core = self.core
        fact = core.facts.stmts.of(s)
        if fact.resized_by is not None and (fact.walks_a_copy(s) or
                                            fact.walked in core.act.varied):
            # (a copy, or the tangents zipped in, counted when the loop starts)
            raise core.err(fact.resized_by, *RESIZED_WHILE_WALKED)
        out: List[ast.stmt] = []
        core.mark_line(s, out)
        leaves: List[Tuple[ast.expr, Optional[ast.expr], Optional[ast.expr]]] = []
        iteration_leaves(s.target, s.iter, leaves, core.facts.exprs)
        result = {}

        def header(state, emit):
            """The loop's iterable and target, zipping in the tangents of live sequences."""
            mapping_iter: Dict[int, ast.expr] = {}
            mapping_target: Dict[int, ast.expr] = {}
            for target, seq, node in leaves:
                names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
                for n in names:
                    state.defined.add(n)
                wanted = any(n in core.act.active for n in names)
                if seq is not None and wanted and isinstance(seq, ast.Name) and \
                        seq.id in state.live:
                    walked = {seq.id} | {src for n, src in loop_item_sources(
                        core.nf.node.body) if n == seq.id}
                    if any(writes_items_of(n, s.body) for n in walked):
                        # The loop reads the items live, as they are written; the
                        # zipped tangent would be the one from before the loop.
                        raise core.err(s.iter, f"forward mode cannot follow a loop over "
                                       f"{seq.id!r} that writes into {seq.id!r}",
                                       "Use reverse mode (grad, vjp), or loop over a copy.")
                    seq_dot = rebuild(node, {seq: name_node(core.dot(seq.id))},
                                      core.facts.exprs)
                    mapping_iter[node] = ast.Call(func=core.builtin("zip"),
                                                      args=[copy.deepcopy(node), seq_dot],
                                                      keywords=[])
                    mapping_target[target] = ast.Tuple(
                        elts=[copy.deepcopy(target), tangent_target(target, core)],
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
                result["iter"] = rebuild(s.iter, mapping_iter, core.facts.exprs)
                result["target"] = rebuild(s.target, mapping_target, core.facts.exprs)
                store_ctx(result["target"])
            return None, []
        pre, _, body = self._loop(s, header)
        node = ast.For(target=result["target"], iter=result["iter"], body=body, orelse=[],
                       type_comment=None)
        return out + pre + [copy_location(node, s)]

    def return_(self, s: ast.Return) -> List[ast.stmt]:
        core = self.core
        out: List[ast.stmt] = []
        value = s.value
        core.mark_line(s, out)
        if isinstance(value, ast.Tuple):
            wanted = core.demand if core.demand is not None and \
                len(core.demand) == len(value.elts) else (True,) * len(value.elts)
            tangents = [core.tangent_of(e) if w else none()
                        for e, w in zip(value.elts, wanted)]
            core.output_live = tuple(core.liveness(e) if w else False
                                     for e, w in zip(value.elts, wanted))
            core.output_varied = tuple(isinstance(e, ast.Name) and e.id in core.act.varied
                                       for e in value.elts)
            tangent = ast.Tuple(elts=tangents, ctx=ast.Load())
        elif isinstance(value, ast.List):   # `return [a, b]`: a list of tangents
            tangent = core.tangent_of(value)
            core.output_live = any(any_live(core.liveness(e)) for e in value.elts)
            core.output_varied = any(isinstance(e, ast.Name) and e.id in core.act.varied
                                     for e in value.elts)
        else:
            tangent = core.tangent_of(value)
            core.output_live = core.liveness(value)
            core.output_varied = isinstance(value, ast.Name) and value.id in core.act.varied
        out.append(copy_location(ast.Return(value=ast.Tuple(
            elts=[copy.deepcopy(value), tangent], ctx=ast.Load())), s))
        core.state.reachable = False
        return out
