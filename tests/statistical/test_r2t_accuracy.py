"""R2T's accuracy promises (dpsql.noise.r2t's module docstring), sampled with the real sampler.

* The shifts' one-sided tails: ``P(value > Q(I)) <= beta L / (L + 1)`` (``beta / 2`` for one
  level); each level's noise above its shift with probability ``<= beta / (L + 1)``; R2T's
  theorem, ``Q(I) - 2 shift_j* <= value <= Q(I)`` jointly, with probability ``>= 1 - beta``.
* Truncation bias on fixed contribution vectors: a skewed one (1000 units of 1 row and one unit
  of 10^5 rows: the release tracks the small units, far below the naive sum) and a uniform one
  (error within the paper's ``4 L ln(L / beta) tau* / epsilon`` with probability 1 - beta).
* The published 95% interval: ``lower95 <= Q(I) <= upper95`` with probability >= 0.95 when GS
  bounds every unit; beyond GS, upper95 bounds only the answer truncated at the top level.

False-failure rates. Frequency checks are one-sided binomial tests at ALPHA = 1e-6 each
(``binom.sf(k - 1, n, p0) >= ALPHA``: k failures of n are not significantly more than the
promised rate p0), 8 + 12 of them: about 2e-5 for the file. The power checks (a halved shift
must be caught) have true rates far above the threshold over 20,000 draws (the single-level one
~3 times: z > 30; each increments level's ~4 times: z > 40; the joint theorem's at 0.7 of the
shifts 0.29 against 0.2: z > 30), negligible.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from dpsql.noise.r2t import release_r2t_many, truncated_sums

ALPHA = 1e-6


def _releases(contributions: np.ndarray, n: int, *, gs: int, epsilon: float, beta: float = 0.1,
              b: float = 1, integer: bool = True):
    q = truncated_sums(contributions, unit_bound=b, max_contribution=gs)
    return q, release_r2t_many(np.tile(q, (n, 1)), unit_bound=b, max_contribution=gs,
                               epsilon=epsilon, beta=beta, integer=integer)


def _not_more_frequent(failures: int, n: int, rate: float) -> bool:
    return failures == 0 or float(stats.binom.sf(failures - 1, n, rate)) >= ALPHA


def test_shift_one_sided_tail_single_level():
    # GS 2: one level, every unit within it, so Q(tau_1) = Q(I) and the tail is exactly
    # P(X > shift) = p^(shift+1) / (1+p) = 0.031 at scale 2 (shift ceil(2 ln((1 + 1) / (2 *
    # 0.1))) = ceil(2 ln 10) = 5); the bound is beta L / (L + 1) = beta / 2.
    beta, n = 0.1, 20_000
    c = np.array([1, 2, 2, 1, 2] * 20)
    q, rel = _releases(c, n, gs=2, epsilon=1.0, beta=beta)
    total = int(c.sum())
    assert q[-1] == total
    over = int(np.count_nonzero(rel.value > total))
    assert _not_more_frequent(over, n, beta / 2), over
    # power: the same draws with half the shift exceed far more often than beta / 2
    plan = rel.plan
    halved = np.max(rel.noisy - np.array(plan.shifts) / 2, axis=1)
    assert not _not_more_frequent(int(np.count_nonzero(halved > total)), n, beta / 2)


def test_shift_one_sided_tail_many_levels():
    beta, n = 0.2, 20_000
    c = np.array([1] * 300 + [7] * 20 + [300, 1000])  # GS 1024: L = 10, every unit within
    _, rel = _releases(c, n, gs=1024, epsilon=0.5, beta=beta)
    total = int(c.sum())
    assert _not_more_frequent(int(np.count_nonzero(rel.value > total)), n, beta * 10 / 11)


def test_increments_each_level_within_its_shift_and_half_width():
    # Noised increments (base 2: equal first two draws, exact law; then Theorem 1): level j's
    # summed noise exceeds its shift with probability <= beta / (L + 1), and leaves its
    # half-width with probability <= 0.05 / L; halving either is caught (power).
    beta, n = 0.2, 20_000
    c = np.array([1, 3, 9, 30] * 10)
    q, rel = _releases(c, n, gs=64, epsilon=2.0, beta=beta)  # L = 6
    plan = rel.plan
    assert plan.increments
    levels_n = len(plan.levels)
    noise = rel.noisy - q[None, :]
    for j in range(levels_n):
        over = int(np.count_nonzero(noise[:, j] > plan.shifts[j]))
        assert _not_more_frequent(over, n, beta / (levels_n + 1)), (j, over)
        out = int(np.count_nonzero(np.abs(noise[:, j]) > plan.half_widths[j]))
        assert _not_more_frequent(out, n, 0.05 / levels_n), (j, out)
        halved = int(np.count_nonzero(noise[:, j] > plan.shifts[j] / 2))
        assert not _not_more_frequent(halved, n, beta / (levels_n + 1)), (j, halved)


def test_theorem_holds_jointly_with_probability_one_minus_beta():
    # R2T's guarantee as dpsql.noise.r2t states it: with probability >= 1 - beta, Q(I) -
    # 2 shift_j* <= value <= Q(I), j* the first level covering the largest unit (here 7 rows:
    # level 8 of 2, 4, 8, ..). The shifts spend beta / (L + 1) per tail (L upper tails, j*'s
    # lower one), so the joint miss rate is at most beta (measured ~0.12 at beta 0.2); shifts
    # at 0.7 of the plan's miss far more often (~0.29): the test can fail.
    beta, n = 0.2, 20_000
    c = np.array([1] * 300 + [7] * 20)
    _, rel = _releases(c, n, gs=1024, epsilon=1.0, beta=beta)
    total = int(c.sum())
    first = next(j for j, t in enumerate(rel.plan.levels) if t >= 7)
    shifts = np.array(rel.plan.shifts)

    def misses(scale: float) -> int:
        value = np.maximum(0, np.max(rel.noisy - scale * shifts, axis=1))
        return int(np.count_nonzero((value > total) | (value < total - 2 * scale * shifts[first])))
    assert rel.value.tolist() == np.maximum(0, np.max(rel.noisy - shifts, axis=1)).tolist()
    assert _not_more_frequent(misses(1.0), n, beta)
    assert not _not_more_frequent(misses(0.7), n, beta)


def test_skewed_contributions_track_the_small_units():
    # 1000 units of 1 row + one of 10^5 rows; GS 2^17 (L = 17), epsilon 1, beta 0.1.
    epsilon, beta, m = 1.0, 0.1, 400
    c = np.array([1] * 1000 + [10**5])
    q, rel = _releases(c, m, gs=2**17, epsilon=epsilon, beta=beta)
    naive = int(c.sum())
    assert q[0] == 1002 and q[-1] == naive == 101_000
    s1 = rel.plan.shifts[0]  # ceil(17 * 2 * ln(18 / 0.2)) = ceil(152.99) = 153
    assert s1 == 153
    # The release is close to the small units' answer Q(tau_1) = 1002: within [Q_1 - 2 s_1,
    # Q_1 + s_1] unless level 1's noise is below -s_1 or some level's above its shift (L + 1
    # tails of beta / (L + 1)), or a level j >= 8 gets X_j > s_j - (Q_j - Q_1) >= s_j - 2^j
    # (at most e^(2^j / scale_j) = e^(1/17) times its share): a miss rate below 1.05 beta.
    close = (rel.value >= q[0] - 2 * s1) & (rel.value <= q[0] + s1)
    assert _not_more_frequent(int(np.count_nonzero(~close)), m, 1.05 * beta)
    # ... which is far below the naive sum
    assert q[0] + s1 < 0.02 * naive
    assert float(np.median(rel.value)) < 0.02 * naive


def test_uniform_contributions_within_the_paper_bound():
    # 2000 units of 50 rows: tau* = 50; GS 1024 (L = 10); the paper's bound (Theorem 5.1)
    # 4 L ln(L / beta) tau* / epsilon, plus 2 for the shifts' rounding up.
    epsilon, beta, m = 1.0, 0.1, 500
    c = np.full(2000, 50)
    _, rel = _releases(c, m, gs=1024, epsilon=epsilon, beta=beta)
    total = 100_000
    bound = 4 * 10 * math.log(10 / beta) * 50 / epsilon + 2
    errors = total - rel.value
    assert _not_more_frequent(int(np.count_nonzero(np.abs(errors) > bound)), m, beta)
    assert bound < 0.1 * total  # the bound is meaningful here


def test_sum_uniform_contributions_within_the_paper_bound():
    # A SUM: 500 units, each 20 rows of value 2.5 (b = 2.5): tau* = 20 rows. The grid adds at
    # most g (< 2^-19 of a scale) per level, inside the +2 steps of slack.
    epsilon, beta, m, b = 0.5, 0.1, 300, 2.5
    c = np.full(500, 20 * b)
    _, rel = _releases(c, m, gs=256, epsilon=epsilon, beta=beta, b=b, integer=False)
    total = 500 * 20 * b
    bound = (4 * 8 * math.log(8 / beta) * 20 * b + 2 * b) / epsilon
    errors = np.abs(total - rel.value)
    assert _not_more_frequent(int(np.count_nonzero(errors > bound)), m, beta)


def test_interval_covers_the_answer_when_gs_bounds_every_unit():
    n = 20_000
    for c, gs, eps in ((np.array([1, 2] * 50), 2, 1.0),
                       (np.array([1] * 100 + [30, 64]), 64, 0.5)):
        _, rel = _releases(c, n, gs=gs, epsilon=eps)
        total = float(c.sum())
        missed = (rel.lower95 > total) | (rel.upper95 < total)
        assert _not_more_frequent(int(np.count_nonzero(missed)), n, 0.05)
        assert np.all(rel.lower95 <= rel.upper95)


def test_upper_bound_beyond_gs_is_on_the_truncated_answer():
    # One unit above GS: upper95 bounds Q(tau_L) (the answer with that unit cut to tau_L
    # rows), not Q(I); lower95 still bounds Q(I) from below.
    n = 20_000
    c = np.array([1] * 200 + [10**6])
    q, rel = _releases(c, n, gs=8, epsilon=1.0)
    total = float(c.sum())
    assert q[-1] == 208
    missed = (rel.lower95 > q[-1]) | (rel.upper95 < q[-1])
    assert _not_more_frequent(int(np.count_nonzero(missed)), n, 0.05)
    assert np.all(rel.upper95 < total)
    assert np.all(rel.lower95 <= total)
