"""Forward mode: tangents through calls, to other user functions (their own
`_jvp` code) and to `Function.apply` (the class's `jvp`, or one derived from
its `vjp`)."""
from __future__ import annotations

import ast
import copy
import inspect
from typing import Any, List

from ...errors import TransformError
from .. import reentry, sites
from ..marks import comment
from ..names import assign_node, helper_call, name_node
from ..ops import Op
from .function_sites import FunctionSite, forward_site, vjp_as_function
from .state import any_live, bind_pair, maybe_none


class CallTangents:
    """Tangents through calls: other user functions (their own `_jvp` code) and
    `Function.apply` (the class's `jvp`, or one derived from its `vjp`).

    A part of the `Tangent` transform (transform.py), which owns the state these
    methods read and write (`self.core`) and calls them as `self.calls`."""

    def __init__(self, core):
        self.core = core   # the Tangent whose state (names, liveness, facts) this reads

    # -- calls to other user functions -----------------------------------------------------------
    def call(self, s, op: Op) -> List[ast.stmt]:
        core = self.core
        fn = op.callee
        call = op.call
        active = [o for o in op.outputs if o in core.act.active]
        try:
            sig = inspect.signature(fn)
            bound = sig.bind(*call.args, **{k.arg: k.value for k in call.keywords})
        except (TypeError, ValueError) as exc:
            raise core.err(call, f"cannot bind the call to {fn.__name__}: {exc}") from None
        params = list(sig.parameters.values())
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            raise core.err(call, f"cannot differentiate through {fn.__name__}, which takes "
                           f"*args/**kwargs", "Give the helper explicit parameters.")
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                      p.POSITIONAL_OR_KEYWORD)]
        # Keyword-only parameters come after the positional ones in `wrt` (the
        # callee's all_params): a tangent passed to one is differentiated too.
        atoms = [bound.arguments.get(p.name) for p in params]
        wrt = tuple(i for i, a in enumerate(atoms)
                    if isinstance(a, ast.Name) and a.id in core.act.varied)
        if not active or not any(core.live_atom(atoms[i]) for i in wrt):
            for o in op.outputs:
                core.kill(o)
            return [s]
        args: List[ast.expr] = []
        for p, a in zip(positional, atoms):
            args.append(copy.deepcopy(a) if a is not None else core.constant(p.default))
        tangents = [core.tangent_of(atoms[i]) for i in wrt]
        keywords = [ast.keyword(arg=p.name, value=copy.deepcopy(bound.arguments[p.name]))
                    for p in params if p.kind is p.KEYWORD_ONLY and p.name in bound.arguments]
        core.read([atoms[i] for i in wrt], fresh=False)
        base = fn.__name__ if fn.__name__ != "<lambda>" else "lambda"
        statics = sites.function_arguments(params, atoms, core.nf, fn)
        complexes = tuple(sorted(entry for p, a in zip(params, atoms)
                                 if isinstance(a, ast.Name)
                                 for entry in core.act.complex_entries(a.id, p.name)))
        recursive = fn is core.parsed.fn and wrt == tuple(core.act.wrt) and \
            not core.structure and core.demand is None and \
            dict(statics) == core.parsed.statics and not complexes
        # Specialise the callee: which items of tuple arguments carry tangents, and
        # which outputs' tangents this code reads at all.
        structure = tuple((i, core.state.struct[atoms[i].id]) for i in wrt
                          if core.live_atom(atoms[i]) and atoms[i].id in core.state.struct)
        demand = None
        if len(op.outputs) > 1 and not all(o in core.act.active for o in op.outputs):
            demand = tuple(o in core.act.active for o in op.outputs)
        spec = (structure, demand, statics, complexes)
        if recursive:
            name = core.own_name          # a recursive call calls this very function
        else:
            key = (s, wrt, spec)
            name = core.sites.get(key)
            if name is None:
                name = core.names.fresh(f"{base}_jvp")
                core.sites[key] = name
        live_out: Any = True
        core.call_results.append((op.outputs, None if recursive else name))
        if recursive:
            pass
        elif not reentry.tangent_in_progress(fn, wrt, core.optimize_code, structure, demand,
                                             statics, complexes):
            callee = reentry.compile_tangent(fn, wrt, core.optimize_code, structure, demand,
                                             False, statics, complexes)
            core.bindings[name] = callee.jvp
            core.compiled[name] = callee
            live_out = callee.output_live
        else:
            core.late[name] = (fn, wrt, "jvp", structure, demand, False, statics, complexes)
        outs = op.outputs
        target = s.targets[0]
        primal_target = copy.deepcopy(target)
        if isinstance(target, ast.Name):
            tangent_target: ast.expr = name_node(core.dot(target.id), True)
        else:
            tangent_target = ast.Tuple(elts=[name_node(core.dot(e.id), True) for e in target.elts],
                                       ctx=ast.Store())
        node = ast.Assign(targets=[ast.Tuple(elts=[primal_target, tangent_target],
                                             ctx=ast.Store())],
                          value=ast.Call(func=name_node(name), args=args + tangents,
                                         keywords=keywords), type_comment=None)
        for i, o in enumerate(outs):
            if len(outs) == 1:
                part = live_out
            elif isinstance(live_out, tuple) and len(live_out) == len(outs):
                part = live_out[i]
            else:
                part = any_live(live_out)
            if o in core.act.active:
                core.set_live(o, owned=False, struct=part)
            else:
                core.kill(o)
        return [node]

    # -- Function.apply ------------------------------------------------------------------------
    def apply(self, s, op: Op) -> List[ast.stmt]:
        core = self.core
        cls = op.callee
        call = op.call
        site = core.sites.get(s)
        if site is None:
            needs = tuple(isinstance(a, ast.Name) and a.id in core.act.varied for a in call.args)
            site = forward_site(cls, call, op.outputs, needs, core.names, core.nf)
            core.sites[s] = site
            if not site.inlined:
                core.not_inlined.append(f"{cls.__name__}: {site.reason}")
        core.bindings.update(site.bindings)
        out: List[ast.stmt] = []
        if not site.inlined:
            out.append(comment(f"{cls.__name__}.apply: forward called, not inlined "
                               f"({site.reason})"))
        out += [copy.deepcopy(b) for b in site.forward_body]
        active = [o for o in op.outputs if o in core.act.active]
        live_args = [a for a in site.arg_atoms if core.live_atom(a)]
        if not active or not live_args:
            for o in op.outputs:
                core.kill(o)
            return out
        tangents = [core.tangent_of(a) for a in site.arg_atoms]
        core.read(live_args, fresh=False)
        outs = site.out_names
        targets = [core.dot(o) for o in outs]
        if site.jvp_body is not None:
            mapping = {g: t for g, t in zip(site.jvp_grads, tangents)}
            body = [sites.substitute(b, mapping) for b in site.jvp_body]
            result = sites.substitute(site.jvp_result, mapping)
            out += body
            out += self._assign_results(cls, "jvp", result, outs, targets)
        elif not site.inlined and cls.jvp_method() is not None:
            out.append(comment(f"{cls.__name__}.apply: jvp called, not inlined"))
            value = ast.Call(func=name_node("_s2s_call_jvp"),
                             args=[copy.deepcopy(site.cls_expr), name_node(site.ctx_name)]
                             + tangents, keywords=[])
            out += self._assign_results(cls, "jvp", value, outs, targets)
        else:
            out += self._derived_jvp(s, site, tangents, outs, targets)
        for o in outs:
            if o in core.act.active:
                core.set_live(o, owned=False)
            else:
                core.kill(o)
        return out

    def _assign_results(self, cls, what, result, outs, targets,
                        never_none: bool = False) -> List[ast.stmt]:
        """One tangent per output (a None from a user's jvp is a zero)."""
        out: List[ast.stmt] = []
        if len(outs) == 1:
            elts = [result]
        elif isinstance(result, (ast.Tuple, ast.List)) and len(result.elts) == len(outs):
            elts = list(result.elts)
        else:
            tmp = self.core.names.fresh(f"{cls.__name__}_tangents")
            out.append(assign_node(tmp, helper_call("check_tangents", result,
                                            ast.Constant(value=len(outs)),
                                            ast.Constant(value=f"{cls.__name__}.{what}"))))
            elts = [ast.Subscript(value=name_node(tmp), slice=ast.Constant(value=i), ctx=ast.Load())
                    for i in range(len(outs))]
        for o, t, e in zip(outs, targets, elts):
            if isinstance(e, ast.Constant) and e.value is None:
                e = helper_call("zero_tangent", name_node(o))
            elif not never_none and maybe_none(e):
                e = helper_call("none_to_zero_tangent", e, name_node(o))
            out.append(assign_node(t, e))
        return out

    def _derived_jvp(self, s, site: FunctionSite, tangents, outs, targets) -> List[ast.stmt]:
        """No jvp: the tangent is the reverse mode of the vjp (linear in its cotangent)
        applied to the input tangents."""
        core = self.core
        cls = site.cls
        if not site.inlined:
            raise core.err(s.value if hasattr(s, "value") else s,
                           f"{cls.__name__} has no jvp, and its JVP cannot be derived from its "
                           f"vjp: {site.reason}",
                           f"Define {cls.__name__}.jvp(ctx, *tangents) (PyTorch's name) for "
                           f"forward mode.")
        slots, saved = site.derived_slots
        try:
            fn, n_out = vjp_as_function(cls, slots, saved, site.needs, len(outs))
        except (sites.NotInlinable, TransformError) as exc:
            reason = getattr(exc, "reason", str(exc))
            raise core.err(s.value, f"{cls.__name__} has no jvp, and its JVP cannot be derived "
                           f"from its vjp: {reason}",
                           f"Define {cls.__name__}.jvp(ctx, *tangents) (PyTorch's name) for "
                           f"forward mode.") from None
        try:
            # (pure: this tangent code may be differentiated again, and the pair's
            # adjoint with it)
            pair = reentry.compile_pair(fn, tuple(range(n_out)), pure=True)
        except TransformError as exc:
            raise core.err(s.value, f"{cls.__name__} has no jvp, and its JVP cannot be derived "
                           f"from its vjp, which s2sgrad cannot differentiate: "
                           f"{exc.reason}",
                           f"Define {cls.__name__}.jvp(ctx, *tangents) (PyTorch's name) for "
                           f"forward mode.") from None
        fwd, adj, res = bind_pair(core, f"{cls.__name__}_vjp", pair)
        out: List[ast.stmt] = [comment(f"{cls.__name__}.apply: no jvp; its tangent is the "
                                       f"reverse mode of {cls.__name__}.vjp (linear in its "
                                       f"cotangent) applied to the input tangents")]
        # (run at a generic cotangent, not 0: a vjp may branch on its cotangent,
        # `if not np.any(g): return zeros`, and the adjoint follows the branches taken)
        seeds = [helper_call("generic_cotangent", name_node(o)) for o in outs]
        slot_args = [name_node(v) for v in saved] + [name_node(slots[k]) for k in sorted(slots)]
        call_fwd = ast.Call(func=name_node(fwd), args=seeds + slot_args, keywords=[])
        grads = core.names.fresh(f"{cls.__name__}_grads")
        out.append(assign_node(ast.Tuple(elts=[name_node(grads, True), name_node(res, True)],
                                         ctx=ast.Store()), call_fwd))
        # The cotangent of what the vjp returned, in its form: one gradient bare or a
        # tuple, with trailing Nones for forward's defaulted parameters (torch allows
        # both; the bare tangent for a pair `(g, None)` was read as an array's rows).
        cot = helper_call("as_returned", ast.Tuple(elts=list(tangents), ctx=ast.Load()),
                          name_node(grads), ast.Constant(value=f"{cls.__name__}.{cls.vjp_name()}"))
        result = ast.Call(func=name_node(adj), args=[name_node(res), cot], keywords=[])
        out += self._assign_results(cls, "vjp", result, outs, targets, never_none=True)
        return out
