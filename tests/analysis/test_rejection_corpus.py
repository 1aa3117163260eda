"""Every category of the allow-list is rejected before anything is charged or executed.

For each query: ``Session.run`` raises exactly the class docs/design.md ("Interfaces") assigns
(the class itself, not just a parent), never reaches DuckDB (a real DuckDBBackend subclass
records every ``execute`` call and the list must stay empty), charges nothing on a real ledger
file, and the message is a sentence that says what to change. Classes:

* ``UnsupportedQueryError``: not an aggregate query dpsql can release — DDL/DML, PRAGMA, SET,
  ATTACH, COPY, INSTALL, LOAD, CALL, several statements, raw rows, no FROM;
* ``UnsupportedConstructError``: a construct without a sound rule — table functions, file paths
  as tables, system catalogs, nondeterministic / undeclared functions, window functions, cross
  and non-equi joins, outer joins without an ON equality, samples, set operations, LATERAL,
  VALUES, ...
* ``MissingMetricError``: a join key without max frequency, a SUM without bounds;
* ``ProtectedBinError``: a group key that is not releasable or has no domain;
* ``AggregateArithmeticError``: an aggregate inside a subquery feeding a comparison, nested
  aggregates;
* ``ProgrammingError``: syntax errors, undeclared tables and columns, wrong parameter counts.

The corpus runs once per backend (``make_backend``, tests/conftest.py): on Spark too nothing may
reach the backend, including Spark's own file sources (``parquet.`/path```), commands (ADD JAR,
CACHE, REFRESH, ...) and UDF registration.
"""

from __future__ import annotations

import contextlib

import pytest

from dpsql.errors import (
    AggregateArithmeticError,
    Error,
    MissingMetricError,
    ProgrammingError,
    ProtectedBinError,
    UnsupportedConstructError,
    UnsupportedQueryError,
)
from tests.ledgers import charged, ledger_session, open_ledger


@pytest.fixture(scope="module")
def backend_name() -> str:
    # The refusals come from the analysis, before any backend is involved; that a Spark session
    # is not touched either is checked in tests/backends/test_spark.py.
    return "duckdb"


@pytest.fixture(scope="module")
def shared_engine(shop, make_backend, tmp_path_factory):
    metadata = shop.metadata()
    backend = make_backend(shop.path, metadata, recording=True)
    ledger = open_ledger(tmp_path_factory.mktemp("ledger") / "ledger.sqlite")
    yield ledger_session(metadata, backend, ledger), backend
    backend.close()
    ledger.close()


@pytest.fixture
def engine(shared_engine):
    shared_engine[1].executed.clear()
    return shared_engine


UQ, UC = UnsupportedQueryError, UnsupportedConstructError
MM, PB, AA, PE = MissingMetricError, ProtectedBinError, AggregateArithmeticError, ProgrammingError

CORPUS: dict[str, list[tuple[str, type[Error]]]] = {
    "table_functions": [
        ("SELECT COUNT(*) FROM read_csv('/etc/passwd')", UC),
        ("SELECT COUNT(*) FROM read_csv_auto('/etc/passwd')", UC),
        ("SELECT COUNT(*) FROM read_parquet('/tmp/x.parquet')", UC),
        ("SELECT COUNT(*) FROM read_json('/tmp/x.json')", UC),
        ("SELECT COUNT(*) FROM read_text('/etc/passwd')", UC),
        ("SELECT COUNT(*) FROM read_blob('/etc/passwd')", UC),
        ("SELECT COUNT(*) FROM glob('/etc/*')", UC),
        ("SELECT COUNT(*) FROM sniff_csv('/etc/passwd')", UC),
        ("SELECT COUNT(*) FROM range(10)", UC),
        ("SELECT COUNT(*) FROM generate_series(1, 10)", UC),
        ("SELECT COUNT(*) FROM query('SELECT 1')", UC),
        ("SELECT COUNT(*) FROM orders o, query_table('customers') q", UC),
        ("SELECT COUNT(*) FROM UNNEST([1, 2, 3])", UC),
        ("SELECT COUNT(*) FROM orders WHERE read_csv('/etc/passwd') IS NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE LENGTH(read_blob('/etc/passwd')) > 0", UC),
        # hidden in a subquery, a derived table or a CTE
        ("SELECT COUNT(*) FROM orders WHERE quantity IN "
         "(SELECT column0 FROM read_csv('/etc/passwd'))", UC),
        ("SELECT COUNT(*) FROM orders WHERE EXISTS (FROM read_csv('/etc/passwd'))", UC),
        ("SELECT COUNT(*) FROM orders o, (SELECT * FROM read_csv('/etc/passwd')) x "
         "WHERE x.a = o.order_id", UC),
        ("WITH x AS (SELECT * FROM read_parquet('/etc/passwd')) SELECT COUNT(*) FROM x", UC),
    ],
    "file_paths_as_tables": [
        ("SELECT COUNT(*) FROM '/etc/passwd'", UC),
        ("SELECT COUNT(*) FROM 'orders.csv'", UC),
        ("SELECT COUNT(*) FROM \"data.parquet\"", UC),
        ("SELECT COUNT(*) FROM '/tmp/*.parquet'", UC),
        ("SELECT COUNT(*) FROM 's3://bucket/x.parquet'", UC),
        ("SELECT COUNT(*) FROM 'https://example.com/x.csv'", UC),
        ("SELECT COUNT(*) FROM 'other.duckdb'", UC),
    ],
    "ddl_dml": [
        ("CREATE TABLE x AS SELECT * FROM orders", UQ),
        ("CREATE TEMP TABLE x AS SELECT 1", UQ),
        ("CREATE VIEW v AS SELECT COUNT(*) FROM orders", UQ),
        ("CREATE MACRO m(x) AS x + 1", UQ),
        ("CREATE SECRET s (TYPE s3)", UQ),
        ("CREATE TYPE mood AS ENUM ('a')", UQ),
        ("DROP TABLE orders", UQ),
        ("ALTER TABLE orders ADD COLUMN z INTEGER", UQ),
        ("INSERT INTO orders VALUES (1, 2, 3, 4, 5, 'new')", UQ),
        ("INSERT OR REPLACE INTO orders SELECT * FROM orders", UQ),
        ("UPDATE orders SET status = 'new'", UQ),
        ("DELETE FROM orders", UQ),
        ("TRUNCATE orders", UQ),
        ("MERGE INTO orders USING customers ON true WHEN MATCHED THEN DELETE", UQ),
        ("WITH x AS (DELETE FROM orders RETURNING *) SELECT COUNT(*) FROM x", UC),
    ],
    "pragma_set_attach_copy_install_call": [
        ("PRAGMA table_info('orders')", UQ),
        ("PRAGMA database_list", UQ),
        ("SET enable_external_access = true", UQ),
        ("SET GLOBAL enable_external_access = true", UQ),
        ("SET threads = 1", UQ),
        ("SET VARIABLE x = 1", UQ),
        ("RESET lock_configuration", UQ),
        ("RESET ALL", UQ),
        ("ATTACH '/tmp/other.duckdb' AS other", UQ),
        ("ATTACH DATABASE '/tmp/other.duckdb' AS other (READ_ONLY)", UQ),
        ("DETACH other", UQ),
        ("DETACH DATABASE other", UQ),
        ("COPY orders TO '/tmp/out.csv'", UQ),
        ("COPY (SELECT COUNT(*) FROM orders) TO '/tmp/out.csv'", UQ),
        ("INSTALL httpfs", UQ),
        ("FORCE INSTALL httpfs FROM community", UQ),
        ("LOAD httpfs", UQ),
        ("LOAD '/tmp/evil.duckdb_extension'", UQ),
        ("CALL pragma_version()", UQ),
        ("CALL duckdb_secrets()", UQ),
        ("USE other", UQ),
        ("BEGIN TRANSACTION", UQ),
        ("COMMIT", UQ),
        ("ROLLBACK", UQ),
        ("CHECKPOINT", UQ),
        ("FORCE CHECKPOINT", UQ),
        ("VACUUM", UQ),
        ("PREPARE p AS SELECT 1", UQ),
        ("EXECUTE p", UQ),
        ("DEALLOCATE p", UQ),
        ("UPDATE EXTENSIONS", UQ),
        ("DESCRIBE orders", UQ),
        ("SHOW TABLES", UQ),
        ("SUMMARIZE orders", UQ),
        ("EXPLAIN SELECT COUNT(*) FROM orders", UQ),
        ("PIVOT orders ON status USING COUNT(*)", UQ),
        ("SELECT COUNT(*) FROM (DESCRIBE orders)", UC),
        ("SELECT COUNT(*) FROM (PIVOT orders ON status USING COUNT(*))", UC),
    ],
    "several_statements": [
        ("SELECT COUNT(*) FROM orders; SELECT COUNT(*) FROM customers", UQ),
        ("SELECT COUNT(*) FROM orders; DROP TABLE orders", UQ),
        ("SELECT COUNT(*) FROM orders; SET enable_external_access = true", UQ),
        ("ATTACH '/tmp/x.duckdb' AS x; SELECT COUNT(*) FROM orders", UQ),
    ],
    "system_catalogs": [
        ("SELECT COUNT(*) FROM information_schema.tables", UC),
        ("SELECT COUNT(*) FROM information_schema.columns", UC),
        ("SELECT COUNT(*) FROM \"information_schema\".\"tables\"", UC),
        ("SELECT COUNT(*) FROM pg_catalog.pg_class", UC),
        ("SELECT COUNT(*) FROM pg_catalog.pg_tables", UC),
        ("SELECT COUNT(*) FROM duckdb_tables()", UC),
        ("SELECT COUNT(*) FROM duckdb_settings()", UC),
        ("SELECT COUNT(*) FROM duckdb_functions()", UC),
        ("SELECT COUNT(*) FROM duckdb_tables", UC),
        ("SELECT COUNT(*) FROM \"DUCKDB_TABLES\"", UC),
        ("SELECT COUNT(*) FROM main.duckdb_tables", UC),
        ("SELECT COUNT(*) FROM sqlite_master", UC),
        ("SELECT COUNT(*) FROM pragma_table_info('orders')", UC),
        ("SELECT COUNT(*) FROM system.main.orders", UC),
        ("SELECT COUNT(*) FROM temp.main.orders", UC),
        ("SELECT COUNT(*) FROM temp.orders", UC),
        ("SELECT COUNT(*) FROM other.main.orders", UC),
        ("SELECT COUNT(*) FROM main.information_schema.tables", UC),
        ("SELECT COUNT(*) FROM orders WHERE EXISTS "
         "(SELECT 1 FROM duckdb_secrets() s WHERE s.name = orders.status)", UC),
        # a CTE may not shadow a system catalog name either
        ("WITH duckdb_tables AS (SELECT * FROM orders) SELECT COUNT(*) FROM duckdb_tables", UC),
    ],
    "nondeterministic_functions": [
        ("SELECT COUNT(*) FROM orders WHERE random() < 0.5", UC),
        ("SELECT COUNT(*) FROM orders WHERE order_cost > random()", UC),
        ("SELECT COUNT(*) FROM orders WHERE setseed(0.5) IS NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE now() > '2020-01-01'", UC),
        ("SELECT COUNT(*) FROM orders WHERE current_timestamp > '2020-01-01'", UC),
        ("SELECT COUNT(*) FROM orders WHERE current_date > DATE '2020-01-01'", UC),
        ("SELECT COUNT(*) FROM orders WHERE today() > DATE '2020-01-01'", UC),
        ("SELECT COUNT(*) FROM orders WHERE current_time IS NOT NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE get_current_time() IS NOT NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE localtimestamp IS NOT NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE CAST(uuid() AS VARCHAR) > 'a'", UC),
        ("SELECT COUNT(*) FROM orders WHERE gen_random_uuid() IS NOT NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE uuidv7() IS NOT NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE nextval('s') = 1", UC),
        ("SELECT COUNT(*) FROM orders WHERE txid_current() = 1", UC),
        ("SELECT COUNT(*) FROM orders WHERE quantity = epoch_ms(now())", UC),
    ],
    "undeclared_functions_and_macros": [
        ("SELECT COUNT(*) FROM orders WHERE my_macro(quantity) > 1", UC),
        ("SELECT COUNT(*) FROM orders WHERE getenv('HOME') = 'x'", UC),
        ("SELECT COUNT(*) FROM orders WHERE getvariable('x') = status", UC),
        ("SELECT COUNT(*) FROM orders WHERE current_setting('threads') = 1", UC),
        ("SELECT COUNT(*) FROM orders WHERE current_user = 'x'", UC),
        ("SELECT COUNT(*) FROM orders WHERE current_database() = 'x'", UC),
        ("SELECT COUNT(*) FROM orders WHERE version() = '1'", UC),
        ("SELECT COUNT(*) FROM orders WHERE typeof(quantity) = 'INTEGER'", UC),
        ("SELECT COUNT(*) FROM orders WHERE md5(status) = 'x'", UC),
        ("SELECT COUNT(*) FROM orders WHERE regexp_matches(status, 'n.*')", UC),
        ("SELECT COUNT(*) FROM orders WHERE list_contains([1, 2], quantity)", UC),
        ("SELECT COUNT(*) FROM orders WHERE struct_pack(a := 1) IS NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE status = 'x' COLLATE nocase", UC),
        ("SELECT COUNT(*) FROM orders WHERE status SIMILAR TO 'n.*'", UC),
        # (top-level MIN / MAX / MEDIAN of a bounded column are selections, issue #18)
        ("SELECT COUNT(*) FROM (SELECT MAX(order_cost) AS m FROM orders) t", UC),
        ("SELECT MIN(order_cost) FILTER (WHERE quantity > 1) FROM orders", UC),
        ("SELECT MEDIAN(DISTINCT order_cost) FROM orders", UC),
        ("SELECT quantile(order_cost, ?) FROM orders", UC),
        ("SELECT COUNT(*) FROM (SELECT STDDEV(order_cost) AS s FROM orders) t", UC),
        ("SELECT string_agg(status, ',') FROM orders", UC),
        ("WITH t AS (SELECT COUNT(*) FILTER (WHERE quantity > 2) AS n FROM orders) "
         "SELECT COUNT(*) FROM t", UC),
    ],
    "undeclared_tables_and_columns": [
        ("SELECT COUNT(*) FROM secrets", PE),
        ("SELECT COUNT(*) FROM pg_tables", PE),
        ("SELECT COUNT(*) FROM memory.orders", PE),
        ("SELECT COUNT(*) FROM orders WHERE secret_column = 1", PE),
        ("SELECT COUNT(secret_column) FROM orders", PE),
        ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = c.missing", PE),
        ("SELECT status, COUNT(*) FROM orders GROUP BY missing", PE),
    ],
    "syntax_and_parameters": [
        ("SELEC COUNT(*) FROM orders", PE),
        ("SELECT COUNT(*) FROM orders WHERE", PE),
        ("", PE),
        ("   ", PE),
    ],
    "raw_rows": [
        ("SELECT * FROM orders", UQ),
        ("SELECT order_id FROM orders", UQ),
        ("SELECT order_cost, COUNT(*) FROM orders GROUP BY status", UQ),
        # a key-only GROUP BY / DISTINCT over a releasable key is answered by partition
        # selection (tests/rewrite/test_partition_selection.py); over a key that is not
        # releasable it is refused
        ("SELECT customer_id FROM orders GROUP BY customer_id", PB),
        ("SELECT DISTINCT order_id FROM orders", UQ),
        ("SELECT 1", UQ),
        ("SELECT COUNT(*)", UQ),
        # one literal is written as itself (dpsql.analysis.constant_subqueries); more is not
        ("SELECT COUNT(*) FROM orders WHERE quantity IN (SELECT 1 + 1)", UQ),
    ],
    "window_functions": [
        ("SELECT COUNT(*) OVER () FROM orders", UC),
        ("SELECT status, COUNT(*), ROW_NUMBER() OVER (ORDER BY status) FROM orders "
         "GROUP BY status", UC),
        ("SELECT COUNT(*) FROM (SELECT order_id, RANK() OVER (PARTITION BY customer_id "
         "ORDER BY order_cost) AS r FROM orders) t WHERE t.r = 1", UC),
        ("SELECT COUNT(*) FROM orders QUALIFY ROW_NUMBER() OVER () = 1", UC),
    ],
    "joins_without_a_rule": [
        ("SELECT COUNT(*) FROM orders CROSS JOIN customers", UC),
        ("SELECT COUNT(*) FROM orders, customers", UC),
        ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id < c.customer_id", UC),
        ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = 1", UC),
        ("SELECT COUNT(*) FROM orders o, customers c "
         "WHERE o.customer_id = c.customer_id OR o.order_id = 1", UC),
        ("SELECT COUNT(*) FROM orders o LEFT JOIN customers c ON o.customer_id > c.customer_id",
         UC),
        ("SELECT COUNT(*) FROM orders o RIGHT JOIN customers c ON o.order_id = 1", UC),
        ("SELECT COUNT(*) FROM orders o, products p LEFT JOIN customers c "
         "ON c.customer_id = o.customer_id AND c.age > p.price WHERE p.product_id = c.age", UC),
        ("SELECT COUNT(*) FROM orders o FULL OUTER JOIN customers c "
         "ON o.customer_id = c.customer_id OR o.order_id = c.customer_id", UC),
        ("SELECT COUNT(*) FROM orders o ASOF JOIN customers c ON o.customer_id >= c.customer_id",
         UC),
        ("SELECT COUNT(*) FROM orders o POSITIONAL JOIN customers c", UC),
        ("SELECT COUNT(*) FROM orders, LATERAL (SELECT 1) t", UC),
        ("SELECT COUNT(*) FROM customers c WHERE EXISTS "
         "(SELECT 1 FROM orders o WHERE o.order_cost > 1)", UC),
        ("SELECT COUNT(*) FROM orders o, customers c WHERE o.customer_id = c.customer_id AND "
         "c.customer_id IN (SELECT r.customer_id FROM recommendations r "
         "WHERE r.customer_id = o.customer_id)", UC),
        ("SELECT COUNT(*) FROM customers c WHERE c.customer_id = 1 OR "
         "c.customer_id IN (SELECT o.customer_id FROM orders o)", UC),
        ("SELECT COUNT(*) FROM orders WHERE status = ANY (SELECT status FROM orders)", UC),
        ("SELECT COUNT(*) FROM orders WHERE quantity > ALL (SELECT quantity FROM orders)", UC),
        ("SELECT COUNT(*) FROM orders WHERE order_id IN "
         "(SELECT order_id, customer_id FROM orders)", UC),
        # (uncorrelated, it is a scalar block released first: tests/test_blocks.py)
        ("SELECT (SELECT COUNT(*) FROM customers c WHERE c.customer_id = o.customer_id), "
         "COUNT(*) FROM orders o", UC),
    ],
    "other_constructs": [
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10) "
         "SELECT COUNT(*) FROM r", UC),
        ("SELECT COUNT(*) FROM (VALUES (1), (2)) t(x)", UC),
        ("SELECT COUNT(*) FROM orders TABLESAMPLE 10%", UC),
        ("SELECT COUNT(*) FROM orders USING SAMPLE 10", UC),
        ("SELECT status, COUNT(*) FROM orders GROUP BY ROLLUP (status)", UC),
        ("SELECT status, COUNT(*) FROM orders GROUP BY CUBE (status)", UC),
        ("SELECT COUNT(*) FROM (SELECT * FROM orders LIMIT 10) t", UC),
        ("SELECT COUNT(*) FROM orders INTERSECT SELECT COUNT(*) FROM customers", UC),
        ("SELECT COUNT(*) FROM orders UNION ALL SELECT COUNT(*) FROM customers", UC),
        ("SELECT COUNT(*) FROM (SELECT customer_id FROM orders "
         "EXCEPT SELECT customer_id FROM customers) t", UC),
    ],
    "missing_metrics": [
        ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.order_cost = c.age", MM),
        # key types differ (VARCHAR vs INTEGER): '01' and '1' would both match 1
        ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.status = c.customer_id", MM),
        ("SELECT COUNT(*) FROM customers c WHERE c.customer_id IN (SELECT status FROM orders)",
         MM),
        ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id + 1 = c.customer_id",
         MM),
        ("SELECT SUM(order_id) FROM orders", MM),
        ("SELECT AVG(customer_id) FROM orders", MM),
        ("SELECT SUM(order_cost * customer_id) FROM orders", MM),
    ],
    "protected_bins": [
        ("SELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id", PB),
        ("SELECT c.age, COUNT(*) FROM customers c GROUP BY c.age", PB),
        ("SELECT customer_id + 1, COUNT(*) FROM orders GROUP BY customer_id + 1", PB),
        ("SELECT t.k, COUNT(*) FROM (SELECT customer_id, SUM(order_cost) AS k FROM orders "
         "GROUP BY customer_id) t GROUP BY t.k", PB),  # (a per-group COUNT is selected)
    ],
    # The Spark backend: file sources in FROM, Spark commands, UDFs and JVM-reaching functions.
    # Backtick-quoted paths are not DuckDB syntax, so they fail to parse (ProgrammingError).
    "spark_file_sources_commands_and_udfs": [
        ("SELECT COUNT(*) FROM parquet.`/tmp/x.parquet`", PE),
        ("SELECT COUNT(*) FROM csv.`/etc/passwd`", PE),
        ("SELECT COUNT(*) FROM orders o JOIN json.`/tmp/x.json` j ON o.order_id = j.id", PE),
        ("SELECT COUNT(*) FROM orders WHERE quantity IN (SELECT id FROM parquet.`/tmp/x`)", PE),
        ("SELECT COUNT(*) FROM parquet.\"/tmp/x.parquet\"", UC),
        ("SELECT COUNT(*) FROM csv.\"/etc/passwd\"", UC),
        ("SELECT COUNT(*) FROM orders WHERE quantity IN (SELECT id FROM orc.\"/tmp/x\")", UC),
        ("WITH x AS (SELECT * FROM delta.\"/tmp/t\") SELECT COUNT(*) FROM x", UC),
        ("SELECT COUNT(*) FROM binaryFile.orders", UC),
        ("SELECT COUNT(*) FROM spark_catalog.default.orders", UC),
        ("SELECT COUNT(*) FROM global_temp.orders", PE),
        ("SET spark.sql.ansi.enabled=true", UQ),
        ("SET spark.sql.runSQLOnFiles = true", UQ),
        ("RESET spark.sql.variable.substitute", UQ),
        ("ADD JAR /tmp/evil.jar", UQ),
        ("ADD FILE /tmp/x.py", UQ),
        ("ADD ARCHIVE /tmp/x.zip", UQ),
        ("LIST JARS", UQ),
        ("CREATE FUNCTION f AS 'com.evil.F' USING JAR '/tmp/evil.jar'", UQ),
        ("CREATE TEMPORARY FUNCTION f AS 'com.evil.F'", UQ),
        ("CREATE TEMPORARY VIEW v USING parquet OPTIONS (path '/tmp/x')", UQ),
        ("DROP TEMPORARY FUNCTION f", UQ),
        ("CACHE TABLE orders", UQ),
        ("CACHE LAZY TABLE c AS SELECT * FROM orders", UQ),
        ("UNCACHE TABLE orders", UQ),
        ("CLEAR CACHE", UQ),
        ("REFRESH TABLE orders", UQ),
        ("REFRESH '/tmp/x'", UQ),
        ("REFRESH FUNCTION f", UQ),
        ("MSCK REPAIR TABLE orders", UQ),
        ("INSERT OVERWRITE DIRECTORY '/tmp/out' SELECT * FROM orders", UQ),
        ("LOAD DATA LOCAL INPATH '/tmp/x' INTO TABLE orders", UQ),
        ("SELECT COUNT(*) FROM orders WHERE reflect('java.lang.System', 'exit', '0') IS NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE java_method('java.lang.Runtime', 'gc') IS NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE input_file_name() = 'x'", UC),
        ("SELECT COUNT(*) FROM orders WHERE spark_partition_id() = 0", UC),
        ("SELECT COUNT(*) FROM orders WHERE monotonically_increasing_id() > 5", UC),
        ("SELECT COUNT(*) FROM orders WHERE rand(1) < 0.5", UC),
        ("SELECT COUNT(*) FROM orders WHERE randn() < 0.5", UC),
        ("SELECT COUNT(*) FROM orders WHERE assert_true(quantity > 0) IS NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE raise_error('x') IS NULL", UC),
        ("SELECT COUNT(*) FROM orders WHERE try_divide(quantity, 0) IS NULL", UC),
        ("SELECT COUNT(*) FROM IDENTIFIER('orders')", UC),
        ("SELECT COUNT(*) FROM read_files('/tmp/x')", UC),
        ("SELECT COUNT(*) FROM orders LATERAL VIEW explode(array(1, 2)) t AS x", UC),
        ("SELECT COUNT(*) FROM orders WHERE quantity = ${x}", PE),
    ],
    "aggregate_arithmetic": [
        # uncorrelated scalar aggregates are released first (two phases, tests/test_blocks.py);
        # correlated ones have no single release to stand for them
        ("SELECT COUNT(*) FROM orders o WHERE o.order_cost > "
         "(SELECT AVG(p.order_cost) FROM orders p WHERE p.customer_id = o.customer_id)", UC),
        ("SELECT COUNT(*) FROM orders o WHERE quantity = "
         "(SELECT COUNT(*) FROM customers c WHERE c.customer_id = o.customer_id)", UC),
        ("SELECT SUM(COUNT(*)) FROM orders", AA),
        ("SELECT COUNT(*) FROM customers c WHERE EXISTS "
         "(SELECT COUNT(*) FROM orders o WHERE o.customer_id = c.customer_id)", AA),
    ],
}

CASES = [pytest.param(sql, cls, id=f"{category}-{i}")
         for category, cases in CORPUS.items() for i, (sql, cls) in enumerate(cases)]


def _assert_rejected(engine, backend, sql, params, expected):
    before = charged(engine)
    with pytest.raises(Error) as err:
        engine.run(sql, params, epsilon=1.0, delta=1e-6)
    assert type(err.value) is expected, f"{type(err.value).__name__}: {err.value}"
    assert len(err.value.message) > 20, err.value.message
    assert backend.executed == []
    assert charged(engine) == before  # the real ledger file: nothing charged
    return err.value


@pytest.mark.parametrize(("sql", "expected"), CASES)
def test_rejected_before_charge_and_execution(engine, sql, expected):
    _assert_rejected(*engine, sql, [], expected)


def test_every_category_is_covered():
    assert all(len(cases) >= 4 for cases in CORPUS.values())
    assert len(CASES) >= 150


@pytest.mark.parametrize(("sql", "params"), [
    ("SELECT COUNT(*) FROM orders WHERE quantity = ?", []),
    ("SELECT COUNT(*) FROM orders WHERE quantity = ?", [1, 2]),
    ("SELECT COUNT(*) FROM orders", [1]),
    ("SELECT status, COUNT(*) FROM orders GROUP BY status HAVING COUNT(*) > ?", []),
])
def test_wrong_parameter_count(engine, sql, params):
    _assert_rejected(*engine, sql, params, ProgrammingError)


def test_a_rejected_query_leaves_the_engine_usable(engine):
    eng, backend = engine
    _assert_rejected(eng, backend, "DROP TABLE orders", [], UnsupportedQueryError)
    result = eng.run("SELECT COUNT(*) AS n FROM orders", epsilon=1.0)
    assert len(backend.executed) == 1 and len(result.rows) == 1


# --------------------------------------------------------------------------- known bugs


@pytest.mark.parametrize("sql", ["EXPORT DATABASE '/tmp/export'", "IMPORT DATABASE '/tmp/exp'"])
def test_export_import_are_unsupported_queries(engine, sql):
    _assert_rejected(*engine, sql, [], UnsupportedQueryError)


@pytest.mark.parametrize("sql", ["CHECKPOINT", "DEALLOCATE p"])
def test_rejection_names_the_statement(engine, sql):
    err = _assert_rejected(*engine, sql, [], UnsupportedQueryError)
    assert sql.split()[0] in err.message


@pytest.mark.parametrize("sql", ["SELECT COUNT(*) FROM orders WHERE quantity = $1",
                                 "SELECT COUNT(*) FROM orders WHERE quantity = :q"])
def test_non_qmark_parameter_markers_are_rejected(engine, sql):
    eng, backend = engine
    before = charged(eng)
    with contextlib.suppress(Error):
        eng.run(sql, [], epsilon=1.0)
    assert backend.executed == [] and charged(eng) == before


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) AS n FROM products",
    "SELECT category, COUNT(*) AS n FROM products GROUP BY category",
])
def test_public_only_query_is_answered_exactly_and_free(engine, sql):
    eng, _ = engine
    before = charged(eng)
    result = eng.run(sql)  # no epsilon needed: public tables only
    assert result.rows and result.release.free and result.release.epsilon == 0
    assert charged(eng) == before
