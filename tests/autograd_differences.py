"""Cases of tests/rule_cases.py on which HIPS autograd cannot serve as a reference.

Keyed by test id (rule name and case number). Every entry is checked by
tests/test_rules.py::test_autograd_differences_are_real: autograd must raise
or disagree there (s2sgrad's value is checked by finite differences, so where
they disagree autograd is the one that is wrong, or uses another convention).
"""

NO_VJP = "autograd has no VJP for it"
NO_ARGS = "autograd does not accept these arguments"
NO_CASE = "autograd does not implement this case"
_TRIANGLE = ("autograd symmetrises the gradient of cov; scipy reads its lower triangle "
             "(so does s2sgrad)")

AUTOGRAD_DIFFERENT = {
    'scipy.special.entr-0': NO_VJP,  # scipy.special.entr(x)
    'scipy.special.entr-1': NO_VJP,  # scipy.special.entr(x) * y
    'scipy.special.softplus-0': NO_VJP,  # scipy.special.softplus(x)
    'scipy.special.softplus-1': NO_VJP,  # scipy.special.softplus(x * 3.0) * y
    'math.erf-0': NO_VJP,  # math.erf(x)
    'math.erf-1': NO_VJP,  # math.erf(x * 0.5) * y
    'math.erfc-0': NO_VJP,  # math.erfc(x)
    'math.erfc-1': NO_VJP,  # math.erfc(x) ** 2
    'np.sinc-3': "autograd's derivative of sinc divides by x: nan at x == 0",
    'np.linalg.lstsq-0': NO_VJP,  # np.linalg.lstsq(x, y, rcond=None)[0]
    'np.linalg.lstsq-1': NO_VJP,  # np.linalg.lstsq(x, y, rcond=None)
    'np.linalg.lstsq-2': NO_VJP,  # np.linalg.lstsq(x, y)[0]
    'np.linalg.lstsq-3': NO_VJP,  # np.linalg.lstsq(x, y)[1] * np.sum(np.linalg.lstsq(x, y)[3])
    'scipy.spatial.distance.cdist-0': NO_VJP,
    'scipy.spatial.distance.cdist-1': NO_VJP,
    'scipy.spatial.distance.cdist-2': NO_VJP,
    'scipy.spatial.distance.cdist-3': NO_VJP,
    'scipy.spatial.distance.cdist-4': NO_VJP,
    'scipy.spatial.distance.cdist-5': NO_VJP,
    'scipy.spatial.distance.cdist-6': NO_VJP,
    'scipy.spatial.distance.pdist-0': NO_VJP,
    'scipy.spatial.distance.pdist-1': NO_VJP,
    'scipy.spatial.distance.pdist-2': NO_VJP,
    'scipy.spatial.distance.pdist-3': NO_VJP,
    'scipy.spatial.distance.squareform-0': NO_VJP,
    'scipy.spatial.distance.squareform-1': NO_VJP,
    'scipy.spatial.distance.squareform-2': NO_VJP,
    'scipy.linalg.solve-0': NO_VJP,
    'scipy.linalg.solve-1': NO_VJP,
    'scipy.linalg.solve-2': NO_VJP,
    'scipy.linalg.solve-3': NO_VJP,
    'scipy.linalg.solve-4': NO_VJP,
    'scipy.linalg.solve-5': NO_VJP,
    'scipy.linalg.lstsq-0': NO_VJP,
    'scipy.linalg.lstsq-1': NO_VJP,
    'scipy.linalg.lstsq-2': NO_VJP,
    'scipy.linalg.lstsq-3': NO_VJP,
    'scipy.linalg.pinv-0': NO_VJP,
    'scipy.linalg.pinv-1': NO_VJP,
    'scipy.linalg.pinv-2': NO_VJP,
    'scipy.linalg.block_diag-0': NO_VJP,
    'scipy.linalg.block_diag-1': NO_VJP,
    'np.polynomial.polynomial.polyval-0': NO_VJP,
    'np.polynomial.polynomial.polyval-1': NO_VJP,
    'np.vander-0': NO_VJP,
    'np.vander-1': NO_VJP,
    'np.vander-2': NO_VJP,
    'np.polyfit-0': NO_VJP,
    'np.polyfit-1': NO_VJP,
    'np.polyfit-2': NO_VJP,
    'np.linalg.det-3': "autograd's gradient of det is det * inv(a).T: nan or inf at a "
                       "singular matrix (s2sgrad's cofactors are exact there)",
    'scipy.linalg.solve_banded-1': "autograd's cotangent of ab has b's columns side by "
                                   "side (its shape is wrong) where b is a matrix",
    'np.fft.rfft-1': NO_CASE,  # np.fft.rfft(x, n=7, axis=0): odd lengths
    'np.fft.irfft-1': NO_CASE,  # np.fft.irfft(x, n=5, axis=0, norm='ortho'): odd lengths
    'np.fft.rfft2-1': NO_CASE,  # np.fft.rfft2(x, s=(4, 3)): an odd last length
    'np.fft.rfftn-1': NO_CASE,  # np.fft.rfftn(x, axes=(0,), norm='ortho'): odd length 5
    'np.fft.irfft2-1': NO_CASE,  # np.fft.irfft2(x, s=(2, 5), norm='forward'): odd length
    'np.fft.hfft-0': NO_VJP,  # np.fft.hfft(x) * y
    'np.fft.hfft-1': NO_VJP,  # np.fft.hfft(x, n=5, axis=0, norm='ortho')
    'np.fft.ihfft-0': NO_VJP,  # np.abs(np.fft.ihfft(x))
    'np.fft.ihfft-1': NO_VJP,  # np.real(np.fft.ihfft(x, n=7, axis=0) * (1 + 2j))
    'np.angle-1': NO_ARGS,  # np.angle(x, deg=True)
    'builtins.float-0': NO_VJP,  # float(x) * x
    'builtins.float-1': NO_VJP,  # float(np.sum(x)) * x
    'np.float64-0': NO_VJP,  # np.float64(x) * x
    'np.float64-1': NO_VJP,  # np.float64(x) ** 2 * y
    'np.float64-2': NO_VJP,  # np.float64(np.sum(x)) * x
    'np.positive-0': NO_ARGS,  # +x
    'np.positive-1': NO_VJP,  # np.positive(x)
    'np.matmul-5': NO_VJP,  # np.linalg.matmul(x, y)
    'np.where-1': 'autograd does not sum the cotangent of a broadcast branch back to its shape',
    'ndarray.dot-0': NO_VJP,  # x.dot(y)
    'ndarray.dot-1': NO_VJP,  # x.dot(y)
    'ndarray.transpose-1': NO_ARGS,  # x.transpose(1, 0, 2)
    'np.cbrt-0': NO_VJP,  # np.cbrt(x)
    'np.cbrt-1': NO_VJP,  # np.cbrt(x) * y
    'np.cbrt-2': NO_VJP,  # np.cbrt(x)
    'np.float_power-0': NO_VJP,  # np.float_power(x, y)
    'np.float_power-1': NO_VJP,  # np.float_power(x, y)
    'np.float_power-2': NO_VJP,  # np.float_power(x, 3.0)
    'np.fmod-0': NO_VJP,  # np.fmod(x, y)
    'np.fmod-1': NO_VJP,  # np.fmod(x, y)
    'np.copysign-0': NO_VJP,  # np.copysign(x, y)
    'np.copysign-1': NO_VJP,  # np.copysign(x, y)
    'np.clip-1': NO_VJP,  # np.clip(x, lo, hi)
    'np.clip-2': NO_VJP,  # np.clip(x, lo, None)
    'np.clip-3': NO_VJP,  # np.clip(x, lo, hi)
    'np.nan_to_num-1': NO_ARGS,  # np.nan_to_num(x + c, nan=y)
    'np.nan_to_num-2': NO_ARGS,  # np.nan_to_num(x + c, posinf=y, neginf=z)
    'np.divmod-0': NO_VJP,  # np.divmod(x, y)
    'np.divmod-1': NO_VJP,  # np.divmod(x, y)[1]
    'np.modf-0': NO_VJP,  # np.modf(x)
    'np.modf-1': NO_VJP,  # np.modf(x * y)[0]
    'np.frexp-0': NO_VJP,  # np.frexp(x)[0]
    'np.frexp-1': NO_VJP,  # np.frexp(x * 5.0)[0] * y
    'np.ldexp-0': NO_VJP,  # np.ldexp(x, 3)
    'np.ldexp-1': NO_VJP,  # np.ldexp(x, c)
    'np.heaviside-0': NO_VJP,  # np.heaviside(c, y)
    'np.heaviside-1': NO_VJP,  # np.heaviside(c, y)
    'np.prod-3': 'autograd divides by the input (nan/inf with zeros) and ignores where=',
    'np.prod-4': 'autograd divides by the input (nan/inf with zeros) and ignores where=',
    'np.prod-5': NO_ARGS,  # np.prod(x, axis=0, initial=y)
    'np.prod-6': 'autograd divides by the input (nan/inf with zeros) and ignores where=',
    'np.prod-7': 'autograd divides by the input (nan/inf with zeros) and ignores where=',
    'np.max-4': NO_ARGS,  # np.max(x, axis=1, initial=y)
    'np.min-3': NO_ARGS,  # np.min(x, initial=y)
    'np.nanmax-0': NO_VJP,  # np.nanmax(x + c)
    'np.nanmax-1': NO_VJP,  # np.nanmax(x + c, axis=1)
    'np.nanmin-0': NO_VJP,  # np.nanmin(x + c, axis=0)
    'np.nanmin-1': NO_VJP,  # np.nanmin(x, keepdims=True)
    'np.var-3': 'autograd ignores where=',  # np.var(x, axis=1, where=c)
    'np.std-3': 'autograd ignores where=',  # np.std(x, axis=1, where=c)
    'np.nanvar-0': NO_VJP,  # np.nanvar(x + c)
    'np.nanvar-1': NO_VJP,  # np.nanvar(x + c, axis=0, ddof=1)
    'np.nanstd-0': NO_VJP,  # np.nanstd(x + c)
    'np.nanstd-1': NO_VJP,  # np.nanstd(x, axis=1, keepdims=True)
    'np.average-0': NO_VJP,  # np.average(x)
    'np.average-1': NO_VJP,  # np.average(x, axis=1, weights=w)
    'np.average-2': NO_VJP,  # np.average(x, axis=0, weights=w)
    'np.average-3': NO_VJP,  # np.average(x, weights=w, returned=True)
    'np.average-4': NO_VJP,  # np.average(x, axis=1, keepdims=True)
    'np.nansum-0': NO_VJP,  # np.nansum(x + c)
    'np.nansum-1': NO_VJP,  # np.nansum(x + c, axis=1, keepdims=True)
    'np.nanmean-0': NO_VJP,  # np.nanmean(x + c)
    'np.nanmean-1': NO_VJP,  # np.nanmean(x + c, axis=0)
    'np.nanprod-0': NO_VJP,  # np.nanprod(x + c)
    'np.nanprod-1': NO_VJP,  # np.nanprod(x + c, axis=1)
    'np.cumprod-0': NO_VJP,  # np.cumprod(x)
    'np.cumprod-1': NO_VJP,  # np.cumprod(x, axis=1)
    'np.cumprod-2': NO_VJP,  # np.cumprod(x * c, axis=1)
    'np.cumprod-3': NO_VJP,  # np.cumprod(x * c)
    'np.cumprod-4': NO_VJP,  # np.cumprod(x), zeros in x
    'np.cumprod-5': NO_VJP,  # np.cumprod(x, axis=1), zeros in x
    'np.nancumsum-0': NO_VJP,  # np.nancumsum(x + c)
    'np.nancumsum-1': NO_VJP,  # np.nancumsum(x + c, axis=1)
    'np.nancumprod-0': NO_VJP,  # np.nancumprod(x + c)
    'np.nancumprod-1': NO_VJP,  # np.nancumprod(x + c, axis=0)
    'np.ptp-0': NO_VJP,  # np.ptp(x)
    'np.ptp-1': NO_VJP,  # np.ptp(x, axis=1)
    'np.ptp-2': NO_VJP,  # np.ptp(x, axis=0, keepdims=True)
    'np.quantile-0': NO_VJP,  # np.quantile(x, 0.3)
    'np.quantile-1': NO_VJP,  # np.quantile(x, [0.25, 0.5, 1.0], axis=1)
    'np.quantile-2': NO_VJP,  # np.quantile(x, 0.7, axis=(0, 2), keepdims=True)
    'np.nanquantile-0': NO_VJP,  # np.nanquantile(x + c, 0.4)
    'np.nanquantile-1': NO_VJP,  # np.nanquantile(x + c, [0.1, 0.9], axis=1)
    'np.percentile-0': NO_VJP,  # np.percentile(x, 30)
    'np.percentile-1': NO_VJP,  # np.percentile(x, [10.0, 75.0], axis=0)
    'np.nanpercentile-0': NO_VJP,  # np.nanpercentile(x + c, 60)
    'np.nanpercentile-1': NO_VJP,  # np.nanpercentile(x, 40, axis=1)
    'np.median-0': NO_VJP,  # np.median(x)
    'np.median-1': NO_VJP,  # np.median(x, axis=1)
    'np.median-2': NO_VJP,  # np.median(x, axis=0, keepdims=True)
    'np.nanmedian-0': NO_VJP,  # np.nanmedian(x + c)
    'np.nanmedian-1': NO_VJP,  # np.nanmedian(x + c, axis=1)
    'np.diff-2': NO_ARGS,  # np.diff(x, prepend=y, append=z)
    'np.diff-3': NO_ARGS,  # np.diff(x, axis=0, prepend=y)
    'np.ediff1d-0': NO_VJP,  # np.ediff1d(x)
    'np.ediff1d-1': NO_VJP,  # np.ediff1d(x, to_end=y, to_begin=z)
    'np.trapezoid-0': NO_VJP,  # np.trapezoid(x)
    'np.trapezoid-1': NO_VJP,  # np.trapezoid(x, y)
    'np.trapezoid-2': NO_VJP,  # np.trapezoid(x, dx=y, axis=0)
    'np.trapezoid-3': NO_VJP,  # np.trapezoid(x, y, axis=0)
    'np.linalg.norm-2': NO_CASE,  # np.linalg.norm(x, ord=1)
    'np.linalg.norm-3': 'autograd mishandles ord=inf with keepdims=True',
    'np.linalg.norm-5': NO_CASE,  # np.linalg.norm(x, ord=-np.inf)
    'np.linalg.norm-7': NO_CASE,  # np.linalg.norm(x, ord=2)
    'np.linalg.norm-8': NO_CASE,  # np.linalg.norm(x, ord=-2)
    'np.linalg.norm-10': NO_CASE,  # np.linalg.norm(x, ord=1)
    'np.linalg.norm-11': NO_CASE,  # np.linalg.norm(x, ord=np.inf, axis=(2, 0), keepdims=True)
    'np.linalg.norm-12': NO_CASE,  # np.linalg.norm(x, ord=-1)
    'np.cov-0': NO_VJP,  # np.cov(x)
    'np.cov-1': NO_VJP,  # np.cov(x, rowvar=False, ddof=0)
    'np.cov-2': NO_VJP,  # np.cov(x, y)
    'np.cov-3': NO_VJP,  # np.cov(x, bias=True)
    'np.corrcoef-0': NO_VJP,  # np.corrcoef(x)
    'np.corrcoef-1': NO_VJP,  # np.corrcoef(x, y)
    'np.corrcoef-2': NO_VJP,  # np.corrcoef(x, rowvar=False)
    'np.cumulative_sum-0': NO_VJP,  # np.cumulative_sum(x)
    'np.cumulative_sum-1': NO_VJP,  # np.cumulative_sum(x, axis=1, include_initial=True)
    'np.cumulative_prod-0': NO_VJP,  # np.cumulative_prod(x)
    'np.cumulative_prod-1': NO_VJP,  # np.cumulative_prod(x * c, axis=1, include_initial=True)
    'np.linalg.vector_norm-0': NO_VJP,  # np.linalg.vector_norm(x)
    'np.linalg.vector_norm-1': NO_VJP,  # np.linalg.vector_norm(x, axis=0, ord=1)
    'np.linalg.vector_norm-2': NO_VJP,
    'np.linalg.matrix_norm-0': NO_VJP,  # np.linalg.matrix_norm(x)
    'np.linalg.matrix_norm-1': NO_VJP,  # np.linalg.matrix_norm(x, ord=2, keepdims=True)
    'np.linalg.matrix_norm-2': NO_VJP,  # np.linalg.matrix_norm(x, ord='nuc')
    'np.ravel-2': NO_ARGS,  # np.ravel(x.T, order='K')
    'np.broadcast_to-0': NO_ARGS,  # np.broadcast_to(x, (2, 3))
    'np.broadcast_arrays-0': NO_VJP,  # np.broadcast_arrays(x, y)
    'np.broadcast_arrays-1': NO_VJP,  # np.broadcast_arrays(x, y, 1.0)[0]
    'np.atleast_1d-1': NO_ARGS,  # np.atleast_1d(x, y)
    'np.atleast_2d-1': NO_ARGS,  # np.atleast_2d(x, y)[1]
    'np.concatenate-2': NO_ARGS,  # np.concatenate([x, y], axis=None)
    'np.dstack-0': "autograd's dstack gradient is wrong for 1-d and 2-d inputs",
    'np.dstack-1': "autograd's dstack gradient is wrong for 1-d and 2-d inputs",
    'np.hsplit-0': NO_ARGS,  # np.hsplit(x, 2)[0]
    'np.tile-2': NO_ARGS,  # np.tile(x, 3)
    'np.repeat-1': NO_ARGS,  # np.repeat(x, [1, 0, 3], axis=1)
    'np.resize-0': NO_VJP,  # np.resize(x, (2, 4))
    'np.resize-1': NO_VJP,  # np.resize(x, 3)
    'np.flip-0': NO_VJP,  # np.flip(x)
    'np.flip-1': NO_VJP,  # np.flip(x, axis=1) * y
    'np.roll-1': NO_ARGS,  # np.roll(x, (1, -1), axis=(0, 1))
    'np.rot90-1': NO_ARGS,  # np.rot90(x, 3, axes=(1, 2))
    'np.pad-0': NO_ARGS,  # np.pad(x, 1)
    'np.pad-1': NO_ARGS,  # np.pad(x, ((1, 0), (0, 2)), constant_values=y)
    'np.pad-2': NO_CASE,  # np.pad(x, (2, 3), mode='reflect')
    'np.pad-3': NO_CASE,  # np.pad(x, 2, mode='edge')
    'np.pad-4': NO_CASE,  # np.pad(x, (1, 2), mode='wrap')
    'np.pad-5': NO_CASE,  # np.pad(x, 1, mode='symmetric')
    'np.diag-1': "autograd's diag gradient assumes a square matrix",  # np.diag(x, 1)
    'np.diagflat-0': NO_VJP,  # np.diagflat(x)
    'np.diagflat-1': NO_VJP,  # np.diagflat(x, 1)
    'np.diagonal-0': NO_CASE,  # np.diagonal(x)
    'np.diagonal-1': NO_CASE,  # np.diagonal(x, 1, 0, 2)
    'np.trace-1': NO_ARGS,  # np.trace(x, -1, 1, 2)
    'np.take-0': NO_VJP,  # np.take(x, [0, 2, 2])
    'np.take-1': NO_VJP,  # np.take(x, [[1, 0], [1, 1]], axis=1)
    'np.take-2': NO_VJP,  # np.take(x, [4, -1], mode='wrap')
    'np.take-3': NO_VJP,  # np.take(x, 1, axis=0)
    'np.take_along_axis-0': NO_VJP,  # np.take_along_axis(x, np.argsort(x, axis=1), axis=1)
    'np.take_along_axis-1': NO_VJP,  # np.take_along_axis(x, c, axis=0)
    'np.compress-0': NO_VJP,  # np.compress([True, False, True], x)
    'np.compress-1': NO_VJP,  # np.compress([False, True], x, axis=1)
    'np.extract-0': NO_VJP,  # np.extract(c, x)
    'np.extract-1': NO_VJP,  # np.extract(x > 0, x)
    'np.delete-0': NO_VJP,  # np.delete(x, 1)
    'np.delete-1': NO_VJP,  # np.delete(x, [0, 2], axis=1)
    'np.insert-0': NO_VJP,  # np.insert(x, 1, y)
    'np.insert-1': NO_VJP,  # np.insert(x, [0, 2], y, axis=1)
    'np.insert-2': NO_VJP,  # np.insert(x, 1, y, axis=0)
    'np.sort-0': NO_CASE,  # np.sort(x)
    'np.sort-1': NO_CASE,  # np.sort(x, axis=0)
    'np.sort-2': NO_CASE,  # np.sort(x, axis=None)
    'np.copy-0': NO_VJP,  # np.copy(x)
    'np.copy-1': NO_VJP,  # np.copy(x) * y
    'np.array-3': 'autograd ignores ndmin=',  # np.array([x, 1.0], ndmin=2)
    'np.asarray-0': NO_VJP,  # np.asarray(x)
    'np.asarray-1': 'autograd does not trace a list of boxed values through asarray',
    'np.asarray-2': NO_VJP,  # np.ascontiguousarray(x.T)
    'np.asanyarray-0': NO_VJP,  # np.asanyarray(x)
    'np.asanyarray-1': 'autograd does not trace a list of boxed values through asanyarray',
    'np.meshgrid-0': NO_VJP,  # np.meshgrid(x, y)
    'np.meshgrid-1': NO_VJP,  # np.meshgrid(x, y, indexing='ij', sparse=True)
    'np.meshgrid-2': NO_VJP,  # np.meshgrid(x, y, z)
    'np.bincount-0': NO_ARGS,  # np.bincount([0, 1, 1, 3], weights=w)
    'np.bincount-1': NO_ARGS,  # np.bincount([2, 0, 2], weights=w, minlength=5)
    'np.interp-0': NO_VJP,  # np.interp(x, [0.0, 1.0, 3.0], y)
    'np.interp-1': NO_VJP,  # np.interp(x, xp, y, left=l, right=r)
    'np.interp-2': NO_VJP,  # np.interp(x * 3.0, xp, y)
    'np.polyval-0': NO_VJP,  # np.polyval(p, x)
    'np.polyval-1': NO_VJP,  # np.polyval([a, b, 1.0], x)
    'np.convolve-0': NO_VJP,  # np.convolve(x, y)
    'np.convolve-1': NO_VJP,  # np.convolve(x, y, 'same')
    'np.convolve-2': NO_VJP,  # np.convolve(x, y, mode='valid')
    'np.correlate-0': NO_VJP,  # np.correlate(x, y)
    'np.correlate-1': NO_VJP,  # np.correlate(x, y, 'same')
    'np.correlate-2': NO_VJP,  # np.correlate(x, y, mode='full')
    'np.unstack-0': NO_VJP,  # np.unstack(x)
    'np.unstack-1': NO_VJP,  # np.unstack(x, axis=1)[1]
    'np.matrix_transpose-0': NO_VJP,  # np.matrix_transpose(x)
    'np.matrix_transpose-1': NO_VJP,  # np.linalg.matrix_transpose(x)
    'np.vdot-0': NO_VJP,  # np.vdot(x, y)
    'np.vdot-1': NO_VJP,  # np.vdot(x, y)
    'np.outer-1': NO_VJP,  # np.outer(x, y)
    'np.outer-2': NO_VJP,  # np.linalg.outer(x, y)
    'np.tensordot-4': NO_VJP,  # np.linalg.tensordot(x, y, axes=(1, 0))
    'np.einsum-2': NO_ARGS,  # np.einsum('ii->', x)
    'np.einsum-3': NO_ARGS,  # np.einsum('ii->i', x)
    'np.einsum-10': NO_ARGS,  # np.einsum('iij->j', x)
    'np.einsum-14': "autograd's cotangent of x has y's length 1 where y's label is "
                    "broadcast (its shape is wrong)",  # np.einsum('i,i', x, y)
    'np.einsum-15': "autograd's cotangent of x has y's length 1 where y's label is "
                    "broadcast (its shape is wrong)",  # np.einsum('ij,j->i', x, y)
    'np.cross-1': 'autograd does not undo broadcasting',  # np.cross(x, y)
    'np.cross-3': NO_VJP,  # np.linalg.cross(x, y)
    'np.linalg.solve-2': 'autograd does not undo broadcasting of b',  # np.linalg.solve(a, b)
    'np.linalg.cholesky-0':
        'autograd returns the symmetric gradient; NumPy reads only the lower triangle',
    'np.linalg.cholesky-2':
        'autograd returns the symmetric gradient; NumPy reads only the lower triangle',
    'np.linalg.cholesky-3': NO_ARGS,  # np.linalg.cholesky(x, upper=True)
    'np.linalg.eigvalsh-0': NO_VJP,  # np.linalg.eigvalsh(x)
    'np.linalg.eigvalsh-1': NO_VJP,  # np.linalg.eigvalsh(x, UPLO='U')
    'np.linalg.svd-2': NO_CASE,  # np.linalg.svd(x)
    'np.linalg.svd-4': NO_CASE,  # np.linalg.svd(x)[1]
    'np.linalg.qr-0': NO_VJP,  # np.linalg.qr(x)
    'np.linalg.qr-1': NO_VJP,  # np.linalg.qr(x)
    'np.linalg.qr-2': NO_VJP,  # np.linalg.qr(x)
    'np.linalg.qr-3': NO_VJP,  # np.linalg.qr(x, mode='r')
    'np.linalg.qr-4': NO_VJP,  # np.linalg.qr(x, mode='complete')
    'np.linalg.qr-5': NO_VJP,  # np.linalg.qr(x)
    'np.linalg.matrix_power-0': NO_VJP,  # np.linalg.matrix_power(x, 3)
    'np.linalg.matrix_power-1': NO_VJP,  # np.linalg.matrix_power(x, -2)
    'np.linalg.matrix_power-2': NO_VJP,  # np.linalg.matrix_power(x, 0)
    'np.linalg.matrix_power-3': NO_VJP,  # np.linalg.matrix_power(x, 2)
    'np.linalg.multi_dot-0': 'autograd does not trace a list of boxed values through multi_dot',
    'np.vecdot-0': NO_VJP,  # np.vecdot(x, y)
    'np.vecdot-1': NO_VJP,  # np.vecdot(x, y, axis=0)
    'np.vecdot-2': NO_VJP,  # np.linalg.vecdot(x, y)
    'np.linalg.svdvals-0': NO_VJP,  # np.linalg.svdvals(x)
    'np.linalg.svdvals-1': NO_VJP,  # np.linalg.svdvals(x)
    'np.linalg.trace-0': NO_VJP,  # np.linalg.trace(x)
    'np.linalg.trace-1': NO_VJP,  # np.linalg.trace(x, offset=1)
    'np.linalg.diagonal-0': NO_VJP,  # np.linalg.diagonal(x)
    'np.linalg.diagonal-1': NO_VJP,  # np.linalg.diagonal(x, offset=-1)
    'np.full-1': 'autograd does not undo broadcasting of fill_value and ignores dtype=int',
    'np.full-2': 'autograd does not undo broadcasting of fill_value and ignores dtype=int',
    'np.full_like-0': 'autograd gives no gradient for fill_value',  # np.full_like(y, x)
    'np.full_like-1': 'autograd gives no gradient for fill_value',  # np.full_like(y, x)
    'np.linspace-1': NO_ARGS,  # np.linspace(x, y, 4, endpoint=False)
    'np.linspace-2': NO_ARGS,  # np.linspace(x, y, 3, axis=1)
    'np.linspace-3': NO_ARGS,  # np.linspace(x, y, 4, retstep=True)
    'np.logspace-0': NO_VJP,  # np.logspace(x, y, 4)
    'np.logspace-1': NO_VJP,  # np.logspace(x, y, 3, base=b)
    'np.geomspace-0': NO_VJP,  # np.geomspace(x, y, 4)
    'np.geomspace-1': NO_VJP,  # np.geomspace(x, y, 3, endpoint=False)
    'np.arange-0': NO_VJP,  # np.arange(0.0, 2.0, x)
    'np.arange-1': NO_VJP,  # np.arange(x, 3.7)
    'np.arange-2': NO_VJP,  # np.arange(x, 4.0, y)
    'ndarray.prod-2': 'autograd divides by the input (nan/inf with zeros)',  # (x * c).prod(1)
    'ndarray.cumprod-0': NO_VJP,  # x.cumprod()
    'ndarray.cumprod-1': NO_VJP,  # x.cumprod(0)
    'ndarray.repeat-1': NO_ARGS,  # x.repeat([2, 1], axis=0)
    'ndarray.diagonal-0': NO_CASE,  # x.diagonal()
    'ndarray.diagonal-1': NO_CASE,  # x.diagonal(1)
    'ndarray.take-0': NO_VJP,  # x.take([1, 1, 0])
    'ndarray.take-1': NO_VJP,  # x.take([0, 2], axis=1)
    'ndarray.conj-0': NO_VJP,  # x.conj()
    'ndarray.conj-1': NO_VJP,  # x.conj() * y
    'ndarray.conjugate-0': NO_VJP,  # x.conjugate()
    'ndarray.conjugate-1': NO_VJP,  # x.conjugate()
    'ndarray.clip-1': NO_ARGS,  # x.clip(lo, hi)
    'ndarray.clip-2': NO_ARGS,  # x.clip(max=y)
    'ndarray.astype-1': 'autograd passes the cotangent through astype(int)',  # x.astype(int) * y
    'ndarray.copy-0': NO_VJP,  # x.copy()
    'ndarray.copy-1': NO_VJP,  # x.copy() * y
    'ndarray.item-0': NO_VJP,  # x.item(1) * y
    'ndarray.item-1': NO_VJP,  # x.item(1, 0)
    'ndarray.item-2': NO_VJP,  # x.item()
    'ndarray.compress-0': NO_VJP,  # x.compress([True, False, True])
    'ndarray.compress-1': NO_ARGS,  # x.compress([False, True], axis=0)
    'ndarray.mT-0': NO_VJP,  # x.mT
    'ndarray.mT-1': NO_VJP,  # x.mT @ y
    'ndarray.real-0': NO_VJP,  # x.real
    'ndarray.real-1': NO_VJP,  # x.real * y
    'ndarray.imag-0': NO_VJP,  # x.imag + x
    'ndarray.imag-1': NO_VJP,  # x.imag * y + y
    'scipy.integrate.odeint-0': NO_ARGS,   # args=, rtol= as keywords (tests/test_ode.py)
    'scipy.integrate.odeint-1': NO_ARGS,
    'scipy.special.loggamma-0': NO_VJP,   # (not in autograd.scipy.special)
    'scipy.special.loggamma-1': NO_VJP,
    'scipy.linalg.inv-0': NO_VJP,
    'scipy.linalg.inv-1': NO_VJP,
    'scipy.linalg.det-0': NO_VJP,
    'scipy.linalg.det-1': NO_VJP,
    'scipy.special.xlogy-0': NO_VJP,
    'scipy.special.xlogy-1': NO_VJP,
    'scipy.special.xlogy-2': NO_VJP,
    'scipy.special.logsumexp-3': NO_ARGS,  # b= as an array
    'scipy.special.logsumexp-4': NO_ARGS,  # return_sign=True
    'scipy.special.softmax-0': NO_VJP,
    'scipy.special.softmax-1': NO_VJP,
    'scipy.special.log_softmax-0': NO_VJP,
    'scipy.special.log_softmax-1': NO_VJP,
    # issue 34: NumPy functions and SciPy (special functions autograd lacks, loc/scale,
    # the cumulative functions it leaves out, scipy.linalg's triangles)
    'np.partition-1': NO_CASE,  # np.partition(x, 1, axis=0)
    'np.partition-2': NO_CASE,  # np.partition(x, (1, 3), axis=None)
    'np.gradient-1': NO_CASE,  # np.gradient(x, 0.5, axis=1)
    'np.gradient-2': NO_CASE,  # np.gradient(x, edge_order=2)[1]
    'np.gradient-3': NO_CASE,  # np.gradient(x, 2.0, c)
    'np.gradient-4': NO_CASE,  # np.gradient(x, c, edge_order=2)
    'np.astype-1': 'autograd passes the cotangent through astype(int)',  # np.astype(x, int) + x * y
    'np.linalg.eigvals-0': NO_VJP,  # np.linalg.eigvals(x)
    'np.linalg.eigvals-1': NO_VJP,  # np.linalg.eigvals(c + 0.1 * x)
    'scipy.special.log_expit-0': NO_VJP,  # scipy.special.log_expit(x)
    'scipy.special.log_expit-1': NO_VJP,  # scipy.special.log_expit(x) * y
    'scipy.special.erfcx-0': NO_VJP,  # scipy.special.erfcx(x)
    'scipy.special.erfcx-1': NO_VJP,  # scipy.special.erfcx(x) * y
    'scipy.special.ndtr-0': NO_VJP,  # scipy.special.ndtr(x)
    'scipy.special.ndtr-1': NO_VJP,  # scipy.special.ndtr(x) * y
    'scipy.special.log_ndtr-0': NO_VJP,  # scipy.special.log_ndtr(x)
    'scipy.special.log_ndtr-1': NO_VJP,  # scipy.special.log_ndtr(x) * y
    'scipy.special.ndtri-0': NO_VJP,  # scipy.special.ndtri(x)
    'scipy.special.ndtri-1': NO_VJP,  # scipy.special.ndtri(x) * y
    'scipy.special.i0e-0': NO_VJP,  # scipy.special.i0e(x)
    'scipy.special.i0e-1': NO_VJP,  # scipy.special.i0e(x) * y
    'scipy.special.i1e-0': NO_VJP,  # scipy.special.i1e(x)
    'scipy.special.i1e-1': NO_VJP,  # scipy.special.i1e(x) * y
    'scipy.special.k0-0': NO_VJP,  # scipy.special.k0(x)
    'scipy.special.k0-1': NO_VJP,  # scipy.special.k0(x) * y
    'scipy.special.k1-0': NO_VJP,  # scipy.special.k1(x)
    'scipy.special.k1-1': NO_VJP,  # scipy.special.k1(x) * y
    'scipy.special.k0e-0': NO_VJP,  # scipy.special.k0e(x)
    'scipy.special.k0e-1': NO_VJP,  # scipy.special.k0e(x) * y
    'scipy.special.k1e-0': NO_VJP,  # scipy.special.k1e(x)
    'scipy.special.k1e-1': NO_VJP,  # scipy.special.k1e(x) * y
    'scipy.special.jv-0': NO_VJP,  # scipy.special.jv(1.5, x)
    'scipy.special.jv-1': NO_VJP,  # scipy.special.jv(v, x)
    'scipy.special.yv-0': NO_VJP,  # scipy.special.yv(1.5, x)
    'scipy.special.yv-1': NO_VJP,  # scipy.special.yv(v, x)
    'scipy.special.kv-0': NO_VJP,  # scipy.special.kv(1.5, x)
    'scipy.special.kv-1': NO_VJP,  # scipy.special.kv(v, x)
    'scipy.special.kve-0': NO_VJP,  # scipy.special.kve(1.5, x)
    'scipy.special.kve-1': NO_VJP,  # scipy.special.kve(v, x)
    'scipy.special.betaincc-0': NO_VJP,  # scipy.special.betaincc(2.0, 3.0, x)
    'scipy.special.betaincc-1': NO_VJP,  # scipy.special.betaincc(0.7, c, x)
    'scipy.special.xlog1py-0': NO_VJP,  # scipy.special.xlog1py(x, y)
    'scipy.special.xlog1py-1': NO_VJP,  # scipy.special.xlog1py(c, y)
    'scipy.stats.t.cdf-1': NO_VJP,  # scipy.stats.t.cdf(x, d, m, s)
    'scipy.stats.t.logcdf-1': NO_VJP,  # scipy.stats.t.logcdf(x, d, m, s)
    'scipy.stats.t.sf-0': NO_VJP,  # scipy.stats.t.sf(x, d)
    'scipy.stats.t.sf-1': NO_VJP,  # scipy.stats.t.sf(x, d, m, s)
    'scipy.stats.t.logsf-0': NO_VJP,  # scipy.stats.t.logsf(x, d)
    'scipy.stats.t.logsf-1': NO_VJP,  # scipy.stats.t.logsf(x, d, m, s)
    'scipy.stats.gamma.pdf-1': NO_ARGS,  # scipy.stats.gamma.pdf(x, a, scale=s)
    'scipy.stats.gamma.logpdf-1': NO_ARGS,  # scipy.stats.gamma.logpdf(x, a, scale=s)
    'scipy.stats.gamma.cdf-1': NO_ARGS,  # scipy.stats.gamma.cdf(x, a, scale=s)
    'scipy.stats.gamma.logcdf-0': NO_VJP,  # scipy.stats.gamma.logcdf(x, a)
    'scipy.stats.gamma.logcdf-1': NO_VJP,  # scipy.stats.gamma.logcdf(x, a, scale=s)
    'scipy.stats.gamma.sf-0': NO_VJP,  # scipy.stats.gamma.sf(x, a)
    'scipy.stats.gamma.sf-1': NO_VJP,  # scipy.stats.gamma.sf(x, a, scale=s)
    'scipy.stats.gamma.logsf-0': NO_VJP,  # scipy.stats.gamma.logsf(x, a)
    'scipy.stats.gamma.logsf-1': NO_VJP,  # scipy.stats.gamma.logsf(x, a, scale=s)
    'scipy.stats.beta.pdf-1': NO_ARGS,  # scipy.stats.beta.pdf(x, a, b, scale=s)
    'scipy.stats.beta.logpdf-1': NO_ARGS,  # scipy.stats.beta.logpdf(x, a, b, scale=s)
    'scipy.stats.beta.cdf-1': NO_ARGS,  # scipy.stats.beta.cdf(x, a, b, scale=s)
    'scipy.stats.beta.logcdf-0': NO_VJP,  # scipy.stats.beta.logcdf(x, a, b)
    'scipy.stats.beta.logcdf-1': NO_VJP,  # scipy.stats.beta.logcdf(x, a, b, scale=s)
    'scipy.stats.beta.sf-0': NO_VJP,  # scipy.stats.beta.sf(x, a, b)
    'scipy.stats.beta.sf-1': NO_VJP,  # scipy.stats.beta.sf(x, a, b, scale=s)
    'scipy.stats.beta.logsf-0': NO_VJP,  # scipy.stats.beta.logsf(x, a, b)
    'scipy.stats.beta.logsf-1': NO_VJP,  # scipy.stats.beta.logsf(x, a, b, scale=s)
    'scipy.stats.chi2.pdf-0': NO_VJP,  # scipy.stats.chi2.pdf(x, d)
    'scipy.stats.chi2.pdf-1': NO_ARGS,  # scipy.stats.chi2.pdf(x, d, scale=s)
    'scipy.stats.chi2.logpdf-0': NO_VJP,  # scipy.stats.chi2.logpdf(x, d)
    'scipy.stats.chi2.logpdf-1': NO_ARGS,  # scipy.stats.chi2.logpdf(x, d, scale=s)
    'scipy.stats.chi2.cdf-1': NO_ARGS,  # scipy.stats.chi2.cdf(x, d, scale=s)
    'scipy.stats.chi2.logcdf-0': NO_VJP,  # scipy.stats.chi2.logcdf(x, d)
    'scipy.stats.chi2.logcdf-1': NO_VJP,  # scipy.stats.chi2.logcdf(x, d, scale=s)
    'scipy.stats.chi2.sf-0': NO_VJP,  # scipy.stats.chi2.sf(x, d)
    'scipy.stats.chi2.sf-1': NO_VJP,  # scipy.stats.chi2.sf(x, d, scale=s)
    'scipy.stats.chi2.logsf-0': NO_VJP,  # scipy.stats.chi2.logsf(x, d)
    'scipy.stats.chi2.logsf-1': NO_VJP,  # scipy.stats.chi2.logsf(x, d, scale=s)
    'scipy.stats.poisson.logcdf-0': NO_VJP,  # scipy.stats.poisson.logcdf(k, mu)
    'scipy.stats.poisson.logcdf-1': NO_VJP,  # scipy.stats.poisson.logcdf(k, mu)
    'scipy.stats.poisson.sf-0': NO_VJP,  # scipy.stats.poisson.sf(k, mu)
    'scipy.stats.poisson.sf-1': NO_VJP,  # scipy.stats.poisson.sf(k, mu)
    'scipy.stats.poisson.logsf-0': NO_VJP,  # scipy.stats.poisson.logsf(k, mu)
    'scipy.stats.poisson.logsf-1': NO_VJP,  # scipy.stats.poisson.logsf(k, mu)
    'scipy.stats.dirichlet.pdf-0': NO_VJP,  # scipy.stats.dirichlet.pdf(scipy.special.softmax(y), a)
    'scipy.stats.dirichlet.pdf-1': NO_VJP,  # scipy.stats.dirichlet.pdf(scipy.special.softmax(y, axi
    'scipy.stats.multivariate_normal.pdf-0': _TRIANGLE,  # scipy.stats.multivariate_normal.pdf(x, m,
    'scipy.stats.multivariate_normal.pdf-1': _TRIANGLE,  # scipy.stats.multivariate_normal.pdf(x, m,
    'scipy.stats.multivariate_normal.pdf-2': NO_ARGS,  # scipy.stats.multivariate_normal.pdf(x, cov=
    'scipy.stats.dirichlet.logpdf-0': NO_VJP,  # scipy.stats.dirichlet.logpdf(scipy.special.softmax(
    'scipy.stats.dirichlet.logpdf-1': NO_VJP,  # scipy.stats.dirichlet.logpdf(scipy.special.softmax(
    'scipy.stats.multivariate_normal.logpdf-0': _TRIANGLE,  # scipy.stats.multivariate_normal.logpdf
    'scipy.stats.multivariate_normal.logpdf-1': _TRIANGLE,  # scipy.stats.multivariate_normal.logpdf
    'scipy.stats.multivariate_normal.logpdf-2': NO_ARGS,  # scipy.stats.multivariate_normal.logpdf(x
    'scipy.stats.multivariate_normal.entropy-0': NO_ARGS,  # scipy.stats.multivariate_normal.entropy
    'scipy.stats.multivariate_normal.entropy-1': _TRIANGLE,  # scipy.stats.multivariate_normal.entro
    'scipy.linalg.solve_triangular-2': 'autograd ignores unit_diagonal=True',  # scipy.linalg.solve_
    'scipy.linalg.solve_triangular-3': 'autograd ignores unit_diagonal=True',  # scipy.linalg.solve_
    'scipy.linalg.cholesky-0': NO_VJP,  # scipy.linalg.cholesky(x)
    'scipy.linalg.cholesky-1': NO_VJP,  # scipy.linalg.cholesky(x, lower=True)
    'scipy.linalg.cho_factor-0': NO_VJP,  # scipy.linalg.cho_factor(x)[0]
    'scipy.linalg.cho_factor-1': NO_VJP,  # scipy.linalg.cho_factor(x, lower=True)[0]
    'scipy.linalg.cho_solve-0': NO_ARGS,  # scipy.linalg.cho_solve((x, True), y)
    'scipy.linalg.cho_solve-1': NO_ARGS,  # scipy.linalg.cho_solve((x, False), y)
    'scipy.linalg.cho_solve-2': NO_VJP,  # scipy.linalg.cho_solve(scipy.linalg.cho_factor(x), y)
    'scipy.linalg.expm-0': NO_VJP,  # scipy.linalg.expm(x)
    'scipy.linalg.expm-1': NO_VJP,  # scipy.linalg.expm(0.5 * x)
    'scipy.signal.correlate-0': NO_VJP,  # scipy.signal.correlate(x, y)
    'scipy.signal.correlate-1': NO_VJP,  # scipy.signal.correlate(x, y, mode='same')
    'scipy.signal.correlate-2': NO_VJP,  # scipy.signal.correlate(x, y, mode='valid')
}
