"""Execution errors must not reveal whether a row exists (rewrite.py: TRY totality).

Two databases differ in ONE row of ``accounts``, whose values make plain DuckDB raise inside a
WHERE filter: ``b = 0`` (``a // b``, ``a % b``), ``code = 'SECRET-7731'`` (a failed CAST to
INTEGER) and ``a = 2147483647`` (INT32 overflow in ``a + a``, ``a * a``). Each query below is
first shown to raise on the database with the row and not on the other one when run as plain
SQL (so the test bites); through the engine it must run on both and, with zero noise, give the
same answer on both (TRY turns the failing expression into NULL, which the filter drops).

The engine tests run once per backend (``make_backend``, tests/conftest.py: DuckDB, and Spark
over the same tables as Parquet, whose translation of TRY is in dpsql/backends/spark_sql.py);
on Spark every case is translated and the cases of SPARK_EXECUTES run.

The backend's error messages must not quote data values either: DuckDB's own messages do
(``Could not convert string 'SECRET-7731' to INT32``).
"""

from __future__ import annotations

import duckdb
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import OperationalError
from dpsql.metadata import loads_metadata
from dpsql.session import Session
from tests.db_files import writing
from tests.shop_fixture import ZeroNoise, insert_rows

SECRET_CODE = "SECRET-7731"
INT32_MAX = 2147483647
BAD_ROW = (1000, INT32_MAX, 0, SECRET_CODE, "x")

METADATA = loads_metadata("""
tables:
  accounts:
    columns:
      id: {max_freq: 1, type: INTEGER}
      a: {bounds: [0, 100], type: INTEGER}
      b: {type: INTEGER}
      code: {max_freq: 1, type: VARCHAR}
      g: {releasable: true, type: VARCHAR, domain: {values: [x, y]}}
  owners:
    columns:
      id: {max_freq: 1, type: INTEGER}
      k: {max_freq: 1, type: INTEGER}
""")



def _build(path, *, with_bad_row: bool):
    with writing(path) as con:
        con.execute("CREATE TABLE accounts (id INTEGER, a INTEGER, b INTEGER, code VARCHAR, "
                    "g VARCHAR)")
        rows = [(i, i % 50, 1 + i % 7, str(i), "x" if i % 2 else "y") for i in range(1, 201)]
        insert_rows(con, "accounts", rows + ([BAD_ROW] if with_bad_row else []))
        con.execute("CREATE TABLE owners (id INTEGER, k INTEGER)")
        insert_rows(con, "owners", [(i, i) for i in range(1, 151)] + [(1000, 1000)])
    return path


@pytest.fixture(scope="module")
def databases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("totality")
    return {
        "with_row": _build(folder / "with_row.duckdb", with_bad_row=True),
        "without_row": _build(folder / "without_row.duckdb", with_bad_row=False),
    }


@pytest.fixture(scope="module")
def engines(databases, make_backend):
    return {name: Session(METADATA, make_backend(path, METADATA), sampler=ZeroNoise())
            for name, path in databases.items()}


@pytest.fixture(scope="module")
def plain(databases):
    cons = {name: duckdb.connect(str(path), read_only=True) for name, path in databases.items()}
    yield cons
    for con in cons.values():
        con.close()


def _check_total(engines, plain, sql):
    # The plain SQL raises exactly when the row is there: the row is what makes DuckDB fail.
    with pytest.raises(duckdb.Error):
        plain["with_row"].execute(sql).fetchall()
    want = plain["without_row"].execute(sql).fetchall()
    with_row = engines["with_row"].run(sql, epsilon=1.0, delta=1e-6).rows
    without_row = engines["without_row"].run(sql, epsilon=1.0, delta=1e-6).rows
    assert without_row == want
    assert with_row == without_row
    assert any(v not in (0, None) for row in want for v in row[-1:]), want  # not vacuous


TOTAL = [
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE t.a // t.b > 2",
                 id="integer_division_by_zero"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE t.a % t.b = 0",
                 id="modulo_by_zero"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE CAST(t.code AS INTEGER) > 10",
                 id="failed_cast"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE t.code::INTEGER % 2 = 0",
                 id="failed_cast_shorthand"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE t.a + t.a > 10",
                 id="int32_overflow_addition"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE t.a * t.a > 10",
                 id="int32_overflow_multiplication"),
    # Spark without ANSI mode wraps integer overflow around instead of failing: the wrapped
    # values (INT32_MAX * INT32_MAX = 1, INT32_MAX + INT32_MAX = -2) would pass these filters,
    # so they pass only if TRY becomes NULL-on-overflow there too (try_multiply, try_add).
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE t.a * t.a < 10",
                 id="int32_overflow_must_not_wrap_multiplication"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE t.a + t.a < 10",
                 id="int32_overflow_must_not_wrap_addition"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE t.id > 5 AND "
                 "(t.a // t.b > 2 OR CAST(t.code AS INTEGER) < 3)",
                 id="inside_and_or"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE NOT (t.a % t.b = 0)",
                 id="under_not"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE (t.a // t.b) BETWEEN 2 AND 5",
                 id="between"),
    pytest.param("SELECT t.g, COUNT(*) AS n FROM accounts t WHERE t.a // t.b > 2 GROUP BY t.g",
                 id="histogram"),
    pytest.param("SELECT SUM(t.a) AS s, AVG(t.a) AS m FROM accounts t "
                 "WHERE CAST(t.code AS INTEGER) > 10", id="sum_and_avg"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t JOIN owners u "
                 "ON t.id = u.id AND t.a // t.b > 2", id="join_on"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t, owners u "
                 "WHERE t.id = u.id AND t.a + t.a > 10", id="comma_join_where"),
    pytest.param("SELECT COUNT(*) AS n FROM (SELECT t.id FROM accounts t "
                 "WHERE CAST(t.code AS INTEGER) > 10) AS s", id="derived_table_where"),
    pytest.param("SELECT COUNT(*) AS n FROM (SELECT t.id FROM accounts t WHERE t.a % t.b = 1 "
                 "UNION ALL SELECT u.id FROM owners u) AS s", id="union_all_branch"),
    pytest.param("SELECT COUNT(t.a // t.b) AS n FROM accounts t", id="count_argument"),
    # issue #12 class 2: an equality of two bare columns that is no join key is not exempt
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE t.code = t.id",
                 id="column_equality_filter"),
    pytest.param("SELECT COUNT(*) AS n FROM accounts t WHERE t.id IS NOT DISTINCT FROM t.code",
                 id="null_safe_column_equality_filter"),
    pytest.param(
        "SELECT COUNT(*) AS n FROM (SELECT t.id FROM accounts t WHERE t.a // t.b > 2) AS s "
        "WHERE s.id IN (SELECT u.id FROM owners u)", id="semijoin_over_derived_table"),
    pytest.param(
        "WITH s AS (SELECT * FROM accounts t WHERE t.a // t.b > 2) SELECT COUNT(*) AS n FROM s",
        id="cte_where"),
    pytest.param(
        "WITH s AS (SELECT * FROM accounts t WHERE CAST(t.code AS INTEGER) > 10) "
        "SELECT s.g, COUNT(*) AS n FROM s GROUP BY s.g",
        id="cte_where_histogram"),
    pytest.param(
        "SELECT COUNT(*) AS n FROM accounts t WHERE t.code = 5",
        id="implicit_cast_in_comparison"),
    pytest.param(
        "SELECT COUNT(*) AS n FROM accounts t WHERE t.code IN (5, 7, 11)",
        id="implicit_cast_in_value_list"),
    pytest.param(
        "SELECT COUNT(*) AS n FROM owners u WHERE u.id IN "
        "(SELECT t.id FROM accounts t WHERE t.a // t.b > 2)",
        id="in_subquery_where"),
    pytest.param(
        "SELECT COUNT(*) AS n FROM owners u WHERE EXISTS "
        "(SELECT 1 FROM accounts t WHERE t.id = u.id AND t.a // t.b > 2)",
        id="exists_subquery_where"),
    pytest.param(
        "SELECT COUNT(*) AS n FROM (SELECT t.a // t.b AS r FROM accounts t) AS s WHERE s.r > 2",
        id="derived_table_select_list"),
]


#: The cases Spark EXECUTES (each costs ~0.4 CPU-s of JVM time); every case runs on DuckDB,
#: and on Spark every case's plan is translated (the backend's compile, no Spark job). These
#: execute each kind of failure once -- division and modulo by zero (DIV, %), a failed explicit
#: cast (TRY_CAST), an implicit cast in a comparison, a value list, a column equality and a
#: null-safe one (ANSI mode off: NULL), an integer overflow -- plus a SUM (exact DECIMAL) and a
#: grouped case (domain join), and keep the cases written for Spark: its non-ANSI integer
#: ``+``/``*`` WRAP around, so only the must_not_wrap cases fail if TRY is not translated.
#: Every translation rule the corpus uses is among them (test_spark_executes_every_rule).
SPARK_EXECUTES = frozenset({
    "integer_division_by_zero", "modulo_by_zero", "failed_cast",
    "implicit_cast_in_comparison", "implicit_cast_in_value_list", "column_equality_filter",
    "null_safe_column_equality_filter", "int32_overflow_must_not_wrap_multiplication",
    "int32_overflow_must_not_wrap_addition", "sum_and_avg", "histogram",
})


CASE_OF = {p.values[0]: p.id for p in TOTAL}


@pytest.mark.parametrize("sql", TOTAL)
def test_one_failing_row_does_not_make_the_query_fail(engines, plain, sql, backend_name):
    if backend_name == "spark" and CASE_OF[sql] not in SPARK_EXECUTES:
        for engine in engines.values():  # translated, not executed (SPARK_EXECUTES)
            compiled = engine.prepare(sql).compiled
            assert "TRY(" not in compiled.exact.upper(), compiled.exact
        return
    _check_total(engines, plain, sql)


def test_spark_executes_every_rule(engines, backend_name):
    """SPARK_EXECUTES names real cases, and executes every translation rule
    (tests/spark_rules.py) that any case's Spark SQL uses."""
    from tests.spark_rules import rules_used

    ids = {p.id for p in TOTAL}
    assert not SPARK_EXECUTES - ids, SPARK_EXECUTES - ids
    if backend_name != "spark":
        return
    compiled = {p.id: engines["with_row"].prepare(p.values[0]).compiled for p in TOTAL}
    used = {case: rules_used(t for t in (c.exact, c.domains) if t is not None)
            for case, c in compiled.items()}
    executed = set().union(*(used[case] for case in SPARK_EXECUTES))
    assert set().union(*used.values()) <= executed, {
        case: rules - executed for case, rules in used.items() if rules - executed}


def test_the_databases_differ_in_exactly_that_row(engines):
    # Sanity: the databases really differ, and unfiltered counts see the difference.
    counts = {name: e.run("SELECT COUNT(*) AS n FROM accounts", epsilon=1.0).rows
              for name, e in engines.items()}
    assert counts == {"with_row": [(201,)], "without_row": [(200,)]}


# --------------------------------------------------------------------------- messages

FAILING_SQL = [
    pytest.param("SELECT CAST(code AS INTEGER) FROM accounts", SECRET_CODE, id="failed_cast"),
    pytest.param("SELECT SUM(a + a) FROM accounts", str(INT32_MAX), id="int32_overflow"),
    pytest.param("SELECT COUNT(*) FROM accounts WHERE code = 5", SECRET_CODE,
                 id="implicit_cast"),
]


@pytest.mark.parametrize(("sql", "value"), FAILING_SQL)
def test_backend_errors_do_not_quote_data_values(databases, plain, sql, value):
    # DuckDB's own message quotes the value ...
    with pytest.raises(duckdb.Error) as raw:
        plain["with_row"].execute(sql).fetchall()
    assert value in str(raw.value)
    # ... the backend's does not, and does not chain DuckDB's error either.
    backend = DuckDBBackend(databases["with_row"], METADATA)
    try:
        with pytest.raises(OperationalError) as err:
            backend.execute(sql)
    finally:
        backend.close()
    assert value not in str(err.value) and value not in repr(err.value.args)
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_engine_errors_do_not_quote_data_values(databases):
    # The rewrite makes such casts total; the backend still hides the value if DuckDB fails.
    backend = DuckDBBackend(databases["with_row"], METADATA)
    with pytest.raises(OperationalError) as err:
        backend.execute("SELECT COUNT(*) FROM accounts t WHERE CAST(t.code AS INTEGER) = 5")
    assert SECRET_CODE not in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__


# SUM/AVG over a text column: DuckDB would cast every stored value to a number, so one
# unparsable row (the secret code) would make the whole query fail.
TEXT_BOUNDS = """
tables:
  accounts:
    columns:
      id: {max_freq: 1}
      code: {max_freq: 1, bounds: [0, 1000]%s}
"""


@pytest.mark.parametrize("sql", ["SELECT SUM(code) FROM accounts",
                                 "SELECT AVG(code) FROM accounts"])
def test_sum_of_a_known_text_column_is_rejected(sql):
    from dpsql.analysis.elastic import analyze
    from dpsql.errors import UnsupportedConstructError
    with pytest.raises(UnsupportedConstructError, match="needs a numeric column"):
        analyze(sql, loads_metadata(TEXT_BOUNDS % ", type: VARCHAR"))


@pytest.mark.parametrize("sql", ["SELECT SUM(code) FROM accounts",
                                 "SELECT AVG(code) FROM accounts"])
def test_sum_of_a_text_column_without_bounds_names_the_type_not_bounds(sql):
    # Without bounds, the refusal used to ask for bounds on the VARCHAR column (no fix: a
    # text column with bounds is refused anyway); it names the type instead.
    from dpsql.analysis.elastic import analyze
    from dpsql.errors import UnsupportedConstructError
    metadata = loads_metadata(TEXT_BOUNDS.replace(", bounds: [0, 1000]", "") % ", type: VARCHAR")
    with pytest.raises(UnsupportedConstructError, match="needs a numeric column") as err:
        analyze(sql, metadata)
    assert "bounds" not in str(err.value)


def test_sum_of_a_column_of_unknown_type_cannot_fail(plain):
    # Without a type (no database to fill it from), the clamp casts with TRY_CAST: the
    # unparsable row counts as NULL instead of failing, on both databases.
    from dpsql.analysis.elastic import analyze
    from dpsql.rewrite.plan import plan_execution
    sql = "SELECT SUM(code) FROM accounts"
    cast_sum = "SELECT SUM(CAST(code AS DOUBLE)) FROM accounts"  # the clamp's old cast
    plain["without_row"].execute(cast_sum).fetchall()
    with pytest.raises(duckdb.Error):
        plain["with_row"].execute(cast_sum).fetchall()  # fails on the secret code only
    exact = plan_execution(analyze(sql, loads_metadata(TEXT_BOUNDS % ""))).exact_sql
    assert "TRY_CAST" in exact
    with_row = plain["with_row"].execute(exact).fetchall()
    without_row = plain["without_row"].execute(exact).fetchall()
    assert with_row == without_row == [(sum(min(i, 1000) for i in range(1, 201)),)]


def test_a_negated_column_can_fail_and_a_negated_literal_cannot():
    import sqlglot

    from dpsql.rewrite.totality import can_fail, make_total

    # DuckDB: -x raises "Overflow in negation" on the least value of x's integer type
    assert can_fail(sqlglot.parse_one("-t.a"), lambda _c: None)
    assert not can_fail(sqlglot.parse_one("-1"), lambda _c: None)
    assert make_total(sqlglot.parse_one("-t.a")).sql(dialect="duckdb") == "TRY(-t.a)"


def test_count_distinct_keeps_its_distinct_outside_try():
    """TRY around the DISTINCT node reads as COUNT(TRY(x)) in DuckDB, which counts duplicates
    (tests/redteam/test_count_distinct_expression.py): the value inside is made total."""
    import sqlglot

    from dpsql.rewrite.totality import make_total

    node = make_total(sqlglot.parse_one("SELECT COUNT(DISTINCT a * b) FROM t", read="duckdb")
                      .expressions[0])
    assert node.sql(dialect="duckdb") == "COUNT(DISTINCT TRY(a * b))"
