"""dpsql.duckdb_files: database files opened through one DuckDB instance of the process."""

from __future__ import annotations

import duckdb
import pytest

from dpsql.duckdb_files import opened


def _attached(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("SELECT database_name FROM duckdb_databases() "
                                      "WHERE NOT internal").fetchall()]


def test_statements_write_the_file_which_is_closed_on_leaving(tmp_path):
    path = tmp_path / "a.duckdb"
    with opened(path) as con:
        con.execute("CREATE TABLE t AS SELECT range AS x FROM range(5)")
        con.execute("INSERT INTO t VALUES (7)")
        assert con.execute("SELECT current_database()").fetchone()[0].startswith("__file_db_")
    with opened(path) as con:
        current = con.execute("SELECT current_database()").fetchone()[0]
        assert sorted(_attached(con)) == sorted(["memory", current])  # the first one went
    # detached: an instance of its own opens it read-write (no lock is held)
    with duckdb.connect(str(path)) as plain:
        assert plain.execute("SELECT sum(x), count(*) FROM t").fetchone() == (17, 6)


def test_read_only_refuses_writes_and_two_files_open_at_once_stay_apart(tmp_path):
    for name, n in (("a", 3), ("b", 4)):
        with opened(tmp_path / f"{name}.duckdb") as con:
            con.execute(f"CREATE TABLE t AS SELECT range AS x FROM range({n})")
    with opened(tmp_path / "a.duckdb", read_only=True) as a, \
            opened(tmp_path / "b.duckdb", read_only=True) as b:
        assert a.execute("SELECT count(*) FROM t").fetchone() == (3,)
        assert b.execute("SELECT count(*) FROM t").fetchone() == (4,)
        with pytest.raises(duckdb.Error, match=r"(?i)read.only"):
            a.execute("DELETE FROM t")


def test_an_error_inside_still_detaches(tmp_path):
    path = tmp_path / "a.duckdb"
    with pytest.raises(duckdb.Error), opened(path) as con:
        con.execute("SELECT * FROM missing")
    with duckdb.connect(str(path)) as plain:  # not held open by the audit's instance
        plain.execute("CREATE TABLE t (x INTEGER)")
