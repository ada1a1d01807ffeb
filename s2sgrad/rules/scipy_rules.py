"""Gradient rules for scipy.special, registered lazily (registry._PENDING): the first
time a lookup misses while scipy.special is imported, or when the whole table is
listed. SciPy is optional and `import s2sgrad` does not import it.

Same format as numpy_rules.py. Templates call SciPy through the helpers of
runtime/numpy_grads.py (`scipy_digamma`, `bessel_j`, ...), whose own rules
(helper_rules.py) give the derivatives of every order. A parameter whose
derivative has no closed form (the order of a Bessel function, the shape
parameters of an incomplete gamma or beta function) raises NotImplementedError
when a gradient reaches it.
"""
from __future__ import annotations

from scipy import special

from .registry import defvjp, nondiff


def _rule(fn, params, **grads):
    """defvjp under the name `scipy.special.<name>`."""
    name = getattr(fn, "__name__", None) or str(fn)
    return defvjp(fn, params, name=f"scipy.special.{name}", **grads)


def _no(param, fn):
    return f"unsupported('the gradient of scipy.special.{fn} with respect to {param}')"


# -- logistic, error functions, normal distribution ------------------------------------------
_rule(special.expit, "x", x="g * ans * (1.0 - ans)")
_rule(special.logit, "x", x="g / (x * (1.0 - x))")
_rule(special.log_expit, "x", x="g * np.exp(-np.logaddexp(0.0, x))")
if hasattr(special, "softplus"):   # (SciPy 1.15+) log(1 + exp(x)): its slope is expit(x)
    _rule(special.softplus, "x", x="g * 0.5 * (1.0 + np.tanh(0.5 * x))")
_rule(special.entr, "x", x="-g * (np.log(x) + 1.0)")   # -x log(x): +inf at 0, as its slope
_rule(special.erf, "x", x="g * (2.0 / np.sqrt(np.pi)) * np.exp(-x * x)")
_rule(special.erfc, "x", x="-g * (2.0 / np.sqrt(np.pi)) * np.exp(-x * x)")
_rule(special.erfcx, "x", x="g * (2.0 * x * ans - 2.0 / np.sqrt(np.pi))")
_rule(special.erfinv, "x", x="g * (np.sqrt(np.pi) / 2.0) * np.exp(ans * ans)")
_rule(special.erfcinv, "x", x="-g * (np.sqrt(np.pi) / 2.0) * np.exp(ans * ans)")
_rule(special.ndtr, "x", x="g * np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)")
_rule(special.log_ndtr, "x", x="g * np.exp(-0.5 * x * x - ans) / np.sqrt(2.0 * np.pi)")
_rule(special.ndtri, "x", x="g * np.sqrt(2.0 * np.pi) * np.exp(0.5 * ans * ans)")

# -- gamma and beta functions ------------------------------------------------------------------
_rule(special.gamma, "x", x="g * ans * scipy_digamma(x)")
_rule(special.rgamma, "x", x="-g * ans * scipy_digamma(x)")
_rule(special.gammaln, "x", x="g * scipy_digamma(x)")
_rule(special.loggamma, "x", x="g * scipy_digamma(x)")   # (gammaln for x > 0)
defvjp(special.digamma, "x", x="g * scipy_trigamma(x)",             # also special.psi
       name="scipy.special.digamma")
_rule(special.polygamma, "n, x", x="g * scipy_polygamma(n + 1, x)", n=_no("n", "polygamma"),
      broadcast=True)
_rule(special.multigammaln, "a, d",
      a="g * np.sum(scipy_digamma(np.expand_dims(a, -1) - np.arange(d) / 2.0), -1)")
_rule(special.gammainc, "a, x", x="g * np.power(x, a - 1.0) * np.exp(-x - scipy_gammaln(a))",
      a=_no("a", "gammainc"), broadcast=True)
_rule(special.gammaincc, "a, x", x="-g * np.power(x, a - 1.0) * np.exp(-x - scipy_gammaln(a))",
      a=_no("a", "gammaincc"), broadcast=True)
_rule(special.beta, "a, b", a="g * ans * (scipy_digamma(a) - scipy_digamma(a + b))",
      b="g * ans * (scipy_digamma(b) - scipy_digamma(a + b))", broadcast=True)
_rule(special.betaln, "a, b", a="g * (scipy_digamma(a) - scipy_digamma(a + b))",
      b="g * (scipy_digamma(b) - scipy_digamma(a + b))", broadcast=True)
_BETA_DENSITY = ("np.power(x, a - 1.0) * np.power(1.0 - x, b - 1.0) * "
                 "np.exp(scipy_gammaln(a + b) - scipy_gammaln(a) - scipy_gammaln(b))")
_rule(special.betainc, "a, b, x", x=f"g * {_BETA_DENSITY}", a=_no("a", "betainc"),
      b=_no("b", "betainc"), broadcast=True)
_rule(special.betaincc, "a, b, x", x=f"-g * {_BETA_DENSITY}", a=_no("a", "betaincc"),
      b=_no("b", "betaincc"), broadcast=True)
nondiff(special.gammasgn)                                   # piecewise constant

# -- x log y -------------------------------------------------------------------------------------
_rule(special.xlogy, "x1, x2", x1="g * np.log(x2)", x2="g * xlogy_grad_y(x1, x2)",
      broadcast=True)
_rule(special.xlog1py, "x1, x2", x1="g * np.log1p(x2)", x2="g * xlogy_grad_y(x1, 1.0 + x2)",
      broadcast=True)

# -- Bessel functions: d/dx from the neighbouring orders (DLMF 10.6.2, 10.29.2) -----------------
_rule(special.j0, "x", x="-g * bessel_j(1, x)")
_rule(special.j1, "x", x="g * (bessel_j(0, x) - bessel_j(2, x)) / 2.0")
_rule(special.jv, "v, x", x="g * (bessel_j(v - 1, x) - bessel_j(v + 1, x)) / 2.0",
      v=_no("the order v", "jv"), broadcast=True)                   # also special.jn
_rule(special.y0, "x", x="-g * bessel_y(1, x)")
_rule(special.y1, "x", x="g * (bessel_y(0, x) - bessel_y(2, x)) / 2.0")
_rule(special.yv, "v, x", x="g * (bessel_y(v - 1, x) - bessel_y(v + 1, x)) / 2.0",
      v=_no("the order v", "yv"), broadcast=True)
_rule(special.yn, "n, x", x="g * (bessel_y(n - 1, x) - bessel_y(n + 1, x)) / 2.0",
      n=_no("the order n", "yn"), broadcast=True)
_rule(special.i0, "x", x="g * bessel_i(1, x)")
_rule(special.i1, "x", x="g * (bessel_i(0, x) + bessel_i(2, x)) / 2.0")
_rule(special.iv, "v, x", x="g * (bessel_i(v - 1, x) + bessel_i(v + 1, x)) / 2.0",
      v=_no("the order v", "iv"), broadcast=True)
_rule(special.i0e, "x", x="g * (bessel_ie(1, x) - np.sign(x) * ans)")
_rule(special.i1e, "x", x="g * ((bessel_ie(0, x) + bessel_ie(2, x)) / 2.0 - np.sign(x) * ans)")
_rule(special.ive, "v, x",
      x="g * ((bessel_ie(v - 1, x) + bessel_ie(v + 1, x)) / 2.0 - np.sign(x) * ans)",
      v=_no("the order v", "ive"), broadcast=True)
_rule(special.k0, "x", x="-g * bessel_k(1, x)")
_rule(special.k1, "x", x="-g * (bessel_k(0, x) + bessel_k(2, x)) / 2.0")
_rule(special.kv, "v, x", x="-g * (bessel_k(v - 1, x) + bessel_k(v + 1, x)) / 2.0",
      v=_no("the order v", "kv"), broadcast=True)
_rule(special.k0e, "x", x="g * (ans - bessel_ke(1, x))")
_rule(special.k1e, "x", x="g * (ans - (bessel_ke(0, x) + bessel_ke(2, x)) / 2.0)")
_rule(special.kve, "v, x", x="g * (ans - (bessel_ke(v - 1, x) + bessel_ke(v + 1, x)) / 2.0)",
      v=_no("the order v", "kve"), broadcast=True)

# -- reductions ------------------------------------------------------------------------------------
_rule(special.logsumexp, "a, axis=None, b=None, keepdims=False, return_sign=False",
      prelude="parts = logsumexp_grads(g, a, ans, axis, b, keepdims, return_sign)",
      a="parts[0]", b="parts[1]").sequence_result = True   # (return_sign=True: a pair)
_rule(special.softmax, "x, axis=None", x="ans * (g - np.sum(g * ans, axis=axis, keepdims=True))")
_rule(special.log_softmax, "x, axis=None",
      x="g - np.exp(ans) * np.sum(g, axis=axis, keepdims=True)")
