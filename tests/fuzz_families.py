"""Program families of the differential fuzzer (tests/fuzz.py), issue 31 item 3.

The fuzzer's construct generator writes one entry function out of random statements
and expressions. The families here write whole programs of one shape each, around the
places where outside probes found silently wrong gradients: structured parameters
(lists, tuples, dicts, namedtuples, nested, with int/None/bool leaves), comprehensions
and generator expressions, calls whose tuple targets are their own arguments,
closures and lambdas, `s2sgrad.Function` subclasses with several outputs, decorators
and `functools.partial`, and derivatives of derivatives (checked against central
differences of the first gradient, which is itself checked: see FUZZ_ALSO).

Inside a family the details are random and the expressions come from the construct
generator (`ProgramGenerator.expr`), so every family still mixes in the constructs of
FEATURES. Each family is a weight in FEATURES (`fam_*`; `classic` is the construct
generator): `--disable fam_closure` turns one off, `--only fam_closure` runs it alone.

PATCHES are deliberately wrong engines for `--mutate`, one per family mechanism; each
monkeypatches a runtime helper, a rule or a compiler step in this process only.

This module imports nothing from fuzz.py (which imports it): the generator classes it
needs come in through the mixin's attributes (`self.Var`, ...).
"""
from __future__ import annotations

import ast

import numpy as np

# name -> weight; "classic" is the construct generator of fuzz.py
FAMILY_FEATURES = {
    "classic": 5.0,            # the construct generator (every construct above)
    "fam_pytree": 0.45,        # f(P, x): P nested lists/tuples/dicts/namedtuples with
                               # int/None/bool leaves; unpacking, loops, enumerate(.., 1),
                               # np.stack/np.r_/np.append/sum of item lists, helpers
                               # taking and returning structures
    "fam_comprehension": 0.4,  # list/dict comprehensions and generator expressions:
                               # enumerate(xs, k), zip, nested generators, conditions,
                               # sum/max/min/np.stack/np.array/np.r_ of them
    "fam_tuple_target": 0.4,   # h, c = cell(h, c) in loops and branches, keywords,
                               # swapped targets, Function.apply and lambdas as cell
    "fam_closure": 0.35,       # closures from module-level factories, module lambdas
                               # (two on one line), local lambdas (late binding), f
                               # itself a closure
    "fam_function_multi": 0.35,  # s2sgrad.Function subclasses with 2-3 outputs and
                               # hand-derived vjp (needs_input_grad, None, backward, jvp)
    "fam_decorator": 0.3,      # pass-through decorators (stacked, with arguments),
                               # @s2sgrad.differentiable, functools.partial helpers
                               # and entries
    "fam_higher_order": 0.3,   # grad of grad(g) projected, hvp / vjp(create_graph=True),
                               # value_and_grad, third order, structured inputs;
                               # first gradients checked too (FUZZ_ALSO)
}
FAMILIES = [k for k in FAMILY_FEATURES if k != "classic"]

# leaves of structures: kind -> shape ("float": a Python float)
LEAF_SHAPE = {"v3": (3,), "v4": (4,), "v2": (2,), "m23": (2, 3), "float": (), "0d": ()}
LEAF_KINDS = ["v3", "v3", "v2", "m23", "v4", "float", "float", "0d"]
TREE_KEYS = ["w", "b", "enc", "dec", "scale", "bias", "gain", "layers", "head", "aux"]


# --------------------------------------------------------------------------------------
# Structures as input: a spec says what to draw
#   ("leaf", kind) | ("int", n) | ("none",) | ("bool", b) |
#   ("list", [spec, ...]) | ("tuple", [...]) | ("named", [W, b]) | ("dict", [(key, spec)])
# --------------------------------------------------------------------------------------
def draw_tree(spec, rng, layer_cls):
    kind = spec[0]
    if kind == "leaf":
        v = rng.uniform(-1.0, 1.0, LEAF_SHAPE[spec[1]])
        if spec[1] == "float":
            return float(v)
        if spec[1] == "0d":
            return np.array(float(v))
        return v
    if kind == "int":
        return spec[1]
    if kind == "none":
        return None
    if kind == "bool":
        return spec[1]
    if kind == "list":
        return [draw_tree(s, rng, layer_cls) for s in spec[1]]
    if kind == "tuple":
        return tuple(draw_tree(s, rng, layer_cls) for s in spec[1])
    if kind == "named":
        return layer_cls(*[draw_tree(s, rng, layer_cls) for s in spec[1]])
    if kind == "dict":
        return {k: draw_tree(s, rng, layer_cls) for k, s in spec[1]}
    raise ValueError(spec)


def freeze(spec):
    """Specs are kept in `kinds` (compared, hashed): tuples all the way down."""
    if isinstance(spec, (list, tuple)):
        return tuple(freeze(s) for s in spec)
    return spec


def leaf_shape(spec):
    return LEAF_SHAPE[spec[1]] if spec[0] == "leaf" else None


# --------------------------------------------------------------------------------------
# Function classes with several outputs: random bodies, vjp derived by hand here
# --------------------------------------------------------------------------------------
# unary pieces: (value template, derivative template)
PIECES = [("{}", None), ("np.sin({})", "np.cos({})"), ("np.cos({})", "-np.sin({})"),
          ("np.tanh({})", "(1.0 - np.tanh({}) ** 2)"), ("{} ** 2", "2.0 * {}"),
          ("np.exp(0.5 * {})", "0.5 * np.exp(0.5 * {})")]


def _piece_value(p, arg):
    return PIECES[p][0].format(arg)


def _piece_deriv(p, arg):
    return "1.0" if PIECES[p][1] is None else PIECES[p][1].format(arg)


class FunctionSpec:
    """A Function subclass: outputs are sums of terms c * u(a_i) [* v(a_k)] [* ctx.k]."""

    def __init__(self, rng, name, n_in, n_out, const=False):
        self.name, self.n_in, self.n_out, self.const = name, n_in, n_out, const
        self.inputs = ["a", "b", "c"][:n_in]
        self.outputs = []
        for _ in range(n_out):
            terms = []
            for _ in range(rng.choice([1, 1, 2])):
                c = rng.choice(["1.0", "0.5", "-0.7", "1.3"])
                i = rng.randrange(n_in)
                u = rng.randrange(len(PIECES))
                second = None
                if n_in > 1 and rng.random() < 0.5:
                    k = rng.randrange(n_in)
                    second = (k, rng.randrange(len(PIECES)))
                scaled = const and rng.random() < 0.5
                terms.append((c, (i, u), second, scaled))
            self.outputs.append(terms)
        self.style = rng.choice(["saved", "saved", "attrs"])   # save_for_backward / ctx.x
        self.needs = rng.random() < 0.4                        # ctx.needs_input_grad
        self.backward = rng.random() < 0.25                    # `backward`, not `vjp`
        self.jvp = rng.random() < 0.3                          # a jvp staticmethod too

    def restored_inputs(self, ins):
        """The lines of vjp/jvp that read forward's inputs back from ctx."""
        if self.style == "saved":
            return [f"        {', '.join(ins)}{',' if len(ins) == 1 else ''} = ctx.saved_tensors"]
        return [f"        {n} = ctx.{n}_in" for n in ins]

    def term_value(self, t, names):
        c, (i, u), second, scaled = t
        e = f"{c} * {_piece_value(u, names[i])}"
        if second is not None:
            k, v = second
            e += f" * {_piece_value(v, names[k])}"
        if scaled:
            e += " * KK"
        return e

    def term_deriv(self, t, m, names):
        """d term / d input m, or None when the term does not read it."""
        c, (i, u), second, scaled = t
        parts = []
        if i == m:
            p = f"{c} * {_piece_deriv(u, names[i])}"
            if second is not None:
                p += f" * {_piece_value(second[1], names[second[0]])}"
            parts.append(p)
        if second is not None and second[0] == m:
            k, v = second
            parts.append(f"{c} * {_piece_value(u, names[i])} * {_piece_deriv(v, names[k])}")
        if not parts:
            return None
        e = " + ".join(parts)
        if scaled:
            e = f"({e}) * KK"
        return e

    def used(self, m):
        return any(self.term_deriv(t, m, self.inputs) is not None
                   for terms in self.outputs for t in terms)

    def source(self):
        ins = self.inputs
        sig = ", ".join(ins + (["k"] if self.const else []))
        L = [f"class {self.name}(s2sgrad.Function):", "    @staticmethod",
             f"    def forward(ctx, {sig}):"]
        if self.style == "saved":
            L.append(f"        ctx.save_for_backward({', '.join(ins)})")
        else:
            L += [f"        ctx.{n}_in = {n}" for n in ins]
        if self.const:
            L.append("        ctx.k = k")
        outs = []
        for j, terms in enumerate(self.outputs):
            e = " + ".join(self.term_value(t, ins) for t in terms).replace("KK", "k")
            L.append(f"        o{j} = {e}")
            outs.append(f"o{j}")
        L.append(f"        return {', '.join(outs)}")
        L += ["", "    @staticmethod"]
        gs = [f"g{j}" for j in range(self.n_out)]
        L.append(f"    def {'backward' if self.backward else 'vjp'}(ctx, {', '.join(gs)}):")
        L += self.restored_inputs(ins)
        grads = []
        for m, n in enumerate(ins):
            parts = []
            for j, terms in enumerate(self.outputs):
                ds = [d for d in (self.term_deriv(t, m, ins) for t in terms) if d is not None]
                if ds:
                    parts.append(f"g{j} * ({' + '.join(ds)})".replace("KK", "ctx.k"))
            if not parts:
                grads.append("None")
                continue
            if self.needs:
                L.append(f"        grad_{n} = None")
                L.append(f"        if ctx.needs_input_grad[{m}]:")
                L.append(f"            grad_{n} = {' + '.join(parts)}")
            else:
                L.append(f"        grad_{n} = {' + '.join(parts)}")
            grads.append(f"grad_{n}")
        if self.const:
            grads.append("None")
        L.append(f"        return {', '.join(grads)}{',' if len(grads) == 1 else ''}")
        if self.jvp:
            L += ["", "    @staticmethod"]
            dots = [f"{n}_dot" for n in ins] + (["k_dot"] if self.const else [])
            L.append(f"    def jvp(ctx, {', '.join(dots)}):")
            L += self.restored_inputs(ins)
            outs = []
            for j, terms in enumerate(self.outputs):
                parts = []
                for m, n in enumerate(ins):
                    ds = [d for d in (self.term_deriv(t, m, ins) for t in terms)
                          if d is not None]
                    if ds:
                        parts.append(f"{n}_dot * ({' + '.join(ds)})".replace("KK", "ctx.k"))
                L.append(f"        t{j} = {' + '.join(parts) if parts else '0.0 * a'}")
                outs.append(f"t{j}")
            L.append(f"        return {', '.join(outs)}")
        if self.style == "saved" and self.jvp:
            # forward mode reads ctx.saved_tensors from save_for_forward
            i = L.index(f"        ctx.save_for_backward({', '.join(ins)})")
            L.insert(i + 1, f"        ctx.save_for_forward({', '.join(ins)})")
        return "\n".join(L) + "\n"


# --------------------------------------------------------------------------------------
# The generators: a mixin of fuzz.ProgramGenerator
# --------------------------------------------------------------------------------------
class FamilyMixin:
    """`family_program(name, header)` -> (source, kinds). Needs from its host class:
    expr, declare, emit, fresh, block, final_return, loop_body, const, thr, paren,
    rng, used, classes, lines, indent, scopes, ints, ret, stmt_budget and the classes
    Var, View, ListVar, StructList, DictVar (as attributes)."""

    # ---- framing ----------------------------------------------------------------------
    def fam_begin(self, sig, declared=()):
        self.lines.append(sig)
        self.indent = 1
        self.scopes = [{}]
        self.ints = []
        self.ret = ()
        self.force = []
        for v in declared:
            self.declare(v)

    def fam_end(self, ret_expr=None):
        if ret_expr is None:
            self.final_return()
        else:
            self.emit(f"return {ret_expr}")
        self.lines += ["", ""]

    def arr(self, name, shape, param=True, owned=False):
        """A variable to declare (fam_begin declares those it is given)."""
        return self.Var(name, shape, owned, param=param)

    def let(self, shape, value, stem="v", param=False):
        """name = value, declared (not written into afterwards: it may share memory)."""
        name = self.fresh(stem)
        self.emit(f"{name} = {value}")
        self.declare(self.Var(name, shape, False, param=param))
        return name

    def scalar(self, name, shape, d=1):
        """A bounded scalar that reads `name` (of `shape`)."""
        if shape == ():
            return self.rng.choice([f"np.tanh({name}) * {self.paren(self.expr((), d))}",
                                    f"{name} * {self.paren(self.expr((), d + 1))}",
                                    f"np.sin({name})"])
        return self.scalar_of(name, shape, d)

    def entry_kinds(self, n, pool=("v3", "v3", "m23", "v4", "float", "0d")):
        kinds = [self.rng.choice(pool) for _ in range(n)]
        return kinds, [LEAF_SHAPE[k] for k in kinds]

    def assemble(self, header, module_lines, body_lines, extra_classes=()):
        classes = [self.CLASSES[c] for c in self.CLASSES if c in self.classes]
        classes += list(extra_classes)
        rest = "\n\n".join(classes) + ("\n\n" if classes else "") + \
            "\n".join(module_lines) + ("\n\n" if module_lines else "") + \
            "\n".join(body_lines)
        # (the modules the construct generator's SciPy expressions read, as a classic
        # program imports them: a helper's unreached branch read an unbound name)
        scipy_import = ("from scipy.spatial import distance\n" if "distance." in rest else "") + \
            ("import scipy.linalg\n" if "scipy.linalg." in rest else "")
        src = header + "import collections\nimport functools\nimport math\nimport operator\n\n" \
            "import numpy as np\n" + scipy_import + "\nimport s2sgrad\n\n" + self.GLOBALS_SRC + \
            "\n\n" + rest
        return src.rstrip() + "\n"

    def family_program(self, name, header):
        self.used[name] += 1
        self.lines = []
        return getattr(self, name)(header)

    # ---- structured parameters ----------------------------------------------------------
    def tree_spec(self, depth=0):
        r = self.rng.random()
        if depth >= 2 or r < 0.25:
            return ("leaf", self.rng.choice(LEAF_KINDS))
        if r < 0.45:   # a homogeneous list of records or of arrays
            rec = self.record_spec()
            return ("list", [rec] * self.rng.choice([1, 2, 3]))
        if r < 0.65:
            items = [self.tree_spec(depth + 1) for _ in range(self.rng.choice([2, 2, 3]))]
            return (self.rng.choice(["tuple", "list"]), items)
        keys = self.rng.sample(TREE_KEYS, self.rng.choice([2, 2, 3]))
        items = [(k, self.tree_spec(depth + 1)) for k in keys]
        if self.rng.random() < 0.35:   # a constant leaf: gradient None
            const = self.rng.choice([("int", self.rng.choice([1, 2, 3])), ("none",),
                                     ("bool", self.rng.choice([True, False]))])
            items.append((self.rng.choice(["n", "tag", "flag"]), const))
        return ("dict", items)

    def record_spec(self):
        if self.rng.random() < 0.35:
            return ("leaf", self.rng.choice(["v3", "v2", "m23", "float"]))
        s1 = self.rng.choice(["v3", "m23", "v2", "v4"])
        s2 = self.rng.choice([s1, "float", "v3"])
        kind = self.rng.choice(["tuple", "tuple", "list", "named", "dict"])
        if kind == "dict":
            return ("dict", [("w", ("leaf", s1)), ("b", ("leaf", s2))])
        return (kind, [("leaf", s1), ("leaf", s2)])

    def n_leaves(self, spec):
        if spec[0] == "leaf":
            return 1
        if spec[0] in ("list", "tuple", "named"):
            return sum(self.n_leaves(s) for s in spec[1])
        if spec[0] == "dict":
            return sum(self.n_leaves(s) for _, s in spec[1])
        return 0

    def read_tree(self, path, spec, depth=0):
        """Statements that read the float leaves of `path` (a structure of `spec`) into
        declared names (or views), through the ways a program takes a structure apart."""
        kind = spec[0]
        if kind == "leaf":
            shape = leaf_shape(spec)
            if self.rng.random() < 0.5:
                self.declare(self.View(path, shape))
            else:
                self.let(shape, path, "w", param=True)
            return
        if kind in ("int", "bool", "none"):
            self.read_const(path, spec)
            return
        if kind == "dict":
            items = spec[1]
            shapes = {leaf_shape(s) for _, s in items}
            if len(shapes) == 1 and None not in shapes and self.rng.random() < 0.4:
                self.dict_loop(path, items, shapes.pop())
                return
            for k, s in items:
                if self.rng.random() < 0.85:
                    self.read_tree(f'{path}["{k}"]', s, depth + 1)
            return
        items = spec[1]
        same = len({freeze(s) for s in items}) == 1
        if kind == "list" and same and self.rng.random() < 0.7:
            self.list_walk(path, items[0], len(items))
            return
        if all(s[0] == "leaf" for s in items) and self.rng.random() < 0.6:
            names = [self.fresh("w") for _ in items]
            src = f"{', '.join(names)}{',' if len(names) == 1 else ''} = {path}"
            self.emit(src)
            for n, s in zip(names, items):
                self.declare(self.Var(n, leaf_shape(s), False, param=True))
            return
        if kind == "named" and self.rng.random() < 0.7:
            for j, s in enumerate(items):
                self.read_tree(f"{path}.{'Wb'[j]}", s, depth + 1)
            return
        for j, s in enumerate(items):
            if self.rng.random() < 0.85:
                self.read_tree(f"{path}[{j if self.rng.random() < 0.7 else j - len(items)}]",
                               s, depth + 1)

    def read_const(self, path, spec):
        acc = self.accumulator()
        if spec[0] == "int":
            i = self.fresh("i")
            self.emit(f"for {i} in range({path}):")
            self.ints.append((i, spec[1]))
            self.loop_body(acc)
            self.ints.pop()
        else:
            test = {"none": f"{path} is None", "bool": path}[spec[0]]
            if self.rng.random() < 0.4:
                test = f"not {test}" if spec[0] == "bool" else f"{path} is not None"
            self.emit(f"if {test}:")
            self.if_body(acc)
            if self.rng.random() < 0.5:
                self.emit("else:")
                self.if_body(acc)

    def dict_loop(self, path, items, shape):
        acc = self.accumulator()
        k, v = self.fresh("k"), self.fresh("v")
        form = self.rng.choice(["items", "values", "keys"])
        vv = self.Var(v, shape, False, param=True)
        if form == "items":
            self.emit(f"for {k}, {v} in {path}.items():")
            self.loop_body(acc, vv, [vv])
        elif form == "values":
            self.emit(f"for {v} in {path}.values():")
            self.loop_body(acc, vv, [vv])
        else:
            self.emit(f"for {k} in {path}:")
            view = self.View(f"{path}[{k}]", shape)
            self.loop_body(acc, view, [view])

    def list_walk(self, path, item, n):
        """A list of n items of spec `item`: a loop, a generator, stacking, indexing."""
        shape = leaf_shape(item)
        opts = ["loop", "enumerate", "generator", "range", "index"]
        if shape is not None:
            opts += ["stack", "sum"] + (["r_", "append"] if len(shape) <= 1 else [])
        form = self.rng.choice(opts)
        if form in ("stack", "sum", "r_", "append"):
            if form == "stack":
                e = f"np.{self.rng.choice(['sum', 'mean'])}(np.stack({path}), axis=0)"
                self.let(shape, e, "st")
            elif form == "sum":
                self.let(shape, f"sum({path})" if self.rng.random() < 0.5 else
                         f"sum({path}, {self.zeros(shape)})", "sm")
            elif form == "r_":
                parts = [f"{path}[{j}]" for j in range(n)] + \
                    ([self.rng.choice(self.vars_of(shape)).name] if self.vars_of(shape)
                     else [])
                if len(parts) == 1:
                    parts.append(f"{parts[0]} * 2.0")
                self.force.append(f"{self.const()} * np.sum(np.tanh(np.r_[{', '.join(parts)}]))")
            else:
                other = self.expr(self.rng.choice([shape, ()]), 2)
                self.force.append(f"{self.const()} * np.sum(np.sin(np.append({path}, "
                                  f"{other})) ** 2)")
            return
        acc = self.accumulator()
        if form == "generator":
            it = self.fresh("it")
            parts, names = self.item_names(item, it)
            body = " + ".join(self.scalar(nm, sh, 2) for nm, sh in names)
            start = self.rng.choice([1, 2])
            if self.rng.random() < 0.5:
                j = self.fresh("j")
                gen = f"sum(({j} * 0.5) * ({body}) for {j}, {parts} in enumerate({path}, " \
                      f"{start}))"
            else:
                gen = f"sum({body} for {parts} in {path})"
            self.emit(f"{acc.name} = {acc.name} + 0.3 * np.tanh({gen})"
                      if acc.shape == () else f"{acc.name} = {acc.name} + 0.1 * {gen}")
            return
        it = self.fresh("it")
        if form in ("range", "index"):
            i = self.fresh("i")
            if form == "range":
                self.emit(f"for {i} in range(len({path})):")
            else:
                self.emit(f"for {i} in range({n}):")
            parts_names = self.item_reads(item, f"{path}[{i}]")
            self.ints.append((i, n))
            self.loop_body(acc, parts_names[0] if parts_names else None, parts_names)
            self.ints.pop()
            return
        parts, names = self.item_names(item, it)
        if form == "enumerate":
            j = self.fresh("j")
            self.emit(f"for {j}, {parts} in enumerate({path}, {self.rng.choice([1, 2, 0])}):")
        else:
            self.emit(f"for {parts} in {path}:")
        vs = [self.Var(nm, sh, False, param=True) for nm, sh in names]
        self.loop_body(acc, vs[0] if vs else None, vs)

    def item_names(self, item, stem):
        """The loop target for items of spec `item` and the names it binds."""
        if item[0] == "leaf":
            return stem, [(stem, leaf_shape(item))]
        if item[0] in ("tuple", "list", "named") and all(s[0] == "leaf" for s in item[1]):
            ns = [f"{stem}_{j}" for j in range(len(item[1]))]
            return f"({', '.join(ns)})", [(n, leaf_shape(s)) for n, s in zip(ns, item[1])]
        if item[0] == "dict":
            return stem, [(f'{stem}["{k}"]', leaf_shape(s)) for k, s in item[1]
                          if s[0] == "leaf"]
        return stem, []

    def item_reads(self, item, src):
        if item[0] == "leaf":
            return [self.View(src, leaf_shape(item))]
        if item[0] == "dict":
            return [self.View(f'{src}["{k}"]', leaf_shape(s)) for k, s in item[1]
                    if s[0] == "leaf"]
        if item[0] == "named":
            return [self.View(f"{src}.{'Wb'[j]}", leaf_shape(s))
                    for j, s in enumerate(item[1]) if s[0] == "leaf"]
        return [self.View(f"{src}[{j}]", leaf_shape(s)) for j, s in enumerate(item[1])
                if s[0] == "leaf"]

    def fam_pytree(self, header):
        specs = [self.tree_spec() for _ in range(self.rng.choice([1, 1, 2]))]
        for k, s in enumerate(specs):   # at least two float leaves in each
            while self.n_leaves(s) < 2:
                s = ("tuple", [s, ("leaf", self.rng.choice(LEAF_KINDS))])
            specs[k] = s
        nx = self.rng.choice([0, 1, 1, 2])
        xkinds, xshapes = self.entry_kinds(nx)
        names = ["P", "Q"][:len(specs)] + ["x", "y"][:nx]
        kinds = [("tree", freeze(s)) for s in specs] + xkinds
        order = list(range(len(names)))
        self.rng.shuffle(order)
        names = [names[i] for i in order]
        kinds = [kinds[i] for i in order]
        module = []
        # helpers taking a part of a structure (and one that returns a structure)
        helpers = []
        subs = []
        for s, pname in zip(specs, ["P", "Q"]):
            self.collect_subtrees(s, pname, subs)
        for k in range(self.rng.choice([0, 1, 1, 2])):
            if not subs:
                break
            path, sub = self.rng.choice(subs)
            name = f"h{k}"
            self.lines = []
            self.fam_begin(f"def {name}(p):")
            self.stmt_budget = 2
            self.read_tree("p", sub)
            self.block(self.rng.choice([0, 1]))
            self.fam_end()
            module += self.lines
            helpers.append((name, sub))
        maker = None
        if self.rng.random() < 0.4:
            shape = self.rng.choice([(3,), (2, 3), ()])
            self.lines = []
            self.fam_begin("def mk(u):", [self.arr("u", shape)])
            out = self.rng.choice([
                ("dict", [("w", ("leaf", "v3" if shape == (3,) else "m23"
                                 if shape else "float")),
                          ("p", ("list", [("leaf", "float"), ("leaf", "float")]))]),
                ("tuple", [("leaf", "float"), ("leaf", "float")])])
            self.fam_end(self.build_tree(out, shape))
            module += self.lines
            maker = (shape, out)
        self.lines = []
        declared = [self.arr(n, sh) for n, sh in zip(["x", "y"], xshapes)]
        self.fam_begin(f"def f({', '.join(names)}):", declared)
        self.stmt_budget = self.rng.choice([1, 2, 3])
        for s, pname in zip(specs, ["P", "Q"]):
            self.read_tree(pname, s)
        for hname, sub in helpers:
            paths = [p for p, s in subs if freeze(s) == freeze(sub)]
            for p in self.rng.sample(paths, min(len(paths), self.rng.choice([1, 2]))):
                self.force.append(f"{self.const()} * np.tanh({hname}({p}))")
        if maker is not None:
            shape, out = maker
            t = self.let_tree(f"mk({self.expr(shape, 1)})", out)
            self.read_tree(t, out)
        vs = [v for v in self.visible().values() if isinstance(v, self.Var) and not v.view]
        if vs and self.rng.random() < 0.3:
            # a tuple of variables, then one of them rebound, then the tuple unpacked and
            # indexed: its items are the values at the tuple's making
            a, b = self.rng.choice(vs), self.rng.choice(vs)
            t, u, w = self.fresh("T"), self.fresh("u"), self.fresh("w")
            self.emit(f"{t} = ({a.name}, {b.name})")
            self.emit(f"{a.name} = {self.expr(a.shape, 1)}")
            a.owned = False
            order = [u, w] if self.rng.random() < 0.5 else [w, u]
            self.emit(f"{order[0]}, {order[1]} = {t}" if order[0] == u else
                      f"{w}, {u} = {t}[1], {t}[0]")
            self.force.append(f"{self.const()} * np.sum(np.tanh({u})) + "
                              f"{self.const()} * np.sum(np.sin({w} * {t}[1]))")
        rows = [v for v in vs if v.shape and v.shape[0] >= 2]
        if rows and self.rng.random() < 0.3:
            self.loop_variable_reused(self.rng.choice(rows))
        if self.rng.random() < 0.25:   # a chained item assignment
            buf = self.fresh("buf")
            self.emit(f"{buf} = np.zeros(3)")
            self.emit(f"{buf}[0] = {buf}[2] = {self.expr((), 1)}")
            self.force.append(f"{self.const()} * np.sum(np.tanh({buf} * G3))")
        self.block(self.stmt_budget)
        self.fam_end()
        return self.assemble(header, module, self.lines), kinds

    def loop_variable_reused(self, v):
        """`for i in range(n):` with an inner loop that iterates over `i` again (or
        `for _ in ...` beside an inner loop over a constant array), `i` read as an
        index before and after the inner loop: after it, `i` is the inner loop's.
        Also `i` bound and read before the loop, a later loop over `i` again, and
        `i` read after the loops (the adjoint of each loop must give `i` back the
        value it had before that loop)."""
        r = self.fresh("r")
        name = self.rng.choice(["_", self.fresh("i")])
        rows = v.shape[0]
        read = f"np.sum(np.tanh({v.name}[{name}] * 1.5))"
        if self.rng.random() < 0.4:
            self.emit(f"{name} = {self.rng.randint(0, rows - 1)}")
            self.emit(f"{r} = {self.const()} * {read}")
        else:
            self.emit(f"{r} = 0.0")
        self.emit(f"for {name} in range({self.rng.randint(2, rows)}):")
        if self.rng.random() < 0.5:
            self.emit(f"    {r} = {r} + {self.const()} * {read}")
        if self.rng.random() < 0.6:
            self.emit(f"    for {name} in range({self.rng.randint(1, rows)}):")
            self.emit(f"        {r} = {r} * 0.9 + {self.const()} * {read}")
        else:
            w = self.fresh("w")
            self.emit(f"    for {w} in G2:")
            self.emit(f"        {r} = {r} + {w} * np.sum(np.sin({v.name}))")
        self.emit(f"    {r} = {r} + {self.const()} * {read}")
        if self.rng.random() < 0.4:
            self.emit(f"for {name} in range({self.rng.randint(1, rows)}):")
            self.emit(f"    {r} = {r} * 0.95" if self.rng.random() < 0.5 else
                      f"    {r} = {r} + {self.const()} * {read}")
        if self.rng.random() < 0.3:
            self.emit(f"{r} = {r} + {self.const()} * {read}")
        self.force.append(f"{self.const()} * np.tanh({r})")

    def let_tree(self, value, spec):
        name = self.fresh("T")
        self.emit(f"{name} = {value}")
        return name

    def build_tree(self, spec, shape):
        kind = spec[0]
        built = self.rng.random() < 0.3   # a constructor: list([...]), tuple((...)), dict(k=v)
        if kind == "leaf":
            return self.expr(leaf_shape(spec), 1)
        if kind == "dict":
            if built and all(str(k).isidentifier() for k, _ in spec[1]):
                return "dict(" + ", ".join(f"{k}={self.build_tree(s, shape)}"
                                           for k, s in spec[1]) + ")"
            return "{" + ", ".join(f'"{k}": {self.build_tree(s, shape)}'
                                   for k, s in spec[1]) + "}"
        inner = ", ".join(self.build_tree(s, shape) for s in spec[1])
        literal = f"[{inner}]" if kind == "list" else f"({inner},)" if len(spec[1]) == 1 \
            else f"({inner})"
        return f"{kind}({literal})" if built and kind in ("list", "tuple") else literal

    def collect_subtrees(self, spec, path, out):
        if spec[0] in ("list", "tuple", "dict", "named") and self.n_leaves(spec) >= 1 \
                and path not in ("P", "Q"):
            out.append((path, spec))
        if spec[0] == "dict":
            for k, s in spec[1]:
                self.collect_subtrees(s, f'{path}["{k}"]', out)
        elif spec[0] in ("list", "tuple", "named"):
            for j, s in enumerate(spec[1]):
                self.collect_subtrees(s, f"{path}[{j}]", out)

    # ---- comprehensions ---------------------------------------------------------------
    def fam_comprehension(self, header):
        n = self.rng.choice([1, 2, 2, 3])
        kinds, shapes = self.entry_kinds(n, ("v3", "v3", "m23", "v4", "0d", "float"))
        names = ["x", "y", "z"][:n]
        self.lines = []
        declared = [self.arr(nm, sh) for nm, sh in zip(names, shapes)]
        self.fam_begin(f"def f({', '.join(names)}):", declared)
        self.stmt_budget = self.rng.choice([0, 1, 2])
        lists = []   # (name, item shape, length or None)
        for _ in range(self.rng.choice([1, 2, 2, 3])):
            made = self.comp_make(lists)
            if made:
                lists.append(made)
        for _ in range(self.rng.choice([1, 2, 3])):
            self.comp_use(lists)
        shaped = [entry for entry in lists if entry[1] is not None]
        if shaped and self.rng.random() < 0.35:
            # a list literal with starred items: a list made above, a literal, an item
            name, shape, _ = self.rng.choice(shaped)
            S = self.fresh("S")
            items = [f"*{name}", self.expr(shape, 1)]
            if self.rng.random() < 0.5:
                items.append(f"*({self.expr(shape, 1)}, {self.expr(shape, 1)})")
            self.rng.shuffle(items)
            self.emit(f"{S} = [{', '.join(items)}]")
            self.force.append(f"{self.const()} * np.sum({S}[0] * {S}[-1])")
            if self.rng.random() < 0.5:
                self.force.append(f"{self.const()} * np.sum(np.stack([*{S}, "
                                  f"{self.expr(shape, 1)}]) ** 2)")
        module = []
        if self.rng.random() < 0.35:
            # a generator function of the module, consumed by sum, a loop or list()
            module = ["def gen_items(v, n):", "    for k in range(n):",
                      f"        yield np.tanh(v * (k + {self.const()}))",
                      "    return 0.0", "", ""]
            v = self.rng.choice(declared)
            n = self.rng.choice([1, 2, 3])
            form = self.rng.choice(["sum", "loop", "list"])
            if form == "sum":
                self.force.append(f"{self.const()} * sum(np.sum(u) for u in "
                                  f"gen_items({v.name}, {n}))")
            elif form == "loop":
                acc = self.fresh("acc")
                self.emit(f"{acc} = 0.0")
                u = self.fresh("u")
                self.emit(f"for {u} in gen_items({self.expr(v.shape, 1)}, {n}):")
                self.emit(f"    {acc} = 0.5 * {acc} + np.sum(np.sin({u}))")
                self.force.append(f"{self.const()} * {acc}")
            else:
                L = self.fresh("L")   # (a list: not declared as a value to compute with)
                self.emit(f"{L} = list(gen_items({v.name}, {n}))")
                self.force.append(f"{self.const()} * np.sum({L}[-1] * {L}[0])")
        self.block(self.stmt_budget)
        self.fam_end()
        return self.assemble(header, module, self.lines), kinds

    def comp_make(self, lists):
        vs = [v for v in self.visible().values() if isinstance(v, self.Var)]
        v = self.rng.choice(vs)
        shape = v.shape
        t, k = self.fresh("t"), self.fresh("k")
        name = self.fresh("xs")
        form = self.rng.choice(["range", "literal", "rows", "enum", "zip", "cond", "nested",
                                "dict", "items"])
        n = None
        if form == "rows" and len(shape) >= 1:
            shape = shape[1:]
            e = self.expr_with(self.Var(t, shape, False), shape, 2)
            value, n = f"[{e} for {t} in {v.name}]", v.shape[0]
        elif form == "literal" or (form == "rows"):
            m = self.rng.choice([2, 3])
            items = ", ".join(self.expr(shape, 2) for _ in range(m))
            value, n = f"[{items}]", m
        elif form == "range":
            m = self.rng.choice([2, 3, 4])
            self.ints.append((k, m))
            e = self.expr(shape, 2)
            self.ints.pop()
            value, n = f"[{e} * (0.3 * {k} + 0.5) for {k} in range({m})]", m
        elif form in ("enum", "zip", "cond", "nested") and lists:
            L, sh, ln = self.rng.choice(lists)
            if sh is None:
                return None
            shape = sh
            tv = self.Var(t, sh, False)
            if form == "enum":
                e = self.expr_with(tv, sh, 2)
                start = self.rng.choice(["1", "2", "start=1", "0"])
                value = f"[{e} * (0.25 * {k}) for {k}, {t} in enumerate({L}, {start})]"
                n = ln
            elif form == "zip":
                others = [(M, s2) for M, s2, _ in lists if s2 == sh]
                M = self.rng.choice(others)[0]
                u = self.fresh("u")
                e = self.expr_with(tv, sh, 2)
                value = f"[{e} * np.tanh({u}) for {t}, {u} in zip({L}, {M})]"
                n = ln
            elif form == "cond":
                e = self.expr_with(tv, sh, 2)
                cond = self.rng.choice([f"np.sum({t}) > {self.thr()}",
                                        f"np.mean(np.sin({t})) < {self.thr()}"])
                value = f"[{e} for {t} in {L} if {cond}]"
            else:
                others = [(M, s2) for M, s2, _ in lists]
                M, s2 = self.rng.choice(others)
                u = self.fresh("u")
                e = self.expr_with(tv, sh, 2)
                if s2 is None:
                    return None
                value = f"[{e} * np.mean(np.cos({u})) for {t} in {L} for {u} in {M}]"
        elif form == "dict":
            keys = self.rng.sample(["a", "b", "c", "d"], self.rng.choice([2, 3]))
            self.ints.append((k, len(keys)))
            e = self.expr(shape, 2)
            self.ints.pop()
            value = "{" + f"{t}: {e} * (1.0 + 0.5 * {k}) for {k}, {t} in " \
                          f"enumerate({keys!r})" + "}"
            self.emit(f"{name} = {value}")
            self.declare(self.DictVar(name, {kk: shape for kk in keys}, False))
            return None
        elif form == "items":
            Ds = self.dicts()
            if not Ds:
                return None
            D = self.rng.choice(Ds)
            sh = D.homogeneous()
            if sh is None:
                return None
            vv = self.Var(t, sh, False)
            e = self.expr_with(vv, sh, 2)
            value = "{" + f"{k}: {e} for {k}, {t} in {D.name}.items()" + "}"
            self.emit(f"{name} = {value}")
            self.declare(self.DictVar(name, dict(D.items), False))
            return None
        else:
            return None
        self.emit(f"{name} = {value}")
        if n is not None:
            self.declare(self.ListVar(name, [shape] * n, False, len(self.scopes)))
        else:
            lv = self.ListVar(name, [], False, len(self.scopes))
            lv.hom = shape
            self.declare(lv)
        return name, shape, n

    def comp_use(self, lists):
        forms = ["sum_gen", "max_gen", "stack", "array", "sum_list", "enum_loop", "dict_sum"]
        if not lists:
            forms = ["dict_sum"] if self.dicts() else []
            if not forms:
                self.force.append(self.expr((), 1))
                return
        form = self.rng.choice(forms)
        if form == "dict_sum" and self.dicts():
            D = self.rng.choice(self.dicts())
            sh = D.homogeneous()
            v = self.fresh("v")
            self.force.append(f"{self.const()} * np.tanh(sum({self.scalar_of(v, sh, 2)} "
                              f"for {v} in {D.name}.values()))")
            return
        if not lists:
            self.force.append(self.expr((), 1))
            return
        L, sh, n = self.rng.choice(lists)
        t, k = self.fresh("t"), self.fresh("k")
        if form == "sum_gen":
            start = self.rng.choice(["1", "2", "start=3"])
            if self.rng.random() < 0.5:
                g = f"sum((0.5 * {k}) * {self.scalar_of(t, sh, 2)} for {k}, {t} in " \
                    f"enumerate({L}, {start}))"
            else:
                g = f"sum(({self.scalar_of(t, sh, 2)} for {t} in {L}), 0.0)"
            self.force.append(f"{self.const()} * np.tanh({g})")
        elif form == "max_gen" and n:
            fn = self.rng.choice(["max", "min"])
            self.force.append(f"{self.const()} * {fn}({self.scalar_of(t, sh, 2)} "
                              f"for {t} in {L})")
        elif form == "stack" and n:
            if sh == ():
                self.force.append(f"{self.const()} * np.sum(np.tanh(np.array({L})))")
            else:
                self.force.append(f"{self.const()} * np.sum(np.sin(np.stack({L})))")
        elif form == "array":
            inner = f"[{self.scalar_of(t, sh, 2)} for {t} in {L}]"
            fn = self.rng.choice(["np.array", "np.r_.__getitem__"]) if False else "np.array"
            arr = f"{fn}({inner})"
            if n and sh != () and len(sh) == 1 and self.rng.random() < 0.4:
                arr = f"np.r_[{', '.join(f'{L}[{j}]' for j in range(n))}]"
            elif n and sh != () and len(sh) == 1 and self.rng.random() < 0.3:
                arr = f"np.append({L}, {self.expr(sh, 2)})"
            self.force.append(f"{self.const()} * np.sum(np.tanh({arr}) ** 2)")
        elif form == "sum_list" and n:
            self.force.append(f"{self.const()} * np.sum(np.tanh(sum({L})))")
        else:
            acc = self.accumulator()
            tv = self.Var(t, sh, False)
            self.emit(f"for {k}, {t} in enumerate({L}, {self.rng.choice([1, 2])}):")
            self.loop_body(acc, tv, [tv])

    # ---- calls whose tuple targets are their own arguments --------------------------------
    def fam_tuple_target(self, header):
        n = self.rng.choice([1, 2, 2, 3])
        kinds, shapes = self.entry_kinds(n, ("v3", "v3", "m23", "v4", "float", "0d"))
        names = ["x", "y", "z"][:n]
        state_shape = self.rng.choice(shapes)
        width = self.rng.choice([2, 2, 2, 3])
        module, extra = [], []
        cells = []
        for c in range(self.rng.choice([1, 1, 2])):
            kind = self.rng.choice(["def", "def", "def", "apply", "lambda", "nested"])
            if kind == "nested" and width != 3:
                kind = "def"
            st = ["h", "c", "d"][:width]
            if kind == "apply":
                spec = FunctionSpec(self.rng, f"Cell{c}", width, width)
                extra.append(spec.source())
                cells.append((f"Cell{c}.apply", kind, st, False))
                continue
            if kind == "lambda":
                cells.append((f"step{c}", kind, st, False))
                continue
            self.lines = []
            extra_arg = self.rng.random() < 0.5
            params = st + (["w"] if extra_arg else [])
            declared = [self.arr(p, state_shape) for p in st]
            if extra_arg:
                declared.append(self.arr("w", self.rng.choice([state_shape, ()])))
            if kind == "nested":   # def cell(h, cd): c, d = cd; ... return h2, (c2, d2)
                self.fam_begin(f"def cell{c}(h, cd{', w' if extra_arg else ''}):", declared)
                self.emit("c, d = cd")
                self.declare(self.arr("d", state_shape))
                st = ["h", "c", "d"]
            else:
                self.fam_begin(f"def cell{c}({', '.join(params)}):", declared)
            if kind != "nested":
                self.ret = tuple([state_shape] * width)   # (an early return gives a tuple)
                self.stmt_budget = self.rng.choice([0, 1])
                self.block(self.stmt_budget)
            outs = [self.cell_update(p, state_shape, st) for p in st]
            if kind == "nested":
                self.fam_end(f"{outs[0]}, ({outs[1]}, {outs[2]})")
            else:
                self.fam_end(", ".join(outs))
            module += self.lines
            cells.append((f"cell{c}", kind, st, extra_arg))
        self.lines = []
        declared = [self.arr(nm, sh) for nm, sh in zip(names, shapes)]
        self.fam_begin(f"def f({', '.join(names)}):", declared)
        self.stmt_budget = self.rng.choice([0, 1, 2])
        state = [self.fresh(s) for s in ["h", "c", "d"][:width]]
        same = [v for v in declared if v.shape == state_shape]
        for s in state:
            init = self.rng.choice([f"{self.rng.choice(same).name}",
                                    self.expr(state_shape, 1)])
            self.emit(f"{s} = {init}")
            self.declare(self.Var(s, state_shape, False))
        for name, kind, st, _ in cells:
            if kind == "lambda":
                ps = [self.fresh("a") for _ in st]
                self.scopes.append({p: self.Var(p, state_shape, False) for p in ps})
                outs = [self.cell_update(p, state_shape, ps) for p in ps]
                self.scopes.pop()
                self.emit(f"{name} = lambda {', '.join(ps)}: ({', '.join(outs)})")
        for _ in range(self.rng.choice([1, 1, 2])):
            name, kind, st, extra_arg = self.rng.choice(cells)
            self.tuple_call_site(name, kind, st, extra_arg, state, state_shape)
        if self.rng.random() < 0.35:
            # a function's tuple or list of results (np.modf, np.split) passed whole to a
            # helper, twice:
            # its cotangents add item by item, never `+` of two tuples
            module += ["def joined(t):", "    return t[0] * 0.8 + t[1]", "", ""]
            parts = self.fresh("parts")
            if state_shape and state_shape[0] % 2 == 0 and self.rng.random() < 0.5:
                # np.split's list of halves, joined back to the state's shape
                self.emit(f"{parts} = np.split(0.5 * {state[0]}, 2)")
                self.emit(f"{state[0]} = np.concatenate([joined({parts}), "
                          f"np.tanh(joined({parts}))])")
            else:
                self.emit(f"{parts} = np.modf(0.5 * {state[0]})")
                self.emit(f"{state[0]} = joined({parts}) + 0.5 * np.tanh(joined({parts}))")
        self.force.append(f"{self.const()} * np.sum(np.tanh({state[0]}))")
        if self.rng.random() < 0.7:
            self.force.append(f"{self.const()} * np.sum(np.sin({state[1]}))")
        self.block(self.stmt_budget)
        self.fam_end()
        return self.assemble(header, module, self.lines, extra), kinds

    def cell_update(self, p, shape, st):
        """A bounded new value of state variable p, reading the others sometimes."""
        other = self.rng.choice(st)
        e = self.expr(shape, 2)
        return self.rng.choice([f"np.tanh({p} * {self.paren(e)} + 0.5 * {other})",
                                f"0.5 * {p} + 0.5 * np.sin({other} * {self.paren(e)})",
                                f"{other} * 0.8 + 0.2 * np.tanh({e})"])

    def tuple_call_site(self, name, kind, st, extra_arg, state, shape):
        width = len(state)
        targets = list(state)
        args = list(state)
        r = self.rng.random()
        if r < 0.2 and width >= 2:      # swapped: c, h = cell(h, c)
            targets[0], targets[1] = targets[1], targets[0]
        elif r < 0.35 and width >= 2:   # one target a new name: h, e = cell(h, c)
            targets[1] = self.fresh("e")
        call_args = list(args)
        if kind == "nested":
            call_args = [args[0], f"({args[1]}, {args[2]})"]
        for tname in targets:
            if tname not in state:   # h, e = cell(h, c): e is read afterwards
                self.emit(f"{tname} = {state[1]} * 1.0")
        wargs = []
        if extra_arg:
            vs = [v for v in self.visible().values() if isinstance(v, self.Var) and
                  v.param and v.shape in (shape, ())]
            wargs = [self.rng.choice(vs).name if vs else "0.5"]
        if kind == "def" and self.rng.random() < 0.3:   # keywords, in another order
            kw = [f"{p}={a}" for p, a in zip(st, call_args)] + \
                 ([f"w={wargs[0]}"] if wargs else [])
            self.rng.shuffle(kw)
            call = f"{name}({', '.join(kw)})"
        else:
            call = f"{name}({', '.join(call_args + wargs)})"
        if kind == "nested":
            lhs = f"{targets[0]}, ({targets[1]}, {targets[2]})"
        else:
            lhs = ", ".join(targets)
        where = self.rng.choice(["loop", "loop", "loop", "if", "plain", "while", "nested"])
        if where == "plain":
            self.emit(f"{lhs} = {call}")
        elif where == "if":
            self.emit(f"if {self.cond()}:")
            self.indent += 1
            self.emit(f"{lhs} = {call}")
            self.indent -= 1
            if self.rng.random() < 0.5:
                self.emit("else:")
                self.indent += 1
                self.emit(f"{lhs} = {call}")
                self.indent -= 1
        elif where == "while":
            i = self.fresh("i")
            self.emit(f"{i} = 0")
            self.emit(f"while {i} < {self.rng.choice([2, 3])}:")
            self.indent += 1
            self.emit(f"{lhs} = {call}")
            self.emit(f"{i} += 1")
            self.indent -= 1
        else:
            i = self.fresh("i")
            self.emit(f"for {i} in range({self.rng.choice([2, 3])}):")
            self.indent += 1
            if where == "nested":
                j = self.fresh("j")
                self.emit(f"for {j} in range(2):")
                self.indent += 1
                self.emit(f"{lhs} = {call}")
                self.indent -= 1
            else:
                if self.rng.random() < 0.3:
                    self.emit(f"if {self.cond()}:")
                    self.indent += 1
                    self.emit("continue")
                    self.indent -= 1
                self.emit(f"{lhs} = {call}")
            self.indent -= 1
        for tname in targets:
            if tname not in state:
                self.declare(self.Var(tname, shape, False))
                self.force.append(f"{self.const()} * np.sum(np.tanh({tname}))")

    # ---- closures and lambdas ---------------------------------------------------------
    def fam_closure(self, header):
        n = self.rng.choice([1, 2, 2])
        kinds, shapes = self.entry_kinds(n, ("v3", "v3", "m23", "float", "0d"))
        names = ["x", "y"][:n]
        module = []
        fns = []     # (callable expression, arity) for one-argument elementwise functions
        # closures made by module-level factories
        for k in range(self.rng.choice([0, 1, 1, 2])):
            form = self.rng.choice(["scale", "array", "compose"]) if fns else \
                self.rng.choice(["scale", "array"])
            if form == "scale":
                module += [f"def make{k}(s, t):", f"    def act{k}(u):",
                           "        return np.tanh(u * s) + t * np.sin(u)",
                           f"    return act{k}", "", "",
                           f"act{k} = make{k}({self.const()}, {self.const()})"]
            elif form == "array":
                module += [f"def make{k}(c):", f"    def act{k}(u):",
                           "        return np.sin(u) * c + np.tanh(u) * (1.0 - c)",
                           f"    return act{k}", "", "",
                           f"act{k} = make{k}({self.rng.choice(['0.3', '0.8', 'C1'])})"]
            else:
                a, b = self.rng.choice(fns), self.rng.choice(fns)
                module += [f"def make{k}(outer, inner):", f"    def act{k}(u):",
                           "        return outer(inner(u) * 0.7)",
                           f"    return act{k}", "", "",
                           f"act{k} = make{k}({a}, {b})"]
            module += ["", ""]
            fns.append(f"act{k}")
        if self.rng.random() < 0.6:   # two lambdas on one line, at module level
            a, b = self.fresh("la"), self.fresh("lb")
            module += [f"{a}, {b} = lambda u: np.sin(u) * {self.const()}, "
                       f"lambda u: np.tanh(u) * u", "", ""]
            fns += [a, b]
        if self.rng.random() < 0.4:
            a = self.fresh("lc")
            module += [f"{a} = lambda u: np.cos(u) + u * {self.const()}", "", ""]
            fns.append(a)
        if self.rng.random() < 0.25:
            return self.lambda_entry(header, module, fns, names, shapes), kinds
        entry_closure = self.rng.random() < 0.35
        self.lines = []
        declared = [self.arr(nm, sh) for nm, sh in zip(names, shapes)]
        if entry_closure:
            self.fam_begin("def make_f(k0):", [])
            self.emit(f"def f({', '.join(names)}):")
            self.indent = 2
            self.scopes = [{}]
            for v in declared:
                self.declare(v)
            self.declare(self.Var("k0", (), False))
        else:
            self.fam_begin(f"def f({', '.join(names)}):", declared)
        self.stmt_budget = self.rng.choice([0, 1, 2])
        # local lambdas, closing over arguments and locals
        local = []
        defaulted = set()   # lambdas and nested defs with a default: called with it or not
        for _ in range(self.rng.choice([0, 1, 1, 2])):
            lam = self.fresh("g")
            v = self.rng.choice([d for d in declared])
            s = self.rng.choice([f"np.sum({v.name})" if v.shape else v.name,
                                 self.expr((), 2)])
            closed = self.let((), f"0.5 * np.tanh({s})", "s")
            body = self.rng.choice([f"np.sin(u) * {closed}", f"np.tanh(u * {closed}) + u",
                                    f"u * u * 0.5 + {closed} * np.cos(u)"])
            if entry_closure and self.rng.random() < 0.3:
                body = f"({body}) * k0"   # a variable of the factory around f too
            if self.rng.random() < 0.3:   # a constant default, called with it or not
                self.emit(f"{lam} = lambda u, k={self.rng.choice(['0.5', '2', '-0.7'])}: "
                          f"({body}) * k")
                defaulted.add(lam)
            else:
                self.emit(f"{lam} = lambda u: {body}")
            if self.rng.random() < 0.3:   # late binding: the lambda sees the new value
                self.emit(f"{closed} = {closed} * 0.5 + 0.1")
            local.append(lam)
        for _ in range(self.rng.choice([0, 0, 1, 2])):   # nested defs closing over locals
            cell = self.fresh("cell")
            v = self.rng.choice([d for d in declared])
            s = f"np.sum({v.name})" if v.shape else v.name
            closed = self.let((), f"0.3 * np.tanh({s})", "s")
            if self.rng.random() < 0.5:
                # the outer variables it reads follow its own parameters when lifted:
                # once, a default left out let one of them take k's place (silently)
                self.emit(f"def {cell}(u, k={self.rng.choice(['0.5', '2', '-0.7'])}):")
                defaulted.add(cell)
            else:
                self.emit(f"def {cell}(u):")
            self.indent += 1
            self.emit(f"z = np.tanh(u * {closed}) + 0.5 * u" if cell not in defaulted else
                      f"z = np.tanh(u * {closed}) + 0.5 * u * k")
            if self.rng.random() < 0.5:
                self.emit("z = z * np.cos(u)")
            self.emit(f"return z + {closed}")
            self.indent -= 1
            if self.rng.random() < 0.3:   # the def sees the outer value when called
                self.emit(f"{closed} = {closed} * 0.5 + 0.1")
            local.append(cell)
        pure_local = []   # a def or lambda here reading no variable of this function
        if self.rng.random() < 0.4:
            g = self.fresh("pure")
            if self.rng.random() < 0.5:
                self.emit(f"{g} = lambda u: np.tanh(u) * {self.const()} + u * 0.3")
            else:
                self.emit(f"def {g}(u):")
                self.emit(f"    return np.sin(u * {self.const()}) + u * u * 0.2")
            pure_local.append(g)
        arrays = [d for d in declared if d.shape]
        if arrays and self.rng.random() < 0.3:
            # weights from a module-level helper the gradient does not pass through
            # (its dtype unseen: checked at run time not to be complex), real, or
            # complex and made real (np.abs, np.real) before the gradient path reads it
            v = self.rng.choice(arrays)
            win, w = self.fresh("window"), self.fresh("w")
            n = f"{v.name}.shape[-1]"
            if self.rng.random() < 0.5:
                module += [f"def {win}(n):", "    return np.cos(np.arange(n) * 0.4) + 1.5",
                           "", ""]
                use = f"{win}({n})"
            else:
                module += [f"def {win}(n):", "    return np.exp(1j * np.arange(n) * 0.4)",
                           "", ""]
                use = self.rng.choice([f"np.abs({win}({n}))", f"np.real({win}({n})) + 1.5"])
            self.emit(f"{w} = {use}")
            self.emit(f"{v.name} = {v.name} * {w}")
        if arrays and self.rng.random() < 0.3:
            # complex values in between (the rules for complex arguments, and real
            # parts of the cotangents of the real values they meet), a real result
            v = self.rng.choice(arrays)
            zc = self.fresh("zc")
            c = self.rng.choice(["(0.6 + 0.8j)", "1j", "(0.3 - 1.1j)"])
            self.emit(f"{zc} = {v.name} * {c} + np.exp(1j * {v.name} * 0.5)")
            if self.rng.random() < 0.4:
                self.emit(f"{zc} = {zc} * np.conj({zc}) * 0.2 + np.sin({zc}) / ({zc} + 3.0)")
            if self.rng.random() < 0.4:   # a helper of the module given complex values
                helper = self.fresh("cmix")
                module += [f"def {helper}(u, k):", "    r = np.abs(u + 3.0)",
                           "    return u * np.exp(0.3j * u) * k + r * u, r", "", ""]
                r = self.fresh("r")
                self.emit(f"{zc}, {r} = {helper}({zc}, {v.name})")
                self.emit(f"{zc} = {zc} + {r} * (0.5 - 0.2j)")
            if self.rng.random() < 0.3:   # writes into a complex array
                zw = self.fresh("zw")
                self.emit(f"{zw} = {zc} * 1.0")
                self.emit(f"{zw}[0] = {zw}[0] * 0.5 + np.abs({zc}[0] + 3.0) * {v.name}[0]"
                          if self.rng.random() < 0.5
                          else f"{zw}[-1] = {v.name}[-1] * (0.4 - 0.3j)")
                self.emit(f"{zc} = {zw} + {zc} * 0.5")
            form = self.rng.choice([
                f"np.abs({zc} + 3.0) ** 2", f"np.real({zc} * np.conj({zc}) * 0.3)",
                f"np.angle({zc} + 3.0)", f"np.imag(np.exp({zc} * 0.4))",
                f"np.abs(np.fft.fft({zc}) + 6.0)", f"{zc}.real * {zc}.imag",
                # a real value (|z|, Re z) meeting complex ones again
                f"np.real(np.abs({zc} + 3.0) * (0.5 + 0.5j) * {zc})",
                f"np.imag(np.real({zc}) * np.exp(0.5j * {zc}))",
                # Hermitian eigendecomposition and SVD of complex matrices made from it
                # (distinct values; phase-free uses of the vectors)
                f"0.1 * np.sum(np.linalg.eigvalsh(np.outer({zc}.ravel(), np.conj({zc}.ravel()))"
                f" + np.diag(np.arange(1.0, {zc}.size + 1.0))))",
                f"0.1 * np.sum(np.abs(np.linalg.eigh(np.outer({zc}.ravel(), np.conj("
                f"{zc}.ravel())) + np.diag(np.arange(1.0, {zc}.size + 1.0)))[1][0]) ** 2)",
                f"0.1 * np.sum(np.linalg.svd(np.outer({zc}.ravel(), {zc}.ravel()[::-1]) + "
                f"np.diag(np.arange(1.0, {zc}.size + 1.0)), compute_uv=False))"])
            if self.rng.random() < 0.35:
                # in a loop: complex values kept per step, a real one carried across
                k, acc = self.fresh("k"), self.fresh("acc")
                self.emit(f"{acc} = {zc} * 0.0")
                self.emit(f"for {k} in range({self.rng.choice([2, 3])}):")
                self.emit(f"    {acc} = {acc} * np.exp(0.3j * {k}) + {zc} * {v.name}")
                self.emit(f"    {v.name} = {v.name} * 0.8 + 0.1 * np.abs({acc} + 3.0)")
                form = f"np.real({acc} * np.conj({zc}))"
            self.emit(f"{v.name} = {v.name} + 0.3 * {form}")
        if arrays and self.rng.random() < 0.2:   # complex values a helper returns
            self.complex_step(arrays, module)
        if len(local) < 2 and self.rng.random() < 0.3:   # two local lambdas on one line
            a, b = self.fresh("g"), self.fresh("g")
            self.emit(f"{a} = lambda u: np.sin(u) * 0.5; {b} = lambda u: np.tanh(u) * u")
            local += [a, b]
        pool = fns + local
        if not pool:
            lam = self.fresh("g")
            self.emit(f"{lam} = lambda u: np.tanh(u) * 1.5")
            pool.append(lam)
        passable = fns + ["np.tanh", "np.sin"]   # known at compile time: module-level
        helpers_made = set()
        arrays = [d for d in declared if d.shape]
        if arrays and self.rng.random() < 0.3:
            # a name bound to a module-level function, a loop over a literal of them
            v = self.rng.choice(arrays)
            act = self.fresh("act")
            if self.rng.random() < 0.5:
                self.emit(f"{act} = {self.rng.choice(passable)}")
                self.emit(f"{v.name} = {act}({v.name}) * 0.9 + 0.1")
                if self.rng.random() < 0.5:
                    self.emit(f"{act} = {self.rng.choice(passable)}")
                    self.emit(f"{v.name} = {v.name} + 0.5 * {act}({v.name})")
            else:
                picks = [self.rng.choice(passable) for _ in range(self.rng.choice([2, 3]))]
                bracket = "[{}]" if self.rng.random() < 0.5 else "({},)"
                listed = bracket.format(', '.join(picks))
                where = self.rng.random()
                if where < 0.3:   # a module-level tuple or list of them, also called by index
                    fns = self.fresh("FNS")
                    module += [f"{fns} = {listed}", "", ""]
                    listed = fns
                    k = self.rng.randint(-len(picks), len(picks) - 1)
                    self.emit(f"{v.name} = {v.name} + 0.2 * {fns}[{k}]({v.name})")
                elif where < 0.6:   # bound to a name first, also called by index
                    fns = self.fresh("fns")
                    self.emit(f"{fns} = {listed}")
                    listed = fns
                    k = self.rng.randint(-len(picks), len(picks) - 1)
                    self.emit(f"{v.name} = {v.name} + 0.2 * {fns}[{k}]({v.name})")
                if self.rng.random() < 0.4:   # zipped with weights (a literal or a name)
                    weights = "[" + ", ".join(self.const() for _ in picks) + "]"
                    if self.rng.random() < 0.5:
                        ws = self.fresh("ws")
                        self.emit(f"{ws} = {weights}")
                        weights = ws
                    w = self.fresh("w")
                    pair = self.rng.choice([(f"{act}, {w}", listed, weights),
                                            (f"{w}, {act}", weights, listed)])
                    self.emit(f"for {pair[0]} in zip({pair[1]}, {pair[2]}):")
                    self.emit(f"    {v.name} = {act}({v.name} * 0.8) * {w} + 0.1 * {v.name}")
                elif self.rng.random() < 0.3:   # enumerated: the index a number per step
                    i = self.fresh("i")
                    start = self.rng.choice(["", ", 1", ", start=2"])
                    self.emit(f"for {i}, {act} in enumerate({listed}{start}):")
                    self.emit(f"    {v.name} = {act}({v.name} * 0.8) + 0.1 * {i} * {v.name}")
                else:
                    self.emit(f"for {act} in {listed}:")
                    self.emit(f"    {v.name} = {act}({v.name} * 0.8) + 0.1 * {v.name}")
        def called(fn, arg):   # a call of fn, given its default or not, by position or name
            if fn not in defaulted:
                return f"{fn}({arg})"
            return self.rng.choice([f"{fn}({arg})", f"{fn}({arg}, {self.const()})",
                                    f"{fn}({arg}, k={self.const()})"])
        for _ in range(self.rng.choice([1, 2, 2, 3])):
            fn = self.rng.choice(pool)
            v = self.rng.choice(declared)
            form = self.rng.choice(["direct", "nested", "loop", "passed", "partial",
                                    "derivative"])
            if form == "derivative" and not (fn in local and v.shape):
                form = "direct"
            if form == "partial":
                # a partial made here, of a module-level helper, holding a value of
                # this function (its value now, though the name is rebound after)
                if "apply_fn" not in helpers_made:
                    helpers_made.add("apply_fn")
                    module += ["def apply_fn(fn, v, c):", "    return fn(v * c) + v", "", ""]
                p = self.fresh("p")
                if self.rng.random() < 0.05:
                    # a partial in either branch: a call after the if may mean either
                    # (refused; once read as the else branch's, silently wrong)
                    self.emit(f"if np.sum({v.name}) > {self.thr()}:")
                    self.emit(f"    {p} = functools.partial(apply_fn, "
                              f"{self.rng.choice(passable)}, c={self.const()})")
                    self.emit("else:")
                    self.emit(f"    {p} = functools.partial(apply_fn, "
                              f"{self.rng.choice(passable)}, c={self.const()})")
                    self.force.append(f"{self.const()} * np.sum({p}({v.name}))")
                    continue
                c = self.let((), f"0.5 + 0.3 * np.tanh({self.scalar_of(v.name, v.shape, 2)})"
                             if v.shape else f"0.5 + 0.3 * np.tanh({v.name})", "c")
                self.emit(f"{p} = functools.partial(apply_fn, {self.rng.choice(passable)}, "
                          f"c={c})")
                if self.rng.random() < 0.5:
                    self.emit(f"{c} = {c} * 2.0")
                self.force.append(f"{self.const()} * np.sum({p}({self.expr(v.shape, 1)}))")
                if self.rng.random() < 0.15:
                    # the name bound again to another partial: each call reads the
                    # binding before it (a rebinding to something else, or in one
                    # branch of an if, once read as the old partial silently)
                    used = self.let(v.shape, f"{p}({v.name})", "u")
                    self.emit(f"{p} = functools.partial(apply_fn, {self.rng.choice(passable)}, "
                              f"c={self.const()})")
                    self.force.append(f"{self.const()} * np.sum({used} + {p}({v.name}))")
            elif form == "passed":
                # a function passed to a module-level helper that calls it (the helper
                # is compiled for each function), or left to the helper's default
                helper = self.rng.choice(["apply_fn", "apply_default"])
                if helper not in helpers_made:
                    helpers_made.add(helper)
                    module += (["def apply_fn(fn, v, c):", "    return fn(v * c) + v"]
                               if helper == "apply_fn" else
                               ["def apply_default(v, fn=np.sin):", "    return fn(v) * 0.5"])
                    module += ["", ""]
                arg = self.rng.choice(passable)
                r = self.rng.random()
                if r < 0.35:   # a def or lambda of this function, or inline
                    arg = self.rng.choice(pure_local + ["lambda u: np.cos(u) * 0.7 + u"])
                elif r < 0.7:
                    # one that reads variables of this function: the helper is copied
                    # for it (its calls of fn call the closure, those variables passed)
                    s = self.scalar_of(v.name, v.shape, 2) if v.shape else v.name
                    arg = self.rng.choice(local + [f"lambda u: np.tanh(u * {s}) + u * 0.5"])
                    if self.rng.random() < 0.4:
                        helper = "apply_loop"
                        if helper not in helpers_made:
                            helpers_made.add(helper)
                            module += ["def apply_loop(fn, v, *, n=2):", "    out = v",
                                       "    for _ in range(n):",
                                       "        out = fn(out) * 0.5 + out * 0.5",
                                       "    return out", "", ""]
                call = (f"apply_fn({arg}, {self.expr(v.shape, 1)}, {self.const()})"
                        if helper == "apply_fn" else
                        self.rng.choice([f"apply_loop({arg}, {v.name})",
                                         f"apply_loop({arg}, {v.name}, n=3)"])
                        if helper == "apply_loop" else
                        self.rng.choice([f"apply_default({v.name})",
                                         f"apply_default({v.name}, {arg})"]))
                if helper == "apply_fn" and self.rng.random() < 0.3:
                    # its keywords from a dict: a literal, or a name bound to one
                    c = self.let((), f"0.5 + 0.3 * np.tanh({self.scalar_of(v.name, v.shape, 2)})"
                                 if v.shape else f"0.5 + 0.3 * np.tanh({v.name})", "c")
                    spread = f'{{"c": {c}, "fn": {arg}}}'
                    if self.rng.random() < 0.5:
                        kw = self.fresh("kw")
                        self.emit(f"{kw} = {spread}" if self.rng.random() < 0.5 else
                                  f"{kw} = dict(c={c}, fn={arg})")
                        spread = kw
                    call = f"apply_fn(v={self.expr(v.shape, 1)}, **{spread})"
                self.force.append(f"{self.const()} * np.sum({call})")
            elif form == "derivative":
                # a derivative of a closure of this function (its outer variables are
                # inputs of the derivative's code too, placed after its own parameters
                # and before v: once placed after v, silently wrong)
                F = "s2sgrad.functional"
                self.force.append(f"{self.const()} * np.sum(" + self.rng.choice([
                    f"{F}.vjp({fn}, {self.expr(v.shape, 1)}, {self.expr(v.shape, 1)}, "
                    f"create_graph=True)[1]",
                    f"{F}.jvp({fn}, {self.expr(v.shape, 1)}, {self.expr(v.shape, 1)}, "
                    f"create_graph=True)[1]"]) + ")")
            elif form == "direct":
                if self.rng.random() < 0.2:   # a lambda called where it is written
                    s = self.scalar_of(v.name, v.shape, 2) if v.shape else v.name
                    fn = f"(lambda u: np.sin(u) * {s} + u)"
                    self.force.append(f"{self.const()} * np.sum({fn}({self.expr(v.shape, 1)}))")
                else:
                    self.force.append(f"{self.const()} * np.sum("
                                      f"{called(fn, self.expr(v.shape, 1))})")
            elif form == "nested":
                fn2 = self.rng.choice(pool)
                self.force.append(f"{self.const()} * np.sum("
                                  f"{called(fn, called(fn2, v.name) + ' * 0.5')})")
            else:
                acc = self.let(v.shape, f"{v.name} * 1.0", "acc")
                i = self.fresh("i")
                self.emit(f"for {i} in range({self.rng.choice([2, 3])}):")
                self.indent += 1
                self.emit(f"{acc} = 0.5 * {acc} + 0.5 * {called(fn, acc)}")
                self.indent -= 1
                self.force.append(f"{self.const()} * np.sum({acc})")
        if entry_closure:
            self.force.append(f"k0 * np.sum(np.tanh({declared[0].name}))")
        self.block(self.stmt_budget)
        self.final_return()
        if entry_closure:
            self.indent = 1
            self.emit("return f")
            self.lines += ["", "", f"f = make_f({self.const()})"]
        self.lines += ["", ""]
        return self.assemble(header, module, self.lines), kinds

    def lambda_entry(self, header, module, fns, names, shapes):
        """f itself a lambda: alone, one of two on a line (the other checked too), or
        made by a lambda that returns a lambda."""
        self.lines = []
        self.scopes = [{}]
        self.ints = []
        for nm, sh in zip(names, shapes):
            self.declare(self.Var(nm, sh, False, param=True))
        form = self.rng.choice(["alone", "pair", "pair", "factory"])
        if form == "factory":
            self.declare(self.Var("k", (), False))

        def body():
            terms = [self.expr((), 1)]
            for _ in range(self.rng.choice([0, 1, 2])):
                if fns:
                    fn = self.rng.choice(fns)
                    nm, sh = self.rng.choice(list(zip(names, shapes)))
                    terms.append(f"{self.const()} * np.sum({fn}({nm}))")
            if form == "factory":
                terms.append(f"k * np.sum(np.tanh({names[0]}))")
            return " + ".join(terms)
        params = ", ".join(names)
        if form == "alone":
            self.lines.append(f"f = lambda {params}: {body()}")
        elif form == "pair":
            first, second = body(), body()
            if self.rng.random() < 0.5:
                self.lines.append(f"f, f_other = lambda {params}: {first}, "
                                  f"lambda {params}: {second}")
            else:
                self.lines.append(f"f_other, f = lambda {params}: {first}, "
                                  f"lambda {params}: {second}")
            self.lines += ["", "", "FUZZ_ALSO = ['f_other']"]
        else:
            self.lines.append(f"make_f = lambda k: (lambda {params}: {body()})  # noqa: E731")
            self.lines += ["", "", f"f = make_f({self.const()})"]
        self.lines += ["", ""]
        return self.assemble(header, module, self.lines)

    # ---- Function subclasses with several outputs -----------------------------------------
    def fam_function_multi(self, header):
        n = self.rng.choice([1, 2, 2, 3])
        kinds, shapes = self.entry_kinds(n, ("v3", "v3", "m23", "v4", "float", "0d"))
        names = ["x", "y", "z"][:n]
        shape = self.rng.choice(shapes)
        extra = []
        specs = []
        for c in range(self.rng.choice([1, 1, 2])):
            spec = FunctionSpec(self.rng, f"Multi{c}", self.rng.choice([1, 2, 2, 3]),
                                self.rng.choice([2, 2, 3]), const=self.rng.random() < 0.3)
            extra.append(spec.source())
            specs.append(spec)
        self.lines = []
        declared = [self.arr(nm, sh) for nm, sh in zip(names, shapes)]
        self.fam_begin(f"def f({', '.join(names)}):", declared)
        self.stmt_budget = self.rng.choice([0, 1, 2])
        for _ in range(self.rng.choice([1, 2, 2, 3])):
            spec = self.rng.choice(specs)
            args = [self.expr(shape, 1) for _ in range(spec.n_in)]
            if spec.const:
                args.append(self.const())
            call = f"{spec.name}.apply({', '.join(args)})"
            if self.rng.random() < 0.2:   # its arguments spread from a tuple or list
                packed = self.fresh("args")
                bracket = "[{}]" if self.rng.random() < 0.5 else "({},)"
                self.emit(f"{packed} = {bracket.format(', '.join(args))}")
                call = f"{spec.name}.apply(*{packed})"
            outs = [self.fresh("o") for _ in range(spec.n_out)]
            form = self.rng.choice(["unpack", "unpack", "index", "whole", "partial", "loop"])
            if form == "unpack":
                self.emit(f"{', '.join(outs)} = {call}")
                for o in outs:
                    self.declare(self.Var(o, shape, False))
                self.force.append(f"{self.const()} * np.sum(np.tanh({self.rng.choice(outs)}))")
                if self.rng.random() < 0.6:
                    self.force.append(f"{self.const()} * np.sum({self.rng.choice(outs)})")
            elif form == "index":
                k = self.rng.randrange(spec.n_out)
                self.force.append(f"{self.const()} * np.sum(np.sin({call}[{k}]))")
            elif form == "whole":
                r = self.fresh("r")
                self.emit(f"{r} = {call}")
                ks = self.rng.sample(range(spec.n_out), self.rng.choice([1, 2]))
                for k in ks:
                    self.force.append(f"{self.const()} * np.sum(np.tanh({r}[{k}]))")
            elif form == "partial":   # only the first output is used
                self.emit(f"{', '.join(outs)} = {call}")
                self.declare(self.Var(outs[0], shape, False))
                self.force.append(f"{self.const()} * np.sum({outs[0]} ** 2)")
            else:   # the outputs fed back in (targets are arguments)
                if spec.n_in != spec.n_out:
                    self.force.append(f"{self.const()} * np.sum(np.tanh({call}[0]))")
                    continue
                st = [self.fresh("s") for _ in range(spec.n_in)]
                for s, a in zip(st, args):
                    self.emit(f"{s} = {a}")
                i = self.fresh("i")
                self.emit(f"for {i} in range({self.rng.choice([2, 3])}):")
                self.indent += 1
                new = [f"np.tanh({s})" for s in st]
                self.emit(f"{', '.join(st)} = {spec.name}.apply({', '.join(new)}"
                          f"{', ' + self.const() if spec.const else ''})")
                self.indent -= 1
                self.force.append(f"{self.const()} * np.sum({st[-1]})")
        self.block(self.stmt_budget)
        self.fam_end()
        return self.assemble(header, [], self.lines, extra), kinds

    # ---- decorators and functools.partial -----------------------------------------------
    DECORATORS = '''\
def passthrough(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


def tagged(label):
    def decorate(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            return fn(*args, **kwargs)
        return inner
    return decorate


def doubled(fn):
    @functools.wraps(fn)
    def twice(*args, **kwargs):
        return 2.0 * fn(*args, **kwargs)
    return twice
'''

    def decorator_lines(self):
        out = []
        for _ in range(self.rng.choice([0, 1, 1, 2])):
            out.append(self.rng.choice(["@passthrough", "@s2sgrad.differentiable",
                                        f'@tagged("{self.rng.choice(["a", "layer"])}")']))
        if self.rng.random() < 0.02:
            # a decorator that computes: to be refused (dropping it is a wrong gradient)
            out.insert(self.rng.randrange(len(out) + 1), "@doubled")
        return out

    def fam_decorator(self, header):
        n = self.rng.choice([1, 2, 2])
        kinds, shapes = self.entry_kinds(n, ("v3", "v3", "m23", "float", "0d"))
        names = ["x", "y"][:n]
        module = [self.DECORATORS, ""]
        callables = []   # (expression, [(param, shape)] it takes positionally, keyword opts)
        for k in range(self.rng.choice([1, 2, 2])):
            shape = self.rng.choice(shapes)
            self.lines = []
            self.lines += self.decorator_lines()
            params = [("u", shape)]
            two = self.rng.random() < 0.5
            if two:
                params.append(("v", self.rng.choice([shape, ()])))
            declared = [self.arr(p, s) for p, s in params]
            sig = ", ".join(p for p, _ in params) + ", k=0.5"
            if self.rng.random() < 0.4:
                sig += ", *, s=1.0"
                kw = True
            else:
                kw = False
            self.fam_begin(f"def h{k}({sig}):", declared)
            self.declare(self.Var("k", (), False, param=True))   # (not written into)
            if kw:
                self.declare(self.Var("s", (), False, param=True))
            self.ret = self.rng.choice([shape, ()])
            self.stmt_budget = self.rng.choice([0, 1])
            self.block(self.stmt_budget)
            r = self.expr(self.ret, 0)
            self.emit(f"return ({r}) * k" + (" * s" if kw else ""))
            self.lines += ["", ""]
            module += self.lines
            callables.append((f"h{k}", params, kw, self.ret))
            # partials of it
            if self.rng.random() < 0.7:
                p = f"h{k}_p"
                opts = [f"functools.partial(h{k}, k={self.const()})"]
                if kw:
                    opts.append(f"functools.partial(h{k}, s={self.const()})")
                if two:
                    arr = self.GLOBAL_ARRAYS.get(params[0][1], None)
                    if arr is not None:
                        opts.append(f"functools.partial(h{k}, {arr})")
                    opts.append(f"functools.partial(functools.partial(h{k}, k=0.3), "
                                f"k={self.const()})")
                value = self.rng.choice(opts)
                module += [f"{p} = {value}", "", ""]
                takes = params[1:] if f"h{k}, G" in value else params
                callables.append((p, takes, kw and "s=" not in value, self.ret))
        entry_partial = self.rng.random() < 0.3
        positional = self.rng.random() < 0.5   # partial(f0, 0.7) or partial(f0, scale=..)
        self.lines = []
        declared = [self.arr(nm, sh) for nm, sh in zip(names, shapes)]
        if entry_partial:
            self.lines += self.decorator_lines()
            sig = f"scale, {', '.join(names)}" if positional else \
                f"{', '.join(names)}, scale=1.0"
            self.fam_begin(f"def f0({sig}):", declared)
            self.declare(self.Var("scale", (), False))
        else:
            self.lines += self.decorator_lines()
            self.fam_begin(f"def f({', '.join(names)}):", declared)
        self.stmt_budget = self.rng.choice([0, 1, 2])
        for _ in range(self.rng.choice([1, 2, 2, 3])):
            name, takes, kw, ret = self.rng.choice(callables)
            args = [self.expr(s, 1) for _, s in takes]
            if kw and self.rng.random() < 0.4:
                args.append(f"s={self.expr((), 2)}")
            if self.rng.random() < 0.2:
                args.append(f"k={self.const()}")
            call = f"{name}({', '.join(args)})"
            if ret == ():
                self.force.append(f"{self.const()} * np.tanh({call})")
            else:
                self.force.append(f"{self.const()} * np.sum(np.sin({call}))")
        if entry_partial:
            self.force.append(f"scale * np.sum(np.tanh({declared[0].name}))")
        self.block(self.stmt_budget)
        self.fam_end()
        if entry_partial:
            bound = self.const() if positional else f"scale={self.const()}"
            self.lines += [f"f = functools.partial(f0, {bound})", "", ""]
        return self.assemble(header, module, self.lines), kinds

    # ---- derivatives of derivatives --------------------------------------------------------
    def fam_higher_order(self, header):
        structured = self.rng.random() < 0.3
        module = []
        also = ["g"]
        if structured:
            spec = self.rng.choice([
                ("list", [("leaf", "v3"), ("leaf", "v3")]),
                ("tuple", [("leaf", "v3"), ("leaf", "float")]),
                ("dict", [("a", ("leaf", "v3")), ("b", ("leaf", "v2"))]),
                ("list", [("tuple", [("leaf", "v2"), ("leaf", "float")])] * 2)])
            kinds = [("tree", freeze(spec))]
            names = ["P"]
            self.lines = []
            self.fam_begin("def g(P):")
            self.stmt_budget = 1
            self.read_tree("P", spec)
            self.block(self.rng.choice([0, 1]))
            self.fam_end()
            module += self.lines
            tmpl = self.grad_projection(spec, "G")
            self.lines = []
            self.fam_begin("def f(P):")
            self.emit("G = s2sgrad.grad(g)(P)")
            third = self.rng.random() < 0.3
            if third:
                module += ["def g1(P):", "    G = s2sgrad.grad(g)(P)",
                           f"    return {tmpl}", "", ""]
                self.emit("G1 = s2sgrad.grad(g1)(P)")
                self.fam_end(self.grad_projection(spec, "G1"))
                also.append("g1")
            else:
                self.fam_end(tmpl)
            module.append(f"FUZZ_ALSO = {also!r}")
            module += ["", ""]
            return self.assemble(header, module, self.lines), kinds
        n = self.rng.choice([1, 1, 2])
        kinds, shapes = self.entry_kinds(n, ("v3", "v3", "v2", "m23", "float"))
        names = ["x", "y"][:n]
        self.lines = []
        declared = [self.arr(nm, sh) for nm, sh in zip(names, shapes)]
        self.fam_begin(f"def g({', '.join(names)}):", declared)
        self.stmt_budget = self.rng.choice([0, 1, 2])
        self.block(self.stmt_budget)
        if self.rng.random() < 0.35:   # complex values inside what is differentiated again
            self.complex_step([d for d in declared if d.shape], module)
        self.fam_end()
        module += self.lines
        x, sx = names[0], shapes[0]
        W = self.GLOBAL_ARRAYS.get(sx, "C1")
        args = ", ".join(names)
        form = self.rng.choice(["grad", "grad", "grad_wrt", "hvp", "vjp", "vag", "third",
                                "lambda"])
        if form == "grad_wrt" and n < 2:
            form = "grad"
        self.lines = [f"def f({args}):"]
        if form == "grad":
            w = self.rng.choice([W, f"np.sin({x})"] + ([names[1]] if n > 1 and
                                                        shapes[1] == sx else []))
            self.lines += [f"    G = s2sgrad.grad(g)({args})",
                           f"    return np.sum(G * {w})"]
        elif form == "grad_wrt":
            self.lines += [f"    Gx, Gy = s2sgrad.grad(g, wrt=(0, 1))({args})",
                           f"    return np.sum(Gx * np.cos({x})) + np.sum(Gy ** 2) * 0.5"]
        elif form == "hvp":
            v = self.rng.choice([W, f"np.tanh({x})"])
            cg = "create_graph=True"   # (False: a constant to f's derivative)
            if n == 1:
                self.lines += [f"    _, hv = s2sgrad.functional.hvp(g, {x}, {v}, {cg})",
                               f"    return np.sum(hv * {W}) + np.sum({x} ** 2) * 0.1"]
            else:
                self.lines += [f"    _, hv = s2sgrad.functional.hvp(g, ({args}), "
                               f"({v}, {names[1]} * 0.5), {cg})",
                               f"    return np.sum(hv[0] * {W}) + np.sum(hv[1]) * 0.3"]
            # the first gradient's projection on v, whose gradient is H v
            module += [f"def g1({args}):", f"    return np.sum(s2sgrad.grad(g)({args}) * "
                       f"{v if v == W else f'np.tanh({x})'})", "", ""]
            also.append("g1")
        elif form == "vjp":
            module += [f"def gv({args}):", f"    return np.tanh({x}) * "
                       f"{self.paren(self.scalar_of(x, sx, 2))}", "", ""]
            inputs = x if n == 1 else f"({args})"
            self.lines += [f"    _, pull = s2sgrad.functional.vjp(gv, {inputs}, "
                           f"np.cos({x}), create_graph=True)",
                           f"    return np.sum(({'pull' if n == 1 else 'pull[0]'}) * {W})"]
        elif form == "vag":
            self.lines += [f"    val, G = s2sgrad.value_and_grad(g)({args})",
                           f"    return val * 0.3 + np.sum(np.tanh(G) * {W})"]
        elif form == "third":
            module += [f"def g1({args}):", f"    return np.sum(s2sgrad.grad(g)({args}) * {W})",
                       "", ""]
            self.lines += [f"    return np.sum(s2sgrad.grad(g1)({args}) * np.cos({x}))"]
            also.append("g1")
        else:   # the gradient of a lambda closing over the arguments
            rest = ", " + ", ".join(names[1:]) if n > 1 else ""
            other = "0.5" if n == 1 else names[1] if shapes[1] == () else f"np.sum({names[1]})"
            self.lines += [f"    G = s2sgrad.grad(lambda u: g(u{rest}) * {other})({x})",
                           f"    return np.sum(G * {W})"]
        self.lines += ["", ""]
        module.append(f"FUZZ_ALSO = {also!r}")
        module += ["", ""]
        return self.assemble(header, module, self.lines), kinds

    def complex_step(self, arrays, module):
        """Complex values made from a real array v and a real result added to it: made
        here or returned by a module-level helper (whole, as a pair with a real item
        that meets np.maximum, or a tuple read by index), then |z|, Re, angle, fft."""
        if not arrays:
            return
        v = self.rng.choice(arrays)
        zc, helper = self.fresh("zc"), self.fresh("cmake")
        how = self.rng.choice(["here", "whole", "pair", "indexed"])
        if how == "here":
            self.emit(f"{zc} = {v.name} * (0.6 + 0.8j) + np.exp(1j * {v.name} * 0.5)")
        elif how == "whole":
            module += [f"def {helper}(u):", "    return np.exp(0.7j * u) * (u + 1.5)", "", ""]
            self.emit(f"{zc} = {helper}({v.name})")
        else:
            module += [f"def {helper}(u):",
                       "    return np.exp(0.7j * u) * (u + 1.5), np.cos(u) - 0.2", "", ""]
            r = self.fresh("r")
            if how == "pair":
                self.emit(f"{zc}, {r} = {helper}({v.name})")
            else:
                t = self.fresh("t")
                self.emit(f"{t} = {helper}({v.name})")
                self.emit(f"{zc} = {t}[0]")
                self.emit(f"{r} = {t}[1]")
            self.emit(f"{v.name} = {v.name} + 0.2 * np.maximum({r}, 0.0)")
        form = self.rng.choice([
            f"np.abs({zc} + 3.0) ** 2 * 0.1", f"np.real({zc} * np.conj({zc}) * 0.3)",
            f"np.angle({zc} + 3.0)", f"np.imag(np.exp({zc} * 0.4))",
            f"np.abs(np.fft.fft({zc}) + 6.0) * 0.2", f"{zc}.real * {zc}.imag"])
        self.emit(f"{v.name} = {v.name} + 0.3 * {form}")

    def grad_projection(self, spec, G):
        """A scalar from every float leaf of a gradient structure G of spec."""
        terms = []

        def walk(s, path):
            if s[0] == "leaf":
                terms.append(f"np.sum(np.sin({path}) * {self.const()})")
            elif s[0] == "dict":
                for k, sub in s[1]:
                    walk(sub, f'{path}["{k}"]')
            elif s[0] in ("list", "tuple", "named"):
                for j, sub in enumerate(s[1]):
                    walk(sub, f"{path}[{j}]")
        walk(spec, G)
        return " + ".join(terms)


# --------------------------------------------------------------------------------------
# Engines made wrong on purpose (--mutate NAME): one per family's mechanism
# --------------------------------------------------------------------------------------
def _scaled(v, k=1.01):
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, np.ndarray):
        return v * k if v.dtype.kind == "f" else v
    if isinstance(v, (float, np.floating)):
        return v * k
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        return type(v)(*[_scaled(x, k) for x in v])
    if isinstance(v, list):
        return [_scaled(x, k) for x in v]
    if isinstance(v, tuple):
        return tuple(_scaled(x, k) for x in v)
    if isinstance(v, dict):
        return {key: _scaled(x, k) for key, x in v.items()}
    return v


def patch_item_cotangent():
    """The cotangent added into an item of a list, tuple or dict is 1% off."""
    from s2sgrad import runtime
    add_at, item_grad = runtime.HELPERS["add_at"], runtime.HELPERS["dict_item_grad"]

    def wrong_add_at(adjoint, index, g):
        if isinstance(adjoint, (list, dict)):
            g = _scaled(g)
        return add_at(adjoint, index, g)

    def wrong_item_grad(cotangent, key, item):
        return _scaled(item_grad(cotangent, key, item))
    runtime.HELPERS["add_at"] = wrong_add_at
    runtime.HELPERS["dict_item_grad"] = wrong_item_grad


def patch_comprehension():
    """The cotangent of a list the adjoint walks (a comprehension's items) is 1% off."""
    from s2sgrad import runtime
    copy_adjoint = runtime.HELPERS["copy_adjoint"]

    def wrong(adjoint):
        out = copy_adjoint(adjoint)
        return _scaled(out) if isinstance(out, list) else out
    runtime.HELPERS["copy_adjoint"] = wrong


def _patch_callee(select, wrap):
    """Callee pairs (functions the differentiated code calls) that `select(site)` picks
    get their adjoint replaced by `wrap(adjoint)`."""
    import dataclasses

    from s2sgrad.compiler import driver
    original = driver._callee_pair

    def patched(site, parsed, optimize_code, pure):
        pair = original(site, parsed, optimize_code, pure)
        if select(site):
            pair = dataclasses.replace(pair, adjoint=wrap(pair.adjoint))
        return pair
    driver._callee_pair = patched


def patch_tuple_call():
    """The adjoint of a call with a tuple output sees its second item's cotangent 1% off."""
    def wrap(adjoint):
        def wrong(residuals, output_bar):
            if isinstance(output_bar, (tuple, list)) and len(output_bar) >= 2:
                output_bar = type(output_bar)([output_bar[0], _scaled(output_bar[1]),
                                               *output_bar[2:]])
            return adjoint(residuals, output_bar)
        return wrong
    _patch_callee(lambda site: True, wrap)


def _scaled_result(adjoint):
    def wrong(residuals, output_bar):
        return _scaled(adjoint(residuals, output_bar))
    return wrong


def patch_closure():
    """Closures and lambdas called from differentiated code: gradients 1% off."""
    def closure(site):
        fn = getattr(site, "fn", None)
        code = getattr(fn, "__code__", None)
        return code is not None and (bool(fn.__closure__) or fn.__name__ == "<lambda>" or
                                     code.co_filename.startswith("<s2sgrad lifted lambda"))
    _patch_callee(closure, _scaled_result)


def patch_function_outputs():
    """A Function's vjp receives its second output's cotangent 1% off."""
    from s2sgrad.compiler import inline
    original = inline.expand_function

    def patched(kind, site, payload, names, np_name):
        if kind == "vjp" and len(payload[0]) >= 2:
            gs, wanted = payload
            gs = list(gs)
            if not isinstance(gs[1], ast.Constant):
                gs[1] = ast.BinOp(left=gs[1], op=ast.Mult(), right=ast.Constant(value=1.01))
            payload = (gs, wanted)
        return original(kind, site, payload, names, np_name)
    inline.expand_function = patched


def patch_partial():
    """What runs through functools.partial or a decorator: gradients 1% off."""
    from s2sgrad.compiler import callables
    from s2sgrad.compiler.normalize import calls
    from s2sgrad.introspect import unwrap
    through = set()
    bound_call = calls.CallRules.bound_call

    def marking(self, expr, bound, out):
        through.add(id(bound.func))
        return bound_call(self, expr, bound, out)
    calls.CallRules.bound_call = marking
    wrap_pair = callables.BoundCall.wrap

    def wrong_wrap(self, compiled, fn, wrt, attr):
        out = wrap_pair(self, compiled, fn, wrt, attr)
        import dataclasses
        if attr == "forward":
            out = dataclasses.replace(out, adjoint=_scaled_result(out.adjoint))
        return out
    callables.BoundCall.wrap = wrong_wrap

    def select(site):
        fn = getattr(site, "fn", None)
        return fn is not None and (id(fn) in through or unwrap(fn) is not fn or
                                   getattr(fn, "__s2sgrad__", False))
    _patch_callee(select, _scaled_result)


def patch_second_order():
    """The rules that differentiate generated adjoint code (_s2s_add, _s2s_unbroadcast)
    are 1% off: first derivatives are right, second ones are not."""
    from s2sgrad import runtime
    from s2sgrad.rules import registry
    from s2sgrad.runtime import inplace
    registry.defvjp(inplace.add, "total, contribution", total="g",
                    contribution=lambda g, ans, total, contribution: _scaled(g),
                    name="_s2s_add")
    registry.defvjp(runtime.unbroadcast, "value, like",
                    value=lambda g, ans, value, like: _scaled(runtime.broadcast_like(g, value)),
                    name="_s2s_unbroadcast")


PATCHES = {
    "item_cotangent": patch_item_cotangent,      # fam_pytree
    "comprehension": patch_comprehension,        # fam_comprehension
    "tuple_call": patch_tuple_call,              # fam_tuple_target
    "closure": patch_closure,                    # fam_closure
    "function_outputs": patch_function_outputs,  # fam_function_multi
    "partial": patch_partial,                    # fam_decorator
    "second_order": patch_second_order,          # fam_higher_order
}

# the mutation each family is validated with (tests/test_fuzz.py)
FAMILY_MUTATION = {
    "fam_pytree": "item_cotangent", "fam_comprehension": "comprehension",
    "fam_tuple_target": "tuple_call", "fam_closure": "closure",
    "fam_function_multi": "function_outputs", "fam_decorator": "partial",
    "fam_higher_order": "second_order",
}
