"""Calls the normaliser rewrites: derivatives taken inside differentiated code
(`s2sgrad.grad`, `functional.vjp`, ...), lambdas, records, bound methods and
partials.
"""
from __future__ import annotations

import ast
import inspect
from typing import Callable, Dict, List, Optional, Tuple

from ... import runtime
from .. import reentry
from ..loader import lift_def, lift_lambda
from ..names import RESERVED_PREFIX, clone, copy_location, name_node, name_nodes
from . import spelled
from .scope import (
    assigned_names,
    bind_functional,
    dotted,
    is_api,
    static_true,
)


class CallRules:
    """The normaliser's calls: a part of `_Normalizer` (normalize/__init__.py), which
    owns the state these methods read and write (`self.core`: names, the SSA
    environment, the resolver, the facts) and calls them as `self.calls`."""

    def __init__(self, core):
        self.core = core

    # -- derivatives inside differentiated code (second order) ----------------------
    def bound_derivative(self, expr: ast.Call) -> ast.Call:
        """`g(x)` for g bound once to `s2sgrad.grad(f)` (scope.derivatives_bound_once):
        the call `s2sgrad.grad(f)(x)`, which derivative_call reads; other calls as
        they are."""
        func = expr.func
        maker = self.core.derivative_makers.get(func.id) \
            if isinstance(func, ast.Name) else None
        if maker is None:
            return expr
        return copy_location(ast.Call(func=clone(maker), args=expr.args,
                                      keywords=expr.keywords), expr)

    def derivative_call(self, expr: ast.Call, out) -> Optional[ast.Call]:
        """`s2sgrad.grad(f)(x)`, `s2sgrad.value_and_grad(f)(x)` or
        `functional.vjp(f, inputs, v, create_graph=True)`: a call to code that
        computes the derivative (higher.derived), which the compiler can
        differentiate again. The outer variables a nested def or lambda reads are
        its trailing parameters: the call passes all of f's own first (the defaults
        it leaves, too), then those, then the derivative's own (a v)."""
        core = self.core
        func = expr.func
        detach = False
        tail: List[ast.expr] = []
        if isinstance(func, ast.Call) and dotted(func.func) and \
                not core.resolver.is_local_chain(func.func):
            ok, maker = core.resolver.static(func.func)
            if not ok or not (is_api(maker, "grad") or is_api(maker, "value_and_grad")):
                return None
            base, extra = self.differentiated_function(func.args[0] if func.args else None,
                                                       expr)
            wrt = self.static_wrt(func, default=0)
            positions = (wrt,) if isinstance(wrt, int) else tuple(wrt)
            # grad(f, wrt=(0,)) returns a one-tuple, grad(f, wrt=0) the gradient.
            fn = reentry.derived(maker.__name__, base, positions,
                                inputs_tuple=not isinstance(wrt, int))
            args = [core.statements.operand(a, out) for a in expr.args]
            keywords = [ast.keyword(arg=k.arg, value=core.statements.operand(k.value, out))
                        for k in expr.keywords]
        elif dotted(func) and not core.resolver.is_local_chain(func):
            ok, maker = core.resolver.static(func)
            functional = (getattr(maker, "__module__", "") or "").endswith("functional")
            if not ok or not functional or not any(
                    is_api(maker, k) for k in ("vjp", "jvp", "hvp", "vhp", "jacobian",
                                                "hessian")):
                return None
            bound = bind_functional(expr, maker.__name__, core)
            base, extra = self.differentiated_function(bound["func"], expr)
            inputs = bound["inputs"]
            known = (core.tuples.get(core.env.get(inputs.id, inputs.id))
                     if isinstance(inputs, ast.Name) else None)
            items = list(inputs.elts) if isinstance(inputs, ast.Tuple) else \
                (core.statements.held([clone(a) for a in known], [], out, inputs)
                 if known is not None else [inputs])
            is_tuple = isinstance(inputs, ast.Tuple) or known is not None
            v = bound.get("v")
            inputs_at = tuple(range(len(items)))
            if maker.__name__ == "jacobian":
                fn = reentry.derived("jacobian", base, inputs_at, inputs_tuple=is_tuple)
            elif maker.__name__ == "hessian":
                if is_tuple:
                    raise core.err(expr, "functional.hessian of a tuple of inputs inside a "
                                   "differentiated function is not supported",
                                   "Pass one array (concatenate the inputs), or compute "
                                   "the blocks with functional.jacobian of s2sgrad.grad.")
                fn = reentry.derived("jacobian", reentry.derived("grad", base, (0,)), (0,))
            elif maker.__name__ in ("hvp", "vhp", "jvp"):   # hvp = vhp: H is symmetric
                if v is None or (isinstance(v, ast.Constant) and v.value is None):
                    raise core.err(expr, f"functional.{maker.__name__} needs v here",
                                   "Pass v: the vector to multiply by.")
                fn = reentry.derived("jvp" if maker.__name__ == "jvp" else "hvp", base,
                                     inputs_at, inputs_tuple=is_tuple)
                tail = [v]
            elif v is None or (isinstance(v, ast.Constant) and v.value is None):
                # torch: v may be None when func returns a scalar, and means 1 (the
                # seed refuses anything else at run time, as torch does).
                fn = reentry.derived("value_and_grad", base, inputs_at, inputs_tuple=is_tuple)
            else:
                fn = reentry.derived("vjp", base, inputs_at, inputs_tuple=is_tuple)
                tail = [v]
            args = [core.statements.operand(a, out) for a in items]
            tail = [core.statements.operand(a, out) for a in tail]
            keywords = []
            detach = not static_true(bound.get("create_graph"), core)
        else:
            return None
        if extra:   # (no argument of the call left to Python's binding: see above)
            args, keywords = completed(core, base, extra, args, keywords, expr)
            args += [core.load(n) for n in extra]
        args += tail
        # The generated code calls the derivative's code directly, under a name bound
        # in its closure.
        name = core.names.fresh(fn.__name__)
        core.bindings[name] = fn
        node = ast.Call(func=name_node(name), args=args, keywords=keywords)
        core.facts.exprs.note(node, callee=fn)
        if detach:   # create_graph=False: values, not a graph the outer derivative sees
            node = ast.Call(func=name_node("_s2s_detached"), args=[node],
                            keywords=[])
            core.facts.exprs.note(node, callee=runtime.detached)
        return copy_location(node, expr)

    def lambda_call(self, expr: ast.Call, lam: ast.Lambda, out) -> ast.expr:
        """`g(x)` for `g = lambda v: ...` assigned once in this function: a call of the
        lambda lifted to a function, its free variables passed at the call (their
        values then, as Python's late binding reads them), so it is differentiated
        like any helper."""
        a = lam.args
        if a.vararg or a.kwarg or a.kwonlyargs or not all(_constant(d) for d in a.defaults):
            raise self.core.err(expr, "cannot differentiate a call of a lambda with *args, "
                                "keyword-only parameters or defaults that are not constants",
                                "Give the lambda plain parameters, or define a function.")
        fn, free = self.differentiated_function(lam, expr)
        return self.call_of(fn, [], {}, expr, free, out)

    def functions_passed(self, expr: ast.Call) -> ast.Call:
        """`apply_twice(sq, x)` or `apply_twice(lambda z: ..., x)` to a function of
        the user's, where `sq` is a def (or a name bound once to a lambda) of this
        function that reads none of its variables: the argument is that function,
        lifted and bound to a name of its own, so that the callee is compiled for it
        like for a module-level function (CalleeSite.statics). One that reads
        variables of this function is refused: the callee could not see them."""
        core = self.core
        def passed(arg: ast.expr) -> ast.expr:
            node = arg
            if isinstance(arg, ast.Name) and arg.id in core.lambdas:
                node = core.lambdas[arg.id]
            elif not (isinstance(arg, ast.Lambda) or
                      (isinstance(arg, ast.Name) and arg.id in core.local_defs)):
                return arg
            return self.bound_pure_function(
                node, arg, f"this function, passed to {ast.unparse(expr.func)},")
        return copy_location(ast.Call(func=expr.func, args=[passed(a) for a in expr.args],
                                      keywords=[ast.keyword(arg=k.arg, value=passed(k.value))
                                                for k in expr.keywords]), expr)

    def refuse_unsure_partial(self, expr: ast.expr) -> None:
        if isinstance(expr, ast.Name) and expr.id in self.core.partials_unsure:
            raise self.core.err(expr, f"{expr.id} holds a functools.partial made in a branch or a "
                                f"loop, and which one it holds here is not known",
                                "Call the partial inside the branch or loop that makes it, or "
                                "make one partial before it.")

    def def_call(self, expr: ast.Call, node: ast.FunctionDef, out) -> ast.expr:
        """`cell(h, c)` for a `def cell` nested in this function: a call of it lifted
        to a function of its own, the outer variables it reads passed at the call
        (their values then, as Python's closures read them)."""
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or node.decorator_list or \
                not all(_constant(d) for d in a.defaults):
            raise self.core.err(node, "cannot differentiate a call of a nested function with "
                                "decorators, *args, keyword-only parameters or defaults "
                                "that are not constants",
                                "Give it plain parameters, or define it at module level.")
        fn, free = self.differentiated_function(node, expr)
        return self.call_of(fn, [], {}, expr, free, out)

    def record(self, expr: ast.Call, cls, out) -> ast.expr:
        """`Layer(W, b=x)` of a namedtuple class: the tuple of its fields in order (a
        literal, so each field keeps its gradient), made a Layer at run time."""
        core = self.core
        try:
            bound = inspect.signature(cls).bind(*expr.args,
                                                **{k.arg: k.value for k in expr.keywords})
        except TypeError as exc:
            raise core.err(expr, f"cannot build {cls.__name__}: {exc}") from None
        bound.apply_defaults()
        elts = []
        for field_name in cls._fields:
            value = bound.arguments[field_name]
            if not isinstance(value, ast.AST):   # a default value
                if isinstance(value, (int, float, str, bool)) or value is None:
                    value = ast.Constant(value=value)
                else:
                    name = core.names.fresh(f"{cls.__name__}_{field_name}")
                    core.bindings[name] = value
                    value = name_node(name)
            elts.append(value)
        items = core.statements.operand(
            copy_location(ast.Tuple(elts=elts, ctx=ast.Load()), expr), out)
        kind = core.names.fresh(cls.__name__)
        core.bindings[kind] = cls
        call = ast.Call(func=name_node("_s2s_record"),
                        args=[name_node(kind), items], keywords=[])
        core.facts.exprs.note(call, callee=runtime.record)
        return copy_location(call, expr)

    def bound_call(self, expr: ast.Call, bound, out) -> ast.expr:
        """`model.loss(w, x)`, `model(x)` or `partial_f(x)`: a call of the plain
        function they run, the instance (or the partial's values) passed first, as
        constants bound into the generated code. What the call was resolved
        through is recorded, so rebinding any of it compiles again."""
        core = self.core
        core.resolver.pin(expr.func)
        prefix = []
        for value in bound.args:   # (read as the constants they are: an instance
            name = core.names.fresh("bound")   # passed on makes a pair for it)
            core.bindings[name] = core.resolver.bound[name] = value
            prefix.append(name_node(name))
        keywords = {}
        for key, value in bound.kwargs.items():
            name = core.names.fresh(f"bound_{key}")
            core.bindings[name] = value
            keywords[key] = name_node(name)
        return self.call_of(bound.func, prefix, keywords, expr, [], out)

    def call_of(self, fn, prefix, keywords, expr: ast.Call, free, out) -> ast.expr:
        core = self.core
        name = core.names.fresh(fn.__name__ if fn.__name__ != "<lambda>" else "lambda")
        core.bindings[name] = fn
        args = prefix + [core.statements.operand(a, out) for a in expr.args]
        given = {k.arg: core.statements.operand(k.value, out) for k in expr.keywords}
        if free:   # (its outer variables follow every parameter of its own)
            args, named = completed(core, fn, free, args, [ast.keyword(arg=k, value=v)
                                                           for k, v in given.items()], expr)
            given = {k.arg: k.value for k in named}
        args += [core.load(n) for n in free]
        merged = [ast.keyword(arg=k, value=v) for k, v in {**keywords, **given}.items()]
        node = ast.Call(func=name_node(name), args=args, keywords=merged)
        core.facts.exprs.note(node, callee=fn)
        return copy_location(node, expr)

    def bound_pure_function(self, node, where: ast.expr, what: str) -> ast.expr:
        """A def or lambda of this function as a value of its own (lifted, bound to a
        name in the generated code), where it reads none of this function's
        variables; refused where it does (`what` names the use), since whoever
        calls it could not see them."""
        fn, free = self.differentiated_function(node, where)
        if free:
            raise self.core.err(where, f"{what} reads {', '.join(free)} of the function around it",
                                "Pass those values as arguments too, or define the function at "
                                "module level.")
        return copy_location(spelled.bound_function(self.core, fn), where)

    def differentiated_function(self, node, where) -> Tuple[Callable, List[str]]:
        """The function object an inner derivative differentiates, and the outer
        variables it closes over (lifted into extra trailing parameters)."""
        core = self.core
        if isinstance(node, ast.Name) and node.id in core.local_defs:
            node = core.local_defs[node.id]
        elif isinstance(node, ast.Name) and node.id in core.lambdas:   # bound once
            node = core.lambdas[node.id]
        if isinstance(node, (ast.Lambda, ast.FunctionDef)):
            a = node.args
            if a.vararg or a.kwarg or a.kwonlyargs or not all(_constant(d) for d in a.defaults):
                raise core.err(where, "cannot differentiate a nested function or lambda "
                               "with *args, keyword-only parameters or defaults that are "
                               "not constants",
                               "Give it plain parameters (pass those values as arguments), "
                               "or define it at module level.")
            body = node.body if isinstance(node, ast.FunctionDef) else [node.body]
            inner = sorted({n.id for b in body for n in ast.walk(b) if isinstance(n, ast.Name)
                            and (n.id in core.local_defs or n.id in core.lambdas)
                            and n.id != getattr(node, "name", None)})
            if inner:   # (lifted on its own, it could not see them)
                raise core.err(where, f"the function differentiated here uses "
                               f"{', '.join(inner)}, defined inside this function too",
                               "Define it at module level, or write the derivative of a "
                               "function that does what it does inline.")
        if isinstance(node, ast.Lambda):
            params = {a.arg for a in node.args.posonlyargs + node.args.args}
            # (a closure variable of this function too: the lambda is lifted to the
            # module's globals, where only an argument can bring it)
            free = sorted({n.id for n in name_nodes(node.body)
                           if n.id not in params and (n.id in core.resolver.locals or
                                                      n.id in core.p.closure)})
            fn = lift_lambda(node, free, core.p.globals, core.p.filename)
            return fn, free
        if isinstance(node, ast.FunctionDef):
            return self._lifted_def(node)
        if node is not None and dotted(node) and not core.resolver.is_local_chain(node):
            ok, fn = core.resolver.static(node)
            if ok and callable(fn):
                return fn, []
        raise core.err(where, "the function differentiated here must be a function "
                       "defined with def (or a lambda) known when compiling",
                       "Refer to the function by its name, or write a lambda inline.")

    def _lifted_def(self, node: ast.FunctionDef) -> Tuple[Callable, List[str]]:
        """A nested def as a function of its own (made once per compile), and the
        outer locals it reads: names it loads but never binds itself (which Python
        makes its own locals)."""
        core = self.core
        made = core.lifted_defs.get(node.name)
        if made is not None:
            return made
        if any(isinstance(n, (ast.Nonlocal, ast.Global)) for n in ast.walk(node)):
            raise core.err(node, "a nested function with nonlocal or global",
                           "Return the new value instead of rebinding the outer one.")
        own = {a.arg for a in node.args.posonlyargs + node.args.args} | \
            assigned_names(node.body)
        loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
                 isinstance(n.ctx, ast.Load)}
        if node.name in loads:
            raise core.err(node, f"the nested function {node.name} calls itself",
                           "Define a recursive function at module level.")
        free = sorted(n for n in loads - own if n in core.resolver.locals or
                      n in core.p.closure)
        made = core.lifted_defs[node.name] = (
            lift_def(node, free, core.p.globals, core.p.filename), free)
        return made

    def static_wrt(self, maker_call: ast.Call, default):
        node = maker_call.args[1] if len(maker_call.args) > 1 else next(
            (k.value for k in maker_call.keywords if k.arg == "wrt"), None)
        if node is None:
            return default
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise self.core.err(node, "wrt of an inner derivative must be a constant",
                                "Write wrt=0 or wrt=(0, 1).") from None

    def rule_arguments(self, rule, args, keywords, out, skip_first: bool = False,
                       pack: bool = False):
        """Atoms for a call's arguments. A literal holding variables passed where the
        rule differentiates gets a variable of its own, except one level deep in a
        sequence parameter (np.array([a, b]), whose items are split); deeper
        literals (np.array([[a, b], [c, d]])) get variables for their rows. `pack`:
        the callee has no rule but may be differentiated (a user function), so
        every literal holding variables gets a variable (its adjoint is unpacked)."""
        core = self.core
        positional = list(args)
        named = {k.arg: k.value for k in keywords}
        roles: Dict[int, str] = {}
        if rule is not None:
            params = rule.params[1:] if skip_first else rule.params
            for i, value in enumerate(positional):
                if i < len(params):
                    roles[value] = params[i]
            for k, value in named.items():
                roles[value] = k

        def convert(value):
            if isinstance(value, (ast.Tuple, ast.List)) and \
                    any(isinstance(e, ast.Starred) for e in value.elts):
                return core.expressions.atom(value, out)   # (built first: see starred_literal)
            param = roles.get(value)
            if rule is not None and param in rule.grads and param not in rule.sequence and \
                    isinstance(value, ast.Name) and \
                    core.env.get(value.id, value.id) in core.lists and \
                    not rule.name.startswith(RESERVED_PREFIX):
                # np.sum(xs) of a list: NumPy makes it an array first; so does the
                # code, so that the list gets a list of cotangents back. (s2sgrad's
                # own helpers, in generated code differentiated again, take lists.)
                return spelled.as_array(core, value, out)
            literal = isinstance(value, (ast.Tuple, ast.List)) and \
                core.statements.holds_locals(value)
            if pack and literal:
                return core.statements.packed(value, out)
            if rule is None or param is None or param not in rule.grads or not literal:
                return core.expressions.atom(value, out)
            if param in rule.sequence:
                elts = [core.statements.operand(e, out) for e in value.elts]
                return copy_location(type(value)(elts=elts, ctx=ast.Load()), value)
            return core.statements.packed(value, out)
        new_args = [convert(a) for a in positional]
        new_keywords = [ast.keyword(arg=k.arg, value=convert(k.value)) for k in keywords]
        return new_args, new_keywords


def _constant(node: ast.expr) -> bool:
    """A default a lifted function may keep as written: a literal (`-0.7`, `(1, 2)`)."""
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def completed(core, fn: Callable, free: List[str], args: List[ast.expr],
              keywords: List[ast.keyword],
              where: ast.expr) -> Tuple[List[ast.expr], List[ast.keyword]]:
    """A call of a function lifted from a def or lambda (or copied for the closures
    passed to it), whose last len(free) positional parameters take the outer
    variables it reads: every positional parameter of its own in order (the call's
    arguments and the defaults it leaves, constants), and its keyword-only ones by
    name. The outer variables follow positionally, so nothing of the call may be
    left to Python's binding: a default left out or a keyword would let one of them
    take the place of the function's own parameter."""
    params = list(inspect.signature(fn).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    own = positional[:len(positional) - len(free)]
    named = [p for p in params if p.kind is p.KEYWORD_ONLY]
    try:
        bound = inspect.Signature(own + named).bind(*args, **{k.arg: k.value for k in keywords})
    except TypeError as exc:
        raise core.err(where, f"cannot bind the call to {fn.__name__}: {exc}") from None
    bound.apply_defaults()

    def node(value):
        return value if isinstance(value, ast.AST) else ast.Constant(value=value)
    return ([node(bound.arguments[p.name]) for p in own],
            [ast.keyword(arg=p.name, value=node(bound.arguments[p.name])) for p in named])
