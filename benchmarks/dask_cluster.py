#!/usr/bin/env python
"""s2sgrad's gradient on a Dask cluster against a hand-written Dask gradient, at scale.

    python benchmarks/dask_cluster.py                 # 2e8 rows x 10 (16 GB), 2 workers of 1 GiB
    python benchmarks/dask_cluster.py --rows 4e7      # any option of the example

Runs examples/distributed_logistic.py with a dataset 16 times one worker's
memory limit: seconds per gradient for both implementations (best of
--repeat, taking turns), their ratio, the fit, and each worker's peak memory.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import distributed_logistic  # noqa: E402

DEFAULTS = ["--rows", "2e8", "--chunk-rows", "1e6", "--workers", "2", "--memory", "1GiB",
            "--repeat", "3", "--iterations", "3"]

if __name__ == "__main__":
    sys.exit(distributed_logistic.main(DEFAULTS + sys.argv[1:]))
