"""Fixed-point amounts (dpsql/accounting/units.py), seen through the ledger that uses them:
charges round up, budgets round down, and sums are exact (no floating-point drift).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.accounting import DELTA_UNIT_EXPONENT, EPSILON_UNIT_EXPONENT, MAX_EPSILON, Ledger
from dpsql.accounting.units import _delta_float, _delta_units, _eps_float, _eps_units
from dpsql.errors import BudgetExhaustedError, ProgrammingError
from tests.accounting.helpers import DB, spend


def test_units_round_charges_up_and_budgets_down():
    assert (EPSILON_UNIT_EXPONENT, DELTA_UNIT_EXPONENT) == (12, 18)
    assert _eps_units(0.01, charge=True) == _eps_units(0.01, charge=False) == 10**10
    assert _eps_units(1e-13, charge=True) == 1 and _eps_units(1e-13, charge=False) == 0
    assert _delta_units(1e-19, charge=True) == 1 and _delta_units(1e-19, charge=False) == 0
    assert _delta_units(1, charge=True) == 10**18
    assert _eps_units(MAX_EPSILON, charge=False) == MAX_EPSILON * 10**12 < 2**63
    assert _eps_float(3 * 10**12) == 3.0 and _delta_float(10**9) == 1e-9
    with pytest.raises(ProgrammingError, match="epsilon must be <="):
        _eps_units(MAX_EPSILON + 1, charge=True)
    with pytest.raises(ProgrammingError, match="delta must be <= 1"):
        _delta_units(1.0000001, charge=False)


def test_fixed_point_is_exact_300_charges_of_a_cent(ledger):
    # Floats drift: adding 0.01 three hundred times gives 2.99999999999998, not 3.0 (a float
    # ledger would then admit a 301st charge of 1e-14; other sequences drift the other way).
    total = 0.0
    for _ in range(300):
        total += 0.01
    assert total != 3.0
    ledger.set_budget(DB, "alice", 3.0, 0.0)
    for _ in range(300):
        spend(ledger, 0.01)
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.01)
    status = ledger.status(DB, "alice")
    assert len(status.history) == 300
    assert status.epsilon_spent == 3.0 and status.epsilon_remaining == 0.0


def test_fixed_point_exact_for_tenths_and_tiny_deltas(ledger):
    ledger.set_budget(DB, "alice", 1.0, 1e-6)
    for _ in range(10):
        spend(ledger, 0.1, 1e-9)  # 10 x 0.1 = 1.0 exactly; 10 x 1e-9 of 1e-6
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.1)
    ledger.set_budget(DB, "bob", 0.0, 1e-6)
    for _ in range(1000):
        spend(ledger, 0.0, 1e-9, analyst="bob")  # 1000 x 1e-9 = 1e-6 exactly
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.0, 1e-9, analyst="bob")


def test_rounding_charges_up_and_budgets_down(ledger):
    # epsilon unit is 1e-12: a budget of 1 + 9e-13 floors to 1.0 ...
    ledger.set_budget(DB, "alice", 1.0000000000009, 0.0)
    assert ledger.status(DB, "alice").epsilon_total == 1.0
    # ... and a charge of 1e-13 costs a whole unit, 1e-12
    spend(ledger, 1e-13)
    assert ledger.status(DB, "alice").epsilon_spent == 1e-12
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 1.0)  # 1e-12 + 1.0 > 1.0
    spend(ledger, 1.0 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    budget=st.integers(min_value=0, max_value=5 * 10**12),
    amounts=st.lists(st.integers(min_value=1, max_value=10**12), min_size=1, max_size=40),
)
def test_fixed_point_matches_exact_rational_filter(tmp_path_factory, budget, amounts):
    """Whatever the amounts, the ledger admits exactly what exact rational arithmetic admits."""
    path = tmp_path_factory.mktemp("prop") / "l.sqlite"
    with Ledger(path) as book:
        book.set_budget(DB, "alice", float(Fraction(budget, 10**12)), 0.0)
        spent = Fraction(0)
        limit = Fraction(repr(float(Fraction(budget, 10**12))))
        for units in amounts:
            eps = float(Fraction(units, 10**12))
            exact = Fraction(repr(eps))  # the decimal number the float denotes
            if spent + exact <= limit:
                spend(book, eps)
                spent += exact
            else:
                with pytest.raises(BudgetExhaustedError):
                    spend(book, eps)
        assert Fraction(repr(book.status(DB, "alice").epsilon_spent)) == spent


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(-0.1, 0.0), (math.nan, 0.0), (math.inf, 0.0), (0.1, -1e-9), (0.1, 1.5), (2e6, 0.0),
     (True, 0.0), ("0.1", 0.0)],
)
def test_invalid_amounts_are_programming_errors(ledger, epsilon, delta):
    with pytest.raises(ProgrammingError):
        ledger.set_budget(DB, "alice", epsilon, delta)
    ledger.set_budget(DB, "alice", 1.0, 1e-6)
    with pytest.raises(ProgrammingError):
        spend(ledger, epsilon, delta)
    assert ledger.status(DB, "alice").history == ()
