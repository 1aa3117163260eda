"""Budget filters: the rule the ledger checks, inside each charge's transaction, before it
commits a charge (docs/privacy.md section 5, "Budget filters").

The data owner picks one per budget (``dpsql budget set --filter``):

* ``basic`` (the default, and every budget made before schema version 4): the sums of the
  counting charges' epsilons and deltas stay within the totals (basic composition);
* ``renyi``: Feldman and Zrnic's Rényi filter at one order alpha of the public grid
  (:data:`dpsql.accounting.curves.ALPHAS`), fixed when the budget is set: the sum of the
  counting charges' Rényi divergences at alpha stays within
  ``B = rdp_budget(alpha, epsilon_total, delta_total)``, so the whole interaction, with every
  query's epsilon chosen adaptively, is (alpha, B)-RDP, hence (epsilon_total, delta_total)-DP
  (CKS 2020, Proposition 12);
* ``zcdp``: the sum of the counting charges' rho stays within the largest rho whose zCDP
  conversion gives (epsilon_total, delta_total) (a zCDP filter, valid under fully adaptive
  composition: Whitehouse, Ramdas, Rogers and Wu 2023);
* ``gdp``: for Gaussian releases only, the sum of the counting charges' mu_i^2 stays within
  mu_B^2, mu_B the largest mu whose GDP conversion gives (epsilon_total, delta_total)
  (:func:`dpsql.noise.gdp.gdp_budget`): Smith and Thakurta's GDP filter (Smith and Thakurta
  2022, "Fully Adaptive Composition for Gaussian Differential Privacy", arXiv:2210.17520),
  valid when each mu_i is chosen adaptively; the interaction is mu_B-GDP, hence
  (epsilon_total, delta_total)-DP (Dong, Roth and Su 2022, Corollary 2.13). It is the exact
  composition of Gaussians, which the zCDP conversion only bounds (issue #18's 100 counts:
  sigma 42.25 instead of 45.31).

A charge under ``renyi``, ``zcdp`` or ``gdp`` needs the release's curve
(:mod:`dpsql.accounting.curves`; under ``gdp`` its mu, which only Gaussian releases have); a
release without one (a smoothed release, DP partition selection; under ``gdp`` also a Laplace
release) is refused before anything is charged: an (epsilon, delta)-DP release has no
finite Rényi divergence, and composing it beside the filter by basic composition would need
a concurrent-composition argument dpsql does not make. Sums are exact
(:class:`fractions.Fraction` of the stored floats, which each curve already rounded up); the
filter's total is rounded down by :data:`ROUND_DOWN`.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from fractions import Fraction

from dpsql.accounting.curves import ALPHAS, PrivacyCurve
from dpsql.accounting.renyi import rdp_budget
from dpsql.errors import BudgetExhaustedError, NotSupportedError, OperationalError, ProgrammingError

__all__ = ["FILTERS", "BudgetFilter", "default_alpha"]

#: The filters an owner may choose; the first is the default.
FILTERS = ("basic", "renyi", "zcdp", "gdp")

#: A filter's total is multiplied by this (float error in rdp_budget is ~1e-15 relative).
ROUND_DOWN = 1.0 - 1e-9

#: A cost computed here from a stored curve (mu^2) is multiplied by this.
ROUND_UP_COST = 1.0 + 1e-12

# A charge counts against its budget while it is neither refunded nor cleared by a reset.
_LIVE = "refunded_at IS NULL AND reset_id IS NULL"


def default_alpha(epsilon: float, delta: float) -> float:
    """The grid order a Rényi filter gets when the owner names none: the one that fits the
    most small releases (the largest budget per unit of order, ``rdp_budget / alpha``: many
    releases of small epsilon each spend about ``alpha epsilon^2 / 2``). Public: the totals
    alone. For (1, 1e-6) it is 22."""
    return max(ALPHAS, key=lambda a: rdp_budget(a, epsilon, delta) / a)


@dataclass(frozen=True)
class BudgetFilter:
    """One budget's filter: its name, its order (``renyi`` only) and the totals it enforces."""

    name: str
    alpha: float | None
    epsilon_total: float
    delta_total: float

    @classmethod
    def checked(cls, name: str, alpha: float | None, epsilon: float,
                delta: float) -> BudgetFilter:
        """The filter the owner asked for, validated (ProgrammingError naming the fix): a
        known name; ``renyi``, ``zcdp`` and ``gdp`` need 0 < delta < 1 and epsilon > 0;
        ``alpha`` is for ``renyi`` only, one of the grid orders (default
        :func:`default_alpha`)."""
        if name not in FILTERS:
            raise ProgrammingError(
                f"unknown budget filter {name!r}: choose one of {', '.join(FILTERS)}")
        if name != "renyi" and alpha is not None:
            raise ProgrammingError(
                f"alpha is the Rényi filter's order; the {name} filter takes none")
        if name == "basic":
            return cls(name, None, epsilon, delta)
        if not (0 < delta < 1 and epsilon > 0):
            raise ProgrammingError(
                f"the {name} filter converts to (epsilon, delta)-DP and needs epsilon > 0 and "
                "0 < delta < 1 (e.g. --delta 1e-6); use --filter basic for a pure budget")
        if name == "renyi":
            if alpha is None:
                alpha = default_alpha(epsilon, delta)
            if alpha not in ALPHAS:
                raise ProgrammingError(
                    f"alpha {alpha!r} is not on dpsql's grid of Rényi orders; choose one of "
                    f"{', '.join(f'{a:g}' for a in ALPHAS)}")
            if rdp_budget(alpha, epsilon, delta) <= 0:
                raise ProgrammingError(
                    f"at alpha {alpha:g} the budget (epsilon {epsilon!r}, delta {delta!r}) "
                    "leaves no Rényi divergence to spend: choose a larger alpha (or leave it "
                    "out for the default)")
        return cls(name, alpha, epsilon, delta)

    @property
    def total(self) -> float:
        """The filter's total in its own unit (Rényi divergence at alpha, rho, or mu^2);
        basic: 0 (it enforces the epsilon and delta totals instead)."""
        if self.name == "renyi":
            assert self.alpha is not None
            return rdp_budget(self.alpha, self.epsilon_total, self.delta_total) * ROUND_DOWN
        if self.name == "zcdp":
            from dpsql.accounting.renyi import zcdp_budget

            return zcdp_budget(self.epsilon_total, self.delta_total) * ROUND_DOWN
        if self.name == "gdp":
            from dpsql.noise.gdp import gdp_budget

            mu = gdp_budget(self.epsilon_total, self.delta_total)
            return mu * mu * ROUND_DOWN
        return 0.0

    @property
    def label(self) -> str:
        if self.name == "renyi":
            return f"Rényi filter at alpha {self.alpha:g}"
        return {"zcdp": "zCDP filter", "gdp": "GDP filter"}.get(self.name, "basic composition")

    def cost(self, curve: PrivacyCurve | None) -> float | None:
        """What a release of ``curve`` spends under this filter (None: it has no curve, or
        no mu under ``gdp``). ``gdp`` charges mu^2, rounded up by :data:`ROUND_UP_COST`."""
        if curve is None:
            return None
        if self.name == "renyi":
            assert self.alpha is not None
            return curve.at(self.alpha)
        if self.name == "gdp":
            return None if curve.mu is None else curve.mu * curve.mu * ROUND_UP_COST
        return curve.rho

    def spent(self, conn: sqlite3.Connection, key: tuple[str, str]) -> Fraction:
        """The exact sum of the counting charges' costs (inside the caller's transaction);
        OperationalError for a counting charge whose curve is missing or unreadable (an
        older charge, or a damaged ledger: the filter cannot be evaluated)."""
        total = Fraction(0)
        for cid, text in conn.execute(
                f"SELECT id, curve FROM charges WHERE database = ? AND analyst = ? AND {_LIVE}",
                key):
            try:
                cost = self.cost(None if text is None else PrivacyCurve.from_json(text))
            except (ValueError, KeyError, TypeError):
                cost = None
            if cost is None:
                raise OperationalError(
                    f"charge {cid} of analyst '{key[1]}' has no privacy curve the {self.label} "
                    "can read, so the budget cannot be checked; the owner can clear the "
                    "spending with 'dpsql budget reset' or set --filter basic")
            total += Fraction(cost)
        return total

    def admit(self, conn: sqlite3.Connection, key: tuple[str, str],
              curve: PrivacyCurve | None) -> None:
        """Inside the charge's write transaction: raise unless a release of ``curve`` fits.

        Guarantee: returns iff spent + cost <= total exactly (``renyi``/``zcdp``/``gdp``;
        ``basic`` always returns: the ledger checks its sums itself); otherwise raises
        NotSupportedError (the release has no curve, or no mu under ``gdp``) or
        BudgetExhaustedError (it does not fit), naming amounts that depend on the requests'
        public curves only. Writes nothing.
        """
        if self.name == "basic":
            return
        cost = self.cost(curve)
        if cost is None and self.name == "gdp":
            raise NotSupportedError(
                "the owner set this budget to the GDP filter, which charges only Gaussian "
                "releases with a GDP certificate (mechanism='gaussian' counts and histograms; "
                "this release is Laplace, smoothed, selects groups from the data, or its "
                "Gaussian move is too large to certify). Nothing was charged; query with "
                "mechanism='gaussian', or ask the data owner for --filter zcdp or basic")
        if cost is None:
            raise NotSupportedError(
                f"the owner set this budget to the {self.label}, which charges a release by "
                "its Rényi or zCDP curve, and this release has none (a join of private tables "
                "is (epsilon, delta)-DP through smoothed sensitivity; groups selected from the "
                "data are too). Nothing was charged; ask the data owner for a budget with "
                "--filter basic, or query without the join / with a declared key domain")
        spent = self.spent(conn, key)
        total = self.total
        if spent + Fraction(cost) > Fraction(total):
            raise BudgetExhaustedError(
                f"privacy budget exhausted for analyst '{key[1]}' on database {key[0]} "
                f"({self.label}): this query spends {cost:.6g} but only "
                f"{max(0.0, float(Fraction(total) - spent)):.6g} of {total:.6g} remain. Nothing "
                "was charged; ask for a smaller epsilon or a larger budget.")

    def epsilon_at(self, spent: float) -> float:
        """For display: the epsilon at ``delta_total`` that a whole interaction of this
        filter's ``spent`` would certify (renyi: CKS Proposition 12 inverted; zcdp: its
        Corollary 13 by bisection; gdp: mu = sqrt(spent) by DRS Corollary 2.13), at most
        epsilon_total while spent <= total."""
        if self.name == "renyi":
            assert self.alpha is not None
            a = self.alpha
            eps = spent + (a * math.log1p(-1.0 / a) - math.log(a - 1.0)
                           - math.log(self.delta_total)) / (a - 1.0)
            return max(0.0, eps)
        if self.name == "zcdp":
            from dpsql.noise.gaussian import zcdp_delta

            lo, hi = 0.0, self.epsilon_total + spent + 1.0
            while zcdp_delta(spent, hi) > self.delta_total:
                hi *= 2.0
            for _ in range(100):
                mid = 0.5 * (lo + hi)
                lo, hi = (lo, mid) if zcdp_delta(spent, mid) <= self.delta_total else (mid, hi)
            return hi
        if self.name == "gdp":
            from dpsql.noise.gdp import gdp_epsilon

            return gdp_epsilon(math.sqrt(max(0.0, spent)), self.delta_total)
        raise ValueError("basic composition spends epsilon directly")
