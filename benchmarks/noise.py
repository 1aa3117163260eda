"""Part ``noise``: throughput of the secure samplers (target >= 5 million samples/s).

Best and median rate over ``repeats`` after one warm-up (``common.rates``), for
``discrete_laplace(scale, size)``, ``release_counts`` and ``release_sums`` over ``size`` cells,
``discrete_gaussian(scale, size)`` (its target is the same), and ``os.urandom`` alone (16
bytes per sample), which bounds what the sampler can reach.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dpsql.noise import gaussian, mechanisms

from .common import Settings, rates

TARGET = 5_000_000.0


def run(settings: Settings, log=print) -> dict[str, Any]:
    size, repeats, scale = settings.noise_size, settings.noise_repeats, 10.0
    log(f"noise: {size:,} samples, scale {scale}, {repeats} repeats")
    counts = np.zeros(size, dtype=np.int64)
    sums = np.zeros(size)
    cases = [
        ("discrete_laplace", lambda: mechanisms.discrete_laplace(scale, size)),
        ("release_counts", lambda: mechanisms.release_counts(counts, scale)),
        ("release_sums", lambda: mechanisms.release_sums(sums, scale)),
        ("discrete_gaussian (sigma = scale)", lambda: gaussian.discrete_gaussian(scale, size)),
        ("os.urandom (16 B/sample)", lambda: os.urandom(16 * size)),
    ]
    results = []
    for name, fn in cases:
        best, median = rates(fn, size, repeats)
        results.append({"sampler": name, "best_per_s": best, "median_per_s": median})
        log(f"  {name}: median {median / 1e6:.2f} M samples/s (best {best / 1e6:.2f})")
    dl = results[0]["median_per_s"]
    dg = results[3]["median_per_s"]
    return {
        "summary": {"target_per_s": TARGET, "discrete_laplace_median_per_s": dl,
                    "met": dl >= TARGET, "discrete_gaussian_median_per_s": dg,
                    "gaussian_met": dg >= TARGET, "size": size, "scale": scale,
                    "repeats": repeats},
        "samplers": results,
    }
