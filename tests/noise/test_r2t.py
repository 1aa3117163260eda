"""Unit tests of dpsql.noise.r2t: exact levels, scales, shifts and half-widths, the release
arithmetic with deterministic noise, truncation, validation and refusals.

The statistical and brute-force checks live in tests/statistical/test_r2t_*.py and
tests/bruteforce/test_r2t.py. Every exact value below is recomputed by hand in the comments, so a
scale, shift or half-width that is too small (e.g. a halved scale) fails here.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from dpsql.errors import NotSupportedError
from dpsql.noise import mechanisms, r2t
from dpsql.noise.r2t import (
    levels,
    plan_r2t,
    r2t_scales,
    release_r2t,
    release_r2t_many,
    truncated_sums,
)
from tests.noise.randomness import assert_secure_randomness


class FixedSampler:
    """Deterministic noise (tests only): ``value`` for every cell; records (scale, size)."""

    def __init__(self, value: int = 0) -> None:
        self.value = value
        self.calls: list[tuple[float, int]] = []

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        self.calls.append((scale, size))
        return np.full(size, self.value, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Levels
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("gs", "expected"), [
    (1, (2,)), (2, (2,)), (3, (2, 4)), (4, (2, 4)), (5, (2, 4, 8)), (8, (2, 4, 8)),
    (9, (2, 4, 8, 16)), (1000, tuple(2**j for j in range(1, 11))),
])
def test_levels_exact(gs, expected):
    assert levels(gs) == expected


def test_levels_large_gs_exact_without_floating_point():
    assert len(levels(2**20)) == 20 and levels(2**20)[-1] == 2**20
    assert len(levels(2**20 + 1)) == 21
    assert len(levels(2**53 + 1)) == 54  # float log2 would say 53
    assert levels(2**62)[-1] == 2**62


@pytest.mark.parametrize("gs", [0, -1, 2**62 + 1])
def test_levels_reject_out_of_range(gs):
    with pytest.raises(ValueError, match="max_contribution"):
        levels(gs)


@pytest.mark.parametrize("gs", [True, 4.0, "4", None])
def test_levels_reject_non_integers(gs):
    with pytest.raises(TypeError, match="max_contribution"):
        levels(gs)


def test_top_level_covers_gs_and_is_tight():
    for gs in range(1, 3000):
        top = levels(gs)[-1]
        assert top >= gs and top < 2 * max(gs, 2)


# ---------------------------------------------------------------------------------------------
# The plan: exact scales, shifts, half-widths
# ---------------------------------------------------------------------------------------------


def test_count_plan_exact_values_per_level():
    # GS 8: L = 3, tau = 2, 4, 8; epsilon 1 -> each level gets 1/3; sensitivity tau.
    plan = plan_r2t(unit_bound=1, max_contribution=8, epsilon=1.0, beta=0.1, integer=True,
                    increments=False)
    assert plan.levels == (2, 4, 8) and not plan.increments
    assert plan.scales == (6.0, 12.0, 24.0)  # L tau / epsilon
    # shift = ceil(scale ln((L + 1) / (2 beta))) = ceil(scale ln 20): 17.97, 35.95, 71.90
    assert plan.shifts == (18.0, 36.0, 72.0)
    # smallest k with 2 p^(k+1) / (1 + p) <= 0.05 / 3, p = e^(-1/scale):
    # scale 6: k + 1 >= 6 ln(60 * 2 / (1 + e^(-1/6))) = 25.04 -> k = 25
    assert plan.half_widths == (25.0, 49.0, 98.0)
    assert plan.granularities == (1.0, 1.0, 1.0)
    assert plan.epsilon_per_level == pytest.approx(1 / 3)


def test_count_plan_exact_values_increments():
    # The same GS 8, epsilon 1, beta 0.1, noised increments D = Q(2), Q(4) - Q(2), Q(8) -
    # Q(4): sensitivities 2, 2, 4 -> scales L (tau_j - tau_(j-1)) / epsilon = 6, 6, 12.
    plan = plan_r2t(unit_bound=1, max_contribution=8, epsilon=1.0, beta=0.1, integer=True)
    assert plan.increments and plan.levels == (2, 4, 8)
    assert plan.scales == (6.0, 6.0, 12.0)
    # Shifts: the smallest k with a tail bound <= beta / (L + 1) = 1/40 (dpsql.noise.r2t_tail).
    # Level 1 (one draw, p = e^(-1/6) = 0.846482): p^(k+1) / (1+p) <= 1/40 <=> k + 1 >= 6 ln(40
    #   / 1.846482) = 18.454 -> k = 18 (per level: 18).
    # Level 2 (X_1 + X_2, equal scales, exact law): p^(k+1) [0.045026 (k+1) + 0.541570 -
    #   0.020641]: k = 24 -> 0.025528 > 1/40; k = 25 -> 0.022200 -> 25 (per level: 36).
    # Level 3 (scale 12 over two of scale 6): M = (mgf of scale 6 at 1/12)^2 = ((1 - e^(-1/6))^2
    #   / ((1 - e^(-1/12))(1 - e^(-1/4))))^2 = 1.33256^2 = 1.77572; p = e^(-1/12):
    #   k + 1 >= 12 ln(40 * 1.77572 / 1.920044) = 43.329 -> 43 (per level: 72).
    assert plan.shifts == (18.0, 25.0, 43.0)
    # Half-widths: the same at 0.025 / L = 1/120 (two-sided 0.05 / L): level 1 k + 1 >= 6
    #   ln(120 / 1.846482) = 25.045 -> 25 (as per level); level 2: k = 31 -> 0.0048279 *
    #   1.96176 = 0.009471 > 1/120, k = 32 -> 0.0040868 * 2.00678 = 0.008201 -> 32; level 3:
    #   k + 1 >= 12 ln(120 * 1.77572 / 1.920044) = 56.513 -> 56.
    assert plan.half_widths == (25.0, 32.0, 56.0)
    assert plan.granularities == (1.0, 1.0, 1.0)
    assert plan.epsilon_per_level == pytest.approx(1 / 3)


def test_count_plan_with_unit_bound_and_beta():
    # GS 4 -> L = 2; b = 3 (each row weighs at most 3); epsilon 0.5, beta 0.2
    plan = plan_r2t(unit_bound=3, max_contribution=4, epsilon=0.5, beta=0.2, integer=True,
                    increments=False)
    assert plan.scales == (2 * 2 * 3 / 0.5, 2 * 4 * 3 / 0.5)  # (24, 48)
    # ln((L + 1) / (2 beta)) = ln(3 / 0.4)
    assert plan.shifts == (math.ceil(24 * math.log(7.5)), math.ceil(48 * math.log(7.5)))
    inc = plan_r2t(unit_bound=3, max_contribution=4, epsilon=0.5, beta=0.2, integer=True)
    # increments 2 and 4 - 2 = 2 rows of weight 3: both at L * 6 / 0.5 = 24
    assert inc.increments and inc.scales == (24.0, 24.0)
    assert inc.shifts[0] <= plan.shifts[0] and inc.shifts[1] < plan.shifts[1]


def test_increments_are_chosen_only_where_no_level_loses():
    for gs, eps, beta, b, integer, base in itertools.product(
            (2, 5, 100, 2**20), (0.05, 0.8, 3.0), (0.01, 0.1), (1, 2.5), (True, False),
            (2, 2.2, 3, 5.5)):
        if integer and b != 1:
            continue
        kwargs = dict(unit_bound=b, max_contribution=gs, epsilon=eps, beta=beta,
                      integer=integer, base=base)
        old = plan_r2t(**kwargs, increments=False)
        new = plan_r2t(**kwargs)
        assert new.levels == old.levels
        # every grid of more than one level here gains
        assert new.increments == (len(new.levels) > 1), kwargs
        assert all(x <= y for x, y in zip(new.shifts, old.shifts, strict=True))
        assert all(x <= y for x, y in zip(new.half_widths, old.half_widths, strict=True))
        if new.increments:  # and from the second level on the gain is real
            assert all(x < y for x, y in zip(new.shifts[1:], old.shifts[1:], strict=True))


def test_increments_win_on_random_public_settings():
    # 300 random (epsilon, beta, base, GS, b): the increments plan is never worse at any level
    # (level 1 is the same draw in both plans: the smaller of the two bounds is kept, so float
    # margins cannot make it a step worse), so it is always the one taken
    rng = random.Random(3)
    for _ in range(300):
        integer = rng.random() < 0.5
        kwargs = dict(unit_bound=1 if integer else 10 ** rng.uniform(-3, 3),
                      max_contribution=int(10 ** rng.uniform(0.5, 9)),
                      epsilon=10 ** rng.uniform(-2, 3), beta=10 ** rng.uniform(-4, -0.05),
                      integer=integer, base=rng.choice([2, 2.2, 2.3, 3, 5.5, 10]))
        try:
            new = plan_r2t(**kwargs)
        except NotSupportedError:
            continue
        old = plan_r2t(**kwargs, increments=False)
        assert new.increments == (len(new.levels) > 1), kwargs
        assert new.shifts[0] <= old.shifts[0] and new.half_widths[0] <= old.half_widths[0]


def test_increments_flag_must_be_a_bool():
    with pytest.raises(TypeError, match="increments"):
        plan_r2t(unit_bound=1, max_contribution=8, epsilon=1.0, integer=True,
                 increments=1)  # type: ignore[arg-type]


def test_shifts_bound_the_exact_one_sided_tail():
    # P(X > shift) = p^(shift+1) / (1+p) must be <= beta / (L + 1) at every level, for many
    # plans.
    for gs, eps, beta in itertools.product((1, 2, 5, 100, 2**20), (0.05, 0.8, 3.0),
                                           (0.01, 0.1, 0.5)):
        plan = plan_r2t(unit_bound=1, max_contribution=gs, epsilon=eps, beta=beta, integer=True,
                        increments=False)
        n = len(plan.levels)
        for scale, shift in zip(plan.scales, plan.shifts, strict=True):
            p = math.exp(-1.0 / scale)
            log_tail = -(shift + 1) / scale - math.log1p(p)  # ln p = -1/scale exactly
            assert log_tail <= math.log(beta / (n + 1)) + 1e-12
            # and the shift is ln(1 / (2 beta / (L + 1))) scales rounded up, nothing more
            assert shift == math.ceil(scale * math.log((n + 1) / (2 * beta)))


def test_half_widths_are_the_smallest_exact_two_sided_bounds():
    for gs, eps in itertools.product((1, 3, 64, 2**16), (0.1, 1.0, 7.0)):
        plan = plan_r2t(unit_bound=1, max_contribution=gs, epsilon=eps, integer=True,
                        increments=False)
        alpha = 0.05 / len(plan.levels)
        for scale, h in zip(plan.scales, plan.half_widths, strict=True):
            p = math.exp(-1.0 / scale)

            def tail(k: int, p: float = p) -> float:  # P(|X| > k)
                return 2 * p ** (k + 1) / (1 + p)
            assert tail(int(h)) <= alpha
            assert h == 0 or tail(int(h) - 1) > alpha
            # within one step of the continuous Laplace half-width scale * ln(L / 0.05)
            assert abs(h - scale * math.log(1 / alpha)) <= 1.0 + 1e-9


def test_sum_plan_exact_values_per_level():
    # b = 2.5, GS 8 (L = 3), epsilon 1: level j's scale is L (tau b + g) / epsilon with g the
    # grid of that scale, g = 2^(ceil(log2 scale) - 20).
    plan = plan_r2t(unit_bound=2.5, max_contribution=8, epsilon=1.0, beta=0.1, integer=False,
                    increments=False)
    for tau, scale, g, shift, h in zip(plan.levels, plan.scales, plan.granularities,
                                       plan.shifts, plan.half_widths, strict=True):
        assert g == mechanisms.sum_granularity(scale)
        assert scale == 3 * (tau * 2.5 + g) / 1.0
        steps = scale / g
        assert shift == g * (math.ceil(steps * math.log(20)) + 0.5)
        assert 2**19 < steps <= 2**20
        assert abs(h - g * 0.5 - scale * math.log(60)) <= g * 1.0 + 1e-9
    # level 1: tau b = 5; scale 3 (5 + g) / 1 = 15 + 3g, g = 2^(4 - 20) = 2^-16
    assert plan.granularities[0] == 2.0**-16
    assert plan.scales[0] == 15 + 3 * 2.0**-16


def test_sum_plan_exact_values_increments():
    # The same sum plan with noised increments: increments 2, 2, 4 rows of b = 2.5, so scales
    # 3 (5 + g) = 15 + 3 * 2^-16 twice (g = 2^-16) and 3 (10 + g) = 30 + 3 * 2^-15 (g = 2^-15).
    plan = plan_r2t(unit_bound=2.5, max_contribution=8, epsilon=1.0, beta=0.1, integer=False)
    assert plan.increments
    g1, g3 = 2.0**-16, 2.0**-15
    assert plan.granularities == (g1, g1, g3)
    assert plan.scales == (15 + 3 * g1, 15 + 3 * g1, 30 + 3 * g3)
    # shifts: the noise part in steps of each level's grid (the count case's numbers at
    # scale 15 instead of 6: level 1 k + 1 >= (15 / g1) ln(40 / (1 + p)), p = e^(-g1 / 15)),
    # plus half a step per draw for the snapping
    steps = plan.scales[0] / g1
    k1 = math.ceil(steps * math.log(40 / (1 + math.exp(-1 / steps)))) - 1
    assert plan.shifts[0] == g1 * k1 + g1 / 2
    assert plan.shifts[0] == pytest.approx(15 * math.log(40 / 2), abs=1e-3)  # 44.936
    # level 2 (exact law of two) and 3 (Theorem 1, real-valued form: the lower draws are on
    # the finer grid): the count plan's values scaled by 15 / 6 and 30 / 12, to the grid
    assert plan.shifts[1] == pytest.approx(25 * 2.5, rel=0.02)
    assert plan.shifts[2] == pytest.approx(43 * 2.5, rel=0.02)
    # whole steps of the level's grid plus half a step of each draw's grid so far
    assert ((plan.shifts[1] - g1) / g1).is_integer()
    assert ((plan.shifts[2] - g1 - g3 / 2) / g3).is_integer()
    old = plan_r2t(unit_bound=2.5, max_contribution=8, epsilon=1.0, beta=0.1, integer=False,
                   increments=False)
    assert plan.shifts[0] <= old.shifts[0] and plan.half_widths[0] <= old.half_widths[0]


def test_r2t_scales_match_the_plan_and_the_formula():
    old = r2t_scales(unit_bound=1, max_contribution=2**10, epsilon=0.8, integer=True,
                     increments=False)
    assert old.tolist() == [10 * 2**j / 0.8 for j in range(1, 11)]
    # increments 2, 2, 4, .., 2^9: L (tau_j - tau_(j-1)) / epsilon
    scales = r2t_scales(unit_bound=1, max_contribution=2**10, epsilon=0.8, integer=True)
    assert scales.tolist() == [10 * 2 / 0.8] + [10 * 2**(j - 1) / 0.8 for j in range(2, 11)]
    sums = r2t_scales(unit_bound=7.0, max_contribution=5, epsilon=2.0, integer=False)
    plan = plan_r2t(unit_bound=7.0, max_contribution=5, epsilon=2.0, integer=False)
    assert sums.tolist() == list(plan.scales)
    # a scale is never below L (tau_j - tau_(j-1)) b / epsilon (halving it would break
    # epsilon-DP)
    assert np.all(sums >= 3 * np.array([2, 2, 4]) * 7.0 / 2.0)


def test_plan_depends_on_public_parameters_only():
    a = plan_r2t(unit_bound=1, max_contribution=100, epsilon=0.3, integer=True)
    b = plan_r2t(unit_bound=1, max_contribution=100, epsilon=0.3, integer=True)
    assert a == b


# ---------------------------------------------------------------------------------------------
# Validation and refusals (public parameters only)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    {"unit_bound": 0}, {"unit_bound": -1.0}, {"unit_bound": math.inf}, {"epsilon": 0.0},
    {"epsilon": math.nan}, {"beta": 0.0}, {"beta": 1.0}, {"beta": 1.5},
    {"unit_bound": 1.5, "integer": True},
])
def test_plan_rejects_bad_parameters(kwargs):
    params = {"unit_bound": 1, "max_contribution": 8, "epsilon": 1.0, "beta": 0.1,
              "integer": True} | kwargs
    with pytest.raises(ValueError):
        plan_r2t(**params)


def test_plan_rejects_non_bool_integer_flag():
    with pytest.raises(TypeError):
        plan_r2t(unit_bound=1, max_contribution=8, epsilon=1.0, integer=1)  # type: ignore[arg-type]


def test_too_noisy_count_is_not_supported_before_any_draw():
    sampler = FixedSampler()
    with pytest.raises(NotSupportedError, match="max_contribution"):
        release_r2t(np.zeros(62), unit_bound=1, max_contribution=2**62, epsilon=0.1,
                    integer=True, sampler=sampler)
    assert sampler.calls == []
    # the same GS as a sum is fine: the grid absorbs the scale
    plan_r2t(unit_bound=1, max_contribution=2**62, epsilon=0.1, integer=False)


@pytest.mark.parametrize("truncated", [
    np.zeros(2), np.zeros((3, 1)), np.array([1.0, -1.0, 2.0]), np.array([1.0, np.nan, 2.0]),
    np.array(["a", "b", "c"]),
])
def test_release_rejects_malformed_truncated_answers(truncated):
    with pytest.raises(ValueError):
        release_r2t(truncated, unit_bound=1, max_contribution=8, epsilon=1.0, integer=False,
                    sampler=FixedSampler())


def test_count_release_rejects_fractional_counts():
    with pytest.raises(ValueError):
        release_r2t(np.array([1.5, 2.0, 3.0]), unit_bound=1, max_contribution=8, epsilon=1.0,
                    integer=True, sampler=FixedSampler())


# ---------------------------------------------------------------------------------------------
# Truncation
# ---------------------------------------------------------------------------------------------


def test_truncated_sums_exact():
    c = np.array([0, 1, 3, 10])
    # tau 2: 0 + 1 + 2 + 2; tau 4: 0 + 1 + 3 + 4; tau 8: 0 + 1 + 3 + 8
    q = truncated_sums(c, unit_bound=1, max_contribution=8)
    assert q.dtype == np.int64 and q.tolist() == [5, 8, 12]
    # a SUM: contributions in value units, caps tau * b = 5, 10, 20
    q = truncated_sums(np.array([0.5, 7.0, 30.0]), unit_bound=2.5, max_contribution=8)
    assert q.tolist() == [0.5 + 5 + 5, 0.5 + 7 + 10, 0.5 + 7 + 20]
    assert truncated_sums(np.array([], dtype=np.int64), unit_bound=1,
                          max_contribution=3).tolist() == [0, 0]


def test_truncated_sums_rejects_negative_contributions():
    with pytest.raises(ValueError, match=">= 0"):
        truncated_sums(np.array([1, -1]), unit_bound=1, max_contribution=4)


def test_truncation_moves_by_at_most_tau_b_per_unit_exhaustively():
    # Pure-function brute force: every vector of up to 3 units with contributions 0..9, every
    # unit removed: Q(tau_j) moves by min(c_u, tau_j b) <= tau_j b, and is attained.
    gs, b = 6, 1
    caps = np.array(levels(gs)) * b
    attained = np.zeros(len(caps), dtype=bool)
    for size in range(1, 4):
        for c in itertools.product(range(10), repeat=size):
            full = truncated_sums(np.array(c), unit_bound=b, max_contribution=gs)
            for u in range(size):
                rest = truncated_sums(np.array(c[:u] + c[u + 1:], dtype=np.int64),
                                      unit_bound=b, max_contribution=gs)
                moved = full - rest
                assert np.all(moved >= 0) and np.all(moved <= caps)
                attained |= moved == caps
    assert attained.all()


# ---------------------------------------------------------------------------------------------
# The release with deterministic noise
# ---------------------------------------------------------------------------------------------


def test_count_release_exact_with_zero_noise():
    sampler = FixedSampler(0)
    q = np.array([5, 8, 12])  # c = [0, 1, 3, 10], GS 8
    rel = release_r2t(q, unit_bound=1, max_contribution=8, epsilon=10.0, integer=True,
                      sampler=sampler)
    plan = plan_r2t(unit_bound=1, max_contribution=8, epsilon=10.0, integer=True)
    # one draw per increment (2, 2, 4 rows), at the plan's scale 3 * (2, 2, 4) / 10
    assert sampler.calls == [(s, 1) for s in plan.scales] == [(0.6, 1), (0.6, 1), (1.2, 1)]
    # tails beta / (L + 1) = 1/40. Level 1: k + 1 >= 0.6 ln(40 / (1 + e^(-5/3))) = 2.11 -> 2;
    # level 2 (exact law of two, p = e^(-5/3)): k = 1 -> e^(-10/3) (0.57387 * 2 + 0.74996) =
    # 0.068 > 1/40, k = 2 -> e^(-5) * 2.47157 = 0.016653 <= 1/40 -> 2; level 3: M = 1.26770^2,
    # k + 1 >= 1.2 ln(40 * 1.60706 / (1 + e^(-1/1.2))) = 4.56 -> 4
    assert plan.shifts == (2.0, 2.0, 4.0)
    assert rel.noisy.tolist() == [5, 8, 12]  # the running sums of the increments 5, 3, 4
    # max(5 - 2, 8 - 2, 12 - 4) = 8 at level index 2
    assert rel.value == 8.0 and rel.chosen == 2
    assert rel.scales.tolist() == list(plan.scales)
    assert rel.shifts.tolist() == list(plan.shifts)
    assert rel.levels == (2, 4, 8)
    lows = q - np.array(plan.half_widths)
    assert rel.lower95 == max(0.0, float(lows.max()))
    assert rel.upper95 == 12 + plan.half_widths[-1]


def test_count_release_adds_the_sampler_noise_exactly():
    rel = release_r2t(np.array([100, 200]), unit_bound=1, max_contribution=4, epsilon=1.0,
                      integer=True, sampler=FixedSampler(7))
    plan = plan_r2t(unit_bound=1, max_contribution=4, epsilon=1.0, integer=True)
    # increments 100 + 7 and 100 + 7: level 2 carries both draws
    assert rel.noisy.tolist() == [107, 214]
    assert rel.value == max(107 - plan.shifts[0], 214 - plan.shifts[1])
    assert rel.lower95 == max(107 - plan.half_widths[0], 214 - plan.half_widths[1])
    assert rel.upper95 == 214 + plan.half_widths[1]
    # per level: each level its own draw
    old = release_r2t(np.array([100, 200]), unit_bound=1, max_contribution=4, epsilon=1.0,
                      integer=True, sampler=FixedSampler(7), increments=False)
    assert old.noisy.tolist() == [107, 207]


def test_release_is_never_below_zero():
    rel = release_r2t(np.zeros(3, dtype=np.int64), unit_bound=1, max_contribution=8,
                      epsilon=1.0, integer=True, sampler=FixedSampler(-1000))
    assert rel.value == 0.0 and rel.lower95 == 0.0
    # the upper bound is never below the lower one
    assert rel.upper95 == 0.0


def test_sum_release_exact_with_zero_noise():
    q = np.array([10.5, 17.5, 27.5])  # c = [0.5, 7, 30], b = 2.5, GS 8
    plan = plan_r2t(unit_bound=2.5, max_contribution=8, epsilon=1000.0, integer=False)
    rel = release_r2t(q, unit_bound=2.5, max_contribution=8, epsilon=1000.0, integer=False,
                      sampler=FixedSampler(0))
    assert rel.noisy.tolist() == q.tolist()  # q on every grid: snapping is exact
    expected = q - np.array(plan.shifts)
    assert rel.value == max(0.0, float(expected.max()))
    assert rel.chosen == int(np.argmax(expected))


def test_sum_release_noise_is_grid_steps_times_the_sampler_noise():
    plan = plan_r2t(unit_bound=2.5, max_contribution=8, epsilon=1.0, integer=False)
    sampler = FixedSampler(3)
    rel = release_r2t(np.array([0.3, 0.3, 0.3]), unit_bound=2.5, max_contribution=8,
                      epsilon=1.0, integer=False, sampler=sampler)
    # increments 0.3, 0, 0: each snapped to its grid plus 3 steps, then summed
    running = 0.0
    for j, g in enumerate(plan.granularities):
        d = 0.3 if j == 0 else 0.0
        running += g * (math.floor(d / g + 0.5) + 3)
        assert rel.noisy[j] == running
        # the sampler was asked for the integer noise's scale, in grid steps
        assert sampler.calls[j] == (plan.scales[j] / g, 1)


def test_secure_count_release_is_integral_and_sum_release_on_the_grids():
    c = np.arange(50) % 7
    q = truncated_sums(c, unit_bound=1, max_contribution=16)
    for _ in range(5):
        rel = release_r2t(q, unit_bound=1, max_contribution=16, epsilon=1.0, integer=True)
        assert float(rel.value).is_integer() and rel.value >= 0
        assert rel.noisy.dtype == np.int64
        assert rel.lower95 <= rel.upper95
    plan = plan_r2t(unit_bound=1.5, max_contribution=16, epsilon=1.0, integer=False)
    qs = truncated_sums(c * 1.5, unit_bound=1.5, max_contribution=16)
    rel = release_r2t(qs, unit_bound=1.5, max_contribution=16, epsilon=1.0, integer=False)
    for j in range(len(plan.levels)):  # a sum of draws on grids no finer than the first
        g = min(plan.granularities[:j + 1])
        assert rel.noisy[j] / g == math.floor(rel.noisy[j] / g)


def test_many_rows_match_single_releases_and_draw_once_per_level():
    q = np.array([[5, 8, 12], [0, 0, 0], [40, 70, 90]])
    sampler = FixedSampler(2)
    many = release_r2t_many(q, unit_bound=1, max_contribution=8, epsilon=1.0, integer=True,
                            sampler=sampler)
    assert [size for _, size in sampler.calls] == [3, 3, 3]
    for i in range(3):
        one = release_r2t(q[i], unit_bound=1, max_contribution=8, epsilon=1.0, integer=True,
                          sampler=FixedSampler(2))
        row = many.row(i)
        assert (row.value, row.chosen, row.lower95, row.upper95) == (
            one.value, one.chosen, one.lower95, one.upper95)
        assert row.noisy.tolist() == one.noisy.tolist()


def test_empty_batch():
    many = release_r2t_many(np.zeros((0, 2)), unit_bound=1, max_contribution=4, epsilon=1.0,
                            integer=True, sampler=FixedSampler())
    assert many.value.shape == (0,) and many.noisy.shape == (0, 2)


def test_randomness_comes_only_from_the_mechanisms_module():
    assert_secure_randomness(r2t, reads_urandom=False)


def test_truncated_sums_with_huge_caps_do_not_overflow():
    q = truncated_sums(np.array([5, 2**40]), unit_bound=3, max_contribution=2**62)
    assert q[0] == 5 + 6 and q[-1] == 5 + 2**40  # caps 2 * 3, ..., held at 2^62
