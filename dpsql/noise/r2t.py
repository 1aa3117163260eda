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
:func:`truncated_sums` is the reference). Every level gets ``epsilon / L`` of the budget and a
noisy value ``noisy_j``, which is shifted down by the public ``shift_j`` (about ``scale ln((L +
1) / (2 beta))``), and the release is

    value = max(0, max_j (noisy_j - shift_j))

(the paper's ``max{max_j Q~(I, tau_j), Q(I, 0)}`` with ``Q(I, 0) = 0``). The noisy levels come
one of two ways, chosen by :func:`plan_r2t` from the public parameters alone
(``R2TPlan.increments``):

* **Noised increments** (the default under naive truncation). With ``tau_0 = 0``, the
  increments ``D_j = Q(tau_j) - Q(tau_(j-1))`` are noised, each at ``epsilon / L``, and the
  levels released as running sums ``noisy_j = sum_(i <= j) (D_i + X_i) = Q(tau_j) + N_j``,
  ``N_j = X_1 + .. + X_j``. The increment's scale is ``scale_j = L (tau_j - tau_(j-1)) b /
  epsilon`` (sums: ``+ g_j``, as below): smaller than the level's ``L tau_j b / epsilon``, and
  ``N_j`` is dominated by its last term on a geometric grid (base 5.5: 18% less noise, base 2:
  half). Shifts and half-widths come from the tail bounds of :mod:`dpsql.noise.r2t_tail` for
  the sum ``N_j`` (Theorem 1: increasing scales; Theorem 2: the base-2 grid's equal first two
  increments, exact law; level 1, one draw of the per-level plan's scale and grid in both
  plans, keeps the smaller of the two plans' values). :func:`plan_r2t` takes this plan only
  when both bounds apply at every level and no level's shift or half-width exceeds the
  per-level plan's (so everything proven for per-level noise below about the bias still holds
  with the same constants).
* **Per-level noise** (otherwise, and always with ``increments=False``: LP truncation, whose
  increments are not bounded): ``noisy_j = Q(tau_j) + X_j`` with level j's own noise at
  ``scale_j = L tau_j b / epsilon``.

Noise of one draw:

* Counts (``integer=True``, ``b`` a whole number): X exact discrete Laplace of ``scale_j``
  (:func:`~dpsql.noise.mechanisms.release_counts`); shifts and half-widths are whole numbers,
  so every output is an exact integer. Per-level: ``shift_j = ceil(scale_j ln((L + 1) / (2
  beta)))``.
* Sums (``integer=False``): the drawn value ``v`` (a level or an increment) becomes ``g_j
  (R(v / g_j) + Y_j)`` on the power-of-two grid of
  :func:`~dpsql.noise.mechanisms.release_sums`; a neighbour moves the snapped value by at most
  ``sens_j + g_j`` (R is monotone and commutes with integer shifts; ``sens_j`` is ``tau_j b``,
  or ``(tau_j - tau_(j-1)) b`` for an increment), so, as in ``plan._pure_plan``, ``scale_j = L
  (sens_j + g_j) / epsilon`` with ``g_j`` the grid of that scale (settled by iterating; the
  grid depends on the public scale alone). The snapping errs by at most ``g_i / 2`` per draw,
  so a level's shift and half-width add ``sum_(i <= j) g_i / 2`` (per-level: ``g_j / 2``):
  per-level ``shift_j = g_j (ceil((scale_j / g_j) ln((L + 1) / (2 beta))) + 1/2)``.

Contract of :func:`release_r2t`.

Precondition (the caller's job). Per-level noise: adding or removing one unit changes every
``Q(tau_j)`` by at most ``tau_j b``, and every ``Q(tau_j)`` is non-negative. Noised increments
(``increments=True``, the default) need more: it changes every increment ``D_j`` by at most
``(tau_j - tau_(j-1)) b``. Naive truncation of a self-join-free query gives both: a unit's
truncated contribution ``min(c_u, tau_j b)`` lies in ``[0, tau_j b]``, its increment
``min(c_u, tau_j b) - min(c_u, tau_(j-1) b)`` in ``[0, (tau_j - tau_(j-1)) b]``, and units
contribute to disjoint terms of the sums. (LP truncation gives only the first: pass
``increments=False``.) A term ``c_0 >= 0`` added to every level and equal in both neighbours
(the engine's rows of no unit, :mod:`dpsql.units.rewrite`) keeps both: it cancels from every
difference of a level, and of ``D_1 = Q(tau_1)``, the one increment holding it (``D_j`` for
j >= 2 does not); levels stay non-negative and non-decreasing, and ``Q(tau_L)`` still equals
``Q(I)`` when GS bounds every unit.

Guarantee: the whole :class:`R2TRelease` (value, every noisy level, the chosen level and both
bounds) is epsilon-DP for the unit neighbours. Each draw is (epsilon / L)-DP (discrete Laplace:
the pmf ratio of an integer shift of at most ``sens_j`` at scale ``L sens_j / epsilon`` is at
most ``e^(epsilon/L)``; sums: at most ``sens_j + g_j`` in value units, see above), the L draws
compose to epsilon (basic composition over independent draws), and everything else is a
function of the noisy draws and public parameters (post-processing: the running sums, the max,
the bounds). Up to the sampler's resolution (mechanisms' module docstring) and, for sums, the
float rounding of the subtraction ``Q(tau_j) - Q(tau_(j-1))`` and of the running sums (relative
1e-16, as the database's float sums themselves).

Accuracy (each with its probability over the noise alone, for every database). Write ``N_j``
for level j's total noise (``X_j`` per level, ``X_1 + .. + X_j`` for increments) and ``E_j``
for the sums' snapping error, ``|E_j| <= sum g_i / 2`` over its draws.

* R2T's guarantee (the paper's Theorem 5.1): with probability ``>= 1 - beta``, ``Q(I) - bias
  <= value <= Q(I)`` with the bias below. Each shift's noise part is exceeded with probability
  at most ``beta / (L + 1)`` (:func:`~dpsql.noise.r2t_plans.shift_tail`); the noise is
  symmetric, so the same holds for ``N_j < -shift``. The event used is: no level's noise above
  its shift (L upper tails) and level ``j*``'s noise not below minus its shift (one lower
  tail; ``j*`` is the first level covering the largest unit, fixed by the data, not by the
  noise): ``L + 1`` tails of ``beta / (L + 1)``, union bound. (The paper spends both tails of
  every level, ``beta / (2L)`` each; the ``L - 1`` other lower tails are never read.)
* ``P(value > Q(I)) <= beta L / (L + 1)``: truncation only lowers (``Q(tau_j) <= Q(I)``), so
  ``value > Q(I)`` needs some level with ``N_j + E_j > shift_j``, i.e. ``N_j`` above the
  shift's noise part (``shift_j`` less the rounding allowance); union over the L levels. Per
  level: the discrete tail ``P(X > ceil(s)) = p^(ceil(s)+1) / (1+p) <= p^(s+1) / (1+p) < p^s
  / 2 = beta / (L + 1)`` for ``s = scale ln((L + 1) / (2 beta))`` (``p = e^(-1/scale)``; sums
  in grid steps). Increments: the smallest step count whose proven tail bound for the sum
  ``N_j`` is at most ``beta / (L + 1)`` (:func:`dpsql.noise.r2t_tail.tail_steps`).
* Truncation bias: on the same event ``value >= noisy_j* - shift_j* >= Q(tau_j*) - 2
  shift_j*``; at the first level ``tau_j >= tau* = max_u c_u / b`` (the largest unit, in rows),
  ``Q(tau_j) = Q(I)`` and ``tau_j <= B max(ceil(tau*), 1)`` (j = 1: ``tau_1 = floor(B)``; j >
  1: ``floor(B^(j-1)) < tau*`` so ``B^(j-1) < ceil(tau*)`` and ``tau_j <= B^j``), so with the
  per-level shifts ``Q(I) - value <= 2 B L ln((L + 1) / (2 beta)) max(ceil(tau*), 1) b /
  epsilon`` with ``L = ceil(log_B GS)`` (+ the rounding of the shifts and grids) when ``tau*
  <= tau_L`` (``ln((L + 1) / (2 beta)) <= ln(L / beta)``: within the paper's bound); noised
  increments are chosen only when every shift is at most the per-level one, so the same bound
  holds (usually far from tight: base 2's shifts are about 0.54 of it, base 5.5's 0.82). For
  ``B = 2`` this is at most ``4 L ln(L / beta) max(ceil(tau*), 1) b / epsilon``: the paper's
  ``4 log2(GS) ln(log2(GS)/beta) tau* b / epsilon`` with its L rounded up to whole levels and
  tau* to whole rows (equal to it when GS is a power of two and tau* a whole number >= 1); a
  larger B trades the factor B against the smaller L (and the logarithm).
* Range (sums): every level's value must stay within the sums' saturation limit ``V_j =
  min(2^1020, g_j 2^1000)`` of :func:`~dpsql.noise.mechanisms.release_sums`, which clips a
  larger one (the snapping argument above assumes no clip). The engine cannot reach it: its SUM
  parts have b = 1 value unit and levels below 2^62, the ledger caps epsilon at 10^6, and a
  level (or increment) of n < 2^63 units is at most n epsilon / L of its own noise scales (below
  2^83, where ``g_j 2^1000`` is at least 2^980 of them) and below 2^125 in value (against
  2^1020). A direct call with values near 2^1020 is outside these claims
  (tests/redteam/test_r2t_shift_attacks.py shows it); an epsilon per draw above 2^900 is
  refused (:data:`~dpsql.noise.mechanisms.MAX_SUM_EPSILON`).
* The published 95% interval: ``half_width_j`` bounds level j's error with ``P(|noisy_j -
  Q(tau_j)| > half_width_j) <= 0.05 / L`` (per level: the smallest such whole number of steps
  under the exact discrete law; increments: twice :func:`~dpsql.noise.r2t_tail.tail_steps`'s
  one-sided bound at ``0.025 / L``, the noise being symmetric; sums: plus the snapping's
  allowance), so with probability >= 0.95 every level is simultaneously within its half-width
  (union bound: no independence across levels is needed). On that event ``Q(I) >= Q(tau_j) >=
  noisy_j - half_width_j`` for every j and ``Q(I) >= 0``, so ``lower95 = max(0, max_j
  (noisy_j - half_width_j))`` is a lower bound on the *untruncated* answer; and ``Q(tau_L) <=
  noisy_L + half_width_L = upper95`` bounds the answer truncated at the top level: Q(I) itself
  when GS bounds every unit (``c_u <= GS b``, so ``Q(tau_L) = Q(I)``), otherwise only what
  remains after the largest units are cut to ``tau_L b``. upper95 is raised to lower95 if below
  it (possible only outside the 95% event). The interval is about the answer, not about
  ``value``: value is R2T's biased-low estimate. :func:`interval_at` reads the same noisy
  levels at another confidence c (widths at ``(1 - c) / L`` per level,
  :func:`~dpsql.noise.r2t_plans.half_widths_at`), with the same argument: an AVG under a unit
  takes its SUM's and COUNT's at 97.5% each (:mod:`dpsql.units.avg`).

Noise: one draw per level (or per increment) through the
:class:`~dpsql.noise.mechanisms.Sampler` (all rows of a :func:`release_r2t_many` at once), so L
draws whatever the data; no other randomness. Every
refusal here reads the public parameters alone (GS, b, epsilon, beta): a level whose scale the
discrete sampler cannot take is a :class:`~dpsql.errors.NotSupportedError` before anything is
drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsql.noise import mechanisms
from dpsql.noise.mechanisms import Sampler, positive_real
from dpsql.noise.r2t_levels import DEFAULT_BASE, MAX_LEVELS, MIN_BASE, levels
from dpsql.noise.r2t_plans import (
    CONFIDENCE,
    MIN_BETA,
    R2TPlan,
    half_widths_at,
    plan_r2t,
    r2t_scales,
)

__all__ = [
    "CONFIDENCE",
    "DEFAULT_BASE",
    "MAX_LEVELS",
    "MIN_BASE",
    "MIN_BETA",
    "R2TPlan",
    "R2TRelease",
    "R2TReleases",
    "half_widths_at",
    "interval_at",
    "levels",
    "plan_r2t",
    "r2t_scales",
    "release_r2t",
    "release_r2t_many",
    "truncated_sums",
]


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
    b = positive_real(unit_bound, "unit_bound")
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
    ``noisy``: each level's noisy truncated answer; ``scales`` (of each draw: a level's, or
    its increment's), ``shifts``, ``half_widths``: public, per level; ``chosen``: the level
    index (0-based into ``levels``) attaining the max over levels (the first on ties; value
    is 0 rather than ``noisy[chosen] - shifts[chosen]`` when that is negative);
    ``lower95``/``upper95``: the simultaneous 95% bounds of the module docstring (lower: on
    the untruncated answer; upper: on the answer truncated at the top level, the answer itself
    when GS bounds every unit).
    """

    value: float
    noisy: np.ndarray
    scales: np.ndarray
    shifts: np.ndarray
    half_widths: np.ndarray
    levels: tuple[int, ...] | tuple[float, ...]
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
                     base: float = DEFAULT_BASE, increments: bool = True,
                     fine: bool = False) -> R2TReleases:
    """:func:`release_r2t` for n independent rows at once: ``truncated`` has shape ``(n, L)``,
    row i holding ``Q_i(tau_1..tau_L)``. Each row is one epsilon-DP release (module docstring);
    how rows compose (e.g. groups, each unit in at most kappa of them) is the caller's job.
    One sampler draw per level for all rows together (the increments' draws when the plan
    noises increments; the levels are then their running sums). ``fine``: the levels are
    :func:`~dpsql.noise.r2t_levels.fine_levels` (:func:`plan_r2t`)."""
    plan = plan_r2t(unit_bound=unit_bound, max_contribution=max_contribution, epsilon=epsilon,
                    beta=beta, integer=integer, base=base, increments=increments, fine=fine)
    n_levels = len(plan.levels)
    arr = _checked_truncated(truncated, n_levels)
    if plan.increments:
        # D_j = Q(tau_j) - Q(tau_(j-1)), Q(tau_0) = 0: exact for counts (integers, or integral
        # floats <= 2^53 as release_counts requires); one float subtraction for sums
        source = np.diff(arr if integer else arr.astype(np.float64), axis=1, prepend=0)
    else:
        source = arr
    columns = []
    for j in range(n_levels):
        if integer:
            columns.append(mechanisms.release_counts(source[:, j], plan.scales[j],
                                                     sampler=sampler))
        else:
            columns.append(mechanisms.release_sums(source[:, j], plan.scales[j],
                                                   sampler=sampler,
                                                   granularity=plan.granularities[j]))
    noisy = (np.stack(columns, axis=1) if columns
             else np.empty((0, n_levels)))
    if plan.increments:
        noisy = np.cumsum(noisy, axis=1)  # post-processing: noisy_j = sum_(i <= j) (D_i + X_i)
    shifts = np.array(plan.shifts)
    # counts: exact integer arithmetic (the shifts are whole numbers)
    shifted = noisy - (shifts.astype(np.int64) if integer else shifts)[None, :]
    chosen = np.argmax(shifted, axis=1)
    best = np.take_along_axis(shifted, chosen[:, None], axis=1)[:, 0]
    value = np.maximum(best, 0).astype(np.float64)
    lower, upper = _interval(noisy, plan.half_widths, integer)
    return R2TReleases(value=value, noisy=noisy, chosen=chosen, lower95=lower, upper95=upper,
                       plan=plan)


def _interval(noisy: np.ndarray, half_widths: tuple[float, ...], integer: bool
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``noisy`` (shape ``(n, L)``): ``lower = max(0, max_j (noisy_j - w_j))``
    and ``upper = max(noisy_L + w_L, lower)`` (module docstring, "The published 95%
    interval", for any simultaneous widths w). Counts in exact integers."""
    widths = np.array(half_widths)
    if integer:
        lows = noisy - widths.astype(np.int64)[None, :]
        top = noisy[:, -1] + int(widths[-1])
    else:
        lows = noisy - widths[None, :]
        top = noisy[:, -1] + widths[-1]
    lower = np.maximum(lows.max(axis=1), 0).astype(np.float64)
    return lower, np.maximum(top.astype(np.float64), lower)


def interval_at(noisy: np.ndarray, plan: R2TPlan, confidence: float) -> tuple[float, float]:
    """The interval of one release's noisy levels ``noisy`` (its :class:`R2TRelease`'s, shape
    ``(L,)``, drawn under ``plan``) at ``confidence`` rather than 95%: the bounds of the
    module docstring with :func:`~dpsql.noise.r2t_plans.half_widths_at`'s widths. Guarantee,
    with probability >= ``confidence`` over the noise: ``lower <= Q(I)`` (the untruncated
    answer) and ``Q(tau_L) <= upper`` (the answer truncated at the top level: Q(I) itself
    when GS bounds every unit). Post-processing of the release: no budget, no data read."""
    arr = np.asarray(noisy)
    if arr.shape != (len(plan.levels),):
        raise ValueError(f"noisy levels must have shape ({len(plan.levels)},)")
    lower, upper = _interval(arr[None, :], half_widths_at(plan, confidence), plan.integer)
    return float(lower[0]), float(upper[0])


def release_r2t(truncated: np.ndarray, *, unit_bound: float, max_contribution: int,
                epsilon: float, beta: float = 0.1, integer: bool,
                sampler: Sampler | None = None, base: float = DEFAULT_BASE,
                increments: bool = True, fine: bool = False) -> R2TRelease:
    """Release one COUNT or SUM under a privacy unit with R2T (contract: module docstring).

    ``truncated[j]`` is the exact ``Q(tau_j) = sum_u min(c_u, tau_j b)`` for the levels of
    :func:`levels` (``b = unit_bound``, GS = ``max_contribution``): int64 or integral floats
    for counts (``integer=True``), floats for sums. Precondition: adding or removing one unit
    changes ``Q(tau_j)`` by at most ``tau_j b`` and every ``Q(tau_j) >= 0``; with
    ``increments`` (the default) it also changes ``Q(tau_j) - Q(tau_(j-1))`` by at most
    ``(tau_j - tau_(j-1)) b`` (naive truncation does; LP truncation must pass
    ``increments=False``). Guarantee: the returned :class:`R2TRelease` is epsilon-DP (L draws
    at epsilon/L each, basic composition; the running sums, the max, the chosen level and the
    95% bounds are post-processing); with probability ``>= 1 - beta`` the value lies
    between ``Q(I)`` less the truncation bias and ``Q(I)`` (module docstring).
    ``sampler=None`` means the secure default.
    """
    arr = np.asarray(truncated)
    if arr.ndim != 1:
        raise ValueError("truncated answers must be a 1-D array, one per level")
    many = release_r2t_many(arr[None, :], unit_bound=unit_bound,
                            max_contribution=max_contribution, epsilon=epsilon, beta=beta,
                            integer=integer, sampler=sampler, base=base,
                            increments=increments, fine=fine)
    return many.row(0)
