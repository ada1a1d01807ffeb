"""Gradient rules for scipy.special, registered only when SciPy imports.

SciPy is optional: s2sgrad.rules imports this module inside a try block, so
nothing here is needed to import or use s2sgrad. Same format as
numpy_rules.py; the helpers live in runtime/numpy_grads.py.
"""
from __future__ import annotations

from scipy import special

from .registry import defvjp

defvjp(special.expit, "x", x="g * ans * (1.0 - ans)", name="scipy.special.expit")
defvjp(special.logit, "x", x="g / (x * (1.0 - x))", name="scipy.special.logit")
defvjp(special.erf, "x", x="g * (2.0 / np.sqrt(np.pi)) * np.exp(-x * x)",
       name="scipy.special.erf")
defvjp(special.erfc, "x", x="-g * (2.0 / np.sqrt(np.pi)) * np.exp(-x * x)",
       name="scipy.special.erfc")
defvjp(special.gammaln, "x", x="g * scipy_digamma(x)", name="scipy.special.gammaln")
defvjp(special.digamma, "x", x="g * scipy_trigamma(x)", name="scipy.special.digamma")
defvjp(special.xlogy, "x1, x2", x1="g * np.log(x2)", x2="g * xlogy_grad_y(x1, x2)",
       broadcast=True, name="scipy.special.xlogy")
defvjp(special.logsumexp, "a, axis=None, b=None, keepdims=False, return_sign=False",
       prelude="parts = logsumexp_grads(g, a, ans, axis, b, keepdims, return_sign)",
       a="parts[0]", b="parts[1]", name="scipy.special.logsumexp")
defvjp(special.softmax, "x, axis=None",
       x="ans * (g - np.sum(g * ans, axis=axis, keepdims=True))", name="scipy.special.softmax")
defvjp(special.log_softmax, "x, axis=None",
       x="g - np.exp(ans) * np.sum(g, axis=axis, keepdims=True)",
       name="scipy.special.log_softmax")
