"""dpsql.rewrite.operand_types: every type it reads from the SQL and the metadata is the type
DuckDB gives the same expression on a row of real data (``typeof``); what it cannot type is
None, never a guess."""

from __future__ import annotations

import duckdb
import pytest
from sqlglot import exp

from dpsql.analysis.keytypes import normalise
from dpsql.analysis.parse import parse_query
from dpsql.metadata import loads_metadata
from dpsql.rewrite.operand_types import bound_type, operand_types

#: one row's value per declared type of ``t.v`` and ``t.w``
_VALUES = {"DATE": "'2024-01-31'", "TIMESTAMP": "'2024-01-31 10:00:00'",
           "TIMESTAMPTZ": "'2024-01-31 10:00:00+00'", "VARCHAR": "'a'"}


_CONNECTIONS: list[duckdb.DuckDBPyConnection] = []


def _connection() -> duckdb.DuckDBPyConnection:
    """One in-memory DuckDB for the module's comparisons (an instance costs ~15 ms)."""
    if not _CONNECTIONS:
        _CONNECTIONS.append(duckdb.connect())
    return _CONNECTIONS[0]


def _typed(sql: str, types: dict[str, str]) -> tuple[str | None, str]:
    """(operand_types' type of the first projection of ``sql`` over t(v, w), DuckDB's
    typeof of it on one row of real data)."""
    columns = "\n".join(f"      {c}: {{type: '{t}'}}" for c, t in types.items())
    md = loads_metadata(f"tables:\n  t:\n    columns:\n{columns}\n")
    query = parse_query(sql, md, extra_funcs=(exp.AggFunc,))
    assert isinstance(query, exp.Select)
    claimed = operand_types(query, md, frozenset())(query.expressions[0].unalias())
    con = _connection()
    con.execute(f"CREATE OR REPLACE TABLE t "
                f"({', '.join(f'{c} {t}' for c, t in types.items())})")
    con.execute(f"INSERT INTO t VALUES ({', '.join(_VALUES.get(t, '1') for t in types.values())})")
    asked = query.copy()  # the same query, its projection's typeof
    asked.set("expressions", [exp.Anonymous(this="typeof",
                                            expressions=[asked.expressions[0].unalias()])])
    (actual,) = con.execute(asked.sql(dialect="duckdb")).fetchone()
    return claimed, actual


def _same(claimed: str | None, actual: str) -> bool:
    return (claimed is not None and normalise(claimed).sql(dialect="duckdb")
            == normalise(actual).sql(dialect="duckdb"))


@pytest.mark.parametrize(("expression", "argument"), [
    ("YEAR(v)", "DATE"), ("MONTH(v)", "TIMESTAMP"), ("DAY(v)", "DATE"), ("QUARTER(v)", "DATE"),
    ("DAYOFWEEK(v)", "DATE"),
    ("EXTRACT(year FROM v)", "DATE"), ("EXTRACT(epoch FROM v)", "TIMESTAMP"),
    ("EXTRACT(julian FROM v)", "DATE"), ("EXTRACT(second FROM v)", "TIMESTAMP"),
    ("DATE_TRUNC('month', v)", "DATE"), ("DATE_TRUNC('day', v)", "TIMESTAMP"),
    ("DATE_TRUNC('hour', v)", "TIMESTAMPTZ"),
    ("COUNT(*)", "INTEGER"), ("MIN(v)", "DATE"), ("MAX(v)", "DECIMAL(10,2)"),
    # computed: DuckDB's binder types them
    ("v + 1", "DATE"), ("v - 1", "DATE"), ("1 + v", "DATE"), ("v - INTERVAL 1 DAY", "DATE"),
    ("v + INTERVAL 1 HOUR", "TIMESTAMPTZ"), ("v + 1", "INTEGER"), ("v + 1", "SMALLINT"),
    ("v / 2", "INTEGER"), ("v // 2", "INTEGER"), ("v % 2", "BIGINT"), ("-v", "INTEGER"),
    ("v * 2", "DECIMAL(10,2)"), ("v + 1.5", "INTEGER"), ("(v + 1) * 2", "HUGEINT"),
    ("COALESCE(v, 0)", "SMALLINT"), ("COALESCE(v, '2024-01-01')", "DATE"),
    ("NULLIF(v, v)", "TIMESTAMP"), ("ABS(v)", "SMALLINT"), ("ROUND(v, 1)", "DECIMAL(10,2)"),
    ("FLOOR(v)", "DOUBLE"), ("CEIL(v)", "DECIMAL(10,2)"), ("GREATEST(v, 1)", "BIGINT"),
    ("LEAST(v, '2024-01-01')", "DATE"), ("YEAR(v) + 1", "DATE"), ("CAST(v AS INT) + 1", "VARCHAR"),
    ("DATE_ADD(v, INTERVAL 1 DAY)", "DATE"), ("UPPER(v) || 'x'", "VARCHAR"),
    ("HOUR(v)", "TIMESTAMP"), ("SECOND(v)", "TIMESTAMP"), ("WEEKOFYEAR(v)", "DATE"),
    ("ISODOW(v)", "DATE"), ("DAYOFYEAR(v)", "DATE"), ("WEEK(v)", "DATE"),
    ("MONTHNAME(v)", "DATE"), ("LAST_DAY(v)", "TIMESTAMP"), ("REVERSE(v)", "VARCHAR"),
    ("CONTAINS(v, 'a')", "VARCHAR"), ("REPLACE(v, 'a', 'b')", "VARCHAR"),
    ("LENGTH(v) * 2", "VARCHAR"), ("CASE WHEN v > 1 THEN v ELSE 0.5 END", "INTEGER"),
    ("v BETWEEN 1 AND 2", "BIGINT"), ("POW(v, 2)", "INTEGER"), ("DATE_DIFF('day', v, v)", "DATE"),
])
def test_each_type_is_duckdbs_own(expression, argument):
    claimed, actual = _typed(f"SELECT {expression} FROM t", {"v": argument})
    assert _same(claimed, actual), (claimed, actual)


@pytest.mark.parametrize(("expression", "types"), [
    ("v + w", {"v": "DATE", "w": "INTEGER"}),
    ("v - w", {"v": "DATE", "w": "DATE"}),
    ("COALESCE(v, w)", {"v": "INTEGER", "w": "DOUBLE"}),
    ("COALESCE(v, w)", {"v": "DATE", "w": "TIMESTAMP"}),
])
def test_two_columns_are_typed_together(expression, types):
    claimed, actual = _typed(f"SELECT {expression} FROM t", types)
    assert _same(claimed, actual), (claimed, actual)


@pytest.mark.parametrize(("left", "right"), [
    ("DATE", "TIMESTAMP"), ("INTEGER", "BIGINT"), ("SMALLINT", "DECIMAL(10,2)"),
    ("INTEGER", "VARCHAR"), ("DATE", "DATE"),
])
def test_a_set_operations_column_is_the_common_type(left, right):
    sql = ("WITH u AS (SELECT t.v AS k FROM t UNION ALL SELECT t.w FROM t "
           "UNION (SELECT t.v FROM t)) SELECT u.k FROM u")
    claimed, actual = _typed(sql, {"v": left, "w": right})
    assert _same(claimed, actual), (claimed, actual)


@pytest.mark.parametrize("sql", [
    "SELECT v + w FROM t",  # w undeclared: unknown
    "SELECT v + INTERVAL (w) DAY FROM t",  # an INTERVAL of a column: not sent to the binder
    "SELECT v + (SELECT MAX(t2.v) FROM t AS t2) FROM t",  # a subquery is no leaf it types
])
def test_what_it_cannot_type_is_unknown(sql):
    md = loads_metadata("tables:\n  t:\n    columns:\n      v: {type: DATE}\n      w: {}\n")
    query = parse_query(sql, md, extra_funcs=(exp.AggFunc,))
    assert isinstance(query, exp.Select)
    assert operand_types(query, md, frozenset())(query.expressions[0].unalias()) is None


def test_the_binder_names_no_type_for_what_it_cannot_bind():
    assert bound_type("CAST(NULL AS DATE) + CAST(NULL AS DATE)") is None
    assert bound_type("CAST(NULL AS DATE) + 1") == "DATE"
