"""The audit's ``unit`` neighbours: one privacy unit removed with every row linked to it.

Under a declared ``privacy_unit`` (issue #17; docs/privacy.md, "Privacy units") neighbouring
databases differ in one unit together with every row its declared paths link to it (FK
cascade). A row's unit is found exactly as :class:`~dpsql.metadata.model.UnitPath` defines it:
the unit table's row is the unit of its id column; a table with a direct path belongs to the
unit its column holds (even when the unit table has no row with that id); a table with a
``via`` path belongs to the unit of the row of ``to_table`` whose ``to_column`` equals its
column (keys are unique: ``dpsql metadata check``), and a row whose path reaches nothing (NULL,
orphan) belongs to no unit and is never removed.

Candidates (:func:`unit_candidates`): every unit some private row belongs to, ordered
deterministically (no randomness outside the noise module). Of ``count`` candidates, half
(rounded up) are the units with the most linked rows over all private tables (the likeliest to
move a count or a sum most) and the rest are spread evenly over the remaining units in id
order, as the row relations spread their rows. The audit keeps the one whose removal moves
the query's exact answer most. A heuristic search for a bad case, not a proof that none is
worse.

Precondition: ``metadata.privacy_unit`` is declared (the metadata loader then gives every
private table a checked, acyclic path; :mod:`dpsql.metadata.unit_paths`), and the database
holds the declared tables. Guarantee of :func:`make_unit_neighbour`: the copy differs from the
base exactly by the rows :func:`unit_rows_sql` assigns to the unit, in every private table.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from dpsql.duckdb_files import opened
from dpsql.errors import ProgrammingError
from dpsql.metadata import Metadata
from dpsql.sql import quote_ident

RID = "__audit_rid"
UNIT = "__audit_unit"


def _unit_of(metadata: Metadata) -> tuple[str, str]:
    unit = metadata.privacy_unit
    if unit is None:
        raise ProgrammingError("--neighbours unit needs a privacy unit in the metadata "
                               "(privacy_unit: {table: T, column: C} and each private table's "
                               "unit path); audit with change or remove otherwise")
    return unit.table, unit.column


def unit_rows_sql(metadata: Metadata, table: str) -> str:
    """SQL for every row of private ``table``: all its columns, its rowid (``__audit_rid``) and
    its unit (``__audit_unit``; NULL when its path reaches none)."""
    unit_table, unit_column = _unit_of(metadata)
    q = quote_ident(table)
    if table == unit_table:
        return (f"SELECT t.*, t.rowid AS {RID}, t.{quote_ident(unit_column)} AS {UNIT} "
                f"FROM {q} AS t")
    path = metadata.tables[table].unit
    if path is None:
        raise ProgrammingError(f"table {table!r} has no path to the privacy unit")
    if path.direct:
        return (f"SELECT t.*, t.rowid AS {RID}, t.{quote_ident(path.column)} AS {UNIT} "
                f"FROM {q} AS t")
    assert path.to_table is not None and path.to_column is not None
    parent = unit_rows_sql(metadata, path.to_table)
    return (f"SELECT t.*, t.rowid AS {RID}, p.{UNIT} AS {UNIT} FROM {q} AS t LEFT JOIN "
            f"(SELECT {quote_ident(path.to_column)} AS __audit_key, {UNIT} FROM ({parent})) "
            f"AS p ON t.{quote_ident(path.column)} = p.__audit_key")


def private_tables(metadata: Metadata) -> list[str]:
    """The private tables stored in the database (not public, not a declared source)."""
    return sorted(name for name, t in metadata.tables.items() if not t.public and not t.source)


def _linked_counts(con: duckdb.DuckDBPyConnection, metadata: Metadata) -> list[tuple[Any, int]]:
    """(unit, rows linked to it over every private table), units in id order."""
    parts = " UNION ALL ".join(f"SELECT {UNIT} FROM ({unit_rows_sql(metadata, t)})"
                               for t in private_tables(metadata))
    sql = (f"SELECT {UNIT}, count(*) FROM ({parts}) WHERE {UNIT} IS NOT NULL "
           f"GROUP BY {UNIT} ORDER BY {UNIT}")
    try:
        return [(u, int(n)) for u, n in con.execute(sql).fetchall()]
    except duckdb.Error as err:
        raise ProgrammingError(f"the audit follows the unit paths in the database, and could "
                               f"not: {err} (dpsql metadata check -m M -d D checks them)") from None


def unit_candidates(database: Path, metadata: Metadata, count: int) -> list[Any]:
    """Up to ``count`` units (module docstring): the heaviest half, then spread ones."""
    with opened(database, read_only=True) as con:
        linked = _linked_counts(con, metadata)
    heavy_n = min(len(linked), math.ceil(count / 2))
    # most rows first; ties in id order (sorted is stable)
    heavy = [u for u, _ in sorted(linked, key=lambda p: -p[1])[:heavy_n]]
    chosen = set(map(repr, heavy))
    rest = [u for u, _ in linked if repr(u) not in chosen]
    spread_n = min(len(rest), count - heavy_n)
    if spread_n <= 0:
        return heavy
    positions = sorted(set(np.linspace(0, len(rest) - 1, spread_n).round().astype(int)))
    return heavy + [rest[i] for i in positions]


def make_unit_neighbour(base_copy: Path, dest: Path, metadata: Metadata,
                        unit: Any) -> tuple[Path, tuple[tuple[str, int], ...]]:
    """``dest``: ``base_copy`` without unit ``unit`` and every row linked to it; returns the
    path and the rows removed per private table (the row sets are found before any is
    deleted, so a table's rows are found through its parents' rows as they are in the base)."""
    dest.write_bytes(base_copy.read_bytes())
    with opened(dest) as con:
        doomed = {t: [r[0] for r in con.execute(
            f"SELECT {RID} FROM ({unit_rows_sql(metadata, t)}) WHERE {UNIT} = ?",
            [unit]).fetchall()] for t in private_tables(metadata)}
        for table, rowids in doomed.items():
            if rowids:
                con.execute(f"DELETE FROM {quote_ident(table)} WHERE rowid IN "
                            f"(SELECT UNNEST(?))", [rowids])
        con.execute("CHECKPOINT")
    return dest, tuple((t, len(r)) for t, r in doomed.items() if r)
