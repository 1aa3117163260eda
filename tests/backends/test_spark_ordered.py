"""dpsql.backends.spark_ordered: sample-and-aggregate's ordered floating-point aggregates as
folds over their sorted values on Spark (their results against DuckDB's are checked through
tests/sample_aggregate/test_rewrite.py on both backends)."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.backends.spark_ordered import translate_ordered
from dpsql.errors import NotSupportedError


def _spark(sql: str) -> str:
    return translate_ordered(sqlglot.parse_one(sql, read="duckdb")).sql(dialect="spark")


@pytest.mark.parametrize("aggregate", ["SUM(x ORDER BY x)", "AVG(x ORDER BY x)",
                                       "STDDEV(x ORDER BY x)", "VAR_POP(x ORDER BY x)",
                                       "SUM(DISTINCT x ORDER BY x)",
                                       "CORR(y, x ORDER BY y, x)",
                                       "COVAR_POP(y, x ORDER BY y, x)"])
def test_every_ordered_aggregate_becomes_a_fold_over_sorted_values(aggregate):
    sql = _spark(f"SELECT g, {aggregate} FROM t GROUP BY g ORDER BY g")
    assert "ARRAY_SORT(" in sql and "AGGREGATE(" in sql
    assert sql.count("ORDER BY") == 1  # the query's own, kept
    assert ("COLLECT_SET(" in sql) == ("DISTINCT" in aggregate)


def test_the_sum_folds_from_null_and_skips_nulls():
    sql = _spark("SELECT SUM(x ORDER BY x) FROM t")
    assert sql == ("SELECT AGGREGATE(ARRAY_SORT(COLLECT_LIST(x)), CAST(NULL AS DOUBLE), "
                   "(__a, __v) -> COALESCE(__a, CAST(0 AS DOUBLE)) + __v) FROM t")


def test_an_ordered_aggregate_without_a_fold_fails_closed():
    with pytest.raises(NotSupportedError, match="DuckDB"):
        _spark("SELECT MEDIAN(x ORDER BY x) FROM t")
    # a window's ORDER BY is not an aggregate's: left as it is
    assert "SUM(x) OVER (ORDER BY x" in _spark("SELECT SUM(x) OVER (ORDER BY x) FROM t")
