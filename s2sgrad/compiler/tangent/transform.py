"""Forward mode — the tangent (JVP) transform: the statements and the state.

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

The transform is `Tangent`; its branches and loops (control.py), rules
(rules.py) and calls (calls.py) are parts it is made of, the statements that
write in place are functions of it (writes.py), and clean.py tidies its output.
"""
from __future__ import annotations

import ast
import copy
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from ...errors import TransformError, error_at
from .. import sites
from ..analyze import Activity, call_write_guards, iter_statements
from ..marks import line_comment
from ..names import assign_node, copy_location, helper_call, name_node
from ..normalize import NormalForm
from ..ops import Op, OpKind, describe
from ..parse import ParsedFunction
from ..sites import store_targets
from ..transform import field_index, index_value_checks, is_literal, real_value_checks
from . import writes
from .calls import CallTangents
from .control import ControlFlowTangents
from .rules import RuleTangents
from .state import (
    Loop,
    State,
    any_live,
    is_fresh,
    none,
    tuple_or_name,
)


class Tangent:
    def op_of(self, s: ast.stmt) -> Op:
        """What the normal-form statement s does (ops.describe, once per statement)."""
        return describe(s, self.locals, self.facts)

    def __init__(self, nf: NormalForm, activity: Activity, optimize_code: bool = True,
                 structure: Optional[Dict[int, Any]] = None,
                 demand: Optional[Tuple[bool, ...]] = None):
        # Its parts, by what they differentiate (each reads this object's state).
        self.control = ControlFlowTangents(self)
        self.rules = RuleTangents(self)
        self.calls = CallTangents(self)
        self.nf = nf
        self.facts = nf.facts   # what this compile's passes noted about its nodes
        self.act = activity
        self.parsed: ParsedFunction = nf.parsed
        self.optimize_code = optimize_code
        self.names = nf.names
        self.locals = nf.resolver.locals | nf.names.taken
        self.tan: Dict[str, str] = {}
        self.state = State(set(), set(), set(nf.all_params))
        self.bindings: Dict[str, Any] = dict(getattr(nf, "bindings", {}))
        self.late: Dict[str, Tuple[Any, Tuple[int, ...], str]] = {}
        self.inits: List[str] = []
        # Statements that materialise a zero tangent (or a `v = None` init): the
        # clean-up drops those whose variable nobody reads afterwards.
        self.materialized: Set[ast.stmt] = set()
        self.last_line: Optional[int] = None
        self.loop: Optional[Loop] = None
        self.np_name = sites.numpy_alias(nf)
        self.sites: Dict[Any, Any] = {}
        self.compiled: Dict[str, Any] = {}        # callees compiled already, by bound name
        # (the names a call of a function of the user's assigns, the callee's bound
        # name; None for a call of this very function): where a callee returns complex
        # values the analysis took for real ones, the function is compiled again
        # knowing them (analyze.complex_returns, once every callee is compiled).
        self.call_results: List[Tuple[List[str], Optional[str]]] = []
        self.not_inlined: List[str] = []
        # Rules whose JVP is their VJP transposed (no template of their own): the
        # derivative witness does not check those rules (witness.py).
        self.transposed: Set[str] = set()
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
                return none()
        return helper_call("zero_tangent", copy.deepcopy(atom))

    def tangent_of(self, atom: ast.expr) -> ast.expr:
        """The tangent of an atom: its variable when live, else an explicit zero."""
        if self.live_atom(atom):
            return name_node(self.dot(atom.id))
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
        node = assign_node(self.dot(var), helper_call("zero_tangent", name_node(var)))
        self.materialized.add(node)
        out.append(node)

    def mark_line(self, s, out: List[ast.stmt], force: bool = False) -> None:
        opened = line_comment(self.facts.origin_of(s), self.parsed, self.last_line, force)
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
                op = self.op_of(s)
                if op.kind in (OpKind.APPEND, OpKind.POP):
                    out.add(op.outputs[-1] if op.kind == OpKind.POP else op.outputs[0])
        return out

    def _appended(self, body) -> Set[str]:
        """Names used as lists (appended to, popped from): their items are not views."""
        out = set()
        for s, _ in iter_statements(body):
            if isinstance(s, (ast.Assign, ast.Expr)):
                op = self.op_of(s)
                if op.kind == OpKind.APPEND:
                    out.add(op.outputs[0])
                elif op.kind == OpKind.POP:
                    out.add(op.outputs[1])
        return out

    # -- probing (loops) -------------------------------------------------------------------
    def snapshot(self):
        return (set(self.names.taken), dict(self.tan), self.state.copy(), dict(self.bindings),
                dict(self.late), list(self.inits), self.last_line, self.loop,
                dict(self.sites), list(self.not_inlined))

    def restore(self, snap) -> None:
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
        out = self.control.block(body)
        new_args = self._arguments(fdef.args, tangent_params)
        inits = []
        for v in self.inits:
            if v not in params:
                node = assign_node(v, none())
                self.materialized.add(node)
                inits.append(node)
        jvp = ast.FunctionDef(name=self.own_name, args=new_args,
                              body=inits + out, decorator_list=[], returns=None,
                              type_comment=None)
        copy_location(jvp, fdef)
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
                kw_defaults.append(self.constant(kwdefaults.get(a.arg)))
        return ast.arguments(posonlyargs=[], args=positional + tangents, vararg=None,
                             kwonlyargs=[ast.arg(arg=a.arg) for a in args.kwonlyargs],
                             kw_defaults=kw_defaults, kwarg=None, defaults=[])

    def builtin(self, name: str) -> ast.Name:
        """A builtin the tangent code calls (zip): by its own name, unless the function,
        its closure or its module binds that name; then through a bound one."""
        return name_node(self.nf.resolver.builtin_reference(name, self.locals, self.bindings))

    def constant(self, value) -> ast.expr:
        if is_literal(value):
            return ast.Constant(value=value) if not isinstance(value, tuple) else \
                ast.parse(repr(value), mode="eval").body
        name = self.names.fresh("_s2s_default")
        self.bindings[name] = value
        return name_node(name)

    # -- statements ----------------------------------------------------------------------------
    def expression(self, s: ast.Expr) -> List[ast.stmt]:
        op = self.op_of(s)
        if op.kind == OpKind.APPEND:
            return writes.append(self, s, op)
        if op.kind == OpKind.UFUNC_AT:
            return writes.ufunc_at(self, s, op)
        return self.write_guards(op) + [s]

    def write_guards(self, op: Op) -> List[ast.stmt]:
        """See transform.forward_sweep's write_guards: a callee writing into an argument
        array would change a value behind the tangents' back."""
        return [ast.Expr(value=helper_call("unshared", name_node(arg),
                                       *[ast.Constant(value=f) for f in fields]))
                for arg, fields in call_write_guards(op, self.act.ints, self.locals,
                                                     self.parsed)]

    def assign(self, s) -> List[ast.stmt]:
        op = self.op_of(s)
        out: List[ast.stmt] = []
        self.mark_line(s, out)
        out += index_value_checks(s, op, self.act, self.err)
        if op.kind == OpKind.SETITEM:
            out += writes.setitem(self, s, op)
        elif op.kind == OpKind.AUGASSIGN:
            out += writes.augassign(self, s, op)
        elif op.kind == OpKind.AUGITEM:
            raise self.err(s, "an augmented item assignment the compiler did not expand")
        elif op.kind == OpKind.POP:
            out += writes.pop(self, s, op)
        elif op.kind == OpKind.APPLY:
            out += self.calls.apply(s, op)
        elif op.kind == OpKind.CALL:
            out += self.write_guards(op)
            out += self.calls.call(s, op)
        else:
            out += self.simple(s, op)
        self.state.defined.update(op.outputs)
        return out + real_value_checks(s, op, self.act, self.err)

    def _primal(self, s) -> ast.stmt:
        if self.facts.stmts.of(s).snapshot:
            new = self.facts.shallow_copy(s)
            new.value = helper_call("snapshot", s.value)
            return new
        return s

    def simple(self, s, op: Op) -> List[ast.stmt]:
        active = [o for o in op.outputs if o in self.act.active]
        kind = op.kind
        if not active or kind not in (OpKind.COPY, OpKind.PACK, OpKind.GETITEM, OpKind.FIELD,
                                      OpKind.RULE):
            out = [self._primal(s)]
            for o in op.outputs:
                self.kill(o)
            return out
        inputs_live = [n for n in op.diff_inputs if n in self.state.live]
        if not inputs_live:
            for o in op.outputs:
                self.kill(o)
            return [self._primal(s)]
        snapshot = self.facts.stmts.of(s).snapshot
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
            primal = assign_node(store_targets(temps), primal.value)
            post.append(assign_node(store_targets(op.outputs), tuple_or_name(temps)))
            ans_names = temps
        struct: Any = True
        if kind == OpKind.COPY and isinstance(value, ast.Call) and \
                getattr(value.func, "id", None) == "_s2s_loop_items":
            expr = helper_call("loop_items_tangent", name_node(self.dot(inputs_live[0])),
                           name_node(inputs_live[0]))
            fresh, stmts = False, []
        elif kind == OpKind.COPY and isinstance(value, ast.Call):   # _s2s_record(cls, items)
            expr, fresh = name_node(self.dot(inputs_live[0])), False
            struct = self.liveness(name_node(inputs_live[0]))
            stmts = []
        elif kind == OpKind.COPY:
            expr, fresh = name_node(self.dot(inputs_live[0])), False
            struct = self.liveness(name_node(inputs_live[0]))
            stmts: List[ast.stmt] = []
        elif kind == OpKind.PACK and isinstance(value, ast.Dict):
            expr = ast.Dict(keys=copy.deepcopy(value.keys),
                            values=[self.tangent_of(e) for e in value.values])
            fresh, stmts = True, []
        elif kind == OpKind.PACK:
            expr = type(value)(elts=[self.tangent_of(e) for e in value.elts], ctx=ast.Load())
            fresh, stmts = isinstance(value, ast.List), []
            if isinstance(value, ast.Tuple):
                struct = tuple(self.liveness(e) for e in value.elts)
        elif kind == OpKind.FIELD:   # p.W of a namedtuple: the tangent's item of that name
            if not self.live_atom(value.value):
                for o in op.outputs:
                    self.kill(o)
                return [primal] + post
            expr = ast.Subscript(value=name_node(self.dot(value.value.id)),
                                 slice=field_index(value), ctx=ast.Load())
            fresh, stmts = False, []
        elif kind == OpKind.GETITEM:
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
            expr = ast.Subscript(value=name_node(self.dot(base.id)),
                                 slice=copy.deepcopy(value.slice), ctx=ast.Load())
            protect = snapshot or (base.id in self.in_place and base.id not in self.lists)
            if protect:
                expr = helper_call("snapshot", expr)
            fresh, stmts = protect, []
        else:
            ans = tuple_or_name(ans_names) if len(ans_names) > 1 else name_node(ans_names[0])
            stmts, expr = self.rules.rule_tangent(s, op, value, ans)
            if expr is None:
                for o in op.outputs:
                    self.kill(o)
                return [primal] + post
            fresh = is_fresh(expr, self.facts.exprs)
            if snapshot and not fresh:
                expr, fresh = helper_call("snapshot", expr), True
        self.read([name_node(n) for n in inputs_live], fresh)
        if isinstance(target, ast.Name):
            tangent_target = name_node(self.dot(target.id), True)
        else:
            tangent_target = ast.Tuple(elts=[name_node(self.dot(e.id), True) for e in target.elts],
                                       ctx=ast.Store())
        out = pre + [primal] + stmts + [assign_node(tangent_target, expr)] + post
        for o in op.outputs:
            if o in self.act.active:
                self.set_live(o, owned=fresh and len(op.outputs) == 1,
                              struct=struct if len(op.outputs) == 1 else True)
            else:
                self.kill(o)
        return out

    # -- in-place updates and lists --------------------------------------------------------------

