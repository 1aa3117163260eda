"""Declared group-key domains must have the key column's type (issue #12, class 9).

The exact query joins every non-empty bin to its domain's values. A value of another type than
the column (``[10001, 10002]`` on VARCHAR, ``['1', 'other']`` on INTEGER) makes the database cast
one side: the stored key (fails on a private row that does not parse, an error oracle) or the
value (``'other'`` fails as INTEGER; ``'1'`` and ``'01'`` become one bin).

Contract: :func:`check_domains` raises ``ProgrammingError`` (naming the table, column and value)
unless every listed value of every domain whose column type is known casts to that type with
DuckDB's own cast, and distinct values stay distinct after it; and a table domain's column type
is injectively comparable with the key's (dpsql.analysis.keytypes). It reads the metadata only
(public to the owner, the same for every neighbouring database), so the Engine runs it once when
it is built and ``dpsql metadata check`` runs it on declared types. The rewrite then casts each
listed value to the column's type (:func:`typed_value`), a cast these checks proved cannot fail.
"""

from __future__ import annotations

import duckdb
from sqlglot import exp

from dpsql.analysis.keytypes import comparable, normalise, type_name
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.trees import copy_tree
from dpsql.errors import ProgrammingError
from dpsql.metadata import Column, Metadata, Table
from dpsql.scratch import scratch_cursor


def typed_value(value: object, type_text: str | None) -> exp.Expression:
    """The SQL literal of a declared domain value, cast to the column's type when known."""
    literal = exp.convert(value)
    dtype = normalise(type_text)
    if dtype is None or value is None:
        return literal
    return exp.Cast(this=literal, to=copy_tree(dtype))


def check_domains(metadata: Metadata) -> None:
    """Raise ``ProgrammingError`` for a domain that does not fit its column (module contract)."""
    listed: list[tuple[Table, Column]] = []
    for table in metadata.tables.values():
        for column in table.columns.values():
            domain = column.domain
            if domain is None or normalise(column.type) is None:
                continue
            if domain.values is not None:
                if any(v is not None for v in domain.values):
                    listed.append((table, column))
            elif domain.table is not None and domain.column is not None:
                _check_table_domain(metadata, table, column)
    if listed:
        _check_listed(listed)


def _check_listed(listed: list[tuple[Table, Column]]) -> None:
    """The listed domains' casts, all in one query of the scratch instance (each query costs
    ~0.7 ms, and every session checks its metadata); when that query fails, column after
    column, so the error names the domain that failed."""
    con = scratch_cursor()  # casts the owner's literals
    try:
        lists = [_cast_list(column) for _, column in listed]
        try:
            row = con.execute(f"SELECT {', '.join(lists)}").fetchone()
        except duckdb.Error:
            row = None
        for i, (table, column) in enumerate(listed):
            _check_values(con, table, column, None if row is None else row[i])
    finally:
        con.close()


def _cast_list(column: Column) -> str:
    """``[TRY_CAST(v AS <column type>), ...]`` over the domain's non-NULL values."""
    assert column.domain is not None and column.domain.values is not None
    dtype = normalise(column.type)
    assert dtype is not None
    casts = [exp.TryCast(this=exp.convert(v), to=copy_tree(dtype)).sql(dialect=DIALECT)
             for v in column.domain.values if v is not None]
    return f"[{', '.join(casts)}]"


def _check_values(con: duckdb.DuckDBPyConnection, table: Table, column: Column,
                  typed: list | None) -> None:
    """Check one listed domain given its values cast (``typed``; None: cast them here)."""
    assert column.domain is not None and column.domain.values is not None
    values = [v for v in column.domain.values if v is not None]
    dtype = normalise(column.type)
    assert dtype is not None
    target = dtype.sql(dialect=DIALECT)
    where = f"{table.name}.{column.name} ({type_name(column.type)})"
    if typed is None:
        try:
            row = con.execute(f"SELECT {_cast_list(column)}").fetchone()
        except duckdb.Error:
            raise ProgrammingError(
                f"the domain of {where} cannot be read as {target}: list values of the "
                "column's type"
            ) from None
        assert row is not None
        typed = row[0]
    seen: dict[object, object] = {}
    for value, cast in zip(values, typed, strict=True):
        if cast is None:
            raise ProgrammingError(
                f"the domain of {where} lists {value!r}, which is not a value of type "
                f"{target}: list values of the column's type"
            )
        if cast in seen:
            raise ProgrammingError(
                f"the domain of {where} lists {seen[cast]!r} and {value!r}, which are the same "
                f"{target} value: list each value once"
            )
        seen[cast] = value


def _check_table_domain(metadata: Metadata, table: Table, column: Column) -> None:
    domain = column.domain
    assert domain is not None and domain.table is not None and domain.column is not None
    source = metadata.tables.get(domain.table.lower())
    source_column = source.columns.get(domain.column.lower()) if source is not None else None
    if source_column is None or normalise(source_column.type) is None:
        return  # known once a database fills the types: the Engine checks again then
    if not comparable(column.type, source_column.type):
        raise ProgrammingError(
            f"the domain of {table.name}.{column.name} ({type_name(column.type)}) is "
            f"{domain.table}.{domain.column} ({type_name(source_column.type)}), of another "
            "type: the bins would be matched through a cast; use a domain column of the same "
            "type"
        )
