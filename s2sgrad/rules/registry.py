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
import inspect
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

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
    grads: Dict[str, ast.expr]
    texts: Dict[str, str]
    prelude: List[ast.stmt] = field(default_factory=list)
    broadcast: bool = False
    sequence: FrozenSet[str] = frozenset()
    outputs: Optional[int] = None
    view: bool = False
    func: Optional[Callable] = None
    # Registered from outside the built-in table (s2sgrad.defvjp): user helpers.
    extra_names: Dict[str, Callable] = field(default_factory=dict)

    @property
    def params(self) -> List[str]:
        return list(self.signature.parameters)

    def differentiable(self) -> List[str]:
        return [p for p in self.params if p in self.grads]


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


def _signature(params: str) -> inspect.Signature:
    ns: dict = {"np": np}
    exec(f"def _rule_params({params}):\n    pass", ns)  # noqa: S102 - table text, not user input
    return inspect.signature(ns["_rule_params"])


def _parse_template(text: str, where: str) -> ast.expr:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"gradient template for {where} does not parse: {text!r} "
                         f"({exc})") from None


def _check_names(rule: Rule, local_names: Iterable[str]) -> None:
    allowed = (set(rule.params) | {"g", "ans", "np"} | set(runtime.HELPERS)
               | set(local_names) | TEMPLATE_BUILTINS | set(rule.extra_names))
    nodes = list(rule.grads.values()) + list(rule.prelude)
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id not in allowed:
                raise ValueError(f"gradient template for {rule.name} uses unknown name "
                                 f"{sub.id!r}; known: parameters, g, ans, np and the helpers "
                                 f"in s2sgrad.runtime")


def make_rule(name: str, params: str, grads: Dict[str, str], *, prelude: str = "",
              broadcast: bool = False, sequence: Iterable[str] = (),
              outputs: Optional[int] = None, view: bool = False,
              func: Optional[Callable] = None,
              extra_names: Optional[Dict[str, Callable]] = None) -> Rule:
    sig = _signature(params)
    unknown = set(grads) - set(sig.parameters)
    if unknown:
        raise ValueError(f"rule {name}: gradients given for unknown parameters {sorted(unknown)}")
    pre = ast.parse(prelude).body if prelude.strip() else []
    rule = Rule(name=name, signature=sig,
                grads={p: _parse_template(t, f"{name}({p})") for p, t in grads.items()},
                texts=dict(grads), prelude=pre, broadcast=broadcast,
                sequence=frozenset(sequence), outputs=outputs, view=view, func=func,
                extra_names=dict(extra_names or {}))
    local_names = {n.id for s in pre for n in ast.walk(s)
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    _check_names(rule, local_names)
    return rule


def _display_name(func: Callable) -> str:
    mod = getattr(func, "__module__", None) or ""
    name = getattr(func, "__name__", repr(func))
    if isinstance(func, np.ufunc) or mod.startswith("numpy"):
        if mod.startswith("numpy.linalg"):
            return f"np.linalg.{name}"
        if mod.startswith("numpy.fft"):
            return f"np.fft.{name}"
        return f"np.{name}"
    return f"{mod}.{name}" if mod else name


def defvjp(func: Callable, params: str, *, prelude: str = "", broadcast: bool = False,
           sequence: Iterable[str] = (), outputs: Optional[int] = None, view: bool = False,
           name: Optional[str] = None, **grads: str) -> Rule:
    """Register the VJP of `func`: one template per differentiable parameter."""
    rule = make_rule(name or _display_name(func), params, grads, prelude=prelude,
                     broadcast=broadcast, sequence=sequence, outputs=outputs, view=view,
                     func=func)
    REGISTRY.functions[id(func)] = (func, rule)
    REGISTRY.nondiff_functions.pop(id(func), None)
    return rule


def alias(func: Callable, like: Callable) -> Rule:
    """`func` differentiates exactly as `like` (builtin abs is np.absolute on arrays)."""
    rule = lookup_function(like)
    if rule is None:
        raise ValueError(f"alias {func}: {like} has no rule")
    REGISTRY.aliases[id(func)] = (func, rule)
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


def nondiff(*funcs: Callable) -> None:
    """Functions whose result carries no gradient (floor, sign, comparisons, argmax)."""
    for f in funcs:
        REGISTRY.nondiff_functions[id(f)] = f


def constructors(*funcs: Callable) -> None:
    """Array constructors: no gradient, and they return fresh arrays."""
    for f in funcs:
        REGISTRY.nondiff_functions[id(f)] = f
        REGISTRY.constructors[id(f)] = f


def nondiff_methods(*names: str) -> None:
    REGISTRY.nondiff_methods.update(names)


def nondiff_attributes(*names: str) -> None:
    REGISTRY.nondiff_attributes.update(names)


def lookup_function(func: Callable) -> Optional[Rule]:
    entry = REGISTRY.functions.get(id(func)) or REGISTRY.aliases.get(id(func))
    return entry[1] if entry is not None and entry[0] is func else None


def is_nondiff(func: Callable) -> bool:
    return REGISTRY.nondiff_functions.get(id(func)) is func


def is_constructor(func: Callable) -> bool:
    return REGISTRY.constructors.get(id(func)) is func


def count() -> int:
    """How many functions, methods, attributes and operators have a gradient rule."""
    return len(REGISTRY.functions) + len(REGISTRY.methods) + len(REGISTRY.attributes)


def all_rules() -> List[Rule]:
    rules = [r for _, r in REGISTRY.functions.values()]
    return rules + list(REGISTRY.methods.values()) + list(REGISTRY.attributes.values())

