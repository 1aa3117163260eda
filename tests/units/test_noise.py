"""dpsql.units.noise.release_r2t_measurements: how a measurement's parts compose into its
released value, its 95% interval, and the 97.5% interval an AVG reads (``for_avg``), with the
rows of no unit added after the noise. Zero noise (FixedSampler), so every number is the
levels' arithmetic; the widths themselves are tests/noise/test_r2t_interval_at.py's."""

from __future__ import annotations

import math

import numpy as np

from dpsql.analysis.model import Measurement
from dpsql.noise import r2t
from dpsql.noise.plan import NoisePlan
from dpsql.units.analysis import R2TPart
from dpsql.units.noise import AVG_MEASUREMENT_CONFIDENCE, BETA, PartPlan, release_r2t_measurements
from tests.noise.test_r2t import FixedSampler


def _part_plan(index: int, sign: int, integer: bool, gs: int, eps: float) -> PartPlan:
    part = R2TPart(index, sign, 1.0, integer)
    scales = r2t.r2t_scales(unit_bound=1.0, max_contribution=gs, epsilon=eps, integer=integer,
                            beta=BETA)
    return PartPlan(part, eps, tuple(float(s) for s in scales), 1.0, gs, integer=integer)


def _plan(index: int, function: str, parts: tuple[PartPlan, ...]) -> NoisePlan:
    m = Measurement(index, function, None, None,  # type: ignore[arg-type]
                    bounds=None if function == "COUNT" else (-5.0, 5.0))
    return NoisePlan(m, sum(p.epsilon for p in parts), 0.0, 1.0, None, 1.0, r2t=parts)


def _interval(q, gs, eps, integer, confidence):
    plan = r2t.plan_r2t(unit_bound=1.0, max_contribution=gs, epsilon=eps, beta=BETA,
                        integer=integer)
    return r2t.interval_at(np.asarray(q), plan, confidence)


def test_a_signed_sums_parts_each_take_half_of_the_intervals_share():
    # SUM (index 0) = non-negative part (levels in value units, GS 64) minus non-positive part
    # (GS 16); COUNT (index 1), GS 8. Rows of no unit: 7 for the positive part, 3 for the
    # negative part, 2 rows for the count, added after the noise.
    plus, minus = _part_plan(0, 1, False, 64, 0.25), _part_plan(0, -1, False, 16, 0.25)
    count = _part_plan(1, 1, True, 8, 0.5)
    plans = [_plan(0, "SUM", (plus, minus)), _plan(1, "COUNT", (count,))]
    q_plus = np.array([10.0, 20.0, 30.0, 40.0, 45.0, 45.0])  # 6 levels: 2 .. 64
    q_minus = np.array([4.0, 6.0, 6.0, 6.0])  # 4 levels: 2 .. 16
    q_count = np.array([5, 8, 12])
    total, n = release_r2t_measurements([q_plus, q_minus, q_count], plans, FixedSampler(0),
                                        base=2.0, no_unit=[7.0, 3.0, 2.0])
    assert total is not None and n is not None
    # each SUM part at 1 - 0.025 / 2 = 98.75%, the COUNT's one part at 97.5%
    share = 1.0 - (1.0 - AVG_MEASUREMENT_CONFIDENCE) / 2
    p_lo, p_hi = _interval(q_plus, 64, 0.25, False, share)
    m_lo, m_hi = _interval(q_minus, 16, 0.25, False, share)
    assert total.for_avg == ((p_lo + 7.0) - (m_hi + 3.0), (p_hi + 7.0) - (m_lo + 3.0))
    c_lo, c_hi = _interval(q_count, 8, 0.5, True, AVG_MEASUREMENT_CONFIDENCE)
    assert n.for_avg == (c_lo + 2.0, c_hi + 2.0)
    # the 97.5% intervals contain the 95% ones (wider widths on the same noisy levels)
    assert total.for_avg[0] <= total.lower95 and total.upper95 <= total.for_avg[1]
    assert n.for_avg[0] <= n.lower95 and n.upper95 <= n.for_avg[1]
    # the published 95% interval of the signed SUM: each part at 97.5% (both hold together
    # at 95%), summed -- strictly wider than the sum of the parts' own 95% intervals, which
    # held together only at 90%
    p95 = _interval(q_plus, 64, 0.25, False, 0.975)
    m95 = _interval(q_minus, 16, 0.25, False, 0.975)
    assert (total.lower95, total.upper95) == (p95[0] + 7.0 - (m95[1] + 3.0),
                                              p95[1] + 7.0 - (m95[0] + 3.0))
    p90 = _interval(q_plus, 64, 0.25, False, 0.95)
    m90 = _interval(q_minus, 16, 0.25, False, 0.95)
    assert total.upper95 - total.lower95 > (p90[1] - m90[0]) - (p90[0] - m90[1])
    # the COUNT's one part: its own 95% interval
    c95 = _interval(q_count, 8, 0.5, True, 0.95)
    assert (n.lower95, n.upper95) == (c95[0] + 2.0, c95[1] + 2.0)


def test_a_count_through_the_sums_noise_rounds_its_avg_interval_outwards():
    # a COUNT released through the sums' noise (integer=False: fine levels not whole rows, or a
    # scale beyond the discrete sampler's): both intervals are whole rows, rounded outwards
    count = _part_plan(0, 1, False, 30, 1.0)
    (n,) = release_r2t_measurements([np.array([3.0, 7.5, 9.25, 9.25, 9.25])],
                                    [_plan(0, "COUNT", (count,))], FixedSampler(0), base=2.0)
    assert n is not None
    raw = _interval([3.0, 7.5, 9.25, 9.25, 9.25], 30, 1.0, False, AVG_MEASUREMENT_CONFIDENCE)
    assert n.for_avg == (math.floor(raw[0]), math.ceil(raw[1]))
    assert all(float(x).is_integer() for x in (*n.for_avg, n.lower95, n.upper95))


def test_no_part_no_outcome():
    m = Measurement(0, "SUM", None, None, bounds=(0.0, 0.0))  # type: ignore[arg-type]
    assert release_r2t_measurements([], [NoisePlan(m, 0.0, 0.0, 0.0, None, 0.0)]) == [None]
