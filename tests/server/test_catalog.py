"""Routing catalog queries to the shadow schema, and session commands (dpsql/server/catalog.py)."""

from __future__ import annotations

import pytest

from dpsql.metadata import loads_metadata
from dpsql.server.catalog import (
    VERSION_TEXT,
    Catalog,
    is_catalog_query,
    parse_postgres,
    parse_session_command,
)
from tests.shop_fixture import ANY_MAX_FREQ, shop_metadata_yaml


@pytest.mark.parametrize(("sql", "catalog"), [
    ("SELECT version()", True),
    ("SELECT relname FROM pg_catalog.pg_class", True),
    ("SELECT table_name FROM information_schema.tables", True),
    ("SELECT * FROM pg_class JOIN pg_namespace ON true", True),
    ("SELECT * FROM generate_series(1, 3)", True),
    ("SELECT COUNT(*) FROM orders", False),
    ("SELECT COUNT(*) FROM pg_class JOIN orders ON true", False),
    ("SELECT COUNT(*) FROM main.pg_orders", False),  # a user schema, not the catalog
    ("WITH pg_x AS (SELECT 1) SELECT * FROM orders", False),
    # writes to the analyst's shadow, shared by their connections (dpsql/server/shadow.py)
    ("SELECT 1 INTO pg_leak", False),
    ("SELECT relname INTO TEMP pg_leak FROM pg_class", False),
    ("WITH pg_x AS (INSERT INTO pg_y VALUES (1) RETURNING 1) SELECT * FROM pg_x", False),
])
def test_only_queries_naming_catalog_relations_go_to_the_shadow(sql: str, catalog: bool) -> None:
    tree = parse_postgres(sql)
    assert tree is not None
    assert is_catalog_query(tree) is catalog


def test_the_shadow_holds_the_granted_tables_columns_and_types_and_no_rows() -> None:
    shadow = Catalog(loads_metadata(shop_metadata_yaml(ANY_MAX_FREQ)), ["orders", "products"],
                     "bob")
    try:
        got = shadow.run(parse_postgres(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "ORDER BY table_name, ordinal_position"))
        assert {r[0] for r in got.rows} == {"orders", "products"}
        assert ("orders", "order_cost", "DOUBLE") in got.rows
        assert shadow.run(parse_postgres("SELECT version()")).rows == [(VERSION_TEXT,)]
        counts = shadow.run(parse_postgres(
            "SELECT COUNT(*) FROM pg_catalog.pg_class WHERE relname = 'orders'"))
        assert counts.rows == [(1,)]
        with pytest.raises(Exception, match=r"(?i)external|disabled|permission"):
            shadow.run(parse_postgres("SELECT * FROM read_csv('/etc/passwd')"))
    finally:
        shadow.close()


@pytest.mark.parametrize(("sql", "expected"), [
    ("SET dpsql.epsilon = 0.1", ("set", "dpsql.epsilon", "0.1")),
    ("SET dpsql.epsilon TO '0.1';", ("set", "dpsql.epsilon", "0.1")),
    ("SET TIME ZONE 'UTC'", ("set", "timezone", "UTC")),
    ("RESET dpsql.epsilon", ("set", "dpsql.epsilon", None)),
    ("SHOW transaction isolation level", ("show", "transaction isolation level")),
    ("BEGIN", ("noop", "BEGIN")),
    ('SAVEPOINT "_pg3_1"', ("noop", "SAVEPOINT")),
    ('ROLLBACK TO SAVEPOINT "_pg3_1"', ("noop", "ROLLBACK TO")),
    ("SELECT 1", None),
])
def test_session_commands(sql: str, expected: tuple | None) -> None:
    got = parse_session_command(sql)
    if expected is None:
        assert got is None
    elif expected[0] == "set":
        assert got is not None and got[0] == "set"
        assert (got[1].name, got[1].value) == expected[1:]
    else:
        assert got == expected


USER_METADATA = "tables:\n  t:\n    columns:\n      x: {type: INTEGER, bounds: [0, 1]}\n"


@pytest.mark.parametrize(("sql", "names"), [
    ("SELECT current_user, session_user", ("current_user", "session_user")),
    ("SELECT pg_catalog.current_user() AS who", ("who",)),
    ("SELECT usename FROM pg_catalog.pg_user WHERE usename = current_user", ("usename",)),
])
def test_current_user_is_the_analyst_not_the_shadow_database(sql: str,
                                                             names: tuple[str, ...]) -> None:
    catalog = Catalog(loads_metadata(USER_METADATA), ["t"], "o'brien")
    try:
        tree = parse_postgres(sql)
        assert tree is not None
        got = catalog.run(tree)
    finally:
        catalog.close()
    assert got.names == names
    assert got.rows == [("o'brien",) * len(names)]


def test_postgresql_spellings_the_shadow_lacks() -> None:
    """format_type as PostgreSQL names types, json_build_object, current_setting from the
    session, three-part column names in correlated subqueries, PostgreSQL 15's catalog
    columns: what SQLAlchemy's reflection sends (its end-to-end test is in test_clients)."""
    md = loads_metadata(
        "tables:\n  t:\n    columns:\n"
        "      a: {type: INTEGER, bounds: [0, 1]}\n      b: {type: 'DECIMAL(15,2)'}\n"
        "      c: {type: DOUBLE}\n      d: {type: VARCHAR}\n      e: {type: TIMESTAMP}\n")
    catalog = Catalog(md, ["t"], "alice")

    def run(sql: str, settings: dict[str, str] | None = None) -> list[tuple]:
        tree = parse_postgres(sql)
        assert tree is not None
        return catalog.run(tree, settings).rows

    try:
        assert run("SELECT attname, pg_catalog.format_type(atttypid, atttypmod) "
                   "FROM pg_catalog.pg_attribute WHERE attrelid = 't'::regclass "
                   "ORDER BY attnum") == [
            ("a", "integer"), ("b", "numeric(15,2)"), ("c", "double precision"),
            ("d", "character varying"), ("e", "timestamp without time zone")]
        assert run("SELECT json_build_object('k', 1)") == [('{"k":1}',)]
        assert run("SELECT current_setting('extra_float_digits')",
                   {"extra_float_digits": "3"}) == [("3",)]
        assert run("SELECT (SELECT count(*) FROM pg_catalog.pg_collation JOIN "
                   "pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = "
                   "pg_catalog.pg_collation.collnamespace WHERE pg_catalog.pg_collation.oid = "
                   "pg_catalog.pg_class.oid) FROM pg_catalog.pg_class "
                   "WHERE pg_catalog.pg_class.relname = 't'") == [(0,)]
        assert run("SELECT count(*) FROM pg_catalog.pg_index WHERE indnullsnotdistinct") \
            == [(0,)]
        assert run("SELECT count(*) FROM pg_catalog.pg_opclass") == [(0,)]
        assert run("SELECT count(*) FROM pg_catalog.pg_sequence") == [(0,)]
    finally:
        catalog.close()
