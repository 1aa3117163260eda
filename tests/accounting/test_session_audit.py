"""The session's side of the audit log (dpsql/session.py ``_release``): every charge carries the
SQL text and parameters, every release its rows exactly as returned, and rows the log cannot
hold are withheld; on a real DuckDB file and a real ledger file."""

from __future__ import annotations

import sqlite3

import pytest

from dpsql.accounting import AuditCharge, Ledger
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import OperationalError
from dpsql.metadata import loads_metadata
from tests.db_files import writing
from tests.ledgers import ANALYST, DATABASE, ledger_session, open_ledger

METADATA = """\
tables:
  visits:
    columns:
      person: {max_freq: 1, type: INTEGER}
      day: {releasable: true, type: INTEGER, domain: {values: [0, 1, 2]}}
      spend: {bounds: [0, 100], type: DOUBLE}
"""

SQL = "SELECT day, COUNT(*) AS n FROM visits WHERE spend >= ? GROUP BY day ORDER BY day"


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("audit") / "visits.duckdb"
    with writing(path) as con:
        con.execute("""CREATE TABLE visits AS SELECT i::INTEGER AS person, (i % 3)::INTEGER AS day,
                       (i % 50)::DOUBLE AS spend FROM range(300) r(i)""")
    return path


@pytest.fixture
def backend(database):
    backend = DuckDBBackend(database, loads_metadata(METADATA))
    yield backend
    backend.close()


def test_a_release_is_audited_with_its_sql_params_and_rows(backend, tmp_path):
    with open_ledger(tmp_path / "ledger.sqlite") as ledger:
        session = ledger_session(loads_metadata(METADATA), backend, ledger)
        result = session.run(SQL, [10.0], epsilon=0.5)
        (entry,) = ledger.audit()
        assert isinstance(entry, AuditCharge)
        assert (entry.analyst, entry.sql, entry.params) == (ANALYST, SQL, [10.0])
        assert (entry.epsilon, entry.mechanism) == (0.5, result.release.mechanism)
        assert entry.released == {"columns": ["day", "n"],
                                  "rows": [list(row) for row in result.rows]}
        assert entry.state == "released" and len(result.rows) == 3
        # a repeat is served from the cache: no new charge, nothing new in the log
        again = session.run(SQL, [10.0], epsilon=0.5)
        assert again.rows == result.rows and len(ledger.audit()) == 1
        session.close()


def test_rows_the_audit_log_cannot_hold_are_withheld_and_the_charge_stands(backend, tmp_path):
    path = tmp_path / "ledger.sqlite"
    open_ledger(path).close()
    locker = sqlite3.connect(path, isolation_level=None)

    class LockedAfterCharge(Ledger):
        """The real ledger; another process's writer takes the file's lock right after the
        charge commits, so writing the released rows meets a real SQLITE_BUSY."""

        lock = True

        def charge(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            charge_id = super().charge(*args, **kwargs)
            if self.lock:
                locker.execute("BEGIN EXCLUSIVE")
            return charge_id

    with LockedAfterCharge(path, timeout=0.2) as ledger:
        session = ledger_session(loads_metadata(METADATA), backend, ledger)
        with pytest.raises(OperationalError, match=r"charged \(charge 1\).*withheld.*locked"):
            session.run(SQL, [10.0], epsilon=0.5)
        locker.execute("ROLLBACK")
        (entry,) = ledger.audit()
        assert entry.state == "not released" and entry.counts  # charged, nothing shown
        assert ledger.status(DATABASE, ANALYST).epsilon_spent == 0.5
        # nothing was cached: asking again is a new charge, and this time it is released
        ledger.lock = False
        session.run(SQL, [10.0], epsilon=0.5)
        assert [e.state for e in ledger.audit()] == ["not released", "released"]
        assert ledger.status(DATABASE, ANALYST).epsilon_spent == 1.0
        session.close()
    locker.close()
