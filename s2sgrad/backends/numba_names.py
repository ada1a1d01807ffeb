"""Names shared by the numba passes: fresh names for the code they write (one rule
for all of them), and the operators and NumPy functions with cached wrappers."""
from __future__ import annotations

import keyword
from typing import Set


def fresh_name(base: str, taken: Set[str]) -> str:
    """base, or base_2, base_3, ...: the first not in taken (nor a keyword); taken
    grows by it, so that the next call gives another."""
    name, i = base, 2
    while name in taken or keyword.iskeyword(name):
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


# The operators and NumPy functions numba_helpers wraps in cached functions of their
# own (`_nb_op_add`, `_nb_np_sin`, ...) and how many positional arguments each
# takes: the rewrite calls them (numba_rewrite), numba_helpers makes them.
OPERATORS = {"add": 2, "sub": 2, "mul": 2, "div": 2, "pow": 2, "neg": 1, "iadd": 2,
             "isub": 2, "imul": 2, "gt": 2, "lt": 2, "ge": 2, "le": 2, "eq": 2}
NUMPY_CALLS = {**dict.fromkeys(("sin", "cos", "tan", "exp", "log", "tanh", "sqrt", "abs",
                                "sign", "square", "log1p", "expm1", "sum", "zeros", "ones",
                                "mean", "max", "min", "prod"), 1),
               "logaddexp": 2, "maximum": 2, "minimum": 2, "where": 3, "clip": 3}
