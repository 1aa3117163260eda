"""Red team of dpsql's public-only path (4771b43: dpsql/analysis/public_only.py,
dpsql/execute/public.py) and of the thirteen new scalar functions (d93e6ec: isodow,
dayofyear, week, weekofyear, hour, minute, second, monthname, dayname, last_day, replace,
reverse, contains).

Claims attacked (brief /work/briefs/redteam-public-path.md):

(1) the public path never answers a query that reads a private table -- its rows, columns,
    row count, existence or anything derived -- whatever the spelling (CTE / alias / derived
    table shadows, schema-qualified, quoted and case-variant names, strings as tables, table
    functions, catalogs, LATERAL, UNNEST, VALUES, recursive CTEs, subqueries in every
    position, correlated references, EXISTS / IN / scalar subqueries, odd joins, set
    operations, SELECT *); the decision depends on the SQL and the metadata only (same
    outcome on neighbouring and empty databases); nothing is charged; its errors are PEP 249
    errors; under a privacy unit and through the server's grants the same holds;
(2) the new functions: no row-dependent error (an overflowing last_day), answers equal to
    plain DuckDB's at zero noise, derived GROUP BY bins over day bounds from the SQL and
    metadata only, and Spark giving DuckDB's values.

Result (report: /work/briefs/redteam-public-path-report.md): (1) held everywhere attacked.
(2) privacy held (last_day's overflow is made total; bins are data-independent); two
correctness breaks, both fixed since (their tests now pass): sqlglot's extra arguments
(``dayname(d, 1)``, ``monthname(d, true)``, ``last_day(d, 'week')``) were accepted and
rewritten although DuckDB refuses them (now refused), and on Spark ``reverse`` reversed code
points where DuckDB reverses grapheme clusters (now refused on Spark).

``DPSQL_REDTEAM_DEEP=1`` adds the real server (dpsql serve + psycopg, grants) and one Spark
query; by default everything runs in-process on DuckDB (~3 s).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import duckdb
import pytest

import dpsql.errors as errors
from dpsql.accounting.analysts import AnalystAccount
from dpsql.analysis.public_only import public_query
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.metadata import loads_metadata
from dpsql.release.record import EXACT
from dpsql.server.statements import AccessDenied, StatementRunner
from dpsql.session import Session
from tests.db_files import writing
from tests.ledgers import charged, charging_session
from tests.neighbours import outcome
from tests.shop_fixture import ZeroNoise

DEEP = os.environ.get("DPSQL_REDTEAM_DEEP") == "1"

METADATA = loads_metadata("""
tables:
  orders:
    columns:
      customer_id: {type: INTEGER, max_freq: 3}
      amount: {bounds: [0, 100], type: DOUBLE}
      d: {type: DATE, bounds: ['2024-01-01', '2024-03-31']}
      ts: {type: TIMESTAMP, bounds: ['2024-01-01', '2024-03-31']}
      s: {type: VARCHAR, max_freq: 3}
  products:
    public: true
    columns:
      pid: {type: INTEGER}
      name: {type: VARCHAR}
      price: {type: DOUBLE}
      d: {type: DATE}
""")

SCHEMA = ["CREATE TABLE orders (customer_id INTEGER, amount DOUBLE, d DATE, ts TIMESTAMP, "
          "s VARCHAR)",
          "CREATE TABLE products (pid INTEGER, name VARCHAR, price DOUBLE, d DATE)",
          "INSERT INTO products VALUES (1, 'a', 1.5, DATE '2024-01-01'), "
          "(2, 'b', 2.5, DATE '2021-01-03'), (3, NULL, NULL, NULL)"]
TYPICAL = ("INSERT INTO orders VALUES (1, 5.0, DATE '2024-01-01', TIMESTAMP '2024-01-01 10:00', "
           "'ab'), (2, 7.0, DATE '2024-02-03', TIMESTAMP '2024-02-29 23:59:59', 'xy')")
#: one more row at the edge: last_day overflows on it (DuckDB: ConversionException)
EXTREME = ("INSERT INTO orders VALUES (3, 100.0, DATE '5881580-07-10', "
           "TIMESTAMP '294247-01-10 04:00:54', 'e\u0301x')")


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> dict[str, Path]:
    """empty (no orders), typical (two orders), extreme (typical + one edge row)."""
    folder = tmp_path_factory.mktemp("public_path")
    out = {}
    for name, extra in (("empty", []), ("typical", [TYPICAL]), ("extreme", [TYPICAL, EXTREME])):
        path = folder / f"{name}.duckdb"
        with writing(path) as con:
            for statement in SCHEMA + extra:
                con.execute(statement)
        out[name] = path
    return out


# -- (1) the public path never reads a private table ----------------------------------------

#: each reads orders (rows, columns, row count, existence) in some spelling
BYPASSES = [
    "SELECT * FROM orders",
    "FROM orders",
    "SELECT * FROM main.orders",
    "SELECT * FROM public.orders",
    'SELECT * FROM "main"."orders"',
    'SELECT * FROM "ORDERS"',
    "SELECT * FROM Orders",
    "SELECT * FROM 'orders'",
    "SELECT MAX(amount) FROM orders",
    "SELECT AVG(amount) AS a FROM orders",
    # CTE / alias / derived table named like the public table, over the private one
    "WITH products AS (SELECT * FROM orders) SELECT MAX(amount) FROM products",
    "WITH Products AS (SELECT * FROM orders) SELECT MAX(amount) FROM Products",
    'WITH "PRODUCTS" AS (SELECT * FROM orders) SELECT MAX(amount) FROM "PRODUCTS"',
    "SELECT MAX(amount) FROM (SELECT * FROM orders) AS products",
    "SELECT MAX(p.amount) FROM orders AS products, orders AS p",
    "SELECT MAX(price) FROM products, (SELECT customer_id FROM orders) AS x",
    # a CTE of the same name in an inner scope, the real table outside it
    "SELECT MAX(price) AS m, (SELECT COUNT(*) FROM orders) AS n, "
    "(WITH orders AS (SELECT 1 AS a) SELECT a FROM orders) AS y FROM products",
    "WITH x AS (SELECT * FROM orders) SELECT MAX(price) FROM products, x",
    "WITH x AS (SELECT * FROM products) SELECT MAX(x.price) FROM x JOIN orders o "
    "ON o.customer_id = x.pid",
    # subqueries in every position
    "SELECT MAX(price) AS m FROM products WHERE EXISTS (SELECT 1 FROM orders)",
    "SELECT MAX(price) AS m FROM products WHERE NOT EXISTS (SELECT 1 FROM orders o "
    "WHERE o.customer_id = products.pid)",
    "SELECT MAX(price) AS m FROM products WHERE pid IN (SELECT customer_id FROM orders)",
    "SELECT MAX(price) AS m FROM products WHERE pid NOT IN (SELECT customer_id FROM orders)",
    "SELECT MAX(price) AS m FROM products WHERE price > (SELECT MAX(amount) FROM orders)",
    "SELECT (SELECT COUNT(*) FROM orders) AS n, MAX(price) AS m FROM products",
    "SELECT (SELECT MAX(o.amount) FROM orders o WHERE o.customer_id = p.pid) AS m "
    "FROM products p",
    "SELECT MAX(price) AS m FROM products LIMIT (SELECT COUNT(*) FROM orders)",
    "SELECT MAX(price) AS m FROM products ORDER BY (SELECT COUNT(*) FROM orders)",
    "SELECT MAX(price) AS m FROM products GROUP BY (SELECT MAX(s) FROM orders)",
    "SELECT MAX(price) AS m FROM products HAVING MAX(price) > (SELECT MIN(amount) FROM orders)",
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM orders) THEN 1 ELSE 0 END AS e, MAX(price) "
    "FROM products",
    "SELECT MAX(price) AS m FROM products WHERE pid IN (FROM orders SELECT customer_id)",
    "SELECT MAX(price) AS m FROM products WHERE pid IN (TABLE orders)",
    "SELECT MAX(price) AS m FROM products WHERE pid = ANY (SELECT customer_id FROM orders)",
    # joins written oddly
    "SELECT MAX(price) FROM products, orders",
    "SELECT MAX(price) FROM products CROSS JOIN orders",
    "SELECT MAX(price) FROM products NATURAL JOIN orders",
    "SELECT MAX(price) FROM products POSITIONAL JOIN orders",
    "SELECT MAX(price) FROM products ASOF JOIN orders ON pid >= customer_id",
    "SELECT MAX(price) FROM products SEMI JOIN orders ON pid = customer_id",
    "SELECT MAX(price) FROM products ANTI JOIN orders ON pid = customer_id",
    "SELECT MAX(price) FROM products LEFT JOIN orders ON false",
    "SELECT MAX(price) FROM products JOIN orders USING (d)",
    "SELECT MAX(price) FROM products, LATERAL (SELECT * FROM orders WHERE customer_id = pid) x",
    # set operations
    "SELECT pid FROM products UNION SELECT customer_id FROM orders",
    "SELECT MAX(k) FROM (SELECT pid AS k FROM products UNION ALL SELECT customer_id "
    "FROM orders) t",
    "SELECT MAX(k) FROM (SELECT pid AS k FROM products EXCEPT SELECT customer_id FROM orders) t",
    # catalogs, table functions, files, strings, other relations
    "SELECT * FROM information_schema.tables, products",
    "SELECT * FROM information_schema.columns WHERE table_name = 'orders'",
    "SELECT * FROM duckdb_tables(), products",
    "SELECT MAX(price) FROM products, duckdb_columns()",
    "SELECT * FROM pg_catalog.pg_tables, products",
    "SELECT * FROM pg_tables, products",
    "SELECT * FROM query_table('orders')",
    "SELECT * FROM query('SELECT * FROM orders')",
    "SELECT MAX(price) FROM products, read_csv('/etc/passwd')",
    "SELECT MAX(price) FROM products, 'x.csv'",
    "SELECT MAX(price) FROM products, UNNEST([1, 2]) u(x)",
    "SELECT MAX(x) FROM (VALUES (1), (2)) v(x), products",
    "WITH RECURSIVE r AS (SELECT 1 AS a UNION ALL SELECT a + 1 FROM r WHERE a < 3) "
    "SELECT MAX(price) FROM products, r",
    "SELECT MAX(price) FROM products USING SAMPLE 1",
    "SELECT orders FROM orders",
    "SELECT products FROM products, orders",
    "SELECT COLUMNS('.*') FROM orders",
    "SELECT getvariable('x') AS v, MAX(price) FROM products",
    "SELECT MAX(price) FROM products WHERE pid IN orders",
    "DESCRIBE orders",
    "SUMMARIZE orders",
    "SHOW TABLES",
    "EXPLAIN SELECT * FROM orders",
    "PRAGMA table_info('orders')",
    "SELECT MAX(price) FROM products; SELECT * FROM orders",
    "ATTACH '/tmp/x.duckdb' AS x",
    "INSERT INTO products SELECT customer_id, s, amount, d FROM orders",
    "CREATE TABLE leak AS SELECT * FROM orders",
]


def _public_answer(session: Session, sql: str):
    """The session's answer, or None when it refused: the test then checks the answer was not
    the public path's (exact and free)."""
    try:
        return session.run(sql, epsilon=1.0, delta=1e-6)
    except errors.Error:
        return None


@pytest.mark.parametrize("sql", BYPASSES)
def test_a_query_reading_a_private_table_never_takes_the_public_path(worlds, sql):
    assert public_query(sql, METADATA) is None
    session = Session(METADATA, DuckDBBackend(worlds["typical"], METADATA), sampler=ZeroNoise())
    try:
        result = _public_answer(session, sql)
        # refused, or answered by the private pipeline (noisy, charged): never exact-and-free
        assert result is None or result.release.mechanism != EXACT
        assert result is None or not result.release.free
    finally:
        session.backend.close()


PUBLIC = [
    ("SELECT AVG(price) AS a FROM products", [(2.0,)]),
    ("SELECT MAX(price) AS m, COUNT(*) AS n FROM products", [(2.5, 3)]),
    ("SELECT * FROM products ORDER BY pid", [(1, "a", 1.5, datetime.date(2024, 1, 1)),
                                             (2, "b", 2.5, datetime.date(2021, 1, 3)),
                                             (3, None, None, None)]),
    ("SELECT * FROM main.products ORDER BY pid LIMIT 1",
     [(1, "a", 1.5, datetime.date(2024, 1, 1))]),
    ('SELECT "PRODUCTS".pid FROM "PRODUCTS" ORDER BY 1 LIMIT 1', [(1,)]),
    ("WITH x AS (SELECT * FROM products) SELECT MAX(x.price) AS m FROM x", [(2.5,)]),
    ("SELECT MAX(price) AS m FROM products WHERE pid IN (SELECT pid FROM products "
     "WHERE name = 'b')", [(2.5,)]),
    ("SELECT MAX(price) AS m FROM products p WHERE EXISTS (SELECT 1 FROM products q "
     "WHERE q.pid = p.pid + 1)", [(2.5,)]),
    ("SELECT dayname(d) AS k, MAX(price) AS m FROM products WHERE d IS NOT NULL "
     "GROUP BY dayname(d) ORDER BY k", [("Monday", 1.5), ("Sunday", 2.5)]),
    ("SELECT MAX(week(d)) AS w, MIN(last_day(d)) AS l, MAX(reverse(name)) AS r FROM products",
     [(53, datetime.date(2021, 1, 31), "b")]),
]


@pytest.mark.parametrize(("sql", "rows"), PUBLIC)
def test_a_public_query_is_exact_free_and_the_same_on_every_world(worlds, sql, rows):
    # the decision and the answer depend on the SQL, the metadata and the public table only
    seen = {name: outcome(path, METADATA, sql) for name, path in worlds.items()}
    assert all(o == ("ok", rows) for o in seen.values()), seen
    assert public_query(sql, METADATA) is not None


@pytest.mark.parametrize("sql", [
    *BYPASSES[:40:3],
    "SELECT MAX(amount) FROM orders WHERE last_day(d) > DATE '2000-01-01'",
    "SELECT AVG(price) AS a FROM products WHERE pid IN (SELECT customer_id FROM orders)"])
def test_a_refusal_is_the_same_on_every_world(worlds, sql):
    seen = {name: outcome(path, METADATA, sql) for name, path in worlds.items()}
    kinds = {o if o[0] != "ok" else "ok" for o in seen.values()}
    assert len(kinds) == 1, seen


def test_nothing_is_charged_on_the_public_path(worlds, tmp_path):
    with charging_session(worlds["typical"], METADATA, tmp_path / "l.sqlite",
                          sampler=ZeroNoise()) as session:
        for sql, rows in PUBLIC:
            result = session.run(sql)  # no epsilon needed
            assert result.rows == rows and result.release.free
            assert (result.release.epsilon, result.release.delta) == (0, 0)
        for sql in ("SELECT CAST(name AS INTEGER) AS c FROM products",  # runtime error
                    "SELECT MAX(price) FROM products WHERE pid = ?"):  # missing parameter
            with pytest.raises(errors.Error):
                session.run(sql)
        for sql in BYPASSES[:12]:
            with pytest.raises(errors.Error):  # refused without an epsilon: no charge
                session.run(sql)
        assert charged(session) == []


@pytest.mark.parametrize(("sql", "params", "error"), [
    ("SELECT CAST(name AS INTEGER) AS c FROM products", [], errors.OperationalError),
    ("SELECT * FROM products WHERE pid = (SELECT pid FROM products)", [],
     errors.OperationalError),  # more than one row in a scalar subquery
    ("SELECT * FROM products WHERE pid IN (FROM products)", [], errors.ProgrammingError),
    ("SELECT MAX(price) AS m FROM products WHERE pid = ?", [], errors.ProgrammingError),
    ("SELECT MAX(price) AS m FROM products WHERE pid = ?", [1, 2], errors.ProgrammingError),
    ("SELECT MAX(price) AS m FROM products WHERE pid = ?", ["x"], errors.Error),
    ("SELECT MAX(price) AS m FROM products WHERE d = ?", [object()], errors.Error),
    ("SELECT week(name) AS w, MAX(price) FROM products GROUP BY 1", [], errors.Error),
    ("SELECT MAX(price) AS m FROM products WHERE contains(pid, 1)", [], errors.Error),
])
def test_the_public_paths_errors_are_pep_249(worlds, sql, params, error):
    session = Session(METADATA, DuckDBBackend(worlds["typical"], METADATA))
    try:
        with pytest.raises(error) as caught:
            session.run(sql, params)
        assert isinstance(caught.value, errors.Error)
        assert "Traceback" not in str(caught.value)
    finally:
        session.backend.close()


# -- under a privacy unit ---------------------------------------------------------------

def test_under_a_privacy_unit_only_public_tables_are_answered_exactly(tmp_path):
    from tests.units import tiny

    md = tiny.metadata()
    db = {"customer": [(1, 1), (2, 2)], "orders": [(1, 1, 3), (2, 2, 4)],
          "items": [(1, 2, 1)], "regions": [(1,), (2,)]}
    paths = [tiny.write_file(tmp_path / "a.duckdb", db),
             tiny.write_file(tmp_path / "b.duckdb", tiny.remove_unit(db, 2))]
    ok = ["SELECT MAX(r) AS m, COUNT(*) AS n FROM regions", "SELECT * FROM regions ORDER BY r",
          "SELECT AVG(r) AS a FROM regions WHERE r IN (SELECT r FROM regions)"]
    refused = ["SELECT * FROM customer", "SELECT MAX(amount) FROM orders",
               "SELECT MAX(r) FROM regions WHERE r IN (SELECT region FROM customer)",
               "SELECT MAX(r) FROM regions WHERE EXISTS (SELECT 1 FROM items)",
               "WITH x AS (SELECT * FROM orders) SELECT MAX(r) FROM regions, x",
               "SELECT (SELECT COUNT(*) FROM customer) AS n, MAX(r) FROM regions"]
    for sql in ok:
        got = [outcome(p, md, sql) for p in paths]
        assert got[0] == got[1] and got[0][0] == "ok", got
        assert public_query(sql, md) is not None
    for sql in refused:
        assert public_query(sql, md) is None
        got = [outcome(p, md, sql) for p in paths]
        assert got[0][0] != "ok" and got[0] == got[1], got


# -- the server's grants -----------------------------------------------------------------

def _runner(path: Path, tables: set[str] | None) -> StatementRunner:
    account = AnalystAccount("dave", None if tables is None else frozenset(tables),
                             None, None, 1.0, 0.0)
    return StatementRunner(Session(METADATA, DuckDBBackend(path, METADATA), sampler=ZeroNoise()),
                           account, "dave")


def test_a_grant_of_products_only_never_reads_orders_through_the_public_path(worlds):
    runner = _runner(worlds["typical"], {"products"})
    try:
        answer = runner.answer("SELECT MAX(price) AS m, COUNT(*) AS n FROM products")
        assert answer.rows == [(2.5, 3)] and answer.release.free
        for sql in BYPASSES[:30]:
            with pytest.raises(errors.Error):
                runner.answer(sql)
    finally:
        runner.session.backend.close()


@pytest.mark.parametrize("sql", [
    "SELECT MAX(price) AS m FROM products", "SELECT * FROM main.products",
    'SELECT * FROM "PRODUCTS"', "SELECT * FROM 'products'",
    "WITH x AS (SELECT * FROM products) SELECT MAX(x.price) FROM x"])
def test_a_public_table_not_granted_is_denied_on_the_public_path(worlds, sql):
    runner = _runner(worlds["typical"], {"orders"})
    try:
        with pytest.raises(AccessDenied):
            runner.answer(sql)
    finally:
        runner.session.backend.close()


@pytest.mark.skipif(not DEEP, reason="DPSQL_REDTEAM_DEEP=1: starts dpsql serve (~3 s)")
def test_the_server_over_psycopg_keeps_grants_on_the_public_path(tmp_path):
    psycopg = pytest.importorskip("psycopg")
    from dpsql.accounting import Ledger
    from tests.server.serving import launch, prepare

    db, md, ledger_path, database_id = prepare(tmp_path)
    with Ledger(ledger_path) as ledger:
        ledger.add_analyst("dave", "dave-secret", tables=["products"])
        ledger.set_budget(database_id, "dave", 5.0, 0.0)
        ledger.add_analyst("erin", "erin-secret", tables=["orders"], default_epsilon=0.5)
        ledger.set_budget(database_id, "erin", 5.0, 0.0)
    server = launch(db, md, ledger_path, database_id)
    try:
        with psycopg.connect(server.dsn("dave", "dave-secret"), autocommit=True) as conn:
            rows = conn.execute("SELECT MAX(price) AS m, COUNT(*) AS n FROM products",
                                prepare=True).fetchall()
            assert len(rows) == 1 and rows[0][1] > 0
            for sql in ("SELECT * FROM orders", "SELECT MAX(order_cost) FROM orders",
                        "SELECT MAX(price) FROM products WHERE EXISTS (SELECT 1 FROM orders)",
                        "SELECT MAX(price) FROM products, (SELECT 1 AS one FROM orders) x"):
                with pytest.raises(psycopg.Error):
                    conn.execute(sql, prepare=True).fetchall()
        with (psycopg.connect(server.dsn("erin", "erin-secret"), autocommit=True) as conn,
              pytest.raises(psycopg.errors.InsufficientPrivilege)):
            conn.execute("SELECT MAX(price) FROM products").fetchall()
    finally:
        server.stop()


# -- (2) the thirteen new functions ----------------------------------------------------------

ORACLE = [  # private queries with the new functions where a row may fail or sit at an edge
    "SELECT COUNT(*) AS n FROM orders WHERE last_day(d) > DATE '2000-01-01'",
    "SELECT COUNT(*) AS n FROM orders WHERE last_day(ts) > DATE '2000-01-01'",
    "SELECT last_day(d) AS k, COUNT(*) AS n FROM orders GROUP BY last_day(d)",
    "SELECT k, COUNT(*) AS n FROM (SELECT last_day(d) AS k FROM orders) t GROUP BY k",
    "SELECT SUM(amount) AS s FROM orders WHERE last_day(d) IS NOT NULL",
    "SELECT COUNT(*) AS n FROM orders WHERE customer_id IN (SELECT o.customer_id FROM orders o "
    "WHERE last_day(o.d) = last_day(o.d))",
    "SELECT COUNT(*) AS n FROM orders GROUP BY last_day(d) > DATE '2000-01-01'",
    "SELECT week(d) AS k, COUNT(*) AS n FROM orders GROUP BY week(d)",
    "SELECT dayname(ts) AS k, COUNT(*) AS n FROM orders GROUP BY dayname(ts)",
    "SELECT monthname(d) AS k, COUNT(*) AS n FROM orders GROUP BY monthname(d)",
    "SELECT isodow(d) AS k, SUM(amount) AS s FROM orders GROUP BY isodow(d)",
    "SELECT dayofyear(d) AS k, COUNT(*) AS n FROM orders GROUP BY dayofyear(d)",
    "SELECT weekofyear(ts) AS k, COUNT(*) AS n FROM orders GROUP BY weekofyear(ts)",
    "SELECT hour(d) AS k, COUNT(*) AS n FROM orders GROUP BY hour(d)",
    "SELECT hour(ts) AS k, COUNT(*) AS n FROM orders GROUP BY hour(ts)",  # refused
    "SELECT second(ts) AS k, COUNT(*) AS n FROM orders GROUP BY second(ts)",  # refused
    "SELECT reverse(s) AS k, COUNT(*) AS n FROM orders GROUP BY reverse(s)",  # refused
    "SELECT COUNT(*) AS n FROM orders WHERE hour(ts) + minute(ts) + second(ts) > 0",
    "SELECT COUNT(*) AS n FROM orders WHERE contains(s, 'x') AND reverse(s) <> replace(s, "
    "'x', 'y')",
    "SELECT SUM(CAST(contains(s, 'e') AS INTEGER)) AS s FROM orders",
    "SELECT COUNT(*) AS n FROM orders WHERE week(d) = 1",
    "SELECT MAX(amount) AS m FROM orders WHERE last_day(d) > DATE '2000-01-01'",
]


@pytest.mark.parametrize("sql", ORACLE)
def test_no_new_function_is_an_error_oracle(worlds, sql):
    seen = {name: outcome(path, METADATA, sql, epsilon=1e6) for name, path in worlds.items()}
    kinds = {o if o[0] != "ok" else "ok" for o in seen.values()}
    assert len(kinds) == 1, seen
    if seen["typical"][0] == "ok" and " AS k" in sql:  # the bins: the SQL decides
        keys = {name: [r[0] for r in o[1]] for name, o in seen.items()}
        assert keys["empty"] == keys["typical"] == keys["extreme"], keys


_DAY_BINS = [  # (key, the image over the days of orders.d's bounds, DuckDB computing it)
    "week(d)", "weekofyear(ts)", "dayname(d)", "monthname(ts)", "isodow(d)", "dayofyear(d)",
    "last_day(d)", "last_day(ts)", "hour(d)",
]


@pytest.mark.parametrize("key", _DAY_BINS)
def test_day_bins_are_the_image_of_the_bounds_and_counts_are_duckdbs(worlds, key):
    sql = f"SELECT {key} AS k, COUNT(*) AS n FROM orders GROUP BY {key}"
    kind, rows = outcome(worlds["typical"], METADATA, sql, epsilon=1e9)
    assert kind == "ok", rows
    con = duckdb.connect()
    try:
        image = {r[0] for r in con.execute(
            f"SELECT DISTINCT {key.replace('(d)', '(x)').replace('(ts)', '(x::TIMESTAMP)')} "
            "FROM range(DATE '2024-01-01', DATE '2024-04-01', INTERVAL 1 DAY) r(x)").fetchall()}
    finally:
        con.close()
    assert {r[0] for r in rows} == image
    with duckdb.connect(str(worlds["typical"]), read_only=True) as plain:
        exact = dict(plain.execute(sql).fetchall())
    # zero noise at a huge epsilon: every bin's count is DuckDB's (0 where DuckDB has none)
    assert dict(rows) == {k: exact.get(k, 0) for k in image}


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM orders WHERE contains(s, 'y') OR reverse(s) = 'ba'",
    "SELECT COUNT(*) AS n FROM orders WHERE replace(s, 'a', '') = 'b'",
    "SELECT COUNT(*) AS n FROM orders WHERE hour(ts) = 23 AND minute(ts) = 59 "
    "AND second(ts) = 59",
    "SELECT COUNT(*) AS n FROM orders WHERE dayofyear(d) = 1 OR isodow(ts) = 4",
    "SELECT COUNT(*) AS n FROM orders WHERE monthname(d) = 'February' AND dayname(d) = 'Saturday'",
    "SELECT COUNT(*) AS n FROM orders WHERE last_day(ts) = DATE '2024-02-29'",
    "SELECT SUM(amount) AS s FROM orders WHERE weekofyear(d) < 10",
])
def test_new_functions_in_where_give_duckdbs_answer(worlds, sql):
    kind, rows = outcome(worlds["typical"], METADATA, sql, epsilon=1e9)
    with duckdb.connect(str(worlds["typical"]), read_only=True) as plain:
        exact = plain.execute(sql).fetchall()
    assert kind == "ok" and [tuple(float(v or 0) for v in r) for r in rows] == \
        [tuple(float(v or 0) for v in r) for r in exact], (rows, exact)


# BREAK, fixed (dpsql.analysis.allowlist._ONE_ARGUMENT): sqlglot's extra arguments were
# accepted and rewritten although DuckDB refuses them: dayname(d, 1) / monthname(d, true) ran as
# strftime '%a' / '%b', last_day(d, 'week') as an end-of-week expression
@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM orders WHERE dayname(d, 1) = 'Mon'",
    "SELECT COUNT(*) AS n FROM orders WHERE monthname(d, true) = 'Jan'",
    "SELECT last_day(d, 'week') AS k, COUNT(*) AS n FROM orders GROUP BY last_day(d, 'week')",
])
def test_arguments_duckdb_refuses_are_refused(worlds, sql):
    with (duckdb.connect(str(worlds["typical"]), read_only=True) as plain,
          pytest.raises(duckdb.BinderException)):
        plain.execute(sql)
    kind, message = outcome(worlds["typical"], METADATA, sql, epsilon=1e9)
    assert kind == "UnsupportedConstructError" and "takes one argument" in message, message


# -- Spark ------------------------------------------------------------------------------

_SPARK_ROWS = [(1, "e\u0301x", datetime.date(2021, 1, 3), datetime.datetime(2021, 1, 3, 23, 59)),
               (2, "\U0001F1EB\U0001F1F7a", datetime.date(2020, 12, 31),
                datetime.datetime(2024, 2, 29, 0, 0, 1)),
               (3, "abc", datetime.date(1582, 10, 4), datetime.datetime(1900, 1, 1, 12, 30, 30))]
_SPARK_HELD = ["week(t.d)", "weekofyear(t.ts)", "dayname(t.d)", "monthname(t.ts)",
               "isodow(t.d)", "dayofyear(t.ts)", "last_day(t.ts)", "hour(t.d)", "second(t.ts)",
               "minute(t.ts)", "contains(t.s, 'e')", "replace(t.s, 'e', '')"]


def _spark_vs_duckdb(spark, exprs):
    import sqlglot

    from dpsql.backends.spark import SESSION_CONF
    from dpsql.backends.spark_sql import to_spark_sql

    for key, value in SESSION_CONF.items():
        spark.conf.set(key, value)
    spark.createDataFrame(_SPARK_ROWS, "rid BIGINT, s STRING, d DATE, ts TIMESTAMP_NTZ"
                          ).createOrReplaceTempView("t")
    query = ("SELECT t.rid, " + ", ".join(f"{e} AS v{i}" for i, e in enumerate(exprs))
             + " FROM t AS t ORDER BY t.rid")
    con = duckdb.connect()
    con.execute("CREATE TABLE t (rid BIGINT, s VARCHAR, d DATE, ts TIMESTAMP)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", _SPARK_ROWS)
    duck = con.execute(sqlglot.transpile(query, read="duckdb", write="duckdb")[0]).fetchall()
    got = [tuple(r) for r in spark.sql(to_spark_sql(query, {"t": {
        "rid": "BIGINT", "s": "VARCHAR", "d": "DATE", "ts": "TIMESTAMP"}})).collect()]
    return {e: ([r[i + 1] for r in duck], [r[i + 1] for r in got])
            for i, e in enumerate(exprs) if [r[i + 1] for r in duck] != [r[i + 1] for r in got]}


@pytest.mark.spark
@pytest.mark.skipif(not DEEP, reason="DPSQL_REDTEAM_DEEP=1: one Spark query (~10 s)")
def test_new_functions_on_spark_are_duckdbs(spark):
    assert _spark_vs_duckdb(spark, _SPARK_HELD) == {}


# BREAK (Spark), fixed: reverse('e\u0301x') was 'x\u0301e' on Spark (code points) but 'xe\u0301'
# in DuckDB (grapheme clusters; a flag emoji's regional indicators swapped): reverse now fails
# closed on Spark (dpsql.backends.spark_functions); the abbreviated names are refused above
def test_reverse_fails_closed_on_spark():
    from dpsql.backends.spark_sql import to_spark_sql
    from dpsql.errors import NotSupportedError

    with pytest.raises(NotSupportedError, match="code points"):
        to_spark_sql("SELECT reverse(t.s) FROM t AS t", {"t": {"s": "VARCHAR"}})


def test_the_extreme_world_really_fails_in_plain_duckdb(worlds):
    # the oracle above is meaningful: the row does raise when last_day runs unguarded
    with (duckdb.connect(str(worlds["extreme"]), read_only=True) as plain,
          pytest.raises(duckdb.ConversionException)):
        plain.execute("SELECT COUNT(*) FROM orders WHERE last_day(d) > DATE '2000-01-01'"
                      ).fetchall()
