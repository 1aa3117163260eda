"""The server's shadow databases (dpsql/server/shadow.py): one instance per analyst and grant,
shared by that analyst's connections, each connection's queries and interrupts its own."""

from __future__ import annotations

import threading
import time

import duckdb
import pytest

from dpsql.accounting.analysts import AnalystAccount
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import Error
from dpsql.metadata import loads_metadata
from dpsql.server.catalog import (
    Catalog,
    parse_postgres,
    shadow_sql,
    shadow_sql_of_text,
)
from dpsql.server.shadow import Shadows
from dpsql.server.statements import StatementRunner
from dpsql.session import Session
from tests.shop_fixture import ANY_MAX_FREQ, build_shop, shop_metadata_yaml

TABLES = "SELECT table_name FROM information_schema.tables ORDER BY table_name"
USER = "SELECT pg_get_userbyid(10), current_user"


@pytest.fixture
def shadows():
    pool = Shadows(loads_metadata(shop_metadata_yaml(ANY_MAX_FREQ)))
    yield pool
    pool.close()


def _run(catalog: Catalog, sql: str) -> list[tuple]:
    tree = parse_postgres(sql)
    assert tree is not None
    return catalog.run(tree).rows


def test_an_analysts_connections_share_one_instance_and_see_their_grant(shadows):
    metadata = shadows._metadata
    first = Catalog(metadata, ["orders", "products"], "bob", shadows)
    second = Catalog(metadata, ["orders", "products"], "bob", shadows)
    try:
        assert len(shadows._instances) == 1
        assert _run(first, TABLES) == _run(second, TABLES) == [("orders",), ("products",)]
        assert _run(second, "SELECT COUNT(*) FROM orders") == [(0,)]
    finally:
        first.close()
    # one connection closing leaves the instance and the analyst's other connections
    assert _run(second, USER) == [("bob", "bob")]
    second.close()


def test_analysts_and_grants_never_share_an_instance(shadows):
    metadata = shadows._metadata
    bob = Catalog(metadata, ["orders"], "bob", shadows)
    ann = Catalog(metadata, ["products"], "ann", shadows)
    bob_more = Catalog(metadata, ["orders", "customers"], "bob", shadows)
    try:
        assert len(shadows._instances) == 3
        assert _run(bob, TABLES) == [("orders",)]
        assert _run(ann, TABLES) == [("products",)]
        assert _run(bob_more, TABLES) == [("customers",), ("orders",)]
        assert _run(bob, USER) == [("bob", "bob")]
        assert _run(ann, USER) == [("ann", "ann")]
    finally:
        for catalog in (bob, ann, bob_more):
            catalog.close()


def test_the_shared_instance_is_locked_and_reads_no_files(shadows):
    catalog = Catalog(shadows._metadata, ["orders"], "bob", shadows)
    try:
        with pytest.raises(duckdb.Error, match=r"(?i)lock"):
            catalog.run_sql("SET threads = 4")
        with pytest.raises(duckdb.Error, match=r"(?i)external|disabled|permission"):
            catalog.run_sql("SELECT * FROM read_csv('/etc/passwd')")
    finally:
        catalog.close()


def test_an_interrupt_stops_only_its_own_connections_query(shadows):
    busy = Catalog(shadows._metadata, ["orders"], "bob", shadows)
    quiet = Catalog(shadows._metadata, ["orders"], "bob", shadows)
    outcome: list[str] = []

    def run_long() -> None:
        try:
            busy.run_sql("SELECT sum(hash(range)) FROM range(400000000)")
            outcome.append("finished")
        except duckdb.InterruptException:
            outcome.append("interrupted")

    try:
        worker = threading.Thread(target=run_long)
        worker.start()
        time.sleep(0.2)
        quiet.interrupt()  # another connection's cancel: the long query goes on
        time.sleep(0.2)
        assert outcome == []
        while worker.is_alive():  # again until it lands: a loaded machine may start it late
            busy.interrupt()
            worker.join(timeout=0.05)
        assert outcome == ["interrupted"]
        assert _run(quiet, "SELECT 1") == [(1,)]
    finally:
        busy.close()
        quiet.close()


@pytest.mark.parametrize("sql", [
    "SELECT current_user, version()",
    "SELECT current_setting('search_path'), c.relname FROM pg_catalog.pg_class c "
    "WHERE c.oid = 'orders'::regclass",
])
def test_the_memoised_shadow_sql_is_the_rewrite_of_the_text(sql):
    settings = {"search_path": "main", "application_name": "psql"}
    items = tuple(sorted(settings.items()))
    tree = parse_postgres(sql)
    assert tree is not None
    for user in ("bob", "o'brien"):
        assert shadow_sql_of_text(sql, user, items) == shadow_sql(tree, user, settings)
    assert shadow_sql_of_text(sql, "bob", items) != shadow_sql_of_text(sql, "ann", items) \
        or "current_user" not in sql


@pytest.mark.parametrize("sql", [
    "SELECT 1 INTO pg_leak",
    "SELECT relname INTO TEMP pg_leak FROM pg_class",
    "WITH pg_x AS (INSERT INTO pg_y VALUES (1) RETURNING 1) SELECT * FROM pg_x",
])
def test_a_write_to_the_shadow_is_refused_and_changes_nothing(tmp_path, sql):
    shop = build_shop(tmp_path / "shop.duckdb")
    metadata = shop.metadata()
    pool = Shadows(metadata)
    account = AnalystAccount("bob", None, None, None, None, None)
    runners = [StatementRunner(Session(metadata, DuckDBBackend(shop.path, metadata)), account,
                               "bob", pool) for _ in range(2)]
    try:
        before = runners[1].answer(TABLES).rows
        with pytest.raises(Error):
            runners[0].answer(sql)
        assert runners[1].answer(TABLES).rows == before
        assert ("pg_leak",) not in before
    finally:
        for runner in runners:
            runner.close()
            runner.session.backend.close()
        pool.close()
