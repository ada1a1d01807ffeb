"""Fuse runs of elementwise statements into one explicit loop (numba backend).

NumPy makes one pass over memory per operation: `y = sin(x) * exp(-x**2)`
reads and writes four temporaries of x's size. numba compiles the same array
expressions one statement at a time, so a chain of statements still makes one
pass each. This pass, run on the numba rewrite's output (pure `ast`, no numba
import), turns a run of top-level statements of the form `name = <elementwise
expression over float64 arrays of one shape and numbers>` into one loop over
the elements: each statement becomes a scalar assignment, the arrays the rest
of the function reads are written once, and the temporaries never exist.

    if x.shape == g.shape:                 # the arrays it reads share one shape
        n = x.size
        x_flat = np.ravel(x)               # a view for C-contiguous arrays
        ...
        for i in range(n):
            sin_x_i = np.sin(x_flat[i])
            ...
            x_bar_flat[i] = x_bar_i
        x_bar = x_bar_flat.reshape(x.shape)
    else:                                  # broadcasting: the statements as they were
        ...

A run whose sum is taken (`r = np.sum(<elementwise>)`) adds its terms up block
by block inside the loop; the function asks LLVM for 512-bit vectors
(`numba_math.vector_width_512`), and sin, cos, exp and tanh are numba_math's
vectorisable versions.

What is proven before fusing, and what is checked at run time:

- Only statements whose every operation is elementwise join a run: `+ - * /
  **`, unary minus, the ufuncs of `_UFUNCS`, and the rewrite's helpers for
  them. A run reads names whose kind (from the kind inference seeded by one
  NumPy run) is a float64 array of the run's rank or a number.
- The arrays a run reads must have the same shape; this is the run-time test.
  Where it fails (broadcasting), the original statements run. Where the
  kinds were wrong, numba's typing of the two branches disagrees and the
  variant falls back to the NumPy backend (as for any typing error).
- Statements are moved only past statements they share no name with, and only
  pure ones move: assignments of arithmetic and of NumPy reductions and ufuncs
  (`np.sum(t)` is moved after the loop that computes `t`). Anything else (a
  loop, a write into an array, a call) ends the run.
- An in-place update (`a = _nb_op_iadd(a, b)`) joins only when `a` is an array
  the run itself created, which nothing else can alias.
- Arithmetic on numbers alone keeps Python's semantics (`1.0 / 0.0` raises as
  it does in the NumPy backend); arithmetic on array elements has NumPy's
  (`np.divide`, `np.power`, with NumPy's shortcuts for `x ** 2` and
  `x ** 0.5`).
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ..compiler.names import assign_node, name_node
from .numba_names import fresh_name

Kind = Tuple

NB = "_nb_"

# ufuncs with a vectorisable version in numba_math (`_nb_fast_<name>`), and the
# ones exact only below a limit (its argument reduction); kept here, as numbers,
# so that this module needs no numba.
FAST = frozenset({"sin", "cos", "exp", "tanh"})
LIMITED = {"sin": 1.0e6, "cos": 1.0e6}

# ufuncs of one argument whose scalar form numba compiles with NumPy's meaning.
_UFUNCS = frozenset({
    "sin", "cos", "tan", "exp", "log", "tanh", "sqrt", "abs", "absolute", "square",
    "log1p", "expm1", "sinh", "cosh", "arctan", "arcsin", "arccos", "arcsinh", "negative",
    "exp2", "log2", "log10"})
_OPS = {"op_add": ast.Add, "op_sub": ast.Sub, "op_mul": ast.Mult, "op_div": ast.Div,
        "op_pow": ast.Pow}
_IN_PLACE = {"op_iadd": ast.Add, "op_isub": ast.Sub, "op_imul": ast.Mult}
# Pure calls a moved statement may make (reductions of a whole array, ufuncs).
_PURE_NP = _UFUNCS | {"sum", "mean", "max", "min", "prod", "amax", "amin"}
_PURE_HELPERS = frozenset({"op_add", "op_sub", "op_mul", "op_div", "op_pow", "op_neg"} |
                          {"np_" + f for f in _PURE_NP})
MIN_STATEMENTS = 2      # a run of one statement is what numba's array expressions do
SUM_BLOCK = 2048        # elements: a run's summed terms stay in a buffer this long


def _call_name(node: ast.AST) -> Optional[str]:
    """`np.f` -> "np.f"; `_nb_f` -> "_nb_f"; anything else None."""
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    f = node.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "np":
        return "np." + f.attr
    if isinstance(f, ast.Name) and f.id.startswith(NB):
        return f.id
    return None


def _ufunc(name: Optional[str]) -> Optional[str]:
    """The ufunc a call computes elementwise, or None."""
    if name is None:
        return None
    if name.startswith("np."):
        short = name[3:]
    elif name.startswith(NB + "np_"):
        short = name[len(NB) + 3:]
    else:
        return None
    return short if short in _UFUNCS else None


def _number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _loads(node: ast.AST) -> Set[str]:
    """The names node reads as values (not the functions it calls)."""
    return set(_reads_in_order(node))


def _reads_in_order(node: ast.AST) -> List[str]:
    """Names read as values, in the order of ast.walk: not a called function's name
    (`_nb_op_add`, `range`), nor the module `np` (but `t` of `t.shape` or of
    `t.reshape(...)` is read)."""
    called = {id(c.func) for c in ast.walk(node)
              if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
            isinstance(n.ctx, ast.Load) and id(n) not in called and n.id != "np"]


def _elementwise(e: ast.AST) -> bool:
    """Is every operation of e elementwise (the shape of the expression, not its kinds)?"""
    if isinstance(e, ast.Name) or _number(e):
        return True
    if isinstance(e, ast.BinOp):
        return type(e.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow) and \
            _elementwise(e.left) and _elementwise(e.right)
    if isinstance(e, ast.UnaryOp):
        return isinstance(e.op, (ast.USub, ast.UAdd)) and _elementwise(e.operand)
    name = _call_name(e)
    if name is None:
        return False
    short = name[len(NB):] if name.startswith(NB) else None
    if _ufunc(name) is not None:
        arity = 1
    elif short in _OPS or short in _IN_PLACE:
        arity = 2
    elif short == "op_neg":
        arity = 1
    else:
        return False
    return len(e.args) == arity and all(_elementwise(a) for a in e.args)


def _pure(e: ast.AST) -> bool:
    """An expression without effects a statement may be moved with."""
    if isinstance(e, (ast.Name, ast.Constant)):
        return True
    if isinstance(e, ast.BinOp):
        return _pure(e.left) and _pure(e.right)
    if isinstance(e, ast.UnaryOp):
        return _pure(e.operand)
    name = _call_name(e)
    if name is None:
        return False
    pure = name[3:] in _PURE_NP if name.startswith("np.") else name[len(NB):] in _PURE_HELPERS
    return pure and all(_pure(a) for a in e.args)


def _assignment(stmt: ast.stmt) -> Optional[Tuple[str, ast.expr]]:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    return None


@dataclass
class _Run:
    """A run being built: the statements fused, and those moved before and after it."""

    rank: Optional[int] = None
    shape: Optional[tuple] = None      # the inputs' shape in the first NumPy run, if known
    fused: List[Tuple[str, ast.expr]] = field(default_factory=list)
    before: List[ast.stmt] = field(default_factory=list)
    after: List[ast.stmt] = field(default_factory=list)
    originals: List[ast.stmt] = field(default_factory=list)
    defs: Set[str] = field(default_factory=set)
    reads: Set[str] = field(default_factory=set)
    after_defs: Set[str] = field(default_factory=set)
    after_reads: Set[str] = field(default_factory=set)
    terms: Set[str] = field(default_factory=set)    # the terms of a split `np.sum`


class _Fuser:
    def __init__(self, kinds: Dict[str, Kind], taken: Set[str],
                 shapes: Optional[Dict[str, tuple]] = None):
        self.kinds = kinds
        self.taken = taken
        self.shapes = shapes or {}

    # -- what a name holds -------------------------------------------------------------
    def _class(self, name: str, run: _Run) -> Optional[Tuple[str, int]]:
        """("array", rank) or ("number", 0) at this point of the run, or None (unknown)."""
        if name in run.defs:
            return ("array", run.rank)
        k = self.kinds.get(name)
        if k is None:
            return None
        if k[0] == "a" and k[2] == "float64":
            return ("array", k[1])
        if k[0] == "s" and k[1] in ("float64", "int64"):
            return ("number", 0)
        return None

    def _joins(self, target: str, value: ast.expr, run: _Run) -> bool:
        """Can `target = value` be computed elementwise as part of the run?"""
        if not _elementwise(value) or isinstance(value, ast.Name) or _number(value):
            return False
        reads = _loads(value)
        if reads & run.after_defs or target in run.after_reads or target in run.after_defs:
            return False
        rank, shape = run.rank, run.shape
        arrays = 0
        for name in reads:
            c = self._class(name, run)
            if c is None:
                return False
            if c[0] == "array":
                if rank is not None and c[1] != rank:
                    return False
                rank = c[1]
                arrays += 1
                seen = self.shapes.get(name) if name not in run.defs else None
                if seen is not None:
                    if shape is not None and seen != shape:
                        return False     # broadcasting in the first run: the loop would
                    shape = seen         # (most likely) never run, only cost its compile
        if arrays == 0 or rank == 0:
            return False
        name = _call_name(value)
        if name is not None and name[len(NB):] in _IN_PLACE:
            first = value.args[0]
            # (a moved `y = target` would alias it: target is then in after_reads)
            if not (isinstance(first, ast.Name) and first.id == target and
                    target in run.defs):
                return False
        run.rank, run.shape = rank, shape
        return True

    # -- the scan ----------------------------------------------------------------------
    def fuse(self, body: List[ast.stmt]) -> List[ast.stmt]:
        later = [set() for _ in range(len(body) + 1)]
        for i in range(len(body) - 1, -1, -1):
            later[i] = later[i + 1] | _loads(body[i])
        out: List[ast.stmt] = []
        run = _Run()
        for i, stmt in enumerate(body):
            steps = self._steps(stmt, run)
            if steps is None:
                out += self._flush(run, later[i])
                run = _Run()
                steps = self._steps(stmt, run)
            if steps is None:
                out.append(stmt)
                continue
            run.originals.append(stmt)
            for kind, target, value in steps:
                self._place(kind, target, value, run)
        out += self._flush(run, later[len(body)])
        return out

    def _steps(self, stmt: ast.stmt, run: _Run):
        """How stmt enters the run: [("fuse"|"move", target, value)], or None (it ends it)."""
        a = _assignment(stmt)
        if a is None:
            return None
        target, value = a
        if self._joins(target, value, run):
            return [("fuse", target, value)]
        name = _call_name(value)
        if name in ("np.sum", NB + "np_sum") and len(value.args) == 1 and \
                not isinstance(value.args[0], ast.Name):
            # r = np.sum(<elementwise>): the terms in the loop, the sum after it
            terms = self._fresh(target + "_terms")
            if self._joins(terms, value.args[0], run):
                total = ast.Call(func=value.func, args=[ast.Name(id=terms, ctx=ast.Load())],
                                 keywords=[])
                run.terms.add(terms)
                return [("fuse", terms, value.args[0]), ("move", target, total)]
            self.taken.discard(terms)
        if _pure(value):
            return [("move", target, value)]
        return None

    def _place(self, kind: str, target: str, value: ast.expr, run: _Run) -> None:
        reads = _loads(value)
        if kind == "fuse":
            run.fused.append((target, value))
            run.defs.add(target)
            run.reads |= reads
            return
        stmt = ast.Assign(targets=[ast.Name(id=target, ctx=ast.Store())], value=value,
                          lineno=0)
        hoist = not (reads & (run.defs | run.after_defs)) and \
            target not in run.reads | run.defs | run.after_reads | run.after_defs
        if hoist:
            run.before.append(stmt)
            return
        run.after.append(stmt)
        run.after_defs.add(target)
        run.after_reads |= reads

    def _fresh(self, base: str) -> str:
        return fresh_name(base, self.taken)

    # -- the loop ----------------------------------------------------------------------
    def _flush(self, run: _Run, read_later: Set[str]) -> List[ast.stmt]:
        if len(run.fused) < MIN_STATEMENTS:
            return run.originals
        sums = self._block_sums(run, read_later)
        after = [st for k, st in enumerate(run.after) if k not in sums]
        return run.before + self._loop(run, read_later | run.after_reads,
                                       list(sums.values())) + after

    def _block_sums(self, run: _Run, read_later: Set[str]
                    ) -> Dict[int, Tuple[str, str, ast.expr]]:
        """The moved `r = np.sum(terms)` whose terms nothing else reads: summed block by
        block inside the loop, so that the terms never make a pass over memory.
        {position in run.after: (r, terms, the sum's function)}"""
        out = {}
        for k, st in enumerate(run.after):
            target, value = _assignment(st)
            name = _call_name(value)
            if name not in ("np.sum", NB + "np_sum") or len(value.args) != 1 or \
                    not isinstance(value.args[0], ast.Name):
                continue
            terms = value.args[0].id
            others = [o for o in run.after if o is not st]
            earlier = run.after[:k]
            if terms not in run.terms or terms in read_later or \
                    any(terms in _loads(o) for o in others) or \
                    any(target in _loads(o) or _assignment(o)[0] == target for o in earlier):
                continue
            out[k] = (target, terms, value.func)
        return out

    def _loop(self, run: _Run, needed: Set[str],
              sums: Sequence[Tuple[str, str, ast.expr]] = ()) -> List[ast.stmt]:
        """The run as one loop (in blocks when it sums terms), and the original
        statements for when its shapes differ or its arguments are too wide."""
        inputs: List[str] = []          # arrays read from before the run, in order
        defined: Set[str] = set()
        for target, value in run.fused:
            for n in _reads_in_order(value):
                if n not in defined and n not in inputs and \
                        self._class(n, _Run()) == ("array", run.rank):
                    inputs.append(n)
            defined.add(target)
        summed = {terms: (total, func) for total, terms, func in sums}
        outputs = [t for t in dict.fromkeys(t for t, _ in run.fused)
                   if t in needed and t not in summed]
        domain = inputs[0]
        size, index = self._fresh("n"), self._fresh("i")
        flat = {n: self._fresh(n + "_flat") for n in inputs}
        out_flat = {n: self._fresh(n + "_flat") for n in outputs}
        body, element, wide = self._elements(run, flat, index)
        body += [f"{out_flat[n]}[{index}] = {element[n]}" for n in outputs]
        shape = f"{domain}.shape"
        code = [f"{NB}vector_width_512()", f"{size} = {domain}.size"]
        code += [f"{flat[n]} = np.ravel({n})" for n in inputs]
        code += [f"{out_flat[n]} = np.empty({size})" for n in outputs]
        if wide:
            code.append(f"{wide} = False")
        partial: Dict[str, str] = {}
        if summed:
            block, first, last = self._fresh("block"), self._fresh("start"), self._fresh("stop")
            buffers = {t: self._fresh(t + "_block") for t in summed}
            partial = {t: self._fresh(summed[t][0] + "_sum") for t in summed}
            body += [f"{buffers[t]}[{index} - {first}] = {element[t]}" for t in summed]
            code.append(f"{block} = max(min({size}, {SUM_BLOCK}), 1)")
            code += [f"{buffers[t]} = np.empty({block})" for t in summed]
            code += [f"{partial[t]} = 0.0" for t in summed]
            code.append(f"for {first} in range(0, {size}, {block}):")
            code.append(f"    {last} = min({first} + {block}, {size})")
            code.append(f"    for {index} in range({first}, {last}):")
            code += ["        " + line for line in body]
            code += [f"    {partial[t]} += {NB}block_sum({buffers[t]}, {last} - {first})"
                     for t in summed]
        else:
            code.append(f"for {index} in range({size}):")
            code += ["    " + line for line in body]
        results = [f"{n} = {out_flat[n]}.reshape({shape})" for n in outputs]
        results += [f"{summed[t][0]} = {partial[t]}" for t in summed]
        originals = [assign_node(t, copy.deepcopy(v)) for t, v in run.fused]
        originals += [assign_node(total, ast.Call(func=func, args=[name_node(terms)], keywords=[]))
                      for terms, (total, func) in summed.items()]
        tests = [f"{n}.shape != {shape}" for n in inputs[1:]]
        return self._guarded(code, results, originals, tests, wide)

    def _elements(self, run: _Run, flat: Dict[str, str], index: str
                  ) -> Tuple[List[str], Dict[str, str], Optional[str]]:
        """The loop body's statements (one per statement of the run, each preceded by
        the range tests of its sin and cos arguments), the element name of each name
        the run defines, and the flag the range tests set (None: no tests)."""
        element: Dict[str, str] = {}
        body: List[str] = []
        wide = None
        tested: Set[str] = set()      # arguments that read only the run's inputs
        for target, value in run.fused:
            visitor = _Element(flat, element, index)
            expr = visitor.visit(value)
            for argument, limit in visitor.limited:
                key = ast.dump(argument)
                if key in tested:
                    continue
                if not (_loads(argument) & set(element.values())):
                    tested.add(key)
                wide = wide or self._fresh("wide")
                body.append(f"{wide} = {wide} | (abs({ast.unparse(argument)}) >= {limit!r})")
            element[target] = element.get(target) or self._fresh(target + "_i")
            body.append(f"{element[target]} = {ast.unparse(expr)}")
        return body, element, wide

    def _guarded(self, code: List[str], results: List[str], originals: List[ast.stmt],
                 tests: List[str], wide: Optional[str]) -> List[ast.stmt]:
        """The loop's code, its results bound only once they stand, and the original
        statements where the shapes differ (tests) or an argument was too wide: the
        names the run reads keep their values until then."""
        if not tests and not wide:
            return ast.parse("\n".join(code + results)).body
        unfused = self._fresh("unfused")
        if wide:
            code = code + [f"{unfused} = {wide}"]
            if results:
                code += [f"if not {unfused}:"] + ["    " + line for line in results]
        else:
            code = code + results
        head = [f"{unfused} = {' or '.join(tests)}", f"if not {unfused}:"] if tests else []
        indent = "    " if tests else ""
        text = head + [indent + line for line in code] + [f"if {unfused}:", "    pass"]
        tree = ast.parse("\n".join(text)).body
        tree[-1].body = originals
        return tree


def _np(func: str, args: Sequence[ast.expr]) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=name_node("np"), attr=func, ctx=ast.Load()),
                    args=list(args), keywords=[])


class _Element(ast.NodeTransformer):
    """An elementwise expression as the expression of one element i.

    Arrays read from before the run become `x_flat[i]`, names the run defined
    become their element's name, numbers stay. Arithmetic that touches an array
    element gets NumPy's meaning; arithmetic on numbers alone keeps Python's.
    """

    def __init__(self, flat: Dict[str, str], element: Dict[str, str], index: str):
        self.flat = flat
        self.element = element
        self.index = index
        self.limited: List[Tuple[ast.expr, float]] = []   # (argument, its limit)

    def _per_element(self, e: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and (n.id in self.flat or n.id in self.element)
                   for n in ast.walk(e))

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in self.element:
            return name_node(self.element[node.id])
        if node.id in self.flat:
            return ast.Subscript(value=name_node(self.flat[node.id]), slice=name_node(self.index),
                                 ctx=ast.Load())
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        per_element = self._per_element(node)
        left, right = self.visit(node.left), self.visit(node.right)
        return _binary(type(node.op), left, right, node.right, per_element)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        return ast.UnaryOp(op=node.op, operand=self.visit(node.operand))

    def visit_Call(self, node: ast.Call) -> ast.expr:
        name = _call_name(node)
        short = name[len(NB):] if name.startswith(NB) else ""
        args = [self.visit(a) for a in node.args]
        if short == "op_neg":
            return ast.UnaryOp(op=ast.USub(), operand=args[0])
        op = _OPS.get(short) or _IN_PLACE.get(short)
        if op is not None:
            return _binary(op, args[0], args[1], node.args[1], self._per_element(node))
        ufunc = _ufunc(name)
        if ufunc in FAST:
            if ufunc in LIMITED:
                self.limited.append((copy.deepcopy(args[0]), LIMITED[ufunc]))
            return ast.Call(func=name_node(NB + "fast_" + ufunc), args=args, keywords=[])
        return _np(ufunc, args)


def _binary(op: type, left: ast.expr, right: ast.expr, original_right: ast.expr,
            per_element: bool) -> ast.expr:
    """left <op> right; with NumPy's meaning (no ZeroDivisionError) where per_element."""
    if per_element and op is ast.Div:
        return _np("divide", [left, right])
    if per_element and op is ast.Pow:
        # NumPy's `array ** number` shortcuts, which give what these ufuncs give
        if _number(original_right) and original_right.value == 2:
            return _np("square", [left])
        if _number(original_right) and original_right.value == 0.5:
            return _np("sqrt", [left])
        return _np("power", [left, right])
    return ast.BinOp(left=left, op=op(), right=right)


def elementwise_statements(fn: ast.FunctionDef) -> int:
    """How many elementwise statements fn has, if it is straight-line code of nothing
    else but whole-array sums and unpackings (0 otherwise): code whose runs all fuse
    when its arrays are float64 and of one shape, which jit_policy compiles at every
    size. Read on the NumPy pair, before any kinds are known."""
    count = 0
    for st in fn.body:
        if isinstance(st, ast.Return):
            continue
        if isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name) and \
                type(st.op) in (ast.Add, ast.Sub, ast.Mult) and _elementwise(st.value):
            count += 1
            continue
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1):
            return 0
        target, value = st.targets[0], st.value
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Name) and \
                all(isinstance(e, ast.Name) for e in target.elts):
            continue                       # x, y = residuals
        if not isinstance(target, ast.Name):
            return 0
        if _call_name(value) == "np.sum" and len(value.args) == 1:
            value = value.args[0]
        if not _elementwise(value):
            return 0
        count += not (isinstance(value, ast.Name) or _number(value))
    return count


def fuse_elementwise(fn: ast.FunctionDef, kinds: Dict[str, Kind],
                     shapes: Optional[Dict[str, tuple]] = None) -> ast.FunctionDef:
    """fn with its runs of elementwise top-level statements fused into loops (in place).

    kinds: what each name holds (numba_rewrite's kinds: ("a", rank, dtype) for an
    array, ("s", dtype) for a number); names without one are never fused.
    shapes: arrays' shapes seen in a NumPy run, where known: a run whose inputs had
    different shapes there (broadcasting) is not fused. (A heuristic against
    compiling a loop that would not run: the shapes are tested at run time.)
    """
    taken = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    taken |= {a.arg for a in fn.args.args} | {"np", "range"}
    fn.body = _Fuser(kinds, taken, shapes).fuse(fn.body)
    return fn
