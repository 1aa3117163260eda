"""The types a privacy unit's paths may compare (issue #17; docs/privacy.md, "Privacy units").

The executed query (dpsql.units.rewrite) groups rows by the unit id and looks the unit up along
each path by key equality (a LEFT JOIN to the key). Both are sound only if SQL equality is the
stored value's: two distinct units must never compare equal, or one unit's removal changes what
the merged "unit" keeps (found by the red team: under NOCASE, 'A' and 'a' were one unit in a
two-stage GROUP BY, and removing 'A' moved the histogram by 2 kappa C).

Contract of :func:`check_path_types`: raises :class:`~dpsql.errors.UnsupportedConstructError`
naming the column and the fix unless

* every unit id column (the unit table's, each direct path's) and every key a path points to
  has a type on a positive list whose equality and grouping are the stored value's: integers,
  DECIMAL, strings without a collation, DATE, UUID (floating point merges -0.0 and 0.0, DuckDB
  compares INTERVALs normalised -- '1 month' = '30 days' --, a collation merges case variants,
  an unknown type proves nothing), and
* every via column is injectively comparable with the key it points to
  (:func:`dpsql.analysis.keytypes.comparable`), so the lookup compares stored values; and every
  direct path's column with the unit's id column, so the id one table stores is the id the
  unit table stores (a VARCHAR '01' is not the BIGINT 1: found by the acceptance audit of #17).

:func:`path_type_mismatches` is the second and third checks on declared types alone (``dpsql
metadata check`` without a database reports them; an undeclared type is not compared there).

It reads the metadata alone (types filled from the database by the session), whatever the
query.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.keytypes import comparable, normalise
from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import Metadata

_T = exp.DataType.Type
#: types whose equality and grouping are the stored value's (module docstring)
EXACT_ID_TYPES = frozenset({
    _T.TINYINT, _T.SMALLINT, _T.MEDIUMINT, _T.INT, _T.BIGINT, _T.INT128, _T.INT256,
    _T.UTINYINT, _T.USMALLINT, _T.UMEDIUMINT, _T.UINT, _T.UBIGINT, _T.UINT128, _T.UINT256,
    _T.DECIMAL, _T.TEXT, _T.VARCHAR, _T.NVARCHAR, _T.CHAR, _T.NCHAR, _T.DATE, _T.UUID,
})


def _identity_columns(metadata: Metadata) -> list[tuple[str, str]]:
    unit = metadata.privacy_unit
    assert unit is not None
    columns = {(unit.table, unit.column)}
    for t in metadata.tables.values():
        if t.unit is not None:
            columns.add((t.name, t.unit.column))
            if t.unit.to_table is not None and t.unit.to_column is not None:
                columns.add((t.unit.to_table, t.unit.to_column))
    return sorted(c for c in columns if c[0] in metadata.tables)


def check_path_types(metadata: Metadata) -> None:
    """Refuse unit paths whose equality could merge two units (module contract)."""
    for table, column in _identity_columns(metadata):
        col = metadata.table(table).columns.get(column.lower())
        type_ = col.type if col is not None else None
        dtype = normalise(type_)
        if dtype is None or dtype.this not in EXACT_ID_TYPES:
            raise UnsupportedConstructError(
                f"the unit path column {table}.{column} has "
                f"{'type ' + type_ if type_ else 'no known type'}, whose equality may merge "
                "distinct values (a collation, -0.0 = 0.0 in floating point): two units could "
                "be counted as one. Store unit ids and the keys paths point to as integers, "
                "DECIMAL, dates, UUIDs or strings without a collation")
    mismatches = path_type_mismatches(metadata, unknown=True)
    if mismatches:
        raise UnsupportedConstructError(mismatches[0])


def path_type_mismatches(metadata: Metadata, *, unknown: bool = False) -> list[str]:
    """Each path whose two columns' types do not compare stored values exactly (module
    docstring): a via column and the key it points to, a direct path's column and the unit's
    id column. ``unknown``: an unknown type is a mismatch too (the session's check, on types
    filled from the database); else such a pair is not compared (declared types alone)."""
    unit = metadata.privacy_unit
    assert unit is not None
    out = []
    for t in metadata.tables.values():
        if t.unit is None or t.name == unit.table:
            continue
        column = t.columns.get(t.unit.column)
        if t.unit.to_table is not None:  # the executed lookups compare these exactly
            assert t.unit.to_column is not None
            target = metadata.table(t.unit.to_table).columns.get(t.unit.to_column)
            what = "the lookup compares stored values exactly"
            other = f"{t.unit.to_table}.{t.unit.to_column}"
        else:
            target = metadata.table(unit.table).columns.get(unit.column)
            what = "each row's unit id is one the unit table stores"
            other = f"{unit.table}.{unit.column} (the unit's id)"
        types = (column.type if column else None, target.type if target else None)
        verdict = comparable(*types)
        if verdict is False or (unknown and verdict is None):
            out.append(
                f"the unit path {t.name}.{t.unit.column} -> {other} compares "
                f"{types[0] or 'an unknown type'} with {types[1] or 'an unknown type'}: "
                f"declare both columns with the same type (or integer types), so {what}")
    return out
