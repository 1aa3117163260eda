"""The Spark backend (dpsql/backends/spark.py): faithful translation, isolation, lock-down.

The backend-independent suites (rewrite equivalence, rejection corpus, totality, the engine's
privacy loss) already run on Spark through ``make_backend``. Here: the exact query of every
fixture query translates to Spark SQL, and that of a fixed subset executing every translation
rule (SPARK_EXECUTES) gives IDENTICAL rows and type names on DuckDB and on Spark; the
translation of TRY and the session settings are what totality rests on (and default Spark
would fail); catalog tables, CSV sources and errors; the owner's session is left untouched.
"""

from __future__ import annotations

from decimal import Decimal

import duckdb
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import NotSupportedError, OperationalError, ProgrammingError
from dpsql.metadata import loads_metadata
from dpsql.rewrite.plan import ExecutionPlan
from dpsql.session import Session
from tests.db_files import writing
from tests.recording import export_parquet, with_sources
from tests.rewrite.test_rewrite_equivalence import (
    BROKEN,
    NOT_IN_OVER_NULL,
    NULL_EXTENDED_GROUP,
    QUERIES,
)
from tests.shared_data import needs_pums

# --------------------------------------------------------------------------- translation
# (sqlglot only: these run without pyspark)


SCHEMA = {"t": {"a": "INTEGER", "b": "BIGINT", "c": "DOUBLE", "d": "DECIMAL(15,2)",
                "s": "VARCHAR"}}


def test_try_becomes_null_on_error_operators():
    from dpsql.backends.spark_sql import to_spark_sql

    sql = to_spark_sql("SELECT COUNT(*) FROM t WHERE TRY(t.a + t.b * 2 - t.c / t.d > 3) "
                       "AND TRY(CAST(t.s AS INTEGER) = 1) AND TRY(t.a // t.b = 1)", SCHEMA)
    assert "TRY(" not in sql.upper()
    for function in ("TRY_ADD(", "TRY_MULTIPLY(", "TRY_SUBTRACT(", "TRY_DIVIDE(", "TRY_CAST("):
        assert function in sql.upper(), sql
    # integer division and modulo are NULL on a zero divisor with ANSI mode off
    assert " DIV " in sql


def test_negation_inside_try_is_null_on_overflow():
    from dpsql.backends.spark_sql import to_spark_sql

    # -x of the least INT wraps around in Spark without ANSI mode; DuckDB's TRY gives NULL
    sql = to_spark_sql("SELECT COUNT(*) FROM t WHERE TRY(-t.a > -1 * t.b)", SCHEMA)
    assert "TRY_SUBTRACT(0, T.A)" in sql.upper(), sql
    assert "-1" in sql  # a negated literal is a constant


def test_arithmetic_outside_try_is_left_alone():
    from dpsql.backends.spark_sql import to_spark_sql

    sql = to_spark_sql("SELECT SUM(CAST(t.a AS DOUBLE)) + 1 AS s FROM t", SCHEMA)
    assert "TRY" not in sql.upper() and "SUM(CAST(t.a AS DOUBLE)) + 1" in sql


def test_integer_and_decimal_sums_are_exact():
    from dpsql.backends.spark_sql import to_spark_sql

    sql = to_spark_sql(
        "SELECT SUM(CASE WHEN t.b < 0 THEN 0 ELSE t.b END) AS x, SUM(t.a) AS y, "
        "SUM(CASE WHEN t.d > 2.5 THEN 2.5 ELSE t.d END) AS z, SUM(t.c) AS w FROM t", SCHEMA)
    assert "SUM(CAST(CASE WHEN t.b < 0 THEN 0 ELSE t.b END AS DECIMAL(38, 0)))" in sql
    assert "SUM(CAST(t.a AS DECIMAL(38, 0)))" in sql
    assert "AS DECIMAL(38, 2)))" in sql and "SUM(t.c)" in sql


def test_date_functions_that_spark_cannot_trap_fail_closed():
    from dpsql.backends.spark_sql import to_spark_sql

    schema = {"t": {"d": "DATE", "ts": "TIMESTAMP"}}
    # add_months / timestampadd raise on overflow even without ANSI mode: refused, whatever
    # the data (the refusal depends on the query text only)
    with pytest.raises(NotSupportedError, match="cannot be made error-free on Spark"):
        to_spark_sql("SELECT COUNT(*) FROM t WHERE TRY(date_add(t.d, INTERVAL 1 MONTH) > "
                     "DATE '2020-01-01')", schema)
    # column + INTERVAL becomes try_add, which returns NULL on any error
    sql = to_spark_sql("SELECT COUNT(*) FROM t WHERE TRY(t.ts + INTERVAL 1 HOUR > "
                       "TIMESTAMP '2020-01-01 00:00:00')", schema)
    assert "TRY_ADD(t.ts, INTERVAL '1' HOUR)" in sql


def test_a_sum_of_unknown_type_fails_closed():
    from dpsql.backends.spark_sql import to_spark_sql

    with pytest.raises(NotSupportedError, match="SUM argument"):
        to_spark_sql("SELECT SUM(t.zz) FROM t", SCHEMA)
    with pytest.raises(NotSupportedError, match="SUM over"):
        to_spark_sql("SELECT SUM(t.s) FROM t", SCHEMA)


def test_a_result_ordered_by_its_outputs_is_sorted_on_one_partition():
    """A global sort would range-partition, whose key sample is a driver result that grows
    with the rows (dpsql.backends.spark_sql._sorted_on_one_partition)."""
    from dpsql.backends.spark_sql import to_spark_sql

    sql = to_spark_sql("WITH e AS (SELECT t.a AS x FROM t) SELECT e.x AS __k0, COUNT(*) AS __n "
                       "FROM e GROUP BY e.x ORDER BY __k0 NULLS LAST", SCHEMA)
    assert sql.startswith("WITH e AS (") and "SELECT /*+ REPARTITION(1) */ * FROM (SELECT" in sql
    assert sql.endswith(") AS __sorted ORDER BY __k0 NULLS LAST"), sql
    # ordered by anything but its own outputs: left as it is
    for other in ("SELECT t.a FROM t ORDER BY t.b", "SELECT t.a FROM t ORDER BY t.a + 1",
                  "SELECT t.a AS x FROM t ORDER BY x LIMIT 3"):
        assert "REPARTITION" not in to_spark_sql(other, SCHEMA)


def test_named_parameters_comments_and_hints():
    from dpsql.backends.spark_sql import to_spark_sql

    sql = to_spark_sql("/*+ REPARTITION(100000) */ SELECT /*+ BROADCAST(t) */ COUNT(*) "
                       "FROM t WHERE TRY(t.a > $__dpsql_param_0) -- note", SCHEMA)
    assert ":__dpsql_param_0" in sql and "$" not in sql
    assert "/*" not in sql and "--" not in sql and "REPARTITION" not in sql


def test_string_literals_keep_their_value():
    from dpsql.backends.spark_sql import to_spark_sql

    # Spark reads backslash escapes in literals; DuckDB does not
    assert to_spark_sql("SELECT 'a\\b''c' AS x", SCHEMA) == "SELECT 'a\\\\b\\'c' AS x"


# --------------------------------------------------------------------------- on Spark


@pytest.fixture(scope="module")
def sources(shop, tmp_path_factory):
    return export_parquet(shop.path, tmp_path_factory.mktemp("shop_parquet"))


@pytest.fixture(scope="module")
def backends(shop, sources, spark):
    from dpsql.backends.spark import SparkBackend

    metadata = shop.metadata()
    duck = DuckDBBackend(shop.path, metadata)
    sparkb = SparkBackend(with_sources(metadata, sources), spark)
    yield duck, sparkb, Session(metadata, duck)
    duck.close()
    sparkb.close()


def _once(execute):
    """``execute`` that runs each distinct (SQL, parameters) once and replays its answer."""
    answers: dict[tuple[str, str], tuple[list, list]] = {}

    def run(compiled, params=None):
        key = (compiled, repr(sorted(params.items()) if params else None))
        if key not in answers:
            answers[key] = execute(compiled, params)
        rows, types = answers[key]
        return list(rows), list(types)
    return run


#: corpus cases whose exact (and domain) SQL is character for character another case's: they
#: differ in post-processing only, which runs in dpsql's own DuckDB whatever the backend
SAME_EXACT_SQL = {"order_by_aggregate_limit": "group_by_public_table_domain",
                  "distinct_over_post_processed": "order_by_alias"}
EXACT_CASES = [pytest.param(sql, params, id=name) for name, sql, params, _ in QUERIES
               if name not in SAME_EXACT_SQL] + [
    pytest.param(p.values[0], (), id=p.id) for p in BROKEN] + [
    pytest.param(NOT_IN_OVER_NULL, (), id="not_in_over_null"),
    pytest.param(NULL_EXTENDED_GROUP, (), id="null_extended_group_key")]

#: The corpus cases Spark EXECUTES, compared row for row and type for type with DuckDB (each
#: costs ~0.5 CPU-s of JVM time). Every case of EXACT_CASES is translated for Spark (below:
#: the backend's compile, no Spark job); these run too, chosen so that together they execute
#: every translation rule the corpus's Spark SQL uses (tests/spark_rules.py; checked by
#: test_the_executed_cases_use_every_translation_rule), keep the whole suite's line and branch
#: coverage of dpsql/backends/spark*.py, and keep the cases added for Spark. Case -> why.
SPARK_EXECUTES = {
    "where_with_scalar_functions": "DIV and % by a divisor column, try_divide, try_subtract, "
                                   "UPPER / ABS / FLOOR in a filter",
    "sum_avg_of_arithmetic": "try_add, try_subtract, try_multiply, try_divide and TRY_CAST in "
                             "SUM and AVG arguments; floating-point sums",
    "full_join_sum": "an exact integer SUM (DECIMAL(38, 0) on Spark, HUGEINT on DuckDB); "
                     "FULL OUTER JOIN with a condition in ON",
    "parameters_inside_aggregates": "named parameters of three types in a CTE, FILTER, CASE and "
                                    "HAVING; a value-list domain",
    "group_by_public_table_domain": "a public table's domain scanned by the domain query",
    "group_by_two_keys": "the domain query of two keys",
    "count_distinct_grouped": "COUNT(DISTINCT ...) per group",
    "exists_subquery": "a correlated EXISTS",
    "right_join_unmatched": "RIGHT JOIN's null-extended rows in COUNT(*) and COUNT(x)",
    "null_extended_group_key": "added for Spark (cda2c3b): the NULL group of a LEFT JOIN's "
                               "null-extended key",
    "not_in_over_null": "added for Spark: NOT IN over a NULL with NOT EXISTS semantics",
}


def _sent(backends, sql: str, params) -> tuple[ExecutionPlan, list[tuple[str, dict]]]:
    """``sql``'s plan as an Engine over Spark builds it (without DuckDB's promises about its
    stored data: every clamp, and public domains scanned rather than bound as lists), and the
    queries it sends: the exact query and, when there is one, the domain query, each with its
    bindings."""
    from dpsql.rewrite.plan import plan_execution

    engine = backends[2]
    plan = plan_execution(engine.prepare(sql).analysis, engine.metadata)
    queries = [(plan.exact_sql, plan.exact_bindings(list(params)))]
    if plan.domain_sql is not None:  # the domain rows' own query (keys first, after tag, index)
        queries.append((plan.domain_sql, plan.domain_bindings(list(params))))
    return plan, queries


@pytest.mark.spark
@pytest.mark.parametrize(("sql", "params"), EXACT_CASES)
def test_every_case_translates_to_spark(backends, sql, params):
    """The compile step (dpsql/backends/spark_sql.py) on every case: no NotSupportedError, no
    TRY(...) left for Spark (whose SQL has none), parameters in Spark's :name form."""
    sparkb = backends[1]
    for sql_, bound in _sent(backends, sql, params)[1]:
        compiled = sparkb.compile(sql_)
        assert "TRY(" not in compiled.upper() and "$" not in compiled, compiled
        assert all(f":{name}" in compiled for name in bound), (compiled, bound)


@pytest.mark.spark
def test_the_executed_cases_use_every_translation_rule(backends):
    """SPARK_EXECUTES names real cases, and every translation rule that any case's Spark SQL
    uses is executed on Spark by one of them."""
    from tests.spark_rules import rules_used

    ids = {p.id for p in EXACT_CASES}
    assert set(SPARK_EXECUTES) <= ids, set(SPARK_EXECUTES) - ids
    sparkb = backends[1]
    used = {p.id: rules_used(sparkb.compile(q) for q, _ in _sent(backends, *p.values)[1])
            for p in EXACT_CASES}
    executed = set().union(*(used[case] for case in SPARK_EXECUTES))
    assert set().union(*used.values()) <= executed, {
        case: rules - executed for case, rules in used.items() if rules - executed}


@pytest.mark.spark
@pytest.mark.parametrize(("sql", "params"),
                         [p for p in EXACT_CASES if p.id in SPARK_EXECUTES])
def test_exact_rows_and_types_are_identical_to_duckdb(backends, sql, params, monkeypatch):
    from dpsql.execute.exact import read_exact

    duck, sparkb, _ = backends
    # Each Spark job runs once: read_exact below asks again for the rows compared here, and
    # gets Spark's own answer replayed (through the backend's real execute_columns).
    monkeypatch.setattr(sparkb, "execute", _once(sparkb.execute))
    plan, queries = _sent(backends, sql, params)
    for sql_, bound in queries:
        want_rows, want_types = duck.execute(sql_, bound)
        got_rows, got_types = sparkb.execute(sparkb.compile(sql_), bound)
        # exactly, up to order: no ORDER BY (the engine places each row by tag and index)
        got_rows, want_rows = sorted(got_rows, key=repr), sorted(want_rows, key=repr)
        assert got_rows == want_rows
        # The same types and Python types (keys included), but an integer SUM is
        # DECIMAL(38, 0) on Spark and HUGEINT on DuckDB: the engine reads both as numbers.
        assert all(type(g) is type(w) or {type(g), type(w)} <= {int, Decimal}
                   for gr, wr in zip(got_rows, want_rows, strict=True)
                   for g, w in zip(gr, wr, strict=True))
        for got, want in zip(got_types, want_types, strict=True):
            assert got == want or (got, want) == ("DECIMAL(38,0)", "HUGEINT"), (got, want)
    # and the engine reads the same bins from both
    bins = [read_exact(b, plan, list(params)) for b in (duck, sparkb)]
    assert [k.tolist() for k in bins[0].keys] == [k.tolist() for k in bins[1].keys]
    assert [m.tolist() for m in bins[0].exact] == [m.tolist() for m in bins[1].exact]


@pytest.mark.spark
def test_translation_is_memoised(backends):
    _, sparkb, _ = backends
    sql = "SELECT COUNT(*) AS n FROM orders AS o WHERE TRY(o.quantity + 1 > 2)"
    assert sparkb.compile(sql) is sparkb.compile(sql)


@pytest.mark.spark
def test_default_spark_would_fail_where_the_backend_session_does_not(backends, spark):
    _, sparkb, _ = backends
    # b = 0 in one row: ANSI Spark (the default in Spark 4) raises on it, like plain DuckDB
    sql = "SELECT COUNT(*) AS n FROM orders AS o WHERE TRY(o.quantity // (o.quantity - 3) > 0)"
    assert sparkb.execute(sparkb.compile(sql))[0][0][0] > 0
    plain = spark.newSession()
    assert plain.conf.get("spark.sql.ansi.enabled") == "true"
    plain.read.parquet(sparkb.sources["orders"]).createOrReplaceTempView("orders")
    with pytest.raises(Exception, match="DIVIDE_BY_ZERO"):
        plain.sql(sparkb.compile(sql)).collect()


@pytest.mark.spark
def test_the_owners_session_is_not_changed(backends, spark):
    _, sparkb, _ = backends
    assert sparkb.session is not spark
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    assert not any(r["tableName"] == "orders" for r in spark.sql("SHOW TABLES").collect())
    assert sparkb.session.conf.get("spark.sql.runSQLOnFiles") == "false"


@pytest.mark.spark
def test_file_sources_are_off_even_for_the_backend_session(backends, sources):
    _, sparkb, _ = backends
    # dpsql never generates this (the analysis rejects it); the session refuses it anyway
    with pytest.raises(OperationalError):
        sparkb.execute(f"SELECT COUNT(*) FROM parquet.`{sources['orders']}`")


@pytest.mark.spark
def test_variables_are_not_substituted_into_literals(backends):
    _, sparkb, _ = backends
    sparkb.session.conf.set("spark.dpsql.probe", "new")
    sql = "SELECT COUNT(*) AS n FROM orders AS o WHERE o.status = '${spark.dpsql.probe}'"
    assert sparkb.execute(sparkb.compile(sql))[0] == [(0,)]
    assert sparkb.execute("SELECT COUNT(*) AS n FROM orders AS o WHERE o.status = 'new'")[0][0][0]


@pytest.mark.spark
def test_errors_name_only_the_class(backends):
    _, sparkb, _ = backends
    with pytest.raises(OperationalError) as err:
        sparkb.execute("SELECT COUNT(*) FROM orders WHERE no_such_column = 'SECRET-7731'")
    assert "SECRET" not in str(err.value) and "no_such_column" not in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__


@pytest.mark.spark
def test_table_schema_matches_duckdb(backends, shop):
    _, sparkb, _ = backends
    con = duckdb.connect(str(shop.path), read_only=True)
    for table in shop.metadata().tables:
        described = {r[0]: r[1] for r in con.execute(f"DESCRIBE {table}").fetchall()}
        assert sparkb.table_schema(table) == described
    con.close()
    with pytest.raises(ProgrammingError):
        sparkb.table_schema("secrets")


@pytest.mark.spark
def test_every_sum_keeps_its_clamp_on_spark(backends, shop):
    duck, sparkb, duck_engine = backends
    sql = "SELECT SUM(order_cost) AS s FROM orders"
    # DuckDB promises the stored range of its read-only file; Spark tables may change
    assert duck.value_range("orders", "order_cost") is not None
    assert sparkb.value_range("orders", "order_cost") is None
    assert "CASE" not in duck_engine.prepare(sql).plan.exact_sql
    assert "CASE" in Session(shop.metadata(), sparkb).prepare(sql).plan.exact_sql


@pytest.mark.spark
def test_catalog_tables(shop, sources, spark):
    from dpsql.backends.spark import SparkBackend

    spark.sql("CREATE DATABASE IF NOT EXISTS dpsql_shop")
    for name, path in sources.items():
        spark.read.parquet(path).write.mode("overwrite").saveAsTable(f"dpsql_shop.{name}")
    metadata = shop.metadata()
    backend = SparkBackend(metadata, spark, database="dpsql_shop")
    try:
        assert sorted(backend.catalog_tables()) == sorted(sources)
        result = Session(metadata, backend).run(
            "SELECT COUNT(*) AS n FROM orders o JOIN customers c "
            "ON o.customer_id = c.customer_id", epsilon=1e6, delta=1e-6)
        con = duckdb.connect(str(shop.path), read_only=True)
        (want,) = con.execute("SELECT COUNT(*) FROM orders o JOIN customers c "
                              "ON o.customer_id = c.customer_id").fetchone()
        con.close()
        assert abs(result.rows[0][0] - want) <= 5  # epsilon 1e6: noise is ~0
    finally:
        backend.close()
    # Like DuckDB: a table the database lacks fails when a query reads it, not before.
    absent = SparkBackend(metadata, spark, database="no_such_database")
    assert sorted(absent.missing) == sorted(sources) and absent.tables == []
    with pytest.raises(OperationalError):
        absent.execute("SELECT COUNT(*) AS n FROM orders AS o")
    with pytest.raises(OperationalError, match="not in the Spark catalog"):
        absent.register("orders")


@pytest.mark.spark
def test_csv_source(tmp_path, spark):
    from dpsql.backends.spark import SparkBackend

    path = tmp_path / "people.csv"
    path.write_text("id,age\n1,30\n2,40\n3,50\n")
    metadata = loads_metadata(f"""
tables:
  people:
    source: {path}
    columns:
      id: {{max_freq: 1}}
      age: {{bounds: [0, 100]}}
""")
    backend = SparkBackend(metadata, spark)
    try:
        assert backend.table_schema("people") == {"id": "INTEGER", "age": "INTEGER"}
        rows, _ = backend.execute("SELECT COUNT(*) AS n, SUM(p.age) AS s FROM people AS p")
        assert rows == [(3, 120)]
    finally:
        backend.close()


@pytest.mark.spark
def test_missing_source_is_an_operational_error(tmp_path, spark):
    from dpsql.backends.spark import SparkBackend

    metadata = loads_metadata(f"""
tables:
  people:
    source: {tmp_path / "missing.parquet"}
    columns:
      id: {{max_freq: 1}}
""")
    with pytest.raises(OperationalError, match="cannot register table 'people'"):
        SparkBackend(metadata, spark)


@pytest.mark.spark
def test_integer_sums_beyond_64_bits_are_exact(tmp_path, spark):
    from dpsql.backends.spark import SparkBackend

    # 20 values of 9e17: the sum, 1.8e19, is beyond BIGINT (9.2e18). DuckDB sums integers in
    # 128 bits; Spark's BIGINT sum would wrap around (ANSI off) to a negative number.
    path = tmp_path / "big.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE big AS SELECT 900000000000000000::BIGINT AS v FROM range(20)")
    metadata = loads_metadata("""
tables:
  big:
    columns:
      v: {bounds: [0, 900000000000000000], type: BIGINT}
""")
    duck = DuckDBBackend(path, metadata)
    sparkb = SparkBackend(with_sources(metadata, export_parquet(path, tmp_path / "pq")), spark)
    try:
        prepared = Session(metadata, sparkb).prepare("SELECT SUM(v) AS s FROM big")
        want, _ = duck.execute(prepared.plan.exact_sql)
        got, _ = sparkb.execute(prepared.compiled.exact)
        assert want == [(18 * 10**18,)] and got == want
    finally:
        duck.close()
        sparkb.close()


@needs_pums
@pytest.mark.spark
def test_csv_columns_get_their_declared_types(spark):
    from pathlib import Path

    from dpsql.backends.spark import SparkBackend
    from dpsql.metadata import load_metadata

    # PUMS is CSV: Spark would infer INT where DuckDB (and so the metadata) says BIGINT
    metadata = load_metadata(Path(__file__).resolve().parents[2] / "schemas" / "pums.yaml")
    duck, sparkb = DuckDBBackend(None, metadata), SparkBackend(metadata, spark)
    try:
        declared = {c.name: c.type for c in metadata.table("pums").columns.values()}
        assert sparkb.table_schema("pums") == declared
        plan = Session(metadata, duck).prepare(
            "SELECT sex, COUNT(*) AS n, SUM(income) AS s, AVG(age) AS a FROM pums "
            "WHERE educ > 8 GROUP BY sex").plan
        assert (sorted(sparkb.execute(plan.exact_sql)[0], key=repr)
                == sorted(duck.execute(plan.exact_sql)[0], key=repr))
    finally:
        duck.close()
        sparkb.close()


@pytest.mark.spark
def test_collated_string_keys_are_refused(spark):
    """Issue #12 class 8 on Spark: a STRING COLLATE UTF8_LCASE column compares 'k1' = 'K1',
    so it must reach the analysis as collated (duckdb_type_name) and be refused as a key."""
    from pyspark.sql.types import StringType

    from dpsql.backends.spark import SparkBackend, duckdb_type_name

    assert duckdb_type_name(StringType()) == "VARCHAR"
    assert duckdb_type_name(StringType("UTF8_LCASE")) == "VARCHAR COLLATE UTF8_LCASE"
    spark.sql("CREATE DATABASE IF NOT EXISTS dpsql_collated")
    spark.sql("DROP TABLE IF EXISTS dpsql_collated.a")
    spark.sql("DROP TABLE IF EXISTS dpsql_collated.b")
    spark.sql("CREATE TABLE dpsql_collated.a (k STRING COLLATE UTF8_LCASE) "
              "USING parquet")
    spark.sql("INSERT INTO dpsql_collated.a VALUES ('k1')")
    spark.sql("CREATE TABLE dpsql_collated.b (k STRING) USING parquet")
    spark.sql("INSERT INTO dpsql_collated.b VALUES ('k1'), ('K1')")
    metadata = loads_metadata("tables:\n  a:\n    columns:\n      k: {max_freq: 1}\n"
                              "  b:\n    columns:\n      k: {max_freq: 1}\n")
    backend = SparkBackend(metadata, spark, database="dpsql_collated")
    try:
        with pytest.raises(NotSupportedError, match="collation UTF8_LCASE"):
            Session(metadata, backend).run("SELECT COUNT(*) FROM a JOIN b ON a.k = b.k",
                                          epsilon=1.0, delta=1e-6)
    finally:
        backend.close()


@pytest.mark.spark
def test_the_spark_translation_happens_while_preparing(spark, tmp_path):
    # Translation refusals (NotSupportedError from dpsql.backends.spark_sql) therefore come
    # before the charge. The analysis already keeps out what Spark would refuse (a date
    # function sqlglot reads as date + INTERVAL becomes try_add), so this checks the order.
    from tests.ledgers import charged, ledger_session, open_ledger
    from tests.recording import spark_backend_class

    path = tmp_path / "dates.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t AS SELECT DATE '2020-01-01' + i::INTEGER AS d "
                    "FROM range(5) r(i)")
    metadata = loads_metadata("tables:\n  t:\n    columns:\n      d: {type: DATE}\n")
    sources = export_parquet(path, tmp_path / "pq")
    sparkb = spark_backend_class(recording=True)(with_sources(metadata, sources), spark)
    ledger = open_ledger(tmp_path / "ledger.sqlite")
    try:
        session = ledger_session(metadata, sparkb, ledger)
        sql = "SELECT COUNT(*) AS n FROM t WHERE date_add(d, INTERVAL 1 MONTH) > DATE '2020-01-03'"
        prepared = session.prepare(sql)
        assert "TRY_ADD(t.d, INTERVAL '1' MONTH)" in prepared.compiled.exact
        assert sparkb.executed == [] and charged(session) == []
        assert abs(session.run(sql, epsilon=100.0).rows[0][0] - 5) <= 2  # every date passes
    finally:
        sparkb.close()
        ledger.close()


@pytest.mark.spark
def test_rejected_queries_neither_reach_spark_nor_charge(shop, sources, spark, tmp_path):
    from tests.analysis.test_rejection_corpus import CORPUS
    from tests.ledgers import charged, ledger_session, open_ledger
    from tests.recording import spark_backend_class

    metadata = shop.metadata()
    sparkb = spark_backend_class(recording=True)(with_sources(metadata, sources), spark)
    ledger = open_ledger(tmp_path / "ledger.sqlite")
    try:
        session = ledger_session(metadata, sparkb, ledger)
        # the first case of every category, and every Spark-specific one
        cases = [c[0] for c in CORPUS.values()] + CORPUS["spark_file_sources_commands_and_udfs"]
        for sql, cls in cases:
            with pytest.raises(cls):
                session.run(sql, epsilon=1.0, delta=1e-6)
        assert sparkb.executed == [] and charged(session) == []
    finally:
        sparkb.close()
        ledger.close()


def test_the_cases_left_out_on_spark_send_the_same_exact_sql(shop):
    """SAME_EXACT_SQL is a fact about the plans, not a guess: each left-out case's exact and
    domain SQL equal its stand-in's (the plan Spark would compile; no JVM needed)."""
    from dpsql.rewrite.plan import plan_execution

    metadata = shop.metadata()
    engine = Session(metadata, DuckDBBackend(shop.path, metadata))
    sql_of = {name: sql for name, sql, _, _ in QUERIES}

    def sent(name: str) -> tuple[str, str | None]:
        plan = plan_execution(engine.prepare(sql_of[name]).analysis, engine.metadata)
        return plan.exact_sql, plan.domain_sql

    for left_out, stand_in in SAME_EXACT_SQL.items():
        assert sent(left_out) == sent(stand_in)


@pytest.mark.spark
def test_the_day_of_the_week_is_duckdbs(spark, tmp_path):
    # dpsql.backends.spark_sql._day_of_week: Spark's DAYOFWEEK counts Sunday as 1, DuckDB's
    # dayofweek and EXTRACT(dow ...) as 0 (README: GROUP BY EXTRACT(dow FROM d)), so every
    # answer grouped or filtered by it was one day off on Spark; isodow counts Monday as 1
    from tests.recording import spark_backend_class

    path = tmp_path / "week.duckdb"
    with writing(path) as con:  # a fortnight: each weekday twice
        con.execute("CREATE TABLE t AS SELECT DATE '2024-01-07' + i::INTEGER AS d "
                    "FROM range(14) r(i)")
    sql = ("SELECT EXTRACT(dow FROM d) AS a, dayofweek(d) AS b, EXTRACT(isodow FROM d) AS c, "
           "isodow(d) AS e, EXTRACT(dayofweek FROM d) AS f FROM t ORDER BY d")
    with writing(path) as con:
        expected = con.execute(sql).fetchall()
    assert expected[0] == (0, 0, 7, 7, 0) and expected[1] == (1, 1, 1, 1, 1)  # Sunday, Monday
    metadata = loads_metadata("tables:\n  t:\n    columns:\n      d: {type: DATE}\n")
    sources = export_parquet(path, tmp_path / "pq")
    sparkb = spark_backend_class(recording=False)(with_sources(metadata, sources), spark)
    try:
        rows, _ = sparkb.execute(sparkb.compile(sql))
        assert [tuple(r) for r in rows] == expected
    finally:
        sparkb.close()
