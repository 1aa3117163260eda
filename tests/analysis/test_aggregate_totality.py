"""dpsql.analysis.aggregate_totality: operations above an aggregate in an exactly-run subquery.

The accepted forms, after the totality pass, run on DuckDB over extreme stored values (BIGINT
and DECIMAL(38, 2) sums near their types' limits, a DECIMAL(38, 30) sum, huge DOUBLEs) and must
not raise; the refused ones include forms that do raise there (a refusal that is not needed is
only a usability cost, an acceptance that is wrong is a data-dependent error)."""

from __future__ import annotations

import duckdb
import pytest
import sqlglot

from dpsql.analysis.aggregate_totality import check_total_over_aggregates
from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import loads_metadata
from dpsql.rewrite.totality import total_query

METADATA = loads_metadata("""
tables:
  t:
    columns:
      k: {type: INTEGER}
      i: {type: INTEGER}
      b: {type: BIGINT}
      d: {type: "DECIMAL(38, 2)"}
      e: {type: "DECIMAL(38, 30)"}
      f: {type: DOUBLE}
      h: {type: HUGEINT}
""")


def _type(column):
    return METADATA.tables["t"].columns[column.name].type


def _check(sql: str):
    query = sqlglot.parse_one(sql, read="duckdb")
    check_total_over_aggregates(query, _type)
    return query


@pytest.fixture(scope="module")
def extreme():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k INTEGER, i INTEGER, b BIGINT, d DECIMAL(38, 2), "
                "e DECIMAL(38, 30), f DOUBLE, h HUGEINT)")
    con.execute("INSERT INTO t VALUES (1, 2147483647, 9223372036854775807, "
                "999999999999999999999999999999999999.99, 99999999.9, 1e308, "
                "170141183460469231731687303715884105727), (2, -2147483648, "
                "-9223372036854775808, -999999999999999999999999999999999999.99, -99999999.9, "
                "-1e308, -170141183460469231731687303715884105727)")
    yield con
    con.close()


ACCEPTED = [
    "SELECT t.k, COUNT(*), SUM(t.b), SUM(t.d), AVG(t.f), SUM(t.h) FROM t GROUP BY t.k",
    "SELECT t.k, LEAST(COUNT(*), 3), GREATEST(SUM(t.b), 0), LEAST(AVG(t.d), 2.5), "
    "LEAST(SUM(t.e), 5) FROM t GROUP BY t.k",
    "SELECT t.k FROM t GROUP BY t.k HAVING COUNT(*) > 1 OR SUM(t.b) > 300 OR SUM(t.d) >= -7.5",
    "SELECT t.k FROM t GROUP BY t.k HAVING AVG(t.f) > 2.5 AND COUNT(*) <> 0.5 "
    "AND AVG(t.i) < COUNT(*) AND SUM(t.f) > SUM(t.d)",
    "SELECT t.k FROM t GROUP BY t.k HAVING COUNT(*) BETWEEN 1 AND 5 AND NOT SUM(t.b) IS NULL",
    "SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.b) > COUNT(*) AND LEAST(SUM(t.d), COUNT(*)) < 3",
    "SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.e) > 12345678 AND SUM(t.d) > SUM(t.d)",
    "SELECT t.k, LEAST(COUNT(*) FILTER (WHERE t.k = 1), 2), TRY_CAST(SUM(t.b) AS UTINYINT) "
    "FROM t GROUP BY t.k",
    "SELECT t.k, SUM(t.i * 2) FROM t GROUP BY t.k",  # inside the aggregate: the pass's TRY
]

REFUSED = [
    ("SELECT t.k FROM t GROUP BY t.k HAVING CAST(SUM(t.i) AS UTINYINT) > 3", "CAST"),
    ("SELECT t.k, CAST(SUM(t.i) AS TINYINT) FROM t GROUP BY t.k", "CAST"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.b) * 2 > 0", "MUL"),
    ("SELECT t.k, -COUNT(*) FROM t GROUP BY t.k", "NEG"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.b) > 2.5", "cannot hold them all"),
    ("SELECT t.k, LEAST(SUM(t.i), 2.5) FROM t GROUP BY t.k", "cannot hold them all"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.e) > 999999999999999", "cannot hold"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.e) > COUNT(*)", "cannot hold them all"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.e) > SUM(t.d)", "cannot hold them all"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.h) > 0", "SUM of unknown type"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.i * 2) > 0", "SUM of unknown type"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING COUNT(*) > ?", "PLACEHOLDER"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING COUNT(*) > '1'", "not on the positive list"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING COUNT(*) > 1e3", "not on the positive list"),
    ("SELECT t.k, LN(COUNT(*) - 1) FROM t GROUP BY t.k", "not on the positive list"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.i)", "not a comparison"),
    ("SELECT t.k FROM t GROUP BY t.k HAVING (COUNT(*) > 1) = (SUM(t.i) > 1)", "a condition"),
]


@pytest.mark.parametrize("sql", ACCEPTED)
def test_accepted_forms_do_not_raise_on_extreme_values(extreme, sql):
    query = _check(sql)
    total_query(query, METADATA)  # as the engine runs it: TRY below the aggregates
    extreme.execute(query.sql(dialect="duckdb")).fetchall()


@pytest.mark.parametrize(("sql", "fragment"), REFUSED)
def test_refused_forms_name_the_operation(sql, fragment):
    with pytest.raises(UnsupportedConstructError, match="aggregate's exact value") as err:
        _check(sql)
    assert fragment in str(err.value)


@pytest.mark.parametrize("sql", [
    "SELECT t.k FROM t GROUP BY t.k HAVING CAST(SUM(t.i) AS UTINYINT) > 3",
    "SELECT t.k FROM t GROUP BY t.k HAVING SUM(t.e) > 999999999999999",
    "SELECT t.k, LEAST(CAST(COUNT(*) AS HUGEINT) * t.k * 170141183460469231731687303715884105727, "
    "0) FROM t GROUP BY t.k",
])
def test_the_refused_forms_do_raise_on_some_values(extreme, sql):
    # not vacuous: these are data-dependent errors on DuckDB (an empty table raises nothing)
    with pytest.raises(duckdb.Error):
        extreme.execute(sql).fetchall()
    extreme.execute(sql.replace("FROM t", "FROM t WHERE t.k > 2")).fetchall()


def test_without_types_a_sum_is_only_released_bare():
    sql = "SELECT t.k, SUM(t.b) FROM t GROUP BY t.k HAVING SUM(t.b) > 3"
    query = sqlglot.parse_one(sql, read="duckdb")
    with pytest.raises(UnsupportedConstructError, match="SUM of unknown type"):
        check_total_over_aggregates(query)
    check_total_over_aggregates(sqlglot.parse_one("SELECT t.k, SUM(t.b) FROM t GROUP BY t.k"))
