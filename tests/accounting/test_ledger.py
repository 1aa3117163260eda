"""The privacy-budget ledger (dpsql/accounting/ledger.py and store.py), on real SQLite files in
tmp_path: identity, the file format, budgets, charges, refunds, persistence and the cache.
"""

from __future__ import annotations

import os
import sqlite3
import threading

import pytest

from dpsql.accounting import BudgetStatus, Ledger, database_identity
from dpsql.errors import BudgetExhaustedError, InterfaceError, OperationalError, ProgrammingError
from tests.accounting.helpers import DB, spend

# -- identity ---------------------------------------------------------------------------------


def test_database_identity(tmp_path, monkeypatch):
    assert database_identity(None) == ":memory:"
    assert database_identity(":memory:") == ":memory:"
    assert database_identity("") == ":memory:"
    assert database_identity("s3://bucket/x") == "s3://bucket/x"
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "shop.duckdb"
    target.touch()
    os.symlink(target, tmp_path / "link.duckdb")
    real = os.path.realpath(target)
    assert database_identity("shop.duckdb") == real
    assert database_identity("./shop.duckdb") == real
    assert database_identity(tmp_path / "link.duckdb") == real
    assert database_identity(database_identity("shop.duckdb")) == real  # idempotent


def test_relative_and_absolute_paths_share_one_budget(tmp_path, monkeypatch, ledger):
    monkeypatch.chdir(tmp_path)
    ledger.set_budget("shop.duckdb", "alice", 1.0, 0.0)
    spend(ledger, 0.6, database=str(tmp_path / "shop.duckdb"))
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.6, database="./shop.duckdb")
    assert ledger.status("shop.duckdb", "alice").epsilon_spent == 0.6


# -- file format ------------------------------------------------------------------------------


def test_new_file_is_a_wal_ledger(tmp_path):
    path = tmp_path / "new.sqlite"
    Ledger(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA application_id").fetchone()[0] != 0
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"budgets", "charges", "cache"} <= tables
    conn.close()


def test_missing_file_without_create_and_directory_fail_closed(tmp_path):
    with pytest.raises(OperationalError, match="does not exist"):
        Ledger(tmp_path / "absent.sqlite", create=False)
    assert not (tmp_path / "absent.sqlite").exists()
    with pytest.raises(OperationalError, match="directory"):
        Ledger(tmp_path)


def test_in_memory_ledger_works():
    with Ledger(":memory:") as book:
        book.set_budget(DB, "alice", 1.0, 0.0)
        spend(book, 0.5)
        assert book.status(DB, "alice").epsilon_remaining == 0.5


def test_closed_ledger_raises_interface_error(tmp_path):
    book = Ledger(tmp_path / "l.sqlite")
    book.close()
    book.close()  # idempotent
    with pytest.raises(InterfaceError):
        book.status(DB, "alice")


# -- budgets and charges ----------------------------------------------------------------------


def test_no_budget_means_nothing_allowed(ledger):
    status = ledger.status(DB, "alice")
    assert (status.epsilon_total, status.delta_total) == (0.0, 0.0)
    assert status.epsilon_remaining == 0.0 and status.history == ()
    with pytest.raises(BudgetExhaustedError, match="no privacy budget"):
        spend(ledger, 0.0)  # not even a free query
    assert ledger.status(DB, "alice").history == ()


def test_set_charge_status(ledger):
    ledger.set_budget(DB, "alice", 1.0, 1e-6)
    first = ledger.charge(DB, "alice", fingerprint="fp1", epsilon=0.25, delta=1e-8,
                          mechanism="laplace")
    second = ledger.charge(DB, "alice", fingerprint="fp2", epsilon=0.5, delta=0.0,
                           mechanism="smooth-laplace")
    assert second > first
    status = ledger.status(DB, "alice")
    assert isinstance(status, BudgetStatus)
    assert status.epsilon_total == 1.0 and status.delta_total == 1e-6
    assert status.epsilon_spent == 0.75 and status.delta_spent == 1e-8
    assert status.epsilon_remaining == 0.25 and status.delta_remaining == 9.9e-7
    assert [c.id for c in status.history] == [first, second]
    c = status.history[0]
    assert (c.analyst, c.database, c.fingerprint, c.epsilon, c.delta, c.mechanism) == (
        "alice", database_identity(DB), "fp1", 0.25, 1e-8, "laplace"
    )
    assert c.at.endswith("+00:00")  # UTC
    # budgets are per (database, analyst)
    assert ledger.status(DB, "bob").epsilon_total == 0.0
    assert ledger.status("other.duckdb", "alice").epsilon_total == 0.0


def test_exhaustion_raises_and_spends_nothing(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    spend(ledger, 0.7)
    before = ledger.status(DB, "alice")
    with pytest.raises(BudgetExhaustedError) as info:
        spend(ledger, 0.5)
    assert isinstance(info.value, OperationalError)
    message = info.value.message
    assert "epsilon=0.5" in message and "epsilon=0.3" in message  # requested vs remaining
    assert "Nothing was charged" in message
    after = ledger.status(DB, "alice")
    assert after.history == before.history and after.epsilon_spent == 0.7
    spend(ledger, 0.3)  # the exact remainder is still available
    assert ledger.status(DB, "alice").epsilon_remaining == 0.0


def test_delta_budget_is_enforced_too(ledger):
    ledger.set_budget(DB, "alice", 10.0, 1e-6)
    spend(ledger, 0.1, 6e-7)
    with pytest.raises(BudgetExhaustedError, match="delta"):
        spend(ledger, 0.1, 6e-7)
    spend(ledger, 0.1, 4e-7)  # exactly the remaining delta
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.1, 1e-18)  # the smallest delta unit
    spend(ledger, 0.1, 0.0)  # pure-epsilon queries still fit
    status = ledger.status(DB, "alice")
    assert status.delta_spent == 1e-6 and status.delta_remaining == 0.0
    assert len(status.history) == 3


def test_pure_epsilon_budget_refuses_any_delta(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.1, 1e-12)


def test_set_budget_keeps_spending_and_may_lower_below_it(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    spend(ledger, 0.6)
    ledger.set_budget(DB, "alice", 2.0, 0.0)
    assert ledger.status(DB, "alice").epsilon_spent == 0.6
    ledger.set_budget(DB, "alice", 0.5, 0.0)
    status = ledger.status(DB, "alice")
    assert status.epsilon_remaining == 0.0
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 1e-12)


def test_a_total_lowered_below_the_spending_says_so_when_it_refuses(ledger):
    # a delta total set below the delta already spent refuses a pure query too: the refusal
    # says why, rather than "needs delta=0.0 but only delta=0.0 remain" alone
    ledger.set_budget(DB, "alice", 10.0, 1e-6)
    spend(ledger, 1.0, 1e-7)
    ledger.set_budget(DB, "alice", 10.0, 0.0)
    with pytest.raises(BudgetExhaustedError) as info:
        spend(ledger, 1.0)
    assert "the delta spent so far (1e-07) is above its total (0.0)" in str(info.value)
    assert "epsilon spent" not in str(info.value)
    # a smaller request cannot help: the owner must raise the budget
    assert str(info.value).endswith("the data owner must raise the budget.")
    assert ledger.status(DB, "alice").epsilon_spent == 1.0  # nothing charged


def test_reset_forgets_charges_keeps_budget_and_ids(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    ledger.set_budget(DB, "bob", 1.0, 0.0)
    spend(ledger, 1.0)
    last = spend(ledger, 0.5, analyst="bob")
    ledger.reset(DB, "alice")
    status = ledger.status(DB, "alice")
    assert status.history == () and status.epsilon_spent == 0.0 and status.epsilon_total == 1.0
    assert ledger.status(DB, "bob").epsilon_spent == 0.5  # other principals untouched
    assert spend(ledger, 1.0) > last  # ids are never reused


# -- refunds ----------------------------------------------------------------------------------


def test_refund_restores_spending_exactly_and_removes_the_charge(ledger):
    ledger.set_budget(DB, "alice", 1.0, 1e-6)
    kept = spend(ledger, 0.1, 1e-9)
    refunded = spend(ledger, 0.3, 3e-9)
    before = ledger.status(DB, "alice")
    assert before.epsilon_spent == 0.4 and [c.id for c in before.history] == [kept, refunded]
    ledger.refund(DB, "alice", refunded)
    after = ledger.status(DB, "alice")
    # exact: the refund subtracts the same integer units the charge added (no float residue)
    assert (after.epsilon_spent, after.delta_spent) == (0.1, 1e-9)
    assert after._units == (10**12, 10**12, 10**11, 10**9)
    assert [c.id for c in after.history] == [kept]  # only the refunded row is gone
    assert (after.epsilon_remaining, after.delta_remaining) == (0.9, 9.99e-7)
    ledger.refund(DB, "alice", kept)
    empty = ledger.status(DB, "alice")
    assert empty.history == () and empty._units == (10**12, 10**12, 0, 0)
    assert empty.epsilon_remaining == 1.0 and empty.delta_remaining == 1e-6
    assert spend(ledger, 1.0) > refunded  # refunded ids are not reused either


def test_refund_twice_fails_closed(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    spend(ledger, 0.2)
    charge_id = spend(ledger, 0.5)
    ledger.refund(DB, "alice", charge_id)
    with pytest.raises(OperationalError, match=f"charge {charge_id} .*cannot be refunded"):
        ledger.refund(DB, "alice", charge_id)
    status = ledger.status(DB, "alice")  # the failed refund changed nothing
    assert status.epsilon_spent == 0.2 and len(status.history) == 1


def test_refund_of_another_principals_charge_fails_closed(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    ledger.set_budget(DB, "bob", 1.0, 0.0)
    ledger.set_budget("other.duckdb", "alice", 1.0, 0.0)
    bobs = spend(ledger, 0.5, analyst="bob")
    spend(ledger, 0.25)
    elsewhere = spend(ledger, 0.75, database="other.duckdb")
    with pytest.raises(OperationalError, match="cannot be refunded"):
        ledger.refund(DB, "alice", bobs)  # bob's charge, refunded as alice
    with pytest.raises(OperationalError, match="cannot be refunded"):
        ledger.refund(DB, "alice", elsewhere)  # alice's charge, but on another database
    with pytest.raises(OperationalError, match="cannot be refunded"):
        ledger.refund(DB, "alice", elsewhere + 1000)  # no such charge at all
    assert ledger.status(DB, "bob").epsilon_spent == 0.5
    assert [c.id for c in ledger.status(DB, "bob").history] == [bobs]
    assert ledger.status(DB, "alice").epsilon_spent == 0.25
    assert ledger.status("other.duckdb", "alice").epsilon_spent == 0.75


def test_refund_after_reset_fails_closed(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    charge_id = spend(ledger, 0.5)
    ledger.reset(DB, "alice")
    with pytest.raises(OperationalError, match="cannot be refunded"):
        ledger.refund(DB, "alice", charge_id)
    assert ledger.status(DB, "alice").epsilon_spent == 0.0  # never negative


def test_refund_is_durable(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 0.0)
        kept = spend(book, 0.4)
        refunded = spend(book, 0.6)
        book.refund(DB, "alice", refunded)
    with Ledger(path) as book:
        status = book.status(DB, "alice")  # also cross-checks the running sums against the rows
        assert status.epsilon_spent == 0.4 and [c.id for c in status.history] == [kept]
        spend(book, 0.6)  # the refunded epsilon is available again
        with pytest.raises(BudgetExhaustedError):
            spend(book, 1e-12)
        with pytest.raises(OperationalError, match="cannot be refunded"):
            book.refund(DB, "alice", refunded)
    conn = sqlite3.connect(path)  # the row stays in the audit log, marked refunded
    (refunded_at,) = conn.execute("SELECT refunded_at FROM charges WHERE id = ?",
                                  (refunded,)).fetchone()
    assert refunded_at is not None
    conn.close()


def test_empty_analyst_rejected(ledger):
    with pytest.raises(ProgrammingError):
        ledger.set_budget(DB, "", 1.0, 0.0)


def test_charges_persist_across_reopen(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 0.0)
        spend(book, 0.4)
    with Ledger(path) as book:
        assert book.status(DB, "alice").epsilon_spent == 0.4
        with pytest.raises(BudgetExhaustedError):
            spend(book, 0.7)


def test_threads_sharing_one_ledger_never_overspend(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    results: list[int] = []

    def worker() -> None:
        for _ in range(30):
            try:
                spend(ledger, 0.01)
                results.append(1)
            except BudgetExhaustedError:
                results.append(0)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 100 and len(results) == 120
    assert ledger.status(DB, "alice").epsilon_remaining == 0.0


def test_tampered_running_total_fails_closed(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 0.0)
        spend(book, 0.5)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE budgets SET epsilon_spent = 0")
    conn.commit()
    conn.close()
    with Ledger(path) as book, pytest.raises(OperationalError, match="inconsistent"):
        book.status(DB, "alice")


# -- cache ------------------------------------------------------------------------------------


def test_cache_round_trip_and_isolation(ledger):
    assert ledger.cache_get(DB, "alice", "k") is None
    payload = b"\x00noisy\xffanswer"
    ledger.cache_put(DB, "alice", "k", payload)
    assert ledger.cache_get(DB, "alice", "k") == payload
    assert ledger.cache_get(DB, "bob", "k") is None
    assert ledger.cache_get("other.duckdb", "alice", "k") is None
    ledger.cache_put(DB, "alice", "k", b"second")  # last write wins
    assert ledger.cache_get(DB, "alice", "k") == b"second"
    with pytest.raises(ProgrammingError):
        ledger.cache_put(DB, "alice", "k", "not bytes")  # type: ignore[arg-type]


def test_cache_survives_reopen_and_reset(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        book.cache_put(DB, "alice", "select count(*)|0.1|0", b"42.5")
    with Ledger(path) as book:
        assert book.cache_get(DB, "alice", "select count(*)|0.1|0") == b"42.5"
        book.reset(DB, "alice")  # paid-for answers stay releasable
        assert book.cache_get(DB, "alice", "select count(*)|0.1|0") == b"42.5"


def test_status_reports_composition(ledger):
    ledger.set_budget(DB, "alice", 20.0, 1e-5)
    for _ in range(100):
        spend(ledger, 0.1)
    report = ledger.status(DB, "alice").composition(1e-6)
    assert report.basic.epsilon == 10.0
    assert report.advanced.epsilon == pytest.approx(6.3082, abs=1e-4)
    assert report.kov_optimal.epsilon == pytest.approx(4.8)


def test_the_status_names_the_totals_below_the_spending(ledger):
    # BudgetStatus.overspent, read by `dpsql budget set` / `show`: the exact units compared
    ledger.set_budget(DB, "alice", 3.0, 1e-6)
    for _ in range(300):
        spend(ledger, 0.01)
    assert ledger.status(DB, "alice").overspent == ()  # 300 x 0.01 is exactly 3.0, not above
    spend(ledger, 0.0, 1e-7)
    ledger.set_budget(DB, "alice", 2.0, 0.0)
    assert ledger.status(DB, "alice").overspent == ("epsilon", "delta")
