"""Calls the normaliser rewrites: derivatives taken inside differentiated code
(`s2sgrad.grad`, `functional.vjp`, ...), lambdas, records, bound methods and
partials.
"""
from __future__ import annotations

import ast
import inspect
from typing import Callable, List, Optional, Tuple

from .. import reentry
from ..loader import lift_def, lift_lambda
from ..names import clone, copy_location, name_node, name_nodes
from . import spelled
from .scope import assigned_names, bind_functional, dotted, is_api, static_true


class CallRules:
    """The normaliser's calls (a part of `_Normalizer`)."""

    # -- derivatives inside differentiated code (second order) ----------------------
    def derivative_call(self, expr: ast.Call, out) -> Optional[ast.Call]:
        """`s2sgrad.grad(f)(x)`, `s2sgrad.value_and_grad(f)(x)` or
        `functional.vjp(f, inputs, v, create_graph=True)`: a call to code that
        computes the derivative (higher.derived), which the compiler can
        differentiate again. A lambda's free variables become extra arguments."""
        func = expr.func
        detach = False
        if isinstance(func, ast.Call) and dotted(func.func) and \
                not self.resolver.is_local_chain(func.func):
            ok, maker = self.resolver.static(func.func)
            if not ok or not (is_api(maker, "grad") or is_api(maker, "value_and_grad")):
                return None
            base, extra = self.differentiated_function(func.args[0] if func.args else None,
                                                       expr)
            wrt = self.static_wrt(func, default=0)
            positions = (wrt,) if isinstance(wrt, int) else tuple(wrt)
            # grad(f, wrt=(0,)) returns a one-tuple, grad(f, wrt=0) the gradient.
            fn = reentry.derived(maker.__name__, base, positions,
                                inputs_tuple=not isinstance(wrt, int))
            args = [self.operand(a, out) for a in expr.args]
            keywords = [ast.keyword(arg=k.arg, value=self.operand(k.value, out))
                        for k in expr.keywords]
        elif dotted(func) and not self.resolver.is_local_chain(func):
            ok, maker = self.resolver.static(func)
            functional = (getattr(maker, "__module__", "") or "").endswith("functional")
            if not ok or not functional or not any(
                    is_api(maker, k) for k in ("vjp", "jvp", "hvp", "vhp", "jacobian",
                                                "hessian")):
                return None
            bound = bind_functional(expr, maker.__name__, self)
            base, extra = self.differentiated_function(bound["func"], expr)
            inputs = bound["inputs"]
            known = (self.tuples.get(self.env.get(inputs.id, inputs.id))
                     if isinstance(inputs, ast.Name) else None)
            items = list(inputs.elts) if isinstance(inputs, ast.Tuple) else \
                (self.held([clone(a) for a in known], [], out, inputs) if known is not None
                 else [inputs])
            is_tuple = isinstance(inputs, ast.Tuple) or known is not None
            v = bound.get("v")
            if maker.__name__ == "jacobian":
                fn = reentry.derived("jacobian", base, tuple(range(len(items))),
                                     inputs_tuple=is_tuple)
                args = [self.operand(a, out) for a in items]
            elif maker.__name__ == "hessian":
                if is_tuple:
                    raise self.err(expr, "functional.hessian of a tuple of inputs inside a "
                                         "differentiated function is not supported",
                                   "Pass one array (concatenate the inputs), or compute "
                                   "the blocks with functional.jacobian of s2sgrad.grad.")
                fn = reentry.derived("jacobian", reentry.derived("grad", base, (0,)), (0,))
                args = [self.operand(a, out) for a in items]
            elif maker.__name__ in ("hvp", "vhp", "jvp"):   # hvp = vhp: H is symmetric
                if v is None or (isinstance(v, ast.Constant) and v.value is None):
                    raise self.err(expr, f"functional.{maker.__name__} needs v here",
                                   "Pass v: the vector to multiply by.")
                fn = reentry.derived("jvp" if maker.__name__ == "jvp" else "hvp", base,
                                     tuple(range(len(items))), inputs_tuple=is_tuple)
                args = [self.operand(a, out) for a in items] + [self.operand(v, out)]
            elif v is None or (isinstance(v, ast.Constant) and v.value is None):
                # torch: v may be None when func returns a scalar, and means 1 (the
                # seed refuses anything else at run time, as torch does).
                fn = reentry.derived("value_and_grad", base, tuple(range(len(items))),
                                     inputs_tuple=is_tuple)
                args = [self.operand(a, out) for a in items]
            else:
                fn = reentry.derived("vjp", base, tuple(range(len(items))),
                                     inputs_tuple=is_tuple)
                args = [self.operand(a, out) for a in items] + [self.operand(v, out)]
            keywords = []
            detach = not static_true(bound.get("create_graph"), self)
        else:
            return None
        # The generated code calls the derivative's code directly, under a name bound
        # in its closure; free variables of a lambda are passed explicitly.
        name = self.names.fresh(fn.__name__)
        self.bindings[name] = fn
        args += [self.load(n) for n in extra]
        node = ast.Call(func=name_node(name), args=args, keywords=keywords)
        self.facts.exprs.note(node, callee=fn)
        if detach:   # create_graph=False: values, not a graph the outer derivative sees
            from ... import runtime
            node = ast.Call(func=name_node("_s2s_detached"), args=[node],
                            keywords=[])
            self.facts.exprs.note(node, callee=runtime.detached)
        return copy_location(node, expr)

    def lambda_call(self, expr: ast.Call, lam: ast.Lambda, out) -> ast.expr:
        """`g(x)` for `g = lambda v: ...` assigned once in this function: a call of the
        lambda lifted to a function, its free variables passed at the call (their
        values then, as Python's late binding reads them), so it is differentiated
        like any helper."""
        a = lam.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
            raise self.err(expr, "cannot differentiate a call of a lambda with defaults, "
                                 "*args or keyword-only parameters",
                           "Give the lambda plain parameters, or define a function.")
        fn, free = self.differentiated_function(lam, expr)
        return self._call_of(fn, [], {}, expr, free, out)

    def functions_passed(self, expr: ast.Call) -> ast.Call:
        """`apply_twice(sq, x)` or `apply_twice(lambda z: ..., x)` to a function of
        the user's, where `sq` is a def (or a name bound once to a lambda) of this
        function that reads none of its variables: the argument is that function,
        lifted and bound to a name of its own, so that the callee is compiled for it
        like for a module-level function (CalleeSite.statics). One that reads
        variables of this function is refused: the callee could not see them."""
        def passed(arg: ast.expr) -> ast.expr:
            node = arg
            if isinstance(arg, ast.Name) and arg.id in self.lambdas:
                node = self.lambdas[arg.id]
            elif not (isinstance(arg, ast.Lambda) or
                      (isinstance(arg, ast.Name) and arg.id in self.local_defs)):
                return arg
            return self.bound_pure_function(
                node, arg, f"this function, passed to {ast.unparse(expr.func)},")
        return copy_location(ast.Call(func=expr.func, args=[passed(a) for a in expr.args],
                                      keywords=[ast.keyword(arg=k.arg, value=passed(k.value))
                                                for k in expr.keywords]), expr)

    def def_call(self, expr: ast.Call, node: ast.FunctionDef, out) -> ast.expr:
        """`cell(h, c)` for a `def cell` nested in this function: a call of it lifted
        to a function of its own, the outer variables it reads passed at the call
        (their values then, as Python's closures read them)."""
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or node.decorator_list or \
                not all(isinstance(d, ast.Constant) for d in a.defaults):
            raise self.err(node, "cannot differentiate a call of a nested function with "
                                 "decorators, *args, keyword-only parameters or defaults "
                                 "that are not constants",
                           "Give it plain parameters, or define it at module level.")
        fn, free = self.differentiated_function(node, expr)
        return self._call_of(fn, [], {}, expr, free, out)

    def record(self, expr: ast.Call, cls, out) -> ast.expr:
        """`Layer(W, b=x)` of a namedtuple class: the tuple of its fields in order (a
        literal, so each field keeps its gradient), made a Layer at run time."""
        try:
            bound = inspect.signature(cls).bind(*expr.args,
                                                **{k.arg: k.value for k in expr.keywords})
        except TypeError as exc:
            raise self.err(expr, f"cannot build {cls.__name__}: {exc}") from None
        bound.apply_defaults()
        elts = []
        for field_name in cls._fields:
            value = bound.arguments[field_name]
            if not isinstance(value, ast.AST):   # a default value
                if isinstance(value, (int, float, str, bool)) or value is None:
                    value = ast.Constant(value=value)
                else:
                    name = self.names.fresh(f"{cls.__name__}_{field_name}")
                    self.bindings[name] = value
                    value = name_node(name)
            elts.append(value)
        items = self.operand(copy_location(ast.Tuple(elts=elts, ctx=ast.Load()), expr), out)
        from ... import runtime
        kind = self.names.fresh(cls.__name__)
        self.bindings[kind] = cls
        call = ast.Call(func=name_node("_s2s_record"),
                        args=[name_node(kind), items], keywords=[])
        self.facts.exprs.note(call, callee=runtime.record)
        return copy_location(call, expr)

    def bound_call(self, expr: ast.Call, bound, out) -> ast.expr:
        """`model.loss(w, x)`, `model(x)` or `partial_f(x)`: a call of the plain
        function they run, the instance (or the partial's values) passed first, as
        constants bound into the generated code. What the call was resolved
        through is recorded, so rebinding any of it compiles again."""
        self.resolver.pin(expr.func)
        prefix = []
        for value in bound.args:
            name = self.names.fresh("bound")
            self.bindings[name] = value
            prefix.append(name_node(name))
        keywords = {}
        for key, value in bound.kwargs.items():
            name = self.names.fresh(f"bound_{key}")
            self.bindings[name] = value
            keywords[key] = name_node(name)
        return self._call_of(bound.func, prefix, keywords, expr, [], out)

    def _call_of(self, fn, prefix, keywords, expr: ast.Call, free, out) -> ast.expr:
        name = self.names.fresh(fn.__name__ if fn.__name__ != "<lambda>" else "lambda")
        self.bindings[name] = fn
        args = prefix + [self.operand(a, out) for a in expr.args]
        given = {k.arg: self.operand(k.value, out) for k in expr.keywords}
        args += [self.load(n) for n in free]
        merged = [ast.keyword(arg=k, value=v) for k, v in {**keywords, **given}.items()]
        node = ast.Call(func=name_node(name), args=args, keywords=merged)
        self.facts.exprs.note(node, callee=fn)
        return copy_location(node, expr)

    def bound_pure_function(self, node, where: ast.expr, what: str) -> ast.expr:
        """A def or lambda of this function as a value of its own (lifted, bound to a
        name in the generated code), where it reads none of this function's
        variables; refused where it does (`what` names the use), since whoever
        calls it could not see them."""
        fn, free = self.differentiated_function(node, where)
        if free:
            raise self.err(where, f"{what} reads {', '.join(free)} of the function around it",
                           "Pass those values as arguments too, or define the function at "
                           "module level.")
        return copy_location(spelled.bound_function(self, fn), where)

    def differentiated_function(self, node, where) -> Tuple[Callable, List[str]]:
        """The function object an inner derivative differentiates, and the outer
        variables it closes over (lifted into extra trailing parameters)."""
        if isinstance(node, ast.Name) and node.id in self.local_defs:
            node = self.local_defs[node.id]
        if isinstance(node, ast.Lambda):
            params = {a.arg for a in node.args.posonlyargs + node.args.args}
            free = sorted({n.id for n in name_nodes(node.body)
                           if n.id not in params and n.id in self.resolver.locals})
            fn = lift_lambda(node, free, self.p.globals, self.p.filename)
            return fn, free
        if isinstance(node, ast.FunctionDef):
            return self._lifted_def(node)
        if node is not None and dotted(node) and not self.resolver.is_local_chain(node):
            ok, fn = self.resolver.static(node)
            if ok and callable(fn):
                return fn, []
        raise self.err(where, "the function differentiated here must be a function "
                              "defined with def (or a lambda) known when compiling",
                       "Refer to the function by its name, or write a lambda inline.")

    def _lifted_def(self, node: ast.FunctionDef) -> Tuple[Callable, List[str]]:
        """A nested def as a function of its own (made once per compile), and the
        outer locals it reads: names it loads but never binds itself (which Python
        makes its own locals)."""
        made = self.lifted_defs.get(node.name)
        if made is not None:
            return made
        if any(isinstance(n, (ast.Nonlocal, ast.Global)) for n in ast.walk(node)):
            raise self.err(node, "a nested function with nonlocal or global",
                           "Return the new value instead of rebinding the outer one.")
        own = {a.arg for a in node.args.posonlyargs + node.args.args} | \
            assigned_names(node.body)
        loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
                 isinstance(n.ctx, ast.Load)}
        if node.name in loads:
            raise self.err(node, f"the nested function {node.name} calls itself",
                           "Define a recursive function at module level.")
        free = sorted(n for n in loads - own if n in self.resolver.locals or
                      n in self.p.closure)
        made = self.lifted_defs[node.name] = (
            lift_def(node, free, self.p.globals, self.p.filename), free)
        return made

    def static_wrt(self, maker_call: ast.Call, default):
        node = maker_call.args[1] if len(maker_call.args) > 1 else next(
            (k.value for k in maker_call.keywords if k.arg == "wrt"), None)
        if node is None:
            return default
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise self.err(node, "wrt of an inner derivative must be a constant",
                           "Write wrt=0 or wrt=(0, 1).") from None
