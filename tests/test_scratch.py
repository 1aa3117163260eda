"""dpsql.scratch: one in-memory DuckDB per process, a connection of its own per caller."""

from __future__ import annotations

import threading

import duckdb
import numpy as np
import pytest

from dpsql.scratch import scratch_cursor


def test_each_caller_sees_only_its_own_tables_and_views():
    first, second = scratch_cursor(), scratch_cursor()
    try:
        first.execute("CREATE TEMP TABLE released AS SELECT 41 AS n")
        first.register("noisy", {"v": np.array([1.5])})
        assert first.execute("SELECT n FROM released").fetchall() == [(41,)]
        assert first.execute("SELECT v FROM noisy").fetchall() == [(1.5,)]
        for name in ("released", "noisy"):  # another session's connection: no such table
            with pytest.raises(duckdb.CatalogException):
                second.execute(f"SELECT * FROM {name}").fetchall()
    finally:
        first.close()
        second.close()
    again = scratch_cursor()  # a closed connection's temporary tables went with it
    try:
        with pytest.raises(duckdb.CatalogException):
            again.execute("SELECT * FROM released").fetchall()
    finally:
        again.close()


def test_it_reads_no_file_nor_python_variable_and_its_configuration_is_locked(tmp_path):
    (tmp_path / "secret.csv").write_text("a\n1\n")
    exact_counts = np.array([41, 7])  # a caller's local: DuckDB would scan it by name
    con = scratch_cursor()
    try:
        assert exact_counts.sum() == 48
        with pytest.raises(duckdb.CatalogException):
            con.execute("SELECT * FROM exact_counts").fetchall()
        with pytest.raises(duckdb.Error):
            con.execute(f"SELECT * FROM read_csv('{tmp_path / 'secret.csv'}')").fetchall()
        with pytest.raises(duckdb.Error):
            con.execute("SET enable_external_access=true")
    finally:
        con.close()


def test_threads_share_one_instance():
    seen: list[object] = []

    def work() -> None:
        con = scratch_cursor()
        try:
            seen.append(con.execute("SELECT 1 + 1").fetchone())
        finally:
            con.close()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [(2,)] * 4
