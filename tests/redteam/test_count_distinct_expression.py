"""Red team (issue #15): COUNT(DISTINCT <computed value>) was executed as a plain COUNT.

The totality pass wraps an argument that can fail in TRY; for COUNT(DISTINCT s.v * 2) it wrapped
the DISTINCT node itself, and DuckDB runs ``COUNT(TRY(DISTINCT s.v * 2))`` as COUNT(s.v * 2):
every row counted, duplicates included. Not a privacy leak (COUNT(x) and COUNT(DISTINCT x) have
the same ES, S), but a wrong released value with noise off: D = {1, 1, 2} gave 3 instead of 2.
(Spark translated the same SQL to COUNT(DISTINCT try_multiply(...)), so the backends disagreed.)
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from dpsql.metadata import loads_metadata
from tests.neighbours import outcome, write_database

SCHEMA = ("CREATE TABLE t (k VARCHAR, n INTEGER)",)
ROWS = {"t": [("a", 1), ("a", 1), ("b", 2), ("b", 2), ("b", 3)]}
METADATA = loads_metadata("""
tables:
  t:
    columns:
      k: {max_freq: 3, releasable: true, type: VARCHAR, domain: {values: [a, b]}}
      n: {max_freq: 2, type: INTEGER, bounds: [0, 5]}
""")

QUERIES = (
    "SELECT COUNT(DISTINCT n * 2) FROM t",
    "SELECT COUNT(DISTINCT n + 1) FROM t WHERE k = 'b'",
    "SELECT k, COUNT(DISTINCT n * 2) FROM t GROUP BY k ORDER BY k",
    "SELECT COUNT(DISTINCT n - 1) FILTER (WHERE k = 'a') FROM t",
)


@pytest.mark.parametrize("sql", QUERIES)
def test_count_distinct_of_a_computed_value_counts_distinct_values(tmp_path: Path,
                                                                   sql: str) -> None:
    db = write_database(tmp_path / "d.duckdb", SCHEMA, ROWS)
    con = duckdb.connect(str(db), read_only=True)
    try:
        expected = con.execute(sql).fetchall()
    finally:
        con.close()
    got = outcome(db, METADATA, sql, epsilon=1e6)
    assert got == ("ok", expected), f"{sql}: dpsql (noise off) {got}, DuckDB {expected}"
