"""Differential fuzzer for s2sgrad: random programs, compiled gradients vs finite differences.

    python tests/fuzz.py --n 150 --seed 1 --jobs 2
    python tests/fuzz.py --n 20 --seed 1 --mutate tanh      # a rule made 1% wrong on purpose
    python tests/fuzz.py --seed 1 --index 17 --verbose      # one program, with its source
    python tests/fuzz.py --check prog.py                    # a kept program, on its kept inputs
    python tests/fuzz.py --reduce prog.py                   # shrink a kept failing program
    python tests/fuzz.py --n 30 --only fam_closure          # one program family alone
    python tests/fuzz.py --n 30 --only fam_closure --mutate closure   # ... made wrong

Each program is a real module file (s2sgrad reads source through `inspect`) with
one entry function `f(...)` of 1-3 float64 arguments (shapes (3,), (4,), (2, 3),
0-d arrays and Python floats; sometimes one of them a structure: a list of (W, b)
records, a dict of arrays, or {"layers": [...], ...}, checked leaf by leaf and without
the forward-mode check), helper functions it calls, `s2sgrad.Function`
subclasses and module globals, built from the constructs in FEATURES (a weight
per construct: 0 turns it off, `--disable NAME,...` too). For every argument the
fuzzer compares

  * `s2sgrad.grad(f, wrt=i)` (the optimised pair) with central finite
    differences of the *original* function,
  * the unoptimised pair (`compile_function(f, (i,), optimize_code=False)`)
    with both,
  * the value of the generated forward, and the writes it makes into its
    arguments, with the original function's,

and classifies the program as pass / wrong / refused (TransformError, or a
NotImplementedError with a message) / crashed (any other exception from
s2sgrad) / timeout, or nonsmooth when every draw of inputs sat next to a branch
or kink (finite differences at two step sizes disagree there).

Besides this construct generator ("classic"), program families
(tests/fuzz_families.py, the fam_* weights of FEATURES) write whole programs of one
shape each: structured parameters (nested lists, tuples, dicts, namedtuples with int,
None and bool leaves, whose gradient is None), comprehensions and generator
expressions, calls whose tuple targets are their own arguments, closures and lambdas,
Functions with several outputs, decorators and functools.partial, and derivatives of
derivatives. Which generator writes program `index` is drawn from a random stream of
its own; `--only NAME,...` runs some families alone, `--disable NAME` turns one off. A
program may name in FUZZ_ALSO functions of f's signature to be checked like f (a higher
order family checks the first gradient that its f differentiates again).
`--mutate` also takes a mechanism of a family (fuzz_families.PATCHES) made 1% wrong.

The same --seed gives the same programs whatever --jobs is: program `index` is
generated from random.Random(f"{seed}:{index}:{attempt}"). The last line printed
is always

    FUZZ programs=N pass=P wrong=W refused=R crashed=C timeout=T
"""
from __future__ import annotations

import os

# Before NumPy and s2sgrad load: no disk cache (the user's ~/.cache stays
# untouched), one BLAS thread (the arrays are tiny, threads only cost).
os.environ["S2SGRAD_CACHE"] = "0"
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import ast  # noqa: E402
import collections  # noqa: E402
import dataclasses  # noqa: E402
import importlib.util  # noqa: E402
import itertools  # noqa: E402
import multiprocessing  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from multiprocessing.connection import wait as mp_wait  # noqa: E402
from typing import Any, Callable, Optional  # noqa: E402

import numpy as np  # noqa: E402

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import s2sgrad  # noqa: E402
from s2sgrad.compiler import compile_function  # noqa: E402

if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import fuzz_families  # noqa: E402
from fuzz_families import FAMILIES, FAMILY_FEATURES, PATCHES, FamilyMixin  # noqa: E402

# --------------------------------------------------------------------------------------
# The construct table: name -> weight. 0 switches a construct off.
# --------------------------------------------------------------------------------------
FEATURES = {
    # expressions
    "unary": 3.0,            # sin cos tanh exp(tanh) log(1+e**2) sqrt(1+e**2)
    "binop": 4.0,            # + - * (same shape, or broadcasting a scalar / a row)
    "div": 0.5,              # a / (1 + b**2)
    "pow": 0.5,              # e ** 2, e ** 3
    "maximum": 0.8,          # np.maximum / np.minimum
    "where": 0.8,            # np.where(c > t, a, b)
    "ifexp": 0.7,            # a if c > t else b
    "reduce": 2.0,           # np.sum / np.mean / .sum() to a scalar
    "reduce_axis": 1.0,      # axis=, keepdims=True
    "masked_reduce": 0.3,    # np.sum(e, where=mask, initial=c), np.mean(v, where=mask)
    "np_max": 0.3,           # np.max / np.min
    "matmul": 1.0,           # M @ v, v @ M, v @ w
    "theta_theta": 0.7,      # theta @ theta (a 0-d value) mixed with arrays
    "index": 1.5,            # v[k], M[i, j], M[i], v[i] with a loop index
    "slice": 1.0,            # v[1:], v[::-1], M[:, j]
    "outer": 0.3,            # np.outer, v[:, None] * w
    "ufunc_outer": 0.3,      # np.multiply.outer(a, b), np.subtract.outer, ... of variables
    "einsum": 0.3,           # np.einsum: contractions, outer products, traces of rows
    "ufunc_reduce": 0.2,     # np.add.reduce(M), np.maximum.reduce(M, 1), np.multiply.accumulate
    "concatenate": 0.2,      # np.concatenate([a, b])
    "lstsq": 0.15,           # np.linalg.lstsq(A, b)[0] of a full-rank A, its residuals;
                             # np.polyfit of four separated points, degree 2
    "polynomial": 0.15,      # np.polynomial.polynomial.polyval(v, [c0, s, c2]), s a scalar;
                             # np.vander(v, 3) (2x3, increasing or not)
    "distance": 0.2,         # scipy.spatial.distance cdist / pdist of separated points
    "scipy_solve": 0.15,     # scipy.linalg.solve of an SPD matrix, each assume_a's part of it
    "stack": 0.3,            # np.stack(list_var)
    "builtin_minmax": 0.15,  # max(a, b) / min(a, b) on numbers
    "builtin_sorted": 0.3,   # sorted(v)[k], np.dot(sorted(v, reverse=True), w), by key=abs
    "apply": 0.8,            # s2sgrad.Function subclasses via .apply
    "star_numpy": 1.0,       # `from numpy import *` in half the modules: min, max, abs, ...
    "user_rule": 0.4,        # within apply: functions given a rule by s2sgrad.defvjp
    "helper_call": 1.5,      # calls of user helpers (keyword arguments, defaults)
    "list_index": 0.5,       # L[k] of a local list
    "global_const": 0.6,     # module globals (floats and small arrays)
    "loop_index_value": 0.4,  # 0.25 * i
    # statements
    "assign": 5.0,
    "reassign": 2.0,
    "rebind_param": 0.7,     # x = x * 2, a = a[::-1], x = np.tanh(x)
    "aug_array": 1.5,        # v += e, v -= e, v *= e on local arrays
    "aug_param": 0.3,        # x += e into an argument array
    "held_update": 0.3,      # H = [v, e] / (v,) / (v[:1], v[::-1]) / {"k": v} / H.append(v);
                             # s = H[0]; v += e (s = H[0] again, sometimes: refused)
    "aug_scalar": 1.0,       # acc += e
    "elem_aug": 1.0,         # y[1] += e, M[0, 2] -= e
    "row_recurrence": 0.4,   # for i in range(1, y.shape[0]): y[i] += c * tanh(y[i - 1])
    "stencil_update": 0.4,   # lap = y[:-2] + y[2:] - 2.0 * y[1:-1]; y[1:-1] += c * lap
                             # (slices read before the update: kept as views)
    "subscript_write": 1.2,  # out = np.zeros(3); out[i] = e; out[1:] = e
    "fancy_write": 0.4,      # y[[0, 0, 1]] = e (repeated indices), y[[0, 2]] += e
    "add_at": 0.3,           # np.add.at(y, [0, 0, 2], e)
    "fill_diagonal": 0.2,    # M = e (2x3); np.fill_diagonal(M, s or v): a matrix's diagonal
    "call_write": 0.3,       # writes made by a function: np.put_along_axis(y, i, e),
                             # np.exp(y, y), np.multiply(e, 2.0, out=y), np.copyto(y, e)
                             # into a local or a fresh constant buffer (put_along_axis
                             # refused when a differentiated value takes part; the
                             # others written as y[...] = e and differentiated)
    "if": 1.5,               # if / elif / else on data
    "walrus": 0.4,           # if (w := e) > t:
    "errstate": 0.3,         # with np.errstate(divide="ignore", ...): a block
    "static_if": 0.3,        # if hasattr(np, "trapezoid"): ... else: np.trapz(...) (a
                             # branch that never runs names what does not exist)
    "for_range": 1.5,
    "for_list_literal": 0.6,  # for t in [x, x * 2, np.sin(x)]
    "for_list_var": 1.5,     # for t in L / reversed(L) / enumerate(L) / zip(L1, L2)
    "for_array": 0.6,        # for row in M / for e in v / np.ndindex / a generator /
                             # enumerate(M) / zip(M, M[::-1] * 0.5)
    "list_build": 0.9,       # L = [a, b, c], P = (a, b)
    "nested_list": 0.4,      # for W, b in [(x, y), (x * 2, y)] / PL = [(a, b), (c, d)]
    "list_append": 0.6,      # L = []; L.append(e)
    "helper_append": 0.3,    # push_to(L, e): a helper appending to the caller's list
    "helper_result_write": 0.4,  # h = helper(x); h[h < 0] = 0.0 / h *= c / h[0] = e
    "fused_softmax": 0.3,    # z - max(z); z - log(sum(exp(z))): softmax & co. written out
    "fused_sigmoid": 0.3,    # 1 / (1 + np.exp(-v)), 0.5 * (np.tanh(0.5 * v) + 1.0): one call
    "tuple_unpack": 0.4,     # a, b = P; a, b, c = np.tanh(v) (an array's rows);
                             # first, *rest = P; *init, last = np.tanh(v)
    "while": 0.7,            # counters, data-dependent exits
    "break": 0.5,            # inside loops, on data
    "loop_else": 0.3,        # for ... else / while ... else (run when no break ended it)
    "continue": 0.4,
    "return_in_loop": 0.3,
    "early_return": 0.5,     # if c > t: return e
    "returns_in_loop": 0.15,  # (a probability) the last return inside a loop
    "early_return_apply": 0.5,  # Functions returning early (a shortcut for g == 0)
    "multi_output_apply": 0.3,  # p, q = SinCos.apply(e)
    # helpers and signatures
    "helper": 1.0,           # how many helper functions a program defines
    "helper_default": 0.6,   # def h(u, k=0.5)
    "kwonly_helper": 0.3,    # def h(u, *, scale=1.0)
    "kwonly_entry": 0.3,     # def f(x, *, s=0.5)
    "tuple_param_helper": 0.5,   # def h(p): a, b = p; return a * b
    "multi_return_helper": 0.5,  # def h(u, v): return a, b
    "list_param_helper": 0.4,    # def h(ts): for t in ts: ...
    "list_return_helper": 0.3,   # def h(u): return [np.sin(u), u * 2]
    # structures: lists of records, dicts, comprehensions, builtins on numbers
    "struct_append": 0.6,    # L = []; L.append((a, b)) / L.append([a, b]) / ({"a": a, "b": b})
    "struct_read": 0.8,      # for a, b in L / L[k][0] / L[k]["a"] / a, b = L[k]
    "list_extend": 0.4,      # L.extend([e1, e2]) / L.extend(M)
    "dict": 0.6,             # d = {"w": e1, "b": e2}; d["w"]
    "dict_write": 0.5,       # d["new"] = e / d["w"] = e
    "dict_zip": 0.5,         # d = dict(zip(["w", "b"], [e1, e2]))
    "dict_literal_loop": 0.5,  # for k in {"w": d["w"], "b": d["b"]}: ... d[k]
    "dict_get": 0.5,         # r.get("a") of a dict record
    "python_weights": 0.3,   # decay_weights(3, 0.9): a Python helper's constant array
    "checkpoint": 0.5,       # @s2sgrad.checkpoint on a helper: recomputed in the adjoint
    "dict_loop": 0.5,        # for k, v in d.items() / d.values() / d.keys() / d
    "dict_iter": 0.5,        # a dict iterated as itself (for k in d) rather than d.keys()
    "dict_sorted_keys": 0.5,  # for k in sorted(d): ... d[k]
    "dict_builtin_walk": 0.5,  # for i, k in enumerate(d) / zip(d, ...) / [max(d), min(d)]
    "comprehension": 0.8,    # [g(t) for t in L if ...], two generators, {k: .. for k, v in ..}
    "builtin_reduce": 0.6,   # sum(gen), sum(L, start), sum(d.values(), s), max(L), min(gen)
    "scalar_builtins": 0.6,  # abs, pow, float, np.float64, math.sin/cos/exp/log/sqrt/tanh
    "chained_assign": 0.3,   # a = b = e
    "spread_free_tuple": 0.4,  # mix(e, *MIX_ARGS), mix(e, *MIX_ARGS[:1], 0.3)
    "closure_recursion": 0.3,  # damped(e, 2): a recursive closure made by a factory
    "instance_method": 0.4,  # SCALER.apply(e), SCALER(e), scaled(e[, SCALER]): methods
                             # calling self.shift(v), the instance a default or argument
    "map_call": 0.4,         # sum(map(np.tanh, L), s), sum(map(lambda t: ..., L), s)
    "operator_call": 0.4,    # operator.add/sub/mul(a, b), functools.reduce(operator.mul, [..])
    "literal_index": 0.4,    # (a, b)[k], [a, b, c][-1], (a, b, c)[1:][0]
    "local_import": 0.4,     # import numpy as np / from math import pi inside a function
    "flag_assign": 0.4,      # flag = lo < s <= hi (or s > lo and not s > hi); if flag:
    "struct_return_helper": 0.4,  # def h(p): W, b = p; return [W * 2, b]
    "dict_return_helper": 0.3,    # def h(u): return {"w": ..., "b": ...}
    "pairs_param_helper": 0.4,    # def h(ps): for a, b in ps: ...
    "dict_param_helper": 0.3,     # def h(d): d["w"] ..., for k, v in d.items()
    "helper_relay": 0.5,     # a helper passes its structure on to another helper
    "struct_entry": 0.5,     # f(params, x): params a list of (W, b) tuples or a dict of arrays
    "nested_entry": 0.3,     # params = {"layers": [(W, b), ...], "scale": s}
    "item_write": 0.5,       # L[k] = e, L[k] = (a, b): an item of a list replaced
    "list_reorder": 1.0,     # L.reverse(); L.sort(reverse=True) / L.sort(key=abs) of numbers
    "namedtuple": 0.4,       # records Layer(W, b) (a namedtuple), read as r.W, r.b
    "derivative_call": 0.3,  # s2sgrad.grad(lambda ...)(e) (or g = s2sgrad.grad(...); g(e)),
                             # functional.vjp/jvp/hvp(..., create_graph=True) inside the
                             # program, tuple inputs too
    # program families (tests/fuzz_families.py): which generator writes a program.
    # "classic" is the construct generator above; each fam_* writes programs of one
    # shape (structured parameters, comprehensions, tuple targets, closures, Functions
    # with several outputs, decorators and partials, higher order)
    **FAMILY_FEATURES,
}
# Constructs calling NumPy functions Dask does not implement (np.vander, np.resize of
# fill_diagonal, lstsq and SciPy's solvers and distances): off under --dask, where Dask
# would compute the arrays and hand them to NumPy, which s2sgrad refuses to copy.
DASK_LACKS = ("lstsq", "distance", "scipy_solve", "polynomial", "fill_diagonal")
if importlib.util.find_spec("scipy") is None:   # (an optional extra: without it, no cdist)
    FEATURES["distance"] = FEATURES["scipy_solve"] = 0.0

SHAPES = [(3,), (4,), (2, 3), ()]
ARG_KINDS = [("v3", 3.0), ("m23", 1.5), ("v4", 1.5), ("float", 1.5), ("0d", 1.0)]
KIND_SHAPE = {"v3": (3,), "v4": (4,), "m23": (2, 3), "float": (), "0d": (), "v2": (2,)}
GLOBAL_ARRAYS = {(2,): "G2", (3,): "G3", (4,): "G4", (2, 3): "G23"}
GLOBALS_SRC = """\
Layer = collections.namedtuple("Layer", ["W", "b"])
C1 = 0.7
C2 = -0.4
G2 = np.array([0.4, -0.7])
G3 = np.array([0.3, -0.2, 0.5])
G4 = np.array([0.1, 0.6, -0.3, 0.2])
G23 = np.array([[0.2, -0.5, 0.3], [0.6, 0.1, -0.4]])


def push_to(L, v, c=0.5):
    L.append(np.tanh(v) * c + v * C1)
"""

Layer = collections.namedtuple("Layer", ["W", "b"])  # the programs' records, as inputs

CLASSES = {
    "Cube": '''\
class Cube(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return 3.0 * x ** 2 * g
''',
    "Softplus": '''\
class Softplus(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.log(1.0 + np.exp(x))

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return g / (1.0 + np.exp(-x))
''',
    "ScaleBy": '''\
class ScaleBy(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def vjp(ctx, g):
        return g * ctx.k, None
''',
    "Affine": '''\
class Affine(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x, a=1.5, b=0.0):
        ctx.a, ctx.b = a, b
        ctx.save_for_backward(x)
        return np.tanh(x) * a + b

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        t = np.tanh(x)
        for _ in range(2):
            g = g * 1.0
        g *= ctx.a
        return g * (1.0 - t * t), None, None
''',
    "Mul": '''\
class Mul(s2sgrad.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def vjp(ctx, g):
        a, b = ctx.saved_tensors
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = g * b
        if ctx.needs_input_grad[1]:
            gb = g * a
        return ga, gb
''',
    "SinCos": '''\
class SinCos(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.sin(x), np.cos(x)

    @staticmethod
    def vjp(ctx, gs, gc):
        x, = ctx.saved_tensors
        return gs * np.cos(x) - gc * np.sin(x)
''',
    # Early returns: forward's for a number, vjp's a shortcut for a zero cotangent
    # (folded into one result and inlined; the JVP, its transpose, runs at a generic g),
    # and a `with np.errstate(...)` block.
    "Shrink": '''\
class Shrink(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        if np.ndim(x) == 0:
            return x / (1.0 + x * x)
        return x / (1.0 + np.square(x))

    @staticmethod
    def vjp(ctx, g):
        if not np.any(g):
            return np.zeros_like(g)
        x, = ctx.saved_tensors
        with np.errstate(over="ignore"):     # (its body, inlined)
            s = 1.0 + x * x
        return g * (1.0 - x * x) / (s * s)
''',
    # A default the call leaves out (bound as a constant: inlined) and a vjp returning
    # a name that holds a tuple (once taken for the gradient itself).
    "Held": '''\
class Held(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x, k=2.0):
        ctx.save_for_backward(x)
        ctx.k = k
        return np.sin(x) * k

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        out = (g * np.cos(x) * ctx.k, None)
        return out
''',
    # ctx attributes set in both branches of an `if` (one variable each: inlined).
    "Moded": '''\
class Moded(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        if np.all(x > 0.0):
            ctx.k = 2.0
        else:
            ctx.k = 0.5
        return np.tanh(x) * ctx.k

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        return moded_grad(g, np.tanh(x), ctx.k)   # (a call: its count checked at run time)


def moded_grad(g, t, k):
    return g * (1.0 - t * t) * k
''',
    # Returns inside a loop and a branch, and a path falling off the end (None): the
    # implicit return once overwrote every path's result with None. (A keyword-only
    # default the call leaves out: its second derivatives once raised.)
    "loop_return": '''\
def loop_return(v, *, flag=1.0):
    for _ in range(2):
        if flag > 0:
            return np.tanh(v) * v
    w = v * 2.0
''',
    # The same shortcut in a vjp that is called, not inlined (a return in a loop), returning
    # a bare gradient or a pair with a trailing None (forward mode read the pair's
    # cotangent as the bare one: a wrong JVP).
    "Ratio": '''\
class Ratio(s2sgrad.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / (2.0 + np.cos(x))

    @staticmethod
    def vjp(ctx, g):
        x, = ctx.saved_tensors
        if not np.any(g):
            return np.zeros_like(g)
        for _ in range(1):
            d = 2.0 + np.cos(x)
            return g * (d + x * np.sin(x)) / (d * d), None   # (a trailing None, dropped)
''',
    # A class of the user's whose methods call each other through self, reached through
    # a module-level instance (SCALER.apply(v), SCALER(v)).
    "Scaler": '''\
class Scaler:
    def __init__(self, c):
        self.c = c

    def shift(self, v):
        return np.tanh(v) * self.c

    def apply(self, v):
        return self.shift(v) + v * self.c

    def __call__(self, v):
        return self.apply(v) * 0.5


SCALER = Scaler(0.7)


def scaled(v, model=SCALER):   # (the instance a default, or an argument)
    return model.apply(v) - model(v)
''',
    # A recursive function that reads a cell of the closure it was made in.
    "damped": '''\
def _make_damped(c):
    def damped(v, n):
        if n == 0:
            return v * c
        return np.tanh(damped(v, n - 1)) * c + v * 0.1
    return damped


damped = _make_damped(0.8)
''',
    # A Python helper giving constant weights (a comprehension numba cannot call:
    # under jit=True, code before the loops runs on NumPy's side, outlined).
    "decay_weights": '''\
def decay_weights(n, rate):
    return np.array([rate ** k for k in range(n)])
''',
    # A helper given a module-level tuple spread into its arguments (mix(v, *MIX_ARGS)).
    "mix": '''\
MIX_ARGS = (0.5, -0.2)


def mix(v, a, b):
    return v * a + np.tanh(v) * b
''',
    # Rules given with s2sgrad.defvjp alone (the compiler does not read the functions'
    # code): forward mode has no JVP for them and transposes their VJPs.
    "user_revcumsum": '''\
def user_revcumsum(x):
    return np.cumsum(x[..., ::-1], axis=-1)[..., ::-1]


s2sgrad.defvjp(user_revcumsum, "x", x="np.cumsum(g, axis=-1)")
''',
    "user_softsign": '''\
def user_softsign(x):
    return x / (1.0 + np.abs(x))


s2sgrad.defvjp(user_softsign, "x", x="g / (1.0 + np.abs(x)) ** 2", broadcast=True)
''',
}

UNARY = ["np.sin({})", "np.cos({})", "np.tanh({})", "np.exp(np.tanh({}))",
         "np.log(1.0 + {} ** 2)", "np.sqrt(1.0 + {} ** 2)"]
THRESHOLDS = [-0.4137, -0.1291, 0.0731, 0.2213, 0.5173, 1.1093]
CONSTS = ["0.5", "0.3", "-0.7", "1.5", "0.25", "-1.2", "2.0"]
DICT_KEYS = ["w", "b", "c", "scale", "bias", "gain"]
# (W, b) shapes of the records in lists of pairs and of structured entry arguments
PAIR_SHAPES = [((3,), (3,)), ((2, 3), (2,)), ((2, 3), (3,)), ((3,), ()), ((4,), ()),
               ((2,), (2,)), ((), ())]


class GeneratorGiveUp(Exception):
    """The generator could not build what it was asked for; start again."""


def _fresh_value(node: ast.AST) -> bool:
    """Whether an expression certainly gives a new array (never a view or another name)."""
    if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Constant)):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            isinstance(node.func.value, ast.Name) and node.func.value.id == "np":
        return True
    return False


def _alias_names(node: ast.AST) -> set:
    """Names whose arrays the value of `node` may share memory with."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        return _alias_names(node.value)
    if isinstance(node, ast.IfExp):
        return _alias_names(node.body) | _alias_names(node.orelse)
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*[_alias_names(e) for e in node.elts]) if node.elts else set()
    if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Attribute) and
                                           isinstance(node.func.value, ast.Name) and
                                           node.func.value.id == "np"):
        out = set()
        for a in list(node.args) + [k.value for k in node.keywords]:
            out |= _alias_names(a)
        return out
    if isinstance(node, ast.NamedExpr):
        return _alias_names(node.value)
    if isinstance(node, ast.Dict):
        return set().union(*[_alias_names(e) for e in node.values]) if node.values else set()
    if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
        return _alias_names(node.elt)
    if isinstance(node, ast.DictComp):
        return _alias_names(node.value)
    return set()


class Var:
    def __init__(self, name, shape, owned, param=False, view=False):
        # view: `name` is an expression (d["w"], np.sum(v)), never assigned to
        self.name, self.shape, self.owned, self.param = name, shape, owned, param
        self.view = view


def View(expr, shape):
    return Var(expr, shape, False, param=True, view=True)


class StructList:
    """A list of n records (n None: not known), each a tuple, a list or a dict
    {"a": .., "b": ..} of two values of the given shapes."""

    def __init__(self, name, kind, shapes, n, mutable, param=False):
        self.name, self.kind, self.shapes, self.n = name, kind, tuple(shapes), n
        self.mutable, self.param = mutable, param

    def item(self, k, j):
        if self.kind == "dict":
            return f'{self.name}[{k}]["{"ab"[j]}"]'
        if self.kind == "named":
            return f"{self.name}[{k}].{'Wb'[j]}"
        return f"{self.name}[{k}][{j}]"


class DictVar:
    """A dict with string keys: key -> shape of its value."""

    def __init__(self, name, items, mutable, param=False):
        self.name, self.items, self.mutable, self.param = name, dict(items), mutable, param

    def homogeneous(self):
        shapes = set(self.items.values())
        return shapes.pop() if len(shapes) == 1 else None


class ListVar:
    def __init__(self, name, elems, mutable, scope):
        # elems: the shapes of the items, in order
        self.name, self.elems, self.mutable, self.scope = name, list(elems), mutable, scope


class Helper:
    def __init__(self, name, kind, params, ret, default=None, kwonly=None, list_len=0):
        self.name, self.kind, self.params, self.ret = name, kind, params, ret
        self.default, self.kwonly, self.list_len = default, kwonly, list_len


class ProgramGenerator(FamilyMixin):
    """Random programs over a small typed environment (every shape is known)."""

    MAX_DEPTH = 3
    # what the families (FamilyMixin, tests/fuzz_families.py) build programs with
    Var, ListVar, StructList, DictVar = Var, ListVar, StructList, DictVar
    View = staticmethod(View)
    CLASSES, GLOBALS_SRC, GLOBAL_ARRAYS = CLASSES, GLOBALS_SRC, GLOBAL_ARRAYS

    def __init__(self, rng: random.Random, weights: dict):
        self.rng = rng
        self.w = weights
        self.used = collections.Counter()
        self.names = itertools.count()
        self.helpers = []
        self.classes = set()
        self.counters = set()   # while loops' counters, never rebound inside them
        self.scopes = []
        self.ints = []          # [(name, bound)] visible loop indices
        self.loop_depth = 0
        self.nest = 0
        self.ret = ()           # what `return` must give in the function being written
        self.lines = []
        self.indent = 1
        self.stmt_budget = 0

    # ---- small utilities --------------------------------------------------------------
    def on(self, feat):
        return self.w.get(feat, 0) > 0

    def choose(self, options):
        """options: [(feature or None, weight, thunk)]; picks one enabled, runs it."""
        opts = [(f, w * (self.w.get(f, 0) if f else 1.0), fn) for f, w, fn in options]
        opts = [o for o in opts if o[1] > 0]
        if not opts:
            raise GeneratorGiveUp("no option")
        total = sum(o[1] for o in opts)
        r = self.rng.random() * total
        chosen = opts[-1]
        for option in opts:
            r -= option[1]
            if r <= 0:
                chosen = option
                break
        if chosen[0]:
            self.used[chosen[0]] += 1
        return chosen[2]()

    def fresh(self, stem="v"):
        return f"{stem}{next(self.names)}"

    def emit(self, line):
        self.lines.append("    " * self.indent + line)

    def masked_reduce(self, d):
        """np.sum with where= (a mask never empty) and initial=; np.mean with where= of
        a variable (read twice by its written-out form: names only)."""
        e = self.expr((3,), d + 1)
        mask = self.rng.choice(["np.array([True, False, True])", "np.arange(3) != 1",
                                f"{self.paren(self.expr((3,), d + 1))} > -1e9"])
        forms = [f"np.sum({e}, where={mask})", f"np.sum({e}, initial={self.const()})",
                 f"np.sum({e}, where={mask}, initial={self.const()})"]
        arrays = [v.name for v in self.visible().values()
                  if isinstance(v, Var) and v.shape == (3,) and not v.view]
        if arrays:
            forms.append(f"np.mean({self.rng.choice(arrays)}, where=np.arange(3) != "
                         f"{self.rng.randrange(3)})")
        return self.rng.choice(forms)

    def ufunc_outer(self, d):
        """A two-operand ufunc's outer table (2, 3) of operands without calls (what
        s2sgrad reads twice in its written-out form); np.outer where there are none."""
        a, b = self.leaf((2,)), self.leaf((3,))
        if any(isinstance(n, ast.Call) for e in (a, b) for n in ast.walk(ast.parse(e))):
            return f"np.outer({self.expr((2,), d + 1)}, {self.expr((3,), d + 1)})"
        ufunc = self.rng.choice(["multiply", "add", "subtract", "maximum", "minimum"])
        return f"np.{ufunc}.outer({a}, {b})"

    def thr(self):
        return repr(self.rng.choice(THRESHOLDS))

    def const(self):
        return self.rng.choice(CONSTS)

    def visible(self):
        out = {}
        for scope in self.scopes:
            for name, v in scope.items():
                out[name] = v
        return out

    def vars_of(self, shape):
        return [v for v in self.visible().values() if isinstance(v, Var) and v.shape == shape]

    def lists(self):
        return [v for v in self.visible().values() if isinstance(v, ListVar)]

    def structs(self):
        return [v for v in self.visible().values() if isinstance(v, StructList)]

    def dicts(self):
        return [v for v in self.visible().values() if isinstance(v, DictVar)]

    @staticmethod
    def elem_shape(L):
        """The shape every item of list L has (None: mixed shapes, or nothing known)."""
        if L.elems:
            return L.elems[0] if len(set(L.elems)) == 1 else None
        return getattr(L, "hom", None)

    def expr_with(self, var, shape, d=1):
        """An expression of `shape` that certainly reads `var` (a comprehension's variable)."""
        self.scopes.append({var.name: var})
        try:
            e = self.expr(shape, d)
        finally:
            self.scopes.pop()
        if not re.search(r"(?<![\w.])" + re.escape(var.name) + r"(?!\w)", e):
            if var.shape == shape or var.shape == ():
                e = f"{self.paren(var.name)} * {self.paren(e)}"
            else:
                e = f"np.sum({var.name}) * {self.paren(e)}"
        return e

    def generic(self, name, d=1):
        """An expression of the shape of `name` (whatever it is) that reads it."""
        return self.rng.choice([f"np.tanh({name}) * {self.paren(self.expr((), d))}",
                                f"{name} * {self.const()}",
                                f"{name} + 0.5 * np.sin({name})"])

    def scalar_of(self, name, shape=None, d=1):
        """A scalar that reads `name` (of `shape`, or of a shape not known)."""
        forms = [f"np.sum({name} ** 2)", f"np.mean(np.sin({name}))",
                 f"np.sum(np.tanh({name})) * {self.paren(self.expr((), d))}"]
        if shape is not None:
            forms.append(f"np.sum({name} * {self.paren(self.expr(shape, d))})"
                         if shape != () else f"{name} * {self.paren(self.expr((), d))}")
        return self.rng.choice(forms)

    def pair_shapes(self, s1=None):
        """Shapes for the records of a list of pairs: often those a helper takes."""
        known = [tuple(s for _, s in h.params) for h in self.helpers
                 if h.kind in ("pairs_param", "struct_return", "tuple_param")]
        if known and self.rng.random() < 0.6:
            return self.rng.choice(known)
        if s1 is not None:
            return (s1, self.rng.choice([s1, (), self.rng.choice(self.shape_pool())]))
        return self.rng.choice(PAIR_SHAPES)

    def dict_spec(self, pool):
        """Keys and shapes for a new dict: often those a helper takes."""
        known = [h.spec for h in self.helpers if h.kind == "dict_param"]
        if known and self.rng.random() < 0.6:
            return dict(self.rng.choice(known))
        keys = self.rng.sample(DICT_KEYS, self.rng.choice([1, 2, 2, 3]))
        s0 = self.rng.choice(pool)
        return {k: (s0 if self.rng.random() < 0.6 else self.rng.choice(pool)) for k in keys}

    def keys_of(self, name):
        """How a loop over a dict's keys is written: `in d`, `in d.keys()` or `in
        sorted(d)` (whose forward mode once took the dict's tangents for the keys')."""
        return self.choose([("dict_iter", 1.0, lambda: name), (None, 0.5, lambda: f"{name}.keys()"),
                            ("dict_sorted_keys", 0.3, lambda: f"sorted({name})")])

    @staticmethod
    def record(kind, e1, e2):
        if kind == "tuple":
            return f"({e1}, {e2})"
        if kind == "list":
            return f"[{e1}, {e2}]"
        if kind == "named":
            return f"Layer({e1}, {e2})" if e1 < e2 else f"Layer(W={e1}, b={e2})"
        return f'{{"a": {e1}, "b": {e2}}}'

    @staticmethod
    def zeros(shape):
        if shape == ():
            return "0.0"
        return f"np.zeros({shape if len(shape) > 1 else shape[0]})"

    def declare(self, v):
        # a name declared again in an inner scope shadows nothing: names are unique
        self.scopes[-1][v.name] = v

    def lookup(self, name):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def note_assignment(self, value_src):
        """Arrays the new value may share memory with can no longer be written into."""
        try:
            node = ast.parse(value_src, mode="eval").body
        except SyntaxError:  # pragma: no cover - the generator writes valid code
            raise GeneratorGiveUp("bad expression") from None
        for name in _alias_names(node):
            v = self.lookup(name)
            if isinstance(v, Var):
                v.owned = False
        return _fresh_value(node)

    def shape_pool(self):
        """Shapes to give new values: mostly those of the arguments."""
        shapes = [v.shape for v in self.visible().values() if isinstance(v, Var)]
        return shapes + [self.rng.choice(SHAPES)]

    # ---- expressions ------------------------------------------------------------------
    def lstsq_expr(self, d):
        """np.linalg.lstsq of a 3x2 matrix kept of full column rank (2 on its diagonal):
        the rank never changes near the point, so the gradient exists."""
        return (f"np.linalg.lstsq({self.paren(self.expr((2, 3), d))}.T + 2.0 * np.eye(3, 2), "
                f"{self.expr((3,), d)}, rcond=None)")

    def scipy_solve_expr(self, d):
        """scipy.linalg.solve of B B^T + 3 I (positive definite: every assume_a's solver
        runs on it), reading the part of it each assume_a reads."""
        b = self.paren(self.expr((2, 3), d))
        how = self.rng.choice(["", ", assume_a='pos'", ", assume_a='sym', lower=True",
                               ", assume_a='upper triangular', transposed=True"])
        return f"scipy.linalg.solve({b} @ {b}.T + 3.0 * np.eye(2), {self.expr((2,), d)}{how})"

    def distance_metric(self):
        return self.rng.choice(["'euclidean'", "'sqeuclidean'", "'cosine'",
                                "metric='minkowski', p=3"])

    def expr(self, shape, d=0):
        shape = tuple(shape)
        if d >= self.MAX_DEPTH or self.rng.random() < 0.22 + 0.2 * d:
            return self.leaf(shape)
        sub = d + 1
        E = self.expr
        opts = [
            ("unary", 1.0, lambda: self.rng.choice(UNARY).format(E(shape, sub))),
            ("binop", 1.0, lambda: self.binop(shape, sub)),
            ("div", 1.0, lambda: f"{E(shape, sub)} / (1.0 + {E(shape, sub)} ** 2)"),
            ("pow", 1.0, lambda: f"np.tanh({E(shape, sub)}) ** {self.rng.choice([2, 3])}"),
            ("maximum", 1.0, lambda: f"np.{self.rng.choice(['maximum', 'minimum'])}("
                                     f"{E(shape, sub)}, "
                                     f"{E(self.rng.choice([shape, ()]), sub)})"),
            ("where", 1.0, lambda: f"np.where({E(shape, sub)} > {self.thr()}, "
                                   f"{E(shape, sub)}, {E(shape, sub)})"),
            ("ifexp", 1.0, lambda: f"({E(shape, sub)} if {self.cond(sub)} else "
                                   f"{E(shape, sub)})"),
            ("apply", 1.0, lambda: self.apply_expr(shape, sub)),
            ("helper_call", 1.0, lambda: self.helper_call(shape, sub)),
            ("literal_index", 0.5, lambda: self.literal_index(shape, sub)),
        ]
        if shape != ():
            opts.append(("derivative_call", 1.0, lambda: self.derivative_expr(shape, sub)))
        if shape == ():
            opts += [
                ("reduce", 2.0, lambda: self.reduce_to_scalar(sub)),
                ("masked_reduce", 1.0, lambda: self.masked_reduce(sub)),
                ("np_max", 1.0, lambda: f"np.{self.rng.choice(['max', 'min'])}("
                                        f"{E(self.rng.choice(SHAPES[:3]), sub)})"),
                ("matmul", 1.0, lambda: self.vecvec(sub)),
                ("einsum", 1.0, lambda: self.rng.choice(
                    [f"np.einsum('ij,ij->', {E((2, 3), sub)}, {E((2, 3), sub)})",
                     f"np.einsum('i,i', {E((3,), sub)}, {E((3,), sub)})"])),
                ("theta_theta", 1.0, lambda: self.theta_theta()),
                ("index", 1.0, lambda: self.index_scalar(sub)),
                ("builtin_minmax", 1.0, lambda: f"{self.rng.choice(['max', 'min'])}("
                                                f"{E((), sub)}, {E((), sub)})"),
                ("builtin_sorted", 1.0, lambda: self.sorted_expr(sub)),
                ("scalar_builtins", 1.0, lambda: self.scalar_builtin(sub)),
                ("lstsq", 0.5, lambda: f"{self.lstsq_expr(sub)}[1][0]"),
            ]
            if self.lists() or self.structs() or self.dicts():
                opts += [("builtin_reduce", 1.5, lambda: self.reduce_structure(sub)),
                         ("comprehension", 0.7, lambda: self.comp_scalar(sub))]
        else:
            opts += [("theta_theta", 0.6, lambda: f"{E(shape, sub)} * "
                                                   f"np.log(1.0 + np.exp("
                                                   f"np.tanh({self.theta_theta()})))")]
        if shape == (3,):
            opts += [
                ("ufunc_reduce", 1.0, lambda: self.rng.choice(
                    [f"np.add.reduce({E((2, 3), sub)})",
                     f"np.multiply.accumulate({E((3,), sub)})",
                     f"np.add.accumulate({E((3,), sub)}, axis=0)"])),
                ("lstsq", 0.5, lambda: f"np.polyfit(np.linspace(0.0, 3.0, 4) + 0.1 * np.tanh("
                                       f"{E((4,), sub)}), {E((4,), sub)}, 2)"),
                ("polynomial", 1.0, lambda: f"np.polynomial.polynomial.polyval("
                                            f"{self.paren(E((3,), sub))}, "
                                            f"[0.5, {E((), sub)}, -0.25])"),
                ("distance", 1.0, lambda: f"distance.pdist({self.paren(E((2, 3), sub))}.T + "
                                          f"np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]]), "
                                          f"{self.distance_metric()})"),
                ("slice", 1.0, lambda: self.rng.choice(
                    [f"{self.paren(E((4,), sub))}[1:]", f"{self.paren(E((4,), sub))}[:3]",
                     f"{self.paren(E((3,), sub))}[::-1]"])),
                ("index", 1.0, lambda: f"{self.paren(E((2, 3), sub))}"
                                       f"[{self.rng.choice(['0', '1', '-1'])}]"),
                ("reduce_axis", 1.0, lambda: f"np.{self.rng.choice(['sum', 'mean'])}("
                                             f"{E((2, 3), sub)}, axis=0)"),
                ("matmul", 1.0, lambda: f"{self.paren(E((2,), sub))} @ "
                                        f"{self.paren(E((2, 3), sub))}"),
                ("einsum", 1.0, lambda: f"np.einsum('ij,i->j', {E((2, 3), sub)}, "
                                        f"{E((2,), sub)})"),
                ("concatenate", 1.0, lambda: f"np.concatenate([{E((2,), sub)}, "
                                             f"{self.paren(E((3,), sub))}[:1]])"),
            ]
        if shape == (2,):
            opts += [
                ("ufunc_reduce", 1.0, lambda: f"np.{self.rng.choice(['maximum', 'minimum'])}"
                                              f".reduce({E((2, 3), sub)}, 1)"),
                ("lstsq", 1.0, lambda: f"{self.lstsq_expr(sub)}[0]"),
                ("scipy_solve", 1.0, lambda: self.scipy_solve_expr(sub)),
                ("slice", 1.0, lambda: self.rng.choice(
                    [f"{self.paren(E((3,), sub))}[1:]", f"{self.paren(E((3,), sub))}[:2]",
                     f"{self.paren(E((4,), sub))}[::2]", f"{self.paren(E((2, 3), sub))}"
                                                         f"[:, {self.rng.randrange(3)}]"])),
                ("reduce_axis", 1.0, lambda: f"np.{self.rng.choice(['sum', 'mean'])}("
                                             f"{E((2, 3), sub)}, axis=1)"),
                ("matmul", 1.0, lambda: f"{self.paren(E((2, 3), sub))} @ "
                                        f"{self.paren(E((3,), sub))}"),
                ("einsum", 1.0, lambda: self.rng.choice(
                    [f"np.einsum('ij,j->i', {E((2, 3), sub)}, {E((3,), sub)})",
                     f"np.einsum('ij->i', {E((2, 3), sub)})"])),
            ]
        if shape == (4,):
            opts += [
                ("concatenate", 1.0, lambda: f"np.concatenate([{E((3,), sub)}, "
                                             f"{self.paren(E((2,), sub))}[:1]])"),
                ("slice", 1.0, lambda: f"{self.paren(E((4,), sub))}[::-1]"),
            ]
        if shape == (2, 3):
            opts += [
                ("polynomial", 1.0, lambda: f"np.vander({E((2,), sub)}, 3"
                                            f"{self.rng.choice(['', ', increasing=True'])})"),
                ("distance", 1.0, lambda: f"distance.cdist({self.paren(E((2, 3), sub))}[:, :2], "
                                          f"{self.paren(E((2, 3), sub))}.T + 5.0, "
                                          f"{self.distance_metric()})"),
                ("einsum", 1.0, lambda: self.rng.choice(
                    [f"np.einsum('i,j->ij', {E((2,), sub)}, {E((3,), sub)})",
                     f"np.einsum('ij,j->ij', {E((2, 3), sub)}, {E((3,), sub)})"])),
                ("outer", 1.0, lambda: self.rng.choice(
                    [f"np.outer({E((2,), sub)}, {E((3,), sub)})",
                     f"{self.paren(E((2,), sub))}[:, None] * {self.paren(E((3,), sub))}"])),
                ("ufunc_outer", 1.0, lambda: self.ufunc_outer(sub)),
                ("reduce_axis", 1.0, lambda: f"{self.paren(E((2, 3), sub))} "
                                             f"{self.rng.choice(['*', '-'])} np."
                                             f"{self.rng.choice(['sum', 'mean'])}("
                                             f"{E((2, 3), sub)}, axis="
                                             f"{self.rng.choice([0, 1])}, keepdims=True)"),
                ("slice", 1.0, lambda: f"{self.paren(E((2, 3), sub))}"
                                       f"{self.rng.choice(['[::-1]', '[:, ::-1]'])}"),
            ]
        if len(shape) == 1:
            opts += [("reduce_axis", 0.7, lambda: f"{self.paren(E(shape, sub))} - np.mean("
                                                  f"{E(shape, sub)}, keepdims=True)")]
        if shape != () and self.stackable(shape):
            opts += [("stack", 1.0, lambda: self.stack_expr(shape))]
        if any(self.elem_shape(L) == shape for L in self.lists()) or \
                any(D.homogeneous() == shape for D in self.dicts()):
            opts += [("builtin_reduce", 1.0, lambda: self.sum_list(shape, sub))]
        return self.choose(opts)

    def sorted_expr(self, d):
        """sorted() of an array's items, read by index or by an array function (whose
        rule gives the list's derivative as an array)."""
        n = self.rng.choice([3, 4])
        how = self.rng.choice(["", ", reverse=True", ", key=abs"])
        s = f"sorted({self.expr((n,), d)}{how})"
        return self.rng.choice([f"{s}[{self.rng.choice([0, -1, 1])}]",
                                f"np.dot({s}, {self.expr((n,), d)})",
                                f"np.sum(np.array({s}) * {self.expr((n,), d)})"])

    def literal_index(self, shape, d):
        """An item of a tuple or list literal, or of a slice of one: (a, b)[k],
        [a, b, c][-1], (a, b, c)[1:][0] (its gradient was lost, indexed in place)."""
        items = [self.expr(shape, d) for _ in range(self.rng.choice([2, 3]))]
        k = self.rng.randrange(len(items))
        open_, close_ = self.rng.choice([("(", ")"), ("[", "]")])
        literal = f"{open_}{', '.join(items)}{',' if len(items) == 1 else ''}{close_}"
        return self.rng.choice([f"{literal}[{k}]", f"{literal}[{k - len(items)}]",
                                f"{literal}[{k}:][0]"])

    def scalar_builtin(self, d):
        e = self.expr((), d)
        pe = self.paren(e)
        return self.rng.choice([
            f"abs({e})", f"pow({e}, 2)", f"pow({e}, 3)", f"float({e})", f"math.sin({e})",
            f"math.cos({e})", f"math.tanh({e})", f"math.exp(math.tanh({e}))",
            f"math.log(1.0 + {pe} ** 2)", f"math.sqrt(1.0 + {pe} ** 2)",
            f"math.log(1.0 + math.exp({e}))", f"abs(float({e}))", f"np.float64({e}) * 0.5"])

    def sum_list(self, shape, d):
        """sum(L), sum(L, start), sum(d.values(), start), sum(generator, start)."""
        Ls = [L for L in self.lists() if self.elem_shape(L) == shape]
        Ds = [D for D in self.dicts() if D.homogeneous() == shape]
        start = self.rng.choice([self.zeros(shape), GLOBAL_ARRAYS.get(shape, "C1")])
        if Ds and (not Ls or self.rng.random() < 0.4):
            D = self.rng.choice(Ds)
            if self.rng.random() < 0.5:
                return f"sum({D.name}.values(), {start})"
            v = self.fresh("v")
            return f"sum(({self.expr_with(Var(v, shape, False), shape, d)} " \
                   f"for {v} in {D.name}.values()), {start})"
        L = self.rng.choice(Ls)
        r = self.rng.random()
        if self.on("map_call") and self.rng.random() < 0.3:   # map over the list
            t = self.fresh("t")
            fn = self.rng.choice(["np.tanh", "np.sin", f"lambda {t}: "
                                  f"{self.expr_with(Var(t, shape, False), shape, d)}"])
            return f"sum(map({fn}, {L.name}), {start})"
        if r < 0.3 and L.elems:
            return f"sum({L.name})"
        if r < 0.65:
            return f"sum({L.name}, {start})"
        t = self.fresh("t")
        return f"sum(({self.expr_with(Var(t, shape, False), shape, d)} for {t} in " \
               f"{L.name}), {start})"

    def reduce_structure(self, d):
        """A scalar from a whole list, list of records or dict: sum/max/min over it."""
        opts = []
        for L in self.lists():
            es = self.elem_shape(L)
            if es == () and L.elems:
                opts.append(lambda L=L: f"{self.rng.choice(['max', 'min', 'sum'])}({L.name})")
            t = self.fresh("t")

            def gen(L=L, t=t, es=es):
                fn = self.rng.choice(["sum", "sum", "max", "min"]) if L.elems else "sum"
                return f"{fn}({self.scalar_of(t, es, d)} for {t} in {L.name})"
            opts.append(gen)
        for S in self.structs():
            def gen_s(S=S):
                fn = self.rng.choice(["sum", "sum", "max"]) if S.n else "sum"
                if S.kind == "dict":
                    r = self.fresh("r")
                    ra = f'{r}["a"]'
                    return f'{fn}({self.scalar_of(ra, S.shapes[0], d)} * ' \
                           f'np.mean(np.cos({r}["b"])) for {r} in {S.name})'
                a, b = self.fresh("a"), self.fresh("b")
                return f"{fn}({self.scalar_of(a, S.shapes[0], d)} * np.mean(np.cos({b})) " \
                       f"for {a}, {b} in {S.name})"
            opts.append(gen_s)
        for D in self.dicts():
            def gen_d(D=D):
                v, k = self.fresh("v"), self.fresh("k")
                fn = self.rng.choice(["sum", "sum", "max", "min"])
                if self.rng.random() < 0.5:
                    return f"{fn}({self.scalar_of(v, D.homogeneous(), d)} for {v} in " \
                           f"{D.name}.values())"
                src = f"{D.name}[{k}]"
                return f"{fn}({self.scalar_of(src, D.homogeneous(), d)} for {k} in " \
                       f"{self.keys_of(D.name)})"
            opts.append(gen_d)
        return self.rng.choice(opts)()

    def comp_scalar(self, d):
        """sum over a generator with an `if` on data or on the index, or two generators."""
        Ls = self.lists()
        if not Ls:
            return self.reduce_structure(d)
        L = self.rng.choice(Ls)
        es = self.elem_shape(L)
        t, i = self.fresh("t"), self.fresh("i")
        form = self.rng.choice(["data", "index", "nested"])
        if form == "data":
            return f"sum(({self.scalar_of(t, es, d)} for {t} in {L.name} if " \
                   f"np.sum({t}) > {self.thr()}), 0.0)"
        if form == "index":
            cond = self.rng.choice([f"{i} != 1", f"{i} % 2 == 0", f"{i} > 0"])
            return f"sum(({self.scalar_of(t, es, d)} for {i}, {t} in enumerate({L.name}) " \
                   f"if {cond}), 0.0)"
        M = self.rng.choice(Ls)
        u = self.fresh("u")
        return f"sum({self.scalar_of(t, es, d)} * np.mean(np.tanh({u})) for {t} in " \
               f"{L.name} for {u} in {M.name})"

    @staticmethod
    def paren(src):
        if re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", src):
            return src
        return f"({src})"

    def binop(self, shape, d):
        if self.on("operator_call") and self.rng.random() < 0.1:   # operator.mul(a, b)
            name = self.rng.choice(["add", "sub", "mul"])
            if self.rng.random() < 0.3:   # functools.reduce over a literal
                items = ", ".join(self.expr(shape, d) for _ in range(self.rng.choice([2, 3])))
                return f"functools.reduce(operator.{name}, [{items}])"
            return f"operator.{name}({self.expr(shape, d)}, {self.expr(shape, d)})"
        return self.plain_binop(shape, d)

    def plain_binop(self, shape, d):
        op = self.rng.choice(["+", "-", "*", "*"])
        a = self.expr(shape, d)
        other = [shape, shape, ()]
        if shape == (2, 3):
            other.append((3,))
        b = self.expr(self.rng.choice(other), d)
        if self.rng.random() < 0.5:
            a, b = b, a
        if self.rng.random() < 0.3:
            return f"{self.const()} * {self.paren(a)} {op} {self.paren(b)}"
        return f"{self.paren(a)} {op} {self.paren(b)}"

    def cond(self, d=1):
        return f"{self.paren(self.scalar_for_cond(d))} > {self.thr()}"

    def scalar_for_cond(self, d=1):
        """A scalar that depends on some variable (a test on constants decides nothing)."""
        vs = [v for v in self.visible().values() if isinstance(v, Var)]
        if vs and self.rng.random() < 0.6:
            v = self.rng.choice(vs)
            e = self.expr(v.shape, 2)
            if v.shape == ():
                return f"{v.name} * {self.paren(e)}" if self.rng.random() < 0.5 else v.name
            return self.rng.choice([f"np.sum({v.name})", f"np.sum({v.name} * {self.paren(e)})",
                                    f"np.mean(np.tanh({v.name}))"])
        if self.rng.random() < 0.5:
            return self.expr((), max(d, 1))
        shape = self.rng.choice(SHAPES)
        if shape == ():
            return self.expr((), max(d, 1))
        return f"np.sum({self.expr(shape, max(d, 1))})"

    def reduce_to_scalar(self, d):
        shape = self.rng.choice(SHAPES[:3])
        e = self.expr(shape, d)
        return self.rng.choice([f"np.sum({e})", f"np.mean({e})", f"{self.paren(e)}.sum()",
                                f"np.sum({e}, axis={'(0, 1)' if len(shape) == 2 else '0'})"
                                if self.on("reduce_axis") else f"np.sum({e})"])

    def vecvec(self, d):
        shape = self.rng.choice([(2,), (3,), (4,)])
        return f"{self.paren(self.expr(shape, d))} @ {self.paren(self.expr(shape, d))}"

    def theta_theta(self):
        vs = [v for v in self.visible().values() if isinstance(v, Var) and len(v.shape) == 1]
        if not vs:
            return "(G3 @ G3)"
        v = self.rng.choice(vs)
        self.used["theta_theta"] += 1
        return f"({v.name} @ {v.name})"

    def index_scalar(self, d):
        shape = self.rng.choice([(2,), (3,), (4,), (2, 3)])
        if shape == (2, 3):
            i = self.index_for(2)
            return f"{self.paren(self.expr(shape, d))}[{i}, {self.rng.randrange(3)}]"
        return f"{self.paren(self.expr(shape, d))}[{self.index_for(shape[0])}]"

    def index_for(self, n):
        """An index into a length-n axis: a constant, or a loop index in range."""
        ints = [name for name, bound in self.ints if bound <= n]
        if ints and self.rng.random() < 0.6:
            return self.rng.choice(ints)
        return str(self.rng.choice(list(range(n)) + [-1]))

    def stackable(self, shape):
        return any(set(L.elems) == {shape} and len(L.elems) > 0 for L in self.lists())

    def stack_expr(self, shape):
        Ls = [L for L in self.lists() if set(L.elems) == {shape} and len(L.elems) > 0]
        L = self.rng.choice(Ls)
        return f"np.{self.rng.choice(['sum', 'mean'])}(np.stack({L.name}), axis=0)"

    def apply_expr(self, shape, d):
        def cube():
            self.classes.add("Cube")
            return f"Cube.apply(np.tanh({self.expr(shape, d)}))"

        def softplus():
            self.classes.add("Softplus")
            return f"Softplus.apply({self.expr(shape, d)})"

        def scale():
            self.classes.add("ScaleBy")
            return f"ScaleBy.apply({self.expr(shape, d)}, {self.const()})"

        def mul():   # (an operand may broadcast: its vjp's gradient is summed down)
            self.classes.add("Mul")
            other = [shape, shape, ()] + ([(3,)] if shape == (2, 3) else [])
            a, b = self.expr(shape, d), self.expr(self.rng.choice(other), d)
            if self.rng.random() < 0.5:
                a, b = b, a
            return f"Mul.apply({a}, {b})"

        def affine():   # (ctx set by a tuple assignment; a vjp rebinding and updating g;
            # applied without forward's defaults, its vjp's Nones for them are dropped)
            self.classes.add("Affine")
            given = self.rng.choice([2, 2, 1, 0])
            rest = "".join(f", {self.const()}" for _ in range(given))
            return f"Affine.apply({self.expr(shape, d)}{rest})"

        def sincos():
            self.classes.add("SinCos")
            return f"SinCos.apply({self.expr(shape, d)})[{self.rng.randrange(2)}]"

        def user_rule():   # (reversing the last axis: not for a number)
            name = "user_revcumsum" if shape != () and self.rng.random() < 0.5 else \
                "user_softsign"
            self.classes.add(name)
            return f"{name}({self.expr(shape, d)})"
        def spread():   # a module-level tuple spread into a call (or a slice of one)
            self.classes.add("mix")
            return self.rng.choice([f"mix({self.expr(shape, d)}, *MIX_ARGS)",
                                    f"mix({self.expr(shape, d)}, *MIX_ARGS[:1], 0.3)"])

        def shortcut():   # Functions with early returns (inlined) or called
            name = self.rng.choice(["Shrink", "Ratio", "Held", "Moded", "loop_return"])
            self.classes.add(name)
            if name == "loop_return":
                return f"loop_return({self.expr(shape, d)})"
            return f"{name}.apply({self.expr(shape, d)})"

        def recursive():   # a closure calling itself
            self.classes.add("damped")
            return f"damped({self.expr(shape, d)}, {self.rng.randrange(1, 4)})"

        def method():   # self.shift(...) inside the methods of a module-level instance
            self.classes.add("Scaler")
            return self.rng.choice([f"SCALER.apply({self.expr(shape, d)})",
                                    f"SCALER({self.expr(shape, d)})",
                                    f"scaled({self.expr(shape, d)})",
                                    f"scaled({self.expr(shape, d)}, SCALER)"])
        return self.choose([(None, 1.0, cube), (None, 1.0, softplus), (None, 1.0, scale),
                            (None, 1.0, mul), (None, 0.7, affine),
                            ("multi_output_apply", 1.0, sincos),
                            ("user_rule", 1.0, user_rule), ("instance_method", 0.7, method),
                            ("spread_free_tuple", 0.7, spread),
                            ("closure_recursion", 0.7, recursive),
                            ("early_return_apply", 0.7, shortcut)])

    def derivative_expr(self, shape, d):
        """A derivative computed inside the program: the compiler reads it as code
        and differentiates it again (create_graph=True, so finite differences of
        the program see the same function)."""
        E = self.expr
        bodies = ["np.sin(u) * u", "np.tanh(u) * u", "u * u * 0.5", "np.exp(-u * u)",
                  "Cube.apply(np.tanh(u)) * u", "user_softsign(u) * u", "Shrink.apply(u) * u",
                  "loop_return(u) * u"]
        body = self.rng.choice(bodies)
        if self.rng.random() < 0.35:
            # a lambda reading a value of this function: an input of the derivative's
            # code too, passed after u (once passed after v: silently wrong)
            body = f"({body}) * {self.paren(E((), d))}"
        for needed in ("Cube", "Shrink", "user_softsign", "loop_return"):
            if needed + ("(" if needed[0].islower() else ".") in body:
                self.classes.add(needed)
        F = "s2sgrad.functional"

        def grad():
            return f"s2sgrad.grad(lambda u: np.sum({body}))({E(shape, d)})"

        def grad_bound():   # the derivative bound to a name first, then called
            g = self.fresh("dg")
            self.emit(f"{g} = s2sgrad.grad(lambda u: np.sum({body}))")
            return f"{g}({E(shape, d)})"

        def vjp():
            return f"{F}.vjp(lambda u: {body}, {E(shape, d)}, {E(shape, d)}, " \
                   f"create_graph=True)[1]"

        def jvp():
            return f"{F}.jvp(lambda u: {body}, {E(shape, d)}, {E(shape, d)}, " \
                   f"create_graph=True)[1]"

        def hvp():
            return f"{F}.hvp(lambda u: np.sum({body}), {E(shape, d)}, {E(shape, d)}, " \
                   f"create_graph=True)[1]"

        def pair():   # tuple inputs, and the cotangent written as a tuple literal
            k = self.rng.randrange(2)
            return f"{F}.vjp(lambda u, z: (u * z, np.sin(u)), ({E(shape, d)}, " \
                   f"{E(shape, d)}), ({E(shape, d)}, {E(shape, d)}), create_graph=True)[1][{k}]"
        return self.choose([(None, 1.0, grad), (None, 0.7, grad_bound), (None, 1.0, vjp),
                            (None, 1.0, jvp),
                            (None, 1.0, hvp), (None, 1.0, pair)])

    def call_args(self, h, d):
        args = [self.expr(s, d) for _, s in h.params]
        if h.kind in ("tuple_param", "struct_return"):
            shapes = tuple(s for _, s in h.params)
            Ss = [S for S in self.structs() if S.n and S.kind != "dict" and
                  S.shapes == shapes]
            if Ss and self.on("helper_relay") and self.rng.random() < 0.5:
                S = self.rng.choice(Ss)
                self.used["helper_relay"] += 1
                args = [f"{S.name}[{self.index_for(S.n)}]"]
            else:
                args = [f"({', '.join(args)})"]
        elif h.kind == "pairs_param":
            shapes = tuple(s for _, s in h.params)
            Ss = [S for S in self.structs() if S.kind != "dict" and S.shapes == shapes]
            if Ss and self.rng.random() < 0.7:
                args = [self.rng.choice(Ss).name]
            else:
                args = ["[" + ", ".join(f"({self.expr(shapes[0], d)}, {self.expr(shapes[1], d)})"
                                        for _ in range(h.list_len)) + "]"]
        elif h.kind == "dict_param":
            Ds = [D for D in self.dicts() if D.items == h.spec]
            if Ds and self.rng.random() < 0.7:
                args = [self.rng.choice(Ds).name]
            else:
                args = ["{" + ", ".join(f'"{k}": {self.expr(sh, d)}'
                                        for k, sh in h.spec.items()) + "}"]
        elif h.kind == "list_param":
            args = [f"[{', '.join(self.expr(h.params[0][1], d) for _ in range(h.list_len))}]"]
        if h.default is not None:
            r = self.rng.random()
            if r < 0.4:
                args.append(f"{h.default}={self.expr((), d)}")
            elif r < 0.6:
                args.append(self.expr((), d))
        if h.kwonly is not None and self.rng.random() < 0.6:
            args.append(f"{h.kwonly}={self.expr((), d)}")
        return ", ".join(args)

    def helper_call(self, shape, d):
        hs = [h for h in self.helpers if h.ret == shape and h.kind in
              ("plain", "tuple_param", "list_param", "pairs_param", "dict_param")]
        if not hs:
            return self.leaf(shape)
        h = self.rng.choice(hs)
        return f"{h.name}({self.call_args(h, d)})"

    def leaf(self, shape):
        shape = tuple(shape)
        opts = []
        for v in self.vars_of(shape):
            opts.append((None, 4.0 if v.param else 3.0, lambda v=v: v.name))
        for L in self.lists():
            for k, s in enumerate(L.elems):
                if s == shape:
                    opts.append(("list_index", 1.5, lambda L=L, k=k: f"{L.name}[{k}]"))
        for S in self.structs():
            if S.n:
                for j, s in enumerate(S.shapes):
                    if s == shape:
                        opts.append(("struct_read", 3.0 if S.param else 1.0,
                                     lambda S=S, j=j: S.item(self.index_for(S.n), j)))
        for D in self.dicts():
            for key, s in D.items.items():
                if s == shape:
                    opts.append(("dict", 3.0 if D.param else 1.5,
                                 lambda D=D, key=key: f'{D.name}["{key}"]'))
        if shape == ():
            opts.append((None, 0.6, self.const))
            opts.append(("global_const", 1.0, lambda: self.rng.choice(["C1", "C2"])))
            if self.ints:
                opts.append(("loop_index_value", 1.0,
                             lambda: f"0.25 * {self.rng.choice(self.ints)[0]}"))
        else:
            opts.append(("global_const", 0.5, lambda: GLOBAL_ARRAYS[shape]))
        if len(shape) == 1:
            opts.append(("python_weights", 0.6, lambda: self.python_weights(shape[0])))
        if not self.vars_of(shape) or self.rng.random() < 0.15:
            opts.append((None, 6.0, lambda: self.bridge(shape)))
        return self.choose(opts)

    def python_weights(self, n: int) -> str:
        """decay_weights(n, rate): constant weights from the user's Python helper."""
        self.classes.add("decay_weights")
        return f"decay_weights({n}, {self.rng.choice([0.9, 0.5, 1.1])})"

    def bridge(self, shape):
        """A value of `shape` made from a variable of another shape."""
        vs = [v for v in self.visible().values() if isinstance(v, Var)]
        if not vs:
            return GLOBAL_ARRAYS.get(shape, "C1")
        v = self.rng.choice(vs)
        n, s = v.name, v.shape
        cands = []
        if shape == ():
            if s == ():
                cands += [f"np.sin({n})", f"{n} * {n}"]
            else:
                cands += [f"np.sum({n})", f"np.mean({n})"]
                if len(s) == 1:
                    cands += [f"{n}[{self.index_for(s[0])}]", f"({n} @ {n})"]
                else:
                    cands += [f"{n}[{self.index_for(2)}, {self.rng.randrange(3)}]"]
        else:
            g = GLOBAL_ARRAYS[shape]
            if s == ():
                cands += [f"{n} * {g}", f"np.tanh({g} + {n})"]
            if shape == (3,):
                cands += {(4,): [f"{n}[1:]", f"{n}[:3]"], (2, 3): [f"{n}[{self.index_for(2)}]",
                                                                  f"np.sum({n}, axis=0)"],
                          (2,): [f"{n} @ G23"], (3,): [f"{n}[::-1]"]}.get(s, [])
            if shape == (2,):
                cands += {(3,): [f"{n}[:2]", f"{n}[1:]", f"G23 @ {n}"], (4,): [f"{n}[::2]"],
                          (2, 3): [f"{n}[:, {self.rng.randrange(3)}]", f"{n} @ G3",
                                   f"np.sum({n}, axis=1)"]}.get(s, [])
            if shape == (4,):
                cands += {(3,): [f"np.tanh({n} @ G3 + G4)"], (2,): [f"np.tanh(G4 * ({n} @ G2))"],
                          (2, 3): [f"G4 * np.sum({n})"]}.get(s, [])
            if shape == (2, 3):
                cands += {(3,): [f"G23 * {n}"], (2,): [f"np.outer({n}, G3)"],
                          (4,): [f"G23 * np.sum({n})"]}.get(s, [])
        if not cands:
            return GLOBAL_ARRAYS.get(shape, "C1")
        return self.rng.choice(cands)

    # ---- statements -------------------------------------------------------------------
    def block(self, n):
        for _ in range(n):
            if self.stmt_budget <= 0:
                return
            self.stmt_budget -= 1
            self.statement()

    def statement(self):
        nested_ok = self.nest < 2
        local_arrays = [v for v in self.visible().values()
                        if isinstance(v, Var) and v.shape != () and v.owned and not v.param]
        param_arrays = [v for v in self.visible().values()
                        if isinstance(v, Var) and v.shape != () and v.owned and v.param]
        scalars = [v for v in self.visible().values()
                   if isinstance(v, Var) and v.shape == () and not v.param]
        locals_ = [v for v in self.visible().values() if isinstance(v, Var) and not v.param]
        params = [v for v in self.visible().values() if isinstance(v, Var) and v.param and
                  not v.view]
        structs, dicts = self.structs(), self.dicts()
        top = self.nest == 0 and self.loop_depth == 0
        opts = [
            ("assign", 1.0, self.s_assign),
            ("reassign", 1.0 if locals_ else 0.0, lambda: self.s_reassign(locals_)),
            ("rebind_param", 1.0 if params and not self.loop_depth else 0.0,
             lambda: self.s_rebind(params)),
            ("aug_array", 1.0 if local_arrays else 0.0, lambda: self.s_aug(local_arrays)),
            ("held_update", 1.0 if local_arrays else 0.0,
             lambda: self.s_held_update(local_arrays)),
            ("aug_param", 1.0 if param_arrays else 0.0, lambda: self.s_aug(param_arrays)),
            ("aug_scalar", 1.0 if scalars else 0.0, lambda: self.s_aug(scalars)),
            ("elem_aug", 1.0 if local_arrays else 0.0, lambda: self.s_elem_aug(local_arrays)),
            ("row_recurrence", 1.0 if local_arrays and nested_ok else 0.0,
             lambda: self.s_row_recurrence(local_arrays)),
            ("stencil_update", 1.0 if any(v.shape[0] >= 3 for v in local_arrays) else 0.0,
             lambda: self.s_stencil_update(local_arrays)),
            ("subscript_write", 1.0, lambda: self.s_subscript_write(local_arrays)),
            ("fancy_write", 1.0, lambda: self.s_fancy_write(local_arrays)),
            ("add_at", 1.0, lambda: self.s_add_at(local_arrays)),
            ("fill_diagonal", 1.0, lambda: self.s_fill_diagonal()),
            ("call_write", 1.0, lambda: self.s_call_write(local_arrays)),
            ("if", 1.0 if nested_ok else 0.0, self.s_if),
            ("walrus", 1.0 if nested_ok else 0.0, self.s_walrus),
            ("static_if", 1.0 if nested_ok else 0.0, self.s_static_if),
            ("errstate", 1.0 if nested_ok else 0.0, self.s_errstate),
            ("for_range", 1.0 if nested_ok else 0.0, self.s_for_range),
            ("for_list_literal", 1.0 if nested_ok else 0.0, self.s_for_list_literal),
            ("for_list_var", 1.0 if nested_ok and self.lists() else 0.0, self.s_for_list_var),
            ("for_array", 1.0 if nested_ok else 0.0, self.s_for_array),
            ("list_build", 1.0, self.s_list_build),
            ("nested_list", 1.0 if nested_ok else 0.0, self.s_nested_list),
            ("list_append", 1.0 if nested_ok else 0.0, self.s_list_append),
            ("tuple_unpack", 1.0, self.s_tuple_unpack),
            ("fused_softmax", 1.0, self.s_fused_softmax),
            ("fused_sigmoid", 1.0, self.s_fused_sigmoid),
            ("helper_result_write", 1.0 if any(h.kind == "plain" and h.ret != ()
                                               for h in self.helpers) else 0.0,
             self.s_helper_result_write),
            ("while", 1.0 if nested_ok else 0.0, self.s_while),
            ("early_return", 1.0 if not self.loop_depth else 0.0, self.s_early_return),
            ("multi_output_apply", 1.0, self.s_sincos),
            ("multi_return_helper", 1.0 if any(h.kind == "multi_return" for h in self.helpers)
             else 0.0, self.s_multi_call),
            ("list_return_helper", 1.0 if any(h.kind == "list_return" for h in self.helpers)
             else 0.0, self.s_list_call),
            ("struct_append", 1.0 if nested_ok else 0.0, self.s_struct_append),
            ("struct_read", 1.5 if structs and nested_ok else 0.0, self.s_struct_read),
            ("list_extend", 1.0 if top else 0.0, self.s_extend),
            ("dict", 1.0, self.s_dict),
            ("dict_counter", 0.4, self.s_dict_counter),
            ("number_keys", 0.3 if nested_ok else 0.0, self.s_number_keys),
            ("dict_write", 3.0 if any(D.mutable for D in dicts) else 0.0, self.s_dict_write),
            ("dict_loop", 2.5 if dicts and nested_ok else 0.0, self.s_dict_loop),
            ("comprehension", 1.5 if self.lists() or structs or dicts else 0.0,
             self.s_comprehension),
            ("chained_assign", 1.0, self.s_chained),
            ("item_write", 2.0 if any(L.mutable and L.elems for L in self.lists()) or
             any(S.mutable and S.n for S in structs) else 0.0, self.s_item_write),
            ("list_reorder", 1.0 if any(L.mutable and len(L.elems) > 1 for L in self.lists())
             else 0.0, self.s_list_reorder),
            ("struct_return_helper", 1.0 if any(h.kind == "struct_return" for h in self.helpers)
             else 0.0, self.s_struct_call),
            ("dict_return_helper", 1.0 if any(h.kind == "dict_return" for h in self.helpers)
             else 0.0, self.s_dict_call),
        ]
        if self.loop_depth:
            opts += [("break", 1.0, lambda: self.s_loop_exit("break")),
                     ("continue", 1.0, lambda: self.s_loop_exit("continue")),
                     ("return_in_loop", 1.0, lambda: self.s_loop_exit("return"))]
        self.choose(opts)

    def new_var(self, shape, value, stem="v"):
        name = self.fresh(stem)
        fresh = self.note_assignment(value)
        self.emit(f"{name} = {value}")
        self.declare(Var(name, shape, fresh))
        return name

    def s_assign(self):
        shape = self.rng.choice(self.shape_pool())
        self.new_var(shape, self.expr(shape, 0))

    def loop_update(self, v):
        """An update of a variable that stays bounded when repeated."""
        e = self.expr(v.shape, 1)
        return self.rng.choice([f"0.5 * {v.name} + 0.5 * np.tanh({e})",
                                f"{v.name} + 0.3 * np.tanh({e})",
                                f"np.tanh({v.name} * {self.const()} + {self.paren(e)})"])

    def s_reassign(self, locals_):
        v = self.rng.choice(locals_)
        value = self.loop_update(v) if self.loop_depth else self.expr(v.shape, 0)
        fresh = self.note_assignment(value)
        self.emit(f"{v.name} = {value}")
        v.owned = v.owned and fresh if self.nest else fresh

    def s_rebind(self, params):
        v = self.rng.choice(params)
        forms = [(f"{v.name} * 2.0", True), (f"np.tanh({v.name})", True),
                 (f"{v.name} * {self.const()} + {self.paren(self.expr(v.shape, 1))}", True)]
        if v.shape != ():
            forms.append((f"{v.name}[::-1]", False))
        value, fresh = self.rng.choice(forms)
        self.emit(f"{v.name} = {value}")
        v.owned = fresh

    def s_aug(self, targets):
        v = self.rng.choice(targets)
        op = self.rng.choice(["+=", "-=", "*="])
        shape = self.rng.choice([v.shape, ()])
        e = self.expr(shape, 1)
        if op == "*=":
            e = f"(1.0 + 0.5 * np.tanh({e}))"
        elif self.loop_depth:
            e = f"0.3 * np.tanh({e})"
        self.note_assignment(e)
        self.emit(f"{v.name} {op} {e}")

    def s_held_update(self, arrays):
        """A local array put into a list, tuple or dict, read from it, then updated in
        place (`x += e` changes the container's item too: refused if the container is
        read afterwards, sometimes)."""
        v = self.rng.choice(arrays)
        held = self.fresh("H")
        form = self.rng.choice(["list", "tuple", "views", "dict", "append"])
        if form == "append":
            self.emit(f"{held} = []")
            self.emit(f"{held}.append({v.name})")
        else:
            self.emit(f"{held} = " + {"list": f"[{v.name}, {self.expr(v.shape, 1)}]",
                                      "tuple": f"({v.name},)",
                                      "views": f"({v.name}[:1], {v.name}[::-1])",
                                      "dict": f'{{"k": {v.name}}}'}[form])
        item = f'{held}["k"]' if form == "dict" else f"{held}[0]"
        self.new_var((), f"np.sum(np.tanh({item}))", stem="s")
        self.emit(f"{v.name} += 0.3 * np.tanh({self.expr(v.shape, 1)})")
        if self.rng.random() < 0.2:
            self.new_var((), f"np.sum(np.sin({item}))", stem="s")

    def s_elem_aug(self, arrays):
        v = self.rng.choice(arrays)
        op = self.rng.choice(["+=", "-=", "+="])
        if len(v.shape) == 1:
            self.emit(f"{v.name}[{self.index_for(v.shape[0])}] {op} "
                      f"{self.bounded(self.expr((), 1))}")
        elif self.rng.random() < 0.5:
            self.emit(f"{v.name}[{self.index_for(2)}, {self.rng.randrange(3)}] {op} "
                      f"{self.bounded(self.expr((), 1))}")
        else:
            self.emit(f"{v.name}[{self.index_for(2)}] {op} {self.bounded(self.expr((3,), 1))}")

    def s_row_recurrence(self, arrays):
        """Each row (item) of a local array updated in place from the one before, the
        loop's bound read from the array itself (its shape or len)."""
        v = self.rng.choice(arrays)
        i = self.fresh("i")
        bound = self.rng.choice([f"{v.name}.shape[0]", f"len({v.name})"])
        self.emit(f"for {i} in range(1, {bound}):")
        self.indent += 1
        self.emit(f"{v.name}[{i}] {self.rng.choice(['+=', '-='])} "
                  f"{self.rng.choice(['0.5', '0.3'])} * np.tanh({v.name}[{i} - 1])")
        self.indent -= 1

    def s_stencil_update(self, arrays):
        """A three-point stencil along the first axis: slices read, summed, and the
        interior updated in place (the slices the adjoint reads only for their shapes
        stay views; one whose values it reads is copied)."""
        v = self.rng.choice([a for a in arrays if a.shape[0] >= 3])
        n, lap = v.name, self.fresh("lap")
        weight = self.rng.choice(["2.0", "np.tanh(" + self.expr((), 1) + ")"])
        self.emit(f"{lap} = {n}[:-2] + {n}[2:] - {weight} * {n}[1:-1]")
        update = self.rng.choice([f"{n}[1:-1] += 0.2 * {lap}",
                                  f"{n}[1:-1] = {n}[1:-1] + 0.1 * np.tanh({lap})",
                                  f"{n}[1:-1] -= 0.1 * {lap} * {n}[:-2]"])
        self.emit(update)

    def bounded(self, e):
        return f"0.3 * np.tanh({e})" if self.loop_depth else e

    def s_subscript_write(self, arrays):
        if arrays and self.rng.random() < 0.5:
            v = self.rng.choice(arrays)
        else:
            shape = self.rng.choice([(3,), (4,), (2, 3), (3,)])
            init = self.rng.choice([f"np.zeros({shape if len(shape) > 1 else shape[0]})",
                                    f"np.ones({shape if len(shape) > 1 else shape[0]})",
                                    f"{self.paren(self.expr(shape, 1))} * 1.0"])
            v = self.lookup(self.new_var(shape, init, "out"))
        for _ in range(self.rng.choice([1, 1, 2])):
            self.write_into(v)

    def write_into(self, v):
        n = v.name
        if len(v.shape) == 1:
            L = v.shape[0]
            forms = [(f"{n}[{self.index_for(L)}]", ()), (f"{n}[1:]", (L - 1,)),
                     (f"{n}[:{L - 1}]", (L - 1,)), (f"{n}[::-1]", (L,))]
            if L == 4:
                forms += [(f"{n}[::2]", (2,)), (f"{n}[1:]", (3,))]
            if L == 3:
                forms += [(f"{n}[:2]", (2,))]
        else:
            forms = [(f"{n}[{self.index_for(2)}]", (3,)),
                     (f"{n}[:, {self.rng.randrange(3)}]", (2,)),
                     (f"{n}[{self.index_for(2)}, {self.rng.randrange(3)}]", ())]
        forms = [fm for fm in forms if fm[1] != (1,)]  # (2,) arrays: no 1-item slices
        target, shape = self.rng.choice(forms)
        e = self.expr(shape, 1)
        self.note_assignment(e)
        self.emit(f"{target} = {e}")

    def s_fancy_write(self, arrays):
        vs = [v for v in arrays if v.shape in ((3,), (4,))]
        if not vs:
            vs = [self.lookup(self.new_var((3,), "np.zeros(3)", "out"))]
        v = self.rng.choice(vs)
        idx, shape = self.rng.choice([("[0, 0, 1]", (3,)), ("[2, 0, 2]", (3,)), ("[1, 1]", (2,)),
                                      ("[0, 2]", (2,))])
        op = self.rng.choice(["=", "=", "+="])
        e = self.expr(shape, 1)
        self.note_assignment(e)
        self.emit(f"{v.name}[{idx}] {op} {e}")

    def s_add_at(self, arrays):
        vs = [v for v in arrays if v.shape in ((3,), (4,))]
        if not vs:
            vs = [self.lookup(self.new_var((3,), "np.zeros(3)", "out"))]
        v = self.rng.choice(vs)
        idx, shape = self.rng.choice([("[0, 0, 2]", (3,)), ("[1, 1]", (2,)), ("[2, 0, 1]", (3,))])
        e = self.expr(shape, 1)
        self.note_assignment(e)
        self.emit(f"np.add.at({v.name}, {idx}, {e})")

    def s_fill_diagonal(self):
        """A matrix made here, its diagonal written by np.fill_diagonal: a number, a
        vector of its length, a vector repeated along it (NumPy's cycling)."""
        target = self.fresh("M")
        self.emit(f"{target} = {self.paren(self.expr((2, 3), 1))} * 1.0")
        value = self.rng.choice([lambda: self.expr((), 1), lambda: self.expr((2,), 1),
                                 lambda: f"{self.paren(self.expr((3,), 1))}[:1]"])()
        self.note_assignment(value)
        self.emit(f"np.fill_diagonal({target}, {value})")
        self.new_var((2, 3), f"{target} * 1.0", "w")

    def s_call_write(self, arrays):
        # Mostly a write that runs as it is (constants into a buffer of constants); a
        # differentiated value taking part is refused, which a program shows rarely.
        if self.rng.random() < 0.2:   # into a 0-d array (its adjoint's arithmetic: scalars)
            target = self.fresh("total")
            e = self.expr((3,), 1)
            self.note_assignment(e)
            self.emit(f"{target} = np.zeros(())")
            self.emit(f"np.copyto({target}, np.tanh(np.sum({e}) * 0.5 + {target}))")
            self.new_var((), f"{target} * 1.0", "w")
            return
        vs = [v.name for v in arrays if v.shape == (3,)]
        fresh = not vs or self.rng.random() < 0.85
        if fresh:   # a buffer of constants, written below and read once, as a copy
            target = self.fresh("buf")
            self.emit(f"{target} = np.zeros(3)")
        else:
            target = self.rng.choice(vs)
        e = self.expr((3,), 1) if fresh and self.rng.random() < 0.25 else "np.arange(3.0)"
        self.note_assignment(e)
        form = self.rng.choice(["put", "ufunc", "out", "copyto"])
        if form == "put":
            self.emit(f"np.put_along_axis({target}, np.array([2, 0, 1]), {e}, axis=0)")
        elif form == "ufunc":
            self.emit(f"np.tanh({e}, {target})")
        elif form == "out":
            self.emit(f"np.multiply({e}, 0.5, out={target})")
        else:
            self.emit(f"np.copyto({target}, {e})")
        if fresh:
            self.new_var((3,), f"{target} * 1.0", "w")

    def sub_block(self, n=None):
        """An indented block in a new scope; it has at least one statement."""
        self.indent += 1
        self.nest += 1
        self.scopes.append({})
        start = len(self.lines)
        self.stmt_budget += 1
        self.block(n or self.rng.choice([1, 1, 2, 3]))
        if len(self.lines) == start:
            self.emit("pass")
        self.scopes.pop()
        self.nest -= 1
        self.indent -= 1

    def accumulator(self):
        """A variable the next block updates: an existing local, or a new one."""
        locals_ = [v for v in self.visible().values() if isinstance(v, Var) and not v.param]
        if locals_ and self.rng.random() < 0.5:
            return self.rng.choice(locals_)
        shape = self.rng.choice(self.shape_pool())
        init = "0.0" if shape == () else self.rng.choice(
            [f"np.zeros({shape if len(shape) > 1 else shape[0]})",
             f"{self.paren(self.expr(shape, 1))} * 1.0"])
        name = self.new_var(shape, init, "acc")
        return self.lookup(name)

    def update(self, acc, using=None):
        """acc = bounded update, mentioning `using` (a loop variable) when given."""
        e = self.expr(acc.shape, 1)
        if using is not None:
            u = using
            if using.shape != acc.shape and acc.shape != () and using.shape != ():
                u = None
            if u is not None:
                if acc.shape == () and using.shape != ():
                    e = f"np.sum({using.name} * {self.paren(e)})" if self.rng.random() < 0.5 \
                        else f"np.sum({using.name}) * {self.paren(e)}"
                else:
                    e = f"{using.name} * {self.paren(e)}"
            else:
                e = f"np.sum({using.name}) * {self.paren(e)}"
        form = self.rng.choice(["acc + 0.3 * np.tanh(E)", "0.5 * acc + 0.5 * np.tanh(E)",
                                "acc += 0.3 * np.tanh(E)"])
        if form.startswith("acc +="):
            if acc.shape == () or acc.owned:
                self.emit(f"{acc.name} += 0.3 * np.tanh({e})")
                return
            form = "acc + 0.3 * np.tanh(E)"
        value = form.replace("acc", acc.name).replace("E", e, 1)
        self.note_assignment(value)
        self.emit(f"{acc.name} = {value}")

    def loop_body(self, acc, loop_var=None, extra=()):
        self.indent += 1
        self.nest += 1
        self.loop_depth += 1
        self.scopes.append({})
        for v in extra:
            self.declare(v)
        stmts = self.rng.choice([0, 1, 1, 2])
        pos = self.rng.randrange(stmts + 1)
        self.stmt_budget += 1
        for k in range(stmts + 1):
            if k == pos:
                self.update(acc, loop_var)
            elif self.stmt_budget > 0:
                self.stmt_budget -= 1
                self.statement()
        self.scopes.pop()
        self.loop_depth -= 1
        self.nest -= 1
        self.indent -= 1

    def s_if(self):
        acc = self.accumulator()
        if self.on("flag_assign") and self.rng.random() < 0.3:
            # The test computed into a name first: a chained comparison or and/or of
            # comparisons is a flag (no gradient) even when its operands carry one.
            flag, s = self.fresh("flag"), self.fresh("s")
            self.emit(f"{s} = {self.scalar_for_cond()}")
            lo, hi = sorted((self.thr(), self.thr()), key=float)
            self.emit(self.rng.choice([f"{flag} = {lo} < {s} <= {hi}",
                                       f"{flag} = {s} > {lo} and not {s} > {hi}"]))
            self.emit(f"if {flag}:")
        else:
            self.emit(f"if {self.cond()}:")
        self.if_body(acc)
        if self.rng.random() < 0.3 and self.on("if"):
            self.emit(f"elif {self.cond()}:")
            self.if_body(acc)
        if self.rng.random() < 0.6:
            self.emit("else:")
            self.if_body(acc)

    def if_body(self, acc):
        self.indent += 1
        self.nest += 1
        self.scopes.append({})
        self.stmt_budget += 1
        self.update(acc)
        self.block(self.rng.choice([0, 0, 1, 2]))
        self.scopes.pop()
        self.nest -= 1
        self.indent -= 1

    def s_static_if(self):
        """A test known before the code runs (a module attribute there or not): the
        branch taken updates the accumulator; the other calls a function NumPy lacks."""
        acc = self.accumulator()
        present = self.rng.random() < 0.5
        name = self.rng.choice(["tanh", "trapezoid"]) if present else \
            self.rng.choice(["trapz", "no_such_function"])
        test = f"hasattr(np, {name!r})"
        test = test if self.rng.random() < 0.5 else f"not {test}"
        runs_body = present != test.startswith("not")
        missing = f"{acc.name} = np.no_such_function({acc.name})"
        if self.rng.random() < 0.3:   # as a conditional expression
            e = self.expr(acc.shape, 1)
            taken, dropped = f"0.3 * np.tanh({e})", "np.no_such_function(0.3)"
            value = f"{acc.name} + ({taken if runs_body else dropped} if {test} else " \
                    f"{dropped if runs_body else taken})"
            self.note_assignment(value)
            self.emit(f"{acc.name} = {value}")
            return
        self.emit(f"if {test}:")
        if runs_body:
            self.if_body(acc)
        else:
            self.emit("    " + missing)
        self.emit("else:")
        if runs_body:
            self.emit("    " + missing)
        else:
            self.if_body(acc)

    def s_errstate(self):
        """A block run under np.errstate (values unchanged: the block is differentiated
        as written), updating an accumulator."""
        acc = self.accumulator()
        manager = self.rng.choice(['np.errstate(divide="ignore", invalid="ignore")',
                                   'np.errstate(all="ignore")',
                                   'np.errstate(over="ignore"), np.errstate(under="ignore")'])
        self.emit(f"with {manager}:")
        self.if_body(acc)

    def s_walrus(self):
        acc = self.accumulator()
        w = self.fresh("w")
        self.emit(f"if ({w} := {self.scalar_for_cond()}) > {self.thr()}:")
        wv = Var(w, (), False)
        self.indent += 1
        self.scopes.append({})
        self.declare(wv)
        self.update(acc, wv)
        self.scopes.pop()
        self.indent -= 1
        self.declare(wv)

    def s_for_range(self):
        acc = self.accumulator()
        i = self.fresh("i")
        n = self.rng.choice([2, 3, 3, 4])
        enclosing = [(name, bound) for name, bound in self.ints
                     if bound >= 2 and name not in self.counters]
        if enclosing and self.rng.random() < 0.4:
            # the variable of a loop around this one, iterated again (`for i in ...:
            # for i in ...:`): the rest of the outer body reads the inner loop's last
            # value, which stays below the outer bound
            i, bound = self.rng.choice(enclosing)
            n = min(n, bound)
        elif not any(name == "_" for name, _ in self.ints) and self.rng.random() < 0.1:
            i = "_"   # the throwaway name, read as an index like any other
        start = self.rng.choice(["", "", "1, "]) if n > 2 else ""
        self.emit(f"for {i} in range({start}{n}):")
        if i != "_" and (i, n) not in enclosing and self.rng.random() < 0.08:
            # a loop run for its variable alone, read after it (once optimised away
            # with its body: the variable read None)
            self.indent += 1
            self.emit("pass")
            self.indent -= 1
            self.emit(f"{acc.name} = {acc.name} * (1.0 + 0.1 * {i})")
            return
        if i != "_" and (i, n) not in enclosing and self.rng.random() < 0.25:
            # the body rebinds the loop's variable first (`i = 2 - i`): the adjoint
            # once iterated `i` over its range again, and read it for the rebound one
            self.indent += 1
            self.emit(f"{i} = " + self.rng.choice([f"{n - 1} - {i}", f"({i} + 1) % {n}"]))
            self.indent -= 1
        self.ints.append((i, n))
        self.loop_body(acc)
        self.ints.pop()
        self.loop_else(acc)

    def loop_else(self, acc):
        if self.on("loop_else") and self.rng.random() < 0.3:
            self.emit("else:")
            self.if_body(acc)

    def s_for_list_literal(self):
        acc = self.accumulator()
        shape = self.rng.choice(self.shape_pool())
        items = [self.expr(shape, 1) for _ in range(self.rng.choice([2, 3]))]
        t = self.fresh("t")
        literal = f"[{', '.join(items)}]"
        self.note_assignment(literal)
        self.emit(f"for {t} in {literal}:")
        self.loop_body(acc, Var(t, shape, False), [Var(t, shape, False)])

    def s_for_list_var(self):
        L = self.rng.choice(self.lists())
        self.for_list_var(L)
        if L.mutable and L.elems and not self.loop_depth and self.rng.random() < 0.25:
            # The list grows after a loop walked it: the loop's adjoint reads the items
            # it walked, not the list as it is now (tests/test_walked_lists.py).
            shape = L.elems[-1]
            e = self.expr(shape, 1)
            self.note_assignment(e)
            self.emit(f"{L.name}.append({e})")
            L.elems.append(shape)

    def for_list_var(self, L):
        Ls = self.lists()
        acc = self.accumulator()
        homogeneous = len(set(L.elems)) == 1 and len(L.elems) > 0
        forms = ["plain", "enumerate"] + (["reversed"] if homogeneous else [])
        others = [M for M in Ls if M is not L and len(set(M.elems)) == 1 and M.elems]
        if homogeneous:
            forms.append("zip")
        form = self.rng.choice(forms)
        if not homogeneous:
            # items of different shapes: use them through a scalar
            t = self.fresh("t")
            self.emit(f"for {t} in {L.name}:")
            self.loop_body(acc, None, [])
            return
        shape = L.elems[0]
        t = self.fresh("t")
        tv = Var(t, shape, False)
        if form == "plain":
            self.emit(f"for {t} in {L.name}:")
            self.loop_body(acc, tv, [tv])
        elif form == "reversed":
            self.emit(f"for {t} in reversed({L.name}):")
            self.loop_body(acc, tv, [tv])
        elif form == "enumerate":
            i = self.fresh("i")
            self.emit(f"for {i}, {t} in enumerate({L.name}):")
            self.ints.append((i, len(L.elems)))
            self.loop_body(acc, tv, [tv])
            self.ints.pop()
        else:
            u = self.fresh("u")
            if others:
                M = self.rng.choice(others)
                other, ushape = M.name, M.elems[0]
            else:
                ushape = self.rng.choice(self.shape_pool())
                items = [self.expr(ushape, 1) for _ in range(len(L.elems))]
                other = f"[{', '.join(items)}]"
                self.note_assignment(other)
            uv = Var(u, ushape, False)
            self.emit(f"for {t}, {u} in zip({L.name}, {other}):")
            self.loop_body(acc, tv if self.rng.random() < 0.5 else uv, [tv, uv])

    def s_for_array(self):
        vs = [v for v in self.visible().values() if isinstance(v, Var) and v.shape != ()]
        if not vs:
            return self.s_assign()
        v = self.rng.choice(vs)
        acc = self.accumulator()
        r = self.fresh("r")
        rv = Var(r, v.shape[1:], False)
        walk = self.rng.random()
        if walk < 0.2:     # an iterator without len(): np.ndindex over the first axis
            i = self.fresh("idx")
            self.emit(f"for {i} in np.ndindex(*{v.name}.shape[:1]):")
            self.indent += 1
            self.emit(f"{r} = {v.name}[{i}]")
            self.indent -= 1
        elif walk < 0.3:   # a generator expression walked by the loop
            self.emit(f"for {r} in (row for row in {v.name}):")
        elif walk < 0.4:   # enumerate: the adjoint reads the rows again by number
            self.emit(f"for {self.fresh('k')}, {r} in enumerate({v.name}):")
        elif walk < 0.5:   # zip of the rows with a reversed copy's
            r2 = self.fresh("r")
            self.emit(f"for {r}, {r2} in zip({v.name}, {v.name}[::-1] * 0.5):")
            self.loop_body(acc, rv, [rv, Var(r2, v.shape[1:], False)])
            return
        else:
            self.emit(f"for {r} in {v.name}:")
        self.loop_body(acc, rv, [rv])

    def s_list_build(self):
        n = self.rng.choice([2, 3])
        if self.rng.random() < 0.6:
            shape = self.rng.choice(self.shape_pool())
            shapes = [shape] * n
        else:
            shapes = [self.rng.choice(self.shape_pool()) for _ in range(n)]
        items = [self.expr(s, 1) for s in shapes]
        name = self.fresh("L" if self.rng.random() < 0.6 else "P")
        mutable = name.startswith("L")
        literal = f"[{', '.join(items)}]" if mutable else f"({', '.join(items)})"
        self.note_assignment(literal)
        self.emit(f"{name} = {literal}")
        self.declare(ListVar(name, shapes, mutable, len(self.scopes)))

    def s_nested_list(self):
        """A list of pairs, iterated with unpacking (the layers of a small network)."""
        s1 = self.rng.choice(self.shape_pool())
        s2 = self.rng.choice([s1, ()])
        pairs = [f"({self.expr(s1, 1)}, {self.expr(s2, 1)})"
                 for _ in range(self.rng.choice([2, 3]))]
        literal = f"[{', '.join(pairs)}]"
        self.note_assignment(literal)
        if self.rng.random() < 0.5:
            name = self.fresh("PL")
            self.emit(f"{name} = {literal}")
            literal = name
        acc = self.accumulator()
        a, b = self.fresh("a"), self.fresh("b")
        av, bv = Var(a, s1, False), Var(b, s2, False)
        self.emit(f"for {a}, {b} in {literal}:")
        self.loop_body(acc, self.rng.choice([av, bv]), [av, bv])

    def s_list_append(self):
        shape = self.rng.choice(self.shape_pool())
        name = self.fresh("L")

        def item(i):
            e = self.expr(shape, 1)
            if i is not None and self.rng.random() < 0.5:
                e = f"{self.paren(e)} * (1.0 + 0.5 * {i})"
            self.note_assignment(e)
            return e
        n = self.appends(name, item)
        self.declare(ListVar(name, [shape] * n, True, len(self.scopes)))

    def appends(self, name, item) -> int:
        """`name = []` and its appends: in a loop over range(2 or 3), whose index
        item(i) may read, or one or two in a row (item(None)). Returns how many."""
        self.emit(f"{name} = []")
        if self.rng.random() < 0.6:
            i = self.fresh("i")
            n = self.rng.choice([2, 3])
            self.emit(f"for {i} in range({n}):")
            self.indent += 1
            self.ints.append((i, n))
            self.scopes.append({})
            self.emit(self.append_to(name, item(i)))
            self.scopes.pop()
            self.ints.pop()
            self.indent -= 1
        else:
            n = self.rng.choice([1, 2])
            for _ in range(n):
                self.emit(self.append_to(name, item(None)))
        return n

    def append_to(self, name, value) -> str:
        """`name.append(value)`, or a call of the module's helper that appends it
        (push_to: inlined at the call, the list being the caller's)."""
        if self.on("helper_append") and self.rng.random() < 0.5:
            self.used["helper_append"] += 1
            c = f", {self.const()}" if self.rng.random() < 0.5 else ""
            return f"push_to({name}, {value}{c})"
        return f"{name}.append({value})"

    def s_fused_softmax(self):
        """Softmax, log-softmax or logsumexp written out with the maximum subtracted
        (recognised as one call: normalize/fused.py), now and then in a form the
        recognition must leave alone (the shifted value read again)."""
        shape = self.rng.choice([(2, 3), (3,), (4,)])
        v = self.fresh("sm")
        axis = self.rng.choice([-1, len(shape) - 1] if len(shape) == 2 else [0, -1])
        ax = f"axis={axis}, keepdims=True"
        self.emit(f"{v} = {self.expr(shape, 1)}")
        form = self.rng.choice(["log_softmax", "softmax", "logsumexp", "reread"])
        if form in ("log_softmax", "reread"):
            self.emit(f"{v} = {v} - np.max({v}, {ax})")
            self.emit(f"{v}_l = {v} - np.log(np.sum(np.exp({v}), {ax}))")
            out = f"{v}_l * 0.5" + (f" + {v} * 0.1" if form == "reread" else "")
        elif form == "softmax":
            self.emit(f"{v} = {v} - np.max({v}, {ax})")
            self.emit(f"{v}_p = np.exp({v})")
            self.emit(f"{v}_p = {v}_p / np.sum({v}_p, {ax})")
            out = f"{v}_p"
        else:
            self.emit(f"{v}_m = np.max({v}, {ax})")
            self.emit(f"{v}_l = {v}_m + np.log(np.sum(np.exp({v} - {v}_m), {ax}))")
            out = f"{v}_l"
        o = self.fresh("sm")
        self.emit(f"{o} = np.tanh({out})")
        self.declare(Var(o, shape, True))

    def s_helper_result_write(self):
        """An in-place write into what a helper returned (compiled where the helper is
        proven to return a new array, compiler/returns.py; refused where its result
        may share memory with its arguments)."""
        h = self.rng.choice([h for h in self.helpers if h.kind == "plain" and h.ret != ()])
        v = self.fresh("hr")
        self.emit(f"{v} = {h.name}({self.call_args(h, 1)})")
        form = self.rng.choice(["mask", "scale", "item"])
        if form == "mask":
            self.emit(f"{v}[{v} < 0] = 0.0")
        elif form == "scale":
            self.emit(f"{v} *= {self.const()}")
        else:
            index = ", ".join("0" for _ in h.ret)
            self.emit(f"{v}[{index}] = {self.expr((), 1)}")
        self.declare(Var(v, h.ret, True))

    def s_fused_sigmoid(self):
        """The logistic sigmoid written out (recognised as one call: normalize/fused.py):
        both forms, either order in the sums and products, 1 or 1.0, on arrays or a
        number; now and then in a form the recognition must leave alone (an
        intermediate read again, another constant)."""
        shape = self.rng.choice([(2, 3), (3,), (4,), ()])
        v = self.fresh("sg")
        self.emit(f"{v} = {self.expr(shape, 1)}")
        one = self.rng.choice(["1", "1.0"])
        form = self.rng.choice(["exp", "exp_swapped", "tanh", "tanh_swapped", "reread",
                                "other"])
        if form == "exp":
            out = f"{one} / ({one} + np.exp(-{v}))"
        elif form == "exp_swapped":
            out = f"{one} / (np.exp(-{v}) + {one})"
        elif form == "tanh":
            out = f"0.5 * (np.tanh(0.5 * {v}) + {one})"
        elif form == "tanh_swapped":
            out = f"({one} + np.tanh({v} * 0.5)) * 0.5"
        elif form == "reread":
            self.emit(f"{v}_t = np.tanh(0.5 * {v})")
            out = f"0.5 * ({v}_t + {one}) + 0.25 * {v}_t"
        else:
            out = f"2.0 / ({one} + np.exp(-{v}))"
        o = self.fresh("sg")
        self.emit(f"{o} = {out}")
        self.declare(Var(o, shape, True))

    def s_tuple_unpack(self):
        Ls = [L for L in self.lists() if len(L.elems) in (2, 3)]
        if Ls and self.rng.random() < 0.7:
            L = self.rng.choice(Ls)
            if self.rng.random() < 0.3:   # a starred target: the items after the first
                first, rest, last = self.fresh("e"), self.fresh("rest"), self.fresh("e")
                self.emit(f"{first}, *{rest} = {L.name}")
                self.emit(f"{last} = {rest}[-1]")
                self.declare(Var(first, L.elems[0], False))
                self.declare(Var(last, L.elems[-1], False))
                return
            names = [self.fresh("e") for _ in L.elems]
            self.emit(f"{', '.join(names)} = {L.name}")
            for nm, s in zip(names, L.elems):
                self.declare(Var(nm, s, False))
            return
        if self.rng.random() < 0.3:   # the rows of one array a call returns
            shape = self.rng.choice([(3,), (2, 3)])
            call = self.rng.choice([f"np.tanh({self.expr(shape, 1)})",
                                    f"np.exp(0.5 * np.tanh({self.expr(shape, 1)}))",
                                    f"{self.paren(self.expr(shape, 1))}.copy()"])
            if self.rng.random() < 0.3:   # *init, last = rows
                init, last, first = self.fresh("init"), self.fresh("e"), self.fresh("e")
                self.emit(f"*{init}, {last} = {call}")
                self.emit(f"{first} = {init}[0]")
                for nm in (last, first):
                    self.declare(Var(nm, shape[1:], False))
                return
            names = [self.fresh("e") for _ in range(shape[0])]
            self.emit(f"{', '.join(names)} = {call}")
            for nm in names:
                self.declare(Var(nm, shape[1:], False))
            return
        shapes = [self.rng.choice(self.shape_pool()) for _ in range(2)]
        items = [self.expr(s, 1) for s in shapes]
        names = [self.fresh("e") for _ in shapes]
        value = ", ".join(items)
        self.note_assignment(f"({value})")
        self.emit(f"{', '.join(names)} = {value}")
        for nm, s, it in zip(names, shapes, items):
            self.declare(Var(nm, s, _fresh_value(ast.parse(it, mode="eval").body)))

    def s_while(self):
        acc = self.accumulator()
        k = self.fresh("k")
        limit = self.rng.choice([2, 3, 4])
        form = self.rng.choice(["count", "data_and", "data_break", "walrus_count"])
        if form == "walrus_count":
            # the condition assigns the counter on every trip (once run only before
            # the loop, which then never ended); the body reads it as an index
            self.emit(f"{k} = {limit}")
            self.emit(f"while ({k} := {k} - 1) >= 0:")
            self.ints.append((k, limit))
            self.counters.add(k)   # (an inner `for k in range(3)` would loop forever)
            self.loop_body(acc)
            self.counters.discard(k)
            self.ints.pop()
            self.loop_else(acc)
            return
        self.emit(f"{k} = 0")
        if form == "count":
            self.emit(f"while {k} < {limit}:")
        elif form == "data_and":
            self.emit(f"while {k} < {limit} and {self.cond()}:")
        else:
            self.emit(f"while {self.cond()}:")
        self.indent += 1
        self.emit(f"{k} += 1")
        if form == "data_break":
            self.emit(f"if {k} > {limit}:")
            self.emit("    break")
        self.indent -= 1
        self.loop_body(acc)
        self.loop_else(acc)

    def s_early_return(self):
        self.emit(f"if {self.cond()}:")
        self.indent += 1
        self.emit(f"return {self.return_value(1)}")
        self.indent -= 1

    def s_loop_exit(self, kind):
        self.emit(f"if {self.cond()}:")
        self.indent += 1
        if kind == "return":
            self.emit(f"return {self.return_value(1)}")
        else:
            self.emit(kind)
        self.indent -= 1

    def return_value(self, d=0):
        ret = self.ret
        if isinstance(ret, tuple) and ret and isinstance(ret[0], tuple):
            return ", ".join(self.expr(s, d) for s in ret)
        if isinstance(ret, list):
            return f"[{', '.join(self.expr(s, d) for s in ret)}]"
        if isinstance(ret, dict):
            return "{" + ", ".join(f'"{k}": {self.expr(s, d)}' for k, s in ret.items()) + "}"
        return self.expr(ret, d)

    # ---- structures ---------------------------------------------------------------------
    def new_record(self, kind, shapes, scale=None):
        e1, e2 = self.expr(shapes[0], 1), self.expr(shapes[1], 1)
        if scale is not None and self.rng.random() < 0.5:
            e1 = f"{self.paren(e1)} * (1.0 + 0.5 * {scale})"
        text = self.record(kind, e1, e2)
        self.note_assignment(text)
        return text

    def s_struct_append(self):
        kind = self.record_kind()
        shapes = self.pair_shapes(self.rng.choice(self.shape_pool()))
        name = self.fresh("L")
        n = self.appends(name, lambda i: self.new_record(kind, shapes, i))
        self.declare(StructList(name, kind, shapes, n, True))

    def record_kind(self):
        return self.choose([(None, 2.0, lambda: "tuple"), (None, 1.0, lambda: "list"),
                            (None, 1.0, lambda: "dict"),
                            ("namedtuple", 2.5, lambda: "named")])

    def record_vars(self, S, stem=None):
        """Loop target and the variables of one record of S: ('a, b', [Var a, Var b])."""
        if S.kind == "named" and self.rng.random() < 0.6:
            r = self.fresh("r")
            return r, [View(f"{r}.W", S.shapes[0]), View(f"{r}.b", S.shapes[1])]
        if S.kind == "dict":
            r = self.fresh("r")
            get = self.choose([("dict_get", 0.4, lambda: True), (None, 1.0, lambda: False)])
            return r, [View(f'{r}.get("a")' if get else f'{r}["a"]', S.shapes[0]),
                       View(f'{r}["b"]', S.shapes[1])]
        a, b = self.fresh("a"), self.fresh("b")
        return f"{a}, {b}", [Var(a, S.shapes[0], False), Var(b, S.shapes[1], False)]

    def s_struct_read(self, S=None):
        S = S or self.rng.choice(self.structs())
        forms = ["loop", "loop", "enumerate"] + (["unpack"] if S.n else [])
        form = self.rng.choice(forms)
        target, vs = self.record_vars(S)
        if form == "unpack":
            k = self.index_for(S.n)
            self.emit(f"{target} = {S.name}[{k}]")
            for v in vs:
                self.declare(v)
            return
        acc = self.accumulator()
        if form == "enumerate" and S.n:
            i = self.fresh("i")
            self.emit(f"for {i}, {'(' + target + ')' if ',' in target else target} in "
                      f"enumerate({S.name}):")
            self.ints.append((i, S.n))
            self.loop_body(acc, self.rng.choice(vs), vs)
            self.ints.pop()
        else:
            self.emit(f"for {target} in {S.name}:")
            self.loop_body(acc, self.rng.choice(vs), vs)

    def s_extend(self):
        Ls = [L for L in self.lists() if L.mutable]
        Ss = [S for S in self.structs() if S.mutable]
        if Ss and (not Ls or self.rng.random() < 0.4):
            S = self.rng.choice(Ss)
            same = [T for T in self.structs() if T is not S and T.kind == S.kind and
                    T.shapes == S.shapes]
            if same and self.rng.random() < 0.5:
                T = self.rng.choice(same)
                self.emit(f"{S.name}.extend({T.name})")
                S.n = None if S.n is None or T.n is None else S.n + T.n
                return
            k = self.rng.choice([1, 2])
            recs = ", ".join(self.new_record(S.kind, S.shapes) for _ in range(k))
            self.emit(f"{S.name}.extend([{recs}])")
            S.n = None if S.n is None else S.n + k
            return
        if not Ls:
            shape = self.rng.choice(self.shape_pool())
            name = self.fresh("L")
            e = self.expr(shape, 1)
            self.note_assignment(e)
            self.emit(f"{name} = [{e}]")
            L = ListVar(name, [shape], True, len(self.scopes))
            self.declare(L)
            Ls = [L]
        L = self.rng.choice(Ls)
        es = self.elem_shape(L)
        others = [M for M in self.lists() if M is not L and (M.elems or
                                                               getattr(M, "hom", None))]
        if es is not None:
            others = [M for M in others if self.elem_shape(M) == es]
        if others and self.rng.random() < 0.5:
            M = self.rng.choice(others)
            self.emit(f"{L.name}.extend({M.name})")
            if L.elems and M.elems:
                L.elems += M.elems
            else:
                L.elems = []
                L.hom = es
            return
        shapes = [es if es is not None else self.rng.choice(self.shape_pool())
                  for _ in range(self.rng.choice([1, 2]))]
        items = [self.expr(sh, 1) for sh in shapes]
        literal = f"[{', '.join(items)}]"
        self.note_assignment(literal)
        self.emit(f"{L.name}.extend({literal})")
        if L.elems:
            L.elems += shapes

    def s_dict(self):
        items = self.dict_spec(self.shape_pool())
        name = self.fresh("d")
        values = [self.expr(sh, 1) for sh in items.values()]
        if self.choose([("dict_zip", 0.3, lambda: True), (None, 1.0, lambda: False)]):
            literal = f"dict(zip({list(items)!r}, [{', '.join(values)}]))"
        else:
            literal = "{" + ", ".join(f'"{k}": {v}' for k, v in zip(items, values)) + "}"
        self.note_assignment(literal)
        self.emit(f"{name} = {literal}")
        self.declare(DictVar(name, items, True))

    def s_dict_counter(self):
        """A dict holding an array beside numbers, updated with `+=` and `*=`
        (`st = {"h": x, "n": 0}; st["n"] += 1`): the array may be a parameter's, and
        the update replaces the number (once refused, for the array beside it)."""
        shape = self.rng.choice(self.shape_pool())
        e = self.expr(shape, 0)
        self.note_assignment(e)
        st = self.fresh("st")
        self.emit(f'{st} = {{"h": {e}, "n": 0, "s": 0.5}}')
        self.emit(f'{st}["n"] += 1')
        self.emit(f'{st}["s"] *= 1.5')
        self.new_var(shape, f'{st}["h"] * ({st}["n"] + {st}["s"])')

    def s_number_keys(self):
        """A dict with number keys, walked by a loop whose body computes with the key
        (`for k in nk: acc = acc + k * ...`), built by dict(zip(...)) or a literal.
        (Walked where the compiler does not see it built, a helper's parameter, the
        keys once handed their cotangents back to the dict as a list: that case is
        tests/test_dict_iteration.py's, the generator writing no such helper.)"""
        acc = self.accumulator()
        shape = self.rng.choice(self.shape_pool())
        values = [self.expr(shape, 1) for _ in range(2)]
        for v in values:
            self.note_assignment(v)
        nk = self.fresh("nk")
        if self.rng.random() < 0.5:
            self.emit(f"{nk} = dict(zip([2, 1], [{values[0]}, {values[1]}]))")
        else:
            self.emit(f"{nk} = {{2: {values[0]}, 1: {values[1]}}}")
        k = self.fresh("k")
        self.emit(f"for {k} in {nk}:")
        self.indent += 1
        self.emit(f"{acc.name} = {acc.name} + 0.3 * {k} * np.tanh({nk}[{k}])"
                  if acc.shape == shape else
                  f"{acc.name} = {acc.name} + 0.3 * {k} * np.sum(np.tanh({nk}[{k}]))")
        self.indent -= 1

    def s_dict_write(self):
        D = self.rng.choice([D for D in self.dicts() if D.mutable])
        new = [k for k in DICT_KEYS if k not in D.items]
        if new and self.nest == 0 and self.loop_depth == 0 and self.rng.random() < 0.5:
            key = self.rng.choice(new)
            shape = self.rng.choice(self.shape_pool())
            e = self.expr(shape, 0)
            self.note_assignment(e)
            self.emit(f'{D.name}["{key}"] = {e}')
            D.items[key] = shape
            return
        key = self.rng.choice(list(D.items))
        v = View(f'{D.name}["{key}"]', D.items[key])
        if self.rng.random() < 0.15:
            self.item_update(f'{D.name}["{key}"]', v.shape)
            return
        e = self.loop_update(v) if self.loop_depth else self.expr(v.shape, 0)
        self.note_assignment(e)
        self.emit(f'{D.name}["{key}"] = {e}')

    def item_update(self, item, shape):
        """`L[k] += e` (or -=, *=) of a list's or dict's item: Python updates the item's
        array in place, also where another variable or item holds it (refused then:
        once silently given a new array instead)."""
        e = self.expr(self.rng.choice([shape, ()]), 1)
        self.note_assignment(e)
        op = self.rng.choice(["+=", "-=", "*="])
        self.emit(f"{item} {op} {'0.5 * ' if op == '*=' else ''}"
                  f"{'np.tanh(' + e + ')' if op == '*=' else e}")

    def s_dict_loop(self, D=None):
        D = D or self.rng.choice(self.dicts())
        hom = D.homogeneous()
        form = self.rng.choice(["items", "values", "keys"])
        k, v = self.fresh("k"), self.fresh("v")
        acc = self.accumulator()
        if form in ("items", "values"):
            self.emit(f"for {k}, {v} in {D.name}.items():" if form == "items" else
                      f"for {v} in {D.name}.values():")
            src = v
        else:
            how = self.choose([("dict_literal_loop", 0.3, lambda: "literal"),
                               ("dict_builtin_walk", 1.0, lambda: "builtin"),
                               (None, 1.0, lambda: "plain")])
            if how == "literal":
                literal = ", ".join(f'"{key}": {D.name}["{key}"]' for key in D.items)
                self.emit(f"for {k} in {{{literal}}}:")   # (a literal's keys)
            elif how == "builtin":
                # the keys as enumerate, zip, max and min walk them (once read by
                # position: d[0], a KeyError)
                i = self.fresh("i")
                self.emit(self.rng.choice([f"for {i}, {k} in enumerate({D.name}):",
                                           f"for {k}, {i} in zip({D.name}, range(9)):",
                                           f"for {k} in [max({D.name}), min({D.name})]:"]))
            else:
                self.emit(f"for {k} in {self.keys_of(D.name)}:")
            src = f"{D.name}[{k}]"
        vv = View(src, hom) if hom is not None else View(f"np.sum({src})", ())
        self.loop_body(acc, vv, [vv])

    def s_comprehension(self):
        opts = []
        Ls = [L for L in self.lists() if L.elems or getattr(L, "hom", None)]
        for L in Ls:
            opts.append(lambda L=L: self.comp_list(L))
        for S in self.structs():
            opts.append(lambda S=S: self.comp_struct(S))
        for D in self.dicts():
            opts.append(lambda D=D: self.comp_dict(D))
        if not opts:
            return self.s_assign()
        self.rng.choice(opts)()

    def comp_list(self, L):
        es = self.elem_shape(L)
        n = len(L.elems) if L.elems else None
        out = self.rng.choice([es, es, ()]) if es is not None else None
        t, i = self.fresh("t"), self.fresh("i")
        tv = Var(t, es, False)

        def elt():
            if es is None:
                return self.generic(t) if out is None else self.scalar_of(t)
            return self.expr_with(tv, out)
        form = self.rng.choice(["plain", "index", "data", "nested"])
        name = self.fresh("L")
        if form == "plain":
            text, m = f"[{elt()} for {t} in {L.name}]", n
        elif form == "index" and n:
            cond, m = self.rng.choice([(f"{i} != 1", n - (n > 1)), (f"{i} % 2 == 0",
                                                                    (n + 1) // 2),
                                       (f"{i} > 0", n - 1)])
            self.ints.append((i, n))
            text = f"[{elt()} for {i}, {t} in enumerate({L.name}) if {cond}]"
            self.ints.pop()
        elif form == "nested" and n:
            M = self.rng.choice([M for M in self.lists() if M.elems])
            u = self.fresh("u")
            text = f"[{self.paren(elt())} * np.tanh(np.sum({u})) for {t} in {L.name} " \
                   f"for {u} in {M.name}]"
            m = n * len(M.elems)
        else:
            text, m = f"[{elt()} for {t} in {L.name} if np.sum({t}) > {self.thr()}]", None
        self.note_assignment(text)
        self.emit(f"{name} = {text}")
        if out is None:
            elems = list(L.elems) if m == n and n else []
        else:
            elems = [out] * m if m else []
        V = ListVar(name, elems, True, len(self.scopes))
        if not elems and out is not None:
            V.hom = out
        self.declare(V)

    def comp_struct(self, S):
        target, vs = self.record_vars(S)
        name = self.fresh("L")
        hs = [h for h in self.helpers if h.kind == "struct_return" and
              tuple(s for _, s in h.params) == S.shapes]
        r = self.rng.random()
        if hs and S.kind != "dict" and self.on("helper_relay") and r < 0.3:
            h = self.rng.choice(hs)
            p = self.fresh("p")
            self.used["helper_relay"] += 1
            self.emit(f"{name} = [{h.name}({p}) for {p} in {S.name}]")
            self.declare(StructList(name, "list", tuple(h.ret), S.n, True))
        elif r < 0.65:
            kind = self.rng.choice([self.record_kind(), S.kind])
            e1 = self.expr_with(vs[0], S.shapes[0])
            e2 = self.expr_with(vs[1], S.shapes[1]) if self.rng.random() < 0.6 else vs[1].name
            text = f"[{self.record(kind, e1, e2)} for {target} in {S.name}]"
            self.note_assignment(text)
            self.emit(f"{name} = {text}")
            self.declare(StructList(name, kind, S.shapes, S.n, True))
        else:
            out = self.rng.choice([S.shapes[0], ()])
            e = self.expr_with(vs[0], out)
            e = f"{self.paren(e)} * np.mean(np.tanh({vs[1].name}))"
            text = f"[{e} for {target} in {S.name}]"
            self.note_assignment(text)
            self.emit(f"{name} = {text}")
            V = ListVar(name, [out] * S.n if S.n else [], True, len(self.scopes))
            V.hom = out
            self.declare(V)

    def comp_dict(self, D):
        hom = D.homogeneous()
        k, v = self.fresh("k"), self.fresh("v")
        name = self.fresh("d")
        form = self.rng.choice(["items", "keys"])
        src = v if form == "items" else f"{D.name}[{k}]"
        e = self.expr_with(View(src, hom), hom) if hom is not None and \
            self.rng.random() < 0.6 else self.generic(src)
        if form == "items":
            text = f"{{{k}: {e} for {k}, {v} in {D.name}.items()}}"
        else:
            text = f"{{{k}: {e} for {k} in {self.keys_of(D.name)}}}"
        self.note_assignment(text)
        self.emit(f"{name} = {text}")
        self.declare(DictVar(name, D.items, True))

    def s_item_write(self):
        Ls = [L for L in self.lists() if L.mutable and L.elems]
        Ss = [S for S in self.structs() if S.mutable and S.n]
        if Ss and (not Ls or self.rng.random() < 0.5):
            S = self.rng.choice(Ss)
            k = self.index_for(S.n)
            rec = self.new_record(S.kind, S.shapes)
            self.emit(f"{S.name}[{k}] = {rec}")
            return
        L = self.rng.choice(Ls)
        k = self.rng.randrange(len(L.elems))
        v = View(f"{L.name}[{k}]", L.elems[k])
        if len(L.elems[k]) == 1 and self.rng.random() < 0.25:
            # the item replaced by a view of itself of another shape, then read back
            # through it (its zeroed cotangent has the written item's structure)
            self.emit(f"{L.name}[{k}] = {L.name}[{k}][:, None]")
            v = View(f"{L.name}[{k}][:, 0]", L.elems[k])
        if v.name == f"{L.name}[{k}]" and self.rng.random() < 0.15:
            self.item_update(v.name, v.shape)
            return
        e = self.loop_update(v) if self.loop_depth else self.expr(v.shape, 0)
        self.note_assignment(e)
        self.emit(f"{L.name}[{k}] = {e}")

    def s_list_reorder(self):
        """A local list reversed, or (of numbers) sorted, in place."""
        L = self.rng.choice([L for L in self.lists() if L.mutable and len(L.elems) > 1])
        if all(e == () for e in L.elems) and self.rng.random() < 0.5:
            self.emit(f"{L.name}.sort({self.rng.choice(['reverse=True', 'key=abs', ''])})")
        else:
            self.emit(f"{L.name}.reverse()")
            L.elems = type(L.elems)(reversed(L.elems))

    def s_chained(self):
        shape = self.rng.choice(self.shape_pool())
        e = self.expr(shape, 0)
        self.note_assignment(e)
        a, b = self.fresh("v"), self.fresh("v")
        self.emit(f"{a} = {b} = {e}")
        # the two names are one object: neither may be written into
        self.declare(Var(a, shape, False))
        self.declare(Var(b, shape, False))

    def s_struct_call(self):
        h = self.rng.choice([h for h in self.helpers if h.kind == "struct_return"])
        call = f"{h.name}({self.call_args(h, 1)})"
        self.note_assignment(call)
        if self.rng.random() < 0.5:
            names = [self.fresh("r") for _ in h.ret]
            self.emit(f"{', '.join(names)} = {call}")
            for nm, sh in zip(names, h.ret):
                self.declare(Var(nm, sh, False))
        else:
            name = self.fresh("L")
            self.emit(f"{name} = {call}")
            self.declare(ListVar(name, h.ret, True, len(self.scopes)))

    def s_dict_call(self):
        h = self.rng.choice([h for h in self.helpers if h.kind == "dict_return"])
        call = f"{h.name}({self.call_args(h, 1)})"
        self.note_assignment(call)
        name = self.fresh("d")
        self.emit(f"{name} = {call}")
        self.declare(DictVar(name, h.ret, True))

    def s_sincos(self):
        self.classes.add("SinCos")
        shape = self.rng.choice(self.shape_pool())
        p, q = self.fresh("p"), self.fresh("q")
        self.emit(f"{p}, {q} = SinCos.apply({self.expr(shape, 1)})")
        self.declare(Var(p, shape, False))
        self.declare(Var(q, shape, False))

    def s_multi_call(self):
        h = self.rng.choice([h for h in self.helpers if h.kind == "multi_return"])
        names = [self.fresh("r") for _ in h.ret]
        self.emit(f"{', '.join(names)} = {h.name}({self.call_args(h, 1)})")
        for nm, s in zip(names, h.ret):
            self.declare(Var(nm, s, False))

    def s_list_call(self):
        h = self.rng.choice([h for h in self.helpers if h.kind == "list_return"])
        name = self.fresh("L")
        self.emit(f"{name} = {h.name}({self.call_args(h, 1)})")
        self.declare(ListVar(name, h.ret, True, len(self.scopes)))

    # ---- functions --------------------------------------------------------------------
    def function(self, name, params, ret, n_stmts, kwonly=None, default=None, prelude=()):
        """Write `def name(params): <n_stmts statements> return <ret>`."""
        sig = [p for p, _ in params]
        if default is not None:
            sig.append(f"{default}={self.const()}")
        if kwonly is not None:
            sig += ["*", f"{kwonly}={self.const()}"]
        self.lines.append(f"def {name}({', '.join(sig)}):")
        self.indent = 1
        self.scopes = [{}]
        self.ints = []
        self.ret = ret
        for p, s in params:
            if isinstance(s, (StructList, DictVar)):
                self.declare(s)
            elif isinstance(s, list):  # a nested structure: the parts that are read
                for part in s:
                    self.declare(part)
            else:
                self.declare(Var(p, s, True, param=True))
        for extra in (default, kwonly):
            if extra is not None:
                self.declare(Var(extra, (), False, param=False))
        if self.on("local_import") and self.rng.random() < 0.3:
            # Imported inside the function (Python imports on every call; the names
            # are locals bound to the modules the body then reads).
            self.emit(self.rng.choice(["import numpy as np", "import math",
                                       "import numpy as np, math",
                                       "from numpy import linalg",
                                       "from math import pi as _pi"]))
        for line in prelude:
            self.emit(line[0])
            if line[1] is not None:
                self.declare(line[1])
        self.stmt_budget = n_stmts
        for _, s in params:
            # a structured argument is read, most often by a loop over it
            if isinstance(s, StructList) and self.rng.random() < 0.7:
                self.s_struct_read(s)
            elif isinstance(s, DictVar) and self.rng.random() < 0.5:
                self.s_dict_loop(s)
            elif isinstance(s, list) and self.rng.random() < 0.8:
                self.s_struct_read(s[0])
        self.block(n_stmts)
        self.final_return()
        self.lines.append("")
        self.lines.append("")

    def final_return(self):
        if self.ret != ():
            self.emit_final(f"return {self.return_value(0)}")
            return
        terms = [self.expr((), 0)]
        # every value computed reaches the result (through a bounded function)
        cands = [v for v in self.visible().values()
                 if isinstance(v, (Var, ListVar, StructList, DictVar))
                 and not (isinstance(v, Var) and v.param)]
        self.rng.shuffle(cands)
        for v in cands[:3]:
            if isinstance(v, StructList):
                if v.n:
                    terms.append(f"{self.const()} * np.sum(np.tanh("
                                 f"{v.item(0, self.rng.randrange(2))}))")
            elif isinstance(v, DictVar):
                key = self.rng.choice(list(v.items))
                terms.append(f'{self.const()} * np.sum(np.tanh({v.name}["{key}"]))')
            elif isinstance(v, ListVar):
                if v.elems:
                    terms.append(f"{self.const()} * np.sum(np.tanh({v.name}[0]))")
            else:
                terms.append(f"{self.const()} * np.sum(np.tanh({v.name}))")
        terms += getattr(self, "force", [])
        self.force = []
        self.emit_final(f"return {' + '.join(terms)}")

    def emit_final(self, statement):
        """The function's last return, at times inside a loop with nothing after it
        (the function then falls off its end on no path Python takes: the implicit
        `return None` once overwrote every path's result)."""
        if self.rng.random() >= min(1.0, self.w.get("returns_in_loop", 0.0)):
            self.emit(statement)
            return
        self.used["returns_in_loop"] += 1
        self.emit(self.rng.choice(["for _ in range(2):", "while True:"]))
        self.indent += 1
        self.emit(statement)
        self.indent -= 1

    def helper(self, k):
        name = f"h{k}"
        kinds = [("plain", 3.0), ("tuple_param_helper", 1.0), ("multi_return_helper", 1.0),
                 ("list_param_helper", 1.0), ("list_return_helper", 1.0),
                 ("struct_return_helper", 1.0), ("dict_return_helper", 1.0),
                 ("pairs_param_helper", 1.0), ("dict_param_helper", 1.0)]
        # a helper of the kind of one defined before, with its shapes, calls that one
        prev = [g for g in self.helpers if g.kind in ("pairs_param", "dict_param",
                                                        "struct_return")]
        relay = None
        if prev and self.on("helper_relay") and self.rng.random() < 0.6:
            relay = self.rng.choice(prev)
            kind = relay.kind
            self.used["helper_relay"] += 1
            self.used[kind + "_helper"] += 1
        else:
            kind = self.choose([(f if f != "plain" else None, w, lambda f=f: f)
                                for f, w in kinds])
            kind = kind.replace("_helper", "")
        default = "k" if self.on("helper_default") and self.rng.random() < 0.5 else None
        kwonly = "scale" if self.on("kwonly_helper") and self.rng.random() < 0.3 else None
        if default:
            self.used["helper_default"] += 1
        if kwonly:
            self.used["kwonly_helper"] += 1
        n_stmts = self.rng.choice([0, 1, 2, 3])
        shape = self.rng.choice(SHAPES)
        if kind == "plain":
            params = [("u", shape)]
            if self.rng.random() < 0.5:
                params.append(("w", self.rng.choice([shape, ()])))
            ret = self.rng.choice([shape, ()])
            h = Helper(name, kind, params, ret, default, kwonly)
            self.function(name, params, ret, n_stmts, kwonly, default)
        elif kind == "tuple_param":
            s2 = self.rng.choice([shape, ()])
            params = [("a", shape), ("b", s2)]
            ret = self.rng.choice([shape, ()])
            h = Helper(name, kind, params, ret, default, kwonly)
            self.lines.append(f"def {name}(p{', ' + default + '=0.5' if default else ''}"
                              f"{', *, ' + kwonly + '=1.0' if kwonly else ''}):")
            self.indent = 1
            self.scopes = [{}]
            self.ints = []
            self.ret = ret
            self.emit("a, b = p")
            self.declare(Var("a", shape, False, param=True))
            self.declare(Var("b", s2, False, param=True))
            for extra in (default, kwonly):
                if extra is not None:
                    self.declare(Var(extra, (), False))
            self.stmt_budget = n_stmts
            self.block(n_stmts)
            self.final_return()
            self.lines += ["", ""]
        elif kind == "multi_return":
            params = [("u", shape), ("w", self.rng.choice([shape, ()]))]
            ret = (shape, self.rng.choice([shape, ()]))
            h = Helper(name, kind, params, ret, default, kwonly)
            self.function(name, params, ret, n_stmts, kwonly, default)
        elif kind == "list_param":
            n = self.rng.choice([2, 3])
            ret = ()
            h = Helper(name, kind, [("ts", shape)], ret, default, kwonly, list_len=n)
            sig = ["ts"] + ([f"{default}=0.5"] if default else []) + \
                  (["*", f"{kwonly}=1.0"] if kwonly else [])
            self.lines.append(f"def {name}({', '.join(sig)}):")
            self.indent = 1
            self.scopes = [{}]
            self.ints = []
            self.ret = ret
            self.declare(ListVar("ts", [shape] * n, False, 1))
            for extra in (default, kwonly):
                if extra is not None:
                    self.declare(Var(extra, (), False))
            self.emit("total = 0.0")
            self.declare(Var("total", (), True))
            t = Var("t", shape, False)
            self.emit("for t in ts:")
            self.loop_body(self.lookup("total"), t, [t])
            self.stmt_budget = n_stmts
            self.block(n_stmts)
            self.final_return()
            self.lines += ["", ""]
        elif kind == "list_return":
            params = [("u", shape)]
            ret = [shape, self.rng.choice(SHAPES)]
            h = Helper(name, kind, params, ret, default, kwonly)
            self.function(name, params, ret, n_stmts, kwonly, default)
        elif kind == "struct_return":
            if relay is not None:
                s1, s2 = (s for _, s in relay.params)
            else:
                s1, s2 = self.pair_shapes() if self.rng.random() < 0.6 else \
                    (shape, self.rng.choice([shape, ()]))
            params = [("W", s1), ("b", s2)]
            ret = [s1, s2] if self.rng.random() < 0.7 else [s1, self.rng.choice(SHAPES)]
            h = Helper(name, kind, params, ret, default, kwonly)
            unpack = "W, b = p"
            if relay is not None and relay.ret == [s1, s2]:
                unpack = f"W, b = {relay.name}(p)"
            self.struct_helper(h, unpack, [Var("W", s1, False, param=True),
                                           Var("b", s2, False, param=True)], n_stmts)
        elif kind == "dict_return":
            params = [("u", shape)]
            if self.rng.random() < 0.5:
                params.append(("w", self.rng.choice([shape, ()])))
            keys = self.rng.sample(DICT_KEYS, self.rng.choice([1, 2, 2, 3]))
            ret = {k: self.rng.choice([shape, shape, self.rng.choice(SHAPES)]) for k in keys}
            h = Helper(name, kind, params, ret, default, kwonly)
            self.function(name, params, ret, n_stmts, kwonly, default)
        elif kind == "pairs_param":
            s1, s2 = (s for _, s in relay.params) if relay else self.pair_shapes()
            h = Helper(name, kind, [("a", s1), ("b", s2)], (), default, kwonly,
                       list_len=self.rng.choice([1, 2, 3]))
            S = StructList("ps", "tuple", (s1, s2), None, False, param=True)
            self.struct_helper(h, None, [S], n_stmts, loop=S, relay=relay)
        else:  # dict_param
            spec = dict(relay.spec) if relay else self.dict_spec([shape, shape] + SHAPES)
            h = Helper(name, kind, [], (), default, kwonly)
            h.spec = spec
            D = DictVar("d", spec, False, param=True)
            self.struct_helper(h, None, [D], n_stmts, loop=D, relay=relay)
        if self.on("checkpoint") and self.rng.random() < 0.3:
            # recomputed in the adjoint (or refused, naming what it cannot recompute)
            self.used["checkpoint"] += 1
            at = next(i for i, line in enumerate(self.lines) if line.startswith(f"def {name}("))
            self.lines.insert(at, "@s2sgrad.checkpoint")
        self.helpers.append(h)

    def struct_helper(self, h, unpack, declared, n_stmts, loop=None, relay=None):
        """def h(p): [unpack]; [a loop over p]; [a call passing p on]; ...; return ..."""
        default, kwonly = h.default, h.kwonly
        pname = "p" if unpack else declared[0].name
        sig = [pname] + ([f"{default}=0.5"] if default else []) + \
              (["*", f"{kwonly}=1.0"] if kwonly else [])
        self.lines.append(f"def {h.name}({', '.join(sig)}):")
        self.indent = 1
        self.scopes = [{}]
        self.ints = []
        self.ret = h.ret
        if unpack:
            self.emit(unpack)
        for v in declared:
            self.declare(v)
        for extra in (default, kwonly):
            if extra is not None:
                self.declare(Var(extra, (), False))
        self.stmt_budget = n_stmts
        if loop is not None:
            self.emit("total = 0.0")
            self.declare(Var("total", (), True))
            if isinstance(loop, StructList):
                self.s_struct_read(loop)
            else:
                self.s_dict_loop(loop)
            # the structure goes on to a helper defined before, as it is or rebuilt
            same = [g for g in self.helpers if g.kind == h.kind and
                    (g.params == h.params if h.kind == "pairs_param" else g.spec == h.spec)]
            if relay is not None or same and self.on("helper_relay") and \
                    self.rng.random() < 0.7:
                g = relay or self.rng.choice(same)
                self.used["helper_relay"] += 1
                if h.kind == "pairs_param":
                    arg = self.rng.choice(["ps", "[(a * 2.0, np.tanh(b)) for a, b in ps]",
                                           "list(reversed(ps))"])
                else:
                    arg = self.rng.choice(["d", "{kk: vv * 0.5 for kk, vv in d.items()}"])
                self.emit(f"total = total + 0.5 * np.tanh({g.name}({arg}))")
            self.force = ["total"]
        self.block(n_stmts)
        self.final_return()
        self.lines += ["", ""]

    def program(self, header):
        n_helpers = 0
        if self.on("helper"):
            n_helpers = self.rng.choice([0, 1, 1, 2, 2])
        body_lines = []
        if n_helpers:
            self.used["helper"] += 1
        k = 0
        while k < n_helpers:
            self.lines = []
            self.helper(k)
            body_lines += self.lines
            k += 1
            if k == n_helpers and n_helpers < 3 and self.on("helper_relay") and \
                    self.helpers[-1].kind in ("pairs_param", "dict_param", "struct_return") \
                    and self.rng.random() < 0.6:
                n_helpers += 1  # one more, which may pass the structure on to this one
        nargs = self.rng.choice([1, 2, 2, 3])
        kinds = [self.rng.choices([k for k, _ in ARG_KINDS], [w for _, w in ARG_KINDS])[0]
                 for _ in range(nargs)]
        names = ["x", "y", "z"][:nargs]
        params = [(n, KIND_SHAPE[k]) for n, k in zip(names, kinds)]
        if self.on("struct_entry") and self.rng.random() < 0.35:
            # one argument is a structure: a list of (W, b) tuples or a dict of arrays
            self.used["struct_entry"] += 1
            pos = self.rng.randrange(nargs)
            names[pos] = "params"
            if self.on("nested_entry") and self.rng.random() < 0.3:
                self.used["nested_entry"] += 1
                shapes = self.pair_shapes()
                n = self.rng.choice([1, 2, 2, 3])
                extra = self.dict_spec(SHAPES)
                extra.pop("layers", None)
                kinds[pos] = ("pnested", n, shapes, tuple(extra.items()))
                views = [View(f'params["{k}"]', sh) for k, sh in extra.items()]
                params[pos] = ("params", [StructList('params["layers"]', "tuple", shapes, n,
                                                     False, param=True)] + views)
            elif self.rng.random() < 0.55:
                shapes = self.pair_shapes()
                n = self.rng.choice([1, 2, 2, 3])
                rkind = self.record_kind() if self.rng.random() < 0.5 else "tuple"
                kinds[pos] = ("plist", n, shapes, rkind)
                params[pos] = ("params", StructList("params", rkind, shapes, n, False,
                                                    param=True))
            else:
                spec = self.dict_spec(SHAPES)
                kinds[pos] = ("pdict", tuple(spec.items()))
                params[pos] = ("params", DictVar("params", spec, False, param=True))
        kwonly = "s" if self.on("kwonly_entry") and self.rng.random() < 0.25 else None
        if kwonly:
            self.used["kwonly_entry"] += 1
        self.lines = []
        self.function("f", params, (), self.rng.choice([2, 3, 4, 5, 6]), kwonly=kwonly)
        body_lines += self.lines
        classes = [CLASSES[c] for c in CLASSES if c in self.classes]
        rest = "import s2sgrad\n\n" + GLOBALS_SRC + "\n\n" + "\n\n".join(classes) + \
            ("\n\n" if classes else "") + "\n".join(body_lines)
        # The star import binds min, max, abs, ... to NumPy's: the code the compiler
        # writes must still read the builtins (a program calling one itself is left out).
        star = self.on("star_numpy") and self.rng.random() < 0.5 and not re.search(
            r"(?<![\w.])(min|max|abs|round|sum|all|any|pow)\(", rest)
        if star:
            self.used["star_numpy"] += 1
        scipy_import = ("from scipy.spatial import distance\n" if "distance." in rest else "") + \
            ("import scipy.linalg\n" if "scipy.linalg." in rest else "")
        src = header + "import collections\nimport functools\nimport math\nimport operator\n\n" + \
            "import numpy as np\n" + scipy_import + \
            ("from numpy import *  # noqa: F401,F403\n" if star else "") + "\n" + rest
        return src.rstrip() + "\n", kinds


def choose_family(seed, index, attempt, weights):
    """Which generator writes this program: "classic" or a fam_* (a random stream of
    its own, so that a classic program is the same whatever the families' weights)."""
    names = ["classic"] + FAMILIES
    ws = [max(0.0, float(weights.get(k, 0.0))) for k in names]
    if sum(ws) <= 0:
        raise SystemExit("every program family is off (see --list-features)")
    rng = random.Random(f"{seed}:{index}:{attempt}:family")
    return rng.choices(names, ws)[0]


def generate(seed, index, attempt, weights):
    rng = random.Random(f"{seed}:{index}:{attempt}")
    family = choose_family(seed, index, attempt, weights)
    header = f"# s2sgrad fuzz program: seed={seed} index={index} attempt={attempt}\n"
    for _ in range(20):
        gen = ProgramGenerator(rng, weights)
        try:
            if family == "classic":
                src, kinds = gen.program(header)
            else:
                src, kinds = gen.family_program(family, header)
        except (GeneratorGiveUp, RecursionError):
            continue
        return src, kinds, sorted(gen.used)
    raise GeneratorGiveUp("generator failed 20 times")


def draw_inputs(kinds, seed, index, attempt, draw):
    rng = np.random.default_rng([abs(hash_int(seed)), index, attempt, draw])
    out = []
    for k in kinds:
        if isinstance(k, tuple) and k[0] == "tree":  # a family's structure (any nesting)
            out.append(fuzz_families.draw_tree(k[1], rng, Layer))
            continue
        if isinstance(k, tuple):  # a structure: its () leaves are Python floats
            def leaf(shape):
                v = rng.uniform(-1.0, 1.0, shape)
                return float(v) if shape == () else v
            if k[0] == "plist":
                make = {"tuple": lambda a, b: (a, b), "list": lambda a, b: [a, b],
                        "dict": lambda a, b: {"a": a, "b": b}, "named": Layer}[k[3]]
                out.append([make(*[leaf(s) for s in k[2]]) for _ in range(k[1])])
            elif k[0] == "pnested":
                tree = {"layers": [tuple(leaf(s) for s in k[2]) for _ in range(k[1])]}
                tree.update({key: leaf(s) for key, s in k[3]})
                out.append(tree)
            else:
                out.append({key: leaf(s) for key, s in k[1]})
            continue
        v = rng.uniform(-1.0, 1.0, KIND_SHAPE[k])
        if k == "float":
            out.append(float(v))
        elif k == "0d":
            out.append(np.array(float(v)))
        else:
            out.append(v)
    return out


def hash_int(seed):
    return seed if isinstance(seed, int) else int.from_bytes(str(seed).encode()[:8], "little")


def _arg_source(a):
    if isinstance(a, tuple) and hasattr(a, "_fields"):
        return f"{type(a).__name__}(" + ", ".join(_arg_source(v) for v in a) + ")"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k!r}: {_arg_source(v)}" for k, v in a.items()) + "}"
    if isinstance(a, tuple):
        return "(" + ", ".join(_arg_source(v) for v in a) + ("," if len(a) == 1 else "") + ")"
    if isinstance(a, list):
        return "[" + ", ".join(_arg_source(v) for v in a) + "]"
    if a is None or isinstance(a, (bool, int)):
        return repr(a)
    return args_source([a])[1:-1]


def args_source(args):
    parts = []
    for a in args:
        if isinstance(a, (list, tuple, dict)):
            parts.append(_arg_source(a))
        elif isinstance(a, float):
            parts.append(repr(a))
        elif np.ndim(a) == 0:
            parts.append(f"np.array({float(a)!r})")
        else:
            flat = ", ".join(repr(float(v)) for v in np.ravel(a))
            parts.append(f"np.array([{flat}]).reshape({a.shape})")
    return "[" + ", ".join(parts) + "]"


# --------------------------------------------------------------------------------------
# Evaluation: one program, one draw of inputs.
# --------------------------------------------------------------------------------------
RTOL, ATOL = 1e-5, 1e-6            # gradient vs finite differences
OPT_RTOL, OPT_ATOL = 1e-8, 1e-10   # optimised vs unoptimised (the same mathematics)
H1, H2 = 1e-6, 1e-5                # the two finite-difference steps


def is_tree(a):
    return isinstance(a, (list, tuple, dict))


def copy_tree(a):
    if isinstance(a, np.ndarray):
        return a.copy()
    if isinstance(a, dict):
        return {k: copy_tree(v) for k, v in a.items()}
    if isinstance(a, tuple) and hasattr(a, "_fields"):
        return type(a)(*[copy_tree(v) for v in a])
    if isinstance(a, (list, tuple)):
        return type(a)(copy_tree(v) for v in a)
    return a


def copies(args):
    return [copy_tree(a) for a in args]


def shape_of(a):
    """np.shape, or for a structure its tree (with its leaves' shapes) as text."""
    if is_tree(a):
        leaves, treedef = s2sgrad.tree_flatten(a)
        return f"{treedef!r} with leaves of shapes {[np.shape(v) for v in leaves]}"
    return np.shape(a)


def close(a, b, rtol=RTOL, atol=ATOL):
    if is_tree(a) or is_tree(b):  # structures: the same tree, leaves close one by one
        la, ta = s2sgrad.tree_flatten(a)
        lb, tb = s2sgrad.tree_flatten(b)
        return ta == tb and all(close(x, y, rtol, atol) for x, y in zip(la, lb))
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not (fa == fb).all() or not (a[~fa] == b[~fb]).all():
        return False
    if not fa.any():
        return True
    scale = max(float(np.max(np.abs(a[fa]))), float(np.max(np.abs(b[fb]))))
    return float(np.max(np.abs(a[fa] - b[fb]))) <= atol + rtol * scale


def finite_difference(fn, args, i, h):
    """Central differences of fn with respect to args[i] (a structure: leaf by leaf)."""
    x = args[i]
    if is_tree(x):
        leaves, treedef = s2sgrad.tree_flatten(x)
        out = []
        for j, leaf in enumerate(leaves):
            def at(v, j=j):
                new = list(leaves)
                new[j] = v
                return copy_tree(s2sgrad.tree_unflatten(treedef, new))
            # int and bool leaves are constants: their gradient is None
            out.append(None if not _float_leaf(leaf) else _fd_leaf(fn, args, i, h, leaf, at))
        return s2sgrad.tree_unflatten(treedef, out)
    return _fd_leaf(fn, args, i, h, x, lambda v: v)


def _float_leaf(leaf):
    return isinstance(leaf, float) or (isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f")


def grad_like(a):
    """The structure a gradient of `a` has: int and bool leaves become None."""
    if not is_tree(a):
        return a
    leaves, treedef = s2sgrad.tree_flatten(a)
    return s2sgrad.tree_unflatten(treedef, [v if _float_leaf(v) or
                                            not isinstance(v, (bool, int, np.integer))
                                            else None for v in leaves])


def _fd_leaf(fn, args, i, h, x, at):
    def value(xi):
        a = copies(args)
        a[i] = at(xi)
        return float(fn(*a))
    if isinstance(x, float):
        return (value(x + h) - value(x - h)) / (2 * h)
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = (value(xp) - value(xm)) / (2 * h)
    return g


def first_line(exc):
    msg = str(exc).strip().splitlines()
    return msg[0] if msg else ""


def refusal_kind(exc):
    """The first line of a refusal without its file:line:col, for the histogram."""
    line = first_line(exc)
    line = re.sub(r"^\S*?:\d+:\d+:\s*", "", line)
    line = re.sub(r"^\S*?:\d+:\s*", "", line)
    line = re.sub(r"^\S+\.py:\s*", "", line)
    if "shares memory" in line:  # which two variables: the program's business
        # unless the first is the list or dict the compiler builds for a comprehension
        line = re.sub(r"^in-place update of '(items|entries)(_\d+)?'",
                      "in-place update of <a comprehension's own list>", line)
        line = re.sub(r"'[A-Za-z_]\w*'", "'...'", line)
    line = re.sub(r"'(v|acc|out|t|r|p|q|e|w|L|P|i|k|u)\d+'", r"'\1N'", line)
    line = re.sub(r"\(line \d+\)", "(line N)", line)
    return f"{type(exc).__name__}: {line}"


def crash_info(exc):
    tb = traceback.extract_tb(exc.__traceback__)
    last = tb[-1] if tb else None
    where = f"{os.path.basename(last.filename)}:{last.lineno} in {last.name}: {last.line}" \
        if last else "?"
    frame = "?"
    for fr in reversed(tb):
        if "s2sgrad" + os.sep in fr.filename or fr.filename.startswith("<s2sgrad"):
            if fr.filename.startswith("<s2sgrad"):
                frame = f"generated code ({fr.name})"
            else:
                rel = fr.filename.split("s2sgrad" + os.sep, 1)[-1].replace(os.sep, ".")
                frame = f"{rel[:-3] if rel.endswith('.py') else rel}.{fr.name}"
            break
    return {"type": type(exc).__name__, "message": first_line(exc)[:300], "where": where,
            "frame": frame}


def classify_exception(exc):
    alarm = _alarm_of(exc)
    if alarm is not None:   # (--check's time limit, not a crash: see check_source)
        raise alarm
    if isinstance(exc, s2sgrad.TransformError):
        return "refused", refusal_kind(exc)
    if isinstance(exc, NotImplementedError) and first_line(exc):
        return "refused", refusal_kind(exc)
    return "crashed", crash_info(exc)


def _alarm_of(exc):
    """check_source's time limit where it went off inside s2sgrad, which reports what it
    did not expect as an InternalError (the TimeoutError its cause): once a program
    out of time beside others was run again alone under load, that read as a crash."""
    while exc is not None:
        if isinstance(exc, TimeoutError) and str(exc) == CHECK_TIMED_OUT:
            return exc
        exc = exc.__cause__
    return None


def _seed_like(out):
    if isinstance(out, np.ndarray):
        return np.ones((), dtype=out.dtype if out.dtype.kind == "f" else np.float64)
    return 1.0


def plain_pair_grad(fn, args, i):
    """The gradient from the unoptimised pair, called as s2sgrad.grad calls the optimised one."""
    params = [p.name for p in __import__("inspect").signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    scalars = ()
    if type(args[i]) is float:
        scalars = tuple(params[j] for j, a in enumerate(args) if type(a) in (float, int))
    extra = {}
    from s2sgrad.arguments import finalize, leaf_positions
    # which arguments are arrays or numbers, as grad says
    extra["leaves"] = leaf_positions(tuple(args))
    pair = compile_function(fn, (i,), optimize_code=False, scalars=scalars, **extra)
    a = copies(args)
    out, residuals = pair.forward(*a)
    g = pair.adjoint(residuals, _seed_like(out))
    if is_tree(args[i]):  # lists for tuples, 0 for what nothing reached: as grad gives it
        g = finalize(g, args[i])
    if isinstance(args[i], float) and np.ndim(g) == 0:
        g = float(g)
    return out, g, a


def fmt(v):
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {fmt(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(fmt(x) for x in v) + "]"
    if isinstance(v, tuple):
        return "(" + ", ".join(fmt(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if v is None:
        return "None"
    return np.array2string(np.asarray(v, dtype=np.float64), precision=7, separator=", ",
                           suppress_small=False, max_line_width=200)


def evaluate(fn, args, param_names, only=None):
    """One draw: a list of per-argument records. `only=(i, labels)` checks argument i with
    those variants alone (the reducer's shortcut)."""
    base = copies(args)
    value = fn(*base)              # the original function; `base` now holds its writes
    records = []
    for i in range(len(args)):
        if only is not None and i != only[0]:
            continue
        rec = {"arg": i, "name": param_names[i], "shape": shape_of(args[i]), "problems": [],
               "status": "pass"}
        records.append(rec)
        variants = {}
        for label in ("optimised", "unoptimised") if only is None else \
                [lab for lab in only[1] if lab != "forward"]:
            if label == "unoptimised" and rec.get("exceptions", {}).get("optimised", ("",))[0] \
                    == "refused":
                continue  # refusals come before the optimiser: the same again, only slower
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if label == "optimised":
                        a = copies(args)
                        out, g = s2sgrad.value_and_grad(fn, wrt=i)(*a)
                    else:
                        out, g, a = plain_pair_grad(fn, args, i)
                variants[label] = (out, g, a)
            except Exception as exc:  # noqa: BLE001 - everything s2sgrad raises is data
                kind, info = classify_exception(exc)
                rec.setdefault("exceptions", {})[label] = (kind, info)
        exc_kinds = [k for k, _ in rec.get("exceptions", {}).values()]
        if "crashed" in exc_kinds:
            rec["status"] = "crashed"
        elif "refused" in exc_kinds:
            rec["status"] = "refused"
        if len(variants) < 2 and "optimised" in variants and "crashed" not in exc_kinds:
            pass  # only the unoptimised pair was refused: judged below on the optimised one
        fd = None
        for label, (out, g, a) in variants.items():
            if not close(out, value, 1e-9, 1e-12):
                rec["problems"].append(f"{label} forward value {fmt(out)} != original "
                                       f"{fmt(value)}")
            if shape_of(g) != shape_of(grad_like(args[i])):
                rec["problems"].append(f"{label} gradient has shape {shape_of(g)}, argument "
                                       f"has {shape_of(grad_like(args[i]))}")
            for j, (aj, bj) in enumerate(zip(a, base)):
                if (isinstance(bj, np.ndarray) or is_tree(bj)) and \
                        not close(aj, bj, 1e-9, 1e-12):
                    rec["problems"].append(f"{label}: argument {j} after the call is "
                                           f"{fmt(aj)}, the original function leaves "
                                           f"{fmt(bj)}")
        if variants:
            fd = finite_difference(fn, args, i, H1)
            rec["fd"] = fd
            bad = {lab: not close(g, fd) for lab, (_, g, _) in variants.items()}
            if any(bad.values()):
                fd2 = finite_difference(fn, args, i, H2)
                if not close(fd, fd2):
                    rec["nonsmooth"] = True
                else:
                    for lab, b in bad.items():
                        if b:
                            rec["problems"].append(f"{lab} gradient disagrees with finite "
                                                   f"differences")
            for lab, (_, g, _) in variants.items():
                rec[lab] = g
            if (only is None or "forward" in only[1]) and not rec.get("nonsmooth"):
                _check_forward_mode(fn, args, i, fd, rec)
            if len(variants) == 2 and not close(variants["optimised"][1],
                                                variants["unoptimised"][1],
                                                OPT_RTOL, OPT_ATOL):
                rec["problems"].append("optimised and unoptimised gradients differ")
            if LIBRARY is not None and "optimised" in variants and not rec.get("nonsmooth"):
                _check_on_library(fn, args, i, variants["optimised"], rec, LIBRARY)
        if rec["problems"]:
            rec["status"] = "wrong"
        elif rec.get("nonsmooth") and rec["status"] == "pass":
            rec["status"] = "nonsmooth"
    return records


# --dask / --strict: every gradient is computed again with the arrays as another
# library's, and must equal the NumPy gradient: Dask arrays (two chunks per axis), or
# the strict stand-in for CuPy's (tests/strict_arrays.py: a helper that makes a NumPy
# array among them fails). A clear refusal (a function Dask lacks, its chunking) is
# counted apart, never as wrong.
@dataclasses.dataclass(frozen=True)
class Library:
    name: str
    convert: Callable[[np.ndarray], Any]   # a float array as the library's
    holds: Callable[[Any], bool]           # a value of the library's
    to_numpy: Callable[[Any], Any]


def _dask_library() -> Library:
    import dask.array as da
    return Library("Dask", lambda a: da.from_array(a.copy(), chunks=tuple(
        max(1, (n + 1) // 2) for n in a.shape)), lambda v: hasattr(v, "dask"),
        lambda v: np.asarray(v.compute()))


def _strict_library() -> Library:
    import strict_arrays
    return Library("strict", strict_arrays.to_strict,
                   lambda v: isinstance(v, strict_arrays.StrictArray), strict_arrays.to_numpy)


LIBRARY: Optional[Library] = None


def _as_library(value, library: Library):
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.ndim:
        return library.convert(value)
    if isinstance(value, list):
        return [_as_library(v, library) for v in value]
    if isinstance(value, tuple):
        items = [_as_library(v, library) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        return {k: _as_library(v, library) for k, v in value.items()}
    return value


def _computed(value, library: Library):
    if library.holds(value):
        return library.to_numpy(value)
    if is_tree(value):
        leaves, tree = s2sgrad.tree_flatten(value)
        return s2sgrad.tree_unflatten(tree, [_computed(v, library) for v in leaves])
    return value


def _check_on_library(fn, args, i, optimised, rec, library: Library):
    out, g, _ = optimised
    dargs = _as_library(copies(args), library)
    if not any(library.holds(a) for a in s2sgrad.tree_leaves(list(dargs))):
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dout, dg = s2sgrad.value_and_grad(fn, wrt=i)(*dargs)
            dout, dg = _computed(dout, library), _computed(dg, library)
    except s2sgrad.TransformError:     # (the NumPy call was not refused)
        rec["problems"].append(f"refused on {library.name} arrays, not on NumPy's")
        return
    except (TypeError, NotImplementedError, ValueError, IndexError, AttributeError) as exc:
        try:   # does the program itself run on the library's arrays?
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _computed(fn(*_as_library(copies(args), library)), library)
        except Exception:  # noqa: BLE001 - the program's own limits, not s2sgrad's
            rec["library"] = "the program itself does not run on these arrays"
            return
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if "s2sgrad" in f.filename and "strict_arrays" not in f.filename]
        where = f" (in {frames[-1].name})" if frames else ""
        rec["library"] = (f"s2sgrad: {type(exc).__name__}: {str(exc).splitlines()[0][:70]}"
                          f"{where}")
        return
    if not close(dout, out, 1e-9, 1e-12):
        rec["problems"].append(f"{library.name} forward value {fmt(dout)} != NumPy's "
                               f"{fmt(out)}")
    elif not close(dg, g, 1e-9, 1e-12):
        rec["problems"].append(f"{library.name} gradient {fmt(dg)} != NumPy's {fmt(g)}")
    else:
        rec["library"] = "same"


def _check_forward_mode(fn, args, i, fd, rec):
    """Forward mode (functional.jvp, the tangent code) along a random direction of
    argument i must give the directional derivative fd . v. A forward-mode refusal
    (a rule without a JVP) is noted, not counted: reverse mode decided the status.
    functional.jvp takes arrays only: programs with a structured argument skip this."""
    if any(is_tree(a) for a in args):
        return
    rng = np.random.default_rng(hash_int((i, rec["name"])) % (2 ** 32))
    a = copies(args)
    v = rng.standard_normal(np.shape(a[i]))
    tangents = [np.zeros_like(x) if isinstance(x, np.ndarray) else 0.0 for x in a]
    tangents[i] = v if isinstance(a[i], np.ndarray) else float(v)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, jv = s2sgrad.functional.jvp(fn, tuple(a), tuple(tangents))
    except Exception as exc:  # noqa: BLE001
        kind, info = classify_exception(exc)
        if kind == "crashed":
            rec.setdefault("exceptions", {})["forward"] = (kind, info)
            rec["status"] = "crashed"
        else:
            rec["forward_refused"] = info
        return
    expected = float(np.sum(np.asarray(fd, dtype=np.float64) * v))
    rec["forward"] = jv
    if not close(jv, expected):
        rec["problems"].append(f"forward mode (jvp) gives {fmt(jv)}, finite differences "
                               f"{fmt(expected)}")


PRIORITY = ["wrong", "crashed", "refused", "nonsmooth", "pass"]


def worst(statuses):
    for s in PRIORITY:
        if s in statuses:
            return s
    return "pass"


# --------------------------------------------------------------------------------------
# One program: generate, load, check plainly, evaluate on up to three draws.
# --------------------------------------------------------------------------------------
MUTATIONS = {
    # rule -> (function, params, template): a gradient rule made 1% wrong on purpose
    "tanh": (np.tanh, "x", {"x": "g * (1.0 - ans * ans) * 1.01"}),
    "sin": (np.sin, "x", {"x": "g * np.cos(x) * 1.01"}),
    "multiply": (np.multiply, "x, y", {"x": "g * y * 1.01", "y": "g * x"}),
    "sum": (np.sum, "a, axis=None, dtype=None, out=None, keepdims=False",
            {"a": "expand_reduced(g, a, axis=axis, keepdims=keepdims) * 1.01"}),
}


def apply_mutation(name):
    """Register the wrong rule in place of the right one, everywhere the right one is used
    (the Python operator `*` shares np.multiply's rule object); or, for a name of
    fuzz_families.PATCHES, make the mechanism a family relies on 1% wrong."""
    if name in PATCHES:
        PATCHES[name]()
        return
    from s2sgrad.rules import registry
    func, params, grads = MUTATIONS[name]
    old = registry.lookup_function(func)
    new = s2sgrad.defvjp(func, params, broadcast=old.broadcast if old else False, **grads)
    for table in (registry.REGISTRY.operators, registry.REGISTRY.methods):
        for key, rule in list(table.items()):
            if rule is old:
                table[key] = new


def load_module(path, modname):
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module


def also_checked(module):
    """Functions a program asks to be checked like f, on the same arguments (FUZZ_ALSO:
    the first derivative whose differences check f's second one)."""
    names = getattr(module, "FUZZ_ALSO", ()) if module is not None else ()
    return [(n, getattr(module, n)) for n in names if callable(getattr(module, n, None))]


def evaluate_all(fn, args, param_names, module=None, only=None):
    """evaluate() of f, then of the functions FUZZ_ALSO names (records named g: x)."""
    records = evaluate(fn, args, param_names, only)
    for name, other in also_checked(module):
        for r in evaluate(other, args, param_names, only):
            r["name"] = f"{name}: {r['name']}"
            records.append(r)
    return records


def plain_ok(fn, args, module=None):
    """The generated program itself must run and give a modest finite scalar, and leave
    the module's arrays alone (a helper writing into a global it was passed would make
    every call see different data: not a program to take derivatives of). With the
    module, the functions FUZZ_ALSO names must, too."""
    if module is not None:
        return all(_plain_ok(g, args, module.__dict__)
                   for g in [fn] + [g for _, g in also_checked(module)])
    return _plain_ok(fn, args, getattr(fn, "__globals__", {}))


def _plain_ok(fn, args, module_globals):
    module_arrays = {k: v.copy() for k, v in module_globals.items()
                     if isinstance(v, np.ndarray)}
    try:
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            out = fn(*copies(args))
    except Exception:  # noqa: BLE001
        return False
    finally:
        changed = [k for k, v in module_arrays.items()
                   if not np.array_equal(module_globals.get(k), v)]
        for k in changed:
            module_globals[k][...] = module_arrays[k]
    if changed:
        return False
    if not isinstance(out, (float, np.floating, np.ndarray)) or \
            (isinstance(out, np.ndarray) and out.dtype.kind != "f"):
        return False
    if np.ndim(out) != 0 or not np.isfinite(out) or abs(float(out)) > 1e3:
        return False
    return True


def run_program(seed, index, workdir, weights, progress=None, draws=3, max_attempts=30):
    t0 = time.perf_counter()
    regenerated = 0
    for attempt in range(max_attempts):
        src, kinds, used = generate(seed, index, attempt, weights)
        modname = f"fz_{seed}_{index}_a{attempt}".replace("-", "m")
        path = os.path.join(workdir, modname + ".py")
        with open(path, "w") as fh:
            fh.write(src)
        try:
            module = load_module(path, modname)
        except Exception:  # noqa: BLE001 - a generator bug: regenerate
            regenerated += 1
            continue
        fn = module.f
        good_draws = [d for d in range(draws * 2)
                      if plain_ok(fn, draw_inputs(kinds, seed, index, attempt, d),
                                  module)][:draws]
        if not good_draws:
            regenerated += 1
            sys.modules.pop(modname, None)
            continue
        import inspect
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        result = None
        for n_draw, d in enumerate(good_draws):
            args = draw_inputs(kinds, seed, index, attempt, d)
            if progress:
                progress({"path": path, "args": args_source(args)})
            records = evaluate_all(fn, args, names, module)
            status = worst([r["status"] for r in records])
            result = {"status": status, "records": records, "args": args_source(args),
                      "draws": n_draw + 1}
            if status != "nonsmooth" and not any(r.get("nonsmooth") for r in records
                                                 if r["status"] == "refused"):
                break
        sys.modules.pop(modname, None)
        result.update({"index": index, "seed": seed, "path": path, "features": used,
                       "regenerated": regenerated, "time": time.perf_counter() - t0,
                       "lines": src.count("\n")})
        return _plain(result)
    return {"index": index, "seed": seed, "status": "generator-failed", "records": [],
            "path": None, "features": [], "regenerated": regenerated,
            "time": time.perf_counter() - t0, "lines": 0, "args": "", "draws": 0}


def _plain(result):
    """Arrays in records become text: results cross a pipe and are printed."""
    for r in result["records"]:
        for key in ("fd", "optimised", "unoptimised"):
            if key in r:
                r[key] = fmt(r[key])
        if not isinstance(r["shape"], str):
            r["shape"] = tuple(r["shape"])
    return result


# --------------------------------------------------------------------------------------
# Workers: one process per job, replaced when a program runs past its time.
# --------------------------------------------------------------------------------------
def _worker(conn, seed, workdir, weights, mutate):
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the parent stops its workers itself,
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # after summing up what they did
    if mutate:
        apply_mutation(mutate)
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        if index is None:
            return

        def progress(info, index=index):
            conn.send(("progress", index, info))
        try:
            res = run_program(seed, index, workdir, weights, progress)
        except Exception as exc:  # noqa: BLE001 - a fuzzer bug: report it, keep going
            res = {"index": index, "seed": seed, "status": "fuzzer-error", "records": [],
                   "path": None, "features": [], "regenerated": 0, "time": 0.0, "lines": 0,
                   "args": "", "draws": 0,
                   "error": "".join(traceback.format_exception(exc))[-2000:]}
        conn.send(("done", index, res))


class Pool:
    def __init__(self, jobs, seed, workdir, weights, mutate=None):
        self.ctx = multiprocessing.get_context("fork")
        self.args = (seed, workdir, weights, mutate)
        self.workers = [self._start() for _ in range(jobs)]

    def _start(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child,) + self.args, daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "index": None, "start": 0.0, "info": None}

    def run(self, indices, timeout, on_result):
        pending = collections.deque(indices)
        busy = 0
        while pending or busy:
            for w in self.workers:
                if w["index"] is None and pending:
                    w["index"] = pending.popleft()
                    w["start"] = time.monotonic()
                    w["info"] = None
                    w["conn"].send(w["index"])
                    busy += 1
            now = time.monotonic()
            deadline = min((w["start"] + timeout for w in self.workers if w["index"] is not None),
                           default=now + 1)
            ready = mp_wait([w["conn"] for w in self.workers if w["index"] is not None],
                            timeout=max(0.0, deadline - now))
            for w in list(self.workers):
                if w["conn"] in ready:
                    try:
                        kind, index, payload = w["conn"].recv()
                    except (EOFError, OSError):
                        code = w["proc"].exitcode
                        on_result(self._lost(w, "crashed", f"worker process died (exit code "
                                                           f"{code})"))
                        self._replace(w)
                        busy -= 1
                        continue
                    if kind == "progress":
                        w["info"] = payload
                    else:
                        w["index"] = None
                        busy -= 1
                        on_result(payload)
            now = time.monotonic()
            for w in list(self.workers):
                if w["index"] is not None and now - w["start"] > timeout:
                    on_result(self._lost(w, "timeout", f"no result after {timeout:g} s"))
                    self._replace(w)
                    busy -= 1

    def _lost(self, w, status, why):
        info = w["info"] or {}
        return {"index": w["index"], "seed": self.args[0], "status": status, "records": [],
                "path": info.get("path"), "args": info.get("args", ""), "features": [],
                "regenerated": 0, "time": time.monotonic() - w["start"], "lines": 0,
                "draws": 0, "error": why}

    def _replace(self, w):
        w["proc"].kill()
        w["proc"].join(5)
        w["conn"].close()
        self.workers[self.workers.index(w)] = self._start()

    def close(self):
        for w in self.workers:
            try:
                w["conn"].send(None)
            except (OSError, BrokenPipeError):
                pass
        for w in self.workers:
            w["proc"].join(1)
            if w["proc"].is_alive():
                w["proc"].kill()
                w["proc"].join(1)


# --------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------
def keep_program(res, keep_dir):
    """Copy a failing program next to the others, with its inputs and a way to rerun it."""
    if not res.get("path") or not os.path.exists(res["path"]):
        return None
    os.makedirs(keep_dir, exist_ok=True)
    dest = os.path.join(keep_dir, f"fuzz_s{res['seed']}_i{res['index']}_{res['status']}.py")
    with open(res["path"]) as fh:
        src = fh.read()
    with open(dest, "w") as fh:
        # run standalone, the program imports the s2sgrad the fuzzer tested
        fh.write(f"import sys\nsys.path.insert(0, {_ROOT!r})  # noqa: E402\n")
        fh.write(src)
        fh.write(f"\n\n# --- s2sgrad fuzz: seed={res['seed']} index={res['index']} "
                 f"status={res['status']}\n")
        fh.write(f"ARGS = {res.get('args') or '[]'}\n\n")
        fh.write("if __name__ == \"__main__\":\n")
        fh.write(f"    # python {os.path.relpath(os.path.abspath(__file__))} --check "
                 f"{dest}\n")
        fh.write("    import s2sgrad\n")
        fh.write("    for i in range(len(ARGS)):\n")
        fh.write("        a = [v.copy() if isinstance(v, np.ndarray) else v for v in ARGS]\n")
        fh.write("        print(i, s2sgrad.grad(f, wrt=i)(*a))\n")
    return dest


def describe(res, kept):
    out = [f"--- {res['status'].upper()} seed={res['seed']} index={res['index']}"
           f" file={kept or res.get('path')}"]
    if res.get("args"):
        out.append(f"    inputs: {res['args']}")
    if res.get("error"):
        out.append("    " + res["error"].strip().replace("\n", "\n    "))
    for r in res["records"]:
        if r["status"] not in ("wrong", "crashed"):
            continue
        head = f"    argument {r['arg']} ({r['name']}, shape {r['shape']}):"
        out.append(head)
        for p in r["problems"]:
            out.append(f"      {p}")
        if r["status"] == "wrong":
            out.append(f"      expected (finite differences): {r.get('fd')}")
            for lab in ("optimised", "unoptimised"):
                if lab in r:
                    out.append(f"      got ({lab}): {r[lab]}")
        for lab, (kind, info) in r.get("exceptions", {}).items():
            if kind == "crashed":
                out.append(f"      {lab}: {info['type']}: {info['message']}")
                out.append(f"        at {info['where']}  [{info['frame']}]")
            else:
                out.append(f"      {lab}: refused: {info}")
    return "\n".join(out)


def program_refusals(res):
    kinds = set()
    for r in res["records"]:
        for kind, info in r.get("exceptions", {}).values():
            if kind == "refused":
                kinds.add(info)
    return kinds


def program_crashes(res):
    out = set()
    for r in res["records"]:
        for kind, info in r.get("exceptions", {}).values():
            if kind == "crashed":
                msg = re.sub(r"\b\d{5,}\b", "<id>", info["message"][:120])
                msg = re.sub(r"'(v|acc|out|t|r|p|q|e|w|L|P|i|k|u)\d+'", r"'\1N'", msg)
                out.add(f"{info['type']} in {info['frame']}: {msg}")
    return out


def summarize(results, n, verbose, elapsed, jobs, keep_dir, quiet=False, keep_refused=False):
    counts = collections.Counter(r["status"] for r in results)
    lines = []
    kept_any = False
    for res in sorted(results, key=lambda r: r["index"]):
        if res["status"] in _FAILING:
            kept = keep_program(res, keep_dir)
            kept_any = kept_any or bool(kept)
            if not quiet and not res.get("reported"):
                lines.append(describe(res, kept))
        elif res["status"] == "refused" and keep_refused:
            keep_program(res, keep_dir)
    if kept_any and not quiet:
        lines.append(f"failing programs kept in {keep_dir}")
    refusals = collections.Counter()
    crashes = collections.Counter()
    for res in results:
        for k in program_refusals(res):
            refusals[k] += 1
        for k in program_crashes(res):
            crashes[k] += 1
    if verbose:
        if refusals:
            lines.append("refusals (programs per first line of the message):")
            for k, c in refusals.most_common():
                lines.append(f"  {c:5d}  {k[:160]}")
        if crashes:
            lines.append("crashes (programs per exception and s2sgrad frame):")
            for k, c in crashes.most_common():
                lines.append(f"  {c:5d}  {k}")
        feat = collections.defaultdict(collections.Counter)
        for res in results:
            for f in res.get("features", []):
                feat[f][res["status"]] += 1
        lines.append("constructs: programs using it (wrong / crashed / refused)")
        for f in FEATURES:
            c = feat.get(f, collections.Counter())
            tot = sum(c.values())
            lines.append(f"  {f:22s} {tot:5d}  ({c['wrong']} / {c['crashed']} / "
                         f"{c['refused']})")
    if LIBRARY is not None:
        seen = collections.Counter(r.get("library", "not run") for res in results
                                   for r in res["records"])
        own = seen["the program itself does not run on these arrays"]
        lacks = sum(c for k, c in seen.items() if k.startswith("s2sgrad: "))
        if verbose:
            lines.append(f"on {LIBRARY.name} arrays (gradients per outcome):")
            for k, c in seen.most_common():
                lines.append(f"  {c:5d}  {k}")
        lines.append(f"FUZZ-{LIBRARY.name.upper()} gradients same={seen['same']} "
                     f"s2sgrad-refused={lacks} program-not-{LIBRARY.name.lower()}={own} "
                     f"not-run={seen['not run']}")
    regen = sum(r.get("regenerated", 0) for r in results)
    rate = n / elapsed if elapsed > 0 else float("inf")
    lines.append(f"FUZZ-EXTRA nonsmooth={counts['nonsmooth']} "
                 f"generator-failed={counts['generator-failed']} "
                 f"fuzzer-error={counts['fuzzer-error']} regenerated={regen} "
                 f"elapsed={elapsed:.1f}s jobs={jobs} programs/s={rate:.1f}")
    lines.append(f"FUZZ programs={n} pass={counts['pass']} wrong={counts['wrong']} "
                 f"refused={counts['refused']} crashed={counts['crashed']} "
                 f"timeout={counts['timeout']}")
    return "\n".join(lines), counts


def run_fuzz(n, seed, jobs=1, timeout=10.0, weights=None, indices=None, verbose=False,
             keep_dir=None, mutate=None, quiet=False, show_source=False, out=sys.stdout,
             keep_refused=False):
    """Run the fuzzer; returns (counts, results). Used by the CLI and by tests/test_fuzz.py."""
    weights = dict(FEATURES if weights is None else weights)
    indices = list(range(n)) if indices is None else list(indices)
    n = len(indices)
    t0 = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="s2sgrad-fuzz-")
    if keep_dir is None:  # a fresh directory per run, so no program of an older run is in it
        keep_dir = os.path.join(tempfile.gettempdir(),
                                f"s2sgrad-fuzz-kept-s{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
                                f"-{os.getpid()}")
    results = []

    def on_result(res):
        results.append(res)
        if res["status"] in _FAILING and not quiet:
            # Reported (and kept) at once: a long run stopped early still shows them.
            res["reported"] = True
            print(describe(res, keep_program(res, keep_dir)), file=out, flush=True)
        if verbose and not quiet:
            print(f"[{len(results)}/{n}] index={res['index']} {res['status']} "
                  f"({res['time']:.2f}s)", file=out, flush=True)
        if show_source and res.get("path") and os.path.exists(res["path"]):
            with open(res["path"]) as fh:
                print(fh.read(), file=out)
            print(f"inputs: {res.get('args')}", file=out)
            for r in res["records"]:
                print(f"  arg {r['arg']}: {r['status']} fd={r.get('fd')} "
                      f"opt={r.get('optimised')} plain={r.get('unoptimised')} "
                      f"{r.get('exceptions', '')}", file=out)
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)   # a stopped run still sums up
    try:
        try:
            if jobs <= 0:
                if mutate:
                    apply_mutation(mutate)  # in this process, for good
                for i in indices:
                    on_result(run_program(seed, i, workdir, weights))
            else:
                pool = Pool(jobs, seed, workdir, weights, mutate)
                try:
                    pool.run(indices, timeout, on_result)
                finally:
                    pool.close()
        except KeyboardInterrupt:
            print(f"FUZZ-INTERRUPTED after {len(results)} of {n} programs: the totals below "
                  f"are of those", file=out, flush=True)
            n = len(results)
        elapsed = time.perf_counter() - t0
        text, counts = summarize(results, n, verbose, elapsed, jobs, keep_dir, quiet,
                                 keep_refused)
        print(text, file=out, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)
    return counts, results


_FAILING = ("wrong", "crashed", "timeout", "fuzzer-error")


def _interrupt(signum, frame):
    raise KeyboardInterrupt


# --------------------------------------------------------------------------------------
# --check and --reduce: one kept program on its kept inputs
# --------------------------------------------------------------------------------------
_LOAD_COUNTER = itertools.count()


def _dead_statements(src, fn, args, filename):
    """How many statements of the program's functions the plain run never executes."""
    lines = set()

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != filename:
            return None
        if event == "line":
            lines.add(frame.f_lineno)
        return tracer
    sys.settrace(tracer)
    try:
        fn(*copies(args))
    finally:
        sys.settrace(None)
    dead = 0
    for node in _walk_outside_classes(ast.parse(src)):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.ClassDef,
                                                                  ast.Import, ast.ImportFrom)):
            if node.col_offset > 0 and node.lineno not in lines:
                dead += 1
    return dead


CHECK_TIMED_OUT = "check timed out"


def check_source(src, args, timeout=10.0, dead=None, only=None):
    """Status and records of a program given as text, on fixed inputs (one draw).
    With a list `dead`, appends how many statements the plain run never reaches."""
    d = tempfile.mkdtemp(prefix="s2sgrad-fuzz-check-")
    modname = f"fz_check_{os.getpid()}_{next(_LOAD_COUNTER)}"
    path = os.path.join(d, modname + ".py")
    with open(path, "w") as fh:
        fh.write(src)

    def alarm(signum, frame):
        raise TimeoutError(CHECK_TIMED_OUT)
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = load_module(path, modname)
            fn = module.f
        except TimeoutError:
            raise
        except Exception:  # noqa: BLE001
            return "invalid", []
        if not plain_ok(fn, args, module):
            return "invalid", []
        import inspect
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(names) != len(args):
            return "invalid", []
        records = evaluate_all(fn, copies(args), names, module, only)
        if dead is not None:
            dead.append(_dead_statements(src, fn, args, path))
        return worst([r["status"] for r in records]), records
    except TimeoutError:
        return "timeout", []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        sys.modules.pop(modname, None)
        shutil.rmtree(d, ignore_errors=True)


def _kept_program(path):
    with open(path) as fh:
        text = fh.read()
    src, _, tail = text.partition("\n\n# --- s2sgrad fuzz:")
    m = re.search(r"^ARGS = (.*)$", tail, re.M)
    if not m:
        raise SystemExit(f"{path}: no ARGS line (a file kept by tests/fuzz.py has one)")
    args = eval(m.group(1), {"np": np, "Layer": Layer})  # noqa: S307 - our own kept file
    return src.rstrip() + "\n", args


def _message_shape(message):
    """An exception message without its names and numbers: the same bug in a smaller
    program keeps it, another bug with the same exception type usually does not."""
    message = re.sub(r"'[^']*'", "''", message)
    message = re.sub(r"\d+", "N", message)
    return message[:80]


def signature_of(status, records):
    """What a failure is, for the reducer: it keeps a change only if this stays the same."""
    if status == "wrong":
        kinds = set()
        for r in records:
            for p in r["problems"]:
                kinds.add("value" if "forward value" in p else
                          "tangent" if p.startswith("forward mode") else
                          "mutation" if "after the call" in p else
                          "shape" if "has shape" in p else "gradient")
        return ("wrong", tuple(sorted(kinds)))
    if status == "crashed":
        infos = set()
        for r in records:
            for kind, info in r.get("exceptions", {}).values():
                if kind == "crashed":
                    infos.add((info["type"], info["frame"], _message_shape(info["message"])))
        return ("crashed", tuple(sorted(infos)))
    if status == "refused":
        return ("refused", tuple(sorted({info for r in records for kind, info in
                                         r.get("exceptions", {}).values()
                                         if kind == "refused"})))
    return (status,)


def _walk_outside_classes(tree):
    """ast.walk, except inside class definitions (a Function's bodies stay as written)."""
    todo = collections.deque([tree])
    while todo:
        node = todo.popleft()
        yield node
        if not isinstance(node, ast.ClassDef):
            todo.extend(ast.iter_child_nodes(node))


def _candidates(tree):
    """Smaller versions of a module: one statement, definition or subexpression less."""
    bodies = []
    for node in _walk_outside_classes(tree):
        for field in ("body", "orelse"):
            seq = getattr(node, field, None)
            if isinstance(seq, list) and seq and isinstance(seq[0], ast.stmt):
                bodies.append((node, field))
    for node, field in bodies:
        seq = getattr(node, field)
        for k in range(len(seq)):
            stmt = seq[k]
            if isinstance(node, ast.FunctionDef) and k == len(seq) - 1 and \
                    isinstance(stmt, ast.Return):
                continue  # keep the final return (its expression is shrunk below)
            yield ("delete", node, field, k, None)
            if isinstance(stmt, (ast.If, ast.For, ast.While)):
                yield ("inline", node, field, k, "body")
                if stmt.orelse:
                    yield ("inline", node, field, k, "orelse")
            if isinstance(stmt, ast.If) and stmt.orelse:
                yield ("drop_else", node, field, k, None)
    # parameters with defaults, and keyword arguments of calls
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef):
            for k in range(len(fn.args.kwonlyargs)):
                yield ("drop_kwonly", fn, None, k, None)
            if fn.args.defaults and fn.name != "f":
                yield ("drop_default", fn, None, None, None)
            for n in _walk_outside_classes(fn):
                if isinstance(n, ast.Call):
                    for k in range(len(n.keywords)):
                        yield ("drop_keyword", n, None, k, None)
    # expressions inside functions only: module globals keep their values
    exprs = [n for fn in tree.body if isinstance(fn, ast.FunctionDef)
             for n in _walk_outside_classes(fn) if isinstance(n, ast.expr)]
    for e in exprs:
        for field, child in ast.iter_fields(e):
            if isinstance(e, ast.Call) and field == "func" or isinstance(e, ast.Attribute):
                continue
            for c in (child if isinstance(child, list) else [child]):
                if isinstance(c, ast.expr) and not isinstance(c, ast.Starred):
                    yield ("hoist", e, c, None, None)
        if isinstance(e, (ast.BinOp, ast.Call, ast.IfExp, ast.Compare, ast.Subscript)):
            yield ("const", e, None, None, None)


def _apply(tree, cand):
    """A copy of tree with the candidate change made (None if it does not apply)."""
    import copy
    kind, a, b, k, which = cand
    # locate the same node in a copy by its position in a walk
    nodes = list(ast.walk(tree))
    pos = nodes.index(a)
    new = copy.deepcopy(tree)
    new_nodes = list(ast.walk(new))
    target = new_nodes[pos]
    if kind == "delete":
        seq = getattr(target, b)
        del seq[k]
        if not seq:
            if b == "orelse":
                pass
            else:
                seq.append(ast.Pass())
    elif kind == "inline":
        seq = getattr(target, b)
        stmt = seq[k]
        inner = getattr(stmt, which) or [ast.Pass()]
        seq[k:k + 1] = inner
    elif kind == "drop_else":
        getattr(target, b)[k].orelse = []
    elif kind == "drop_kwonly":
        del target.args.kwonlyargs[k]
        del target.args.kw_defaults[k]
    elif kind == "drop_default":
        del target.args.args[-1]
        del target.args.defaults[-1]
    elif kind == "drop_keyword":
        del target.keywords[k]
    elif kind in ("hoist", "const"):
        child_pos = nodes.index(b) if kind == "hoist" else None
        replacement = new_nodes[child_pos] if kind == "hoist" else ast.Constant(0.5)
        parent = None
        for n in ast.walk(new):
            for field, value in ast.iter_fields(n):
                if value is target:
                    parent = (n, field, None)
                elif isinstance(value, list):
                    for j, item in enumerate(value):
                        if item is target:
                            parent = (n, field, j)
        if parent is None:
            return None
        n, field, j = parent
        if j is None:
            setattr(n, field, replacement)
        else:
            getattr(n, field)[j] = replacement
    ast.fix_missing_locations(new)
    return new


def _unused_defs(tree):
    """Top-level helpers, classes and globals nothing mentions any more."""
    changed = True
    while changed:
        changed = False
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        attrs = {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                 and isinstance(n.value, ast.Name)}
        used = names | attrs
        keep = []
        for stmt in tree.body:
            name = None
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                name = stmt.name
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
                    isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
            own = set()
            if name is not None:
                own = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
            if name is not None and name != "f" and name not in \
                    (used - own if isinstance(stmt, ast.FunctionDef) else used) and \
                    sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and
                        n.id == name) <= (1 if isinstance(stmt, ast.Assign) else 0) + \
                    sum(1 for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id == name):
                changed = True
                continue
            keep.append(stmt)
        tree.body = keep
    return tree


def _undefined_names(tree):
    """Names read in a function that nothing defines: a reduction that leaves one is not
    a program anybody would write (even in a branch that never runs)."""
    import builtins
    known = set(dir(builtins))
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            known.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            known |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        elif isinstance(stmt, ast.Assign):
            known |= {n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    missing = set()
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        a = fn.args
        params = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
        # a comprehension's variables are bound on the line that reads them
        params |= {n.id for c in ast.walk(fn) if isinstance(c, ast.comprehension)
                   for n in ast.walk(c.target) if isinstance(n, ast.Name)}
        stores = collections.defaultdict(list)   # name -> lines that assign it
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                stores[n.id].append(n.lineno)
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and \
                    n.id not in params and n.id not in known and \
                    not any(line < n.lineno for line in stores.get(n.id, ())):
                missing.add(n.id)
    return missing


def _focus(records):
    """The argument and variants a reduction watches: the first failing argument, with the
    optimised pair alone unless the two pairs disagree with each other or only the
    unoptimised one fails."""
    order = {"wrong": 0, "crashed": 1, "refused": 2}  # the program's status is the worst
    for r in sorted(records, key=lambda r: order.get(r["status"], 9)):
        if r["status"] not in order:
            continue
        labels = ("optimised",)
        failing = {lab for lab in ("optimised", "unoptimised")
                   if any(p.startswith(lab) for p in r["problems"])
                   or r.get("exceptions", {}).get(lab, ("",))[0] == "crashed"}
        if "optimised and unoptimised gradients differ" in r["problems"] or \
                failing == {"unoptimised"}:
            labels = ("optimised", "unoptimised")
        if any(p.startswith("forward mode") for p in r["problems"]) or \
                r.get("exceptions", {}).get("forward", ("",))[0] == "crashed":
            labels = labels + ("forward",)
        return r["arg"], labels
    return None


def reduce_program(src, args, budget=300, log=None):
    """Greedy reduction: keep any smaller program whose failure signature is unchanged.
    Returns (source, status, records, args); the records are a full check of the result."""
    status, records = check_source(src, args)
    if status not in ("wrong", "crashed", "refused"):
        return src, status, records, args
    only = _focus(records)
    dead = []
    status, records = check_source(src, args, dead=dead, only=only)
    target = signature_of(status, records)
    best_dead = dead[0] if dead else 0
    best = ast.unparse(_unused_defs(ast.parse(src))) + "\n"
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        k = 0
        while tries < budget:
            tree = ast.parse(best)
            cands = list(_candidates(tree))
            if k >= len(cands):
                break
            cand = cands[k]
            k += 1
            try:
                new = _apply(tree, cand)
            except Exception:  # noqa: BLE001 - a change that does not apply
                continue
            if new is None:
                continue
            new = _unused_defs(new)
            if _undefined_names(new):
                continue
            text = ast.unparse(new) + "\n"
            if len(text) >= len(best):
                continue
            tries += 1
            dead = []
            st, rec = check_source(text, args, dead=dead, only=only)
            # no new code that never runs (a branch made dead by a constant condition)
            if signature_of(st, rec) == target and dead and dead[0] <= best_dead:
                best, improved, best_dead = text, True, dead[0]
                k -= 1  # the same position holds the next candidate now
                if log:
                    log(f"  reduced to {len(best.splitlines())} lines")
    best, args = _drop_unused_params(best, args, target, only)
    status, records = check_source(best, args)
    return best, status, records, args


def _drop_unused_params(src, args, target, only):
    """Positional parameters of f that nothing reads go, with their inputs."""
    changed = True
    while changed:
        changed = False
        tree = ast.parse(src)
        fn = next(s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "f")
        read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        for k, p in enumerate(fn.args.args):
            if p.arg in read or len(fn.args.args) == 1 or fn.args.defaults or k == only[0]:
                continue
            new_tree = ast.parse(src)
            new_fn = next(s for s in new_tree.body
                          if isinstance(s, ast.FunctionDef) and s.name == "f")
            del new_fn.args.args[k]
            text = ast.unparse(new_tree) + "\n"
            new_args = args[:k] + args[k + 1:]
            new_only = (only[0] - (k < only[0]), only[1])
            st, rec = check_source(text, new_args, only=new_only)
            if signature_of(st, rec) == target:
                src, args, only, changed = text, new_args, new_only, True
                break
    return src, args


def reduce_file(path, budget=300, log=None):
    """Reduce one kept program; writes PATH.min.py; returns what was found."""
    src, args = _kept_program(path)
    t0 = time.perf_counter()
    best, status, records, args = reduce_program(src, args, budget, log=log)
    out_path = path if path.endswith(".min.py") else re.sub(r"\.py$", "", path) + ".min.py"
    with open(out_path, "w") as fh:
        fh.write(best)
        fh.write(f"\n\n# --- s2sgrad fuzz: reduced from "
                 f"{os.path.basename(path).replace('.min.py', '.py')}\n"
                 f"ARGS = {args_source(args)}\n")
    buf = __import__("io").StringIO()
    _print_records(status, records, buf)
    return {"path": path, "min_path": out_path, "source": best, "status": status,
            "signature": repr(signature_of(status, records)), "records_text": buf.getvalue(),
            "records": records, "tags": sorted(construct_tags(best)),
            "lines": len([ln for ln in best.splitlines() if ln.strip()]),
            "time": time.perf_counter() - t0}


def _reduce_task(job):
    path, budget = job
    try:
        res = reduce_file(path, budget)
        res.pop("records")
        return res
    except Exception as exc:  # noqa: BLE001
        return {"path": path, "status": "reduce-error", "error": repr(exc), "tags": [],
                "signature": "", "source": "", "lines": 0, "min_path": None,
                "records_text": "", "time": 0.0}


def reduce_many(files, budget, jobs):
    """Reduce many kept programs in parallel and group the results."""
    import json
    ctx = multiprocessing.get_context("fork")
    results = []
    t0 = time.perf_counter()
    with ctx.Pool(jobs, maxtasksperchild=20) as pool:
        for k, res in enumerate(pool.imap_unordered(_reduce_task, [(f, budget) for f in files])):
            results.append(res)
            print(f"[{k + 1}/{len(files)}] {os.path.basename(res['path'])}: {res['status']}, "
                  f"{res['lines']} lines ({res['time']:.1f}s)", flush=True)
    groups = collections.defaultdict(list)
    for res in results:
        groups[(res["signature"], tuple(res["tags"]))].append(res)
    print(f"\n{len(files)} programs reduced in {time.perf_counter() - t0:.0f}s; "
          f"{len(groups)} groups (failure, constructs left):")
    for (sig, tags), members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        smallest = min(members, key=lambda r: r["lines"])
        print(f"\n=== {len(members)} x {sig}  tags={list(tags)}")
        print(f"    smallest: {smallest['min_path']}")
        print("    " + smallest["source"].strip().replace("\n", "\n    "))
    out = os.path.join(os.path.dirname(os.path.abspath(files[0])), "reduce-summary.json")
    with open(out, "w") as fh:
        json.dump(results, fh, indent=1, default=str)
    print(f"\nsummary written to {out}")
    return results


def construct_tags(src):
    """The constructs a (reduced) program still uses: what its failure is grouped by."""
    tree = ast.parse(src)
    tags = set()
    fns = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    for name, fn in fns.items():
        a = fn.args
        if a.kwonlyargs:
            tags.add("kwonly-param" + ("(entry)" if name == "f" else "(helper)"))
        if a.defaults and name != "f":
            tags.add("default-param")
        params = {p.arg for p in a.args}
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and \
                    isinstance(n.targets[0], ast.Name) and n.targets[0].id in params:
                tags.add("rebind-param" + ("[::-1]" if isinstance(n.value, ast.Subscript)
                                           else ""))
            if isinstance(n, ast.Return) and n is not fn.body[-1]:
                tags.add("early-return")
    if len(fns) > 1:
        tags.add("helper-call")
    for n in _walk_outside_classes(tree):
        if isinstance(n, ast.NamedExpr):
            tags.add("walrus")
        elif isinstance(n, ast.IfExp):
            tags.add("ifexp")
        elif isinstance(n, ast.If):
            tags.add("if")
        elif isinstance(n, ast.While):
            tags.add("while")
        elif isinstance(n, ast.Break):
            tags.add("break")
        elif isinstance(n, ast.Continue):
            tags.add("continue")
        elif isinstance(n, ast.For):
            it = n.iter
            if isinstance(it, (ast.List, ast.Tuple)):
                tags.add("for-over-list-literal")
            elif isinstance(it, ast.Call) and isinstance(it.func, ast.Name):
                tags.add(f"for-{it.func.id}")
            else:
                tags.add("for-over-variable")
        elif isinstance(n, ast.AugAssign):
            t = n.target
            if isinstance(t, ast.Subscript):
                tags.add("fancy-index-augassign" if isinstance(t.slice, ast.List)
                         else "element-augassign")
            else:
                tags.add("augassign")
        elif isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript):
                    tags.add("fancy-index-write" if isinstance(t.slice, ast.List)
                             else "subscript-write")
                elif isinstance(t, ast.Tuple):
                    tags.add("tuple-unpack")
            if isinstance(n.value, (ast.List, ast.Tuple)):
                tags.add("list-literal-variable")
        elif isinstance(n, ast.Call):
            f = n.func
            src_f = ast.unparse(f)
            if src_f == "np.add.at":
                tags.add("np.add.at")
            elif src_f.endswith(".apply"):
                tags.add(f"Function.apply({src_f.split('.')[0]})")
            elif src_f.endswith(".append"):
                tags.add("list.append")
            elif isinstance(f, ast.Name) and f.id in ("max", "min"):
                tags.add("builtin-max/min")
            elif isinstance(f, ast.Name) and f.id in fns:
                if any(isinstance(x, (ast.List, ast.Tuple)) for x in n.args):
                    tags.add("list/tuple-literal-argument")
                if n.keywords:
                    tags.add("keyword-argument")
            elif src_f in ("np.where", "np.maximum", "np.minimum", "np.concatenate",
                           "np.stack", "np.outer", "np.einsum", "np.max", "np.min"):
                tags.add(src_f)
            if any(k.arg == "keepdims" for k in n.keywords):
                tags.add("keepdims")
        elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
            if ast.unparse(n.left) == ast.unparse(n.right):
                tags.add("theta@theta")
            else:
                tags.add("matmul")
        elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call) and \
                ast.unparse(n.value.func).endswith(".apply"):
            tags.add("subscript-of-apply")
    return tags


def _print_records(status, records, out=sys.stdout):
    print(f"status: {status}", file=out)
    for r in records:
        shape = r["shape"] if isinstance(r["shape"], str) else tuple(r["shape"])
        print(f"  argument {r['arg']} ({r['name']}, shape {shape}): {r['status']}",
              file=out)
        for p in r["problems"]:
            print(f"    {p}", file=out)
        if "fd" in r:
            print(f"    finite differences: {fmt(r['fd'])}", file=out)
        for lab in ("optimised", "unoptimised", "forward"):
            if lab in r:
                print(f"    {lab}: {fmt(r[lab])}", file=out)
        for lab, (kind, info) in r.get("exceptions", {}).items():
            if kind == "crashed":
                print(f"    {lab}: {info['type']}: {info['message']}\n"
                      f"      at {info['where']} [{info['frame']}]", file=out)
            else:
                print(f"    {lab}: {info}", file=out)


# --------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--n", type=int, default=100, help="number of programs (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes (0: in this process, no timeout)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds per program before its worker is killed (default 10)")
    p.add_argument("--keep", metavar="DIR", help="where to keep failing programs "
                                                  "(default: a directory under the temp dir)")
    p.add_argument("--keep-refused", action="store_true",
                   help="keep refused programs too (to --reduce them)")
    p.add_argument("--verbose", action="store_true",
                   help="progress, refusal/crash histograms, construct table")
    p.add_argument("--index", type=str, help="only these program indices (e.g. 3,17)")
    p.add_argument("--show", action="store_true", help="print each program's source")
    p.add_argument("--disable", type=str, default="",
                   help="constructs to switch off, comma-separated (see --list-features)")
    p.add_argument("--list-features", action="store_true")
    p.add_argument("--mutate", nargs="?", const="tanh",
                   choices=sorted(MUTATIONS) + sorted(PATCHES),
                   help="make one gradient rule 1%% wrong (default tanh), or one mechanism "
                        "of a program family (item_cotangent, comprehension, tuple_call, "
                        "closure, function_outputs, partial, second_order; see "
                        "tests/fuzz_families.py): the fuzzer must report wrong > 0")
    p.add_argument("--only", type=str, default="",
                   help="program families to run alone, comma-separated (classic, "
                        f"{', '.join(FAMILIES)}): the others' weights become 0")
    p.add_argument("--dask", action="store_true",
                   help="also compute every gradient on Dask arrays: it must equal NumPy's")
    p.add_argument("--strict", action="store_true",
                   help="also compute every gradient on the strict stand-in for CuPy's "
                        "arrays (tests/strict_arrays.py): it must equal NumPy's")
    p.add_argument("--check", metavar="FILE", help="run one kept program on its inputs")
    p.add_argument("--reduce", metavar="PATH", nargs="+",
                   help="shrink kept failing programs (files, or directories of them; "
                        "--jobs in parallel); writes FILE.min.py next to each and, for "
                        "several, a summary grouped by failure and remaining constructs")
    p.add_argument("--again", action="store_true",
                   help="--reduce DIR: shrink the .min.py files further, in place")
    p.add_argument("--budget", type=int, default=300,
                   help="--reduce: at most this many candidate programs tried per file")
    return p.parse_args(argv)


def main(argv=None):
    global LIBRARY
    opts = parse_args(argv)
    LIBRARY = _dask_library() if opts.dask else _strict_library() if opts.strict else None
    if opts.list_features:
        for k, v in FEATURES.items():
            print(f"{k:22s} {v}")
        return 0
    if opts.check or opts.reduce:
        if opts.mutate:
            apply_mutation(opts.mutate)
        if opts.check:
            src, args = _kept_program(opts.check)
            _print_records(*check_source(src, args, opts.timeout))
            return 0
        files = []
        for path in opts.reduce:
            if os.path.isdir(path):
                files += sorted(os.path.join(path, f) for f in os.listdir(path)
                                if f.endswith(".py") and
                                f.endswith(".min.py") == opts.again)
            else:
                files.append(path)
        if len(files) == 1:
            res = reduce_file(files[0], opts.budget, log=print)
            print(res["source"])
            _print_records(res["status"], res["records"])
            print(f"written to {res['min_path']}")
            return 0
        reduce_many(files, opts.budget, max(1, opts.jobs))
        return 0
    weights = dict(FEATURES)
    only = [s.strip() for s in opts.only.split(",") if s.strip()]
    for name in only:
        if name not in FAMILY_FEATURES:
            raise SystemExit(f"unknown program family {name!r}: one of "
                             f"{', '.join(FAMILY_FEATURES)}")
    if only:
        for name in FAMILY_FEATURES:
            if name not in only:
                weights[name] = 0.0
            elif weights[name] <= 0:
                weights[name] = 1.0
    if opts.dask:   # (calls of functions Dask lacks, which it computes and hands NumPy)
        for name in DASK_LACKS:
            weights[name] = 0.0
    for name in filter(None, (s.strip() for s in opts.disable.split(","))):
        if name not in weights:
            raise SystemExit(f"unknown construct {name!r}; see --list-features")
        weights[name] = 0.0
    indices = None
    if opts.index:
        indices = [int(s) for s in opts.index.split(",")]
    counts, _ = run_fuzz(opts.n, opts.seed, opts.jobs, opts.timeout, weights, indices,
                         opts.verbose, opts.keep, opts.mutate, show_source=opts.show,
                         keep_refused=opts.keep_refused)
    return 0


if __name__ == "__main__":
    sys.exit(main())
