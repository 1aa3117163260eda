"""Results as Apache Arrow tables (``cursor.fetch_arrow_table()``; the ``arrow`` extra).

The schema comes from the result's type names (DuckDB's, as ``cursor.description`` gives
them), so a column's Arrow type does not depend on its values: an all-NULL column of a BIGINT
count is still int64. A type name this module does not know is left to pyarrow's inference.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from dpsql.errors import ProgrammingError

_DECIMAL = re.compile(r"(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$", re.IGNORECASE)

#: DuckDB type names -> pyarrow type factory names
_SIMPLE = {
    "BOOLEAN": "bool_", "TINYINT": "int8", "SMALLINT": "int16", "INTEGER": "int32",
    "BIGINT": "int64", "UTINYINT": "uint8", "USMALLINT": "uint16", "UINTEGER": "uint32",
    "UBIGINT": "uint64", "FLOAT": "float32", "REAL": "float32", "DOUBLE": "float64",
    "VARCHAR": "string", "TEXT": "string", "BLOB": "binary", "DATE": "date32",
}


def _require_pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise ProgrammingError(
            "fetch_arrow_table() needs pyarrow: pip install 'dpsql[arrow]' (or use fetchall() "
            "or fetchdf())") from None
    return pyarrow


def arrow_type(type_name: str) -> Any:
    """The pyarrow type of a DuckDB type name, or None (infer from the values)."""
    pa = _require_pyarrow()
    name = type_name.strip().upper()
    decimal = _DECIMAL.match(name)
    if decimal:
        return pa.decimal128(int(decimal.group(1)), int(decimal.group(2) or 0))
    if name.startswith("VARCHAR"):
        return pa.string()
    if name == "TIMESTAMP":
        return pa.timestamp("us")
    if name == "TIMESTAMP WITH TIME ZONE":
        return pa.timestamp("us", tz="UTC")
    factory = _SIMPLE.get(name)
    return getattr(pa, factory)() if factory else None


def arrow_table(names: Sequence[str], types: Sequence[str],
                rows: Sequence[Sequence[Any]]) -> Any:
    """A ``pyarrow.Table`` of ``rows`` with columns ``names`` typed by ``types``."""
    pa = _require_pyarrow()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    arrays = [pa.array(list(values), type=arrow_type(t))
              for values, t in zip(columns, types, strict=True)]
    return pa.Table.from_arrays(arrays, names=list(names))
