"""Red team (issue #15): public-table domains registered once per connection
(dpsql.backends.duckdb.DuckDBBackend.domain_table, dpsql.execute.exact.DomainMemo).

A registered domain table must (a) be unreachable from analyst SQL, (b) hold what the query's
own DISTINCT scan would read, for as long as it is used, and (c) never make a refusal or an
error depend on private data. Attacks tried on a real DuckDB file (all held):

* naming, shadowing or reading the registered table: quoted and upper-case names, the temp
  catalog (``temp.x``, ``temp.main.x``), ``query_table('x')`` / ``query('...')``, the catalogs
  (``duckdb_tables()``, ``information_schema.tables``, ``pragma_table_info``, ``SHOW``), in
  FROM, in a subquery and in HAVING, before and after the registration;
* a declared source view hiding a base table of the same name: no registration (the view may
  change), the bins are the view's values, as the exact query reads the view;
* the file replaced while a connection is open: that connection keeps reading the old file for
  both its bins and its registered domain (consistent), a new connection registers the new
  values and has a new data version (the answer-cache key);
* a second metadata on the same backend (another session, other narrowings): the memo is per
  session, the registered table is a function of the database's column alone.
"""

from __future__ import annotations

import os

import pytest

from dpsql.backends import data_version
from dpsql.backends.duckdb import DuckDBBackend, domain_table_name
from dpsql.errors import Error
from dpsql.metadata import loads_metadata
from dpsql.session import Session
from tests.db_files import writing
from tests.shop_fixture import ZeroNoise

METADATA = """
tables:
  orders:
    columns:
      id: {max_freq: 1, type: BIGINT}
      tag: {max_freq: 100, releasable: true, domain: {table: tags, column: tag}, type: VARCHAR}
  tags:
    public: true
    columns:
      tag: {max_freq: 2, type: VARCHAR}
"""

QUERY = "SELECT o.tag, COUNT(*) AS n FROM orders o GROUP BY o.tag"


def _write(path, tags: list[str]) -> None:
    with writing(path) as con:
        con.execute("CREATE OR REPLACE TABLE tags (tag VARCHAR)")
        con.executemany("INSERT INTO tags VALUES (?)", [[t] for t in tags])
        con.execute("CREATE OR REPLACE TABLE orders AS SELECT range AS id, "
                    "CASE range % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' ELSE 'z' END AS tag "
                    "FROM range(30)")


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "d.duckdb"
    _write(path, ["a", "b", "c"])
    return path


def _session(backend, md=None):
    return Session(md or loads_metadata(METADATA), backend, sampler=ZeroNoise())


NAME = domain_table_name("tags", "tag")


@pytest.mark.parametrize("sql", [
    f'SELECT COUNT(*) FROM "{NAME}"',
    f'SELECT COUNT(*) FROM "{NAME.upper()}"',
    f"SELECT COUNT(*) FROM temp.{NAME}",
    f'SELECT COUNT(*) FROM temp.main."{NAME}"',
    f"SELECT COUNT(*) FROM query_table('{NAME}')",
    f"SELECT COUNT(*) FROM query('SELECT * FROM {NAME}')",
    "SELECT COUNT(*) FROM duckdb_tables()",
    "SELECT COUNT(*) FROM information_schema.tables",
    f"SELECT COUNT(*) FROM pragma_table_info('{NAME}')",
    "SHOW TABLES",
    f"SELECT o.tag, COUNT(*) AS n FROM orders o WHERE o.tag IN (SELECT __v FROM {NAME}) "
    "GROUP BY o.tag",
    f"SELECT o.tag, COUNT(*) AS n FROM orders o GROUP BY o.tag "
    f"HAVING COUNT(*) > (SELECT COUNT(*) FROM {NAME})",
    "SELECT COUNT(*) FROM temp.tags",
    "SELECT COUNT(*) FROM temp.main.tags",
])
def test_analyst_sql_cannot_reach_the_registered_table(db, sql):
    backend = DuckDBBackend(db, loads_metadata(METADATA))
    try:
        session = _session(backend)
        with pytest.raises(Error):
            session.run(sql, epsilon=1.0, delta=1e-6)
        assert session.run(QUERY, epsilon=1.0, delta=1e-6).rows  # registers it
        assert backend.domain_table("tags", "tag") == NAME
        with pytest.raises(Error):
            session.run(sql, epsilon=1.0, delta=1e-6)
    finally:
        backend.close()


def test_a_source_view_hiding_a_base_table_is_not_registered(db, tmp_path):
    # the file holds a base table tags (a, b, c); the metadata declares tags as a CSV (b, z):
    # the engine's temp view hides the base table, so the bins must be the CSV's
    csv = tmp_path / "tags.csv"
    csv.write_text("tag\nb\nz\n")
    md = loads_metadata(METADATA.replace("    public: true\n",
                                         f"    public: true\n    source: {csv}\n"))
    backend = DuckDBBackend(db, md)
    try:
        assert backend.domain_table("tags", "tag") is None
        rows = _session(backend, md).run(QUERY, epsilon=1e9, delta=1e-6).rows
        assert sorted(rows) == [("b", 10), ("z", 10)]
    finally:
        backend.close()


def test_a_replaced_file_is_not_mixed_with_the_registered_domain(db, tmp_path):
    md = loads_metadata(METADATA)
    backend = DuckDBBackend(db, md)
    try:
        before = data_version("duckdb", db, md)
        session = _session(backend, md)
        first = sorted(session.run(QUERY, epsilon=1e9, delta=1e-6).rows)
        assert first == [("a", 10), ("b", 10), ("c", 0)]
        fresh = tmp_path / "new.duckdb"
        _write(fresh, ["a", "z"])
        os.replace(fresh, db)  # the owner swaps the file while the connection is open
        # this connection still reads the old file: bins and registered domain agree
        session._prepared.clear()
        assert sorted(session.run(QUERY, epsilon=1e9, delta=1e-6).rows) == first
        assert data_version("duckdb", db, md) != before  # a new connection's cache key
    finally:
        backend.close()
    backend = DuckDBBackend(db, md)
    try:
        rows = sorted(_session(backend, md).run(QUERY, epsilon=1e9, delta=1e-6).rows)
        assert rows == [("a", 10), ("z", 10)]
    finally:
        backend.close()


def test_two_metadata_on_one_backend_each_get_their_own_domain(db):
    md = loads_metadata(METADATA)
    narrowed = "SELECT o.tag, COUNT(*) AS n FROM orders o WHERE o.tag <> 'a' GROUP BY o.tag"
    listed = loads_metadata(METADATA.replace("domain: {table: tags, column: tag}",
                                             "domain: {values: [b, z]}"))
    backend = DuckDBBackend(db, md)
    try:
        one, two = _session(backend, md), _session(backend, listed)
        assert sorted(one.run(QUERY, epsilon=1e9, delta=1e-6).rows) == [
            ("a", 10), ("b", 10), ("c", 0)]
        assert sorted(two.run(QUERY, epsilon=1e9, delta=1e-6).rows) == [("b", 10), ("z", 10)]
        assert sorted(one.run(narrowed, epsilon=1e9, delta=1e-6).rows) == [("b", 10), ("c", 0)]
        assert sorted(two.run(narrowed, epsilon=1e9, delta=1e-6).rows) == [("b", 10), ("z", 10)]
    finally:
        backend.close()
