"""Gradient rules: the declarative table (numpy_rules) and its registry.

The table registers at its first use (registry.load_table: a compile, a lookup, a
user's rule), not when `import s2sgrad` runs. SciPy's rules (scipy_*rules.py) load
later still, when a SciPy module they cover is imported and a lookup needs them
(registry._PENDING): `import s2sgrad` does not import SciPy.
"""
from .registry import REGISTRY, all_rules, count, defvjp, load_scipy_rules, load_table

__all__ = ["REGISTRY", "all_rules", "count", "defvjp", "load_scipy_rules", "load_table"]
