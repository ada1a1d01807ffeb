"""Pass 4 — transform: the reverse-mode transform (see reverse.py)."""
from ..names import helper_call
from .records import (
    field_index,
    fold_loop_items,
    index_value_checks,
    is_literal,
    real_value_checks,
    rule_for,
)
from .reverse import Reverse, Transformed, transform

__all__ = ["Transformed", "Reverse", "is_literal", "field_index", "fold_loop_items", "rule_for",
           "real_value_checks", "index_value_checks", "helper_call", "transform"]
