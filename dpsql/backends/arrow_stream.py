"""A long result read as numpy columns from a stream of Arrow record batches (DuckDB's
``to_arrow_reader``): the flat read of a release over two privacy units (dpsql.units.multi_rewrite:
millions of rows of two unit ids and DOUBLE values).

Why: DuckDB's DB-API ``fetchnumpy`` materialises the whole result, then converts it to numpy on
one thread; a relation's Arrow reader hands over record batches while the query still runs.
Each batch's integer and floating columns are copied straight into numpy arrays (sized for
TPC-H SF1's read at once, doubled past it), and the batch is freed.
On TPC-H Q7 over customer and supplier the read takes about 0.8 of ``fetchnumpy``'s time at SF1
(6M rows x 3 columns) and the same at SF10 (60M), with less memory at its peak (2.9 against 3.2
GB: no materialised result beside its copy).

Contract of :func:`read_columns`: one array per column of the result, in order, holding every
row once (the rows' order is the stream's); a NULL is a masked entry (``np.ma.MaskedArray``,
its data 0 for numbers); integer and floating columns keep their width (int32 stays int32,
uint64 uint64); any other type is an object array of Python values (strings, ``Decimal`` for
DECIMAL and HUGEINT, ``datetime.date``, UUID bytes), equal values equal, as the flat read's
unit codes (dpsql.units.multi_execute.unit_codes) need.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["BATCH_ROWS", "FIRST_ROWS", "read_columns"]

#: rows per record batch: each batch's copy into the columns stays in cache. Measured on TPC-H
#: Q7's flat read over two units (interleaved medians, 2026-11-27): at SF1 2^16 rows 163 ms,
#: 2^18 171, 2^20 194; at SF10 (60M rows) 2.84-2.89 s for every size from 2^16 to 2^20
BATCH_ROWS = 1 << 16
#: the rows a numeric column's array is first sized for (64 MB of 8-byte values, TPC-H SF1's
#: 6M flat rows at once; its pages are touched only as rows arrive); past it the array doubles
FIRST_ROWS = 1 << 23


def _numeric(arrow_type: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type))


class _Numbers:
    """An integer or floating column filled batch by batch into one preallocated array."""

    def __init__(self, dtype: np.dtype, capacity: int) -> None:
        self.data = np.empty(capacity, dtype=dtype)  # pages are touched only as rows arrive
        self.mask: np.ndarray | None = None
        self.rows = 0

    def add(self, column: Any) -> None:
        m = len(column)
        need = self.rows + m
        if need > self.data.size:  # past FIRST_ROWS: double
            size = max(need, 2 * self.data.size)
            # in place (realloc: glibc moves a large block's pages by mremap, no copy); no
            # view of the array exists (only array() makes one, after the last batch)
            self.data.resize(size, refcheck=False)
            if self.mask is not None:
                self.mask.resize(size, refcheck=False)  # numpy zero-fills what it adds
        if column.null_count:
            if self.mask is None:
                self.mask = np.zeros(self.data.size, dtype=bool)
            self.mask[self.rows:need] = column.is_null().to_numpy(zero_copy_only=False)
            column = column.fill_null(0)
        self.data[self.rows:need] = column.to_numpy(zero_copy_only=True)
        self.rows = need

    def array(self) -> np.ndarray:
        data = self.data[:self.rows]
        if self.mask is None:
            return data
        return np.ma.MaskedArray(data, mask=self.mask[:self.rows])


class _Objects:
    """Any other column: each batch as an object array (None kept under a mask), joined once."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.masks: list[np.ndarray] = []

    def add(self, column: Any) -> None:
        self.parts.append(np.asarray(column.to_numpy(zero_copy_only=False), dtype=object))
        self.masks.append(column.is_null().to_numpy(zero_copy_only=False))

    def array(self) -> np.ndarray:
        if not self.parts:
            return np.empty(0, dtype=object)
        data = np.concatenate(self.parts)
        mask = np.concatenate(self.masks)
        return np.ma.MaskedArray(data, mask=mask) if mask.any() else data


def read_columns(reader: Iterable[Any], schema: Any, max_rows: int | None = None
                 ) -> list[np.ndarray]:
    """The numpy columns of a record batch ``reader`` whose schema is ``schema`` (module
    contract). ``max_rows``: stop reading once more than that many rows arrived (the batch
    that passes it is kept whole, so the columns then hold more than ``max_rows`` rows, at
    most one batch more; the caller discards them): a guard on memory and time that leaves
    the query free of a LIMIT, which costs DuckDB its parallel result collection (~20 ms of
    ~190 on TPC-H Q7's flat read over two units)."""
    columns: list[_Numbers | _Objects] = [
        _Numbers(np.dtype(t.to_pandas_dtype()), FIRST_ROWS) if _numeric(t) else _Objects()
        for t in schema.types]
    rows = 0
    for batch in reader:
        for column, values in zip(columns, batch.columns, strict=True):
            column.add(values)
        rows += batch.num_rows
        if max_rows is not None and rows > max_rows:
            break
    return [column.array() for column in columns]
