"""The refusals of :mod:`dpsql.units.paths`: a query whose rows the proof there cannot show
belong to one unit.

Every such refusal says what fails and the one fix they share (join the private tables along
their unit paths), and depends on the SQL and the metadata alone, like the proof. Its message
is built once, where it is raised, from its parts (:func:`refusal_text`): ``what`` fails, and,
when several units are declared, the ``unit`` it is about among them (dpsql.units.multi runs
the proof on one unit's view, where the other units' tables are public, so the analyst needs
to know which unit the refusal is about). The proof holds a :class:`Refusals` with those
parts. The refusal is an :class:`~dpsql.errors.UnsupportedConstructError`;
:class:`NoCountedUnitError` marks the case where the counted rows belong to no unit at all
(public tables only, with private subqueries deciding which are counted), which
dpsql.units.multi words differently under two units.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsql.errors import UnsupportedConstructError

__all__ = ["FIX", "NoCountedUnitError", "Refusals", "refusal_text"]

#: what every refusal of the proof asks for
FIX = ("every private table the query reads must belong to the same unit as the rows it "
       "counts (join the tables along their unit paths, e.g. l_orderkey = o_orderkey)")


def refusal_text(what: str, unit: str | None = None, among: tuple[str, ...] = ()) -> str:
    """The message of the refusal: ``what`` fails, under ``unit`` (``table.column``; None: the
    one declared unit, not named) among the declared units ``among``."""
    named = "" if unit is None else f" {unit}"
    if unit is not None and among:
        named += f" (one of {' and '.join(among)})"
    return f"under the privacy unit{named}, {what}: {FIX}"


class NoCountedUnitError(UnsupportedConstructError):
    """The rows counted belong to no unit, and private subqueries decide which are counted."""


@dataclass(frozen=True)
class Refusals:
    """How one run of the proof words its refusals: the unit it names, and the declared units
    it is among (both unset under one declared unit: the refusal names none)."""

    unit: str | None = None
    among: tuple[str, ...] = ()

    def __call__(self, what: str,
                 kind: type[UnsupportedConstructError] = UnsupportedConstructError
                 ) -> UnsupportedConstructError:
        return kind(refusal_text(what, self.unit, self.among))
