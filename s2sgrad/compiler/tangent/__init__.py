"""Forward mode — the tangent (JVP) transform, the sibling of reverse mode's
`transform`, over the same parse, normalise and analyse (see transform.py)."""
from .clean import optimize_tangent, prune_zeros
from .function_sites import FunctionSite
from .state import any_live
from .transform import Tangent

__all__ = ["FunctionSite", "Tangent", "optimize_tangent", "any_live", "prune_zeros"]
