"""The refusals of :mod:`dpsql.units.paths`: a query whose rows the proof there cannot show
belong to one unit.

Every such refusal says what fails and the one fix they share (join the private tables along
their unit paths), and depends on the SQL and the metadata alone, like the proof.
:class:`NoCountedUnitError` marks the case where the counted rows belong to no unit at all
(public tables only, with private subqueries deciding which are counted), which
:mod:`dpsql.units.multi` words differently under two units.
"""

from __future__ import annotations

from dpsql.errors import UnsupportedConstructError

__all__ = ["REFUSAL_PREFIX", "NoCountedUnitError", "refuse"]

#: how every refusal here begins (dpsql.units.multi names the unit after it)
REFUSAL_PREFIX = "under the privacy unit, "


class NoCountedUnitError(UnsupportedConstructError):
    """The rows counted belong to no unit, and private subqueries decide which are counted."""


def refuse(what: str, kind: type[UnsupportedConstructError] = UnsupportedConstructError
           ) -> UnsupportedConstructError:
    """The refusal of a query whose private rows ``what`` says may not share one unit."""
    return kind(
        f"{REFUSAL_PREFIX}{what}: every private table the query reads must belong to "
        "the same unit as the rows it counts (join the tables along their unit paths, e.g. "
        "l_orderkey = o_orderkey)")
