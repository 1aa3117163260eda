"""dpsql: differentially private SQL over DuckDB, with a PEP 249 (DB-API 2.0) surface.

    >>> import dpsql
    >>> conn = dpsql.connect("shop.duckdb", "schemas/shop.yaml", analyst="alice")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from dpsql.errors import (
    AggregateArithmeticError,
    BudgetExhaustedError,
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    MissingMetricError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    ProtectedBinError,
    UnsupportedConstructError,
    UnsupportedQueryError,
    Warning,
)

apilevel = "2.0"
#: Threads may share the module but not connections (PEP 249 level 1).
threadsafety = 1
paramstyle = "qmark"


if TYPE_CHECKING:
    from dpsql.dbapi import (
        BINARY,
        DATETIME,
        NUMBER,
        ROWID,
        STRING,
        Binary,
        Connection,
        Cursor,
        Date,
        DateFromTicks,
        Time,
        TimeFromTicks,
        Timestamp,
        TimestampFromTicks,
        connect,
    )

# The PEP 249 names that live in dpsql.dbapi. That module pulls in the whole engine (sqlglot,
# DuckDB, numpy: about half a second), so it is imported on first use of one of these names
# (PEP 562) rather than by ``import dpsql``: `dpsql --help` and `dpsql budget` need none of it.
_DBAPI_NAMES = frozenset({
    "BINARY", "DATETIME", "NUMBER", "ROWID", "STRING", "Binary", "Connection", "Cursor", "Date",
    "DateFromTicks", "Time", "TimeFromTicks", "Timestamp", "TimestampFromTicks", "connect",
})  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _DBAPI_NAMES:
        value = getattr(importlib.import_module("dpsql.dbapi"), name)
        globals()[name] = value  # later lookups no longer come here
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # a submodule not imported yet (``dpsql.session`` was reachable after a plain
        # ``import dpsql`` while dpsql.dbapi was imported eagerly)
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def explain(sql: str, metadata: Any, *, epsilon: float, delta: float, distance: int = 0) -> dict:
    """Owner-only privacy report of ``sql``; see :func:`dpsql.analysis.explain.explain`."""
    from dpsql.analysis.explain import explain as _explain

    return _explain(sql, metadata, epsilon=epsilon, delta=delta, distance=distance)


__all__ = [
    "BINARY",
    "DATETIME",
    "NUMBER",
    "ROWID",
    "STRING",
    "AggregateArithmeticError",
    "Binary",
    "BudgetExhaustedError",
    "Connection",
    "Cursor",
    "DataError",
    "DatabaseError",
    "Date",
    "DateFromTicks",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "MissingMetricError",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "ProtectedBinError",
    "Time",
    "TimeFromTicks",
    "Timestamp",
    "TimestampFromTicks",
    "UnsupportedConstructError",
    "UnsupportedQueryError",
    "Warning",
    "apilevel",
    "connect",
    "explain",
    "paramstyle",
    "threadsafety",
]
