"""dpsql.server.cancel: what a CancelRequest does at each moment of a statement.

In process, with the real Session, DuckDB backend and ledger file, a cancel is delivered at an
exact moment by a ledger that calls the connection's cancel from inside its own write (the
moment a request from the event loop's thread can arrive): during the charge's write it is
refunded with QueryCancelledError; during the audit write it is too late and the answer is
delivered, charged and recorded. Through a real server process, a CancelRequest that arrives
while the charge waits for the ledger's write lock (held by the test) ends the statement with
57014 and a refund (it used to be lost: the answer came back).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dpsql.accounting import Ledger
from dpsql.accounting.audit import AuditCharge
from dpsql.backends import open_backend
from dpsql.errors import QueryCancelledError
from dpsql.metadata import load_metadata
from dpsql.server.cancel import CancellableBackend
from dpsql.session import Principal, Session
from tests.server.serving import launch, prepare

COUNT = "SELECT COUNT(*) AS n FROM orders"


class CancellingLedger(Ledger):
    """The real ledger; ``during_charge`` / ``during_record`` run inside the write (a cancel
    from another thread arriving at that moment)."""

    during_charge: Callable[[], None] | None = None
    during_record: Callable[[], None] | None = None

    def charge(self, *args: Any, **kwargs: Any) -> int:
        charge_id = super().charge(*args, **kwargs)
        if self.during_charge is not None:  # committed; the caller has not seen the id yet
            self.during_charge()
        return charge_id

    def record_release(self, database: str, analyst: str, charge_id: int,
                       rows: Sequence[Sequence[Any]], **kwargs: Any) -> None:
        if self.during_record is not None:
            self.during_record()
        super().record_release(database, analyst, charge_id, rows, **kwargs)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[Session, CancellableBackend, CancellingLedger]]:
    db, md_path, ledger_path, database_id = prepare(tmp_path)
    md = load_metadata(md_path)
    backend = CancellableBackend(open_backend("duckdb", str(db), md))
    ledger = CancellingLedger(ledger_path, create=False)
    s = Session(md, backend, ledger=ledger, principal=Principal(database_id, "alice"),
                data_version="v")
    try:
        yield s, backend, ledger
    finally:
        s.close()
        backend.close()
        ledger.close()


def _states(ledger: Ledger) -> list[str]:
    return [e.state for e in ledger.audit(analyst="alice") if isinstance(e, AuditCharge)]


def test_a_cancel_during_the_charge_write_refunds_it(session) -> None:
    s, backend, ledger = session
    ledger.during_charge = backend.interrupt
    backend.begin()
    with pytest.raises(QueryCancelledError, match="cancelled before anything was released"):
        s.run(COUNT, epsilon=0.5)
    assert _states(ledger) == ["refunded"]
    assert ledger.status(s.principal.database, "alice").epsilon_spent == 0.0  # type: ignore[union-attr]
    ledger.during_charge = None
    backend.begin()  # the next statement: the old request no longer applies
    assert isinstance(s.run(COUNT, epsilon=0.5).rows[0][0], int)
    assert _states(ledger) == ["refunded", "released"]


def test_a_cancel_during_the_audit_write_is_too_late_the_answer_is_delivered(session) -> None:
    s, backend, ledger = session
    ledger.during_record = backend.interrupt
    backend.begin()
    result = s.run(COUNT, epsilon=0.5)
    assert isinstance(result.rows[0][0], int)
    assert _states(ledger) == ["released"]
    (entry,) = [e for e in ledger.audit(analyst="alice") if isinstance(e, AuditCharge)]
    assert entry.released == {"columns": ["n"], "rows": [[result.rows[0][0]]]}
    assert ledger.status(s.principal.database, "alice").epsilon_spent == 0.5  # type: ignore[union-attr]


def test_a_request_is_kept_until_the_next_read_and_cleared_by_the_next_statement(
        session) -> None:
    s, backend, ledger = session
    backend.begin()
    backend.interrupt()  # nothing runs: the request waits for the next check
    assert backend.cancel_requested
    with pytest.raises(QueryCancelledError):
        s.run(COUNT, epsilon=0.5)
    assert _states(ledger) in ([], ["refunded"])  # before or after the charge: never counted
    backend.begin()
    assert not backend.cancel_requested
    assert isinstance(s.run(COUNT, epsilon=0.5).rows[0][0], int)


def test_a_cancel_request_while_the_charge_waits_for_the_ledger_lock(tmp_path: Path) -> None:
    """A real server process; the test holds the ledger's write lock, so the statement's charge
    waits in its SQLite write; a CancelRequest then arrives; the lock is let go, the charge
    commits -- and is refunded: 57014, nothing counts, the connection goes on."""
    db, md, ledger_path, database_id = prepare(tmp_path)
    server = launch(db, md, ledger_path, database_id)
    blocker = sqlite3.connect(ledger_path, timeout=10, isolation_level=None)
    try:
        with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(COUNT)  # warm: prepared, bound; this one is charged and released
            outcome: list[BaseException | object] = []

            def ask() -> None:
                try:
                    outcome.append(conn.execute(
                        "SELECT COUNT(*) AS n FROM orders WHERE order_id > 0").fetchone())
                except BaseException as exc:  # the outcome is what the test checks
                    outcome.append(exc)

            blocker.execute("BEGIN IMMEDIATE")
            asking = threading.Thread(target=ask)
            asking.start()
            time.sleep(1.0)  # analysed, binder-checked; the charge waits for the lock
            conn.cancel()
            time.sleep(0.3)
            blocker.execute("ROLLBACK")
            asking.join(30)
            assert not asking.is_alive()
            assert isinstance(outcome[0], psycopg.errors.QueryCanceled), outcome
            with Ledger(ledger_path, create=False) as book:
                states = [e.state for e in book.audit(analyst="alice")
                          if isinstance(e, AuditCharge)]
                assert states in (["released", "refunded"], ["released"]), states
                assert book.status(database_id, "alice").epsilon_spent == 0.5
            again = conn.execute(COUNT).fetchone()  # the cached answer of the first query
            assert again is not None and isinstance(again[0], int)
    finally:
        blocker.close()
        server.stop()
