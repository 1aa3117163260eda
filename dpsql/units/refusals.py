"""The refusals of :mod:`dpsql.units.paths`: a query whose rows the proof there cannot show
belong to one unit.

Every such refusal says what fails and the one fix they share (join the private tables along
their unit paths), with an example join written from the metadata's own declared paths
(:func:`path_joins`: ``lineitem.l_orderkey = orders.o_orderkey`` for a via path,
``orders.o_custkey = customer.c_custkey`` for a direct one; the unit's id when no other table
has a path), preferring one that touches the table the refusal names. The outer-join refusal
is worded apart (:meth:`Refusals.outer_join`): an inner join along the path is its fix, and
the shared "join along the paths" would be wrong when the query already does. Every refusal
depends on the SQL and the (public) metadata alone, like the proof. Its message is built once,
where it is raised, from its parts (:func:`refusal_text`): ``what`` fails, and, when several
units are declared, the ``unit`` it is about among them (dpsql.units.multi runs the proof on
one unit's view, where the other units' tables are public, so the analyst needs to know which
unit the refusal is about). The proof holds a :class:`Refusals` with those parts. The refusal
is an :class:`~dpsql.errors.UnsupportedConstructError`; :class:`NoCountedUnitError` marks the
case where the counted rows belong to no unit at all (public tables only, with private
subqueries deciding which are counted), which dpsql.units.multi words differently under two
units.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import Metadata

__all__ = ["NoCountedUnitError", "PathJoin", "Refusals", "fix_text", "path_joins",
           "refusal_text"]

#: (the two tables it joins, the equality), e.g. (("lineitem", "orders"),
#: "lineitem.l_orderkey = orders.o_orderkey")
PathJoin = tuple[tuple[str, str], str]


def path_joins(metadata: Metadata) -> tuple[PathJoin, ...]:
    """The joins along the declared unit paths of ``metadata``'s privacy unit, in the tables'
    order, via paths first (they show both forms' shape: a key of another private table); with
    no table but the unit's own, one pseudo-join naming the unit's id. Empty without a unit."""
    unit = metadata.privacy_unit
    if unit is None:
        return ()
    via: list[PathJoin] = []
    direct: list[PathJoin] = []
    for t in metadata.tables.values():
        path = t.unit
        if t.public or path is None or t.name == unit.table:
            continue
        if path.to_table is None:
            direct.append(((t.name, unit.table),
                           f"{t.name}.{path.column} = {unit.table}.{unit.column}"))
        else:
            via.append(((t.name, path.to_table),
                        f"{t.name}.{path.column} = {path.to_table}.{path.to_column}"))
    return (*via, *direct) or (((unit.table, unit.table), f"on {unit.table}.{unit.column}"),)


def _example(joins: tuple[PathJoin, ...], table: str | None) -> str:
    """``joins``' first that touches ``table`` (None: any), as ", e.g. ..." ("" when none)."""
    touching = [text for tables, text in joins if table is None or table in tables]
    chosen = touching or [text for _, text in joins]
    return f", e.g. {chosen[0]}" if chosen else ""


def fix_text(joins: tuple[PathJoin, ...] = (), table: str | None = None,
             example: str | None = None) -> str:
    """What every refusal of the proof asks for, its example ``example`` or else one from
    ``joins`` (preferring one that touches ``table``)."""
    shown = f", e.g. {example}" if example else _example(joins, table)
    return ("every private table the query reads must belong to the same unit as the rows it "
            f"counts (join the tables along their unit paths{shown})")


def refusal_text(what: str, unit: str | None = None, among: tuple[str, ...] = (),
                 fix: str | None = None) -> str:
    """The message of the refusal: ``what`` fails, under ``unit`` (``table.column``; None: the
    one declared unit, not named) among the declared units ``among``; then ``fix`` (None:
    :func:`fix_text` without an example)."""
    named = "" if unit is None else f" {unit}"
    if unit is not None and among:
        named += f" (one of {' and '.join(among)})"
    return f"under the privacy unit{named}, {what}: {fix_text() if fix is None else fix}"


class NoCountedUnitError(UnsupportedConstructError):
    """The rows counted belong to no unit, and private subqueries decide which are counted."""


@dataclass(frozen=True)
class Refusals:
    """How one run of the proof words its refusals: the unit it names, and the declared units
    it is among (both unset under one declared unit: the refusal names none), and the joins
    along that unit's declared paths its examples come from (:func:`path_joins`)."""

    unit: str | None = None
    among: tuple[str, ...] = ()
    joins: tuple[PathJoin, ...] = ()

    def __call__(self, what: str,
                 kind: type[UnsupportedConstructError] = UnsupportedConstructError,
                 table: str | None = None, example: str | None = None
                 ) -> UnsupportedConstructError:
        """The refusal of ``what``: its example ``example`` (the query's own tables, when the
        proof has one), else a path join touching ``table`` when one does."""
        return kind(refusal_text(what, self.unit, self.among,
                                 fix_text(self.joins, table, example)))

    def outer_join(self, side: str, table: str, inner: str | None = None
                   ) -> UnsupportedConstructError:
        """``side`` (LEFT, RIGHT, FULL) JOIN null-extends the private ``table``: refused
        whatever its ON, even along a unit path (the proof ties rows to a unit through
        equalities that hold in every joined row: an outer join's ON does not, on the rows it
        null-extends). The fix is an inner join: ``inner``, the query's own join written so
        (QA round 6: a path example named tables the query does not read), else one along a
        path."""
        on = next((text for tables, text in self.joins
                   if table in tables and tables[0] != tables[1]), None)
        example = inner or (f"JOIN {table} ON {on}" if on else None)
        return UnsupportedConstructError(refusal_text(
            f"{side} JOIN null-extends the private table {table}",
            self.unit, self.among,
            "dpsql proves the unit of each row only through inner joins, so an outer join may "
            "null-extend public tables only, even along a unit path; write it as an inner JOIN"
            f"{f' (e.g. {example})' if example else ''}"))
