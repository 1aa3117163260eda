"""Writing the tests' small DuckDB database files through one open instance (not a test module).

A new DuckDB instance costs ~17 ms of CPU (its catalog of built-in functions) and the suite
writes hundreds of tiny database files; attaching a new file to an instance already open costs
~1 ms. :func:`writing` attaches ``path`` to this process's writer instance (in memory, holding
nothing of its own) and yields a connection whose default database IS that file, so the
caller's statements (``CREATE TABLE t ...``, ``INSERT INTO t ...``) write into it exactly as a
``duckdb.connect(path)`` would. On leaving, the file is detached -- checkpointed and closed --
so dpsql opens it afterwards as it opens any database file. :func:`reading` does the same
read-only (DuckDB allows read-only opens of one file alongside a dpsql backend's).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

_WRITER: list[duckdb.DuckDBPyConnection] = []
_LOCK = threading.Lock()
_ALIASES = itertools.count()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@contextmanager
def writing(path: str | os.PathLike) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the DuckDB file ``path`` (created if missing),
    detached on exit (module docstring). Do not close it."""
    with _attached(path, "") as con:
        yield con


@contextmanager
def reading(path: str | os.PathLike) -> Iterator[duckdb.DuckDBPyConnection]:
    """:func:`writing`, the file attached read-only."""
    with _attached(path, " (READ_ONLY)") as con:
        yield con


@contextmanager
def _attached(path: str | os.PathLike, options: str) -> Iterator[duckdb.DuckDBPyConnection]:
    with _LOCK:
        if not _WRITER:
            _WRITER.append(duckdb.connect(":memory:"))
        alias = f"__test_db_{next(_ALIASES)}"
        con = _WRITER[0].cursor()  # its own connection: its own default database
    try:
        con.execute(f"ATTACH {_quote(os.fspath(path))} AS {alias}{options}")
        try:
            con.execute(f"USE {alias}")
            yield con
        finally:
            con.execute("USE memory")
            con.execute(f"DETACH {alias}")
    finally:
        con.close()
