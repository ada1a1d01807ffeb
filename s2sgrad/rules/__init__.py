"""Gradient rules: the declarative table (numpy_rules) and its registry."""
# SciPy's rules (scipy_*rules.py) load lazily, when a SciPy module they cover is imported
# and a lookup needs them (registry._PENDING): `import s2sgrad` does not import SciPy.
from . import (
    complex_rules,  # noqa: F401 - complex arguments (it marks numpy_rules' entries)
    helper_rules,  # noqa: F401, E402 - rules for the table's helpers (second order)
    numpy_rules,  # noqa: F401 - registers the table
    runtime_rules,  # noqa: F401 - rules for s2sgrad's own helpers (second order)
)
from .registry import (
    REGISTRY,
    all_rules,
    count,
    defvjp,
    load_scipy_rules,
    mark_shipped,  # noqa: E402
)

mark_shipped()

__all__ = ["REGISTRY", "all_rules", "count", "defvjp", "load_scipy_rules"]
