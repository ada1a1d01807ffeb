"""Gradient rules for scipy.linalg, registered lazily (registry._PENDING).

Templates call SciPy through helpers of runtime/numpy_grads.py whose own rules
(helper_rules.py) are these rules again (scipy_solve_triangular,
scipy_cho_solve, scipy_solve_sylvester, expm_frechet), so second and higher
derivatives need nothing more. Like LAPACK, the triangular and Cholesky
routines read one triangle of their matrix: gradients are on that triangle.
"""
from __future__ import annotations

from scipy import linalg

from .registry import defvjp

_OPTS = "overwrite_a=False, check_finite=True"

defvjp(linalg.solve_triangular, "a, b, trans=0, lower=False, unit_diagonal=False, "
                                "overwrite_b=False, check_finite=True",
       prelude="gb = scipy_solve_triangular(a, g, flipped_trans(trans), lower, unit_diagonal)",
       a="-triangle_part(transpose_if(as_columns(gb, np.shape(a)[-1]) @ "
         "np.swapaxes(as_columns(ans, np.shape(a)[-1]), -1, -2), is_transposed(trans)), "
         "lower, unit_diagonal)",
       b="gb", name="scipy.linalg.solve_triangular")
# LAPACK's band storage: the transpose's system gives b's cotangent; ab's holds the
# entries of -gb x^T that the band holds
defvjp(linalg.solve_banded, "l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, "
                            "check_finite=True",
       prelude="l = l_and_u[0]; u = l_and_u[1]; "
               "gb = scipy_solve_banded((u, l), band_transposed(ab, l, u), g)",
       ab="-band_outer(gb, ans, l, u)", b="gb", name="scipy.linalg.solve_banded")
defvjp(linalg.cholesky, f"a, lower=False, {_OPTS}", a="cholesky_grad(g, ans, not lower)",
       name="scipy.linalg.cholesky")
# cho_factor's c holds the factor in one triangle and a's own entries in the other
defvjp(linalg.cho_factor, f"a, lower=False, {_OPTS}",
       a="cholesky_grad(g[0], triangle_part(ans[0], ans[1]), not ans[1]) + g[0] "
         "- triangle_part(g[0], ans[1])",
       outputs=2, name="scipy.linalg.cho_factor")
defvjp(linalg.cho_solve, "c_and_lower, b, overwrite_b=False, check_finite=True",
       prelude="c = c_and_lower[0]; low = c_and_lower[1]; gb = scipy_cho_solve(c, low, g); "
               "n = np.shape(c)[-1]; "
               "outer = as_columns(gb, n) @ np.swapaxes(as_columns(ans, n), -1, -2); "
               "sym = -(outer + np.swapaxes(outer, -1, -2))",
       c_and_lower="[transpose_if(triangle_part(sym @ triangle_part(transpose_if(c, not low), "
                   "True), True), not low), 0.0]",
       b="gb", sequence=("c_and_lower",), name="scipy.linalg.cho_solve")
defvjp(linalg.solve_sylvester, "a, b, q",
       prelude="gq = scipy_solve_sylvester(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2), g)",
       a="-gq @ np.swapaxes(ans, -1, -2)", b="-np.swapaxes(ans, -1, -2) @ gq", q="gq",
       name="scipy.linalg.solve_sylvester")
defvjp(linalg.sqrtm, "A, disp=True, blocksize=64",
       prelude="X = np.swapaxes(require_real(ans, 'scipy.linalg.sqrtm'), -1, -2)",
       A="scipy_solve_sylvester(X, X, g)", name="scipy.linalg.sqrtm")
defvjp(linalg.expm, "A", A="expm_frechet(np.swapaxes(A, -1, -2), g)", name="scipy.linalg.expm")
# What NumPy's do too (their rules'), with SciPy's options
defvjp(linalg.inv, f"a, {_OPTS}", a="-np.swapaxes(ans, -1, -2) @ g @ np.swapaxes(ans, -1, -2)",
       name="scipy.linalg.inv")
defvjp(linalg.det, f"a, {_OPTS}", a="det_grad(g, a)", name="scipy.linalg.det")
# solve: np.linalg.solve's for the matrix the solver reads (all of `a`, one triangle made
# symmetric, a triangle, the diagonal, three bands; transposed for transposed=True)
defvjp(linalg.solve, "a, b, lower=False, overwrite_a=False, overwrite_b=False, "
                     "check_finite=True, assume_a=None, transposed=False",
       prelude="m = solver_matrix(a, lower, assume_a, transposed); "
               "parts = solve_grads(g, m, b, ans)",
       a="solver_matrix_grad(parts[0], a, lower, assume_a, transposed)", b="parts[1]",
       name="scipy.linalg.solve")
defvjp(linalg.lstsq, "a, b, cond=None, overwrite_a=False, overwrite_b=False, "
                     "check_finite=True, lapack_driver=None",
       prelude="parts = lstsq_grads(g, a, b, ans, lstsq_cutoff(cond))",
       a="parts[0]", b="parts[1]", outputs=4, name="scipy.linalg.lstsq")
defvjp(linalg.pinv, "a, *, atol=None, rtol=None, return_rank=False, check_finite=True",
       a="scipy_pinv_grad(g, a, ans, return_rank)",
       name="scipy.linalg.pinv").sequence_result = True   # (return_rank=True: a pair)
defvjp(linalg.block_diag, "*arrs", arrs="block_diag_grads(g, arrs)", sequence=("arrs",),
       name="scipy.linalg.block_diag")
