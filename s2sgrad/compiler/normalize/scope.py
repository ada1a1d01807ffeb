"""What the normaliser's parts share: walks of a scope, names assigned,
returns lifted out of loops, and small facts about calls and names.
"""
from __future__ import annotations

import ast
import inspect
import re
import types
from typing import Dict, List, Optional, Set

from ...function import is_function_class
from ...introspect import is_library
from ...rules import registry
from ..aliases import STORING_METHODS, AliasFacts
from ..callables import bound_call
from ..facts import ExprFacts, NodeFacts, StmtFact
from ..names import (
    BRANCHES_AND_LOOPS,
    SIMPLE_STATEMENTS,
    child_fields,
    clone,
    copy_location,
    name_nodes,
)

_OP_WORDS = {ast.Add: "plus", ast.Sub: "minus", ast.Mult: "times", ast.Div: "div",
             ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow",
             ast.MatMult: "at", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
             ast.LShift: "lshift", ast.RShift: "rshift"}


_UNARY_WORDS = {ast.USub: "neg", ast.UAdd: "pos", ast.Not: "not", ast.Invert: "inv"}


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)



def read_only_lists(fdef: ast.FunctionDef) -> Set[str]:
    """Names bound once, in the function's top-level statements, to a list literal
    (no `*`), and otherwise only read the way a tuple is read: spread into a call
    (`f(*xs)`), indexed, measured (`len`), walked (`for`, a comprehension,
    `enumerate`, `zip`). Such a list is a tuple to every statement that sees it, so
    the normaliser binds it as one (its items then known: `f(*xs)` spelled out)."""
    literal = {s.targets[0].id for s in fdef.body
               if isinstance(s, ast.Assign) and len(s.targets) == 1 and
               isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.List) and
               not any(isinstance(e, ast.Starred) for e in s.value.elts)}
    if not literal:
        return set()
    parents: Dict[int, ast.AST] = {}
    for node in ast.walk(fdef):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    stores: Dict[str, int] = {}
    for node in ast.walk(fdef):
        if isinstance(node, ast.Name) and node.id in literal:
            if not isinstance(node.ctx, ast.Load):
                stores[node.id] = stores.get(node.id, 0) + 1
            elif not _read_as_a_tuple(node, parents):
                literal.discard(node.id)
        elif isinstance(node, SCOPES[:3]) and node is not fdef:
            literal -= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return {n for n in literal if stores.get(n) == 1}


def _read_as_a_tuple(name: ast.Name, parents: Dict[int, ast.AST]) -> bool:
    parent = parents.get(id(name))
    if isinstance(parent, ast.Starred):
        return isinstance(parents.get(id(parent)), ast.Call)
    if isinstance(parent, ast.Subscript):
        return parent.value is name and isinstance(parent.ctx, ast.Load)
    if isinstance(parent, (ast.For, ast.comprehension)):
        return parent.iter is name
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name):
        return parent.func.id in ("len", "enumerate", "zip") and name in parent.args
    return False


def is_atom(node: ast.AST, exprs: ExprFacts) -> bool:
    if isinstance(node, (ast.Name, ast.Constant)):
        return True
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(is_atom(e, exprs) for e in node.elts)
    return bool(exprs.of(node).static)


def walk_scope(node: ast.AST, statements_only: bool = False) -> List[ast.AST]:
    """The nodes under `node`, not entering nested functions, lambdas or classes
    (depth first, last child first). A list: building it costs less than a
    generator over `ast.iter_child_nodes` would. Contexts and operators, which
    nothing asked here is about, are not entered; statements_only: only the
    statements (and except handlers, match cases), without walking expressions,
    which hold none."""
    out: List[ast.AST] = []
    todo = [node]
    pop, push, append, AST = todo.pop, todo.append, out.append, ast.AST
    while todo:
        sub = pop()
        if sub is not node:
            append(sub)
            if isinstance(sub, SCOPES):
                continue
        d = sub.__dict__   # its children's fields, in ast.iter_child_nodes order:
        for attr in _BLOCK_FIELDS if statements_only else reversed(child_fields(sub.__class__)):
            value = d.get(attr)
            if value is None:
                continue
            if value.__class__ is list:
                for item in value:
                    if isinstance(item, AST):
                        push(item)
            elif not statements_only and isinstance(value, AST):
                push(value)
    return out


def scope_statements(node: ast.AST) -> List[ast.AST]:
    """The statements of `_walk_scope(node)`, in its order (see there)."""
    return walk_scope(node, statements_only=True)


_BLOCK_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")   # (in _fields order)


def assigned_names(nodes) -> Set[str]:
    """Names stored or deleted in `nodes`, outside nested scopes (each node of
    `nodes` itself is entered)."""
    out: Set[str] = set()
    todo: List[ast.AST] = []
    Name, Load, AST = ast.Name, ast.Load, ast.AST
    for node in nodes:
        todo.append(node)
        while todo:
            sub = todo.pop()
            cls = sub.__class__
            if cls is Name:
                if sub.ctx.__class__ is not Load:
                    out.add(sub.id)
                continue
            if sub is not node and isinstance(sub, SCOPES):
                continue
            d = sub.__dict__
            for attr in child_fields(cls):
                value = d.get(attr)
                if value.__class__ is list:
                    todo += [item for item in value if isinstance(item, AST)]
                elif isinstance(value, AST):
                    todo.append(value)
    return out


def has_augmented_assignment(stmts: List[ast.stmt]) -> bool:
    """Whether an augmented assignment (`x += v`) is among stmts or in any block
    they hold, nested functions included."""
    todo = list(stmts)
    while todo:
        s = todo.pop()
        if s.__class__ is ast.AugAssign:
            return True
        if s.__class__ not in SIMPLE_STATEMENTS:
            for attr in _BLOCK_FIELDS:
                inner = getattr(s, attr, None)
                if inner:
                    todo += [b for b in inner if isinstance(b, ast.AST)]
    return False



def has(node: ast.AST, kinds, stop=()) -> bool:
    todo = [node]
    while todo:
        sub = todo.pop()
        if isinstance(sub, kinds):
            return True
        if sub is not node and isinstance(sub, SCOPES + tuple(stop)):
            continue
        todo.extend(ast.iter_child_nodes(sub))
    return False


def ends_in_jump(stmts: List[ast.stmt]) -> bool:
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Return, ast.Break, ast.Continue, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return ends_in_jump(last.body) and ends_in_jump(last.orelse)
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
        if isinstance(s, ast.If) and has(s, jumps, stop=(ast.For, ast.While)
                                          if ast.Return not in jumps else ()):
            rest = stmts[i + 1:]
            s.body = lift_jumps(s.body + clone(rest), jumps)
            s.orelse = lift_jumps(s.orelse + clone(rest), jumps)
            out.append(s)
            return out
        out.append(s)
    return out


def bound_once(scope: List[ast.AST], params: Set[str]) -> Set[str]:
    """The names one statement of `scope` (a function's walk_scope) binds, and no
    other, that are not parameters: what such a name holds after its binding is
    that statement's value wherever it is read."""
    counts: Dict[str, int] = {}
    for node in scope:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            counts[node.id] = counts.get(node.id, 0) + 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            counts[node.name] = counts.get(node.name, 0) + 1
    return {n for n, c in counts.items() if c == 1 and n not in params}


def lambdas_bound_once(scope: List[ast.AST], params: Set[str]) -> Dict[str, ast.Lambda]:
    """Names bound once (in `scope`, a function's `_walk_scope`) to a lambda."""
    once = bound_once(scope, params)
    lambdas: Dict[str, ast.Lambda] = {}
    for node in scope:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Lambda):
            lambdas[node.targets[0].id] = node.value
    return {n: lam for n, lam in lambdas.items() if n in once}


def derivatives_bound_once(scope: List[ast.AST], params: Set[str],
                           resolver) -> Dict[str, ast.Call]:
    """Names bound once to `s2sgrad.grad(f, ...)` or `s2sgrad.value_and_grad(f, ...)`:
    a call `g(x)` of one is the call `s2sgrad.grad(f, ...)(x)` (a derivative the
    compiler differentiates again). Only where the maker's arguments mean at the call
    what they meant where it was made: each name they read outside a lambda (whose
    free names Python reads at the call anyway) is bound at most once; and only names
    read as nothing but called (the assignment itself then binds nothing)."""
    once = bound_once(scope, params)
    stores: Dict[str, int] = {}
    called: Set[int] = set()   # (the names read as a call's function)
    for node in scope:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(id(node.func))
    other_use = {n.id for n in scope if isinstance(n, ast.Name) and
                 isinstance(n.ctx, ast.Load) and id(n) not in called}
    found: Dict[str, ast.Call] = {}
    for node in scope:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and
                isinstance(node.targets[0], ast.Name) and node.targets[0].id in once and
                node.targets[0].id not in other_use and
                isinstance(node.value, ast.Call) and dotted(node.value.func) and
                not resolver.is_local_chain(node.value.func)):
            continue
        ok, maker = resolver.static(node.value.func)
        if not (ok and (is_api(maker, "grad") or is_api(maker, "value_and_grad"))):
            continue
        todo, read = list(ast.iter_child_nodes(node.value)), []
        while todo:
            sub = todo.pop()
            if isinstance(sub, ast.Lambda):
                continue
            if isinstance(sub, ast.Name):
                read.append(sub.id)
            todo.extend(ast.iter_child_nodes(sub))
        if all(stores.get(n, 0) <= 1 for n in read):
            found[node.targets[0].id] = node.value
    return found


def defs_bound_once(body: List[ast.stmt], scope: List[ast.AST], params: Set[str]
                    ) -> Dict[str, ast.FunctionDef]:
    """`def` statements nested in a differentiated function whose name nothing else
    binds (in `scope`, the function's `_walk_scope`): calls of them are calls of the
    def, lifted to a function of its own."""
    counts: Dict[str, int] = {}
    defs: Dict[str, ast.FunctionDef] = {}
    for node in scope:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            counts[node.id] = counts.get(node.id, 0) + 1
    for node in walk_scope(ast.Module(body=list(body), type_ignores=[]),
                            statements_only=True):
        if isinstance(node, ast.FunctionDef):
            counts[node.name] = counts.get(node.name, 0) + 1
            defs[node.name] = node
    return {n: d for n, d in defs.items() if counts.get(n) == 1 and n not in params}


def user_bound_call(obj):
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
    if is_library(bound.func, own=True):
        return None
    return bound


def _header_loads(s: ast.stmt) -> Set[str]:
    """Names a statement reads itself (a compound statement: its test or iterable)."""
    part = s.test if isinstance(s, (ast.If, ast.While)) else \
        s.iter if isinstance(s, ast.For) else s
    return {n.id for n in name_nodes(part) if isinstance(n.ctx, ast.Load)}


class Readers:
    """The statements of a body that read each name themselves (a compound statement:
    its test or iterable), found once: read_after asks it for every in-place write and
    every name the write may change (walking the whole body for each made compiling a
    function with many writes quadratic)."""

    def __init__(self, facts: AliasFacts, body: List[ast.stmt]):
        self.of: Dict[str, List[ast.stmt]] = {}
        for s in walk_scope(ast.Module(body=body, type_ignores=[]), statements_only=True):
            if isinstance(s, ast.stmt) and s in facts.where:
                for n in _header_loads(s):
                    self.of.setdefault(n, []).append(s)


def read_after(facts: AliasFacts, readers: Readers, name: str, write: ast.stmt) -> bool:
    """May `name` be read once `write` has run (later in the code, by the write itself,
    or in a loop that encloses the write, in a later iteration, unless every iteration
    of the innermost loop around both binds the name anew before it reads it)?"""
    position, loops = facts.where.require(write)
    rebound = facts.bound_in_loop.get(name, ())
    for s in readers.of.get(name, ()):
        p, enclosing = facts.where.require(s)
        if p >= position:
            return True
        shared = loops & enclosing
        if not shared:
            continue
        innermost = max(shared, key=lambda loop: facts.where.require(loop)[0])
        if not any(loop is innermost and q < p for q, loop in rebound):
            return True
    return False


def snapshot_definitions(body: List[ast.stmt], name: str, stmts: NodeFacts[StmtFact],
                         for_adjoint: bool = False) -> None:
    """Make every binding of `name` a copy (`StmtFact.snapshot`; loop targets: the
    item the transform binds them to). `for_adjoint`: nothing reads `name` once the
    write has run, so the copy is only the adjoint's (see StmtFact)."""
    for s in walk_scope(ast.Module(body=body, type_ignores=[])):
        if isinstance(s, ast.Assign) and any(n.id == name for t in s.targets
                                             for n in name_nodes(t)
                                             if isinstance(n.ctx, ast.Store)):
            known = stmts.of(s)
            stmts.note(s, snapshot=True, snapshot_for_adjoint=for_adjoint and (
                not known.snapshot or known.snapshot_for_adjoint))
        elif isinstance(s, ast.For) and name in {n.id for n in name_nodes(s.target)}:
            stmts.note(s, snapshot_targets=stmts.of(s).snapshot_targets | {name})


def names_written_in_place(facts: AliasFacts) -> Set[str]:
    out: Set[str] = set()
    for name, stmt in facts.writes:
        out.add(name)
        out |= facts.affected(name, stmt)
    return out


LIBRARIES = ("numpy", "scipy", "s2sgrad", "math", "builtins")


def is_api(obj, name: str) -> bool:
    module = getattr(obj, "__module__", "") or ""
    return module.startswith("s2sgrad") and getattr(obj, "__name__", None) == name


def dotted(node: ast.expr) -> bool:
    """A plain dotted name such as np.linalg.norm (no calls or subscripts inside)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def static_true(node: Optional[ast.expr], norm) -> bool:
    """Whether a create_graph argument is True, known when compiling (absent: False)."""
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value
    ok, value = norm.resolver.static(node) if dotted(node) else (False, None)
    if ok and isinstance(value, bool):
        return value
    raise norm.err(node, "create_graph must be True or False when the code is compiled",
                   "Write create_graph=True (the result is differentiated further) or "
                   "False (it is a constant to the outer derivative).")


def bind_functional(expr: ast.Call, maker: str, norm) -> dict:
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




def loads(node: ast.AST) -> Set[str]:
    return {n.id for n in name_nodes(node) if isinstance(n.ctx, ast.Load)}


def is_docstring(s: ast.stmt) -> bool:
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and \
        isinstance(s.value.value, str)


def drop_trailing_continue(stmts):
    if stmts and isinstance(stmts[-1], ast.Continue):
        stmts = stmts[:-1]
    for s in stmts:
        if isinstance(s, ast.If):
            s.body = drop_trailing_continue(s.body) or [copy_location(ast.Pass(), s)]
            s.orelse = drop_trailing_continue(s.orelse)
    return stmts


def is_fresh(op: ast.expr, norm) -> bool:
    """Does `op` always produce a new object (so in-place updates alias nothing)?"""
    if isinstance(op, (ast.BinOp, ast.UnaryOp)):
        return True
    if isinstance(op, ast.Call):
        callee = norm.facts.exprs.of(op).callee
        if callee is not None:
            if registry.returns_an_argument(callee):
                return False
            if registry.is_constructor(callee):
                return True
            rule = registry.lookup_function(callee)
            return bool(rule and not rule.view)
        method = norm.facts.exprs.of(op).method
        if method == "copy":
            return True
    return False


def readable_stem(op: ast.expr, norm) -> str:
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
        if norm.facts.exprs.of(op).method:
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


def output_count(resolver, value: ast.expr) -> int:
    """How many outputs a Function.apply call has (its vjp takes one per output); 1
    for any other expression."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and
            value.func.attr == "apply" and dotted(value.func) and
            not resolver.is_local_chain(value.func)):
        return 1
    ok, cls = resolver.static(value.func.value)
    if not ok or not is_function_class(cls):
        return 1
    try:
        params = list(inspect.signature(cls.vjp_method()).parameters.values())
    except (TypeError, ValueError):
        return 1
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return 1
    return max(len(params) - 1, 1)


def is_builtin(resolver, func: ast.expr, obj) -> bool:
    """Whether `func` is a name for Python's own `obj` (no local, no module binding of
    the name to something else)."""
    if not (isinstance(func, ast.Name) and func.id not in resolver.locals):
        return False
    ok, found = resolver.static(func)
    return ok and found is obj


def rewrite_blocks(s: ast.stmt, rewrite) -> None:
    """Replace each block of statements in s (body, orelse, finalbody) by
    rewrite(block); a body left empty holds `pass`."""
    for field in ("body", "orelse", "finalbody"):
        inner = getattr(s, field, None)
        if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
            kept = rewrite(inner)
            if not kept and field == "body":
                kept = [ast.copy_location(ast.Pass(), s)]
            setattr(s, field, kept)


def one_array_call(resolver, value: ast.expr) -> bool:
    """Whether `value` calls a function or array method whose rule says it returns one
    value (np.exp, x.sum: no `outputs=`, no sequence result): `a, b = np.exp(t)`
    unpacks that array's rows, not the call's outputs."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if dotted(func) and not resolver.is_local_chain(func):
        ok, obj = resolver.static(func)
        rule = registry.lookup_function(obj) if ok else None
    elif isinstance(func, ast.Attribute):   # a method of a variable or of a value
        rule = registry.REGISTRY.methods.get(func.attr)   # computed in place: (a * b).copy()
    else:
        return False
    return rule is not None and rule.outputs is None and not rule.sequence_result


def assigned_in_compound(body: List[ast.stmt]) -> Set[str]:
    """Names assigned inside a branch or loop keep one name (no SSA versions); a
    while loop's condition runs on every trip, so what it assigns too (`while (n :=
    n - 1) > 0`: once versioned, `n_1 = n - 1` ran once and the loop never ended)."""
    out: Set[str] = set()
    module = ast.Module(body=body, type_ignores=[])
    for node in walk_scope(module):
        if node.__class__ in BRANCHES_AND_LOOPS:
            out |= assigned_names(node.body + node.orelse)
            if isinstance(node, ast.For):
                out |= assigned_names([node.target])
            elif isinstance(node, ast.While):
                out |= assigned_names([node.test])
    return out


def stored_in_containers(stmt: ast.stmt) -> Set[str]:
    """The variables whose arrays `stmt` puts into a list, tuple or dict (a literal's
    items anywhere in it, `[x] + [a]` too; `xs.append(a)`; `d["k"] = a`): from then on
    the container may refer to them too, so an update of one in place is seen
    through it."""
    if isinstance(stmt, ast.Assign):
        out = _literal_items(stmt.value)
        if isinstance(stmt.value, ast.Name) and any(isinstance(t, ast.Subscript)
                                                    for t in stmt.targets):
            out.add(stmt.value.id)
        return out
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
            isinstance(stmt.value.func, ast.Attribute) and \
            stmt.value.func.attr in STORING_METHODS:
        return {a.id for a in stmt.value.args if isinstance(a, ast.Name)} | \
            set().union(*(_literal_items(a) for a in stmt.value.args))
    return set()


def _literal_items(expr: ast.expr) -> Set[str]:
    """The names that are items of a list, tuple or dict literal within expr."""
    out: Set[str] = set()
    for node in ast.walk(expr):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out.update(e.id for e in node.elts if isinstance(e, ast.Name))
        elif isinstance(node, ast.Dict):
            out.update(v.id for v in node.values if isinstance(v, ast.Name))
    return out
