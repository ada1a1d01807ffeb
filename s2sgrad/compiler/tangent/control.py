"""Forward mode: branches, loops, jumps and returns, where tangents that are
zero on one path and not on another are materialised."""
from __future__ import annotations

import ast
import copy
from typing import Dict, List, Optional, Sequence, Set, Tuple

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

    A part of `_Tangent` (transform.py), whose state its methods use."""

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
            struct = merge_struct(sb, se)
            self.state = State(live, sb.owned & se.owned, sb.defined & se.defined,
                                struct=struct)
        elif sb.reachable:
            self.state = sb
        elif se.reachable:
            self.state = se
        else:
            self.state = State(before.live, before.owned, before.defined, reachable=False)
        node = ast.If(test=copy.deepcopy(s.test), body=body or [ast.Pass()], orelse=orelse)
        out.append(copy_location(node, s))
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
                    out.append(assign_node(self.dot(var),
                                           helper_call("copy_value", name_node(self.dot(var)))))
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
                self.materialize(var, out, before.defined)
        for var in sorted(owned - before.owned):
            if var in before.live:
                out.append(assign_node(self.dot(var),
                                       helper_call("copy_value", name_node(self.dot(var)))))
        owned = {v for v in owned if v in before.live or v in before.defined or
                 v not in entry}
        self.state = State(set(entry), set(owned), set(before.defined),
                            struct=dict(before.struct))
        loop = Loop(entry=set(entry), owned_entry=set(owned), exit_live=set(exit_live))
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
                    body.append(assign_node(self.dot(var),
                                        helper_call("copy_value", name_node(self.dot(var)))))
        self.loop = outer
        exit_owned = set(owned)
        for b in loop.breaks:
            exit_owned &= b.owned
        self.state = State(exit_live, exit_owned, set(before.defined),
                            struct=dict(before.struct))
        self.last_line = None
        return out, head, body or [ast.Pass()]

    def _probe(self, s, header, entry, owned, before, ctx):
        snap = self._snapshot()
        try:
            self.state = State(set(entry), set(owned), set(before.defined),
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
        return out + pre + [copy_location(node, s)]

    def for_(self, s: ast.For) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        self.mark_line(s, out)
        leaves: List[Tuple[ast.expr, Optional[ast.expr], Optional[ast.expr]]] = []
        iteration_leaves(s.target, s.iter, leaves, self.facts.exprs)
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
                    walked = {seq.id} | {src for n, src in loop_item_sources(
                        self.nf.node.body) if n == seq.id}
                    if any(writes_items_of(n, s.body) for n in walked):
                        # The loop reads the items live, as they are written; the
                        # zipped tangent would be the one from before the loop.
                        raise self.err(s.iter, f"forward mode cannot follow a loop over "
                                               f"{seq.id!r} that writes into {seq.id!r}",
                                       "Use reverse mode (grad, vjp), or loop over a copy.")
                    seq_dot = rebuild(node, {seq: name_node(self.dot(seq.id))},
                                      self.facts.exprs)
                    mapping_iter[node] = ast.Call(func=name_node("zip"),
                                                      args=[copy.deepcopy(node), seq_dot],
                                                      keywords=[])
                    mapping_target[target] = ast.Tuple(
                        elts=[copy.deepcopy(target), tangent_target(target, self)],
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
                result["iter"] = rebuild(s.iter, mapping_iter, self.facts.exprs)
                result["target"] = rebuild(s.target, mapping_target, self.facts.exprs)
                store_ctx(result["target"])
            return None, []
        pre, _, body = self._loop(s, header)
        node = ast.For(target=result["target"], iter=result["iter"], body=body, orelse=[],
                       type_comment=None)
        return out + pre + [copy_location(node, s)]

    def return_(self, s: ast.Return) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        value = s.value
        self.mark_line(s, out)
        if isinstance(value, ast.Tuple):
            wanted = self.demand if self.demand is not None and \
                len(self.demand) == len(value.elts) else (True,) * len(value.elts)
            tangents = [self.tangent_of(e) if w else none()
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
        out.append(copy_location(ast.Return(value=ast.Tuple(
            elts=[copy.deepcopy(value), tangent], ctx=ast.Load())), s))
        self.state.reachable = False
        return out
