"""Empirical privacy loss of a black-box mechanism, for statistical tests (not a test module).

Usage (any test in the repository; run pytest from the repository root)::

    from tests.statistical.privacy_loss import empirical_privacy_loss, integer_buckets

    est = empirical_privacy_loss(run(D), run(D_prime), integer_buckets(80, 120))
    assert est.loss <= epsilon + est.margin          # the mechanism looks epsilon-DP
    assert est.loss > epsilon + est.margin           # ... or: a deliberate bug is caught

``run(D)`` is an array of independent outputs of the mechanism on database ``D`` (one scalar
output per run). What it estimates: ``max_B |ln(P[M(D) in B] / P[M(D') in B])|`` over the output
buckets ``B`` with enough mass in both samples. For pure ε-DP it suffices to look at single
buckets: the probability ratio of a union of buckets is at most the largest single-bucket ratio.

Limits, by design: rare outputs (bucket mass below ``min_count / n``) are invisible, so this
cannot detect a δ-sized failure or a bug confined to far tails; and a true loss slightly above
ε is only caught once it exceeds ``epsilon + margin``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["PrivacyLossEstimate", "empirical_privacy_loss", "integer_buckets"]


@dataclass(frozen=True)
class PrivacyLossEstimate:
    """Result of :func:`empirical_privacy_loss`.

    ``loss``: the largest ``|ln(p_hat(B) / p_hat'(B))|`` over counted buckets.
    ``margin``: sampling margin; if every bucket's true loss is at most ε then
    ``loss <= ε + margin`` except with probability about ``alpha``.
    ``buckets_used``: how many buckets met the mass rule. ``worst_bucket``: ``(lo, hi)`` of the
    bucket attaining ``loss`` (half-open ``[lo, hi)``; infinite ends for the overflow buckets).
    """

    loss: float
    margin: float
    buckets_used: int
    worst_bucket: tuple[float, float]

    def consistent_with(self, epsilon: float) -> bool:
        """True when the estimate does not contradict ε-DP: ``loss <= epsilon + margin``."""
        return self.loss <= epsilon + self.margin


def integer_buckets(lo: int, hi: int) -> np.ndarray:
    """Edges putting each integer ``lo..hi`` in its own bucket: ``lo - 1/2, ..., hi + 1/2``."""
    if hi < lo:
        raise ValueError("need lo <= hi")
    return np.arange(lo, hi + 2, dtype=np.float64) - 0.5


def empirical_privacy_loss(samples_d: np.ndarray, samples_d_prime: np.ndarray,
                           buckets: np.ndarray, *, min_count: int = 1000,
                           alpha: float = 1e-6) -> PrivacyLossEstimate:
    """Estimate the privacy loss between two output samples, with a sampling margin.

    Buckets: the strictly increasing ``edges`` ``e_0 < ... < e_k`` (``buckets``) define the
    half-open buckets ``[e_i, e_{i+1})`` plus the overflow buckets ``(-inf, e_0)`` and
    ``[e_k, inf)`` — ``k + 2`` buckets, every output lands in exactly one.

    Mass rule: a bucket counts only if BOTH samples have at least ``min_count`` outputs in it
    (default 1000: each count's relative standard error is then at most ~3%, and the normal
    approximation of its logarithm is accurate). If no bucket qualifies, ``ValueError``: there
    is nothing meaningful to compare, and a test must not pass vacuously.

    Margin: for bucket B with counts x of n and y of m, ``L_hat = ln(x/n) - ln(y/m)`` has
    standard error ``se ~ sqrt((1 - x/n)/x + (1 - y/m)/y)`` (delta method, binomial counts,
    plug-in estimates). With ``z`` the two-sided normal quantile at ``alpha / (k + 2)``
    (Bonferroni over ALL ``k + 2`` buckets, so the count does not depend on the data),
    ``margin = z * max_B se``. If the true loss of every bucket is at most ε, then every counted
    bucket satisfies ``|L_hat| <= ε + z se <= ε + margin`` except with probability about
    ``alpha`` — the false-alarm rate of a test asserting ``loss <= ε + margin``. The rate is
    approximate (normal approximation; buckets selected by observed counts).
    """
    a = np.asarray(samples_d, dtype=np.float64).ravel()
    b = np.asarray(samples_d_prime, dtype=np.float64).ravel()
    edges = np.asarray(buckets, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 1 or not np.all(np.diff(edges) > 0):
        raise ValueError("buckets must be a 1-D strictly increasing array of edges")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("samples must be finite")
    if not 0.0 < alpha < 1.0 or min_count < 1:
        raise ValueError("need 0 < alpha < 1 and min_count >= 1")
    n_buckets = edges.size + 1
    x = np.bincount(np.searchsorted(edges, a, side="right"), minlength=n_buckets)
    y = np.bincount(np.searchsorted(edges, b, side="right"), minlength=n_buckets)
    used = (x >= min_count) & (y >= min_count)
    if not used.any():
        raise ValueError(f"no bucket has {min_count} outputs in both samples: draw more "
                         "samples or use wider buckets")
    xu, yu = x[used].astype(np.float64), y[used].astype(np.float64)
    log_ratio = (np.log(xu) - math.log(a.size)) - (np.log(yu) - math.log(b.size))
    se = np.sqrt((1.0 - xu / a.size) / xu + (1.0 - yu / b.size) / yu)
    z = float(stats.norm.isf(alpha / (2.0 * n_buckets)))
    worst = int(np.argmax(np.abs(log_ratio)))
    index = int(np.flatnonzero(used)[worst])
    lo = -math.inf if index == 0 else float(edges[index - 1])
    hi = math.inf if index == n_buckets - 1 else float(edges[index])
    return PrivacyLossEstimate(loss=float(np.abs(log_ratio[worst])), margin=z * float(se.max()),
                               buckets_used=int(used.sum()), worst_bucket=(lo, hi))
