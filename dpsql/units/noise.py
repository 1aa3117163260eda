"""Noise plans and releases of a query under a privacy unit without GROUP BY (R2T).

Contract of :func:`plan_r2t`: the measurements split epsilon evenly (basic composition, as
:func:`dpsql.noise.plan.plan_noise`); a SUM released as two parts (its non-negative and
non-positive sums) gives each half of its share; every part is an R2T release
(:mod:`dpsql.noise.r2t`) on its own grid (:mod:`dpsql.units.grid`: rows for a COUNT, value
units for a SUM part), pure epsilon-DP with public noise scales. Under one unit the levels
are noised increments (naive truncation meets that plan's precondition); under several units
(the max-flow truncation, which bounds each level's move but not its increments') every level
is noised on its own, at the fine levels of dpsql.units.grid. A COUNT is released as an exact
integer under discrete noise unless its levels are not whole rows or its top level's scale
exceeds the discrete sampler's range (GS of about 2^31 rows and more): then through the sums'
noise on their grid, rounded (each choice public: the grid, GS and epsilon). Refusals (the
Gaussian mechanism) depend on the budget alone.

Contract of :func:`release_r2t_measurements`: each measurement's released value is the sum of
its parts' R2T releases (the non-positive part subtracted), and its 95% interval the sum of
theirs, each part's read at ``1 - 0.05 / #parts`` (a signed SUM's two at 97.5%: both hold
together with probability >= 95%, union bound) -- post-processing of the parts' noisy values.
Each measurement also gets the interval an AVG reads (:mod:`dpsql.units.avg`): the same sum of
its parts' intervals, each part's read at ``1 - (1 - AVG_MEASUREMENT_CONFIDENCE) / #parts``
(:func:`dpsql.noise.r2t.interval_at`), so that with probability >= AVG_MEASUREMENT_CONFIDENCE
= 97.5% every part is within its own (union bound) and the measurement's lower bound is at most
its untruncated answer, its upper bound at least its answer truncated at the top levels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsql.analysis.elastic import QueryAnalysis
from dpsql.budget import Budget, missing_epsilon
from dpsql.errors import NotSupportedError
from dpsql.noise import r2t
from dpsql.noise.mechanisms import Sampler
from dpsql.noise.plan import NoisePlan
from dpsql.units.analysis import R2TPart
from dpsql.units.grid import fine_grid, part_grid, released_integer

#: R2T's beta: the probability bound of its error guarantee, and of the one-sided shift that
#: keeps the release below the truth (public; the paper's default)
BETA = 0.1

#: the confidence of each measurement's interval an AVG reads (dpsql.units.avg): its SUM's and
#: its COUNT's together hold with probability >= 95% (union bound)
AVG_MEASUREMENT_CONFIDENCE = 0.975


@dataclass(frozen=True)
class PartPlan:
    """One R2T part of a measurement: its share of epsilon, its grid (dpsql.units.grid:
    ``unit_bound`` b and GS ``max_contribution``, rows for a COUNT, value units for a SUM part)
    and the public noise scale of each truncation level."""

    part: R2TPart
    epsilon: float
    scales: tuple[float, ...]
    unit_bound: float
    max_contribution: int
    #: the levels are released as noised increments (dpsql.noise.r2t): only under one unit,
    #: whose naive truncation moves each increment by at most its width; the max-flow
    #: truncation of several units (dpsql.noise.r2t_flow) bounds each level's move alone
    increments: bool = True
    #: the fine levels of several units (dpsql.units.grid)
    fine: bool = False
    #: released as an exact integer under discrete noise (dpsql.units.grid.released_integer)
    integer: bool = True


def plan_r2t(analysis: QueryAnalysis, budget: Budget | None) -> tuple[NoisePlan, ...]:
    """Each measurement's R2T plan (module contract)."""
    release = analysis.unit
    assert release is not None and release.r2t
    if budget is None:
        raise missing_epsilon()
    if budget.mechanism != "laplace":
        raise NotSupportedError(
            "under a privacy unit, a query without GROUP BY is released by R2T with Laplace "
            "noise: use mechanism='laplace'")
    base = release.unit.level_base
    increments = not release.more
    fine = fine_grid(release)
    n = len(analysis.measurements)
    eps_each = budget.epsilon / n
    plans = []
    for m in analysis.measurements:
        parts = [p for p in release.parts if p.index == m.index]
        if not parts:  # a SUM over bounds [0, 0]: always 0, nothing to protect
            plans.append(NoisePlan(m, 0.0, 0.0, 0.0, None, 0.0))
            continue
        eps_part = eps_each / len(parts)
        if not eps_part > 0.0:  # epsilon near 5e-324, split over the parts: underflows
            raise NotSupportedError(
                f"epsilon {budget.epsilon:g} is too small to split over this query's noisy "
                "aggregates: raise epsilon")
        part_plans = []
        for p in parts:
            bound, gs = part_grid(p, release.unit)
            integer = released_integer(p, release)
            try:
                scales = r2t.r2t_scales(unit_bound=bound, max_contribution=gs, epsilon=eps_part,
                                        integer=integer, base=base, beta=BETA,
                                        increments=increments, fine=fine)
            except NotSupportedError:
                if not integer:
                    raise
                # a count whose top level needs more noise than the discrete sampler's 2^32
                # (GS of 2^31 rows and more at usual epsilons): the sums' noise, then rounded
                # (public: GS, the grid and epsilon decide it)
                integer = False
                scales = r2t.r2t_scales(unit_bound=bound, max_contribution=gs, epsilon=eps_part,
                                        integer=False, base=base, beta=BETA,
                                        increments=increments, fine=fine)
            part_plans.append(PartPlan(p, eps_part, tuple(float(s) for s in scales), bound, gs,
                                       increments, fine, integer))
        top = max(s for pp in part_plans for s in pp.scales)
        plans.append(NoisePlan(m, eps_each, 0.0, m.sensitivity.at(0), None, top,
                               r2t=tuple(part_plans)))
    return tuple(plans)


@dataclass(frozen=True)
class R2TOutcome:
    """A measurement's released value, its 95% interval and its interval at
    :data:`AVG_MEASUREMENT_CONFIDENCE` (``for_avg``, what an AVG reads; module contract), all
    post-processing of the noisy levels."""

    value: float
    lower95: float
    upper95: float
    for_avg: tuple[float, float]


def release_r2t_measurements(truncated: Sequence[np.ndarray], plans: Sequence[NoisePlan],
                             sampler: Sampler | None = None,
                             base: float = r2t.DEFAULT_BASE,
                             no_unit: Sequence[float] | None = None
                             ) -> list[R2TOutcome | None]:
    """Release every measurement from its parts' truncated sums (``truncated[i]`` is part
    i's Q(tau_j) over the levels of its plan's GS and the grid ``base``, in the parts'
    order): module contract. ``no_unit[i]``: part i's rows of no unit, c_NULL, when the
    levels leave them out (dpsql.units.rewrite): the same in both neighbours, added to the
    part's release, value and interval, after the noise (each neighbour's output is R2T's
    shifted by the same constant, so the guarantee is R2T's). None for a measurement with
    no part (released exactly as 0)."""
    out: list[R2TOutcome | None] = []
    i = 0
    for plan in plans:
        if not plan.r2t:
            out.append(None)
            continue
        value = lower = upper = avg_lower = avg_upper = 0.0
        # each part's share of the 5% (of the AVG's 2.5%): a signed SUM's two parts are each
        # read at 97.5% (98.75%), so both hold together at 95% (97.5%) by the union bound
        published = 1.0 - (1.0 - r2t.CONFIDENCE) / len(plan.r2t)
        confidence = 1.0 - (1.0 - AVG_MEASUREMENT_CONFIDENCE) / len(plan.r2t)
        for pp in plan.r2t:
            many = r2t.release_r2t_many(
                np.asarray(truncated[i])[None, :], unit_bound=pp.unit_bound,
                max_contribution=pp.max_contribution, epsilon=pp.epsilon, beta=BETA,
                integer=pp.integer, sampler=sampler, base=base,
                increments=pp.increments, fine=pp.fine)
            rel = many.row(0)
            narrow = ((rel.lower95, rel.upper95) if len(plan.r2t) == 1
                      else r2t.interval_at(rel.noisy, many.plan, published))
            wide = r2t.interval_at(rel.noisy, many.plan, confidence)
            c = 0.0 if no_unit is None else float(no_unit[i])
            rel_value, rel_lower, rel_upper = rel.value + c, narrow[0] + c, narrow[1] + c
            wide_lower, wide_upper = wide[0] + c, wide[1] + c
            i += 1
            if pp.part.sign > 0:
                value, lower, upper = value + rel_value, lower + rel_lower, upper + rel_upper
                avg_lower, avg_upper = avg_lower + wide_lower, avg_upper + wide_upper
            else:
                value, lower, upper = value - rel_value, lower - rel_upper, upper - rel_lower
                avg_lower, avg_upper = avg_lower - wide_upper, avg_upper - wide_lower
        if plan.measurement.integer:  # a count at fine levels: whole rows, rounded outwards
            lower, upper = float(math.floor(lower)), float(math.ceil(upper))
            avg_lower, avg_upper = float(math.floor(avg_lower)), float(math.ceil(avg_upper))
        out.append(R2TOutcome(value, lower, upper, (avg_lower, avg_upper)))
    return out

