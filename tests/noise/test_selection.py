"""dpsql.noise.selection: the exponential mechanism, Report Noisy Max and grid quantiles.

Exact tests check the law (seed 002's worked example, corrected) and the privacy ratio on
neighbouring utilities, including a case where the bound is approached, so a mechanism calibrated
with ``epsilon / sensitivity`` instead of ``epsilon / (2 * sensitivity)`` fails. Statistical
tests compare the secure sampler with the exact law by a chi-square test at p = 1e-6: the
false-failure rate of each such test is 1e-6 per run.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dpsql.noise import selection
from dpsql.noise.selection import (
    exponential_mechanism,
    exponential_probabilities,
    grid_quantile,
    quantile_utilities,
    report_noisy_max,
    secure_uniforms,
)
from tests.noise.randomness import assert_secure_randomness

FALSE_FAILURE = 1e-6


def test_seed_002_worked_example_corrected():
    """Seed 002: epsilon = 0.1, utilities (50, 20, 30), sensitivity 1. The seed's table gives
    0.628 / 0.124 / 0.231; the middle one is a typo: exp(0.05 u) normalised is 0.6285 / 0.1403 /
    0.2312 (the seed truncates to three digits)."""
    p = exponential_probabilities(np.array([50.0, 20.0, 30.0]), 0.1, 1.0)
    assert p.tolist() == pytest.approx([0.6285, 0.1403, 0.2312], abs=1e-4)
    assert p[1] != pytest.approx(0.124, abs=1e-3)
    assert p.sum() == pytest.approx(1.0)


def test_monotone_utilities_use_epsilon_over_sensitivity():
    p = exponential_probabilities(np.array([1.0, 0.0]), math.log(3.0), 1.0, monotone=True)
    assert p.tolist() == pytest.approx([0.75, 0.25])


def _worst_ratio(u: np.ndarray, v: np.ndarray, epsilon: float, sensitivity: float) -> float:
    p = exponential_probabilities(u, epsilon, sensitivity)
    q = exponential_probabilities(v, epsilon, sensitivity)
    return float(max(np.max(p / q), np.max(q / p)))


def test_privacy_ratio_on_every_small_neighbour():
    """Every utility vector on {0..3}^3 against every neighbour whose utilities move by at most
    the sensitivity: no probability moves by more than e^epsilon."""
    epsilon, sensitivity = 0.7, 1.0
    for u in itertools.product(range(4), repeat=3):
        base = np.array(u, dtype=float)
        for shift in itertools.product((-1.0, 0.0, 1.0), repeat=3):
            ratio = _worst_ratio(base, base + np.array(shift), epsilon, sensitivity)
            assert ratio <= math.exp(epsilon) * (1 + 1e-12)


def test_privacy_bound_is_approached():
    """One candidate up by the sensitivity, 9,999 others down: the ratio tends to e^epsilon.
    A mechanism using epsilon / sensitivity (no factor 2) would reach e^(2 epsilon)."""
    epsilon, n = 1.0, 10_000
    u = np.zeros(n)
    v = np.full(n, -1.0)
    v[0] = 1.0
    ratio = _worst_ratio(u, v, epsilon, 1.0)
    assert math.exp(0.99 * epsilon) < ratio <= math.exp(epsilon)


def test_sampler_matches_the_exact_law():
    """Chi-square test of 200,000 secure draws against the seed's example law (p >= 1e-6)."""
    utilities = np.array([50.0, 20.0, 30.0])
    draws = exponential_mechanism(utilities, 0.1, 1.0, draws=200_000)
    observed = np.bincount(draws, minlength=3)
    expected = exponential_probabilities(utilities, 0.1, 1.0) * draws.size
    assert stats.chisquare(observed, expected).pvalue > FALSE_FAILURE


def test_secure_uniforms_are_on_the_53_bit_grid():
    u = secure_uniforms(10_000)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert np.all(u * 2.0**53 == np.floor(u * 2.0**53))
    assert stats.kstest(u, "uniform").pvalue > FALSE_FAILURE


def test_input_validation():
    with pytest.raises(ValueError):
        exponential_probabilities(np.array([]), 1.0, 1.0)
    with pytest.raises(ValueError):
        exponential_probabilities(np.array([1.0, math.inf]), 1.0, 1.0)
    with pytest.raises(ValueError):
        exponential_mechanism(np.array([1.0]), 0.0, 1.0)
    with pytest.raises(ValueError):
        exponential_mechanism(np.array([1.0]), 1.0, -1.0)
    with pytest.raises(TypeError):
        exponential_mechanism(np.array([1.0]), True, 1.0)
    with pytest.raises(ValueError):
        report_noisy_max(np.array([1.0]), 1.0, 1.0, k=2)
    with pytest.raises(ValueError):
        grid_quantile(np.array([1, 2]), 2, 1.5, 1.0)


def _peeling_law(counts: np.ndarray, epsilon: float, sensitivity: float) -> dict:
    """The exact law of report_noisy_max(k=2): P(first = i, second = j)."""
    law = {}
    first = exponential_probabilities(counts, epsilon / 2, sensitivity)
    for i in range(counts.size):
        rest = [j for j in range(counts.size) if j != i]
        second = exponential_probabilities(counts[rest], epsilon / 2, sensitivity)
        for pos, j in enumerate(rest):
            law[(i, j)] = first[i] * second[pos]
    return law


def test_top_two_by_peeling_is_epsilon_dp_on_histogram_neighbours():
    """Change one row: one bin loses 1 and another gains 1 (dpsql's neighbours); the exact law of
    the ordered top-2 moves by at most e^epsilon on every such neighbour of small histograms."""
    epsilon = 0.8
    for counts in itertools.product(range(3), repeat=3):
        base = np.array(counts, dtype=float)
        for src, dst in itertools.permutations(range(3), 2):
            if base[src] == 0:
                continue
            moved = base.copy()
            moved[src] -= 1
            moved[dst] += 1
            p, q = _peeling_law(base, epsilon, 1.0), _peeling_law(moved, epsilon, 1.0)
            assert max(max(p[e] / q[e], q[e] / p[e]) for e in p) <= math.exp(epsilon) * (1 + 1e-12)


def test_report_noisy_max_finds_a_clear_winner_and_distinct_indices():
    counts = np.array([5.0, 10_000.0, 9_000.0, 3.0])
    top = report_noisy_max(counts, 1.0, 1.0, k=2)
    assert top.tolist() == [1, 2]  # a wrong order has probability below e^-250
    picks = report_noisy_max(np.zeros(6), 1.0, 1.0, k=6)
    assert sorted(picks.tolist()) == list(range(6))


def test_grid_quantile_utility_moves_by_at_most_one_per_changed_row():
    """Every dataset of 4 values on a 4-point grid and every change of one value: the quantile
    utilities move by at most 1 (the sensitivity grid_quantile's contract states), and by
    exactly 1 somewhere (the bound is attained)."""
    grid = np.arange(4)
    worst = 0.0
    for values in itertools.product(range(4), repeat=4):
        data = np.array(values)
        below = (data[:, None] <= grid).sum(axis=0)
        for pos, new in itertools.product(range(4), range(4)):
            changed = data.copy()
            changed[pos] = new
            changed_below = (changed[:, None] <= grid).sum(axis=0)
            for q in (0.0, 0.3, 0.5, 1.0):
                u = quantile_utilities(below, 4, q)
                v = quantile_utilities(changed_below, 4, q)
                worst = max(worst, float(np.max(np.abs(u - v))))
    assert worst == 1.0


def test_grid_quantile_finds_the_median_at_large_epsilon():
    data = np.repeat(np.arange(101), 10)  # 1,010 values, median 50
    grid = np.arange(101)
    at_or_below = np.array([(data <= g).sum() for g in grid])
    picks = [grid_quantile(at_or_below, data.size, 0.5, 5.0) for _ in range(50)]
    assert all(49 <= p <= 51 for p in picks)


def test_randomness_comes_only_from_the_secure_samplers():
    assert_secure_randomness(selection, reads_urandom=True)
