"""dpsql/backends/spark_quantiles.py: DuckDB's quantiles and their Spark translation give the
same answers (noise off), on groups chosen for the edge cases -- one value, ties, NULLs, a
group of NULLs only, NaN and infinities, order statistics whose difference overflows, negative
zero -- at fractions 0, 1, between the order statistics, where n q is a float hair off an
integer, as decimal and as double literals; and the translation refuses what the engines
answer differently (DECIMAL, DATE, a non-literal fraction) from the SQL and the schema alone.

One small Spark test (the Spark group is the suite's long pole): every query runs once per
engine over one grouped table.
"""

from __future__ import annotations

import math

import duckdb
import pytest

from dpsql.backends.spark_sql import to_spark_sql
from dpsql.errors import NotSupportedError

#: (group, integer value, double value); group 9 holds NULLs only
ROWS = [
    (1, 7, 7.5),
    (2, 1, 1.0), (2, 3, 3.0),
    (3, 2, 2.0), (3, 2, 2.0), (3, 2, 2.0), (3, 5, -1.0),
    (4, None, None), (4, 4, 0.1), (4, None, 0.7), (4, -3, -0.0), (4, 9, 0.0),
    (5, 10, float("nan")), (5, 1, 1.0), (5, 2, 2.0),
    (6, 1, float("inf")), (6, 2, 1.0), (6, 3, float("-inf")),
    (7, 0, 1e308), (7, 0, 1.7e308), (7, 1, -1e308),
    *((8, i, i / 10) for i in range(10, 0, -1)),  # n = 10: n q is a float hair off 3 and 7
    (9, None, None), (9, None, None),
]
SCHEMA = {"t": {"k": "INTEGER", "n": "INTEGER", "x": "DOUBLE", "d": "DECIMAL(10,2)",
                "day": "DATE"}}
FRACTIONS = ("0", "0.1", "0.25", "0.3", "3e-1", "0.5", "0.6", "0.7", "0.75", "0.999", "1")


def _query() -> str:
    return f"SELECT t.k, {', '.join(_parts())} FROM t GROUP BY t.k ORDER BY t.k"


def _parts() -> list[str]:
    parts = []
    for i, q in enumerate(FRACTIONS):
        for col in ("n", "x"):
            parts.append(f"QUANTILE_CONT(t.{col}, {q}) AS c_{col}{i}")
            parts.append(f"QUANTILE_DISC(t.{col}, {q}) AS d_{col}{i}")
        parts.append(f"QUANTILE(t.n, {q}) AS q{i}")
    parts += ["MEDIAN(t.n) AS mn", "MEDIAN(t.x) AS mx",
              "TRY_CAST(QUANTILE_CONT(TRY_CAST(t.n AS DOUBLE), 0.5) AS DOUBLE) AS wrapped"]
    return parts


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300)


@pytest.mark.spark
def test_duckdb_and_spark_quantiles_agree(spark):
    sql = _query()
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k INTEGER, n INTEGER, x DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", ROWS)
    want = con.execute(sql).fetchall()
    con.close()
    frame = spark.createDataFrame(ROWS, "k INT, n INT, x DOUBLE")
    frame.createOrReplaceTempView("t")
    got = [tuple(r) for r in spark.sql(to_spark_sql(sql, SCHEMA)).collect()]
    assert len(got) == len(want) == 9
    names = ["k", *(part.rsplit(" AS ", 1)[-1] for part in _parts())]
    for g, w in zip(got, want, strict=True):
        bad = [(names[i], a, b) for i, (a, b) in enumerate(zip(g, w, strict=True))
               if not _same(a, b)]
        assert not bad, (w[0], bad)


def test_the_translation():
    """Every quantile reads the sorted values; none is left to Spark's own percentile."""
    sql = to_spark_sql("SELECT QUANTILE_CONT(t.x, 0.5), QUANTILE_DISC(t.n, 0.25), "
                       "QUANTILE(t.x, 1), MEDIAN(t.n) FROM t", SCHEMA)
    assert sql.count("ARRAY_SORT(COLLECT_LIST(") == 4
    assert sql.count("ARRAY_SORT(COLLECT_LIST(CAST(") == 2  # the continuous ones, in DOUBLE
    assert "PERCENTILE" not in sql and "MEDIAN" not in sql and "QUANTILE" not in sql
    assert "SIZE(__dpsql_sorted) * 0.25" in sql  # the decimal literal stays exact


@pytest.mark.parametrize("sql", [
    "SELECT QUANTILE_CONT(t.d, 0.5) FROM t",
    "SELECT MEDIAN(t.d) FROM t",
    "SELECT QUANTILE_DISC(t.day, 0.5) FROM t",
    "SELECT QUANTILE_CONT(t.missing, 0.5) FROM t",
])
def test_types_the_engines_answer_differently_are_refused(sql):
    with pytest.raises(NotSupportedError, match=r"cast it, e.g. QUANTILE_CONT"):
        to_spark_sql(sql, SCHEMA)


def test_a_fraction_must_be_one_literal():
    with pytest.raises(NotSupportedError, match="one numeric literal"):
        to_spark_sql("SELECT QUANTILE_CONT(t.x, [0.1, 0.5]) FROM t", SCHEMA)
