"""dpsql.rewrite.ordered: which aggregates below the top level are ordered, and how (the pass's
SQL on whole queries is in fixtures/ordered.sql; its effect on storage order and threads in
tests/redteam/test_float_fixes_attacks.py and test_float_sum_attacks.py)."""

from __future__ import annotations

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from dpsql.rewrite.ordered import _width, ordered
from dpsql.rewrite.safe_compare import Kind

KINDS = {"i": Kind("int", digits=10), "d": Kind("decimal", digits=13, scale=2),
         "f": Kind("float")}
TYPES = {"i": "INTEGER", "d": "DECIMAL(15,2)", "f": "DOUBLE"}


def _kind(column: exp.Column) -> Kind | None:
    return KINDS.get(column.name)


@pytest.mark.parametrize("sql", ["i", "d", "i * d + 3", "-(d - 2.50)", "i * i * i",
                                 "d * 1.25", "f", "i / 2", "d * f", "CAST(i AS DOUBLE)",
                                 "d * 0.12345678901234567890123456789012345678901",
                                 "1e3 * i", "ABS(d)"])
def test_exact_is_claimed_only_where_duckdb_computes_no_double(sql):
    node = sqlglot.parse_one(sql, read="duckdb")
    claimed = _width(node, _kind) is not None
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t ({', '.join(f'{c} {t}' for c, t in TYPES.items())})")
    (typ,) = con.execute(f"SELECT typeof({sql}) FROM (SELECT * FROM t UNION ALL "
                         "SELECT 1, 1.5, 1.5) LIMIT 1").fetchone()
    if claimed:  # never a floating-point type where exactness is claimed
        assert typ.startswith(("INTEGER", "BIGINT", "HUGEINT", "DECIMAL")), (sql, typ)
    else:
        # conservative elsewhere: a function (ABS) is not proved exact, whatever its type
        assert typ in ("DOUBLE", "FLOAT") or sql == "ABS(d)", (sql, typ)


@pytest.mark.parametrize(("sql", "want"), [
    ("SUM(x)", "SUM(x ORDER BY x)"),
    ("AVG(DISTINCT x)", "AVG(DISTINCT x ORDER BY x)"),
    ("CORR(y, x)", "CORR(y, x ORDER BY y, x)"),
    ("STDDEV_SAMP(x + 1)", "STDDEV_SAMP(x + 1 ORDER BY x + 1)"),
])
def test_an_aggregate_is_ordered_by_its_own_arguments(sql, want):
    assert ordered(sqlglot.parse_one(sql, read="duckdb")).sql("duckdb") == want
