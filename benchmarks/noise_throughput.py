"""Throughput of the secure discrete Laplace sampler (target: >= 5 million samples/s, one core).

    python benchmarks/noise_throughput.py [--size 5000000] [--repeats 5] [--scale 10]

Prints samples/s for ``discrete_laplace(scale, size)`` (best and median of the repeats), for
``release_sums`` over the same number of cells, and for ``os.urandom`` alone (16 bytes/sample),
which bounds what the sampler can reach.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from dpsql.mechanisms import discrete_laplace, release_sums


def _rates(fn: Callable[[], object], size: int, repeats: int) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return size / min(times), size / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=5_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scale", type=float, default=10.0)
    args = parser.parse_args()
    size, repeats, scale = args.size, args.repeats, args.scale
    sums = np.zeros(size)
    rows = [
        ("discrete_laplace", lambda: discrete_laplace(scale, size)),
        ("release_sums", lambda: release_sums(sums, scale)),
        ("os.urandom (16 B/sample)", lambda: os.urandom(16 * size)),
    ]
    print(f"size={size:,} scale={scale} repeats={repeats}")
    for name, fn in rows:
        best, median = _rates(fn, size, repeats)
        print(f"{name:<26} best {best / 1e6:7.2f} M samples/s   median {median / 1e6:7.2f} M/s")


if __name__ == "__main__":
    main()
