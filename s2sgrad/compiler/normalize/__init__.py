"""Pass 2 — normalise: one operation per statement, SSA names where possible.

After this pass every differentiable statement has the form
``name = op(atom, ...)`` (or ``a, b = call(...)`` for several results), where an
atom is a variable or a constant, and the function has exactly one ``return``,
its last statement. Temporaries are named after what they hold (``sin_x``,
``W_at_h``) and a user variable assigned again in straight-line code gets a new
version (``x``, ``x_1``), so later passes see each value under its own name.
Variables assigned inside branches or loops keep one name; the transform saves
their overwritten values.

Every statement records the user's statement it came from (``FunctionFacts.note_origin``) for
error messages and for the comments of the generated adjoint.
"""
from __future__ import annotations

import ast
import types
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set, Tuple

from ...errors import InternalError, error_at, guard_fields
from ..aliases import AliasFacts, resized_while_walked
from ..facts import FunctionFacts
from ..hoist import hoist_invariants
from ..names import (
    NameRegistry,
    assign_node,
    clone,
    copy_location,
    name_node,
    name_nodes,
    names_in,
    walk_values,
)
from ..parse import ParsedFunction
from ..resolve import Resolver
from ..returns import returns_new
from .calls import CallRules
from .context_blocks import unwrap_context_blocks
from .control import ControlRules
from .expressions import ExpressionRules
from .fused import fuse_reductions
from .local_imports import lift_local_imports
from .loop_else import desugar_loop_else
from .scope import (
    SCOPES,
    Readers,
    assigned_in_compound,
    assigned_names,
    defs_bound_once,
    derivatives_bound_once,
    ends_in_jump,
    has,
    has_augmented_assignment,
    is_docstring,
    lambdas_bound_once,
    lift_jumps,
    names_written_in_place,
    read_after,
    read_only_lists,
    scope_statements,
    snapshot_definitions,
    stored_in_containers,
    walk_scope,
)
from .special_calls import SpecialCalls
from .statements import ItemUpdate, StatementRules
from .static_branches import prune_static_branches
from .sugar import desugar, eager_generator


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
    # Helpers whose bodies were inlined (normalize.helper_inline): the pair rests on
    # their code too, and is kept in memory only.
    inlined: List[Callable] = field(default_factory=list)
    # What the passes of this compile note about its nodes (normalise's resolutions
    # of names and calls, statements' guards and copies, ...).
    facts: FunctionFacts = field(default_factory=FunctionFacts)

    @property
    def all_params(self) -> List[str]:
        """The positional parameters and then the keyword-only ones (never
        differentiated, but bound by the call like the others)."""
        return self.params + [a.arg for a in self.node.args.kwonlyargs]


def normalize(parsed: ParsedFunction) -> NormalForm:
    return _Normalizer(parsed).run()


class _Normalizer:
    """The pass's state and driver; what it does to statements, control flow,
    expressions and calls are its parts (`self.statements`, `self.control`,
    `self.expressions`, `self.calls`, `self.special`), each in a module of its own."""

    def __init__(self, parsed: ParsedFunction):
        self.statements = StatementRules(self)
        self.control = ControlRules(self)
        self.expressions = ExpressionRules(self)
        self.calls = CallRules(self)
        self.special = SpecialCalls(self)
        self.p = parsed
        self.facts = FunctionFacts()   # what this compile's passes note about its nodes
        fdef = parsed.node
        self.params = [a.arg for a in fdef.args.posonlyargs + fdef.args.args]
        self.all_params = set(self.params) | {a.arg for a in fdef.args.kwonlyargs}
        self._check_signature(fdef)
        # Keyword-only parameters are never differentiated, but they are locals: a
        # global of the same name must not stand in for them.
        kwonly = {a.arg for a in fdef.args.kwonlyargs}
        scope = walk_scope(fdef)   # (one walk for the questions below)
        if any(isinstance(s, SCOPES) for s in fdef.body):   # (whose own names count too)
            assigned = assigned_names(fdef.body)
        else:
            assigned = {n.id for n in scope if n.__class__ is ast.Name and
                        isinstance(n.ctx, (ast.Store, ast.Del))}
        local = set(self.params) | kwonly | assigned
        for node in scope:
            if isinstance(node, (ast.For, ast.comprehension)):
                local |= {n.id for n in name_nodes(node.target)}
        closure = parsed.closure
        if parsed.statics:   # parameters the caller binds to a function (driver)
            bound = {n for n in parsed.statics if n not in assigned}
            local -= bound
            closure = dict(closure)
            closure.update((n, types.CellType(parsed.statics[n])) for n in bound)
        self.resolver = Resolver(parsed.globals, closure, local)
        # A temporary never takes the name of the module's globals or the closure's
        # cells, read in the function or not: the resolver would read it as theirs
        # (`tanh = np.tanh(t)` beside `from numpy import *`, then `e1 = tanh` bound
        # e1 to the function np.tanh).
        self.names = NameRegistry(names_in(fdef) | local | set(parsed.globals) |
                                  set(closure))
        self._check_reserved(fdef)
        self.unversioned: Set[str] = set()
        self.user_names: Set[str] = set(local)
        # Temporaries a list, tuple or dict literal holds (`rows = (A[0], A[1])`, the
        # inner tuple of `[(a, b)]`) -> the variable of the literal: user data under a
        # name of ours, which an in-place write must not change unseen.
        self.held_by: Dict[str, str] = {}
        self.force_in_place: Set[str] = set()
        self.rebound_augassign: Set[str] = set()
        # `L[i] += v` written `t = L[i]; L[i] = t + v`, recorded for _protect_item_updates.
        self.item_updates: List[ItemUpdate] = []
        self.lists: Set[str] = set()
        self.tuple_names: Set[str] = set()   # names bound to tuple literals
        self.read_only_lists = read_only_lists(fdef)   # ... and list literals read as ones
        self.dict_names: Set[str] = set()    # names bound to dict literals
        self.bindings: Dict[str, Callable] = {}   # names the generated code must see
        # Local names bound once to a lambda: calls of them are calls of the lambda.
        self.lambdas: Dict[str, ast.Lambda] = lambdas_bound_once(scope, set(self.params)) \
            if "lambda" in parsed.source else {}
        # ... and to s2sgrad.grad(f) or value_and_grad(f): a call of one is that derivative's.
        self.derivative_makers: Dict[str, ast.Call] = derivatives_bound_once(
            scope, set(self.params), self.resolver) if "grad" in parsed.source else {}
        self.lifted_defs: Dict[str, Tuple[Callable, List[str]]] = {}
        # Local names bound to functools.partial(f, ...): (f, its arguments as
        # variables of their own, its keywords); a call of the name calls f.
        self.partials: Dict[str, Tuple[ast.expr, List[ast.expr], List[ast.keyword]]] = {}
        # ... names that held one in a branch or loop body: after it, which is unknown.
        self.partials_unsure: Set[str] = set()
        # ... and to a nested def: calls of it are calls of the def, lifted.
        self.local_defs: Dict[str, ast.FunctionDef] = \
            defs_bound_once(fdef.body, scope, set(self.params)) \
            if any(isinstance(n, ast.FunctionDef) for n in scope) else {}
        self.env: Dict[str, str] = {p: p for p in self.params + sorted(kwonly)}
        self.tuples: Dict[str, List[ast.expr]] = {}
        self.owned: Set[str] = set()
        self.origin: Optional[ast.stmt] = None
        self.loop_depth = 0
        self.inlined: List[Callable] = []      # helpers inlined (normalize.helper_inline)
        self.inlining: Set[Callable] = set()   # ... those being inlined now

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
        if "_s2s_" not in self.p.source:
            return  # (no name the user wrote can have the prefix: no walk)
        for node in walk_values(fdef):
            name = getattr(node, "id", None) or getattr(node, "arg", None)
            if isinstance(name, str) and name.startswith("_s2s_"):
                raise error_at(node, f"the name {name!r} uses s2sgrad's reserved prefix _s2s_",
                               self.p, "Rename the variable.")

    def emit(self, out: List[ast.stmt], stmt: ast.stmt, at: ast.AST) -> ast.stmt:
        # A node the normaliser made has no position: the user's statement gives one.
        copy_location(stmt, at if getattr(at, "lineno", None) else self.origin)
        self.facts.note_origin(stmt, self.origin)
        out.append(stmt)
        if self.owned:   # a container holding an array: `x += v` must update it in place
            self.owned -= stored_in_containers(stmt)
        return stmt

    def load(self, name: str) -> ast.Name:
        return name_node(self.env.get(name, name))

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
        for sub in walk_scope(expr) + [expr]:
            if isinstance(sub, ast.NamedExpr):
                raise self.err(sub, "an assignment expression (:=) here is not supported",
                               "Assign the value in a statement of its own first.")
        expr = clone(expr)
        bound: Set[str] = set()
        for sub in walk_values(expr):
            if isinstance(sub, (ast.Lambda, ast.comprehension)):
                target = sub.args if isinstance(sub, ast.Lambda) else sub.target
                bound |= names_in(target)
        for sub in walk_values(expr):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in bound:
                sub.id = self.env.get(sub.id, sub.id)
        return expr

    # -- driver ----------------------------------------------------------------
    def run(self) -> NormalForm:
        if self.p.tree_used:
            raise InternalError(f"the parsed tree of {self.p.name} was normalised already "
                                f"(in place): parse the function again")
        fdef = self.p.node
        body = [s for s in fdef.body if not is_docstring(s)]
        collected = eager_generator(body, self.names.fresh("yielded")) \
            if self.p.is_generator else None
        if collected is not None:   # a generator function: what it yields, as a list
            body = collected
            self.resolver.locals.add(collected[0].targets[0].id)
        imported = lift_local_imports(body, self.p.globals.get("__package__"),
                                      self.err)
        if imported is not None:   # (a copy without the imports; their names bound)
            body, objects, facts = imported
            for name, value in objects.items():
                self.resolver.locals.discard(name)
                self.resolver.bound[name] = self.bindings[name] = value
                self.names.taken.add(name)
            self.resolver.facts += facts
        decided = prune_static_branches(body, self.resolver)   # (a copy, where one is)
        body = decided if decided is not None else body
        unwrapped = unwrap_context_blocks(body, self.resolver)   # (a copy, where one is)
        body = unwrapped if unwrapped is not None else body
        flagged = desugar_loop_else(body, self.names)   # (a copy, where a loop has else)
        body = flagged if flagged is not None else body
        plain = desugar(body, self.resolver)   # (a copy, where there is sugar to remove)
        body = self._lift_returns(plain if plain is not None else body)
        self.unversioned = assigned_in_compound(body)
        self.resolver.locals |= assigned_names(body)
        pristine = body   # never changed: a round that may be redone normalises a copy
        # Only an augmented assignment can make a round be redone (see below): without
        # one, the one round may rewrite the parser's tree itself, when it is ours.
        in_place = self.p.own_tree and not has_augmented_assignment(pristine)
        self.p.tree_used = in_place
        state = (set(self.names.taken), dict(self.env))
        while True:
            out: List[ast.stmt] = []
            self.statements.block(pristine if in_place else clone(pristine), out)
            out = fuse_reductions(out, self.facts)   # (softmax & co. written out: one call)
            aliases = AliasFacts(out, self.resolver.locals | self.names.taken,
                                 self.lists | self.dict_names, self.facts.exprs,
                                 self.tuple_names, returns_new)
            redo = {u for u in self.rebound_augassign if aliases.shared_with_user(u,
                                                                               self.user_names)}
            if not redo - self.force_in_place:
                break
            if in_place:
                raise InternalError("normalise must redo a round it did in place")
            # `x += v` was rewritten as `x = x + v`, but x shares memory with another
            # variable: keep the in-place update (and let the alias check judge it).
            self.force_in_place |= redo
            self.names.taken, self.env = set(state[0]), dict(state[1])
            self.tuples, self.owned, self.lists = {}, set(), set()
            self.tuple_names, self.dict_names = set(), set()
            self.rebound_augassign = set()
            self.item_updates = []
        self._protect_in_place_writes(aliases, out)
        self._protect_item_updates(aliases, out)
        for loop, (write, seq) in resized_while_walked(aliases, out).items():
            # (refused by the transforms where the loop does not walk the list itself)
            self.facts.stmts.note(loop, resized_by=write, walked=seq)
        out = hoist_invariants(out, self.user_names, aliases)
        new = ast.FunctionDef(name=fdef.name, args=clone(fdef.args), body=out,
                              decorator_list=[], returns=None, type_comment=None)
        copy_location(new, fdef)
        new.end_lineno, new.end_col_offset = fdef.end_lineno, fdef.end_col_offset
        last = out[-1] if out else None
        result = (last.value.id if isinstance(last, ast.Return)
                  and isinstance(last.value, ast.Name) else None)
        return NormalForm(self.p, new, self.names, self.resolver, self.params, result,
                          lists=set(self.lists), tuples=set(self.tuple_names),
                          dicts=set(self.dict_names),
                          written_in_place=names_written_in_place(aliases),
                          bindings=dict(self.bindings), facts=self.facts,
                          inlined=list(self.inlined))

    def _protect_in_place_writes(self, aliases: AliasFacts, body: List[ast.stmt]) -> None:
        """User variables that would see an in-place write are an error; temporaries
        that would see it are copied when computed (`StmtFact.snapshot`)."""
        readers = Readers(aliases, body)
        copies: Dict[Tuple[str, str], List[ast.Assign]] = {}   # `name = other` statements
        for node in walk_scope(ast.Module(body=body, type_ignores=[]), statements_only=True):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Name):
                copies.setdefault((node.targets[0].id, node.value.id), []).append(node)
        for name, stmt in aliases.writes:
            for other in sorted(aliases.affected(name, stmt)):
                # (A parameter is read after the call too: by the caller.)
                seen = other in self.user_names or other in self.held_by
                if seen and other not in self.all_params and \
                        not read_after(aliases, readers, other, stmt):
                    # Nothing reads `other` once the write has run: giving it its own
                    # copy where it is bound changes nothing the program can see.
                    snapshot_definitions(body, other, self.facts.stmts, for_adjoint=True)
                    continue
                if seen:
                    line = _defined_line(aliases, other)
                    holder = other
                    while holder not in self.user_names and holder in self.held_by:
                        holder = self.held_by[holder]
                    what = f"'{other}'" if other in self.user_names else \
                        f"what '{holder}' holds" if holder in self.user_names else \
                        "what a list or tuple literal holds"
                    message = (f"in-place update of '{name}' also changes {what}{line}, "
                               f"which shares memory with it")
                    hint = (f"Give '{name}' its own array where it is assigned (for example "
                            f"{name} = {other}.copy()), or compute a new value instead of "
                            f"updating it in place.") if other in self.user_names else (
                        f"Put a copy into the container ({name}.copy(), or of the slice "
                        f"taken from it), or compute a new value instead of updating "
                        f"'{name}' in place.")
                    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                        # `s = a; s += v` is fine for numbers (rebinding): check at run
                        # time that s is not an array shared with a.
                        error = self.err(stmt, message, hint)
                        self.facts.stmts.note(stmt, guard=guard_fields(error))
                        continue
                    raise self.err(stmt, message, hint)
                where = aliases.defined_at.get(other)
                if where is not None:
                    known = self.facts.stmts.of(where)
                    # (a temporary read only before the write: the copy is the adjoint's)
                    for_adjoint = (not known.snapshot or known.snapshot_for_adjoint) and \
                        not read_after(aliases, readers, other, stmt)
                    self.facts.stmts.note(where, snapshot=True, snapshot_for_adjoint=for_adjoint)
                # `tmp = v / v; v = tmp; v += 0.3`: v must get its own copy, or the
                # update changes tmp (which the adjoint reads) through it.
                for node in copies.get((name, other), ()):
                    self.facts.stmts.note(node, snapshot=True, snapshot_for_adjoint=False)

    def _protect_item_updates(self, aliases: AliasFacts, body: List[ast.stmt]) -> None:
        """`L[i] += v` updates the array L[i] holds in place, in Python; the normal
        form assigns a new one (`L[i] = t + v`), which is the same only where no
        variable that is read later holds that array too (a parameter: the caller
        reads it). Where one may (what shares memory with the item and not with the
        container as a whole, whose sharers the store's own check covers): refused,
        at compile time, or where the container is a known list or dict, when the
        update runs and finds an array there (its other items may be numbers, which
        `+=` replaces: `state = {"h": x, "n": 0}; state["n"] += 1`)."""
        readers = None
        for update in self.item_updates:
            old, container, stmt = update.old, update.container, update.store
            others = aliases.affected(old, stmt) - aliases.affected(container, stmt) - \
                {old, container}
            for other in sorted(others):
                if other not in self.user_names and other not in self.all_params:
                    continue
                if other not in self.all_params:
                    readers = readers or Readers(aliases, body)
                    if not read_after(aliases, readers, other, stmt):
                        continue
                error = self.err(stmt, f"in-place update of an item of '{update.shown}' "
                                 f"also changes '{other}'{_defined_line(aliases, other)}, "
                                 f"which holds the same array",
                                 f"Put a copy into '{update.shown}' ({other}.copy()), or "
                                 f"assign a new value: {update.shown}[i] = "
                                 f"{update.shown}[i] + v.")
                if update.guard is None:
                    raise error
                update.guard.args[2:] = [ast.Constant(value=f)
                                         for f in (True, *guard_fields(error))]
                break

    def _lift_returns(self, body: List[ast.stmt]) -> List[ast.stmt]:
        """Give the function a single final `return`, moving early returns' tails."""
        returns = [n for s in body for n in [s, *scope_statements(s)]
                   if isinstance(n, ast.Return)]
        if len(returns) == 1 and body and body[-1] is returns[0]:
            return body
        if not returns:
            none = ast.Return(value=ast.Constant(value=None))
            copy_location(none, body[-1] if body else self.p.node)
            return body + [none]
        self.result_name = self.names.fresh("result")
        self.flag_name = None
        body = self._returns_out_of_loops(body, in_loop=False)
        if not ends_in_jump(body):
            # Falling off the end returns None: a return of its own *before* the tails
            # are lifted, so that it lands on the paths that reach the end only (after
            # lifting, `if returned: return result` has it in its else branch; appended
            # after, it overwrote the result of every path).
            body = body + [copy_location(ast.Return(value=ast.Constant(value=None)),
                                         body[-1])]
        body = lift_jumps(body, (ast.Return,))
        body = self._returns_to_assignments(body)
        final = ast.Return(value=name_node(self.result_name))
        copy_location(final, returns[-1])
        return body + [final]

    def _returns_out_of_loops(self, stmts, in_loop):
        """`return e` inside a loop becomes: result = e; flag = True; break."""
        out = []
        for s in stmts:
            if isinstance(s, (ast.For, ast.While)) and has(s, ast.Return):
                if s.orelse:
                    raise self.err(s, "a loop with an else clause that contains return")
                if self.flag_name is None:
                    self.flag_name = self.names.fresh("returned")
                s.body = self._returns_out_of_loops(s.body, in_loop=True)
                init = copy_location(assign_node(self.flag_name, ast.Constant(False)), s)
                after_body = ([ast.Break()] if in_loop else
                              [ast.Return(value=name_node(self.result_name))])
                after = ast.If(test=name_node(self.flag_name),
                               body=[copy_location(b, s) for b in after_body], orelse=[])
                out += [init, s, copy_location(after, s)]
            elif isinstance(s, ast.Return) and in_loop:
                value = s.value or ast.Constant(value=None)
                out += [copy_location(assign_node(self.result_name, value), s),
                        copy_location(assign_node(self.flag_name, ast.Constant(True)), s),
                        copy_location(ast.Break(), s)]
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
                    out.append(copy_location(assign_node(self.result_name, value), s))
            elif isinstance(s, ast.If):
                s.body = self._returns_to_assignments(s.body) or [copy_location(ast.Pass(), s)]
                s.orelse = self._returns_to_assignments(s.orelse)
                out.append(s)
            else:
                out.append(s)
        return out


def _defined_line(aliases: AliasFacts, name: str) -> str:
    """` (line N)`: where `name` is bound, for a refusal's message ('' if not known)."""
    lineno = getattr(aliases.defined_at.get(name), "lineno", None)
    return f" (line {lineno})" if lineno is not None else ""
