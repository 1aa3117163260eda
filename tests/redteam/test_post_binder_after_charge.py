"""Red team (issue #15): a post-processing error that depends on the SQL alone is charged.

Contract under test (dpsql/session.py, docs/privacy.md "Release blocks"): every refusal that
depends only on the SQL, the public metadata and epsilon/delta comes BEFORE the charge. The
post-processing query (a HAVING, an outer query over release blocks, a two-phase scalar's own
expression) is bound by DuckDB only after the charge and after the noise is drawn, so a pure
type error there (BIGINT compared with DATE, BIGINT cast to DATE) stands charged although its
occurrence depends on no data and no noise: the analyst pays epsilon and receives nothing.
dpsql.execute.post_check now runs the post-processing SQL over empty tables before the charge
(binder errors), then over one row (a cast DuckDB has no implementation for, BIGINT -> DATE,
fails only when it casts a value).

Not a privacy leak (the error is the same on every database), but a charge for a refusal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import Error
from dpsql.metadata import loads_metadata
from tests.ledgers import charged, ledger_session, open_ledger
from tests.neighbours import write_database
from tests.shop_fixture import ZeroNoise

SCHEMA = ("CREATE TABLE t (k VARCHAR, n INTEGER)",)
ROWS = {"t": [("a", 1), ("b", 2), ("b", 3)]}
METADATA = loads_metadata("""
tables:
  t:
    columns:
      k: {max_freq: 2, releasable: true, type: VARCHAR, domain: {values: [a, b]}}
      n: {max_freq: 1, type: INTEGER, bounds: [0, 5]}
""")

#: each fails in DuckDB's binder on types alone, whatever the data and the noise
BINDER_ERRORS = (
    # one release, HAVING over a noisy count
    "SELECT k, COUNT(*) FROM t GROUP BY k HAVING COUNT(*) > DATE '2020-01-01'",
    # a release block, then post-processing outside it
    "WITH q AS (SELECT k, COUNT(*) AS c FROM t GROUP BY k) "
    "SELECT k FROM q WHERE c > DATE '2020-01-01'",
    # two phases: the final query's HAVING
    "SELECT k, COUNT(*) FROM t WHERE n > (SELECT AVG(n) FROM t) GROUP BY k "
    "HAVING COUNT(*) > DATE '2020-01-01'",
)

#: each fails on every value DuckDB casts, but only when it casts one (not in the binder)
EXECUTION_TYPE_ERRORS = (
    "SELECT CAST(COUNT(*) AS DATE) FROM t",
    "SELECT COUNT(*) FROM t WHERE n > (SELECT CAST(COUNT(*) AS DATE) FROM t)",
)

#: post-processing that can fail only on some noisy values (a count of 0): still answered
VALUE_DEPENDENT = (
    "SELECT k, 10 // COUNT(*) FROM t GROUP BY k",
    "WITH q AS (SELECT k, COUNT(*) AS c FROM t GROUP BY k) SELECT k, 10 % c FROM q",
    "SELECT k, COUNT(*) FROM t WHERE n > (SELECT AVG(n) FROM t) - 5 GROUP BY k "
    "HAVING 10 // COUNT(*) >= 0",
)


def _session(tmp_path: Path):
    db = write_database(tmp_path / "d.duckdb", SCHEMA, ROWS)
    return ledger_session(METADATA, DuckDBBackend(db, METADATA),
                          open_ledger(tmp_path / "ledger.db"), sampler=ZeroNoise())


def _refused_uncharged(tmp_path: Path, sql: str) -> None:
    session = _session(tmp_path)
    with pytest.raises(Error) as err:
        session.run(sql, epsilon=1.0, delta=1e-6)
    assert charged(session) == [], (
        f"{sql}\nrefused with {type(err.value).__name__}: {err.value}\n"
        f"but charged {[c.epsilon for c in charged(session)]}")


@pytest.mark.parametrize("sql", BINDER_ERRORS)
def test_a_binder_error_in_post_processing_is_refused_before_the_charge(tmp_path: Path,
                                                                        sql: str) -> None:
    _refused_uncharged(tmp_path, sql)


@pytest.mark.parametrize("sql", EXECUTION_TYPE_ERRORS)
def test_an_impossible_cast_in_post_processing_is_refused_before_the_charge(
        tmp_path: Path, sql: str) -> None:
    _refused_uncharged(tmp_path, sql)


@pytest.mark.parametrize("sql", VALUE_DEPENDENT)
def test_post_processing_that_fails_only_on_some_values_is_not_refused(tmp_path: Path,
                                                                       sql: str) -> None:
    session = _session(tmp_path)
    result = session.run(sql, epsilon=1.0, delta=1e-6)
    assert result.rows and len(charged(session)) == 1


def test_a_refusal_is_not_remembered_as_a_pass(tmp_path: Path) -> None:
    """The pre-charge check is memoised per query: a refused query must be refused again."""
    session = _session(tmp_path)
    for _ in range(2):
        with pytest.raises(Error):
            session.run(BINDER_ERRORS[0], epsilon=1.0, delta=1e-6)
    assert charged(session) == []
