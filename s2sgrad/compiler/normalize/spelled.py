"""What the normaliser spells out as Python runs it: starred items of list
literals, `f(*args)` of known tuples, `f(**opts)` of known dicts, loops over and
items of a literal of functions, names bound to functions, and what a loop, zip,
enumerate, max or min walks of a value (`walked`).

Each function takes the normaliser `n` (its state: the environment of names,
the known tuples, the resolver) and returns the spelled-out form, or None (or
the node unchanged) where the items are not known.
"""
from __future__ import annotations

import ast
import functools
from typing import List, Optional, Set, Tuple

import numpy as np

from ... import runtime
from ...rules import registry
from ..names import assign_node, clone, copy_location, name_node
from ..resolve import FUNCTION_TYPES
from .scope import dotted, is_builtin


def starred_literal(n, expr, out: List[ast.stmt]) -> ast.expr:
    """`[*xs, v]`, `(a, *ys)`: the items of literals and known tuples spelled out;
    in a list, any other starred item built as Python builds it, a list extended
    by it (`items = [...]; items.extend(xs); items.append(v)`), so that each
    item's cotangent reaches it (in a tuple, refused: its length is unknown)."""
    elts: List[ast.expr] = []
    for e in expr.elts:
        if isinstance(e, ast.Starred) and isinstance(e.value, (ast.Tuple, ast.List)):
            elts.extend(e.value.elts)
        elif isinstance(e, ast.Starred) and isinstance(e.value, ast.Name) and \
                n.env.get(e.value.id, e.value.id) in n.tuples:
            known = n.tuples[n.env.get(e.value.id, e.value.id)]
            elts.extend(n.statements.held([clone(k) for k in known], [], out, e))
        else:
            elts.append(e)
    if not any(isinstance(e, ast.Starred) for e in elts):
        return n.expressions.atom(copy_location(type(expr)(elts=elts, ctx=ast.Load()), expr), out)
    if isinstance(expr, ast.Tuple):
        raise n.err(expr, "a tuple with a starred item whose items are not known here",
                    "Build a list instead ([*xs, v]), or spell the items out.")
    first = next(i for i, e in enumerate(elts) if isinstance(e, ast.Starred))
    items = n.statements.user_temp("items")

    def statement(node: ast.stmt) -> None:
        n.statements.stmt(ast.fix_missing_locations(copy_location(node, expr)), out)
    statement(ast.Assign(targets=[name_node(items, True)],
                         value=ast.List(elts=elts[:first], ctx=ast.Load())))
    for e in elts[first:]:
        method = "extend" if isinstance(e, ast.Starred) else "append"
        statement(ast.Expr(value=ast.Call(
            func=ast.Attribute(value=name_node(items), attr=method, ctx=ast.Load()),
            args=[e.value if isinstance(e, ast.Starred) else e], keywords=[])))
    return copy_location(n.load(items), expr)


def spread_known_keywords(n, expr: ast.Call) -> ast.Call:
    """`f(x, **opts)` where opts is a dict literal with string keys, or a name
    bound once to one (or to `dict(k=v)`) and read nowhere but in `**opts` and
    `opts["key"]` (so its keys are those of the literal): the call with
    `key=opts["key"]` spelled out, as Python passes them. Other `**` arguments
    are left as they are."""
    keywords: List[ast.keyword] = []
    for k in expr.keywords:
        literal = None if k.arg is not None else _literal_dict(n, k.value)
        if literal is None:
            keywords.append(k)
        elif isinstance(k.value, ast.Dict):
            keywords += [ast.keyword(arg=key, value=v) for key, v in literal]
        else:   # a function as it is (module-level, or a def or lambda of this
            # function): the callee is compiled for it
            keywords += [ast.keyword(arg=key, value=clone(v) if _a_function(n, v) else
                                     ast.Subscript(value=clone(k.value),
                                                   slice=ast.Constant(value=key),
                                                   ctx=ast.Load()))
                         for key, v in literal]
    return copy_location(ast.Call(func=expr.func, args=expr.args, keywords=keywords),
                         expr)


def _a_function(n, node: ast.expr) -> bool:
    """A module-level function, or a def or lambda of this function bound once (a
    lambda written in the dict reads its variables when called, as it would)."""
    return _static(n, node) or isinstance(node, ast.Lambda) or (
        isinstance(node, ast.Name) and (node.id in n.lambdas or node.id in n.local_defs))


def _static(n, node: ast.expr) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute)) and \
        not n.resolver.is_local_chain(node) and n.resolver.static(node)[0]


def _literal_dict(n, value: ast.expr) -> Optional[List[Tuple[str, ast.expr]]]:
    """(key, value) of a dict literal with string keys, or of the literal a local
    name is bound to once and only read by `**name` or `name["key"]`; else None."""
    def string_keys(node) -> Optional[List[Tuple[str, ast.expr]]]:
        if isinstance(node, ast.Dict) and all(
                isinstance(key, ast.Constant) and isinstance(key.value, str)
                for key in node.keys):
            return [(key.value, v) for key, v in zip(node.keys, node.values)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                not node.args and all(k.arg for k in node.keywords) and \
                node.func.id not in n.resolver.locals and \
                n.resolver.static(node.func) == (True, dict):   # dict(k=v)
            return [(k.arg, k.value) for k in node.keywords]
        return None
    if not isinstance(value, ast.Name):
        return string_keys(value)
    function = n.p.node
    allowed = {id(k.value) for call in ast.walk(function) if isinstance(call, ast.Call)
               for k in call.keywords if k.arg is None}
    allowed |= {id(sub.value) for sub in ast.walk(function) if isinstance(sub, ast.Subscript)
                and isinstance(sub.ctx, ast.Load) and isinstance(sub.slice, ast.Constant)}
    binding = bound_once(n, value.id, allowed)
    return string_keys(binding) if binding is not None else None


def free_tuple_items(n, value: ast.expr) -> Optional[List[ast.expr]]:
    """`rest` or `rest[1:]` (constant bounds) of a tuple a free name holds (the
    closure's or the module's): its items, read by index (`rest[1]`, `rest[2]`); the
    name's binding is recorded, so a new tuple there compiles again. None else."""
    base, bounds = value, None
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Slice):
        base, parts = value.value, (value.slice.lower, value.slice.upper, value.slice.step)
        bounds = [None if p is None else _int_index(p) for p in parts]
        if any(p is not None and b is None for p, b in zip(parts, bounds)):
            return None
    if not isinstance(base, ast.Name) or base.id in n.resolver.locals:
        return None
    ok, held = n.resolver.static(base)
    if not ok or type(held) is not tuple:
        return None
    n.resolver.pin(base)
    indices = range(len(held)) if bounds is None else range(len(held))[slice(*bounds)]
    return [copy_location(ast.Subscript(value=name_node(base.id), slice=ast.Constant(value=i),
                                        ctx=ast.Load()), value) for i in indices]


def bound_once(n, name: str, allowed: Set[int]) -> Optional[ast.expr]:
    """What a local `name` is bound to, when it is bound by one plain assignment in
    the whole function and read nowhere but at the nodes whose ids are `allowed`
    (so nothing can change what it holds, nor see it change); else None."""
    if name not in n.resolver.locals or name in n.p.all_params:
        return None
    binding = None
    for node in ast.walk(n.p.node):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if binding is not None or len(node.targets) != 1:
                return None
            binding = node.value
        elif isinstance(node, ast.Name) and node.id == name:
            if isinstance(node.ctx, ast.Load):
                if id(node) not in allowed:
                    return None
            elif not isinstance(node.ctx, ast.Store):
                return None
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With,
                               ast.NamedExpr, ast.comprehension)) and any(
                isinstance(t, ast.Name) and t.id == name
                for t in ast.walk(getattr(node, "target", node))):
            return None
    return binding


def spread_known_items(n, expr: ast.Call, out: List[ast.stmt]) -> ast.Call:
    """`f(*args)` where `args` is a tuple or list literal, a name bound to a tuple
    literal (`args = (h, x); f(*args)`), or a tuple the closure or module holds
    (`lambda v: f(v, *rest)`, `*rest[1:]`): the call with the items spelled out, as
    Python passes them. Other starred arguments are left as they are."""
    args: List[ast.expr] = []
    for a in expr.args:
        if not isinstance(a, ast.Starred):
            args.append(a)
        elif isinstance(a.value, (ast.Tuple, ast.List)) and \
                not any(isinstance(e, ast.Starred) for e in a.value.elts):
            args.extend(a.value.elts)
        elif isinstance(a.value, ast.Name) and \
                n.env.get(a.value.id, a.value.id) in n.tuples:
            known = n.tuples[n.env.get(a.value.id, a.value.id)]
            args.extend(n.statements.held([clone(e) for e in known], [], out, a))
        else:
            free = free_tuple_items(n, a.value)
            args.extend([a] if free is None else free)
    return copy_location(ast.Call(func=expr.func, args=args, keywords=expr.keywords),
                         expr)


def unrolled_over_functions(n, s: ast.For) -> Optional[List[ast.stmt]]:
    """`for act in (np.tanh, relu): <body>` as Python runs it: `act = np.tanh`,
    the body, `act = relu`, the body (each call of act then a call of a known
    function). Only over functions_of_literal (or a zip of such and other
    sequences, zipped_with_functions, or their enumerate, enumerated_functions),
    and a body without break or continue; else None."""
    if s.orelse or any(isinstance(node, (ast.Break, ast.Continue)) for b in s.body
                       for node in ast.walk(b)):
        return None
    out: List[ast.stmt] = []
    if isinstance(s.target, ast.Name):
        functions = functions_of_literal(n, s.iter)
        steps = None if functions is None else [[(s.target, f)] for f in functions]
    else:
        steps = enumerated_functions(n, s.target, s.iter)
        indexed: List[ast.Name] = []
        if steps is None:
            steps, indexed = zipped_with_functions(n, s.target, s.iter) or (None, [])
        out += [_not_a_dict(column, s) for column in indexed]   # (read by index below)
    if steps is None:
        return None
    for step in steps:
        for target, value in step:
            bind = ast.Assign(targets=[clone(target)], value=clone(value))
            out.append(ast.fix_missing_locations(copy_location(bind, s)))
        out.extend(clone(b) for b in s.body)
    return out


def enumerated_functions(n, target: ast.expr, it: ast.expr):
    """`for i, act in enumerate(ACTS)` (or `enumerate(ACTS, 1)`) over functions
    (functions_of_literal): per step, `i = k` and `act = <the k-th function>`;
    None for any other loop."""
    if not (isinstance(target, ast.Tuple) and len(target.elts) == 2 and
            isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and
            1 <= len(it.args) + len(it.keywords) <= 2 and
            all(k.arg == "start" for k in it.keywords) and
            not any(isinstance(a, ast.Starred) for a in it.args)):
        return None
    ok, maker = n.resolver.static(it.func)
    if not ok or maker is not enumerate or not it.args:
        return None
    functions = functions_of_literal(n, it.args[0])
    start = (it.args[1:] + [k.value for k in it.keywords]) or [ast.Constant(value=0)]
    if functions is None or not (isinstance(start[0], ast.Constant) and
                                 type(start[0].value) is int):
        return None
    first = start[0].value
    return [[(target.elts[0], ast.Constant(value=first + k)), (target.elts[1], f)]
            for k, f in enumerate(functions)]


def _not_a_dict(column: ast.Name, loop: ast.For) -> ast.stmt:
    """`if isinstance(ws, dict): raise TypeError(...)`: zip walks a dict's keys, the
    unrolled loop reads ws[0], ws[1], ..., the same items for any sequence."""
    text = (f"s2sgrad unrolled this loop over functions and reads {column.id} by index: "
            f"pass a list, tuple or array, not a dict")
    check = ast.parse(f"if isinstance({column.id}, dict):\n    raise TypeError({text!r})").body[0]
    for node in ast.walk(check):
        copy_location(node, loop)
    return check


def zipped_with_functions(n, target: ast.expr, it: ast.expr):
    """`for act, (W, b) in zip(acts, params)`, where one zipped sequence is one of
    functions (functions_of_literal) and the others are literals or names: per
    step, (target, value) pairs (`act = tanh`, `(W, b) = params[0]`), and the names
    read by index. The steps are as many as the functions (zip's length when the
    other sequences are at least as long; a shorter one is an IndexError at run
    time, never a step less). None for any other loop."""
    if not (isinstance(target, ast.Tuple) and isinstance(it, ast.Call) and
            isinstance(it.func, ast.Name) and not it.keywords and
            len(it.args) == len(target.elts) >= 2 and
            not any(isinstance(a, ast.Starred) for a in it.args)):
        return None
    ok, zipper = n.resolver.static(it.func)
    if not ok or zipper is not zip or \
            {"isinstance", "dict", "TypeError"} & n.resolver.locals:   # (see _not_a_dict)
        return None
    columns, count, indexed = [], None, []
    for arg in it.args:
        functions = functions_of_literal(n, arg)
        if functions is not None:
            count = len(functions) if count is None else min(count, len(functions))
            columns.append(functions)
        elif isinstance(arg, (ast.Tuple, ast.List)) and \
                not any(isinstance(e, ast.Starred) for e in arg.elts):
            columns.append(list(arg.elts))
        elif isinstance(arg, ast.Name):
            columns.append(arg)
            indexed.append(arg)
        else:
            return None
    if count is None:
        return None
    for column in columns:
        if isinstance(column, list):
            count = min(count, len(column))
    return [[(t, column[k] if isinstance(column, list) else
              ast.Subscript(value=clone(column), slice=ast.Constant(k), ctx=ast.Load()))
             for t, column in zip(target.elts, columns)] for k in range(count)], indexed


def function_of_literal(n, func: ast.expr) -> Optional[ast.expr]:
    """`fns[1]` in a call `fns[1](x)` over functions_of_literal: that function's name."""
    k = _int_index(func.slice) if isinstance(func, ast.Subscript) else None
    if k is None:
        return None
    functions = functions_of_literal(n, func.value)
    if functions is None or not -len(functions) <= k < len(functions):
        return None
    return clone(functions[k])


def _int_index(node: ast.expr) -> Optional[int]:
    """The integer a constant index is (`2`, `-1`), or None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and \
            isinstance(node.operand, ast.Constant) and type(node.operand.value) is int:
        return -node.operand.value
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def functions_of_literal(n, value: ast.expr) -> Optional[List[ast.expr]]:
    """The functions of a tuple or list literal of functions named statically
    (names_a_function), written there or bound once to a local name read only as
    `for f in name` (or in zip or enumerate there) and `name[k](...)` (so nothing
    can change what it holds); or
    of a module-level (or closure) tuple or list of functions, each then a name
    of its own bound to it (module_functions)."""
    if dotted(value) and not n.resolver.is_local_chain(value):
        return module_functions(n, value)
    if isinstance(value, ast.Name):
        function = n.p.node
        loops = [loop for loop in ast.walk(function) if isinstance(loop, ast.For)]
        allowed = {id(loop.iter) for loop in loops}
        allowed |= {id(a) for loop in loops if isinstance(loop.iter, ast.Call) and
                    isinstance(loop.iter.func, ast.Name) and
                    loop.iter.func.id in ("zip", "enumerate")
                    for a in loop.iter.args}   # (zip(fns, ...), enumerate(fns): they read)
        allowed |= {id(call.func.value) for call in ast.walk(function)
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript)
                    and _int_index(call.func.slice) is not None}
        value = bound_once(n, value.id, allowed)
    if not isinstance(value, (ast.Tuple, ast.List)) or not value.elts or any(
            isinstance(e, ast.Starred) or not names_a_function(n, e) for e in value.elts):
        return None
    return list(value.elts)


def module_functions(n, value: ast.expr) -> Optional[List[ast.expr]]:
    """`ACTIVATIONS` read inside the function, a free name of a tuple or list of
    functions with source or a rule: a name per item (`tanh`, `relu_2`), bound to
    it in the generated code; the pair is valid while the name holds that tuple,
    or that list holds those items (Resolver.sequence_of_functions)."""
    items = n.resolver.sequence_of_functions(value)
    if items is None or not all(isinstance(f, FUNCTION_TYPES) or
                                registry.lookup_function(f) is not None for f in items):
        return None
    return [copy_location(bound_function(n, f), value) for f in items]


def bound_function(n, fn) -> ast.Name:
    """A name of its own for a function the normaliser resolved (`tanh`, `lambda_2`),
    bound to it in the generated code and read as it by the later passes."""
    stem = getattr(fn, "__name__", None) or "function"
    name = n.names.fresh("lambda" if stem == "<lambda>" else stem)
    n.resolver.bound[name] = fn
    n.bindings[name] = fn
    return name_node(name)


def names_a_function(n, value: ast.expr) -> bool:
    """A module-level function, or a NumPy function with a rule, by its name
    (`np.tanh`, `relu`, `layers.dense`), or a def or lambda of this function."""
    if isinstance(value, ast.Name) and (value.id in n.lambdas or
                                        value.id in n.local_defs):
        return True
    if not dotted(value) or n.resolver.is_local_chain(value):
        return False
    ok, obj = n.resolver.static(value)
    return ok and (isinstance(obj, FUNCTION_TYPES) or
                   registry.lookup_function(obj) is not None)


def bind_partial(n, user_name: str, value: ast.expr, out) -> bool:
    """`h = functools.partial(f, a, k=b)`: nothing is made at run time; `a` and
    `b` get variables of their own (their values now, as the partial keeps
    them), and a call `h(x)` is the call `f(a, x, k=b)` (see call). Whether
    the statement was that."""
    same = n.partials.get(value.id) if isinstance(value, ast.Name) and \
        value.id not in n.partials_unsure else None   # `g = h` of a partial h: the same
    n.partials.pop(user_name, None)   # (bound again: what it held is gone)
    n.partials_unsure.discard(user_name)
    if same is not None:
        n.partials[user_name] = same
        n.env.pop(user_name, None)
        return True
    if names_a_function(n, value):
        # `act = np.tanh`: a partial with nothing bound (a call of act is of np.tanh)
        n.partials[user_name] = (value, [], [])
        n.env.pop(user_name, None)
        return True
    if not (isinstance(value, ast.Call) and value.args and dotted(value.func) and
            not n.resolver.is_local_chain(value.func) and
            not any(isinstance(a, ast.Starred) for a in value.args) and
            all(k.arg is not None for k in value.keywords)):
        return False
    ok, maker = n.resolver.static(value.func)
    func = value.args[0]
    if not ok or maker is not functools.partial or not (
            (dotted(func) and not n.resolver.is_local_chain(func)) or
            (isinstance(func, ast.Name) and (func.id in n.lambdas or
                                             func.id in n.local_defs))):
        return False

    def kept(expr: ast.expr) -> ast.expr:
        atom = n.expressions.atom(expr, out)
        if not isinstance(atom, ast.Name) or (
                isinstance(expr, ast.Name) and expr.id not in n.resolver.locals):
            return atom   # (a constant, or a global: read as itself)
        held = n.names.fresh(f"{user_name}_{atom.id}")
        n.emit(out, assign_node(held, atom), expr)
        return name_node(held)
    args = [kept(a) for a in value.args[1:]]
    keywords = [ast.keyword(arg=k.arg, value=kept(k.value)) for k in value.keywords]
    n.partials[user_name] = (func, args, keywords)
    n.env.pop(user_name, None)
    return True


def extend_as_appends(n, s: ast.Expr, call: ast.Call, out) -> bool:
    """`xs.extend(items)` as the appends Python makes (one per item of a literal, or
    a loop over any other iterable), so each item's cotangent reaches it."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "extend" and
            isinstance(func.value, ast.Name) and func.value.id in n.resolver.locals
            and len(call.args) == 1 and not call.keywords):
        return False
    arg = call.args[0]

    def append(item):
        method = ast.Attribute(value=clone(func.value), attr="append", ctx=ast.Load())
        stmt = ast.Expr(value=ast.Call(func=method, args=[item], keywords=[]))
        return ast.fix_missing_locations(copy_location(stmt, s))
    if isinstance(arg, (ast.List, ast.Tuple)) and \
            not any(isinstance(e, ast.Starred) for e in arg.elts):
        # Python evaluates the whole list before extending: items first, then
        # the appends (an item reading xs must not see the earlier ones).
        held = []
        for e in arg.elts:
            name = n.statements.user_temp("item")
            assign = ast.Assign(targets=[name_node(name, True)], value=e)
            n.statements.stmt(ast.fix_missing_locations(copy_location(assign, s)), out)
            held.append(name_node(name))
        for e in held:
            n.statements.stmt(append(e), out)
        return True
    item = n.statements.user_temp("item")
    loop = ast.For(target=name_node(item, True), iter=arg,
                   body=[append(name_node(item))], orelse=[],
                   type_comment=None)
    n.statements.stmt(ast.fix_missing_locations(copy_location(loop, s)), out)
    return True


def reordered_in_place(n, s: ast.Expr, call: ast.Call, out) -> bool:
    """`xs.reverse()` and `xs.sort(key=..., reverse=...)` of a name bound to a list
    literal as the slice assignments they are (`xs[:] = xs[::-1]`, `xs[:] = sorted(xs,
    ...)`): the same list object reordered in place, so every name holding it sees the
    new order, and each item's cotangent follows it (slice writes are differentiated).
    Python's own `sorted` is stable as `list.sort` is."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in ("reverse", "sort") and
            isinstance(func.value, ast.Name) and func.value.id in n.resolver.locals and
            n.env.get(func.value.id, func.value.id) in n.lists and not call.args and
            (func.attr == "sort" or not call.keywords) and
            all(k.arg in ("key", "reverse") for k in call.keywords)):
        return False
    if func.attr == "sort" and not is_builtin(n.resolver, ast.Name(id="sorted", ctx=ast.Load()),
                                              sorted):
        return False   # (sorted is not Python's own here)
    xs = func.value.id
    if func.attr == "reverse":
        value: ast.expr = ast.Subscript(value=name_node(xs), ctx=ast.Load(),
                                        slice=ast.Slice(step=ast.UnaryOp(
                                            op=ast.USub(), operand=ast.Constant(1))))
    else:
        value = ast.Call(func=ast.Name(id="sorted", ctx=ast.Load()), args=[name_node(xs)],
                         keywords=[clone(k) for k in call.keywords])
    write = ast.Assign(targets=[ast.Subscript(value=name_node(xs), slice=ast.Slice(),
                                              ctx=ast.Store())],
                       value=value, type_comment=None)
    n.statements.stmt(ast.fix_missing_locations(copy_location(write, s)), out)
    return True


def as_array(n, value: ast.Name, out) -> ast.expr:
    """`np.sum(xs)` of a list: NumPy makes it an array first, and so does the code
    (`np.array(xs)` as a temporary of its own), so that the list gets a list of
    cotangents back."""
    alias = next((c for c in ("np", "numpy") if c not in n.resolver.locals and
                  n.resolver.lookup(c) is np), None)
    if alias is None:
        alias = "_s2s_numpy"
        n.bindings[alias] = np
    call = ast.Call(func=ast.Attribute(value=name_node(alias),
                                       attr="array", ctx=ast.Load()),
                    args=[n.load(value.id)], keywords=[])
    n.facts.exprs.note(call, callee=np.array)
    name = n.names.fresh(f"{value.id}_array")
    n.emit(out, assign_node(name, copy_location(call, value)), value)
    return copy_location(name_node(name), value)


def index_concat(n, expr: ast.Subscript, out) -> Optional[ast.expr]:
    """`np.r_[a, 0:3, b]` and `np.c_[...]`: a call of runtime.index_concat, whose
    rule gives each item its part of the cotangent (slices become slice() calls;
    they and directive strings make up constant values)."""
    if not dotted(expr.value) or n.resolver.is_local_chain(expr.value):
        return None
    ok, maker = n.resolver.static(expr.value)
    if not ok or not any(maker is m for m in (np.r_, np.c_)):
        return None
    elts = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
    items: List[ast.expr] = []
    for e in elts:
        if isinstance(e, ast.Slice):
            bounds = [n.expressions.atom(b, out) if b is not None else ast.Constant(value=None)
                      for b in (e.lower, e.upper, e.step)]
            e = copy_location(ast.Call(func=name_node("slice"), args=bounds,
                                       keywords=[]), e)
            n.facts.exprs.note(e, callee=slice)
            name = n.names.fresh("span")
            n.emit(out, assign_node(name, e), expr)
            items.append(name_node(name))
        else:
            items.append(n.statements.element(e, out))
    base = clone(expr.value)
    n.facts.exprs.note(base, static=True)
    node = ast.Call(func=name_node("_s2s_index_concat"), args=[base] + items, keywords=[])
    n.facts.exprs.note(node, callee=runtime.numpy_grads.index_concat)
    return copy_location(node, expr)


def walked(core, atom: ast.Name, at: ast.AST, out: List[ast.stmt]) -> ast.Name:
    """What Python walks of `atom` (a loop, zip, enumerate, max, min), bound to a name
    of its own: a dict literal's keys (_s2s_keys: no gradient), anything else through
    _s2s_loop_items (a dict's keys, an iterator walked once into a list, a list
    copied, an array itself). Read by position afterwards, never `atom` itself: a
    dict read as d[0] and d[1:] once gave a KeyError, or items for its number keys."""
    keys = atom.id in core.dict_names
    name = core.names.fresh(f"{atom.id}_{'keys' if keys else 'items'}")
    core.resolver.locals.add(name)
    call = ast.Call(func=name_node("_s2s_keys" if keys else "_s2s_loop_items"),
                    args=[atom], keywords=[])
    core.facts.exprs.note(call, callee=runtime.keys if keys else runtime.loop_items)
    core.emit(out, assign_node(name, copy_location(call, at)), at)
    return copy_location(name_node(name), at)
