"""The seed documents' five examples, run by s2sgrad, plus the code it generates.

    python examples/demo.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import add_mul  # noqa: E402
import adder  # noqa: E402
import cube  # noqa: E402
import exp_reducer  # noqa: E402
import square  # noqa: E402

import s2sgrad  # noqa: E402
from s2sgrad import functional  # noqa: E402


def main() -> None:
    np.set_printoptions(precision=4, floatmode="fixed")
    print("1. SquareFunction: grad of sum(x**2) at x = [1, 2, 3, 4, 5]")
    print("  ", s2sgrad.grad(square.loss)(np.array([1.0, 2.0, 3.0, 4.0, 5.0])),
          "   (documented: [2, 4, 6, 8, 10])")
    print("2. CubeFunction:", s2sgrad.grad(cube.loss)(cube.X),
          "   (documented: [0.5327, 0.1885, 0.3232])")
    ga, gb = s2sgrad.grad(add_mul.loss, wrt=(0, 1))(np.array([2.0, 3.0, 4.0]),
                                                     np.array([5.0, 6.0, 7.0]))
    print("3. AddMulFunction:", ga, gb, "   (documented: [6, 7, 8] and [3, 4, 5])")
    out, vjp = functional.vjp(exp_reducer.exp_reducer, exp_reducer.INPUTS, np.ones(4))
    print("4. functional.vjp(exp_reducer):", out,
          "   (documented: [5.7817, 7.2458, 5.7830, 6.7782])")
    print(vjp)
    out, (vx, vy) = functional.vjp(adder.adder, adder.INPUTS, np.ones(2))
    print("5. functional.vjp(adder):", out, vx, vy,
          "   (documented: [2.4225, 2.3340], [2, 2], [3, 3])")
    print()
    print("The code s2sgrad generated for example 1 (the vjp is inlined):")
    print()
    print(s2sgrad.source(square.loss))


if __name__ == "__main__":
    main()
