"""The neighbouring test of SAMPLE_AGGREGATE's Gaussian release (dpsql.sample_aggregate.gaussian).

The worst case of the relation, attained: m = 4 blocks with bounds [0, 1]; on D every block
answers 0 (S = 0), on D' one changed row has moved two blocks to 1 (S' = 2 = 2 (hi - lo), the
sensitivity the release claims). The release of one output is ``release_gaussian_sums([S],
sigma, g)`` with the plan's sigma and grid (:func:`dpsql.sample_aggregate.release.noisy_means`
does exactly that per draw, then divides by the public m: post-processing, omitted); here it is
drawn N times at once on ``np.full(N, S)`` (the same law per coordinate, independent draws).

As in tests/statistical/test_engine_gaussian_privacy_loss.py: the Gaussian is (epsilon,
delta)-DP, so the estimate is the audit's delta-aware lower bound
(:func:`dpsql.privacy_audit.bounds.loss_lower_bounds`, Clopper-Pearson at 1 - 1e-6), which must
stay at most epsilon; delta = 0.1 makes a factor-2 error visible at N = 100,000, and the SAME
harness with HALF the sigma must report a bound above epsilon. False-failure rate: at most 1e-6
for the first assertion (the bound's confidence; measured 0.86-0.90: the calibration is tight);
the second measured 2.96-2.98 against the threshold 1, many standard errors away.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.budget import Budget
from dpsql.noise.gaussian import discrete_gaussian
from dpsql.noise.gaussian_release import release_gaussian_sums
from dpsql.privacy_audit.bounds import loss_lower_bounds
from dpsql.sample_aggregate.release import plan_release
from dpsql.sample_aggregate.rewrite import SamplePlan

EPSILON = 1.0
DELTA = 0.1
N = 100_000
PLAN = SamplePlan("", (), 0, 4, ("x",), ((0.0, 1.0),))


class HalvedSigma:
    """A deliberately broken sampler: secure discrete Gaussian with HALF the requested sigma."""

    def discrete_gaussian(self, sigma: float, size: int) -> np.ndarray:
        return discrete_gaussian(sigma / 2.0, size)


def _bound(sampler: HalvedSigma | None) -> float:
    (o,), _ = plan_release(PLAN, Budget(EPSILON, DELTA, "gaussian"), "fp")
    assert o.sensitivity == 2.0
    d = release_gaussian_sums(np.full(N, 0.0), o.sigma, o.granularity, sampler=sampler)
    d_prime = release_gaussian_sums(np.full(N, 2.0), o.sigma, o.granularity, sampler=sampler)
    return loss_lower_bounds(d, d_prime, delta=DELTA, confidence=1 - 1e-6,
                             thresholds=30).max_divergence


@pytest.mark.slow
def test_the_gaussian_mean_keeps_its_privacy_loss():
    assert _bound(None) <= EPSILON


@pytest.mark.slow
def test_same_harness_catches_a_halved_sigma():
    assert _bound(HalvedSigma()) > EPSILON
