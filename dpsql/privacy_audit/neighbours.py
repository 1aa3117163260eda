"""Neighbouring databases for the privacy audit: one row of one private table changed.

dpsql's neighbouring relation (docs/privacy.md section 1) is "change one row of one private
table": a row is replaced by another row's values. The audit looks for the neighbour that moves
the query's exact measurements most: it tries ``count`` replacements among rows spread evenly
over each private table the query reads (deterministically: no randomness outside the noise
module) and keeps the one with the largest L1 change. That is a heuristic search for a bad
case, not a proof that none is worse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from dpsql.errors import ProgrammingError


@dataclass(frozen=True)
class Neighbour:
    """A copy of the database with row ``replaced`` of ``table`` replaced by row
    ``replacement``'s values (rowids of the original database)."""

    table: str
    replaced: int
    replacement: int
    path: Path

    def describe(self) -> str:
        return (f"{self.table}: row {self.replaced} replaced by a copy of row "
                f"{self.replacement}")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def copy_database(source: Path, dest: Path) -> Path:
    """A full copy of DuckDB database ``source`` at ``dest`` (tables, views, macros), read
    through ``ATTACH ... READ_ONLY`` so an unflushed write-ahead log is included."""
    con = duckdb.connect(str(dest))
    try:
        con.execute(f"ATTACH '{source}' AS __audit_source (READ_ONLY)")
        row = con.execute("SELECT current_database()").fetchone()
        assert row is not None
        target = row[0]
        con.execute(f"COPY FROM DATABASE __audit_source TO {_quote(target)}")
        con.execute("DETACH __audit_source")
    finally:
        con.close()
    return dest


def spread_rowids(database: Path, table: str, count: int) -> list[int]:
    """``count`` rowids of ``table`` spread evenly over its rows in rowid order."""
    con = duckdb.connect(str(database), read_only=True)
    try:
        rowids = [r[0] for r in con.execute(
            f"SELECT rowid FROM {_quote(table)} ORDER BY rowid").fetchall()]
    except duckdb.Error as err:
        raise ProgrammingError(f"the audit reads table {table!r} from the database, and could "
                               f"not: {err}") from None
    finally:
        con.close()
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


def make_neighbour(base_copy: Path, dest: Path, table: str, replaced: int,
                   replacement: int) -> Neighbour:
    """``dest``: ``base_copy`` (a copy of the original, same rowids) with the change made."""
    dest.write_bytes(base_copy.read_bytes())
    con = duckdb.connect(str(dest))
    try:
        con.execute(f"INSERT INTO {_quote(table)} SELECT * FROM {_quote(table)} WHERE rowid = ?",
                    [replacement])
        con.execute(f"DELETE FROM {_quote(table)} WHERE rowid = ?", [replaced])
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return Neighbour(table, replaced, replacement, dest)
