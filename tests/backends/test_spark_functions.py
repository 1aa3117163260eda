"""dpsql.backends.spark_functions: every allow-listed scalar function and operator gives
DuckDB's value on Spark, on edge rows (0, negatives, NULL, 1e300, empty and non-ASCII text,
month ends, midnight). Found while widening the function list: Spark's DAYOFWEEK counted
Sunday as 1, log(x) was natural, x / 0 NULL, substring(s, 0, n) one character longer,
date_diff('month', ...) counted whole months -- each a different answer on Spark.

One Spark query computes every expression (a JVM job per expression would cost ~0.1 s each).
"""

from __future__ import annotations

import datetime
import decimal
import math

import duckdb
import pytest

from dpsql.backends.spark import SESSION_CONF
from dpsql.backends.spark_sql import to_spark_sql
from dpsql.errors import NotSupportedError

ROWS = [
    (1, 1, 0, 2.5, 0.0, decimal.Decimal("1.50"), "hello", datetime.date(2024, 1, 7),
     datetime.datetime(2024, 1, 7, 23, 30)),
    (2, -7, 2, -2.5, -1.0, decimal.Decimal("-2.25"), "", datetime.date(2023, 12, 31),
     datetime.datetime(2024, 3, 31, 0, 0, 1)),
    (3, 0, -3, 0.0, 3.0, decimal.Decimal("0.00"), "héllo wörld", datetime.date(2024, 2, 29),
     datetime.datetime(2023, 12, 31, 23, 59, 59)),
    (4, None, None, None, None, None, None, None, None),
    (5, 2147483647, 5, 1e300, 2.0, decimal.Decimal("99999999.99"), "  a  ",
     datetime.date(1970, 1, 1), datetime.datetime(1970, 1, 1)),
]
COLUMNS = {"rid": "BIGINT", "i": "INTEGER", "j": "INTEGER", "x": "DOUBLE", "y": "DOUBLE",
           "m": "DECIMAL(10,2)", "s": "VARCHAR", "d": "DATE", "ts": "TIMESTAMP"}
SPARK_COLUMNS = ("rid BIGINT, i INT, j INT, x DOUBLE, y DOUBLE, m DECIMAL(10,2), s STRING, "
                 "d DATE, ts TIMESTAMP_NTZ")
EXPRESSIONS = [
    "abs(t.i)", "abs(t.x)", "round(t.x)", "round(t.m, 1)", "round(t.x, 1)", "floor(t.x)",
    "ceil(t.x)", "floor(t.m)", "ceil(t.m)", "sqrt(t.x)", "ln(t.x)", "log(t.x)", "log(2, t.x)",
    "log(t.y, 8.0)", "exp(t.y)", "pow(t.x, 2)", "pow(t.y, 0.5)", "sign(t.i)",
    "greatest(t.i, t.j)", "least(t.x, t.y)", "coalesce(t.i, t.j, 0)", "nullif(t.i, 0)",
    "if(t.i > 0, 'p', 'n')", "upper(t.s)", "lower(t.s)", "length(t.s)",
    "substring(t.s, t.j, 2)", "substring(t.s, 0, 3)", "substring(t.s, t.j)",
    "substring(t.s, 2, t.j)", "substring(t.s, -2, 5)", "substring(t.s, t.i, t.j)",
    "trim(t.s)", "concat(t.s, 'x', t.s)", "t.s || 'x'", "left(t.s, t.j)", "right(t.s, t.j)",
    "strpos(t.s, 'l')", "starts_with(t.s, 'h')",
    "extract(year from t.d)", "extract(dow from t.d)", "extract(isodow from t.ts)",
    "extract(dayofweek from t.d)", "extract(doy from t.d)", "extract(week from t.d)",
    "extract(quarter from t.ts)", "year(t.ts)", "month(t.d)", "day(t.ts)", "quarter(t.d)",
    "dayofweek(t.d)", "isodow(t.d)", "date_trunc('month', t.d)", "date_trunc('week', t.d)",
    "date_trunc('hour', t.ts)", "date_trunc('year', t.ts)",
    "date_diff('day', t.d, DATE '2024-03-01')", "date_diff('month', t.d, DATE '2024-03-01')",
    "date_diff('year', t.d, DATE '2025-01-01')", "date_diff('quarter', t.d, DATE '2024-04-01')",
    "date_diff('week', t.d, DATE '2024-03-01')", "date_diff('week', DATE '2024-03-01', t.d)",
    "date_diff('day', t.ts, TIMESTAMP '2024-03-01 00:00:00')",
    "date_diff('hour', t.ts, TIMESTAMP '2024-03-01 00:00:00')",
    "date_diff('minute', t.ts, TIMESTAMP '2024-03-01 00:00:00')",
    "date_diff('second', t.ts, TIMESTAMP '2024-01-08 00:00:00')",
    "t.d + INTERVAL 1 DAY", "t.d + 3", "t.i / t.j", "t.x / t.y", "t.j / t.x", "t.i // t.j",
    "t.i % t.j", "t.x % t.y", "t.m / t.j", "t.x / 4", "t.i * t.j", "-t.i", "t.i + t.j",
    "CAST(t.x AS INTEGER)", "CAST(t.s AS INTEGER)", "CAST(t.m AS VARCHAR)",
    "CAST(t.d AS VARCHAR)", "CAST(t.ts AS DATE)", "t.s LIKE 'h%'", "t.s ILIKE 'H%'",
    "t.i BETWEEN 0 AND 5", "t.x IN (2.5, 0.0)", "CASE WHEN t.i > 0 THEN t.x ELSE t.y END",
    "dayofyear(t.d)", "week(t.d)", "weekofyear(t.ts)", "isodow(t.ts)", "hour(t.ts)",
    "minute(t.ts)", "second(t.ts)", "monthname(t.d)", "dayname(t.ts)", "last_day(t.d)",
    "last_day(t.ts)", "replace(t.s, 'l', 'L')", "replace(t.s, '', 'x')",
    "contains(t.s, 'l')", "contains(t.s, '')",
]


def _same(value):
    """A value as both engines' answers compare: NaN equal to NaN, finite floats to 12
    significant digits (the JVM's exp may differ from C's in the last bit), a midnight
    TIMESTAMP as its DATE (date_trunc of a DATE: DuckDB's TIMESTAMP, Spark's DATE), DECIMALs
    as numbers."""
    if isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else float(f"{value:.12g}")
    if isinstance(value, datetime.datetime) and value == datetime.datetime.combine(
            value.date(), datetime.time()):
        return value.date()
    return value


def _query() -> str:
    outputs = ", ".join(f"TRY({e}) AS v{k}" for k, e in enumerate(EXPRESSIONS))
    return f"SELECT t.rid, {outputs} FROM t AS t ORDER BY t.rid"


@pytest.mark.spark
def test_every_function_is_duckdbs_on_spark(spark):
    con = duckdb.connect()
    con.execute("CREATE TABLE t (" + ", ".join(f"{c} {t}" for c, t in COLUMNS.items()) + ")")
    con.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(COLUMNS))})", ROWS)
    expected = con.execute(_query()).fetchall()
    for key, value in SESSION_CONF.items():  # as dpsql's Spark backend runs (ANSI off)
        spark.conf.set(key, value)
    spark.createDataFrame(ROWS, SPARK_COLUMNS).createOrReplaceTempView("t")
    got = spark.sql(to_spark_sql(_query(), {"t": COLUMNS})).collect()
    differing = {
        EXPRESSIONS[k]: ([_same(r[k + 1]) for r in expected], [_same(r[k + 1]) for r in got])
        for k in range(len(EXPRESSIONS))
        if [_same(r[k + 1]) for r in expected] != [_same(r[k + 1]) for r in got]}
    assert differing == {}


@pytest.mark.parametrize("sql", ["SELECT CAST(t.x AS VARCHAR) FROM t AS t",
                                 "SELECT COUNT(*) FROM t AS t WHERE CAST(t.x AS TEXT) = '1'",
                                 "SELECT date_diff('millennium', t.d, t.d) FROM t AS t",
                                 "SELECT COUNT(*) FROM t AS t WHERE reverse(t.s) = 'a'"])
def test_what_spark_cannot_answer_alike_fails_closed(sql):
    with pytest.raises(NotSupportedError):
        to_spark_sql(sql, {"t": COLUMNS})
