"""The GDP budget filter through the real ledger file (dpsql/accounting/filters.py, ``gdp``).

Each release's mu is chosen adaptively (after seeing what was accepted); every decision must
equal the exact rule sum mu_i^2 <= mu_B^2 (Smith and Thakurta's filter) computed alongside, the
last charge is sized to land exactly on the total (accepted) and the next representable mu is
refused, also after reopening the file. A release without a mu (Laplace, smoothed) is refused
before anything is written; a version-4 file is upgraded to version 5 in place.
"""

from __future__ import annotations

import math
import random
import sqlite3
from fractions import Fraction

import pytest

from dpsql.accounting import Ledger
from dpsql.accounting.curves import ALPHAS, PrivacyCurve, _laplace_curve, release_curve
from dpsql.accounting.filters import ROUND_UP_COST, BudgetFilter
from dpsql.accounting.schema import _V1_TO_V2, _V2_TO_V3, _V3_TO_V4, SCHEMA_V1
from dpsql.errors import BudgetExhaustedError, NotSupportedError, ProgrammingError
from dpsql.noise.gdp import gdp_budget, gdp_delta
from tests.accounting.helpers import DB


def gauss(mu: float) -> PrivacyCurve:
    """A Gaussian release's curve with this mu (rho of the continuous Gaussian)."""
    rho = mu * mu / 2.0
    return PrivacyCurve(tuple(rho * a for a in ALPHAS), rho, mu=mu)


def charge(book: Ledger, curve: PrivacyCurve | None) -> int:
    return book.charge(DB, "alice", fingerprint="q", epsilon=0.01, delta=1e-9,
                       mechanism="discrete_gaussian", curve=curve)


def n_charges(path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM charges").fetchone()[0])
    finally:
        conn.close()


def cost(mu: float) -> Fraction:
    return Fraction(mu * mu * ROUND_UP_COST)


def largest_fitting(rest: Fraction) -> float:
    """The largest float mu whose charged cost is at most ``rest``."""
    lo, hi = 0.0, math.sqrt(float(rest)) * 1.001
    while math.nextafter(lo, math.inf) < hi:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if cost(mid) <= rest else (lo, mid)
    return lo


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gdp_filter_refuses_exactly_at_the_boundary_under_adaptive_mus(tmp_path, seed):
    path = tmp_path / "l.sqlite"
    rng = random.Random(seed)
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 1e-6, filter="gdp")
        status = book.status(DB, "alice")
        assert (status.filter, status.alpha) == ("gdp", None)
        total = status.filter_total
        mu_b = gdp_budget(1.0, 1e-6)
        assert total <= mu_b * mu_b and total == pytest.approx(mu_b * mu_b, rel=1e-8)
        spent = Fraction(0)
        mu = 0.05
        accepted_any = 0
        for _ in range(60):
            expected = spent + cost(mu) <= Fraction(total)
            try:
                charge(book, gauss(mu))
                accepted = True
            except BudgetExhaustedError:
                accepted = False
            assert accepted == expected
            if accepted:
                spent += cost(mu)
                accepted_any += 1
            # adaptive: the next mu depends on what the ledger answered
            mu = rng.choice([0.01, 0.03, 0.05, 0.1]) if accepted else mu / 3
        assert accepted_any > 5 and spent > Fraction(0.9 * total)
        assert book.status(DB, "alice").filter_spent == pytest.approx(float(spent), rel=1e-12)
        rest = Fraction(total) - spent
        last = largest_fitting(rest)
        charge(book, gauss(last))  # lands on the total (within one float step of mu)
        over = math.nextafter(last, math.inf)
        while cost(over) <= rest:
            over = math.nextafter(over, math.inf)
        before = n_charges(path)
        with pytest.raises(BudgetExhaustedError, match=r"GDP filter.*Nothing was charged"):
            charge(book, gauss(over))
        assert n_charges(path) == before
    with Ledger(path, create=False) as book:  # the state is the file's, not the object's
        status = book.status(DB, "alice")
        assert status.filter_remaining < 1e-15 and status.epsilon_remaining < 1e-6
        with pytest.raises(BudgetExhaustedError):
            charge(book, gauss(over))
        # a release of public measurements only spends nothing and still fits
        charge(book, release_curve([]))


def test_100_unit_gaussian_counts_fit_only_above_the_exact_composition(tmp_path):
    # the filter admits 100 releases of mu = 1/sigma iff 100/sigma^2 <= mu_B^2: sigma 42 fails
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 1e-6, filter="gdp")
        with pytest.raises(BudgetExhaustedError):
            for _ in range(100):
                charge(book, gauss(1 / 42.0))
        assert n_charges(path) < 100
        book.reset(DB, "alice")
        for _ in range(100):
            charge(book, gauss(1 / 42.25))
    assert gdp_delta(10 / 42.25, 1.0) <= 1e-6 < gdp_delta(10 / 42.0, 1.0)


def test_a_release_without_mu_is_refused_before_the_charge(ledger, tmp_path):
    ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="gdp")
    for curve in (_laplace_curve([0.1]), None,
                  PrivacyCurve(tuple(0.01 * a for a in ALPHAS), 0.01)):  # zCDP but no mu
        with pytest.raises(NotSupportedError, match=r"GDP filter.*mechanism=.gaussian."):
            charge(ledger, curve)
    status = ledger.status(DB, "alice")
    assert status.history == () and status.filter_spent == 0.0


def test_changing_to_gdp_needs_every_counting_charge_to_have_a_mu(ledger):
    ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="zcdp")
    charge(ledger, gauss(0.05))
    ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="gdp")  # the Gaussian charge converts
    assert ledger.status(DB, "alice").filter_spent == pytest.approx(0.0025, rel=1e-9)
    ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="zcdp")
    charge(ledger, _laplace_curve([0.1]))
    with pytest.raises(ProgrammingError, match=r"GDP filter can read.*budget reset"):
        ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="gdp")
    assert ledger.status(DB, "alice").filter == "zcdp"
    with pytest.raises(ProgrammingError, match="0 < delta < 1"):
        ledger.set_budget(DB, "alice", 1.0, 0.0, filter="gdp")
    with pytest.raises(ProgrammingError, match="takes none"):
        BudgetFilter.checked("gdp", 22.0, 1.0, 1e-6)


def test_the_display_converts_the_spending_by_drs(ledger):
    ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="gdp")
    status = ledger.status(DB, "alice")
    # with nothing spent, the largest Gaussian release that fits is the whole budget
    assert status.epsilon_remaining == pytest.approx(1.0, rel=1e-6)
    charge(ledger, gauss(0.1))
    status = ledger.status(DB, "alice")
    rule = BudgetFilter("gdp", None, 1.0, 1e-6)
    eps = rule.epsilon_at(status.filter_spent)
    assert gdp_delta(0.1, eps) <= 1e-6 * (1 + 1e-6) and 0.2 < eps < 0.6
    remaining_mu = math.sqrt(status.filter_total - status.filter_spent)
    assert gdp_delta(remaining_mu, status.epsilon_remaining) == pytest.approx(1e-6, rel=1e-4)
    assert status.delta_remaining == 1e-6


def test_a_version_4_file_is_upgraded_to_5_and_keeps_its_budgets(tmp_path):
    from dpsql.accounting import database_identity

    path = tmp_path / "v4.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA_V1 + _V1_TO_V2 + _V2_TO_V3 + _V3_TO_V4)
    conn.execute(f"PRAGMA application_id={0x64704C64}")
    conn.execute("PRAGMA user_version=4")
    db = database_identity(DB)
    conn.execute("INSERT INTO budgets VALUES (?, 'alice', ?, ?, 0, 0, 'T0', 'zcdp', NULL)",
                 (db, 10**12, 10**6))
    conn.execute("INSERT INTO budgets VALUES (?, 'bob', ?, ?, 0, 0, 'T0', 'renyi', 22.0)",
                 (db, 10**12, 10**6))
    with pytest.raises(sqlite3.IntegrityError):  # version 4 cannot hold a gdp budget
        conn.execute("UPDATE budgets SET filter = 'gdp' WHERE analyst = 'alice'")
    conn.close()
    with Ledger(path) as book:
        assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 5
        assert book.status(DB, "alice").filter == "zcdp"
        assert (book.status(DB, "bob").filter, book.status(DB, "bob").alpha) == ("renyi", 22.0)
        charge(book, gauss(0.05))
        book.set_budget(DB, "alice", 1.0, 1e-6, filter="gdp")
        assert book.status(DB, "alice").filter == "gdp"
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError):  # the CHECK still names the filters
        conn.execute("UPDATE budgets SET filter = 'pld'")
    conn.close()
