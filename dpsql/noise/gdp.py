"""Gaussian differential privacy (GDP) for dpsql's discrete Gaussian, and the GDP budget's totals.

A mechanism is mu-GDP (Dong, Roth and Su, "Gaussian Differential Privacy", JRSS-B 2022; "DRS")
when, for every pair of neighbours, telling its two output laws apart is at least as hard as
telling N(0, 1) from N(mu, 1): the trade-off function f = T(M(D), M(D')) satisfies
f >= G_mu, ``G_mu(a) = Phi(Phi^-1(1 - a) - mu)``. The ledger's ``gdp`` filter
(:mod:`dpsql.accounting.filters`, docs/privacy.md section 5) sums the releases' mu_i^2 against
the square of :func:`gdp_budget`; this module gives it its numbers:

* :func:`gdp_delta` -- mu-GDP implies (eps, delta)-DP for every eps with
  ``delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` (DRS Corollary 2.13), and that
  is the least such delta;
* :func:`gdp_budget` -- the largest mu whose :func:`gdp_delta` at (eps, delta) stays within
  delta; :func:`gdp_epsilon` -- the least eps a mu certifies at a delta (display);
* :func:`discrete_mu` -- a certified mu for N_Z(0, sigma^2) over an integer shift D. The
  discrete Gaussian is *not* (D/sigma)-GDP: at the central vertex its trade-off curve dips
  below G_(D/sigma) by a relative ~1/(24 sigma^2) in mu (about 2.4e-5 at sigma 42), so the
  least mu that holds is computed, not assumed (the method is in :func:`discrete_mu`);
* :func:`gaussian_mu` -- the mu of a Gaussian measurement whose integer move has squared L2
  norm ``l2_squared`` (every coordinate N_Z(0, sigma^2), independent): GDP composes by
  mu^2 = sum mu_j^2 (DRS Corollary 3.3).

Every function depends on public numbers only (sigma, sensitivities, the budget's totals).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

__all__ = ["certifies", "discrete_mu", "gaussian_mu", "gdp_budget", "gdp_delta", "gdp_epsilon"]

#: float64 unit roundoff
_U = 2.0**-53

#: the certifier checks every vertex whose tails are at least this (then argues the rest)
_MIN_TAIL = 1e-290

#: the most terms (about 38.6 sigma) :func:`discrete_mu` sums: sigma up to about 13,500, at
#: most about 0.2 s once per sigma (every Gaussian release's curve computes its mu, whatever
#: the budget's filter, so this bounds the cost a query can add)
_MAX_TERMS = 2**19

#: the largest integer shift :func:`gaussian_mu` certifies coordinate by coordinate
MAX_SHIFT = 64

#: the certificate's residual: beyond the checked vertices the trade-off curve may fall below
#: G_mu by at most this much (module docstring of :func:`discrete_mu`); larger: no certificate
MAX_TAIL_DEFICIT = 1e-100

#: the relative margin every certified mu gets on top of its float error bound
ROUND_UP = 1.0 + 1e-9


def _log_ndtr(x: float) -> float:
    from scipy.special import log_ndtr  # lazy, as dpsql.noise.r2t_lp: scipy loads slowly

    return float(log_ndtr(x))


def gdp_delta(mu: float, epsilon: float) -> float:
    """The least delta for which a mu-GDP mechanism is (epsilon, delta)-DP (DRS Cor. 2.13).

    Precondition: ``mu`` >= 0 and ``epsilon`` >= 0, both finite.
    Guarantee: ``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` in float64, computed from
    log Phi, to a relative error of about 1e-15 (1 + (eps/mu)^2) (0 for mu = 0; tested
    against 60-digit arithmetic). Callers that need a bound in one direction leave a margin:
    :func:`gdp_budget` rounds mu down by 1e-9 relatively, which lowers delta by a relative
    1e-9 times d ln(delta) / d ln(mu), itself about (eps/mu)^2 -- far more than the error.
    """
    if not (math.isfinite(mu) and mu >= 0 and math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError("mu and epsilon must be finite and >= 0")
    if mu == 0:
        return 0.0
    a = _log_ndtr(-epsilon / mu + mu / 2.0)
    b = epsilon + _log_ndtr(-epsilon / mu - mu / 2.0)
    if b >= a:
        return 0.0
    return max(0.0, math.exp(a) * -math.expm1(b - a))


def gdp_budget(epsilon: float, delta: float) -> float:
    """The largest mu (within 2^-40 relatively, then rounded down by 1e-9) whose conversion
    gives (epsilon, delta): ``gdp_delta(mu, epsilon) <= delta``.

    Precondition: ``epsilon`` > 0 and ``0 < delta < 1``.
    Guarantee: a mu_B-GDP interaction is (epsilon, delta)-DP. gdp_delta increases with mu
    (a larger mu's G_mu lies below), so bisection applies; its lower end is kept.
    For (1, 1e-6) it is 0.23670 (issue #18's 100 counts need sigma >= 10 / 0.23670).
    """
    if not (math.isfinite(epsilon) and epsilon > 0 and 0 < delta < 1):
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    lo, hi = 0.0, 1.0
    while gdp_delta(hi, epsilon) <= delta:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 2.0**-40 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gdp_delta(mid, epsilon) <= delta else (lo, mid)
    return lo * (1.0 - 1e-9)


def gdp_epsilon(mu: float, delta: float) -> float:
    """For display: the least epsilon (within 2^-40, rounded up) at which mu-GDP gives
    (epsilon, delta)-DP; 0 when mu-GDP already gives (0, delta).

    Precondition: ``mu`` >= 0 finite, ``0 < delta < 1``."""
    if not (math.isfinite(mu) and mu >= 0 and 0 < delta < 1):
        raise ValueError("need a finite mu >= 0 and 0 < delta < 1")
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gdp_delta(mu, hi) > delta:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 2.0**-40 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if gdp_delta(mu, mid) <= delta else (mid, hi)
    return hi * (1.0 + 1e-9)


# ------------------------------------------------------------------- the discrete certificate


@lru_cache(maxsize=8)
def _gaussianised_tails(sigma: float) -> tuple[np.ndarray, float] | None:
    """``(g, err)``: ``g[u - 1] = z(P[X >= u])`` for u = 1 .. u_hi, X ~ N_Z(0, sigma^2) and
    z the standard normal's upper quantile (``Phi(-z(p)) = p``), for every u whose tail is at
    least :data:`_MIN_TAIL`; ``err`` bounds each entry's float error. None: sigma too large.

    Error bound. Each term ``exp(-x^2 / 2 sigma^2)`` has its argument rounded (relative 2u,
    hence an absolute error of at most 2u * 745 in it where the term does not underflow) and
    exp's own error (<= 4u): relative (1490 + 4) u per term, below 1500 u. Summing n positive
    terms in sequence adds at most (n - 1) u relatively, as does the normaliser (the same
    sum); underflowed terms sit below 1e-320, a relative 1e-30 of every tail kept. Taking the
    two logs and subtracting them rounds results of size at most 746 three times (at most
    746 u each). So ``log p`` is off by at most ``eta = (2 n + 4500) u (1 + 1e-6)``. ``z`` as
    a function of ``log p`` has derivative ``-p / phi(z)``, whose size (the Mills ratio,
    p <= 1/2 here) is at most sqrt(pi / 2) < 1.26; scipy's ``ndtri_exp`` adds at most
    1e-14 (1 + |z|) (checked against 60-digit arithmetic in tests/noise/test_gdp.py).
    """
    from scipy.special import ndtri_exp

    s2 = 2.0 * sigma * sigma
    n = math.ceil(sigma * math.sqrt(2.0 * 746.0)) + 2
    if n > _MAX_TERMS:
        return None
    x = np.arange(n, dtype=np.float64)
    terms = np.exp(-(x * x) / s2)
    tails = np.cumsum(terms[::-1])[::-1]  # tails[u] = sum_{x >= u} terms[x], small end first
    log_z = math.log(1.0 + 2.0 * float(tails[1])) if n > 1 else 0.0
    with np.errstate(divide="ignore"):  # underflowed tails: log 0 = -inf, never kept
        log_p = np.log(tails[1:]) - log_z  # log P[X >= u], u = 1 .. n - 1
    keep = int(np.count_nonzero(log_p >= math.log(_MIN_TAIL)))
    if keep < 2:
        return None
    g = -ndtri_exp(log_p[:keep])
    eta = (2.0 * n + 4500.0) * _U * (1.0 + 1e-6)
    err = 1.26 * eta + 1e-14 * (1.0 + float(np.max(np.abs(g))))
    return g, err


@lru_cache(maxsize=4096)
def discrete_mu(sigma: float, shift: int) -> float | None:
    """A mu for which N_Z(0, sigma^2) and N_Z(shift, sigma^2) are mu-GDP (both orders), or None
    when this certifier cannot say (sigma beyond about 13,500, or a shift beyond the window).

    Precondition: ``sigma`` > 0 finite; ``shift`` a positive integer.
    Guarantee: with X ~ N_Z(0, sigma^2), P the law of X and Q of X + shift, the trade-off
    curve T(P, Q) lies above G_mu at every vertex checked, and below it by at most
    :data:`MAX_TAIL_DEFICIT` anywhere (the residual the docs discuss); T(Q, P) is the same
    curve (X and -X have one law). Public inputs only, so caching is safe.

    Method. Q/P = exp((2 shift x - shift^2) / 2 sigma^2) increases with x, so by
    Neyman-Pearson T(P, Q) is the piecewise-linear curve through the vertices
    ``(a_t, b_t) = (P[X >= t], P[X < t - shift])``, t integer. ``G_mu(a) <= b`` iff
    ``mu >= g(t) - g(t - shift)``, with ``g(t) = z(P[X >= t])`` (z the upper standard normal
    quantile; for the continuous Gaussian g(t) = t / sigma and the bound is shift / sigma).
    G_mu is convex, so above the vertices means above the chords between them. g(t) =
    -g(1 - t) by symmetry, so only tails P[X >= u], u >= 1, are computed
    (:func:`_gaussianised_tails`, with a float error bound err); mu is the largest difference
    over every t whose two tails are at least 1e-290, plus 2 err, times 1 + 1e-9. *The rest*:
    for a <= a_hi (the last checked vertex), T >= T(a_hi) >= G_mu(a_hi) >= G_mu(a) -
    (1 - G_mu(a_hi)), and ``1 - G_mu(a_hi) = Phi(-(g(t_hi) - mu))``; symmetrically at the
    other end, ``Phi(-g(t_hi - shift) - mu)``. Both are computed and must stay below
    :data:`MAX_TAIL_DEFICIT` (they are near 1e-300).
    """
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError("sigma must be a finite number > 0")
    if isinstance(shift, bool) or not isinstance(shift, int) or shift < 1:
        raise ValueError("shift must be a positive integer")
    found = _gaussianised_tails(float(sigma))
    if found is None:
        return None
    g_pos, err = found
    u_hi = g_pos.size
    if shift >= u_hi:
        return None
    # g over t = 1 - u_hi .. u_hi: index i <-> t = i + 1 - u_hi
    g = np.concatenate((-g_pos[::-1], g_pos))
    worst = float(np.max(g[shift:] - g[:-shift]))
    mu = (max(worst, 0.0) + 2.0 * err) * ROUND_UP
    deficit = max(_log_ndtr(-(float(g_pos[-1]) - mu)),
                  _log_ndtr(-float(g_pos[u_hi - 1 - shift]) - mu))
    if deficit > math.log(MAX_TAIL_DEFICIT):
        return None
    return mu


def certifies(sigma: float, shift: int, mu: float) -> bool:
    """Whether this certifier proves N_Z(0, sigma^2) over ``shift`` mu-GDP (the claim a caller
    would make): ``mu`` at least :func:`discrete_mu`'s. The continuous value shift / sigma is
    refused at every sigma (the discrete law dips below G_(shift/sigma) at its centre)."""
    least = discrete_mu(sigma, shift)
    return least is not None and mu >= least


def gaussian_mu(sigma: float, l2_squared: int) -> float | None:
    """The mu of N_Z(0, sigma^2) on every coordinate of an integer vector whose move between
    neighbours has squared L2 norm at most ``l2_squared``; None when not certified.

    Precondition: ``sigma`` > 0; ``l2_squared`` a positive integer.
    Guarantee: the measurement is mu-GDP (up to :func:`discrete_mu`'s residual). A move
    (d_1, d_2, ...) has |d_j| <= D = isqrt(l2_squared) and sum d_j^2 <= l2_squared; its
    coordinates are independent, so it is sqrt(sum mu(d_j)^2)-GDP (DRS Cor. 3.3), and with
    k = max over d <= D of discrete_mu(sigma, d) sigma / d that is at most
    k sqrt(l2_squared) / sigma. None when D exceeds :data:`MAX_SHIFT` or a shift is not
    certified (large sums in grid steps: the gdp filter then refuses the release).
    """
    if isinstance(l2_squared, bool) or not isinstance(l2_squared, int) or l2_squared < 1:
        raise ValueError("l2_squared must be a positive integer")
    top = math.isqrt(l2_squared)
    if top > MAX_SHIFT:
        return None
    ratio = 0.0
    for d in range(1, top + 1):
        mu = discrete_mu(float(sigma), d)
        if mu is None:
            return None
        ratio = max(ratio, mu * sigma / d)
    return ratio * math.sqrt(l2_squared) / sigma * ROUND_UP
