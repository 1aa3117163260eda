"""Rényi and zero-concentrated DP accounting, and the filters that stay valid adaptively (seed 004).

Pure functions; the ledger's filters (:mod:`dpsql.accounting.filters`, docs/privacy.md section
5, "Budget filters") use the conversions, and the filters here are their reference model in the
tests. What they give:

* :func:`discrete_laplace_rdp` -- the exact Rényi divergence of order alpha between two discrete
  Laplace laws of scale b shifted by an integer Delta (the noise dpsql's counts get), in closed
  form (geometric series over the three stretches k <= 0, 0 < k < Delta, k >= Delta).
* :func:`rdp_delta` -- the (epsilon, delta) that alpha-RDP of tau implies (Canonne, Kamath and
  Steinke 2020, Proposition 12; :func:`dpsql.noise.gaussian.zcdp_delta` is its zCDP case).
* :class:`RenyiFilter` -- Feldman and Zrnic's individual-privacy Rényi filter (NeurIPS 2021) at
  one order alpha fixed in advance: a sequence of mechanisms chosen adaptively, each with RDP
  tau_i at alpha, halted before the sum would pass the budget B, is (alpha, B)-RDP, hence
  (epsilon, rdp_delta)-DP. :class:`ZcdpFilter` is the same for zCDP (Whitehouse, Ramdas, Rogers
  and Wu 2023, fully adaptive composition).

Why not PLD/PRV accounting as a filter: numerical privacy-loss-distribution composition is tight
for a sequence fixed in advance, but it is not a valid filter when each mechanism's parameters
are chosen after seeing earlier answers (Honkela et al.), which is what analysts do. RDP and zCDP
filters are valid there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

__all__ = ["RenyiFilter", "ZcdpFilter", "best_laplace_scale", "discrete_laplace_rdp",
           "rdp_budget", "rdp_delta", "zcdp_budget"]


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def discrete_laplace_rdp(alpha: float, scale: float, shift: int = 1) -> float:
    """D_alpha(DLap(0, b) || DLap(shift, b)) for the pmf ``c q^|k|``, ``q = exp(-1/b)``.

    Precondition: ``alpha > 1``, ``scale > 0``, ``shift`` a non-negative integer.
    Guarantee: the exact divergence (symmetric in the two laws), from
    ``sum_k P(k)^a Q(k)^(1-a) = c [q^((1-a)D) / (1-q) + q^((1-a)D) sum_{k=1}^{D-1}
    q^((2a-1)k) + q^(aD) / (1-q)]``, computed in log space. A release whose integer values move
    by at most ``shift`` (per coordinate; add the coordinates' divergences for a vector) with
    noise of this scale is (alpha, returned value)-RDP.
    """
    if not (alpha > 1 and math.isfinite(alpha)):
        raise ValueError("alpha must be a finite number > 1")
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError("scale must be a finite number > 0")
    if isinstance(shift, bool) or not isinstance(shift, int) or shift < 0:
        raise ValueError("shift must be a non-negative integer")
    if shift == 0:
        return 0.0
    log_q = -1.0 / scale
    log_one_minus_q = math.log(-math.expm1(log_q))
    log_c = log_one_minus_q - math.log1p(math.exp(log_q))
    terms = [(1 - alpha) * shift * log_q - log_one_minus_q,
             alpha * shift * log_q - log_one_minus_q]
    terms += [(2 * alpha - 1) * k * log_q + (1 - alpha) * shift * log_q
              for k in range(1, shift)]
    return (log_c + _logsumexp(terms)) / (alpha - 1)


def rdp_delta(tau: float, alpha: float, epsilon: float) -> float:
    """The delta at ``epsilon`` of an (alpha, tau)-RDP mechanism (CKS 2020, Proposition 12):
    ``exp((alpha-1)(tau-epsilon)) (1 - 1/alpha)^alpha / (alpha - 1)``, capped at 1."""
    if not (alpha > 1 and tau >= 0 and epsilon >= 0):
        raise ValueError("need alpha > 1, tau >= 0, epsilon >= 0")
    log_delta = ((alpha - 1) * (tau - epsilon) + alpha * math.log1p(-1.0 / alpha)
                 - math.log(alpha - 1))
    return min(1.0, math.exp(log_delta))


def rdp_budget(alpha: float, epsilon: float, delta: float) -> float:
    """The largest RDP total tau at ``alpha`` that still gives (epsilon, delta)-DP (the
    inverse of :func:`rdp_delta`; 0 when even tau = 0 is not enough)."""
    if not (0 < delta < 1 and epsilon > 0 and alpha > 1):
        raise ValueError("need alpha > 1, epsilon > 0, 0 < delta < 1")
    tau = epsilon + (math.log(delta) + math.log(alpha - 1)
                     - alpha * math.log1p(-1.0 / alpha)) / (alpha - 1)
    return max(0.0, tau)


def zcdp_budget(epsilon: float, delta: float) -> float:
    """The largest rho whose zCDP conversion (CKS Corollary 13) gives (epsilon, delta)-DP,
    by bisection (to 1e-12 relative, rounded down)."""
    from dpsql.noise.gaussian import zcdp_delta

    if not (0 < delta < 1 and epsilon > 0):
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    lo, hi = 0.0, epsilon + 1.0
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        if zcdp_delta(mid, epsilon) <= delta:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class RenyiFilter:
    """Feldman-Zrnic's Rényi filter at one order ``alpha`` (fixed before the first query).

    ``charge(tau)`` accepts a mechanism with RDP ``tau`` at ``alpha`` (its parameters may have
    been chosen after every earlier answer) when the running total stays within the budget,
    and refuses it otherwise, charging nothing. Guarantee: the whole interaction is
    (alpha, budget)-RDP, hence (epsilon, delta)-DP for the (epsilon, delta) it was built from.
    """

    alpha: float
    budget: float
    #: exact running total (floats are exact fractions; their rounded sum could pass the budget)
    spent: Fraction = Fraction(0)
    history: list[float] = field(default_factory=list)

    @classmethod
    def for_dp(cls, alpha: float, epsilon: float, delta: float) -> RenyiFilter:
        return cls(alpha, rdp_budget(alpha, epsilon, delta))

    def allows(self, tau: float) -> bool:
        return tau >= 0 and self.spent + Fraction(tau) <= Fraction(self.budget)

    def charge(self, tau: float) -> bool:
        if not self.allows(tau):
            return False
        self.spent += Fraction(tau)
        self.history.append(tau)
        return True


@dataclass
class ZcdpFilter:
    """A zCDP filter: accepts mechanisms while the sum of their rho stays within ``budget``
    (valid under fully adaptive composition); (epsilon, delta)-DP by CKS Corollary 13."""

    budget: float
    spent: Fraction = Fraction(0)
    history: list[float] = field(default_factory=list)

    @classmethod
    def for_dp(cls, epsilon: float, delta: float) -> ZcdpFilter:
        return cls(zcdp_budget(epsilon, delta))

    def allows(self, rho: float) -> bool:
        return rho >= 0 and self.spent + Fraction(rho) <= Fraction(self.budget)

    def charge(self, rho: float) -> bool:
        if not self.allows(rho):
            return False
        self.spent += Fraction(rho)
        self.history.append(rho)
        return True


#: 1.5, 2, ..., 199.5: the orders :func:`best_laplace_scale` tries by default
_HALF_ORDERS = tuple(k / 2 for k in range(3, 400))


def best_laplace_scale(queries: int, epsilon: float, delta: float, *, shift: int = 1,
                       orders: tuple[float, ...] = _HALF_ORDERS) -> tuple[
                           float, float]:
    """The smallest discrete Laplace scale (and the order that gives it) at which ``queries``
    releases of sensitivity ``shift`` fit a Rényi filter built for (epsilon, delta)."""
    best = (math.inf, math.nan)
    for alpha in orders:
        budget = rdp_budget(float(alpha), epsilon, delta) / queries
        if budget <= 0:
            continue
        lo, hi = 1e-3, 1e9  # discrete_laplace_rdp decreases in the scale
        if discrete_laplace_rdp(float(alpha), hi, shift) > budget:
            continue
        while hi - lo > 1e-9 * hi:
            mid = math.sqrt(lo * hi)
            if discrete_laplace_rdp(float(alpha), mid, shift) <= budget:
                hi = mid
            else:
                lo = mid
        if hi < best[0]:
            best = (hi, float(alpha))
    return best
