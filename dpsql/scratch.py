"""The process's scratch DuckDB: one in-memory instance for work on values that are not private
data -- the owner's declared domain literals (dpsql.analysis.domains) and released noisy values
(dpsql.execute.post).

Opening a DuckDB instance costs ~17 ms of CPU (its catalog of built-in functions); a cursor of
an open one ~0.3 ms. Every caller works on a cursor of its own, which DuckDB makes a connection
of its own: temporary tables and registered views belong to that connection alone, so sessions
and threads never see each other's tables. The instance holds no table of its own, reads no
file (external access off), never resolves a table name to a Python variable of the calling
code (DuckDB's replacement scans off: only what a caller registers is a table) and its
configuration is locked.
"""

from __future__ import annotations

import threading

import duckdb

__all__ = ["scratch_cursor"]

_INSTANCE: list[duckdb.DuckDBPyConnection] = []
_LOCK = threading.Lock()


def scratch_cursor() -> duckdb.DuckDBPyConnection:
    """A new connection to the scratch instance (the caller closes it)."""
    with _LOCK:
        if not _INSTANCE:
            con = duckdb.connect(":memory:")
            con.execute("SET enable_external_access=false")
            con.execute("SET python_enable_replacements=false")
            con.execute("SET lock_configuration=true")
            _INSTANCE.append(con)
        return _INSTANCE[0].cursor()
