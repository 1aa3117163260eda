"""PEP 249 type objects and constructors. ``description``'s type_code is DuckDB's type name
("BIGINT", "VARCHAR", ...); these objects compare equal to the names of their group."""

from __future__ import annotations

import datetime as _dt


class DBAPITypeObject:
    """A PEP 249 type object: equal to every DuckDB type name in its group."""

    def __init__(self, *names: str) -> None:
        self.names = frozenset(names)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            # DECIMAL(18,3) and VARCHAR[] style names: compare on the base name
            return other.split("(", 1)[0].upper() in self.names
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.names)

    def __repr__(self) -> str:
        return f"DBAPITypeObject{tuple(sorted(self.names))!r}"


STRING = DBAPITypeObject("VARCHAR", "CHAR", "BPCHAR", "TEXT", "STRING", "UUID", "ENUM")
BINARY = DBAPITypeObject("BLOB", "BYTEA", "BINARY", "VARBINARY", "BIT")
NUMBER = DBAPITypeObject(
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "REAL", "DECIMAL", "BOOLEAN",
)
DATETIME = DBAPITypeObject(
    "DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_NS", "TIMESTAMP_MS",
    "TIMESTAMP_S", "INTERVAL", "TIME WITH TIME ZONE",
)
ROWID = DBAPITypeObject()  # dpsql never releases row identifiers

Date = _dt.date
Time = _dt.time
Timestamp = _dt.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> _dt.date:  # PEP 249 name
    """PEP 249 constructor: the local date of a POSIX timestamp."""
    return _dt.date.fromtimestamp(ticks)


def TimeFromTicks(ticks: float) -> _dt.time:  # PEP 249 name
    """PEP 249 constructor: the local time of day of a POSIX timestamp."""
    return _dt.datetime.fromtimestamp(ticks).time()


def TimestampFromTicks(ticks: float) -> _dt.datetime:  # PEP 249 name
    """PEP 249 constructor: the local datetime of a POSIX timestamp."""
    return _dt.datetime.fromtimestamp(ticks)


