"""The release record: what one answer spent and how each column was noised.

It is built from the query's analysis and noise plan alone (never from exact values), before
the ledger is charged: the charge is the record's (epsilon, delta). Nothing data-dependent
(sensitivities, smoothed scales) appears in the record of a smoothed release.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from dpsql.analysis.aggregates import CENTRED_SQUARES
from dpsql.noise import gaussian, mechanisms
from dpsql.noise.partition import SelectionPlan
from dpsql.noise.plan import NoisePlan

CONFIDENCE = 0.95

#: the mechanism name of a release that read public tables only (released exactly, free)
EXACT = "exact"

#: the mechanism name of DP partition selection (dpsql.noise.partition)
PARTITION_SELECTION = "partition_selection"


@dataclass(frozen=True)
class ColumnRelease:
    """Per output column: how it was released and, for pure releases, its 95% half-width."""

    name: str
    mechanism: str | None  # None for group keys and constants
    epsilon: float
    delta: float
    half_width_95: float | None  # None: not publishable (smoothed) or not a single measurement
    #: how the column is computed from its noisy measurements, when that is not plain
    #: arithmetic the analyst wrote (the variance family: dpsql.analysis.aggregates)
    post_processing: str | None = None
    #: Gaussian columns (a single pure measurement): the calibration ("analytic" or
    #: "classical"), sigma in value units (public: pure releases only), and seed 003's
    #: (alpha, beta)-accuracy of one value: P[|noise| > alpha] <= beta, beta = 0.05
    calibration: str | None = None
    sigma: float | None = None
    accuracy_alpha: float | None = None
    accuracy_beta: float | None = None
    #: R2T columns (a privacy unit, no GROUP BY: dpsql.units): a 95% interval computed from
    #: the noisy levels alone (post-processing; dpsql.noise.r2t says what it covers)
    interval_95: tuple[float, float] | None = None
    #: a grouped AVG (pure SUM and COUNT, GROUP BY): each result row's 95% interval, in the
    #: rows' order, all rows together (dpsql.release.avg_rows: from the row's noisy SUM and
    #: COUNT and their public half-widths: post-processing)
    row_intervals_95: tuple[tuple[float, float], ...] | None = None
    #: the public noise scale of a column that is one pure measurement (Laplace b, or the
    #: Gaussian's sigma); for R2T, the scale of each level's draw (``level_scales``: of its
    #: increment when the levels are noised increments, dpsql.noise.r2t)
    noise_scale: float | None = None
    level_scales: tuple[float, ...] | None = None
    #: why no half-width is given, in words, when the reason is the noise itself: a smoothed
    #: column's scale depends on the data (:data:`NOT_PUBLISHABLE`); or, for a column computed
    #: from R2T releases, what its interval is (an AVG's, :data:`R2T_AVG`) or why it has none
    #: (other arithmetic, :func:`r2t_note`)
    accuracy_note: str | None = None
    #: a value chosen by the exponential mechanism over a public grid (MIN / MAX / quantiles,
    #: dpsql.execute.selection): the grid's step (public: from the declared bounds)
    grid_step: float | None = None
    #: a column computed from several pure measurements (an AVG, a variance, arithmetic): each
    #: measurement's label and public noise scales (one Laplace b or Gaussian sigma; R2T's per
    #: level), as ``noise_scale`` / ``level_scales`` give a bare one's
    component_scales: tuple[tuple[str, tuple[float, ...]], ...] | None = None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ColumnRelease:
        """A column record as JSON gave it (the answer cache's payload, the server's NOTICE),
        with its tuples (JSON arrays, read as lists) tuples again: it equals (and hashes as)
        the record it was written from."""
        out = dict(doc)
        for name in ("interval_95", "level_scales"):
            if out.get(name) is not None:
                out[name] = tuple(out[name])
        if out.get("row_intervals_95") is not None:
            out["row_intervals_95"] = tuple(tuple(pair) for pair in out["row_intervals_95"])
        if out.get("component_scales") is not None:
            out["component_scales"] = tuple((label, tuple(scales))
                                            for label, scales in out["component_scales"])
        return cls(**out)


#: the record's words for a column whose noise scale is data-dependent (smoothed)
NOT_PUBLISHABLE = "accuracy not publishable: data-dependent noise"
#: the record's words for an AVG under R2T (:func:`r2t_note`; its interval_95 is
#: dpsql.units.avg's) and for other arithmetic of R2T releases, which gets no interval
R2T_AVG = ("95% interval from the SUM's and COUNT's 97.5% intervals (the range of their "
           "ratio, within the bounds); the value is noisy SUM / noisy COUNT, each R2T "
           "release biased low by its own truncation and shift")
R2T_EXPRESSION = "no interval: computed from R2T releases (each truncated per unit)"


@dataclass(frozen=True)
class Release:
    """The release record of one query: what it spent and how it was noised."""

    epsilon: float
    delta: float
    mechanism: str
    columns: tuple[ColumnRelease, ...]
    fingerprint: str
    cached: bool = False
    #: with a partition-selected key (dpsql.noise.partition): the selection's share of
    #: (epsilon, delta), included in the totals above, and its public threshold tau
    selection_epsilon: float = 0.0
    selection_delta: float = 0.0
    selection_threshold: int | None = None
    #: the selection's public Laplace scale b (None without one, or for the optimal
    #: selection, which draws no noise of its own)
    selection_scale: float | None = None
    #: which selection mechanism drew the groups: "laplace_thresholding" or "optimal
    #: (Desfontaines et al. 2022)" (a privacy unit with max_groups 1, no threshold then)
    selection_mechanism: str | None = None
    #: the privacy unit the release protects ("customer.c_custkey"); None: one row
    privacy_unit: str | None = None
    #: the release's privacy curve's zCDP parameter (dpsql.accounting.curves: sum of
    #: epsilon_i^2/2 for pure Laplace, l2^2/(2 sigma^2) for Gaussian; public), what a budget
    #: under the zCDP filter is charged; None when no curve covers the release (smoothed,
    #: partition selection). The ledger records the whole curve with the charge.
    rho: float | None = None

    @property
    def free(self) -> bool:
        """True when the answer read public tables only: released exactly, charged nothing."""
        return self.mechanism == EXACT

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Result:
    """Noisy rows with column names and type names."""

    names: tuple[str, ...]
    types: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    release: Release


@dataclass(frozen=True)
class ColumnSource:
    """What the record needs of one output column: its name, the measurements it is computed
    from, and whether it is one bare COUNT/SUM (only then is a half-width meaningful)."""

    name: str
    measurements: tuple[int, ...]
    bare_aggregate: bool
    function: str | None = None  # COUNT / SUM / AVG for a single-aggregate column


def mechanism_name(plan: NoisePlan) -> str:
    """The ledger's name for how ``plan`` releases its measurement."""
    if plan.scale == 0 and plan.pure:
        return EXACT
    if plan.r2t is not None:
        return "r2t"
    if plan.sigma is not None:
        return "discrete_gaussian" if plan.measurement.integer else "snapped_gaussian"
    kind = "discrete_laplace" if plan.measurement.function == "COUNT" else "snapped_laplace"
    return kind if plan.pure else f"smoothed_{kind}"


#: the post-processing of a variance-family column (dpsql.analysis.aggregates.variance_sql)
VARIANCE_NOTE = (
    "variance from the noisy COUNT n, centred SUM S1 and centred SUM of squares S2 of the "
    "argument clamped to its bounds [l, u] (centre m = (l+u)/2, h = (u-l)/2): population "
    "max(0, S2/n - (S1/n)^2) with n >= 1, at most h^2; sample (S2 - S1^2/n)/(n-1) with n >= 2, "
    "at most h^2 n/(n-1); STDDEV is its square root"
)


def r2t_note(function: str | None, bare: bool, parts: Sequence[NoisePlan]) -> str | None:
    """The accuracy note of a column computed from ``parts`` when R2T releases them (a
    privacy unit without GROUP BY), or None for one bare COUNT / SUM, whose interval comes
    from its noisy levels (dpsql.units.record). An AVG is noisy SUM / noisy COUNT, each
    truncated and shifted low by its own R2T release (a signed SUM: each of its two parts);
    its 95% interval is the range of the ratio over the SUM's and COUNT's 97.5% intervals
    (dpsql.units.avg), which the note names. Other arithmetic of R2T releases gets no
    interval, and the note says so."""
    if not any(p.r2t is not None for p in parts) or (bare and len(parts) == 1):
        return None
    return R2T_AVG if function == "AVG" else R2T_EXPRESSION


def _post_processing(parts: list[NoisePlan]) -> str | None:
    if any(p.measurement.label.startswith(CENTRED_SQUARES) for p in parts):
        return VARIANCE_NOTE
    return None


def _scales(p: NoisePlan) -> tuple[float, ...]:
    """A pure measurement's public noise scales: R2T's per level, else its one scale (0 when
    released exactly)."""
    if p.r2t is not None:
        return tuple(x for part in p.r2t for x in part.scales)
    return (p.scale,)


def measurement_half_width(p: NoisePlan, confidence: float, cells: int) -> float | None:
    """The half-width of one measurement's error at ``confidence`` over ``cells`` bins at once,
    or None when it is not publishable: not pure (smoothed), R2T (its interval comes from its
    noisy levels), or released exactly (scale 0). Laplace: ``b ln(cells / beta)``
    (:func:`dpsql.noise.mechanisms.laplace_half_width`) plus 1/2 for an integer count's
    discrete noise or the grid step g of a snapped sum; Gaussian: the sigma^2-subgaussian
    tail (:func:`dpsql.noise.gaussian.gaussian_half_width`) plus g/2 of snapping for sums.
    Public: the plan's scale and grid are functions of public parameters when it is pure."""
    if not p.pure or p.r2t is not None or not p.scale > 0:
        return None
    if p.sigma is not None:
        snap = 0.0 if p.measurement.integer else (p.granularity or 0.0) / 2.0
        return gaussian.gaussian_half_width(p.scale, confidence, cells=max(cells, 1)) + snap
    width = mechanisms.laplace_half_width(p.scale, confidence, cells=max(cells, 1))
    return width + (0.5 if p.measurement.integer else (p.granularity or 0.0))


def _gaussian_accuracy(p: NoisePlan, n_bins: int) -> tuple[float, dict[str, Any]]:
    """(95% half-width over all bins, the Gaussian record fields) of a column that is one bare
    pure Gaussian measurement (for any other column sigma is not the column's own, so only the
    calibration is recorded). The noise is g N_Z(0, sigma^2) (g = 1 for counts): sigma^2-subgaussian
    (:func:`dpsql.noise.gaussian.gaussian_half_width`), plus at most g/2 of snapping for sums;
    an integer count's error needs no rounding term."""
    beta = 1.0 - CONFIDENCE
    fields: dict[str, Any] = {
        "calibration": p.calibration, "sigma": p.scale,  # in value units (sigma * grid)
        "accuracy_alpha": measurement_half_width(p, CONFIDENCE, 1),
        "accuracy_beta": round(beta, 12)}
    width = measurement_half_width(p, CONFIDENCE, n_bins)
    assert width is not None  # a pure Gaussian measurement
    return width, fields


def release_record(columns: tuple[ColumnSource, ...], plans: tuple[NoisePlan, ...],
                   fingerprint: str, n_bins: int,
                   selection: SelectionPlan | None = None, *,
                   unit: str | None = None) -> Release:
    """The record of releasing ``plans`` over ``n_bins`` bins (and, with ``selection``, of
    selecting the groups first: ``n_bins`` is then 1, since the number of kept groups is
    known only after the charge, and half-widths are per group).

    Guarantee: its (epsilon, delta) is the basic-composition sum over the measurements and
    the selection, which is what the ledger charges; a 95% half-width is given only for a
    column that is a single pure measurement (for a smoothed one it would reveal the
    data-dependent scale); a Gaussian one also records its calibration, sigma and (alpha,
    beta)-accuracy.
    """
    out = []
    for col in columns:
        if not col.measurements:
            out.append(ColumnRelease(col.name, None, 0.0, 0.0, None))
            continue
        parts = [plans[i] for i in col.measurements]
        mech = "+".join(sorted({mechanism_name(p) for p in parts}))
        width = None
        single = len(parts) == 1 and parts[0].pure
        extra: dict[str, Any] = {}
        if single and parts[0].scale == 0:
            width = 0.0  # public data only: released exactly
        elif parts[0].r2t is not None:
            # R2T: its interval comes from the noisy levels (dpsql.units.record); a signed
            # SUM's two parts share the same level scales up to their row bounds
            if single and col.bare_aggregate:
                extra["level_scales"] = tuple(x for pp in parts[0].r2t for x in pp.scales)
            else:  # AVG: what its interval is; other arithmetic: why there is none
                extra["accuracy_note"] = r2t_note(col.function, col.bare_aggregate, parts)
        elif single and parts[0].sigma is not None and col.bare_aggregate:
            width, extra = _gaussian_accuracy(parts[0], n_bins)
        elif single and col.bare_aggregate:
            # discrete counts: integer error <= alpha + 1/2; sums: <= alpha + grid step
            width = measurement_half_width(parts[0], CONFIDENCE, n_bins)
        if single and col.bare_aggregate and parts[0].r2t is None and parts[0].scale > 0:
            extra["noise_scale"] = parts[0].scale  # pure: a function of public parameters
        elif not (single and col.bare_aggregate) and all(p.pure for p in parts):
            extra["component_scales"] = tuple((p.measurement.label, _scales(p)) for p in parts)
        calibrations = sorted({p.calibration for p in parts if p.calibration})
        if calibrations and "calibration" not in extra:  # AVG, arithmetic: sigma is not
            extra["calibration"] = "+".join(calibrations)  # the column's own
        if not all(p.pure for p in parts):
            extra["accuracy_note"] = NOT_PUBLISHABLE
        out.append(ColumnRelease(col.name, mech, math.fsum(p.epsilon for p in parts),
                                 math.fsum(p.delta for p in parts), width,
                                 _post_processing(parts), **extra))
    mechanisms_used = {mechanism_name(p) for p in plans}
    if selection is None:
        return Release(
            epsilon=math.fsum(p.epsilon for p in plans),
            delta=math.fsum(p.delta for p in plans),
            mechanism="+".join(sorted(mechanisms_used)),
            columns=tuple(out),
            fingerprint=fingerprint,
            privacy_unit=unit,
        )
    # a selection sharing a COUNT(*)'s noisy values spends that COUNT's epsilon (counted in
    # the plans), once; its delta is its own
    own_epsilon = 0.0 if selection.shared is not None else selection.epsilon
    return Release(
        epsilon=math.fsum([own_epsilon, *(p.epsilon for p in plans)]),
        delta=math.fsum([selection.delta, *(p.delta for p in plans)]),
        mechanism="+".join(sorted(mechanisms_used | {PARTITION_SELECTION})),
        columns=tuple(out),
        fingerprint=fingerprint,
        selection_epsilon=selection.epsilon,
        selection_delta=selection.delta,
        selection_threshold=selection.threshold,
        selection_scale=selection.scale,
        selection_mechanism=selection.mechanism,
        privacy_unit=unit,
    )


#: one release of a request: (label, its columns, its noise plans, its number of bins)
Part = tuple[str, tuple[ColumnSource, ...], tuple[NoisePlan, ...], int]


def combined_record(parts: Sequence[Part], fingerprint: str) -> Release:
    """The record of one request that makes several releases (dpsql.analysis.blocks): each
    part is (label, its columns, its noise plans, its number of bins).

    Guarantee: its (epsilon, delta) is the basic-composition sum over every part's
    measurements (what the ledger charges, once, for all of them); the columns are each
    part's record columns, named ``label.column`` (a part labelled "" keeps its names: the
    final release of a two-phase query), with :func:`release_record`'s half-widths.
    """
    columns: list[ColumnRelease] = []
    plans: list[NoisePlan] = []
    for label, sources, part_plans, n_bins in parts:
        record = release_record(sources, part_plans, fingerprint, n_bins)
        columns += [replace(c, name=f"{label}.{c.name}") if label else c for c in record.columns]
        plans += part_plans
    return Release(
        epsilon=math.fsum(p.epsilon for p in plans),
        delta=math.fsum(p.delta for p in plans),
        mechanism="+".join(sorted({mechanism_name(p) for p in plans})),
        columns=tuple(columns),
        fingerprint=fingerprint,
    )
