"""Partition selection under a privacy unit at an epsilon past exp's float range (issue #17,
third QA): ``e^-eps`` underflows to 0 and ``e^eps`` overflows near eps = 709, and the planners
crashed there ("unexpected ValueError / OverflowError ... (a dpsql bug)", nothing charged).
The analyst may ask for any epsilon up to the ledger's cap, so these must plan as at a large
finite epsilon: every group of one unit kept for sure."""

from __future__ import annotations

import math

import pytest

from dpsql.noise import optimal_partition, partition, unit_partition


@pytest.mark.parametrize("epsilon", [700.0, 745.0, 800.0, 5000.0, 1e6])
def test_the_thresholding_plans_at_any_epsilon(epsilon):
    assert unit_partition.threshold(1, epsilon, 1e-6) == 2
    assert unit_partition.threshold(3, epsilon, 1e-6) == 2
    # P(Z >= k) for a scale far below one step: 1 at k <= 0, 0 beyond
    scale = 1.0 / epsilon
    assert partition.tail(0, scale) == 1.0
    assert partition.tail(-5, scale) == 1.0
    assert partition.tail(1, scale) < 1e-300


def test_the_tail_is_unchanged_where_it_worked():
    for scale in (0.5, 1.0, 7.0, 100.0):
        p = math.exp(-1.0 / scale)
        for k in (-3, 0, 1, 4):
            want = p**k / (1 + p) if k >= 1 else 1 - p ** (1 - k) / (1 + p)
            assert partition.tail(k, scale) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("epsilon", [709.0, 710.0, 800.0, 1e6])
def test_the_optimal_table_plans_at_any_epsilon(epsilon):
    # as at any epsilon with e^eps >= 2^53: one unit keeps its group with probability 1
    assert optimal_partition.keep_table(epsilon, 1e-6) == optimal_partition.keep_table(50.0, 1e-6)
    assert optimal_partition.keep_table(epsilon, 1e-6)[-1] == 1.0
