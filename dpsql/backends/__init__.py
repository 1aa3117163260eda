"""Execution backends behind one protocol (:class:`.base.Backend`), opened by one function."""

from __future__ import annotations

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


def ledger_identity(backend: str, database: str | os.PathLike | None) -> str:
    """The key the ledger keeps this database's budgets and cached answers under."""
    if backend == "spark":
        return f"spark://{spark_database(database) or 'default'}"
    from dpsql.accounting import database_identity

    return database_identity(database)
