"""Applying a noise plan to one measurement's exact values, over every bin at once."""

from __future__ import annotations

import numpy as np

from dpsql.noise import mechanisms
from dpsql.noise.gaussian_release import release_gaussian_counts, release_gaussian_sums
from dpsql.noise.plan import NoisePlan


def noisy_values(exact: np.ndarray, plan: NoisePlan,
                 sampler: object | None = None) -> np.ndarray:
    """``exact`` (one value per bin) released as ``plan`` prescribes.

    Precondition: ``plan`` was made for this measurement and the budget being charged.
    Guarantee: a smoothed plan's values are first clipped to its public window (what its scale
    covers, :func:`dpsql.noise.plan._smoothed_plan`); a public plan (scale 0) returns the exact
    values; otherwise every bin gets independent noise from :mod:`dpsql.noise.mechanisms`, or
    discrete Gaussian noise (:mod:`dpsql.noise.gaussian_release`) when the plan has a sigma
    (``sampler`` is for tests only: production passes None, the secure default).
    """
    integer = plan.measurement.function == "COUNT"
    if plan.window is not None:
        lo, hi = plan.window
        if integer:  # in integers: counts may exceed 2^53
            exact = np.clip(exact.astype(np.int64), int(lo), int(min(hi, 2**62)))
        else:
            exact = np.clip(exact.astype(np.float64), lo, hi)
    if plan.scale == 0:  # public data only (sensitivity 0): nothing to protect
        return exact.astype(np.int64 if integer else np.float64)
    if plan.sigma is not None:  # discrete Gaussian (dpsql.noise.gaussian_plan)
        if integer:
            return release_gaussian_counts(exact.astype(np.int64), plan.sigma, sampler=sampler)
        assert plan.granularity is not None
        return release_gaussian_sums(exact.astype(np.float64), plan.sigma, plan.granularity,
                                     sampler=sampler)
    if sampler is not None and not isinstance(sampler, mechanisms.Sampler):
        raise TypeError("a test sampler for a Laplace release needs a discrete_laplace method")
    if integer:
        return mechanisms.release_counts(exact.astype(np.int64), plan.scale, sampler=sampler)
    return mechanisms.release_sums(exact.astype(np.float64), plan.scale, sampler=sampler,
                                   granularity=plan.granularity)
