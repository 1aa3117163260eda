"""R2T (dpsql.noise.r2t) keeps its privacy promise empirically, and the check catches a halved
scale.

Neighbouring databases under a privacy unit: a contribution vector c and c plus one unit of GS
rows (the most one unit can move every level: Q(tau_j) grows by exactly tau_j * b). Each
scenario releases N times on both (one vectorised call, the real CSPRNG sampler) and estimates
the privacy loss with ``empirical_privacy_loss`` (tests/statistical/privacy_loss.py: mass rule
and margin in its docstring).

* The joint release (the noisy levels, published with the value). The default plan noises the
  increments (dpsql.noise.r2t), so the released levels are bucketed through their differences
  ``noisy_j - noisy_(j-1)`` (a function of the release, so its loss is at most the release's):
  each is put in one of three buckets, below D_j, between D_j and D'_j, at or above D'_j (D
  the exact increments); in the two corner buckets (every increment below, every one above)
  the true loss is exactly the sum of the draws' losses, epsilon. Per-level plans
  (``increments=False``) bucket the levels themselves the same way. So the estimate must be
  consistent with epsilon AND not far below it.
* The released value (the max over levels): consistent with epsilon (its true loss is at most
  epsilon, usually less).
* A sampler that halves every scale it is asked for (a real sampler, the secure one at half the
  scale): the corner buckets' true loss is 2 epsilon, and the check must reject.

False-failure rates, N = 200,000 per database: each "consistent" and each "not vacuous"
assertion at ALPHA = 1e-6 (normal approximation, Bonferroni over all buckets), 10 of them here:
about 1e-5 for the file. The "caught" assertions: the halved mechanism's corner loss is 2
epsilon = 2 (measured 1.99-2.01) against the threshold epsilon + margin (margin measured 0.07-0.14,
i.e. z ~ 5.6 standard errors), so the estimate would have to fall ~40 standard errors short: a
false failure there has negligible probability.
"""

from __future__ import annotations

import numpy as np

from dpsql.noise.mechanisms import discrete_laplace
from dpsql.noise.r2t import levels, release_r2t_many, truncated_sums
from tests.statistical.privacy_loss import empirical_privacy_loss, integer_buckets

N = 200_000
ALPHA = 1e-6
# 60 units of 1..6 rows: every level's truncated answer exceeds its shift.
UNITS = np.array([1, 2, 3, 4, 5, 6] * 10)


class HalvingSampler:
    """The secure sampler at half the requested scale: an under-noised mechanism."""

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return discrete_laplace(scale / 2, size)


def _neighbours(gs: int, b: float, base: float = 2) -> tuple[np.ndarray, np.ndarray]:
    c = UNITS * b
    c_prime = np.append(c, gs * b)  # one more unit contributing GS rows
    return (truncated_sums(c, unit_bound=b, max_contribution=gs, base=base),
            truncated_sums(c_prime, unit_bound=b, max_contribution=gs, base=base))


def _joint_bucket(noisy: np.ndarray, q: np.ndarray, q_prime: np.ndarray,
                  increments: bool) -> np.ndarray:
    """Bucket index of each row's noisy vector: base-3 digits (below, between, above), of the
    levels' differences when the plan noised the increments."""
    if increments:
        noisy = np.diff(noisy, axis=1, prepend=0)
        q, q_prime = np.diff(q, prepend=0), np.diff(q_prime, prepend=0)
    index = np.zeros(noisy.shape[0], dtype=np.int64)
    for j in range(noisy.shape[1]):
        digit = (noisy[:, j] > q[j]).astype(np.int64) + (noisy[:, j] >= q_prime[j])
        index = index * 3 + digit
    return index


def _releases(q: np.ndarray, gs: int, b: float, epsilon: float, integer: bool, sampler=None,
              base: float = 2, increments: bool = True):
    return release_r2t_many(np.tile(q, (N, 1)), unit_bound=b, max_contribution=gs,
                            epsilon=epsilon, integer=integer, sampler=sampler, base=base,
                            increments=increments)


def _joint_loss(gs: int, b: float, epsilon: float, integer: bool, sampler=None,
                base: float = 2, increments: bool = True):
    q, q_prime = _neighbours(gs, b, base)
    # the full move at every level (so at every increment too)
    assert np.allclose(q_prime - q, np.array(levels(gs, base)) * b)
    d = _releases(q, gs, b, epsilon, integer, sampler, base, increments)
    d_prime = _releases(q_prime, gs, b, epsilon, integer, sampler, base, increments)
    assert d.plan.increments == increments
    n_levels = len(levels(gs, base))
    est = empirical_privacy_loss(_joint_bucket(d.noisy, q, q_prime, increments),
                                 _joint_bucket(d_prime.noisy, q, q_prime, increments),
                                 integer_buckets(0, 3**n_levels - 1), alpha=ALPHA)
    return est, d, d_prime


def test_count_levels_jointly_epsilon_dp_and_tight():
    epsilon = 1.0
    est, d, d_prime = _joint_loss(4, 1, epsilon, True)  # L = 2
    assert est.buckets_used >= 4
    assert est.consistent_with(epsilon), est
    assert est.loss >= epsilon - est.margin, est
    # the released value: consistent with epsilon (post-processing of the levels)
    lo = int(min(d.value.min(), d_prime.value.min()))
    hi = int(max(d.value.max(), d_prime.value.max()))
    value_est = empirical_privacy_loss(d.value, d_prime.value, integer_buckets(lo, hi),
                                       alpha=ALPHA)
    assert value_est.buckets_used >= 10
    assert value_est.consistent_with(epsilon), value_est


def test_sum_levels_jointly_epsilon_dp_and_tight():
    epsilon = 0.8
    est, d, d_prime = _joint_loss(4, 2.5, epsilon, False)
    assert est.consistent_with(epsilon), est
    assert est.loss >= epsilon - est.margin, est
    edges = np.linspace(min(d.value.min(), d_prime.value.min()),
                        max(d.value.max(), d_prime.value.max()), 60)
    value_est = empirical_privacy_loss(d.value, d_prime.value, edges, alpha=ALPHA)
    assert value_est.consistent_with(epsilon), value_est


def test_many_levels_value_is_epsilon_dp():
    # GS 64: L = 6 levels at epsilon / 6 each; the released value over its bulk.
    epsilon = 0.5
    q, q_prime = _neighbours(64, 1)
    d = _releases(q, 64, 1, epsilon, True).value
    d_prime = _releases(q_prime, 64, 1, epsilon, True).value
    edges = np.arange(min(d.min(), d_prime.min()), max(d.max(), d_prime.max()) + 2, 4.0) - 0.5
    est = empirical_privacy_loss(d, d_prime, edges, alpha=ALPHA)
    assert est.buckets_used >= 10
    assert est.consistent_with(epsilon), est


def test_count_levels_on_a_non_2_grid_jointly_epsilon_dp_and_tight():
    # the owner's grid floor(2.5^j): levels 2, 6 for GS 6, each at epsilon / 2
    epsilon = 1.0
    est, _, _ = _joint_loss(6, 1, epsilon, True, base=2.5)
    assert est.buckets_used >= 4
    assert est.consistent_with(epsilon), est
    assert est.loss >= epsilon - est.margin, est
    halved, _, _ = _joint_loss(6, 1, epsilon, True, HalvingSampler(), base=2.5)
    assert not halved.consistent_with(epsilon), halved


def test_halved_scale_is_caught():
    epsilon = 1.0
    est, _, _ = _joint_loss(4, 1, epsilon, True, HalvingSampler())
    assert not est.consistent_with(epsilon), est
    est, _, _ = _joint_loss(4, 2.5, epsilon, False, HalvingSampler())
    assert not est.consistent_with(epsilon), est


def test_per_level_plan_jointly_epsilon_dp_tight_and_a_halved_scale_caught():
    # increments=False (LP truncation's plan): each level its own draw
    epsilon = 1.0
    est, _, _ = _joint_loss(4, 1, epsilon, True, increments=False)
    assert est.consistent_with(epsilon), est
    assert est.loss >= epsilon - est.margin, est
    halved, _, _ = _joint_loss(4, 1, epsilon, True, HalvingSampler(), increments=False)
    assert not halved.consistent_with(epsilon), halved
