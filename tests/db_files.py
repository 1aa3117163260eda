"""Writing the tests' small DuckDB database files through one open instance (not a test module).

The suite writes hundreds of tiny database files; :func:`writing` and :func:`reading` open
each through the process's file instance (:mod:`dpsql.duckdb_files`, which the privacy audit
uses for its neighbours): ~4 ms a file instead of ~27 ms for an instance of its own. The
connection's default database is the file, so ``CREATE TABLE t ...`` writes into it exactly as
through ``duckdb.connect(path)``; on leaving, the file is detached, and dpsql opens it as any.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

from dpsql.duckdb_files import opened


@contextmanager
def writing(path: str | os.PathLike) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the DuckDB file ``path`` (created if missing),
    detached on exit. Do not close it."""
    with opened(path) as con:
        yield con


@contextmanager
def reading(path: str | os.PathLike) -> Iterator[duckdb.DuckDBPyConnection]:
    """:func:`writing`, the file attached read-only."""
    with opened(path, read_only=True) as con:
        yield con


#: rows per INSERT of :func:`insert_many` (a statement's parameters stay in the thousands)
INSERT_ROWS = 500


def insert_many(con: Any, table: str, rows: Sequence[Sequence[Any]]) -> None:
    """Insert ``rows`` into ``table`` as ``executemany("INSERT INTO table VALUES (?, ...)")``
    would, in one multi-row ``VALUES`` statement per :data:`INSERT_ROWS` rows: the same
    parameters, each cast to its column's type as one row's would be (NaN, infinities, -0.0,
    NULL, integers past 2^53 into DOUBLE, strings into DATE: the stored values are identical),
    the rows stored in the order given. DuckDB's executemany runs the statement once per row:
    ~0.3 ms a row, where one statement of 10 rows takes ~0.14 ms in all."""
    rows = [list(r) for r in rows]
    for start in range(0, len(rows), INSERT_ROWS):
        chunk = rows[start:start + INSERT_ROWS]
        marks = ", ".join(["(" + ", ".join("?" * len(chunk[0])) + ")"] * len(chunk))
        con.execute(f"INSERT INTO {table} VALUES {marks}", [v for r in chunk for v in r])


def create_tables(con: Any, schema: Mapping[str, Sequence[str]],
                  db: Mapping[str, Sequence[Sequence[Any]]]) -> None:
    """Each table of ``schema`` (table -> "column TYPE" declarations) created or replaced on
    ``con`` and filled with ``db``'s rows for it (none when absent)."""
    for table, columns in schema.items():
        con.execute(f"CREATE OR REPLACE TABLE {table} ({', '.join(columns)})")
        rows = db.get(table, [])
        if rows:
            insert_many(con, table, rows)
