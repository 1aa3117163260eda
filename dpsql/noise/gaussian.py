"""The Gaussian mechanism (seed 003): calibration, privacy accounting and a secure discrete sampler.

dpsql adds *discrete* Gaussian noise N_Z(0, sigma^2) (Canonne, Kamath and Steinke, "The Discrete
Gaussian for Differential Privacy", 2020; "CKS" below) to integer values, for the same reason the
Laplace path uses discrete Laplace noise: floating-point Gaussian samples leak low bits
(Mironov 2012). Real-valued sums are snapped to a power-of-two grid first, as in
:func:`dpsql.noise.mechanisms.release_sums`.

Calibration (what sigma gives (epsilon, delta)-DP):

* :func:`classical_sigma` -- the seeds' ``sigma = D sqrt(2 ln(1.25/delta)) / epsilon`` (Dwork and
  Roth, Theorem A.1; continuous Gaussian, epsilon < 1).
* :func:`analytic_sigma` -- Balle and Wang (2018): the smallest sigma whose exact continuous
  privacy profile is at most delta.
* :func:`discrete_delta` -- CKS Theorem 7: the exact delta of N_Z(0, sigma^2) for one integer
  value of integer sensitivity; and :func:`zcdp_delta`, CKS Corollary 13, for vectors (a
  histogram row moves two bins): N_Z(0, sigma^2) per coordinate is rho-zCDP with
  ``rho = L2^2 / (2 sigma^2)`` for integer vectors of L2 sensitivity L2 (CKS Theorem 14).
* :func:`discrete_sigma` -- the smallest sigma (on a 2^-12 relative grid) that these exact
  accountants certify for the discrete sampler. Whatever sigma a user's calibration names, the
  release is certified by :func:`certified_delta` before it is used.

Sampling (:func:`discrete_gaussian`): CKS Algorithm 3, vectorised. With ``t = floor(sigma) + 1``,
draw ``Y`` from discrete Laplace(t) (:func:`dpsql.noise.mechanisms.discrete_laplace`) and keep it
with probability ``exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))``; kept values are exactly
N_Z(0, sigma^2). The acceptance test compares a 53-bit secure uniform with the probability in
float64, so each kept value's probability is realised within a relative error of about 2^-50,
and values where the acceptance probability is below 2^-53 (beyond about 9.6 sigma: mass below
10^-19) are never kept -- a delta of that size, as the Laplace sampler documents its own.
How many rounds the loop takes depends on the random bits only, never on the value noised.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from dpsql.noise.mechanisms import discrete_laplace, positive_real
from dpsql.noise.selection import secure_uniforms

__all__ = [
    "MAX_SIGMA",
    "analytic_sigma",
    "certified_delta",
    "classical_sigma",
    "discrete_delta",
    "discrete_gaussian",
    "discrete_sigma",
    "gaussian_half_width",
    "zcdp_delta",
]

#: Largest sigma the sampler accepts (the discrete Laplace proposal's scale cap is 2^32).
MAX_SIGMA = 2.0**30

_SQRT2 = math.sqrt(2.0)


def _probability(delta: float) -> float:
    delta = positive_real(delta, "delta")
    if delta >= 1.0:
        raise ValueError("delta must be < 1")
    return delta


# ------------------------------------------------------------------------------- calibration


def classical_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """The seeds' sigma: ``sensitivity * sqrt(2 ln(1.25 / delta)) / epsilon``.

    Precondition: ``sensitivity`` (L2) > 0, ``0 < epsilon < 1``, ``0 < delta < 1``.
    Guarantee: continuous N(0, sigma^2) noise is (epsilon, delta)-DP (Dwork and Roth, Thm A.1).
    """
    sensitivity = positive_real(sensitivity, "sensitivity")
    epsilon = positive_real(epsilon, "epsilon")
    delta = _probability(delta)
    if epsilon >= 1.0:
        raise ValueError("the classical Gaussian calibration holds for epsilon < 1 only: use "
                         "the analytic calibration")
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def _continuous_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """Balle and Wang's exact delta of N(0, sigma^2) at L2 sensitivity ``sensitivity``."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return (0.5 * math.erfc((b - a) / _SQRT2)
            - math.exp(epsilon) * 0.5 * math.erfc((b + a) / _SQRT2))


def analytic_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """Balle and Wang's analytic Gaussian calibration, for the continuous mechanism.

    Precondition: ``sensitivity`` (L2) > 0, ``epsilon`` > 0, ``0 < delta < 1``.
    Guarantee: the returned sigma is at most 2^-30 (relatively) above the smallest sigma with
    ``Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D) <= delta`` and
    satisfies that inequality (bisection keeps the upper end), so continuous N(0, sigma^2) is
    (epsilon, delta)-DP (Balle and Wang 2018, Theorem 8).
    """
    sensitivity = positive_real(sensitivity, "sensitivity")
    epsilon = positive_real(epsilon, "epsilon")
    delta = _probability(delta)
    return _bisect_sigma(lambda s: _continuous_delta(s, sensitivity, epsilon) <= delta,
                         sensitivity, 2.0**-30)


def _bisect_sigma(ok, sensitivity: float, tolerance: float) -> float:
    """The smallest sigma (within ``tolerance``, relatively) with ``ok(sigma)``; ``ok`` is
    monotone (false below, true above)."""
    hi = sensitivity
    while not ok(hi):
        hi *= 2.0
        if hi > MAX_SIGMA:
            raise ValueError("no sigma up to 2^30 reaches this delta: raise epsilon or delta")
    lo = hi / 2.0
    while ok(lo) and lo > 1e-300:
        lo /= 2.0
    while hi - lo > tolerance * hi:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


# ------------------------------------------------------------------------ discrete accounting


def _log_normaliser(sigma: float) -> float:
    """ln of sum_x exp(-x^2 / (2 sigma^2)) over all integers x (a slight *under*-estimate).

    For sigma >= 4, Poisson summation gives sqrt(2 pi) sigma (1 + 2 sum_k exp(-2 pi^2 sigma^2
    k^2)), whose correction is below 10^-130; below, the series is summed directly.
    """
    if sigma >= 4.0:
        return math.log(math.sqrt(2.0 * math.pi) * sigma)
    x = np.arange(1, int(40 * sigma) + 2, dtype=np.float64)
    return math.log1p(2.0 * float(np.sum(np.exp(-x * x / (2.0 * sigma * sigma)))))


def discrete_delta(sigma: float, sensitivity: int, epsilon: float) -> float:
    """The exact delta of one integer value plus N_Z(0, sigma^2) (CKS Theorem 7), rounded up.

    Precondition: ``sigma`` > 0; ``sensitivity`` a positive integer (the value moves by at most
    that between neighbours); ``epsilon`` >= 0.
    Guarantee: an upper bound on ``P[X >= l] - e^eps P[X >= u]`` for X ~ N_Z(0, sigma^2),
    ``l = floor(eps sigma^2/D - D/2) + 1``, ``u = floor(eps sigma^2/D + D/2) + 1`` -- the
    smallest delta for which the mechanism is (epsilon, delta)-DP. The positive terms use a
    normaliser rounded down and the subtracted tail is truncated, so rounding only raises it.
    """
    sigma = positive_real(sigma, "sigma")
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or sensitivity < 1:
        raise ValueError("sensitivity must be a positive integer")
    if not (math.isfinite(epsilon) and epsilon >= 0.0):
        raise ValueError("epsilon must be finite and >= 0")
    s2 = sigma * sigma
    lower = math.floor(epsilon * s2 / sensitivity - sensitivity / 2.0) + 1
    upper = math.floor(epsilon * s2 / sensitivity + sensitivity / 2.0) + 1
    log_z = _log_normaliser(sigma) - 1e-12
    band = np.arange(lower, upper, dtype=np.float64)
    positive = float(np.sum(np.exp(-band * band / (2.0 * s2) - log_z)))
    if 12.0 * sigma > _TAIL_TERMS:
        tail = _tail_integral(upper, sigma, log_z)
    else:
        # the subtracted tail, summed while its terms matter (any truncation keeps an upper
        # bound)
        tail_x = np.arange(upper, upper + int(12.0 * sigma + 2.0), dtype=np.float64)
        tail = float(np.sum(np.exp(-tail_x * tail_x / (2.0 * s2) - log_z - 1e-12)))
    return max(0.0, min(1.0, positive - math.expm1(epsilon) * tail * (1.0 - 1e-12)))


#: beyond this many terms, :func:`discrete_delta` bounds the subtracted tail by an integral
_TAIL_TERMS = 2**16


def _tail_integral(upper: int, sigma: float, log_z: float) -> float:
    """A lower bound on ``sum_{x >= upper} exp(-x^2 / 2 sigma^2) / Z`` for ``upper >= 1``.

    The summand decreases on ``[upper, inf)``, so the sum is at least the integral
    ``sigma sqrt(pi/2) erfc(upper / (sigma sqrt 2))``; the factor 1 - 1e-9 absorbs erfc's and
    exp's rounding. A lower bound on the *subtracted* term keeps :func:`discrete_delta` an upper
    bound, at a cost below the largest term exp(-upper^2 / 2 sigma^2) / Z -- negligible at the
    large sigma (> 2^16 / 12) where it replaces summing that many terms.
    """
    assert upper >= 1
    integral = sigma * math.sqrt(math.pi / 2.0) * math.erfc(upper / (sigma * _SQRT2))
    return integral * math.exp(-log_z) * (1.0 - 1e-9)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """The delta that rho-zCDP implies at ``epsilon`` (CKS Corollary 13).

    Precondition: ``rho`` >= 0, ``epsilon`` >= 0.
    Guarantee: a rho-zCDP mechanism is (epsilon, returned delta)-DP. Every alpha > 1 gives a
    valid bound ``exp((alpha-1)(alpha rho - eps)) (1 - 1/alpha)^alpha / (alpha - 1)``; alpha is
    found by bisection on the bound's derivative, so a slightly-off alpha only loosens it.
    """
    if not (math.isfinite(rho) and rho >= 0.0 and math.isfinite(epsilon) and epsilon >= 0.0):
        raise ValueError("rho and epsilon must be finite and >= 0")
    if rho == 0.0:
        return 0.0
    lo, hi = 1.01, (epsilon + 1.0) / (2.0 * rho) + 2.0
    alpha = hi
    for _ in range(200):
        alpha = 0.5 * (lo + hi)
        if (2.0 * alpha - 1.0) * rho - epsilon + math.log1p(-1.0 / alpha) < 0.0:
            lo = alpha
        else:
            hi = alpha
    log_delta = ((alpha - 1.0) * (alpha * rho - epsilon) + alpha * math.log1p(-1.0 / alpha)
                 - math.log(alpha - 1.0))
    # min(1, e^x) without e^x: an OverflowError at huge epsilon (x far above 0)
    return 1.0 if log_delta >= 0.0 else math.exp(log_delta)


#: the largest epsilon whose e^epsilon (math.expm1) is a finite double, with margin
_EXACT_DELTA_MAX_EPSILON = 700.0


def certified_delta(sigma: float, l2_squared: int, linf: int, epsilon: float) -> float:
    """The smallest delta dpsql can prove for N_Z(0, sigma^2) noise on every coordinate.

    Precondition: the released integer vector moves, between neighbours, by a vector whose
    squared L2 norm is at most ``l2_squared`` and whose every coordinate moves by at most
    ``linf`` (integers; one coordinate when ``l2_squared == linf**2``).
    Guarantee: (epsilon, returned delta)-DP: the zCDP bound always applies (CKS Thm 14 and
    Cor. 13); when only one coordinate can move, CKS Theorem 7's exact 1-D delta applies too,
    and the smaller is returned.
    """
    sigma = positive_real(sigma, "sigma")
    zcdp = zcdp_delta(l2_squared / (2.0 * sigma * sigma), epsilon)
    # the exact 1-D delta needs e^epsilon and epsilon sigma^2 as doubles (an OverflowError from
    # epsilon ~710 on); past that the zCDP bound alone is still an upper bound
    if l2_squared == linf * linf and epsilon <= _EXACT_DELTA_MAX_EPSILON:
        return min(zcdp, discrete_delta(sigma, linf, epsilon))
    return zcdp


@lru_cache(maxsize=256)
def discrete_sigma(l2_squared: int, linf: int, epsilon: float, delta: float) -> float:
    """The smallest sigma (within 2^-12, relatively) :func:`certified_delta` certifies.

    Precondition: as :func:`certified_delta`; ``epsilon`` > 0, ``0 < delta < 1``. Public
    inputs only (sensitivities from the SQL and metadata, the analyst's budget), so caching is
    safe.
    Guarantee: N_Z(0, sigma^2) on every coordinate is (epsilon, delta)-DP.
    """
    epsilon, delta = positive_real(epsilon, "epsilon"), _probability(delta)
    if l2_squared < 1 or linf < 1 or linf * linf > l2_squared:
        raise ValueError("sensitivities must be positive integers with linf^2 <= l2^2")
    return _bisect_sigma(lambda s: certified_delta(s, l2_squared, linf, epsilon) <= delta,
                         math.sqrt(l2_squared), 2.0**-12)


# ---------------------------------------------------------------------------------- sampling


def discrete_gaussian(sigma: float, size: int) -> np.ndarray:
    """``size`` i.i.d. samples of N_Z(0, sigma^2) (module docstring: CKS Algorithm 3).

    Precondition: ``0 < sigma <= MAX_SIGMA``; ``size >= 0``.
    Guarantee: an int64 array of shape ``(size,)``, from ``os.urandom`` only, distributed as
    N_Z(0, sigma^2) up to the resolution in the module docstring.
    """
    sigma = positive_real(sigma, "sigma")
    if sigma > MAX_SIGMA:
        raise ValueError("sigma exceeds 2^30: raise epsilon or lower the sensitivity")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError("size must be an integer >= 0")
    t = math.floor(sigma) + 1.0
    shift, two_s2 = sigma * sigma / t, 2.0 * sigma * sigma
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        # about 70% of proposals are kept (measured over sigma from 1 to 10^6), so 1.5x the
        # rest usually ends the loop in one round; the round count depends on random bits only
        batch = (3 * (size - filled)) // 2 + 64
        y = discrete_laplace(t, batch)
        d = np.abs(y) - shift
        keep = y[secure_uniforms(batch) < np.exp(-(d * d) / two_s2)]
        take = min(keep.size, size - filled)
        out[filled:filled + take] = keep[:take]
        filled += take
    return out


def gaussian_half_width(sigma: float, confidence: float = 0.95, cells: int = 1) -> float:
    """Half-width ``alpha = sigma sqrt(2 ln(2 cells / beta))``, ``beta = 1 - confidence``.

    Guarantee: for ``cells`` independent N_Z(0, sigma^2) (or N(0, sigma^2)) noises, the
    probability that any has ``|noise| > alpha`` is at most ``beta``: both laws are
    sigma^2-subgaussian (CKS Proposition 5), so ``P[|X| > a] <= 2 exp(-a^2 / (2 sigma^2))``,
    union-bounded over cells. Seed 003's (alpha, beta) figure for the continuous Gaussian,
    ``sigma sqrt(2) erfinv(1 - beta)``, is smaller; this one also holds for the discrete law.
    """
    sigma = positive_real(sigma, "sigma")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must lie strictly between 0 and 1")
    if isinstance(cells, bool) or not isinstance(cells, int) or cells < 1:
        raise ValueError("cells must be an integer >= 1")
    return sigma * math.sqrt(2.0 * math.log(2.0 * cells / (1.0 - confidence)))
