"""dpsql.analysis.constant_subqueries: a subquery that is one literal is written as the literal
(QA round 7: ``status IN (SELECT 'returned')`` and ``quantity = (SELECT 2)`` were refused);
answered as DuckDB answers the SQL as written, alike on every database; anything more than one
literal stays a subquery."""

from __future__ import annotations

import duckdb
import pytest
import sqlglot

from dpsql.analysis.constant_subqueries import inline_constant_subqueries
from dpsql.metadata import loads_metadata
from tests.neighbours import outcome, write_database

METADATA = loads_metadata("""
tables:
  v:
    columns:
      s: {type: VARCHAR}
      n: {type: INTEGER}
""")
ROWS = {"v": [("a", 1), ("b", 2), ("b", -3), (None, None)]}


@pytest.fixture(scope="module")
def databases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("constants")
    schema = ["CREATE TABLE v (s VARCHAR, n INTEGER)"]
    return (write_database(folder / "rows.duckdb", schema, ROWS),
            write_database(folder / "empty.duckdb", schema, {}))


@pytest.mark.parametrize(("sql", "inlined"), [
    ("SELECT 1 FROM v WHERE v.s IN (SELECT 'b')", "v.s IN ('b')"),
    ("SELECT 1 FROM v WHERE v.n = (SELECT 2)", "v.n = (2)"),
    ("SELECT 1 FROM v WHERE v.n > (SELECT -3)", "v.n > (-3)"),
    ("SELECT 1 FROM v WHERE v.n NOT IN (SELECT 2)", "NOT v.n IN (2)"),
    ("SELECT 1 FROM v WHERE v.n = (SELECT TRUE)", "v.n = (TRUE)"),
])
def test_one_literal_is_written_as_itself(sql, inlined):
    tree = inline_constant_subqueries(sqlglot.parse_one(sql, read="duckdb"))
    assert inlined in tree.sql(dialect="duckdb") and "SELECT 1 FROM v" in tree.sql()


@pytest.mark.parametrize("sql", [
    "SELECT 1 FROM v WHERE v.s IN (SELECT NULL)",  # NOT IN's NULL semantics differ in dpsql
    "SELECT 1 FROM v WHERE v.n = (SELECT 2 FROM v)",
    "SELECT 1 FROM v WHERE v.n = (SELECT 2 WHERE FALSE)",  # no row: NULL, not 2
    "SELECT 1 FROM v WHERE v.n IN (SELECT 1 UNION ALL SELECT 2)",
    "SELECT 1 FROM v WHERE v.n = (SELECT 1 + 1)",
    "SELECT 1 FROM v WHERE v.n IN (SELECT DISTINCT 2)",
    "SELECT 1 FROM (SELECT 2 AS k) AS d",  # a relation, not a value
])
def test_anything_more_stays_a_subquery(sql):
    tree = inline_constant_subqueries(sqlglot.parse_one(sql, read="duckdb"))
    assert tree.sql() == sqlglot.parse_one(sql, read="duckdb").sql()


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT COUNT(*) FROM v WHERE s IN (SELECT 'b')", 2),
    ("SELECT COUNT(*) FROM v WHERE n = (SELECT 2)", 1),
    ("SELECT COUNT(*) FROM v WHERE n > (SELECT -3)", 2),
    ("SELECT COUNT(*) FROM v WHERE s NOT IN (SELECT 'b')", 1),
])
def test_answered_as_duckdb_answers_the_sql(databases, sql, expected):
    rows_db, empty_db = databases
    with duckdb.connect(str(rows_db), read_only=True) as plain:
        assert plain.execute(sql).fetchall() == [(expected,)]
    assert outcome(rows_db, METADATA, sql) == ("ok", [(expected,)])
    assert outcome(empty_db, METADATA, sql) == ("ok", [(0,)])
