"""Container constructors and dict.get, written as the literals and expressions the
normaliser already differentiates (before it runs):

    tuple((w, v)), list([a, b])   ->  (w, v), [a, b]
    list(xs)                      ->  [item for item in xs]   (rows of an array too)
    dict(a=x, b=y)                ->  {"a": x, "b": y}
    dict(d)                       ->  {key: d[key] for key in d}
    d.get(k), d.get(k, default)   ->  (d[k] if k in d else default)
    map(f, xs), map(f, xs, ys)    ->  (f(item) for item in xs), (f(a, b) for a, b in zip(xs, ys))
    operator.mul(a, b), operator.neg(a), operator.getitem(a, k)  ->  a * b, -a, a[k]
    np.add.reduce(a), np.multiply.accumulate(a, 1)  ->  np.sum(a, axis=0), np.cumprod(a, 1)
    functools.reduce(f, [a, b, c]), functools.reduce(f, (b, c), a)  ->  f(f(a, b), c)

(map's and reduce's function only as a name, a dotted name or a lambda: a genexp
evaluates it per item, map once; reduce only over a literal, whose length is known.)

Only where the name is Python's own builtin (the resolver says so) and the call
has exactly these forms; anything else is left for the normaliser to judge.

Writes NumPy makes into an array it is given, as the item assignments the
normaliser differentiates (statements whose call is NumPy's own function):

    np.copyto(y, x)               ->  y[...] = _s2s_cast_into(x, y)
    np.fill_diagonal(y, v)        ->  diagonal = _s2s_diagonal_entries(y)
                                      y[diagonal] = np.resize(np.ravel(v), diagonal[0].shape)
    np.exp(x, out=y), np.exp(x, y) ->  y[...] = _s2s_cast_into(np.exp(x), y)
    z = np.add(a, b, out=y)       ->  y[...] = _s2s_cast_into(np.add(a, b), y); z = y

(`cast_into` refuses what NumPy's 'same_kind' casting refuses, as NumPy does;
a ufunc with one output, no other keyword; fill_diagonal as a statement, without
wrap=True, its values repeated along the diagonal and cast as NumPy casts them;
anything else keeps its refusal.)
"""
from __future__ import annotations

import ast
import functools
import operator
import types
from typing import List, Optional, Set

import numpy as np

from ...runtime.arrays import cast_into
from ...runtime.numpy_grads import diagonal_entries
from ..names import clone, copy_location, dotted
from .scope import is_builtin, walk_scope

_CAST = "_s2s_cast_into"
_DIAGONAL = "_s2s_diagonal_entries"
_BINARY = {operator.add: ast.Add, operator.sub: ast.Sub, operator.mul: ast.Mult,
           operator.truediv: ast.Div, operator.floordiv: ast.FloorDiv, operator.mod: ast.Mod,
           operator.pow: ast.Pow, operator.matmul: ast.MatMult}
_UNARY = {operator.neg: ast.USub, operator.pos: ast.UAdd}
# A ufunc's reduce or accumulate that a NumPy function is (same parameters in the same
# order: np.sum(a, axis, dtype, out, keepdims, initial, where) calls np.add.reduce).
_REDUCERS = {(np.add, "reduce"): "sum", (np.multiply, "reduce"): "prod",
             (np.maximum, "reduce"): "max", (np.minimum, "reduce"): "min",
             (np.add, "accumulate"): "cumsum", (np.multiply, "accumulate"): "cumprod"}


def desugar(body: List[ast.stmt], resolver) -> Optional[List[ast.stmt]]:
    """A copy of body with the constructors above rewritten, or None where there
    is none (the caller keeps its tree)."""
    rewriter = _Sugar(resolver, {n.id for s in body for n in ast.walk(s)
                                 if isinstance(n, ast.Name)})
    if not any(rewriter.replacement(n) is not None or rewriter.written(n) is not None or
               rewriter.fills_diagonal(n) for n in _calls(body)):
        return None
    out: List[ast.stmt] = []
    for s in body:
        new = rewriter.visit(clone(s))
        for n in new if isinstance(new, list) else [new]:
            out.append(ast.fix_missing_locations(n))
    return out


def _calls(body: List[ast.stmt]):
    for s in body:
        for node in ast.walk(s):
            if isinstance(node, ast.Call):
                yield node


class _Sugar(ast.NodeTransformer):
    def __init__(self, resolver, taken: Set[str]):
        self.resolver = resolver
        self.taken = taken   # the function's names: a comprehension's own shadow none

    def fresh(self, stem: str) -> str:
        name, k = stem, 2
        while name in self.taken:
            name, k = f"{stem}_{k}", k + 1
        self.taken.add(name)
        return name

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        new = self.replacement(node)
        return node if new is None else copy_location(new, node)

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Call) and self.fills_diagonal(node.value):
            return self.fill_diagonal(node.value, node)
        write = self.written(node.value) if isinstance(node.value, ast.Call) else None
        if write is None:
            return self.generic_visit(node)
        return self.write_into(*write, node)

    def fills_diagonal(self, node: ast.Call) -> bool:
        """np.fill_diagonal(y, v) or (..., wrap=False) of a variable y."""
        keywords = node.keywords
        return self.numpy_function(node.func) is np.fill_diagonal and len(node.args) == 2 \
            and isinstance(node.args[0], ast.Name) and \
            not any(isinstance(a, ast.Starred) for a in node.args) and \
            all(k.arg == "wrap" and isinstance(k.value, ast.Constant) and
                k.value.value is False for k in keywords)

    def fill_diagonal(self, node: ast.Call, at: ast.stmt) -> List[ast.stmt]:
        """`diagonal = _s2s_diagonal_entries(y)` and `y[diagonal] = np.resize(np.ravel(v),
        diagonal[0].shape)`: NumPy repeats v along the diagonal and casts it as an item
        assignment does."""
        target, value = node.args
        self.resolver.bound[_DIAGONAL] = diagonal_entries
        self.resolver.bound["_s2s_np"] = np
        entries = self.fresh("diagonal")
        numpy = ast.Name(id="_s2s_np", ctx=ast.Load())
        values = ast.Call(
            func=ast.Attribute(value=numpy, attr="resize", ctx=ast.Load()),
            args=[ast.Call(func=ast.Attribute(value=clone(numpy), attr="ravel", ctx=ast.Load()),
                           args=[self.visit(clone(value))], keywords=[]),
                  ast.Attribute(value=ast.Subscript(value=ast.Name(id=entries, ctx=ast.Load()),
                                                    slice=ast.Constant(value=0), ctx=ast.Load()),
                                attr="shape", ctx=ast.Load())],
            keywords=[])
        find = ast.Assign(targets=[ast.Name(id=entries, ctx=ast.Store())],
                          value=ast.Call(func=ast.Name(id=_DIAGONAL, ctx=ast.Load()),
                                         args=[clone(target)], keywords=[]))
        store = ast.Subscript(value=ast.Name(id=target.id, ctx=ast.Load()),
                              slice=ast.Name(id=entries, ctx=ast.Load()), ctx=ast.Store())
        return [copy_location(find, at),
                copy_location(ast.Assign(targets=[store], value=values), at)]

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        write = self.written(node.value) if isinstance(node.value, ast.Call) and \
            len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) else None
        if write is None:
            return self.generic_visit(node)
        target, _ = write
        rebind = copy_location(ast.Assign(targets=[clone(node.targets[0])], value=clone(target)),
                               node)
        return self.write_into(*write, node) + [rebind]

    def write_into(self, target: ast.Name, value: ast.expr, at: ast.stmt) -> List[ast.stmt]:
        """`target[...] = _s2s_cast_into(value, target)` (the sugar of value visited)."""
        self.resolver.bound[_CAST] = cast_into
        checked = ast.Call(func=ast.Name(id=_CAST, ctx=ast.Load()),
                           args=[self.visit(value), clone(target)], keywords=[])
        store = ast.Subscript(value=ast.Name(id=target.id, ctx=ast.Load()),
                              slice=ast.Constant(value=Ellipsis), ctx=ast.Store())
        return [copy_location(ast.Assign(targets=[store], value=checked), at)]

    def written(self, node: ast.Call):
        """(the array written into, the value written) for np.copyto(y, x) and a ufunc
        with one output given `out`; None for any other call."""
        func, args, keywords = node.func, node.args, node.keywords
        if any(isinstance(a, ast.Starred) for a in args) or \
                any(k.arg is None for k in keywords):
            return None
        obj = self.numpy_function(func)
        if obj is np.copyto and len(args) == 2 and not keywords and \
                isinstance(args[0], ast.Name):
            return args[0], clone(args[1])
        if not isinstance(obj, np.ufunc) or obj.nout != 1:
            return None
        if len(args) == obj.nin + 1 and not keywords:
            out, inputs = args[-1], args[:-1]
        elif len(args) == obj.nin and len(keywords) == 1 and keywords[0].arg == "out":
            out, inputs = keywords[0].value, args
            if isinstance(out, ast.Tuple) and len(out.elts) == 1:
                out = out.elts[0]
        else:
            return None
        if not isinstance(out, ast.Name):
            return None
        return out, ast.Call(func=clone(func), args=[clone(a) for a in inputs], keywords=[])

    def numpy_function(self, func: ast.expr):
        """What `np.name` or a plain name (`from numpy import exp`) is, read from a
        module without touching any other object; None for anything else."""
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                func.value.id not in self.resolver.locals:
            ok, module = self.resolver.static(func.value)
            if not (ok and isinstance(module, types.ModuleType)):
                return None
        elif not (isinstance(func, ast.Name) and func.id not in self.resolver.locals):
            return None
        ok, obj = self.resolver.static(func)
        return obj if ok else None

    def builtin(self, func: ast.expr, obj) -> bool:
        return is_builtin(self.resolver, func, obj)

    def replacement(self, node: ast.Call) -> Optional[ast.expr]:
        func, args, keywords = node.func, node.args, node.keywords
        if any(isinstance(a, ast.Starred) for a in args) or \
                any(k.arg is None for k in keywords):
            return None
        for maker, literal in ((tuple, ast.Tuple), (list, ast.List)):
            if self.builtin(func, maker) and len(args) == 1 and not keywords:
                arg = args[0]
                if isinstance(arg, (ast.Tuple, ast.List)):
                    return literal(elts=[clone(e) for e in arg.elts], ctx=ast.Load())
                if maker is tuple:
                    return None   # (a tuple of unknown length: left as it is)
                item = ast.Name(id="item", ctx=ast.Load())
                return ast.ListComp(elt=item, generators=[ast.comprehension(
                    target=ast.Name(id="item", ctx=ast.Store()), iter=clone(arg), ifs=[],
                    is_async=0)])
        if self.builtin(func, dict):
            if not args:
                return ast.Dict(keys=[ast.Constant(value=k.arg) for k in keywords],
                                values=[clone(k.value) for k in keywords])
            pairs = args[0] if len(args) == 1 and not keywords else None
            if isinstance(pairs, ast.Call) and self.builtin(pairs.func, zip) and \
                    len(pairs.args) == 2 and not pairs.keywords and \
                    not any(isinstance(a, ast.Starred) for a in pairs.args):
                # dict(zip(keys, values)): the comprehension it is (a later pair with
                # a key seen before replaces its value in both).
                key, value = self.fresh("key"), self.fresh("value")
                return ast.DictComp(
                    key=ast.Name(id=key, ctx=ast.Load()),
                    value=ast.Name(id=value, ctx=ast.Load()),
                    generators=[ast.comprehension(
                        target=ast.Tuple(elts=[ast.Name(id=key, ctx=ast.Store()),
                                               ast.Name(id=value, ctx=ast.Store())],
                                         ctx=ast.Store()),
                        iter=clone(pairs), ifs=[], is_async=0)])
            if len(args) == 1 and not keywords and isinstance(args[0], ast.Name):
                key = ast.Name(id="key", ctx=ast.Load())
                return ast.DictComp(
                    key=key, value=ast.Subscript(value=clone(args[0]), slice=clone(key),
                                                 ctx=ast.Load()),
                    generators=[ast.comprehension(target=ast.Name(id="key", ctx=ast.Store()),
                                                  iter=clone(args[0]), ifs=[], is_async=0)])
        mapped = self.mapped(func, args, keywords) or self.masked(func, args, keywords) or \
            self.outer(func, args, keywords) or self.reduced(func, args, keywords)
        if mapped is not None:
            return mapped
        op = self.numpy_function(func) if not keywords else None
        if op is functools.reduce and 2 <= len(args) <= 3 and _plain_function(args[0]) and \
                isinstance(args[1], (ast.List, ast.Tuple)) and \
                not any(isinstance(e, ast.Starred) for e in args[1].elts) and \
                len(args[1].elts) + len(args) > 3:   # (Python's TypeError for none at all)
            items = ([args[2]] if len(args) == 3 else []) + list(args[1].elts)
            total = clone(items[0])
            for item in items[1:]:
                total = ast.Call(func=clone(args[0]), args=[total, clone(item)], keywords=[])
            return self.visit(total)   # (its calls may be sugar too: operator.add)
        if op is not None and not isinstance(op, np.ufunc):
            try:
                binary, unary = _BINARY.get(op), _UNARY.get(op)
            except TypeError:   # (an object that cannot be a key: not operator's)
                binary = unary = None
            if binary is not None and len(args) == 2:
                return ast.BinOp(left=clone(args[0]), op=binary(), right=clone(args[1]))
            if unary is not None and len(args) == 1:
                return ast.UnaryOp(op=unary(), operand=clone(args[0]))
            if op is operator.getitem and len(args) == 2:
                return ast.Subscript(value=clone(args[0]), slice=clone(args[1]),
                                     ctx=ast.Load())
        if isinstance(func, ast.Attribute) and func.attr == "get" and \
                isinstance(func.value, ast.Name) and func.value.id in self.resolver.locals \
                and 1 <= len(args) <= 2 and not keywords:
            mapping, key = func.value, args[0]
            default = clone(args[1]) if len(args) == 2 else ast.Constant(value=None)
            return ast.IfExp(
                test=ast.Compare(left=clone(key), ops=[ast.In()], comparators=[clone(mapping)]),
                body=ast.Subscript(value=clone(mapping), slice=clone(key), ctx=ast.Load()),
                orelse=default)
        return None


    def masked(self, func, args, keywords) -> Optional[ast.expr]:
        """np.sum(a, axis, where=w, initial=c, keepdims=k) as the sum of
        np.where(w, a, 0) (plus c); np.mean(a, axis, where=w, keepdims=k) as that sum
        over the count of w's True entries broadcast to a's shape (a and w read
        twice: only names, items and operators). None: not such a call (dtype= or out=
        keep their refusal)."""
        given = {k.arg: k.value for k in keywords}
        reduction = self.numpy_function(func) if {"where", "initial"} & set(given) else None
        allowed = {"axis", "keepdims", "where"} | ({"initial"} if reduction is np.sum else set())
        if reduction not in (np.sum, np.mean) or not 1 <= len(args) <= 2 or \
                (reduction is np.mean and "where" not in given) or \
                not set(given) <= allowed or ("axis" in given and len(args) == 2):
            return None
        np_name = func.value if isinstance(func, ast.Attribute) else None
        if np_name is None or self.numpy_function(
                ast.Attribute(value=np_name, attr="where", ctx=ast.Load())) is not np.where:
            return None   # (numpy reached as a module name: `from numpy import sum` is not)

        def np_call(name: str, call_args, **kw) -> ast.Call:
            return ast.Call(func=ast.Attribute(value=clone(np_name), attr=name, ctx=ast.Load()),
                            args=list(call_args), keywords=[ast.keyword(arg=k, value=v)
                                                            for k, v in kw.items()])
        axis = clone(args[1]) if len(args) == 2 else clone(given.get("axis",
                                                                     ast.Constant(None)))
        keep = clone(given.get("keepdims", ast.Constant(False)))
        values, mask = args[0], given.get("where")
        kept = clone(values) if mask is None else \
            np_call("where", [clone(mask), clone(values), ast.Constant(0)])
        total = np_call("sum", [kept], axis=axis, keepdims=keep)
        if reduction is np.sum:
            if "initial" in given:
                return ast.BinOp(left=total, op=ast.Add(), right=clone(given["initial"]))
            return total
        if not (_plain_value(values) and _plain_value(mask)):
            return None   # (read twice below: only what reading again cannot change)
        count = np_call("sum", [np_call("broadcast_to", [
            clone(mask), np_call("shape", [clone(values)])])], axis=clone(axis),
            keepdims=clone(keep))
        return ast.BinOp(left=total, op=ast.Div(), right=count)

    def outer(self, func, args, keywords) -> Optional[ast.expr]:
        """np.multiply.outer(a, b) (any two-operand ufunc's outer) as the ufunc of a,
        given one axis of length 1 per axis of b, and b: NumPy's broadcasting makes
        the table `ufunc(a[i...], b[j...])` that outer makes (a and b read twice:
        only names, items and operators). None: not such a call."""
        if not (isinstance(func, ast.Attribute) and func.attr == "outer" and
                len(args) == 2 and not keywords and
                isinstance(func.value, ast.Attribute) and
                all(_plain_value(a) for a in args)):
            return None
        ufunc = self.numpy_function(func.value)
        np_name = func.value.value
        if not (isinstance(ufunc, np.ufunc) and ufunc.nin == 2 and ufunc.nout == 1) or \
                self.numpy_function(ast.Attribute(value=np_name, attr="reshape",
                                                  ctx=ast.Load())) is not np.reshape:
            return None

        def np_call(name: str, *call_args) -> ast.Call:
            return ast.Call(func=ast.Attribute(value=clone(np_name), attr=name, ctx=ast.Load()),
                            args=list(call_args), keywords=[])
        a, b = args
        ones = ast.BinOp(left=ast.Tuple(elts=[ast.Constant(value=1)], ctx=ast.Load()),
                         op=ast.Mult(), right=np_call("ndim", clone(b)))
        shape = ast.BinOp(left=np_call("shape", clone(a)), op=ast.Add(), right=ones)
        return ast.Call(func=clone(func.value), args=[np_call("reshape", clone(a), shape),
                                                      clone(b)], keywords=[])

    def reduced(self, func, args, keywords) -> Optional[ast.expr]:
        """np.add.reduce(a, ...) and its kin as the NumPy function that is that very
        call (np.sum(a, axis=0, ...): NumPy's own sum calls add.reduce, so the values
        are the same to the bit), with reduce's default axis 0 written out. None: not
        such a call."""
        if not (isinstance(func, ast.Attribute) and func.attr in ("reduce", "accumulate")
                and isinstance(func.value, ast.Attribute) and args):
            return None
        try:
            name = _REDUCERS.get((self.numpy_function(func.value), func.attr))
        except TypeError:   # (an object that cannot be a key: not a ufunc)
            return None
        np_name = func.value.value
        if name is None or self.numpy_function(
                ast.Attribute(value=np_name, attr=name, ctx=ast.Load())) is not getattr(np, name):
            return None
        if name in ("max", "min") and len(args) > 2:   # (their third parameter is out)
            return None
        keywords = [clone(k) for k in keywords]
        if len(args) < 2 and not any(k.arg == "axis" for k in keywords):
            keywords.append(ast.keyword(arg="axis", value=ast.Constant(value=0)))
        return ast.Call(func=ast.Attribute(value=clone(np_name), attr=name, ctx=ast.Load()),
                        args=[clone(a) for a in args], keywords=keywords)

    def mapped(self, func, args, keywords) -> Optional[ast.expr]:
        """map(f, xs, ...) as a generator expression (None: not such a call)."""
        if not (self.builtin(func, map) and len(args) >= 2 and not keywords):
            return None
        fn, iterables = args[0], args[1:]
        if not _plain_function(fn):
            return None
        if len(iterables) > 1 and not self.builtin(ast.Name(id="zip", ctx=ast.Load()), zip):
            return None   # (zip is not Python's own here)
        items = [self.fresh("item") for _ in iterables]
        if len(items) == 1:
            target, source = ast.Name(id=items[0], ctx=ast.Store()), clone(iterables[0])
        else:
            target = ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Store()) for n in items],
                               ctx=ast.Store())
            source = ast.Call(func=ast.Name(id="zip", ctx=ast.Load()),
                              args=[clone(a) for a in iterables], keywords=[])
        call = ast.Call(func=clone(fn), args=[ast.Name(id=n, ctx=ast.Load()) for n in items],
                        keywords=[])
        return ast.GeneratorExp(elt=call, generators=[ast.comprehension(
            target=target, iter=source, ifs=[], is_async=0)])


_PLAIN = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple,
          ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.operator, ast.unaryop,
          ast.cmpop, ast.boolop, ast.expr_context)


def _plain_value(node: ast.expr) -> bool:
    """An expression of names, constants, items and operators only (no call): reading
    it twice computes the same value."""
    return all(isinstance(n, _PLAIN) for n in ast.walk(node))


def _plain_function(node: ast.expr) -> bool:
    """A name, a dotted name or a lambda: evaluating it again gives the same function."""
    return isinstance(node, ast.Lambda) or dotted(node) is not None


def eager_generator(body: List[ast.stmt], collected: str) -> Optional[List[ast.stmt]]:
    """A generator function's body as one that collects what it yields in a list
    named `collected` and returns it (None for a body that yields nothing):

        for k in range(n):            collected = []
            yield W @ x * k     ->    for k in range(n):
                                          collected.append(W @ x * k)
                                      return collected

    What consumes the generator (a loop, sum, a comprehension) sees the same values
    in the same order. Only `yield` as a statement: a yield whose value is used,
    and `yield from`, are left for the normaliser to refuse."""
    if not any(isinstance(n, (ast.Yield, ast.YieldFrom)) for s in body
               for n in walk_scope(s) + [s]):
        return None
    rewriter = _Collect(collected)
    new = [ast.fix_missing_locations(rewriter.visit(clone(s))) for s in body]
    start = ast.Assign(targets=[ast.Name(collected, ast.Store())],
                       value=ast.List(elts=[], ctx=ast.Load()), lineno=body[0].lineno,
                       col_offset=body[0].col_offset)
    end = ast.Return(value=ast.Name(collected, ast.Load()))
    return [copy_location(start, body[0])] + new + [copy_location(end, body[-1])]


class _Collect(ast.NodeTransformer):
    def __init__(self, collected: str):
        self.collected = collected

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Yield):
            value = node.value.value or ast.Constant(value=None)
            call = ast.Call(func=ast.Attribute(value=ast.Name(self.collected, ast.Load()),
                                               attr="append", ctx=ast.Load()),
                            args=[self.visit(value)], keywords=[])
            return copy_location(ast.Expr(value=call), node)
        return self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> ast.AST:
        # (a generator's `return v` ends it; consumers never see v)
        return copy_location(ast.Return(value=ast.Name(self.collected, ast.Load())), node)

    def visit_FunctionDef(self, node):   # a nested def's yields are its own
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef
