"""The owner's level grid of R2T (dpsql.noise.r2t.levels with ``base``; PrivacyUnit.level_base):
exact levels, exact scales and shifts on a non-2 grid, validation, and the truncation-bias
bound of the module docstring (``Q(I) - value <= 2 B L ln((L + 1) / (2 beta)) max(ceil(tau*),
1) b / epsilon`` on the event that every level's noise lies within its shift).

The privacy of a non-2 grid is checked by brute force and statistically beside the default
one (tests/bruteforce/test_r2t.py, tests/bruteforce/test_units.py,
tests/statistical/test_r2t_privacy_loss.py, all parameterised over the base).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from dpsql.noise.r2t import levels, plan_r2t, release_r2t, truncated_sums
from dpsql.noise.r2t_levels import fine_exponent, fine_levels


class SequenceSampler:
    """Deterministic noise (tests only): the i-th draw the release asks for is ``draws[i]``."""

    def __init__(self, draws: list[int]) -> None:
        self.draws = list(draws)

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return np.full(size, self.draws.pop(0), dtype=np.int64)


@pytest.mark.parametrize(("gs", "base", "expected"), [
    (10**6, 5.5, (5, 30, 166, 915, 5032, 27680, 152243, 837339, 4605366)),
    (837339, 5.5, (5, 30, 166, 915, 5032, 27680, 152243, 837339)),  # R2T's code's 8 levels
    (9, 3, (3, 9)), (10, 3, (3, 9, 27)), (1, 3, (3,)), (14, 2.5, (2, 6, 15)),
    (100, 10, (10, 100)), (101, 10.0, (10, 100, 1000)), (8, 2, (2, 4, 8)), (5, 2.0, (2, 4, 8)),
    (7, 7, (7,)),
])
def test_levels_exact(gs, base, expected):
    # floor(5.5^j): 5.5, 30.25, 166.375, 915.06, 5032.84, 27680.6, 152243.5, 837339.3, ...
    assert levels(gs, base) == expected


def test_levels_are_exact_rational_floors():
    # 5.5^8 = 11^8 / 2^8 = 214358881 / 256 = 837339.37..: floor exactly, no float error
    assert levels(837339, 5.5)[-1] == 214358881 // 256
    # 1.1 is no allowed base, but 2.1's binary value is floored exactly: 2.1^3 = 9.261..
    assert levels(9, 2.1) == (2, 4, 9)


@pytest.mark.parametrize("base", [2, 2.5, 3, 5.5, 10, 1000.5])
def test_grid_guarantees(base):
    for gs in [*range(1, 400), 10**6, 2**40]:
        taus = levels(gs, base)
        assert taus[0] == math.floor(base) >= 2
        assert all(a < b for a, b in itertools.pairwise(taus))
        assert taus[-1] >= gs and taus[-1] < base * max(gs, 2)
        assert len(taus) == max(1, math.ceil(math.log(gs, base) - 1e-12))


@pytest.mark.parametrize("base", [1.99, 1, 0, -3, float("nan"), float("inf"), 2**63])
def test_bad_bases_are_value_errors(base):
    with pytest.raises(ValueError, match="base"):
        levels(8, base)


@pytest.mark.parametrize("base", [True, "3", None])
def test_non_numeric_bases_are_type_errors(base):
    with pytest.raises(TypeError, match="base"):
        levels(8, base)


def test_a_grid_whose_top_passes_2_to_62_is_refused():
    with pytest.raises(ValueError, match="2\\^62"):
        levels(2**62, 3)
    assert levels(2**62, 2)[-1] == 2**62


def test_count_plan_exact_values_on_base_3():
    # GS 20, base 3: tau = 3, 9, 27 (L = 3); epsilon 1.5 -> 0.5 per level; scale L tau / eps
    plan = plan_r2t(unit_bound=1, max_contribution=20, epsilon=1.5, beta=0.1, integer=True,
                    base=3, increments=False)
    assert plan.levels == (3, 9, 27)
    assert plan.scales == (6.0, 18.0, 54.0)
    # ceil(scale ln((L + 1) / (2 beta))) = ceil(scale ln 20): 17.97 -> 18, 53.92 -> 54,
    # 161.77 -> 162
    assert plan.shifts == (18.0, 54.0, 162.0)
    assert plan.epsilon_per_level == pytest.approx(0.5)
    # noised increments 3, 6, 18 rows: scales 6, 12, 36 (strictly increasing: Theorem 1)
    inc = plan_r2t(unit_bound=1, max_contribution=20, epsilon=1.5, beta=0.1, integer=True,
                   base=3)
    assert inc.increments and inc.scales == (6.0, 12.0, 36.0)
    # tails beta / (L + 1) = 1/40. Level 1: k + 1 >= 6 ln(40 / (1 + e^(-1/6))) = 18.45 -> 18;
    # level 2: M = mgf of scale 6 at 1/12 = 1.33256, k + 1 >= 12 ln(40 * 1.33256 / (1 +
    # e^(-1/12))) = 39.88 -> 39; level 3: M = (mgf of 6 at 1/36 = 1.02851) (mgf of 12 at 1/36 =
    # 1.12493) = 1.15699, k + 1 >= 36 ln(40 * 1.15699 / (1 + e^(-1/36))) = 113.59 -> 113 (per
    # level: 162)
    assert inc.shifts == (18.0, 39.0, 113.0)


def test_sum_plan_levels_scale_with_the_bound_on_base_5_5():
    plan = plan_r2t(unit_bound=50.0, max_contribution=1000, epsilon=0.8, integer=False,
                    base=5.5, increments=False)
    assert plan.levels == (5, 30, 166, 915, 5032)
    for tau, scale, g in zip(plan.levels, plan.scales, plan.granularities, strict=True):
        # L (tau b + g) / epsilon, the grid g a power of two no larger than needed
        assert scale == pytest.approx(5 * (tau * 50.0 + g) / 0.8, rel=1e-12)
        assert scale >= 5 * tau * 50.0 / 0.8
    inc = plan_r2t(unit_bound=50.0, max_contribution=1000, epsilon=0.8, integer=False,
                   base=5.5)
    assert inc.increments
    for d, scale, g in zip((5, 25, 136, 749, 4117), inc.scales, inc.granularities,
                           strict=True):
        # L ((tau_j - tau_(j-1)) b + g) / epsilon
        assert scale == pytest.approx(5 * (d * 50.0 + g) / 0.8, rel=1e-12)
        assert scale >= 5 * d * 50.0 / 0.8


def test_truncated_sums_on_base_2_5():
    c = np.array([0, 1, 3, 7, 20])
    # levels 2, 6, 15 (GS 14): min(c, tau) summed
    assert truncated_sums(c, unit_bound=1, max_contribution=14, base=2.5).tolist() == [
        0 + 1 + 2 + 2 + 2, 0 + 1 + 3 + 6 + 6, 0 + 1 + 3 + 7 + 15]


@pytest.mark.parametrize("increments", [True, False])
@pytest.mark.parametrize("base", [2, 3, 5.5, 10])
@pytest.mark.parametrize("largest", [1, 4, 37, 250])
def test_truncation_bias_bound_at_the_edge_of_the_noise_event(base, largest, increments):
    """Every level's noise at minus its shift (the worst case on the event of probability
    >= 1 - beta the bound assumes): the release is still within the docstring's bias bound,
    and on a base-2 grid within the paper's 4 L ln(L / beta) tau* b / epsilon."""
    gs, eps, beta = 300, 1.0, 0.1
    c = np.array([1] * 200 + [3] * 30 + [largest])
    q = truncated_sums(c, unit_bound=1, max_contribution=gs, base=base)
    plan = plan_r2t(unit_bound=1, max_contribution=gs, epsilon=eps, beta=beta, integer=True,
                    base=base, increments=increments)
    shifts = [int(h) for h in plan.shifts]
    # level j's total noise is -shift_j: per level one draw each, increments their differences
    draws = ([-(h - lower) for h, lower in zip(shifts, [0, *shifts[:-1]], strict=True)]
             if plan.increments else [-h for h in shifts])
    rel = release_r2t(q, unit_bound=1, max_contribution=gs, epsilon=eps, beta=beta,
                      integer=True, sampler=SequenceSampler(draws), base=base,
                      increments=increments)
    assert rel.noisy.tolist() == (q - np.array(shifts)).tolist()
    n = len(plan.levels)
    tau_star = int(c.max())  # the largest unit, in rows (b = 1)
    # + 2 n: the shifts' ceilings
    bound = 2 * base * n * math.log((n + 1) / (2 * beta)) * max(tau_star, 1) / eps + 2 * n
    truth = int(c.sum())
    assert rel.value <= truth
    assert truth - rel.value <= bound
    if base == 2:
        assert truth - rel.value <= 4 * n * math.log(n / beta) * tau_star / eps + 2 * n
    # the bound is the right order: the chosen level is the first covering the largest unit
    # or a lower one
    first = next(j for j, t in enumerate(plan.levels) if t >= tau_star)
    assert rel.chosen <= first


def test_fine_levels_are_r2ts_own_powers_of_5_5():
    # R2T's code races 5.5^j exactly; 5.5^j = 11^j / 2^j is dyadic, k = 30 - 19 = 11 >= 8
    assert fine_exponent(837339, 5.5) == 11
    assert fine_levels(837339, 5.5) == tuple(5.5**j for j in range(1, 9))
    # the whole-row grid of one unit is their floor
    assert levels(837339, 5.5) == tuple(math.floor(5.5**j) for j in range(1, 9))


@pytest.mark.parametrize("base", [2, 2.5, 3, 3.3, 5.5, 10, 1000.5])
def test_fine_grid_guarantees(base):
    for gs in [*range(1, 200), 10**6, 2**29, 2**40]:
        whole = levels(gs, base)
        fine = fine_levels(gs, base)
        k = fine_exponent(gs, base)
        assert len(fine) == len(whole)
        assert all(a < b for a, b in itertools.pairwise(fine))
        exact = Fraction(base)
        for j, tau in enumerate(fine, start=1):
            # floor(B^j) <= tau_j <= B^j, exactly, and a whole number of 2^-k below 2^31
            assert whole[j - 1] <= Fraction(tau) <= exact**j
            steps = Fraction(tau) * 2**k
            assert steps.denominator == 1
            assert k == 0 or steps < 2**31
        assert fine[-1] >= gs
        if all(float(t).is_integer() for t in fine):
            assert fine == whole  # whole bases, or a top level of 2^30 or more: the same grid


def test_fine_levels_of_whole_bases_and_huge_grids_are_the_whole_ones():
    assert fine_levels(2**20, 2) == levels(2**20, 2)
    assert fine_levels(10**6, 10) == levels(10**6, 10)
    assert fine_exponent(2**40, 5.5) == 0 and fine_levels(2**40, 5.5) == levels(2**40, 5.5)


def test_a_count_plan_at_fine_levels_is_a_sum_plan():
    plan = plan_r2t(unit_bound=1, max_contribution=837339, epsilon=0.8, integer=False, base=5.5,
                    increments=False, fine=True)
    assert plan.levels == fine_levels(837339, 5.5) and plan.fine
    # a level's scale covers its real tau plus the grid step (dpsql.noise.r2t, "Sums")
    for tau, scale, g in zip(plan.levels, plan.scales, plan.granularities, strict=True):
        assert scale == pytest.approx(8 * (tau + g) / 0.8, rel=1e-12)
        assert scale > 8 * tau / 0.8
    with pytest.raises(ValueError, match="integer=False"):
        plan_r2t(unit_bound=1, max_contribution=837339, epsilon=0.8, integer=True, base=5.5,
                 fine=True)
    # whole fine levels (base 2) keep the exact integer plan
    same = plan_r2t(unit_bound=1, max_contribution=2**20, epsilon=0.8, integer=True, fine=True)
    assert same.levels == levels(2**20, 2) and same.integer
