"""dpsql.units.avg (an AVG's 95% interval under R2T from its SUM's and COUNT's 97.5% intervals)
and its wiring in dpsql.units.record, on constructed releases: exact values, worked by hand.

The engine-level coverage (real DuckDB, the secure sampler) is tests/statistical/
test_units_avg_interval.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from dpsql.analysis.model import Measurement
from dpsql.noise.plan import NoisePlan
from dpsql.release.record import R2T_AVG, ColumnRelease, ColumnSource, Release
from dpsql.units.avg import ratio_interval
from dpsql.units.noise import R2TOutcome
from dpsql.units.record import avg_interval, with_intervals


@pytest.mark.parametrize(("total", "count", "bounds", "expected"), [
    # S >= 0: low S_lo / C_hi, high S_hi / C_lo
    ((100.0, 300.0), (10.0, 20.0), (0.0, 50.0), (5.0, 30.0)),
    # the QA case's shape: a SUM interval [21, 1,991,068] over a COUNT's [1500, 3000] says only
    # that the AVG is above 0.007 (the upper end is the bound 100)
    ((21.0, 1_991_068.0), (1500.0, 3000.0), (0.0, 100.0), (21 / 3000, 100.0)),
    # S_lo < 0: the low end divides by the smallest count (-40 / 4), S_hi > 0 too (60 / 4)
    ((-40.0, 60.0), (4.0, 8.0), (-20.0, 20.0), (-10.0, 15.0)),
    # both ends negative: low -300 / 10, high -100 / 20
    ((-300.0, -100.0), (10.0, 20.0), (-50.0, 0.0), (-30.0, -5.0)),
    # a count's lower end 0: an AVG is over at least one row, so C >= 1 (2 / 10, 30 / 1)
    ((2.0, 30.0), (0.0, 10.0), (0.0, 100.0), (0.2, 30.0)),
    # a fractional lower end rounds up to the next whole count: C >= 3 (30 / 3 = 10)
    ((6.0, 30.0), (2.5, 6.0), (0.0, 100.0), (1.0, 10.0)),
    # clamped by the bounds on both sides
    ((-40.0, 60.0), (4.0, 8.0), (-3.0, 5.0), (-3.0, 5.0)),
    # an exact release: SUM 0 (bounds [0, 0]) gives 0
    ((0.0, 0.0), (3.0, 9.0), (0.0, 0.0), (0.0, 0.0)),
])
def test_ratio_interval_exact(total, count, bounds, expected):
    assert ratio_interval(total, count, bounds) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(("total", "count"), [
    ((10.0, 20.0), (0.0, 0.0)),       # no count >= 1 in the box: the AVG is not defined there
    ((10.0, 20.0), (0.0, 0.5)),
    ((100.0, 200.0), (1.0, 2.0)),     # the ratio's range [50, 200] misses the bounds [0, 10]
    ((float("nan"), 20.0), (1.0, 2.0)),
    ((5.0, float("inf")), (1.0, 2.0)),
    ((20.0, 10.0), (1.0, 2.0)),       # an empty box
])
def test_ratio_interval_falls_back_to_the_bounds(total, count):
    assert ratio_interval(total, count, (0.0, 10.0)) == (0.0, 10.0)


def test_ratio_interval_contains_every_average_in_the_box():
    # brute force over small boxes: every (S, C) with C whole >= 1 in the box and S / C within
    # the bounds (an average of clamped values) lies in the result (up to float rounding of
    # the grid of S values)
    rng = random.Random(17)
    for _ in range(2000):
        s_lo, s_hi = sorted(rng.uniform(-60, 60) for _ in range(2))
        c_lo, c_hi = sorted(rng.uniform(-2, 12) for _ in range(2))
        low, high = sorted(rng.uniform(-8, 8) for _ in range(2))
        lo, hi = ratio_interval((s_lo, s_hi), (c_lo, c_hi), (low, high))
        assert low <= lo <= hi <= high
        for c, k in itertools.product(range(1, 13), range(21)):
            s = s_lo + (s_hi - s_lo) * k / 20
            if c_lo <= c <= c_hi and low <= s / c <= high:
                assert lo - 1e-9 <= s / c <= hi + 1e-9


# --------------------------------------------------------------- the record (dpsql.units.record)


def _plan(index: int, function: str, bounds=None, r2t=True) -> NoisePlan:
    m = Measurement(index, function, None, None, bounds=bounds)  # type: ignore[arg-type]
    return NoisePlan(m, 0.5, 0.0, 1.0, None, 1.0, r2t=() if r2t else None)


def _outcome(value, interval95, for_avg) -> R2TOutcome:
    return R2TOutcome(value, *interval95, for_avg=for_avg)


def _record() -> Release:
    return Release(1.0, 0.0, "r2t", (
        ColumnRelease("a", "r2t", 1.0, 0.0, None, accuracy_note=R2T_AVG),
        ColumnRelease("n", "r2t", 0.5, 0.0, None)), "f")


COLUMNS = (ColumnSource("a", (0, 1), False, "AVG"), ColumnSource("n", (2,), True, "COUNT"))


def test_with_intervals_sets_the_avgs_interval_from_the_97_5_intervals():
    # columns: AVG(x) AS a (SUM 0 over [0, 10], COUNT 1), COUNT(*) AS n (2); the AVG reads
    # for_avg, never the 95% intervals (both would hold together with probability 90% only)
    plans = [_plan(0, "SUM", (0.0, 10.0)), _plan(1, "COUNT"), _plan(2, "COUNT")]
    outcomes = [_outcome(250.0, (200.0, 400.0), (180.0, 420.0)),
                _outcome(40.0, (30.0, 60.0), (28.0, 63.0)),
                _outcome(50.0, (45.0, 55.0), (44.0, 56.0))]
    a, n = with_intervals(_record(), COLUMNS, outcomes, plans).columns
    # [180 / 63, 420 / 28] = [2.857.., 15] within the bounds [0, 10]
    assert a.interval_95 == (180 / 63, 10.0) and a.accuracy_note == R2T_AVG
    assert n.interval_95 == (45.0, 55.0)  # a bare COUNT: its own 95% interval
    # the measurements' order in the column does not matter (COUNT first)
    swapped = (dataclasses.replace(COLUMNS[0], measurements=(1, 0)), COLUMNS[1])
    assert with_intervals(_record(), swapped, outcomes, plans).columns[0].interval_95 == \
        (180 / 63, 10.0)


def test_an_avg_whose_sum_is_released_exactly_is_zero():
    # AVG over bounds [0, 0]: the SUM has no R2T part (released exactly as 0, outcome None)
    plans = [_plan(0, "SUM", (0.0, 0.0), r2t=False), _plan(1, "COUNT"), _plan(2, "COUNT")]
    outcomes = [None, _outcome(40.0, (30.0, 60.0), (28.0, 63.0)),
                _outcome(50.0, (45.0, 55.0), (44.0, 56.0))]
    assert avg_interval(COLUMNS[0], outcomes, plans) == (0.0, 0.0)


def test_no_interval_unless_one_sum_and_one_count_under_r2t():
    outcome = _outcome(1.0, (0.0, 2.0), (0.0, 3.0))
    two_counts = [_plan(0, "COUNT"), _plan(1, "COUNT")]
    assert avg_interval(COLUMNS[0], [outcome, outcome], two_counts) is None
    not_r2t = [_plan(0, "SUM", (0.0, 1.0)), _plan(1, "COUNT", r2t=False)]
    assert avg_interval(COLUMNS[0], [outcome, outcome], not_r2t) is None
