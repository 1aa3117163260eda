"""dpsql/session.py: charge before release, and refund only what nothing was derived from.

Every test charges a real ledger file (tests/ledgers.py) through a real DuckDB backend: the
ledger's history is what a refusal, a failure or a cancellation must leave untouched, and what
a release must have grown BEFORE the private data was read.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import (
    BudgetExhaustedError,
    NotSupportedError,
    ProgrammingError,
    QueryCancelledError,
)
from dpsql.metadata import loads_metadata
from tests.db_files import writing
from tests.ledgers import ANALYST, DATABASE, charged, ledger_session, open_ledger
from tests.recording import RecordingDuckDBBackend
from tests.shop_fixture import ZeroNoise

METADATA = """\
tables:
  visits:
    columns:
      person: {max_freq: 100000, type: INTEGER}
      k: {max_freq: 100000, type: INTEGER}
      spend: {bounds: [0, 100], type: DOUBLE}
      day: {releasable: true, type: INTEGER, domain: {table: days, column: day}}
      hour: {releasable: true, type: INTEGER, domain: {table: hours, column: hour}}
      age: {type: INTEGER}
  days:
    public: true
    columns:
      day: {type: INTEGER}
  hours:
    public: true
    columns:
      hour: {type: INTEGER}
  regions:
    public: true
    columns:
      region: {type: VARCHAR}
      population: {bounds: [0, 1000000], type: INTEGER}
"""

N_VISITS = 200_000


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("session") / "visits.duckdb"
    with writing(path) as con:
        # k has 4 values: the self-join below pairs 10^10 rows, long enough to cancel
        con.execute(f"""CREATE TABLE visits AS SELECT i::INTEGER AS person, (i % 4)::INTEGER AS k,
                        (i % 50)::DOUBLE AS spend, (i % 7)::INTEGER AS day,
                        (i % 24)::INTEGER AS hour, (i % 90)::INTEGER AS age
                        FROM range({N_VISITS}) r(i)""")
        # 4,000 x 4,000 public domain values: 16 million bins, beyond the 10 million limit, and
        # too many to inline, so the domain is read from the table by the domain query
        con.execute("CREATE TABLE days AS SELECT i::INTEGER AS day FROM range(4000) r(i)")
        con.execute("CREATE TABLE hours AS SELECT i::INTEGER AS hour FROM range(4000) r(i)")
        con.execute("CREATE TABLE regions AS SELECT * FROM (VALUES ('north', 10), ('south', 32)) "
                    "v(region, population)")
    return path


@pytest.fixture
def session(database, tmp_path):
    metadata = loads_metadata(METADATA)
    backend = RecordingDuckDBBackend(database, metadata)
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=10.0, delta=1e-3)
    yield ledger_session(metadata, backend, ledger, sampler=ZeroNoise())
    backend.close()
    ledger.close()


# --------------------------------------------------------------------------- free queries


def test_a_query_on_public_tables_is_exact_free_and_needs_no_epsilon(session):
    result = session.run("SELECT COUNT(*) AS n, SUM(population) AS p FROM regions")
    assert result.rows == [(2, 42.0)]
    assert result.release.free and result.release.mechanism == "exact"
    assert (result.release.epsilon, result.release.delta) == (0.0, 0.0)
    # no "noisy count clamped at 0": nothing was noised (found by the units QA)
    assert result.release.columns[0].post_processing is None
    assert charged(session) == []
    # an epsilon, if given, is not spent either
    assert session.run("SELECT COUNT(*) AS n FROM regions", epsilon=1.0).release.epsilon == 0
    assert charged(session) == []


def test_a_private_query_without_epsilon_is_refused_before_anything_runs(session):
    with pytest.raises(ProgrammingError, match="no epsilon"):
        session.run("SELECT COUNT(*) AS n FROM visits")
    assert charged(session) == [] and session.backend.executed == []


# --------------------------------------------------------------------------- refused for free


def test_too_many_bins_from_table_domains_is_refused_before_the_charge(session):
    # the domain sizes are public but known only to the database: the domain query (public
    # tables only) runs first, and the refusal comes before the charge
    sql = "SELECT day, hour, COUNT(*) AS n FROM visits GROUP BY day, hour"
    with pytest.raises(NotSupportedError, match="10,000,000 bins"):
        session.run(sql, epsilon=1.0)
    assert charged(session) == []
    assert all("visits" not in sql_ for sql_ in session.backend.executed)  # private: unread


def test_a_binder_error_is_refused_before_the_charge(session):
    with pytest.raises(ProgrammingError, match="while planning"):
        session.run("SELECT COUNT(*) AS n FROM visits WHERE UPPER(age) = 'A'", epsilon=1.0)
    assert charged(session) == [] and session.backend.executed == []


def test_an_exhausted_budget_charges_and_reads_nothing(session):
    with pytest.raises(BudgetExhaustedError):
        session.run("SELECT COUNT(*) AS n FROM visits", epsilon=11.0)
    assert charged(session) == [] and session.backend.executed == []


# --------------------------------------------------------------------------- charged first


class ChargeWitness(RecordingDuckDBBackend):
    """The real backend; records the ledger's charges each time it is asked to read."""

    ledger = None

    def execute_columns(self, sql, params=None):
        self.seen.append(len(self.ledger.status(DATABASE, ANALYST).history))
        return super().execute_columns(sql, params)


def test_the_charge_is_durable_before_the_private_data_is_read(database, tmp_path):
    metadata = loads_metadata(METADATA)
    backend = ChargeWitness(database, metadata)
    ledger = open_ledger(tmp_path / "ledger.sqlite")
    backend.ledger, backend.seen = ledger, []
    try:
        session = ledger_session(metadata, backend, ledger)
        session.run("SELECT COUNT(*) AS n FROM visits", epsilon=0.25)
        assert backend.seen == [1]  # one charge already on the file when the data was read
        # a repeat is the cached answer: no second charge, no second read
        again = session.run("SELECT COUNT(*) AS n FROM visits", epsilon=0.25)
        assert again.release.cached and backend.seen == [1]
        assert [c.epsilon for c in charged(session)] == [0.25]
    finally:
        backend.close()
        ledger.close()


# --------------------------------------------------------------------------- refunded


class Interrupting(ZeroNoise):
    """A sampler that is interrupted (Ctrl-C) while the noise is drawn."""

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        raise KeyboardInterrupt


def test_ctrl_c_while_noise_is_drawn_propagates_and_is_refunded(database, tmp_path):
    metadata = loads_metadata(METADATA)
    backend = DuckDBBackend(database, metadata)
    ledger = open_ledger(tmp_path / "ledger.sqlite")
    try:
        session = ledger_session(metadata, backend, ledger, sampler=Interrupting())
        with pytest.raises(KeyboardInterrupt):
            session.run("SELECT COUNT(*) AS n FROM visits", epsilon=0.5)
        # a cancellation shows nothing, whenever it comes: refunded
        status = ledger.status(DATABASE, ANALYST)
        assert status.history == () and status.epsilon_spent == 0.0
    finally:
        backend.close()
        ledger.close()


def test_a_post_processing_error_on_noisy_values_stays_charged(session):
    # whether CAST(noisy count AS TINYINT) fails depends on the noisy value: refunding it would
    # let an analyst learn "count > 127" again and again with fresh noise, for free
    with pytest.raises(ProgrammingError, match="post-processing failed"):
        session.run("SELECT CAST(COUNT(*) AS TINYINT) AS n FROM visits", epsilon=0.5)
    assert [c.epsilon for c in charged(session)] == [0.5]


def test_a_bad_delta_is_refused_even_without_epsilon(session):
    with pytest.raises(ProgrammingError, match="delta"):
        session.run("SELECT COUNT(*) AS n FROM regions", delta=2.0)


SLOW = "SELECT COUNT(*) AS n FROM visits a JOIN visits b ON a.k = b.k"


def test_a_cancelled_query_is_refunded_and_the_session_goes_on(session):
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(session.run(SLOW, epsilon=1.0, delta=1e-6))
        except BaseException as exc:  # the test inspects it
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    # cancel until the query gives up (an interrupt may land before DuckDB starts it)
    while worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
        session.cancel()
    worker.join(5)
    assert not worker.is_alive()
    assert isinstance(outcome[0], QueryCancelledError), outcome
    assert charged(session) == []
    # nothing is left interrupted: the next query runs and is charged once
    assert session.run("SELECT COUNT(*) AS n FROM visits", epsilon=0.5).rows[0][0] == N_VISITS
    assert [c.epsilon for c in charged(session)] == [0.5]
