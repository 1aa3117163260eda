"""dpsql/rewrite/lookups.py: the released histogram of a correlated subquery as a CASE lookup
of the outer column, put in place of the subquery's parameter and nothing else."""

from __future__ import annotations

import duckdb
import numpy as np
from sqlglot import exp

from dpsql.analysis.correlated import Lookup
from dpsql.analysis.parse import DIALECT
from dpsql.rewrite.lookups import lookup_case, with_lookups
from dpsql.rewrite.plan import ExecutionPlan

LOOKUP = Lookup(exp.column("p_partkey", table="part"), "BIGINT")


def test_the_lookup_lists_each_key_typed_and_each_value_as_a_double():
    case = lookup_case(LOOKUP, [(1, 2.5), (np.int64(7), np.float64(-1.0)), (None, 3.0),
                                (9, None), (10, float("nan"))])
    assert case.sql(dialect=DIALECT) == (
        "CASE part.p_partkey WHEN CAST(1 AS BIGINT) THEN CAST(2.5 AS DOUBLE) "
        "WHEN CAST(7 AS BIGINT) THEN CAST(-1.0 AS DOUBLE) "
        "WHEN CAST(9 AS BIGINT) THEN CAST(NULL AS DOUBLE) "
        "WHEN CAST(10 AS BIGINT) THEN CAST(NULL AS DOUBLE) ELSE CAST(NULL AS DOUBLE) END")


def test_an_empty_lookup_is_typed_and_null_everywhere():
    case = lookup_case(LOOKUP, [])
    assert case.sql(dialect=DIALECT) == (
        "CASE part.p_partkey WHEN CAST(NULL AS BIGINT) THEN CAST(NULL AS DOUBLE) "
        "ELSE CAST(NULL AS DOUBLE) END")
    con = duckdb.connect()
    con.execute("CREATE TABLE part AS SELECT range::BIGINT AS p_partkey FROM range(3)")
    assert con.execute(f"SELECT {case.sql(dialect=DIALECT)} FROM part").fetchall() == [
        (None,)] * 3


def test_the_lookup_gives_each_rows_released_value_as_the_subquery_would():
    con = duckdb.connect()
    con.execute("CREATE TABLE part AS SELECT range::BIGINT AS p_partkey FROM range(4)")
    case = lookup_case(LOOKUP, [(1, 2.5), (2, None), (3, 0.0)]).sql(dialect=DIALECT)
    rows = con.execute(f"SELECT p_partkey, {case} FROM part ORDER BY 1").fetchall()
    assert rows == [(0, None), (1, 2.5), (2, None), (3, 0.0)]


def test_with_lookups_replaces_only_the_given_parameter():
    plan = ExecutionPlan(
        exact_sql="SELECT SUM(x) AS __m0 FROM t AS t WHERE TRY(t.y < $__dpsql_param_1) "
                  "AND t.z > $__dpsql_param_0",
        exact_params=(0, 1), n_keys=0, n_measurements=1, output_names=("s",), post_sql=None,
        post_params=(), fast_path=None, canonical_sql="x")
    out = with_lookups(plan, {1: lookup_case(Lookup(exp.column("k", table="t"), "INTEGER"),
                                             [(1, 2.0)])})
    assert out.exact_sql == (
        "SELECT SUM(x) AS __m0 FROM t AS t WHERE TRY(t.y < (CASE t.k WHEN CAST(1 AS INT) "
        "THEN CAST(2.0 AS DOUBLE) ELSE CAST(NULL AS DOUBLE) END)) AND t.z > $__dpsql_param_0")
    assert out.exact_params == (0,) and out.canonical_sql == ""
