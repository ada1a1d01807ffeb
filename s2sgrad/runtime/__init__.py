"""Everything generated code calls, under the reserved `_s2s_` prefix.

One module per topic; importing the package registers every helper in
`HELPERS`, which is how the emitter binds an `_s2s_<name>` in generated code:

- `arrays`: which library an array belongs to, arrays kept in it (Dask, CuPy);
- `shapes`: undoing broadcasting and reductions, zeros of a shape;
- `reverse`: the N-d cases of matmul/dot, cotangents of lists and dicts, seeds;
- `inplace`: saving and restoring what in-place writes overwrite;
- `tangent`: forward mode's zero tangents, casts and decompositions;
- `numpy_grads`: the helpers the NumPy rules' templates call;
- `complex_grads`: those of the rules for complex arguments;
- `scalar_math`: NumPy's elementary functions on Python numbers at math's speed;
- `fused`: softmax, log-softmax and logsumexp written out, as one operation each;
- `ode`: scipy.integrate.odeint's adjoint method and forward sensitivities;
- `release`: residuals handed to an adjoint called once, freed as it reads them.

No derivative of a helper is written by hand: grad of grad differentiates the
helpers' own source (rules/helper_rules.py).
"""
from __future__ import annotations

from . import (  # noqa: F401
    complex_grads,
    fused,
    inplace,
    numpy_grads,
    ode,
    release,
    reverse,
    scalar_math,
    shapes,
    tangent,
    temporaries,
)
from .registry import HELPERS, helper, new_helper  # noqa: F401
from .reverse import (  # noqa: F401 - the names generated code and rules use
    accumulate,
    add_at,
    add_items,
    as_returned,
    backwards,
    balanced_max_mask,
    check_count,
    copy_adjoint,
    detached,
    dict_item_grad,
    dot_grad_a,
    dot_grad_b,
    items_cotangent,
    keys,
    loop_items,
    loop_items_grad,
    loop_items_tangent,
    matmul_grad_a,
    matmul_grad_b,
    none_to_zero,
    one_per,
    record,
    safe_log,
    seed,
    transpose_grad,
)
from .shapes import (  # noqa: F401
    ArrayMeta,
    broadcast_like,
    expand_reduced,
    matmul_shape,
    meta,
    ones_like,
    reduced_count,
    shape_of,
    sum_to_shape,
    swap_last_axes,
    unbroadcast,
    unbroadcast_matmul,
    unit,
    zeros_like,
)
