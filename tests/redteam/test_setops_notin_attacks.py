"""Red team of two privacy rules: set operations' branches cast with TRY_CAST to the column's
common type (dpsql/rewrite/set_operations.py, addc6db) and ``x NOT IN (subquery)`` answering
NULL for a NULL probe value (dpsql/rewrite/not_in.py, 73d2418).

Claims attacked (brief /work/briefs/redteam-setops-notin.md): (a) no outcome of a set
operation differs between an empty, a typical and an extreme one-row database, over type
mixes (DECIMAL overflow, HUGEINT, UBIGINT, VARCHAR -> UUID/BOOLEAN/DATE/ENUM, TIMESTAMPTZ,
INTERVAL, BLOB), nested and parenthesised operations, CTEs, derived tables with column lists,
stars, IN subqueries, release blocks, parameters, exact SUM/AVG branches; the type
operand_types claims for a branch is DuckDB's typeof on a real row; (b) the refusal of an
unknown branch type reads the SQL and metadata only and charges nothing (real ledger); (c)
NOT IN: brute force over every neighbour (a row added, removed or replaced; NULLs in the probe
and the subquery, empty subqueries, nested NOT IN, CTEs, derived tables) moves the executed
answer by at most ES(0), under a privacy unit too (tests/bruteforce/test_units.bruteforce_r2t
over NULL-heavy databases), and the answer is SQL's whenever the subquery is non-empty and
NULL-free; (d) hostile inputs end in PEP 249 errors (``outcome`` lets anything else out).

Result (report: /work/briefs/redteam-setops-notin-report.md): every claim held on DuckDB; no
strict xfail. ``DPSQL_REDTEAM_DEEP=1``: every type pair in both orders on three worlds, more
random databases for the brute force, the unit brute force over more databases.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import os
import random
import uuid
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from sqlglot import exp

import dpsql.errors as errors
from dpsql.analysis.elastic import analyze
from dpsql.analysis.keytypes import normalise
from dpsql.analysis.parse import parse_query
from dpsql.errors import Error, UnsupportedConstructError
from dpsql.metadata import Column, Metadata, Table, loads_metadata
from dpsql.rewrite.operand_types import branches, operand_types
from dpsql.rewrite.plan import plan_execution
from tests.ledgers import charged, charging_session
from tests.neighbours import engine, outcome, write_database
from tests.shop_fixture import ZeroNoise
from tests.units import tiny

DEEP = os.environ.get("DPSQL_REDTEAM_DEEP") == "1"

TYPES = {"i": "INTEGER", "b": "BIGINT", "h": "HUGEINT", "ub": "UBIGINT", "f": "DOUBLE",
         "m": "DECIMAL(10,2)", "s": "VARCHAR", "d": "DATE", "t": "TIMESTAMP",
         "tz": "TIMESTAMPTZ", "o": "BOOLEAN", "u": "UUID", "iv": "INTERVAL", "bl": "BLOB",
         "e": "ENUM('a', 'b')"}
SCHEMA = ["CREATE TABLE v (" + ", ".join(f"{c} {t}" for c, t in TYPES.items()) + ")"]
_UTC = datetime.UTC
TYPICAL = (1, 2, 3, 4, 1.5, decimal.Decimal("2.25"), "abc", datetime.date(2024, 1, 31),
           datetime.datetime(2024, 1, 31, 10), datetime.datetime(2024, 1, 31, 10, tzinfo=_UTC),
           True, uuid.UUID(int=1), datetime.timedelta(days=1), b"ab", "a")
#: each value chosen to fail DuckDB's cast into some other column's type
EXTREME = (2**31 - 1, -(2**63), 2**126, 2**64 - 1, float("nan"),
           decimal.Decimal("99999999.99"), "zz", datetime.date(9999, 12, 31),
           datetime.datetime(1, 1, 1), datetime.datetime(9999, 12, 31, tzinfo=_UTC), False,
           uuid.UUID(int=0), datetime.timedelta(days=10**6), b"\xff\x00", "b")
METADATA = loads_metadata("tables:\n  v:\n    columns:\n" + "".join(
    f"      {c}: {{type: \"{t}\", max_freq: 3}}\n" for c, t in TYPES.items()))


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("setops_worlds")
    return {name: write_database(folder / f"{name}.duckdb", SCHEMA, {"v": rows})
            for name, rows in (("empty", []), ("typical", [TYPICAL]), ("extreme", [EXTREME]))}


def _alike(seen: dict[str, tuple[str, object]]) -> bool:
    """Every world answers, or every world raises the same error (class and message)."""
    return all(k == "ok" for k, _ in seen.values()) or len({repr(s) for s in seen.values()}) == 1


def _pair(a: str, b: str) -> str:
    return (f"SELECT COUNT(*) FROM (SELECT v.{a} AS k FROM v UNION ALL SELECT v.{b} FROM v) c "
            "WHERE c.k IS NOT NULL")  # IS NOT NULL: the column is read (COUNT(*) alone prunes it)


#: the default run: each type beside VARCHAR and beside a neighbour in the list, one order
_NAMES = list(TYPES)
DEFAULT_PAIRS = sorted({("s", c) for c in _NAMES if c != "s"}
                       | {(a, b) for a, b in itertools.pairwise(_NAMES)}
                       | {("i", "d"), ("h", "m"), ("ub", "b"), ("d", "tz"), ("iv", "t")})
ALL_PAIRS = list(itertools.permutations(_NAMES, 2))


@pytest.mark.parametrize(("a", "b"), ALL_PAIRS if DEEP else DEFAULT_PAIRS)
def test_a_type_mix_answers_alike_on_every_world(worlds, a, b):
    # claim (a): empty, typical and extreme rows; a failing implicit cast would raise on the
    # extreme row only (the break addc6db fixed: DATE beside INTEGER)
    names = worlds if DEEP else ("empty", "extreme")
    seen = {n: outcome(worlds[n], METADATA, _pair(a, b)) for n in names}
    assert _alike(seen), seen
    if seen["empty"][0] == "ok":
        assert seen["empty"] == ("ok", [(0,)])


SHAPES = [  # (sql, params): set operations in every position the analysis accepts
    # nested and parenthesised, both sides; UNION (distinct) beside UNION ALL
    ("SELECT COUNT(*) FROM (SELECT v.d AS k FROM v UNION (SELECT v.i FROM v UNION ALL "
     "SELECT v.s FROM v)) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM ((SELECT v.i AS k FROM v UNION ALL SELECT v.d FROM v) UNION ALL "
     "SELECT v.tz FROM v) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (((SELECT v.ub AS k FROM v)) UNION ALL ((SELECT v.b FROM v))) c "
     "WHERE c.k IS NOT NULL", ()),
    # CTEs, a CTE over a CTE's union, an unused CTE, a WITH inside a branch
    ("WITH c AS (SELECT v.h AS k FROM v UNION ALL SELECT v.m FROM v), d AS (SELECT c.k AS k "
     "FROM c UNION ALL SELECT v.f FROM v) SELECT COUNT(*) FROM d WHERE d.k IS NOT NULL", ()),
    ("WITH u AS (SELECT v.i AS k FROM v UNION ALL SELECT v.d FROM v) SELECT COUNT(*) FROM v",
     ()),
    ("SELECT COUNT(*) FROM ((WITH z AS (SELECT v.d AS q FROM v) SELECT z.q AS k FROM z) "
     "UNION ALL SELECT v.i FROM v) c WHERE c.k IS NOT NULL", ()),
    # derived tables with column lists (one swapping names), a star over a derived table
    ("SELECT COUNT(*) FROM (SELECT w.n AS k FROM (SELECT v.d, v.i FROM v) w(n, i) UNION ALL "
     "SELECT v.i FROM v) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (SELECT w.i AS k FROM (SELECT v.d AS i, v.i AS d FROM v) w(d, i) "
     "UNION ALL SELECT v.i FROM v) c WHERE c.k IS NOT NULL", ()),
    ("WITH q(n) AS (SELECT v.s FROM v) SELECT COUNT(*) FROM (SELECT q.n AS k FROM q UNION ALL "
     "SELECT v.u FROM v) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (SELECT v.i AS k FROM v UNION ALL SELECT * FROM (SELECT v.d FROM v) "
     "w) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (SELECT * FROM (SELECT v.s AS k FROM v UNION ALL SELECT v.o FROM v) "
     "x) c WHERE c.k IS NOT NULL", ()),
    # exact aggregates in branches: SUM of HUGEINT / DECIMAL, AVG, MIN of a DATE, COUNT
    ("SELECT COUNT(*) FROM (SELECT SUM(v.h) AS k FROM v GROUP BY v.o UNION ALL SELECT v.m "
     "FROM v) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (SELECT SUM(v.m) AS k FROM v GROUP BY v.o UNION ALL SELECT v.ub "
     "FROM v) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (SELECT MIN(v.d) AS k FROM v GROUP BY v.o UNION ALL SELECT v.t "
     "FROM v) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (SELECT COUNT(*) AS k FROM v GROUP BY v.o UNION ALL SELECT v.h "
     "FROM v) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (SELECT DATE_TRUNC('month', v.d) AS k FROM v UNION ALL SELECT v.t "
     "FROM v) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (SELECT EXTRACT(epoch FROM v.t) AS k FROM v UNION ALL SELECT v.m "
     "FROM v) c WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (SELECT v.d + 1 AS k FROM v UNION ALL SELECT v.s FROM v) c "
     "WHERE c.k IS NOT NULL", ()),
    # parameters: in a branch's WHERE, under an explicit CAST (typed), bare (refused)
    ("SELECT COUNT(*) FROM (SELECT v.d AS k FROM v WHERE v.i = ? UNION ALL SELECT v.i FROM v) "
     "c WHERE c.k IS NOT NULL", (1,)),
    ("SELECT COUNT(*) FROM (SELECT CAST(? AS DATE) AS k FROM v UNION ALL SELECT v.i FROM v) c "
     "WHERE c.k IS NOT NULL", ("2024-01-01",)),
    ("SELECT COUNT(*) FROM (SELECT ? AS k FROM v UNION ALL SELECT v.d FROM v) c "
     "WHERE c.k IS NOT NULL", ("2024-01-01",)),
    ("SELECT COUNT(*) FROM (SELECT COALESCE(v.d, ?) AS k FROM v UNION ALL SELECT v.t FROM v) "
     "c WHERE c.k IS NOT NULL", ("x",)),
    # a release block holding a union; a block inside a branch (a parameter: refused)
    ("SELECT COUNT(*) FROM v WHERE v.i > (SELECT COUNT(*) FROM (SELECT v.d AS k FROM v "
     "UNION ALL SELECT v.i FROM v) c WHERE c.k IS NOT NULL)", ()),
    ("SELECT COUNT(*) FROM (SELECT (SELECT COUNT(*) FROM v) AS k FROM v UNION ALL SELECT v.d "
     "FROM v) c WHERE c.k IS NOT NULL", ()),
    # IN / NOT IN / EXISTS bodies; INTERSECT and EXCEPT (refused as relations)
    ("SELECT COUNT(*) FROM v WHERE v.i IN (SELECT w.i FROM v w UNION ALL SELECT w.ub FROM v w)",
     ()),
    ("SELECT COUNT(*) FROM v WHERE v.i NOT IN (SELECT w.i FROM v w UNION ALL SELECT w.d "
     "FROM v w)", ()),
    ("SELECT COUNT(*) FROM v WHERE EXISTS (SELECT w.d FROM v w UNION ALL SELECT w.i FROM v w)",
     ()),
    ("SELECT COUNT(*) FROM (SELECT v.d AS k FROM v INTERSECT SELECT v.i FROM v) c", ()),
    ("SELECT COUNT(*) FROM (SELECT v.d AS k FROM v EXCEPT SELECT v.s FROM v) c", ()),
    # a literal branch (unknown: refused), branches of different widths (a binder error)
    ("SELECT COUNT(*) FROM (SELECT 1 AS k FROM v UNION ALL SELECT v.d FROM v) c "
     "WHERE c.k IS NOT NULL", ()),
    ("SELECT COUNT(*) FROM (SELECT v.i AS k, v.d AS j FROM v UNION ALL SELECT v.i FROM v) c",
     ()),
]


@pytest.mark.parametrize(("sql", "params"), SHAPES)
def test_every_shape_answers_or_fails_alike(worlds, sql, params):
    # claims (a), (d): outcome() lets any non-PEP 249 exception out, failing the test
    seen = {n: outcome(p, METADATA, sql, params) for n, p in worlds.items()
            if DEEP or n != "typical"}
    assert _alike(seen), seen


# ------------------------------------------------------------------ (a) claimed vs real types

BRANCHES = [  # projections as set-operation branches read them (exact=True)
    *(f"v.{c}" for c in TYPES),
    "SUM(v.i)", "SUM(v.b)", "SUM(v.h)", "SUM(v.ub)", "SUM(v.m)", "SUM(v.f)", "AVG(v.i)",
    "AVG(v.m)", "MIN(v.d)", "MAX(v.tz)", "MIN(v.e)", "COUNT(v.s)", "COUNT(*)",
    "DATE_TRUNC('month', v.d)", "DATE_TRUNC('hour', v.t)", "DATE_TRUNC('day', v.tz)",
    "EXTRACT(epoch FROM v.t)", "EXTRACT(second FROM v.t)", "EXTRACT(year FROM v.d)",
    "YEAR(v.d)", "v.d + 1", "v.d + INTERVAL 1 DAY", "v.t - v.t", "v.i // 2", "v.m * v.m",
    "v.ub + v.i", "v.h - 1", "COALESCE(v.i, v.b)", "GREATEST(v.d, v.t)", "ROUND(v.m, 1)",
    "CASE WHEN v.o THEN v.i ELSE v.h END", "v.s || 'x'", "LENGTH(v.s)", "v.i > 1",
    "CAST(v.i AS DECIMAL)", "CAST(v.s AS TEXT)", "TRY_CAST(v.s AS INT128)",
    "CAST(v.f AS FLOAT)",
]


def test_a_branchs_claimed_type_is_duckdbs_typeof():
    # claim (a): a wrong type could make two branches look alike and skip the TRY_CAST
    con = duckdb.connect()
    con.execute(SCHEMA[0])
    con.execute("INSERT INTO v VALUES (" + ", ".join("?" * len(TYPES)) + ")", list(TYPICAL))
    wrong = {}
    typed = 0
    for text in BRANCHES:
        grouped = any(a in text for a in ("SUM(", "AVG(", "MIN(", "MAX(", "COUNT("))
        sql = f"SELECT {text} AS k FROM v" + (" GROUP BY v.o" if grouped else "")
        query = parse_query(sql, METADATA, extra_funcs=(exp.AggFunc,))
        (select,) = branches(query)
        claimed = operand_types(select, METADATA, frozenset(), exact=True)(
            select.expressions[0].unalias())
        real = con.execute(f"SELECT typeof(k) FROM ({sql})").fetchone()[0]
        if claimed is None:
            continue  # unknown: refused in a mixed operation, never left plain
        typed += 1
        mine, duck = normalise(claimed), normalise(real)
        if mine is None or duck is None or mine.sql("duckdb") != duck.sql("duckdb"):
            wrong[text] = (claimed, real)
    assert wrong == {}
    assert typed == len(BRANCHES)  # every one typed (none dodged as unknown)


# ------------------------------------------------------------------ (b) the refusal, the ledger

UNKNOWN = [
    ("SELECT COUNT(*) FROM (SELECT 1 AS k FROM v UNION ALL SELECT v.d FROM v) c "
     "WHERE c.k IS NOT NULL", []),
    ("SELECT COUNT(*) FROM (SELECT ? AS k FROM v UNION ALL SELECT v.d FROM v) c "
     "WHERE c.k IS NOT NULL", ["2024-01-01"]),
    ("WITH c AS (SELECT v.s AS k FROM v UNION ALL SELECT NULL FROM v) SELECT COUNT(*) FROM c "
     "WHERE c.k IS NOT NULL", []),
    ("SELECT COUNT(*) FROM (SELECT (SELECT COUNT(*) FROM v) AS k FROM v UNION ALL SELECT v.d "
     "FROM v) c WHERE c.k IS NOT NULL", []),
]


def test_the_unknown_type_refusal_reads_no_row_and_charges_nothing(worlds, tmp_path):
    for sql, params in UNKNOWN:
        seen = {n: outcome(p, METADATA, sql, params) for n, p in worlds.items()}
        assert len({repr(s) for s in seen.values()}) == 1, seen
        kind, message = seen["empty"]
        assert kind == "UnsupportedConstructError" and "CAST it to one type" in message, seen
    with charging_session(worlds["extreme"], METADATA, tmp_path / "l.sqlite",
                          sampler=ZeroNoise()) as session:
        for sql, params in UNKNOWN:
            with pytest.raises(UnsupportedConstructError):
                session.run(sql, params, epsilon=0.5)
        assert charged(session) == []
        session.run(_pair("i", "d"), [], epsilon=0.5)  # a mixed one, cast: answered, charged
        assert len(charged(session)) == 1


def test_the_refusal_happens_before_the_backend_is_asked(worlds):
    # (b): prepare alone refuses (no connection is read: the plan is built from the SQL)
    with pytest.raises(UnsupportedConstructError):
        engine(worlds["extreme"], METADATA).prepare(UNKNOWN[0][0])


def test_under_a_unit_set_operations_fail_alike_on_every_neighbour(tmp_path):
    # (a) under tests/units/tiny: a union over private tables is refused; over the public
    # regions it runs; either way the same on each unit's removal and on the empty shop
    queries = [
        "SELECT COUNT(*) FROM (SELECT o.o_cust AS k FROM orders o UNION ALL SELECT c.c_id "
        "FROM customer c) u",
        "SELECT COUNT(*) FROM orders o WHERE o.o_cust IN (SELECT r.r FROM regions r UNION ALL "
        "SELECT CAST(r.r AS VARCHAR) FROM regions r)",
        "SELECT COUNT(*) FROM orders o WHERE o.o_cust NOT IN (SELECT r.r FROM regions r "
        "UNION ALL SELECT CAST('2024-01-01' AS DATE) FROM regions r)",
    ]
    rng = random.Random(23)
    db = tiny.null_heavy_database(rng)
    worlds_ = [db, *(tiny.remove_unit(db, u) for u in tiny.units(db)),
               {t: (rows if t == "regions" else []) for t, rows in db.items()}]
    paths = [tiny.write_file(tmp_path / f"u{i}.duckdb", w) for i, w in enumerate(worlds_)]
    for sql in queries:
        seen = [outcome(p, tiny.metadata(), sql) for p in paths]
        assert all(k == "ok" for k, _ in seen) or len({repr(s) for s in seen}) == 1, (sql, seen)


# ------------------------------------------------------------------ (c) NOT IN brute force

NI_SCHEMA = {"a": ("x", "y"), "b": ("x", "y")}
NI_VALUES = (1, 2, None)
NI_QUERIES = [
    "SELECT COUNT(*) FROM a WHERE a.x NOT IN (SELECT b.y FROM b)",
    "SELECT COUNT(*) FROM a WHERE a.y NOT IN (SELECT a2.x FROM a a2)",
    "SELECT COUNT(*) FROM a WHERE a.x NOT IN (SELECT b.y FROM b WHERE b.x NOT IN "
    "(SELECT a2.y FROM a a2))",
    "WITH c AS (SELECT a.x AS x FROM a WHERE a.x NOT IN (SELECT b.y FROM b)) "
    "SELECT COUNT(*) FROM c",
    "SELECT COUNT(*) FROM (SELECT a.x AS x FROM a WHERE a.x NOT IN (SELECT b.y FROM b)) d",
    "SELECT COUNT(*) FROM a WHERE a.x NOT IN (SELECT b.y FROM b) AND a.y NOT IN "
    "(SELECT b.x FROM b)",
    "SELECT COUNT(*) FROM a WHERE a.x NOT IN (SELECT b.y FROM b UNION ALL SELECT b.x FROM b)",
    "SELECT COUNT(*) FROM a WHERE NOT (a.x IN (SELECT b.y FROM b))",
    "SELECT COUNT(*) FROM a WHERE a.x NOT IN (SELECT b.y FROM b WHERE b.y IS NULL)",
    "SELECT COUNT(a.y) FROM a WHERE a.x NOT IN (SELECT b.y FROM b)",
    "SELECT COUNT(*) FROM a JOIN b ON a.x = b.x WHERE a.y NOT IN (SELECT b2.y FROM b b2)",
    "SELECT COUNT(*) FROM a WHERE a.x NOT IN (SELECT b.y FROM b WHERE NOT EXISTS "
    "(SELECT 1 FROM a a2 WHERE a2.x = b.x))",
]
_NI_CON = duckdb.connect(":memory:", config={"threads": 1})


def _ni_metadata(db) -> Metadata:
    """Exact max frequencies of ``db`` (non-NULL values: a NULL matches nothing)."""
    tables = {}
    for name, cols in NI_SCHEMA.items():
        columns = {}
        for i, col in enumerate(cols):
            counts = Counter(r[i] for r in db[name] if r[i] is not None)
            columns[col] = Column(col, max(counts.values(), default=1), type="INTEGER")
        tables[name] = Table(name, columns)
    return Metadata(tables=tables)


def _ni_run(sql: str, db) -> float:
    for name, cols in NI_SCHEMA.items():
        _NI_CON.execute(f"CREATE OR REPLACE TABLE {name} ("
                        + ", ".join(f"{c} INTEGER" for c in cols) + ")")
        if db[name]:
            _NI_CON.executemany(f"INSERT INTO {name} VALUES (?, ?)", [list(r) for r in db[name]])
    return float(_NI_CON.execute(sql).fetchall()[0][0] or 0)


def _ni_databases(n: int):
    rows = list(itertools.product(NI_VALUES, NI_VALUES))
    rng = random.Random(5)
    out = [{"a": [], "b": []}, {"a": [(None, 1), (1, None)], "b": []},
           {"a": [(None, None), (1, 1)], "b": [(None, None)]}]
    for _ in range(n):
        out.append({t: [rng.choice(rows) for _ in range(rng.randint(0, 3))] for t in NI_SCHEMA})
    return out


def _ni_neighbours(db):
    """Every database one row away: a row removed, added, or replaced by any other."""
    rows = list(itertools.product(NI_VALUES, NI_VALUES))
    for t in NI_SCHEMA:
        for i, old in enumerate(db[t]):
            rest = db[t][:i] + db[t][i + 1:]
            yield {**db, t: rest}
            for new in rows:
                if new != old:
                    yield {**db, t: [*rest[:i], new, *rest[i:]]}
        for new in rows:
            yield {**db, t: [*db[t], new]}


@pytest.mark.parametrize("sql", NI_QUERIES if DEEP else NI_QUERIES[:3])
def test_not_in_moves_by_at_most_es0_over_every_neighbour(sql):
    for db in _ni_databases(25 if DEEP else 4):
        md = _ni_metadata(db)
        analysis = analyze(sql, md)
        es0 = analysis.measurements[0].sensitivity.at(0)
        exact = plan_execution(analysis, md).exact_sql
        base = _ni_run(exact, db)
        for other in _ni_neighbours(db):
            moved = abs(base - _ni_run(exact, other))
            assert moved <= es0 + 1e-9, ("PRIVACY BUG", sql, db, other, base, es0)


def test_not_in_is_sqls_when_the_subquery_is_non_empty_and_null_free():
    # claim (c): NULL probes included (SQL answers NULL for them too when S has a row)
    sql = NI_QUERIES[0]
    checked = 0
    for db in _ni_databases(40 if DEEP else 12):
        if not db["b"] or any(r[1] is None for r in db["b"]):
            continue
        md = _ni_metadata(db)
        exact = plan_execution(analyze(sql, md), md).exact_sql
        assert _ni_run(exact, db) == _ni_run(sql, db), db
        checked += 1
    assert checked >= 2


def test_a_null_probe_is_not_counted_and_an_empty_subquery_is_the_documented_difference():
    db = {"a": [(None, 1), (1, 1), (2, 1)], "b": [(1, 1)]}
    md = _ni_metadata(db)
    exact = plan_execution(analyze(NI_QUERIES[0], md), md).exact_sql
    assert _ni_run(exact, db) == 1.0 == _ni_run(NI_QUERIES[0], db)  # only x = 2
    empty = {"a": db["a"], "b": []}
    assert _ni_run(exact, empty) == 2.0  # SQL: 3 (a NULL x NOT IN () is TRUE): docs/privacy.md
    assert _ni_run(NI_QUERIES[0], empty) == 3.0
    nulls = {"a": db["a"], "b": [(1, None)]}
    assert _ni_run(exact, nulls) == 2.0  # S = {NULL}: each non-NULL x counted, as NOT EXISTS


UNIT_NOT_IN = [
    "SELECT COUNT(*) FROM orders o WHERE o.o_cust NOT IN (SELECT c.c_id FROM customer c "
    "WHERE c.region = 1)",
    "SELECT COUNT(*) FROM items i WHERE i.i_order NOT IN (SELECT o.o_id FROM orders o "
    "WHERE o.amount > 0)",
    "SELECT COUNT(*), SUM(amount) FROM orders o WHERE o.o_cust NOT IN "
    "(SELECT c.c_id FROM customer c)",
    "SELECT COUNT(*) FROM orders o WHERE o.o_id NOT IN (SELECT i.i_order FROM items i WHERE "
    "i.i_order NOT IN (SELECT o2.o_id FROM orders o2 WHERE o2.amount > 1))",
]


@pytest.mark.parametrize("sql", UNIT_NOT_IN)
def test_not_in_under_a_unit_keeps_every_levels_bound(sql):
    from tests.bruteforce.test_units import bruteforce_r2t

    rng = random.Random(11)
    dbs = [tiny.null_heavy_database(rng) for _ in range(4 if DEEP else 2)]
    dbs += [tiny.random_database(rng) for _ in range(8 if DEEP else 2)]
    bruteforce_r2t(sql, tiny.metadata(), dbs)


# ------------------------------------------------------------------ (d) clean errors

HOSTILE = [
    "SELECT COUNT(*) FROM (" + " UNION ALL ".join(
        f"SELECT v.{'i' if k % 2 else 'd'} AS k FROM v" for k in range(40)) + ") c "
    "WHERE c.k IS NOT NULL",
    "SELECT COUNT(*) FROM (" + " UNION ALL ".join(
        f"SELECT v.{'i' if k % 2 else 'd'} AS k FROM v" for k in range(400)) + ") c",
    "SELECT COUNT(*) FROM (SELECT v.i AS k FROM v UNION ALL BY NAME SELECT v.d AS k FROM v) c",
    "SELECT COUNT(*) FROM (SELECT v.i AS k FROM v UNION ALL VALUES (DATE '2024-01-01')) c",
    "SELECT COUNT(*) FROM v WHERE v.i NOT IN (VALUES (1))",
    "SELECT COUNT(*) FROM v WHERE v.i NOT IN (1, NULL)",
    "SELECT COUNT(*) FROM v WHERE (v.i, v.b) NOT IN (SELECT w.i, w.b FROM v w)",
    "SELECT COUNT(*) FROM v WHERE v.i NOT IN (SELECT w.i, w.b FROM v w)",
    "SELECT COUNT(*) FROM v WHERE v.i NOT IN (SELECT w.i FROM v w WHERE w.b = v.b)",
    "SELECT COUNT(*) FROM v WHERE (v.i NOT IN (SELECT w.i FROM v w)) IS NULL",
    "SELECT COUNT(*) FROM v WHERE v.i NOT IN (SELECT CAST(w.i AS INTEGER) FROM v w)",
    "SELECT COUNT(*) FROM v WHERE v.i NOT IN (SELECT w.i AS \"__dpsql_notin0\" FROM v w)",
    "SELECT COUNT(*) FROM v WHERE v.i NOT IN (SELECT * FROM (SELECT w.i FROM v w) z)",
    "SELECT COUNT(*) FROM v WHERE v.i NOT IN (SELECT w.i FROM v w UNION ALL SELECT w.b "
    "FROM v w)",
    "SELECT COUNT(*) FROM (SELECT v.i AS k FROM v UNION ALL SELECT v.d FROM v) c "
    "WHERE c.k NOT IN (SELECT w.d FROM v w)",
]


@pytest.mark.parametrize("sql", HOSTILE)
def test_hostile_inputs_end_in_pep249_errors_alike(worlds, sql):
    seen = {n: outcome(worlds[n], METADATA, sql) for n in ("empty", "extreme")}
    assert _alike(seen), seen
    for kind, _ in seen.values():
        assert kind == "ok" or issubclass(getattr(errors, kind), Error), seen
