"""Red team (issue #15): a post-processing error that depends on the SQL alone is charged.

Contract under test (dpsql/session.py, docs/privacy.md "Release blocks"): every refusal that
depends only on the SQL, the public metadata and epsilon/delta comes BEFORE the charge. The
post-processing query (a HAVING, an outer query over release blocks, a two-phase scalar's own
expression) is bound by DuckDB only after the charge and after the noise is drawn, so a pure
type error there (BIGINT compared with DATE, BIGINT cast to DATE) stands charged although its
occurrence depends on no data and no noise: the analyst pays epsilon and receives nothing.

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
TYPE_ERRORS = (
    # one release, HAVING over a noisy count
    "SELECT k, COUNT(*) FROM t GROUP BY k HAVING COUNT(*) > DATE '2020-01-01'",
    # one release, arithmetic over a noisy count
    "SELECT CAST(COUNT(*) AS DATE) FROM t",
    # a release block, then post-processing outside it
    "WITH q AS (SELECT k, COUNT(*) AS c FROM t GROUP BY k) "
    "SELECT k FROM q WHERE c > DATE '2020-01-01'",
    # two phases: the scalar block's own post-processing
    "SELECT COUNT(*) FROM t WHERE n > (SELECT CAST(COUNT(*) AS DATE) FROM t)",
)


@pytest.mark.parametrize("sql", TYPE_ERRORS)
def test_a_type_error_in_post_processing_is_refused_before_the_charge(tmp_path: Path,
                                                                      sql: str) -> None:
    db = write_database(tmp_path / "d.duckdb", SCHEMA, ROWS)
    session = ledger_session(METADATA, DuckDBBackend(db, METADATA),
                             open_ledger(tmp_path / "ledger.db"), sampler=ZeroNoise())
    with pytest.raises(Error) as err:
        session.run(sql, epsilon=1.0, delta=1e-6)
    assert charged(session) == [], (
        f"{sql}\nrefused with {type(err.value).__name__}: {err.value}\n"
        f"but charged {[c.epsilon for c in charged(session)]}")
