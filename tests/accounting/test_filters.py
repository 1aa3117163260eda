"""Budget filters through the real ledger file (dpsql/accounting/filters.py, ledger.py).

The Rényi and zCDP filters must refuse exactly at their boundary while each query's epsilon is
chosen adaptively (after seeing what was accepted): every decision is compared with the pure
filters of dpsql.accounting.renyi run alongside, then the last charge is sized to land exactly
on the total (accepted) and one float above it (refused), and a reopened file agrees. Refusals
write nothing; refunds and resets give the room back; a version-3 file keeps basic budgets.
"""

from __future__ import annotations

import contextlib
import math
import random
import sqlite3
import threading
from fractions import Fraction

import pytest

from dpsql.accounting import Ledger
from dpsql.accounting.curves import ALPHAS, PrivacyCurve, _laplace_curve
from dpsql.accounting.filters import default_alpha
from dpsql.accounting.renyi import RenyiFilter, ZcdpFilter, rdp_budget, zcdp_budget
from dpsql.accounting.schema import _V1_TO_V2, _V2_TO_V3, SCHEMA_V1
from dpsql.errors import BudgetExhaustedError, NotSupportedError, ProgrammingError
from tests.accounting.helpers import DB

ALPHA = 22.0


def charge(book: Ledger, curve: PrivacyCurve | None, epsilon: float = 0.01) -> int:
    return book.charge(DB, "alice", fingerprint="q", epsilon=epsilon, delta=0.0,
                       mechanism="discrete_laplace", curve=curve)


def at(alpha_value: float, rho: float) -> PrivacyCurve:
    """A curve whose divergence at ALPHA is ``alpha_value`` (exactly) and whose rho is ``rho``."""
    return PrivacyCurve(tuple(alpha_value if a == ALPHA else 0.0 for a in ALPHAS), rho)


def n_charges(path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM charges").fetchone()[0])
    finally:
        conn.close()


def _boundary(book: Ledger, path, spent: Fraction, total: float, make) -> float:
    """Charge exactly up to ``total`` (accepted), then one float above it (refused); return
    that float."""
    rest = Fraction(total) - spent
    last = float(rest)
    if Fraction(last) > rest:
        last = math.nextafter(last, 0.0)
    charge(book, make(last))
    gap = rest - Fraction(last)  # >= 0, below one ulp of `last`
    over = math.nextafter(float(gap), math.inf)
    if Fraction(over) <= gap:
        over = math.nextafter(over, math.inf)
    before = n_charges(path)
    with pytest.raises(BudgetExhaustedError, match="Nothing was charged"):
        charge(book, make(over))
    assert n_charges(path) == before
    return over


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_renyi_filter_refuses_exactly_at_the_boundary_under_adaptive_epsilons(tmp_path, seed):
    path = tmp_path / "l.sqlite"
    rng = random.Random(seed)
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 1e-6, filter="renyi", alpha=ALPHA)
        status = book.status(DB, "alice")
        assert (status.filter, status.alpha) == ("renyi", ALPHA)
        total = status.filter_total
        assert total == pytest.approx(rdp_budget(ALPHA, 1.0, 1e-6), rel=1e-8)
        assert total <= rdp_budget(ALPHA, 1.0, 1e-6)
        reference = RenyiFilter(ALPHA, total)
        eps = 0.05
        for _ in range(80):
            curve = _laplace_curve([eps])
            expected = reference.charge(curve.at(ALPHA))
            try:
                charge(book, curve, eps)
                accepted = True
            except BudgetExhaustedError:
                accepted = False
            assert accepted == expected
            # adaptive: the next epsilon depends on what the ledger answered
            eps = rng.choice([0.02, 0.05, 0.1, 0.3]) if accepted else eps / 3
        assert sum(reference.history) > 0.9 * total  # the loop reached the boundary
        assert book.status(DB, "alice").filter_spent == pytest.approx(float(reference.spent),
                                                                    rel=1e-12)
        over = _boundary(book, path, reference.spent, total, lambda tau: at(tau, 0.0))
    with Ledger(path, create=False) as book:  # the state is the file's, not the object's
        status = book.status(DB, "alice")
        assert status.filter_remaining < 1e-15 and status.epsilon_remaining < 1e-15
        with pytest.raises(BudgetExhaustedError, match="Rényi filter at alpha 22"):
            charge(book, at(over, 0.0))


@pytest.mark.parametrize("seed", [4, 5])
def test_zcdp_filter_refuses_exactly_at_the_boundary_under_adaptive_epsilons(tmp_path, seed):
    path = tmp_path / "l.sqlite"
    rng = random.Random(seed)
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 2.0, 1e-6, filter="zcdp")
        total = book.status(DB, "alice").filter_total
        assert total == pytest.approx(zcdp_budget(2.0, 1e-6), rel=1e-8)
        reference = ZcdpFilter(total)
        eps = 0.1
        for _ in range(60):
            curve = _laplace_curve([eps])
            expected = reference.charge(curve.rho)
            try:
                charge(book, curve, eps)
                accepted = True
            except BudgetExhaustedError:
                accepted = False
            assert accepted == expected
            eps = rng.choice([0.05, 0.1, 0.2]) if accepted else eps / 2
        assert book.status(DB, "alice").filter_spent == pytest.approx(float(reference.spent),
                                                                    rel=1e-12)
        _boundary(book, path, reference.spent, total, lambda rho: at(0.0, rho))
        assert book.status(DB, "alice").epsilon_remaining < 1e-7  # sqrt(2 * < 1 ulp)


def test_the_filter_fits_more_small_queries_than_basic_composition(tmp_path):
    # issue #18's scenario at the ledger: epsilon 0.02 counts under (1, 1e-6)
    counts = {}
    for name in ("basic", "renyi"):
        with Ledger(tmp_path / f"{name}.sqlite") as book:
            book.set_budget(DB, "alice", 1.0, 1e-6, filter=name)
            n = 0
            try:
                while n < 1000:
                    charge(book, _laplace_curve([0.02]), 0.02)
                    n += 1
            except BudgetExhaustedError:
                pass
            counts[name] = n
    assert counts["basic"] == 50
    assert counts["renyi"] == 125  # at alpha 22 (default_alpha(1, 1e-6))
    assert default_alpha(1.0, 1e-6) == 22.0


def test_a_release_without_a_curve_is_refused_under_a_filter_and_charges_nothing(ledger):
    ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="renyi")
    with pytest.raises(NotSupportedError, match=r"has none.*Nothing was charged.*--filter basic"):
        charge(ledger, None)
    assert ledger.status(DB, "alice").history == ()
    ledger.set_budget(DB, "alice", 1.0, 1e-6)  # basic takes it, and records no curve
    charge(ledger, None)
    assert len(ledger.status(DB, "alice").history) == 1


def test_every_charge_records_its_curve_and_it_is_written_once(tmp_path):
    path = tmp_path / "l.sqlite"
    curve = _laplace_curve([0.1])
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 0.0)  # basic: the curve is recorded all the same
        cid = charge(book, curve, 0.1)
    conn = sqlite3.connect(path)
    (text,) = conn.execute("SELECT curve FROM charges WHERE id = ?", (cid,)).fetchone()
    assert PrivacyCurve.from_json(text) == curve
    with pytest.raises(sqlite3.IntegrityError, match="written once"):
        conn.execute("UPDATE charges SET curve = NULL WHERE id = ?", (cid,))
    conn.close()


def test_refunds_and_resets_give_the_filter_room_back(ledger):
    ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="zcdp")
    full = ledger.status(DB, "alice").filter_remaining
    cid = charge(ledger, at(0.0, full / 2))
    assert ledger.status(DB, "alice").filter_remaining == pytest.approx(full / 2)
    ledger.refund(DB, "alice", cid)
    assert ledger.status(DB, "alice").filter_remaining == full
    charge(ledger, at(0.0, full))
    ledger.reset(DB, "alice")
    assert ledger.status(DB, "alice").filter_remaining == full


def test_what_set_budget_refuses(ledger):
    with pytest.raises(ProgrammingError, match="0 < delta < 1"):
        ledger.set_budget(DB, "alice", 1.0, 0.0, filter="renyi")
    with pytest.raises(ProgrammingError, match="not on dpsql's grid"):
        ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="renyi", alpha=23.0)
    with pytest.raises(ProgrammingError, match="takes none"):
        ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="zcdp", alpha=22.0)
    with pytest.raises(ProgrammingError, match="unknown budget filter"):
        ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="pld")
    with pytest.raises(ProgrammingError, match="no Rényi divergence to spend"):
        ledger.set_budget(DB, "alice", 0.1, 1e-8, filter="renyi", alpha=2.0)
    assert ledger.budgets() == []  # nothing was written
    # a counting charge without a curve cannot be put under a filter: reset first
    ledger.set_budget(DB, "alice", 1.0, 1e-6)
    charge(ledger, None)
    with pytest.raises(ProgrammingError, match=r"no privacy curve.*budget reset"):
        ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="renyi")
    assert ledger.status(DB, "alice").filter == "basic"
    ledger.reset(DB, "alice")
    ledger.set_budget(DB, "alice", 1.0, 1e-6, filter="renyi")
    (event,) = [e for e in ledger.audit(events=True)
                if getattr(e, "kind", "") == "budget set"][-1:]
    assert event.detail == {"epsilon": 1.0, "delta": 1e-6, "filter": "renyi", "alpha": 22.0}


def test_a_version_3_file_keeps_its_budgets_under_basic_composition(tmp_path):
    # a version-3 file as dpsql 3 left it: a basic budget with one charge (no curve)
    path = tmp_path / "v3.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(SCHEMA_V1 + _V1_TO_V2 + _V2_TO_V3)
    conn.execute(f"PRAGMA application_id={0x64704C64}")
    conn.execute("PRAGMA user_version=3")
    conn.execute("INSERT INTO budgets VALUES (?, 'alice', ?, 0, ?, 0, 'T0')",
                 (str(DB_ID()), 10**12, 25 * 10**10))
    conn.execute("INSERT INTO charges (database, analyst, fingerprint, epsilon, delta, "
                 "mechanism, at) VALUES (?, 'alice', 'fp', ?, 0, 'laplace', 'T0')",
                 (str(DB_ID()), 25 * 10**10))
    conn.close()
    with Ledger(path) as book:
        assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 5
        status = book.status(DB, "alice")
        assert (status.filter, status.epsilon_spent, status.epsilon_remaining) == (
            "basic", 0.25, 0.75)
        with pytest.raises(ProgrammingError, match="no privacy curve"):
            book.set_budget(DB, "alice", 1.0, 1e-6, filter="renyi")


def DB_ID() -> str:
    from dpsql.accounting import database_identity

    return database_identity(DB)


def test_concurrent_writers_never_pass_the_filter(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 1e-6, filter="zcdp")
        total = book.status(DB, "alice").filter_total
    step = total / 37.5  # 37 charges fit, the 38th does not
    accepted: list[int] = []

    def worker() -> None:
        with Ledger(path, timeout=30) as mine:
            for _ in range(15):
                with contextlib.suppress(BudgetExhaustedError):
                    accepted.append(charge(mine, at(0.0, step)))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(accepted) == 37
