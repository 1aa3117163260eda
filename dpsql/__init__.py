"""dpsql: differentially private SQL over DuckDB, with a PEP 249 (DB-API 2.0) surface.

    >>> import dpsql
    >>> conn = dpsql.connect("shop.duckdb", "schemas/shop.yaml", analyst="alice")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

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
)
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


def connect(*args: Any, **kwargs: Any):
    """Open a private connection; see :func:`dpsql.dbapi.connect`."""
    from dpsql.dbapi import connect as _connect

    return _connect(*args, **kwargs)


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
