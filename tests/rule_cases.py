"""Test inputs for every entry of the gradient table, keyed by rule name.

Each case is (expression, {argument: spec}); a spec is a shape tuple, or
("positive", shape) / ("away_from_zero", shape) / ("unit", shape) for
functions with a restricted domain, or ("const", value) for a value passed
in without a gradient. Every rule has at least two cases, one broadcasting
where the function broadcasts, and axis/keepdims variants for reductions.
Matrix inputs: ("spd", shape) symmetric positive definite, ("wellcond",
shape) square and far from singular; ("sorted", shape) strictly increasing.
A shape () argument is a Python float.
"""
import numpy as np

_NAN3 = np.array([1.0, np.nan, 2.0])
_NAN23 = np.array([[1.0, np.nan, 2.0], [np.nan, 3.0, -1.0]])
_ZEROS = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])
_MASK23 = np.array([[True, False, True], [True, True, False]])
_TRAPZ = "np.trapezoid" if hasattr(np, "trapezoid") else "np.trapz"

CASES = {
    "builtins.sorted": [
        ("np.stack(sorted([np.sum(x), np.sum(np.sin(x)), x[0] * 2.0]))", {"x": (3,)}),
        ("sorted([np.sum(x ** 2), np.sum(x), np.sum(np.cos(x))], reverse=True)[0] * "
         "sorted([x[0, 0], x[1, 1]], key=abs)[1]", {"x": (2, 3)})],
    "builtins.float": [("float(x) * x", {"x": ()}), ("float(np.sum(x)) * x", {"x": (3,)})],
    "np.float64": [("np.float64(x) * x", {"x": ()}), ("np.float64(x) ** 2 * y", {"x": (2, 3),
                                                                               "y": (3,)}),
                   ("np.float64(np.sum(x)) * x", {"x": (3,)})],
    "np.add": [("np.add(x, y)", {"x": (3,), "y": (3,)}),
               ("x + y", {"x": (2, 3), "y": (3,)}),
               ("x + y", {"x": (4, 1), "y": (1, 3)})],
    "np.subtract": [("np.subtract(x, y)", {"x": (3,), "y": (3,)}),
                    ("x - y", {"x": (2, 1), "y": (2, 3)})],
    "np.multiply": [("np.multiply(x, y)", {"x": (3,), "y": (3,)}),
                    ("x * y", {"x": (2, 3), "y": ()}),
                    ("x * x", {"x": (2, 3)})],
    "np.divide": [("np.divide(x, y)", {"x": (3,), "y": ("away_from_zero", (3,))}),
                  ("np.divide(x, y)", {"x": (2, 3), "y": ("away_from_zero", (2, 1))}),
                  ("x / y", {"x": (2, 1), "y": ("away_from_zero", (3,))}),
                  ("np.true_divide(x, y)", {"x": (3,), "y": ("away_from_zero", ())})],
    "np.power": [("x ** 3", {"x": (4,)}),
                 ("x ** y", {"x": ("positive", (2, 3)), "y": (3,)}),
                 ("np.power(x, y)", {"x": ("positive", (3,)), "y": ()})],
    "np.negative": [("-x", {"x": (3,)}), ("np.negative(x)", {"x": (2, 2)})],
    "np.positive": [("+x", {"x": (3,)}), ("np.positive(x)", {"x": (2, 2)})],
    "np.matmul": [("x @ y", {"x": (2, 3), "y": (3, 4)}),
                  ("np.matmul(x, y)", {"x": (3,), "y": (3, 2)}),
                  ("x @ y", {"x": (2, 3), "y": (3,)}),
                  ("x @ y", {"x": (5, 2, 3), "y": (3, 4)}),
                  ("x @ y", {"x": (3,), "y": (3,)})],
    "np.exp": [("np.exp(x)", {"x": (3,)}), ("np.exp(x)", {"x": (2, 3)})],
    "np.log": [("np.log(x)", {"x": ("positive", (3,))}),
               ("np.log(x)", {"x": ("positive", (2, 2))})],
    "np.sin": [("np.sin(x)", {"x": (3,)}), ("np.sin(x) * y", {"x": (2, 1), "y": (3,)})],
    "np.cos": [("np.cos(x)", {"x": (3,)}), ("np.cos(x)", {"x": (2, 2)})],
    "np.tanh": [("np.tanh(x)", {"x": (3,)}), ("np.tanh(x)", {"x": (2, 2)})],
    "np.sqrt": [("np.sqrt(x)", {"x": ("positive", (3,))}),
                ("np.sqrt(x)", {"x": ("positive", (2, 2))})],
    "np.absolute": [("np.absolute(x)", {"x": ("away_from_zero", (3,))}),
                    ("np.abs(x)", {"x": ("away_from_zero", (2, 2))}),
                    ("abs(x)", {"x": ("away_from_zero", (3,))})],
    "np.maximum": [("np.maximum(x, y)", {"x": (4,), "y": (4,)}),
                   ("np.maximum(x, y)", {"x": (2, 3), "y": (3,)})],
    "np.minimum": [("np.minimum(x, y)", {"x": (4,), "y": (4,)}),
                   ("np.minimum(x, y)", {"x": (2, 1), "y": (2, 3)})],
    "np.where": [("np.where(x > 0, x, y)", {"x": (4,), "y": (4,)}),
                 ("np.where(x > 0, x * 2, y)", {"x": (2, 3), "y": (3,)})],
    "np.sum": [("np.sum(x)", {"x": (3,)}), ("np.sum(x, axis=0)", {"x": (2, 3)}),
               ("np.sum(x, axis=1, keepdims=True)", {"x": (2, 3)}),
               ("np.sum(x, axis=(0, 2))", {"x": (2, 3, 2)}),
               ("np.sum(x, axis=-1)", {"x": (2, 3)})],
    "np.mean": [("np.mean(x)", {"x": (3,)}), ("np.mean(x, axis=0)", {"x": (2, 3)}),
                ("np.mean(x, axis=(0, 1), keepdims=True)", {"x": (2, 3, 2)})],
    "np.dot": [("np.dot(x, y)", {"x": (3,), "y": (3,)}),
               ("np.dot(x, y)", {"x": (2, 3), "y": (3, 2)}),
               ("np.dot(x, y)", {"x": (2, 3), "y": (3,)}),
               ("np.dot(x, y)", {"x": (), "y": (3,)}),
               ("np.dot(x, y)", {"x": (2, 2, 3), "y": (4, 3, 2)})],
    "np.reshape": [("np.reshape(x, (3, 2))", {"x": (2, 3)}),
                   ("np.reshape(x, -1)", {"x": (2, 3)})],
    "np.transpose": [("np.transpose(x)", {"x": (2, 3)}),
                     ("np.transpose(x, (1, 2, 0))", {"x": (2, 3, 4)})],
    "ndarray.sum": [("x.sum()", {"x": (3,)}), ("x.sum(axis=1)", {"x": (2, 3)}),
                    ("x.sum(0, keepdims=True)", {"x": (2, 3)})],
    "ndarray.mean": [("x.mean()", {"x": (3,)}), ("x.mean(axis=1)", {"x": (2, 3)})],
    "ndarray.dot": [("x.dot(y)", {"x": (2, 3), "y": (3,)}),
                    ("x.dot(y)", {"x": (3,), "y": (3, 2)})],
    "ndarray.reshape": [("x.reshape(3, 2)", {"x": (2, 3)}),
                        ("x.reshape((6,))", {"x": (2, 3)}),
                        ("x.reshape(-1, 1) * y", {"x": (3,), "y": (4,)})],
    "ndarray.transpose": [("x.transpose()", {"x": (2, 3)}),
                          ("x.transpose(1, 0, 2)", {"x": (2, 3, 2)}),
                          ("x.transpose((2, 0, 1))", {"x": (2, 3, 2)})],
    "ndarray.T": [("x.T", {"x": (2, 3)}), ("x.T @ y", {"x": (3, 2), "y": (3,)})],
}


# --- more elementwise math -----------------------------------------------------------
_UNARY = {
    "np.exp2": None, "np.expm1": None, "np.log2": "positive", "np.log10": "positive",
    "np.log1p": "positive", "np.cbrt": "away_from_zero", "np.square": None,
    "np.reciprocal": "away_from_zero", "np.tan": "unit", "np.arcsin": "unit",
    "np.arccos": "unit", "np.arctan": None, "np.sinh": None, "np.cosh": None,
    "np.arcsinh": None, "np.arctanh": "unit", "np.fabs": "away_from_zero",
    "np.sinc": None, "np.deg2rad": None, "np.rad2deg": None, "np.real": None,
    "np.imag": None, "np.conjugate": None,
}
for _name, _kind in _UNARY.items():
    def _spec(shape, kind=_kind):
        return shape if kind is None else (kind, shape)
    CASES[_name] = [(f"{_name}(x)", {"x": _spec((3,))}),
                    (f"{_name}(x) * y", {"x": _spec((2, 1)), "y": (3,)}),
                    (f"{_name}(x)", {"x": _spec(())})]
CASES["np.arccosh"] = [("np.arccosh(1.0 + x)", {"x": ("positive", (3,))}),
                       ("np.arccosh(x + 1.5)", {"x": ("positive", (2, 2))})]
CASES["math.erf"] = [("math.erf(x)", {"x": ()}), ("math.erf(x * 0.5) * y", {"x": (), "y": (3,)})]
CASES["math.erfc"] = [("math.erfc(x)", {"x": ()}), ("math.erfc(x) ** 2", {"x": ()})]
CASES["np.sinc"].append(("np.sinc(x)", {"x": ("with_zeros", (4,))}))   # (its series at 0)
CASES["np.deg2rad"].append(("np.radians(x)", {"x": (2,)}))
CASES["np.rad2deg"].append(("np.degrees(x)", {"x": (2,)}))
CASES["np.conjugate"].append(("np.conj(x)", {"x": (2,)}))

_BINARY = {  # name: (expression, spec of x, spec of y)
    "np.float_power": ("np.float_power(x, y)", ("positive", (2, 3)), (3,)),
    "np.arctan2": ("np.arctan2(x, y)", (2, 3), ("away_from_zero", (3,))),
    "np.fmax": ("np.fmax(x, y)", (2, 3), (3,)),
    "np.fmin": ("np.fmin(x, y)", (2, 1), (2, 3)),
    "np.hypot": ("np.hypot(x, y)", (2, 3), (3,)),
    "np.logaddexp": ("np.logaddexp(x, y)", (2, 3), (1, 3)),
    "np.logaddexp2": ("np.logaddexp2(x, y)", (3,), (2, 1)),
    "np.remainder": ("np.remainder(x, y)", (2, 3), ("away_from_zero", (3,))),
    "np.fmod": ("np.fmod(x, y)", (2, 3), ("away_from_zero", (3,))),
    "np.copysign": ("np.copysign(x, y)", ("away_from_zero", (2, 3)), ("away_from_zero", (3,))),
}


def _reshaped(spec, shape):
    return (spec[0], shape) if isinstance(spec[0], str) else shape


for _name, (_expr, _sx, _sy) in _BINARY.items():
    CASES[_name] = [(_expr, {"x": _sx, "y": _sy}),
                    (_expr, {"x": _reshaped(_sx, (4,)), "y": _reshaped(_sy, ())})]
CASES["np.remainder"].append(("x % y", {"x": (2, 3), "y": ("away_from_zero", (2, 1))}))
CASES["np.float_power"].append(("np.float_power(x, 3.0)", {"x": (3,)}))

CASES.update({
    "np.clip": [("np.clip(x, -0.5, 0.5)", {"x": (2, 3)}),
                ("np.clip(x, lo, hi)", {"x": (2, 3), "lo": ("const", -0.3), "hi": (3,)}),
                ("np.clip(x, lo, None)", {"x": (2, 3), "lo": (2, 1)}),
                ("np.clip(x, lo, hi)", {"x": (4,), "lo": (), "hi": ()})],
    "np.nan_to_num": [("np.nan_to_num(x + c)", {"c": ("const", _NAN3), "x": (3,)}),
                      ("np.nan_to_num(x + c, nan=y)",
                       {"c": ("const", _NAN23), "x": (2, 3), "y": ()}),
                      ("np.nan_to_num(x + c, posinf=y, neginf=z)",
                       {"c": ("const", np.array([np.inf, -np.inf, 2.0, np.nan])), "x": (4,),
                        "y": (), "z": ()})],
    "np.divmod": [("np.divmod(x, y)", {"x": (3,), "y": ("away_from_zero", (3,))}),
                  ("np.divmod(x, y)[1]", {"x": (2, 3), "y": ("away_from_zero", ())})],
    "np.modf": [("np.modf(x)", {"x": (3,)}), ("np.modf(x * y)[0]", {"x": (2, 1), "y": (3,)})],
    "np.frexp": [("np.frexp(x)[0]", {"x": ("away_from_zero", (3,))}),
                 ("np.frexp(x * 5.0)[0] * y", {"x": ("away_from_zero", (2, 2)), "y": ()})],
    "np.ldexp": [("np.ldexp(x, 3)", {"x": (3,)}),
                 ("np.ldexp(x, c)", {"x": (2, 3), "c": ("const", np.array([1, -2, 3]))})],
    "np.heaviside": [("np.heaviside(c, y)", {"c": ("const", np.array([-1.0, 0.0, 2.0])),
                                             "y": (3,)}),
                     ("np.heaviside(c, y)", {"c": ("const", np.array([[0.0, 1.0], [0.0, -1.0]])),
                                             "y": ()})],
})

# --- reductions -----------------------------------------------------------------------
CASES.update({
    "np.prod": [("np.prod(x)", {"x": (4,)}), ("np.prod(x, axis=1)", {"x": (2, 3)}),
                ("np.prod(x, axis=(0, 2), keepdims=True)", {"x": (2, 3, 2)}),
                ("np.prod(x * c, axis=1)", {"x": (2, 3), "c": ("const", _ZEROS)}),
                ("np.prod(x * c)", {"x": (2, 3), "c": ("const", _ZEROS)}),
                ("np.prod(x, axis=0, initial=y)", {"x": (2, 3), "y": ()}),
                ("np.prod(x, axis=1, where=c)", {"x": (2, 3), "c": ("const", _MASK23)}),
                ("np.prod(x, axis=1)", {"x": ("with_zeros", (2, 3))})],
    "np.max": [("np.max(x)", {"x": (4,)}), ("np.max(x, axis=0)", {"x": (3, 2)}),
               ("np.max(x, axis=(1, 2), keepdims=True)", {"x": (2, 3, 2)}),
               ("np.amax(x, axis=-1)", {"x": (2, 3)}),
               ("np.max(x, axis=1, initial=y)", {"x": (2, 3), "y": ()}),
               ("np.max(x, axis=1, where=c, initial=-5.0)",
                {"x": (2, 3), "c": ("const", _MASK23)})],
    "np.min": [("np.min(x)", {"x": (4,)}), ("np.min(x, axis=1, keepdims=True)", {"x": (3, 2)}),
               ("np.amin(x, axis=(0, 1))", {"x": (2, 3, 2)}),
               ("np.min(x, initial=y)", {"x": (3,), "y": ()})],
    "np.nanmax": [("np.nanmax(x + c)", {"x": (3,), "c": ("const", _NAN3)}),
                  ("np.nanmax(x + c, axis=1)", {"x": (2, 3), "c": ("const", _NAN23)})],
    "np.nanmin": [("np.nanmin(x + c, axis=0)", {"x": (2, 3), "c": ("const", _NAN23)}),
                  ("np.nanmin(x, keepdims=True)", {"x": (2, 2)})],
    "np.var": [("np.var(x)", {"x": (4,)}), ("np.var(x, axis=0, ddof=1)", {"x": (3, 2)}),
               ("np.var(x, axis=(0, 2), keepdims=True)", {"x": (2, 3, 2)}),
               ("np.var(x, axis=1, where=c)", {"x": (2, 3), "c": ("const", _MASK23)})],
    "np.std": [("np.std(x)", {"x": (4,)}), ("np.std(x, axis=1, ddof=1)", {"x": (2, 3)}),
               ("np.std(x, axis=0, keepdims=True)", {"x": (3, 2)}),
               ("np.std(x, axis=1, where=c)", {"x": (2, 3), "c": ("const", _MASK23)})],
    "np.nanvar": [("np.nanvar(x + c)", {"x": (3,), "c": ("const", _NAN3)}),
                  ("np.nanvar(x + c, axis=0, ddof=1)",
                   {"x": (3, 3), "c": ("const", np.array([[1.0, np.nan, 1.0], [1.0, 1.0, 1.0],
                                                          [np.nan, 1.0, 1.0]]))})],
    "np.nanstd": [("np.nanstd(x + c)", {"x": (3,), "c": ("const", _NAN3)}),
                  ("np.nanstd(x, axis=1, keepdims=True)", {"x": (2, 3)})],
    "np.average": [("np.average(x)", {"x": (4,)}),
                   ("np.average(x, axis=1, weights=w)", {"x": (2, 3), "w": ("positive", (3,))}),
                   ("np.average(x, axis=0, weights=w)", {"x": (2, 3), "w": ("positive", (2, 3))}),
                   ("np.average(x, weights=w, returned=True)",
                    {"x": (3,), "w": ("positive", (3,))}),
                   ("np.average(x, axis=1, keepdims=True)", {"x": (2, 3)})],
    "np.nansum": [("np.nansum(x + c)", {"x": (3,), "c": ("const", _NAN3)}),
                  ("np.nansum(x + c, axis=1, keepdims=True)", {"x": (2, 3), "c": ("const",
                                                               _NAN23)})],
    "np.nanmean": [("np.nanmean(x + c)", {"x": (3,), "c": ("const", _NAN3)}),
                   ("np.nanmean(x + c, axis=0)", {"x": (2, 3), "c": ("const", _NAN23)})],
    "np.nanprod": [("np.nanprod(x + c)", {"x": (3,), "c": ("const", _NAN3)}),
                   ("np.nanprod(x + c, axis=1)", {"x": (2, 3), "c": ("const", _NAN23)})],
    "np.cumsum": [("np.cumsum(x)", {"x": (2, 3)}), ("np.cumsum(x, axis=0)", {"x": (3, 2)}),
                  ("np.cumsum(x, axis=-1)", {"x": (2, 2, 3)})],
    "np.cumprod": [("np.cumprod(x)", {"x": (2, 3)}), ("np.cumprod(x, axis=1)", {"x": (2, 4)}),
                   ("np.cumprod(x * c, axis=1)", {"x": (2, 3), "c": ("const", _ZEROS)}),
                   ("np.cumprod(x * c)", {"x": (2, 3), "c": ("const", _ZEROS)}),
                   # zeros of x itself: the second derivative past the first zero is not 0
                   ("np.cumprod(x)", {"x": ("with_zeros", (5,))}),
                   ("np.cumprod(x, axis=1)", {"x": ("with_zeros", (2, 4))})],
    "np.nancumsum": [("np.nancumsum(x + c)", {"x": (3,), "c": ("const", _NAN3)}),
                     ("np.nancumsum(x + c, axis=1)", {"x": (2, 3), "c": ("const", _NAN23)})],
    "np.nancumprod": [("np.nancumprod(x + c)", {"x": (3,), "c": ("const", _NAN3)}),
                      ("np.nancumprod(x + c, axis=0)", {"x": (2, 3), "c": ("const", _NAN23)})],
    "np.ptp": [("np.ptp(x)", {"x": (4,)}), ("np.ptp(x, axis=1)", {"x": (2, 3)}),
               ("np.ptp(x, axis=0, keepdims=True)", {"x": (3, 2)})],
    "np.quantile": [("np.quantile(x, 0.3)", {"x": (5,)}),
                    ("np.quantile(x, [0.25, 0.5, 1.0], axis=1)", {"x": (2, 5)}),
                    ("np.quantile(x, 0.7, axis=(0, 2), keepdims=True)", {"x": (2, 3, 2)})],
    "np.nanquantile": [("np.nanquantile(x + c, 0.4)", {"x": (3,), "c": ("const", _NAN3)}),
                       ("np.nanquantile(x + c, [0.1, 0.9], axis=1)",
                        {"x": (2, 3), "c": ("const", _NAN23)})],
    "np.percentile": [("np.percentile(x, 30)", {"x": (5,)}),
                      ("np.percentile(x, [10.0, 75.0], axis=0)", {"x": (4, 2)})],
    "np.nanpercentile": [("np.nanpercentile(x + c, 60)", {"x": (3,), "c": ("const", _NAN3)}),
                         ("np.nanpercentile(x, 40, axis=1)", {"x": (2, 4)})],
    "np.median": [("np.median(x)", {"x": (5,)}), ("np.median(x, axis=1)", {"x": (2, 4)}),
                  ("np.median(x, axis=0, keepdims=True)", {"x": (3, 2)})],
    "np.nanmedian": [("np.nanmedian(x + c)", {"x": (3,), "c": ("const", _NAN3)}),
                     ("np.nanmedian(x + c, axis=1)", {"x": (2, 3), "c": ("const", _NAN23)})],
    "np.diff": [("np.diff(x)", {"x": (5,)}), ("np.diff(x, n=2, axis=0)", {"x": (4, 3)}),
                ("np.diff(x, prepend=y, append=z)", {"x": (2, 3), "y": (2, 1), "z": ()}),
                ("np.diff(x, axis=0, prepend=y)", {"x": (3, 2), "y": (1, 2)})],
    "np.ediff1d": [("np.ediff1d(x)", {"x": (2, 3)}),
                   ("np.ediff1d(x, to_end=y, to_begin=z)", {"x": (4,), "y": (2,), "z": ()})],
    "np.trapezoid": [(f"{_TRAPZ}(x)", {"x": (5,)}),
                     (f"{_TRAPZ}(x, y)", {"x": (2, 4), "y": ("sorted", (4,))}),
                     (f"{_TRAPZ}(x, dx=y, axis=0)", {"x": (3, 2), "y": ()}),
                     (f"{_TRAPZ}(x, y, axis=0)", {"x": (3, 2), "y": (3, 2)})],
    "np.linalg.norm": [("np.linalg.norm(x)", {"x": (2, 3)}),
                       ("np.linalg.norm(x, axis=1)", {"x": (2, 3)}),
                       ("np.linalg.norm(x, ord=1)", {"x": ("away_from_zero", (4,))}),
                       ("np.linalg.norm(x, ord=np.inf, axis=0, keepdims=True)", {"x": (3, 2)}),
                       ("np.linalg.norm(x, ord=3)", {"x": ("away_from_zero", (4,))}),
                       ("np.linalg.norm(x, ord=-np.inf)", {"x": (4,)}),
                       ("np.linalg.norm(x, ord='fro')", {"x": (3, 2)}),
                       ("np.linalg.norm(x, ord=2)", {"x": (3, 2)}),
                       ("np.linalg.norm(x, ord=-2)", {"x": (3, 3)}),
                       ("np.linalg.norm(x, ord='nuc', axis=(1, 2))", {"x": (2, 3, 2)}),
                       ("np.linalg.norm(x, ord=1)", {"x": ("away_from_zero", (3, 3))}),
                       ("np.linalg.norm(x, ord=np.inf, axis=(2, 0), keepdims=True)",
                        {"x": ("away_from_zero", (3, 2, 3))}),
                       ("np.linalg.norm(x, ord=-1)", {"x": ("away_from_zero", (2, 3))})],
    "np.cov": [("np.cov(x)", {"x": (2, 5)}), ("np.cov(x, rowvar=False, ddof=0)", {"x": (4, 3)}),
               ("np.cov(x, y)", {"x": (5,), "y": (5,)}), ("np.cov(x, bias=True)", {"x": (3, 4)})],
    "np.corrcoef": [("np.corrcoef(x)", {"x": (3, 5)}),
                    ("np.corrcoef(x, y)", {"x": (6,), "y": (6,)}),
                    ("np.corrcoef(x, rowvar=False)", {"x": (5, 2)})],
})
if hasattr(np, "cumulative_sum"):
    CASES["np.cumulative_sum"] = [
        ("np.cumulative_sum(x)", {"x": (4,)}),
        ("np.cumulative_sum(x, axis=1, include_initial=True)", {"x": (2, 3)})]
    CASES["np.cumulative_prod"] = [
        ("np.cumulative_prod(x)", {"x": (4,)}),
        ("np.cumulative_prod(x * c, axis=1, include_initial=True)",
         {"x": (2, 3), "c": ("const", _ZEROS)})]
if hasattr(np.linalg, "vector_norm"):
    CASES["np.linalg.vector_norm"] = [
        ("np.linalg.vector_norm(x)", {"x": (2, 3)}),
        ("np.linalg.vector_norm(x, axis=0, ord=1)", {"x": ("away_from_zero", (3, 2))}),
        ("np.linalg.vector_norm(x, axis=(0, 2), keepdims=True, ord=np.inf)", {"x": (2, 2, 3)})]
    CASES["np.linalg.matrix_norm"] = [
        ("np.linalg.matrix_norm(x)", {"x": (2, 3, 3)}),
        ("np.linalg.matrix_norm(x, ord=2, keepdims=True)", {"x": (3, 2)}),
        ("np.linalg.matrix_norm(x, ord='nuc')", {"x": (2, 3)})]

# --- shape ------------------------------------------------------------------------------
CASES.update({
    "np.ravel": [("np.ravel(x)", {"x": (2, 3)}),
                 ("np.ravel(x, order='F') * y", {"x": (2, 3), "y": (6,)}),
                 ("np.ravel(x.T, order='K')", {"x": (2, 3)})],
    "np.squeeze": [("np.squeeze(x)", {"x": (1, 3, 1)}),
                   ("np.squeeze(x, axis=0) * y", {"x": (1, 2), "y": (3, 1)})],
    "np.expand_dims": [("np.expand_dims(x, 0)", {"x": (3,)}),
                       ("np.expand_dims(x, (0, 2)) * y", {"x": (2, 3), "y": (2, 1, 1, 1)})],
    "np.swapaxes": [("np.swapaxes(x, 0, 1)", {"x": (2, 3)}),
                    ("np.swapaxes(x, -1, 0)", {"x": (2, 3, 4)})],
    "np.moveaxis": [("np.moveaxis(x, 0, -1)", {"x": (2, 3, 4)}),
                    ("np.moveaxis(x, (0, 1), (2, 0))", {"x": (2, 3, 4)})],
    "np.rollaxis": [("np.rollaxis(x, 2)", {"x": (2, 3, 4)}),
                    ("np.rollaxis(x, 0, 2)", {"x": (2, 3, 4)})],
    "np.broadcast_to": [("np.broadcast_to(x, (2, 3))", {"x": (3,)}),
                        ("np.broadcast_to(x, (2, 2, 3))", {"x": (2, 1, 1)})],
    "np.broadcast_arrays": [("np.broadcast_arrays(x, y)", {"x": (3,), "y": (2, 1)}),
                            ("np.broadcast_arrays(x, y, 1.0)[0]", {"x": (2, 1, 3), "y": (4, 1)})],
    "np.atleast_1d": [("np.atleast_1d(x)", {"x": ()}),
                      ("np.atleast_1d(x, y)", {"x": (), "y": (2,)})],
    "np.atleast_2d": [("np.atleast_2d(x)", {"x": (3,)}),
                      ("np.atleast_2d(x, y)[1]", {"x": (3,), "y": ()})],
    "np.atleast_3d": [("np.atleast_3d(x)", {"x": (3,)}), ("np.atleast_3d(x)", {"x": (2, 3)})],
    "np.concatenate": [("np.concatenate([x, y])", {"x": (2,), "y": (3,)}),
                       ("np.concatenate((x, y, x), axis=1)", {"x": (2, 1), "y": (2, 3)}),
                       ("np.concatenate([x, y], axis=None)", {"x": (2, 2), "y": (3,)}),
                       ("np.concatenate(x, axis=-1)", {"x": (2, 3, 2)})],
    "np.stack": [("np.stack([x, y])", {"x": (3,), "y": (3,)}),
                 ("np.stack((x, y, x), axis=-1)", {"x": (2, 2), "y": (2, 2)}),
                 ("np.stack([x, y, 2.0])", {"x": (), "y": ()}),
                 ("np.stack(x, axis=1)", {"x": (3, 2)})],
    "np.vstack": [("np.vstack([x, y])", {"x": (3,), "y": (2, 3)}),
                  ("np.vstack((x, y))", {"x": (2,), "y": (2,)})],
    "np.hstack": [("np.hstack([x, y])", {"x": (3,), "y": (2,)}),
                  ("np.hstack((x, y))", {"x": (2, 1), "y": (2, 3)})],
    "np.dstack": [("np.dstack([x, y])", {"x": (3,), "y": (3,)}),
                  ("np.dstack((x, y))", {"x": (2, 2), "y": (2, 2, 2)})],
    "np.column_stack": [("np.column_stack([x, y])", {"x": (3,), "y": (3, 2)}),
                        ("np.column_stack((x, y))", {"x": (2,), "y": (2,)})],
    "np.split": [("np.split(x, 2)[1]", {"x": (4,)}),
                 ("np.split(x, [1, 3], axis=1)[2] * 3.0", {"x": (2, 4)}),
                 ("np.concatenate(np.split(x, 3)[::-1])", {"x": (3, 2)})],
    "np.array_split": [("np.array_split(x, 3)[0]", {"x": (5,)}),
                       ("np.array_split(x, 2, axis=1)[1]", {"x": (2, 3)})],
    "np.hsplit": [("np.hsplit(x, 2)[0]", {"x": (4,)}), ("np.hsplit(x, [1])[1]", {"x": (2, 3)})],
    "np.vsplit": [("np.vsplit(x, 2)[1]", {"x": (4, 2)}), ("np.vsplit(x, [1])[0]", {"x": (3, 2)})],
    "np.dsplit": [("np.dsplit(x, 2)[1]", {"x": (2, 1, 4)}),
                  ("np.dsplit(x, [1])[0]", {"x": (1, 2, 3)})],
    "np.tile": [("np.tile(x, 2)", {"x": (3,)}), ("np.tile(x, (2, 1, 2))", {"x": (2, 3)}),
                ("np.tile(x, 3)", {"x": (2, 2)})],
    "np.repeat": [("np.repeat(x, 2)", {"x": (2, 2)}),
                  ("np.repeat(x, [1, 0, 3], axis=1)", {"x": (2, 3)})],
    "np.resize": [("np.resize(x, (2, 4))", {"x": (3,)}), ("np.resize(x, 3)", {"x": (2, 2)})],
    "np.flip": [("np.flip(x)", {"x": (2, 3)}),
                ("np.flip(x, axis=1) * y", {"x": (2, 3), "y": (3,)})],
    "np.fliplr": [("np.fliplr(x)", {"x": (2, 3)}), ("np.fliplr(x)", {"x": (2, 2, 2)})],
    "np.flipud": [("np.flipud(x)", {"x": (3,)}), ("np.flipud(x)", {"x": (2, 3)})],
    "np.roll": [("np.roll(x, 2)", {"x": (2, 3)}),
                ("np.roll(x, (1, -1), axis=(0, 1))", {"x": (2, 3)}),
                ("np.roll(x, -1, axis=1)", {"x": (2, 3)})],
    "np.rot90": [("np.rot90(x)", {"x": (2, 3)}), ("np.rot90(x, 3, axes=(1, 2))", {"x": (2, 3, 2)})],
    "np.pad": [("np.pad(x, 1)", {"x": (2, 3)}),
               ("np.pad(x, ((1, 0), (0, 2)), constant_values=y)", {"x": (2, 2), "y": ()}),
               ("np.pad(x, (2, 3), mode='reflect')", {"x": (4,)}),
               ("np.pad(x, 2, mode='edge')", {"x": (2, 2)}),
               ("np.pad(x, (1, 2), mode='wrap')", {"x": (3,)}),
               ("np.pad(x, 1, mode='symmetric')", {"x": (2, 3)})],
    "np.diag": [("np.diag(x)", {"x": (3,)}), ("np.diag(x, 1)", {"x": (3, 4)}),
                ("np.diag(x, -1)", {"x": (2,)})],
    "np.diagflat": [("np.diagflat(x)", {"x": (2, 2)}), ("np.diagflat(x, 1)", {"x": (3,)})],
    "np.diagonal": [("np.diagonal(x)", {"x": (3, 3)}),
                    ("np.diagonal(x, 1, 0, 2)", {"x": (2, 3, 4)})],
    "np.trace": [("np.trace(x)", {"x": (3, 3)}), ("np.trace(x, -1, 1, 2)", {"x": (2, 3, 3)})],
    "np.triu": [("np.triu(x)", {"x": (3, 3)}), ("np.triu(x, 1)", {"x": (2, 3, 4)})],
    "np.tril": [("np.tril(x)", {"x": (3, 3)}), ("np.tril(x, -1)", {"x": (2, 3, 4)})],
    "np.take": [("np.take(x, [0, 2, 2])", {"x": (2, 3)}),
                ("np.take(x, [[1, 0], [1, 1]], axis=1)", {"x": (2, 3)}),
                ("np.take(x, [4, -1], mode='wrap')", {"x": (3,)}),
                ("np.take(x, 1, axis=0)", {"x": (3, 2)})],
    "np.take_along_axis": [("np.take_along_axis(x, np.argsort(x, axis=1), axis=1)", {"x": (2, 3)}),
                           ("np.take_along_axis(x, c, axis=0)",
                            {"x": (3, 2), "c": ("const", np.array([[0, 0], [2, 1]]))})],
    "np.compress": [("np.compress([True, False, True], x)", {"x": (3,)}),
                    ("np.compress([False, True], x, axis=1)", {"x": (3, 2)})],
    "np.extract": [("np.extract(c, x)", {"c": ("const", _MASK23), "x": (2, 3)}),
                   ("np.extract(x > 0, x)", {"x": (4,)})],
    "np.delete": [("np.delete(x, 1)", {"x": (3,)}),
                  ("np.delete(x, [0, 2], axis=1)", {"x": (2, 3)})],
    "np.insert": [("np.insert(x, 1, y)", {"x": (3,), "y": ()}),
                  ("np.insert(x, [0, 2], y, axis=1)", {"x": (2, 3), "y": (2, 1)}),
                  ("np.insert(x, 1, y, axis=0)", {"x": (2, 3), "y": (3,)})],
    "np.append": [("np.append(x, y)", {"x": (2, 2), "y": (3,)}),
                  ("np.append(x, y, axis=0)", {"x": (2, 3), "y": (1, 3)})],
    "np.select": [("np.select([x > 0.5, x < 0], [x, y * 2.0], z)", {"x": (4,), "y": (4,), "z": ()}),
                  ("np.select([x > 0], [y])", {"x": (2, 3), "y": (3,)})],
    "np.sort": [("np.sort(x)", {"x": (2, 3)}), ("np.sort(x, axis=0)", {"x": (3, 2)}),
                ("np.sort(x, axis=None)", {"x": (2, 2)})],
    "np.copy": [("np.copy(x)", {"x": (3,)}), ("np.copy(x) * y", {"x": (2, 1), "y": (3,)})],
    "np.array": [("np.array([x, y])", {"x": (), "y": ()}),
                 ("np.array((x, y, x))", {"x": (2,), "y": (2,)}),
                 ("np.array(x)", {"x": (2, 3)}), ("np.array([x, 1.0], ndmin=2)", {"x": ()}),
                 ("np.array([x, y], dtype=np.float64)", {"x": (3,), "y": (3,)})],
    "np.asarray": [("np.asarray(x)", {"x": (3,)}), ("np.asarray([x, y])", {"x": (2,), "y": (2,)}),
                   ("np.ascontiguousarray(x.T)", {"x": (2, 3)})],
    "np.asanyarray": [("np.asanyarray(x)", {"x": (3,)}),
                      ("np.asanyarray((x, y)) * 2.0", {"x": (), "y": ()})],
    "np.meshgrid": [("np.meshgrid(x, y)", {"x": (3,), "y": (2,)}),
                    ("np.meshgrid(x, y, indexing='ij', sparse=True)", {"x": (3,), "y": (2,)}),
                    ("np.meshgrid(x, y, z)", {"x": (2,), "y": (3,), "z": (2,)})],
    "np.bincount": [("np.bincount([0, 1, 1, 3], weights=w)", {"w": (4,)}),
                    ("np.bincount([2, 0, 2], weights=w, minlength=5)", {"w": (3,)})],
    "np.interp": [("np.interp(x, [0.0, 1.0, 3.0], y)", {"x": (4,), "y": (3,)}),
                  ("np.interp(x, xp, y, left=l, right=r)",
                   {"x": ("const", np.array([-1.0, 0.7, 2.2, 2.9, 9.0])), "xp": ("sorted", (4,)),
                    "y": (4,), "l": (), "r": ()}),
                  ("np.interp(x * 3.0, xp, y)", {"x": ("positive", (3,)), "xp": ("sorted", (3,)),
                                                 "y": (3,)})],
    "np.polyfit": [("np.polyfit(x, y, 2)", {"x": (5,), "y": (5,)}),
                   ("np.polyfit(x, y, 1)", {"x": (4,), "y": (4, 2)}),
                   ("np.polyfit(x, y, deg=2, rcond=1e-10)", {"x": (3,), "y": (3,)})],
    "np.vander": [("np.vander(x)", {"x": (4,)}),
                  ("np.vander(x, 3, increasing=True) * y", {"x": (5,), "y": (3,)}),
                  ("np.vander(x, N=1)", {"x": (3,)})],
    "np.polynomial.polynomial.polyval": [
        ("np.polynomial.polynomial.polyval(x, c)", {"x": (4,), "c": (3,)}),
        ("np.polynomial.polynomial.polyval(x, [1.0, a, b])", {"x": (2, 2), "a": (), "b": ()})],
    "np.polyval": [("np.polyval(p, x)", {"p": (3,), "x": (4,)}),
                   ("np.polyval([a, b, 1.0], x)", {"a": (), "b": (), "x": (2, 2)})],
    "np.convolve": [("np.convolve(x, y)", {"x": (4,), "y": (2,)}),
                    ("np.convolve(x, y, 'same')", {"x": (3,), "y": (5,)}),
                    ("np.convolve(x, y, mode='valid')", {"x": (5,), "y": (3,)})],
    "np.correlate": [("np.correlate(x, y)", {"x": (4,), "y": (2,)}),
                     ("np.correlate(x, y, 'same')", {"x": (2, ), "y": (5,)}),
                     ("np.correlate(x, y, mode='full')", {"x": (3,), "y": (4,)})],
})
if hasattr(np, "unstack"):
    CASES["np.unstack"] = [("np.unstack(x)", {"x": (2, 3)}),
                           ("np.unstack(x, axis=1)[1]", {"x": (2, 3)})]
if hasattr(np, "matrix_transpose"):
    CASES["np.matrix_transpose"] = [("np.matrix_transpose(x)", {"x": (2, 3)}),
                                    ("np.linalg.matrix_transpose(x)", {"x": (2, 2, 3)})]

# --- linear algebra -------------------------------------------------------------------------
CASES.update({
    "np.vdot": [("np.vdot(x, y)", {"x": (3,), "y": (3,)}),
                ("np.vdot(x, y)", {"x": (2, 3), "y": (6,)})],
    "np.inner": [("np.inner(x, y)", {"x": (3,), "y": (3,)}),
                 ("np.inner(x, y)", {"x": (2, 3), "y": (4, 3)}),
                 ("np.inner(x, y)", {"x": (), "y": (2,)})],
    "np.outer": [("np.outer(x, y)", {"x": (3,), "y": (2,)}),
                 ("np.outer(x, y)", {"x": (2, 2), "y": ()})],
    "np.tensordot": [("np.tensordot(x, y)", {"x": (2, 3, 4), "y": (3, 4, 2)}),
                     ("np.tensordot(x, y, axes=1)", {"x": (2, 3), "y": (3, 2)}),
                     ("np.tensordot(x, y, axes=([0, 2], [2, 0]))", {"x": (2, 3, 4), "y": (4, 3,
                                                                    2)}),
                     ("np.tensordot(x, y, axes=0)", {"x": (2,), "y": (3,)}),
                     ("np.linalg.tensordot(x, y, axes=(1, 0))", {"x": (2, 3), "y": (3, 2)})],
    "np.einsum": [("np.einsum('ij,jk->ik', x, y)", {"x": (2, 3), "y": (3, 2)}),
                  ("np.einsum('ij,jk', x, y)", {"x": (2, 3), "y": (3, 4)}),
                  ("np.einsum('ii->', x)", {"x": (3, 3)}),
                  ("np.einsum('ii->i', x)", {"x": (3, 3)}),
                  ("np.einsum('i,i', x, y)", {"x": (3,), "y": (3,)}),
                  ("np.einsum('i,j->ij', x, y)", {"x": (3,), "y": (2,)}),
                  ("np.einsum('...ij,...jk->...ik', x, y)", {"x": (2, 2, 3), "y": (3, 2)}),
                  ("np.einsum('ij->', x)", {"x": (2, 3)}),
                  ("np.einsum('ij,ij->ij', x, y)", {"x": (2, 1), "y": (2, 3)}),
                  ("np.einsum('bij,bjk,bk->bi', x, y, z)", {"x": (2, 2, 3), "y": (2, 3, 2),
                                                            "z": (2, 2)}),
                  ("np.einsum('iij->j', x)", {"x": (2, 2, 3)}),
                  ("np.einsum('Ba,aC', x, y)", {"x": (2, 3), "y": (3, 2)}),
                  ("np.einsum(x, [0, 1], y, [1, 2], [0, 2])", {"x": (2, 3), "y": (3, 2)}),
                  ("np.einsum('i,->i', x, y)", {"x": (3,), "y": ()}),
                  # a label of size 1 in one operand, broadcast to the other's: the
                  # larger operand's cotangent has its length (fuzz seed 5402)
                  ("np.einsum('i,i', x, y)", {"x": (3,), "y": (1,)}),
                  ("np.einsum('ij,j->i', x, y)", {"x": (2, 3), "y": (1,)})],
    "np.kron": [("np.kron(x, y)", {"x": (2, 2), "y": (3, 2)}),
                ("np.kron(x, y)", {"x": (3,), "y": (2, 2)})],
    "np.cross": [("np.cross(x, y)", {"x": (3,), "y": (3,)}),
                 ("np.cross(x, y)", {"x": (2, 3), "y": (3,)}),
                 ("np.cross(x, y, axis=0)", {"x": (3, 2), "y": (3, 2)}),
                 ("np.linalg.cross(x, y)", {"x": (2, 3), "y": (2, 3)})],
    "np.linalg.inv": [("np.linalg.inv(x)", {"x": ("wellcond", (3, 3))}),
                      ("np.linalg.inv(x)", {"x": ("wellcond", (2, 2, 2))})],
    "np.linalg.solve": [("np.linalg.solve(a, b)", {"a": ("wellcond", (3, 3)), "b": (3,)}),
                        ("np.linalg.solve(a, b)", {"a": ("wellcond", (3, 3)), "b": (3, 2)}),
                        ("np.linalg.solve(a, b)", {"a": ("wellcond", (2, 3, 3)), "b": (3, 1)})],
    "np.linalg.det": [("np.linalg.det(x)", {"x": ("wellcond", (3, 3))}),
                      ("np.linalg.det(x)", {"x": (2, 2, 2)}),
                      ("np.linalg.det(x)", {"x": (1, 1)}),
                      ("np.linalg.det(x)", {"x": ("rank_deficient", (2, 3, 3))})],
    "np.linalg.slogdet": [("np.linalg.slogdet(x)", {"x": ("wellcond", (3, 3))}),
                          ("np.linalg.slogdet(x)[1]", {"x": ("wellcond", (2, 2, 2))})],
    "np.linalg.cholesky": [("np.linalg.cholesky(x)", {"x": ("spd", (3, 3))}),
                           ("np.linalg.cholesky(x @ x.T + 3.0 * np.eye(3))", {"x": (3, 3)}),
                           ("np.linalg.cholesky(x)", {"x": ("spd", (2, 2, 2))}),
                           ("np.linalg.cholesky(x, upper=True)", {"x": ("spd", (3, 3))})],
    "np.linalg.eigh": [("np.linalg.eigh(x)[0]", {"x": ("spd", (3, 3))}),
                       ("np.linalg.eigh(x)", {"x": ("spd", (3, 3))}),
                       ("np.linalg.eigh(x + x.T)[1] ** 2", {"x": (3, 3)}),
                       ("np.linalg.eigh(x, UPLO='U')", {"x": ("spd", (2, 3, 3))})],
    "np.linalg.eigvalsh": [("np.linalg.eigvalsh(x)", {"x": ("spd", (3, 3))}),
                           ("np.linalg.eigvalsh(x, UPLO='U')", {"x": (2, 3, 3)})],
    "np.linalg.svd": [("np.linalg.svd(x, full_matrices=False)", {"x": (3, 2)}),
                      ("np.linalg.svd(x, full_matrices=False)", {"x": (2, 3)}),
                      ("np.linalg.svd(x)", {"x": (3, 3)}),
                      ("np.linalg.svd(x, compute_uv=False)", {"x": (4, 3)}),
                      ("np.linalg.svd(x)[1]", {"x": (3, 2)}),
                      ("np.linalg.svd(x, full_matrices=False)", {"x": (2, 3, 2)})],
    "np.linalg.lstsq": [("np.linalg.lstsq(x, y, rcond=None)[0]", {"x": (4, 2), "y": (4,)}),
                        ("np.linalg.lstsq(x, y, rcond=None)", {"x": (5, 3), "y": (5, 2)}),
                        ("np.linalg.lstsq(x, y)[0]", {"x": (2, 3), "y": (2,)}),
                        ("np.linalg.lstsq(x, y)[1] * np.sum(np.linalg.lstsq(x, y)[3])",
                         {"x": (4, 2), "y": (4,)})],
    "scipy.spatial.distance.cdist": [
        ("scipy.spatial.distance.cdist(x, y)", {"x": (4, 3), "y": (2, 3)}),
        ("scipy.spatial.distance.cdist(x, y, 'sqeuclidean')", {"x": (3, 2), "y": (4, 2)}),
        ("scipy.spatial.distance.cdist(x, y, 'cityblock')", {"x": (3, 2), "y": (2, 2)}),
        ("scipy.spatial.distance.cdist(x, y, metric='minkowski', p=3)",
         {"x": (3, 2), "y": (2, 2)}),
        ("scipy.spatial.distance.cdist(x, y, 'chebyshev')", {"x": (2, 3), "y": (3, 3)}),
        ("scipy.spatial.distance.cdist(x, y, 'cosine')", {"x": (3, 4), "y": (2, 4)}),
        ("np.exp(-scipy.spatial.distance.cdist(x, x) ** 2)", {"x": (4, 2)})],
    "scipy.spatial.distance.pdist": [
        ("scipy.spatial.distance.pdist(x)", {"x": (4, 3)}),
        ("scipy.spatial.distance.pdist(x, 'sqeuclidean')", {"x": (3, 2)}),
        ("scipy.spatial.distance.pdist(x, 'cosine')", {"x": (4, 2)}),
        ("scipy.spatial.distance.pdist(x, 'minkowski', p=1.5)", {"x": (3, 3)})],
    "scipy.spatial.distance.squareform": [
        ("scipy.spatial.distance.squareform(x) * y", {"x": (6,), "y": (4, 4)}),
        ("scipy.spatial.distance.squareform(x + x.T, checks=False)", {"x": (3, 3)}),
        ("np.exp(-scipy.spatial.distance.squareform(scipy.spatial.distance.pdist(x)))",
         {"x": (4, 2)})],
    "scipy.linalg.solve": [
        ("scipy.linalg.solve(x, y)", {"x": ("wellcond", (3, 3)), "y": (3,)}),
        ("scipy.linalg.solve(x, y, assume_a='pos')", {"x": ("spd", (3, 3)), "y": (3, 2)}),
        ("scipy.linalg.solve(x, y, assume_a='sym', lower=True, transposed=True)",
         {"x": ("wellcond", (3, 3)), "y": (3,)}),
        ("scipy.linalg.solve(x, y, assume_a='upper triangular')",
         {"x": ("wellcond", (3, 3)), "y": (3, 2)}),
        ("scipy.linalg.solve(x, y, assume_a='tridiagonal', transposed=True)",
         {"x": ("wellcond", (4, 4)), "y": (4,)}),
        ("scipy.linalg.solve(x, y, assume_a='diagonal')", {"x": ("wellcond", (3, 3)),
                                                           "y": (3,)})],
    "scipy.linalg.lstsq": [("scipy.linalg.lstsq(x, y)[0]", {"x": (4, 2), "y": (4,)}),
                           ("scipy.linalg.lstsq(x, y)", {"x": (5, 3), "y": (5, 2)}),
                           ("scipy.linalg.lstsq(x, y, lapack_driver='gelsy')[0]",
                            {"x": (2, 3), "y": (2,)}),
                           ("scipy.linalg.lstsq(x, y)[1] * scipy.linalg.lstsq(x, y)[3]",
                            {"x": (4, 2), "y": (4,)})],
    "scipy.linalg.pinv": [("scipy.linalg.pinv(x)", {"x": (3, 2)}),
                          ("scipy.linalg.pinv(x, atol=1e-12)", {"x": (2, 3)}),
                          ("scipy.linalg.pinv(x, return_rank=True)[0]", {"x": (2, 3)})],
    "scipy.linalg.block_diag": [("scipy.linalg.block_diag(x, y)", {"x": (2, 2), "y": (3,)}),
                                ("scipy.linalg.block_diag(x, 2.0, y)",
                                 {"x": (1, 3), "y": (2, 1)})],
    "np.linalg.pinv": [("np.linalg.pinv(x)", {"x": (3, 2)}), ("np.linalg.pinv(x)", {"x": (2, 3)}),
                       ("np.linalg.pinv(x)", {"x": ("wellcond", (2, 2, 2))})],
    "np.linalg.qr": [("np.linalg.qr(x)", {"x": (3, 2)}),
                     ("np.linalg.qr(x)", {"x": ("wellcond", (3, 3))}),
                     ("np.linalg.qr(x)", {"x": (2, 4)}),
                     ("np.linalg.qr(x, mode='r')", {"x": (4, 3)}),
                     ("np.linalg.qr(x, mode='complete')", {"x": (2, 3)}),
                     ("np.linalg.qr(x)", {"x": (2, 3, 2)})],
    "np.linalg.matrix_power": [("np.linalg.matrix_power(x, 3)", {"x": (3, 3)}),
                               ("np.linalg.matrix_power(x, -2)", {"x": ("wellcond", (2, 2))}),
                               ("np.linalg.matrix_power(x, 0)", {"x": (2, 2)}),
                               ("np.linalg.matrix_power(x, 2)", {"x": (2, 3, 3)})],
    "np.linalg.multi_dot": [("np.linalg.multi_dot([x, y, z])", {"x": (2, 3), "y": (3, 4), "z": (4,
                                                                2)}),
                            ("np.linalg.multi_dot([x, y, z])", {"x": (3,), "y": (3, 2),
                                                                "z": (2,)})],
})
if hasattr(np, "vecdot"):
    CASES["np.vecdot"] = [("np.vecdot(x, y)", {"x": (2, 3), "y": (3,)}),
                          ("np.vecdot(x, y, axis=0)", {"x": (3, 2), "y": (3, 1)}),
                          ("np.linalg.vecdot(x, y)", {"x": (3,), "y": (3,)})]
if hasattr(np.linalg, "svdvals"):
    CASES["np.linalg.svdvals"] = [("np.linalg.svdvals(x)", {"x": (3, 2)}),
                                  ("np.linalg.svdvals(x)", {"x": (2, 2, 3)})]
if hasattr(np.linalg, "trace"):
    CASES["np.linalg.trace"] = [("np.linalg.trace(x)", {"x": (3, 3)}),
                                ("np.linalg.trace(x, offset=1)", {"x": (2, 3, 3)})]
    CASES["np.linalg.diagonal"] = [("np.linalg.diagonal(x)", {"x": (3, 3)}),
                                   ("np.linalg.diagonal(x, offset=-1)", {"x": (2, 3, 2)})]
CASES["np.matmul"].append(("np.linalg.matmul(x, y)", {"x": (2, 3), "y": (3,)}))
CASES["np.outer"].append(("np.linalg.outer(x, y)", {"x": (2,), "y": (3,)}))

# --- constructors with differentiable arguments -------------------------------------
CASES.update({
    "np.full": [("np.full((2, 3), x)", {"x": ()}), ("np.full((2, 3), x)", {"x": (3,)}),
                ("np.full(3, x, dtype=int) * 1.0", {"x": ()})],
    "np.full_like": [("np.full_like(y, x)", {"x": (), "y": (2, 2)}),
                     ("np.full_like(y, x)", {"x": (2, 1), "y": (2, 3)})],
    "np.linspace": [("np.linspace(x, y, 5)", {"x": (), "y": ()}),
                    ("np.linspace(x, y, 4, endpoint=False)", {"x": (2,), "y": (2,)}),
                    ("np.linspace(x, y, 3, axis=1)", {"x": (2,), "y": ()}),
                    ("np.linspace(x, y, 4, retstep=True)", {"x": (), "y": ()})],
    "np.logspace": [("np.logspace(x, y, 4)", {"x": ("unit", ()), "y": ("unit", ())}),
                    ("np.logspace(x, y, 3, base=b)", {"x": ("unit", (2,)), "y": ("unit", ()),
                                                      "b": ("positive", ())})],
    "np.geomspace": [("np.geomspace(x, y, 4)", {"x": ("positive", ()), "y": ("positive", ())}),
                     ("np.geomspace(x, y, 3, endpoint=False)", {"x": ("positive", (2,)),
                                                                "y": ("positive", (2,))})],
    "np.arange": [("np.arange(0.0, 2.0, x)", {"x": ("positive", ())}),
                  ("np.arange(x, 3.7)", {"x": ("positive", ())}),
                  ("np.arange(x, 4.0, y)", {"x": ("unit", ()), "y": ("positive", ())})],
})

# --- array methods and attributes -------------------------------------------------------
CASES.update({
    "ndarray.prod": [("x.prod()", {"x": (3,)}), ("x.prod(axis=1, keepdims=True)", {"x": (2, 3)}),
                     ("(x * c).prod(1)", {"x": (2, 3), "c": ("const", _ZEROS)})],
    "ndarray.max": [("x.max()", {"x": (3,)}), ("x.max(axis=0)", {"x": (2, 3)})],
    "ndarray.min": [("x.min()", {"x": (3,)}), ("x.min(1, keepdims=True)", {"x": (2, 3)})],
    "ndarray.var": [("x.var()", {"x": (3,)}), ("x.var(axis=0, ddof=1)", {"x": (3, 2)})],
    "ndarray.std": [("x.std()", {"x": (3,)}), ("x.std(1)", {"x": (2, 3)})],
    "ndarray.cumsum": [("x.cumsum()", {"x": (2, 2)}), ("x.cumsum(axis=1)", {"x": (2, 3)})],
    "ndarray.cumprod": [("x.cumprod()", {"x": (3,)}), ("x.cumprod(0)", {"x": (3, 2)})],
    "ndarray.ravel": [("x.ravel()", {"x": (2, 3)}), ("x.ravel('F')", {"x": (2, 3)})],
    "ndarray.flatten": [("x.flatten()", {"x": (2, 3)}), ("x.flatten(order='F')", {"x": (3, 2)})],
    "ndarray.squeeze": [("x.squeeze()", {"x": (1, 3)}), ("x.squeeze(axis=2)", {"x": (2, 3, 1)})],
    "ndarray.swapaxes": [("x.swapaxes(0, 1)", {"x": (2, 3)}),
                         ("x.swapaxes(2, 0)", {"x": (2, 3, 2)})],
    "ndarray.repeat": [("x.repeat(2)", {"x": (3,)}), ("x.repeat([2, 1], axis=0)", {"x": (2, 2)})],
    "ndarray.diagonal": [("x.diagonal()", {"x": (3, 3)}), ("x.diagonal(1)", {"x": (2, 3)})],
    "ndarray.trace": [("x.trace()", {"x": (3, 3)}), ("x.trace(offset=-1)", {"x": (3, 2)})],
    "ndarray.take": [("x.take([1, 1, 0])", {"x": (3,)}), ("x.take([0, 2], axis=1)", {"x": (2, 3)})],
    "ndarray.conj": [("x.conj()", {"x": (3,)}), ("x.conj() * y", {"x": (2, 1), "y": (3,)})],
    "ndarray.conjugate": [("x.conjugate()", {"x": (3,)}), ("x.conjugate()", {"x": (2, 2)})],
    "ndarray.clip": [("x.clip(-0.5, 0.5)", {"x": (2, 3)}),
                     ("x.clip(lo, hi)", {"x": (2, 3), "lo": (3,), "hi": ()}),
                     ("x.clip(max=y)", {"x": (4,), "y": ()})],
    "ndarray.astype": [("x.astype(np.float64)", {"x": (3,)}),
                       ("x.astype(int) * y", {"x": (2, 2), "y": (2,)}),
                       ("x.astype('float64')", {"x": (2, 2)})],
    "ndarray.copy": [("x.copy()", {"x": (3,)}), ("x.copy() * y", {"x": (2, 1), "y": (3,)})],
    "ndarray.item": [("x.item(1) * y", {"x": (3,), "y": (2,)}), ("x.item(1, 0)", {"x": (2, 2)}),
                     ("x.item()", {"x": (1,)})],
    "ndarray.compress": [("x.compress([True, False, True])", {"x": (3,)}),
                         ("x.compress([False, True], axis=0)", {"x": (2, 3)})],
    "ndarray.mT": [("x.mT", {"x": (2, 3)}), ("x.mT @ y", {"x": (2, 3, 2), "y": (3,)})],
    "ndarray.real": [("x.real", {"x": (3,)}), ("x.real * y", {"x": (2, 1), "y": (3,)})],
    "ndarray.imag": [("x.imag + x", {"x": (3,)}), ("x.imag * y + y", {"x": (2, 1), "y": (3,)})],
})

# --- scipy.special (only when SciPy is installed) -------------------------------------------
try:
    import scipy.special  # noqa: F401
except ImportError:
    pass
else:
    if hasattr(scipy.special, "softplus"):
        CASES["scipy.special.softplus"] = [
            ("scipy.special.softplus(x)", {"x": (3,)}),
            ("scipy.special.softplus(x * 3.0) * y", {"x": (2, 1), "y": (3,)})]
    CASES.update({
        "scipy.special.expit": [("scipy.special.expit(x)", {"x": (3,)}),
                                ("scipy.special.expit(x) * y", {"x": (2, 1), "y": (3,)})],
        "scipy.special.entr": [("scipy.special.entr(x)", {"x": ("positive", (3,))}),
                               ("scipy.special.entr(x) * y", {"x": ("positive", (2, 1)),
                                                              "y": (3,)})],
        "scipy.special.logit": [("scipy.special.logit(x)", {"x": ("unit", (3,))}),
                                ("scipy.special.logit(x)", {"x": ("unit", ())})],
        "scipy.special.erf": [("scipy.special.erf(x)", {"x": (3,)}),
                              ("scipy.special.erf(x)", {"x": (2, 2)})],
        "scipy.special.erfc": [("scipy.special.erfc(x)", {"x": (3,)}),
                               ("scipy.special.erfc(x)", {"x": ()})],
        "scipy.special.gammaln": [("scipy.special.gammaln(x)", {"x": ("positive", (3,))}),
                                  ("scipy.special.gammaln(x)", {"x": ("positive", (2, 2))})],
        "scipy.special.loggamma": [("scipy.special.loggamma(x)", {"x": ("positive", (3,))}),
                                   ("scipy.special.loggamma(x) * y",
                                    {"x": ("positive", (2, 2)), "y": (2,)})],
        "scipy.special.digamma": [("scipy.special.digamma(x)", {"x": ("positive", (3,))}),
                                  ("scipy.special.digamma(x)", {"x": ("positive", ())})],
        "scipy.special.xlogy": [
            ("scipy.special.xlogy(x, y)", {"x": (2, 3), "y": ("positive", (3,))}),
            ("scipy.special.xlogy(c, y)",
             {"c": ("const", np.array([0.0, 1.5])), "y": ("positive", (2,))}),
            ("scipy.special.xlogy(x, y)", {"x": ("with_zeros", (2, 3)), "y": ("positive", (3,))})],
        "scipy.special.logsumexp": [
            ("scipy.special.logsumexp(x)", {"x": (4,)}),
            ("scipy.special.logsumexp(x, axis=1)", {"x": (2, 3)}),
            ("scipy.special.logsumexp(x, axis=(0, 2), keepdims=True)", {"x": (2, 3, 2)}),
            ("scipy.special.logsumexp(x, b=w, axis=0)", {"x": (3, 2), "w": ("positive", (3, 2))}),
            ("scipy.special.logsumexp(x, b=w, return_sign=True)",
             {"x": (3,), "w": ("away_from_zero", (3,))})],
        "scipy.special.softmax": [("scipy.special.softmax(x)", {"x": (4,)}),
                                  ("scipy.special.softmax(x, axis=1)", {"x": (2, 3)})],
        "scipy.special.log_softmax": [("scipy.special.log_softmax(x)", {"x": (2, 2)}),
                                      ("scipy.special.log_softmax(x, axis=0)", {"x": (3, 2)})],
    })

# --- NumPy functions of issue 34 ----------------------------------------------------------------
_UPPER = np.array([[1.0, 0.7, -0.4], [0.0, 3.0, 0.5], [0.0, 0.0, 6.0]])
CASES.update({
    "np.partition": [("np.partition(x, 2)", {"x": (5,)}),
                     ("np.partition(x, 1, axis=0)", {"x": (4, 3)}),
                     ("np.partition(x, (1, 3), axis=None)", {"x": (2, 3)})],
    "np.gradient": [("np.gradient(x)", {"x": (5,)}),
                    ("np.gradient(x, 0.5, axis=1)", {"x": (3, 4)}),
                    ("np.gradient(x, edge_order=2)[1]", {"x": (3, 4)}),
                    ("np.gradient(x, 2.0, c)", {"x": (3, 4), "c": ("const", np.array(
                        [0.0, 0.5, 1.5, 2.0]))}),
                    ("np.gradient(x, c, edge_order=2)", {"x": (4,), "c": ("const", np.array(
                        [0.0, 0.5, 1.5, 2.0]))})],
    "np.fft.fftshift": [("np.fft.fftshift(x)", {"x": (5,)}),
                        ("np.fft.fftshift(x, axes=1) * y", {"x": (2, 3), "y": (3,)})],
    "np.fft.ifftshift": [("np.fft.ifftshift(x)", {"x": (2, 3)}),
                         ("np.fft.ifftshift(x, axes=(0,))", {"x": (5, 2)})],
    # complex results: a real function of them (tests/test_complex.py: complex arguments)
    "np.fft.fft": [("np.real(np.fft.fft(x) * y)", {"x": (5,), "y": (5,)}),
                   ("np.abs(np.fft.fft(x, n=6, axis=0))", {"x": (4, 3)}),
                   ("np.imag(np.fft.fft(x, n=3, norm='ortho'))", {"x": (5,)})],
    "np.fft.ifft": [("np.imag(np.fft.ifft(x, n=3))", {"x": (5,)}),
                    ("np.abs(np.fft.ifft(x, axis=0, norm='forward'))", {"x": (4, 2)})],
    "np.fft.fft2": [("np.real(np.fft.fft2(x)) + np.imag(np.fft.fft2(x))", {"x": (3, 4)}),
                    ("np.abs(np.fft.fft2(x, s=(4, 2)))", {"x": (2, 3, 3)})],
    "np.fft.ifft2": [("np.real(np.fft.ifft2(x, axes=(0, 1)))", {"x": (3, 2, 2)}),
                     ("np.abs(np.fft.ifft2(x))", {"x": (3, 4)})],
    "np.fft.fftn": [("np.abs(np.fft.fftn(x))", {"x": (2, 3, 2)}),
                    ("np.imag(np.fft.fftn(x, s=(3,), axes=(1,)))", {"x": (2, 4)})],
    "np.fft.ifftn": [("np.abs(np.fft.ifftn(x, norm='ortho'))", {"x": (3, 3)}),
                     ("np.real(np.fft.ifftn(x) * (1.0 + 2.0j))", {"x": (4,)})],
    "np.fft.rfft": [("np.abs(np.fft.rfft(x))", {"x": (6,)}),
                    ("np.real(np.fft.rfft(x, n=7, axis=0) * 2.0j)", {"x": (5, 2)})],
    "np.fft.irfft": [("np.fft.irfft(x) * y", {"x": (5,), "y": (8,)}),
                     ("np.fft.irfft(x, n=5, axis=0, norm='ortho')", {"x": (4, 2)})],
    "np.fft.rfft2": [("np.abs(np.fft.rfft2(x))", {"x": (3, 4)}),
                     ("np.real(np.fft.rfft2(x, s=(4, 3)) * 1.5j)", {"x": (2, 3, 5)})],
    "np.fft.rfftn": [("np.imag(np.fft.rfftn(x))", {"x": (2, 3, 4)}),
                     ("np.abs(np.fft.rfftn(x, axes=(0,), norm='ortho'))", {"x": (5, 2)})],
    "np.fft.irfft2": [("np.fft.irfft2(x) * y", {"x": (3, 3), "y": (4,)}),
                      ("np.fft.irfft2(x, s=(2, 5), norm='forward')", {"x": (3, 4)})],
    "np.fft.irfftn": [("np.fft.irfftn(x)", {"x": (2, 3, 4)}),
                      ("np.fft.irfftn(x, s=(3, 6), axes=(1, 0))", {"x": (5, 2)})],
    "np.fft.hfft": [("np.fft.hfft(x) * y", {"x": (4,), "y": (6,)}),
                    ("np.fft.hfft(x, n=5, axis=0, norm='ortho')", {"x": (3, 2)})],
    "np.fft.ihfft": [("np.abs(np.fft.ihfft(x))", {"x": (6,)}),
                     ("np.real(np.fft.ihfft(x, n=7, axis=0) * (1 + 2j))", {"x": (4, 3)})],
    "np.angle": [("np.angle(x) * x", {"x": (4,)}),
                 ("np.angle(x, deg=True) + x * y", {"x": (2, 3), "y": (3,)})],
    "np.real_if_close": [("np.real_if_close(x)", {"x": (3,)}),
                         ("np.real_if_close(x * y)", {"x": (2, 1), "y": (3,)})],
    "np.astype": [("np.astype(x, np.float64)", {"x": (3,)}),
                  ("np.astype(x, int) + x * y", {"x": (2, 3), "y": (3,)})],
    "np.linalg.eig": [("np.linalg.eig(x)[0]", {"x": ("spd", (3, 3))}),
                      ("np.linalg.eig(x)", {"x": ("spd", (3, 3))}),
                      ("np.linalg.eig(c + 0.1 * x)", {"x": (3, 3), "c": ("const", _UPPER)}),
                      ("np.linalg.eig(x)[1]", {"x": ("spd", (2, 3, 3))})],
    "np.linalg.eigvals": [("np.linalg.eigvals(x)", {"x": ("spd", (3, 3))}),
                          ("np.linalg.eigvals(c + 0.1 * x)", {"x": (2, 3, 3),
                                                              "c": ("const", _UPPER)})],
})

# --- more of scipy.special, scipy.stats, scipy.linalg, scipy.signal (when SciPy is installed) ----
try:
    import scipy  # noqa: F401
except ImportError:
    pass
else:
    _SPECIAL_UNARY = {  # name: domain of x (None: any real)
        "log_expit": None, "erfcx": None, "erfinv": "unit", "erfcinv": "unit", "ndtr": None,
        "log_ndtr": None, "ndtri": "unit", "gamma": "positive", "rgamma": "positive",
        "j0": None, "j1": None, "y0": "positive", "y1": "positive", "i0": None, "i1": None,
        "i0e": "away_from_zero", "i1e": "away_from_zero", "k0": "positive", "k1": "positive",
        "k0e": "positive", "k1e": "positive",
    }
    for _name, _kind in _SPECIAL_UNARY.items():
        def _spec(shape, kind=_kind):
            return shape if kind is None else (kind, shape)
        CASES[f"scipy.special.{_name}"] = [
            (f"scipy.special.{_name}(x)", {"x": _spec((3,))}),
            (f"scipy.special.{_name}(x) * y", {"x": _spec((2, 1)), "y": (3,)})]
    _ORDERS = ("const", np.array([0.0, 1.0, 2.5]))
    for _name, _kind in (("jv", "positive"), ("yv", "positive"), ("iv", "away_from_zero"),
                         ("ive", "away_from_zero"), ("kv", "positive"), ("kve", "positive")):
        CASES[f"scipy.special.{_name}"] = [
            (f"scipy.special.{_name}(1.5, x)", {"x": (_kind, (3,))}),
            (f"scipy.special.{_name}(v, x)", {"v": _ORDERS, "x": (_kind, (2, 3))})]
    _POSITIVE = ("positive", (3,))
    _UNIT = ("unit", (3,))
    CASES.update({
        "scipy.special.yn": [("scipy.special.yn(2, x)", {"x": _POSITIVE}),
                             ("scipy.special.yn(n, x)", {"n": ("const", np.array([0, 1, 3])),
                                                         "x": ("positive", (2, 3))})],
        "scipy.special.polygamma": [
            ("scipy.special.polygamma(1, x)", {"x": _POSITIVE}),
            ("scipy.special.polygamma(n, x)", {"n": ("const", np.array([0, 1, 2])),
                                               "x": ("positive", (2, 3))})],
        "scipy.special.multigammaln": [
            ("scipy.special.multigammaln(x + 2.0, 3)", {"x": _POSITIVE}),
            ("scipy.special.multigammaln(x + 1.0, 2)", {"x": ("positive", ())})],
        "scipy.special.gammainc": [
            ("scipy.special.gammainc(c, x)", {"c": ("const", np.array([0.5, 1.0, 2.5])),
                                              "x": _POSITIVE}),
            ("scipy.special.gammainc(2.5, x)", {"x": ("positive", (2, 2))})],
        "scipy.special.gammaincc": [
            ("scipy.special.gammaincc(c, x)", {"c": ("const", np.array([0.5, 1.0, 2.5])),
                                               "x": _POSITIVE}),
            ("scipy.special.gammaincc(1.5, x)", {"x": ("positive", (2, 2))})],
        "scipy.special.beta": [("scipy.special.beta(x, y)", {"x": _POSITIVE, "y": _POSITIVE}),
                               ("scipy.special.beta(x, y)", {"x": ("positive", (2, 1)),
                                                             "y": _POSITIVE})],
        "scipy.special.betaln": [("scipy.special.betaln(x, y)", {"x": _POSITIVE, "y": _POSITIVE}),
                                 ("scipy.special.betaln(x, y)", {"x": ("positive", ()),
                                                                 "y": ("positive", (2, 3))})],
        "scipy.special.betainc": [
            ("scipy.special.betainc(2.0, 3.0, x)", {"x": _UNIT}),
            ("scipy.special.betainc(c, 1.5, x)", {"c": ("const", np.array([0.5, 1.0, 2.5])),
                                                  "x": ("unit", (2, 3))})],
        "scipy.special.betaincc": [
            ("scipy.special.betaincc(2.0, 3.0, x)", {"x": _UNIT}),
            ("scipy.special.betaincc(0.7, c, x)", {"c": ("const", np.array([0.5, 1.0, 2.5])),
                                                   "x": ("unit", (2, 3))})],
        "scipy.special.xlog1py": [
            ("scipy.special.xlog1py(x, y)", {"x": (2, 3), "y": _POSITIVE}),
            ("scipy.special.xlog1py(c, y)", {"c": ("const", np.array([0.0, 1.5])),
                                             "y": ("positive", (2,))})],
    })

    # scipy.stats: every method of every distribution, with and without loc/scale
    _STATS = {  # name: (shape parameters' specs, x's domain)
        "norm": ({}, None), "t": ({"d": ("positive", ())}, None),
        "gamma": ({"a": ("positive", ())}, "positive"),
        "beta": ({"a": ("positive", ()), "b": ("positive", (3,))}, "unit"),
        "chi2": ({"d": ("positive", ())}, "positive"),
    }
    for _dist, (_shapes, _domain) in _STATS.items():
        for _method in ("pdf", "logpdf", "cdf", "logcdf", "sf", "logsf"):
            _cum = _method not in ("pdf", "logpdf")
            _x = (3,) if _domain is None else (_domain, (3,))
            _x23 = (2, 3) if _domain is None else (_domain, (2, 3))
            _specs = {"x": _x}
            _args = []
            for _p, _spec in _shapes.items():
                # the cumulative functions have no gradient in a shape parameter
                _specs[_p] = ("const", 1.7) if _cum else _spec
                _args.append(_p)
            _more = dict(_specs, x=_x23)
            if _domain is None:
                _more.update(m=(3,), s=("positive", ()))
                _loc = "m, s"
            else:  # keep x - loc inside the support: scale only
                _more.update(s=("positive", (3,)))
                _loc = "scale=s"
            _call = f"scipy.stats.{_dist}.{_method}"
            CASES[_call] = [(f"{_call}({', '.join(['x'] + _args)})", _specs),
                            (f"{_call}({', '.join(['x'] + _args)}, {_loc})", _more)]
    _COUNTS = ("const", np.array([0.0, 1.0, 3.0]))
    for _method in ("pmf", "logpmf", "cdf", "logcdf", "sf", "logsf"):
        _call = f"scipy.stats.poisson.{_method}"
        CASES[_call] = [(f"{_call}(k, mu)", {"k": _COUNTS, "mu": _POSITIVE}),
                        (f"{_call}(k, mu)", {"k": ("const", np.array([[0.0], [2.0]])),
                                             "mu": ("positive", (2, 3))})]
    for _method in ("pdf", "logpdf"):
        _call = f"scipy.stats.dirichlet.{_method}"
        CASES[_call] = [  # x on the simplex: a softmax of free values
            (f"{_call}(scipy.special.softmax(y), a)", {"y": (3,), "a": _POSITIVE}),
            (f"{_call}(scipy.special.softmax(y, axis=0), a)", {"y": (3, 2), "a": _POSITIVE}),
            (f"{_call}(c, a)", {"c": ("const", np.array([0.2, 0.5, 0.3])), "a": _POSITIVE})]
        _call = f"scipy.stats.multivariate_normal.{_method}"
        CASES[_call] = [(f"{_call}(x, m, c)", {"x": (3,), "m": (3,), "c": ("spd", (3, 3))}),
                        (f"{_call}(x, m, c)", {"x": (4, 2), "m": (2,), "c": ("spd", (2, 2))}),
                        (f"{_call}(x, cov=c)", {"x": (3,), "c": ("spd", (3, 3))})]
    CASES["scipy.stats.multivariate_normal.entropy"] = [
        ("scipy.stats.multivariate_normal.entropy(cov=c)", {"c": ("spd", (3, 3))}),
        ("scipy.stats.multivariate_normal.entropy(m, c)", {"m": (2,), "c": ("spd", (2, 2))})]

    CASES.update({
        "scipy.linalg.solve_triangular": [
            ("scipy.linalg.solve_triangular(x, y)", {"x": ("wellcond", (3, 3)), "y": (3,)}),
            ("scipy.linalg.solve_triangular(x, y, lower=True, trans=1)",
             {"x": ("wellcond", (3, 3)), "y": (3, 2)}),
            ("scipy.linalg.solve_triangular(x, y, trans='T', unit_diagonal=True)",
             {"x": ("wellcond", (3, 3)), "y": (3, 2)}),
            ("scipy.linalg.solve_triangular(x, y, lower=True, unit_diagonal=True)",
             {"x": ("wellcond", (3, 3)), "y": (3,)})],
        # (a band of 4 added to the diagonal's row: a matrix far from singular)
        "scipy.linalg.solve_banded": [
            ("scipy.linalg.solve_banded((1, 1), x + np.array([[0.0], [4.0], [0.0]]), y)",
             {"x": (3, 4), "y": (4,)}),
            ("scipy.linalg.solve_banded((2, 0), x + np.array([[4.0], [0.0], [0.0]]), y)",
             {"x": (3, 5), "y": (5, 2)}),
            ("scipy.linalg.solve_banded((0, 1), x + np.array([[0.0], [4.0]]), y)",
             {"x": (2, 3), "y": (3,)})],
        "scipy.linalg.cholesky": [("scipy.linalg.cholesky(x)", {"x": ("spd", (3, 3))}),
                                  ("scipy.linalg.cholesky(x, lower=True)",
                                   {"x": ("spd", (2, 2))})],
        "scipy.linalg.cho_factor": [("scipy.linalg.cho_factor(x)[0]", {"x": ("spd", (3, 3))}),
                                    ("scipy.linalg.cho_factor(x, lower=True)[0]",
                                     {"x": ("spd", (3, 3))})],
        "scipy.linalg.cho_solve": [
            ("scipy.linalg.cho_solve((x, True), y)", {"x": ("wellcond", (3, 3)), "y": (3,)}),
            ("scipy.linalg.cho_solve((x, False), y)", {"x": ("wellcond", (3, 3)), "y": (3, 2)}),
            ("scipy.linalg.cho_solve(scipy.linalg.cho_factor(x), y)",
             {"x": ("spd", (3, 3)), "y": (3, 2)})],
        "scipy.linalg.solve_sylvester": [
            ("scipy.linalg.solve_sylvester(x, y, z)",
             {"x": ("wellcond", (3, 3)), "y": ("wellcond", (2, 2)), "z": (3, 2)}),
            ("scipy.linalg.solve_sylvester(a, b, z)",
             {"a": ("const", 3.0 * np.eye(2) + 0.5), "b": ("wellcond", (2, 2)), "z": (2, 2)})],
        "scipy.linalg.sqrtm": [("scipy.linalg.sqrtm(x)", {"x": ("spd", (3, 3))}),
                               ("scipy.linalg.sqrtm(x + 3.0 * np.eye(2))", {"x": (2, 2)})],
        "scipy.linalg.expm": [("scipy.linalg.expm(x)", {"x": (3, 3)}),
                              ("scipy.linalg.expm(0.5 * x)", {"x": (2, 2, 2)})],
        "scipy.integrate.odeint": [
            ("scipy.integrate.odeint(_decay, x, np.linspace(0.0, 1.0, 4), args=(y,), "
             "rtol=1e-11, atol=1e-11)", {"x": (3,), "y": ("positive", (3,))}),
            ("scipy.integrate.odeint(_coupled, x, np.array([0.0, 0.4, 1.1]), args=(a, b), "
             "tfirst=True, rtol=1e-11, atol=1e-11)", {"x": (2,), "a": (2, 2), "b": ()})],
        "scipy.linalg.inv": [("scipy.linalg.inv(x + 3.0 * np.eye(3))", {"x": (3, 3)}),
                             ("scipy.linalg.inv(x, check_finite=False) @ y",
                              {"x": ("spd", (2, 2)), "y": (2, 3)})],
        "scipy.linalg.det": [("scipy.linalg.det(x)", {"x": (3, 3)}),
                             ("scipy.linalg.det(x + 2.0 * np.eye(2)) * y",
                              {"x": (2, 2), "y": (3,)})],
        "scipy.signal.convolve": [
            ("scipy.signal.convolve(x, y)", {"x": (5,), "y": (3,)}),
            ("scipy.signal.convolve(x, y, mode='same')", {"x": (4, 3), "y": (2, 2)}),
            ("scipy.signal.convolve(x, y, mode='valid')", {"x": (3, 4), "y": (2, 3)}),
            ("scipy.signal.convolve(x, y, mode='valid')", {"x": (2,), "y": (4,)})],
        "scipy.signal.correlate": [
            ("scipy.signal.correlate(x, y)", {"x": (5,), "y": (3,)}),
            ("scipy.signal.correlate(x, y, mode='same')", {"x": (3,), "y": (5,)}),
            ("scipy.signal.correlate(x, y, mode='valid')", {"x": (4, 3), "y": (2, 2)})],
    })


def _available(expr):
    """Does the installed NumPy have everything the expression calls? (NumPy 1.x
    lacks np.trapezoid, np.linalg.outer, .mT, cholesky(upper=...), ...)"""
    import re
    for chain in re.findall(r"\bnp(?:\.\w+)+", expr):
        obj = np
        for part in chain.split(".")[1:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
    if ".mT" in expr and not hasattr(np.ndarray, "mT"):
        return False
    return "upper=" not in expr or int(np.__version__.split(".")[0]) >= 2


CASES = {name: [c for c in cases if _available(c[0])] for name, cases in CASES.items()}

