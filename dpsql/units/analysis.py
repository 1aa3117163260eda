"""The analysis of a query under a privacy unit (issue #17; docs/privacy.md, "Privacy units").

The query's shape -- its measurements (COUNT / SUM with clamp bounds; AVG and the variance
family split into them), group keys with their declared domains, output columns and
post-processing -- is what the row-level analysis finds (:func:`analyze_query`, run with every
unknown max frequency taken as 1: under a unit no bound depends on max frequencies, so none is
required). What changes is the bound on one unit's influence, proved here from the SQL and the
metadata alone:

* every aggregated row, and every row deciding whether it is aggregated, belongs to one unit,
  the same (:mod:`dpsql.units.paths`); the executed query computes that unit per row;
* **without GROUP BY** each measurement is released by R2T (:mod:`dpsql.noise.r2t`): each unit's
  contribution c_u (its row count, or its sum of clamped values, split into the non-negative
  and non-positive parts) is truncated at tau_j = 2^j rows' worth, j = 1..log2(GS), so adding
  or removing a unit moves the level-j answer by at most tau_j times the per-row bound;
* **with GROUP BY** (two-stage, as ZetaSQL): each unit keeps at most ``max_groups`` groups
  (chosen by a hash of the group's keys, a function of the unit's own rows) and contributes at
  most ``max_rows_per_group`` rows' worth to each (its count clamped to C, its sum to
  [min(0, C*l), max(0, C*u)]), so one unit moves the histogram by at most kappa*C (counts) or
  kappa*C*max(|l|, |u|) (sums) in L1: a pure release at that global sensitivity. A key
  without a declared domain (``partition_selection: true``), or a key-only GROUP BY / DISTINCT,
  releases the groups whose noisy number of kept units passes a threshold
  (:mod:`dpsql.noise.unit_partition`); ``selection_stability`` is then kappa, the most groups
  one unit is in.

The rows of no unit (a path that does not resolve: NULL or orphan keys) are no unit: they are
the same in both neighbours (docs/privacy.md, "Rows of no unit"), so the executed query adds
them in full, bounded by nothing above (:mod:`dpsql.units.rewrite`), and no bound changes.

Refused under a unit (clear errors, before anything runs): COUNT(DISTINCT ..) and what
:mod:`dpsql.units.paths` cannot prove.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.elastic import Measurement, QueryAnalysis, analyze_query
from dpsql.analysis.kexpr import Const
from dpsql.errors import NotSupportedError, UnsupportedConstructError
from dpsql.metadata import Column, Metadata, PrivacyUnit, Table
from dpsql.noise.plan import is_public
from dpsql.units.paths import UnitSource, unit_source


@dataclass(frozen=True)
class R2TPart:
    """One truncated sum R2T releases: measurement ``index``'s rows' non-negative part
    (``sign`` +1: COUNT, or SUM of max(x, 0)) or non-positive part (-1: SUM of max(-x, 0)),
    each row contributing at most ``bound``."""

    index: int
    sign: int
    bound: float
    integer: bool


@dataclass(frozen=True)
class UnitRelease:
    """What a query under a privacy unit releases, besides the row-level shape."""

    unit: PrivacyUnit
    source: UnitSource
    #: without GROUP BY: the truncated sums R2T releases (measurement order); () with GROUP BY
    parts: tuple[R2TPart, ...]
    #: an aggregate over a derived table grouped by the unit id (dpsql.units.derived): each
    #: unit is at most one of its rows, so kappa = C = 1 hold by the SQL (``unit`` says so)
    #: and the executed query is the row-level one; the shape's description, else None
    derived: str | None = None
    #: the unit table read alone (:func:`unit_table_alone`): each unit is one row of it (its
    #: id is a key), so kappa = C = 1 (``unit`` says so); executed as the two-stage at those
    #: bounds, which keeps the bound without the key's uniqueness; the table's description,
    #: else None
    alone: str | None = None
    #: a result row of several units (dpsql.units.multi): each further unit the query reaches
    #: with how its id is computed; R2T then truncates by max-flow, not per unit
    more: tuple[tuple[PrivacyUnit, UnitSource], ...] = ()

    @property
    def r2t(self) -> bool:
        return bool(self.parts)

    @property
    def label(self) -> str:
        return " and ".join(f"{u.table}.{u.column}"
                            for u in (self.unit, *(u for u, _ in self.more)))


_STRUCTURAL: dict[int, tuple[Metadata, Metadata]] = {}


def structural_metadata(metadata: Metadata) -> Metadata:
    """``metadata`` with every unknown max frequency taken as 1: the
    row-level analysis then finds the query's shape without requiring max frequencies, which
    no bound under a unit uses (its ES values are discarded)."""
    hit = _STRUCTURAL.get(id(metadata))
    if hit is not None and hit[0] is metadata:
        return hit[1]
    tables: dict[str, Table] = {}
    for name, t in metadata.tables.items():
        columns: dict[str, Column] = {
            c: col if col.max_freq is not None else dataclasses.replace(col, max_freq=1)
            for c, col in t.columns.items()}
        tables[name] = dataclasses.replace(t, columns=columns)
    out = dataclasses.replace(metadata, tables=tables)
    if len(_STRUCTURAL) > 16:
        _STRUCTURAL.clear()
    _STRUCTURAL[id(metadata)] = (metadata, out)
    return out


def analyze_unit_request(sql: str, query: exp.Query, metadata: Metadata,
                         top_star: bool) -> QueryAnalysis:
    """:func:`dpsql.analysis.blocks.analyze_request` under a privacy unit: one release;
    aggregates in CTEs, derived tables or subqueries are refused (a block would need a
    unit-level rule of its own), except one derived table grouped by the unit id
    (:mod:`dpsql.units.derived`)."""
    from dpsql.analysis.blocks import _may_have_blocks
    from dpsql.analysis.parse import star_error

    if metadata.extra_units:  # several unit tables declared (dpsql.units.multi)
        from dpsql.units.multi import analyze_multi

        return analyze_multi(sql, query, metadata, top_star)
    if top_star:
        raise star_error()
    if _may_have_blocks(sql, query):
        from dpsql.units.derived import analyze_derived

        return analyze_derived(query, metadata)
    return analyze_units(query, metadata)


def analyze_units(query: exp.Query, metadata: Metadata) -> QueryAnalysis:
    """Analyse ``query`` (parsed and qualified) under ``metadata.privacy_unit`` (module
    contract). A query of public tables only is the row-level analysis (exact, free)."""
    unit = metadata.privacy_unit
    assert unit is not None
    analysis = analyze_query(query, structural_metadata(metadata))
    if all(is_public(m) for m in analysis.measurements) and not analysis.partition_selection:
        return analysis
    widths = [row_width(m) for m in analysis.measurements]  # refusals before the paths'
    assert isinstance(analysis.query, exp.Select)
    source = unit_source(analysis.query, metadata)
    if unit_table_alone(analysis.query, unit):
        return one_row_per_unit(analysis, unit, source, alone=f"{unit.table} itself "
                                f"({unit.column} is its key)")
    grouped = bool(analysis.group_keys)
    measurements = []
    parts: list[R2TPart] = []
    for m, width in zip(analysis.measurements, widths, strict=True):
        if not grouped:
            parts += r2t_parts(m)
        if grouped:
            bound = nominal_bound(unit.max_groups * unit.max_rows_per_group, width)
        else:
            bound = nominal_bound(unit.max_contribution, width)  # R2T plans its own scales
        measurements.append(dataclasses.replace(m, sensitivity=Const(bound)))
    release = UnitRelease(unit, source, tuple(parts))
    # partition selection under the unit (dpsql.noise.unit_partition): one unit is in at most
    # max_groups of the two-stage's groups, whatever the joins
    stability = (float(unit.max_groups) if analysis.partition_selection else None)
    return dataclasses.replace(analysis, measurements=tuple(measurements), unit=release,
                               selection_stability=stability)


def unit_table_alone(query: exp.Select, unit: PrivacyUnit) -> bool:
    """Whether ``query`` (qualified; its private references proven tied to one unit per row
    by :func:`dpsql.units.paths.unit_source`) aggregates rows of the unit table alone: no
    CTE, and its top-level FROM is that one table, joined to nothing. Then each unit is ONE
    aggregated row at most -- the unit id is a key (docs/privacy.md, "The relation": checked
    by ``dpsql metadata check``) -- whatever its WHERE (EXISTS / IN bodies included) keeps,
    and whether that row is kept depends on the unit's own rows alone (unit_source's proof).
    The release does not lean on the key, though: it runs as the two-stage at kappa = C = 1,
    which clamps a unit stored twice to one row (the red team's duplicate ids)."""
    if query.args.get("with") is not None or query.args.get("joins"):
        return False
    source = query.args.get("from_")
    table = source.this if source is not None else None
    return isinstance(table, exp.Table) and table.name == unit.table


def one_row_per_unit(analysis: QueryAnalysis, unit: PrivacyUnit, source: UnitSource, *,
                     derived: str | None = None, alone: str | None = None) -> QueryAnalysis:
    """The release of a query whose aggregated rows hold at most one row per unit: a derived
    table grouped by the unit (``derived``, its description: the executed query is the
    row-level one) or the unit table read alone (``alone``: executed as the two-stage at
    kappa = C = 1). Each private measurement's sensitivity is its row width w (a unit is one
    row, in one group, once), a partition-selected key's stability 1."""
    assert (derived is None) != (alone is None)
    measurements = [dataclasses.replace(m, sensitivity=Const(row_width(m)))
                    for m in analysis.measurements]
    one = dataclasses.replace(unit, max_groups=1, max_rows_per_group=1)
    release = UnitRelease(one, source, (), derived=derived, alone=alone)
    stability = 1.0 if analysis.partition_selection else None
    return dataclasses.replace(analysis, measurements=tuple(measurements), unit=release,
                               selection_stability=stability)


def r2t_parts(m: Measurement) -> list[R2TPart]:
    """The truncated sums R2T releases for measurement ``m`` (a COUNT or a SUM over [l, u];
    row_width refused the rest): a COUNT's rows, each contributing 1; a SUM's non-negative part
    (rows contributing up to u, when u > 0) and non-positive part (up to -l, when l < 0)."""
    if m.function != "SUM":
        return [R2TPart(m.index, 1, 1.0, True)]
    assert m.bounds is not None
    lo, hi = m.bounds
    return ([R2TPart(m.index, 1, float(hi), False)] if hi > 0 else []) + (
        [R2TPart(m.index, -1, float(-lo), False)] if lo < 0 else [])


def nominal_bound(rows: int, width: float) -> float:
    """``rows * width``, a measurement's nominal bound under a unit; NotSupportedError (from
    the metadata alone) when it passes the largest double, which no noise scale can hold."""
    bound = float(rows) * width
    if not math.isfinite(bound):
        raise NotSupportedError(
            f"a unit's bound on this aggregate ({rows} rows of up to {width:g} each) passes "
            "the largest double: narrow the column's bounds or lower the unit's "
            "max_contribution / max_groups / max_rows_per_group")
    return bound


def row_width(m: Measurement) -> float:
    """What one row moves measurement ``m`` by: 1 for a COUNT, max(|l|, |u|) for a SUM over
    [l, u] (the unit bounds scale it). UnsupportedConstructError for an aggregate no
    unit-level rule covers (VARIANCE, ...) and for COUNT(DISTINCT ...): one unit may hold a
    value many others share, so removing it bounds nothing."""
    if m.function not in ("COUNT", "SUM"):
        raise UnsupportedConstructError(
            f"under a privacy unit, {m.function} has no unit-level rule yet: use COUNT, "
            "SUM or AVG")
    if isinstance(m.node, exp.Count) and isinstance(m.node.this, exp.Distinct):
        raise UnsupportedConstructError(
            "under a privacy unit, COUNT(DISTINCT ...) has no bound yet: one unit may "
            "hold a value many others share; count rows, or GROUP BY the value")
    if m.function == "COUNT":
        return 1.0
    assert m.bounds is not None  # the row-level analysis refuses an unbounded SUM
    return float(max(abs(m.bounds[0]), abs(m.bounds[1])))


def per_group_clamp(m: Measurement, unit: PrivacyUnit) -> tuple[float, float]:
    """The interval one unit's contribution to one group is clamped into (two-stage GROUP
    BY): [0, C] rows for a COUNT, [min(0, C*l), max(0, C*u)] for a SUM over [l, u].

    Guarantee: it holds the sum of any 0..C rows of values in [l, u], so a unit within the
    bounds is not changed (with l > 0, clamping into [C*l, C*u] raised a one-row sum to C
    rows' worth), and it lies within C*max(|l|, |u|) of 0 on both sides: the unit's
    removal moves the group by at most that (the sensitivity of :func:`analyze_units`)."""
    c = unit.max_rows_per_group
    if m.function == "COUNT":
        return (0.0, float(c))
    assert m.bounds is not None
    return (min(0.0, c * float(m.bounds[0])), max(0.0, c * float(m.bounds[1])))
