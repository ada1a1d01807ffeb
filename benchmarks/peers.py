"""Lazy loaders for the peer libraries (the optional extra ``bench``).

Nothing here is imported at module level by a workload: each workload calls a
loader inside the function that builds its peer implementation, so a missing
library raises ImportError there, and run.py reports "not installed".
The thread pinning is done by run.py before anything imports numpy; these
loaders only apply the settings that need the library itself.
"""
from __future__ import annotations


def load_autograd():
    """(autograd, autograd.numpy)."""
    import autograd
    import autograd.numpy as anp
    return autograd, anp


def load_jax():
    """(jax, jax.numpy), in float64."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    return jax, jnp


def load_torch():
    """torch, on one thread."""
    import torch
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or work already started
        pass
    return torch


def jax_blocking(jax, fn):
    """fn(...) followed by block_until_ready, so a timing covers the computation."""
    def run(*args):
        return jax.block_until_ready(fn(*args))
    return run
