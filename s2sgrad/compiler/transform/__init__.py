"""Pass 4 — transform: the reverse-mode transform (see reverse.py)."""
from .reverse import Reverse, Transformed, transform
from .support import field_index, fold_loop_items, helper_call, is_literal

__all__ = ["Transformed", "Reverse", "is_literal", "field_index", "fold_loop_items",
           "helper_call", "transform"]
