"""The analysis of a query when several privacy units are declared (issue #17, R2T's private
relations; dpsql.metadata.unit_multi; docs/privacy.md "Several privacy units").

Neighbours differ in one unit of ANY unit table with its FK cascade. Which units a query can
touch is read from the SQL: the unit tables its private tables link to
(:func:`~dpsql.metadata.unit_multi.reached_units`).

* **No unit reached** (public tables only): the row-level analysis, exact and free.
* **One unit U**: the one-unit analysis on U's view of the metadata
  (:func:`~dpsql.metadata.unit_multi.unit_view`: the tables without a path to U public; the
  query reads none of them, and removing a unit of another table removes none of its rows),
  so everything the one-unit engine does applies unchanged (GROUP BY, derived tables, ...).
* **Two units U, V**, a COUNT / SUM without GROUP BY (R2T's setting): each result row (a row of
  the join the aggregate reads) belongs to one U-unit and one V-unit, each proved by
  :func:`dpsql.units.paths.unit_source` on that unit's view (every row of the join linked to U,
  and every row deciding whether it is counted, belongs to the same U-unit; likewise V). So
  removing a U-unit u removes exactly the result rows whose U-id is u and creates none
  (the one-unit argument, per unit: the rows deciding a result row that u's cascade removes
  share its U-id, so no other result row changes); likewise V. The exact query groups the join
  by the pair of ids (dpsql.units.multi_rewrite) and R2T truncates by the flow/LP of
  dpsql.units.flow, whose optimum moves by at most tau under exactly that change.

Refused (NotSupportedError / UnsupportedConstructError, before anything runs, from the SQL and
the metadata alone): a GROUP BY, DISTINCT or partition selection reaching two units (R2T's LP
truncation releases one number; the fix: one query per group with a WHERE, or a query reaching
one unit), aggregates in a subquery, CTE or derived table reaching two units, and a query
reaching three or more units (the flow is built for two).
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from dpsql.analysis.elastic import QueryAnalysis, analyze_query
from dpsql.analysis.kexpr import Const
from dpsql.errors import NotSupportedError, UnsupportedConstructError
from dpsql.metadata import Metadata, PrivacyUnit
from dpsql.metadata.unit_multi import reached_units, unit_view
from dpsql.noise.plan import is_public
from dpsql.units.analysis import (
    R2TPart,
    UnitRelease,
    analyze_unit_request,
    nominal_bound,
    r2t_parts,
    row_width,
    structural_metadata,
)
from dpsql.units.paths import UnitSource, unit_source
from dpsql.units.refusals import NoCountedUnitError


def _names(units: tuple[str, ...]) -> str:
    return " and ".join(units)


def analyze_multi(sql: str, query: exp.Query, metadata: Metadata,
                  top_star: bool) -> QueryAnalysis:
    """Analyse ``query`` (parsed, qualified) under several declared units (module contract)."""
    from dpsql.analysis.blocks import _may_have_blocks
    from dpsql.analysis.parse import star_error

    reached = reached_units(metadata, [t.name for t in query.find_all(exp.Table)])
    if len(reached) <= 1:
        assert metadata.privacy_unit is not None
        view = unit_view(metadata, (reached[0] if reached else metadata.privacy_unit).table)
        return analyze_unit_request(sql, query, view, top_star)
    names = tuple(u.table for u in reached)
    if len(reached) > 2:
        raise NotSupportedError(
            f"this query reads rows of {len(reached)} privacy units ({_names(names)}); R2T's "
            "truncation is built for results of at most two units: read tables linked to two "
            "of them at most")
    if top_star:
        raise star_error()
    if _may_have_blocks(sql, query):
        raise NotSupportedError(
            f"this query reads rows of two privacy units ({_names(names)}) and aggregates in a "
            "subquery, CTE or derived table: under two units only one COUNT / SUM over a join "
            "is released (R2T); aggregate at the top level only")
    analysis = analyze_query(query, structural_metadata(metadata))
    if all(is_public(m) for m in analysis.measurements) and not analysis.partition_selection:
        return analysis
    if analysis.group_keys or analysis.partition_selection:
        raise NotSupportedError(
            f"GROUP BY (or DISTINCT) over rows of two privacy units ({_names(names)}) is not "
            "supported: R2T's flow truncation releases one COUNT or SUM; run one query per "
            "group (a WHERE on the key), or group rows that link to one unit only")
    widths = [row_width(m) for m in analysis.measurements]  # refusals before the paths'
    assert isinstance(analysis.query, exp.Select)
    sources = [_source_on_view(analysis.query, metadata, u, names) for u in reached]
    parts: list[R2TPart] = []
    measurements = []
    first = reached[0]
    for m, width in zip(analysis.measurements, widths, strict=True):
        parts += r2t_parts(m)
        bound = nominal_bound(first.max_contribution, width)  # R2T plans its own scales
        measurements.append(dataclasses.replace(m, sensitivity=Const(bound)))
    release = UnitRelease(first, sources[0], tuple(parts),
                          more=((reached[1], sources[1]),))
    return dataclasses.replace(analysis, measurements=tuple(measurements), unit=release)


def _source_on_view(query: exp.Select, metadata: Metadata, unit: PrivacyUnit,
                    names: tuple[str, ...]) -> UnitSource:
    """:func:`unit_source` on ``unit``'s view, its refusal naming that unit: on the view the
    tables without a path to it are public, which the analyst, who sees them private, cannot
    guess from the one-unit wording."""
    where = f"{unit.table}.{unit.column}"
    try:  # its refusals name the unit among ``names`` (dpsql.units.refusals)
        return unit_source(query, unit_view(metadata, unit.table), names)
    except NoCountedUnitError:  # the counted rows link to no unit of this table
        raise UnsupportedConstructError(
            f"this query reads rows of two privacy units ({_names(names)}), and the rows "
            f"it counts link to no {unit.table} unit (to that unit they are rows of "
            f"public tables only) while its subqueries read rows that do: removing one "
            f"{where} could change which rows are counted, and no bound holds. Count rows "
            "linked to both (join the subquery's tables at the top level), or query tables "
            "linked to one unit only") from None
