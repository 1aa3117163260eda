"""dpsql.rewrite.set_operations: a set operation's branches of different types are cast to the
column's common type with TRY_CAST, so no row can make DuckDB's implicit cast raise (the
operand-types red team: a DATE beside an INTEGER failed on a one-row database and answered 0
on an empty one). Brute force over type pairs and neighbouring databases: empty, one typical
row, one row of extreme values -- every outcome is an answer, never an error on one world
only."""

from __future__ import annotations

import datetime
import decimal
import itertools
import os
import uuid

import pytest

from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import loads_metadata
from tests.neighbours import engine, outcome, write_database

TYPES = {"i": "INTEGER", "b": "BIGINT", "h": "HUGEINT", "f": "DOUBLE", "m": "DECIMAL(10,2)",
         "w": "DECIMAL(38,30)", "s": "VARCHAR", "d": "DATE", "t": "TIMESTAMP",
         "o": "BOOLEAN", "c": "TIME", "u": "UUID"}
SCHEMA = ["CREATE TABLE v (" + ", ".join(f"{c} {t}" for c, t in TYPES.items()) + ", x VARCHAR)"]
TYPICAL = (1, 2, 3, 1.5, decimal.Decimal("2.25"), decimal.Decimal("0.5"), "abc",
           datetime.date(2024, 1, 31), datetime.datetime(2024, 1, 31, 10), True,
           datetime.time(10), uuid.UUID(int=1), "x")
EXTREME = (2**31 - 1, 2**63 - 1, 2**100, 1e300, decimal.Decimal("99999999.99"),
           decimal.Decimal("9.5"), "2024-01-31", datetime.date(9999, 12, 31),
           datetime.datetime(1, 1, 1), False, datetime.time(23, 59, 59), uuid.UUID(int=0), "2024")
METADATA = loads_metadata("tables:\n  v:\n    columns:\n" + "".join(
    f"      {c}: {{type: '{t}'}}\n" for c, t in TYPES.items()) + "      x: {}\n")
DEEP = os.environ.get("DPSQL_REDTEAM_DEEP") == "1"
PAIRS = list(itertools.permutations(TYPES, 2))
#: the default run: every pair in one direction (a deep run: both, and three branches)
DEFAULT_PAIRS = [(a, b) for a, b in PAIRS if a < b]


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("set-operations")
    return {name: write_database(folder / f"{name}.duckdb", SCHEMA, {"v": rows})
            for name, rows in (("empty", []), ("typical", [TYPICAL]), ("extreme", [EXTREME]))}


def _union(a: str, b: str) -> str:
    return (f"WITH c AS (SELECT v.{a} AS k FROM v UNION ALL SELECT v.{b} FROM v) "
            "SELECT COUNT(*) FROM c WHERE c.k IS NOT NULL")


@pytest.mark.parametrize(("a", "b"), PAIRS if DEEP else DEFAULT_PAIRS)
def test_branches_of_two_types_answer_on_every_world(worlds, a, b):
    seen = {name: outcome(path, METADATA, _union(a, b)) for name, path in worlds.items()}
    assert {kind for kind, _ in seen.values()} == {"ok"}, seen
    assert seen["empty"] == ("ok", [(0,)])
    # each row is counted where DuckDB's cast succeeds (NULL, not counted, where it fails)
    for name in ("typical", "extreme"):
        assert seen[name][1][0][0] in (0, 1, 2), seen


def test_the_answer_is_duckdbs_where_its_cast_succeeds(worlds):
    import duckdb

    con = duckdb.connect(str(worlds["typical"]), read_only=True)
    try:
        for a, b in [("i", "b"), ("i", "f"), ("d", "t"), ("s", "d"), ("i", "s"), ("m", "w")]:
            sql = _union(a, b)
            assert outcome(worlds["typical"], METADATA, sql) == ("ok", con.execute(sql).fetchall())
    finally:
        con.close()


def test_nested_branches_are_cast_to_the_outermost_type(worlds):
    # (DATE UNION ALL INTEGER) alone binds as DATE, whose cast fails on every INTEGER; beside
    # a VARCHAR branch the column is a VARCHAR, and every branch is cast to it directly
    sql = ("WITH c AS (SELECT v.d AS k FROM v UNION ALL (SELECT v.i FROM v UNION ALL "
           "SELECT v.s FROM v)) SELECT COUNT(*) FROM c WHERE c.k IS NOT NULL")
    assert [outcome(p, METADATA, sql) for p in worlds.values()] == [
        ("ok", [(0,)]), ("ok", [(3,)]), ("ok", [(3,)])]
    plan = engine(worlds["typical"], METADATA).prepare(sql).plan
    assert plan.exact_sql.count("TRY_CAST") >= 2


def test_branches_of_one_type_are_left_as_written(worlds):
    sql = ("WITH c AS (SELECT v.d AS k FROM v UNION ALL SELECT v.d FROM v) "
           "SELECT COUNT(*) FROM c WHERE c.k IS NOT NULL")
    assert "TRY_CAST" not in engine(worlds["typical"], METADATA).prepare(sql).plan.exact_sql


def test_a_branch_of_unknown_type_is_refused():
    # x has no declared type (a Session fills it from the database; without one): DuckDB's
    # cast of it could fail on a row, so the query is refused, from the SQL and the metadata
    # alone, with the fix -- which is then accepted
    from dpsql.analysis.parse import parse_query
    from dpsql.rewrite.set_operations import cast_set_operations

    sql = ("WITH c AS (SELECT v.d AS k FROM v UNION ALL SELECT v.x FROM v) "
           "SELECT COUNT(*) FROM c")
    query = parse_query(sql, METADATA)
    with pytest.raises(UnsupportedConstructError) as refused:
        cast_set_operations(query, METADATA, frozenset({"c"}))
    assert "'k' (position 1) of a UNION" in str(refused.value) and "CAST it" in str(refused.value)
    fixed = parse_query(sql.replace("SELECT v.x", "SELECT CAST(v.x AS DATE)"), METADATA)
    cast_set_operations(fixed, METADATA, frozenset({"c"}))
    assert "TRY_CAST" not in fixed.sql(dialect="duckdb")  # both branches are DATEs
