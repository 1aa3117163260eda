"""Neighbouring DuckDB databases and the outcome an analyst sees (not a test module).

``neighbour_pair`` writes two database files from one schema that differ in ONE row of one
table (``extra`` is present in the second only). ``outcome`` runs a query through a real Session
(zero noise) and returns what the analyst sees: ``("ok", rows)`` or ``(error class, message)``.
A privacy rule holds for a query when both databases give the same error, or both succeed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import Error
from dpsql.metadata import Metadata
from dpsql.session import Session
from tests.db_files import cached_backend, insert_many, writing
from tests.shop_fixture import ZeroNoise

Rows = dict[str, Sequence[tuple[Any, ...]]]


def write_database(path: Path, schema: Sequence[str], rows: Rows) -> Path:
    with writing(path) as con:
        for statement in schema:
            con.execute(statement)
        for table, values in rows.items():
            if values:  # parameters, not literals: NaN, infinity and NULL insert as values
                insert_many(con, table, values)
    return path


def neighbour_pair(folder: Path, schema: Sequence[str], rows: Rows,
                   extra: tuple[str, tuple[Any, ...]]) -> tuple[Path, Path]:
    """Two databases: ``rows``, and ``rows`` plus the one row ``extra = (table, row)``."""
    table, row = extra
    with_row = {t: list(v) for t, v in rows.items()}
    with_row.setdefault(table, []).append(row)
    return (write_database(folder / "without.duckdb", schema, rows),
            write_database(folder / "with.duckdb", schema, with_row))


def engine(path: Path, metadata: Metadata) -> Session:
    return Session(metadata, DuckDBBackend(path, metadata), sampler=ZeroNoise())


def cached_engine(path: Path, metadata: Metadata) -> Session:
    """A new Session (zero noise) over the file's cached backend
    (tests.db_files.cached_backend): for helpers that ask many queries of a few files."""
    return Session(metadata, cached_backend(path, metadata), sampler=ZeroNoise())


def outcome(path: Path, metadata: Metadata, sql: str, params: Sequence[Any] = (), *,
            epsilon: float = 1.0, delta: float = 1e-6) -> tuple[str, Any]:
    """What an analyst sees for ``sql`` on ``path``: ("ok", rows) or (class, message); a
    new Session each time, over the file's cached backend (tests.db_files.cached_backend)."""
    try:
        result = cached_engine(path, metadata).run(sql, list(params), epsilon=epsilon, delta=delta)
    except Error as err:
        return type(err).__name__, str(err)
    return "ok", result.rows


def same_outcome(pair: tuple[Path, Path], metadata: Metadata, sql: str,
                 params: Sequence[Any] = (), **kwargs: Any) -> tuple[tuple[str, Any], ...]:
    """Both outcomes, asserting they are the same class (and message, for errors)."""
    a, b = (outcome(p, metadata, sql, params, **kwargs) for p in pair)
    if a[0] == "ok" or b[0] == "ok":
        assert a[0] == b[0], f"{sql!r}: {a} vs {b}"
    else:
        assert a == b, f"{sql!r}: {a} vs {b}"
    return a, b
