"""Gradient rules for scipy.spatial.distance, registered lazily (registry._PENDING).

cdist and pdist for the metrics of a difference (euclidean, sqeuclidean,
cityblock, minkowski with p >= 1, chebyshev) and cosine; any other metric, or
weights, raises at the user's line. squareform only moves entries: linear.
The helpers are NumPy (runtime/numpy_grads.py), differentiated from their source
for second and higher derivatives.
"""
from __future__ import annotations

from scipy.spatial import distance

from .registry import defvjp

defvjp(distance.cdist, "XA, XB, metric='euclidean', p=2, w=None, out=None",
       prelude="parts = cdist_grads(g, XA, XB, ans, metric, p, w)",
       XA="parts[0]", XB="parts[1]", name="scipy.spatial.distance.cdist")
defvjp(distance.pdist, "X, metric='euclidean', p=2, w=None, out=None",
       X="pdist_grads(g, X, ans, metric, p, w)", name="scipy.spatial.distance.pdist")
defvjp(distance.squareform, "X, force='no', checks=True", X="squareform_grad(g, X)",
       name="scipy.spatial.distance.squareform")
