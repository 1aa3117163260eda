"""dpsql/noise/gdp.py: GDP conversions, the GDP budget, and the discrete Gaussian's certificate.

Exact values against 60-digit arithmetic (tests/noise/gdp_reference.py); a deliberately too
small mu (the continuous Gaussian's shift / sigma) is refused; issue #18's target of 42 is
infeasible for any Gaussian mechanism, and the budget admits what the exact composition allows.
"""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest

from dpsql.noise import gdp
from tests.noise import gdp_reference as ref


def exact_delta(mu: float, eps: float):
    mu, eps = mp.mpf(mu), mp.mpf(eps)
    return mp.ncdf(-eps / mu + mu / 2) - mp.exp(eps) * mp.ncdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("mu,eps", [(0.1, 0.0), (0.2367, 1.0), (0.5, 0.3), (1.0, 2.0),
                                    (3.0, 5.0), (0.01, 0.05), (0.05, 1.0)])
def test_gdp_delta_is_drs_corollary_2_13(mu, eps):
    got, want = gdp.gdp_delta(mu, eps), exact_delta(mu, eps)
    assert abs(got - float(want)) <= 1e-13 * (1 + (eps / mu) ** 2) * float(want) + 1e-300


def test_the_budget_of_1_and_1e_6_and_its_inverse():
    mu_b = gdp.gdp_budget(1.0, 1e-6)
    assert mu_b == pytest.approx(0.2367043804, rel=1e-9)
    assert exact_delta(mu_b, 1.0) <= mp.mpf("1e-6")  # sound: at most delta
    assert exact_delta(mu_b * (1 + 1e-8), 1.0) > mp.mpf("1e-6")  # and tight
    assert gdp.gdp_epsilon(mu_b, 1e-6) == pytest.approx(1.0, rel=1e-8)
    assert gdp.gdp_epsilon(mu_b, 1e-6) >= 1.0 - 1e-9
    assert gdp.gdp_epsilon(0.0, 1e-6) == 0.0
    for bad in [(0.0, 1e-6), (1.0, 0.0), (1.0, 1.0), (math.inf, 0.1)]:
        with pytest.raises(ValueError):
            gdp.gdp_budget(*bad)


def test_42_is_infeasible_for_100_gaussian_counts():
    # 100 Gaussians of sigma s at sensitivity 1 compose to exactly (10/s)-GDP (DRS Cor. 3.3),
    # and that is (1, 1e-6)-DP iff 10/s <= mu_B: at s = 42 delta(1) exceeds 1e-6
    assert exact_delta(10 / 42, 1.0) > mp.mpf("1.12e-6")
    assert gdp.gdp_delta(10 / 42, 1.0) > 1e-6
    least = 10 / gdp.gdp_budget(1.0, 1e-6)
    assert 42.2467 < least < 42.2469  # the continuous optimum; the discrete one is above


@pytest.mark.parametrize("sigma,shift", [(0.5, 1), (1.0, 1), (1.0, 2), (2.0, 1), (2.0, 3),
                                         (3.7, 1), (4.5, 2), (8.5, 1)])
def test_the_certificate_is_the_least_mu_up_to_its_margin(sigma, shift):
    exact = ref.least_mu(sigma, shift)
    got = gdp.discrete_mu(sigma, shift)
    assert got is not None
    assert got >= exact  # sound
    assert got <= exact * (1 + 1e-8) + 1e-11  # and tight
    assert got > shift / sigma  # the discrete Gaussian is NOT (shift/sigma)-GDP


@pytest.mark.parametrize("sigma,shift", [(1.0, 1), (2.0, 1), (42.0, 1), (5.0, 3)])
def test_a_too_small_mu_is_refused_and_the_curve_really_dips_below_it(sigma, shift):
    continuous = shift / sigma
    assert not gdp.certifies(sigma, shift, continuous)
    assert not gdp.certifies(sigma, shift, gdp.discrete_mu(sigma, shift) * (1 - 1e-6))
    assert gdp.certifies(sigma, shift, gdp.discrete_mu(sigma, shift))
    # the witness: some vertex of the exact trade-off curve lies below G_(shift/sigma)
    if sigma <= 5:
        assert any(b < ref.g_mu(continuous, a) for a, b in ref.vertices(sigma, shift))


@pytest.mark.parametrize("sigma,shift", [(0.8, 1), (2.5, 2)])
def test_the_certified_g_mu_lies_below_the_whole_curve_not_just_its_vertices(sigma, shift):
    # the chord argument, checked: along each segment between vertices
    mu = gdp.discrete_mu(sigma, shift)
    points = sorted(ref.vertices(sigma, shift))
    for (a0, b0), (a1, b1) in itertools.pairwise(points):
        for w in (mp.mpf("0.25"), mp.mpf("0.5"), mp.mpf("0.75")):
            a, b = a0 + w * (a1 - a0), b0 + w * (b1 - b0)
            assert ref.g_mu(mu, a) <= b


def test_ndtri_exp_is_within_the_error_the_certificate_allows():
    from scipy.special import ndtri_exp

    for log_p in np.concatenate((-np.logspace(-3, math.log10(667.0), 60), [math.log(0.5)])):
        p = mp.exp(mp.mpf(float(log_p)))
        want = ref.upper_quantile(p) if p > mp.mpf("1e-40") else None
        if want is None:  # beyond erfinv at 80 digits: solve Phi(-z) = p instead
            want = mp.findroot(lambda z, p=p: mp.log(mp.ncdf(-z)) - mp.log(p), 30)
        got = -float(ndtri_exp(log_p))
        assert abs(got - float(want)) <= 1e-14 * (1 + abs(float(want)))


def test_sigma_42_and_the_benchmark_sigma():
    mu = gdp.discrete_mu(42.0, 1)
    assert mu == pytest.approx(1 / 42 * (1 + 2.3622e-5), rel=1e-8)
    # 100 counts at sigma 42.25 fit (1, 1e-6) once the discrete excess is paid
    assert 100 * gdp.discrete_mu(42.25, 1) ** 2 <= gdp.gdp_budget(1.0, 1e-6) ** 2


def test_gaussian_mu_composes_the_coordinates():
    s = 7.5
    one = gdp.discrete_mu(s, 1)
    assert gdp.gaussian_mu(s, 1) == pytest.approx(one, rel=1e-8)
    assert gdp.gaussian_mu(s, 1) >= one
    # a histogram row moves two bins by one: sqrt(2) times
    assert gdp.gaussian_mu(s, 2) >= math.sqrt(2) * one
    # l2^2 = 9 allows one coordinate moving 3, or nine moving 1: both covered
    nine = gdp.gaussian_mu(s, 9)
    assert nine >= gdp.discrete_mu(s, 3) and nine >= 3 * one
    assert gdp.gaussian_mu(s, 65 * 65) is None  # beyond MAX_SHIFT: not certified
    assert gdp.gaussian_mu(1e6, 1) is None  # beyond the certifier's window
    assert gdp.gaussian_mu(13000.0, 1) is not None and gdp.gaussian_mu(14000.0, 1) is None
    with pytest.raises(ValueError):
        gdp.gaussian_mu(s, 0)
    with pytest.raises(ValueError):
        gdp.discrete_mu(-1.0, 1)
