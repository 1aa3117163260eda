"""Sessions charging a real ledger file (not a test module): what a rejection, failure or
cancellation must leave untouched."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dpsql.accounting import Charge, Ledger
from dpsql.session import Principal, Session

DATABASE = "test-database"
ANALYST = "alice"
PRINCIPAL = Principal(DATABASE, ANALYST)


def open_ledger(path: Path, *, epsilon: float = 1000.0, delta: float = 0.5) -> Ledger:
    """A new ledger file at ``path`` granting the test analyst (epsilon, delta)."""
    ledger = Ledger(path)
    ledger.set_budget(DATABASE, ANALYST, epsilon, delta)
    return ledger


def charged(session: Session) -> list[Charge]:
    """Every charge on the session's ledger, oldest first."""
    assert session.ledger is not None
    return list(session.ledger.status(DATABASE, ANALYST).history)


def ledger_session(metadata, backend, ledger: Ledger, **kwargs) -> Session:
    """A session over ``backend`` charging ``ledger`` (one fixed data version: these tests do
    not change the data under a session)."""
    kwargs.setdefault("data_version", "test")
    return Session(metadata, backend, ledger=ledger, principal=PRINCIPAL, **kwargs)


@contextmanager
def charging_session(database: Path, metadata, ledger_path: Path, *, epsilon: float = 1000.0,
                     delta: float = 0.5, **kwargs) -> Iterator[Session]:
    """A session on the DuckDB file ``database`` charging a new ledger at ``ledger_path``
    (the test analyst granted (epsilon, delta)); both are closed on exit. ``kwargs`` go to
    the Session (a ``sampler``, for one)."""
    from dpsql.backends.duckdb import DuckDBBackend  # tests of other backends skip this

    backend = DuckDBBackend(database, metadata)
    ledger = open_ledger(ledger_path, epsilon=epsilon, delta=delta)
    try:
        yield ledger_session(metadata, backend, ledger, **kwargs)
    finally:
        backend.close()
        ledger.close()
