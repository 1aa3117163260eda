"""dpsql/backends/__init__.py: the ledger identity (whose budget) and the data version (which
answers the cache may serve), both computed from public facts: paths, file stats, metadata."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

from dpsql.backends import data_version, ledger_identity
from dpsql.metadata import loads_metadata


def metadata(folder: Path, sources: dict[str, str | None], version: str | None = None):
    """Metadata in ``folder`` declaring one table per entry (None: no source)."""
    lines = [f"data_version: {version}"] if version else []
    lines.append("tables:")
    for name, source in sources.items():
        lines += [f"  {name}:", *([f"    source: {source}"] if source else []),
                  "    columns:", "      a: {max_freq: 1}"]
    return loads_metadata("\n".join(lines) + "\n", folder / "m.yaml")


def test_ledger_identity_of_files_spark_and_sources(tmp_path):
    a = metadata(tmp_path, {"t": "a.csv"})
    b = metadata(tmp_path, {"t": "b.csv"})
    # in memory: keyed by the sources, so different files never share a budget
    assert ledger_identity("duckdb", None, a) != ledger_identity("duckdb", None, b)
    assert ledger_identity("duckdb", ":memory:", a) == ledger_identity("duckdb", None, a)
    assert ledger_identity("duckdb", None, a).startswith("sources:")
    assert str(tmp_path / "a.csv") in ledger_identity("duckdb", None, a)
    # the same files (other table names, other order) are the same data: one budget
    both = metadata(tmp_path, {"x": "a.csv", "y": "b.csv"})
    swapped = metadata(tmp_path, {"y": "b.csv", "x": "a.csv", "z": "./a.csv"})
    assert ledger_identity("duckdb", None, both) == ledger_identity("duckdb", None, swapped)
    # a database file keys by its real path; no metadata or no sources: ':memory:' as before
    os.symlink(tmp_path / "db.duckdb", tmp_path / "alias.duckdb")
    assert (ledger_identity("duckdb", tmp_path / "alias.duckdb", a)
            == os.path.realpath(tmp_path / "db.duckdb"))
    assert ledger_identity("duckdb", None) == ":memory:"
    assert ledger_identity("duckdb", None, loads_metadata(
        "tables: {t: {columns: {a: {}}}}")) == ":memory:"
    assert ledger_identity("spark", None, a) == "spark://default"
    assert ledger_identity("spark", "sales", a) == "spark://sales"


def test_data_version_follows_the_database_file(tmp_path):
    db = tmp_path / "d.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT 1 AS a")
    con.close()
    md = metadata(tmp_path, {"t": None})
    first = data_version("duckdb", db, md)
    assert first == data_version("duckdb", str(db), md)  # stable while nothing changes
    con = duckdb.connect(str(db))
    con.execute("UPDATE t SET a = 2")
    con.close()
    assert data_version("duckdb", db, md) != first


def test_data_version_follows_sources_and_the_owner_label(tmp_path):
    for name in ("p1.csv", "p2.csv"):
        (tmp_path / name).write_text("a\n1\n")
    md = metadata(tmp_path, {"t": "p*.csv"})
    first = data_version("duckdb", None, md)
    # rewriting one file of a glob changes the version (size and mtime)
    (tmp_path / "p2.csv").write_text("a\n1\n2\n")
    second = data_version("duckdb", None, md)
    assert second != first
    # a new file matching the glob too
    (tmp_path / "p3.csv").write_text("a\n1\n2\n")
    third = data_version("duckdb", None, md)
    assert third != second
    # the owner's label counts as well (both count: neither replaces the other)
    assert data_version("duckdb", None, metadata(tmp_path, {"t": "p*.csv"}, "2")) != third


def test_spark_data_version_is_the_catalog_and_the_label(tmp_path):
    md = metadata(tmp_path, {"t": None})
    assert data_version("spark", "sales", md) == data_version("spark", "spark://sales", md)
    assert data_version("spark", "sales", md) != data_version("spark", "other", md)
    assert (data_version("spark", "sales", metadata(tmp_path, {"t": None}, "1"))
            != data_version("spark", "sales", metadata(tmp_path, {"t": None}, "2")))


@pytest.mark.parametrize("source", ["s3://bucket/t.parquet", "missing.csv"])
def test_unstattable_sources_do_not_fail(tmp_path, source):
    md = metadata(tmp_path, {"t": source})
    assert len(data_version("duckdb", None, md)) == 64
