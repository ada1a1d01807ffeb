"""The registry behind the gradient table: one `Rule` per NumPy function.

A rule is data: a parameter list and, for each differentiable parameter, a
template expression in plain NumPy. In a template `g` is the cotangent of the
result, `ans` the result, parameters are the call's arguments, `np` is NumPy
and any name registered in `s2sgrad.runtime.HELPERS` is a helper. The
compiler splices the template into the adjoint, so generated code contains the
mathematics itself, not a call to a rule.
"""
from __future__ import annotations

import ast
import collections.abc
import functools
import importlib
import inspect
import sys
import threading
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Set, Tuple

import numpy as np

from .. import runtime

# Builtins that templates may use besides NumPy and the helpers.
TEMPLATE_BUILTINS = frozenset({"len", "range", "tuple", "slice", "float", "int", "abs",
                               "min", "max", "list", "zip", "sum", "isinstance"})


@dataclass
class Rule:
    """The VJP of one function, method, attribute or operator."""

    name: str
    signature: inspect.Signature
    grads: Mapping[str, ast.expr]   # (Templates: parsed when first asked for)
    texts: Dict[str, str]
    prelude: List[ast.stmt] = field(default_factory=list)
    broadcast: bool = False
    sequence: FrozenSet[str] = frozenset()
    outputs: Optional[int] = None
    view: bool = False
    func: Optional[Callable] = None
    # Registered from outside the built-in table (s2sgrad.defvjp): user helpers.
    extra_names: Dict[str, Callable] = field(default_factory=dict)
    # Complex arguments (complex_rules.py): `holomorphic`, the templates hold for them
    # as written; else `on_complex`, the rule that does, if any (np.abs, np.real, ...).
    holomorphic: bool = False
    on_complex: Optional["Rule"] = None
    # Derivatives only as exact as a numerical method (an ODE solver's tolerance):
    # their relative accuracy, which the derivative witness allows.
    tolerance: Optional[float] = None
    # A list or tuple for some arguments (np.split, np.meshgrid, np.average's
    # returned=True): never taken for one array, whose cotangents add with `+`.
    sequence_result: bool = False
    # Per-item templates of sequence parameters written out as a list (`item`: the
    # item's position): only the items that carry a gradient are computed, each by
    # code the compiler can differentiate again (np.einsum's operands).
    per_item: Mapping[str, ast.expr] = field(default_factory=dict)

    def for_complex(self) -> Optional["Rule"]:
        """The rule for an operation with a complex argument or result, or None
        (not differentiated for complex values)."""
        return self if self.holomorphic else self.on_complex

    @functools.cached_property
    def params(self) -> List[str]:
        """The parameter names (kept: the compiler asks at every call it expands;
        callers do not modify the list)."""
        return list(self.signature.parameters)

    def differentiable(self) -> List[str]:
        return [p for p in self.params if p in self.grads]

    @functools.cached_property
    def numpy_calls(self) -> FrozenSet[str]:
        """The NumPy functions its templates call (`np.cos(x)` -> "cos"): the inliner
        looks into an expanded template for some of them only when they are here."""
        found = set()
        for template in [*self.grads.values(), *self.prelude]:
            for node in ast.walk(template):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        isinstance(node.func.value, ast.Name) and node.func.value.id == "np":
                    found.add(node.func.attr)
        return frozenset(found)


@dataclass
class Registry:
    functions: Dict[int, Tuple[Callable, Rule]] = field(default_factory=dict)
    aliases: Dict[int, Tuple[Callable, Rule]] = field(default_factory=dict)
    methods: Dict[str, Rule] = field(default_factory=dict)
    attributes: Dict[str, Rule] = field(default_factory=dict)
    operators: Dict[type, Rule] = field(default_factory=dict)
    nondiff_functions: Dict[int, Callable] = field(default_factory=dict)
    nondiff_methods: set = field(default_factory=set)
    nondiff_attributes: set = field(default_factory=set)
    # Functions that return fresh arrays and have no gradient: constructors.
    constructors: Dict[int, Callable] = field(default_factory=dict)


REGISTRY = Registry()

# SciPy's rules are built in but registered lazily (importing scipy.special alone takes
# a quarter of a second): the rules of a SciPy module are read the first time a lookup
# misses while that module is imported (a SciPy function can only reach the compiler
# once its module is), or when the whole table is listed (all_rules, count). They live
# in a registry of their own, so that the cache's fingerprint of the built-in table
# does not change when they load; a user's defvjp of the same function wins.
LAZY = Registry()
# SciPy module -> the rules module that registers its rules.
_PENDING: Dict[str, str] = {"scipy.special": "scipy_rules",
                            "scipy.stats": "scipy_stats_rules",
                            "scipy.linalg": "scipy_linalg_rules",
                            "scipy.signal": "scipy_signal_rules",
                            "scipy.spatial.distance": "scipy_spatial_rules",
                            "scipy.integrate": "scipy_integrate_rules"}
_TARGET: List[Registry] = [REGISTRY]   # where defvjp/alias/nondiff write (a stack)

# The table itself (the NumPy rules and the modules beside them) is registered at its
# first use -- a compile (compiler.ops loads it), a lookup, a user's defvjp -- not at
# `import s2sgrad`, of whose time it was a fifth. In this order (complex_rules marks
# numpy_rules' entries; mark_shipped then records them as the shipped table).
_TABLE = ("complex_rules", "helper_rules", "numpy_rules", "runtime_rules")
_TABLE_STATE = ["not loaded"]      # "loading" (in this thread: re-entry) / "loaded"
_TABLE_LOCK = threading.RLock()


def load_table() -> None:
    """Register the shipped table, once (a no-op while it is being registered)."""
    if _TABLE_STATE[0] == "loaded":
        return
    with _TABLE_LOCK:
        if _TABLE_STATE[0] != "not loaded":
            return
        _TABLE_STATE[0] = "loading"
        try:
            for module in _TABLE:
                importlib.import_module(f"{__package__}.{module}")
            mark_shipped()
        except BaseException:
            _TABLE_STATE[0] = "not loaded"
            raise
        _TABLE_STATE[0] = "loaded"


def rule_key(func: Callable):
    """Registry key of a callable. A bound method (`scipy.stats.norm.pdf`) is a new
    object at every attribute read, so it is keyed by its instance and function."""
    if isinstance(func, types.MethodType):
        return ("method", id(func.__self__), id(func.__func__))
    return id(func)


def _same_callable(stored: Callable, func: Callable) -> bool:
    if stored is func:
        return True
    return isinstance(func, types.MethodType) and isinstance(stored, types.MethodType) and \
        stored.__self__ is func.__self__ and stored.__func__ is func.__func__


@contextmanager
def _writing_to(target: Registry):
    _TARGET.append(target)
    try:
        yield
    finally:
        _TARGET.pop()


def _load_lazy(all_available: bool = False) -> bool:
    """Register the rules of the SciPy modules already imported (all_available: of
    every SciPy module that imports). Whether any rule was added."""
    global _SHIPPING
    loaded = False
    for module, rules in list(_PENDING.items()):
        if not all_available and module not in sys.modules:
            continue
        _PENDING.pop(module)
        before = set(LAZY.functions)
        shipping, _SHIPPING = _SHIPPING, True
        try:
            with _writing_to(LAZY):
                importlib.import_module(f"{__package__}.{rules}")
        except ImportError:
            continue   # SciPy (or this module of it) is not installed
        finally:
            _SHIPPING = shipping
        new = [rule for key, (_, rule) in LAZY.functions.items() if key not in before]
        _SHIPPED.extend(new)
        _SHIPPED_IDS.update(id(rule) for rule in new)
        loaded = True
    return loaded


def load_scipy_rules() -> None:
    """Register every SciPy rule now (imports the SciPy modules that have rules)."""
    load_table()
    _load_lazy(all_available=True)


class RuleSignature(inspect.Signature):
    """A rule's parameters. Binding a call refuses argument forms whose
    gradient the transform would drop: a list or tuple literal holding
    variables, passed to a differentiable parameter that is not a sequence
    parameter (`np.sum([a, b])`), or nested inside a sequence parameter
    (`np.array([[a, b], [c, d]])`). The call then has no rule and is reported
    as an error instead of getting a silent zero gradient. (Compiler gap,
    tests/test_compiler_gaps.py; lift this once the transform handles it.)
    """

    __slots__ = ("rule",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rule = None

    def bind(self, *args, **kwargs):
        bound = super().bind(*args, **kwargs)
        if self.rule is not None:
            _check_argument_forms(self.rule, bound)
        return bound


def _holds_variables(node) -> bool:
    return isinstance(node, ast.AST) and any(isinstance(n, ast.Name) for n in ast.walk(node))


def _check_argument_forms(rule: "Rule", bound: inspect.BoundArguments) -> None:
    for param, value in bound.arguments.items():
        if param not in rule.grads:
            continue
        kind = rule.signature.parameters[param].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            items = list(value)
        elif param in rule.sequence and isinstance(value, (ast.List, ast.Tuple)):
            items = list(value.elts)
        else:
            items = [value] if param not in rule.sequence else []
        for item in items:
            if isinstance(item, (ast.List, ast.Tuple)) and _holds_variables(item):
                raise TypeError(f"{rule.name}: a list literal of variables as argument "
                                f"{param!r} is not differentiated")


_PARAMETERS: Dict[str, list] = {}   # a parameter list's text -> its parameters


def _signature(params) -> inspect.Signature:
    if isinstance(params, inspect.Signature):
        parameters = list(params.parameters.values())
    else:
        # Many rules share a parameter list ("x", "x, y"): each text is read once
        # (an exec and inspect.signature cost about 40 microseconds).
        parameters = _PARAMETERS.get(params)
        if parameters is None:
            ns: dict = {"np": np}
            exec(f"def _rule_params({params}):\n    pass", ns)  # noqa: S102 - table text
            parameters = _PARAMETERS[params] = \
                list(inspect.signature(ns["_rule_params"]).parameters.values())
    # (the parameters come from a def or a Signature: already valid)
    return RuleSignature(list(parameters), __validate_parameters__=False)


def _parse_template(text: str, where: str) -> ast.expr:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"gradient template for {where} does not parse: {text!r} "
                         f"({exc})") from None


class Templates(collections.abc.Mapping):
    """A rule's gradient templates: parameter -> the expression's tree, each parsed
    the first time it is asked for (the shipped tables hold hundreds; a process
    expands a few). Membership and iteration read the texts only."""

    __slots__ = ("name", "texts", "_trees")

    def __init__(self, name: str, texts: Dict[str, str]):
        self.name, self.texts = name, texts
        self._trees: Dict[str, ast.expr] = {}

    def __getitem__(self, param: str) -> ast.expr:
        tree = self._trees.get(param)
        if tree is None:
            tree = self._trees[param] = _parse_template(self.texts[param],
                                                        f"{self.name}({param})")
        return tree

    def __contains__(self, param: object) -> bool:
        return param in self.texts

    def __iter__(self):
        return iter(self.texts)

    def __len__(self) -> int:
        return len(self.texts)

    def parse_all(self) -> None:
        for param in self.texts:
            self[param]


def _check_names(rule: Rule, local_names: Iterable[str]) -> None:
    allowed = (set(rule.params) | {"g", "ans", "np"} | set(runtime.HELPERS)
               | set(local_names) | TEMPLATE_BUILTINS | set(rule.extra_names))
    nodes = [(node, allowed) for node in list(rule.grads.values()) + list(rule.prelude)]
    nodes += [(node, allowed | {"item"}) for node in rule.per_item.values()]
    for node, known in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id not in known:
                raise ValueError(f"gradient template for {rule.name} uses unknown name "
                                 f"{sub.id!r}; known: parameters, g, ans, np and the helpers "
                                 f"in s2sgrad.runtime")


def make_rule(name: str, params, grads: Dict[str, str], *, prelude: str = "",
              broadcast: bool = False, sequence: Iterable[str] = (),
              outputs: Optional[int] = None, view: bool = False,
              func: Optional[Callable] = None,
              extra_names: Optional[Dict[str, Callable]] = None,
              tolerance: Optional[float] = None,
              per_item: Optional[Dict[str, str]] = None) -> Rule:
    sig = _signature(params)
    unknown = set(grads) - set(sig.parameters)
    if unknown:
        raise ValueError(f"rule {name}: gradients given for unknown parameters {sorted(unknown)}")
    if not set(per_item or ()) <= set(sequence) & set(grads):
        raise ValueError(f"rule {name}: per-item templates are for sequence parameters with a "
                         f"gradient, not {sorted(set(per_item) - set(sequence))}")
    reserved = {"g", "ans"} & set(sig.parameters)
    if reserved:   # (a template's `g` would read the parameter, not the cotangent)
        raise ValueError(f"rule {name}: a parameter may not be named {sorted(reserved)}, "
                         f"which templates use for the cotangent and the result; rename it")
    pre = ast.parse(prelude).body if prelude.strip() else []
    templates = Templates(name, dict(grads))
    items = Templates(f"{name} per item", dict(per_item or {}))
    if not _SHIPPING:
        templates.parse_all()   # (a user's template that does not parse: said now)
        items.parse_all()
    rule = Rule(name=name, signature=sig, grads=templates,
                texts=dict(grads), prelude=pre, broadcast=broadcast,
                sequence=frozenset(sequence), outputs=outputs, view=view, func=func,
                extra_names=dict(extra_names or {}), tolerance=tolerance, per_item=items)
    sig.rule = rule
    local_names = {n.id for s in pre for n in ast.walk(s)
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if _SHIPPING:
        # The shipped tables are checked by the test suite (check_shipped_names), not
        # at each import: the walk over every template is most of an import's cost.
        _UNCHECKED.append((rule, local_names))
    else:
        _check_names(rule, local_names)
    return rule


# True while the shipped tables register (rules/__init__ until mark_shipped, and each
# lazy load of SciPy's): their templates' names are checked by check_shipped_names.
_SHIPPING = True
_UNCHECKED: List[Tuple[Rule, Set[str]]] = []


def check_shipped_names() -> int:
    """Check every shipped template's names (ValueError on an unknown one); how many."""
    for rule, local_names in _UNCHECKED:
        _check_names(rule, local_names)
    return len(_UNCHECKED)


def display_name(func: Callable) -> str:
    mod = getattr(func, "__module__", None) or ""
    name = getattr(func, "__name__", repr(func))
    if isinstance(func, np.ufunc) and getattr(np, name, None) is not func and not mod:
        return f"scipy.special.{name}"     # SciPy's ufuncs have no __module__
    if isinstance(func, np.ufunc) or mod.startswith("numpy"):
        if mod.startswith("numpy.linalg"):
            return f"np.linalg.{name}"
        if mod.startswith("numpy.fft"):
            return f"np.fft.{name}"
        if mod.startswith("numpy.polynomial."):   # (np.polynomial.polynomial.polyval)
            return f"np.polynomial.{mod.split('.')[2]}.{name}"
        return f"np.{name}"
    return f"{mod}.{name}" if mod else name


def defvjp(func: Callable, params, *, prelude: str = "", broadcast: bool = False,
           sequence: Iterable[str] = (), outputs: Optional[int] = None, view: bool = False,
           name: Optional[str] = None, tolerance: Optional[float] = None,
           per_item: Optional[Dict[str, str]] = None, **grads) -> Rule:
    """Register the VJP of `func` (also public as `s2sgrad.defvjp`).

    Template form: `params` is the parameter list as text and each keyword
    gives one differentiable parameter's gradient as a NumPy expression in
    `g` (the cotangent), `ans` (the result), the parameters and `np`:

        defvjp(mylib.f, "x, y", x="g * y", y="g * x", broadcast=True)

    A keyword may also be a Python callable `(g, ans, *params) -> gradient`.

    Callable form: `params` is a function `(g, ans, p1, p2, ...)` returning
    the gradient of each parameter without a default (a tuple when there are
    several; None means zero). Parameters with defaults are options:

        defvjp(mylib.f, lambda g, ans, x: g * 2 * x)

    Generated code calls a user callable as a helper named after `func`
    (`_s2s_vjp_mylib_f`). Register rules before the first gradient request.
    `tolerance`: the relative accuracy of a gradient a numerical method computes
    (an ODE solver's), which s2sgrad's self-check then allows. `per_item`: for a
    `sequence` parameter, a template of one item's gradient (`item` its position),
    used where the call writes the items out, so that only the items that carry a
    gradient are computed.
    """
    load_table()   # (a user's rule then replaces the table's)
    if not callable(func):
        raise TypeError(f"defvjp: {func!r} is not callable")
    rule_name = name or display_name(func)
    extra: Dict[str, Callable] = {}
    if callable(params) and not isinstance(params, str):
        if grads:
            raise TypeError("defvjp: give either one callable or per-parameter gradients")
        params, grads, prelude, extra = _callable_rule(func, params)
    elif not isinstance(params, (str, inspect.Signature)):
        raise TypeError(f"defvjp: params must be a string like \"x, y\" or a callable, "
                        f"not {type(params).__name__}")
    else:
        sig = _signature(params)
        for param, grad in list(grads.items()):
            if callable(grad) and not isinstance(grad, str):
                helper_name = _register_user_helper(func, grad, param)
                extra[helper_name] = grad
                grads[param] = f"{helper_name}(g, ans, {_call_args(sig)})"
            elif not isinstance(grad, str):
                raise TypeError(f"defvjp: the gradient of {param!r} must be a template "
                                f"string or a callable")
    rule = make_rule(rule_name, params, grads, prelude=prelude, broadcast=broadcast,
                     sequence=sequence, outputs=outputs, view=view, func=func,
                     extra_names=extra, tolerance=tolerance, per_item=per_item)
    target = _TARGET[-1]
    target.functions[rule_key(func)] = (func, rule)
    target.nondiff_functions.pop(rule_key(func), None)
    target.constructors.pop(rule_key(func), None)
    return rule


# (id(func), parameter or "") -> helper name: re-registering keeps the name.
_USER_HELPERS: Dict[Tuple[int, str], str] = {}


def _register_user_helper(func: Callable, fn: Callable, part: str = "") -> str:
    """Bind a user's VJP callable as a runtime helper with a deterministic name."""
    key = (id(func), part)
    name = _USER_HELPERS.get(key)
    if name is None:
        stem = f"{getattr(func, '__module__', '') or ''}_{getattr(func, '__qualname__', '')}"
        stem = "".join(c if c.isalnum() else "_" for c in stem).strip("_") or "func"
        base = f"vjp_{stem}" + (f"_{part}" if part else "")
        name, k = base, 1
        while name in runtime.HELPERS or name in _USER_HELPERS.values():
            k += 1
            name = f"{base}_{k}"
        _USER_HELPERS[key] = name
    runtime.HELPERS[name] = fn
    return name


def _call_args(sig: inspect.Signature) -> str:
    """The parameters as call arguments: positionally, then by keyword."""
    out = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError("defvjp: a rule with *args or **kwargs needs template gradients")
        if p.kind is p.KEYWORD_ONLY or p.default is not p.empty:
            out.append(f"{p.name}={p.name}")
        else:
            out.append(p.name)
    return ", ".join(out)


def _callable_rule(func: Callable, vjp: Callable):
    """The template rule that calls a user's `vjp(g, ans, *params)`."""
    try:
        full = inspect.signature(vjp)
    except (TypeError, ValueError):
        raise TypeError(f"defvjp: cannot read the signature of {vjp!r}") from None
    ps = list(full.parameters.values())
    if len(ps) < 3 or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in ps):
        raise TypeError("defvjp: the callable must take (g, ans, param, ...) with explicit "
                        "parameters")
    params = [p.replace(annotation=inspect.Parameter.empty) for p in ps[2:]]
    sig = inspect.Signature(params)
    diff = [p.name for p in params if p.default is p.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not diff:
        raise TypeError("defvjp: the callable has no parameter without a default to "
                        "differentiate")
    helper_name = _register_user_helper(func, vjp)
    call = f"{helper_name}(g, ans, {_call_args(sig)})"
    if len(diff) == 1:
        grads = {diff[0]: f"none_to_zero({call}, {diff[0]})"}
        return sig, grads, "", {helper_name: vjp}
    grads = {p: f"none_to_zero(vjp_parts[{i}], {p})" for i, p in enumerate(diff)}
    return sig, grads, f"vjp_parts = {call}", {helper_name: vjp}


def alias(func: Callable, like: Callable) -> Rule:
    """`func` differentiates exactly as `like` (builtin abs is np.absolute on arrays)."""
    rule = lookup_function(like)
    if rule is None:
        raise ValueError(f"alias {func}: {like} has no rule")
    _TARGET[-1].aliases[rule_key(func)] = (func, rule)
    return rule


def defmethod(name: str, params: str, *, like: Optional[Callable] = None,
              **options) -> Rule:
    """Register the VJP of the array method `x.<name>(...)`; `self` is the array.

    With `like=np.func`, the method takes np.func's rule with `self` bound to
    its first parameter (x.sum(axis) is np.sum(x, axis)).
    """
    if like is not None:
        base = lookup_function(like)
        if base is None:
            raise ValueError(f"method {name}: {like} has no rule to share")
        first = base.params[0]
        grads = {("self" if p == first else p): t for p, t in base.texts.items()}
        options = dict(dict(prelude=ast.unparse(base.prelude) if base.prelude else "",
                            broadcast=base.broadcast, sequence=base.sequence,
                            outputs=base.outputs, view=base.view), **options)
        templates = {p: _rename_param(t, first, "self") for p, t in grads.items()}
        options["prelude"] = _rename_param(options["prelude"], first, "self")
        rule = make_rule(f"ndarray.{name}", params, templates, **options)
    else:
        rule = make_rule(f"ndarray.{name}", params, options.pop("grads", {}), **options)
    REGISTRY.methods[name] = rule
    return rule


def _rename_param(text: str, old: str, new: str) -> str:
    if not text or old == new:
        return text
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == old:
            node.id = new
    return ast.unparse(tree)


def defattr(name: str, **grads: str) -> Rule:
    """Register a differentiable array attribute such as `x.T` (param `self`)."""
    rule = make_rule(f"ndarray.{name}", "self", grads)
    REGISTRY.attributes[name] = rule
    return rule


def defop(op: type, symbol: str, like: Callable) -> Rule:
    """A Python operator shares the rule of its NumPy function (`*` is np.multiply)."""
    rule = lookup_function(like)
    if rule is None:
        raise ValueError(f"operator {symbol}: {like} has no rule")
    REGISTRY.operators[op] = rule
    return rule


def _rule_of(target) -> Rule:
    """A function's rule, or a method's (".name()") or an attribute's (".name")."""
    if isinstance(target, str):
        table = REGISTRY.methods if target.endswith("()") else REGISTRY.attributes
        rule = table.get(target.strip(".()"))
    else:
        rule = lookup_function(target)
    if rule is None:
        raise ValueError(f"{target!r} has no rule")
    return rule


def holomorphic(*targets) -> None:
    """Mark rules whose templates hold for complex arguments as written: under the
    convention of autograd and JAX (the gradient of a real loss L of z = x + iy is
    dL/dx - i dL/dy), a holomorphic f's cotangent is g * f'(z), unconjugated, and
    a linear rearrangement's is the same rearrangement of g."""
    for target in targets:
        _rule_of(target).holomorphic = True


def defcomplex(target, params: str, **grads: str) -> Rule:
    """The rule of `target` (a function, ".method()" or ".attribute") where an
    argument or its result is complex: for the functions that are not holomorphic
    (np.abs, np.real, np.conj, np.angle), under the same convention."""
    base = _rule_of(target)
    rule = make_rule(f"{base.name} (complex)", params, grads, broadcast=base.broadcast,
                     view=base.view, func=base.func)
    rule.holomorphic = True
    base.on_complex = rule
    return rule


def sequence_results(*funcs: Callable) -> None:
    """Functions with a rule whose result is a list or tuple, for all arguments or for
    some (np.split; np.linspace's retstep=True); `outputs=` says a fixed count."""
    for f in funcs:
        rule = lookup_function(f)
        if rule is None:
            raise ValueError(f"sequence_results: {display_name(f)} has no rule")
        rule.sequence_result = True


def nondiff(*funcs: Callable) -> None:
    """Functions whose result carries no gradient (floor, sign, comparisons, argmax)."""
    for f in funcs:
        _TARGET[-1].nondiff_functions[rule_key(f)] = f


def constructors(*funcs: Callable) -> None:
    """Array constructors: no gradient, and they return fresh arrays."""
    for f in funcs:
        _TARGET[-1].nondiff_functions[rule_key(f)] = f
        _TARGET[-1].constructors[rule_key(f)] = f


def nondiff_methods(*names: str) -> None:
    REGISTRY.nondiff_methods.update(names)


def nondiff_attributes(*names: str) -> None:
    REGISTRY.nondiff_attributes.update(names)


# Modules whose functions the compiler differentiates from their source, like a
# user's, where a function has no rule: the table's helpers are plain NumPy, so the
# derivatives of a first-order adjoint that calls them (grad of grad, hvp, any
# order) come from the helper's one definition, not from a second written by hand.
_SOURCE_MODULES: Set[str] = set()


def differentiate_source_of(module: types.ModuleType) -> None:
    """Let the compiler read and differentiate the functions of `module` that have
    no rule (a helper with a rule keeps it: a shortcut, or a construct the compiler
    does not differentiate)."""
    _SOURCE_MODULES.add(module.__name__)


def differentiated_from_source(func: Callable) -> bool:
    load_table()
    return isinstance(func, types.FunctionType) and func.__module__ in _SOURCE_MODULES


def lookup_function(func: Callable) -> Optional[Rule]:
    load_table()
    key = rule_key(func)
    entry = REGISTRY.functions.get(key) or REGISTRY.aliases.get(key)
    if entry is None:
        entry = LAZY.functions.get(key) or LAZY.aliases.get(key)
        if entry is None and _PENDING and _load_lazy():
            entry = LAZY.functions.get(key) or LAZY.aliases.get(key)
    return entry[1] if entry is not None and _same_callable(entry[0], func) else None


def is_nondiff(func: Callable) -> bool:
    load_table()
    key = rule_key(func)
    stored = REGISTRY.nondiff_functions.get(key)
    if stored is None and key not in REGISTRY.functions:
        stored = LAZY.nondiff_functions.get(key)
        if stored is None and _PENDING and _load_lazy():
            stored = LAZY.nondiff_functions.get(key)
    return stored is not None and _same_callable(stored, func)


def is_constructor(func: Callable) -> bool:
    load_table()
    return REGISTRY.constructors.get(rule_key(func)) is func


def count() -> int:
    """How many functions, methods, attributes and operators have a gradient rule.

    s2sgrad's own runtime helpers (rules named _s2s_*, for second derivatives)
    are not counted: they are not NumPy functions.
    """
    load_table()
    load_scipy_rules()
    functions = [r for _, r in _function_entries() if not r.name.startswith("_s2s_")]
    return len(functions) + len(REGISTRY.methods) + len(REGISTRY.attributes)


# The rules of the table as shipped (kept referenced, so that no later rule can reuse
# an id): their broadcast=True rules are elementwise, and tests/rule_cases.py checks it.
_SHIPPED: List[Rule] = []
_SHIPPED_IDS: Set[int] = set()


def mark_shipped() -> None:
    """Record the rules registered so far as the shipped table (load_table); rules
    registered from now on are the user's, checked as they are registered."""
    global _SHIPPING
    _SHIPPING = False
    _SHIPPED[:] = [r for _, r in _function_entries()] + list(REGISTRY.methods.values()) + \
        list(REGISTRY.attributes.values())
    _SHIPPED_IDS.clear()
    _SHIPPED_IDS.update(id(rule) for rule in _SHIPPED)


def is_shipped(rule: Rule) -> bool:
    """Whether the rule is one of the table as shipped (not a user's s2sgrad.defvjp)."""
    load_table()
    return id(rule) in _SHIPPED_IDS


def returns_an_argument(func) -> bool:
    """Builtin max and min return one of their arguments itself (no copy): an
    in-place update of the result updates that argument."""
    return func is max or func is min


def is_elementwise(rule: Rule) -> bool:
    """Whether the rule's result has the broadcast shape of its operands, item for
    item: a ufunc without a core signature (np.matmul is a gufunc: it is not), or a
    broadcast=True rule of the shipped table. A user's broadcast=True rule need not
    be elementwise (a reduction over broadcast batches is too), so it does not count."""
    load_table()
    func = rule.func
    if isinstance(func, np.ufunc):
        return func.signature is None
    return rule.broadcast and id(rule) in _SHIPPED_IDS


def _function_entries() -> List[Tuple[Callable, Rule]]:
    """The function rules: the table's, then SciPy's loaded ones a user has not replaced."""
    return list(REGISTRY.functions.values()) + \
        [entry for key, entry in LAZY.functions.items() if key not in REGISTRY.functions]


def all_rules() -> List[Rule]:
    """Every rule (SciPy's too, when SciPy is installed: this loads them)."""
    load_table()
    load_scipy_rules()
    rules = [r for _, r in _function_entries()]
    return rules + list(REGISTRY.methods.values()) + list(REGISTRY.attributes.values())

