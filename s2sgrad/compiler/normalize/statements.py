"""Statements in normal form: expression statements, returns, assignments
(names, tuples, subscripts, augmented) and the operands they need.
"""
from __future__ import annotations

import ast
from typing import Dict, List

from ..names import RESERVED_PREFIX, assign_node, clone, copy_location, name_node, name_nodes
from . import spelled
from .scope import is_atom, is_docstring, is_fresh, loads, output_count, readable_stem


class StatementRules:
    """The normaliser's statements (a part of `_Normalizer`)."""

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
            "FunctionDef": "Define the nested function once, with a name nothing else "
                           "binds (or at module level); s2sgrad differentiates calls "
                           "to it.",
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

    def stmt_FunctionDef(self, s, out):
        """A nested def runs nothing where it stands: its calls are calls of it,
        lifted (CallRules.def_call). One that is not bound once is refused."""
        known = self.local_defs.get(s.name)
        if known is None or (known.lineno, known.col_offset) != (s.lineno, s.col_offset):
            raise self.unsupported_stmt(s)   # (the tree may be a copy: by position)

    def stmt_Expr(self, s, out):
        if is_docstring(s):
            return
        value = s.value
        if isinstance(value, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise self.err(s, "generators and coroutines cannot be differentiated",
                           "Return a value instead of yielding it.")
        if isinstance(value, ast.Call):
            if spelled.extend_as_appends(self, s, value, out):
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
        elif is_atom(value, self.facts.exprs):
            ret = ast.Return(value=self.atom(value, out))
        else:
            name = self.names.fresh("result")
            self.emit(out, assign_node(name, self.operation(value, out)), value)
            ret = ast.Return(value=name_node(name))
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
        return any(n.id in self.resolver.locals for n in name_nodes(node))

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
                    roles[value] = params[i]
            for k, value in named.items():
                roles[value] = k

        def convert(value):
            if isinstance(value, (ast.Tuple, ast.List)) and \
                    any(isinstance(e, ast.Starred) for e in value.elts):
                return self.atom(value, out)   # (built first: see starred_literal)
            param = roles.get(value)
            if rule is not None and param in rule.grads and param not in rule.sequence and \
                    isinstance(value, ast.Name) and \
                    self.env.get(value.id, value.id) in self.lists and \
                    not rule.name.startswith(RESERVED_PREFIX):
                # np.sum(xs) of a list: NumPy makes it an array first; so does the
                # code, so that the list gets a list of cotangents back. (s2sgrad's
                # own helpers, in generated code differentiated again, take lists.)
                return spelled.as_array(self, value, out)
            literal = isinstance(value, (ast.Tuple, ast.List)) and self._holds_locals(value)
            if pack and literal:
                return self.packed(value, out)
            if rule is None or param is None or param not in rule.grads or not literal:
                return self.atom(value, out)
            if param in rule.sequence:
                elts = [self.operand(e, out) for e in value.elts]
                return copy_location(type(value)(elts=elts, ctx=ast.Load()), value)
            return self.packed(value, out)
        new_args = [convert(a) for a in positional]
        new_keywords = [ast.keyword(arg=k.arg, value=convert(k.value)) for k in keywords]
        return new_args, new_keywords

    def packed(self, expr: ast.expr, out) -> ast.expr:
        """An atom; a nested tuple or list becomes a variable of its own, so its
        items receive their adjoints (the output's cotangent is nested too)."""
        if isinstance(expr, (ast.Tuple, ast.List)):
            name = self.names.fresh("items")
            self.assign_name(name, expr, out, expr)
            return copy_location(name_node(name), expr)
        return self.atom(expr, out)

    def stmt_Assign(self, s, out):
        value = s.value
        first, *others = s.targets
        if others and not isinstance(first, ast.Name):
            # `y[0] = y[1] = v`: v is evaluated once, then assigned left to right.
            held = self.names.fresh("assigned")
            self.resolver.locals.add(held)
            self.assign_name(held, value, out, s)
            value, others = self.load(held), s.targets
            first, *others = others
        self.assign(first, value, out, s)
        for t in others:
            src = self.load(first.id) if isinstance(first, ast.Name) else clone(value)
            self.assign(t, src, out, s)

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
        if spelled.bind_partial(self, user_name, value, out):
            return
        if isinstance(value, (ast.Tuple, ast.List)) and all(
                not isinstance(e, ast.Starred) for e in value.elts):
            elts = [self.element(e, out) for e in value.elts]
            name = self.target(user_name)
            node = type(value)(elts=elts, ctx=ast.Load())
            self.emit(out, assign_node(name, copy_location(node, value)), value)
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
            self.emit(out, assign_node(name, copy_location(node, value)), value)
            self.dict_names.add(name)
            self.owned.discard(name)
            return
        if isinstance(value, ast.Name) and self.env.get(value.id) in self.tuples:
            src = self.env[value.id]
            name = self.target(user_name)
            self.emit(out, assign_node(name, self.load(value.id)), value)
            self.know_tuple(name, self.tuples[src])
            return
        arity = output_count(self.resolver, value)
        if arity > 1:
            # `pair = MultiOutput.apply(x)`: name each output, keep `pair` a known tuple.
            call = self.call(value, out)
            parts = [self.names.fresh(f"{user_name}_{i}") for i in range(arity)]
            tgt = ast.Tuple(elts=[name_node(n, True) for n in parts],
                            ctx=ast.Store())
            self.emit(out, ast.Assign(targets=[tgt], value=call), value)
            elts = [name_node(n) for n in parts]
            name = self.target(user_name)
            self.emit(out, assign_node(name, ast.Tuple(elts=elts, ctx=ast.Load())), value)
            self.know_tuple(name, elts)
            return
        op = self.operation(value, out)
        # The statement may read the old value of a name it overwrites
        # (x = f(x) inside a loop): compute into a temporary first.
        if user_name in self.unversioned and user_name in loads(op):
            tmp = self.names.fresh(readable_stem(op, self) or user_name)
            self.emit(out, assign_node(tmp, op), value)
            op = name_node(tmp)
            self._note_owned(tmp, value)
        name = self.target(user_name)
        self.emit(out, assign_node(name, op), value)
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

    def _note_owned(self, name, op) -> None:
        """Track names holding arrays nothing else refers to (safe for `x += y`)."""
        if is_fresh(op, self):
            self.owned.add(name)
        else:
            self.owned.discard(name)
        for sub in name_nodes(op):
            if sub.id != name and sub.id in self.owned:
                if not (isinstance(op, (ast.BinOp, ast.UnaryOp, ast.Compare))
                        or (isinstance(op, ast.Call) and is_fresh(op, self))):
                    self.owned.discard(sub.id)

    def assign_tuple(self, target, value, out, s) -> None:
        elts = target.elts
        if any(isinstance(e, ast.Starred) for e in elts):
            raise self.err(target, "starred assignment targets are not supported",
                           "Index the sequence explicitly.")
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elts):
            # Evaluate every right-hand side before any assignment (a, b = b, a).
            atoms = [self.atom(e, out) for e in value.elts]
            for t, a in zip(elts, self.held(atoms, elts, out, value)):
                self.assign(t, a, out, s)
            return
        if isinstance(value, ast.Name) and self.env.get(value.id) in self.tuples:
            known = self.tuples[self.env[value.id]]
            if len(known) != len(elts):
                raise self.err(target, f"cannot unpack {len(known)} values into {len(elts)}")
            atoms = [clone(a) for a in known]
            for t, a in zip(elts, self.held(atoms, elts, out, value)):
                self.assign(t, a, out, s)
            return
        if isinstance(value, ast.Call) and all(isinstance(e, ast.Name) for e in elts):
            call = self.call(value, out)
            # `h, c = cell(h, c)` in a loop or branch: the targets keep their names,
            # so the call writes into temporaries first and no statement has an
            # output that is also its input (the adjoint would consume the cotangent
            # it has just added into).
            if any(e.id in self.unversioned and e.id in loads(call) for e in elts):
                temps = [self.names.fresh(f"{e.id}_new") for e in elts]
                tgt = ast.Tuple(elts=[name_node(n, True) for n in temps], ctx=ast.Store())
                self.emit(out, ast.Assign(targets=[tgt], value=call), value)
                for e, tmp in zip(elts, temps):
                    self.assign(e, name_node(tmp), out, s)
                return
            names = []
            for e in elts:
                names.append(self.target(e.id))
                self.owned.discard(names[-1])
            tgt = ast.Tuple(elts=[name_node(n, True) for n in names],
                            ctx=ast.Store())
            self.emit(out, ast.Assign(targets=[tgt], value=call), value)
            return
        src = self.atom(value, out)
        for i, t in enumerate(elts):
            item = ast.Subscript(value=clone(src), slice=ast.Constant(value=i),
                                 ctx=ast.Load())
            self.assign(t, copy_location(item, t), out, s)

    def held(self, atoms: List[ast.expr], targets: List[ast.expr], out,
             at: ast.expr) -> List[ast.expr]:
        """Atoms (already renamed) that `assign` may read as user expressions: one that
        a target overwrites first (`a, b = b, a`), that is rebound in a loop, or whose
        name the user's variable of that name no longer means (the item `s` of a tuple
        built before `s` was reassigned) is copied into a temporary of its own."""
        written = {t.id for t in targets if isinstance(t, ast.Name)}
        held = []
        for a in atoms:
            if isinstance(a, ast.Name) and (a.id in written or a.id in self.unversioned
                                            or self.env.get(a.id, a.id) != a.id):
                tmp = self.names.fresh(a.id + "_old")
                self.emit(out, assign_node(tmp, a), at)
                a = name_node(tmp)
            held.append(a)
        return held

    def assign_subscript(self, target, value, out, s) -> None:
        base = target.value
        if not (isinstance(base, ast.Name) and base.id in self.resolver.locals):
            raise self.err(target, "assignment into an element of a non-local value",
                           "Copy it into a local array first.")
        if self.env.get(base.id, base.id) in self.tuples:
            raise self.err(target, "item assignment into a tuple")
        rhs = self.operand(value, out)   # L[k] = (a, b): the record gets a variable
        index = self.index(target.slice, out)
        store = ast.Subscript(value=name_node(self.env.get(base.id, base.id)),
                              slice=index, ctx=ast.Store())
        self.emit(out, ast.Assign(targets=[copy_location(store, target)], value=rhs), target)

    def stmt_AugAssign(self, s, out):
        target = s.target
        if isinstance(target, ast.Name):
            current = self.env.get(target.id, target.id)
            binop = copy_location(ast.BinOp(left=name_node(target.id),
                                                op=s.op, right=s.value), s)
            if current in self.owned and target.id not in self.force_in_place:
                # Nothing else refers to the array: `x += v` is `x = x + v`.
                if target.id in self.unversioned:
                    self.rebound_augassign.add(target.id)
                self.assign_name(target.id, binop, out, s)
                return
            rhs = self.atom(s.value, out)
            node = ast.AugAssign(target=name_node(current, True), op=s.op,
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
            item = copy_location(ast.Subscript(value=self.load(base.id),
                                                   slice=clone(index),
                                                   ctx=ast.Load()), target)
            old = self.names.fresh(readable_stem(item, self) or "item")
            self.emit(out, assign_node(old, item), target)
            rhs = self.atom(s.value, out)
            new = copy_location(ast.BinOp(left=name_node(old), op=s.op,
                                              right=rhs), s)
            value = self.names.fresh(readable_stem(new, self) or "t")
            self.emit(out, assign_node(value, new), s)
            store = ast.Subscript(value=self.load(base.id), slice=index, ctx=ast.Store())
            self.emit(out, ast.Assign(targets=[copy_location(store, target)],
                                      value=name_node(value),
                                      type_comment=None), target)
            return
        raise self.err(target, "augmented assignment to an attribute is not supported",
                       "Keep the value in a local variable.")
