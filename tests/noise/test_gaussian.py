"""dpsql.noise.gaussian: calibrations, exact discrete accounting, the secure discrete sampler.

The accountants are checked against brute-force deltas computed from the definition over the
whole (truncated) support of small discrete Gaussians, so a bound that is too small fails.
Statistical tests use p = 1e-6 thresholds: each has a false-failure rate of 1e-6 per run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpsql.noise import gaussian
from dpsql.noise.gaussian import (
    _continuous_delta,
    analytic_sigma,
    certified_delta,
    classical_sigma,
    discrete_delta,
    discrete_gaussian,
    discrete_sigma,
    gaussian_half_width,
    zcdp_delta,
)
from tests.noise.randomness import assert_secure_randomness

FALSE_FAILURE = 1e-6


def _pmf(sigma: float, support: np.ndarray) -> np.ndarray:
    """N_Z(0, sigma^2) on ``support`` by brute force (normaliser over +-60 sigma)."""
    wide = np.arange(-int(60 * sigma) - 5, int(60 * sigma) + 6, dtype=float)
    z = np.exp(-wide * wide / (2 * sigma * sigma)).sum()
    return np.exp(-support * support / (2 * sigma * sigma)) / z


def _brute_delta(sigma: float, shifts: tuple[int, ...], epsilon: float) -> float:
    """sup over events of P[M(x) in E] - e^eps P[M(x') in E] for N_Z noise, by definition."""
    span = int(40 * sigma) + 10
    grid = np.arange(-span, span + 1, dtype=float)
    p = _pmf(sigma, grid)
    joint_p, joint_q = np.ones(1), np.ones(1)
    for shift in shifts:
        joint_p = np.outer(joint_p, p).ravel()
        joint_q = np.outer(joint_q, _pmf(sigma, grid - shift)).ravel()
    return float(np.maximum(joint_p - math.exp(epsilon) * joint_q, 0.0).sum())


def test_classical_sigma_is_the_seeds_formula():
    expected = 2.0 * math.sqrt(2 * math.log(1.25e5)) / 0.5
    assert classical_sigma(2.0, 0.5, 1e-5) == pytest.approx(expected)
    with pytest.raises(ValueError, match="analytic"):
        classical_sigma(1.0, 1.0, 1e-5)


@pytest.mark.parametrize(("sensitivity", "epsilon", "delta"),
                         [(1.0, 1.0, 1e-5), (1.0, 0.1, 1e-8), (3.5, 2.0, 1e-10)])
def test_analytic_sigma_is_the_smallest_that_reaches_delta(sensitivity, epsilon, delta):
    sigma = analytic_sigma(sensitivity, epsilon, delta)
    assert _continuous_delta(sigma, sensitivity, epsilon) <= delta
    assert _continuous_delta(sigma * (1 - 1e-6), sensitivity, epsilon) > delta
    if epsilon < 1:
        assert sigma < classical_sigma(sensitivity, epsilon, delta)


def test_analytic_sigma_known_value():
    # Balle and Wang (2018): epsilon = 1, delta = 1e-5, sensitivity 1 gives sigma ~ 3.73
    assert analytic_sigma(1.0, 1.0, 1e-5) == pytest.approx(3.7306, abs=1e-3)


@pytest.mark.parametrize("sigma", [0.6, 1.3, 4.0, 9.5])
@pytest.mark.parametrize("sensitivity", [1, 2, 3])
@pytest.mark.parametrize("epsilon", [0.0, 0.3, 1.0, 2.5])
def test_discrete_delta_equals_the_definition(sigma, sensitivity, epsilon):
    exact = _brute_delta(sigma, (sensitivity,), epsilon)
    got = discrete_delta(sigma, sensitivity, epsilon)
    assert got >= exact - 1e-15  # never too small
    assert got == pytest.approx(exact, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("sigma", [0.8, 1.5, 3.0])
@pytest.mark.parametrize("epsilon", [0.2, 1.0, 2.0])
def test_zcdp_bound_covers_a_histogram_row_move(sigma, epsilon):
    """One row moves between two bins: shifts (+1, -1). The certified delta (zCDP) is never
    below the exact two-dimensional delta, and within a modest factor of it."""
    exact = _brute_delta(sigma, (1, -1), epsilon)
    certified = certified_delta(sigma, 2, 1, epsilon)
    assert certified >= exact
    assert certified == zcdp_delta(2 / (2 * sigma * sigma), epsilon)


def test_zcdp_delta_is_the_minimum_over_alpha():
    rho, epsilon = 0.05, 1.0
    alphas = np.linspace(1.02, 60, 200_000)
    bounds = (np.exp((alphas - 1) * (alphas * rho - epsilon)) * (1 - 1 / alphas) ** alphas
              / (alphas - 1))
    assert zcdp_delta(rho, epsilon) == pytest.approx(bounds.min(), rel=1e-6)
    assert zcdp_delta(0.0, 1.0) == 0.0


def test_certified_delta_uses_the_exact_one_dimensional_bound():
    sigma, epsilon = 3.0, 1.0
    assert certified_delta(sigma, 1, 1, epsilon) == discrete_delta(sigma, 1, epsilon)
    assert discrete_delta(sigma, 1, epsilon) < zcdp_delta(1 / 18, epsilon)


@pytest.mark.parametrize(("l2_squared", "linf"), [(1, 1), (2, 1), (4, 2), (8, 2)])
@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-6), (0.1, 1e-9), (3.0, 1e-5)])
def test_discrete_sigma_is_certified_and_nearly_minimal(l2_squared, linf, epsilon, delta):
    sigma = discrete_sigma(l2_squared, linf, epsilon, delta)
    assert certified_delta(sigma, l2_squared, linf, epsilon) <= delta
    assert certified_delta(sigma * (1 - 2**-11), l2_squared, linf, epsilon) > delta
    # never far from the continuous optimum at the same L2 sensitivity
    assert sigma < 1.2 * analytic_sigma(math.sqrt(l2_squared), epsilon, delta)


def test_sampler_matches_the_discrete_gaussian_law():
    """Chi-square test of 300,000 draws at sigma = 2 against the exact pmf (p >= 1e-6)."""
    sigma = 2.0
    draws = discrete_gaussian(sigma, 300_000)
    support = np.arange(-8, 9)
    observed = np.array([(draws == x).sum() for x in support] + [(np.abs(draws) > 8).sum()])
    p = _pmf(sigma, support.astype(float))
    expected = np.append(p, max(1.0 - p.sum(), 0.0)) * draws.size
    assert expected.min() > 5  # every cell is large enough for the chi-square approximation
    assert stats.chisquare(observed, expected).pvalue > FALSE_FAILURE


@pytest.mark.parametrize("sigma", [0.3, 17.0, 5e5])
def test_sampler_variance_and_symmetry(sigma):
    draws = discrete_gaussian(sigma, 200_000).astype(float)
    if sigma < 1:
        x = np.arange(-50, 51.0)
        p = _pmf(sigma, x)
        variance, fourth = float(np.sum(p * x**2)), float(np.sum(p * x**4))
    else:
        variance, fourth = sigma * sigma, 3.0 * sigma**4
    # the sample variance is within 5.5 of its standard errors, sqrt((E X^4 - var^2) / n), of
    # the true one except w.p. < 1e-6 (at sigma = 0.3 only ~1,500 draws are nonzero: the
    # error is 2.5% per standard error there, so a fixed 4% failed about one run in ten)
    tolerance = 5.5 * math.sqrt((fourth - variance**2) / draws.size) / variance
    assert draws.var() == pytest.approx(variance, rel=tolerance)
    assert abs(draws.mean()) < 6 * math.sqrt(variance / draws.size)
    assert draws.dtype == np.float64 and discrete_gaussian(sigma, 0).size == 0


def test_half_width_covers_the_noise():
    sigma, cells = 10.0, 4
    width = gaussian_half_width(sigma, 0.95, cells)
    assert width == pytest.approx(sigma * math.sqrt(2 * math.log(2 * cells / 0.05)))
    draws = discrete_gaussian(sigma, 400_000).reshape(-1, cells)
    misses = int(np.any(np.abs(draws) > width, axis=1).sum())
    # P(any cell beyond the width) <= 0.05; the binomial upper tail at 1e-6 bounds the count
    assert misses <= stats.binom.ppf(1 - FALSE_FAILURE, draws.shape[0], 0.05)


def test_validation():
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError):
            discrete_gaussian(bad, 3)
    with pytest.raises(ValueError):
        discrete_gaussian(2.0**31, 3)
    with pytest.raises(ValueError):
        discrete_delta(1.0, 0, 1.0)
    with pytest.raises(ValueError):
        discrete_sigma(1, 2, 1.0, 1e-6)
    with pytest.raises(ValueError):
        analytic_sigma(1.0, 1.0, 1.0)


def test_randomness_comes_only_from_the_secure_samplers():
    assert_secure_randomness(gaussian, reads_urandom=False)


@pytest.mark.parametrize(("sigma", "sensitivity", "epsilon"),
                         [(6000.0, 300, 0.1), (20000.0, 256, 0.05), (1e5, 257, 0.01)])
def test_large_sigma_tail_integral_keeps_an_upper_bound(monkeypatch, sigma, sensitivity,
                                                        epsilon):
    """Beyond 2^16 tail terms the subtracted tail is an integral (a lower bound): the delta it
    gives is never below the fully summed one, and within 1% of it."""
    from dpsql.noise import gaussian as module

    fast = module.discrete_delta(sigma, sensitivity, epsilon)
    monkeypatch.setattr(module, "_TAIL_TERMS", 10**9)
    summed = module.discrete_delta(sigma, sensitivity, epsilon)
    assert summed <= fast <= summed * 1.01
