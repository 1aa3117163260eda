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

import numpy as np

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
    # No early stopping: FLEX stops at the first decrease, which is wrong for sums of terms.
    best, best_k = _scan(es, beta, k_scan)
    # No refusal for a non-finite S here: S depends on max frequencies, so refusing would
    # reveal them; the noise plan caps it with a public window (_smoothed_plan).
    return Smoothed(best, best_k, k_scan, beta)


#: Vectorised values within this relative distance of the largest are re-evaluated exactly.
_NEAR_MAX = 1e-9
#: k values evaluated per numpy pass (bounds the scan's memory).
_CHUNK = 1 << 20


def _scan(es: KExpr, beta: float, k_scan: int) -> tuple[float, int]:
    """max over k = 0..k_scan of e^(-beta k) ES(k) and the first k attaining it.

    The result is exactly that of the scalar loop :func:`_scan_scalar`: numpy evaluates the
    k in chunks (within a few ulps, far inside ``_NEAR_MAX``), and only the k whose value is
    within ``_NEAR_MAX`` of the largest are re-evaluated with the scalar expression, in
    increasing order. Non-finite or non-positive values fall back to the scalar loop.
    """
    near: list[tuple[int, float]] = []  # (k, approximate value) close to the running max
    top = -math.inf
    threshold = -math.inf
    for start in range(0, k_scan + 1, _CHUNK):
        ks = np.arange(start, min(start + _CHUNK, k_scan + 1), dtype=np.float64)
        with np.errstate(all="ignore"):
            values = np.exp(-beta * ks) * es.at_array(ks)
        if not bool(np.isfinite(values).all()):
            return _scan_scalar(es, beta, range(k_scan + 1))
        chunk_top = float(values.max())
        if chunk_top > top:
            top = chunk_top
            threshold = top * (1.0 - _NEAR_MAX)
            near = [(k, v) for k, v in near if v >= threshold]
        if chunk_top >= threshold:
            idx = np.flatnonzero(values >= threshold)
            near += [(start + int(i), float(values[i])) for i in idx]
    if not top > 0:
        return _scan_scalar(es, beta, range(k_scan + 1))
    return _scan_scalar(es, beta, [k for k, _ in near])


def _scan_scalar(es: KExpr, beta: float, ks) -> tuple[float, int]:
    best, best_k = -1.0, 0
    for k in ks:
        value = math.exp(-beta * k) * es.at(k)
        if value > best:
            best, best_k = value, k
    return best, best_k


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
    #: smoothed only: the public interval every exact value is clamped into before noise
    #: (:func:`_smoothed_plan`); it depends on epsilon and the bounds alone
    window: tuple[float, float] | None = None

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
        if m.sensitivity.depends_on_k:
            sm = smooth(m.sensitivity, eps_each, delta_each)
            plan = _smoothed_plan(m, eps_each, delta_each, es_at, sm)
        else:
            _check_finite(es_at, "elastic sensitivity")
            plan = _pure_plan(m, eps_each, es_at)
            _check_finite(plan.scale, "noise scale")
        plans.append(plan)
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
    if es == 0:
        # Only public tables: no row of private data can change the answer; release it exactly.
        return NoisePlan(m, epsilon, 0.0, es_at, None, 0.0)
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


def count_window(epsilon: float) -> float:
    """The public window [0, W] every smoothed count is clamped into: the largest whole W with
    2W/epsilon <= MAX_DISCRETE_SCALE (0 when epsilon < 2^-31). Depends on epsilon alone."""
    return float(math.floor(epsilon * mechanisms.MAX_DISCRETE_SCALE / 2.0))


def _smoothed_plan(
    m: Measurement, epsilon: float, delta: float, es_at: float, sm: Smoothed
) -> NoisePlan:
    """Smoothed sensitivity S: Laplace scale 2S/epsilon, over a value clamped to a public window.

    Precondition: ``sm`` is S for ``m`` at (epsilon, delta); S may be any float (even inf).
    Guarantee: never raises. The exact value is clamped into the window (``window``, public:
    epsilon and the bounds alone), a clamp under which one change moves it by at most the
    window's width V; min(S, V) is still beta-smooth (a minimum of beta-smooth functions) and
    bounds the clamped value's local sensitivity, so scale 2 min(S, V)/epsilon gives
    (epsilon, delta)-DP, and it never exceeds what the discrete sampler takes. Refusing
    instead when S is large would depend on max frequencies: an analyst could binary-search
    one for free by varying epsilon. Wherever S <= V (every realistic query) the noise is
    exactly FLEX's; the clamp changes only answers beyond the window (at epsilon 0.1: counts
    above 2.1e8; see docs/privacy.md).

    Counts use grid-free discrete Laplace: the smooth-sensitivity proof (sliding by an integer
    shift <= S, dilation between scales within e^beta) holds for it as for continuous Laplace,
    its normalising constant tanh(1/2b) playing the role of 1/2b. Sums are snapped to a grid g0
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
    bound_width = max(m.bounds[1], 0.0) - min(m.bounds[0], 0.0)
    # 2^12 above the finest grid: joins whose S is up to 2^24 times the smallest possible
    # scale still fit the discrete sampler, at a snapping error below 1% of any noise scale.
    g0 = mechanisms.sum_granularity(2.0 * max(bound_width, 1e-300) / epsilon) * 2.0**12
    # 2 (S' + g0)/epsilon <= MAX_DISCRETE_SCALE g0 for every S' <= width
    width = max(epsilon * mechanisms.MAX_DISCRETE_SCALE * g0 / 2.0 - g0, 0.0)
    scale = 2.0 * (_capped(raw, width) + g0) / epsilon
    return NoisePlan(m, epsilon, delta, es_at, sm, scale, g0, window=(-width / 2, width / 2))


def _capped(smooth_sensitivity: float, width: float) -> float:
    """min(S, width), and the width for an S that is infinite or not a number (the scan
    reports -1 when every ES(k) is NaN)."""
    return smooth_sensitivity if 0.0 <= smooth_sensitivity <= width else width


def check_budget_parameters(epsilon: float, delta: float) -> None:
    """epsilon must be finite and > 0; delta finite in [0, 1)."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ProgrammingError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and math.isfinite(delta) and 0 <= delta < 1):
        raise ProgrammingError(f"delta must be a finite number in [0, 1), got {delta!r}")
