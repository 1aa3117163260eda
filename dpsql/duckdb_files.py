"""DuckDB database files the owner's tools write and read (the privacy audit's copy of the
database and its neighbours; the tests' small databases), opened through one DuckDB instance
of the process.

A new DuckDB instance costs ~17 ms of CPU (its catalog of built-in functions) and an audit
writes a copy of the database and one file per neighbour; attaching a file to an instance
already open costs ~1 ms. :func:`opened` attaches ``path`` and yields a connection whose
default database IS that file, so statements written for ``duckdb.connect(path)`` run
unchanged; on leaving, the file is detached (checkpointed and closed), so a dpsql session then
opens it as it opens any database file. The instance holds nothing of its own. No analyst
query runs here (the process's instance for released values is :mod:`dpsql.scratch`).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from dpsql.sql import quote_literal

_INSTANCE: list[duckdb.DuckDBPyConnection] = []
_LOCK = threading.Lock()
_ALIASES = itertools.count()


def attach_alias() -> str:
    """A database alias no other attachment of this process uses."""
    return f"__file_db_{next(_ALIASES)}"


@contextmanager
def opened(path: str | os.PathLike, *, read_only: bool = False
           ) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the DuckDB file ``path`` (module docstring); do
    not close it. Raises duckdb.Error when the file cannot be attached."""
    with _LOCK:
        if not _INSTANCE:
            _INSTANCE.append(duckdb.connect(":memory:"))
        con = _INSTANCE[0].cursor()  # its own connection: its own default database
    alias = attach_alias()
    try:
        options = " (READ_ONLY)" if read_only else ""
        con.execute(f"ATTACH {quote_literal(os.fspath(path))} AS {alias}{options}")
        try:
            con.execute(f"USE {alias}")
            yield con
        finally:
            con.execute("USE memory")
            con.execute(f"DETACH {alias}")
    finally:
        con.close()
