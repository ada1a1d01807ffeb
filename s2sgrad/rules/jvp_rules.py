"""Forward-mode (JVP) rules: the tangent of each entry of the gradient table.

The reverse-mode table (`numpy_rules.py`) gives each function's VJP. Forward
mode needs the transpose, the JVP. Most JVPs follow from the VJP rule or from
the function itself, exactly and automatically:

- **pointwise** functions (ufuncs, `broadcast=True` rules): a VJP template is
  linear in `g` with pointwise factors (`g * np.cos(x)`), and for a diagonal
  Jacobian the transpose is the map itself, so the tangent contribution of a
  parameter is the template with that parameter's tangent in the place of `g`
  (`x_dot * np.cos(x)`). Contributions are summed over the parameters and
  broadcast to the result's shape; no unbroadcast is needed.
- **linear** functions (sum, reshape, transpose, concatenate, ...) apply
  themselves to the tangents: `np.sum(x_dot, axis=0)`.
- **multilinear** functions (matmul, dot, tensordot, einsum, outer, kron, ...)
  are the sum over their operands of the function with one operand replaced
  by its tangent: `a_dot @ b + a @ b_dot`.
- **reductions** whose output elements each read their own slice of the
  input (max, prod, norm, var, median, det, ...): the VJP applied to ones
  gives each output's row of the Jacobian, so the tangent is
  `sum(vjp(ones) * x_dot)` over the reduced axes.

The others have explicit templates here (linalg decompositions, sort, cumprod,
interp, ...), most of them calling a helper in `s2sgrad/runtime/tangent.py`.
In a template, `<param>_dot` is the tangent of a parameter, `ans` the result,
`np` NumPy, and helpers are called by name, as in the VJP table. A rule
without a JVP makes forward mode raise `TransformError` at the user's line,
never a zero; `tests/test_forward_mode.py` checks that every VJP rule has a
JVP here (derived or explicit) and runs every case of `tests/rule_cases.py`
through it against finite differences.
"""
from __future__ import annotations

import ast
import copy
import inspect
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple, Union

from .. import runtime
from . import registry
from .registry import REGISTRY, TEMPLATE_BUILTINS, Rule, all_rules, lookup_function


@dataclass
class JvpRule:
    """The tangent of one function: the sum of the contributions below.

    `parts` map a parameter to its contribution (a template reading
    `<param>_dot`); `linear` params are differentiated together by calling the
    function itself on their tangents (zeros for the constant ones);
    `multilinear` calls it once per differentiated operand; `joint` is one
    template for the `joint_params` together (a constant one's tangent is None).
    """

    name: str
    how: str
    parts: Dict[str, ast.expr] = field(default_factory=dict)
    part_preludes: Dict[str, List[ast.stmt]] = field(default_factory=dict)
    linear: FrozenSet[str] = frozenset()
    multilinear: bool = False
    joint: Optional[ast.expr] = None
    joint_params: FrozenSet[str] = frozenset()
    prelude: List[ast.stmt] = field(default_factory=list)
    broadcast: bool = False
    cast: str = ""            # "dtype": cast when dtype= is given; "always"
    vjp: Optional[Rule] = None
    texts: Dict[str, str] = field(default_factory=dict)
    # Holds for complex arguments too: a JVP derived from a rule that holds for them
    # (holomorphic: its VJP is g f'(z), the JVP f'(z) z_dot; or R-linear), or a
    # template declared so (`defjvp(..., complex_ok=True)`); else forward mode refuses
    # the operation on complex values.
    complex_ok: bool = False
    # No template: the transpose of the VJP, which the compiler derives by reverse
    # mode with respect to g (compiler/tangent/transposed.py).
    transposed: bool = False

    def params(self) -> List[str]:
        return list(self.vjp.params) if self.vjp is not None else []


# Explicit entries by the name of the VJP rule; built lazily against the current rule.
_SPECS: Dict[str, dict] = {}
# Rules deliberately without a JVP (name -> why); forward mode raises for them.
UNSUPPORTED: Dict[str, str] = {}
_BUILT: Dict[int, Tuple[Rule, Optional[JvpRule]]] = {}


def _register(names: Iterable[str], **spec) -> None:
    for name in names:
        _SPECS[name] = dict(spec)
        _BUILT.clear()


def pointwise(*names: str) -> None:
    """Elementwise functions whose VJP template is g times pointwise factors, for
    which the rule's flags do not say so: not a ufunc, or a rule of your own
    (`jvp_rules.pointwise("mylib.scale")` after `s2sgrad.defvjp(mylib.scale, ...)`)."""
    _register(names, kind="pointwise")


def linear(*names: str, cast: str = "") -> None:
    """Functions linear in all their differentiable parameters together."""
    _register(names, kind="linear", cast=cast)


def multilinear(*names: str) -> None:
    """Functions linear in each differentiable operand separately (products)."""
    _register(names, kind="multilinear")


def reduction(name: str, param: str = "a", axis: str = "axis", keepdims: str = "keepdims",
              **parts: str) -> None:
    """A reduction over `axis`: each output element reads only its own slice, so the
    VJP of ones gives the weights of its tangent (`parts` add other parameters)."""
    _register([name], kind="reduction", param=param, axis=axis, keepdims=keepdims,
              parts=parts)


def defjvp(func_or_name: Union[str, Callable], *, prelude: str = "", linear: Iterable[str] = (),
           joint: Optional[str] = None, joint_params: Iterable[str] = (),
           broadcast: bool = False, cast: str = "", complex_ok: bool = False,
           **parts: str) -> None:
    """Register the JVP of a function that has a VJP rule.

    Each keyword gives one parameter's contribution to the output tangent, a
    NumPy template reading `<param>_dot` (that parameter's tangent), the
    parameters, `ans` and `np`:

        defjvp(mylib.softplus, x="x_dot / (1.0 + np.exp(-x))")

    `linear=("a", "b")` differentiates those parameters by calling the function
    on their tangents; `joint=` is one template for `joint_params` together,
    in which the tangent of a parameter that is not differentiated is None.
    """
    if isinstance(func_or_name, str):
        name = func_or_name
    else:
        rule = lookup_function(func_or_name)
        if rule is None:
            raise ValueError(f"defjvp: {func_or_name!r} has no gradient rule; register its "
                             f"VJP first with s2sgrad.defvjp")
        name = rule.name
    _register([name], kind="template", prelude=prelude, linear=tuple(linear), joint=joint,
              joint_params=tuple(joint_params), broadcast=broadcast, cast=cast, parts=parts,
              complex_ok=complex_ok)


def unsupported(name: str, why: str) -> None:
    """A rule deliberately left without a JVP (forward mode raises for it)."""
    UNSUPPORTED[name] = why
    _SPECS.pop(name, None)
    _BUILT.clear()


# -- building a rule -------------------------------------------------------------------------
def lookup(rule: Rule) -> Optional[JvpRule]:
    """The JVP of a VJP rule: explicit, derived, or None (forward mode must raise)."""
    entry = _BUILT.get(id(rule))
    if entry is not None and entry[0] is rule:
        return entry[1]
    built = _build(rule)
    _BUILT[id(rule)] = (rule, built)    # the rule is kept alive: its id is not reused
    return built


def _build(rule: Rule) -> Optional[JvpRule]:
    if rule.name in UNSUPPORTED:
        return None
    spec = _SPECS.get(rule.name)
    if spec is not None:
        try:
            return _from_spec(rule, spec)
        except _Mismatch:
            pass  # the VJP rule was replaced by one with other parameters
    if _is_pointwise(rule) and not rule.name.endswith(" (complex)"):
        # (a rule for complex arguments that is not holomorphic, np.abs's say: its
        # VJP's template with the tangent for g is not its JVP; it needs one of its own)
        return _pointwise(rule)
    if transposable(rule) and not rule.name.endswith(" (complex)"):
        # (the transpose is taken in real arithmetic: a rule for complex arguments
        # keeps a template of its own)
        return JvpRule(name=rule.name, how=TRANSPOSED, vjp=rule, transposed=True)
    return None


TRANSPOSED = "transposed: the reverse mode of the VJP, which is linear in g"


def transposable(rule: Rule) -> bool:
    """Whether the rule's VJP reads as a plain function of its cotangent and
    parameters (no *args or **kwargs, no per-item templates)."""
    kinds = {p.kind for p in rule.signature.parameters.values()}
    return inspect.Parameter.VAR_POSITIONAL not in kinds and \
        inspect.Parameter.VAR_KEYWORD not in kinds and not rule.per_item and \
        not {"g", "ans"} & set(rule.params)


class _Mismatch(Exception):
    pass


def _is_pointwise(rule: Rule) -> bool:
    """Elementwise for sure (registry.is_elementwise), with one result and no
    sequence parameter. A user's `broadcast=True` rule gets no derived JVP:
    declare it with `pointwise(name)` or give a template with `defjvp`."""
    return registry.is_elementwise(rule) and rule.outputs is None and not rule.sequence


def _rename(node, mapping: Dict[str, str]):
    node = copy.deepcopy(node)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in mapping:
            sub.id = mapping[sub.id]
    return node


def _pointwise(rule: Rule) -> JvpRule:
    parts, preludes, texts = {}, {}, {}
    for param, template in rule.grads.items():
        tangent = f"{param}_dot"
        parts[param] = _rename(template, {"g": tangent})
        preludes[param] = [_rename(s, {"g": tangent}) for s in rule.prelude]
        texts[param] = ast.unparse(parts[param])
    return JvpRule(rule.name, "pointwise, from the VJP (g replaced by the tangent)",
                   parts=parts, part_preludes=preludes, broadcast=True, vjp=rule, texts=texts,
                   complex_ok=rule.holomorphic)


def _parse(text: str, where: str) -> ast.expr:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"JVP template for {where} does not parse: {text!r} ({exc})") from None


def _is_unsupported_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
        node.func.id == "unsupported"


def _from_spec(rule: Rule, spec: dict) -> JvpRule:
    kind = spec["kind"]
    params = set(rule.params)
    if kind == "pointwise":
        return _pointwise(rule)
    if kind == "linear":
        return JvpRule(rule.name, "linear: the function applied to the tangents",
                       linear=frozenset(rule.grads), cast=spec.get("cast", ""), vjp=rule,
                       complex_ok=True)
    if kind == "multilinear":
        return JvpRule(rule.name, "multilinear: once per operand, with its tangent",
                       multilinear=True, vjp=rule, complex_ok=True)
    if kind == "reduction":
        param = spec["param"]
        if param not in rule.grads:
            raise _Mismatch(param)
        template = rule.grads[param]
        ones = ast.parse("ones_like(ans)", mode="eval").body
        weights = _substitute_g(template, ones)
        axis, keepdims = spec["axis"], spec["keepdims"]
        text = (f"reduce_tangent(W, {param}_dot, axis={axis}, keepdims={keepdims})"
                if keepdims else f"reduce_tangent(W, {param}_dot, axis={axis})")
        part = _parse(text, rule.name)
        for sub in ast.walk(part):
            if isinstance(sub, ast.Call):
                sub.args = [weights if isinstance(a, ast.Name) and a.id == "W" else a
                            for a in sub.args]
        parts = {param: part}
        preludes = {param: [_substitute_g(s, ones) for s in rule.prelude]}
        texts = {param: ast.unparse(part)}
        for p, t in spec.get("parts", {}).items():
            if p not in params:
                raise _Mismatch(p)
            parts[p] = _parse(t, f"{rule.name}({p})")
            texts[p] = t
        out = JvpRule(rule.name, "reduction: the VJP of ones weighs each output's slice",
                      parts=parts, part_preludes=preludes, vjp=rule, texts=texts,
                      broadcast=True, complex_ok=rule.holomorphic)
        _check_names(out)
        return out
    # an explicit template
    for p in list(spec.get("parts", {})) + list(spec.get("linear", ())) + \
            list(spec.get("joint_params", ())):
        if p not in params:
            raise _Mismatch(p)
    parts = {p: _parse(t, f"{rule.name}({p})") for p, t in spec.get("parts", {}).items()}
    prelude = ast.parse(spec["prelude"]).body if spec.get("prelude", "").strip() else []
    joint = _parse(spec["joint"], rule.name) if spec.get("joint") else None
    out = JvpRule(rule.name, "template", parts=parts, linear=frozenset(spec.get("linear", ())),
                  joint=joint, joint_params=frozenset(spec.get("joint_params", ())),
                  prelude=prelude, broadcast=spec.get("broadcast", False),
                  cast=spec.get("cast", ""), vjp=rule, complex_ok=spec.get("complex_ok", False),
                  texts=dict(spec.get("parts", {}), **({"joint": spec["joint"]}
                                                       if spec.get("joint") else {})))
    _check_names(out)
    return out


def _substitute_g(node, value: ast.expr):
    class Sub(ast.NodeTransformer):
        def visit_Name(self, n):
            return copy.deepcopy(value) if n.id == "g" else n
    return Sub().visit(copy.deepcopy(node))


def _check_names(rule: JvpRule) -> None:
    params = rule.params()
    locals_ = {n.id for s in rule.prelude + [x for ps in rule.part_preludes.values() for x in ps]
               for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    allowed = (set(params) | {f"{p}_dot" for p in params} | {"ans", "np"}
               | set(runtime.HELPERS) | TEMPLATE_BUILTINS | locals_
               | set(rule.vjp.extra_names if rule.vjp is not None else ()))
    nodes = list(rule.parts.values()) + rule.prelude + \
        [s for ps in rule.part_preludes.values() for s in ps] + \
        ([rule.joint] if rule.joint is not None else [])
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id not in allowed:
                raise ValueError(f"JVP template for {rule.name} uses unknown name {sub.id!r}")


def unsupported_part(rule: Rule, param: str) -> Optional[ast.expr]:
    """The VJP's `unsupported(...)` call for a parameter, if it has one: forward mode
    raises the same error at run time for that parameter."""
    template = rule.grads.get(param)
    if template is not None and _is_unsupported_call(template):
        return template
    return None


def coverage() -> Dict[str, str]:
    """How each rule of the gradient table gets its JVP (name -> description)."""
    out = {}
    for rule in all_rules():
        jr = lookup(rule)
        out[rule.name] = jr.how if jr is not None else \
            f"none: {UNSUPPORTED.get(rule.name, 'no JVP rule')}"
    return out


_ = (inspect, REGISTRY)

# =============================================================================================
# The table
# =============================================================================================

# -- elementwise functions that are not ufuncs ------------------------------------------------
pointwise("np.sinc", "np.real", "np.imag", "np.real_if_close", "ndarray.real", "ndarray.imag",
          "ndarray.conj", "ndarray.conjugate", "_s2s_safe_log")
defjvp("np.nan_to_num", broadcast=True,
       x="np.where(np.isfinite(x), x_dot, 0.0)",
       nan="np.where(np.isnan(x), nan_dot, 0.0)",
       posinf="np.where(np.isposinf(x), posinf_dot, 0.0)",
       neginf="np.where(np.isneginf(x), neginf_dot, 0.0)")
defjvp("np.divmod", joint="divmod_jvp(x1, x2, x1_dot, x2_dot, ans)", joint_params=("x1", "x2"))
defjvp("np.modf", joint="(x_dot, zero_tangent(ans[1]))", joint_params=("x",))
defjvp("np.frexp", joint="frexp_jvp(x_dot, ans)", joint_params=("x",))

# -- products -----------------------------------------------------------------------------------
multilinear("np.matmul", "np.dot", "ndarray.dot", "np.vdot", "np.inner", "np.outer",
            "np.tensordot", "np.einsum", "np.kron", "np.cross", "np.vecdot", "np.convolve",
            "np.correlate", "np.trapezoid",
            "_s2s_matmul_grad_a", "_s2s_matmul_grad_b", "_s2s_dot_grad_a", "_s2s_dot_grad_b")
defjvp("_s2s_index_concat", joint="index_concat_linear(maker, items, items_dot)",
       joint_params=("items",))
defjvp("np.linalg.multi_dot", joint="multi_dot_jvp(arrays, arrays_dot)",
       joint_params=("arrays",))

# -- linear: reductions, cumulative sums, shape ------------------------------------------------
linear("np.sum", "np.mean", "ndarray.sum", "ndarray.mean", "np.cumsum", "ndarray.cumsum",
       "np.cumulative_sum", "np.trace", "ndarray.trace", "np.linalg.trace",
       "np.concatenate", "np.stack", "np.vstack", "np.hstack", "np.array", "np.asarray",
       "np.asanyarray", "np.linspace", cast="dtype")
linear("np.full", "np.full_like", cast="always")
linear("builtins.float", "np.float64")
linear("np.reshape", "np.transpose", "ndarray.reshape", "ndarray.transpose", "ndarray.T",
       "ndarray.mT", "np.diff", "np.ediff1d", "np.linalg.diagonal", "np.ravel", "np.squeeze",
       "np.expand_dims", "np.swapaxes", "np.moveaxis", "np.rollaxis", "np.broadcast_to",
       "np.broadcast_arrays", "np.atleast_1d", "np.atleast_2d", "np.atleast_3d",
       "np.dstack", "np.column_stack", "np.split", "np.array_split", "np.hsplit",
       "np.vsplit", "np.dsplit", "np.unstack", "np.tile", "np.repeat", "np.resize",
       "np.flip", "np.fliplr", "np.flipud", "np.roll", "np.rot90", "np.diag", "np.diagflat",
       "np.diagonal", "np.triu", "np.tril", "np.take", "np.take_along_axis", "np.compress",
       "np.extract", "np.delete", "np.insert", "np.append", "np.select", "np.copy",
       "np.meshgrid", "np.matrix_transpose", "np.bincount", "np.fft.fftshift",
       "np.fft.ifftshift",
       "ndarray.ravel", "ndarray.flatten", "ndarray.squeeze", "ndarray.swapaxes",
       "ndarray.repeat", "ndarray.diagonal", "ndarray.take", "ndarray.copy", "ndarray.item",
       "ndarray.compress",
       # s2sgrad's own helpers (forward over reverse: the tangent of an adjoint)
       "_s2s_unbroadcast", "_s2s_unbroadcast_matmul", "_s2s_broadcast_like",
       "_s2s_expand_reduced", "_s2s_transpose_grad",
       "_s2s_copy_adjoint", "_s2s_copy_value", "_s2s_snapshot", "_s2s_none_to_zero",
       "_s2s_add", "_s2s_copy_item", "_s2s_scatter_add", "_s2s_with_zeroed",
       "_s2s_with_item", "_s2s_written_grad", "_s2s_push", "_s2s_last", "_s2s_drop_last",
       "_s2s_last_grad", "_s2s_items_like", "_s2s_items_joined", "_s2s_loop_items_grad",
       "_s2s_loop_items_tangent", "_s2s_as_array", "_s2s_cast_into", "_s2s_swap_last_axes",
       "_s2s_sum_to_shape", "_s2s_dict_item_grad", "_s2s_dict_item_transpose",
       "_s2s_split_as_items", "_s2s_real_part", "_s2s_check_count", "_s2s_as_returned")
defjvp("builtins.sorted", iterable="sorted_like(iterable_dot, iterable, key, reverse)")
defjvp("np.nansum", a="np.sum(np.where(np.isnan(a), 0.0, a_dot), axis=axis, keepdims=keepdims)",
       cast="dtype")
defjvp("np.nancumsum", a="np.cumsum(np.where(np.isnan(a), 0.0, a_dot), axis=axis)",
       cast="dtype")
defjvp("np.pad", joint="pad_jvp(array_dot, constant_values_dot, pad_width, mode, reflect_type)",
       joint_params=("array", "constant_values"), complex_ok=True)
defjvp("ndarray.astype", self="cast_tangent(self_dot, ans)", complex_ok=True)

# -- reductions (the VJP of ones weighs each output's slice) -----------------------------------
for _name in ("np.max", "np.min"):
    reduction(_name, initial="extremum_initial_jvp(initial_dot, a, ans, initial, axis=axis, "
                             "keepdims=keepdims, where=where)")
for _name in ("ndarray.max", "ndarray.min"):
    reduction(_name, param="self",
              initial="extremum_initial_jvp(initial_dot, self, ans, initial, axis=axis, "
                      "keepdims=keepdims, where=where)")
reduction("np.prod", initial="initial_dot * np.prod(a, axis=axis, keepdims=keepdims, "
                             "where=where)")
reduction("ndarray.prod", param="self",
          initial="initial_dot * np.prod(self, axis=axis, keepdims=keepdims, where=where)")
for _name in ("np.nanmax", "np.nanmin", "np.var", "np.std", "np.nanvar", "np.nanstd",
              "np.nanmean", "np.nanprod", "np.ptp", "np.median", "np.nanmedian"):
    reduction(_name)
for _name in ("ndarray.var", "ndarray.std"):
    reduction(_name, param="self")
reduction("np.linalg.norm", param="x")
reduction("np.linalg.vector_norm", param="x")
reduction("np.linalg.matrix_norm", param="x", axis="(-2, -1)")
reduction("np.linalg.det", axis="(-2, -1)", keepdims="")
_QUANTILE_KW = ("axis=axis, method=method, keepdims=keepdims, overwrite_input=overwrite_input, "
                "weights=weights, interpolation=interpolation")
for _name, _q, _nan in (("np.quantile", "q", False), ("np.nanquantile", "q", True),
                        ("np.percentile", "np.asarray(q) / 100.0", False),
                        ("np.nanpercentile", "np.asarray(q) / 100.0", True)):
    defjvp(_name, a=f"quantile_jvp(a_dot, a, {_q}, ans, {_QUANTILE_KW}, ignore_nan={_nan})")
defjvp("np.average", joint="average_jvp(a, weights, a_dot, weights_dot, ans, axis=axis, "
                           "returned=returned, keepdims=keepdims)",
       joint_params=("a", "weights"))

# -- cumulative products and sorting ----------------------------------------------------------
defjvp("np.cumprod", a="cumprod_jvp(a_dot, a, axis)", complex_ok=True)
defjvp("ndarray.cumprod", self="cumprod_jvp(self_dot, self, axis)", complex_ok=True)
defjvp("np.nancumprod", a="cumprod_jvp(np.where(np.isnan(a), 0.0, a_dot), "
                          "np.where(np.isnan(a), 1.0, a), axis)")
defjvp("np.cumulative_prod", x="cumulative_prod_jvp(x_dot, x, axis, include_initial)")
defjvp("np.sort", a="sort_jvp(a_dot, a, axis)")
defjvp("np.partition", a="partition_jvp(a_dot, a, ans, axis)")
defjvp("np.gradient", linear=("f",))
defjvp("np.astype", x="cast_tangent(x_dot, ans)", complex_ok=True)

# -- statistics ---------------------------------------------------------------------------------
defjvp("np.cov", joint="cov_jvp(m, y, m_dot, y_dot, rowvar, bias, ddof, fweights, aweights, "
                       "dtype)", joint_params=("m", "y"))
defjvp("np.corrcoef", joint="corrcoef_jvp(x, y, x_dot, y_dot, ans, rowvar)",
       joint_params=("x", "y"))

# -- interpolation and polynomials ---------------------------------------------------------------
defjvp("np.interp", linear=("fp", "left", "right"),
       x="x_dot * interp_slope(x, xp, fp, period)",
       xp="-interp_slope(x, xp, fp, period) * np.interp(x, xp, xp_dot)")
defjvp("np.polyval", linear=("p",), x="x_dot * polyval_slope(p, x)")
defjvp("np.polyfit", joint="polyfit_jvp(x, y, x_dot, y_dot, deg, ans, rcond, full, w, cov)",
       joint_params=("x", "y"))
defjvp("np.vander", x="np.expand_dims(x_dot, -1) * vander_slopes(x, N, increasing)")
defjvp("np.polynomial.polynomial.polyval", linear=("c",),
       x="x_dot * polynomial_slope(c, x)")

# -- constructors ----------------------------------------------------------------------------------
defjvp("np.logspace", joint="logspace_jvp(start_dot, stop_dot, base_dot, base, ans, num, "
                            "endpoint, axis)", joint_params=("start", "stop", "base"))
defjvp("np.geomspace", joint="geomspace_jvp(start, stop, start_dot, stop_dot, ans, num, "
                             "endpoint, axis)", joint_params=("start", "stop"))
defjvp("np.arange", joint="arange_jvp(start_dot, step_dot, ans, stop)",
       joint_params=("start", "stop", "step"))

# -- linear algebra -----------------------------------------------------------------------------
defjvp("np.linalg.inv", a="-ans @ a_dot @ ans", complex_ok=True)
defjvp("np.linalg.solve", joint="solve_jvp(a, b, a_dot, b_dot, ans)", joint_params=("a", "b"),
       complex_ok=True)
defjvp("np.linalg.slogdet", joint="slogdet_jvp(a, a_dot, ans)", joint_params=("a",))
defjvp("np.linalg.cholesky", a="cholesky_jvp(a_dot, ans, upper)")
defjvp("np.linalg.eigh", joint="eigh_jvp(a_dot, ans, UPLO)", joint_params=("a",))
defjvp("np.linalg.eigvalsh", a="eigvalsh_jvp(a_dot, a, UPLO)", complex_ok=True)
defjvp("np.linalg.svd", joint="svd_jvp(a_dot, a, ans, full_matrices, compute_uv, hermitian)",
       joint_params=("a",))
defjvp("np.linalg.svdvals", x="svdvals_jvp(x_dot, x)", complex_ok=True)
defjvp("np.linalg.lstsq", joint="lstsq_jvp(a, b, a_dot, b_dot, ans, rcond)",
       joint_params=("a", "b"))
defjvp("np.linalg.pinv", a="pinv_jvp(a_dot, a, ans, hermitian)")
defjvp("np.linalg.qr", joint="qr_jvp(a_dot, a, ans, mode)", joint_params=("a",))
defjvp("np.linalg.matrix_power", a="matrix_power_jvp(a_dot, a, n)")
defjvp("np.linalg.eig", joint="eig_jvp(a_dot, ans)", joint_params=("a",))
defjvp("np.linalg.eigvals", a="eigvals_jvp(a_dot, a)")

# -- softmax, log-softmax, logsumexp and the sigmoid written out (normalize/fused.py) ---------
# (holomorphic: the templates hold for complex values, like the VJPs)
defjvp("_s2s_log_softmax", x="x_dot - np.sum(np.exp(ans) * x_dot, axis=axis, keepdims=True)",
       complex_ok=True)
defjvp("_s2s_softmax", x="ans * (x_dot - np.sum(ans * x_dot, axis=axis, keepdims=True))",
       complex_ok=True)
defjvp("_s2s_logsumexp", x="np.sum(np.exp(x - expand_reduced(ans, x, axis, keepdims)) * x_dot, "
                          "axis=axis, keepdims=keepdims)", complex_ok=True)
defjvp("_s2s_sigmoid_exp", x="x_dot * ans * (1.0 - ans)", complex_ok=True)
defjvp("_s2s_sigmoid_tanh", x="x_dot * ans * (1.0 - ans)", complex_ok=True)

# -- scipy.special (the rules exist only when SciPy imports) -----------------------------------
defjvp("scipy.special.softmax", x="ans * (x_dot - np.sum(x_dot * ans, axis=axis, keepdims=True))")
defjvp("scipy.special.log_softmax",
       x="x_dot - np.sum(np.exp(ans) * x_dot, axis=axis, keepdims=True)")
defjvp("scipy.special.logsumexp", joint="logsumexp_jvp(a, b, a_dot, b_dot, ans, axis, keepdims, "
                                        "return_sign)", joint_params=("a", "b"))


# -- scipy.stats: the elementwise distributions' JVPs are derived (pointwise); these are not ----
_DIRICHLET = "A = np.reshape(alpha, dirichlet_shape(x, alpha))"
_DIRICHLET_ALPHA = ("np.sum((np.log(x) - scipy_digamma(A) + scipy_digamma(np.sum(alpha))) * "
                    "np.reshape(alpha_dot, np.shape(A)), axis=0)")
defjvp("scipy.stats.dirichlet.logpdf", prelude=_DIRICHLET,
       x="np.sum((A - 1.0) / x * x_dot, axis=0)", alpha=_DIRICHLET_ALPHA)
defjvp("scipy.stats.dirichlet.pdf", prelude=_DIRICHLET,
       x="ans * np.sum((A - 1.0) / x * x_dot, axis=0)", alpha=f"ans * {_DIRICHLET_ALPHA}")
_MVN = ("mu = mvn_mean(x, mean, cov, allow_singular); S = symmetric_from_lower(cov); "
        "s = np.linalg.solve(S, np.expand_dims(x - mu, -1))[..., 0]")
_MVN_COV = ("(0.5 * np.einsum('...i,ij,...j->...', s, symmetric_from_lower(cov_dot), s) - "
            "0.5 * np.trace(np.linalg.solve(S, symmetric_from_lower(cov_dot))))")
defjvp("scipy.stats.multivariate_normal.logpdf", prelude=_MVN,
       x="-np.sum(s * x_dot, axis=-1)", mean="np.sum(s * mean_dot, axis=-1)", cov=_MVN_COV)
defjvp("scipy.stats.multivariate_normal.pdf", prelude=_MVN,
       x="-ans * np.sum(s * x_dot, axis=-1)", mean="ans * np.sum(s * mean_dot, axis=-1)",
       cov=f"ans * {_MVN_COV}")
defjvp("scipy.stats.multivariate_normal.entropy",
       cov="0.5 * np.trace(np.linalg.solve(symmetric_from_lower(cov), "
           "symmetric_from_lower(cov_dot)))")
defjvp("scipy.special.multigammaln",
       a="a_dot * np.sum(scipy_digamma(np.expand_dims(a, -1) - np.arange(d) / 2.0), -1)")

# -- scipy.linalg and scipy.signal ---------------------------------------------------------------
defjvp("scipy.spatial.distance.cdist",
       joint="cdist_jvp(XA, XB, XA_dot, XB_dot, ans, metric, p, w)", joint_params=("XA", "XB"))
defjvp("scipy.spatial.distance.pdist", X="pdist_jvp(X, X_dot, ans, metric, p, w)")
defjvp("scipy.linalg.solve_triangular",
       joint="solve_triangular_jvp(a, b, a_dot, b_dot, ans, trans, lower, unit_diagonal)",
       joint_params=("a", "b"))
defjvp("scipy.linalg.solve_banded", joint="solve_banded_jvp(l_and_u, ab, ab_dot, b_dot, ans)",
       joint_params=("ab", "b"))
defjvp("scipy.linalg.cholesky", a="cholesky_jvp(a_dot, ans, not lower)")
defjvp("scipy.linalg.cho_factor", joint="cho_factor_jvp(a_dot, ans)", joint_params=("a",))
defjvp("scipy.linalg.cho_solve", joint="cho_solve_pair_jvp(c_and_lower, b, c_and_lower_dot, "
                                       "b_dot, ans)", joint_params=("c_and_lower", "b"))
defjvp("scipy.linalg.solve_sylvester", joint="solve_sylvester_jvp(a, b, a_dot, b_dot, q_dot, ans)",
       joint_params=("a", "b", "q"))
defjvp("scipy.linalg.sqrtm", A="scipy_solve_sylvester(ans, ans, A_dot)")
defjvp("scipy.linalg.expm", A="expm_frechet(A, A_dot)")
defjvp("scipy.linalg.inv", a="-ans @ a_dot @ ans")
defjvp("scipy.linalg.solve", joint="scipy_solve_jvp(a, b, a_dot, b_dot, ans, lower, assume_a, "
                                   "transposed)", joint_params=("a", "b"))
defjvp("scipy.linalg.lstsq", joint="lstsq_jvp(a, b, a_dot, b_dot, ans, lstsq_cutoff(cond))",
       joint_params=("a", "b"))
defjvp("scipy.linalg.pinv", a="scipy_pinv_jvp(a_dot, a, ans, return_rank)")
linear("scipy.linalg.block_diag")
reduction("scipy.linalg.det", axis="(-2, -1)", keepdims="")
defjvp("scipy.integrate.odeint", joint="odeint_tangent(func, y0, t, args, y0_dot, args_dot, "
                                       "rtol, atol, mxstep, full_output, tfirst)",
       joint_params=("y0", "args"))
multilinear("scipy.signal.convolve", "scipy.signal.correlate")
linear("scipy.spatial.distance.squareform")
