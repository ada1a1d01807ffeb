"""Gradient rules: the declarative table (numpy_rules) and its registry."""
from . import (
    numpy_rules,  # noqa: F401 - registers the table
    runtime_rules,  # noqa: F401 - rules for s2sgrad's own helpers (second order)
)
from .registry import REGISTRY, all_rules, count, defvjp

try:  # scipy.special rules, only when SciPy is installed (never required)
    from . import scipy_rules  # noqa: F401
except ImportError:
    pass
from . import helper_rules  # noqa: F401, E402 - rules for the table's helpers (second order)
from .registry import mark_shipped  # noqa: E402

mark_shipped()

__all__ = ["REGISTRY", "all_rules", "count", "defvjp"]
