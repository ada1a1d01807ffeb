"""The disk cache with 10,000 entries: writing, the size cap, `cache info`.

    python benchmarks/cache_eviction.py [--entries 10000] [--entry-kb 6] [--cap-mb 20]

Writes --entries entries of about --entry-kb kB (random bytes, the size of a
typical compiled pair's entry) through the store, in a temporary directory:

1. with no cap reached (the default 256 MB cap): the time per write, and the
   time of `s2sgrad cache info` (`cache.info`, which looks at every file)
   with all entries present;
2. with a cap of --cap-mb: the time per write (eviction included), the
   largest size of the entries seen after any write (checked after every
   write by counting the directory), how many entries are left, and how long
   an eviction pass takes.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def payload(cache, key: str, size: int) -> dict:
    return {"format": cache.FORMAT, "key": key, "blob": os.urandom(size)}


def write_all(cache, store, n: int, size: int, check_cap: bool):
    times, worst = [], 0
    cap = cache.max_bytes()
    for i in range(n):
        key = f"{i:064x}"
        data = payload(cache, key, size)
        t0 = time.perf_counter()
        assert store.write(key, data)
        times.append(time.perf_counter() - t0)
        if check_cap:
            worst = max(worst, cache.scan(store.path).bytes)
            assert worst <= cap, (worst, cap)
    return times, worst


def describe(times) -> str:
    times = sorted(times)
    return (f"median {statistics.median(times) * 1e3:.3f} ms, 99th percentile "
            f"{times[int(len(times) * 0.99)] * 1e3:.3f} ms, max {times[-1] * 1e3:.1f} ms, "
            f"total {sum(times):.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=10000)
    parser.add_argument("--entry-kb", type=float, default=6.0)
    parser.add_argument("--cap-mb", type=float, default=20.0)
    args = parser.parse_args()
    size = int(args.entry_kb * 1024)
    from s2sgrad import cache
    with tempfile.TemporaryDirectory(prefix="s2sgrad-evict-") as tmp:
        os.environ.pop("S2SGRAD_CACHE_MAX_MB", None)
        store = cache.DiskCache(os.path.join(tmp, "uncapped"))
        times, _ = write_all(cache, store, args.entries, size, check_cap=False)
        print(f"{args.entries} writes of {args.entry_kb:g} kB under the default cap "
              f"({cache.DEFAULT_MAX_MB} MB): {describe(times)}")
        infos = []
        for _ in range(5):
            t0 = time.perf_counter()
            facts = cache.info(store.path)
            infos.append(time.perf_counter() - t0)
        print(f"  cache info with {facts['entries']} entries ({facts['bytes'] / 2**20:.1f} MiB):"
              f" {min(infos) * 1e3:.1f} ms (best of 5)")

        os.environ["S2SGRAD_CACHE_MAX_MB"] = str(args.cap_mb)
        store = cache.DiskCache(os.path.join(tmp, "capped"))
        times, worst = write_all(cache, store, args.entries, size, check_cap=True)
        facts = cache.info(store.path)
        cap = cache.max_bytes()
        print(f"{args.entries} writes under a {args.cap_mb:g} MB cap: {describe(times)}")
        print(f"  largest size after any write {worst / 2**20:.2f} MiB (cap "
              f"{cap / 2**20:.2f} MiB); left: {facts['entries']} entries, "
              f"{facts['bytes'] / 2**20:.2f} MiB")
        t0 = time.perf_counter()
        cache.evict(store.path, int(cap * cache.LOW_WATER))
        print(f"  one eviction pass over {facts['entries']} entries: "
              f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
