"""dpsql.rewrite.literal_casts: a string literal that a compared column's type cannot read is
refused before any charge (it was TRY-wrapped into NULL and answered as if no row matched: QA
round 5), on every database alike; literals DuckDB reads are answered as before."""

from __future__ import annotations

import datetime
import random

import pytest

from dpsql.errors import DataError
from dpsql.metadata import loads_metadata
from dpsql.rewrite.literal_casts import casts
from dpsql.server.sqlstates import sqlstate
from tests.ledgers import charged, charging_session
from tests.neighbours import engine, outcome, write_database
from tests.shop_fixture import ZeroNoise
from tests.units import tiny

SCHEMA = ["CREATE TABLE v (d DATE, n INTEGER, s VARCHAR, x DECIMAL(10, 2), t TIMESTAMP, "
          "u UUID)"]
ROWS = {"v": [(f"2023-01-{1 + i % 28:02d}", i, "a", 1.5, f"2023-01-01 0{i % 10}:00:00",
               f"123e4567-e89b-12d3-a456-4266141740{i:02d}") for i in range(30)]}
METADATA = loads_metadata("""
tables:
  v:
    columns:
      d: {type: DATE}
      n: {type: INTEGER, max_freq: 1}
      s: {type: VARCHAR}
      x: {type: "DECIMAL(10,2)"}
      t: {type: TIMESTAMP}
      u: {type: UUID}
""")

REFUSED = {
    "SELECT COUNT(*) FROM v WHERE d >= '2023-13-01'": ("'2023-13-01'", "v.d", "22007"),
    "SELECT COUNT(*) FROM v WHERE '2023-13-01' < d": ("'2023-13-01'", "v.d", "22007"),
    "SELECT COUNT(*) FROM v WHERE d IN ('2023-01-01', 'x')": ("'x'", "v.d", "22007"),
    "SELECT COUNT(*) FROM v WHERE d BETWEEN '2023-01-01' AND 'yesterday'":
        ("'yesterday'", "v.d", "22007"),
    "SELECT COUNT(*) FROM v WHERE t > 'noon'": ("'noon'", "v.t", "22007"),
    "SELECT COUNT(*) FROM v WHERE n = '12x'": ("'12x'", "v.n", "22P02"),
    "SELECT COUNT(*) FROM v WHERE x <> 'abc'": ("'abc'", "v.x", "22P02"),
    "SELECT COUNT(*) FROM v WHERE CASE WHEN d = 'bad' THEN TRUE ELSE FALSE END":
        ("'bad'", "v.d", "22007"),
    "SELECT COUNT(*) FROM v WHERE n IN (SELECT w.n FROM v AS w WHERE w.d = 'bad')":
        ("'bad'", "w.d", "22007"),
    # the operand's type read through a CAST, a CTE's or derived table's projection
    "SELECT COUNT(*) FROM v WHERE CAST(s AS DATE) = 'bad'": ("'bad'", "CAST(v.s AS DATE)",
                                                             "22007"),
    "SELECT COUNT(*) FROM v WHERE TRY_CAST(s AS INT) > '1x'": ("'1x'", "TRY_CAST(v.s AS INT)",
                                                               "22P02"),
    "WITH w AS (SELECT v.d AS day FROM v) SELECT COUNT(*) FROM w WHERE day >= '2023-13-01'":
        ("'2023-13-01'", "w.day", "22007"),
    "WITH w AS (SELECT v.d FROM v), u AS (SELECT w.d AS e FROM w) "
    "SELECT COUNT(*) FROM u WHERE e >= '2023-13-01'": ("'2023-13-01'", "u.e", "22007"),
    "SELECT COUNT(*) FROM (SELECT CAST(v.s AS DATE) AS k FROM v) AS z WHERE z.k = 'x'":
        ("'x'", "z.k", "22007"),
    # a column list renames the projections: w.n is v.d
    "WITH w(d, n) AS (SELECT v.n, v.d FROM v) SELECT COUNT(*) FROM w WHERE n = 'x'":
        ("'x'", "w.n", "22007"),
    # QA round 6: a UUID column, a date part or truncation, an aggregate (in HAVING, or
    # through a CTE's column), whose types the SQL alone gives
    "SELECT COUNT(*) FROM v WHERE u = 'not-a-uuid'": ("'not-a-uuid'", "v.u", "22P02"),
    "SELECT COUNT(*) FROM v WHERE date_trunc('month', d) = '2023-01'":
        ("'2023-01'", "DATE_TRUNC('MONTH', v.d)", "22007"),
    "SELECT COUNT(*) FROM v WHERE YEAR(d) = '2023x'": ("'2023x'", "YEAR(v.d)", "22P02"),
    "SELECT COUNT(*) FROM v WHERE EXTRACT(month FROM t) > 'may'":
        ("'may'", "EXTRACT(MONTH FROM v.t)", "22P02"),
    "SELECT COUNT(*) FROM v HAVING COUNT(*) > 'lots'": ("'lots'", "COUNT(*)", "22P02"),
    "WITH c AS (SELECT COUNT(*) AS k FROM v) SELECT c.k FROM c WHERE c.k > 'lots'":
        ("'lots'", "c.k", "22P02"),
    # computed operands (dpsql.rewrite.operand_types: DuckDB's binder types them), and a
    # CTE's column through a set operation (the common type of its branches)
    "SELECT COUNT(*) FROM v WHERE d + 1 = 'bad'": ("'bad'", "v.d + 1", "22007"),
    "SELECT COUNT(*) FROM v WHERE d + INTERVAL 1 DAY > 'later'":
        ("'later'", "v.d + INTERVAL '1' DAY", "22007"),
    "SELECT COUNT(*) FROM v WHERE COALESCE(d, '2023-01-01') > 'soon'":
        ("'soon'", "COALESCE(v.d, '2023-01-01')", "22007"),
    "SELECT COUNT(*) FROM v WHERE n * 2 > '1x'": ("'1x'", "v.n * 2", "22P02"),
    "SELECT COUNT(*) FROM v WHERE LENGTH(s) + 1 = 'long'": ("'long'", "LENGTH(v.s) + 1", "22P02"),
    "WITH w AS (SELECT v.d + 1 AS d FROM v) SELECT COUNT(*) FROM w WHERE d >= 'x'":
        ("'x'", "w.d", "22007"),
    "WITH w AS (SELECT v.d FROM v UNION ALL SELECT v.d FROM v) "
    "SELECT COUNT(*) FROM w WHERE d >= 'x'": ("'x'", "w.d", "22007"),
}

ANSWERED = {  # DuckDB reads these literals (its own cast decides), or nothing is cast
    "SELECT COUNT(*) FROM v WHERE d >= '2023-1-5'": 24,
    "SELECT COUNT(*) FROM v WHERE d >= '2023/01/05'": 24,
    "SELECT COUNT(*) FROM v WHERE t >= '2023-01-01 05:00'": 15,
    "SELECT COUNT(*) FROM v WHERE n = ' 12 '": 1,
    "SELECT COUNT(*) FROM v WHERE s = '12x'": 0,
    "WITH w AS (SELECT v.d FROM v) SELECT COUNT(*) FROM w WHERE d >= '2023-01-05'": 24,
    # w.d is v.n (an INTEGER), not v.d: the column list renames
    "WITH w(d, n) AS (SELECT v.n, v.d FROM v) SELECT COUNT(*) FROM w WHERE d = '5'": 1,
    # computed operands and set operations, typed as DuckDB's binder types them: n + 1 is an
    # INTEGER, which reads hex (a DOUBLE would not); a DATE beside a TIMESTAMP is a TIMESTAMP;
    # an INTEGER beside a VARCHAR a VARCHAR (nothing cast)
    "SELECT COUNT(*) FROM v WHERE d + 1 >= '2023-01-06'": 24,
    "SELECT COUNT(*) FROM v WHERE n + 1 = '0x10'": 1,
    "WITH w AS (SELECT v.d AS k FROM v UNION ALL SELECT v.t FROM v) "
    "SELECT COUNT(*) FROM w WHERE k >= '2023-01-05 00:00'": 24,
    "WITH w AS (SELECT v.n AS k FROM v UNION ALL SELECT v.s FROM v) "
    "SELECT COUNT(*) FROM w WHERE k = 'a'": 30,
    # not checked (unknown type): an INTERVAL of a column (not sent to the binder)
    "SELECT COUNT(*) FROM v WHERE d + INTERVAL (n) DAY >= 'x'": 0,
    "SELECT COUNT(*) FROM v WHERE date_trunc('month', d) = '2023-01-01'": 30,
    "SELECT COUNT(*) FROM v WHERE YEAR(d) = '2023' AND EXTRACT(epoch FROM t) > '1e3'": 30,
    "SELECT COUNT(*) FROM v WHERE u = '123e4567-e89b-12d3-a456-426614174001'": 1,
}


@pytest.fixture(scope="module")
def databases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("literals")
    return (write_database(folder / "rows.duckdb", SCHEMA, ROWS),
            write_database(folder / "empty.duckdb", SCHEMA, {}))


def test_casts_is_duckdbs_own_cast():
    assert casts("2023-12-31", "DATE") and casts("2023-1-5", "DATE")
    assert not casts("2023-13-01", "DATE") and not casts("yesterday", "DATE")
    assert casts(" 12 ", "INT") and not casts("12x", "INT") and not casts("70000", "SMALLINT")


@pytest.mark.parametrize("sql", list(REFUSED))
def test_an_unreadable_literal_is_refused_alike_on_every_database(databases, sql):
    literal, column, code = REFUSED[sql]
    outcomes = [outcome(path, METADATA, sql) for path in databases]
    assert outcomes[0] == outcomes[1], outcomes
    kind, message = outcomes[0]
    assert kind == "DataError", outcomes
    assert f"{literal} cannot be read as type" in message and f"with {column} " in message
    assert "such as" in message  # the fix: an example of the type
    with pytest.raises(DataError) as refused:  # the code comes from the error, not its words
        engine(databases[1], METADATA).run(sql, [], epsilon=1.0, delta=1e-6)
    assert sqlstate(refused.value) == code


@pytest.mark.parametrize("sql", list(ANSWERED))
def test_a_literal_duckdb_reads_is_answered(databases, sql):
    rows_db, empty_db = databases
    assert outcome(rows_db, METADATA, sql) == ("ok", [(ANSWERED[sql],)])
    assert outcome(empty_db, METADATA, sql) == ("ok", [(0,)])


def test_the_refusal_is_not_charged(databases, tmp_path):
    with charging_session(databases[0], METADATA, tmp_path / "ledger.sqlite",
                          sampler=ZeroNoise()) as session:
        for sql in ("SELECT COUNT(*) FROM v WHERE d >= '2023-13-01'",
                    # compared in post-processing, after the charge: checked before it
                    "SELECT COUNT(*) FROM v HAVING COUNT(*) > 'lots'",
                    "WITH c AS (SELECT COUNT(*) AS k FROM v) SELECT c.k FROM c "
                    "WHERE c.k > 'lots'"):
            with pytest.raises(DataError):
                session.run(sql, [], epsilon=0.5)
        assert charged(session) == []
        session.run("SELECT COUNT(*) FROM v WHERE d >= '2023-12-01'", [], epsilon=0.5)
        assert len(charged(session)) == 1


@pytest.mark.parametrize("sql", ["SELECT COUNT(*) FROM orders WHERE amount = '12x'",
                                 "SELECT SUM(amount) FROM orders WHERE amount <> 'x'"])
def test_under_a_privacy_unit_too(tmp_path, sql):
    path = tiny.write_file(tmp_path / "shop.duckdb", tiny.random_database(random.Random(5)))
    kind, message = outcome(path, tiny.metadata(), sql)
    assert kind == "DataError" and "cannot be read as type INT" in message, message


def test_a_type_duckdb_cannot_name_refuses_nothing():
    # the rules red team's note: an unusual declared type made casts raise a raw duckdb error
    assert casts("anything", "NO_SUCH_TYPE_XYZ") is True


@pytest.mark.parametrize(("sql", "params", "expected"), [
    ("SELECT COUNT(*) FROM v WHERE d >= ?", ["2023-13-01"], "parameter 1 ('2023-13-01')"),
    ("SELECT COUNT(*) FROM v WHERE s = ? AND ? < n", ["x", "12x"], "parameter 2 ('12x')"),
    ("WITH w AS (SELECT v.d AS day FROM v) SELECT COUNT(*) FROM w WHERE day >= ?", ["bad"],
     "parameter 1 ('bad')"),
    ("SELECT COUNT(*) FROM v WHERE CAST(s AS DATE) = ?", ["bad"], "parameter 1 ('bad')"),
])
def test_a_string_parameter_the_columns_type_cannot_read_is_refused(databases, tmp_path, sql,
                                                                     params, expected):
    # the same user error through the DB-API (a '?' bound to a string: psycopg through the
    # server binds text), checked before the charge as a literal is
    outcomes = [outcome(path, METADATA, sql, params) for path in databases]
    assert outcomes[0] == outcomes[1] and outcomes[0][0] == "DataError", outcomes
    assert outcomes[0][1].startswith(expected) and "such as" in outcomes[0][1]
    with charging_session(databases[0], METADATA, tmp_path / "ledger.sqlite",
                          sampler=ZeroNoise()) as session:
        with pytest.raises(DataError):
            session.run(sql, params, epsilon=0.5)
        assert charged(session) == []


def test_a_readable_or_typed_parameter_is_answered(databases):
    rows_db, _ = databases
    sql = "SELECT COUNT(*) FROM v WHERE d >= ?"
    assert outcome(rows_db, METADATA, sql, ["2023-1-5"]) == ("ok", [(24,)])
    assert outcome(rows_db, METADATA, sql, [datetime.date(2023, 1, 5)]) == ("ok", [(24,)])


SELECTION_METADATA = loads_metadata("""
tables:
  v:
    sample_aggregate: {blocks: 4}
    columns:
      d: {type: DATE}
      n: {type: INTEGER, max_freq: 1, bounds: [0, 100]}
      s: {type: VARCHAR}
      x: {type: "DECIMAL(10,2)"}
      t: {type: TIMESTAMP}
""")


@pytest.mark.parametrize("sql", [
    "SELECT MEDIAN(n) FROM v WHERE d >= ?",  # a selection (the exponential mechanism)
    "WITH c AS (SELECT COUNT(*) AS k FROM v WHERE d >= ?) SELECT k FROM c",  # release blocks
    "SELECT SAMPLE_AGGREGATE(AVG(n), 0, 100) FROM v WHERE d >= ?",  # sample-and-aggregate
])
def test_every_request_kind_checks_its_string_parameters(databases, tmp_path, sql):
    outcomes = [outcome(path, SELECTION_METADATA, sql, ["2023-13-01"]) for path in databases]
    assert outcomes[0] == outcomes[1] and outcomes[0][0] == "DataError", outcomes
    assert outcomes[0][1].startswith("parameter 1 ('2023-13-01') cannot be read as type DATE")
    with charging_session(databases[0], SELECTION_METADATA, tmp_path / "ledger.sqlite",
                          sampler=ZeroNoise()) as session:
        with pytest.raises(DataError):
            session.run(sql, ["2023-13-01"], epsilon=0.5)
        assert charged(session) == []
        session.run(sql, ["2023-01-05"], epsilon=0.5)  # a date it reads: released, charged
        assert len(charged(session)) == 1
