"""Forward mode — the tangent (JVP) transform, the sibling of reverse mode's
`transform`, over the same parse, normalise and analyse (see transform.py)."""
from .clean import _optimize, prune_zeros
from .function_sites import _FunctionSite
from .support import any_live
from .transform import _Tangent

__all__ = ["_FunctionSite", "_Tangent", "_optimize", "any_live", "prune_zeros"]
