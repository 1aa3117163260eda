"""Lower bounds on a mechanism's privacy loss from samples (the owner's privacy audit).

Given ``n`` outputs of a mechanism on a database D and ``n'`` on a neighbour D', every event E
(a set of outputs) gives two binomial proportions. Clopper-Pearson intervals, Bonferroni-corrected
over all the events looked at, hold simultaneously with probability at least ``confidence``, and
then:

* **max divergence** (seed 000): ``ln((P_lo[E] - delta) / Q_hi[E])`` is below the mechanism's
  true ``ln((P[E] - delta) / Q[E])``, which (epsilon, delta)-DP bounds by epsilon. A value
  above epsilon is a *proven* violation at that confidence.
* **Rényi divergence of order alpha** (seed 004) of the outputs bucketed into disjoint events:
  ``1/(alpha-1) ln sum_B P_lo[B]^alpha Q_hi[B]^(1-alpha)`` is below the bucketed divergence,
  which the data-processing inequality puts below the mechanism's own D_alpha (at most epsilon
  for epsilon-DP, at most alpha rho for rho-zCDP).

These are *lower* bounds: passing says only that these samples do not contradict the claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["LossBounds", "beta_quantile", "clopper_pearson", "loss_lower_bounds"]


def beta_quantile(q: float, a: float, b: float) -> float:
    """The ``q`` quantile of Beta(a, b) (scipy's ``betaincinv``, the inverse of the regularised
    incomplete beta function; lazy: the privacy audit alone loads scipy here)."""
    from scipy.special import betaincinv

    return float(betaincinv(a, b, q))


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The exact two-sided (1 - alpha) interval for a binomial proportion, k successes of n."""
    lower = 0.0 if k == 0 else beta_quantile(alpha / 2.0, k, n - k + 1)
    upper = 1.0 if k == n else beta_quantile(1.0 - alpha / 2.0, k + 1, n - k)
    return lower, upper


@dataclass(frozen=True)
class LossBounds:
    """What the samples prove, at ``confidence``, about one neighbouring pair."""

    max_divergence: float  # lower bound of the (delta-)max divergence, either direction
    worst_event: str  # the event attaining it, e.g. "output >= 12.5 (D vs D')"
    renyi: dict[float, float]  # order -> lower bound of the bucketed Rényi divergence
    events: int  # events looked at (the Bonferroni factor)
    confidence: float


def _thresholds(pooled: np.ndarray, count: int) -> np.ndarray:
    """Up to ``count`` distinct thresholds at the pooled samples' quantiles."""
    qs = np.quantile(pooled, np.linspace(0.0, 1.0, count + 2)[1:-1])
    return np.unique(qs)


def loss_lower_bounds(d_samples: np.ndarray, d_prime_samples: np.ndarray, *, delta: float = 0.0,
                      confidence: float = 0.99, thresholds: int = 30,
                      orders: tuple[float, ...] = (2.0, 8.0)) -> LossBounds:
    """Lower bounds on the privacy loss between two samples of scalar outputs (module doc).

    Events: the half-lines ``X >= t`` and ``X <= t`` at up to ``thresholds`` pooled quantiles,
    in both directions (the Rényi bound uses the buckets between thresholds). Precondition: the
    samples are independent runs of the mechanism on D and on D'.
    Guarantee: with probability at least ``confidence`` every returned value is at most the
    mechanism's true value (Clopper-Pearson, Bonferroni over every interval computed).
    """
    x = np.asarray(d_samples, dtype=np.float64)
    y = np.asarray(d_prime_samples, dtype=np.float64)
    if x.size == 0 or y.size == 0:
        raise ValueError("need samples on both databases")
    cuts = _thresholds(np.concatenate([x, y]), thresholds)
    # half-lines (2 per threshold and side) and buckets (len(cuts) + 1 per side)
    n_intervals = 4 * cuts.size + 2 * (cuts.size + 1)
    alpha = (1.0 - confidence) / n_intervals
    xs, ys = np.sort(x), np.sort(y)

    def counts(sorted_samples: np.ndarray, t: float) -> tuple[int, int]:
        below = int(np.searchsorted(sorted_samples, t, side="right"))   # X <= t
        at_or_above = sorted_samples.size - int(np.searchsorted(sorted_samples, t, side="left"))
        return below, at_or_above

    best, best_event = 0.0, "none"
    for t in cuts:
        cx, cy = counts(xs, t), counts(ys, t)
        for side, name in ((0, f"output <= {t:g}"), (1, f"output >= {t:g}")):
            directions = (((cx[side], xs.size), (cy[side], ys.size), "D vs D'"),
                          ((cy[side], ys.size), (cx[side], xs.size), "D' vs D"))
            for (kp, n_p), (kq, n_q), label in directions:
                p_lo = clopper_pearson(kp, n_p, alpha)[0] - delta
                q_hi = clopper_pearson(kq, n_q, alpha)[1]
                if p_lo > 0.0 and q_hi > 0.0 and math.log(p_lo / q_hi) > best:
                    best, best_event = math.log(p_lo / q_hi), f"{name} ({label})"
    edges = np.concatenate([[-np.inf], cuts, [np.inf]])
    hx = np.histogram(x, bins=edges)[0]
    hy = np.histogram(y, bins=edges)[0]
    bounds_x = [clopper_pearson(int(k), x.size, alpha) for k in hx]
    bounds_y = [clopper_pearson(int(k), y.size, alpha) for k in hy]
    renyi = {}
    for order in orders:
        value = 0.0
        for p_b, q_b in ((bounds_x, bounds_y), (bounds_y, bounds_x)):
            total = sum(p[0] ** order * q[1] ** (1.0 - order) for p, q in zip(p_b, q_b, strict=True)
                        if p[0] > 0.0)
            if total > 0.0:
                value = max(value, math.log(total) / (order - 1.0))
        renyi[order] = value
    return LossBounds(best, best_event, renyi, n_intervals, confidence)
