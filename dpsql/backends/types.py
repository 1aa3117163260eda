"""Column types from the attached database (owner side; docs/design.md, "Rules", join keys).

The join, IN and EXISTS rules need each key's type (dpsql.analysis.keytypes), and metadata
often has none: FLEX's format has no types, and ours makes ``type`` optional. Whenever an
Engine is built on a real backend, :func:`fill_column_types` completes the metadata from the
database's own schema, so the analysis of anything that runs sees the types the database will
compare. The schema is read by the backend (``Backend.table_schema``), never by a query an
analyst writes.

Contract: the returned metadata equals ``metadata`` except that every column of a table the
backend has gets the database's type when none was declared. A declared type that differs from
the database's (after normalising aliases: INT = INTEGER, VARCHAR(20) = TEXT) raises
ProgrammingError: the metadata would describe a different database, and the type check would
approve keys the database compares differently. Tables or columns the database lacks keep
their declared types (a query on them fails when it runs; an untyped key is rejected).
"""

from __future__ import annotations

import dataclasses

from dpsql.analysis.keytypes import collation, normalise, without_collation
from dpsql.analysis.parse import DIALECT
from dpsql.backends.base import Backend
from dpsql.errors import ProgrammingError
from dpsql.metadata import Metadata


def _same(declared: str, actual: str) -> bool:
    d, a = normalise(declared), normalise(actual)
    if d is None or a is None:
        return declared.strip().upper() == actual.strip().upper()
    return d.sql(dialect=DIALECT) == a.sql(dialect=DIALECT)


def fill_column_types(metadata: Metadata, backend: Backend) -> Metadata:
    """``metadata`` with missing column types filled from ``backend`` (see module contract)."""
    tables = {}
    changed = False
    schemas = backend.table_schemas([t.name for t in metadata.tables.values()])
    for key, table in metadata.tables.items():
        schema = schemas.get(table.name)
        if schema is None:
            tables[key] = table  # not in the database: queries on it fail when they run
            continue
        actual = {name.lower(): type_ for name, type_ in schema.items()}
        columns = {}
        for cname, col in table.columns.items():
            db_type = actual.get(cname.lower())
            if db_type is None or col.type == db_type:
                columns[cname] = col
            elif col.type is None:
                columns[cname] = dataclasses.replace(col, type=db_type)
                changed = True
            elif _same(col.type, db_type):
                columns[cname] = col
            elif collation(db_type) is not None and _same(col.type, without_collation(db_type)):
                # the declared type is right, and the database adds a collation the analysis
                # must see (dpsql.analysis.keytypes.collation)
                columns[cname] = dataclasses.replace(col, type=db_type)
                changed = True
            else:
                # a declared source file is typed by DuckDB's reader (whole numbers in a CSV
                # read as BIGINT): name the file, not a database (QA round 5)
                where = (f"DuckDB reads it from {table.source} as" if table.source
                         else "the database stores it as")
                raise ProgrammingError(
                    f"metadata declares {table.name}.{col.name} as type {col.type}, but "
                    f"{where} {db_type}: write type: {db_type} for it in the metadata (or "
                    f"remove its type: to use {'the file' if table.source else 'the database'}"
                    "'s); types must match exactly here, widths included"
                )
        tables[key] = dataclasses.replace(table, columns=columns)
    if not changed:
        return metadata
    return dataclasses.replace(metadata, tables=tables)
