"""Red team of dpsql.rewrite.operand_types (9dcf3f4): computed operands (arithmetic, COALESCE,
NULLIF, ABS, ROUND, FLOOR, CEIL, GREATEST, LEAST) and set-operation CTE columns typed by
DuckDB's binder over typed NULLs on the data-free connection, for the literal check's refusal.

Claims attacked (brief /work/briefs/redteam-operand-types.md): (a) the refusal is the same on
neighbouring databases and an empty one, under no unit and under a privacy unit (brute force
over tiny.remove_unit); (b) nothing is charged for it (real ledger); (c) no false refusal: a
random grammar of computed operands over 25 declared types is typed exactly as DuckDB's typeof
on a real row, and no literal is refused that DuckDB reads in the real comparison on that row;
(d) only constants and typed NULLs reach the data-free connection, deep or wide expressions end
in clean PEP 249 errors; (e) the server's SQLSTATE and nothing charged.

Result (report: /work/briefs/redteam-operand-types-report.md): (a), (b) and the binder typing of
(c) held. Breaks: (c) SUM of an integer column stands as DOUBLE, so an exact SUM of a derived
table compared with '0x10' (HUGEINT reads hex) is refused -- still a strict xfail; fixed since
(their tests now pass): (d) an INTERVAL's operand (a column, a subquery) reached the data-free
connection as written; (e) the SQLSTATE was chosen by a word of the literal's own text; and an
incidental break outside the rule, a UNION ALL of a DATE and an INTEGER column failing on a row
and answering on an empty table (dpsql.rewrite.set_operations).
``DPSQL_REDTEAM_DEEP=1``: 3000 random expressions (default 120), more tiny databases, max_freq
variants.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlglot
from sqlglot import exp

import dpsql.rewrite.operand_types as operand_types_module
from dpsql.analysis.keytypes import normalise
from dpsql.analysis.parse import parse_query
from dpsql.errors import DataError, Error
from dpsql.metadata import loads_metadata
from dpsql.rewrite.literal_casts import _EXAMPLES, casts
from dpsql.rewrite.operand_types import bound_type, operand_types
from dpsql.server.sqlstates import sqlstate
from tests.ledgers import charged, charging_session
from tests.neighbours import outcome, write_database
from tests.redteam.test_literal_and_avg_attacks import ROW, SCHEMA, _metadata
from tests.shop_fixture import ZeroNoise
from tests.units import tiny

DEEP = os.environ.get("DPSQL_REDTEAM_DEEP") == "1"


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("operand_worlds")
    return {"many": write_database(folder / "many.duckdb", SCHEMA, {"v": [ROW] * 3}),
            "one": write_database(folder / "one.duckdb", SCHEMA, {"v": [ROW]}),
            "empty": write_database(folder / "empty.duckdb", SCHEMA, {})}


# ------------------------------------------------------------------ (a) neighbours, (b) ledger

REFUSED = [  # each refused before any charge, the same everywhere
    "SELECT COUNT(*) FROM v WHERE d + 1 = 'bad'",
    "SELECT COUNT(*) FROM v WHERE (((d - 1))) >= '2023-13-01'",
    "SELECT COUNT(*) FROM v WHERE d + INTERVAL 1 DAY = '2023-01-01 25:00'",
    "SELECT COUNT(*) FROM v WHERE d - d = '1 day'",  # DATE - DATE is BIGINT
    "SELECT COUNT(*) FROM v WHERE tz + INTERVAL 1 HOUR < '2023-01-01 10:00 Mars/Base'",
    "SELECT COUNT(*) FROM v WHERE tm + INTERVAL 1 HOUR = '25:00'",
    "SELECT COUNT(*) FROM v WHERE n * 2 = '1e3x'",
    "SELECT COUNT(*) FROM v WHERE ut + 1 = '256'",  # UTINYINT + 1 stays UTINYINT
    "SELECT COUNT(*) FROM v WHERE COALESCE(n, s) = '12x'",
    "SELECT COUNT(*) FROM v WHERE NULLIF(b, FALSE) = 'maybe'",
    "SELECT COUNT(*) FROM v WHERE ABS(x) * x = '1e20'",  # DECIMAL precision grows, still short
    "SELECT COUNT(*) FROM v WHERE ROUND(f, 1) = '0x10'",
    "SELECT COUNT(*) FROM v WHERE FLOOR(x) <> 'x' OR CEIL(x) = 'y'",
    "SELECT COUNT(*) FROM v WHERE GREATEST(d, DATE '2023-01-01') = 'bad'",
    "SELECT COUNT(*) FROM v WHERE LEAST(h, 1) = '1e40'",
    "SELECT COUNT(*) FROM v WHERE CASE n + 1 WHEN 'two' THEN TRUE ELSE FALSE END",
    "SELECT COUNT(*) FROM v WHERE n + 1 BETWEEN '1' AND 'many'",
    "WITH c AS (SELECT d AS k FROM v UNION SELECT t FROM v) SELECT COUNT(*) FROM c "
    "WHERE c.k + INTERVAL 1 DAY = 'bad'",
    "SELECT COUNT(*) FROM (SELECT n + 1 AS m FROM v UNION ALL SELECT s FROM v) w WHERE w.m = 'q'",
    "SELECT COUNT(*) FROM v HAVING COUNT(*) + 1 > 'lots'",
]


@pytest.mark.parametrize("max_freq", [None, 1, 1000] if DEEP else [1])
def test_the_refusal_is_the_same_on_neighbours_and_empty(worlds, max_freq):
    md = _metadata(max_freq)
    for sql in REFUSED:
        seen = {name: outcome(path, md, sql) for name, path in worlds.items()
                if DEEP or name != "many"}
        assert len({repr(s) for s in seen.values()}) == 1, (sql, seen)
        if max_freq is not None:
            kind, message = seen["empty"]
            assert kind == "DataError" and "cannot be read as type" in message, (sql, seen)


MISSED = [  # not checked (noted): answered as no match, alike everywhere
    "SELECT COUNT(*) FROM v WHERE t - t = 'soon'",  # INTERVAL is no type the check reads
    "SELECT COUNT(*) FROM v WHERE d + INTERVAL (n) DAY = 'bad'",  # the binder cannot type it
]


@pytest.mark.parametrize("sql", MISSED)
def test_a_missed_literal_is_answered_as_no_match_alike(worlds, sql):
    seen = {name: outcome(path, _metadata(1), sql) for name, path in worlds.items()}
    assert {repr(s) for s in seen.values()} == {repr(("ok", [(0,)]))}, seen


UNIT_REFUSED = [
    ("SELECT COUNT(*) FROM orders WHERE amount + 1 = '12x'", ()),
    ("SELECT COUNT(*) FROM orders WHERE COALESCE(amount, o_cust) * 2 > '1.5.2'", ()),
    ("SELECT kind, SUM(qty) FROM items WHERE GREATEST(qty, 0) <> 'none' GROUP BY kind", ()),
    ("SELECT COUNT(*) FROM orders WHERE ABS(amount) - 1 = ?", ("x",)),
    ("SELECT kind, COUNT(*) FROM items WHERE NULLIF(qty, 0) // 2 = 'odd' GROUP BY kind", ()),
    ("SELECT COUNT(*) FROM (SELECT o_cust, COUNT(*) AS n FROM orders GROUP BY o_cust) x "
     "WHERE x.n + 0 > 'few'", ()),
]


def test_under_a_unit_every_neighbour_sees_the_same_refusal(tmp_path):
    # claim (a) brute force: a tiny shop, each unit removed (FK cascade), the empty shop
    md = tiny.metadata()
    rng = random.Random(17)
    n = 0
    for b in range(4 if DEEP else 1):
        db = tiny.null_heavy_database(rng) if b % 2 else tiny.random_database(rng)
        worlds = [db, *(tiny.remove_unit(db, u) for u in tiny.units(db)),
                  {t: (rows if t == "regions" else []) for t, rows in db.items()}]
        paths = [tiny.write_file(tmp_path / f"w{n + i}.duckdb", w) for i, w in enumerate(worlds)]
        n += len(worlds)
        for sql, params in UNIT_REFUSED:
            seen = {repr(outcome(p, md, sql, params)) for p in paths}
            assert len(seen) == 1, (sql, seen)
            assert "cannot be read as type" in next(iter(seen)), (sql, seen)


def test_nothing_is_charged_for_the_refusal(worlds, tmp_path):
    # claim (b): a real ledger, no unit and one unit
    with charging_session(worlds["many"], _metadata(1), tmp_path / "l.sqlite",
                          sampler=ZeroNoise()) as session:
        for sql in REFUSED:
            with pytest.raises(DataError):
                session.run(sql, [], epsilon=0.5)
        with pytest.raises(DataError):
            session.run("SELECT COUNT(*) FROM v WHERE d + 1 = ?", ["bad"], epsilon=0.5)
        assert charged(session) == []
        session.run("SELECT COUNT(*) FROM v WHERE d + 1 = '2023-01-02'", [], epsilon=0.5)
        assert len(charged(session)) == 1  # the ledger does record an answer
    path = tiny.write_file(tmp_path / "shop.duckdb", tiny.random_database(random.Random(3)))
    with charging_session(path, tiny.metadata(), tmp_path / "u.sqlite",
                          sampler=ZeroNoise()) as session:
        for sql, params in UNIT_REFUSED:
            with pytest.raises(DataError):
                session.run(sql, list(params), epsilon=0.5)
        assert charged(session) == []


# ------------------------------------------------------------------ (c) no false refusal

COLUMNS = {  # name: (declared type, a non-NULL value)
    "d": ("DATE", "'2024-01-31'"), "ts": ("TIMESTAMP", "'2024-01-31 10:00:00'"),
    "tz": ("TIMESTAMPTZ", "'2024-01-31 10:00:00+00'"), "tm": ("TIME", "'10:00:00'"),
    "ttz": ("TIMETZ", "'10:00:00+02'"), "iv": ("INTERVAL", "INTERVAL 1 DAY"),
    "x": ("DECIMAL(10,2)", "1.5"), "xw": ("DECIMAL(38,10)", "1.5"), "dd": ("DECIMAL", "1.5"),
    "nu": ("NUMERIC(4,1)", "1.5"), "h": ("HUGEINT", "1"), "uh": ("UHUGEINT", "1"),
    "ub": ("UBIGINT", "1"), "bi": ("BIGINT", "1"), "n": ("INTEGER", "1"),
    "s": ("SMALLINT", "1"), "ti": ("TINYINT", "1"), "ut": ("UTINYINT", "1"),
    "f": ("DOUBLE", "1.5"), "fl": ("FLOAT", "1.5"), "b": ("BOOLEAN", "true"),
    "uu": ("UUID", "'123e4567-e89b-12d3-a456-426614174000'"), "vc": ("VARCHAR", "'a'"),
    "tn": ("TIMESTAMP_NS", "'2024-01-31 10:00:00'"), "tsec": ("TIMESTAMP_S", "'2024-01-31'"),
}
CONSTANTS = ["1", "2", "0", "-1", "1.5", "1e400", "1e3", "3000000000",
             "170141183460469231731687303715884105728", "1.00000000000000000000000001",
             "INTERVAL 1 DAY", "INTERVAL '1' HOUR", "NULL", "TRUE", "'2024-01-01'", "'1'",
             "DATE '2024-01-01'", "TIMESTAMP '2024-01-01'", "CAST(1 AS DECIMAL(38,37))"]
LITERALS = ["0x10", "0b11", "1_000", "1.5", "1e3", "1e400", "-1", "256", "32768",
            "18446744073709551616", "170141183460469231731687303715884105728", "99999999.995",
            "1.005", "nan", "infinity", "true", "yes", "bad", "2024-01-31",
            "2024-01-31 10:00:00", "2024-01-31 10:00:00+05", "2024-01-31 10:00 Europe/Paris",
            "10:00", "00:00:01", "1 day", "1 day 2 hours", "123e4567-e89b-12d3-a456-426614174000"]


def _expression(rng: random.Random, depth: int) -> str:
    if depth <= 0 or rng.random() < 0.3:
        return rng.choice(list(COLUMNS)) if rng.random() < 0.7 else rng.choice(CONSTANTS)
    a, b = _expression(rng, depth - 1), _expression(rng, depth - 1)
    return rng.choice([
        f"{a} + {b}", f"{a} - {b}", f"{a} * {b}", f"{a} / {b}", f"{a} // {b}", f"{a} % {b}",
        f"-({a})", f"COALESCE({a}, {b})", f"NULLIF({a}, {b})", f"ABS({a})",
        f"ROUND({a}, {rng.choice(['0', '1', '-1', '2'])})", f"ROUND({a})", f"FLOOR({a})",
        f"CEIL({a})", f"GREATEST({a}, {b})", f"LEAST({a}, {b})", f"(({a}))"])


def test_random_operands_are_typed_and_refused_as_duckdb_compares_them():
    md = loads_metadata("tables:\n  t:\n    columns:\n" + "\n".join(
        f"      {c}: {{type: '{t}'}}" for c, (t, _) in COLUMNS.items()) + "\n")
    con = duckdb.connect()
    con.execute("CREATE TABLE t (" + ", ".join(f"{c} {t}" for c, (t, _) in COLUMNS.items())
                + ")")
    con.execute("INSERT INTO t VALUES (" + ", ".join(v for t, v in COLUMNS.values()) + ")")
    rng = random.Random(2026)
    typed = 0
    mismatched: dict[tuple[str, str], str] = {}
    false_refusals: dict[tuple[str, str], str] = {}
    for _ in range(3000 if DEEP else 120):
        text = _expression(rng, rng.randint(1, 3))
        try:
            query = parse_query(f"SELECT {text} FROM t", md, extra_funcs=(exp.AggFunc,))
            claimed = operand_types(query, md, frozenset())(query.expressions[0].unalias())
            if claimed is None:
                continue  # unknown: nothing refused
            actual, non_null = con.execute(
                f"SELECT typeof({text}), ({text}) IS NOT NULL FROM t").fetchone()
        except (Error, duckdb.Error):
            continue  # refused by the analysis, or DuckDB cannot run it on the row either
        if not non_null:
            continue  # a NULL operand never meets the literal
        typed += 1
        mine, duck = normalise(claimed), normalise(actual)
        if mine is None or duck is None or mine.sql("duckdb") != duck.sql("duckdb"):
            mismatched[(claimed, actual)] = text
            continue
        if mine.this not in _EXAMPLES:
            continue
        for literal in LITERALS:
            if casts(literal, mine.sql(dialect="duckdb")):
                continue
            try:  # refused: DuckDB must fail on the real row too
                con.execute(f"SELECT ({text}) = '{literal}' FROM t").fetchall()
            except duckdb.Error:
                continue
            false_refusals[(claimed, literal)] = text
    assert typed >= (1000 if DEEP else 40)
    assert mismatched == {}
    assert false_refusals == {}


EXACT_SUMS = [  # an exact SUM of an INTEGER column (HUGEINT in DuckDB) in a derived table
    "SELECT COUNT(*) FROM (SELECT o_cust, SUM(amount) AS s FROM orders GROUP BY o_cust) x "
    "WHERE x.s > '0x10'",
    "SELECT COUNT(*) FROM (SELECT o_cust, SUM(amount) AS s FROM orders GROUP BY o_cust) x "
    "WHERE COALESCE(x.s, 0) > '0b11'",
]


@pytest.mark.xfail(strict=True, reason="break (c): SUM/AVG are typed DOUBLE whatever their "
                   "argument; an exact SUM of an INTEGER column is HUGEINT, which reads '0x10' "
                   "and '0b11' (DOUBLE does not), so a derived table's SUM compared with them "
                   "is refused although DuckDB answers it on real rows")
@pytest.mark.parametrize("sql", EXACT_SUMS)
def test_an_exact_integer_sum_reads_hex_as_duckdb_does(sql, tmp_path):
    db = tiny.random_database(random.Random(3))
    tiny.load(db).execute(sql).fetchall()  # plain DuckDB reads the literal on real rows
    path = tiny.write_file(tmp_path / "shop.duckdb", db)
    kind, _ = outcome(path, tiny.metadata(), sql)
    assert kind == "ok"


# ------------------------------------------------------------------ (d) the data-free connection

def _sent(monkeypatch, sql: str, path: Path, md: Any) -> tuple[list[str], tuple[str, Any]]:
    """The statements ``sql``'s run sends the binder (caches cleared), and its outcome."""
    sent: list[str] = []
    real = operand_types_module.data_free_answer

    def spy(text: str, params: list[object]) -> object:
        sent.append(text)
        return real(text, params)

    monkeypatch.setattr(operand_types_module, "data_free_answer", spy)
    bound_type.cache_clear()
    operand_types_module._union_type.cache_clear()
    return sent, outcome(path, md, sql)


_BINDER_NODES = (exp.Select, exp.From, exp.Subquery, exp.Union, exp.Alias, exp.Identifier,
                 exp.Column, exp.Typeof, exp.Cast, exp.DataType, exp.DataTypeParam,
                 exp.Literal, exp.Null, exp.Boolean, exp.Interval, exp.Var,
                 *operand_types_module._COMPUTED)


def _only_constants_and_typed_nulls(statement: str) -> bool:
    tree = sqlglot.parse_one(statement, dialect="duckdb")
    for node in tree.walk():
        if not isinstance(node, _BINDER_NODES):
            return False
        if isinstance(node, exp.Cast) and not isinstance(node.this, exp.Null):
            return False
        if isinstance(node, exp.Column) and node.name != "c":  # the union's own column
            return False
        if isinstance(node, exp.Interval) and not isinstance(node.this, exp.Literal):
            return False
    return True


@pytest.mark.parametrize("sql", REFUSED)
def test_only_constants_and_typed_nulls_reach_the_binder(worlds, monkeypatch, sql):
    sent, _ = _sent(monkeypatch, sql, worlds["empty"], _metadata(1))
    typeofs = [s for s in sent if "typeof" in s]
    assert all(_only_constants_and_typed_nulls(s) for s in typeofs), typeofs


# break (d), fixed: exp.Interval counted as a constant whatever its operand, so INTERVAL (v.n)
# DAY or INTERVAL ((SELECT ...)) DAY reached the data-free connection as written, where typeof
# constant-folds it; an INTERVAL is now a constant only of a literal
@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM v WHERE d + INTERVAL (n) DAY = 'bad'",
    "SELECT COUNT(*) FROM v WHERE d + INTERVAL (SELECT COUNT(*) FROM v w) DAY = 'bad'",
])
def test_an_intervals_operand_does_not_reach_the_binder(worlds, monkeypatch, sql):
    sent, seen = _sent(monkeypatch, sql, worlds["empty"], _metadata(1))
    assert seen == outcome(worlds["one"], _metadata(1), sql)  # alike everywhere all the same
    typeofs = [s for s in sent if "typeof" in s]
    assert all(_only_constants_and_typed_nulls(s) for s in typeofs), typeofs


HOSTILE = [
    "SELECT COUNT(*) FROM v WHERE d" + " + 1" * 3000 + " = 'bad'",
    "SELECT COUNT(*) FROM v WHERE " + "(" * 300 + "d" + ")" * 300 + " + 1 = 'bad'",
    "SELECT COUNT(*) FROM v WHERE " + "COALESCE(" * 120 + "d" + ", d)" * 120 + " = 'bad'",
    "SELECT COUNT(*) FROM v WHERE " + "ABS(" * 99 + "n" + ")" * 99 + " = 'bad'",
    "SELECT COUNT(*) FROM v WHERE GREATEST(" + ", ".join(["n"] * 1200) + ") = 'bad'",
    "SELECT COUNT(*) FROM v WHERE x" + " * x" * 40 + " = 'bad'",  # DECIMAL beyond 38 digits
    "SELECT COUNT(*) FROM v WHERE f + 1e400 + POW(10, 400) = 'bad'",
    "SELECT COUNT(*) FROM v WHERE ROUND(x, 2147483647) = 'bad'",
    "SELECT COUNT(*) FROM v WHERE d + INTERVAL '2147483647' YEAR = 'bad'",
    "SELECT COUNT(*) FROM v WHERE n + 0x7fffffffffffffffffff = 'bad'",
    "SELECT COUNT(*) FROM v WHERE CAST(n AS DECIMAL(38, 38)) * n = 'bad'",
    "SELECT COUNT(*) FROM v WHERE CAST(n AS ENUM('a', 'b')) = 'c'",
    "SELECT COUNT(*) FROM v WHERE CAST(n AS STRUCT(a INT)) + 1 = 'bad'",
    "SELECT COUNT(*) FROM v WHERE (CASE WHEN n > 0 THEN n END) + 1 = 'bad'",
]


@pytest.mark.parametrize("sql", HOSTILE)
def test_hostile_operands_end_cleanly_and_alike(worlds, sql):
    md = _metadata(1)
    start = time.process_time()
    seen = {name: outcome(path, md, sql) for name, path in worlds.items() if name != "many"}
    assert time.process_time() - start < 2.0
    assert len({repr(s) for s in seen.values()}) == 1, seen  # outcome() lets a traceback out


# ------------------------------------------------------------------ (e) the server

def _refusal(path, sql):
    """The error a Session raises for ``sql`` (the exception itself: its SQLSTATE is chosen
    from its class and fields, not its words)."""
    from tests.neighbours import engine

    with pytest.raises(DataError) as refused:
        engine(path, _metadata(1)).run(sql, [], epsilon=1.0, delta=1e-6)
    return refused.value


def test_sqlstate_follows_the_type_not_the_literals_words(worlds):
    # break (e), fixed: the server picked 22007 when the message held 'DATE' or 'TIME'
    # anywhere, the analyst's literal and operand included (n + 1 = 'NO DATE' on an INTEGER)
    assert sqlstate(DataError("'DATE' cannot be read as type DATE")) == "22000"  # words alone
    assert sqlstate(_refusal(worlds["empty"], "SELECT COUNT(*) FROM v WHERE n + 1 = 'NO DATE'"
                             )) == "22P02"
    assert sqlstate(_refusal(worlds["empty"], "SELECT COUNT(*) FROM v WHERE d = 'TIME'")) == (
        "22007")


@pytest.mark.skipif(not DEEP, reason="a server process (~3 s): DPSQL_REDTEAM_DEEP=1 runs it")
def test_the_server_refuses_with_the_sqlstate_and_charges_nothing(tmp_path):
    psycopg = pytest.importorskip("psycopg")
    from dpsql.accounting import Ledger
    from tests.server.serving import start_server

    server = start_server(tmp_path)
    try:
        cases = [
            ("SELECT COUNT(*) FROM orders WHERE quantity + 1 = '12x'", None, "22P02"),
            ("SELECT COUNT(*) FROM orders WHERE COALESCE(order_cost, 0) * 2 > 'lots'", None,
             "22P02"),
            ("SELECT COUNT(*) FROM orders WHERE CAST('2024-01-01' AS DATE) + quantity = 'bad'",
             None, "22007"),
            ("SELECT COUNT(*) FROM orders WHERE ABS(quantity) - 1 = %s", ("x",), "22P02"),
        ]
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            for sql, params, code in cases:
                with pytest.raises(psycopg.Error) as info:
                    conn.execute(sql, params).fetchall()
                assert info.value.sqlstate == code, (sql, info.value)
                assert "cannot be read as type" in str(info.value), (sql, info.value)
    finally:
        server.stop()
    with Ledger(server.ledger) as ledger:
        assert list(ledger.status(server.database_id, "alice").history) == []


# ------------------------------------------------------------------ incidental

# break outside the rule, fixed (dpsql.rewrite.set_operations): a UNION ALL of a DATE and an
# INTEGER column binds (DATE) but DuckDB's INTEGER -> DATE cast fails on each row, so the
# query errored on a one-row database and answered 0 on an empty one
def test_a_union_of_date_and_integer_is_the_same_on_neighbours(worlds):
    sql = "WITH c AS (SELECT d AS k FROM v UNION ALL SELECT n FROM v) SELECT COUNT(*) FROM c"
    md = _metadata(1)
    seen = {name: outcome(path, md, sql) for name, path in worlds.items() if name != "many"}
    assert seen == {"one": ("ok", [(2,)]), "empty": ("ok", [(0,)])}, seen  # answered on both
