"""Reverse mode: the adjoint of one statement: contributions to the adjoints of its inputs
(rules, item reads and writes, list appends and pops, call sites)."""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ...errors import InternalError
from ...rules import registry
from .. import sites
from ..analyze import is_realising
from ..names import (
    assign_node,
    clone,
    copy_location,
    helper_call,
    index_expr,
    loop_items_of,
    name_node,
)
from ..ops import UFUNC_AT_SIGNS, Op, OpKind, names, ufunc_at_kind
from .records import (
    DIFFERENTIABLE_KINDS,
    field_index,
    real_among_complex,
    rule_for,
    var_for,
)


class AdjointStatements:
    """The adjoint of one statement: contributions to the adjoints of its inputs
    (rules, item reads and writes, list appends and pops, call sites).

    A part of `Reverse` (reverse.py), whose state it reads as `self.core`, and which
    calls it as `self.adjoint`."""

    def __init__(self, core):
        self.core = core

    def ufunc_at_adjoint(self, s: ast.Expr, op: Op, out: List[ast.stmt]) -> None:
        """np.add.at(a, idx, b): a's cotangent passes through unchanged; b receives
        the cotangent of every element it was added to (a gather: repeated indices
        read the same element again), negated for np.subtract.at."""
        core = self.core
        base = op.outputs[0]
        _, index, value = s.value.args
        b = core.bar_of(base)
        if base in core.act.active and b in core.state and \
                isinstance(value, ast.Name) and value.id in core.act.active:
            core.mark_line(s, out)
            gathered: ast.expr = ast.Subscript(value=name_node(b), slice=clone(index),
                                               ctx=ast.Load())
            if UFUNC_AT_SIGNS[ufunc_at_kind(core.facts.exprs.of(s.value).callee)] < 0:
                gathered = ast.UnaryOp(op=ast.USub(), operand=gathered)
            part = core.names.fresh(f"{value.id}_bar_part")
            out.append(assign_node(part, helper_call("unbroadcast", gathered, name_node(value.id))))
            core.accumulate(value.id, name_node(part), out)
        self._restore_items(s, base, index, out)

    def _restore_items(self, s, base: str, index, out: List[ast.stmt]) -> bool:
        """Put back the items of `base` that statement s overwrote (saved by the
        forward); whether there were any."""
        core = self.core
        saved = self._saved_value(s, out)
        if saved is not None:
            if core.pure:
                node = assign_node(base, helper_call("with_item", name_node(base), index, saved))
            else:
                node = ast.Expr(value=helper_call("restore_item", name_node(base), index, saved))
                core.marks.mark(node, restore_item=base)
            out.append(core.marks.mark(node, restore_of=base,
                                       slot=core.saves.require(s)[-1][2]))
        return saved is not None

    def adjoint_assign(self, s) -> List[ast.stmt]:
        core = self.core
        op = core.op_of(s)
        out: List[ast.stmt] = []
        if op.kind == OpKind.SETITEM:
            self.setitem_adjoint(s, op, out)
            return out
        if op.kind == OpKind.AUGASSIGN:
            self.augassign_adjoint(s, op, out)
            return out
        if op.kind == OpKind.POP:
            self.pop_adjoint(s, op, out)
            return out
        active_outs = [o for o in op.outputs if o in core.act.active]
        live = [o for o in active_outs if core.bar_of(o) in core.state]
        overwritten = set(active_outs) & set(op.diff_inputs)
        if overwritten and op.kind != OpKind.COPY:
            # The contributions would be added into the adjoint the reset below
            # consumes: the normaliser writes such statements through temporaries.
            raise InternalError(f"statement {ast.unparse(s)!r} reads the active "
                                f"variable(s) {sorted(overwritten)} it overwrites")
        if live and op.kind in DIFFERENTIABLE_KINDS and \
                any(n in core.act.active for n in op.diff_inputs):
            core.mark_line(s, out)
            self.contributions(s, op, out)
        for o in active_outs:
            core.reset(core.bar_of(o))
        core.restores(s, out)
        return out

    def contributions(self, s, op: Op, out: List[ast.stmt]) -> None:
        core = self.core
        kind = op.kind
        if kind == OpKind.COPY:
            src = op.diff_inputs[0]
            if src in core.act.active:
                g: ast.expr = name_node(core.bar_of(op.outputs[0]))
                if src in core.nf.lists and op.outputs[0] not in core.nf.lists:
                    g = helper_call("items_like", g, name_node(src))   # (see rule_contribution)
                elif loop_items_of(s) is not None and src not in core.nf.lists:
                    g = helper_call("loop_items_grad", g, name_node(src))   # (a dict's keys)
                core.accumulate(src, g, out)
            return
        g_name = core.bar_of(op.outputs[0]) if op.outputs else None
        if kind == OpKind.PACK:
            value = s.value
            items = list(zip(value.keys, value.values)) if isinstance(value, ast.Dict) else \
                [(ast.Constant(value=i), e) for i, e in enumerate(value.elts)]
            for key, e in items:
                if isinstance(e, ast.Name) and e.id in core.act.active:
                    if isinstance(value, ast.Dict):
                        item: ast.expr = helper_call("dict_item_grad", name_node(g_name),
                                                     clone(key), name_node(e.id))
                    else:
                        item = ast.Subscript(value=name_node(g_name), slice=key, ctx=ast.Load())
                    core.accumulate(e.id, item, out)
            return
        if kind in (OpKind.GETITEM, OpKind.FIELD):
            self.getitem_contribution(s, op, out)
            return
        if kind == OpKind.RULE:
            self.rule_contribution(s, op, out)
            return
        if kind in (OpKind.APPLY, OpKind.CALL):
            self.site_contribution(s, op, out)
            return
        raise AssertionError(kind)  # pragma: no cover

    def _saved_value(self, s, out: List[ast.stmt]) -> Optional[ast.expr]:
        """The value the forward saved for statement s (popped from its stack)."""
        core = self.core
        saves = core.saves.get(s, [])
        if not saves:
            return None
        var, kind, name = saves[-1]
        if kind == "slot":
            return name_node(name)
        old = core.names.fresh(f"{var}_old")
        pop = assign_node(old, ast.Call(func=ast.Attribute(value=name_node(name), attr="pop",
                                                        ctx=ast.Load()), args=[], keywords=[]))
        out.append(core.marks.mark(pop, restore_of=old, slot=name))
        return name_node(old)

    def setitem_adjoint(self, s, op: Op, out: List[ast.stmt]) -> None:
        """x[i] = v: v receives x_bar[i]; the overwritten items get no gradient."""
        core = self.core
        target = s.targets[0]
        base = target.value.id
        index = index_expr(target.slice)
        b = core.bar_of(base)
        zero_list = None
        if base in core.act.active and b in core.state:
            core.mark_line(s, out)
            value = s.value
            part = None
            if isinstance(value, ast.Name) and value.id in core.act.active:
                part = core.names.fresh(f"{value.id}_bar_part")
                if basic_index(target.slice, core.act.ints):
                    item = helper_call("copy_item", name_node(b), clone(index))
                    # A list's item is the value itself; an array's may broadcast it.
                    grad = item if base in core.sequences else \
                        helper_call("unbroadcast", item, name_node(value.id))
                else:  # an index array may repeat: only the last writer counts
                    grad = helper_call("written_grad", name_node(b), clone(index),
                                       name_node(value.id))
                if base in core.act.complex_names and real_among_complex(core.act, value.id):
                    grad = helper_call("real_part", grad)   # a real value in a complex array
                out.append(assign_node(part, grad))
            if core.pure and base in core.sequences:
                zero_list = (b, index)    # once the old items are back (below)
            elif core.pure:
                out.append(assign_node(b, helper_call("with_zeroed", name_node(b),
                                                  clone(index))))
                core.state[b] = "owned"
            else:
                core.inplace.add(b)
                if core.state[b] == "shared":
                    out.append(assign_node(b, helper_call("copy_adjoint", name_node(b))))
                    core.state[b] = "owned"
                if base in core.sequences:
                    zero_list = (b, index)    # once the old items are back (below)
                else:
                    out.append(ast.Expr(value=helper_call("zero_item", name_node(b),
                                                          clone(index))))
            if part is not None and zero_list is None:
                # After the zeroing: the value may be the array itself (x[i] = x).
                core.accumulate(value.id, name_node(part), out)
        restored = self._restore_items(s, base, index, out)
        if zero_list is not None:
            _zero_written_items(core, *zero_list, [name_node(base)] if restored else [], out)
            if part is not None:
                # After the zeroing here too: `x[::-1] = x` of a name that may be a
                # list added x_bar[::-1] to x_bar, then zeroed it (a zero gradient).
                core.accumulate(value.id, name_node(part), out)

    def augassign_adjoint(self, s, op: Op, out: List[ast.stmt]) -> None:
        """x op= v reads like x_new = op(x_old, v), x_old being the saved copy."""
        core = self.core
        var = s.target.id
        saved = self._saved_value(s, out)
        b = core.bar_of(var)
        if var in core.act.active and b in core.state and op.rule is not None:
            core.mark_line(s, out)
            rule_op = Op(OpKind.RULE, [var], diff_inputs=op.diff_inputs, rule=op.rule,
                         bound=dict(zip(op.rule.params, [saved, s.value])))
            self.rule_contribution(s, rule_op, out, reset=[var], old={var: saved})
        else:
            core.reset(b)
        if saved is not None:
            out.append(core.marks.mark(assign_node(var, saved), restore_of=var,
                                       slot=core.saves.require(s)[-1][2]))

    def append_adjoint(self, s, op: Op, out: List[ast.stmt]) -> None:
        """xs.append(v): v receives the last item of xs_bar, which is removed."""
        core = self.core
        xs = op.outputs[0]
        value = op.call.args[0]
        b = core.bar_of(xs)
        if xs in core.act.active and b in core.state:
            core.mark_line(s, out)
            if not isinstance(value, ast.Name) and \
                    any(n in core.act.active for n in names(value)):
                raise InternalError(f"the item appended to {xs!r} is not a variable "
                                    f"({ast.unparse(value)})")
            wanted = isinstance(value, ast.Name) and value.id in core.act.active
            part = core.names.fresh(f"{value.id}_bar_part") if wanted else None
            if core.pure:
                if wanted:
                    out.append(assign_node(part, helper_call("last", name_node(b))))
                out.append(assign_node(b, helper_call("drop_last", name_node(b))))
            else:
                core.inplace.add(b)
                if core.state[b] == "shared":
                    out.append(assign_node(b, helper_call("copy_adjoint", name_node(b))))
                    core.state[b] = "owned"
                pop = ast.Call(func=ast.Attribute(value=name_node(b), attr="pop", ctx=ast.Load()),
                               args=[], keywords=[])
                out.append(assign_node(part, pop) if wanted else ast.Expr(value=pop))
            if wanted:
                core.accumulate(value.id, name_node(part), out)
        if core.pure:
            node = assign_node(xs, helper_call("drop_last", name_node(xs)))
        else:
            node = ast.Expr(value=ast.Call(func=ast.Attribute(value=name_node(xs), attr="pop",
                                                              ctx=ast.Load()),
                                           args=[], keywords=[]))
            core.marks.mark(node, restore_item=xs)
        out.append(core.marks.mark(node, restore_of=xs, slot=f"{xs}.append"))

    def pop_adjoint(self, s, op: Op, out: List[ast.stmt]) -> None:
        """v = xs.pop(): xs_bar gets v_bar back as its last item; xs gets v back."""
        core = self.core
        v, xs = op.outputs
        vb, xb = core.bar_of(v), core.bar_of(xs)
        if xs in core.act.active and (vb in core.state or xb in core.state):
            core.mark_line(s, out)
            if xb not in core.state:
                core.materialize(xs, out)
            elif core.state[xb] == "shared" and not core.pure:
                out.append(assign_node(xb, helper_call("copy_adjoint", name_node(xb))))
                core.state[xb] = "owned"
            item = name_node(vb) if vb in core.state else helper_call("zeros_like", name_node(v))
            core.inplace.add(xb)
            self._push(xb, item, out)
        core.reset(vb)
        node = self._push(xs, name_node(v), out)
        core.marks.mark(node, restore_of=xs, slot=f"{xs}.pop")
        if not core.pure:
            core.marks.mark(node, restore_item=xs)
        core.restores(s, out)

    def _push(self, xs: str, item: ast.expr, out: List[ast.stmt]) -> ast.stmt:
        if self.core.pure:
            node = assign_node(xs, helper_call("push", name_node(xs), item))
        else:
            node = ast.Expr(value=ast.Call(func=ast.Attribute(value=name_node(xs), attr="append",
                                                              ctx=ast.Load()),
                                           args=[item], keywords=[]))
        out.append(node)
        return node

    def getitem_contribution(self, s, op: Op, out: List[ast.stmt]) -> None:
        """v = x[i] (and v = p.W, the item of a namedtuple named W): x_bar[i] += v_bar."""
        core = self.core
        base = s.value.value
        if not (isinstance(base, ast.Name) and base.id in core.act.active):
            return
        b = core.bar_of(base.id)
        g = name_node(core.bar_of(op.outputs[0]))
        index = field_index(s.value) if op.kind == OpKind.FIELD else index_expr(s.value.slice)
        if core.pure:
            if b not in core.state:
                core.materialize(base.id, out)
            out.append(assign_node(b, helper_call("scatter_add", name_node(b), index, g)))
            core.state[b] = "owned"
            return
        core.inplace.add(b)
        if b not in core.state:
            core.materialize(base.id, out)
        elif core.state[b] == "shared":
            out.append(assign_node(b, helper_call("copy_adjoint", name_node(b))))
            core.state[b] = "owned"
        out.append(ast.Expr(value=helper_call("add_at", name_node(b), index, g)))

    def rule_contribution(self, s, op: Op, out: List[ast.stmt], reset: Sequence[str] = (),
                          old: Optional[Dict[str, ast.expr]] = None) -> None:
        """Splice the rule's VJP. `reset` adjoints are consumed before the parts are
        added (x op= v, where the output and an input are the same variable); `old`
        names the saved value standing in for such an input."""
        core = self.core
        rule, touches_complex = rule_for(op, core.act)
        wanted: Dict[str, str] = {}
        targets: List[Tuple[str, str]] = []
        # Parts for a list built here that the rule read as an array (np.sum(xs)):
        # cut into its items at run time, since the adjoint pops its cotangent's
        # items. (Elsewhere add_items and the API cut an array where a list meets it.)
        read_as_array: Set[str] = set()
        for param in rule.differentiable():
            atom = op.bound.get(param)
            if atom is None:
                continue
            if param in rule.sequence and isinstance(atom, (ast.Tuple, ast.List)):
                for i, e in enumerate(atom.elts):
                    if isinstance(e, ast.Name) and e.id in core.act.active:
                        key = f"{param}[{i}]"
                        wanted[key] = core.names.fresh(f"{e.id}_bar_part")
                        targets.append((e.id, wanted[key]))
                continue
            if param in rule.sequence and isinstance(atom, ast.Name):
                # A list built at run time: its adjoint is a list, added itemwise.
                core.sequences.add(atom.id)
            var = var_for(atom, old)
            if var is not None and var in core.act.active:
                wanted[param] = core.names.fresh(f"{var}_bar_part")
                targets.append((var, wanted[param]))
                if param not in rule.sequence and var in core.nf.lists:
                    read_as_array.add(wanted[param])
        if not wanted:
            for v in reset:
                core.reset(core.bar_of(v))
            return
        gs = [name_node(core.bar_of(o)) for o in op.outputs]
        if len(op.outputs) > 1:
            for o in op.outputs:
                if core.bar_of(o) not in core.state:
                    core.materialize(o, out)
            g: ast.expr = ast.Tuple(elts=gs, ctx=ast.Load())
            ans: ast.expr = ast.Tuple(elts=[name_node(o) for o in op.outputs], ctx=ast.Load())
        else:
            g, ans = gs[0], name_node(op.outputs[0])
            if op.outputs[0] in core.act.complex_names and is_realising(op):
                g = helper_call("real_part", g)   # (a real result held complex elsewhere)
        g, square_of = _square_once(rule, op, wanted, targets, g)

        def add(var: str, part: str, into: List[ast.stmt]) -> None:
            value = structured(part, var, read_as_array)
            if touches_complex and real_among_complex(core.act, var):
                # a real variable: the real part of what reaches it from complex values
                value = core.real_part_of(var, value, into)
            core.accumulate(var, value, into, fresh=var == square_of)
        ctx = core.first_iteration
        # Only where skipping pays for the test: products (matmul, dot, einsum), whose
        # adjoint is a product again; elementwise parts are cheaper than the branch.
        late = set(ctx[1].get(s, ())) if ctx is not None and not reset and \
            not registry.is_elementwise(rule) else set()
        late_keys = {k for k, part in wanted.items()
                     if any(v in late and p == part for v, p in targets)} if late else ()
        if late_keys:
            now = {k: v for k, v in wanted.items() if k not in late_keys}
            if now:
                out.append(self.rule_placeholder(rule, op.bound, g, ans, now, s))
            later = [copy_location(self.rule_placeholder(
                rule, op.bound, g, ans, {k: wanted[k] for k in late_keys}, s), s)]
            for var, part in targets:
                if var in late and part in {wanted[k] for k in late_keys}:
                    add(var, part, later)
            out.append(ast.If(test=clone(ctx[0]), body=later, orelse=[]))
            for var, part in targets:
                if not (var in late and part in {wanted[k] for k in late_keys}):
                    add(var, part, out)
            return
        out.append(self.rule_placeholder(rule, op.bound, g, ans, wanted, s))
        for v in reset:
            core.reset(core.bar_of(v))
        for var, part in targets:
            add(var, part, out)

    def rule_placeholder(self, rule, bound, g, ans, wanted: Dict[str, str], s) -> ast.stmt:
        if self.core.probing:
            return ast.Pass()
        return sites.rule_placeholder(rule, bound, g, ans, wanted, s, self.core.facts)

    def site_contribution(self, s, op: Op, out: List[ast.stmt]) -> None:
        core = self.core
        site = core.sites.require(s)
        for o in op.outputs:
            if core.bar_of(o) not in core.state:
                core.materialize(o, out)
        gs = [name_node(core.bar_of(o)) for o in op.outputs]
        parts: List[Tuple[str, str]] = []
        wanted: Dict[int, str] = {}
        for i, arg in enumerate(site.arg_atoms):
            if isinstance(arg, ast.Name) and arg.id in core.act.active and \
                    i not in site.static_none:
                wanted[i] = core.names.fresh(f"{arg.id}_bar_part")
                parts.append((arg.id, wanted[i]))
        if not wanted:
            return
        if getattr(site, "recompute", False) and not core.probing:
            out.append(site.recomputation(s, core.facts))
        out.append(ast.Pass() if core.probing else site.adjoint_placeholder(gs, wanted, s,
                                                                            core.facts))
        for var, part in parts:   # (a callee may compute with complex values: real parts)
            core.accumulate(var, core.real_part_of(var, name_node(part), out)
                            if real_among_complex(core.act, var) else name_node(part), out)


def basic_index(index: ast.expr, ints) -> bool:
    """An index that cannot name an element twice: ints (constants, or names in
    `ints`), slices, None, `...`."""
    if isinstance(index, ast.Tuple):
        return all(basic_index(e, ints) for e in index.elts)
    if isinstance(index, ast.Slice):
        return True
    if isinstance(index, ast.Constant):
        return index.value is None or index.value is Ellipsis or (
            isinstance(index.value, int) and not isinstance(index.value, bool))
    if isinstance(index, ast.UnaryOp) and isinstance(index.operand, ast.Constant):
        return basic_index(index.operand, ints)
    return isinstance(index, ast.Name) and index.id in ints


def structured(part: str, var: str, read_as_array: Set[str]) -> ast.expr:
    """The part's value as var's cotangent: items_like(part, var) where var may be
    a structure a rule read as one array."""
    if part in read_as_array:
        return helper_call("items_like", name_node(part), name_node(var))
    return name_node(part)


def _square_once(rule, op: Op, wanted: Dict[str, str], targets: List[Tuple[str, str]],
                 g: ast.expr) -> Tuple[ast.expr, Optional[str]]:
    """`v * v` (np.multiply of a name by itself, both parts wanted): both parts are
    g * v, so the part of 2 * g is taken once, for v (a product: a new array). The
    cotangent, and the name it goes to (None: not a square); wanted and targets lose
    the second part."""
    x, y = op.bound.get("x"), op.bound.get("y")
    if not (rule.func is np.multiply and set(wanted) == {"x", "y"} and
            isinstance(x, ast.Name) and isinstance(y, ast.Name) and x.id == y.id):
        return g, None
    targets.remove((y.id, wanted.pop("y")))
    return ast.BinOp(left=g, op=ast.Mult(), right=ast.Constant(value=2.0)), x.id


def _zero_written_items(core, b: str, index: ast.expr, like: List[ast.expr],
                        out: List[ast.stmt]) -> None:
    """b[index] = 0 in a list's cotangent, once its old items are back (`like`: the
    list, whose items' structure the zeros take)."""
    if core.pure:
        out.append(assign_node(b, helper_call("with_zeroed", name_node(b), clone(index),
                                              *like)))
        core.state[b] = "owned"
    else:
        out.append(ast.Expr(value=helper_call("zero_item", name_node(b), clone(index), *like)))
