"""Ctrl-C during a query's exact read: DuckDB's Python client catches the SIGINT itself and
raises a plain ``RuntimeError('Query interrupted')``. Found by the units QA: ``dpsql shell``
printed "unexpected RuntimeError while answering the query (a dpsql bug)" for a Ctrl-C, and
one during post-processing (after the noise) would not have been refunded as a cancellation.
Now the backend raises KeyboardInterrupt, which the session refunds and the cursor (and the
shell's "interrupted") let through."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import sigint_interrupted
from dpsql.metadata import loads_metadata
from tests.db_files import writing
from tests.ledgers import ANALYST, DATABASE, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise

METADATA = """\
tables:
  visits:
    columns:
      k: {max_freq: 100000, type: INTEGER}
"""
SLOW = "SELECT COUNT(*) AS n FROM visits a JOIN visits b ON a.k = b.k"


@pytest.fixture
def parts(tmp_path):
    path = tmp_path / "slow.duckdb"
    with writing(path) as con:  # 4e9 join rows: seconds of work, interrupted after 1 s
        con.execute("CREATE TABLE visits AS SELECT (range % 10)::INTEGER AS k "
                    "FROM range(200000)")
    metadata = loads_metadata(METADATA)
    backend = DuckDBBackend(path, metadata)
    ledger = open_ledger(tmp_path / "ledger.sqlite")
    yield ledger_session(metadata, backend, ledger, sampler=ZeroNoise()), backend, ledger
    backend.close()
    ledger.close()


def test_duckdb_reports_a_sigint_as_the_runtime_error_the_backend_maps():
    assert sigint_interrupted(RuntimeError("Query interrupted"))
    assert not sigint_interrupted(RuntimeError("something else"))
    assert not sigint_interrupted(KeyboardInterrupt())


class _Interrupted:
    """A connection whose reads fail as DuckDB's do on Ctrl-C (planning still works)."""

    def __init__(self, inner):
        self.inner = inner

    def execute(self, sql, *args):
        if sql.startswith("EXPLAIN"):
            return self.inner.execute(sql, *args)
        raise RuntimeError("Query interrupted")

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_the_backend_turns_it_into_keyboard_interrupt_and_the_session_refunds(parts):
    session, backend, ledger = parts
    backend._con = _Interrupted(backend._con)
    with pytest.raises(KeyboardInterrupt):
        session.run("SELECT COUNT(*) AS n FROM visits", epsilon=0.5)
    assert ledger.status(DATABASE, ANALYST).epsilon_spent == 0.0  # refunded


def test_a_real_sigint_during_the_read_is_a_refunded_keyboard_interrupt(parts):
    session, _, ledger = parts
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            session.run(SLOW, epsilon=0.5, delta=1e-6)
    finally:
        timer.cancel()
    assert ledger.status(DATABASE, ANALYST).epsilon_spent == 0.0
