"""The shadow databases that answer catalog queries (:mod:`dpsql.server.catalog`): in-memory
DuckDB instances holding empty tables with the declared columns of the tables one analyst may
query, PostgreSQL's helper functions as macros, and nothing else.

Building one costs ~20 ms of CPU (a DuckDB instance, its tables and ~25 macros) and clients
connect often (psql, a pool, a notebook kernel per cell), so the server keeps one instance per
(analyst, granted tables) for its lifetime and gives each client connection a DuckDB
connection of its own to it (~0.01 ms): each connection's queries, interrupts (a
CancelRequest) and lock are its own, and every connection of one analyst sees the same empty
tables. An instance is never shared between analysts (its tables are what one analyst was
granted, its ``pg_get_userbyid`` says that analyst's name). Its configuration is locked: no
file access, one thread, a memory cap.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable

import duckdb

from dpsql.metadata import Metadata
from dpsql.server.pgshims import MACROS
from dpsql.sql import quote_literal


def build_shadow(metadata: Metadata, tables: Iterable[str], user: str) -> duckdb.DuckDBPyConnection:
    """A new shadow instance with the columns of ``tables`` (names of ``metadata.tables``) for
    analyst ``user``."""
    con = duckdb.connect(":memory:")
    try:
        for name in tables:
            table = metadata.tables[name]
            columns = ", ".join(
                f'"{c.name}" {c.type or "VARCHAR"}' for c in table.columns.values())
            con.execute(f'CREATE TABLE "{name}" ({columns})')
        for macro in MACROS:
            con.execute(macro)
        con.execute(f"CREATE MACRO pg_get_userbyid(x) AS {quote_literal(user)}")
        con.execute("SET enable_external_access = false")
        con.execute("SET threads = 1")
        con.execute("SET memory_limit = '256MB'")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


class Shadows:
    """The server's shadow instances, one per (analyst, granted tables), built on first use and
    kept until :meth:`close` (thread-safe)."""

    def __init__(self, metadata: Metadata) -> None:
        self._metadata = metadata
        self._instances: dict[tuple[str, tuple[str, ...]], duckdb.DuckDBPyConnection] = {}
        self._lock = threading.Lock()

    def connect(self, tables: Iterable[str], user: str) -> duckdb.DuckDBPyConnection:
        """A new connection to the shadow of ``user`` granted ``tables`` (the caller closes
        it)."""
        key = (user, tuple(tables))
        with self._lock:
            instance = self._instances.get(key)
            if instance is None:
                instance = self._instances[key] = build_shadow(self._metadata, key[1], user)
            return instance.cursor()

    def close(self) -> None:
        """Close every instance, and with it every connection to it (the server is stopping;
        a catalog query still running keeps its instance, which goes with the process)."""
        with self._lock:
            for instance in self._instances.values():
                with contextlib.suppress(duckdb.Error):
                    instance.close()
            self._instances.clear()
