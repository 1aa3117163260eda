"""PostgreSQL type OIDs for DuckDB type names, and values to and from the wire.

Results are sent in text format (what psql, psycopg and JDBC ask for by default); binary is
written for the fixed-width numeric types and text when a client asks for it. Parameters are
read in text format, or in binary for the types psycopg sends binary (integers, floats,
booleans, text).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from typing import Any

from dpsql.server.wire import ProtocolViolation

BOOL, BYTEA, INT8, INT2, INT4, TEXT, FLOAT4, FLOAT8, UNKNOWN = 16, 17, 20, 21, 23, 25, 700, 701, 705
VARCHAR, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, NUMERIC, UUID = (
    1043, 1082, 1083, 1114, 1184, 1186, 1700, 2950)
NAME, OID, CHAR = 19, 26, 18

_BY_NAME = {
    "BOOLEAN": BOOL, "TINYINT": INT2, "SMALLINT": INT2, "UTINYINT": INT2, "INTEGER": INT4,
    "USMALLINT": INT4, "BIGINT": INT8, "UINTEGER": INT8, "UBIGINT": NUMERIC, "HUGEINT": NUMERIC,
    "UHUGEINT": NUMERIC, "FLOAT": FLOAT4, "REAL": FLOAT4, "DOUBLE": FLOAT8, "VARCHAR": TEXT,
    "BLOB": BYTEA, "DATE": DATE, "TIME": TIME, "TIMESTAMP": TIMESTAMP,
    "TIMESTAMP WITH TIME ZONE": TIMESTAMPTZ, "INTERVAL": INTERVAL, "UUID": UUID,
}

_SIZES = {BOOL: 1, INT2: 2, INT4: 4, INT8: 8, FLOAT4: 4, FLOAT8: 8, DATE: 4, TIMESTAMP: 8}


def type_oid(duckdb_type: str) -> int:
    """The OID clients see for a DuckDB type name (DECIMAL(p,s) is numeric; unknown: text)."""
    name = duckdb_type.upper()
    if name.startswith("DECIMAL") or name.startswith("NUMERIC"):
        return NUMERIC
    return _BY_NAME.get(name, TEXT)


def type_size(oid: int) -> int:
    return _SIZES.get(oid, -1)


def encode_text(value: Any) -> bytes | None:
    """A value in PostgreSQL's text format (None is SQL NULL)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, float):
        if math.isnan(value):
            return b"NaN"
        if math.isinf(value):
            return b"Infinity" if value > 0 else b"-Infinity"
        return repr(value).encode()
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ").encode()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat().encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"\\x" + bytes(value).hex().encode()
    if hasattr(value, "item") and not isinstance(value, (str, decimal.Decimal)):  # numpy scalar
        return encode_text(value.item())
    return str(value).encode()


def encode_binary(value: Any, oid: int) -> bytes | None:
    """A value in binary format, for the types :func:`binary_supported` names."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if oid == BOOL:
        return b"\x01" if value else b"\x00"
    if oid in (INT2, INT4, INT8):
        return struct.pack({INT2: "!h", INT4: "!i", INT8: "!q"}[oid], int(value))
    if oid in (FLOAT4, FLOAT8):
        return struct.pack("!f" if oid == FLOAT4 else "!d", float(value))
    return str(value).encode()  # TEXT / VARCHAR


def binary_supported(oid: int) -> bool:
    return oid in (BOOL, INT2, INT4, INT8, FLOAT4, FLOAT8, TEXT, VARCHAR)


def decode_param(raw: bytes | None, oid: int, binary: bool) -> Any:
    """A bound parameter's Python value. Text-format parameters of an unknown or textual type
    stay strings (the analysis compares them with the column's type); numbers become numbers.
    Raises ProtocolViolation for a malformed binary value and ValueError for unsupported ones."""
    if raw is None:
        return None
    if binary:
        return _decode_binary(raw, oid)
    text = raw.decode("utf-8", errors="strict")
    if oid in (INT2, INT4, INT8, OID):
        return int(text)
    if oid in (FLOAT4, FLOAT8):
        return float(text)
    if oid == NUMERIC:
        return decimal.Decimal(text)
    if oid == BOOL:
        return text.lower() in ("t", "true", "1", "yes", "on")
    if oid == DATE:
        return dt.date.fromisoformat(text)
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        return dt.datetime.fromisoformat(text)
    return text


def _decode_binary(raw: bytes, oid: int) -> Any:
    formats = {INT2: "!h", INT4: "!i", INT8: "!q", FLOAT4: "!f", FLOAT8: "!d", OID: "!I"}
    if oid in formats:
        try:
            return struct.unpack(formats[oid], raw)[0]
        except struct.error:
            raise ProtocolViolation(
                f"binary parameter of type {oid} has {len(raw)} bytes") from None
    if oid == BOOL:
        if len(raw) != 1:
            raise ProtocolViolation("binary boolean parameter is not one byte")
        return raw != b"\x00"
    if oid in (TEXT, VARCHAR, UNKNOWN, NAME, 0):
        return raw.decode("utf-8")
    if oid == DATE:
        (days,) = struct.unpack("!i", raw) if len(raw) == 4 else (None,)
        if days is None:
            raise ProtocolViolation("binary date parameter is not four bytes")
        return dt.date(2000, 1, 1) + dt.timedelta(days=days)
    raise ValueError(f"binary parameters of type OID {oid} are not supported; send them as text")
