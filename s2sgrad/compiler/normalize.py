"""Pass 2 — normalise: one operation per statement, SSA names where possible.

After this pass every differentiable statement has the form
``name = op(atom, ...)`` (or ``a, b = call(...)`` for several results), where an
atom is a variable or a constant, and the function has exactly one ``return``,
its last statement. Temporaries are named after what they hold (``sin_x``,
``W_at_h``) and a user variable assigned again in straight-line code gets a new
version (``x``, ``x_1``), so later passes see each value under its own name.
Variables assigned inside branches or loops keep one name; the transform saves
their overwritten values.

Every statement records the user's statement it came from (``s2s_origin``) for
error messages and for the comments of the generated adjoint.
"""
from __future__ import annotations

import ast
import inspect
import re
import types
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set, Tuple

import numpy as np

from ..errors import error_at, guard_fields
from ..function import is_function_class
from ..rules import registry
from . import reentry
from .aliases import AliasFacts
from .callables import bound_call
from .hoist import hoist_invariants
from .loader import lift_lambda
from .names import NameRegistry, clone, name_nodes, names_in, walk
from .parse import ParsedFunction
from .resolve import Resolver

_OP_WORDS = {ast.Add: "plus", ast.Sub: "minus", ast.Mult: "times", ast.Div: "div",
             ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow",
             ast.MatMult: "at", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
             ast.LShift: "lshift", ast.RShift: "rshift"}
_UNARY_WORDS = {ast.USub: "neg", ast.UAdd: "pos", ast.Not: "not", ast.Invert: "inv"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPOUND = (ast.If, ast.For, ast.While)


@dataclass
class NormalForm:
    """A function in normal form, with what later passes need to read it."""

    parsed: ParsedFunction
    node: ast.FunctionDef
    names: NameRegistry
    resolver: Resolver
    params: List[str]
    result: Optional[str] = None  # set when the function returns a single name
    lists: Set[str] = field(default_factory=set)  # names bound to list literals
    tuples: Set[str] = field(default_factory=set)  # names bound to tuple literals
    dicts: Set[str] = field(default_factory=set)   # names bound to dict literals
    # Names written in place somewhere (x[i] = v, x += v on an array, np.add.at(x, ...)),
    # and the names sharing memory with them: a value kept for the adjoint under
    # another name (a Function's saved input) must be a copy.
    written_in_place: Set[str] = field(default_factory=set)
    bindings: Dict[str, Callable] = field(default_factory=dict)  # extra closure names

    @property
    def all_params(self) -> List[str]:
        """The positional parameters and then the keyword-only ones (never
        differentiated, but bound by the call like the others)."""
        return self.params + [a.arg for a in self.node.args.kwonlyargs]


def normalize(parsed: ParsedFunction) -> NormalForm:
    return _Normalizer(parsed).run()


def is_atom(node: ast.AST) -> bool:
    if isinstance(node, (ast.Name, ast.Constant)):
        return True
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(is_atom(e) for e in node.elts)
    return bool(getattr(node, "s2s_static", False))


def _walk_scope(node: ast.AST) -> List[ast.AST]:
    """The nodes under `node`, not entering nested functions, lambdas or classes
    (depth first, last child first). A list: building it costs less than a
    generator over `ast.iter_child_nodes` would."""
    out: List[ast.AST] = []
    todo = [node]
    pop, push, append, AST = todo.pop, todo.append, out.append, ast.AST
    while todo:
        sub = pop()
        if sub is not node:
            append(sub)
            if isinstance(sub, _SCOPES):
                continue
        for attr in sub._fields:  # its children, in ast.iter_child_nodes order
            value = getattr(sub, attr, None)
            if isinstance(value, AST):
                push(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, AST):
                        push(item)
    return out


def _assigned_names(nodes) -> Set[str]:
    """Names stored or deleted in `nodes`, outside nested scopes (each node of
    `nodes` itself is entered)."""
    stored = (ast.Store, ast.Del)
    return {n.id for node in nodes for n in (node, *_walk_scope(node))
            if n.__class__ is ast.Name and isinstance(n.ctx, stored)}


def _has(node: ast.AST, kinds, stop=()) -> bool:
    todo = [node]
    while todo:
        sub = todo.pop()
        if isinstance(sub, kinds):
            return True
        if sub is not node and isinstance(sub, _SCOPES + tuple(stop)):
            continue
        todo.extend(ast.iter_child_nodes(sub))
    return False


def _ends_in_jump(stmts: List[ast.stmt]) -> bool:
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Return, ast.Break, ast.Continue, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return _ends_in_jump(last.body) and _ends_in_jump(last.orelse)
    return False


def lift_jumps(stmts: List[ast.stmt], jumps) -> List[ast.stmt]:
    """Move the code after a conditional jump into the branches that fall through.

    Afterwards every `break`/`continue`/`return` of the given kinds is the last
    statement of its block, so the adjoint can replay branches without flags.
    """
    out: List[ast.stmt] = []
    for i, s in enumerate(stmts):
        if isinstance(s, jumps):
            out.append(s)
            return out
        if isinstance(s, ast.If) and _has(s, jumps, stop=(ast.For, ast.While)
                                          if ast.Return not in jumps else ()):
            rest = stmts[i + 1:]
            s.body = lift_jumps(s.body + clone(rest), jumps)
            s.orelse = lift_jumps(s.orelse + clone(rest), jumps)
            out.append(s)
            return out
        out.append(s)
    return out


class _Normalizer:
    def __init__(self, parsed: ParsedFunction):
        self.p = parsed
        fdef = parsed.node
        self.params = [a.arg for a in fdef.args.posonlyargs + fdef.args.args]
        self.all_params = set(self.params) | {a.arg for a in fdef.args.kwonlyargs}
        self._check_signature(fdef)
        # Keyword-only parameters are never differentiated, but they are locals: a
        # global of the same name must not stand in for them.
        kwonly = {a.arg for a in fdef.args.kwonlyargs}
        local = set(self.params) | kwonly | _assigned_names(fdef.body)
        for node in _walk_scope(fdef):
            if isinstance(node, (ast.For, ast.comprehension)):
                local |= {n.id for n in name_nodes(node.target)}
        self.resolver = Resolver(parsed.globals, parsed.closure, local)
        self.names = NameRegistry(names_in(fdef) | local)
        self._check_reserved(fdef)
        self.unversioned: Set[str] = set()
        self.user_names: Set[str] = set(local)
        self.force_in_place: Set[str] = set()
        self.rebound_augassign: Set[str] = set()
        self.lists: Set[str] = set()
        self.tuple_names: Set[str] = set()   # names bound to tuple literals
        self.dict_names: Set[str] = set()    # names bound to dict literals
        self.bindings: Dict[str, Callable] = {}   # names the generated code must see
        # Local names bound once to a lambda: calls of them are calls of the lambda.
        self.lambdas: Dict[str, ast.Lambda] = _lambdas_bound_once(fdef, set(self.params))
        self.env: Dict[str, str] = {p: p for p in self.params + sorted(kwonly)}
        self.tuples: Dict[str, List[ast.expr]] = {}
        self.owned: Set[str] = set()
        self.origin: Optional[ast.stmt] = None
        self.loop_depth = 0

    # -- helpers -------------------------------------------------------------
    def err(self, node, message, hint=None):
        return error_at(node, message, self.p, hint)

    def _check_signature(self, fdef):
        a = fdef.args
        if a.vararg or a.kwarg:
            node = a.vararg or a.kwarg
            raise error_at(node, "*args/**kwargs in the differentiated function's signature",
                           self.p, "Give the function explicit positional parameters.")

    def _check_reserved(self, fdef):
        if self.p.filename.startswith("<s2sgrad"):
            return  # s2sgrad's own generated code (being differentiated again)
        for node in walk(fdef):
            name = getattr(node, "id", None) or getattr(node, "arg", None)
            if isinstance(name, str) and name.startswith("_s2s_"):
                raise error_at(node, f"the name {name!r} uses s2sgrad's reserved prefix _s2s_",
                               self.p, "Rename the variable.")

    def emit(self, out: List[ast.stmt], stmt: ast.stmt, at: ast.AST) -> ast.stmt:
        # A node the normaliser made has no position: the user's statement gives one.
        ast.copy_location(stmt, at if getattr(at, "lineno", None) else self.origin)
        stmt.s2s_origin = self.origin
        out.append(stmt)
        return stmt

    def load(self, name: str) -> ast.Name:
        return ast.Name(id=self.env.get(name, name), ctx=ast.Load())

    def target(self, user_name: str) -> str:
        """The name the next assignment to `user_name` writes."""
        if user_name in self.unversioned:
            new = user_name
        elif user_name not in self.env:
            new = user_name
        else:
            new = self.names.version(user_name)
        self.env[user_name] = new
        self.tuples.pop(new, None)
        return new

    def rename_loads(self, expr: ast.expr) -> ast.expr:
        """Rename reads to current SSA names inside an expression kept whole.

        An assignment expression inside it would bind a variable the analyses never
        see (its gradient would be lost): refused here; conditions hoist theirs
        first (see `test`)."""
        for sub in _walk_scope(expr) + [expr]:
            if isinstance(sub, ast.NamedExpr):
                raise self.err(sub, "an assignment expression (:=) here is not supported",
                               "Assign the value in a statement of its own first.")
        expr = clone(expr)
        bound: Set[str] = set()
        for sub in walk(expr):
            if isinstance(sub, (ast.Lambda, ast.comprehension)):
                target = sub.args if isinstance(sub, ast.Lambda) else sub.target
                bound |= names_in(target)
        for sub in walk(expr):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in bound:
                sub.id = self.env.get(sub.id, sub.id)
        return expr

    # -- driver ----------------------------------------------------------------
    def run(self) -> NormalForm:
        fdef = self.p.node
        body = [s for s in fdef.body if not _is_docstring(s)]
        body = self._lift_returns(body)
        self.unversioned = self._assigned_in_compound(body)
        self.resolver.locals |= _assigned_names(body)
        pristine = clone(body)
        state = (set(self.names.taken), dict(self.env))
        while True:
            out: List[ast.stmt] = []
            self.block(clone(pristine), out)
            facts = AliasFacts(out, self.resolver.locals | self.names.taken, self.lists)
            redo = {u for u in self.rebound_augassign if facts.shared_with_user(u,
                                                                             self.user_names)}
            if not redo - self.force_in_place:
                break
            # `x += v` was rewritten as `x = x + v`, but x shares memory with another
            # variable: keep the in-place update (and let the alias check judge it).
            self.force_in_place |= redo
            self.names.taken, self.env = set(state[0]), dict(state[1])
            self.tuples, self.owned, self.lists = {}, set(), set()
            self.tuple_names, self.dict_names = set(), set()
            self.rebound_augassign = set()
        self._protect_in_place_writes(facts, out)
        out = hoist_invariants(out, self.user_names, facts)
        new = ast.FunctionDef(name=fdef.name, args=clone(fdef.args), body=out,
                              decorator_list=[], returns=None, type_comment=None)
        ast.copy_location(new, fdef)
        new.end_lineno, new.end_col_offset = fdef.end_lineno, fdef.end_col_offset
        last = out[-1] if out else None
        result = (last.value.id if isinstance(last, ast.Return)
                  and isinstance(last.value, ast.Name) else None)
        return NormalForm(self.p, new, self.names, self.resolver, self.params, result,
                          lists=set(self.lists), tuples=set(self.tuple_names),
                          dicts=set(self.dict_names),
                          written_in_place=_written_in_place(facts),
                          bindings=dict(self.bindings))

    def _protect_in_place_writes(self, facts: AliasFacts, body: List[ast.stmt]) -> None:
        """User variables that would see an in-place write are an error; temporaries
        that would see it are copied when computed (`s2s_snapshot`)."""
        for name, stmt in facts.writes:
            for other in sorted(facts.affected(name, stmt)):
                # (A parameter is read after the call too: by the caller.)
                if other in self.user_names and other not in self.all_params and \
                        not _read_after(facts, body, other, stmt):
                    # Nothing reads `other` once the write has run: giving it its own
                    # copy where it is bound changes nothing the program can see.
                    _snapshot_definitions(body, other)
                    continue
                if other in self.user_names:
                    where = facts.defined_at.get(other)
                    lineno = getattr(where, "lineno", None)
                    line = f" (line {lineno})" if lineno is not None else ""
                    message = (f"in-place update of '{name}' also changes '{other}'{line}, "
                               f"which shares memory with it")
                    hint = (f"Give '{name}' its own array where it is assigned (for example "
                            f"{name} = {other}.copy()), or compute a new value instead of "
                            f"updating it in place.")
                    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                        # `s = a; s += v` is fine for numbers (rebinding): check at run
                        # time that s is not an array shared with a.
                        stmt.s2s_guard = guard_fields(self.err(stmt, message, hint))
                        continue
                    raise self.err(stmt, message, hint)
                where = facts.defined_at.get(other)
                if where is not None:
                    where.s2s_snapshot = True
                # `tmp = v / v; v = tmp; v += 0.3`: v must get its own copy, or the
                # update changes tmp (which the adjoint reads) through it.
                for node in _walk_scope(ast.Module(body=body, type_ignores=[])):
                    if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                            isinstance(node.targets[0], ast.Name) and \
                            node.targets[0].id == name and \
                            isinstance(node.value, ast.Name) and node.value.id == other:
                        node.s2s_snapshot = True

    @staticmethod
    def _assigned_in_compound(body: List[ast.stmt]) -> Set[str]:
        """Names assigned inside a branch or loop keep one name (no SSA versions)."""
        out: Set[str] = set()
        module = ast.Module(body=body, type_ignores=[])
        for node in _walk_scope(module):
            if isinstance(node, _COMPOUND):
                out |= _assigned_names(node.body + node.orelse)
                if isinstance(node, ast.For):
                    out |= _assigned_names([node.target])
        return out

    def _lift_returns(self, body: List[ast.stmt]) -> List[ast.stmt]:
        """Give the function a single final `return`, moving early returns' tails."""
        returns = [n for s in body for n in [s, *_walk_scope(s)] if isinstance(n, ast.Return)]
        if len(returns) == 1 and body and body[-1] is returns[0]:
            return body
        if not returns:
            none = ast.Return(value=ast.Constant(value=None))
            ast.copy_location(none, body[-1] if body else self.p.node)
            return body + [none]
        self.result_name = self.names.fresh("result")
        self.flag_name = None
        body = self._returns_out_of_loops(body, in_loop=False)
        body = lift_jumps(body, (ast.Return,))
        if not _ends_in_jump(body):
            body = body + [ast.copy_location(ast.Return(value=ast.Constant(value=None)),
                                             body[-1])]
        body = self._returns_to_assignments(body)
        final = ast.Return(value=ast.Name(id=self.result_name, ctx=ast.Load()))
        ast.copy_location(final, returns[-1])
        return body + [final]

    def _returns_out_of_loops(self, stmts, in_loop):
        """`return e` inside a loop becomes: result = e; flag = True; break."""
        out = []
        for s in stmts:
            if isinstance(s, (ast.For, ast.While)) and _has(s, ast.Return):
                if s.orelse:
                    raise self.err(s, "a loop with an else clause that contains return")
                if self.flag_name is None:
                    self.flag_name = self.names.fresh("returned")
                s.body = self._returns_out_of_loops(s.body, in_loop=True)
                init = ast.copy_location(_assign(self.flag_name, ast.Constant(False)), s)
                after_body = ([ast.Break()] if in_loop else
                              [ast.Return(value=ast.Name(id=self.result_name, ctx=ast.Load()))])
                after = ast.If(test=ast.Name(id=self.flag_name, ctx=ast.Load()),
                               body=[ast.copy_location(b, s) for b in after_body], orelse=[])
                out += [init, s, ast.copy_location(after, s)]
            elif isinstance(s, ast.Return) and in_loop:
                value = s.value or ast.Constant(value=None)
                out += [ast.copy_location(_assign(self.result_name, value), s),
                        ast.copy_location(_assign(self.flag_name, ast.Constant(True)), s),
                        ast.copy_location(ast.Break(), s)]
            elif isinstance(s, ast.If):
                s.body = self._returns_out_of_loops(s.body, in_loop)
                s.orelse = self._returns_out_of_loops(s.orelse, in_loop)
                out.append(s)
            else:
                out.append(s)
        return out

    def _returns_to_assignments(self, stmts):
        out = []
        for s in stmts:
            if isinstance(s, ast.Return):
                value = s.value or ast.Constant(value=None)
                if not (isinstance(value, ast.Name) and value.id == self.result_name):
                    out.append(ast.copy_location(_assign(self.result_name, value), s))
            elif isinstance(s, ast.If):
                s.body = self._returns_to_assignments(s.body) or [ast.copy_location(ast.Pass(), s)]
                s.orelse = self._returns_to_assignments(s.orelse)
                out.append(s)
            else:
                out.append(s)
        return out

    # -- statements ------------------------------------------------------------
    def block(self, stmts: List[ast.stmt], out: List[ast.stmt]) -> None:
        for s in stmts:
            self.origin = s
            self.stmt(s, out)

    def stmt(self, s: ast.stmt, out: List[ast.stmt]) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise self.unsupported_stmt(s)
        method(s, out)

    def unsupported_stmt(self, s):
        kind = type(s).__name__
        hints = {
            "Try": "Move the try/except outside the differentiated function.",
            "With": "Move the with-block outside the differentiated function.",
            "Global": "Pass the value in as an argument and return the new value.",
            "Nonlocal": "Pass the value in as an argument and return the new value.",
            "FunctionDef": "Define helper functions at module level; s2sgrad "
                           "differentiates calls to them.",
            "ClassDef": "Define classes at module level.",
            "AsyncFor": "Use a plain for loop.", "AsyncWith": "Use a plain with.",
            "Import": "Import at module level.", "ImportFrom": "Import at module level.",
            "Delete": "Drop the del statement; s2sgrad keeps values the adjoint needs.",
            "Match": "Use if/elif/else.",
        }
        return self.err(s, f"'{kind}' statements are not supported in a differentiated "
                           f"function", hints.get(kind, "Rewrite it with plain statements."))

    def stmt_Pass(self, s, out):
        pass

    def stmt_Expr(self, s, out):
        if _is_docstring(s):
            return
        value = s.value
        if isinstance(value, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise self.err(s, "generators and coroutines cannot be differentiated",
                           "Return a value instead of yielding it.")
        if isinstance(value, ast.Call):
            if self.extend_as_appends(s, value, out):
                return
            call = self.call(value, out)
            self.emit(out, ast.Expr(value=call), s)
        else:
            self.emit(out, ast.Expr(value=self.rename_loads(value)), s)

    def user_temp(self, stem: str) -> str:
        """A fresh local for statements written as the user's and normalised again
        (its versions are not tracked: it may be assigned in a loop)."""
        name = self.names.fresh(stem)
        self.resolver.locals.add(name)
        self.unversioned.add(name)
        return name

    def extend_as_appends(self, s: ast.Expr, call: ast.Call, out) -> bool:
        """`xs.extend(items)` as the appends Python makes (one per item of a literal, or
        a loop over any other iterable), so each item's cotangent reaches it."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr == "extend" and
                isinstance(func.value, ast.Name) and func.value.id in self.resolver.locals
                and len(call.args) == 1 and not call.keywords):
            return False
        arg = call.args[0]

        def append(item):
            method = ast.Attribute(value=clone(func.value), attr="append", ctx=ast.Load())
            stmt = ast.Expr(value=ast.Call(func=method, args=[item], keywords=[]))
            return ast.fix_missing_locations(ast.copy_location(stmt, s))
        if isinstance(arg, (ast.List, ast.Tuple)) and \
                not any(isinstance(e, ast.Starred) for e in arg.elts):
            # Python evaluates the whole list before extending: items first, then
            # the appends (an item reading xs must not see the earlier ones).
            held = []
            for e in arg.elts:
                name = self.user_temp("item")
                assign = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=e)
                self.stmt(ast.fix_missing_locations(ast.copy_location(assign, s)), out)
                held.append(ast.Name(id=name, ctx=ast.Load()))
            for e in held:
                self.stmt(append(e), out)
            return True
        item = self.user_temp("item")
        loop = ast.For(target=ast.Name(id=item, ctx=ast.Store()), iter=arg,
                       body=[append(ast.Name(id=item, ctx=ast.Load()))], orelse=[],
                       type_comment=None)
        self.stmt(ast.fix_missing_locations(ast.copy_location(loop, s)), out)
        return True

    def stmt_Assert(self, s, out):
        self.emit(out, ast.Assert(test=self.rename_loads(s.test),
                                  msg=self.rename_loads(s.msg) if s.msg else None), s)

    def stmt_Raise(self, s, out):
        self.emit(out, ast.Raise(exc=self.rename_loads(s.exc) if s.exc else None,
                                 cause=self.rename_loads(s.cause) if s.cause else None), s)

    def stmt_Return(self, s, out):
        value = s.value or ast.Constant(value=None)
        if isinstance(value, ast.Tuple):
            elts = [self.packed(e, out) for e in value.elts]
            ret = ast.Return(value=ast.Tuple(elts=elts, ctx=ast.Load()))
        elif isinstance(value, ast.Name) and self.env.get(value.id) in self.tuples:
            ret = ast.Return(value=ast.Tuple(elts=list(self.tuples[self.env[value.id]]),
                                             ctx=ast.Load()))
        elif is_atom(value):
            ret = ast.Return(value=self.atom(value, out))
        else:
            name = self.names.fresh("result")
            self.emit(out, _assign(name, self.operation(value, out)), value)
            ret = ast.Return(value=ast.Name(id=name, ctx=ast.Load()))
        self.emit(out, ret, s)

    def operand(self, expr: ast.expr, out) -> ast.expr:
        """An operand of an operator: a literal holding variables (x * [a, b]) gets a
        variable of its own, so that a and b receive their adjoints."""
        if isinstance(expr, (ast.Tuple, ast.List)) and self._holds_locals(expr):
            return self.packed(expr, out)
        return self.atom(expr, out)

    def element(self, expr: ast.expr, out) -> ast.expr:
        """An item of a literal: a nested literal holding variables gets a variable of
        its own (`[(W1, b1), (W2, b2)]`), so every item the adjoint unpacks is a name."""
        if isinstance(expr, (ast.Tuple, ast.List)) and self._holds_locals(expr):
            return self.packed(expr, out)
        return self.atom(expr, out)   # (a nested dict literal gets a name there)

    def _holds_locals(self, node) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.resolver.locals
                   for n in walk(node))

    def rule_arguments(self, rule, args, keywords, out, skip_first: bool = False,
                       pack: bool = False):
        """Atoms for a call's arguments. A literal holding variables passed where the
        rule differentiates gets a variable of its own, except one level deep in a
        sequence parameter (np.array([a, b]), whose items are split); deeper
        literals (np.array([[a, b], [c, d]])) get variables for their rows. `pack`:
        the callee has no rule but may be differentiated (a user function), so
        every literal holding variables gets a variable (its adjoint is unpacked)."""
        positional = list(args)
        named = {k.arg: k.value for k in keywords}
        roles: Dict[int, str] = {}
        if rule is not None:
            params = rule.params[1:] if skip_first else rule.params
            for i, value in enumerate(positional):
                if i < len(params):
                    roles[id(value)] = params[i]
            for k, value in named.items():
                roles[id(value)] = k

        def convert(value):
            param = roles.get(id(value))
            if rule is not None and param in rule.grads and param not in rule.sequence and \
                    isinstance(value, ast.Name) and \
                    self.env.get(value.id, value.id) in self.lists:
                # np.sum(xs) of a list: NumPy makes it an array first; so does the
                # code, so that the list gets a list of cotangents back.
                return self.as_array(value, out)
            literal = isinstance(value, (ast.Tuple, ast.List)) and self._holds_locals(value)
            if pack and literal:
                return self.packed(value, out)
            if rule is None or param is None or param not in rule.grads or not literal:
                return self.atom(value, out)
            if param in rule.sequence:
                elts = [self.operand(e, out) for e in value.elts]
                return ast.copy_location(type(value)(elts=elts, ctx=ast.Load()), value)
            return self.packed(value, out)
        new_args = [convert(a) for a in positional]
        new_keywords = [ast.keyword(arg=k.arg, value=convert(k.value)) for k in keywords]
        return new_args, new_keywords

    def as_array(self, value: ast.Name, out) -> ast.expr:
        """`np.array(value)` as a temporary of its own."""
        import numpy
        alias = next((c for c in ("np", "numpy") if c not in self.resolver.locals and
                      self.resolver.lookup(c) is numpy), None)
        if alias is None:
            alias = "_s2s_numpy"
            self.bindings[alias] = numpy
        call = ast.Call(func=ast.Attribute(value=ast.Name(id=alias, ctx=ast.Load()),
                                           attr="array", ctx=ast.Load()),
                        args=[self.load(value.id)], keywords=[])
        call.s2s_callee = numpy.array
        name = self.names.fresh(f"{value.id}_array")
        self.emit(out, _assign(name, ast.copy_location(call, value)), value)
        return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), value)

    def packed(self, expr: ast.expr, out) -> ast.expr:
        """An atom; a nested tuple or list becomes a variable of its own, so its
        items receive their adjoints (the output's cotangent is nested too)."""
        if isinstance(expr, (ast.Tuple, ast.List)):
            name = self.names.fresh("items")
            self.assign_name(name, expr, out, expr)
            return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), expr)
        return self.atom(expr, out)

    def stmt_Assign(self, s, out):
        value = s.value
        first, *others = s.targets
        self.assign(first, value, out, s)
        for t in others:
            src = self._read_back(first, out)
            self.assign(t, src, out, s)

    def _read_back(self, target, out):
        if isinstance(target, ast.Name):
            return self.load(target.id)
        raise self.err(target, "chained assignment to a non-name target",
                       "Split it into separate assignments.")

    def stmt_AnnAssign(self, s, out):
        if s.value is not None:
            self.assign(s.target, s.value, out, s)

    def assign(self, target: ast.expr, value: ast.expr, out, s) -> None:
        if isinstance(target, ast.Name):
            self.assign_name(target.id, value, out, s)
        elif isinstance(target, (ast.Tuple, ast.List)):
            self.assign_tuple(target, value, out, s)
        elif isinstance(target, ast.Subscript):
            self.assign_subscript(target, value, out, s)
        elif isinstance(target, ast.Starred):
            raise self.err(target, "starred assignment targets are not supported",
                           "Index the sequence explicitly.")
        else:
            raise self.err(target, "assignment to an attribute is not supported in a "
                                   "differentiated function",
                           "Keep the value in a local variable and return it.")

    def assign_name(self, user_name: str, value: ast.expr, out, s) -> None:
        if isinstance(value, (ast.Tuple, ast.List)) and all(
                not isinstance(e, ast.Starred) for e in value.elts):
            elts = [self.element(e, out) for e in value.elts]
            name = self.target(user_name)
            node = type(value)(elts=elts, ctx=ast.Load())
            self.emit(out, _assign(name, ast.copy_location(node, value)), value)
            if isinstance(value, ast.Tuple):
                self.tuple_names.add(name)
                self.know_tuple(name, elts)
            else:
                self.lists.add(name)
            self.owned.discard(name)
            return
        if isinstance(value, ast.Dict) and all(k is not None for k in value.keys):
            # `{"W": W, "b": b}`: keys are atoms (no gradient), values are items.
            keys = [self.atom(k, out) for k in value.keys]
            values = [self.element(v, out) for v in value.values]
            name = self.target(user_name)
            node = ast.Dict(keys=keys, values=values)
            self.emit(out, _assign(name, ast.copy_location(node, value)), value)
            self.dict_names.add(name)
            self.owned.discard(name)
            return
        if isinstance(value, ast.Name) and self.env.get(value.id) in self.tuples:
            src = self.env[value.id]
            name = self.target(user_name)
            self.emit(out, _assign(name, self.load(value.id)), value)
            self.know_tuple(name, self.tuples[src])
            return
        arity = self._output_count(value)
        if arity > 1:
            # `pair = MultiOutput.apply(x)`: name each output, keep `pair` a known tuple.
            call = self.call(value, out)
            parts = [self.names.fresh(f"{user_name}_{i}") for i in range(arity)]
            tgt = ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Store()) for n in parts],
                            ctx=ast.Store())
            self.emit(out, ast.Assign(targets=[tgt], value=call), value)
            elts = [ast.Name(id=n, ctx=ast.Load()) for n in parts]
            name = self.target(user_name)
            self.emit(out, _assign(name, ast.Tuple(elts=elts, ctx=ast.Load())), value)
            self.know_tuple(name, elts)
            return
        op = self.operation(value, out)
        # The statement may read the old value of a name it overwrites
        # (x = f(x) inside a loop): compute into a temporary first.
        if user_name in self.unversioned and user_name in _loads(op):
            tmp = self.names.fresh(_stem(op, self) or user_name)
            self.emit(out, _assign(tmp, op), value)
            op = ast.Name(id=tmp, ctx=ast.Load())
            self._note_owned(tmp, value)
        name = self.target(user_name)
        self.emit(out, _assign(name, op), value)
        self._note_owned(name, op)

    def know_tuple(self, name: str, elts: List[ast.expr]) -> None:
        """Remember that `name` holds the tuple `elts`, so that `name[0]` reads the
        item's variable directly; only while neither can be bound to something else
        (names assigned in a branch or loop are: after an `if`, `t[0]` may be either
        branch's item, and after a loop the item's variable may hold a later value)."""
        if name in self.unversioned:
            return
        if any(isinstance(e, ast.Name) and e.id in self.unversioned for e in elts):
            return
        self.tuples[name] = elts

    def _output_count(self, value) -> int:
        """How many outputs a Function.apply call has (its vjp takes one per output)."""
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and
                value.func.attr == "apply" and _dotted(value.func) and
                not self.resolver.is_local_chain(value.func)):
            return 1
        ok, cls = self.resolver.static(value.func.value)
        if not ok or not is_function_class(cls):
            return 1
        try:
            params = list(inspect.signature(cls.vjp_method()).parameters.values())
        except (TypeError, ValueError):
            return 1
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            return 1
        return max(len(params) - 1, 1)

    def _note_owned(self, name, op) -> None:
        """Track names holding arrays nothing else refers to (safe for `x += y`)."""
        if _is_fresh(op, self):
            self.owned.add(name)
        else:
            self.owned.discard(name)
        for sub in walk(op):
            if isinstance(sub, ast.Name) and sub.id != name and sub.id in self.owned:
                if not (isinstance(op, (ast.BinOp, ast.UnaryOp, ast.Compare))
                        or (isinstance(op, ast.Call) and _is_fresh(op, self))):
                    self.owned.discard(sub.id)

    def assign_tuple(self, target, value, out, s) -> None:
        elts = target.elts
        if any(isinstance(e, ast.Starred) for e in elts):
            raise self.err(target, "starred assignment targets are not supported",
                           "Index the sequence explicitly.")
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elts):
            # Evaluate every right-hand side before any assignment (a, b = b, a).
            atoms = [self.atom(e, out) for e in value.elts]
            written = {e.id for e in elts if isinstance(e, ast.Name)}
            safe = []
            for a in atoms:
                if isinstance(a, ast.Name) and (a.id in written or a.id in self.unversioned):
                    tmp = self.names.fresh(a.id + "_old")
                    self.emit(out, _assign(tmp, a), value)
                    a = ast.Name(id=tmp, ctx=ast.Load())
                safe.append(a)
            for t, a in zip(elts, safe):
                self.assign(t, a, out, s)
            return
        if isinstance(value, ast.Name) and self.env.get(value.id) in self.tuples:
            known = self.tuples[self.env[value.id]]
            if len(known) != len(elts):
                raise self.err(target, f"cannot unpack {len(known)} values into {len(elts)}")
            atoms = [clone(a) for a in known]
            for t, a in zip(elts, atoms):
                self.assign(t, a, out, s)
            return
        if isinstance(value, ast.Call) and all(isinstance(e, ast.Name) for e in elts):
            call = self.call(value, out)
            names = []
            for e in elts:
                names.append(self.target(e.id))
                self.owned.discard(names[-1])
            tgt = ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Store()) for n in names],
                            ctx=ast.Store())
            self.emit(out, ast.Assign(targets=[tgt], value=call), value)
            return
        src = self.atom(value, out)
        for i, t in enumerate(elts):
            item = ast.Subscript(value=clone(src), slice=ast.Constant(value=i),
                                 ctx=ast.Load())
            self.assign(t, ast.copy_location(item, t), out, s)

    def assign_subscript(self, target, value, out, s) -> None:
        base = target.value
        if not (isinstance(base, ast.Name) and base.id in self.resolver.locals):
            raise self.err(target, "assignment into an element of a non-local value",
                           "Copy it into a local array first.")
        if self.env.get(base.id, base.id) in self.tuples:
            raise self.err(target, "item assignment into a tuple")
        rhs = self.operand(value, out)   # L[k] = (a, b): the record gets a variable
        index = self.index(target.slice, out)
        store = ast.Subscript(value=ast.Name(id=self.env.get(base.id, base.id), ctx=ast.Load()),
                              slice=index, ctx=ast.Store())
        self.emit(out, ast.Assign(targets=[ast.copy_location(store, target)], value=rhs), target)

    def stmt_AugAssign(self, s, out):
        target = s.target
        if isinstance(target, ast.Name):
            current = self.env.get(target.id, target.id)
            binop = ast.copy_location(ast.BinOp(left=ast.Name(id=target.id, ctx=ast.Load()),
                                                op=s.op, right=s.value), s)
            if current in self.owned and target.id not in self.force_in_place:
                # Nothing else refers to the array: `x += v` is `x = x + v`.
                if target.id in self.unversioned:
                    self.rebound_augassign.add(target.id)
                self.assign_name(target.id, binop, out, s)
                return
            rhs = self.atom(s.value, out)
            node = ast.AugAssign(target=ast.Name(id=current, ctx=ast.Store()), op=s.op,
                                 value=rhs)
            # Python semantics: arrays are updated in place, numbers rebound.
            self.env[target.id] = current
            # A known tuple holding it holds the old number (or the same array): its
            # items are read from the tuple from now on, not from this name.
            for name, elts in list(self.tuples.items()):
                if any(isinstance(e, ast.Name) and e.id == current for e in elts):
                    del self.tuples[name]
            self.emit(out, node, s)
            return
        if isinstance(target, ast.Subscript):
            base = target.value
            if not (isinstance(base, ast.Name) and base.id in self.resolver.locals):
                raise self.err(target, "augmented assignment into a non-local value",
                               "Copy it into a local array first.")
            # x[i] += v  ->  t = x[i]; t2 = t + v; x[i] = t2 (the index is evaluated once)
            index = self.index(target.slice, out)
            item = ast.copy_location(ast.Subscript(value=self.load(base.id),
                                                   slice=clone(index),
                                                   ctx=ast.Load()), target)
            old = self.names.fresh(_stem(item, self) or "item")
            self.emit(out, _assign(old, item), target)
            rhs = self.atom(s.value, out)
            new = ast.copy_location(ast.BinOp(left=ast.Name(id=old, ctx=ast.Load()), op=s.op,
                                              right=rhs), s)
            value = self.names.fresh(_stem(new, self) or "t")
            self.emit(out, _assign(value, new), s)
            store = ast.Subscript(value=self.load(base.id), slice=index, ctx=ast.Store())
            self.emit(out, ast.Assign(targets=[ast.copy_location(store, target)],
                                      value=ast.Name(id=value, ctx=ast.Load()),
                                      type_comment=None), target)
            return
        raise self.err(target, "augmented assignment to an attribute is not supported",
                       "Keep the value in a local variable.")

    def stmt_If(self, s, out):
        test = self.test(s.test, out, "cond")
        body, orelse = [], []
        saved = self.origin
        owned = set(self.owned)   # what nothing else refers to holds per path
        self.block(s.body, body)
        owned_body, self.owned = self.owned, owned
        self.origin = saved
        self.block(s.orelse, orelse)
        self.owned &= owned_body
        self.origin = saved
        node = ast.If(test=test, body=body or [ast.copy_location(ast.Pass(), s)], orelse=orelse)
        self.emit(out, node, s)

    def stmt_While(self, s, out):
        if s.orelse:
            raise self.err(s, "while ... else is not supported", "Use a flag variable.")
        body = list(s.body)
        test = s.test
        if any(isinstance(n, ast.NamedExpr) or (isinstance(n, ast.Call) and
                                                 not self._library_call(n))
               for n in _walk_scope(test) + [test]):
            # `while (v := f(x)) > 0: ...` is `while True: if ...: pass else: break; ...`,
            # so the assignment (or a call) runs as a statement before each test.
            stop = ast.If(test=test, body=[ast.copy_location(ast.Pass(), s)],
                          orelse=[ast.copy_location(ast.Break(), s)])
            body = [ast.copy_location(stop, test)] + body
            test = ast.copy_location(ast.Constant(value=True), test)
        body = lift_jumps(body, (ast.Break, ast.Continue))
        body = _drop_trailing_continue(body)
        inner: List[ast.stmt] = []
        saved = self.origin
        entry = self.enter_loop(body)
        self.loop_depth += 1
        self.block(body, inner)
        self.loop_depth -= 1
        self.owned &= entry
        self.origin = saved
        node = ast.While(test=self.rename_loads(test),
                         body=inner or [ast.copy_location(ast.Pass(), s)], orelse=[])
        self.emit(out, node, s)

    def dict_loop(self, s: ast.For) -> Optional[ast.For]:
        """`for k, v in d.items()`, `for v in d.values()`, `for k in d.keys()` (and
        `for k in d` over a dict literal) as a loop over the keys, which carry no
        gradient, reading each value as `d[k]`."""
        it = s.iter
        method = None
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and \
                it.func.attr in ("items", "values", "keys") and not it.args and \
                not it.keywords:
            method, base = it.func.attr, it.func.value
        elif isinstance(it, ast.Name) and self.env.get(it.id, it.id) in self.dict_names:
            method, base = "keys", it
        if method is None:
            return None
        target, prefix = s.target, []
        if method == "keys":
            key = target
        elif method == "values":
            key = ast.Name(id=self.names.fresh("key"), ctx=ast.Store())
            prefix = [ast.Assign(targets=[target], value=ast.Subscript(
                value=clone(base), slice=ast.Name(id=key.id, ctx=ast.Load()), ctx=ast.Load()))]
        elif isinstance(target, ast.Tuple) and len(target.elts) == 2:
            key, value = target.elts
            if not isinstance(key, ast.Name):
                key = ast.Name(id=self.names.fresh("key"), ctx=ast.Store())
                prefix.append(ast.Assign(targets=[target.elts[0]],
                                         value=ast.Name(id=key.id, ctx=ast.Load())))
            prefix.append(ast.Assign(targets=[value], value=ast.Subscript(
                value=clone(base), slice=ast.Name(id=key.id, ctx=ast.Load()), ctx=ast.Load())))
        else:
            key = ast.Name(id=self.names.fresh("key"), ctx=ast.Store())
            pair = ast.Tuple(elts=[ast.Name(id=key.id, ctx=ast.Load()), ast.Subscript(
                value=clone(base), slice=ast.Name(id=key.id, ctx=ast.Load()), ctx=ast.Load())],
                ctx=ast.Load())
            prefix = [ast.Assign(targets=[target], value=pair)]
        for p in prefix:
            ast.copy_location(p, s)
            ast.fix_missing_locations(p)
        keys = ast.copy_location(ast.Call(func=ast.Name(id="_s2s_keys", ctx=ast.Load()),
                                          args=[clone(base)], keywords=[]), it)
        loop = ast.For(target=key, iter=keys, body=prefix + list(s.body), orelse=[],
                       type_comment=None)
        self.resolver.locals |= _assigned_names([loop])
        self.unversioned |= _assigned_names([loop])
        return ast.copy_location(loop, s)

    def stmt_For(self, s, out):
        if s.orelse:
            raise self.err(s, "for ... else is not supported", "Use a flag variable.")
        over_keys = self.dict_loop(s)
        if over_keys is not None:
            s = over_keys
        iterable = self.iterable(s.iter, out)
        # Python iterates over the object the header named; a body that rebinds the
        # name (`for r in acc: acc = r * w`) must not change what is iterated.
        rebound = _assigned_names(s.body) | _assigned_names([s.target])
        for node in _walk_scope(iterable) + [iterable]:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                    node.id in rebound and node.id in self.resolver.locals:
                held = self.names.fresh(f"{node.id}_iterated")
                self.emit(out, _assign(held, ast.Name(id=node.id, ctx=ast.Load())), s.iter)
                node.id = held
        body = lift_jumps(list(s.body), (ast.Break, ast.Continue))
        body = _drop_trailing_continue(body)
        target = self.loop_target(s.target)
        inner: List[ast.stmt] = []
        saved = self.origin
        entry = self.enter_loop(body + [ast.Assign(targets=[s.target], value=s.iter)])
        self.loop_depth += 1
        self.block(body, inner)
        self.loop_depth -= 1
        self.owned &= entry
        self.origin = saved
        node = ast.For(target=target, iter=iterable,
                       body=inner or [ast.copy_location(ast.Pass(), s)], orelse=[],
                       type_comment=None)
        self.emit(out, node, s)

    def enter_loop(self, body: List[ast.stmt]) -> Set[str]:
        """At a loop's head, a name the body assigns may hold what the previous
        iteration left, which another variable may share: not owned. Returns what
        is owned there (also after the loop, which may run zero times)."""
        self.owned -= _assigned_names(body)
        return set(self.owned)

    def loop_target(self, target):
        if isinstance(target, ast.Name):
            self.env[target.id] = target.id
            return ast.Name(id=target.id, ctx=ast.Store())
        if isinstance(target, (ast.Tuple, ast.List)):
            return ast.Tuple(elts=[self.loop_target(e) for e in target.elts], ctx=ast.Store())
        raise self.err(target, "loop targets must be names or tuples of names")

    def iterable(self, it, out):
        """range/zip/enumerate keep their call (the transform reads them); else an atom."""
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and \
                it.func.id == "_s2s_keys":
            from .. import runtime
            call = ast.Call(func=ast.Name(id=it.func.id, ctx=ast.Load()),
                            args=[self.atom(a, out) for a in it.args], keywords=[])
            call.s2s_callee = runtime.keys
            return ast.copy_location(call, it)
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and \
                it.func.id == "_s2s_backwards":
            call = ast.Call(func=ast.Name(id=it.func.id, ctx=ast.Load()),
                            args=[self.atom(a, out) for a in it.args], keywords=[])
            ok, obj = self.resolver.static(it.func)
            if ok:
                call.s2s_callee = obj
            return ast.copy_location(call, it)
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and \
                it.func.id in ("range", "zip", "enumerate", "reversed") and not it.keywords:
            ok, obj = self.resolver.static(it.func)
            if ok and obj is {"range": range, "zip": zip, "enumerate": enumerate,
                              "reversed": reversed}[it.func.id]:
                args = [self.iterable(a, out) if it.func.id in ("zip", "enumerate", "reversed")
                        else self.atom(a, out) for a in it.args]
                call = ast.Call(func=ast.Name(id=it.func.id, ctx=ast.Load()), args=args,
                                keywords=[])
                call.s2s_callee = obj
                return ast.copy_location(call, it)
        # `for t in [x, x ** 2]`: the literal gets a name, so that the items the loop
        # reads can hand their adjoints back to x and x ** 2.
        atom = self.operand(it, out)
        if isinstance(atom, ast.Name) and atom.id in self.resolver.locals | self.names.taken \
                and atom.id not in self.lists | self.tuple_names | self.dict_names:
            # Maybe a dict (an argument, an item of one): Python walks its keys. The
            # transform makes this a plain copy where the value is proven an array.
            from .. import runtime
            name = self.names.fresh(f"{atom.id}_items")
            self.resolver.locals.add(name)
            call = ast.Call(func=ast.Name(id="_s2s_loop_items", ctx=ast.Load()),
                            args=[atom], keywords=[])
            call.s2s_callee = runtime.loop_items
            self.emit(out, _assign(name, ast.copy_location(call, it)), it)
            return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), it)
        return atom

    def test(self, expr, out, stem) -> ast.expr:
        """A branch condition: non-differentiable, computed into a flag variable.

        Assignment expressions in it (`if (s := np.sum(x)) > 0:`) become statements
        before it, in evaluation order, so the value they bind keeps its gradient."""
        expr = self.hoist_walrus(expr, out)
        if isinstance(expr, ast.Name):
            return self.load(expr.id)
        if isinstance(expr, ast.Call):
            # `if h(x):` is a call like any other (its callee may be differentiated
            # or write into its arguments): the flag is its result.
            return self.atom(expr, out)
        name = self.names.fresh(stem)
        self.emit(out, _assign(name, self.condition(expr, out)), expr)
        return ast.Name(id=name, ctx=ast.Load())

    def condition(self, expr: ast.expr, out) -> ast.expr:
        """A comparison or and/or kept whole (it has no gradient). A single
        comparison's operands are computed first, as statements the analyses see;
        a call inside and/or or a chained comparison (evaluated only on some
        paths) to a user function is refused: it could write into its arguments."""
        if isinstance(expr, ast.Compare) and len(expr.comparators) == 1:
            left = self.operand(expr.left, out)
            right = self.operand(expr.comparators[0], out)
            node = ast.Compare(left=left, ops=list(expr.ops), comparators=[right])
            node.s2s_opaque = True
            return ast.copy_location(node, expr)
        for sub in _walk_scope(expr):
            if isinstance(sub, ast.Call) and not self._library_call(sub):
                raise self.err(sub, f"a call to {ast.unparse(sub.func)} inside a condition "
                                    f"that runs only on some paths",
                               "Call it in a statement of its own before the condition.")
        return self.rename_loads(expr)

    def _library_call(self, call: ast.Call) -> bool:
        """A call of NumPy, SciPy, math or a builtin, which leaves its arguments
        alone (unless given out=): anything else may be a user function."""
        if not _dotted(call.func) or self.resolver.is_local_chain(call.func) or \
                any(k.arg == "out" for k in call.keywords):
            return False
        ok, fn = self.resolver.static(call.func)
        module = (getattr(fn, "__module__", "") or "") if ok else ""
        if ok and isinstance(fn, np.ufunc):
            return True
        return ok and module.split(".")[0] in _LIBRARIES and callable(fn)

    def hoist_walrus(self, expr: ast.expr, out) -> ast.expr:
        """`(s := v)` -> a statement `s = v` emitted now and the name `s` in its place;
        a call to a user function -> a statement computing it, and its result.

        Only where Python always evaluates it: not inside the later operands of
        and/or, the branches of a conditional expression, or a nested scope."""
        if not any(isinstance(n, ast.NamedExpr) or (isinstance(n, ast.Call) and
                                                     not self._library_call(n))
                   for n in _walk_scope(expr) + [expr]):
            return expr

        def visit(node, always: bool):
            if isinstance(node, ast.NamedExpr):
                if not always:
                    raise self.err(node, "an assignment expression (:=) that runs only on "
                                         "some paths of the condition",
                                   "Assign the value in a statement before the condition.")
                value = visit(node.value, always)
                self.assign_name(node.target.id, value, out, node)
                return ast.copy_location(ast.Name(id=node.target.id, ctx=ast.Load()), node)
            if isinstance(node, _SCOPES + (ast.ListComp, ast.SetComp, ast.DictComp,
                                           ast.GeneratorExp)):
                return node
            if isinstance(node, ast.Call) and always and not self._library_call(node):
                # A user function called on every path: a statement of its own (its
                # result may carry a gradient; it may write into its arguments).
                return self.atom(node, out)
            if isinstance(node, ast.BoolOp):
                first, *rest = node.values
                node.values = [visit(first, always)] + [visit(v, False) for v in rest]
                return node
            if isinstance(node, ast.IfExp):
                node.test = visit(node.test, always)
                node.body, node.orelse = visit(node.body, False), visit(node.orelse, False)
                return node
            for field_name, value in ast.iter_fields(node):
                if isinstance(value, ast.AST):
                    setattr(node, field_name, visit(value, always))
                elif isinstance(value, list):
                    setattr(node, field_name, [visit(v, always) if isinstance(v, ast.AST)
                                               else v for v in value])
            return node
        return visit(clone(expr), True)

    def stmt_Break(self, s, out):
        self.emit(out, ast.Break(), s)

    def stmt_Continue(self, s, out):
        self.emit(out, ast.Continue(), s)

    # -- expressions -----------------------------------------------------------
    def atom(self, expr: ast.expr, out: List[ast.stmt]) -> ast.expr:
        """Reduce `expr` to a variable or constant, emitting statements for it."""
        if isinstance(expr, ast.Name):
            if expr.id in self.resolver.locals:
                return ast.copy_location(self.load(expr.id), expr)
            return ast.copy_location(ast.Name(id=expr.id, ctx=ast.Load()), expr)
        if isinstance(expr, ast.Constant):
            return expr
        if isinstance(expr, (ast.Tuple, ast.List)) and not any(
                isinstance(e, ast.Starred) for e in expr.elts):
            node = type(expr)(elts=[self.element(e, out) for e in expr.elts], ctx=ast.Load())
            return ast.copy_location(node, expr)
        if isinstance(expr, ast.Attribute) and not self.resolver.is_local_chain(expr):
            ok, _ = self.resolver.static(expr)
            if ok:
                node = clone(expr)
                node.s2s_static = True
                return node
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) and \
                isinstance(expr.operand, ast.Constant):
            return expr
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name) and \
                isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, int):
            known = self.tuples.get(self.env.get(expr.value.id, expr.value.id))
            if known is not None and -len(known) <= expr.slice.value < len(known):
                return clone(known[expr.slice.value])
        if isinstance(expr, ast.Dict) and all(k is not None for k in expr.keys):
            name = self.names.fresh("items")
            self.assign_name(name, expr, out, expr)
            return ast.copy_location(self.load(name), expr)
        if isinstance(expr, ast.Call) and self._output_count(expr) > 1:
            # `SinCos.apply(x)[0]`: the outputs get names, the tuple is a known one.
            name = self.names.fresh("outputs")
            self.assign_name(name, expr, out, expr)
            return ast.copy_location(self.load(name), expr)
        op = self.operation(expr, out)
        name = self.names.fresh(_stem(op, self) or "t")
        self.emit(out, _assign(name, op), expr)
        self._note_owned(name, op)
        return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), expr)

    def operation(self, expr: ast.expr, out: List[ast.stmt]) -> ast.expr:
        """One operation whose operands are atoms."""
        if isinstance(expr, (ast.Name, ast.Constant)) or is_atom(expr):
            return self.atom(expr, out)
        if isinstance(expr, ast.BinOp):
            left = self.operand(expr.left, out)
            right = self.operand(expr.right, out)
            return ast.copy_location(ast.BinOp(left=left, op=expr.op, right=right), expr)
        if isinstance(expr, ast.UnaryOp):
            if isinstance(expr.op, ast.Not):
                return self.rename_loads(expr)
            return ast.copy_location(ast.UnaryOp(op=expr.op,
                                                 operand=self.operand(expr.operand, out)), expr)
        if isinstance(expr, ast.Call):
            return self.call(expr, out)
        if isinstance(expr, ast.Subscript):
            if isinstance(expr.value, ast.Name) and \
                    self.env.get(expr.value.id, expr.value.id) in self.tuples and \
                    isinstance(expr.slice, ast.Constant):
                known = self.tuples[self.env.get(expr.value.id, expr.value.id)]
                return clone(known[expr.slice.value])
            base = self.atom(expr.value, out)
            index = self.index(expr.slice, out)
            return ast.copy_location(ast.Subscript(value=base, slice=index, ctx=ast.Load()), expr)
        if isinstance(expr, ast.Attribute):
            base = self.atom(expr.value, out)
            return ast.copy_location(ast.Attribute(value=base, attr=expr.attr, ctx=ast.Load()),
                                     expr)
        if isinstance(expr, (ast.Tuple, ast.List)):
            return self.atom(expr, out)
        if isinstance(expr, ast.IfExp):
            return self.ifexp(expr, out)
        if isinstance(expr, ast.Dict) and all(k is not None for k in expr.keys):
            return self.atom(expr, out)
        if isinstance(expr, (ast.ListComp, ast.GeneratorExp, ast.DictComp)):
            return self.comprehension(expr, out)
        if isinstance(expr, (ast.Compare, ast.BoolOp, ast.JoinedStr, ast.Dict, ast.Set,
                             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                             ast.Lambda)):
            node = self.rename_loads(expr)
            node.s2s_opaque = True
            return node
        if isinstance(expr, ast.NamedExpr):
            raise self.err(expr, "assignment expressions (:=) are not supported",
                           "Assign in a separate statement.")
        if isinstance(expr, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise self.err(expr, "generators and coroutines cannot be differentiated",
                           "Return a value instead of yielding it.")
        if isinstance(expr, ast.Starred):
            raise self.err(expr, "starred expressions are not supported here")
        raise self.err(expr, f"unsupported expression ({type(expr).__name__})")

    def comprehension(self, expr, out) -> ast.expr:
        """`[f(x) for x in xs if c]` (a generator expression alike, a dict
        comprehension into a dict) as the loop that builds it:

            items = []
            for x_1 in xs:
                if c:
                    items.append(f(x_1))

        The comprehension's variables get names of their own (they are local to it
        in Python), and the loop is normalised like any loop, so its items keep
        their gradients. A generator expression is built as a list: every consumer
        s2sgrad differentiates (sum, max, np.stack, ...) reads all of it."""
        mapping: Dict[str, str] = {}

        def rename(node):
            node = clone(node)
            for sub in [node, *_walk_scope(node)]:
                if isinstance(sub, ast.Name) and sub.id in mapping:
                    sub.id = mapping[sub.id]
            return node
        is_dict = isinstance(expr, ast.DictComp)
        name = self.names.fresh("entries" if is_dict else "items")
        self.resolver.locals.add(name)
        empty = ast.Dict(keys=[], values=[]) if is_dict else ast.List(elts=[], ctx=ast.Load())
        self.assign_name(name, ast.copy_location(empty, expr), out, expr)
        loops = []
        for gen in expr.generators:
            if gen.is_async:
                raise self.err(expr, "asynchronous comprehensions cannot be differentiated")
            iterable = rename(gen.iter)
            for n in name_nodes(gen.target):
                mapping[n.id] = self.names.fresh(n.id)
            loops.append((rename(gen.target), iterable, [rename(c) for c in gen.ifs]))
        target = ast.Name(id=name, ctx=ast.Load())
        if is_dict:
            inner: ast.stmt = ast.Assign(targets=[ast.Subscript(value=target,
                                                                slice=rename(expr.key),
                                                                ctx=ast.Store())],
                                         value=rename(expr.value))
        else:
            inner = ast.Expr(value=ast.Call(func=ast.Attribute(value=target, attr="append",
                                                               ctx=ast.Load()),
                                            args=[rename(expr.elt)], keywords=[]))
        body: List[ast.stmt] = [inner]
        for loop_target, iterable, conditions in reversed(loops):
            for c in reversed(conditions):
                body = [ast.If(test=c, body=body, orelse=[])]
            body = [ast.For(target=loop_target, iter=iterable, body=body, orelse=[],
                            type_comment=None)]
        loop = body[0]
        for node in [loop, *_walk_scope(loop)]:
            if isinstance(node, (ast.stmt, ast.expr)):
                ast.copy_location(node, expr)
        ast.fix_missing_locations(loop)
        assigned = _assigned_names([loop]) | set(mapping.values())
        self.resolver.locals |= assigned
        self.unversioned |= assigned
        saved = self.origin
        self.stmt(loop, out)
        self.origin = saved
        return ast.copy_location(self.load(name), expr)

    def builtin_reduction(self, expr: ast.Call, out) -> Optional[ast.expr]:
        """Builtin `sum(xs)`, `sum(xs, start)`, `max(xs)` and `min(xs)` over a list, a
        generator expression or an array's rows, as the loop Python runs:

            total = start                      best = xs[0]
            for item in xs:                    for item in xs[1:]:
                total = total + item               best = max(best, item)

        (max of two values is np.maximum's rule: ties split the gradient)."""
        if not (isinstance(expr.func, ast.Name) and expr.func.id in ("sum", "max", "min")):
            return None
        ok, fn = self.resolver.static(expr.func)
        if not ok or fn not in (sum, max, min) or any(isinstance(a, ast.Starred)
                                                      for a in expr.args):
            return None
        kind = expr.func.id
        start = None
        if kind == "sum":
            keywords = {k.arg: k.value for k in expr.keywords}
            if len(expr.args) == 2 and not keywords:
                start = expr.args[1]
            elif len(expr.args) == 1 and set(keywords) <= {"start"}:
                start = keywords.get("start")
            else:
                return None
        elif len(expr.args) != 1 or expr.keywords:
            return None   # max(a, b) has a rule; key= and default= are not differentiated
        arg = expr.args[0]
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and \
                arg.func.attr in ("items", "values", "keys") and not arg.args and \
                not arg.keywords:
            # sum(d.values()): the view is walked as a dict loop, into a list.
            value = self.names.fresh("value")
            arg = ast.copy_location(ast.ListComp(
                elt=ast.Name(id=value, ctx=ast.Load()),
                generators=[ast.comprehension(target=ast.Name(id=value, ctx=ast.Store()),
                                              iter=arg, ifs=[], is_async=0)]), arg)
            ast.fix_missing_locations(arg)
        items = self.operand(arg, out)
        acc = self.user_temp("total" if kind == "sum" else "best")
        item = self.user_temp("item")
        if kind == "sum":
            first: ast.expr = start if start is not None else ast.Constant(value=0)
            sequence: ast.expr = items
            step: ast.expr = ast.BinOp(left=ast.Name(id=acc, ctx=ast.Load()), op=ast.Add(),
                                       right=ast.Name(id=item, ctx=ast.Load()))
        else:
            first = ast.Subscript(value=clone(items), slice=ast.Constant(value=0),
                                  ctx=ast.Load())
            sequence = ast.Subscript(value=clone(items), slice=ast.Slice(
                lower=ast.Constant(value=1), upper=None, step=None), ctx=ast.Load())
            step = ast.Call(func=ast.Name(id=kind, ctx=ast.Load()),
                            args=[ast.Name(id=acc, ctx=ast.Load()),
                                  ast.Name(id=item, ctx=ast.Load())], keywords=[])
        statements = [
            ast.Assign(targets=[ast.Name(id=acc, ctx=ast.Store())], value=first),
            ast.For(target=ast.Name(id=item, ctx=ast.Store()), iter=sequence,
                    body=[ast.Assign(targets=[ast.Name(id=acc, ctx=ast.Store())], value=step)],
                    orelse=[], type_comment=None)]
        for st in statements:
            for node in [st, *_walk_scope(st)]:
                if isinstance(node, (ast.stmt, ast.expr)):
                    ast.copy_location(node, expr)
            ast.fix_missing_locations(st)
            saved = self.origin
            self.stmt(st, out)
            self.origin = saved
        return ast.copy_location(self.load(acc), expr)

    def ifexp(self, expr: ast.IfExp, out) -> ast.expr:
        """`a if c else b` becomes an if statement assigning one temporary."""
        test = self.test(expr.test, out, "cond")
        name = self.names.fresh("choice")
        body, orelse = [], []
        env, owned = dict(self.env), set(self.owned)
        body_atom = self.atom(expr.body, body)
        self.emit(body, _assign(name, body_atom), expr.body)
        self.env, owned_body, self.owned = dict(env), self.owned, owned
        else_atom = self.atom(expr.orelse, orelse)
        self.emit(orelse, _assign(name, else_atom), expr.orelse)
        self.env = env
        self.owned &= owned_body
        self.emit(out, ast.If(test=test, body=body, orelse=orelse), expr)
        self.unversioned.add(name)
        return ast.Name(id=name, ctx=ast.Load())

    # -- derivatives inside differentiated code (second order) ----------------------
    def derivative_call(self, expr: ast.Call, out) -> Optional[ast.Call]:
        """`s2sgrad.grad(f)(x)`, `s2sgrad.value_and_grad(f)(x)` or
        `functional.vjp(f, inputs, v, create_graph=True)`: a call to code that
        computes the derivative (higher.derived), which the compiler can
        differentiate again. A lambda's free variables become extra arguments."""
        func = expr.func
        detach = False
        if isinstance(func, ast.Call) and _dotted(func.func) and \
                not self.resolver.is_local_chain(func.func):
            ok, maker = self.resolver.static(func.func)
            if not ok or not (_is_api(maker, "grad") or _is_api(maker, "value_and_grad")):
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
        elif _dotted(func) and not self.resolver.is_local_chain(func):
            ok, maker = self.resolver.static(func)
            functional = (getattr(maker, "__module__", "") or "").endswith("functional")
            if not ok or not functional or not any(
                    _is_api(maker, k) for k in ("vjp", "jvp", "hvp", "vhp", "jacobian",
                                                "hessian")):
                return None
            bound = _bind_functional(expr, maker.__name__, self)
            base, extra = self.differentiated_function(bound["func"], expr)
            inputs = bound["inputs"]
            known = (self.tuples.get(self.env.get(inputs.id, inputs.id))
                     if isinstance(inputs, ast.Name) else None)
            items = list(inputs.elts) if isinstance(inputs, ast.Tuple) else \
                (list(known) if known is not None else [inputs])
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
            detach = not _static_true(bound.get("create_graph"), self)
        else:
            return None
        # The generated code calls the derivative's code directly, under a name bound
        # in its closure; free variables of a lambda are passed explicitly.
        name = self.names.fresh(fn.__name__)
        self.bindings[name] = fn
        args += [self.load(n) for n in extra]
        node = ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=keywords)
        node.s2s_callee = fn
        if detach:   # create_graph=False: values, not a graph the outer derivative sees
            from .. import runtime
            node = ast.Call(func=ast.Name(id="_s2s_detached", ctx=ast.Load()), args=[node],
                            keywords=[])
            node.s2s_callee = runtime.detached
        return ast.copy_location(node, expr)

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
                    value = ast.Name(id=name, ctx=ast.Load())
            elts.append(value)
        items = self.operand(ast.copy_location(ast.Tuple(elts=elts, ctx=ast.Load()), expr), out)
        from .. import runtime
        kind = self.names.fresh(cls.__name__)
        self.bindings[kind] = cls
        call = ast.Call(func=ast.Name(id="_s2s_record", ctx=ast.Load()),
                        args=[ast.Name(id=kind, ctx=ast.Load()), items], keywords=[])
        call.s2s_callee = runtime.record
        return ast.copy_location(call, expr)

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
            prefix.append(ast.Name(id=name, ctx=ast.Load()))
        keywords = {}
        for key, value in bound.kwargs.items():
            name = self.names.fresh(f"bound_{key}")
            self.bindings[name] = value
            keywords[key] = ast.Name(id=name, ctx=ast.Load())
        return self._call_of(bound.func, prefix, keywords, expr, [], out)

    def _call_of(self, fn, prefix, keywords, expr: ast.Call, free, out) -> ast.expr:
        name = self.names.fresh(fn.__name__ if fn.__name__ != "<lambda>" else "lambda")
        self.bindings[name] = fn
        args = prefix + [self.operand(a, out) for a in expr.args]
        given = {k.arg: self.operand(k.value, out) for k in expr.keywords}
        args += [self.load(n) for n in free]
        merged = [ast.keyword(arg=k, value=v) for k, v in {**keywords, **given}.items()]
        node = ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=merged)
        node.s2s_callee = fn
        return ast.copy_location(node, expr)

    def differentiated_function(self, node, where) -> Tuple[Callable, List[str]]:
        """The function object an inner derivative differentiates, and the outer
        variables it closes over (lifted into extra trailing parameters)."""
        if isinstance(node, ast.Lambda):
            params = {a.arg for a in node.args.posonlyargs + node.args.args}
            free = sorted({n.id for n in name_nodes(node.body)
                           if n.id not in params and n.id in self.resolver.locals})
            fn = lift_lambda(node, free, self.p.globals, self.p.filename)
            return fn, free
        if node is not None and _dotted(node) and not self.resolver.is_local_chain(node):
            ok, fn = self.resolver.static(node)
            if ok and callable(fn):
                return fn, []
        raise self.err(where, "the function differentiated here must be a function "
                              "defined with def (or a lambda) known when compiling",
                       "Refer to the function by its name, or write a lambda inline.")

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

    def index(self, index: ast.expr, out) -> ast.expr:
        """Atoms inside a subscript: slices keep their shape, bounds become atoms."""
        if isinstance(index, ast.Slice):
            parts = {k: (self.atom(getattr(index, k), out) if getattr(index, k) is not None
                         else None) for k in ("lower", "upper", "step")}
            return ast.copy_location(ast.Slice(**parts), index)
        if isinstance(index, ast.Tuple):
            return ast.copy_location(ast.Tuple(elts=[self.index(e, out) for e in index.elts],
                                               ctx=ast.Load()), index)
        return self.atom(index, out)

    def call(self, expr: ast.Call, out: List[ast.stmt]) -> ast.expr:
        func = expr.func
        derived = self.derivative_call(expr, out)
        if derived is not None:
            return derived
        folded = self.builtin_reduction(expr, out)
        if folded is not None:
            return folded
        if any(isinstance(a, ast.Starred) for a in expr.args) or any(
                k.arg is None for k in expr.keywords):
            ok, obj = self.resolver.static(func) if _dotted(func) and \
                not self.resolver.is_local_chain(func) else (False, None)
            node = self.rename_loads(expr)
            node.s2s_opaque = True
            if ok:
                node.s2s_callee = obj
            return node
        if isinstance(func, ast.Name) and func.id in self.lambdas:
            return self.lambda_call(expr, self.lambdas[func.id], out)
        if _dotted(func) and not self.resolver.is_local_chain(func):
            ok, obj = self.resolver.static(func)
            if not ok:
                raise self.err(func, f"name {ast.unparse(func)!r} is not defined",
                               "Define it before calling the differentiated function.")
            bound = _user_bound_call(obj)
            if bound is not None:
                return self.bound_call(expr, bound, out)
            if isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields"):
                return self.record(expr, obj, out)
            rule = registry.lookup_function(obj)
            opaque = rule is None and not registry.is_nondiff(obj) and \
                not registry.is_constructor(obj)
            args, keywords = self.rule_arguments(rule, expr.args, expr.keywords, out,
                                                 pack=opaque)
            node = ast.Call(func=clone(func), args=args, keywords=keywords)
            node.s2s_callee = obj
            return ast.copy_location(node, expr)
        if isinstance(func, ast.Attribute):
            base = self.atom(func.value, out)
            rule = registry.REGISTRY.methods.get(func.attr)
            args, keywords = self.rule_arguments(rule, expr.args, expr.keywords, out,
                                                 skip_first=True)
            if func.attr in ("append", "insert", "extend"):
                # xs.append((a, b)): the item gets a variable of its own, so that its
                # adjoint (the list's last cotangent) is unpacked into a's and b's.
                args = [self.operand(a, out) for a in expr.args]
            method = ast.Attribute(value=base, attr=func.attr, ctx=ast.Load())
            node = ast.Call(func=ast.copy_location(method, func), args=args, keywords=keywords)
            node.s2s_method = func.attr
            return ast.copy_location(node, expr)
        # Calling a local variable or the result of an expression.
        callee = self.atom(func, out)
        args = [self.operand(a, out) for a in expr.args]
        keywords = [ast.keyword(arg=k.arg, value=self.operand(k.value, out))
                    for k in expr.keywords]
        return ast.copy_location(ast.Call(func=callee, args=args, keywords=keywords), expr)


def _lambdas_bound_once(fdef: ast.FunctionDef, params: Set[str]) -> Dict[str, ast.Lambda]:
    counts: Dict[str, int] = {}
    lambdas: Dict[str, ast.Lambda] = {}
    for node in _walk_scope(fdef):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            counts[node.id] = counts.get(node.id, 0) + 1
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Lambda):
            lambdas[node.targets[0].id] = node.value
    return {n: lam for n, lam in lambdas.items() if counts.get(n) == 1 and n not in params}


def _user_bound_call(obj):
    """What a bound method of an instance, a callable instance or a partial of a
    user function runs (compiler.callables), or None (plain functions, library
    callables, classmethods, Function.apply, derivatives)."""
    if isinstance(obj, (types.FunctionType, type)) or not callable(obj):
        return None
    if isinstance(obj, types.MethodType) and isinstance(obj.__self__, type):
        return None   # a classmethod (Function.apply among them)
    bound = bound_call(obj)
    if bound is None or getattr(bound.func, "__s2sgrad_derived__", None) is not None:
        return None
    module = (getattr(bound.func, "__module__", "") or "").split(".")[0]
    if module in ("numpy", "scipy", "s2sgrad"):
        return None
    return bound


def _header_loads(s: ast.stmt) -> Set[str]:
    """Names a statement reads itself (a compound statement: its test or iterable)."""
    part = s.test if isinstance(s, (ast.If, ast.While)) else \
        s.iter if isinstance(s, ast.For) else s
    return {n.id for n in name_nodes(part) if isinstance(n.ctx, ast.Load)}


def _read_after(facts: AliasFacts, body: List[ast.stmt], name: str, write: ast.stmt) -> bool:
    """May `name` be read once `write` has run (later in the code, by the write itself,
    or anywhere in a loop that encloses the write)?"""
    position, loops = facts.where.require(write)
    for s in _walk_scope(ast.Module(body=body, type_ignores=[])):
        if not isinstance(s, ast.stmt) or s not in facts.where or \
                name not in _header_loads(s):
            continue
        p, enclosing = facts.where.require(s)
        if p >= position or loops & enclosing:
            return True
    return False


def _snapshot_definitions(body: List[ast.stmt], name: str) -> None:
    """Make every binding of `name` a copy (`s2s_snapshot`; loop targets: the
    item the transform binds them to)."""
    for s in _walk_scope(ast.Module(body=body, type_ignores=[])):
        if isinstance(s, ast.Assign) and any(n.id == name for t in s.targets
                                             for n in name_nodes(t)
                                             if isinstance(n.ctx, ast.Store)):
            s.s2s_snapshot = True
        elif isinstance(s, ast.For) and name in {n.id for n in name_nodes(s.target)}:
            s.s2s_snapshot_targets = getattr(s, "s2s_snapshot_targets", frozenset()) | {name}


def _written_in_place(facts: AliasFacts) -> Set[str]:
    out: Set[str] = set()
    for name, stmt in facts.writes:
        out.add(name)
        out |= facts.affected(name, stmt)
    return out


_LIBRARIES = ("numpy", "scipy", "s2sgrad", "math", "builtins")


def _is_api(obj, name: str) -> bool:
    module = getattr(obj, "__module__", "") or ""
    return module.startswith("s2sgrad") and getattr(obj, "__name__", None) == name


def _dotted(node: ast.expr) -> bool:
    """A plain dotted name such as np.linalg.norm (no calls or subscripts inside)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _is_sequence_call(obj) -> bool:
    rule = registry.lookup_function(obj) if obj is not None else None
    return bool(rule and rule.sequence)


def _static_true(node: Optional[ast.expr], norm) -> bool:
    """Whether a create_graph argument is True, known when compiling (absent: False)."""
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value
    ok, value = norm.resolver.static(node) if _dotted(node) else (False, None)
    if ok and isinstance(value, bool):
        return value
    raise norm.err(node, "create_graph must be True or False when the code is compiled",
                   "Write create_graph=True (the result is differentiated further) or "
                   "False (it is a constant to the outer derivative).")


def _bind_functional(expr: ast.Call, maker: str, norm) -> dict:
    """The arguments of a functional.<maker> call, by torch's parameter names."""
    if maker in ("jacobian", "hessian"):
        names = ["func", "inputs", "create_graph", "strict"]
    else:
        names = ["func", "inputs", "v", "create_graph", "strict"]
    bound = dict(zip(names, expr.args))
    for k in expr.keywords:
        bound[k.arg] = k.value
    if "func" not in bound or "inputs" not in bound:
        raise norm.err(expr, f"functional.{maker} needs func and inputs")
    return bound


def _assign(name: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value,
                      type_comment=None)


def _loads(node: ast.AST) -> Set[str]:
    return {n.id for n in name_nodes(node) if isinstance(n.ctx, ast.Load)}


def _is_docstring(s: ast.stmt) -> bool:
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and \
        isinstance(s.value.value, str)


def _drop_trailing_continue(stmts):
    if stmts and isinstance(stmts[-1], ast.Continue):
        stmts = stmts[:-1]
    for s in stmts:
        if isinstance(s, ast.If):
            s.body = _drop_trailing_continue(s.body) or [ast.copy_location(ast.Pass(), s)]
            s.orelse = _drop_trailing_continue(s.orelse)
    return stmts


def _is_fresh(op: ast.expr, norm: "_Normalizer") -> bool:
    """Does `op` always produce a new object (so in-place updates alias nothing)?"""
    if isinstance(op, (ast.BinOp, ast.UnaryOp)):
        return True
    if isinstance(op, ast.Call):
        callee = getattr(op, "s2s_callee", None)
        if callee is not None:
            if registry.returns_an_argument(callee):
                return False
            if registry.is_constructor(callee):
                return True
            rule = registry.lookup_function(callee)
            return bool(rule and not rule.view)
        method = getattr(op, "s2s_method", None)
        if method == "copy":
            return True
    return False


def _stem(op: ast.expr, norm: "_Normalizer") -> str:
    """A readable name for the value `op` computes."""
    def part(a):
        if isinstance(a, ast.Name):
            return a.id
        if isinstance(a, ast.Constant) and isinstance(a.value, (int, float)) and \
                not isinstance(a.value, bool):
            return str(a.value).replace(".", "_").replace("-", "m")
        return None

    if isinstance(op, ast.BinOp):
        word = _OP_WORDS.get(type(op.op), "op")
        left, right = part(op.left), part(op.right)
        if left and right and len(left) + len(right) + len(word) + 2 <= 18:
            return f"{left}_{word}_{right}"
        return f"{left}_{word}" if left and len(left) <= 12 else word
    if isinstance(op, ast.UnaryOp):
        word = _UNARY_WORDS.get(type(op.op), "op")
        operand = part(op.operand)
        return f"{word}_{operand}" if operand else word
    if isinstance(op, ast.Call):
        func = op.func
        fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "call")
        if fname.startswith("_s2s_"):  # a temporary named after a helper is not a helper
            fname = fname[len("_s2s_"):]
        if getattr(op, "s2s_method", None):
            base = part(func.value)
            return f"{base}_{fname}" if base else fname
        if fname == "apply" and isinstance(func, ast.Attribute):
            cls = getattr(func.value, "id", None) or getattr(func.value, "attr", "apply")
            fname = re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower()
            fname = re.sub(r"_function$", "", fname) or "apply"
        first = part(op.args[0]) if op.args else None
        return f"{fname}_{first}" if first and len(first) <= 10 else fname
    if isinstance(op, ast.Subscript):
        base = part(op.value) or "item"
        idx = part(op.slice)
        return f"{base}_{idx}" if idx else f"{base}_item"
    if isinstance(op, ast.Attribute):
        base = part(op.value) or "attr"
        return f"{base}_{op.attr}"
    if isinstance(op, ast.Compare):
        return "cmp"
    return "t"
