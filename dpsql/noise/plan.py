"""The noise plan: each measurement's share of the budget and its noise scale.

Contract of :func:`plan_noise`: the measurements' epsilons sum to the budget's epsilon and
their deltas to at most its delta (basic composition); a measurement of public tables only
(elastic sensitivity 0 at every distance) gets no share and is released exactly. A pure
release's scale is ES/epsilon (global sensitivity); a smoothed one's is 2S/epsilon over a value
clamped to a public window (:func:`_smoothed_plan`). Every refusal here depends on the SQL, the
public metadata and the budget alone, never on max frequencies or smoothed scales.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dpsql.analysis.elastic import Measurement, QueryAnalysis
from dpsql.budget import Budget, missing_epsilon
from dpsql.errors import NotSupportedError
from dpsql.noise import gaussian_plan, mechanisms
from dpsql.noise.smooth import ScanMemo, Smoothed, smooth

if TYPE_CHECKING:
    from dpsql.units.noise import PartPlan


@dataclass(frozen=True)
class NoisePlan:
    """How one measurement is released: its share of the budget and its noise scale."""

    measurement: Measurement
    epsilon: float
    delta: float  # 0 for a pure release
    elastic_sensitivity: float  # ES at the requested distance (owner-only)
    smoothed: Smoothed | None  # None for a pure release
    scale: float  # Laplace scale b
    #: SUM only: the power-of-two grid the value is snapped to (mechanisms.release_sums)
    granularity: float | None = None
    #: smoothed only: the public interval every exact value is clamped into before noise
    #: (:func:`_smoothed_plan`); it depends on epsilon and the bounds alone
    window: tuple[float, float] | None = None
    #: Gaussian only (dpsql.noise.gaussian_plan): the discrete Gaussian's sigma, in grid steps
    #: for a SUM (its noise is granularity * N_Z(0, sigma^2)); ``scale`` is then sigma in
    #: value units. Public: pure releases only
    sigma: float | None = None
    #: Gaussian only: "analytic" or "classical"
    calibration: str | None = None
    #: Gaussian only: the squared L2 norm of a neighbour's move, in the units of ``sigma``
    #: (public; the release is l2_squared / (2 sigma^2)-zCDP: dpsql.accounting.curves)
    l2_squared: int | None = None
    #: under a privacy unit without GROUP BY (dpsql.units.noise): the measurement's R2T
    #: parts, each with its share of epsilon and public per-level scales; ``scale`` is then
    #: the largest of them
    r2t: tuple[PartPlan, ...] | None = None

    @property
    def pure(self) -> bool:
        return self.smoothed is None


def is_public(m: Measurement) -> bool:
    """Whether ``m`` reads public tables only: ES(k) = 0 for every k. Max frequencies are at
    least 1, so this is decided by the SQL and the tables' public flags alone."""
    return not m.sensitivity.depends_on_k and m.sensitivity.at(0) == 0


def is_public_query(analysis: QueryAnalysis) -> bool:
    """Whether every measurement of ``analysis`` is public: the answer is released exactly
    and costs nothing (no epsilon needed). Never with a partition-selected key: its groups
    come from private data (dpsql.noise.partition), even when no aggregate is measured."""
    return (all(is_public(m) for m in analysis.measurements)
            and not analysis.partition_selection)


def draws_with_delta(analysis: QueryAnalysis, budget: Budget, *, selected: bool) -> bool:
    """Whether the release of ``analysis`` at ``budget`` may depend on ``budget.delta`` (a
    partition-selected key when ``selected``); the answer cache keys a release that does not by
    delta 0 (dpsql.release.cache), so a repeat asked with another, unused, delta is served the
    same paid-for draw.

    Guarantee: False only when neither :func:`plan_noise` nor :func:`split_budget` (a release
    block's share) reads ``budget.delta`` for this analysis: a Laplace release without a
    smoothed measurement (every private measurement gets delta 0 and its scale from epsilon and
    the public sensitivity), or R2T under a privacy unit (dpsql.units.noise.plan_r2t reads
    epsilon and the mechanism only). Then the plans, the refusals, the record (delta 0) and the
    noise are one function of the rest of the request, whatever delta was asked. True for the
    Gaussian mechanism (sigma is calibrated at delta), a partition-selected key (its threshold
    and share are), and a smoothed measurement (beta is). Decided by the SQL, the public
    metadata and the budget's mechanism alone: ``depends_on_k`` says whether the elastic
    sensitivity varies with the distance, a property of the query's joins, never of max
    frequencies' values or of a smoothed scale. Keep it in step with :func:`plan_noise`.
    """
    if budget.mechanism != "laplace" or selected:
        return True
    if analysis.unit is not None and analysis.unit.r2t:
        return False  # plan_r2t, or no private measurement (nothing reads delta either way)
    return any(m.sensitivity.depends_on_k for m in analysis.measurements)


def plan_noise(
    analysis: QueryAnalysis, budget: Budget | None, *, distance: int = 0
) -> tuple[NoisePlan, ...]:
    """Split ``budget`` evenly over the private measurements and compute each noise scale.

    Basic composition: the private measurements' epsilons sum to ``budget.epsilon``; delta is
    split over the smoothed ones only (pure releases need none), so the deltas sum to at most
    ``budget.delta``. Public measurements get (0, 0) and scale 0. ``budget`` may be None only
    for a public query (:func:`is_public_query`). With ``budget.mechanism == 'gaussian'``,
    every private measurement gets (epsilon/n, delta/n) and discrete Gaussian noise
    (:func:`_gaussian_plans`).
    """
    private = [m for m in analysis.measurements if not is_public(m)]
    if private and budget is None:
        raise missing_epsilon()
    if analysis.unit is not None and analysis.unit.r2t and private:
        from dpsql.units.noise import plan_r2t  # dpsql.units builds on this module
        return plan_r2t(analysis, budget)
    epsilon, delta = (budget.epsilon, budget.delta) if budget is not None else (0.0, 0.0)
    if budget is not None and budget.mechanism == "gaussian":
        return _gaussian_plans(analysis, private, budget, distance)
    smoothed_ms = [m for m in private if m.sensitivity.depends_on_k]
    if smoothed_ms and delta <= 0:
        raise NotSupportedError(
            "this query joins private tables, so its sensitivity depends on the data and needs "
            "delta > 0: pass a delta such as 1e-8"
        )
    eps_each = epsilon / len(private) if private else 0.0
    delta_each = delta / len(smoothed_ms) if smoothed_ms else 0.0
    if private and not eps_each > 0.0:  # epsilon near 5e-324, split: underflows to 0
        raise NotSupportedError(
            f"epsilon {epsilon:g} is too small to split over this query's {len(private)} "
            "noisy aggregates: raise epsilon")
    plans = []
    memo = ScanMemo()  # the measurements' scans share their grid and common parts
    for m in analysis.measurements:
        es_at = m.sensitivity.at(distance)
        if is_public(m):
            plans.append(NoisePlan(m, 0.0, 0.0, es_at, None, 0.0))
            continue
        if m.sensitivity.depends_on_k:
            sm = smooth(m.sensitivity, eps_each, delta_each, memo=memo)
            plan = _smoothed_plan(m, eps_each, delta_each, es_at, sm)
        else:
            _check_finite(es_at, "elastic sensitivity")
            plan = _pure_plan(m, eps_each, es_at)
            _check_finite(plan.scale, "noise scale")
        plans.append(plan)
    return tuple(plans)


def _gaussian_plans(analysis: QueryAnalysis, private: list[Measurement], budget: Budget,
                    distance: int) -> tuple[NoisePlan, ...]:
    """:func:`plan_noise` for ``mechanism='gaussian'`` (dpsql.noise.gaussian_plan): every
    private measurement gets (epsilon/n, delta/n) by basic composition, and discrete Gaussian
    noise certified for that share; refusals (delta 0, smoothed releases, classical with
    epsilon >= 1) depend on the SQL, the metadata and the budget alone."""
    n = len(private)
    eps_each = budget.epsilon / n if n else 0.0
    delta_each = budget.delta / n if n else 0.0
    gaussian_plan.check_gaussian(private, eps_each, budget.delta, budget.calibration)
    grouped = bool(analysis.group_keys)
    cal = budget.calibration
    # under a privacy unit (two-stage, or one row per unit) the sensitivity is kappa C w over
    # at most kappa bins, each moving by C w: not the row-level histogram's ES / 2 per bin
    # (which halved a kappa = 1 bin's move: a unit's C rows against C / 2)
    unit_bins = (analysis.unit.unit.max_groups
                 if analysis.unit is not None and grouped else None)
    plans = []
    for m in analysis.measurements:
        es_at = m.sensitivity.at(distance)
        if is_public(m):
            plans.append(NoisePlan(m, 0.0, 0.0, es_at, None, 0.0))
            continue
        es = m.sensitivity.at(0)
        _check_finite(es, "elastic sensitivity")
        if m.function == "COUNT":
            sigma, l2_squared, _ = gaussian_plan.count_sigma(es, grouped, eps_each,
                                                             delta_each, cal, unit_bins)
            plans.append(NoisePlan(m, eps_each, delta_each, es_at, None, sigma,
                                   sigma=sigma, calibration=cal, l2_squared=l2_squared))
            continue
        assert m.bounds is not None
        width = max(m.bounds[1], 0.0) - min(m.bounds[0], 0.0)
        steps, g, l2_squared, _ = gaussian_plan.sum_sigma(es, width, grouped, eps_each,
                                                         delta_each, cal, unit_bins)
        plans.append(NoisePlan(m, eps_each, delta_each, es_at, None, steps * g, g,
                               sigma=steps, calibration=cal, l2_squared=l2_squared))
    return tuple(plans)


def _too_noisy() -> NotSupportedError:
    # pure releases only: their scale ES/epsilon depends on the SQL, public metadata and
    # epsilon, never on private data
    return NotSupportedError(
        "the noise this query needs is too large to release anything useful: raise epsilon, "
        "tighten the bounds, or split the query"
    )


def _pure_plan(m: Measurement, epsilon: float, es_at: float) -> NoisePlan:
    """Global sensitivity ES: scale ES/epsilon (counts: exact discrete Laplace).

    A SUM is snapped to a grid g; a neighbour then moves the snapped value by at most ES + g,
    so the scale is (ES + g)/epsilon with g the grid of that scale (g grows with the scale, so
    the second step settles it). The scale is data-independent, so the grid leaks nothing.
    """
    es = m.sensitivity.at(0)
    if m.function == "COUNT":
        scale = es / epsilon
        if scale > mechanisms.MAX_DISCRETE_SCALE:
            raise _too_noisy()
        return NoisePlan(m, epsilon, 0.0, es_at, None, scale)
    try:
        scale, g = mechanisms.gridded_sum_scale(es, epsilon)
    except (mechanisms.EpsilonTooSmallForSum, mechanisms.EpsilonTooLargeForSum) as e:
        raise type(e)(f"{m.label or 'a SUM'}: {e}") from None
    except ValueError:  # the scale leaves [2^-1000, 2^1000]: bounds and epsilon alone
        raise _scale_out_of_range(m) from None
    return NoisePlan(m, epsilon, 0.0, es_at, None, scale, g)


def _scale_out_of_range(m: Measurement) -> mechanisms.ScaleOutOfRange:
    """The refusal of a SUM whose noise scale leaves the sums' range: from its bounds and
    epsilon alone (pure and smoothed plans)."""
    return mechanisms.ScaleOutOfRange(
        f"the noise scale of {m.label or 'a SUM'} (from its bounds and epsilon) lies outside "
        "[2^-1000, 2^1000], where dpsql's sums are released: declare bounds of a usual "
        "magnitude (rescale the column, e.g. to thousands) or use another epsilon")


def count_window(epsilon: float) -> float:
    """The public window [0, W] every smoothed count is clamped into: the largest whole W with
    2W/epsilon <= MAX_DISCRETE_SCALE (0 when epsilon < 2^-31), at most 2^1000 (finite at any
    epsilon). Depends on epsilon alone."""
    # at most 2^1000: epsilon * 2^31 passes the largest double from epsilon ~8e298 on
    return float(math.floor(min(epsilon * mechanisms.MAX_DISCRETE_SCALE / 2.0, _MAX_WINDOW)))


def _smoothed_plan(
    m: Measurement, epsilon: float, delta: float, es_at: float, sm: Smoothed
) -> NoisePlan:
    """Smoothed sensitivity S: Laplace scale 2S/epsilon, over a value clamped to a public window.

    Precondition: ``sm`` is S for ``m`` at (epsilon, delta); S may be any float (even inf).
    Guarantee: raises only :class:`~dpsql.noise.mechanisms.ScaleOutOfRange`, a refusal that
    depends on the bounds and epsilon alone (never on S). The exact value is clamped into the
    window (``window``, public: epsilon and the bounds alone), a clamp under which one change
    moves it by at most the window's width V; min(S, V) is still beta-smooth (a minimum of beta-
    smooth functions) and bounds the clamped value's local sensitivity, so scale 2 min(S,
    V)/epsilon gives (epsilon, delta)-DP, and it never exceeds what the discrete sampler takes.
    Refusing instead when S is large would depend on max frequencies: an analyst could binary-
    search one for free by varying epsilon. Wherever S <= V (every realistic query) the noise is
    exactly FLEX's; the clamp changes only answers beyond the window (at epsilon 0.1: counts
    above 2.1e8; see docs/privacy.md).

    Counts use grid-free discrete Laplace: docs/privacy.md section 4 proves the release
    (epsilon, delta)-DP for the discrete law (sliding by an integer shift <= S is pure;
    dilation between scales within e^beta costs < delta with beta from
    dpsql.noise.smooth.beta_for). Sums are snapped to a grid g0
    fixed by the bounds and epsilon alone (the smallest scale any smoothed SUM of this column
    could have), never by the data-dependent scale, whose power of two the grid would reveal;
    the snapped shift is at most LS + g0, and S + g0 is still beta-smooth.
    """
    raw = sm.smooth_sensitivity
    if m.function == "COUNT":
        width = count_window(epsilon)
        scale = 2.0 * _capped(raw, width) / epsilon
        return NoisePlan(m, epsilon, delta, es_at, sm, scale, window=(0.0, width))
    assert m.bounds is not None
    try:
        mechanisms.check_sum_epsilon(epsilon)
    except mechanisms.EpsilonTooLargeForSum as e:
        raise mechanisms.EpsilonTooLargeForSum(f"{m.label or 'a SUM'}: {e}") from None
    bound_width = max(m.bounds[1], 0.0) - min(m.bounds[0], 0.0)
    # 2^12 above the finest grid: joins whose S is up to 2^24 times the smallest possible
    # scale still fit the discrete sampler, at a snapping error below 1% of any noise scale.
    try:
        g0 = mechanisms.sum_granularity(2.0 * max(bound_width, 1e-300) / epsilon) * 2.0**12
    except mechanisms.ScaleOutOfRange:
        raise _scale_out_of_range(m) from None
    # 2 (S' + g0)/epsilon <= MAX_DISCRETE_SCALE g0 for every S' <= width; at most 2^1000, so
    # it stays finite for huge bounds and epsilon (an infinite window let an infinite S through
    # to a release that raised: an error that depended on max frequencies, red team)
    # (2^31 g0 first: epsilon * 2^32 passed the largest double from epsilon ~8e298 on, and the
    # window became 2^1000, which only a large, capped S reached: release_sums then raised,
    # an error read from max frequencies; powers of two, so the same value otherwise)
    width = min(max(epsilon * (mechanisms.MAX_DISCRETE_SCALE / 2.0 * g0) - g0, 0.0),
                _MAX_WINDOW)
    if not math.isfinite(2.0 * (width + g0) / epsilon):  # the largest scale: public
        raise _scale_out_of_range(m)
    scale = 2.0 * (_capped(raw, width) + g0) / epsilon
    return NoisePlan(m, epsilon, delta, es_at, sm, scale, g0, window=(-width / 2, width / 2))


#: the widest public window of a smoothed SUM (finite whatever the bounds and epsilon)
_MAX_WINDOW = 2.0**1000


def _capped(smooth_sensitivity: float, width: float) -> float:
    """min(S, width), and the width for an S that is infinite or not a number (the scan
    reports -1 when every ES(k) is NaN)."""
    return smooth_sensitivity if 0.0 <= smooth_sensitivity <= width else width


def _check_finite(value: float, what: str) -> None:
    if not math.isfinite(value) or value < 0:
        raise NotSupportedError(
            f"the {what} is not a finite number, so no noise scale can protect this query: "
            "declare max frequencies and bounds for the columns it uses"
        )




def split_budget(analyses: Sequence[QueryAnalysis],
                 budget: Budget | None) -> tuple[Budget | None, ...]:
    """Each release's share of ``budget`` when one request makes several (release blocks,
    dpsql.analysis.blocks), by basic composition.

    Guarantee: every private measurement of every release gets the same epsilon,
    ``budget.epsilon / N`` over all N private measurements, as if they were one query's
    (:func:`plan_noise` then splits each share evenly inside its release); delta goes to the
    releases with smoothed measurements (Gaussian: every private measurement), in proportion
    to how many each has; each share keeps the budget's mechanism. The shares' sums
    are the budget's (up to rounding); a release of public measurements only gets None (it is
    exact and free). Depends on the SQL, the public metadata and the budget alone.
    """
    private = [sum(1 for m in a.measurements if not is_public(m)) for a in analyses]
    smoothed = [sum(1 for m in a.measurements if not is_public(m) and m.sensitivity.depends_on_k)
                for a in analyses]
    if budget is not None and budget.mechanism == "gaussian":
        smoothed = private  # every Gaussian measurement needs a share of delta
    n, s = sum(private), sum(smoothed)
    if n and budget is None:
        raise missing_epsilon()
    out: list[Budget | None] = []
    for p, sm in zip(private, smoothed, strict=True):
        if not p or budget is None:
            out.append(None)
            continue
        out.append(Budget(budget.epsilon * p / n, budget.delta * sm / s if s else 0.0,
                          budget.mechanism, budget.calibration))
    return tuple(out)
