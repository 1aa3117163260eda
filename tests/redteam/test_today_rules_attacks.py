"""Red team of today's four privacy-relevant rules (35e99c9, 795a22d, 779476f, 27bed74).

Rule 1 (dpsql.rewrite.totality: a simple CASE's WHEN values are compared with its operand;
the CASE is TRY-wrapped when an ``operand = value`` could fail on a row). Claim: no query with
a simple CASE raises on one neighbour and not the other, and where plain SQL does not fail the
answer is plain SQL's. Attacked with a VARCHAR holding 'x' (no INTEGER, DATE or BOOLEAN reads
it) in one neighbour: the CASE in WHERE, ON, FILTER, inside COUNT/SUM/AVG, nested CASEs, as a
condition under NOT / IS TRUE / COALESCE / IF / = TRUE, an arithmetic operand, a CAST WHEN value,
in an IN subquery, an EXISTS, a CTE and a derived table, GROUP BY / select list, HAVING over
COUNT, under one privacy unit (a parameter in WHEN), and on Spark (deep). Result: HELD (plain
DuckDB raises on the neighbour with 'x' in 22 of these; dpsql answers both alike, equal to
plain SQL where plain SQL answers).

Rule 2 (dpsql.rewrite.literal_casts.operand_types, rewrite.plan.check_literals_pass). Claims:
(a) the DataError reads only SQL, metadata and parameters; (b) nothing is charged; (c) no
valid query DuckDB answers is refused. (a), (b) HELD: EXTRACT, DATE_TRUNC, COUNT/SUM/AVG in
HAVING, CTE column lists (renaming and swapping names), nested and shadowing CTEs, correlated
EXISTS, a simple CASE's operand, on a database, its neighbour and an empty one at max_freq
10^6 (deep: also none, 1 and 30), a real ledger untouched. (c) reported BROKEN, decided as
intended: SUM of an INTEGER or HUGEINT column is typed DOUBLE, so a literal DuckDB's HUGEINT
sum reads but DOUBLE does not
(``HAVING SUM(n) > '0x10'``, ``'0b11'``) is refused, while plain DuckDB answers
(:func:`test_a_hex_literal_against_an_integer_sum_is_refused_as_post_processing_would_fail`,
kept by the maintainer as the right refusal for dpsql). Not a privacy break: the
same refusal everywhere, uncharged; and dpsql's post-processing reads the noisy SUM as DOUBLE,
so without the refusal the query would fail after the charge. Every EXTRACT part (31 parts x
DATE/TIMESTAMPTZ/TIME) agrees with DuckDB. Misses noted (answered, not refused, where plain
DuckDB raises on rows): SUM of a DECIMAL or integer compared with 'inf' / 'nan' / '1e400'
(DOUBLE reads them), a column read through UNION ALL (DATE_TRUNC of a TIMESTAMPTZ: checked since).

Rule 3 (dpsql.metadata.unit_check.refuse_repeated_keys, dpsql serve). Claim: every repeated
key a unit release relies on is refused (unit id, every ``to`` column, several units), clean
data with repeated NULL keys is not, on DuckDB and Spark. HELD (DuckDB by default, Spark
deep). Noted: a path INTEGER -> VARCHAR key ('1' and '01' both match 1) passes the check, but
the engine refuses every query along such a path (types differ), so nothing is released.

Rule 4 (dpsql.metadata.build_units.find_paths.reaching). Claim: a via path's ORPHANS count
equals ``metadata check -d``'s "of no unit" for the proposed paths. HELD on random
patients <- visits <- labs <- results chains with NULL unit ids, NULLs and orphans at every
level, read as "of no unit" minus the NULLs (the ORPHANS note counts the rows with a non-NULL
value; check's figure adds the NULL rows).

See /work/briefs/redteam-today-report.md. ``DPSQL_REDTEAM_DEEP=1`` runs every query of
rule 1, more max frequencies, 25 chains for rule 4 and the Spark checks.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dpsql.errors import DataError, ProgrammingError
from dpsql.metadata import Metadata, loads_metadata
from dpsql.metadata.build import build_metadata
from dpsql.metadata.unit_check import check_units, refuse_repeated_keys
from dpsql.session import Session
from tests.db_files import writing
from tests.ledgers import charged, charging_session
from tests.neighbours import neighbour_pair, outcome, write_database
from tests.shop_fixture import ZeroNoise
from tests.units import tiny, tiny_multi

DEEP = os.environ.get("DPSQL_REDTEAM_DEEP") == "1"

# ------------------------------------------------------------------ rule 1: simple CASE

SCHEMA = ["CREATE TABLE t (id INTEGER, g VARCHAR, n INTEGER, s VARCHAR, d DATE, ts TIMESTAMP, "
          "tz TIMESTAMPTZ, x DECIMAL(10,2), h HUGEINT, f DOUBLE, b BOOLEAN)",
          "CREATE TABLE u (id INTEGER, s VARCHAR, n INTEGER)"]
ROWS: dict[str, Sequence[tuple[Any, ...]]] = {
    "t": [(i, "ab"[i % 2], i % 5, str(i % 5), f"2024-01-{i:02d}", f"2024-01-{i:02d} 10:00",
           f"2024-01-{i:02d} 10:00+00", i / 4, i, i / 2, i % 3 == 0) for i in range(1, 21)],
    "u": [(i, str(i % 5), i % 5) for i in range(1, 11)]}
#: the neighbours' extra row: an 's' no INTEGER, DATE or BOOLEAN reads
EXTRA = {"t": ("t", (99, "a", 4, "x", "2024-02-01", "2024-02-01", "2024-02-01 00:00+00", 1, 1,
                     1.0, True)),
         "u": ("u", (5, "x", 0))}


def _metadata(max_freq: int | None = 30) -> Metadata:
    mf = "" if max_freq is None else f"max_freq: {max_freq}, "
    return loads_metadata(f"""
tables:
  t:
    columns:
      id: {{max_freq: 1, type: INTEGER}}
      g: {{max_freq: 30, releasable: true, type: VARCHAR, domain: {{values: [a, b]}}}}
      n: {{{mf}type: INTEGER, bounds: [0, 10]}}
      s: {{{mf}type: VARCHAR}}
      d: {{{mf}type: DATE}}
      ts: {{{mf}type: TIMESTAMP}}
      tz: {{{mf}type: TIMESTAMPTZ}}
      x: {{{mf}type: 'DECIMAL(10,2)', bounds: [0, 10]}}
      h: {{{mf}type: HUGEINT, bounds: [0, 30]}}
      f: {{{mf}type: DOUBLE, bounds: [0, 10]}}
      b: {{{mf}type: BOOLEAN}}
  u:
    columns:
      id: {{max_freq: 2, type: INTEGER}}
      s: {{max_freq: 30, type: VARCHAR}}
      n: {{max_freq: 30, type: INTEGER}}
""")


CASE = "CASE t.n WHEN t.s THEN TRUE ELSE FALSE END"  # t.n = t.s casts 'x' to INTEGER
SIMPLE_CASES = [  # (query, the table whose extra row makes plain DuckDB raise, or None)
    (f"SELECT COUNT(*) FROM t WHERE {CASE}", "t"),
    ("SELECT COUNT(*) FROM t WHERE CASE t.s WHEN 1 THEN TRUE ELSE FALSE END", "t"),
    ("SELECT SUM(CASE t.s WHEN '1' THEN 1 WHEN t.n THEN 2 ELSE 0 END) FROM t", "t"),
    (f"SELECT COUNT(*) FILTER (WHERE {CASE}) FROM t", "t"),
    ("SELECT COUNT(CASE t.n WHEN t.s THEN 1 END) FROM t", "t"),
    ("SELECT AVG(CASE t.n WHEN t.s THEN t.x ELSE 0 END) FROM t", "t"),
    (f"SELECT g, COUNT(*) FROM t WHERE {CASE} GROUP BY g", "t"),
    (f"SELECT COUNT(*) FROM t WHERE NOT {CASE}", "t"),
    ("SELECT COUNT(*) FROM t JOIN u ON t.id = u.id AND CASE t.n WHEN u.s THEN TRUE "
     "ELSE FALSE END", "u"),
    ("SELECT COUNT(*) FROM t WHERE t.id IN (SELECT u.id FROM u WHERE CASE u.n WHEN u.s "
     "THEN TRUE ELSE FALSE END)", "u"),
    ("WITH c AS (SELECT CASE t.n WHEN t.s THEN 1 ELSE 0 END AS z FROM t) "
     "SELECT COUNT(*) FROM c WHERE z = 1", "t"),
    ("SELECT COUNT(*) FROM (SELECT CASE t.n WHEN t.s THEN 1 ELSE 0 END AS z FROM t) q "
     "WHERE q.z = 1", "t"),
    (f"SELECT COUNT(*) FROM t WHERE CASE {CASE} WHEN TRUE THEN TRUE ELSE FALSE END", "t"),
    (f"SELECT COUNT(*) FROM t WHERE COALESCE({CASE}, FALSE)", "t"),
    # deep only from here (the first 14 run by default)
    ("SELECT COUNT(*) FROM t WHERE CASE t.s WHEN t.n THEN TRUE ELSE FALSE END", "t"),
    ("SELECT COUNT(*) FROM t WHERE CASE t.n + 0 WHEN t.s THEN TRUE ELSE FALSE END", "t"),
    ("SELECT COUNT(*) FROM t WHERE CASE t.n WHEN t.s::INTEGER THEN TRUE ELSE FALSE END", "t"),
    ("SELECT SUM(CASE t.n WHEN t.s THEN t.x ELSE 0 END) FROM t", "t"),
    (f"SELECT COUNT(*) FROM t WHERE ({CASE}) = TRUE", "t"),
    (f"SELECT COUNT(*) FROM t WHERE {CASE} IS TRUE", "t"),
    (f"SELECT COUNT(*) FROM t WHERE IF({CASE}, TRUE, FALSE)", "t"),
    (f"SELECT COUNT(*) FROM t WHERE {CASE} AND t.id > 0", "t"),
    ("SELECT COUNT(*) FROM t WHERE CASE t.n WHEN 1 THEN TRUE WHEN t.s THEN FALSE "
     "ELSE FALSE END", "t"),
    ("WITH c AS (SELECT n, s FROM t) SELECT COUNT(*) FROM c WHERE CASE c.n WHEN c.s THEN TRUE "
     "ELSE FALSE END", "t"),
    ("SELECT COUNT(*) FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.id = t.id AND "
     "CASE u.n WHEN t.s THEN TRUE ELSE FALSE END)", None),
    ("SELECT COUNT(*) FROM t WHERE CASE t.d WHEN t.s THEN TRUE ELSE FALSE END", None),
    ("SELECT COUNT(*) FROM t WHERE CASE t.b WHEN t.s THEN TRUE ELSE FALSE END", None),
    ("SELECT g, COUNT(*) FROM t GROUP BY g HAVING CASE COUNT(*) WHEN 10 THEN TRUE "
     "ELSE TRUE END", None),
    ("SELECT CASE t.g WHEN 'a' THEN 'A' ELSE 'B' END AS k, COUNT(*) FROM t "
     "GROUP BY CASE t.g WHEN 'a' THEN 'A' ELSE 'B' END", None),
    ("SELECT COUNT(*) FROM t WHERE CASE t.s WHEN 'x' THEN TRUE ELSE FALSE END", None),
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    out = {}
    for table, extra in EXTRA.items():
        folder = tmp_path_factory.mktemp(f"case_{table}")
        out[table] = neighbour_pair(folder, SCHEMA, ROWS, extra)
    return out


def _plain(path: Path, sql: str) -> tuple[str, object]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return "ok", con.execute(sql).fetchall()
    except duckdb.Error as err:
        return "error", str(err).split("\n")[0]
    finally:
        con.close()


def _normal(rows: Any) -> list[tuple[object, ...]]:
    """Rows with every number as a float (dpsql answers a DECIMAL SUM as a float)."""
    return [tuple(float(v) if isinstance(v, (int, float, Decimal)) else v for v in row)
            for row in rows]


def _close(a: object, b: object) -> bool:
    return _normal(a) == _normal(b)


@pytest.mark.parametrize(("sql", "fails_on"), SIMPLE_CASES if DEEP else SIMPLE_CASES[:14])
def test_a_simple_case_raises_on_no_neighbour_and_answers_as_plain_sql(pairs, sql, fails_on):
    md = _metadata()
    for table, pair in pairs.items():
        dp = [outcome(p, md, sql) for p in pair]
        plain = [_plain(p, sql) for p in pair]
        if table == fails_on:  # the attack bites: plain SQL raises on the neighbour with 'x'
            assert plain[0][0] == "ok" and plain[1][0] == "error", (sql, plain)
        assert dp[0][0] == dp[1][0] == "ok", (sql, table, dp)
        for mine, theirs in zip(dp, plain, strict=True):
            if theirs[0] == "ok":
                assert _close(mine[1], theirs[1]), (sql, table, mine, theirs)


def test_a_simple_case_under_a_unit(tmp_path):
    # tiny shop under customer: a WHEN parameter the operand's type cannot read is refused
    # alike on a database and the one without a unit, uncharged; a WHEN value compares as =
    db = tiny.random_database(random.Random(5))
    unit = tiny.units(db)[0]
    paths = [tiny.write_file(tmp_path / "full.duckdb", db),
             tiny.write_file(tmp_path / "less.duckdb", tiny.remove_unit(db, unit))]
    md = tiny.metadata()
    refused = "SELECT COUNT(*) FROM items WHERE CASE qty WHEN ? THEN TRUE ELSE FALSE END"
    seen = {repr(outcome(p, md, refused, ["x"])) for p in paths}
    assert len(seen) == 1 and "DataError" in seen.pop()
    sql = "SELECT kind, SUM(CASE kind WHEN 2 THEN 1 ELSE 0 END) FROM items GROUP BY kind"
    for p in paths:
        kind, rows = outcome(p, md, sql, epsilon=1e6)
        assert kind == "ok", rows
        assert {k: round(v) for k, v in rows if v is not None}.get(1, 0) == 0  # kind 1: 0
    with charging_session(paths[0], md, tmp_path / "l.sqlite", sampler=ZeroNoise()) as session:
        with pytest.raises(DataError):
            session.run(refused, ["x"], epsilon=0.5)
        assert charged(session) == []


SPARK_SCHEMA = ["CREATE TABLE t (id INTEGER, g VARCHAR, n INTEGER, s VARCHAR, x DECIMAL(10,2))",
                "CREATE TABLE u (id INTEGER, s VARCHAR, n INTEGER)"]
SPARK_MD = """
tables:
  t:
    columns:
      id: {max_freq: 1, type: INTEGER}
      g: {max_freq: 30, releasable: true, type: VARCHAR, domain: {values: [a, b]}}
      n: {max_freq: 30, type: INTEGER, bounds: [0, 10]}
      s: {max_freq: 30, type: VARCHAR}
      x: {max_freq: 30, type: 'DECIMAL(10,2)', bounds: [0, 10]}
  u:
    columns:
      id: {max_freq: 2, type: INTEGER}
      s: {max_freq: 30, type: VARCHAR}
      n: {max_freq: 30, type: INTEGER}
"""


@pytest.mark.spark
@pytest.mark.skipif(not DEEP, reason="DPSQL_REDTEAM_DEEP=1 runs the Spark check")
def test_a_simple_case_on_spark(spark, tmp_path):
    # the same queries on Spark (the subset of columns Parquet carries as declared): both
    # neighbours answer, as plain SQL where it answers. (Where plain SQL raises, Spark reads
    # the failed comparison as no match, DuckDB's TRY as a NULL CASE: AVG(CASE t.n WHEN t.s
    # THEN t.x ELSE 0 END) is 2.5 on Spark, 2.625 on DuckDB; both alike on neighbours)
    from tests.recording import export_parquet, spark_backend_class, with_sources

    md = loads_metadata(SPARK_MD)
    for table, extra in EXTRA.items():
        rows = {"t": [(*r[:4], r[7]) for r in ROWS["t"]], "u": ROWS["u"]}
        row = (*extra[1][:4], extra[1][7]) if table == "t" else extra[1]
        (tmp_path / table).mkdir()
        for path in neighbour_pair(tmp_path / table, SPARK_SCHEMA, rows, (table, row)):
            spark_md = with_sources(md, export_parquet(path, path.parent / f"pq_{path.stem}"))
            for sql, _ in SIMPLE_CASES[:14]:
                backend = spark_backend_class(False)(spark_md, spark)
                try:
                    got = Session(spark_md, backend, sampler=ZeroNoise()).run(
                        sql, [], epsilon=1.0, delta=1e-6).rows
                finally:
                    backend.close()
                plain = _plain(path, sql)
                assert plain[0] == "error" or _close(got, plain[1]), (sql, got, plain)


# ------------------------------------------------------------------ rule 2: literal checks

REFUSED = [  # each literal is unreadable in the operand's type: DataError before the charge
    "SELECT COUNT(*) FROM t WHERE EXTRACT(year FROM d) = 'inf'",
    "SELECT COUNT(*) FROM t WHERE EXTRACT(epoch FROM tz) > '0x10'",
    "SELECT COUNT(*) FROM t WHERE date_trunc('month', d) = '2024-03'",
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING COUNT(*) > 'lots'",
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING SUM(x) > '0x10'",
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING AVG(n) > 'abc'",
    "WITH c(x, d) AS (SELECT d, x FROM t) SELECT COUNT(*) FROM c WHERE c.x = '1.5'",
    "SELECT COUNT(*) FROM (SELECT d, x FROM t) AS q(x, d) WHERE q.d = '2024-01-05'",
    "WITH c AS (SELECT x AS v FROM t) SELECT COUNT(*) FROM (WITH c AS (SELECT d AS v FROM t) "
    "SELECT v FROM c) q WHERE q.v = '1.5'",
    "WITH c AS (SELECT d AS v FROM t), e AS (SELECT v AS w FROM c) SELECT COUNT(*) FROM e "
    "WHERE e.w = '1.5'",
    "SELECT COUNT(*) FROM t WHERE EXISTS (SELECT 1 FROM (SELECT id, x AS d FROM t) AS w "
    "WHERE w.id = t.id AND t.d = '1.5')",
    "SELECT COUNT(*) FROM t WHERE CASE CAST(s AS DATE) WHEN '1.5' THEN TRUE ELSE FALSE END",
    "SELECT COUNT(*) FROM t WHERE CASE h WHEN '1e40' THEN TRUE ELSE FALSE END",
]

ANSWERED = [  # valid literals DuckDB answers: never refused (claim c, held)
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING COUNT(*) > '0x10'",
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING COUNT(*) > ' 7 '",
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING SUM(x) > '1e3'",
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING SUM(f) > '-0'",
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING AVG(x) > '1_0'",
    "SELECT g, CASE COUNT(*) WHEN '1_0' THEN 1 ELSE 0 END FROM t GROUP BY g",
    "SELECT COUNT(*) FROM t WHERE EXTRACT(epoch FROM d) > 'inf'",
    "SELECT COUNT(*) FROM t WHERE EXTRACT(year FROM tz) = '0x7e8'",
    "SELECT COUNT(*) FROM t WHERE date_trunc('month', d) = '2024-01-01 00:00'",
    "SELECT COUNT(*) FROM t WHERE date_trunc('month', tz) = '2024-01-01 00:00+00'",
    "WITH c(x, d) AS (SELECT d, x FROM t) SELECT COUNT(*) FROM c WHERE c.d = '1.5'",
    "SELECT COUNT(*) FROM (SELECT d, x FROM t) AS q(x, d) WHERE q.x = '2024-01-05'",
    "WITH c AS (SELECT d AS v FROM t) SELECT COUNT(*) FROM (WITH c AS (SELECT x AS v FROM t) "
    "SELECT v FROM c) q WHERE q.v = '1.5'",
    "SELECT COUNT(*) FROM t AS d WHERE d.x = '1.5'",
    "SELECT COUNT(*) FROM t WHERE CASE h WHEN '0b11' THEN TRUE ELSE FALSE END",
    "SELECT COUNT(*) FROM t WHERE CAST(n AS DOUBLE) = 'nan'",
]


@pytest.fixture(scope="module")
def worlds(tmp_path_factory, pairs) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("literal_worlds")
    return {"without": pairs["t"][0], "with": pairs["t"][1],
            "empty": write_database(folder / "empty.duckdb", SCHEMA, {})}


@pytest.mark.parametrize("max_freq", [None, 1, 30, 10**6] if DEEP else [10**6])
def test_the_refusal_reads_only_the_sql(worlds, max_freq):
    md = _metadata(max_freq)
    for sql in REFUSED:
        seen = {name: repr(outcome(path, md, sql)) for name, path in worlds.items()}
        assert len(set(seen.values())) == 1, (sql, seen)
        assert "DataError" in seen["empty"] and "cannot be read as type" in seen["empty"], seen
        assert _plain(worlds["with"], sql)[0] == "error", sql  # DuckDB raises on rows too


def test_nothing_is_charged_for_the_refusal(worlds, tmp_path):
    with charging_session(worlds["with"], _metadata(), tmp_path / "l.sqlite",
                          sampler=ZeroNoise()) as session:
        for sql in REFUSED:
            with pytest.raises(DataError):
                session.run(sql, [], epsilon=0.5)
        assert charged(session) == []


def test_valid_literals_are_answered_as_duckdb_answers_them(worlds):
    md = _metadata()
    for sql in ANSWERED:
        plain = _plain(worlds["with"], sql)
        assert plain[0] == "ok", (sql, plain)
        kind, rows = outcome(worlds["with"], md, sql)
        assert kind == "ok", (sql, rows)


HEX_SUMS = ["SELECT g, COUNT(*) FROM t GROUP BY g HAVING SUM(n) > '0x10'",
            "SELECT g, COUNT(*) FROM t GROUP BY g HAVING SUM(h) > '0b11'"]


def test_a_hex_literal_against_an_integer_sum_is_refused_as_post_processing_would_fail(
        worlds):
    # Reported as a break of claim (c): plain DuckDB answers [('a', 10), ('b', 10)] (its
    # HUGEINT SUM reads 0x10 = 16), dpsql refuses. Kept by the maintainer: the comparison runs
    # in dpsql's post-processing on the noisy SUM, stored as DOUBLE, which reads neither '0x10'
    # nor '0b11'; without the refusal the query is charged and then fails there. The refusal
    # is the same everywhere and uncharged.
    md = _metadata()
    for sql in HEX_SUMS:
        assert _plain(worlds["with"], sql)[0] == "ok"
        kind, message = outcome(worlds["with"], md, sql)
        assert kind == "DataError" and "cannot be read as type DOUBLE" in message, (sql, message)


# ------------------------------------------------------------------ rule 3: serve's key check

def _fetch_duckdb(path: Path):
    con = duckdb.connect(str(path), read_only=True)
    return con, (lambda sql: con.execute(sql).fetchall())


def _key_outcome(make_backend, path: Path, md) -> str | None:
    backend = make_backend(path, md)
    try:
        refuse_repeated_keys(md, lambda sql: backend.execute(backend.compile(sql))[0])
    except ProgrammingError as err:
        found = re.search(r"(id|path key) (\S+) is not unique", str(err))
        assert found is not None, err
        return found.group(2)
    finally:
        backend.close()
    return None


def _key_cases(tmp_path: Path) -> list[tuple[str, Path, Metadata, str | None]]:
    """(name, database, metadata, the key refused or None) for one and two units."""
    one = tiny.random_database(random.Random(3))
    one["orders"] = one["orders"] or [(1, 1, 1)]
    o_id = one["orders"][0][0]
    nulls = {**one, "customer": [*one["customer"], (None, 1), (None, 2)],
             "orders": [*one["orders"], (None, 1, 0), (None, 2, 0)]}
    multi = tiny_multi.random_database(random.Random(4))
    multi["orders"] = multi["orders"] or [(1, 1)]
    schema = [f"CREATE TABLE {t} ({', '.join(c + ' INTEGER' for c in cols)})"
              for t, cols in tiny_multi.COLUMNS.items()]
    out = []
    singles: list[tuple[str, Any, str | None]] = [
            ("clean", one, None),
            ("nulls", nulls, None),  # NULL ids and NULL to-keys may repeat
            ("unit_id", {**one, "customer": [*one["customer"], (one["customer"][0][0], 2)]},
             "customer.c_id"),
            ("to_key", {**one, "orders": [*one["orders"], (o_id, 9, 0)]}, "orders.o_id")]
    for name, db, refused in singles:
        out.append((name, tiny.write_file(tmp_path / f"{name}.duckdb", db), tiny.metadata(),
                    refused))
    multis: list[tuple[str, Any, str | None]] = [
            # several units: the second's id, the first's via key
            ("m_clean", multi, None),
            ("m_supp", {**multi, "supplier": [*multi["supplier"], (multi["supplier"][0][0], 2),
                                              (None, 1), (None, 1)]}, "supplier.s_id"),
            ("m_orders", {**multi, "orders": [*multi["orders"], (multi["orders"][0][0], 9)]},
             "orders.o_id")]
    for name, db, refused in multis:
        out.append((name, write_database(tmp_path / f"{name}.duckdb", schema, db),
                    tiny_multi.metadata(), refused))
    return out


def test_serve_refuses_every_repeated_key_and_no_clean_one(tmp_path):
    from dpsql.backends.duckdb import DuckDBBackend

    for name, path, md, refused in _key_cases(tmp_path):
        assert _key_outcome(DuckDBBackend, path, md) == refused, name


@pytest.mark.spark
@pytest.mark.skipif(not DEEP, reason="DPSQL_REDTEAM_DEEP=1 runs the Spark check")
def test_serve_refuses_the_same_keys_on_spark(spark, tmp_path):
    from tests.recording import export_parquet, spark_backend_class, with_sources

    def factory(path: Path, md):
        exported = export_parquet(path, tmp_path / f"pq_{path.stem}")
        return spark_backend_class(False)(with_sources(md, exported), spark)

    for name, path, md, refused in _key_cases(tmp_path):
        assert _key_outcome(factory, path, md) == refused, name


# ------------------------------------------------------------------ rule 4: build's orphans

def _words(text: str) -> str:
    return " ".join(line.strip().lstrip("#").strip() for line in text.splitlines())


def _chain(path: Path, rng: random.Random, n: int = 300) -> None:
    def ref(p_null: float, p_orphan: float) -> int | None:
        r = rng.random()
        if r < p_null:
            return None
        return 10**6 + rng.randint(0, 9) if r < p_null + p_orphan else rng.randint(1, n)

    with writing(path) as con:
        con.execute("CREATE TABLE patients (patient_id INTEGER)")
        con.executemany("INSERT INTO patients VALUES (?)",
                        [(None if rng.random() < 0.003 else i,) for i in range(1, n + 1)])
        for table, key, ref_col, rows, p in [("visits", "visit_id", "patient_id", n, 0.003),
                                             ("labs", "lab_id", "visit_id", n, 0.002),
                                             ("results", "result_id", "lab_id", 2 * n, 0.002)]:
            con.execute(f"CREATE TABLE {table} ({key} INTEGER, {ref_col} INTEGER)")
            con.executemany(f"INSERT INTO {table} VALUES (?, ?)",
                            [(i, ref(p, p / 2)) for i in range(1, rows + 1)])


@pytest.mark.parametrize("seed", range(25) if DEEP else [11])
def test_build_orphans_equal_checks_rows_of_no_unit(tmp_path, seed):
    # seed 11 (deep: 25 seeds; 2 and 20 alike): rows of no unit through a chain's target
    # (labs, results) and direct orphans of visits; the proposal loads
    path = tmp_path / "chain.duckdb"
    _chain(path, random.Random(seed))
    text = build_metadata(path, unit="patients.patient_id")
    try:
        md = loads_metadata(text)
    except ProgrammingError:
        pytest.skip("a table got no path on this draw")  # (only deep seeds)
    con, fetch = _fetch_duckdb(path)
    try:
        report = check_units(md, fetch)
    finally:
        con.close()
    via = [p for p in report.paths if p.to_table != "patients"]
    assert (via and any(p.no_unit > p.nulls for p in via)) or DEEP
    for p in via:
        block = _words(text[text.index(f"  {p.table}:"):]).split("columns:")[0]
        found = re.search(r"ORPHANS on its path to patients: (\d+) of the (\d+) rows", block)
        assert (int(found.group(1)) if found else 0) == p.no_unit - p.nulls, (p, block)
