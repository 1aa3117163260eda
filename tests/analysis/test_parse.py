"""Every rejection class of the analysis, with a representative query each (docs/design.md,
"Interfaces").

Each case checks the exception class (and so its PEP 249 parent) and that the message names the
refused construct, so the analyst knows what to change. Rejections happen before any database
is touched: analyze() only needs the metadata.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlglot import exp

from dpsql.analysis.elastic import analyze
from dpsql.analysis.parse import parse_query
from dpsql.errors import (
    AggregateArithmeticError,
    MissingMetricError,
    NotSupportedError,
    ProgrammingError,
    ProtectedBinError,
    UnsupportedConstructError,
    UnsupportedQueryError,
)
from dpsql.metadata import load_metadata
from dpsql.server.sqlstates import sqlstate
from tests.units import tiny

ROOT = Path(__file__).resolve().parents[2]
MD = load_metadata(ROOT / "schemas" / "flex_test.yaml")
# flex_test.yaml: orders(order_id mf 1, order_date releasable without domain, customer_id mf 100,
# product_id mf 500 releasable with domain products.product_id, quantity, order_cost),
# products (public), customers, recommendations.


def rejects(sql: str, cls: type[Exception], *words: str) -> Exception:
    with pytest.raises(cls) as info:
        analyze(sql, MD)
    message = str(info.value)
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in {message!r}"
    return info.value


# ----------------------------------------------------------------------------- not a query

UNSUPPORTED_QUERIES = [
    ("SELECT order_id FROM orders", "order_id"),  # raw rows
    ("SELECT customer_id, quantity FROM orders WHERE quantity > 1", "customer_id"),
    ("SELECT * FROM orders", "SELECT *"),
    ("SELECT *, COUNT(*) FROM orders", "SELECT *"),
    ("SELECT o.* FROM orders o", "SELECT *"),
    ("SELECT 1", "FROM"),  # no table at all
    ("CREATE TABLE x (a INT)", "CREATE"),
    ("CREATE VIEW v AS SELECT COUNT(*) FROM orders", "CREATE"),
    ("DROP TABLE orders", "DROP"),
    ("ALTER TABLE orders ADD COLUMN z INT", "ALTER"),
    ("INSERT INTO orders VALUES (1)", "INSERT"),
    ("UPDATE orders SET quantity = 1", "UPDATE"),
    ("DELETE FROM orders", "DELETE"),
    ("PRAGMA table_info('orders')", "PRAGMA"),
    ("SET threads = 1", "SET"),
    ("ATTACH 'other.duckdb' AS other", "ATTACH"),
    ("DETACH other", "DETACH"),
    ("COPY orders TO 'out.csv'", "COPY"),
    ("INSTALL httpfs", "INSTALL"),
    ("LOAD httpfs", "LOAD"),
    ("CALL pragma_version()", "CALL"),
    ("SELECT COUNT(*) FROM orders; SELECT COUNT(*) FROM customers", "2 statements"),
    ("SELECT COUNT(*) FROM orders; DROP TABLE orders", "2 statements"),
]


@pytest.mark.parametrize(("sql", "word"), UNSUPPORTED_QUERIES)
def test_unsupported_queries(sql, word):
    err = rejects(sql, UnsupportedQueryError, word)
    assert isinstance(err, NotSupportedError)


def test_raw_rows_message_says_what_to_do():
    err = rejects("SELECT order_id FROM orders", UnsupportedQueryError, "aggregate", "GROUP BY")
    assert err.to_json()["error"]["type"] == "UnsupportedQueryError"


# ----------------------------------------------------------------------------- constructs

UNSUPPORTED_CONSTRUCTS = [
    # joins without an equality between both sides
    ("SELECT COUNT(*) FROM orders o CROSS JOIN customers c", "cross"),
    ("SELECT COUNT(*) FROM orders o, customers c", "cross"),
    ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id < c.customer_id",
     "non-equijoin"),
    ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = 1", "equijoin"),
    ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = o.order_id",
     "equijoin"),
    ("SELECT COUNT(*) FROM orders o JOIN customers c "
     "ON o.customer_id IS NOT DISTINCT FROM c.customer_id", "equijoin"),
    # outer and other join kinds
    # (LEFT / RIGHT / FULL equijoins have a rule: tests/bruteforce/test_outer_joins.py)
    ("SELECT COUNT(*) FROM orders o LEFT ANTI JOIN customers c "
     "ON o.customer_id = c.customer_id", "LEFT ANTI JOIN"),
    ("SELECT COUNT(*) FROM orders o LEFT SEMI JOIN customers c "
     "ON o.customer_id = c.customer_id", "LEFT SEMI JOIN"),
    ("SELECT COUNT(*) FROM orders o RIGHT JOIN customers c ON o.customer_id < c.customer_id",
     "non-equijoin"),
    ("SELECT COUNT(*) FROM orders o FULL OUTER JOIN customers c "
     "ON o.customer_id = c.customer_id OR o.order_id = c.customer_id", "equijoin"),
    ("SELECT COUNT(*) FROM orders o SEMI JOIN customers c ON o.customer_id = c.customer_id",
     "SEMI JOIN"),
    ("SELECT COUNT(*) FROM orders o ANTI JOIN customers c ON o.customer_id = c.customer_id",
     "ANTI JOIN"),
    ("SELECT COUNT(*) FROM orders o ASOF JOIN customers c ON o.customer_id = c.customer_id",
     "ASOF JOIN"),
    ("SELECT COUNT(*) FROM orders o POSITIONAL JOIN customers c", "POSITIONAL JOIN"),
    # window functions
    ("SELECT COUNT(*), ROW_NUMBER() OVER () FROM orders", "window"),
    ("SELECT SUM(COUNT(*)) OVER () FROM orders", "window"),
    ("SELECT COUNT(*) FROM orders QUALIFY ROW_NUMBER() OVER () = 1", "QUALIFY"),
    # table functions, file paths
    ("SELECT COUNT(*) FROM read_csv('orders.csv')", "read_csv"),
    ("SELECT COUNT(*) FROM read_csv_auto('orders.csv')", "read_csv"),
    ("SELECT COUNT(*) FROM read_parquet('orders.parquet')", "read_parquet"),
    ("SELECT COUNT(*) FROM glob('*')", "glob"),
    ("SELECT COUNT(*) FROM duckdb_tables()", "duckdb_tables"),
    ("SELECT COUNT(*) FROM range(10)", "table function"),
    ("SELECT COUNT(*) FROM orders o JOIN read_json('x.json') j ON o.order_id = j.id", "read_json"),
    ("SELECT COUNT(*) FROM 'orders.csv'", "file path"),
    ("SELECT COUNT(*) FROM '/etc/passwd'", "file path"),
    ("SELECT COUNT(*) FROM 'data/*.parquet'", "file path"),
    ("SELECT COUNT(*) FROM \"orders.parquet\"", "file path"),
    # system catalogs
    ("SELECT COUNT(*) FROM information_schema.tables", "information_schema"),
    ("SELECT COUNT(*) FROM pg_catalog.pg_class", "pg_catalog"),
    ("SELECT COUNT(*) FROM duckdb_settings", "duckdb_settings"),
    ("SELECT COUNT(*) FROM main.duckdb_columns", "duckdb_columns"),
    ("SELECT COUNT(*) FROM other_db.main.orders", "catalog"),
    # LATERAL, recursion, sampling
    ("SELECT COUNT(*) FROM orders o, LATERAL (SELECT o.customer_id) t", "LATERAL"),
    ("WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
     "SELECT COUNT(*) FROM r", "recursive"),
    ("SELECT COUNT(*) FROM orders TABLESAMPLE 10%", "TABLESAMPLE"),
    ("SELECT COUNT(*) FROM orders USING SAMPLE 10", "SAMPLE"),
    # nondeterministic functions
    ("SELECT COUNT(*) FROM orders WHERE random() < 0.5", "nondeterministic"),
    ("SELECT COUNT(*) FROM orders WHERE now() > order_date", "now"),
    ("SELECT COUNT(*) FROM orders WHERE uuid() IS NOT NULL", "nondeterministic"),
    ("SELECT COUNT(*) FROM orders WHERE gen_random_uuid() IS NOT NULL", "nondeterministic"),
    ("SELECT COUNT(*) FROM orders WHERE order_date < current_date", "nondeterministic"),
    ("SELECT COUNT(*) FROM orders WHERE setseed(0.5) IS NULL", "setseed"),
    # undeclared functions and macros, and functions reaching outside the database
    ("SELECT COUNT(*) FROM orders WHERE my_macro(order_id) > 1", "my_macro"),
    ("SELECT COUNT(*) FROM orders WHERE getenv('HOME') = 'x'", "getenv"),
    ("SELECT COUNT(*) FROM orders WHERE current_setting('threads') = '1'", "current_setting"),
    ("SELECT COUNT(*) FROM orders WHERE read_text('x') = 'y'", "read_text"),
    # aggregates without bounded sensitivity
    ("SELECT MAX(quantity) FROM orders", "MAX"),
    ("SELECT MEDIAN(order_cost) FROM orders", "MEDIAN"),
    ("SELECT COUNT(*) FROM (SELECT STDDEV(order_cost) AS s FROM orders) t", "STDDEV"),
    # grouping variants and aggregate modifiers
    ("SELECT product_id, COUNT(*) FROM orders GROUP BY ROLLUP (product_id)", "ROLLUP"),
    ("SELECT COUNT(*) FROM (SELECT COUNT(*) FILTER (WHERE quantity > 1) AS n FROM orders) t",
     "FILTER"),
    ("SELECT MAX(quantity) FILTER (WHERE quantity > 1) FROM orders", "FILTER"),
    ("SELECT SUM(DISTINCT order_cost) FROM orders", "DISTINCT"),
    # relations without a rule
    ("SELECT COUNT(*) FROM (VALUES (1), (2)) t(x)", "VALUES"),
    ("SELECT COUNT(*) FROM (SELECT customer_id FROM orders INTERSECT "
     "SELECT customer_id FROM customers) t", "INTERSECT"),
    ("SELECT COUNT(*) FROM (SELECT customer_id FROM orders EXCEPT "
     "SELECT customer_id FROM customers) t", "EXCEPT"),
    ("SELECT COUNT(*) FROM orders UNION ALL SELECT COUNT(*) FROM customers", "UNION"),
    ("SELECT COUNT(*) FROM (SELECT customer_id FROM orders LIMIT 10) t", "LIMIT"),
    ("SELECT COUNT(*) FROM (SELECT DISTINCT ON (quantity) customer_id FROM orders) t",
     "DISTINCT ON"),
    # subqueries where no rule applies
    ("SELECT COUNT(*) FROM orders WHERE customer_id IN (SELECT customer_id FROM customers) "
     "OR quantity > 1", "subquery"),
    ("SELECT COUNT(*) FROM orders WHERE customer_id = (SELECT customer_id FROM customers)",
     "subquery"),
    ("SELECT COUNT(*), (SELECT 1) FROM orders", "subquery"),
    ("SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT 1 FROM customers)", "EXISTS"),
    ("SELECT COUNT(*) FROM orders o WHERE EXISTS "
     "(SELECT 1 FROM customers c WHERE c.customer_id > o.customer_id)", "EXISTS"),
    ("SELECT COUNT(*) FROM orders o WHERE o.customer_id IN "
     "(SELECT c.customer_id FROM customers c WHERE c.address = o.order_id)", "correlated"),
    ("SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT 1 FROM "
     "(SELECT r.customer_id FROM recommendations r WHERE r.product_id = o.product_id) t "
     "WHERE t.customer_id = o.customer_id)", "LATERAL"),
    ("SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT 1 FROM recommendations r "
     "WHERE r.customer_id = o.customer_id AND o.product_id IN (SELECT product_id FROM products))",
     "inside EXISTS"),
    ("SELECT product_id, COUNT(*) FROM orders GROUP BY product_id "
     "LIMIT (SELECT COUNT(*) FROM customers)", "LIMIT"),
    ("SELECT product_id, COUNT(*) FROM orders GROUP BY product_id "
     "ORDER BY (SELECT 1 FROM customers)", "ORDER BY"),
    # names that do not resolve to one column
    # (two outputs named x: the second is renamed x_1 as DuckDB does, tests/analysis/
    # test_outputs.py)
    ("SELECT COUNT(*) FROM orders t(a, b) JOIN customers c ON t.b = c.customer_id",
     "column aliases"),
]


@pytest.mark.parametrize(("sql", "word"), UNSUPPORTED_CONSTRUCTS)
def test_unsupported_constructs(sql, word):
    err = rejects(sql, UnsupportedConstructError, word)
    assert isinstance(err, NotSupportedError)


# ----------------------------------------------------------------------------- metrics

MISSING_METRICS = [
    ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.quantity = c.customer_id",
     "o.quantity"),  # join key without max_freq
    ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id + 1 = c.customer_id",
     "derived"),
    ("SELECT COUNT(*) FROM (SELECT customer_id * 2 AS c2 FROM orders) t "
     "JOIN customers c ON t.c2 = c.customer_id", "t.c2"),
    ("SELECT COUNT(*) FROM orders o WHERE o.quantity IN (SELECT address FROM customers)",
     "o.quantity"),
    ("SELECT COUNT(*) FROM orders o WHERE o.customer_id * 2 IN (SELECT address FROM customers)",
     "derived"),
    ("SELECT SUM(order_cost) FROM orders", "bounds"),
    ("SELECT AVG(order_cost) FROM orders", "bounds"),
    ("SELECT SUM(quantity * 2) FROM orders", "bounds"),
]


@pytest.mark.parametrize(("sql", "word"), MISSING_METRICS)
def test_missing_metrics(sql, word):
    err = rejects(sql, MissingMetricError, word)
    assert isinstance(err, NotSupportedError)


def test_missing_metric_message_names_the_column_to_declare():
    rejects("SELECT SUM(order_cost) FROM orders", MissingMetricError, "order_cost", "bounds")
    rejects("SELECT COUNT(*) FROM orders o JOIN customers c ON o.quantity = c.customer_id",
            MissingMetricError, "max_freq")


# ----------------------------------------------------------------------------- bins

PROTECTED_BINS = [
    ("SELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id", "not releasable"),
    ("SELECT c.address, COUNT(*) FROM customers c GROUP BY c.address", "not releasable"),
    ("SELECT order_date, COUNT(*) FROM orders GROUP BY order_date", "no domain"),
    # computed keys need an input with a declared domain (or day bounds): quantity % 3 and
    # product_id + 1 are accepted (tests/analysis/test_derived_keys.py)
    ("SELECT customer_id % 3 AS q, COUNT(*) FROM orders GROUP BY customer_id % 3",
     "no declared domain"),
    ("SELECT t.k, COUNT(*) FROM (SELECT customer_id + 1 AS k FROM orders) t GROUP BY t.k",
     "no declared or derivable domain"),
]


@pytest.mark.parametrize(("sql", "word"), PROTECTED_BINS)
def test_protected_bins(sql, word):
    err = rejects(sql, ProtectedBinError, word)
    assert isinstance(err, NotSupportedError)


def test_releasable_with_domain_is_accepted():
    a = analyze("SELECT product_id, COUNT(*) FROM orders GROUP BY product_id", MD)
    assert [k.name for k in a.group_keys] == ["product_id"]


# ----------------------------------------------------------------------------- aggregates

AGGREGATE_ARITHMETIC = [
    ("SELECT SUM(t.n) FROM (SELECT customer_id, COUNT(*) AS n FROM orders GROUP BY customer_id) t",
     "SUM(t.n)"),
    ("SELECT COUNT(*) FROM orders WHERE quantity > (SELECT AVG(quantity) FROM orders)",
     "aggregate subquery"),
    ("SELECT COUNT(*) FROM orders WHERE customer_id = (SELECT COUNT(*) FROM customers)",
     "aggregate subquery"),
    ("SELECT COUNT(*) FROM orders WHERE COUNT(*) > 1", "aggregate"),
    ("SELECT SUM(COUNT(*)) FROM orders", "nested aggregate"),
    ("SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT COUNT(*) FROM customers c "
     "WHERE c.customer_id = o.customer_id)", "aggregate"),
]


@pytest.mark.parametrize(("sql", "word"), AGGREGATE_ARITHMETIC)
def test_aggregate_arithmetic(sql, word):
    err = rejects(sql, AggregateArithmeticError, word)
    assert isinstance(err, NotSupportedError)


# ----------------------------------------------------------------------------- programming errors


@pytest.mark.parametrize(("sql", "line", "columns"), [
    # the offending token is FROM (columns 16-19): ")" expected before it
    ("SELECT COUNT(* FROM orders", 1, range(16, 20)),
    # the input ends (line 2 is 31 characters long) with "(" still open
    ("SELECT COUNT(*)\nFROM orders WHERE (quantity > 1", 2, range(28, 33)),
])
def test_syntax_errors_have_a_position(sql, line, columns):
    with pytest.raises(ProgrammingError, match="syntax") as info:
        analyze(sql, MD)
    assert info.value.position is not None
    assert info.value.position[0] == line
    assert info.value.position[1] in columns
    assert not isinstance(info.value, NotSupportedError)


@pytest.mark.parametrize(("sql", "word"), [
    ("SELECT COUNT(*) FROM nosuch", "nosuch"),
    ("SELECT COUNT(*) FROM orders o JOIN nosuch n ON o.order_id = n.id", "nosuch"),
    ("SELECT COUNT(nosuch) FROM orders", "nosuch"),
    ("SELECT COUNT(*) FROM orders WHERE orders.nosuch > 1", "nosuch"),
    ("SELECT COUNT(*) FROM otherschema.orders", "otherschema"),
    ("", "empty"),
])
def test_undeclared_names_are_programming_errors(sql, word):
    with pytest.raises(ProgrammingError) as info:
        analyze(sql, MD)
    assert word in str(info.value)
    assert ".:" not in str(info.value)  # sqlglot's full stop, then ours (units QA)
    assert not isinstance(info.value, NotSupportedError)


def test_rejected_before_qualify_and_nothing_reaches_duckdb():
    # parse_query alone rejects: the allow-list runs on the raw parse tree
    with pytest.raises(UnsupportedConstructError):
        parse_query("SELECT COUNT(*) FROM read_csv('x.csv')", MD)
    # a declared query qualifies every column with its table alias
    q = parse_query("SELECT COUNT(*) FROM orders WHERE quantity > 1", MD)
    assert "orders.quantity" in q.sql(dialect="duckdb")


def test_messages_never_quote_private_numbers():
    # errors reach analysts: they must not show max frequencies or sensitivities
    for sql in ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.quantity = c.customer_id",
                "SELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id",
                "SELECT COUNT(*) FROM orders o, customers c"):
        with pytest.raises(NotSupportedError) as info:
            analyze(sql, MD)
        for secret in ("100", "250", "500"):
            assert secret not in str(info.value)


@pytest.mark.parametrize("sql", [
    'SELECT COUNT(*) FROM "main.orders"',  # one identifier: DuckDB reads a table "main.orders"
    'SELECT COUNT(*) FROM "x.orders"',
    'SELECT COUNT(*) FROM main."a.orders"',
    'SELECT COUNT(*) FROM orders o JOIN "public.customers" c ON o.customer_id = c.customer_id',
    'SELECT COUNT(*) FROM orders WHERE order_id IN (SELECT customer_id FROM "a.customers")',
])
def test_quoted_table_names_containing_dots_are_rejected(sql):
    # The metadata drops a schema prefix ("main.orders" -> orders), so the analysis used to
    # read orders' max frequencies for whatever table DuckDB finds under the dotted name.
    with pytest.raises(ProgrammingError, match="contains a dot") as info:
        analyze(sql, MD)
    assert not isinstance(info.value, NotSupportedError)
    assert "schema.table" in str(info.value)


def test_schema_prefixes_quoted_part_by_part_still_resolve():
    for sql in ('SELECT COUNT(*) FROM "main"."orders"', "SELECT COUNT(*) FROM main.orders",
                'SELECT COUNT(*) FROM "orders"'):
        query = parse_query(sql, MD)
        assert query.find(exp.Table).name == "orders"


def test_the_memoised_schema_answers_as_sqlglot_mapping_schema_does():
    import sqlglot
    from sqlglot.schema import MappingSchema

    from dpsql.analysis.parse import DIALECT, _Schema

    mapping = {"orders": {"id": "INT", "Cost": "DOUBLE"}, "Mixed": {"a": "INT"},
               "main": {"x": "INT"}}
    memo, plain = _Schema(mapping, dialect=DIALECT), MappingSchema(mapping, dialect=DIALECT)
    for text in ("orders", "ORDERS", '"orders"', '"ORDERS"', "Mixed", '"Mixed"', "mixed",
                 "nowhere", "main.orders", "db.orders", "main"):
        table = sqlglot.parse_one(f"SELECT 1 FROM {text}", dialect=DIALECT).find(exp.Table)
        for only_visible in (False, True):
            for _ in range(2):  # computed, then memoised
                got = memo.column_names(table, only_visible)
                assert got == plain.column_names(table, only_visible), text
                got.append("changed")  # a caller's list is its own
    assert memo.column_names("orders") == plain.column_names("orders")


@pytest.mark.parametrize("sql", ["SELECT COUNT(*) FROM orders WHERE amout > 1",
                                 "SELECT COUNT(*) FROM orders o WHERE o.amout > 1"])
def test_a_mistyped_column_gets_a_hint_naming_a_declared_one(sql):
    # QA round 5: table and keyword typos had a "did you mean", column typos none
    with pytest.raises(ProgrammingError) as info:
        parse_query(sql, tiny.metadata())
    assert str(info.value).endswith("; did you mean 'amount'?")
    assert sqlstate(info.value) == "42703"
    with pytest.raises(ProgrammingError) as info:
        parse_query("SELECT SUM(zzz) FROM orders", tiny.metadata())
    assert "did you mean" not in str(info.value)


def test_a_key_that_is_not_releasable_names_every_fix():
    # QA round 5: partition selection was left out of the fixes
    err = rejects("SELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id",
                  ProtectedBinError, "not releasable")
    text = str(err)
    assert "with a domain" in text and "partition_selection: true" in text
    assert "a public table's column" in text
