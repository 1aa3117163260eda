"""Neighbouring databases for the privacy audit: one row of one private table changed, or
removed; or, under a privacy unit, one unit removed with its rows (:mod:`.units`).

dpsql's neighbouring relation (docs/privacy.md section 1) is "change one row of one private
table": a row is replaced by another row's values (``change``, the default). The owner may
also audit ``remove`` (one row deleted: the add/remove relation, which a change composes two
of). The audit looks for the neighbour that moves the query's answer most: it tries ``count``
candidates among rows spread evenly over each private table the query reads
(deterministically: no randomness outside the noise module) and keeps the one with the largest
L1 change. That is a heuristic search for a bad case, not a proof that none is worse.

Privacy units (issue #17): the ``unit`` relation removes one unit with every row its declared
paths link to it (FK cascade); its candidates are units, not rows of one table
(:func:`dpsql.privacy_audit.units.unit_candidates`), and its :class:`Neighbour` names the unit
and the rows removed per table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from dpsql.duckdb_files import attach_alias, opened
from dpsql.errors import ProgrammingError
from dpsql.sql import quote_literal

#: The neighbouring relations the audit can build (the first is dpsql's own without a privacy
#: unit; ``unit`` is the relation under one).
RELATIONS = ("change", "remove", "unit")


@dataclass(frozen=True)
class Neighbour:
    """A copy of the database with row ``replaced`` of ``table`` replaced by row
    ``replacement``'s values, or removed when ``replacement`` is None (rowids of the original
    database); or, when ``unit`` is set, with that unit (of unit table ``table``) and every row
    linked to it removed (``replaced`` and ``replacement`` None; ``removed``: rows per
    table)."""

    table: str
    replaced: int | None
    replacement: int | None
    path: Path
    unit: Any = None
    removed: tuple[tuple[str, int], ...] = ()

    @property
    def relation(self) -> str:
        if self.unit is not None:
            return "unit"
        return "remove" if self.replacement is None else "change"

    def describe(self) -> str:
        if self.unit is not None:
            rows = ", ".join(f"{t} {n}" for t, n in self.removed) or "none"
            return (f"{self.table}: unit {self.unit!r} removed with every row linked to it "
                    f"(rows removed: {rows})")
        if self.replacement is None:
            return f"{self.table}: row {self.replaced} removed"
        return (f"{self.table}: row {self.replaced} replaced by a copy of row "
                f"{self.replacement}")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def copy_database(source: Path, dest: Path) -> Path:
    """A full copy of DuckDB database ``source`` at ``dest`` (tables, views, macros), read
    through ``ATTACH ... READ_ONLY`` so an unflushed write-ahead log is included."""
    source_alias = attach_alias()
    with opened(dest) as con:
        con.execute(f"ATTACH {quote_literal(str(source))} AS {source_alias} (READ_ONLY)")
        row = con.execute("SELECT current_database()").fetchone()
        assert row is not None
        target = row[0]
        con.execute(f"COPY FROM DATABASE {source_alias} TO {_quote(target)}")
        con.execute(f"DETACH {source_alias}")
    return dest


def spread_rowids(database: Path, table: str, count: int) -> list[int]:
    """``count`` rowids of ``table`` spread evenly over its rows in rowid order."""
    try:
        with opened(database, read_only=True) as con:
            rowids = [r[0] for r in con.execute(
                f"SELECT rowid FROM {_quote(table)} ORDER BY rowid").fetchall()]
    except duckdb.Error as err:
        raise ProgrammingError(f"the audit reads table {table!r} from the database, and could "
                               f"not: {err}") from None
    if len(rowids) < 2:
        return rowids
    count = min(count, len(rowids))
    positions = np.linspace(0, len(rowids) - 1, count).round().astype(int)
    return sorted({rowids[i] for i in positions})


def pairs(rowids: list[int], count: int) -> list[tuple[int, int]]:
    """Up to ``count`` ordered (replaced, replacement) pairs of distinct rowids."""
    out = [(a, b) for a in rowids for b in rowids if a != b]
    return out[:count]


def rows_to_try(count: int) -> int:
    """How many spread rows give ``count`` ordered pairs: k (k - 1) >= count."""
    return max(2, math.ceil((1 + math.sqrt(1 + 4 * count)) / 2))


def candidates(database: Path, table: str, relation: str,
               count: int) -> list[tuple[int, int | None]]:
    """Up to ``count`` (replaced, replacement) rowid pairs of ``table`` for ``relation``:
    ``change`` pairs distinct spread rows; ``remove`` pairs each spread row with None."""
    if relation == "change":
        return [(a, b) for a, b in pairs(spread_rowids(database, table, rows_to_try(count)),
                                         count)]
    if relation == "remove":
        return [(r, None) for r in spread_rowids(database, table, count)]
    raise ProgrammingError(
        f"unknown neighbouring relation {relation!r} for one table's rows: choose change or "
        "remove (unit neighbours are units: dpsql.privacy_audit.units)")


def make_neighbour(base_copy: Path, dest: Path, table: str, replaced: int,
                   replacement: int | None) -> Neighbour:
    """``dest``: ``base_copy`` (a copy of the original, same rowids) with the change made
    (row ``replaced`` removed, and a copy of row ``replacement`` added unless it is None)."""
    dest.write_bytes(base_copy.read_bytes())
    with opened(dest) as con:
        if replacement is not None:
            con.execute(f"INSERT INTO {_quote(table)} SELECT * FROM {_quote(table)} "
                        "WHERE rowid = ?", [replacement])
        con.execute(f"DELETE FROM {_quote(table)} WHERE rowid = ?", [replaced])
        con.execute("CHECKPOINT")
    return Neighbour(table, replaced, replacement, dest)
