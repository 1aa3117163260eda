"""Execution backends behind one protocol (:class:`.base.Backend`), opened by one function."""

from __future__ import annotations

import glob
import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

from dpsql.errors import ProgrammingError

if TYPE_CHECKING:
    from dpsql.backends.base import Backend
    from dpsql.metadata import Metadata

BACKENDS = ("duckdb", "spark")


def spark_database(database: str | os.PathLike | None) -> str | None:
    """The Spark catalog database named by ``database`` (``name`` or ``spark://name``)."""
    if database is None:
        return None
    return os.fsdecode(database).removeprefix("spark://") or None


def open_backend(backend: str, database: str | os.PathLike | None, metadata: Metadata | None,
                 spark: Any = None) -> Backend:
    """The execution backend named ``backend``: DuckDB over the file ``database`` (None or
    ":memory:": the metadata's sources only), or Spark (``spark``: a SparkSession or master
    URL; ``database``: the catalog database). Every caller (driver, shell, owner tools) opens
    backends here. Raises ProgrammingError for an unknown backend or mismatched arguments."""
    if backend == "duckdb":
        if spark is not None:
            raise ProgrammingError("spark= is only used with backend='spark'")
        from dpsql.backends.duckdb import DuckDBBackend

        return DuckDBBackend(database, metadata)
    if backend == "spark":
        if spark is None:
            raise ProgrammingError(
                "backend='spark' needs spark=: a SparkSession or a master URL such as 'local[2]'"
            )
        from dpsql.backends.spark import SparkBackend  # optional extra: import on demand

        return SparkBackend(metadata, spark, database=spark_database(database))
    raise ProgrammingError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")


def _in_memory(database: str | os.PathLike | None) -> bool:
    if database is None:
        return True
    text = os.fsdecode(database)
    return text == "" or text.startswith(":memory:")


def _real(path: str) -> str:
    """An absolute, symlink-free spelling of a local path (URLs are kept as written)."""
    return path if "://" in path else os.path.realpath(os.path.expanduser(path))


def ledger_identity(backend: str, database: str | os.PathLike | None,
                    metadata: Metadata | None = None) -> str:
    """The key the ledger keeps this database's budgets and cached answers under.

    Guarantee: Spark: ``spark://DATABASE`` (``spark://default`` for None). DuckDB over a file:
    the file's real path (:func:`dpsql.accounting.database_identity`). DuckDB in memory
    (None, "" or ":memory:") over tables backed by ``source:`` files: ``sources:`` and the JSON
    list of the sources' real paths (sorted, without repeats), so metadata files over different
    files keep different budgets, and two over the same files (the same data) share one.
    In memory without sources (or without ``metadata``): ``:memory:``.
    Every caller that charges or sets budgets keys them here (``dpsql budget`` included).
    """
    if backend == "spark":
        return f"spark://{spark_database(database) or 'default'}"
    from dpsql.accounting import database_identity

    if _in_memory(database) and metadata is not None:
        sources = sorted({_real(t.source) for t in metadata.tables.values() if t.source})
        if sources:
            return "sources:" + json.dumps(sources, ensure_ascii=False, separators=(",", ":"))
    return database_identity(database)


def _file_version(path: str) -> list[object]:
    """What changes when a file is rewritten: device, inode, size, modification and change
    times (ns; the change time also moves when a copy restores an old modification time)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return [path, "unreadable", type(exc).__name__]
    return [path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _source_versions(source: str) -> list[object]:
    if "://" in source:
        return [source, "remote"]  # only the owner's data_version tracks it
    real = _real(source)
    matches = sorted(glob.glob(real)) if any(c in real for c in "*?[") else [real]
    return [source, [_file_version(p) for p in matches]]


def data_version(backend: str, database: str | os.PathLike | None,
                 metadata: Metadata) -> str:
    """The version of the data a connection reads (hex SHA-256): one part of the answer-cache
    key, computed once per connection (after the backend has opened the data).

    It covers, together: the owner's ``data_version:`` label from the metadata (if any); for
    DuckDB, the database file's (and its write-ahead log's) identity and content version
    (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns); for Spark, the catalog database's
    name; and the same file version of every file each ``source:`` names (globs expanded).
    A change to any
    of them changes the version, so an answer cached before the change is never served after
    it. Neither the label nor the files "win": both count. What no file version can see (Spark
    catalog tables, remote sources) changes the version only when the owner bumps
    ``data_version:``.
    """
    parts: dict[str, object] = {"owner": metadata.data_version}
    if backend == "spark":
        parts["catalog"] = spark_database(database) or "default"
    elif database is not None and not _in_memory(database):
        path = _real(os.fsdecode(database))
        wal = path + ".wal"
        parts["database"] = [_file_version(path)] + (
            [_file_version(wal)] if os.path.exists(wal) else [])
    parts["sources"] = [[t.name, _source_versions(t.source)]
                        for t in sorted(metadata.tables.values(), key=lambda t: t.name)
                        if t.source]
    text = json.dumps(parts, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()
