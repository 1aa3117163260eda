"""dpsql.noise.r2t.interval_at and r2t_plans.half_widths_at: an R2T release's interval read at
another confidence (what an AVG under a unit needs: each of its two releases at 97.5%).

Exact values are recomputed by hand in the comments (as tests/noise/test_r2t.py), so a width
at the wrong tail share (e.g. 0.05 / L kept at 97.5%) fails here.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpsql.noise.r2t import (
    CONFIDENCE,
    half_widths_at,
    interval_at,
    plan_r2t,
    release_r2t,
)
from tests.noise.test_r2t import FixedSampler


@pytest.mark.parametrize(("gs", "eps", "integer", "increments", "base"), [
    (gs, eps, integer, inc, base)
    for gs, eps, integer, inc, base in itertools.product(
        (1, 3, 8, 64, 2**16), (0.1, 1.0, 7.0), (True, False), (True, False), (2.0, 5.5))])
def test_at_the_published_confidence_the_widths_are_the_plans(gs, eps, integer, increments,
                                                              base):
    plan = plan_r2t(unit_bound=1, max_contribution=gs, epsilon=eps, integer=integer,
                    increments=increments, base=base)
    assert half_widths_at(plan, CONFIDENCE) == plan.half_widths
    wider = half_widths_at(plan, 0.975)
    assert all(w >= h for w, h in zip(wider, plan.half_widths, strict=True))


def test_count_widths_per_level_at_97_5_exact():
    # GS 8, epsilon 1, per level: scales 6, 12, 24 (test_r2t's values); smallest k with
    # 2 p^(k+1) / (1 + p) <= 0.025 / 3, p = e^(-1/scale):
    #   scale 6: k + 1 >= 6 ln(120 * 2 / 1.846482 / 2) = 6 ln(129.98) = 29.20 -> k = 29
    #   scale 12: k + 1 >= 12 ln(240 / 1.920044) = 57.94 -> 57
    #   scale 24: k + 1 >= 24 ln(240 / 1.959189) = 115.38 -> 115
    plan = plan_r2t(unit_bound=1, max_contribution=8, epsilon=1.0, integer=True,
                    increments=False)
    assert half_widths_at(plan, 0.975) == (29.0, 57.0, 115.0)


def test_count_widths_increments_at_97_5_exact():
    # GS 8, epsilon 1, increments of scales 6, 6, 12 (test_r2t), one-sided share 0.0125 / 3 =
    # 1/240. Level 1 (one draw): k + 1 >= 6 ln(240 / 1.846482) = 29.20 -> 29 (= per level).
    # Level 2 (exact law of two, p = e^(-1/6)): P(Y1 + Y2 > k) = p^(k+1) [0.045026 (k+1) +
    #   0.520929]: k = 36 -> 0.004589 > 1/240 = 0.0041667; k = 37 -> 0.003964 -> 37.
    # Level 3: M = 1.77572, p = e^(-1/12): k + 1 >= 12 ln(240 * 1.77572 / 1.920044) = 64.83 -> 64.
    plan = plan_r2t(unit_bound=1, max_contribution=8, epsilon=1.0, integer=True)
    assert plan.increments
    assert half_widths_at(plan, 0.975) == (29.0, 37.0, 64.0)


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.5, 1.5, math.nan])
def test_confidence_must_lie_strictly_between_0_and_1(confidence):
    plan = plan_r2t(unit_bound=1, max_contribution=8, epsilon=1.0, integer=True)
    with pytest.raises(ValueError):
        half_widths_at(plan, confidence)


def test_interval_at_reads_the_same_noisy_levels():
    # zero noise: noisy = Q = (5, 8, 12); lower = max(0, max_j (Q_j - w_j)), upper = Q_L + w_L
    q = np.array([5, 8, 12])
    rel = release_r2t(q, unit_bound=1, max_contribution=8, epsilon=1.0, integer=True,
                      sampler=FixedSampler(0))
    plan = plan_r2t(unit_bound=1, max_contribution=8, epsilon=1.0, integer=True)
    assert interval_at(rel.noisy, plan, CONFIDENCE) == (rel.lower95, rel.upper95)
    # at 97.5%: widths (29, 37, 64): lower max(0, 5 - 29, 8 - 37, 12 - 64) = 0, upper 12 + 64
    assert interval_at(rel.noisy, plan, 0.975) == (0.0, 76.0)
    # large levels: the lower bound is the best level's
    big = np.array([1000, 1500, 1600])
    assert interval_at(big, plan, 0.975) == (1600.0 - 64.0, 1664.0)
    with pytest.raises(ValueError):
        interval_at(np.array([1, 2]), plan, 0.975)


def test_sum_widths_keep_the_snapping_allowance():
    plan = plan_r2t(unit_bound=1, max_contribution=300, epsilon=1.0, integer=False, base=5.5)
    wide = half_widths_at(plan, 0.975)
    grids = plan.granularities
    # every width is whole grid steps plus the snapping of every draw so far (increments) or
    # half a step (per level)
    for j, w in enumerate(wide):
        rounding = sum(grids[: j + 1]) / 2 if plan.increments else grids[j] / 2
        steps = (w - rounding) / grids[j]
        assert steps == pytest.approx(round(steps)) and steps >= 0
