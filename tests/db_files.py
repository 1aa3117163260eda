"""Writing the tests' small DuckDB database files through one open instance (not a test module).

The suite writes hundreds of tiny database files; :func:`writing` and :func:`reading` open
each through the process's file instance (:mod:`dpsql.duckdb_files`, which the privacy audit
uses for its neighbours): ~4 ms a file instead of ~27 ms for an instance of its own. The
connection's default database is the file, so ``CREATE TABLE t ...`` writes into it exactly as
through ``duckdb.connect(path)``; on leaving, the file is detached, and dpsql opens it as any.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

from dpsql.duckdb_files import opened


@contextmanager
def writing(path: str | os.PathLike) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the DuckDB file ``path`` (created if missing),
    detached on exit. Do not close it."""
    forget_backends(path)  # a cached read-only backend of the file would block the write
    with opened(path) as con:
        yield con


@contextmanager
def reading(path: str | os.PathLike) -> Iterator[duckdb.DuckDBPyConnection]:
    """:func:`writing`, the file attached read-only."""
    forget_backends(path)
    with opened(path, read_only=True) as con:
        yield con


#: most backends :func:`cached_backend` keeps open (least recently used closed first)
_MAX_OPEN = 32
_OPEN: OrderedDict[tuple[Any, ...], tuple[Any, Any]] = OrderedDict()


def cached_backend(path: str | os.PathLike, metadata: Any) -> Any:
    """A dpsql DuckDBBackend of the file ``path`` under ``metadata``, opened once per file
    version and metadata (compared by content) and kept: opening one costs ~10 ms, and the
    neighbouring-world tests ask thousands of queries of a few files (tests.neighbours.outcome).
    The key holds the file's identity and modification time, so a file written again is opened
    again (its older backends closed); a file :func:`writing` or :func:`reading` opens is
    closed here first."""
    from dpsql.backends.duckdb import DuckDBBackend

    real = os.path.realpath(path)
    stat = os.stat(real)
    # by the metadata's content: helpers build an equal Metadata for every query
    key = (real, repr(metadata), stat.st_ino, stat.st_mtime_ns, stat.st_size)
    hit = _OPEN.get(key)
    if hit is not None:
        try:  # still open (a test may have closed its session's backend)
            hit[0]._con.execute("SELECT 1")
        except duckdb.Error:
            _OPEN.pop(key)
        else:
            _OPEN.move_to_end(key)
            return hit[0]
    for stale in [k for k in _OPEN if k[0] == real and k[2:] != key[2:]]:
        _OPEN.pop(stale)[0].close()  # an older version of the file
    backend = DuckDBBackend(real, metadata)
    _OPEN[key] = (backend, metadata)
    while len(_OPEN) > _MAX_OPEN:
        _, (old, _) = _OPEN.popitem(last=False)
        old.close()
    return backend


def forget_backends(path: str | os.PathLike) -> None:
    """Close every :func:`cached_backend` of the file ``path``."""
    real = os.path.realpath(path)
    for key in [k for k in _OPEN if k[0] == real]:
        _OPEN.pop(key)[0].close()


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


class SchemaWorlds:
    """Tiny INTEGER databases over ``columns`` (table -> its columns), each distinct one written
    once per process into a schema of its own on one in-memory connection, which
    :meth:`connection` then reads by default (``SET schema``): a harness running many queries
    over the same databases and neighbours writes each once, not once per query. The
    connection is shared (callers only read it, and use it before the next call); past
    ``most`` schemas it is dropped and started afresh."""

    def __init__(self, columns: Mapping[str, Sequence[str]], most: int = 4000) -> None:
        self.columns = columns
        self.most = most
        self._con: duckdb.DuckDBPyConnection | None = None
        self._schemas: dict[tuple, str] = {}

    def connection(self, db: Mapping[str, Sequence[tuple]]) -> duckdb.DuckDBPyConnection:
        if self._con is None or len(self._schemas) >= self.most:
            if self._con is not None:
                self._con.close()
            self._con = duckdb.connect(config={"threads": 1})
            self._schemas.clear()
        con = self._con
        key = tuple((t, tuple(db[t])) for t in self.columns)
        schema = self._schemas.get(key)
        if schema is None:
            schema = self._schemas[key] = f"w{len(self._schemas)}"
            script = [f"CREATE SCHEMA {schema}"]
            for table, columns in self.columns.items():
                script.append(f"CREATE TABLE {schema}.{table} "
                              f"({', '.join(c + ' INTEGER' for c in columns)})")
                if db[table]:  # None is NULL
                    values = ", ".join("(" + ", ".join("NULL" if v is None else str(v)
                                                       for v in r) + ")" for r in db[table])
                    script.append(f"INSERT INTO {schema}.{table} VALUES {values}")
            con.execute("; ".join(script))
        con.execute(f"SET schema = '{schema}'")
        return con
