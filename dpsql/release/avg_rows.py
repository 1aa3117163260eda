"""A grouped AVG's 95% interval per result row: post-processing of the released noisy values.

With GROUP BY (or over partition-selected groups, or a privacy unit's two-stage), an AVG
column is, per row, its group's noisy SUM over its noisy COUNT, clamped to the argument's
bounds [l, u] (dpsql.rewrite.post). Both measurements are pure with public noise scales, so
each has a public half-width at any confidence (:func:`dpsql.release.record
.measurement_half_width`); the row's interval is the range of the ratio over the box
``SUM +- h_S`` x ``COUNT +- h_C``, within [l, u] (:func:`dpsql.units.avg.ratio_interval`).
Nothing but released values and public parameters is read, and nothing is charged.

What it covers. ``h_S`` and ``h_C`` are the half-widths at 97.5% over all the release's bins
at once (every group; under partition selection every kept group -- their number is the
selection's output, and the two measurements' noise is drawn apart from it -- where the
record's own half-widths are per group), so with probability >= 95% (union bound over the
two measurements; no independence needed) every row's exact SUM and COUNT lie in their boxes
together. On that event each row whose exact COUNT is at least 1 has its exact average -- of
the values clamped into [l, u], as released: under a privacy unit the two-stage's truncated
SUM and COUNT, so the interval covers the noise, not that truncation -- inside its interval.
An R2T release (a privacy unit without GROUP BY) has its own interval
(dpsql.units.record); a smoothed one none (its scale is data-dependent).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from dpsql.noise.plan import NoisePlan
from dpsql.release.record import CONFIDENCE, Release, measurement_half_width
from dpsql.rewrite.post import AvgInterval
from dpsql.units.avg import ratio_interval

__all__ = ["GROUPED_AVG", "MEASUREMENT_CONFIDENCE", "row_intervals", "with_row_intervals"]

#: each of the SUM and the COUNT is read at this confidence, so both hold at CONFIDENCE
MEASUREMENT_CONFIDENCE = 1.0 - (1.0 - CONFIDENCE) / 2

#: the record's words for a column with per-row intervals
GROUPED_AVG = ("95% interval per row (all rows together): the range of its group's noisy SUM "
               "/ noisy COUNT over their 97.5% intervals, within the bounds")


def row_intervals(spec: AvgInterval, plans: Sequence[NoisePlan], cells: int,
                  totals: np.ndarray, counts: np.ndarray
                  ) -> tuple[tuple[float, float], ...] | None:
    """Each row's interval (module docstring) from its noisy SUM ``totals[i]`` and COUNT
    ``counts[i]`` (in the rows' order), or None when either measurement has no public
    half-width (smoothed, R2T, or exact). ``cells``: the bins the rows' half-widths are
    union-bounded over (the release's bins; its kept groups under partition selection)."""
    h_total = measurement_half_width(plans[spec.total], MEASUREMENT_CONFIDENCE, cells)
    h_count = measurement_half_width(plans[spec.count], MEASUREMENT_CONFIDENCE, cells)
    if h_total is None or h_count is None:
        return None
    return tuple(ratio_interval((s - h_total, s + h_total), (c - h_count, c + h_count),
                                spec.bounds)
                 for s, c in zip(np.asarray(totals, dtype=np.float64).tolist(),
                                 np.asarray(counts, dtype=np.float64).tolist(), strict=True))


def with_row_intervals(record: Release, specs: Sequence[AvgInterval],
                       parts: Sequence[tuple[np.ndarray, np.ndarray]],
                       plans: Sequence[NoisePlan], cells: int,
                       caveat: str | None = None) -> Release:
    """``record`` with ``row_intervals_95`` (and :data:`GROUPED_AVG` as its note, after
    ``caveat``: under a privacy unit, what the two-stage truncates) on each column of
    ``specs`` whose measurements have public half-widths; ``parts[k]``: the noisy SUM and
    COUNT of spec k's rows, in the rows' order."""
    columns = list(record.columns)
    note = GROUPED_AVG if caveat is None else f"{caveat}; {GROUPED_AVG}"
    for spec, (totals, counts) in zip(specs, parts, strict=True):
        intervals = row_intervals(spec, plans, cells, totals, counts)
        if intervals is not None:
            columns[spec.position] = dataclasses.replace(
                columns[spec.position], row_intervals_95=intervals, accuracy_note=note)
    return dataclasses.replace(record, columns=tuple(columns))
