"""Composition theorems (pure functions): what a sequence of charges adds up to.

Inputs are sequences of (epsilon_i, delta_i); every function returns (epsilon, delta) such that
the k-fold adaptive composition of mechanisms with those parameters is (epsilon, delta)-DP.

:func:`basic_composition` is what the ledger enforces by default (a budget may use a Rényi or
zCDP filter instead: :mod:`dpsql.accounting.filters`): it stays valid when the analyst chooses
each (epsilon, delta) adaptively (it is a valid privacy *filter*). The advanced
(Dwork-Rothblum-Vadhan) and optimal (Kairouz-Oh-Viswanath) bounds are computed for reporting
only: those theorems assume the sequence of parameters is fixed in advance; with adaptively
chosen parameters they need the filter versions of Rogers-Roth-Ullman-Vadhan (2016), which we do
not enforce.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext

from dpsql.accounting.units import _DECIMAL
from dpsql.errors import ProgrammingError

# Relative slack added to computed KOV deltas so floating-point error (lgamma, exp of logs, ~1e-12
# relative for k ~ 1e4) can only make a reported delta larger, never smaller.
_KOV_DELTA_SLACK = 1e-9


def _pairs(charges: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    for eps, dlt in charges:
        eps, dlt = float(eps), float(dlt)
        if not (math.isfinite(eps) and eps >= 0 and 0 <= dlt <= 1):
            raise ProgrammingError(f"invalid charge (epsilon={eps!r}, delta={dlt!r})")
        out.append((eps, dlt))
    return out


def _check_delta_prime(delta_prime: float) -> float:
    delta_prime = float(delta_prime)
    if not 0 < delta_prime < 1:
        raise ProgrammingError(f"delta' must be in (0, 1), got {delta_prime!r}")
    return delta_prime


def _one_minus_prod_one_minus(deltas: Iterable[float]) -> float:
    """1 - prod(1 - d) computed in log space (no cancellation for tiny d, no underflow)."""
    # max() turns -0.0 into 0.0 for display
    return max(0.0, -math.expm1(math.fsum(math.log1p(-d) if d < 1 else -math.inf for d in deltas)))


def basic_composition(charges: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Basic composition: (sum epsilon_i, sum delta_i).

    Valid even when each (epsilon_i, delta_i) is chosen adaptively; this is what the ledger
    enforces. Summed exactly in decimal (each float read as its repr, as the ledger does), then
    rounded once, so three charges of 0.1 give 0.3 like the ledger's ``epsilon_spent``.
    """
    pairs = _pairs(charges)
    with localcontext(_DECIMAL):
        eps = sum((Decimal(repr(e)) for e, _ in pairs), Decimal(0))
        dlt = sum((Decimal(repr(d)) for _, d in pairs), Decimal(0))
    return float(eps), min(1.0, float(dlt))


#: the largest x with math.exp(x) finite is about 709.78
_EXP_MAX = math.log(sys.float_info.max)


def advanced_composition(
    charges: Iterable[tuple[float, float]], delta_prime: float
) -> tuple[float, float]:
    """Advanced composition (Dwork-Rothblum-Vadhan 2010), heterogeneous form.

    Returns (sqrt(2 ln(1/delta') * sum eps_i^2) + sum eps_i (e^eps_i - 1), sum delta_i + delta').
    Homogeneous case: eps sqrt(2k ln(1/delta')) + k eps (e^eps - 1). Not capped at basic: for
    large epsilons it can exceed sum eps_i (compare with :func:`basic_composition`). An empty
    sequence composes to (0, 0).
    """
    delta_prime = _check_delta_prime(delta_prime)
    pairs = _pairs(charges)
    if not pairs:
        return 0.0, 0.0
    sum_sq = math.fsum(e * e for e, _ in pairs)
    # e^eps overflows past eps ~ 709.78 (math.expm1 raises): the bound is then infinite, as
    # it already is when the product overflows (the ledger allows one query epsilon 1e6)
    drift = math.fsum(e * math.expm1(e) if e < _EXP_MAX else math.inf for e, _ in pairs)
    eps = math.sqrt(2.0 * math.log(1.0 / delta_prime) * sum_sq) + drift
    return eps, min(1.0, math.fsum(d for _, d in pairs) + delta_prime)


def kov_bound(charges: Iterable[tuple[float, float]], delta_prime: float) -> tuple[float, float]:
    """Kairouz-Oh-Viswanath closed-form bound (their Theorem 3.5; the seeds' "自适应选择").

    For mechanisms (eps_i, delta_i) and slack delta' returns (eps', 1 - (1-delta') prod(1-delta_i))
    with eps' = min{ sum eps_i,
                     sum eps_i tanh(eps_i/2) + sqrt(2 sum eps_i^2 ln(e + sqrt(sum eps_i^2)/delta')),
                     sum eps_i tanh(eps_i/2) + sqrt(2 sum eps_i^2 ln(1/delta')) },
    using (e^x - 1)/(e^x + 1) = tanh(x/2). Valid for heterogeneous charges as stated; the
    homogeneous case is the seed formula with k eps (e^eps-1)/(e^eps+1) + eps sqrt(2k ln ...).
    """
    delta_prime = _check_delta_prime(delta_prime)
    pairs = _pairs(charges)
    if not pairs:
        return 0.0, 0.0
    total = math.fsum(e for e, _ in pairs)
    sum_sq = math.fsum(e * e for e, _ in pairs)
    drift = math.fsum(e * math.tanh(e / 2.0) for e, _ in pairs)
    second = drift + math.sqrt(2.0 * sum_sq * math.log(math.e + math.sqrt(sum_sq) / delta_prime))
    third = drift + math.sqrt(2.0 * sum_sq * math.log(1.0 / delta_prime))
    delta = _one_minus_prod_one_minus([delta_prime, *(d for _, d in pairs)])
    return min(total, second, third), delta


def _log1pexp(x: float) -> float:
    """log(1 + e^x) without overflow."""
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def kov_delta(epsilon: float, k: int, i: int) -> float:
    """The seed's delta_i for k-fold composition of epsilon-DP mechanisms (KOV Theorem 3.3).

    delta_i = sum_{l=0}^{i-1} C(k,l) (e^{(k-l)eps} - e^{(k-2i+l)eps}) / (1 + e^eps)^k,
    i in 0..floor(k/2). Computed term by term in log space (lgamma binomials,
    log(1 - e^{-2(i-l)eps}) via expm1, log-sum-exp), so k up to 1e5 neither overflows nor
    cancels; then inflated by a 1e-9 relative slack so rounding can only overstate it.
    """
    if not (isinstance(k, int) and k >= 0 and isinstance(i, int) and 0 <= i <= k // 2):
        raise ProgrammingError(f"need integers 0 <= i <= k/2, got k={k!r}, i={i!r}")
    if i == 0 or epsilon == 0:
        return 0.0
    log_norm = k * _log1pexp(epsilon)
    log_fact_k = math.lgamma(k + 1)
    logs = [
        log_fact_k - math.lgamma(ell + 1) - math.lgamma(k - ell + 1)
        + (k - ell) * epsilon
        + math.log(-math.expm1(-2.0 * (i - ell) * epsilon))
        - log_norm
        for ell in range(i)
    ]
    top = max(logs)
    value = math.exp(top) * math.fsum(math.exp(x - top) for x in logs)
    return min(1.0, value * (1.0 + _KOV_DELTA_SLACK))


def optimal_homogeneous_composition(
    epsilon: float, delta: float, k: int, delta_prime: float
) -> tuple[float, float]:
    """Optimal composition of k (epsilon, delta)-DP mechanisms (Kairouz-Oh-Viswanath Thm 3.3).

    The k-fold adaptive composition is ((k-2i) eps, 1 - (1-delta)^k (1-delta_i))-DP for every
    i in 0..floor(k/2), and these points are tight. Returns the smallest (k-2i) eps with
    delta_i <= delta' (found by bisection: delta_i grows with i), together with the delta it
    actually achieves, 1 - (1-delta)^k (1-delta_i) <= 1 - (1-delta)^k (1-delta'). The answer lies
    on the grid of multiples of epsilon, so it may exceed the continuous optimum by < 2 eps (and
    hence exceed :func:`kov_bound` by as much). k = 0 gives (0, 0).
    """
    delta_prime = _check_delta_prime(delta_prime)
    _pairs([(epsilon, delta)])
    if not isinstance(k, int) or k < 0:
        raise ProgrammingError(f"k must be a non-negative integer, got {k!r}")
    if k == 0:
        return 0.0, 0.0
    if epsilon == 0:
        return 0.0, _one_minus_prod_one_minus([delta] * k)
    lo, hi = 0, k // 2  # invariant: delta_lo <= delta'; answer in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if kov_delta(epsilon, k, mid) <= delta_prime:
            lo = mid
        else:
            hi = mid - 1
    delta_i = kov_delta(epsilon, k, lo)
    # multiply in decimal like basic_composition, so (100 - 52) * 0.1 reads 4.8, not 4.800...01
    eps = float(_DECIMAL.multiply(Decimal(k - 2 * lo), Decimal(repr(float(epsilon)))))
    return eps, _one_minus_prod_one_minus([*([delta] * k), delta_i])


@dataclass(frozen=True)
class PrivacyBound:
    """One composition result: the composition is (epsilon, delta)-DP, by the named method."""

    method: str
    epsilon: float
    delta: float
    note: str = ""


@dataclass(frozen=True)
class CompositionReport:
    """Basic, advanced (DRV), KOV closed-form and KOV optimal bounds for one charge history."""

    k: int
    delta_prime: float
    homogeneous: bool
    basic: PrivacyBound
    advanced: PrivacyBound
    kov_bound: PrivacyBound
    kov_optimal: PrivacyBound

    def bounds(self) -> tuple[PrivacyBound, ...]:
        """The four bounds in display order."""
        return (self.basic, self.advanced, self.kov_bound, self.kov_optimal)


def compose(charges: Sequence[tuple[float, float]], delta_prime: float = 1e-6) -> CompositionReport:
    """All composition bounds for ``charges`` with slack ``delta_prime``.

    Guarantee, for heterogeneous charges (not all (epsilon_i, delta_i) equal):
    ``basic``, ``advanced`` (DRV) and ``kov_bound`` (KOV Theorem 3.5) are computed from the
    individual charges; ``kov_optimal`` is the optimal homogeneous bound applied with
    epsilon = max eps_i and delta = max delta_i, a valid but looser upper bound (every
    (eps_i, delta_i)-DP mechanism is also (max eps, max delta)-DP); its note says so. The exact
    optimum for heterogeneous parameters is #P-hard (Murtagh-Vadhan 2016) and not attempted.
    The advanced and KOV figures assume the parameters were fixed in advance; the ledger
    enforces ``basic``, which holds for adaptively chosen parameters too.
    """
    delta_prime = _check_delta_prime(delta_prime)
    pairs = _pairs(charges)
    k = len(pairs)
    homogeneous = len(set(pairs)) <= 1
    eps_b, dlt_b = basic_composition(pairs)
    eps_a, dlt_a = advanced_composition(pairs, delta_prime)
    eps_k, dlt_k = kov_bound(pairs, delta_prime)
    if k == 0:
        eps_o, dlt_o, note = 0.0, 0.0, "no charges"
    elif homogeneous:
        eps_o, dlt_o = optimal_homogeneous_composition(pairs[0][0], pairs[0][1], k, delta_prime)
        note = f"exact for {k} charges of epsilon={pairs[0][0]!r}, delta={pairs[0][1]!r}"
    else:
        eps_max = max(e for e, _ in pairs)
        dlt_max = max(d for _, d in pairs)
        eps_o, dlt_o = optimal_homogeneous_composition(eps_max, dlt_max, k, delta_prime)
        note = (
            f"upper bound: heterogeneous charges treated as {k} charges of "
            f"epsilon={eps_max!r}, delta={dlt_max!r} (the maxima)"
        )
    return CompositionReport(
        k=k,
        delta_prime=delta_prime,
        homogeneous=homogeneous,
        basic=PrivacyBound("basic", eps_b, dlt_b, "sum of epsilons and deltas; enforced"),
        advanced=PrivacyBound(
            "advanced (DRV)", eps_a, dlt_a, "Dwork-Rothblum-Vadhan, sum of deltas + delta'"
        ),
        kov_bound=PrivacyBound(
            "KOV bound", eps_k, dlt_k, "Kairouz-Oh-Viswanath closed form (Thm 3.5)"
        ),
        kov_optimal=PrivacyBound("KOV optimal", eps_o, dlt_o, note),
    )
