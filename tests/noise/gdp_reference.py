"""An independent reference for dpsql/noise/gdp.py in 60-digit arithmetic (mpmath).

It computes the discrete Gaussian's trade-off vertices from the probability mass function
directly (no symmetry, no float tails) and the least mu with G_mu below every vertex; and
G_mu itself from Phi. Quantiles are refined by Newton's method in 60 digits, so a float
start (scipy's) cannot carry its error into the result. Slow but exact to far beyond the
certificate's margins.
"""

from __future__ import annotations

from functools import lru_cache

import mpmath as mp

mp.mp.dps = 60


def phi_cdf(x):
    return mp.ncdf(x)


def upper_quantile(p):
    """z with P[N(0,1) >= z] = p: Newton's method on Phi(-z) = p in 60 digits, started from
    float64 (quadratic convergence: three steps take a 1e-15 start below 1e-50)."""
    p = mp.mpf(p)
    if p > 0.5:
        return -upper_quantile(1 - p)
    from scipy.special import ndtri_exp

    z = mp.mpf(-float(ndtri_exp(float(mp.log(p)))))
    root2 = mp.sqrt(2)
    for _ in range(3):
        z += (mp.erfc(z / root2) / 2 - p) / mp.npdf(z)
    return z


def g_mu(mu, alpha):
    """G_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu)."""
    return phi_cdf(upper_quantile(alpha) - mu)


@lru_cache(maxsize=64)
def vertices(sigma: float, shift: int) -> tuple[tuple, ...]:
    """(a_t, b_t) = (P[X >= t], P[X + shift < t]) for every t whose tails stay above 1e-30."""
    s = mp.mpf(sigma)
    half = int(12 * sigma) + shift + 12
    xs = range(-half - 40, half + 41)
    pmf = {x: mp.exp(-mp.mpf(x) ** 2 / (2 * s * s)) for x in xs}
    z = mp.fsum(pmf.values())
    out = []
    upper = mp.mpf(0)  # P[X >= t], built from the top
    at_least = {}
    for x in sorted(xs, reverse=True):
        upper += pmf[x] / z
        at_least[x] = upper
    for t in range(-half, half + 1):
        a = at_least[t]
        b = 1 - at_least[t - shift]  # P[X < t - shift]
        if a > mp.mpf("1e-30") and b > mp.mpf("1e-30"):
            out.append((a, b))
    return tuple(out)


@lru_cache(maxsize=64)
def least_mu(sigma: float, shift: int):
    """max over vertices of z(a_t) - z(1 - b_t): the least mu with G_mu <= every vertex."""
    return max(upper_quantile(a) - upper_quantile(1 - b) for a, b in vertices(sigma, shift))
