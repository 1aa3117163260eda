"""The release record's view of R2T: each bare COUNT/SUM column's 95% interval, and each
AVG's.

The intervals are computed from the noisy truncation levels alone (post-processing, so they
cost no budget and reveal nothing more than the release): :mod:`dpsql.noise.r2t` states what a
COUNT's or SUM's covers, :mod:`dpsql.units.avg` what an AVG's covers (the range of the ratio
over its SUM's and COUNT's 97.5% intervals, within the AVG's bounds). Other columns computed
from several measurements (arithmetic) get none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dpsql.noise.plan import NoisePlan
from dpsql.release.record import ColumnSource, Release
from dpsql.units.analysis import UnitRelease
from dpsql.units.avg import ratio_interval
from dpsql.units.noise import R2TOutcome


def two_stage_note(release: UnitRelease | None, interval: bool = True) -> str | None:
    """The words for a GROUP BY's noisy columns under a privacy unit (the two-stage, whose
    kappa and C truncate a unit that reaches more), or None for every other release (R2T has
    its own; a derived table grouped by the unit and the unit table alone keep every unit whole,
    dpsql.units.analysis). ``interval``: whether the column has a 95% interval to qualify (a
    half-width; a bare AVG's per row, dpsql.release.avg_rows); other columns computed from
    several measurements (a variance, arithmetic of aggregates, a DISTINCT of AVGs) have none,
    and the words say so and where to find one. Public: the owner's bounds alone."""
    if release is None or release.r2t or release.derived or release.alone:
        return None
    u = release.unit
    kept = (f"of what each unit keeps: at most {u.max_groups} group(s) and "
            f"{u.max_rows_per_group} row(s)' worth per group, so low where a unit reaches more")
    if interval:
        return kept + "; the 95% interval covers the noise, not this truncation"
    return kept + ("; no interval: computed from several noisy measurements per group "
                   "(select them for their 95% intervals; a bare AVG gets one per row)")


def with_two_stage_note(record: Release, release: UnitRelease | None) -> Release:
    """``record`` with :func:`two_stage_note` as the accuracy note of every noisy column that
    has none (QA round 5: a count per group read as all rows, its half-width as the accuracy;
    the audit of #17: a column without a half-width is told it has none, not of an interval)."""
    if two_stage_note(release) is None:
        return record
    columns = tuple(
        c if c.mechanism is None or c.accuracy_note or c.half_width_95 == 0.0
        else dataclasses.replace(c, accuracy_note=two_stage_note(
            release, interval=c.half_width_95 is not None))
        for c in record.columns)
    return dataclasses.replace(record, columns=columns)


def with_intervals(record: Release, columns: Sequence[ColumnSource],
                   outcomes: Sequence[R2TOutcome | None],
                   plans: Sequence[NoisePlan]) -> Release:
    """``record`` with ``interval_95`` set on every column that is one bare R2T measurement
    (its own interval) or one AVG (:func:`avg_interval`)."""
    out = []
    for col, rel in zip(columns, record.columns, strict=True):
        interval = None
        if len(col.measurements) == 1 and col.bare_aggregate:
            outcome = outcomes[col.measurements[0]]
            if outcome is not None:
                interval = (outcome.lower95, outcome.upper95)
        elif col.function == "AVG":
            interval = avg_interval(col, outcomes, plans)
        if interval is not None:
            rel = dataclasses.replace(rel, interval_95=interval)
        out.append(rel)
    return dataclasses.replace(record, columns=tuple(out))


def avg_interval(col: ColumnSource, outcomes: Sequence[R2TOutcome | None],
                 plans: Sequence[NoisePlan]) -> tuple[float, float] | None:
    """An AVG column's 95% interval (dpsql.units.avg): its SUM's and COUNT's 97.5% intervals
    (``R2TOutcome.for_avg``; a SUM released exactly, over bounds [0, 0], is [0, 0]) and the
    SUM's clamp bounds. None unless the column is one SUM and one COUNT, both under R2T."""
    by_function = {plans[i].measurement.function: i for i in col.measurements}
    if len(col.measurements) != 2 or set(by_function) != {"SUM", "COUNT"}:
        return None
    total_i, count_i = by_function["SUM"], by_function["COUNT"]
    bounds = plans[total_i].measurement.bounds
    count = outcomes[count_i]
    if bounds is None or count is None or plans[count_i].r2t is None:
        return None
    total = outcomes[total_i]
    return ratio_interval((0.0, 0.0) if total is None else total.for_avg, count.for_avg, bounds)
