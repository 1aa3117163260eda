"""The audit log (dpsql/accounting/audit.py): what every charge asked and released, refunds and
resets kept as history, on real ledger files."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal

import numpy as np
import pytest

from dpsql.accounting import AuditCharge, AuditEvent, AuditReset, Ledger, database_identity
from dpsql.accounting.audit import to_json
from dpsql.errors import OperationalError, ProgrammingError
from tests.accounting.helpers import DB


def ask(book: Ledger, sql: str, params: list, epsilon: float = 0.1, *, analyst: str = "alice",
        database: str = DB) -> int:
    return book.charge(database, analyst, fingerprint="fp", epsilon=epsilon, delta=0.0,
                       mechanism="laplace", sql=sql, params=params)


def test_to_json_is_exact_and_total():
    class Odd:
        def __repr__(self) -> str:
            return "Odd()"

    row = [None, True, 3, 2.5, float("nan"), float("-inf"), "é", Decimal("1.50"),
           dt.date(2024, 1, 31), dt.datetime(2024, 1, 31, 12, 0, 1), dt.time(1, 2),
           dt.timedelta(days=1), b"\x00\xff", uuid.UUID(int=1), [1, (2, 3)], {"a": 1},
           np.int64(7), np.float64(0.5), np.bool_(True), Odd()]
    assert json.loads(to_json(row)) == [
        None, True, 3, 2.5, {"$float": "nan"}, {"$float": "-inf"}, "é", {"$decimal": "1.50"},
        {"$date": "2024-01-31"}, {"$timestamp": "2024-01-31T12:00:01"}, {"$time": "01:02:00"},
        {"$interval": "1 day, 0:00:00"}, {"$bytes": "AP8="},
        {"$uuid": "00000000-0000-0000-0000-000000000001"}, [1, [2, 3]], {"$struct": {"a": 1}},
        7, 0.5, True, {"$repr": "Odd()", "$type": "Odd"}]
    assert to_json(0.1) == "0.1"  # floats round-trip exactly


def test_charge_and_release_are_recorded(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    cid = ask(ledger, "SELECT count(*) FROM t WHERE x = ?", [Decimal("2.5")], 0.25)
    (entry,) = ledger.audit()
    assert isinstance(entry, AuditCharge)
    assert (entry.id, entry.analyst, entry.database, entry.sql, entry.params) == (
        cid, "alice", database_identity(DB), "SELECT count(*) FROM t WHERE x = ?",
        [{"$decimal": "2.5"}])
    assert (entry.epsilon, entry.delta, entry.mechanism, entry.fingerprint) == (
        0.25, 0.0, "laplace", "fp")
    assert entry.released is None and entry.released_at is None and entry.state == "not released"
    assert entry.counts and entry.at.endswith("+00:00")
    ledger.record_release(DB, "alice", cid, [("a", 1.5), ("b", None)], columns=["k", "n"])
    (entry,) = ledger.audit()
    assert entry.released == {"columns": ["k", "n"], "rows": [["a", 1.5], ["b", None]]}
    assert entry.released_at is not None and entry.released_at >= entry.at
    assert entry.state == "released" and entry.counts


def test_a_release_and_its_cache_entry_are_written_together_or_not_at_all(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    cid = ask(ledger, "q", [])
    ledger.record_release(DB, "alice", cid, [(7,)], cache=("key", b"payload"))
    assert ledger.cache_get(DB, "alice", "key") == b"payload"
    assert ledger.audit()[0].released == {"columns": None, "rows": [[7]]}
    with pytest.raises(OperationalError, match="already has its released values"):
        ledger.record_release(DB, "alice", cid, [(8,)], cache=("other", b"x"))
    assert ledger.cache_get(DB, "alice", "other") is None  # refused: nothing cached either


def test_record_release_fails_closed(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    ledger.set_budget(DB, "bob", 1.0, 0.0)
    cid = ask(ledger, "q", [])
    with pytest.raises(OperationalError, match=r"not on the ledger.*withheld"):
        ledger.record_release(DB, "bob", cid, [(1,)])  # another analyst's charge
    with pytest.raises(OperationalError, match="not on the ledger"):
        ledger.record_release("other.duckdb", "alice", cid, [(1,)])
    with pytest.raises(OperationalError, match="not on the ledger"):
        ledger.record_release(DB, "alice", cid + 100, [(1,)])
    ledger.record_release(DB, "alice", cid, [(1,)])
    with pytest.raises(OperationalError, match="already has its released values"):
        ledger.record_release(DB, "alice", cid, [(2,)])  # written once
    assert ledger.audit()[0].released == {"columns": None, "rows": [[1]]}
    refunded = ask(ledger, "q", [])
    ledger.refund(DB, "alice", refunded)
    with pytest.raises(OperationalError, match="was refunded"):
        ledger.record_release(DB, "alice", refunded, [(1,)])


def test_a_released_charge_cannot_be_refunded(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    cid = ask(ledger, "q", [], 0.5)
    ledger.record_release(DB, "alice", cid, [(1,)])
    with pytest.raises(OperationalError, match="was released, so it cannot be refunded"):
        ledger.refund(DB, "alice", cid)
    assert ledger.status(DB, "alice").epsilon_spent == 0.5


def test_refunds_stay_in_the_log_and_stop_counting(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    kept = ask(ledger, "q1", [1], 0.25)
    refunded = ask(ledger, "q2", [2], 0.5)
    ledger.refund(DB, "alice", refunded)
    entries = ledger.audit()
    assert [(e.id, e.sql, e.state, e.counts) for e in entries] == [
        (kept, "q1", "not released", True), (refunded, "q2", "refunded", False)]
    assert entries[1].refunded_at is not None
    assert [c.id for c in ledger.status(DB, "alice").history] == [kept]
    assert ledger.status(DB, "alice").epsilon_spent == 0.25


def test_reset_keeps_the_history_and_restarts_the_sums(ledger):
    ledger.set_budget(DB, "alice", 1.0, 1e-6)
    first = ask(ledger, "q1", [], 0.5)
    ledger.record_release(DB, "alice", first, [(1,)])
    second = ledger.charge(DB, "alice", fingerprint="fp", epsilon=0.5, delta=1e-7,
                           mechanism="gaussian", sql="q2", params=[])
    refunded = ask(ledger, "q3", [], 0.0)
    ledger.refund(DB, "alice", refunded)
    reset_id = ledger.reset(DB, "alice")
    status = ledger.status(DB, "alice")
    assert status.history == () and (status.epsilon_spent, status.delta_spent) == (0.0, 0.0)
    assert status.epsilon_remaining == 1.0 and status.delta_total == 1e-6
    entries = ledger.audit()
    assert [type(e) for e in entries] == [AuditCharge] * 3 + [AuditReset]
    assert [e.state for e in entries[:3]] == [  # type: ignore[union-attr]
        f"released, reset #{reset_id}", f"not released, reset #{reset_id}", "refunded"]
    reset = entries[3]
    assert isinstance(reset, AuditReset) and reset.id == reset_id
    # the reset cleared what counted: the refunded charge was no longer counting
    assert (reset.charges_cleared, reset.epsilon_cleared, reset.delta_cleared) == (2, 1.0, 1e-7)
    after = ask(ledger, "q4", [], 1.0)  # the full budget is available again
    assert after > refunded
    with pytest.raises(OperationalError, match="cannot be refunded"):
        ledger.refund(DB, "alice", second)  # reset charges no longer count: nothing to refund
    second_reset = ledger.reset(DB, "alice")
    assert second_reset > reset_id
    last = ledger.audit()[-1]
    assert isinstance(last, AuditReset) and last.charges_cleared == 1


def test_a_release_after_a_concurrent_reset_is_still_recorded(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    cid = ask(ledger, "q", [])
    ledger.reset(DB, "alice")  # the owner resets while the query runs
    ledger.record_release(DB, "alice", cid, [(42,)])
    entry = ledger.audit()[0]
    assert isinstance(entry, AuditCharge) and entry.released == {"columns": None, "rows": [[42]]}


def test_audit_filters_and_limit(ledger):
    for analyst in ("alice", "bob"):
        for db in (DB, "other.duckdb"):
            ledger.set_budget(db, analyst, 10.0, 0.0)
    ids = {}
    for i in range(3):
        for analyst in ("alice", "bob"):
            for db in (DB, "other.duckdb"):
                ids[(i, analyst, db)] = ask(ledger, f"q{i}", [i], analyst=analyst, database=db)
    ledger.reset(DB, "bob")
    assert len(ledger.audit()) == 13
    alice = ledger.audit(analyst="alice")
    assert [e.id for e in alice] == sorted(v for k, v in ids.items() if k[1] == "alice")
    on_db = ledger.audit(database=DB)
    assert {(e.analyst, e.database) for e in on_db} == {
        ("alice", database_identity(DB)), ("bob", database_identity(DB))}
    assert len(on_db) == 7 and isinstance(on_db[-1], AuditReset)
    bob_db = ledger.audit(analyst="bob", database=DB, limit=2)
    assert [type(e) for e in bob_db] == [AuditCharge, AuditReset]
    assert bob_db[0].id == ids[(2, "bob", DB)]
    assert ledger.audit(limit=0) == []
    assert [e.id for e in ledger.audit(limit=1)] == [1]  # the reset, newest
    assert ledger.audit(analyst="carol") == []
    with pytest.raises(ProgrammingError, match="limit"):
        ledger.audit(limit=-1)


def test_charge_validates_sql_and_encodes_any_params(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    with pytest.raises(ProgrammingError, match="sql must be a string"):
        ledger.charge(DB, "alice", fingerprint="fp", epsilon=0.1, delta=0.0,
                      mechanism="laplace", sql=b"SELECT 1")  # type: ignore[arg-type]
    assert ledger.audit() == []  # nothing charged
    ask(ledger, "q", [dt.date(2024, 2, 29), None, b"x"])
    assert ledger.audit()[0].params == [{"$date": "2024-02-29"}, None, {"$bytes": "eA=="}]
    plain = ledger.charge(DB, "alice", fingerprint="fp", epsilon=0.1, delta=0.0,
                          mechanism="laplace")  # library callers without sql: still audited
    entry = ledger.audit()[-1]
    assert entry.id == plain and entry.sql is None and entry.params is None


# -- events: the owner's actions and cache hits ------------------------------------------------


def _events(book: Ledger) -> list[AuditEvent]:
    return [e for e in book.audit(events=True) if isinstance(e, AuditEvent)]


def test_cache_lookup_records_a_hit_with_its_charge_and_a_miss_not_at_all(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    cid = ask(ledger, "q", [])
    ledger.record_release(DB, "alice", cid, [(7,)], cache=("key", b"payload"))
    assert ledger.cache_lookup(DB, "alice", "nope", sql="q", params=[], epsilon=0.1,
                               delta=0.0) is None
    assert [e.kind for e in _events(ledger)] == ["budget set"]
    got = ledger.cache_lookup(DB, "alice", "key", sql="q", params=[Decimal("1.5")],
                              epsilon=0.1, delta=0.0)
    assert got == b"payload"
    hit = _events(ledger)[-1]
    assert (hit.kind, hit.analyst, hit.database, hit.charge_id) == (
        "cache hit", "alice", database_identity(DB), cid)
    assert hit.detail == {"sql": "q", "params": [{"$decimal": "1.5"}], "epsilon": 0.1,
                          "delta": 0.0}
    assert ledger.audit() == ledger.audit(events=False)  # charges and resets only by default
    assert hit in ledger.audit(events=True, analyst="alice", database=DB)
    assert hit not in ledger.audit(events=True, analyst="bob")


def test_a_hit_is_visible_to_the_main_connection_and_other_processes_files(ledger, tmp_path):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    ledger.cache_put(DB, "alice", "k", b"*")
    assert ledger.cache_lookup(DB, "alice", "k", sql=None, params=None, epsilon=None,
                               delta=None) == b"*"
    with Ledger(tmp_path / "ledger.sqlite", create=False) as other:
        (hit,) = [e for e in _events(other) if e.kind == "cache hit"]
    assert hit.charge_id is None  # cached without a charge


def test_events_are_append_only(ledger, tmp_path):
    import sqlite3

    ledger.set_budget(DB, "alice", 1.0, 0.0)
    conn = sqlite3.connect(tmp_path / "ledger.sqlite")
    try:
        for statement in ("DELETE FROM events", "UPDATE events SET kind = 'x'"):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                conn.execute(statement)
    finally:
        conn.close()
    assert [e.kind for e in _events(ledger)] == ["budget set"]
