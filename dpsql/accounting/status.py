"""The ledger's value types: one committed charge, and a snapshot of one budget.

:class:`BudgetStatus` holds the basic-composition sums (exact fixed-point units) and, for a
budget under a Rényi or zCDP filter (:mod:`dpsql.accounting.filters`), the filter's total and
what the counting charges spent of it; its ``epsilon_remaining`` is then the largest epsilon of
a pure (Laplace) query that surely fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dpsql.accounting.composition import CompositionReport, compose
from dpsql.accounting.units import _delta_float, _eps_float

__all__ = ["BudgetStatus", "Charge", "overspent_totals"]


def overspent_totals(eps_total: int, dlt_total: int, eps_spent: int, dlt_spent: int
                     ) -> list[tuple[str, float, float]]:
    """(name, spent, total) of each total set below what was already spent (``dpsql budget
    set`` allows it; every further charge of that kind is then refused), amounts given in the
    ledger's exact whole units and returned as floats."""
    return [(name, spent, total) for name, spent, total, over in (
        ("epsilon", _eps_float(eps_spent), _eps_float(eps_total), eps_spent > eps_total),
        ("delta", _delta_float(dlt_spent), _delta_float(dlt_total), dlt_spent > dlt_total))
        if over]


@dataclass(frozen=True)
class Charge:
    """One committed charge. Amounts are the charged (rounded-up) fixed-point values."""

    analyst: str
    database: str
    fingerprint: str
    epsilon: float
    delta: float
    mechanism: str
    at: str  # UTC, ISO 8601 with microseconds
    id: int  # never reused within a ledger file


@dataclass(frozen=True)
class BudgetStatus:
    """A consistent snapshot of one principal's budget.

    The float fields are derived from exact integer units; ``epsilon_remaining`` and
    ``delta_remaining`` subtract the exact units (so after 300 charges of 0.01 against 3.0 the
    remainder is exactly 0.0, not a float residue). ``epsilon_spent`` and ``delta_spent`` are
    the counting charges' sums under every filter.

    Under a Rényi, zCDP or GDP filter (``filter``; ``alpha`` the Rényi order),
    ``filter_total`` is the filter's total and ``filter_spent`` the counting charges' sum in
    the filter's unit (Rényi divergence at alpha, rho, or mu^2; infinite when a charge has no
    readable curve). Then ``epsilon_remaining`` is the largest epsilon of one pure (Laplace)
    query that surely fits (a pure epsilon-DP release spends at most epsilon at any order,
    and epsilon^2/2 of rho); under the GDP filter, which admits Gaussian releases only, it is
    the epsilon at ``delta_total`` of the largest Gaussian release that still fits; and
    ``delta_remaining`` is ``delta_total`` while the filter has room (the filter spends
    no delta: it is part of the conversion), else 0.
    """

    epsilon_total: float
    delta_total: float
    epsilon_spent: float
    delta_spent: float
    history: tuple[Charge, ...] = ()
    # (epsilon_total, delta_total, epsilon_spent, delta_spent) in fixed units; None when built by
    # hand, in which case the remainders fall back to float subtraction
    _units: tuple[int, int, int, int] | None = field(default=None, repr=False, compare=False)
    filter: str = "basic"
    alpha: float | None = None
    filter_total: float = 0.0
    filter_spent: float = 0.0

    @property
    def filter_remaining(self) -> float:
        """The filter's total minus what the counting charges spent (0 for ``basic``)."""
        return max(0.0, self.filter_total - self.filter_spent)

    @property
    def epsilon_remaining(self) -> float:
        """Epsilon still available (never negative; see the class for the filters)."""
        if self.filter == "renyi":
            return self.filter_remaining
        if self.filter == "zcdp":
            return math.sqrt(2.0 * self.filter_remaining)
        if self.filter == "gdp":  # no Laplace query fits: the epsilon, at delta_total, of
            # the largest Gaussian release that still does (mu = sqrt(remaining))
            if self.filter_remaining <= 0:
                return 0.0
            from dpsql.noise.gdp import gdp_epsilon

            return gdp_epsilon(math.sqrt(self.filter_remaining), self.delta_total)
        if self._units is not None:
            return _eps_float(max(0, self._units[0] - self._units[2]))
        return max(0.0, self.epsilon_total - self.epsilon_spent)

    @property
    def delta_remaining(self) -> float:
        """Delta still available (never negative; see the class for the filters)."""
        if self.filter != "basic":
            return self.delta_total if self.filter_remaining > 0 else 0.0
        if self._units is not None:
            return _delta_float(max(0, self._units[1] - self._units[3]))
        return max(0.0, self.delta_total - self.delta_spent)

    @property
    def overspent(self) -> tuple[str, ...]:
        """The totals set below their spending, so that every query is refused: ('epsilon',
        'delta') under basic composition (:func:`overspent_totals`; floats compared when built
        by hand); under a Rényi, zCDP or GDP filter, which alone admits a charge there (the
        summed epsilon may pass its total while queries still fit: QA round 7), ('filter',)
        when the filter's spending is above its total."""
        if self.filter != "basic":
            return ("filter",) if self.filter_spent > self.filter_total else ()
        if self._units is not None:
            return tuple(name for name, _, _ in overspent_totals(*self._units))
        return tuple(name for name, spent, total in (
            ("epsilon", self.epsilon_spent, self.epsilon_total),
            ("delta", self.delta_spent, self.delta_total)) if spent > total)

    def composition(self, delta_prime: float = 1e-6) -> CompositionReport:
        """All composition bounds of this history at slack ``delta_prime`` (:func:`compose`)."""
        return compose([(c.epsilon, c.delta) for c in self.history], delta_prime)
