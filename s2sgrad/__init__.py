"""s2sgrad: source-to-source reverse-mode automatic differentiation for NumPy.

Reads a Python function's source and generates a readable forward function and
adjoint (vector-Jacobian product) function in plain NumPy.
"""
from . import functional, rules
from .api import differentiable, grad, source, value_and_grad, vjp
from .errors import InternalError, TransformError
from .function import Context, Function, checkpoint
from .rules.jvp_rules import defjvp  # noqa: F401 - public: s2sgrad.defjvp
from .rules.registry import defvjp  # noqa: F401 - public: s2sgrad.defvjp
from .tree import ravel, tree_flatten, tree_leaves, tree_map, tree_unflatten
from .version import __version__

__all__ = ["Function", "Context", "TransformError", "InternalError", "differentiable",
           "checkpoint", "grad", "value_and_grad", "vjp", "source", "functional", "rules",
           "tree_flatten", "tree_unflatten", "tree_map", "tree_leaves", "ravel", "__version__"]
