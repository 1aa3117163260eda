"""Run a test module against every execution backend (not a test module).

``make_backend(database, metadata)`` (the ``make_backend`` fixture in ``tests/conftest.py``)
returns a real backend over the DuckDB file ``database``: the DuckDB backend itself, or the
Spark backend over the same tables written to Parquet (metadata ``source`` paths), so a
parametrised test sees the same data through both. ``recording=True`` returns a subclass that
records every SQL text it is asked to run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.metadata import Metadata
from tests.db_files import reading


def with_sources(metadata: Metadata, sources: dict[str, str]) -> Metadata:
    """``metadata`` with the ``source`` of each table in ``sources`` set (the analysis ignores
    sources, so an engine may keep the original metadata)."""
    tables = {name: dataclasses.replace(t, source=sources.get(name, t.source))
              for name, t in metadata.tables.items()}
    return dataclasses.replace(metadata, tables=tables)


def export_parquet(database: Path, folder: Path) -> dict[str, str]:
    """Write every table of the DuckDB file ``database`` to ``folder/<table>.parquet``."""
    folder.mkdir(parents=True, exist_ok=True)
    # Attached to the tests' own instance: a dpsql backend may hold the file's, locked down.
    with reading(database) as con:
        names = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
        ).fetchall()]
        sources = {}
        for name in names:
            path = folder / f"{name}.parquet"
            con.execute(f"COPY \"{name}\" TO '{path}' (FORMAT parquet)")
            sources[name] = str(path)
    return sources


class Recording:
    """Mixin: record every SQL text ``execute`` or ``execute_columns`` is asked to run, then
    run it for real."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.executed: list[str] = []
        self._nested = False  # Spark's execute_columns calls execute: record it once

    def execute(self, sql, params=None):
        if not self._nested:
            self.executed.append(sql)
        return super().execute(sql, params)

    def execute_columns(self, sql, params=None):
        self.executed.append(sql)
        self._nested = True
        try:
            return super().execute_columns(sql, params)
        finally:
            self._nested = False


class RecordingDuckDBBackend(Recording, DuckDBBackend):
    """The real DuckDB backend, recording its SQL."""


def spark_backend_class(recording: bool):
    from dpsql.backends.spark import SparkBackend

    if not recording:
        return SparkBackend

    class RecordingSparkBackend(Recording, SparkBackend):
        """The real Spark backend, recording its SQL."""

    return RecordingSparkBackend
