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

`Reverse` holds the transform's state and is made of parts, each an object
that reads that state: its forward sweep (forward_sweep.py), the adjoint of
each statement (adjoint_statements.py) and the adjoint's control flow
(adjoint_control.py).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from ...errors import error_at
from .. import sites
from ..analyze import (
    Activity,
    iter_statements,
)
from ..facts import ResidualMarks, StatementFacts
from ..marks import comment, line_comment
from ..names import (
    NameRegistry,
    assign_node,
    clone,
    copy_location,
    helper_call,
    name_node,
    name_nodes,
)
from ..normalize import NormalForm
from ..ops import Op, describe
from .adjoint_control import AdjointControl
from .adjoint_statements import AdjointStatements
from .forward_sweep import ForwardSweep
from .records import LoopInfo, all_vary, fold_loop_items


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
    # What each generated statement does with kept values (saves, restores, stacks).
    marks: ResidualMarks = field(default_factory=ResidualMarks)
    pure: bool = False   # the adjoint makes no in-place updates (see transform)
    # The residuals the forward keeps as shape and dtype only (`_s2s_meta`: link_residuals)
    kept_as_shapes: Set[str] = field(default_factory=set)


def transform(nf: NormalForm, activity: Activity, pure: bool = False,
              recompute: bool = False) -> Transformed:
    """Forward and adjoint of a normal-form function.

    pure=True writes the adjoint without in-place updates (arrays and lists are
    replaced, not modified), so that it can itself be differentiated. recompute=True
    recomputes the calls of helpers marked s2sgrad.checkpoint in the adjoint (not in
    a pure pair: one differentiated again keeps what it computed).
    """
    return Reverse(nf, activity, pure, recompute and not pure).run()


class Reverse:
    """The transform's state and driver; its forward sweep, the adjoints of
    statements and the adjoint's control flow are its parts (`self.forward`,
    `self.adjoint`, `self.control`)."""

    def __init__(self, nf: NormalForm, activity: Activity, pure: bool = False,
                 recompute: bool = False):
        self.forward = ForwardSweep(self)
        self.adjoint = AdjointStatements(self)
        self.control = AdjointControl(self)
        self.pure = pure
        self.recompute = recompute
        self.first_iteration = None   # see entry_reads
        self.nf = nf
        self.facts = nf.facts   # what this compile's passes noted about its nodes
        self.act = activity
        self.names = nf.names
        self.locals = nf.resolver.locals | nf.names.taken
        self.bar: Dict[str, str] = {}
        self.var_of_bar: Dict[str, str] = {}
        self.state: Dict[str, str] = {}          # adjoint name -> "owned" | "shared"
        # What the forward sweep decided per statement, read back by the adjoint's.
        self.saves: StatementFacts[List[Tuple[str, str, str]]] = StatementFacts("saved value")
        self.loops: StatementFacts[LoopInfo] = StatementFacts("loop record")
        self.sites: StatementFacts[object] = StatementFacts("call site")
        self.marks = ResidualMarks()
        self.callees: Dict[str, sites.CalleeSite] = {}
        self.stacks: Dict[Tuple[str, bool], str] = {}   # (variable, items?) -> its stack
        self.inplace: Set[str] = set()           # adjoints updated in place (need "owned")
        self.resets: Set[str] = set()            # adjoints consumed (see probe)
        # While a probe runs the reversed loop body for its state alone, the code it
        # would keep is not built: each call's placeholder is a `pass`, restores none.
        self.probing = False
        # Each top-level loop's first-iteration reads (see entry_reads), asked by its
        # probes and its real run alike.
        self.entry_facts: StatementFacts[object] = StatementFacts("first-iteration reads")
        self.sequences: Set[str] = self._list_valued(nf)  # adjoints that are lists
        # loop -> its range and trip-count lines
        self.loop_setups: StatementFacts[List[ast.stmt]] = StatementFacts("loop setup")
        self.default_bindings: Dict[str, object] = {}
        self.inits: List[ast.stmt] = []
        self.initialised: Set[str] = set()   # the variables `self.inits` sets to None
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

    def op_of(self, s: ast.stmt) -> Op:
        """What the normal-form statement s does (ops.describe, once per statement)."""
        return describe(s, self.locals, self.facts)

    def builtin(self, name: str) -> ast.Name:
        """A builtin the generated code calls (len, range, ...): by its own name,
        unless the function, its closure or its module binds that name; then
        through a bound one."""
        return name_node(self.nf.resolver.builtin_reference(name, self.locals,
                                                            self.default_bindings))

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
                callee = nf.facts.exprs.of(value).callee
                listy = (isinstance(value, ast.List) or
                         (isinstance(value, ast.Name) and value.id in out) or
                         (isinstance(value, ast.Call) and
                          getattr(callee, "__name__", None) in list_helpers and
                          getattr(callee, "__module__", "").startswith("s2sgrad")))
                if listy:
                    out.add(s.targets[0].id)
                    changed = True
        return out

    def _overwritable(self, body) -> Set[str]:
        """Variables a later assignment may overwrite while the adjoint needs them."""
        counts: Dict[str, int] = {}
        stack = [(body, False)]   # (not a recursive closure: that is a reference cycle)
        while stack:
            stmts, in_loop = stack.pop()
            for s in stmts:
                for o in self._outputs(s):
                    counts[o] = counts.get(o, 0) + (2 if in_loop else 1)
                if isinstance(s, ast.If):
                    stack += [(s.body, in_loop), (s.orelse, in_loop)]
                elif isinstance(s, (ast.For, ast.While)):
                    stack.append((s.body, True))
        for p in self.nf.all_params:
            if p in counts:
                counts[p] += 1
        return {n for n, c in counts.items() if c > 1}

    def _outputs(self, s) -> List[str]:
        if isinstance(s, (ast.Assign, ast.AugAssign)):
            return self.op_of(s).outputs
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
        fwd_body = self.forward.forward_block(body, in_loop=False)
        residuals = self.names.fresh("residuals")
        fwd_ret = ast.Return(value=ast.Tuple(elts=[clone(ret.value), name_node(residuals)],
                                             ctx=ast.Load()))
        forward = ast.FunctionDef(
            name=self.names.fresh(f"{self.nf.parsed.name}_forward"),
            args=self.forward.forward_arguments(fdef.args), body=self.inits + fwd_body + [fwd_ret],
            decorator_list=[], returns=None, type_comment=None)

        g_param, adj_body = self.forward.seed_output(ret)
        adj_body += self.control.adjoint_block(body, in_loop=False)
        grads = []
        for i in self.act.wrt:
            p = self.nf.all_params[i]
            b = self.bar_of(p)
            if b not in self.state:
                if self.last_line is not None:
                    adj_body.append(comment(f"'{p}' does not reach the output: its gradient "
                                            f"is zero"))
                adj_body.append(assign_node(b, self.zeros_for(p)))
                self.state[b] = "owned"
            grads.append(name_node(b))
        value = grads[0] if len(grads) == 1 else ast.Tuple(elts=grads, ctx=ast.Load())
        adj_body.append(ast.Return(value=value))
        copy_location(forward, fdef)
        args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=residuals), ast.arg(arg=g_param)],
                             vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                             defaults=[])
        adjoint = ast.FunctionDef(name=self.names.fresh(f"{self.nf.parsed.name}_adjoint"),
                                  args=args, body=adj_body, decorator_list=[], returns=None,
                                  type_comment=None)
        copy_location(adjoint, fdef)
        t = Transformed(self.nf, self.act, forward, adjoint, self.names, residuals,
                        self.callees, list(self.sites.values()), self.marks, self.pure)
        t.bindings = dict(self.default_bindings)
        return t

    # -- adjoint ------------------------------------------------------------------
    def reset(self, bar: str) -> None:
        """The adjoint's value was consumed: it is symbolically zero again."""
        self.state.pop(bar, None)
        self.resets.add(bar)

    def real_part_of(self, var: str, value: ast.expr, out: List[ast.stmt]) -> ast.expr:
        """`<var>_bar_real = _s2s_real_part(value)`: the real part of a contribution to
        a real variable's cotangent, in a fresh name (a name holding a complex value
        and then a real one would be complex to a derivative of this code)."""
        real = self.names.fresh(f"{var}_bar_real")
        out.append(assign_node(real, helper_call("real_part", value)))
        return name_node(real)

    def accumulate(self, var: str, value: ast.expr, out: List[ast.stmt],
                   fresh: bool = False) -> None:
        """var's cotangent += value (fresh: value is a new array, as a product's is)."""
        b = self.bar_of(var)
        if b in self.state:
            if var in self.sequences or var not in self.act.leaves:
                # Maybe a list, tuple or dict (an argument, an item of one, what a
                # callee returned): added item by item, as `+` would concatenate. The
                # sum may be one of the two as it is (the other a zero): shared.
                out.append(assign_node(b, helper_call("add", name_node(b), value)))
                self.state[b] = "shared"
                return
            op: ast.operator = ast.Add()
            if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
                op, value = ast.Sub(), value.operand   # (b + -x is b - x, to the bit)
            if self.state[b] == "owned" and not self.pure:
                # Nothing else refers to this array: add in place, no allocation.
                out.append(ast.AugAssign(target=name_node(b, True), op=op, value=value))
            else:   # (in place later where the optimiser finds b's array a new one)
                out.append(self.marks.mark(assign_node(
                    b, ast.BinOp(left=name_node(b), op=op, right=value)), accumulates=b))
            self.state[b] = "owned"
        else:
            out.append(assign_node(b, value))
            # Arithmetic makes a new array (or an immutable number): nothing else
            # refers to it. Anything else (a name, a view, a helper) may be shared.
            fresh = (fresh or isinstance(value, (ast.BinOp, ast.UnaryOp))) and not self.pure
            self.state[b] = "owned" if fresh else "shared"

    def materialize(self, var: str, out: List[ast.stmt]) -> None:
        b = self.bar_of(var)
        out.append(assign_node(b, self.zeros_for(var)))
        self.state[b] = "owned"

    def zeros_for(self, var: str) -> ast.expr:
        """A zero cotangent for var; a tuple parameter's constant items (which the
        caller never reads) stay a scalar zero instead of an array of their size."""
        flags = self.act.item_flags.get(var)
        if flags is not None and not all_vary(flags):
            return helper_call("zeros_like", name_node(var), ast.Constant(value=flags))
        return helper_call("zeros_like", name_node(var))

    def mark_line(self, s, out: List[ast.stmt], force: bool = False) -> None:
        opened = line_comment(self.facts.origin_of(s), self.nf.parsed, self.last_line, force)
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
        if self.probing:
            return
        for var, kind, name in reversed(self.saves.get(s, [])):
            if kind == "stack":
                value = ast.Call(func=ast.Attribute(value=name_node(name), attr="pop",
                                                    ctx=ast.Load()), args=[], keywords=[])
            else:
                value = name_node(name)
            out.append(self.marks.mark(assign_node(var, value), restore_of=var, slot=name))
