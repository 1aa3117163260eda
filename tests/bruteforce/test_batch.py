"""tests/bruteforce/batch.py: one statement for many databases gives, for each database, exactly
the answer of running the query on that database alone.

The brute-force suites trust every neighbour's answer; these checks compare the batched answers
with the one-by-one ones (``run``, ``_typed_sql``: CTEs over the database's own VALUES) for
every template, every key-type template and the edge cases the batching could get wrong (a table
empty everywhere, an aggregate over nothing, duplicate databases).
"""

from __future__ import annotations

import duckdb
import pytest

from tests.bruteforce.batch import batched_sql, run_many
from tests.bruteforce.test_soundness import (
    _COLLIDING,
    _CONN,
    ALL_EQUAL,
    EMPTY_TABLES,
    KEY_TEMPLATES,
    SCHEMA,
    TEMPLATES,
    Database,
    Template,
    _typed_run_all,
    _typed_sql,
    neighbours,
    run,
    run_all,
)

#: a database with repeated and distinct values in every table, and one empty private table
MIXED: Database = {"a": ((1, 2), (2, 2), (3, 1), (1, 2)), "b": ((2, 3), (1, 1)),
                   "c": ((3, 3), (1, 2), (2, 1)), "s": ((1, -2), (3, 3), (1, 0)), "p": ()}


def _some_databases(template: Template) -> list[Database]:
    """Three databases and, of each, its first and last neighbour (the two ends of the
    enumeration: the first table's first row and the last table's last row changed)."""
    out: list[Database] = []
    for db in (ALL_EQUAL, EMPTY_TABLES, MIXED):
        others = [n for _, n in neighbours(db, template.tables)]
        out += [db, *others[:1], *others[-1:]]  # none when the tables read are empty
    return out


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.name)
def test_batched_answers_equal_one_by_one(template: Template):
    sql, dbs = template.reference_sql(), _some_databases(template)
    expected = [run(sql, db, histogram=template.histogram) for db in dbs]
    assert run_all(sql, dbs, histogram=template.histogram) == expected


@pytest.mark.parametrize("sql", KEY_TEMPLATES)
def test_batched_typed_answers_equal_one_by_one(sql: str):
    types, db = _COLLIDING
    moved = {**db, "b": (("1", 1),)}  # the neighbour where the VARCHAR/INTEGER keys collide
    wide = {"a": "BIGINT", "b": "DOUBLE"}
    wide_db = {"a": (("9007199254740992", 1), ("9007199254740993", 1)), "b": (("1.0", 1),)}
    cases = [(types, [db, moved, db]), (wide, [wide_db, {**wide_db, "b": (("9007199254740992.0",
                                                                           2),)}])]
    for case_types, dbs in cases:
        try:
            expected = []
            for d in dbs:
                (row,) = _CONN.execute(_typed_sql(sql, d, case_types)).fetchall()
                expected.append(float(row[0] or 0))
        except duckdb.Error as err:  # e.g. VARCHAR IN (INTEGER): DuckDB cannot bind it
            with pytest.raises(type(err)):
                _typed_run_all(sql, dbs, case_types)
            continue
        assert _typed_run_all(sql, dbs, case_types) == expected


def test_the_collision_shows_in_a_batch():
    """The typed batch keeps each key's declared type: the VARCHAR keys '1', '01', ' 1' all
    equal the INTEGER 1 in the neighbour, as they do one by one (0 joins, then 3)."""
    types, db = _COLLIDING
    assert _typed_run_all(KEY_TEMPLATES[0], [db, {**db, "b": (("1", 1),)}], types) == [0.0, 3.0]


def test_empty_tables_and_aggregates_over_nothing():
    empty: Database = {name: () for name in SCHEMA}
    one = {**empty, "a": ((1, 1),)}
    # a scalar aggregate gives its one row per database, even over no rows at all
    assert run_all("SELECT COUNT(*) FROM a", [empty, one, empty], histogram=False) == [
        0.0, 1.0, 0.0]
    assert run_all("SELECT SUM(s.v) FROM s", [empty, empty], histogram=False) == [0.0, 0.0]
    # a histogram over no rows has no bins
    assert run_all("SELECT a.x, COUNT(*) FROM a GROUP BY a.x", [one, empty, one],
                   histogram=True) == [{1: 1.0}, {}, {1: 1.0}]
    # a table with no row in any database still has its columns, typed, in both forms
    assert run_many(_CONN, "SELECT a.x FROM a", [empty], SCHEMA) == [[]]
    assert run_many(_CONN, "SELECT a.x FROM a", [], SCHEMA) == []
    statement, params = batched_sql("SELECT COUNT(*) FROM a", [empty], SCHEMA,
                                    literal=lambda t, i, v: str(v))
    assert "NULL::INTEGER" in statement and params == []
    assert run_many(_CONN, "SELECT typeof(a.x), COUNT(*) FROM a GROUP BY ALL", [empty, one],
                    SCHEMA, literal=lambda t, i, v: str(v)) == [[], [("INTEGER", 1)]]
    assert run_many(_CONN, "SELECT typeof(a.x), COUNT(*) FROM a GROUP BY ALL", [empty, one],
                    SCHEMA) == [[], [("INTEGER", 1)]]


def test_each_database_sees_only_its_own_rows():
    dbs: list[Database] = [{**EMPTY_TABLES, "a": tuple((i, j) for j in range(1, i + 1))}
                           for i in range(1, 6)]
    rows = run_many(_CONN, "SELECT a.x, COUNT(*), MIN(a.y), MAX(a.y) FROM a GROUP BY a.x",
                    dbs, SCHEMA)
    assert rows == [[(i, i, 1, i)] for i in range(1, 6)]
