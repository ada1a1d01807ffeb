"""Gradient rules for scipy.stats distributions, registered lazily (registry._PENDING).

A continuous distribution with shape parameters theta, `loc` and `scale` has the
log density l0(z; theta) - log(scale) at z = (x - loc) / scale; each entry of
_CONTINUOUS gives l0, its derivative in z and in each shape parameter, and the
loop below writes the rules of pdf, logpdf, cdf, logcdf, sf and logsf from them
(one rule per method, in the table format of numpy_rules.py). The cumulative
functions have no closed-form derivative in the shape parameters (incomplete
gamma and beta functions): a gradient reaching one raises NotImplementedError.
"""
from __future__ import annotations

from scipy import stats

from .registry import defvjp

_LOG_SQRT_2PI = "0.5 * np.log(2.0 * np.pi)"

# name: (shape parameters, l0(z), d l0 / dz, {shape parameter: d l0 / d parameter})
_CONTINUOUS = {
    "norm": ((), f"-0.5 * z * z - {_LOG_SQRT_2PI}", "-z", {}),
    "t": (("df",),
          "scipy_gammaln((df + 1.0) / 2.0) - scipy_gammaln(df / 2.0) - 0.5 * np.log(df * np.pi)"
          " - (df + 1.0) / 2.0 * np.log1p(z * z / df)",
          "-(df + 1.0) * z / (df + z * z)",
          {"df": "0.5 * (scipy_digamma((df + 1.0) / 2.0) - scipy_digamma(df / 2.0) - 1.0 / df"
                 " - np.log1p(z * z / df) + (df + 1.0) * z * z / (df * (df + z * z)))"}),
    "gamma": (("a",), "(a - 1.0) * np.log(z) - z - scipy_gammaln(a)", "(a - 1.0) / z - 1.0",
              {"a": "np.log(z) - scipy_digamma(a)"}),
    "beta": (("a", "b"),
             "(a - 1.0) * np.log(z) + (b - 1.0) * np.log1p(-z) - scipy_gammaln(a) "
             "- scipy_gammaln(b) + scipy_gammaln(a + b)",
             "(a - 1.0) / z - (b - 1.0) / (1.0 - z)",
             {"a": "np.log(z) - scipy_digamma(a) + scipy_digamma(a + b)",
              "b": "np.log1p(-z) - scipy_digamma(b) + scipy_digamma(a + b)"}),
    "chi2": (("df",),
             "(df / 2.0 - 1.0) * np.log(z) - z / 2.0 - df / 2.0 * np.log(2.0) "
             "- scipy_gammaln(df / 2.0)",
             "(df / 2.0 - 1.0) / z - 0.5",
             {"df": "0.5 * (np.log(z) - np.log(2.0) - scipy_digamma(df / 2.0))"}),
}


def _continuous(dist_name, method, shapes, l0, dl0, dshape):
    dist = getattr(stats, dist_name)
    name = f"scipy.stats.{dist_name}.{method}"
    params = ", ".join(("x",) + shapes + ("loc=0.0", "scale=1.0"))
    if method in ("logpdf", "pdf"):
        w = "g" if method == "logpdf" else "g * ans"
        grads = {"x": "w * dz / scale", "loc": "-w * dz / scale",
                 "scale": "-w * (dz * z + 1.0) / scale"}
        grads.update({p: f"w * ({d})" for p, d in dshape.items()})
        prelude = f"z = (x - loc) / scale; dz = {dl0}; w = {w}"
    else:   # the cumulative ones: p is the density, over the value for the logs
        sign = "-" if method in ("sf", "logsf") else ""
        density = f"np.exp({l0} - ans)" if method.startswith("log") else f"np.exp({l0})"
        grads = {"x": "g * p", "loc": "-g * p", "scale": "-g * p * z"}
        grads.update({p: f"unsupported('the gradient of {name} with respect to {p}')"
                      for p in shapes})
        prelude = f"z = (x - loc) / scale; p = {sign}{density} / scale"
    defvjp(getattr(dist, method), params, prelude=prelude, broadcast=True, name=name, **grads)


for _dist, (_shapes, _l0, _dl0, _dshape) in _CONTINUOUS.items():
    for _method in ("pdf", "logpdf", "cdf", "logcdf", "sf", "logsf"):
        _continuous(_dist, _method, _shapes, _l0, _dl0, _dshape)

# -- Poisson: differentiable in mu (k is a count: piecewise constant) ------------------------------
_POISSON_PMF = "np.where(m >= 0, np.exp(m * np.log(mu) - mu - scipy_gammaln(m + 1.0)), 0.0)"
defvjp(stats.poisson.pmf, "k, mu, loc=0", mu="g * ans * ((k - loc) / mu - 1.0)",
       broadcast=True, name="scipy.stats.poisson.pmf")
defvjp(stats.poisson.logpmf, "k, mu, loc=0",
       mu="g * np.where(np.floor(k - loc) == k - loc, (k - loc) / mu - 1.0, 0.0)",
       broadcast=True, name="scipy.stats.poisson.logpmf")
for _method, _grad in (("cdf", "-g * pmf"), ("sf", "g * pmf"),
                       ("logcdf", "-g * pmf / np.exp(ans)"), ("logsf", "g * pmf / np.exp(ans)")):
    defvjp(getattr(stats.poisson, _method), "k, mu, loc=0",
           prelude=f"m = np.floor(k - loc); pmf = {_POISSON_PMF}", mu=_grad, broadcast=True,
           name=f"scipy.stats.poisson.{_method}")

# -- Dirichlet: x of shape (K,) or (K, N), alpha of shape (K,) -----------------------------------
_DIRICHLET_ALPHA = ("np.reshape(np.sum(np.reshape(w * (np.log(x) - scipy_digamma(A) + "
                    "scipy_digamma(np.sum(alpha))), (np.shape(x)[0], -1)), axis=1), "
                    "np.shape(alpha))")
for _method, _w in (("logpdf", "g"), ("pdf", "g * ans")):
    defvjp(getattr(stats.dirichlet, _method), "x, alpha",
           prelude=f"A = np.reshape(alpha, dirichlet_shape(x, alpha)); w = {_w}",
           x="w * (A - 1.0) / x", alpha=_DIRICHLET_ALPHA, name=f"scipy.stats.dirichlet.{_method}")

# -- multivariate normal: x of shape (d,) or (n, d), mean (d,), cov (d, d) -----------------------
# scipy reads the lower triangle of cov (LAPACK's eigh), so its gradient is on that
# triangle (off-diagonal entries doubled), as for np.linalg.cholesky and eigh.
_MVN = ("mu = mvn_mean(x, mean, cov, allow_singular); S = symmetric_from_lower(cov); "
        "s = np.linalg.solve(S, np.expand_dims(x - mu, -1))[..., 0]; ge = np.expand_dims(w, -1); "
        "d = np.shape(S)[-1]; G = 0.5 * (np.swapaxes(np.reshape(ge * s, (-1, d)), -1, -2) @ "
        "np.reshape(s, (-1, d)) - np.sum(w) * np.linalg.inv(S))")
_LOWER = "np.tril(G) + np.swapaxes(np.triu(G, 1), -1, -2)"
for _method, _w in (("logpdf", "g"), ("pdf", "g * ans")):
    defvjp(getattr(stats.multivariate_normal, _method),
           "x, mean=None, cov=1, allow_singular=False", prelude=f"w = {_w}; {_MVN}",
           x="-ge * s", mean="unbroadcast(ge * s, mu)", cov=_LOWER,
           name=f"scipy.stats.multivariate_normal.{_method}")
defvjp(stats.multivariate_normal.entropy, "mean=None, cov=1",
       prelude="G = 0.5 * g * np.linalg.inv(symmetric_from_lower(cov))", cov=_LOWER,
       name="scipy.stats.multivariate_normal.entropy")
