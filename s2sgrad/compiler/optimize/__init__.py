"""Pass 6 — optimise: fold, propagate, prune, and link forward to adjoint.

The transform and the inliner generate code mechanically; this pass makes it
what a person would write: constants folded (`needs_input_grad`, default
arguments), single-use temporaries substituted into their use, copies
propagated, dead statements removed. It also decides what the forward keeps
(the to-be-recorded analysis): a value is kept only if the adjoint reads it,
and a variable's saved copies survive only if some rule reads the variable.

The steps live in modules by what they work on (statements.py is what they all
ask of statements; folding, liveness, copies, shapes, residuals, fusion); this
module runs them in order.
"""
from __future__ import annotations

from ..names import BRANCHES_AND_LOOPS
from ..transform import Transformed
from .copies import propagate_copies, substitute_single_use
from .folding import fold_block, fold_statement, subtract_negations, tidy
from .fusion import fuse_adjoint_temporaries, fuse_forward_temporaries
from .inplace import accumulate_in_place, subtract_from_temporaries
from .items import collect_item_cotangents
from .liveness import eliminate_dead
from .release import release_callee_parts, release_residuals
from .residuals import drop_needless_inits, link_residuals, private_copies, prune_saves
from .rows import rows_read_again
from .shapes import (
    collapse_unbroadcast_chains,
    definition_paths,
    elide_scalar_broadcasts,
    product_shapes_from_operands,
    share_shape_witnesses,
)
from .statements import NameIndex, Names, fwd_params, param_list

__all__ = [
    "optimize", "accumulate_in_place", "collapse_unbroadcast_chains", "collect_item_cotangents",
    "drop_needless_inits",
    "eliminate_dead",
    "elide_scalar_broadcasts", "fold_block", "fuse_adjoint_temporaries",
    "fuse_forward_temporaries", "fwd_params", "link_residuals", "param_list",
    "private_copies", "product_shapes_from_operands", "propagate_copies", "prune_saves",
    "release_callee_parts",
    "release_residuals",
    "share_shape_witnesses", "substitute_single_use", "tidy",
]


# False: prune and eliminate again until neither finds anything, even once the
# round before proved they cannot (tests compare the shortcut with that).
SETTLE = True


def optimize(t: Transformed) -> Transformed:
    user_names = set(t.nf.resolver.locals)
    for fdef in (t.forward, t.adjoint):
        fdef.body = fold_block(fdef.body)
    t.adjoint.body = collect_item_cotangents(t.adjoint.body, t.activity.leaves)
    index = NameIndex()   # the statements' names, for every step (see NameIndex)
    # The adjoint reads forward values by name, so a renaming applies to both.
    propagate_copies(t.forward, user_names, also=(t.adjoint,), marks=t.marks, index=index)
    propagate_copies(t.adjoint, user_names, marks=t.marks, index=index)
    substitute_single_use(t.adjoint, t.marks, index)
    collapse_unbroadcast_chains(t.adjoint, index)
    product_shapes_from_operands(t.adjoint, index)
    elide_scalar_broadcasts(t, index)
    names = Names(index)   # the adjoint's statements' names: valid while statements only leave
    # (The normal form does not change here; without shape facts nothing reads them.)
    paths = definition_paths(t.nf.node.body) if t.activity.shapes else {}
    settled = False
    while True:
        shared = share_shape_witnesses(t, index, paths)
        if shared:
            if all(s is not None and s.__class__ not in BRANCHES_AND_LOOPS for s in shared):
                for s in shared:   # (the rest of the adjoint is folded already)
                    fold_statement(s)
                    index.changed(s)
            else:
                t.adjoint.body = fold_block(t.adjoint.body)
                index = NameIndex()
            names = Names(index)
        elif settled and SETTLE:
            # Nothing changed since pruning and dead-code elimination last ran and
            # found all they could: asking them again would find nothing.
            break
        pruned = prune_saves(t, names)
        removed = eliminate_dead(t.adjoint, keep=set(), names=names)
        if not (shared or pruned or removed):
            break
        # When pruning changed no other restore's liveness (pruned.final) and
        # eliminate_dead found nothing after it, both are done until something
        # else changes.
        settled = pruned.final and not removed
    rows_read_again(t, index)
    private_copies(t, index)
    drop_needless_inits(t.forward, t.marks, index)
    link_residuals(t, index)
    eliminate_dead(t.forward, keep=set(t.nf.all_params), names=Names(index))
    fuse_forward_temporaries(t.forward, user_names, t.nf.facts.stmts, t.marks, index)
    fuse_adjoint_temporaries(t.adjoint, index)
    subtract_negations(t.adjoint)
    if not t.pure:   # (a pure pair's adjoint is differentiated again: no writes)
        for fdef in (t.forward, t.adjoint):
            subtract_from_temporaries(fdef, t.activity.is_number)
        accumulate_in_place(t.adjoint, t.marks)
    for fdef in (t.forward, t.adjoint):
        fdef.body = tidy(fdef.body)
    if not t.pure:
        release_residuals(t)
        release_callee_parts(t)
    return t
