"""Reverse mode: the adjoint's control flow: blocks walked backwards, branches replayed from
the recorded test, loops run backwards over their saved trip counts."""
from __future__ import annotations

import ast
from typing import List, Sequence, Set, Tuple

from ..analyze import (
    iter_statements,
)
from ..facts import StatementFacts
from ..marks import is_comment
from ..names import assign_node, clone, helper_call, name_node, name_nodes, stored_names
from ..ops import OpKind
from .records import LoopInfo


class AdjointControl:
    """The adjoint's control flow: blocks walked backwards, branches replayed from
    the recorded test, loops run backwards over their saved trip counts.

    A part of `Reverse` (reverse.py), whose state it reads as `self.core`, and which
    calls it as `self.control`."""

    def __init__(self, core):
        self.core = core

    def adjoint_block(self, stmts: Sequence[ast.stmt], in_loop: bool) -> List[ast.stmt]:
        core = self.core
        out: List[ast.stmt] = []
        for s in reversed(stmts):
            if isinstance(s, ast.If):
                out.extend(self.adjoint_if(s, in_loop))
            elif isinstance(s, (ast.For, ast.While)):
                out.extend(self.adjoint_loop(s))
            elif isinstance(s, (ast.Assign, ast.AugAssign)):
                out.extend(core.adjoint.adjoint_assign(s))
            elif isinstance(s, ast.Expr) and core.op_of(s).kind == OpKind.APPEND:
                core.adjoint.append_adjoint(s, core.op_of(s), out)
            elif isinstance(s, ast.Expr) and core.op_of(s).kind == OpKind.UFUNC_AT:
                core.adjoint.ufunc_at_adjoint(s, core.op_of(s), out)
        return out

    def adjoint_if(self, s: ast.If, in_loop: bool) -> List[ast.stmt]:
        core = self.core
        before = dict(core.state)
        last = core.last_line
        body = self.adjoint_block(s.body, in_loop)
        state_body = core.state
        core.state, core.last_line = dict(before), last
        orelse = self.adjoint_block(s.orelse, in_loop)
        state_else = core.state
        core.last_line = None
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
        core.state = merged
        if not body and not orelse:
            return []
        node = ast.If(test=clone(s.test), body=body or [ast.Pass()], orelse=orelse)
        return [node]

    def _var_of(self, bar: str) -> str:
        return self.core.var_of_bar[bar]

    def _materialize_into(self, var: str, block: List[ast.stmt]) -> None:
        block.append(assign_node(self.core.bar_of(var), self.core.zeros_for(var)))

    def reversed_body(self, s) -> List[ast.stmt]:
        """The adjoint of one iteration: the body backwards, then the item loads."""
        core = self.core
        info = core.loops.require(s)
        outer = core.first_iteration
        # (the same for the probes and the real run: asked once)
        core.first_iteration = core.entry_facts.setdefault(s, lambda: self.entry_reads(s, info))
        try:
            body = self.adjoint_block(s.body, in_loop=True)
        finally:
            core.first_iteration = outer
        for b in reversed(info.item_assigns):
            body += core.adjoint.adjoint_assign(b)
        return body

    def entry_reads(self, s: ast.For, info: LoopInfo):
        """(test, reads) for a top-level loop over a range: `reads` maps each body
        statement to the loop-carried names it reads before the body writes them
        and whose value on entering the loop carries no gradient (`h = X` before
        `for W, b in params: h = np.tanh(h @ W + b)`). In the first iteration
        those reads see that entry value, so what their adjoint contributes there
        is dead: it runs only when `test` (not the first iteration) holds."""
        core = self.core
        if core.pure or info.kind != "range" or not isinstance(info.target, ast.Name) or \
                not any(st is s for st in core.nf.node.body):
            return None
        written = {n.id for b in info.item_assigns for n in name_nodes(b.targets[0])}
        in_body = {n for b in s.body for n in stored_names(b)}
        if info.target.id in in_body:
            return None   # the test reads the loop variable: it must be the iteration's
        written.add(info.target.id)
        written |= in_body
        before = []   # (statement, names it stores) of every statement before the loop
        for top in core.nf.node.body:
            if top is s:
                break
            before += [(st, stored_names(st)) for st, _ in iter_statements([top])]
        entry_quiet = {n for n in written if self._quiet_at_entry(n, before)}
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
        first = ast.Subscript(value=name_node(info.range_name), slice=ast.Constant(0),
                              ctx=ast.Load())
        test = ast.Compare(left=name_node(info.target.id), ops=[ast.NotEq()], comparators=[first])
        return test, reads

    def _quiet_at_entry(self, name: str, before) -> bool:
        """Whether every value `name` can hold when a top-level loop starts is
        free of the inputs: only assigned before it (`before`: the statements
        before the loop, with the names each stores) from values that do not vary."""
        core = self.core
        if name in getattr(core.nf, "written_in_place", ()):
            return False   # an in-place write (to it or an alias) may carry the inputs in
        params = set(core.nf.all_params)
        if name in params and name in core.act.varied and \
                core.nf.all_params.index(name) in core.act.wrt:
            return False
        defined = False
        for st, stored in before:
            if name not in stored:
                continue
            op = core.op_of(st) if not isinstance(st, (ast.For, ast.If,
                                                       ast.While)) else None
            if op is None or set(op.diff_inputs) & core.act.varied:
                return False
            defined = True
        return defined or name in params

    def probe(self, s) -> Tuple[Set[str], Set[str]]:
        """Run the reversed body without keeping its code: (end state, in-place targets)."""
        core = self.core
        saved = (set(core.names.taken), dict(core.state), core.last_line, set(core.inplace),
                 set(core.resets), core.probing)
        core.inplace, core.resets, core.probing = set(), set(), True
        try:
            self.reversed_body(s)
            # Accumulators (carried, never consumed in the body) are kept owned too,
            # so that they are added to in place.
            accumulators = set(core.state) - core.resets
            return set(core.state), set(core.inplace) | accumulators
        finally:
            core.names.taken, core.state, core.last_line, inplace, resets, probing = saved
            core.inplace, core.resets, core.probing = inplace, resets, probing

    def adjoint_loop(self, s) -> List[ast.stmt]:
        """Adjoints that one iteration hands to the previous one are live across
        the loop boundary: they are materialised before the loop, and an iteration
        that consumes one without writing it again leaves an explicit zero."""
        core = self.core
        info = core.loops.require(s)
        out: List[ast.stmt] = []
        end_state, inplace = self.probe(s)
        carried = set(core.state) | end_state
        # A probe's end depends only on the state it starts from (names it picks are
        # dropped): when the first ends with no adjoint live that was not live at its
        # start, the next would start from that same state and end the same way.
        while not end_state <= set(core.state):
            # An adjoint live at the start of an iteration can make more adjoints
            # live at its end (v = xs.pop() needs xs_bar once v_bar is live): iterate.
            entry = core.state
            core.state = {b: entry.get(b, "shared") for b in carried}
            more_end, more_inplace = self.probe(s)
            core.state = entry
            inplace |= more_inplace
            if more_end <= carried:
                break
            carried |= more_end
        for b in sorted(carried - set(core.state)):
            core.materialize(self._var_of(b), out)
        for b in sorted(carried & inplace):
            if core.state.get(b) == "shared":
                out.append(assign_node(b, helper_call("copy_adjoint", name_node(b))))
        core.state = {b: ("owned" if b in inplace else "shared") for b in carried}
        header: List[ast.stmt] = []
        core.last_line = None
        core.mark_line(s, header, force=True)
        core.last_line = None
        body = self.reversed_body(s)
        for b in sorted(carried):
            if b not in core.state:
                core.materialize(self._var_of(b), body)
            elif b in inplace and core.state[b] == "shared":
                body.append(assign_node(b, helper_call("copy_adjoint", name_node(b))))
        core.state = {b: ("owned" if b in inplace else "shared") for b in carried}
        core.inplace |= inplace
        core.last_line = None
        if not any(not is_comment(b) for b in body):
            for setup in reversed(core.loop_setups.get(s, [])):
                core.restores(setup, out)
            return out
        if info.kind == "range":
            rng: ast.expr = name_node(info.range_name)
            if info.trips:
                rng = ast.Subscript(value=rng,
                                    slice=ast.Slice(lower=None, upper=name_node(info.trips),
                                                    step=None), ctx=ast.Load())
            target = clone(info.target)
            target.ctx = ast.Store()
            # Pure code is differentiated again: its backwards iteration must be
            # recognisably non-differentiable (a range), not any reversed(...).
            it = helper_call("backwards", rng) if core.pure else \
                ast.Call(func=core.builtin("reversed"), args=[rng], keywords=[])
        else:
            # (`_` unless the function has a variable of that name: the user's `_`
            # read after this loop must keep its value)
            target = name_node("_" if "_" not in core.names.taken else
                               core.names.fresh("trip"), True)
            it = ast.Call(func=core.builtin("range"), args=[name_node(info.trips)], keywords=[])
        out += header
        out.append(ast.For(target=target, iter=it, body=body, orelse=[], type_comment=None))
        for setup in reversed(core.loop_setups.get(s, [])):
            core.restores(setup, out)
        return out
