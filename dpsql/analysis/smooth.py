"""Smoothing elastic sensitivity, and the noise scale of each measurement (DESIGN.md section 4).

Contract of :func:`smooth`: given ES(k) with the kexpr properties (non-negative, and
e^(-beta k) ES(k) non-increasing for k >= degree / beta), returns
S = max over k = 0..ceil(D/beta) of e^(-beta k) ES(k), which equals the max over all k >= 0,
so S is a beta-smooth upper bound on local sensitivity (Nissim-Raskhodnikova-Smith 2007; FLEX).
Laplace noise of scale 2S/epsilon then gives (epsilon, delta)-DP with
beta = epsilon / (2 ln(2/delta)). When ES does not depend on k it is a global sensitivity and
scale ES/epsilon gives pure epsilon-DP (delta 0). Infinity and NaN never reach a scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpsql import mechanisms
from dpsql.analysis.elastic import Measurement, QueryAnalysis
from dpsql.analysis.kexpr import KExpr
from dpsql.errors import NotSupportedError, ProgrammingError

#: The scan is O(D / beta); refuse parameters that would make it absurdly long.
_MAX_SCAN = 50_000_000


def beta_for(epsilon: float, delta: float) -> float:
    """beta = epsilon / (2 ln(2/delta)), the smoothing parameter of FLEX."""
    return epsilon / (2.0 * math.log(2.0 / delta))


@dataclass(frozen=True)
class Smoothed:
    """S = max_k e^(-beta k) ES(k), the k attaining it, and the scan's upper end."""

    smooth_sensitivity: float
    k_argmax: int
    k_scan: int
    beta: float


def smooth(es: KExpr, epsilon: float, delta: float) -> Smoothed:
    """The smooth sensitivity of ``es`` (see module contract). Scans every k; no early stop."""
    beta = beta_for(epsilon, delta)
    degree = es.degree
    k_scan = math.ceil(degree / beta)
    if k_scan > _MAX_SCAN:
        raise NotSupportedError(
            "epsilon/delta are too small for this join query to be smoothed: raise epsilon "
            "or delta"
        )
    best, best_k = -1.0, 0
    # The scan is the hot path of analysis for deep joins: evaluate in steps of one k without
    # early stopping (FLEX stops at the first decrease, which is wrong for sums of terms).
    for k in range(k_scan + 1):
        value = math.exp(-beta * k) * es.at(k)
        if value > best:
            best, best_k = value, k
    _check_finite(best, "smooth sensitivity")
    return Smoothed(best, best_k, k_scan, beta)


def _check_finite(value: float, what: str) -> None:
    if not math.isfinite(value) or value < 0:
        raise NotSupportedError(
            f"the {what} is not a finite number, so no noise scale can protect this query: "
            "declare max frequencies and bounds for the columns it uses"
        )


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

    @property
    def pure(self) -> bool:
        return self.smoothed is None


def plan_noise(
    analysis: QueryAnalysis, epsilon: float, delta: float, *, distance: int = 0
) -> tuple[NoisePlan, ...]:
    """Split (epsilon, delta) evenly over the measurements and compute each noise scale.

    Basic composition: the measurements' epsilons sum to ``epsilon``; delta is split over the
    smoothed ones only (pure releases need none), so the deltas sum to at most ``delta``.
    """
    check_budget_parameters(epsilon, delta)
    n = len(analysis.measurements)
    smoothed_ms = [m for m in analysis.measurements if m.sensitivity.depends_on_k]
    if smoothed_ms and delta <= 0:
        raise NotSupportedError(
            "this query joins private tables, so its sensitivity depends on the data and needs "
            "delta > 0: pass a delta such as 1e-8"
        )
    eps_each = epsilon / n
    delta_each = delta / len(smoothed_ms) if smoothed_ms else 0.0
    plans = []
    for m in analysis.measurements:
        es_at = m.sensitivity.at(distance)
        _check_finite(es_at, "elastic sensitivity")
        if m.sensitivity.depends_on_k:
            sm = smooth(m.sensitivity, eps_each, delta_each)
            plan = _smoothed_plan(m, eps_each, delta_each, es_at, sm)
        else:
            plan = _pure_plan(m, eps_each, es_at)
        _check_finite(plan.scale, "noise scale")
        plans.append(plan)
    return tuple(plans)


def _too_noisy() -> NotSupportedError:
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
    scale = es / epsilon
    for _ in range(3):
        g = mechanisms.sum_granularity(scale)
        scale = (es + g) / epsilon
    g = mechanisms.sum_granularity(scale)
    assert (es + g) / epsilon <= scale * (1 + 1e-12)
    return NoisePlan(m, epsilon, 0.0, es_at, None, scale, g)


def _smoothed_plan(
    m: Measurement, epsilon: float, delta: float, es_at: float, sm: Smoothed
) -> NoisePlan:
    """Smoothed sensitivity S: Laplace scale 2S/epsilon.

    Counts use grid-free discrete Laplace: the smooth-sensitivity proof (sliding by an integer
    shift <= S, dilation between scales within e^beta) holds for it as for continuous Laplace,
    its normalising constant tanh(1/2b) playing the role of 1/2b. Sums are snapped to a grid g0
    fixed by the bounds and epsilon alone (the smallest scale any smoothed SUM of this column
    could have), never by the data-dependent scale, whose power of two the grid would reveal;
    the snapped shift is at most LS + g0, and S + g0 is still beta-smooth.
    """
    if m.function == "COUNT":
        scale = 2.0 * sm.smooth_sensitivity / epsilon
        if scale > mechanisms.MAX_DISCRETE_SCALE:
            raise _too_noisy()
        return NoisePlan(m, epsilon, delta, es_at, sm, scale)
    assert m.bounds is not None
    width = max(m.bounds[1], 0.0) - min(m.bounds[0], 0.0)
    # 2^12 above the finest grid: joins whose S is up to 2^24 times the smallest possible
    # scale still fit the discrete sampler, at a snapping error below 1% of any noise scale.
    g0 = mechanisms.sum_granularity(2.0 * max(width, 1e-300) / epsilon) * 2.0**12
    scale = 2.0 * (sm.smooth_sensitivity + g0) / epsilon
    if scale / g0 > mechanisms.MAX_DISCRETE_SCALE:
        raise _too_noisy()
    return NoisePlan(m, epsilon, delta, es_at, sm, scale, g0)


def check_budget_parameters(epsilon: float, delta: float) -> None:
    """epsilon must be finite and > 0; delta finite in [0, 1)."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ProgrammingError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and math.isfinite(delta) and 0 <= delta < 1):
        raise ProgrammingError(f"delta must be a finite number in [0, 1), got {delta!r}")
