"""Forward mode: tangents of calls to rules of the table (jvp_rules), templates
substituted, shapes and scalars handled."""
from __future__ import annotations

import ast
import copy
import functools
import inspect
from typing import Dict, List, Optional, Set, Tuple

from ...errors import TransformError
from ...rules import jvp_rules
from ...runtime import HELPERS
from .. import reentry, sites
from ..analyze import SCALAR, is_realising
from ..marks import comment
from ..names import assign_node, helper_call, name_node
from ..ops import Op
from ..transform import rule_for
from . import transposed
from .state import HINT_RULE, bind_pair, none, rebuild

# Why forward mode refuses a rule for complex values, where it is not that its JVP
# is written for real ones.
_PHASE = ("a complex vector comes back with an arbitrary phase, and a function of "
          "it may depend on that, which a tangent cannot show; reverse mode checks it")
_COMPLEX_WHY = {"np.linalg.eigh": _PHASE, "np.linalg.svd": _PHASE}


class RuleTangents:
    """Tangents of calls to rules of the table (jvp_rules): templates substituted,
    shapes and scalars handled.

    A part of the `Tangent` transform (transform.py), which owns the state these
    methods read (`self.core`) and calls them as `self.rules`."""

    def __init__(self, core):
        self.core = core   # the Tangent whose state (names, liveness, facts) this reads

    # -- rules ------------------------------------------------------------------------------
    def rule_tangent(self, s, op: Op, value: ast.expr, ans: ast.expr
                     ) -> Tuple[List[ast.stmt], Optional[ast.expr]]:
        """The tangent of one call to a table rule: (statements, expression) or (.., None)."""
        core = self.core
        node = getattr(op.call, "func", None) or value
        rule, touches_complex = rule_for(op, core.act)
        jr = jvp_rules.lookup(rule)
        if jr is None:
            why = jvp_rules.UNSUPPORTED.get(rule.name)
            raise core.err(node, f"s2sgrad has no forward-mode (JVP) rule for {op.label}"
                           + (f": {why}" if why else ""), HINT_RULE)
        if touches_complex and not jr.complex_ok and not is_realising(op):
            # (svd(a, compute_uv=False) is: its JVP's values part holds for complex a)
            why = _COMPLEX_WHY.get(rule.name, "its JVP is written for real ones")
            raise core.err(node, f"forward mode does not differentiate {op.label} of complex "
                           f"values ({why})",
                           "Use reverse mode (grad, vjp) for this function.")
        slots: List[Tuple[str, Optional[int], ast.expr]] = []
        for param in rule.differentiable():
            atom = op.bound.get(param)
            if atom is None:
                continue
            if param in rule.sequence and isinstance(atom, (ast.Tuple, ast.List)):
                for i, e in enumerate(atom.elts):
                    if core.live_atom(e):
                        slots.append((param, i, e))
            elif core.live_atom(atom):
                slots.append((param, None, atom))
        if not slots:
            return [], None
        live_params = []
        for p, _, _ in slots:
            if p not in live_params:
                live_params.append(p)
        stmts: List[ast.stmt] = []
        terms: List[ast.expr] = []
        handled: Set[str] = set()
        for p in live_params:
            refuse = jvp_rules.unsupported_part(rule, p)
            if refuse is not None:
                terms.append(self._expand(rule, op, refuse, ans, stmts, []))
                handled.add(p)
        diff_atoms = {p: op.bound.get(p) for p in rule.differentiable() if p in op.bound}
        if jr.linear and any(p in jr.linear for p in live_params if p not in handled):
            mapping = {}
            for p in jr.linear:
                atom = diff_atoms.get(p)
                if atom is None:
                    continue
                self._tangent_mapping(rule, p, atom, mapping)
            terms.append(rebuild(value, mapping, core.facts.exprs))
        if jr.multilinear:
            for p, _i, atom in slots:
                if p in handled:
                    continue
                terms.append(rebuild(value, {atom: name_node(core.dot(atom.id))},
                                     core.facts.exprs))
        for p in live_params:
            if p in handled or p not in jr.parts:
                continue
            terms.append(self._expand(rule, op, jr.parts[p], ans, stmts,
                                      jr.prelude + jr.part_preludes.get(p, [])))
        if jr.joint is not None and any(p in jr.joint_params for p in live_params
                                        if p not in handled):
            terms.append(self._expand(rule, op, jr.joint, ans, stmts, jr.prelude))
        if jr.transposed and any(p not in handled for p in live_params):
            terms.append(self._transposed(rule, op, node, ans, stmts,
                                          [p for p in live_params if p not in handled]))
            handled.update(live_params)
        missing = [p for p in live_params if p not in handled and p not in jr.parts and
                   p not in jr.linear and p not in jr.joint_params and not jr.multilinear]
        if missing:
            raise core.err(node, f"s2sgrad has no forward-mode (JVP) rule for {op.label} with "
                           f"respect to its argument {missing[0]!r}", HINT_RULE)
        if not terms:
            return stmts, None
        expr = terms[0]
        for t in terms[1:]:
            if rule.outputs:
                expr = helper_call("add", expr, t)
            else:
                expr = ast.BinOp(left=expr, op=ast.Add(), right=t)
        if jr.broadcast and len(op.outputs) == 1 and \
                not self._full_shape(op, jr, live_params, handled, ans):
            expr = helper_call("broadcast_tangent", expr, copy.deepcopy(ans))
        if jr.cast == "always" or (jr.cast == "dtype" and "dtype" in op.bound):
            expr = helper_call("cast_tangent", expr, copy.deepcopy(ans))
        return stmts, expr

    def _transposed(self, rule, op: Op, node, ans: ast.expr, out: List[ast.stmt],
                    params: List[str]) -> ast.expr:
        """The transpose of the rule's VJP applied to the tangents of `params`: the
        reverse mode (with respect to g) of the VJP as a function, run at a generic g,
        its cotangent the tangents (transposed.py)."""
        core = self.core
        try:
            # (pure: the tangent code calls this pair, and create_graph differentiates
            # that code again, this pair with it: no in-place updates, no `del`)
            pair = transposed.pair_for(rule, params, functools.partial(reentry.compile_pair,
                                                                       pure=True))
        except TransformError as exc:
            raise core.err(node, f"s2sgrad has no forward-mode (JVP) rule for {op.label}, and "
                           f"cannot derive one from its VJP: {exc.reason}", HINT_RULE) from None
        core.transposed.add(op.label)
        fwd, adj, res = bind_pair(core, f"{transposed.stem_of(rule)}_vjp", pair)
        args = [helper_call("generic_cotangent", copy.deepcopy(ans)), copy.deepcopy(ans)] + \
            [copy.deepcopy(self._argument(rule, op, param)) for param in rule.params]
        unused = "_" if "_" not in core.names.taken else core.names.fresh("unused")
        out.append(comment(f"{op.label}: the transpose of its VJP (reverse mode in g)"))
        out.append(assign_node(ast.Tuple(elts=[name_node(unused, True), name_node(res, True)],
                                         ctx=ast.Store()),
                               ast.Call(func=name_node(fwd), args=args, keywords=[])))
        tangents = ast.Tuple(elts=[self._param_tangent(rule, p, op.bound.get(p))
                                   for p in params], ctx=ast.Load())
        for t, p in zip(tangents.elts, params):   # (a list's constant items: zeros)
            if isinstance(t, ast.List):
                t.elts = [helper_call("zero_tangent", copy.deepcopy(atom))
                          if isinstance(e, ast.Constant) and e.value is None else e
                          for e, atom in zip(t.elts, op.bound[p].elts)]
        return ast.Call(func=name_node(adj), args=[name_node(res), tangents], keywords=[])

    def _full_shape(self, op: Op, jr, live_params, handled, ans) -> bool:
        """Does the sum of pointwise contributions provably have the result's shape?

        It has the broadcast shape of everything it reads; the result of an
        elementwise function has the broadcast shape of all its arguments. So it
        is enough that the contributions read `ans`, or every argument that is
        not a scalar, or that an operand provably has the result's shape.
        """
        if isinstance(ans, ast.Name):
            for p in live_params:
                atom = op.bound.get(p)
                if isinstance(atom, ast.Name) and self.core.act.same_shape(atom, ans):
                    return True
        covered: Set[str] = set()
        for p in live_params:
            if p in handled or p not in jr.parts:
                continue
            nodes = [jr.parts[p]] + jr.part_preludes.get(p, []) + jr.prelude
            for node in nodes:
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Name):
                        covered.add(sub.id[:-4] if sub.id.endswith("_dot") else sub.id)
        if "ans" in covered:
            return True
        for param, atom in op.bound.items():
            if param in covered or self._scalar(atom):
                continue
            return False
        return True

    def _scalar(self, atom) -> bool:
        if isinstance(atom, ast.Constant):
            return isinstance(atom.value, (int, float)) and not isinstance(atom.value, bool)
        if isinstance(atom, ast.UnaryOp) and isinstance(atom.operand, ast.Constant):
            return self._scalar(atom.operand)
        if isinstance(atom, ast.Name):
            return atom.id in self.core.act.ints or self.core.act.shape_of(atom) == SCALAR
        return False

    def _tangent_mapping(self, rule, param, atom, mapping: Dict[int, ast.expr]) -> None:
        """Replace a differentiable argument (or each item of a sequence) by its tangent."""
        core = self.core
        if param in rule.sequence and isinstance(atom, (ast.Tuple, ast.List)):
            for e in atom.elts:
                mapping[e] = core.tangent_of(e) if not isinstance(e, (ast.Tuple, ast.List)) \
                    else core.zero_of(e)
        else:
            mapping[atom] = core.tangent_of(atom)

    def _expand(self, rule, op: Op, template: ast.expr, ans: ast.expr, out: List[ast.stmt],
                prelude: List[ast.stmt]) -> ast.expr:
        """A JVP template with the call's arguments, tangents and `ans` substituted."""
        mapping: Dict[str, ast.expr] = {"ans": ans}
        given = set(op.bound)
        for param in rule.params:
            mapping[param] = self._argument(rule, op, param)
            mapping[f"{param}_dot"] = self._param_tangent(rule, param, op.bound.get(param))
        for h in HELPERS:
            mapping.setdefault(h, name_node("_s2s_" + h))
        mapping["np"] = name_node(self.core.np_name)
        drop = set(rule.params) - given
        local: Dict[str, ast.expr] = {}
        for stmt in prelude:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and \
                        sub.id not in local:
                    local[sub.id] = name_node(self.core.names.fresh(sub.id))
        full = dict(mapping, **local)
        used = {n.id for n in ast.walk(template) if isinstance(n, ast.Name)}
        if used & set(local):
            out += [sites.substitute(p, full, drop) for p in prelude]
        return sites.substitute(template, full, drop)

    @staticmethod
    def _argument(rule, op: Op, param: str) -> ast.expr:
        """What the call passes for a parameter of the rule: its argument, or the
        default as a constant (() for *args)."""
        if param in op.bound:
            return op.bound[param]
        parameter = rule.signature.parameters[param]
        default = () if parameter.kind is inspect.Parameter.VAR_POSITIONAL else \
            parameter.default
        return sites.constant(None if default is inspect.Parameter.empty else default)

    def _param_tangent(self, rule, param, atom) -> ast.expr:
        """A parameter's tangent in a template: None when it is not differentiated."""
        core = self.core
        if atom is None or param not in rule.grads:
            return none()
        if param in rule.sequence and isinstance(atom, (ast.Tuple, ast.List)):
            if not any(core.live_atom(e) for e in atom.elts):
                return none()
            return ast.List(elts=[name_node(core.dot(e.id)) if core.live_atom(e) else none()
                                  for e in atom.elts], ctx=ast.Load())
        if core.live_atom(atom):
            return name_node(core.dot(atom.id))
        return none()
