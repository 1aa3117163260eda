"""R2T ("Race to the Top"): a COUNT or SUM under a privacy unit, pure epsilon-DP (issue #17).

Dong, Fang, Yi, Tao, Machanavajjhala, "R2T: Instance-optimal truncation for differentially
private query evaluation with foreign keys", SIGMOD 2022, Section 4 (the general mechanism) with
the naive truncation of Section 5 (self-join-free queries).

Setting. Neighbouring databases differ in one privacy unit with every row linked to it (FK
cascade, docs/privacy.md). A unit u contributes ``c_u >= 0`` to the query: its row count for a
COUNT, its sum of clamped non-negative values for a SUM. ``b = unit_bound`` is the most one row
can contribute (1 for a COUNT, the upper bound of the clamped values for a SUM). GS =
``max_contribution`` is the owner's public bound, in rows, on what one unit contributes; it sets
the levels only (a unit above it is truncated, never trusted). (The engine counts a SUM part's
levels in value units instead: b = 1 and GS its value bound, :mod:`dpsql.units.grid`.)

Mechanism. Levels ``tau_j = floor(B^j)`` rows, ``j = 1..L``, ``L = max(1, ceil(log_B GS))``
(:func:`levels`) on the owner's geometric grid of base ``B >= 2`` (``base``; the paper's
``B = 2`` by default, ``PrivacyUnit.level_base`` in the metadata). The grid is public (GS and B
only), so any such grid keeps the argument below word for word (the paper's Theorem 5.1): the
privacy argument uses only that the levels are public, the accuracy one that they increase and
``tau_L >= GS``; B enters the bias bound alone (fewer, coarser levels: less noise per level, a
coarser race). The caller computes
the truncated answers ``Q(tau_j) = sum_u min(c_u, tau_j b)`` (one GROUP BY over the join;
:func:`truncated_sums` is the reference). Level j is released with
its own share ``epsilon / L`` of the budget and noise of scale ``scale_j`` (:func:`r2t_scales`),
then shifted down by the public ``shift_j`` (about ``scale_j ln(L / beta)``), and the release is

    value = max(0, max_j (noisy_j - shift_j))

(the paper's ``max{max_j Q~(I, tau_j), Q(I, 0)}`` with ``Q(I, 0) = 0``).

* Counts (``integer=True``, ``b`` a whole number): ``noisy_j = Q(tau_j) + X_j``, X_j exact
  discrete Laplace of scale ``scale_j = L tau_j b / epsilon``
  (:func:`~dpsql.noise.mechanisms.release_counts`); ``shift_j = ceil(scale_j ln(L / beta))``, so
  every output is an exact integer.
* Sums (``integer=False``): ``noisy_j = g_j (R(Q(tau_j) / g_j) + Y_j)`` on the power-of-two
  grid of :func:`~dpsql.noise.mechanisms.release_sums`; a neighbour moves the snapped value by
  at most ``tau_j b + g_j`` (R is monotone and commutes with integer shifts), so, as in
  ``plan._pure_plan``, ``scale_j = L (tau_j b + g_j) / epsilon`` with ``g_j`` the grid of that
  scale (settled by iterating; the grid depends on the public scale alone), and
  ``shift_j = g_j (ceil((scale_j / g_j) ln(L / beta)) + 1/2)``.

Contract of :func:`release_r2t`.

Precondition (the caller's job, exactly what naive truncation of a self-join-free query gives):
adding or removing one unit changes every ``Q(tau_j)`` by at most ``tau_j b``, and every
``Q(tau_j)`` is non-negative. (A unit's truncated contribution ``min(c_u, tau_j b)`` lies in
``[0, tau_j b]``; units contribute to disjoint terms of the sum.)

Guarantee: the whole :class:`R2TRelease` (value, every noisy level, the chosen level and both
bounds) is epsilon-DP for the unit neighbours. Each noisy level is (epsilon / L)-DP (discrete
Laplace: the pmf ratio of an integer shift of at most ``tau_j b`` at scale ``L tau_j b/epsilon``
is at most ``e^(epsilon/L)``; sums: at most ``tau_j b + g_j`` in value units, see above), the L
levels compose to epsilon (basic composition over independent draws), and everything else is a
function of the noisy levels and public parameters (post-processing). Up to the sampler's
resolution (mechanisms' module docstring).

Accuracy (each with its probability over the noise alone, for every database):

* ``P(value > Q(I)) <= beta / 2``: truncation only lowers (``Q(tau_j) <= Q(I)``), so ``value >
  Q(I)`` needs some level's noise above its shift; the discrete tail
  ``P(X > ceil(s)) = p^(ceil(s)+1) / (1+p) <= p^(s+1) / (1+p) < p^s / 2 = beta / (2L)`` for
  ``s = scale ln(L/beta)`` (``p = e^(-1/scale)``; sums in grid steps, the snapping's error is
  below the extra g/2), union over the L levels.
* Truncation bias (paper, Theorem 5.1): with probability >= 1 - beta every level's noise lies
  within +- its shift (same tail, two-sided), and then ``value >= Q(tau_j) - 2 shift_j`` for
  every j; at the first level ``tau_j >= tau* = max_u c_u / b`` (the largest unit, in rows),
  ``Q(tau_j) = Q(I)`` and ``tau_j <= B max(ceil(tau*), 1)`` (j = 1: ``tau_1 = floor(B)``;
  j > 1: ``floor(B^(j-1)) < tau*`` so ``B^(j-1) < ceil(tau*)`` and ``tau_j <= B^j``), so
  ``Q(I) - value <= 2 B L ln(L/beta) max(ceil(tau*), 1) b / epsilon`` with ``L =
  ceil(log_B GS)`` (+ the rounding of the shifts and grids) when ``tau* <= tau_L``. For
  ``B = 2`` this is the paper's ``4 log2(GS) ln(log2(GS)/beta) tau* b / epsilon``; a larger B
  trades the factor B against the smaller L (and ``ln(L / beta)``).
* The published 95% interval: ``half_width_j`` is the smallest h with ``P(|noisy_j -
  Q(tau_j)| > h) <= 0.05 / L`` under the exact discrete law (sums: ``g_j (k + 1/2)``, the
  snapping's half step added), so with probability >= 0.95 every level is simultaneously within
  its half-width. On that event ``Q(I) >= Q(tau_j) >= noisy_j - half_width_j`` for every j and
  ``Q(I) >= 0``, so ``lower95 = max(0, max_j (noisy_j - half_width_j))`` is a lower bound on the
  *untruncated* answer; and ``Q(tau_L) <= noisy_L + half_width_L = upper95`` bounds the answer
  truncated at the top level: Q(I) itself when GS bounds every unit (``c_u <= GS b``, so
  ``Q(tau_L) = Q(I)``), otherwise only what remains after the largest units are cut to
  ``tau_L b``. upper95 is raised to lower95 if below it (possible only outside the 95% event).
  The interval is about the answer, not about ``value``: value is R2T's biased-low estimate.

Noise: one draw per level through the :class:`~dpsql.noise.mechanisms.Sampler` (all rows of a
:func:`release_r2t_many` at once), so L draws whatever the data; no other randomness. Every
refusal here reads the public parameters alone (GS, b, epsilon, beta): a level whose scale the
discrete sampler cannot take is a :class:`~dpsql.errors.NotSupportedError` before anything is
drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsql.errors import NotSupportedError
from dpsql.noise import mechanisms
from dpsql.noise.mechanisms import Sampler
from dpsql.noise.r2t_levels import DEFAULT_BASE, MAX_LEVELS, MIN_BASE, levels

__all__ = [
    "CONFIDENCE",
    "DEFAULT_BASE",
    "MAX_LEVELS",
    "MIN_BASE",
    "R2TPlan",
    "R2TRelease",
    "R2TReleases",
    "levels",
    "plan_r2t",
    "r2t_scales",
    "release_r2t",
    "release_r2t_many",
    "truncated_sums",
]

#: Confidence of the published interval (simultaneous over all levels).
CONFIDENCE = 0.95


# ---------------------------------------------------------------------------------------------
# Levels and the public plan
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class R2TPlan:
    """The public parameters of one R2T release: they depend on GS, b, epsilon, beta only.

    ``levels[j]`` is tau in rows; ``scales[j]`` the noise scale of level j in value units
    (a count's discrete Laplace scale; a sum's grid step times its integer noise's scale);
    ``granularities[j]`` its grid (1 for counts); ``shifts[j]`` what is subtracted before the
    max; ``half_widths[j]`` the level's share of the simultaneous 95% interval.
    """

    levels: tuple[int, ...]
    unit_bound: float
    epsilon: float
    beta: float
    integer: bool
    scales: tuple[float, ...]
    granularities: tuple[float, ...]
    shifts: tuple[float, ...]
    half_widths: tuple[float, ...]

    @property
    def epsilon_per_level(self) -> float:
        return self.epsilon / len(self.levels)


def _check_positive(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out) or out <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0")
    return out


def _too_noisy() -> NotSupportedError:
    return NotSupportedError(
        "R2T's top truncation level needs more noise than the discrete sampler takes: declare a "
        "smaller max_contribution for the privacy unit, tighten the bounds, or raise epsilon"
    )


def _one_sided_steps(scale: float, beta_level: float) -> int:
    """``ceil(scale ln(1 / beta_level))``: a shift of this many integer steps is exceeded by
    discrete Laplace(scale) noise with probability < beta_level / 2 (module docstring)."""
    return math.ceil(scale * math.log(1.0 / beta_level))


def _two_sided_steps(scale: float, alpha: float) -> int:
    """The smallest integer k >= 0 with ``P(|X| > k) = 2 p^(k+1) / (1 + p) <= alpha`` for X
    discrete Laplace(scale), ``p = e^(-1/scale)`` (the exact tail; logs for large scales)."""
    log_c = math.log(2.0) - math.log1p(math.exp(-1.0 / scale)) - math.log(alpha)

    def holds(k: int) -> bool:
        return -(k + 1) / scale + log_c <= 0.0

    k = max(0, math.ceil(scale * log_c) - 1)
    while k > 0 and holds(k - 1):
        k -= 1
    while not holds(k):
        k += 1
    return k


def _sum_scale(sensitivity: float, epsilon: float) -> tuple[float, float]:
    """The scale (sens + g) / epsilon with g the grid of that scale (as ``plan._pure_plan``)."""
    scale = sensitivity / epsilon
    for _ in range(3):
        scale = (sensitivity + mechanisms.sum_granularity(scale)) / epsilon
    g = mechanisms.sum_granularity(scale)
    assert (sensitivity + g) / epsilon <= scale * (1 + 1e-12)
    return scale, g


def plan_r2t(*, unit_bound: float, max_contribution: int, epsilon: float, beta: float = 0.1,
             integer: bool, base: float = DEFAULT_BASE) -> R2TPlan:
    """The public plan of an R2T release (levels, scales, grids, shifts, half-widths).

    Precondition: ``unit_bound`` (b) finite > 0, a whole number when ``integer``; GS as for
    :func:`levels`; ``epsilon`` finite > 0; ``0 < beta < 1``. Otherwise ``TypeError`` /
    ``ValueError`` (programming errors); a top level whose count scale exceeds
    ``MAX_DISCRETE_SCALE`` (or a sum scale outside the grid's range) is a
    :class:`NotSupportedError`. Guarantee: every field is a function of these public
    parameters alone (module docstring for what each means).
    """
    b = _check_positive(unit_bound, "unit_bound")
    eps = _check_positive(epsilon, "epsilon")
    beta_f = _check_positive(beta, "beta")
    if beta_f >= 1.0:
        raise ValueError("beta must lie strictly between 0 and 1")
    if not isinstance(integer, bool):
        raise TypeError("integer must be a bool")
    if integer and not b.is_integer():
        raise ValueError("a count's unit_bound must be a whole number of rows' weight (1 for "
                         "COUNT); use integer=False for sums")
    taus = levels(max_contribution, base)
    n = len(taus)
    eps_level = eps / n
    beta_level = beta_f / n
    alpha_level = (1.0 - CONFIDENCE) / n
    scales, grids, shifts, widths = [], [], [], []
    for tau in taus:
        sens = tau * b
        if integer:
            scale = sens / eps_level
            if not scale <= mechanisms.MAX_DISCRETE_SCALE:
                raise _too_noisy()
            scales.append(scale)
            grids.append(1.0)
            shifts.append(float(_one_sided_steps(scale, beta_level)))
            widths.append(float(_two_sided_steps(scale, alpha_level)))
            continue
        try:
            scale, g = _sum_scale(sens, eps_level)
        except ValueError:
            raise _too_noisy() from None
        steps = scale / g
        scales.append(scale)
        grids.append(g)
        shifts.append(g * (_one_sided_steps(steps, beta_level) + 0.5))
        widths.append(g * (_two_sided_steps(steps, alpha_level) + 0.5))
    return R2TPlan(levels=taus, unit_bound=b, epsilon=eps, beta=beta_f, integer=integer,
                   scales=tuple(scales), granularities=tuple(grids), shifts=tuple(shifts),
                   half_widths=tuple(widths))


def r2t_scales(*, unit_bound: float, max_contribution: int, epsilon: float,
               integer: bool, base: float = DEFAULT_BASE) -> np.ndarray:
    """The public noise scale of every level (value units), for explain and the release record
    before anything runs: ``L tau_j b / epsilon`` for counts, ``L (tau_j b + g_j) / epsilon``
    for sums (:func:`plan_r2t`; the scales do not depend on beta)."""
    plan = plan_r2t(unit_bound=unit_bound, max_contribution=max_contribution, epsilon=epsilon,
                    integer=integer, base=base)
    return np.array(plan.scales, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# Truncation (reference) and the release
# ---------------------------------------------------------------------------------------------


def truncated_sums(contributions: np.ndarray, *, unit_bound: float,
                   max_contribution: int, base: float = DEFAULT_BASE) -> np.ndarray:
    """The reference truncation ``Q(tau_j) = sum_u min(c_u, tau_j b)`` for every level.

    Precondition: ``contributions`` a 1-D array of finite ``c_u >= 0`` (one per unit; integer
    ones at most 2^62, as for any count); b and GS as for :func:`plan_r2t`. Guarantee: shape
    ``(L,)``; int64 (exact) when the contributions are integers and b is whole, float64
    otherwise. Adding or removing one unit
    changes ``Q(tau_j)`` by ``min(c_u, tau_j b) <= tau_j b``: :func:`release_r2t`'s
    precondition. The engine computes the same sums in the database.
    """
    c = np.asarray(contributions)
    if c.ndim != 1 or c.dtype.kind not in "iuf":
        raise ValueError("contributions must be a 1-D array of real numbers")
    if not np.all(np.isfinite(c)) or (c.size and c.min() < 0):
        raise ValueError("contributions must be finite and >= 0")
    b = _check_positive(unit_bound, "unit_bound")
    taus = levels(max_contribution, base)
    if c.dtype.kind in "iu" and b.is_integer():
        # caps beyond 2^62 (no int64 count reaches them) are held there: no overflow
        caps = np.array([min(t * int(b), 2**62) for t in taus], dtype=np.int64)
        return np.minimum(c.astype(np.int64)[:, None], caps[None, :]).sum(axis=0)
    caps_f = np.array(taus, dtype=np.float64) * b
    return np.minimum(c.astype(np.float64)[:, None], caps_f[None, :]).sum(axis=0)


@dataclass(frozen=True, eq=False)
class R2TRelease:
    """One R2T release (every field may be shown to the analyst: DP or public).

    ``value``: ``max(0, max_j (noisy_j - shift_j))`` (an exact integer for counts);
    ``noisy``: each level's noisy truncated answer; ``scales``, ``shifts``, ``half_widths``:
    public, per level; ``chosen``: the level index (0-based into ``levels``) attaining the max
    over levels (the first on ties; value is 0 rather than ``noisy[chosen] - shifts[chosen]``
    when that is negative); ``lower95``/``upper95``: the simultaneous 95% bounds of the module
    docstring (lower: on the untruncated answer; upper: on the answer truncated at the top
    level, the answer itself when GS bounds every unit).
    """

    value: float
    noisy: np.ndarray
    scales: np.ndarray
    shifts: np.ndarray
    half_widths: np.ndarray
    levels: tuple[int, ...]
    chosen: int
    lower95: float
    upper95: float


@dataclass(frozen=True, eq=False)
class R2TReleases:
    """:func:`release_r2t_many`'s result: row i is one :class:`R2TRelease` (``value``,
    ``chosen``, ``lower95``, ``upper95`` of shape ``(n,)``, ``noisy`` of shape ``(n, L)``)."""

    value: np.ndarray
    noisy: np.ndarray
    chosen: np.ndarray
    lower95: np.ndarray
    upper95: np.ndarray
    plan: R2TPlan

    def row(self, i: int) -> R2TRelease:
        p = self.plan
        return R2TRelease(value=float(self.value[i]), noisy=self.noisy[i].copy(),
                          scales=np.array(p.scales), shifts=np.array(p.shifts),
                          half_widths=np.array(p.half_widths), levels=p.levels,
                          chosen=int(self.chosen[i]), lower95=float(self.lower95[i]),
                          upper95=float(self.upper95[i]))


def _checked_truncated(truncated: np.ndarray, n_levels: int) -> np.ndarray:
    """Shape ``(n, L)``, real, finite, >= 0: checks of the caller's precondition (never
    triggered by data when it holds), so a violation is a programming error (ValueError)."""
    arr = np.asarray(truncated)
    if arr.ndim != 2 or arr.shape[1] != n_levels:
        raise ValueError(f"truncated answers must have one column per level ({n_levels})")
    if arr.dtype.kind not in "iuf":
        raise ValueError("truncated answers must be real numbers")
    if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < 0):
        raise ValueError("truncated answers must be finite and >= 0 (R2T's precondition)")
    return arr


def release_r2t_many(truncated: np.ndarray, *, unit_bound: float, max_contribution: int,
                     epsilon: float, beta: float = 0.1, integer: bool,
                     sampler: Sampler | None = None,
                     base: float = DEFAULT_BASE) -> R2TReleases:
    """:func:`release_r2t` for n independent rows at once: ``truncated`` has shape ``(n, L)``,
    row i holding ``Q_i(tau_1..tau_L)``. Each row is one epsilon-DP release (module docstring);
    how rows compose (e.g. groups, each unit in at most kappa of them) is the caller's job.
    One sampler draw per level for all rows together."""
    plan = plan_r2t(unit_bound=unit_bound, max_contribution=max_contribution, epsilon=epsilon,
                    beta=beta, integer=integer, base=base)
    n_levels = len(plan.levels)
    arr = _checked_truncated(truncated, n_levels)
    columns = []
    for j in range(n_levels):
        if integer:
            columns.append(mechanisms.release_counts(arr[:, j], plan.scales[j], sampler=sampler))
        else:
            columns.append(mechanisms.release_sums(arr[:, j], plan.scales[j], sampler=sampler,
                                                   granularity=plan.granularities[j]))
    noisy = (np.stack(columns, axis=1) if columns
             else np.empty((0, n_levels)))
    shifts = np.array(plan.shifts)
    widths = np.array(plan.half_widths)
    if integer:
        shifted = noisy - shifts.astype(np.int64)[None, :]
        lows = noisy - widths.astype(np.int64)[None, :]
        top = noisy[:, -1] + int(widths[-1])
    else:
        shifted = noisy - shifts[None, :]
        lows = noisy - widths[None, :]
        top = noisy[:, -1] + widths[-1]
    chosen = np.argmax(shifted, axis=1)
    best = np.take_along_axis(shifted, chosen[:, None], axis=1)[:, 0]
    value = np.maximum(best, 0).astype(np.float64)
    lower = np.maximum(lows.max(axis=1), 0).astype(np.float64)
    upper = np.maximum(top.astype(np.float64), lower)
    return R2TReleases(value=value, noisy=noisy, chosen=chosen, lower95=lower, upper95=upper,
                       plan=plan)


def release_r2t(truncated: np.ndarray, *, unit_bound: float, max_contribution: int,
                epsilon: float, beta: float = 0.1, integer: bool,
                sampler: Sampler | None = None, base: float = DEFAULT_BASE) -> R2TRelease:
    """Release one COUNT or SUM under a privacy unit with R2T (contract: module docstring).

    ``truncated[j]`` is the exact ``Q(tau_j) = sum_u min(c_u, tau_j b)`` for the levels of
    :func:`levels` (``b = unit_bound``, GS = ``max_contribution``): int64 or integral floats
    for counts (``integer=True``), floats for sums. Precondition: adding or removing one unit
    changes ``Q(tau_j)`` by at most ``tau_j b`` and every ``Q(tau_j) >= 0``. Guarantee: the
    returned :class:`R2TRelease` is epsilon-DP (L levels at epsilon/L each, basic composition;
    the max, the chosen level and the 95% bounds are post-processing); ``P(value > Q(I)) <=
    beta / 2``. ``sampler=None`` means the secure default.
    """
    arr = np.asarray(truncated)
    if arr.ndim != 1:
        raise ValueError("truncated answers must be a 1-D array, one per level")
    many = release_r2t_many(arr[None, :], unit_bound=unit_bound,
                            max_contribution=max_contribution, epsilon=epsilon, beta=beta,
                            integer=integer, sampler=sampler, base=base)
    return many.row(0)
