"""dpsql.backends.spark_sources: a source file's schema is inferred once per file version, and a
changed file is read afresh."""

from __future__ import annotations

import os

import duckdb
import pytest

from dpsql.backends import spark_sources
from dpsql.backends.spark_sources import _version, read_source

pytestmark = pytest.mark.spark


def _write(path, select: str) -> None:
    fmt = "parquet" if str(path).endswith(".parquet") else "csv, HEADER"
    duckdb.sql(f"COPY ({select}) TO '{path}' (FORMAT {fmt})")


def _kept(path) -> list[tuple]:
    return [k for k in spark_sources._SCHEMAS if k[1] == os.path.abspath(path)]


@pytest.mark.parametrize("name", ["t.parquet", "t.csv"])
def test_the_schema_is_read_once_per_file_version(spark, tmp_path, name):
    path = tmp_path / name
    _write(path, "SELECT range AS a, 'x' || range AS b FROM range(3)")
    first = read_source(spark, str(path), parquet=name.endswith("parquet"))
    assert len(_kept(path)) == 1
    again = read_source(spark, str(path), parquet=name.endswith("parquet"))
    assert len(_kept(path)) == 1
    assert again.schema == first.schema
    assert sorted(again.collect()) == sorted(first.collect())
    # Parquet says BIGINT; CSV inference guesses INT for small integers (as before the cache)
    want = "bigint" if name.endswith("parquet") else "int"
    assert [f.dataType.simpleString() for f in first.schema.fields] == [want, "string"]


@pytest.mark.parametrize("name", ["t.parquet", "t.csv"])
def test_a_rewritten_file_is_read_afresh(spark, tmp_path, name):
    path = tmp_path / name
    _write(path, "SELECT range AS a FROM range(3)")
    before = read_source(spark, str(path), parquet=name.endswith("parquet"))
    _write(path, "SELECT range * 0.5 AS a, range AS c FROM range(4)")
    after = read_source(spark, str(path), parquet=name.endswith("parquet"))
    assert [f.name for f in before.schema.fields] == ["a"]
    assert [f.name for f in after.schema.fields] == ["a", "c"]
    assert after.schema.fields[0].dataType.simpleString().startswith(("decimal", "double"))
    assert len(after.collect()) == 4


def test_only_a_single_local_file_is_remembered(tmp_path):
    path = tmp_path / "t.parquet"
    _write(path, "SELECT 1 AS a")
    assert _version(str(path)) is not None
    assert _version(str(tmp_path / "*.parquet")) is None
    assert _version(str(tmp_path)) is None  # a folder
    assert _version("s3://bucket/t.parquet") is None
    assert _version(str(tmp_path / "missing.parquet")) is None
