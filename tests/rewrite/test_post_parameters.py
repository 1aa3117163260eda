"""AVG and the variance family over an argument holding ``?`` parameters: post-processing finds
their measurements whether the labels were written before or after the parameters were
numbered (a fuzz query crashed with a KeyError here)."""

from __future__ import annotations

import duckdb
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.metadata import loads_metadata
from dpsql.session import Session
from tests.db_files import writing
from tests.shop_fixture import ZeroNoise

METADATA = """
tables:
  t:
    columns:
      g: {type: BIGINT, releasable: true, domain: {values: [1, 2]}}
      x: {type: BIGINT, bounds: [0, 10]}
"""


@pytest.fixture
def session(tmp_path):
    path = tmp_path / "t.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t AS SELECT 1 + i % 2 AS g, i % 11 AS x FROM range(40) r(i)")
    md = loads_metadata(METADATA)
    backend = DuckDBBackend(path, md)
    yield Session(md, backend, sampler=ZeroNoise())
    backend.close()


def test_avg_of_a_parameterised_argument(session):
    sql = ("SELECT g, AVG(CASE WHEN x > ? THEN x ELSE 0 END) AS a FROM t GROUP BY g "
           "ORDER BY g")
    rows = session.run(sql, [4], epsilon=1.0).rows
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 1 + i % 2 AS g, i % 11 AS x FROM range(40) r(i)")
    want = con.execute(sql.replace("?", "4")).fetchall()
    assert [(g, pytest.approx(a)) for g, a in want] == rows


def test_variance_of_a_parameterised_argument(session):
    (value,) = session.run("SELECT VAR_POP(CASE WHEN x > ? THEN x ELSE 0 END) FROM t", [4],
                           epsilon=1.0).rows[0]
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 11 AS x FROM range(40) r(i)")
    (want,) = con.execute("SELECT VAR_POP(CASE WHEN x > 4 THEN x ELSE 0 END) FROM t").fetchone()
    assert value == pytest.approx(want)
