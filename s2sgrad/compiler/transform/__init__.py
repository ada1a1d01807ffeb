"""Pass 4 — transform: the reverse-mode transform (see reverse.py)."""
from .reverse import Transformed, _Reverse, transform
from .support import _is_literal, field_index, fold_loop_items, helper_call

__all__ = ["Transformed", "_Reverse", "_is_literal", "field_index", "fold_loop_items",
           "helper_call", "transform"]
