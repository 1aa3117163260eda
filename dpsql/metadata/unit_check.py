"""Checking the declared privacy unit and paths on the data (owner-side; ``dpsql metadata check
-m M -d D``), and the two queries ``dpsql metadata build --unit`` reuses to propose paths.

The relation "add or remove one unit with every row linked to it" (docs/privacy.md, privacy
units) assumes that each path's target is a key: a row references at most one row of the next
table, so it belongs to at most one unit. Loading metadata never reads data
(:mod:`dpsql.metadata.unit_paths` checks the declarations only); this module checks the data:

* the unit's id column and every ``to`` column are unique among their non-NULL values (a NULL
  matches nothing, so NULLs may repeat); a repeated key is an error (:attr:`UnitReport.ok` is
  False): rows would belong to two units, or one unit would be two;
* per path, the rows whose column is NULL, the orphans (non-NULL values with no match in the
  target), and all the rows whose path reaches no unit: the NULLs, a via path's orphans, and
  rows referencing a row that itself reaches none. Such rows belong to no unit and every
  release counts them in full, so they are warnings. A direct path's orphans are not among
  them: its value is the unit id, whether or not the unit table has that row (a warning too:
  each is a unit of its own).

Everything here counts private rows: the report is for the data owner, never for analysts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dpsql.errors import Error, OperationalError, ProgrammingError
from dpsql.metadata.model import Metadata
from dpsql.metadata.unit_multi import all_units, unit_view
from dpsql.sql import quote_ident

Fetch = Callable[[str], list[tuple]]


def _counts(fetch: Fetch, sql: str, what: str) -> list[int]:
    """The counts of the one row ``sql`` returns; a failure names the check (``what``)."""
    try:
        (row,) = fetch(sql)
    except Error as exc:
        raise OperationalError(f"checking {what} failed: {exc.message} (are the table and "
                               "column in the database, and of comparable types?)") from None
    return [int(v) for v in row]


def key_sql(table_sql: str, column: str) -> str:
    """One row (non-NULL values, repeated non-NULL values, NULLs) of ``column``; the column is a
    key when the repeated count is 0."""
    col = quote_ident(column)
    return (f"SELECT count({col}), count({col}) - count(DISTINCT {col}), count(*) - count({col}) "
            f"FROM {table_sql}")


def orphan_sql(table_sql: str, column: str, target_sql: str, key: str) -> str:
    """One row (rows, NULLs, orphans) of ``table.column`` referencing ``target.key``: orphans
    are the rows whose non-NULL value occurs nowhere in the key (DISTINCT: a repeated key does
    not multiply rows)."""
    return (
        f"SELECT count(*), count(*) - count(c.v), count(c.v) - count(p.k) "
        f"FROM (SELECT {quote_ident(column)} AS v FROM {table_sql}) AS c "
        f"LEFT JOIN (SELECT DISTINCT {quote_ident(key)} AS k FROM {target_sql}) AS p "
        f"ON c.v = p.k"
    )


def reaching_sql(md: Metadata, table: str, column: str) -> str:
    """The values of ``table.column`` in the rows whose path reaches a unit: a direct path's
    non-NULL value is the unit id itself, whether or not the unit table has that row
    (docs/privacy.md, "Privacy units"), and so is a via path's to the unit id itself (the
    engine takes it as the id, with no lookup: dpsql.units.paths.hops); any other via path
    reaches the unit of the row its key matches (a NULL or a key matching no row reaches
    none; ``IN`` drops both)."""
    unit = md.privacy_unit
    assert unit is not None
    t, col = md.tables[table], quote_ident(column)
    if table == unit.table:
        return f"SELECT {col} FROM {quote_ident(table)} WHERE {quote_ident(unit.column)} " \
               "IS NOT NULL"
    p = t.unit
    assert p is not None
    # a via path to the unit id itself reads its value as the unit id, with no lookup
    # (dpsql.units.paths.hops), like a direct path: report_lines' ``direct`` test too
    if p.direct or (p.to_table, p.to_column) == (unit.table, unit.column):
        return (f"SELECT {col} FROM {quote_ident(table)} WHERE {quote_ident(p.column)} "
                "IS NOT NULL")
    else:
        assert p.to_table is not None and p.to_column is not None
        inner = reaching_sql(md, p.to_table, p.to_column)
    return f"SELECT {col} FROM {quote_ident(table)} WHERE {quote_ident(p.column)} IN ({inner})"


@dataclass(frozen=True)
class KeyCheck:
    """A column a path leads to: the unit's id, or a ``to`` column."""

    table: str
    column: str
    values: int
    repeated: int
    nulls: int

    @property
    def unique(self) -> bool:
        return self.repeated == 0


@dataclass(frozen=True)
class PathCheck:
    """One table's path: ``table.column`` references ``to_table.to_column`` (the unit's id for
    a direct path)."""

    table: str
    column: str
    to_table: str
    to_column: str
    rows: int
    nulls: int
    orphans: int
    #: rows whose path reaches no unit: the NULLs, the orphans, and the rows referencing a row
    #: of ``to_table`` that reaches none
    no_unit: int


@dataclass(frozen=True)
class UnitReport:
    """What :func:`check_units` found."""

    keys: tuple[KeyCheck, ...]
    paths: tuple[PathCheck, ...]

    @property
    def ok(self) -> bool:
        """Every key unique: the paths describe the relation the analysis assumes."""
        return all(k.unique for k in self.keys)


def key_checks(md: Metadata, fetch: Fetch) -> tuple[KeyCheck, ...]:
    """The key checks alone (one query per key: the unit's id, then every ``to`` column), the
    part of :func:`check_units` that decides :attr:`UnitReport.ok`; ``dpsql serve`` runs it
    before it serves (precondition as :func:`check_units`'s)."""
    unit = md.privacy_unit
    assert unit is not None
    targets = [(unit.table, unit.column)]
    for t in md.tables.values():
        p = t.unit
        if p is not None and not p.direct:
            assert p.to_table is not None and p.to_column is not None
            if (p.to_table, p.to_column) not in targets:
                targets.append((p.to_table, p.to_column))
    keys = []
    for table, column in targets:
        values, repeated, nulls = _counts(fetch, key_sql(quote_ident(table), column),
                                          f"key {table}.{column}")
        keys.append(KeyCheck(table, column, values, repeated, nulls))
    return tuple(keys)


def refuse_repeated_keys(md: Metadata, fetch: Fetch) -> None:
    """Raise ProgrammingError when a key some unit's paths lead to repeats a value on the
    data (:func:`key_checks`, for each declared unit on its own view), naming the key and the
    fix; nothing without a unit. The relation every unit release assumes needs those keys
    unique, and loading metadata reads no data, so ``dpsql serve`` checks them once before it
    accepts a connection (owner-side: the message counts private values, and only the owner
    starting the server sees it). Nothing else of ``metadata check``'s report is an error."""
    for unit in all_units(md):
        for k in key_checks(unit_view(md, unit.table), fetch):
            if k.unique:
                continue
            if (k.table, k.column) == (unit.table, unit.column):
                what, why = "id", "two rows of the unit table would be one unit"
            else:
                what, why = "path key", ("a row referencing a repeated value would belong to "
                                         "several units")
            raise ProgrammingError(
                f"the privacy unit's {what} {k.table}.{k.column} is not unique on the data "
                f"({k.repeated} values repeat): {why}, which every release under the unit "
                "assumes never happens; run 'dpsql metadata check -m METADATA -d DATABASE' "
                "and deduplicate it or point the paths at a key")


def check_units(md: Metadata, fetch: Fetch) -> UnitReport:
    """Run the checks on the tables of ``md`` (precondition: ``md.privacy_unit`` is declared;
    ``fetch`` runs one DuckDB-dialect query over the tables, named as in the metadata)."""
    unit = md.privacy_unit
    assert unit is not None
    keys = key_checks(md, fetch)
    paths = []
    for t in md.tables.values():
        p = t.unit
        if p is None or t.name == unit.table:
            continue
        to_table = unit.table if p.direct else p.to_table
        to_column = unit.column if p.direct else p.to_column
        assert to_table is not None and to_column is not None
        what = f"path {t.name}.{p.column} -> {to_table}.{to_column}"
        rows, nulls, orphans = _counts(
            fetch, orphan_sql(quote_ident(t.name), p.column, quote_ident(to_table), to_column),
            what)
        (reached,) = _counts(
            fetch, f"SELECT count(*) FROM ({reaching_sql(md, t.name, p.column)}) AS r", what)
        paths.append(PathCheck(t.name, p.column, to_table, to_column, rows, nulls, orphans,
                               rows - reached))
    return UnitReport(keys, tuple(paths))


def report_lines(md: Metadata, report: UnitReport) -> tuple[list[str], list[str], list[str]]:
    """(report lines, warnings, errors) of ``report``, as ``dpsql metadata check`` prints them."""
    unit = md.privacy_unit
    assert unit is not None
    lines: list[str] = []
    warnings: list[str] = []
    errors: list[str] = []
    for k in report.keys:
        role = "unit id" if (k.table, k.column) == (unit.table, unit.column) else "key"
        state = "unique" if k.unique else f"NOT UNIQUE ({k.repeated} repeated values)"
        lines.append(f"{role} {k.table}.{k.column}: {state}, {k.values} values, {k.nulls} NULL")
        if not k.unique:
            errors.append(
                f"{k.table}.{k.column} is not unique ({k.repeated} values repeat): "
                + ("two rows of the unit table would be one unit"
                   if role == "unit id" else
                   "a row referencing a repeated value would belong to several units")
                + "; make it a key (deduplicate) or point the paths at a key")
        if role == "unit id" and k.nulls:
            warnings.append(f"{k.table}: {k.nulls} rows have a NULL {k.column}; they are no "
                            "unit, and rows linked to them belong to no unit")
    for p in report.paths:
        lines.append(f"path {p.table}.{p.column} -> {p.to_table}.{p.to_column}: {p.rows} rows, "
                     f"{p.nulls} NULL, {p.orphans} orphans, {p.no_unit} of no unit")
        direct = (p.to_table, p.to_column) == (unit.table, unit.column)
        if p.no_unit:
            # a direct path's orphans are units (their ids), not rows of no unit
            orphans = 0 if direct else p.orphans
            through = p.no_unit - p.nulls - orphans
            parts = [f"{p.nulls} with a NULL {p.column}"]
            if orphans:
                parts.append(f"{orphans} orphans: {p.column} not in {p.to_table}.{p.to_column}")
            if through:
                parts.append(f"{through} through rows of {p.to_table} of no unit")
            warnings.append(
                f"{p.table}: {p.no_unit} of {p.rows} rows belong to no unit ("
                + ", ".join(parts) + "): the same in every neighbour, so every release counts "
                "them in full")
        if direct and p.orphans:
            warnings.append(
                f"{p.table}: {p.orphans} of {p.rows} rows have a {p.column} value not in "
                f"{p.to_table}.{p.to_column}: each such id is a unit of its own (a direct "
                "path's value is the unit id), bounded like any other")
    return lines, warnings, errors
