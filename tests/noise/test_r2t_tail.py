"""dpsql.noise.r2t_tail: each lemma and theorem against the exact law of the noise (numerical
convolution of discrete Laplace pmfs at small scales), the step counts' minimality, and the
plans' shifts and half-widths against the exact law of each level's summed noise (a shift or
half-width that is too small fails here; so does one that is needlessly large).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpsql.noise.r2t import CONFIDENCE, plan_r2t
from dpsql.noise.r2t_tail import log_dlap_mgf, pair_tail_log, tail_steps


def _support(a: float) -> int:
    """Steps kept each side: the mass beyond is below e^-700 (far below every tail checked)."""
    return math.ceil(700 / a)


def _pmf(a: float) -> np.ndarray:
    """Discrete Laplace pmf with p = e^(-a) on -K..K, K = _support(a)."""
    k = np.arange(-_support(a), _support(a) + 1)
    p = math.exp(-a)
    return (1 - p) / (1 + p) * np.exp(-a * np.abs(k))


def _sum_law(scales: list[float], grids: list[float], step: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """The exact law of sum_i g_i Y_i on the lattice ``step`` Z (every g_i a multiple of it):
    (support values, pmf)."""
    law = np.array([1.0])
    for s, g in zip(scales, grids, strict=True):
        m = round(g / step)
        assert m * step == g
        spread = np.zeros(m * 2 * _support(g / s) + 1)
        spread[::m] = _pmf(g / s)
        law = np.convolve(law, spread)
    half = (len(law) - 1) // 2
    return np.arange(-half, half + 1) * step, law


def _upper_tail(values: np.ndarray, law: np.ndarray, t: float) -> float:
    return float(law[values > t].sum())


@pytest.mark.parametrize("a", [0.05, 0.7, 1 / 3, 2.0])
def test_lemma_1_integer_and_real_tails(a):
    p = math.exp(-a)
    values, law = _sum_law([1 / a], [1.0], 1.0)
    for m in range(-60, 61):
        exact = _upper_tail(values, law, m)
        assert exact <= p ** (m + 1) / (1 + p) * (1 + 1e-12)
        if m >= -1:  # equality for m >= -1
            assert exact == pytest.approx(p ** (m + 1) / (1 + p), rel=1e-9)
    for u in np.linspace(-20.5, 20.5, 165):
        assert _upper_tail(values, law, u) <= math.exp(-a * u) / (1 + p) * (1 + 1e-12)
    # not 1/2: P(Y >= 0) = 1 / (1 + p) > 1/2
    assert _upper_tail(values, law, -0.5) > 0.5


@pytest.mark.parametrize(("a", "c"), [(0.5, 0.25), (1 / 6, 1 / 12), (2.0, 1.9), (0.3, -0.2)])
def test_lemma_2_mgf(a, c):
    k = np.arange(-_support(a), _support(a) + 1)
    log_terms = np.log(_pmf(a)) + c * k  # the mass kept reaches e^-700 (a - |c|) / a
    top = float(log_terms.max())
    direct = top + math.log(float(np.exp(log_terms - top).sum()))
    assert log_dlap_mgf(a, c) == pytest.approx(direct, rel=1e-9, abs=1e-12)
    with pytest.raises(ValueError):
        log_dlap_mgf(a, a)


def test_lemma_2_is_stable_at_huge_scales():
    # scale 2^30 steps at a quarter of the rate: the continuous 1 / (1 - 1/16)
    a = 2.0**-30
    assert math.exp(log_dlap_mgf(a, a / 4)) == pytest.approx(1 / (1 - 1 / 16), rel=1e-6)


@pytest.mark.parametrize("a", [0.25, 0.5, 1.0, 5 / 3])
def test_theorem_2_is_the_exact_law_of_two(a):
    values, law = _sum_law([1 / a, 1 / a], [1.0, 1.0], 1.0)
    for k in range(0, 120):
        exact = _upper_tail(values, law, k)
        if exact < 1e-280:
            break
        assert math.exp(pair_tail_log(a, k)) == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize(("scales", "grids"), [
    ([1.5, 3.0, 7.0], [1.0, 1.0, 1.0]),       # counts, geometric
    ([1.0, 1.0, 2.0, 4.0], [1.0, 1.0, 1.0, 1.0]),  # base 2: a tie below the top is fine
    ([1.2, 3.6], [0.5, 1.0]),                 # sums: the lower draw on a finer grid
    ([4.0, 4.5], [1.0, 1.0]),                 # nearly equal: M large, still a bound
])
def test_theorem_1_bounds_the_exact_tail(scales, grids):
    j = len(scales) - 1
    step = min(grids)
    values, law = _sum_law(scales, grids, step)
    a_j = grids[j] / scales[j]
    p_j = math.exp(-a_j)
    log_m = sum(log_dlap_mgf(grids[i] / scales[i], grids[i] / scales[j]) for i in range(j))
    same_grid = all(g == grids[j] for g in grids)
    for t in np.arange(-10.0, 80.0, step):
        exact = _upper_tail(values, law, t)
        bound = math.exp(-t / scales[j] + log_m) / (1 + p_j)
        assert exact <= bound * (1 + 1e-9), (t, exact, bound)
        if same_grid and float(t / grids[j]).is_integer():  # the integer form: one step more
            k = round(t / grids[j])
            assert exact <= p_j ** (k + 1) * math.exp(log_m) / (1 + p_j) * (1 + 1e-9)
    # and it is not loose far out: within the factor M of the top draw's own tail
    t = 60.0
    assert _upper_tail(values, law, t) >= 0.2 * math.exp(-t / scales[j]) / (1 + p_j)


@pytest.mark.parametrize(("scales", "grids", "integer"), [
    ([1.5, 3.0, 7.0], [1.0, 1.0, 1.0], True),
    ([2.0, 2.0, 4.0], [1.0, 1.0, 1.0], True),
    ([1.2, 1.2, 3.6], [0.5, 0.5, 1.0], False),
])
@pytest.mark.parametrize("target", [0.01, 1e-4, 0.3])
def test_tail_steps_is_a_bound_and_the_smallest(scales, grids, integer, target):
    step = min(grids)
    for j in range(len(scales)):
        k = tail_steps(scales, grids, j, target, integer=integer)
        assert k is not None and k >= 0
        values, law = _sum_law(scales[:j + 1], grids[:j + 1], step)
        assert _upper_tail(values, law, k * grids[j]) <= target
        if k > 0:  # one step fewer and the proven bound no longer holds
            assert tail_steps(scales, grids, j, target * 1.0001, integer=integer) in (k, k - 1)
            a_j = grids[j] / scales[j]
            if j == 1 and scales[0] == scales[1]:
                bound = pair_tail_log(a_j, k - 1)
            else:
                log_m = sum(log_dlap_mgf(grids[i] / scales[i], grids[i] / scales[j])
                            for i in range(j))
                extra = 1 if integer or all(g == grids[j] for g in grids[:j]) else 0
                bound = -(k - 1 + extra) * a_j + log_m - math.log1p(math.exp(-a_j))
            assert bound > math.log(target)


def test_no_bound_when_a_lower_draw_is_as_noisy():
    assert tail_steps([3.0, 2.0], [1.0, 1.0], 1, 0.01, integer=True) is None
    assert tail_steps([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], 2, 0.01, integer=True) is None
    assert tail_steps([1.0, 2.0, 2.0], [1.0, 1.0, 1.0], 2, 0.01, integer=True) is None
    # equal scales on different grids are not Theorem 2's case
    assert tail_steps([2.0, 2.0], [0.5, 1.0], 1, 0.01, integer=False) is None
    # the first level alone always has one
    assert tail_steps([3.0, 2.0], [1.0, 1.0], 0, 0.01, integer=True) is not None


@pytest.mark.parametrize(("gs", "epsilon", "base"), [(8, 5.0, 2), (4, 2.0, 2), (27, 9.0, 3),
                                                     (30, 12.0, 5.5), (9, 6.0, 2.2)])
def test_count_plans_shifts_and_half_widths_against_the_exact_law(gs, epsilon, base):
    """End to end: each level's summed noise, exactly, against the plan's shift (one-sided,
    beta / (L + 1)) and half-width (two-sided, 0.05 / L); a halved shift or half-width fails."""
    beta = 0.1
    plan = plan_r2t(unit_bound=1, max_contribution=gs, epsilon=epsilon, beta=beta,
                    integer=True, base=base)
    assert plan.increments
    n = len(plan.levels)
    for j in range(n):
        values, law = _sum_law(list(plan.scales[:j + 1]), [1.0] * (j + 1), 1.0)
        shift, width = plan.shifts[j], plan.half_widths[j]
        assert _upper_tail(values, law, shift) <= beta / (n + 1)
        two_sided = _upper_tail(values, law, width) + float(law[values < -width].sum())
        assert two_sided <= (1 - CONFIDENCE) / n
        assert _upper_tail(values, law, shift // 2) > beta / (n + 1)
        assert 2 * _upper_tail(values, law, width // 2) > (1 - CONFIDENCE) / n


@pytest.mark.parametrize(("gs", "b", "epsilon"), [(8, 1.0, 5.0), (4, 0.75, 3.0)])
def test_sum_plans_shifts_against_the_exact_law(gs, b, epsilon):
    """Sums: each level's noise on its grids plus the snapping's worst case (half a step per
    draw, all the same way) stays within the shift except with probability beta / (L + 1)."""
    beta = 0.1
    plan = plan_r2t(unit_bound=b, max_contribution=gs, epsilon=epsilon, beta=beta,
                    integer=False)
    assert plan.increments
    n = len(plan.levels)
    grids = list(plan.granularities)
    # the exact law at 2^20 steps per scale is too wide to convolve: scale the whole plan
    # down to 4 steps per scale (the bound's argument is the same in steps)
    shrink = 2.0**18
    coarse = [g * shrink for g in grids]
    for j in range(n):
        values, law = _sum_law(list(plan.scales[:j + 1]), coarse[:j + 1], min(coarse))
        k = tail_steps(list(plan.scales), coarse, j, beta / (n + 1), integer=False)
        assert k is not None
        assert _upper_tail(values, law, k * coarse[j]) <= beta / (n + 1)
    # the plan's shifts are the fine-grid counterparts: close to the coarse ones
    for j in range(n):
        k = tail_steps(list(plan.scales), grids, j, beta / (n + 1), integer=False)
        assert k is not None
        rounding = sum(grids[:j + 1]) / 2
        assert plan.shifts[j] == grids[j] * k + rounding


def test_plans_gain_over_per_level_at_r2t_settings():
    # R2T's benchmark grid (base 5.5, GS 837,339, epsilon 0.8): every level's shift from the
    # second on is about 0.82 of the per-level one; base 2 about 0.54
    for base, ratio in ((5.5, 0.83), (2, 0.55)):
        new = plan_r2t(unit_bound=1, max_contribution=837_339, epsilon=0.8, integer=True,
                       base=base)
        old = plan_r2t(unit_bound=1, max_contribution=837_339, epsilon=0.8, integer=True,
                       base=base, increments=False)
        for x, y in itertools.islice(zip(new.shifts, old.shifts, strict=True), 3, None):
            assert x <= ratio * y
