"""The secure sampler's output matches the exact discrete Laplace law.

``P(X = x) = (1 - p) / (1 + p) * p^|x|``, ``p = exp(-1/scale)``. Every check uses n = 400,000
fresh samples from the real CSPRNG sampler (no seed: the false-failure rate is what we control).

False-failure rate: FAMILY_ALPHA = 1e-4 for this whole file, split evenly (Bonferroni) over
N_CHECKS = 4 checks (chi-square, sign symmetry, mean, variance) per discrete-Laplace scale plus
2 checks of the noise inside ``release_sums``; each check rejects at ALPHA = FAMILY_ALPHA /
N_CHECKS. The mean and variance checks are z-tests (normal approximation, n = 400,000).
The two power checks at the end must REJECT a buggy law: one is seeded (deterministic), the
other (noise 5% too small) gave p-values below 1e-112 in 20 trials against the 3.3e-6 threshold,
so its false-failure rate is negligible.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy import stats

from dpsql.noise.mechanisms import discrete_laplace, release_sums, sum_granularity

N = 400_000
SCALES = (0.5, 1.0, 10.0, 100.0, 3.7, 2.0**20, 2.0**32)
FAMILY_ALPHA = 1e-4
N_CHECKS = 4 * len(SCALES) + 2
ALPHA = FAMILY_ALPHA / N_CHECKS
Z_CRIT = float(stats.norm.isf(ALPHA / 2))
MIN_EXPECTED = 5.0


@functools.cache
def _samples(scale: float) -> np.ndarray:
    x = discrete_laplace(scale, N)
    x.setflags(write=False)
    return x


def _cdf(k: np.ndarray, scale: float) -> np.ndarray:
    """Exact P(X <= k) for integer k: p^-k/(1+p) for k < 0, 1 - p^(k+1)/(1+p) for k >= 0."""
    k = np.asarray(k, dtype=np.float64)
    p = math.exp(-1.0 / scale)
    neg = np.exp(np.minimum(k, 0.0) / scale) / (1.0 + p)
    pos = 1.0 - np.exp(-(np.maximum(k, 0.0) + 1.0) / scale) / (1.0 + p)
    return np.where(k < 0, neg, pos)


def _chisquare_pvalue(samples: np.ndarray, scale: float) -> float:
    """Chi-square p-value of integer samples against discrete Laplace(scale).

    Fine bins start at integer cut points (every integer within 60 scales for small scales,
    steps of scale/20 within 15 scales otherwise); the two ends are open. Adjacent bins are then
    pooled left to right until each expected count is at least MIN_EXPECTED (a short last bin
    joins its left neighbour).
    """
    if scale <= 100:
        reach = int(60 * scale) + 5
        cuts = np.arange(-reach, reach + 1, dtype=np.float64)
    else:
        cuts = np.unique(np.round(scale * np.linspace(-15.0, 15.0, 601)))
    # Bin i holds [cuts[i-1], cuts[i] - 1]; bin 0 is (-inf, cuts[0] - 1], the last [cuts[-1], inf).
    upper_cdf = np.append(_cdf(cuts - 1.0, scale), 1.0)
    expected = N * np.diff(np.concatenate(([0.0], upper_cdf)))
    observed = np.bincount(np.searchsorted(cuts, samples, side="right"),
                           minlength=cuts.size + 1).astype(np.float64)
    pooled_exp, pooled_obs, acc_e, acc_o = [], [], 0.0, 0.0
    for e, o in zip(expected, observed, strict=True):
        acc_e, acc_o = acc_e + e, acc_o + o
        if acc_e >= MIN_EXPECTED:
            pooled_exp.append(acc_e)
            pooled_obs.append(acc_o)
            acc_e = acc_o = 0.0
    pooled_exp[-1] += acc_e
    pooled_obs[-1] += acc_o
    f_exp = np.array(pooled_exp)
    assert f_exp.min() >= MIN_EXPECTED and len(f_exp) >= 3
    f_exp *= N / f_exp.sum()  # remove float round-off so the totals agree exactly
    return float(stats.chisquare(np.array(pooled_obs), f_exp).pvalue)


def _moments(scale: float) -> tuple[float, float]:
    """Exact variance and Var(X^2) via cumulants of X = G1 - G2 (two i.i.d. geometrics)."""
    p = math.exp(-1.0 / scale)
    r = p / (1.0 - p)
    k2 = 2.0 * r * (1.0 + r)
    k4 = 2.0 * r * (1.0 + r) * (1.0 + 6.0 * r + 6.0 * r * r)
    return k2, k4 + 2.0 * k2 * k2


@pytest.mark.parametrize("scale", SCALES)
def test_chi_square_against_exact_pmf(scale):
    assert _chisquare_pvalue(_samples(scale), scale) >= ALPHA


@pytest.mark.parametrize("scale", SCALES)
def test_sign_symmetry(scale):
    x = _samples(scale)
    nonzero = int(np.count_nonzero(x))
    positive = int(np.count_nonzero(x > 0))
    assert stats.binomtest(positive, nonzero, 0.5).pvalue >= ALPHA


@pytest.mark.parametrize("scale", SCALES)
def test_mean_is_zero(scale):
    var, _ = _moments(scale)
    tolerance = Z_CRIT * math.sqrt(var / N)
    assert abs(float(_samples(scale).mean())) <= tolerance


@pytest.mark.parametrize("scale", SCALES)
def test_variance_matches(scale):
    var, var_of_square = _moments(scale)
    x = _samples(scale).astype(np.float64)
    tolerance = Z_CRIT * math.sqrt(var_of_square / N)  # the mean is known (0): use mean of x^2
    assert abs(float(np.mean(x * x)) - var) <= tolerance
    # Sanity of the stated tolerance: relative, it is a few percent at most.
    assert tolerance / var < 0.05


def test_exact_pmf_helpers_agree():
    # The reference law used above, checked against a direct sum of the pmf.
    for scale in (0.5, 3.7):
        p = math.exp(-1.0 / scale)
        x = np.arange(-400, 401)
        pmf = (1 - p) / (1 + p) * p ** np.abs(x)
        assert _cdf(np.array([-1, 0, 2]), scale) == pytest.approx(
            [pmf[:400].sum(), pmf[:401].sum(), pmf[:403].sum()], rel=1e-12)
        var, var_sq = _moments(scale)
        assert var == pytest.approx(float((pmf * x**2).sum()), rel=1e-12)
        assert var_sq == pytest.approx(float((pmf * x**4).sum()) - var**2, rel=1e-12)


def test_sum_noise_is_grid_times_discrete_laplace():
    # release_sums(v) = g * (round_half_up(v / g) + Y), Y ~ discrete Laplace(scale / g).
    scale, value = 1000.0, 0.3
    g = sum_granularity(scale)
    out = release_sums(np.full(N, value), scale)
    noise = out / g - math.floor(value / g + 0.5)
    assert np.array_equal(noise, np.round(noise))
    assert _chisquare_pvalue(noise.astype(np.int64), scale / g) >= ALPHA
    positive, nonzero = int(np.count_nonzero(noise > 0)), int(np.count_nonzero(noise))
    assert stats.binomtest(positive, nonzero, 0.5).pvalue >= ALPHA


@pytest.mark.parametrize("scale", (0.5, 10.0))
def test_chi_square_detects_zero_counted_twice(scale):
    # Power check (seeded, deterministic): the classic bug "random sign times a one-sided
    # geometric" gives 0 the mass (1 - p) instead of (1 - p) / (1 + p). The test must reject it.
    rng = np.random.default_rng(20240601)
    p = math.exp(-1.0 / scale)
    folded = rng.geometric(1.0 - p, N) - 1
    buggy = np.where(rng.integers(0, 2, N) == 1, folded, -folded)
    assert _chisquare_pvalue(buggy, scale) < ALPHA


def test_chi_square_detects_a_five_percent_scale_error():
    # Power check: noise 5% too small (an epsilon silently 5% too large) must be rejected.
    assert _chisquare_pvalue(_samples(10.0 / 1.05), 10.0) < ALPHA
