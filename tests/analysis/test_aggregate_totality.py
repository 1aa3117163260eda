"""dpsql.analysis.aggregate_totality: operations above an aggregate in an exactly-run subquery.

The accepted forms, after the totality pass, run on DuckDB over extreme stored values (the
largest HUGEINT and DECIMAL(38, s) sums, DOUBLE averages) and must not raise; the refused ones
include forms that do raise there (a refusal that is not needed is only a usability cost, an
acceptance that is wrong is a data-dependent error)."""

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
      h: {type: HUGEINT}
      d: {type: "DECIMAL(38, 2)"}
      f: {type: DOUBLE}
      i: {type: INTEGER}
""")


def _select(sql: str):
    return sqlglot.parse_one(sql, read="duckdb")


#: a table whose sums reach the edges of their types: h sums to the largest HUGEINT, d to a
#: DECIMAL(38, 2) near its largest value, f to a huge DOUBLE
@pytest.fixture(scope="module")
def extreme():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k INTEGER, h HUGEINT, d DECIMAL(38, 2), f DOUBLE, i INTEGER)")
    con.execute("INSERT INTO t VALUES (1, 170141183460469231731687303715884105727, "
                "999999999999999999999999999999999999.99, 1e308, 2147483647), "
                "(2, -170141183460469231731687303715884105727, "
                "-999999999999999999999999999999999999.99, -1e308, -2147483648)")
    yield con
    con.close()


ACCEPTED = [
    "SELECT k, COUNT(*), SUM(h), AVG(f) FROM t GROUP BY k",
    "SELECT k, LEAST(COUNT(*), 3), GREATEST(SUM(h), 0), LEAST(AVG(d), 2.5) FROM t GROUP BY k",
    "SELECT k FROM t GROUP BY k HAVING COUNT(*) > 1 OR SUM(h) > 300 OR SUM(d) >= -7",
    "SELECT k FROM t GROUP BY k HAVING AVG(f) > 2.5 AND COUNT(*) <> 0.5 AND AVG(i) < COUNT(*)",
    "SELECT k FROM t GROUP BY k HAVING COUNT(*) BETWEEN 1 AND 5 AND NOT SUM(h) IS NULL",
    "SELECT k FROM t GROUP BY k HAVING SUM(h) > COUNT(*) AND LEAST(SUM(d), COUNT(*)) < 3",
    "SELECT k, LEAST(COUNT(*) FILTER (WHERE t.k = 1), 2), TRY_CAST(SUM(h) AS UTINYINT) FROM t "
    "GROUP BY k",
    "SELECT k, SUM(i * 2) FROM t GROUP BY k",  # inside the aggregate: the totality pass's TRY
]

REFUSED = [
    ("SELECT k FROM t GROUP BY k HAVING CAST(SUM(i) AS UTINYINT) > 3", "CAST"),
    ("SELECT k, CAST(SUM(i) AS TINYINT) FROM t GROUP BY k", "CAST"),
    ("SELECT k FROM t GROUP BY k HAVING SUM(h) * 2 > 0", "MUL"),
    ("SELECT k FROM t GROUP BY k HAVING SUM(h) > 2.5", "a sum meets a dec"),
    ("SELECT k, LEAST(SUM(h), 2.5) FROM t GROUP BY k", "a sum meets a dec"),
    ("SELECT k FROM t GROUP BY k HAVING SUM(h) > SUM(d)", "a sum meets a sum"),
    ("SELECT k FROM t GROUP BY k HAVING COUNT(*) > ?", "PLACEHOLDER"),
    ("SELECT k FROM t GROUP BY k HAVING COUNT(*) > '1'", "not on the positive list"),
    ("SELECT k, LN(COUNT(*) - 1) FROM t GROUP BY k", "not on the positive list"),
    ("SELECT k FROM t GROUP BY k HAVING SUM(i)", "not a comparison"),
]


@pytest.mark.parametrize("sql", ACCEPTED)
def test_accepted_forms_do_not_raise_on_extreme_values(extreme, sql):
    query = _select(sql)
    check_total_over_aggregates(query)
    total_query(query, METADATA)  # as the engine runs it: TRY below the aggregates
    extreme.execute(query.sql(dialect="duckdb")).fetchall()


@pytest.mark.parametrize(("sql", "fragment"), REFUSED)
def test_refused_forms_name_the_operation(sql, fragment):
    with pytest.raises(UnsupportedConstructError, match="aggregate's exact value") as err:
        check_total_over_aggregates(_select(sql))
    assert fragment in str(err.value)


@pytest.mark.parametrize("sql", [
    "SELECT k FROM t GROUP BY k HAVING CAST(SUM(i) AS UTINYINT) > 3",
    "SELECT k FROM t GROUP BY k HAVING SUM(h) > 2.5",
    "SELECT k FROM t GROUP BY k HAVING SUM(h) > SUM(d)",
])
def test_the_refused_forms_do_raise_on_some_values(extreme, sql):
    # not vacuous: these are data-dependent errors on DuckDB
    with pytest.raises(duckdb.Error):
        extreme.execute(sql).fetchall()
