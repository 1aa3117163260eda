"""A release's privacy curve: its Rényi divergences at a public grid of orders, and its zCDP rho.

The ledger's Rényi and zCDP filters (:mod:`dpsql.accounting.filters`) charge a release by its
curve instead of its (epsilon, delta). The curve is computed here from the release's noise plans
(:class:`dpsql.noise.plan.NoisePlan`) alone, so it depends on the SQL, the public metadata and
the budget, never on data (docs/privacy.md section 5, "Budget filters"):

* a **pure Laplace** measurement (discrete Laplace counts, snapped Laplace sums) is
  epsilon_i-DP, so between neighbours its privacy loss lies in [-epsilon_i, epsilon_i]; among
  such pairs randomised response maximises every Rényi divergence
  (:func:`pure_dp_rdp`, proved in docs/privacy.md), and it is zCDP with rho = epsilon_i^2/2
  (Bun and Steinke 2016, Proposition 3.3). For a count of sensitivity 1 the bound is exact:
  the discrete Laplace law's privacy loss takes only the values +-epsilon_i;
* a **Gaussian** measurement (integer noise N_Z(0, sigma^2) over a move of squared L2 norm
  l2_squared in the same integer units) is rho = l2_squared / (2 sigma^2)-zCDP (Canonne,
  Kamath and Steinke 2020, Theorem 14), hence (alpha, rho alpha)-RDP at every order;
  it is also mu-GDP with the mu :func:`dpsql.noise.gdp.gaussian_mu` certifies for the discrete
  law (slightly above sqrt(l2_squared) / sigma), which the ``gdp`` filter charges; a release
  of Gaussian measurements has ``mu = sqrt(sum mu_j^2)``, any other release none (None);
* a release's measurements get independent noise: their divergences add (RDP and zCDP
  composition). A pure release is also (sum epsilon_i)-DP, so its RDP is at most
  randomised response's at the sum; the curve takes the smaller of the two;
* a **smoothed** release (a join of private tables: (epsilon, delta)-DP, not RDP) and **DP
  partition selection** have no curve (None): no finite Rényi divergence bounds them.

Every computed value is rounded UP by a relative 1e-9 (:data:`ROUND_UP`), so floating-point
error can only overstate a curve, like the ledger's fixed-point charges.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the ledger imports this module: keep numpy and the noise package out
    from dpsql.noise.partition import SelectionPlan
    from dpsql.noise.plan import NoisePlan

__all__ = ["ALPHAS", "PrivacyCurve", "gaussian_curve", "pure_curve", "pure_dp_rdp", "release_curve"]

#: The public grid of Rényi orders every curve is recorded at (a Rényi filter runs at one of
#: them, chosen when the owner sets the budget: dpsql.accounting.filters).
ALPHAS: tuple[float, ...] = (
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0, 14.0, 16.0, 18.0,
    20.0, 22.0, 24.0, 26.0, 28.0, 32.0, 40.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0)

#: Every computed divergence is multiplied by this (float error is ~1e-15 relative).
ROUND_UP = 1.0 + 1e-9


@dataclass(frozen=True)
class PrivacyCurve:
    """Upper bounds on a release's privacy loss: ``rdp[i]`` at order ``alphas[i]``, ``rho``
    (the release is rho-zCDP) and ``mu`` (mu-GDP, or None). Public: computed from epsilon
    shares and sigmas only."""

    rdp: tuple[float, ...]
    rho: float
    alphas: tuple[float, ...] = ALPHAS
    #: the release is mu-GDP (Gaussian releases only; None: no GDP certificate)
    mu: float | None = None

    def at(self, alpha: float) -> float:
        """The Rényi divergence bound at ``alpha`` (one of :attr:`alphas`; KeyError if not)."""
        for a, tau in zip(self.alphas, self.rdp, strict=True):
            if a == alpha:
                return tau
        raise KeyError(alpha)

    def to_json(self) -> str:
        data: dict[str, object] = {"alphas": list(self.alphas), "rdp": list(self.rdp),
                                   "rho": self.rho}
        if self.mu is not None:  # older curves have no "mu": the same JSON as before
            data["mu"] = self.mu
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> PrivacyCurve:
        """The curve :meth:`to_json` wrote; ValueError for anything else (a damaged ledger)."""
        data = json.loads(text)
        alphas = tuple(float(a) for a in data["alphas"])
        rdp = tuple(float(t) for t in data["rdp"])
        rho = float(data["rho"])
        mu = None if data.get("mu") is None else float(data["mu"])
        values = (*alphas, *rdp, rho, 0.0 if mu is None else mu)
        if (len(alphas) != len(rdp) or not all(math.isfinite(v) for v in values)
                or min((*rdp, rho), default=0.0) < 0 or min(alphas, default=2.0) <= 1
                or (mu is not None and mu < 0)):
            raise ValueError("not a privacy curve")
        return cls(rdp, rho, alphas, mu)


def _log_expm1(z: float) -> float:
    """log(e^z - 1) for z > 0, without overflow or cancellation."""
    return z + math.log1p(-math.exp(-z)) if z > 1.0 else math.log(math.expm1(z))


def _softplus(x: float) -> float:
    """log(1 + e^x) without overflow."""
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def pure_dp_rdp(alpha: float, epsilon: float) -> float:
    """The largest Rényi divergence of order ``alpha`` between the output laws of an
    epsilon-DP mechanism on two neighbours: randomised response's,
    ``log((e^(alpha eps) + e^((1-alpha) eps)) / (1 + e^eps)) / (alpha - 1)``.

    Precondition: ``alpha > 1``, ``epsilon >= 0``, both finite.
    Guarantee: an upper bound for every epsilon-DP pair (docs/privacy.md section 5), equal to
    the exact divergence of discrete Laplace noise of scale 1/epsilon over a shift of 1;
    computed as ``log1p(expm1((alpha-1) eps) expm1(alpha eps) e^(-(alpha-1) eps) / (1 + e^eps))
    / (alpha - 1)`` in log space (no cancellation for tiny epsilon, no overflow), NOT yet
    rounded up.
    """
    if not (alpha > 1 and math.isfinite(alpha) and epsilon >= 0 and math.isfinite(epsilon)):
        raise ValueError("need a finite alpha > 1 and a finite epsilon >= 0")
    if epsilon == 0:
        return 0.0
    u = (alpha - 1.0) * epsilon
    log_x = _log_expm1(u) + _log_expm1(alpha * epsilon) - u - _softplus(epsilon)
    return _softplus(log_x) / (alpha - 1.0)


def _laplace_curve(epsilons: Sequence[float]) -> PrivacyCurve:
    return _laplace_curve_of(tuple(epsilons))


# A session's releases repeat their epsilon shares (and the engine's tests thousands of times):
# each curve is 30 orders of log-space arithmetic, computed once per distinct tuple of shares.
# The cached curve is the same value (a frozen dataclass, the same function of the shares).
@functools.lru_cache(maxsize=512)
def _laplace_curve_of(epsilons: tuple[float, ...]) -> PrivacyCurve:
    total = math.fsum(epsilons)
    distinct = set(epsilons)  # a release's shares are mostly equal: each divergence once

    def order(a: float) -> float:
        at = {e: pure_dp_rdp(a, e) for e in distinct}
        return min(math.fsum(at[e] for e in epsilons), pure_dp_rdp(a, total)) * ROUND_UP
    rdp = tuple(order(a) for a in ALPHAS)
    return PrivacyCurve(rdp, math.fsum(e * e / 2.0 for e in epsilons) * ROUND_UP)


def pure_curve(epsilons: Sequence[float]) -> PrivacyCurve:
    """The curve of independent pure epsilon_i-DP releases (the pure Laplace case of
    :func:`release_curve`), for mechanisms that are not noise plans (dpsql.sample_aggregate)."""
    return _laplace_curve(epsilons)


def _gaussian_curve(rhos: Iterable[float], mus: Sequence[float | None] = ()) -> PrivacyCurve:
    rho = math.fsum(rhos) * ROUND_UP
    mu = (None if not mus or any(m is None for m in mus)
          else math.sqrt(math.fsum(m * m for m in mus if m is not None)) * ROUND_UP)
    return PrivacyCurve(tuple(rho * a * ROUND_UP for a in ALPHAS), rho, mu=mu)


def gaussian_plan_mu(plan: NoisePlan) -> float | None:
    """mu of one Gaussian measurement (:func:`dpsql.noise.gdp.gaussian_mu` at its sigma and
    L2 move), or None when no GDP certificate covers it."""
    from dpsql.noise.gdp import gaussian_mu  # numpy and scipy: only for real noise plans

    if plan.sigma is None or plan.l2_squared is None or not plan.sigma > 0:
        return None
    if plan.l2_squared == 0:
        return 0.0
    try:
        return gaussian_mu(plan.sigma, plan.l2_squared)
    except ValueError:
        return None


def gaussian_curve(rhos: Sequence[float]) -> PrivacyCurve:
    """The curve of independent rho_i-zCDP Gaussian releases (the Gaussian case of
    :func:`release_curve`), for mechanisms that are not noise plans (dpsql.sample_aggregate)."""
    return _gaussian_curve(rhos)


def gaussian_rho(plan: NoisePlan) -> float:
    """rho of one Gaussian measurement: ``l2_squared / (2 sigma^2)``, sigma and the move in
    the same integer units (grid steps for a sum)."""
    if plan.sigma is None or plan.l2_squared is None or not plan.sigma > 0:
        raise ValueError("not a Gaussian plan with a known L2 move")
    return plan.l2_squared / (2.0 * plan.sigma * plan.sigma)


def release_curve(plans: Sequence[NoisePlan], selection: SelectionPlan | None = None, *,
                  with_mu: bool = True) -> PrivacyCurve | None:
    """The privacy curve of releasing ``plans`` (one request's measurements, every block of
    a multi-release query included), or None when no Rényi/zCDP bound covers it.

    Precondition: ``plans`` are the request's noise plans, as charged by the release record.
    Guarantee: None for a smoothed measurement, DP partition selection (``selection``), or a
    measurement noised neither by pure Laplace nor by a Gaussian with a known L2 move; a
    request of public measurements only has the zero curve. Otherwise the release is
    (alpha, rdp_i)-RDP at every grid order and rho-zCDP, and a Gaussian release is mu-GDP
    when ``mu`` is not None (module docstring). Depends only on
    the plans' public fields (epsilon shares, sigmas, L2 moves). ``with_mu=False`` skips the
    GDP certificate (a numerical search, up to tens of ms for a new sigma): for a release no
    ledger charges, whose curve only supplies the record's rho.
    """
    if selection is not None:
        return None
    private = [p for p in plans if not (p.pure and p.scale == 0)]
    if not private:  # public measurements only: nothing spent under any filter
        return PrivacyCurve(tuple(0.0 for _ in ALPHAS), 0.0, mu=0.0)
    if any(not p.pure for p in private):
        return None
    gaussian = [p for p in private if p.sigma is not None]
    if gaussian and len(gaussian) != len(private):
        return None
    if gaussian:
        try:
            return _gaussian_curve([gaussian_rho(p) for p in gaussian],
                                   [gaussian_plan_mu(p) for p in gaussian] if with_mu else [])
        except ValueError:
            return None
    return _laplace_curve([p.epsilon for p in private])
