"""The real mechanisms keep their privacy promise empirically, and the check catches bugs.

Each scenario releases the same query many times on two neighbouring databases and estimates
the privacy loss with ``empirical_privacy_loss`` (see its docstring for the mass rule and the
margin). False-failure rates, with n = 500,000 releases per database:

* "consistent" assertions (``loss <= epsilon + margin``): ALPHA = 1e-6 each (normal approximation,
  Bonferroni over all buckets), 5 of them here: at most ~5e-6 for the file;
* "not vacuous" assertions (``loss >= epsilon - margin`` where the true loss of every bucket is
  exactly epsilon): the same ALPHA each;
* "bug detected" assertions (true loss 2 * epsilon = 1.0 vs the threshold epsilon + margin,
  margin ~0.3): the best-populated bucket alone sits ~30 standard errors above the threshold,
  so a false failure has probability far below 1e-100.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.noise.mechanisms import release_counts, release_sums
from tests.statistical.privacy_loss import empirical_privacy_loss, integer_buckets

N = 500_000
ALPHA = 1e-6
EPSILON = 0.5


def _count_releases(true_count: int, scale: float) -> np.ndarray:
    return release_counts(np.full(N, true_count, dtype=np.int64), scale)


def _clamped_sum(rows: np.ndarray, lower: float, upper: float) -> float:
    return float(np.clip(rows, lower, upper).sum())


# Neighbouring databases for a SUM(cost) with declared bounds [0, 1000]: one row changes from 0
# to an out-of-bounds 1e6, which clamping turns into 1000, so the clamped sums differ by 1000.
_OTHER_ROWS = np.array([12.5, 999.75, 0.125, 431.0, 77.0])
SUM_D = _clamped_sum(np.append(_OTHER_ROWS, 0.0), 0.0, 1000.0)
SUM_D_PRIME = _clamped_sum(np.append(_OTHER_ROWS, 1e6), 0.0, 1000.0)
SUM_SENSITIVITY = 1000.0
SUM_BUCKETS = np.arange(-6000.0, 7001.0, 250.0) + SUM_D  # edges aligned with both true sums


def test_clamped_neighbours_differ_by_the_sensitivity():
    assert SUM_D_PRIME - SUM_D == SUM_SENSITIVITY


def test_count_release_is_epsilon_dp_empirically():
    scale = 1.0 / EPSILON  # sensitivity 1
    est = empirical_privacy_loss(_count_releases(100, scale), _count_releases(101, scale),
                                 integer_buckets(70, 131), alpha=ALPHA)
    assert est.buckets_used >= 10
    assert est.consistent_with(EPSILON), est
    # Every integer bucket has true loss exactly epsilon, so the estimate cannot be far below.
    assert est.loss >= EPSILON - est.margin, est


def test_under_noised_count_is_caught():
    scale = 0.5 / EPSILON  # bug: half the noise a sensitivity-1 count needs
    est = empirical_privacy_loss(_count_releases(100, scale), _count_releases(101, scale),
                                 integer_buckets(80, 121), alpha=ALPHA)
    assert not est.consistent_with(EPSILON), est
    assert est.loss > EPSILON + est.margin


def test_clamped_sum_release_is_epsilon_dp_empirically():
    scale = SUM_SENSITIVITY / EPSILON
    est = empirical_privacy_loss(release_sums(np.full(N, SUM_D), scale),
                                 release_sums(np.full(N, SUM_D_PRIME), scale),
                                 SUM_BUCKETS, alpha=ALPHA)
    assert est.buckets_used >= 10
    assert est.consistent_with(EPSILON), est
    # Buckets entirely outside [SUM_D, SUM_D_PRIME] have true loss exactly epsilon.
    assert est.loss >= EPSILON - est.margin, est


def test_under_noised_clamped_sum_is_caught():
    scale = 0.5 * SUM_SENSITIVITY / EPSILON  # bug: scale halved
    est = empirical_privacy_loss(release_sums(np.full(N, SUM_D), scale),
                                 release_sums(np.full(N, SUM_D_PRIME), scale),
                                 SUM_BUCKETS, alpha=ALPHA)
    assert est.loss > EPSILON + est.margin, est


def test_identical_databases_show_no_loss():
    # Calibration of the helper itself: two samples of the same distribution.
    est = empirical_privacy_loss(_count_releases(100, 2.0), _count_releases(100, 2.0),
                                 integer_buckets(70, 131), alpha=ALPHA)
    assert est.buckets_used >= 10
    assert est.consistent_with(0.0), est
    assert est.margin < 0.5  # the margin is tight enough to separate epsilon from 2 * epsilon


def test_helper_reports_worst_bucket_and_overflow_buckets():
    d = np.array([0.0] * 3000 + [5.0] * 3000 + [50.0] * 3000)
    d_prime = np.array([0.0] * 3000 + [5.0] * 6000 + [50.0] * 3000)
    est = empirical_privacy_loss(d, d_prime, np.array([-1.0, 1.0, 10.0]), alpha=ALPHA)
    # Buckets: (-inf,-1) empty, [-1,1) 3000 v 3000, [1,10) 3000 v 6000, [10,inf) 3000 v 3000.
    assert est.buckets_used == 3
    assert est.worst_bucket == (1.0, 10.0)
    expected = abs(np.log(3000 / 9000) - np.log(6000 / 12000))
    assert est.loss == pytest.approx(expected, rel=1e-12)


def test_helper_refuses_to_pass_vacuously():
    with pytest.raises(ValueError, match="no bucket"):
        empirical_privacy_loss(np.zeros(10), np.zeros(10), integer_buckets(-2, 2))
    with pytest.raises(ValueError, match="increasing"):
        empirical_privacy_loss(np.zeros(10), np.zeros(10), np.array([1.0, 0.0]))
