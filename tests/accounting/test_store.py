"""The ledger file (dpsql/accounting/store.py and schema.py): version 5, the in-place upgrades of
real version-1, -2 and -3 files, and the append-only audit triggers, on real SQLite files."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from dpsql.accounting import AuditEvent, Ledger, database_identity
from dpsql.accounting.schema import _V1_TO_V2, EXPECTED_COLUMNS, EXPECTED_TRIGGERS, SCHEMA_VERSION
from dpsql.errors import OperationalError
from tests.accounting.helpers import DB, spend

# The version-1 schema exactly as dpsql shipped it (dpsql/accounting/store.py before issue #14),
# frozen here so a change to the code's copy cannot hide a broken upgrade.
V1_SCHEMA = """
CREATE TABLE budgets (
    database      TEXT    NOT NULL,
    analyst       TEXT    NOT NULL,
    epsilon_total INTEGER NOT NULL CHECK (typeof(epsilon_total) = 'integer' AND epsilon_total >= 0),
    delta_total   INTEGER NOT NULL CHECK (typeof(delta_total) = 'integer' AND delta_total >= 0),
    epsilon_spent INTEGER NOT NULL CHECK (typeof(epsilon_spent) = 'integer' AND epsilon_spent >= 0),
    delta_spent   INTEGER NOT NULL CHECK (typeof(delta_spent) = 'integer' AND delta_spent >= 0),
    updated_at    TEXT    NOT NULL,
    PRIMARY KEY (database, analyst)
);
CREATE TABLE charges (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    database    TEXT    NOT NULL,
    analyst     TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    epsilon     INTEGER NOT NULL CHECK (typeof(epsilon) = 'integer' AND epsilon >= 0),
    delta       INTEGER NOT NULL CHECK (typeof(delta) = 'integer' AND delta >= 0),
    mechanism   TEXT    NOT NULL,
    at          TEXT    NOT NULL
);
CREATE INDEX charges_by_principal ON charges (database, analyst, id);
CREATE TABLE cache (
    database TEXT NOT NULL,
    analyst  TEXT NOT NULL,
    key      TEXT NOT NULL,
    payload  BLOB NOT NULL,
    at       TEXT NOT NULL,
    PRIMARY KEY (database, analyst, key)
) WITHOUT ROWID;
"""

T0 = "2026-01-01T00:00:00.000000+00:00"


def make_v1(path, *, extra: str = "") -> None:
    """A version-1 ledger as dpsql 1 left it: alice spent 0.25 + 0.5 of 1.0 (and 1e-9 of 1e-6
    delta) in two charges, one refunded charge already deleted (id 2), one cached answer."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(V1_SCHEMA + extra)
    conn.execute(f"PRAGMA application_id={0x64704C64}")  # "dpLd"
    conn.execute("PRAGMA user_version=1")
    db = database_identity(DB)
    conn.execute("INSERT INTO budgets VALUES (?, 'alice', ?, ?, ?, ?, ?)",
                 (db, 10**12, 10**12, 75 * 10**10, 10**9, T0))
    conn.execute("INSERT INTO charges VALUES (1, ?, 'alice', 'fp1', ?, ?, 'laplace', ?)",
                 (db, 25 * 10**10, 10**9, T0))
    conn.execute("INSERT INTO charges VALUES (3, ?, 'alice', 'fp3', ?, 0, 'laplace', ?)",
                 (db, 5 * 10**11, T0))
    conn.execute("INSERT INTO cache VALUES (?, 'alice', 'k', x'2a', ?)", (db, T0))
    conn.close()


def schema_of(path) -> tuple[int, set[str], set[str]]:
    conn = sqlite3.connect(path)
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    columns = {r[1] for r in conn.execute("PRAGMA table_info(charges)")}
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    return version, columns, tables


def test_new_ledger_is_version_5_with_every_table_and_trigger(tmp_path):
    path = tmp_path / "new.sqlite"
    Ledger(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    for table, expected in EXPECTED_COLUMNS.items():
        assert {r[1] for r in conn.execute(f"PRAGMA table_info({table})")} == expected
    triggers = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
    assert triggers == EXPECTED_TRIGGERS
    conn.close()


def test_a_real_v1_file_is_upgraded_in_place_and_keeps_everything(tmp_path):
    path = tmp_path / "v1.sqlite"
    make_v1(path)
    assert schema_of(path)[0] == 1
    with Ledger(path, create=False) as book:
        status = book.status(DB, "alice")  # running sums still agree with the charges
        assert (status.epsilon_total, status.epsilon_spent) == (1.0, 0.75)
        assert (status.delta_total, status.delta_spent) == (1e-6, 1e-9)
        assert [(c.id, c.fingerprint, c.epsilon) for c in status.history] == [
            (1, "fp1", 0.25), (3, "fp3", 0.5)]
        assert book.cache_get(DB, "alice", "k") == b"*"
        old = book.audit()
        assert [(e.id, e.sql, e.params, e.released, e.state) for e in old] == [
            (1, None, None, None, "not released"), (3, None, None, None, "not released")]
        # every version-2 feature works on the upgraded file
        new = book.charge(DB, "alice", fingerprint="fp4", epsilon=0.25, delta=0.0,
                          mechanism="laplace", sql="SELECT 1", params=[])
        assert new == 4  # AUTOINCREMENT's counter survived: ids are never reused
        book.record_release(DB, "alice", new, [(1,)])
        book.reset(DB, "alice")
        book.add_analyst("alice", "s3cret")
        assert book.status(DB, "alice").epsilon_spent == 0.0
    version, columns, tables = schema_of(path)
    assert version == 5 and columns == EXPECTED_COLUMNS["charges"]
    assert {"resets", "analysts", "events"} <= tables
    with Ledger(path, create=False) as book:  # reopening an upgraded file changes nothing
        assert [e.id for e in book.audit()] == [1, 3, 4, 1]
        assert book.analyst("alice") is not None
        assert [e.kind for e in book.audit(events=True)  # type: ignore[union-attr]
                if isinstance(e, AuditEvent)] == ["analyst add"]


def test_a_version_2_file_is_upgraded_and_its_old_cache_entries_name_no_charge(tmp_path):
    path = tmp_path / "v2.sqlite"
    make_v1(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(_V1_TO_V2 + "PRAGMA user_version=2;")  # as dpsql's version 2 left it
    conn.close()
    assert schema_of(path)[0] == 2
    with Ledger(path, create=False) as book:
        assert book.cache_lookup(DB, "alice", "k", sql="SELECT 1", params=[], epsilon=1.0,
                                 delta=0.0) == b"*"
        (hit,) = book.audit(events=True)[-1:]
    assert isinstance(hit, AuditEvent) and hit.kind == "cache hit" and hit.charge_id is None
    assert schema_of(path)[0] == 5


def test_a_failed_upgrade_leaves_the_v1_file_untouched(tmp_path):
    # a v1 file that already has a table the upgrade must create: the upgrade fails halfway
    # (after its ALTERs) and must roll everything back
    path = tmp_path / "v1.sqlite"
    make_v1(path, extra="CREATE TABLE analysts (x);\n")
    before = schema_of(path)
    with pytest.raises(OperationalError, match=r"cannot upgrade .* unchanged") as info:
        Ledger(path)
    assert str(path) in info.value.message
    assert schema_of(path) == before and before[0] == 1
    assert len(before[1]) == 8  # no audit column was added


def test_concurrent_openers_upgrade_once(tmp_path):
    path = tmp_path / "v1.sqlite"
    make_v1(path)
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            Ledger(path, timeout=30).close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with Ledger(path) as book:
        assert book.status(DB, "alice").epsilon_spent == 0.75


def test_newer_schema_version_is_refused(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=6")
    conn.close()
    with pytest.raises(OperationalError, match=r"schema version 6.*newer"):
        Ledger(path)


def test_missing_trigger_fails_closed(tmp_path):
    path = tmp_path / "l.sqlite"
    Ledger(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER charges_never_deleted")
    conn.close()
    with pytest.raises(OperationalError, match=r"append-only trigger.*charges_never_deleted"):
        Ledger(path)


def test_the_audit_log_is_append_only_even_for_raw_sql(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 0.0)
        cid = spend(book, 0.5)
        book.record_release(DB, "alice", cid, [(1,)])
        book.reset(DB, "alice")
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in (
        "DELETE FROM charges",
        "UPDATE charges SET epsilon = 0",
        "UPDATE charges SET sql = 'other'",
        "UPDATE charges SET released = '[]'",
        "UPDATE charges SET reset_id = NULL",
        "DELETE FROM resets",
        "UPDATE resets SET charges_cleared = 0",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)
    conn.close()
