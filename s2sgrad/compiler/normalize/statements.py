"""Statements in normal form: expression statements, returns, assignments
(names, tuples, subscripts, augmented) and the operands they need.
"""
from __future__ import annotations

import ast
from typing import List, NamedTuple, Optional

from ... import runtime
from ...errors import guard_fields
from ..names import assign_node, clone, copy_location, name_node, name_nodes
from . import spelled
from .scope import (
    is_atom,
    is_docstring,
    is_fresh,
    loads,
    one_array_call,
    output_count,
    readable_stem,
)


class StatementRules:
    """The normaliser's statements: a part of `_Normalizer` (normalize/__init__.py), which
    owns the state these methods read and write (`self.core`: names, the SSA
    environment, the resolver, the facts) and calls them as `self.statements`."""

    def __init__(self, core):
        self.core = core

    # -- statements ------------------------------------------------------------
    def block(self, stmts: List[ast.stmt], out: List[ast.stmt]) -> None:
        for s in stmts:
            self.core.origin = s
            self.stmt(s, out)

    def stmt(self, s: ast.stmt, out: List[ast.stmt]) -> None:
        kind = "stmt_" + type(s).__name__   # (branches and loops are ControlRules')
        method = getattr(self, kind, None) or getattr(self.core.control, kind, None)
        if method is None:
            raise unsupported_statement(s, self.core)
        method(s, out)

    def stmt_Pass(self, s, out):
        pass

    def stmt_FunctionDef(self, s, out):
        """A nested def runs nothing where it stands: its calls are calls of it,
        lifted (CallRules.def_call). One that is not bound once is refused."""
        known = self.core.local_defs.get(s.name)
        if known is None or (known.lineno, known.col_offset) != (s.lineno, s.col_offset):
            raise unsupported_statement(s, self.core)   # (the tree may be a copy: by position)

    def stmt_Expr(self, s, out):
        core = self.core
        if is_docstring(s):
            return
        value = s.value
        if isinstance(value, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise core.err(s, "generators and coroutines cannot be differentiated",
                           "Return a value instead of yielding it.")
        if isinstance(value, ast.Call):
            if spelled.extend_as_appends(core, s, value, out) or \
                    spelled.reordered_in_place(core, s, value, out):
                return
            call = core.expressions.call(value, out)
            if not isinstance(call, ast.Constant):   # (an inlined helper's None: nothing)
                core.emit(out, ast.Expr(value=call), s)
        else:
            core.emit(out, ast.Expr(value=core.rename_loads(value)), s)

    def user_temp(self, stem: str) -> str:
        """A fresh local for statements written as the user's and normalised again
        (its versions are not tracked: it may be assigned in a loop)."""
        core = self.core
        name = core.names.fresh(stem)
        core.resolver.locals.add(name)
        core.unversioned.add(name)
        return name

    def stmt_Assert(self, s, out):
        core = self.core
        core.emit(out, ast.Assert(test=core.rename_loads(s.test),
                                  msg=core.rename_loads(s.msg) if s.msg else None), s)

    def stmt_Raise(self, s, out):
        core = self.core
        core.emit(out, ast.Raise(exc=core.rename_loads(s.exc) if s.exc else None,
                                 cause=core.rename_loads(s.cause) if s.cause else None), s)

    def stmt_Return(self, s, out):
        core = self.core
        value = s.value or ast.Constant(value=None)
        if isinstance(value, ast.Tuple):
            elts = [self.packed(e, out) for e in value.elts]
            ret = ast.Return(value=ast.Tuple(elts=elts, ctx=ast.Load()))
        elif isinstance(value, ast.Name) and core.env.get(value.id) in core.tuples:
            ret = ast.Return(value=ast.Tuple(elts=list(core.tuples[core.env[value.id]]),
                                             ctx=ast.Load()))
        elif is_atom(value, core.facts.exprs):
            ret = ast.Return(value=core.expressions.atom(value, out))
        else:
            name = core.names.fresh("result")
            core.emit(out, assign_node(name, core.expressions.operation(value, out)), value)
            ret = ast.Return(value=name_node(name))
        core.emit(out, ret, s)

    def operand(self, expr: ast.expr, out) -> ast.expr:
        """An operand of an operator: a literal holding variables (x * [a, b]) gets a
        variable of its own, so that a and b receive their adjoints."""
        if isinstance(expr, (ast.Tuple, ast.List)) and self.holds_locals(expr):
            return self.packed(expr, out)
        return self.core.expressions.atom(expr, out)

    def element(self, expr: ast.expr, out) -> ast.expr:
        """An item of a literal: a nested literal holding variables gets a variable of
        its own (`[(W1, b1), (W2, b2)]`), so every item the adjoint unpacks is a name."""
        if isinstance(expr, (ast.Tuple, ast.List)) and self.holds_locals(expr):
            return self.packed(expr, out)
        return self.core.expressions.atom(expr, out)   # (a nested dict literal gets a name there)

    def holds_locals(self, node) -> bool:
        return any(n.id in self.core.resolver.locals for n in name_nodes(node))

    def packed(self, expr: ast.expr, out) -> ast.expr:
        """An atom; a nested tuple or list becomes a variable of its own, so its
        items receive their adjoints (the output's cotangent is nested too; a literal
        indexed in place, `(x, x ** 2)[k]`, read no variable: its gradient was lost)."""
        if isinstance(expr, (ast.Tuple, ast.List)):
            name = self.core.names.fresh("items")
            self.assign_name(name, expr, out, expr)
            return copy_location(name_node(name), expr)
        return self.core.expressions.atom(expr, out)

    def stmt_Assign(self, s, out):
        core = self.core
        value = s.value
        first, *others = s.targets
        if others and not isinstance(first, ast.Name):
            # `y[0] = y[1] = v`: v is evaluated once, then assigned left to right.
            held = core.names.fresh("assigned")
            core.resolver.locals.add(held)
            self.assign_name(held, value, out, s)
            value, others = core.load(held), s.targets
            first, *others = others
        self.assign(first, value, out, s)
        for t in others:
            src = core.load(first.id) if isinstance(first, ast.Name) else clone(value)
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
            raise self.core.err(target, "starred assignment targets are not supported",
                                "Index the sequence explicitly.")
        else:
            raise self.core.err(target, "assignment to an attribute is not supported in a "
                                "differentiated function",
                                "Keep the value in a local variable and return it.")

    def assign_name(self, user_name: str, value: ast.expr, out, s) -> None:
        core = self.core
        maker = core.derivative_makers.get(user_name)
        if maker is not None and (maker is value or ast.dump(maker) == ast.dump(value)):
            return   # g = s2sgrad.grad(f): each call g(x) is s2sgrad.grad(f)(x)
        if spelled.bind_partial(core, user_name, value, out):
            return
        if isinstance(value, ast.List) and user_name in core.read_only_lists:
            value = copy_location(ast.Tuple(elts=value.elts, ctx=ast.Load()), value)
        if isinstance(value, (ast.Tuple, ast.List)) and all(
                not isinstance(e, ast.Starred) for e in value.elts):
            elts = [self.element(e, out) for e in value.elts]
            name = core.target(user_name)
            self.note_held(elts, name)
            node = type(value)(elts=elts, ctx=ast.Load())
            core.emit(out, assign_node(name, copy_location(node, value)), value)
            if isinstance(value, ast.Tuple):
                core.tuple_names.add(name)
                self.know_tuple(name, elts)
            else:
                core.lists.add(name)
            core.owned.discard(name)
            return
        if isinstance(value, ast.Dict) and all(k is not None for k in value.keys):
            # `{"W": W, "b": b}`: keys are atoms (no gradient), values are items.
            keys = [core.expressions.atom(k, out) for k in value.keys]
            values = [self.element(v, out) for v in value.values]
            name = core.target(user_name)
            self.note_held(values, name)
            node = ast.Dict(keys=keys, values=values)
            core.emit(out, assign_node(name, copy_location(node, value)), value)
            core.dict_names.add(name)
            core.owned.discard(name)
            return
        if isinstance(value, ast.Name) and core.env.get(value.id) in core.tuples:
            src = core.env[value.id]
            name = core.target(user_name)
            core.emit(out, assign_node(name, core.load(value.id)), value)
            self.know_tuple(name, core.tuples[src])
            return
        arity = output_count(core.resolver, value)
        if arity > 1:
            # `pair = MultiOutput.apply(x)`: name each output, keep `pair` a known tuple.
            call = core.expressions.call(value, out)
            parts = [core.names.fresh(f"{user_name}_{i}") for i in range(arity)]
            tgt = ast.Tuple(elts=[name_node(n, True) for n in parts],
                            ctx=ast.Store())
            core.emit(out, ast.Assign(targets=[tgt], value=call), value)
            elts = [name_node(n) for n in parts]
            name = core.target(user_name)
            core.emit(out, assign_node(name, ast.Tuple(elts=elts, ctx=ast.Load())), value)
            self.know_tuple(name, elts)
            return
        op = core.expressions.operation(value, out)
        # The statement may read the old value of a name it overwrites
        # (x = f(x) inside a loop): compute into a temporary first.
        if user_name in core.unversioned and user_name in loads(op):
            tmp = core.names.fresh(readable_stem(op, core) or user_name)
            core.emit(out, assign_node(tmp, op), value)
            op = name_node(tmp)
            self.note_owned(tmp, value)
        name = core.target(user_name)
        core.emit(out, assign_node(name, op), value)
        self.note_owned(name, op)

    def know_tuple(self, name: str, elts: List[ast.expr]) -> None:
        """Remember that `name` holds the tuple `elts`, so that `name[0]` reads the
        item's variable directly; only while neither can be bound to something else
        (names assigned in a branch or loop are: after an `if`, `t[0]` may be either
        branch's item, and after a loop the item's variable may hold a later value)."""
        core = self.core
        if name in core.unversioned:
            return
        if any(isinstance(e, ast.Name) and e.id in core.unversioned for e in elts):
            return
        core.tuples[name] = elts

    def note_held(self, items: List[ast.expr], container: str) -> None:
        """Temporaries that are items of the container `container` now names (see
        Normalizer.held_by)."""
        core = self.core
        for item in items:
            if isinstance(item, ast.Name) and item.id not in core.user_names:
                core.held_by.setdefault(item.id, container)

    def note_owned(self, name, op) -> None:
        """Track names holding arrays nothing else refers to (safe for `x += y`)."""
        core = self.core
        if is_fresh(op, core):
            core.owned.add(name)
        else:
            core.owned.discard(name)
        for sub in name_nodes(op):
            if sub.id != name and sub.id in core.owned:
                if not (isinstance(op, (ast.BinOp, ast.UnaryOp, ast.Compare))
                        or (isinstance(op, ast.Call) and is_fresh(op, core))):
                    core.owned.discard(sub.id)

    def assign_tuple(self, target, value, out, s) -> None:
        core = self.core
        elts = target.elts
        if any(isinstance(e, ast.Starred) for e in elts):
            self.assign_starred(target, value, out, s)
            return
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elts):
            # Evaluate every right-hand side before any assignment (a, b = b, a).
            atoms = [core.expressions.atom(e, out) for e in value.elts]
            for t, a in zip(elts, self.held(atoms, elts, out, value)):
                self.assign(t, a, out, s)
            return
        if isinstance(value, ast.Name) and core.env.get(value.id) in core.tuples:
            known = core.tuples[core.env[value.id]]
            if len(known) != len(elts):
                raise core.err(target, f"cannot unpack {len(known)} values into {len(elts)}")
            atoms = [clone(a) for a in known]
            for t, a in zip(elts, self.held(atoms, elts, out, value)):
                self.assign(t, a, out, s)
            return
        if isinstance(value, ast.Call) and all(isinstance(e, ast.Name) for e in elts) and \
                not one_array_call(core.resolver, value):   # (one array: its rows, below)
            call = core.expressions.call(value, out)
            # `h, c = cell(h, c)` in a loop or branch: the targets keep their names,
            # so the call writes into temporaries first and no statement has an
            # output that is also its input (the adjoint would consume the cotangent
            # it has just added into).
            if any(e.id in core.unversioned and e.id in loads(call) for e in elts):
                temps = [core.names.fresh(f"{e.id}_new") for e in elts]
                tgt = ast.Tuple(elts=[name_node(n, True) for n in temps], ctx=ast.Store())
                core.emit(out, ast.Assign(targets=[tgt], value=call), value)
                for e, tmp in zip(elts, temps):
                    self.assign(e, name_node(tmp), out, s)
                return
            names = []
            for e in elts:
                names.append(core.target(e.id))
                core.owned.discard(names[-1])
            tgt = ast.Tuple(elts=[name_node(n, True) for n in names],
                            ctx=ast.Store())
            core.emit(out, ast.Assign(targets=[tgt], value=call), value)
            return
        src = core.expressions.atom(value, out)
        for i, t in enumerate(elts):
            item = ast.Subscript(value=clone(src), slice=ast.Constant(value=i),
                                 ctx=ast.Load())
            self.assign(t, copy_location(item, t), out, s)

    def assign_starred(self, target, value, out, s) -> None:
        """`a, *rest, z = v` as Python binds it: a = v[0], rest = [item for item in
        v[1:-1]] (a list of the items between, rows of an array), z = v[-1]."""
        core = self.core
        elts = target.elts
        star = next(i for i, e in enumerate(elts) if isinstance(e, ast.Starred))
        after = len(elts) - star - 1
        src = core.expressions.atom(value, out)
        for i, t in enumerate(elts):
            if i == star:
                continue
            index = i if i < star else i - len(elts)   # (those after: from the end)
            item = ast.Subscript(value=clone(src), slice=ast.Constant(value=index),
                                 ctx=ast.Load())
            self.assign(t, copy_location(item, t), out, s)
        middle = ast.Slice(lower=ast.Constant(value=star) if star else None,
                           upper=ast.Constant(value=-after) if after else None, step=None)
        item = core.names.fresh("item")
        items = ast.ListComp(elt=name_node(item), generators=[ast.comprehension(
            target=name_node(item, True), iter=ast.Subscript(
                value=clone(src), slice=middle, ctx=ast.Load()), ifs=[], is_async=0)])
        self.assign(elts[star].value, copy_location(items, elts[star]), out, s)

    def held(self, atoms: List[ast.expr], targets: List[ast.expr], out,
             at: ast.expr) -> List[ast.expr]:
        """Atoms (already renamed) that `assign` may read as user expressions: one that
        a target overwrites first (`a, b = b, a`), that is rebound in a loop, or whose
        name the user's variable of that name no longer means (the item `s` of a tuple
        built before `s` was reassigned) is copied into a temporary of its own."""
        core = self.core
        written = {t.id for t in targets if isinstance(t, ast.Name)}
        held = []
        for a in atoms:
            if isinstance(a, ast.Name) and (a.id in written or a.id in core.unversioned
                                            or core.env.get(a.id, a.id) != a.id):
                tmp = core.names.fresh(a.id + "_old")
                core.emit(out, assign_node(tmp, a), at)
                a = name_node(tmp)
            held.append(a)
        return held

    def assign_subscript(self, target, value, out, s) -> None:
        core = self.core
        base = target.value
        if not (isinstance(base, ast.Name) and base.id in core.resolver.locals):
            raise core.err(target, "assignment into an element of a non-local value",
                           "Copy it into a local array first.")
        if core.env.get(base.id, base.id) in core.tuples:
            raise core.err(target, "item assignment into a tuple")
        rhs = self.operand(value, out)   # L[k] = (a, b): the record gets a variable
        index = core.expressions.index(target.slice, out)
        store = ast.Subscript(value=name_node(core.env.get(base.id, base.id)),
                              slice=index, ctx=ast.Store())
        core.emit(out, ast.Assign(targets=[copy_location(store, target)], value=rhs), target)

    def stmt_AugAssign(self, s, out):
        core = self.core
        target = s.target
        if isinstance(target, ast.Name):
            current = core.env.get(target.id, target.id)
            binop = copy_location(ast.BinOp(left=name_node(target.id),
                                                op=s.op, right=s.value), s)
            if current in core.owned and target.id not in core.force_in_place:
                # Nothing else refers to the array: `x += v` is `x = x + v`.
                if target.id in core.unversioned:
                    core.rebound_augassign.add(target.id)
                self.assign_name(target.id, binop, out, s)
                return
            rhs = self.operand(s.value, out)   # (`xs += [a]`: the literal, a variable)
            node = ast.AugAssign(target=name_node(current, True), op=s.op,
                                 value=rhs)
            # Python semantics: arrays are updated in place, numbers rebound.
            core.env[target.id] = current
            # A known tuple holding it holds the old number (or the same array): its
            # items are read from the tuple from now on, not from this name.
            for name, elts in list(core.tuples.items()):
                if any(isinstance(e, ast.Name) and e.id == current for e in elts):
                    del core.tuples[name]
            core.emit(out, node, s)
            return
        if isinstance(target, ast.Subscript):
            augmented_item(core, s, out)
            return
        raise core.err(target, "augmented assignment to an attribute is not supported",
                       "Keep the value in a local variable.")


def unsupported_statement(s: ast.stmt, core) -> Exception:
    """The error for a statement the normaliser does not take, with what to write."""
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
        "Delete": "Drop the del statement; s2sgrad keeps values the adjoint needs.",
        "Match": "Use if/elif/else.",
    }
    return core.err(s, f"'{kind}' statements are not supported in a differentiated "
                    f"function", hints.get(kind, "Rewrite it with plain statements."))


class ItemUpdate(NamedTuple):
    """`L[i] op= v` in normal form, for Normalizer._protect_item_updates: the item's
    old value, the container (its name in the normal form, and the user's), the
    store, and the run-time guard (None where the container is not a known list or
    dict), which that check makes strict where a variable may hold the item."""

    old: str
    container: str
    shown: str
    store: ast.stmt
    guard: Optional[ast.Call]


def augmented_item(core, s: ast.AugAssign, out: List[ast.stmt]) -> None:
    """`x[i] op= v` of the normal form (StatementRules.stmt_AugAssign)."""
    target = s.target
    base = target.value
    if not (isinstance(base, ast.Name) and base.id in core.resolver.locals):
        raise core.err(target, "augmented assignment into a non-local value",
                       "Copy it into a local array first.")
    # x[i] += v  ->  t = x[i]; t2 = t + v; x[i] = t2 (the index is evaluated once).
    # For an array x the same; for a list or dict, Python updates the item's
    # array in place, which is the same only where nothing else holds that
    # array: proven of the variables (Normalizer._protect_item_updates), checked
    # at run time of the container's other items (runtime.item_unshared).
    index = core.expressions.index(target.slice, out)
    container = core.env.get(base.id, base.id)
    in_container = container in core.lists or container in core.dict_names
    if in_container:
        error = core.err(target, f"in-place update of an item of '{base.id}' also "
                         f"changes another of its items, which holds the same array",
                         f"Put a copy into '{base.id}' ({base.id}.append(v.copy())), "
                         f"or assign a new value: {base.id}[i] = {base.id}[i] + v.")
        guard = ast.Call(func=name_node("_s2s_item_unshared"),
                         args=[core.load(base.id), clone(index), ast.Constant(value=False)] +
                         [ast.Constant(value=f) for f in guard_fields(error)],
                         keywords=[])
        core.facts.exprs.note(guard, callee=runtime.inplace.item_unshared)
        core.emit(out, ast.Expr(value=guard), target)
    else:
        guard = None
    item = copy_location(ast.Subscript(value=core.load(base.id), slice=clone(index),
                                       ctx=ast.Load()), target)
    old = core.names.fresh(readable_stem(item, core) or "item")
    core.emit(out, assign_node(old, item), target)
    rhs = core.expressions.atom(s.value, out)
    new = copy_location(ast.BinOp(left=name_node(old), op=s.op, right=rhs), s)
    value = core.names.fresh(readable_stem(new, core) or "t")
    core.emit(out, assign_node(value, new), s)
    if in_container:   # (the item's shape and dtype, as an update in place keeps)
        kept = ast.Call(func=name_node("_s2s_item_updated"),
                        args=[name_node(value), name_node(old)], keywords=[])
        core.facts.exprs.note(kept, callee=runtime.inplace.item_updated)
        value = core.names.fresh(f"{value}_kept")
        core.emit(out, assign_node(value, kept), s)
    store = ast.Subscript(value=core.load(base.id), slice=index, ctx=ast.Store())
    stored = core.emit(out, ast.Assign(targets=[copy_location(store, target)],
                                       value=name_node(value),
                                       type_comment=None), target)
    core.item_updates.append(ItemUpdate(old, container, base.id, stored, guard))
