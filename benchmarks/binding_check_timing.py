"""What the per-call rebinding check costs on the gradient fast path.

    python benchmarks/binding_check_timing.py [--repeat 7] [--number 20000]

A `grad`/`value_and_grad` wrapper keeps the pair it compiled with the
bindings it was generated for, flattened (`compiler.flat_bindings`), and
checks them on every call (`compiler.all_hold`) before running the pair. For
each seed example this prints the time of one whole call (`grad(f)(*args)`
for the three grad examples, `functional.vjp` for the two vjp ones), the time
of the check alone -- `all_hold` on the flattened bindings, as the grad
wrappers run it, and `CompiledFunction.current()`, as a memory-cache hit of
`compile_function` (the functional API's path) runs it -- and how many
bindings it compares. Each figure is the
best of --repeat timeit runs of --number calls (the minimum is the figure
least disturbed by other load on the machine).
"""
from __future__ import annotations

import argparse
import os
import sys
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))


def targets():
    import add_mul
    import adder
    import cube
    import exp_reducer
    import numpy as np
    import square

    import s2sgrad
    from s2sgrad import functional
    a, b = np.array([2.0, 3.0, 4.0]), np.array([5.0, 6.0, 7.0])
    return [
        ("square.loss", square.loss, (0,), (np.arange(1.0, 6.0),),
         s2sgrad.grad(square.loss)),
        ("cube.loss", cube.loss, (0,), (cube.X,), s2sgrad.grad(cube.loss)),
        ("add_mul.loss", add_mul.loss, (0, 1), (a, b), s2sgrad.grad(add_mul.loss, wrt=(0, 1))),
        ("exp_reducer (vjp)", exp_reducer.exp_reducer, (0,), (exp_reducer.INPUTS,),
         lambda x: functional.vjp(exp_reducer.exp_reducer, x, np.ones(4))),
        ("adder (vjp)", adder.adder, (0, 1), adder.INPUTS,
         lambda x, y: functional.vjp(adder.adder, (x, y), np.ones(2))),
    ]


def count(flat) -> int:
    return sum(len(part) for part in flat if isinstance(part, tuple))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    from s2sgrad import compiler
    head = f"{'example':<20}{'whole call':>12}{'all_hold':>11}{'current()':>11}{'bindings':>10}"
    print(head)
    print("-" * len(head))
    for label, fn, wrt, inputs, call in targets():
        call(*inputs)
        compiled = compiler.compile_function(fn, wrt)
        flat = compiler.flat_bindings(compiled)
        assert compiler.all_hold(flat) and compiled.current()
        whole = min(timeit.repeat(lambda call=call, inputs=inputs: call(*inputs),
                                  number=args.number, repeat=args.repeat)) / args.number
        check = min(timeit.repeat(lambda flat=flat: compiler.all_hold(flat), number=args.number,
                                  repeat=args.repeat)) / args.number
        current = min(timeit.repeat(compiled.current, number=args.number,
                                    repeat=args.repeat)) / args.number
        print(f"{label:<20}{whole * 1e6:>9.2f} us{check * 1e6:>8.3f} us{current * 1e6:>8.3f} us"
              f"{count(flat):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
