"""Join-key type pairs: exactly which are accepted (dpsql.analysis.keytypes), checked against
DuckDB's own comparison casts, and how every key-collecting construct uses the rule."""

from __future__ import annotations

import itertools
import re

import duckdb
import pytest

from dpsql.analysis.elastic import analyze
from dpsql.analysis.keytypes import injectively_comparable, normalise, type_name
from dpsql.errors import MissingMetricError
from dpsql.metadata import Column, Metadata, Table

ACCEPTED = [
    ("INTEGER", "INT"), ("INT4", "INTEGER"), ("BIGINT", "INT8"), ("VARCHAR", "TEXT"),
    ("VARCHAR(10)", "STRING"), ("DECIMAL(15,2)", "NUMERIC(15,2)"), ("DOUBLE", "FLOAT8"),
    ("DATE", "DATE"), ("TIMESTAMP", "DATETIME"), ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE"),
    ("BOOLEAN", "BOOLEAN"), ("UUID", "UUID"),
    # integer widening, signed and unsigned
    ("TINYINT", "BIGINT"), ("SMALLINT", "HUGEINT"), ("INTEGER", "UBIGINT"),
    ("UTINYINT", "TINYINT"), ("UBIGINT", "BIGINT"), ("UBIGINT", "HUGEINT"),
    ("UINTEGER", "UHUGEINT"),
]
REJECTED = [
    ("VARCHAR", "INTEGER"),  # '01' and '1' both cast to 1
    ("BIGINT", "DOUBLE"),  # 2^53 and 2^53 + 1 meet as DOUBLE
    ("DECIMAL(18,3)", "DOUBLE"),
    ("DECIMAL(10,2)", "DECIMAL(12,2)"),  # DuckDB may widen past 38 digits and fail
    ("INTEGER", "DECIMAL(10,0)"),
    ("FLOAT", "DOUBLE"),
    ("DATE", "TIMESTAMP"),  # injective, but DATE -> TIMESTAMP fails after 294247 AD
    ("TIMESTAMP", "TIMESTAMPTZ"),  # depends on the session time zone
    ("TIMESTAMP", "TIMESTAMP_NS"),
    ("VARCHAR", "DATE"),
    ("BOOLEAN", "INTEGER"),
    ("UHUGEINT", "HUGEINT"),  # compared as DOUBLE
    ("UHUGEINT", "TINYINT"),  # compared as SMALLINT: the cast fails for large values
    ("INTEGER", "BLOB"),
]


@pytest.mark.parametrize(("left", "right"), ACCEPTED)
def test_accepted_pairs(left: str, right: str):
    assert injectively_comparable(normalise(left), normalise(right))
    assert injectively_comparable(normalise(right), normalise(left))


@pytest.mark.parametrize(("left", "right"), REJECTED)
def test_rejected_pairs(left: str, right: str):
    assert not injectively_comparable(normalise(left), normalise(right))
    assert not injectively_comparable(normalise(right), normalise(left))


@pytest.mark.parametrize("text", [None, "", "  ", "UNKNOWN", "no such type"])
def test_unknown_or_unreadable_types_normalise_to_none(text):
    assert normalise(text) is None


def test_type_names_in_messages_are_as_declared():
    assert type_name("varchar") == "VARCHAR"
    assert type_name(None) == "type unknown"
    assert type_name("no such type") == "unreadable type 'no such type'"


INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
            "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT")
#: (min, max) of each integer type
RANGES = {
    "TINYINT": (-(2**7), 2**7 - 1), "SMALLINT": (-(2**15), 2**15 - 1),
    "INTEGER": (-(2**31), 2**31 - 1), "BIGINT": (-(2**63), 2**63 - 1),
    "HUGEINT": (-(2**127), 2**127 - 1), "UTINYINT": (0, 2**8 - 1),
    "USMALLINT": (0, 2**16 - 1), "UINTEGER": (0, 2**32 - 1), "UBIGINT": (0, 2**64 - 1),
    "UHUGEINT": (0, 2**128 - 1),
}


@pytest.fixture(scope="module")
def con():
    """One in-memory DuckDB for the module (an instance costs ~16 ms of CPU)."""
    connection = duckdb.connect()
    yield connection
    connection.close()


@pytest.mark.parametrize(("left", "right"), list(itertools.combinations(INTEGERS, 2)))
def test_integer_pairs_agree_with_duckdbs_comparison_type(con, left: str, right: str):
    """An integer pair is accepted exactly when DuckDB compares it in an integer type that
    holds both ranges (read from DuckDB's own join plan), so the casts are exact and total."""
    con.execute(f"CREATE OR REPLACE TABLE l (a {left}); CREATE OR REPLACE TABLE r (b {right})")
    plan = con.execute("EXPLAIN SELECT * FROM l JOIN r ON a = b").fetchall()[0][1]
    casts = set(re.findall(r"CAST\(\w+ AS (\w+)\)", plan))
    assert len(casts) == 1, plan  # the narrower (or both) side is cast to one common type
    (common,) = casts
    holds_both = common in RANGES and all(
        RANGES[common][0] <= RANGES[t][0] and RANGES[t][1] <= RANGES[common][1]
        for t in (left, right)
    )
    assert injectively_comparable(normalise(left), normalise(right)) == holds_both, common


# ----------------------------------------------------------------------------- the analysis


def md(a_type: str | None, b_type: str | None, b_y: Column | None = None) -> Metadata:
    b_y = b_y or Column("y", 1, type="INTEGER")
    return Metadata(tables={
        "a": Table("a", {"x": Column("x", 2, type=a_type), "y": Column("y", 3, type="INTEGER")}),
        "b": Table("b", {"x": Column("x", 5, type=b_type), "y": b_y}),
        "p": Table("p", {"x": Column("x", 1, type=b_type)}, public=True),
    })


KEY_QUERIES = {
    "join": "SELECT COUNT(*) FROM a JOIN b ON a.x = b.x",
    "comma join": "SELECT COUNT(*) FROM a, b WHERE a.x = b.x",
    "second conjunct": "SELECT COUNT(*) FROM a JOIN b ON a.y = b.y AND a.x = b.x",
    "IN": "SELECT COUNT(*) FROM a WHERE a.x IN (SELECT b.x FROM b)",
    "NOT IN": "SELECT COUNT(*) FROM a WHERE a.x NOT IN (SELECT b.x FROM b)",
    "EXISTS": "SELECT COUNT(*) FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.x = a.x)",
    "NOT EXISTS": "SELECT COUNT(*) FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE a.x = b.x)",
    "CTE": "WITH t AS (SELECT b.x FROM b) SELECT COUNT(*) FROM a JOIN t ON a.x = t.x",
    "grouped subquery": "SELECT COUNT(*) FROM a JOIN (SELECT b.x FROM b GROUP BY b.x) t "
                        "ON t.x = a.x",
    "union": "SELECT COUNT(*) FROM a JOIN (SELECT b.x FROM b UNION ALL SELECT b.x FROM b) u "
             "ON u.x = a.x",
    "public table": "SELECT COUNT(*) FROM a JOIN p ON a.x = p.x",
}


@pytest.mark.parametrize("sql", KEY_QUERIES.values(), ids=KEY_QUERIES.keys())
def test_every_key_construct_rejects_mismatched_types(sql: str):
    with pytest.raises(MissingMetricError) as err:
        analyze(sql, md("VARCHAR", "INTEGER"))
    msg = str(err.value)
    assert "(VARCHAR)" in msg and "(INTEGER)" in msg and "same type" in msg
    assert analyze(sql, md("INTEGER", "BIGINT")).measurements  # widening is fine


@pytest.mark.parametrize("sql", KEY_QUERIES.values(), ids=KEY_QUERIES.keys())
def test_unknown_key_types_are_rejected_unless_explain_asks_to_list_them(sql: str):
    with pytest.raises(MissingMetricError, match=r"type unknown.*declare type:"):
        analyze(sql, md(None, "INTEGER"))
    analysis = analyze(sql, md(None, "INTEGER"), allow_unknown_key_types=True)
    assert analysis.unchecked_key_types and "type unknown" in analysis.unchecked_key_types[0]
    # known mismatches are rejected even then
    with pytest.raises(MissingMetricError, match="same type"):
        analyze(sql, md("VARCHAR", "INTEGER"), allow_unknown_key_types=True)


def test_a_key_whose_max_frequency_is_unused_may_have_an_unknown_type():
    # mf(b.y) is unknown, so the conjunct a.y = b.y contributes no bound: only a.x = b.x's
    # types matter. A known mismatch on the unused conjunct is still rejected.
    m = md("INTEGER", "INTEGER", Column("y", None, type=None))
    sql = "SELECT COUNT(*) FROM a JOIN b ON a.y = b.y AND a.x = b.x"
    assert analyze(sql, m).measurements[0].sensitivity.at(0) == 5.0  # max(2*1, 5*1)
    m = md("INTEGER", "INTEGER", Column("y", None, type="VARCHAR"))
    with pytest.raises(MissingMetricError, match=r"a\.y \(INTEGER\) = b\.y \(VARCHAR\)"):
        analyze(sql, m)


def test_union_of_branches_with_different_types_has_no_key_type():
    m = md("INTEGER", "INTEGER", Column("y", 1, type="VARCHAR"))
    sql = ("SELECT COUNT(*) FROM a JOIN (SELECT b.x FROM b UNION ALL SELECT b.y FROM b) u "
           "ON u.x = a.x")
    with pytest.raises(MissingMetricError, match=r"u\.x \(type unknown\)"):
        analyze(sql, m)


def test_computed_keys_take_the_type_of_an_explicit_cast():
    # a computed key has no mf, so it may only join a public table, whose mf is used: the
    # comparison must still be exact. CAST gives the key a type; without it, rejected.
    m = md("INTEGER", "INTEGER")
    cast = ("SELECT COUNT(*) FROM (SELECT CAST(a.x + 1 AS INTEGER) AS z FROM a) t "
            "JOIN p ON t.z = p.x")
    assert analyze(cast, m).measurements[0].sensitivity.at(0) == 1.0
    bare = "SELECT COUNT(*) FROM (SELECT a.x + 1 AS z FROM a) t JOIN p ON t.z = p.x"
    with pytest.raises(MissingMetricError, match="CAST a computed key"):
        analyze(bare, m)
    text = "SELECT COUNT(*) FROM (SELECT CAST(a.x AS VARCHAR) AS z FROM a) t JOIN p ON t.z = p.x"
    with pytest.raises(MissingMetricError, match="same type"):
        analyze(text, m)


def test_count_in_an_in_subquery_is_bigint():
    # b.y IN (SELECT COUNT(*) ...): b.y INTEGER widens to COUNT's BIGINT
    sql = "SELECT COUNT(*) FROM b WHERE b.y IN (SELECT COUNT(*) FROM a)"
    assert analyze(sql, md("INTEGER", "INTEGER")).measurements[0].sensitivity.at(0) == 1.0
    m = md("INTEGER", "INTEGER", Column("y", 1, type="VARCHAR"))
    with pytest.raises(MissingMetricError, match=r"\(BIGINT\)"):
        analyze(sql, m)
