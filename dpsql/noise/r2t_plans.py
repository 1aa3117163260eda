"""The public plan of an R2T release (:mod:`dpsql.noise.r2t`'s module docstring, "Noised
increments" and "Per-level noise"): each draw's scale and grid, and each level's shift and
half-width, all functions of the public parameters (GS, base, b, epsilon, beta) alone.

:func:`plan_r2t` checks those parameters and chooses between the two plans (its docstring);
:class:`R2TPlan` is what it returns; :mod:`dpsql.noise.r2t` re-exports all three with the
mechanism whose contract they serve.

Contract of :func:`level_plan` and :func:`increment_plan`: given the public levels, b, epsilon
and beta (already checked by :func:`plan_r2t`), four lists of length L --
scales, grids, shifts, half-widths -- functions of these public parameters alone, with the
guarantees the R2T module docstring states (each draw (epsilon / L)-DP under its precondition;
``P(level j's noise > its shift's noise part) <= beta / (L + 1)``, :func:`shift_tail`;
``P(|level j's error| > half_width_j) <= 0.05 / L``). A scale the sampler cannot take is a
:class:`~dpsql.errors.NotSupportedError`; :func:`increment_plan` returns None when
:mod:`dpsql.noise.r2t_tail` has no bound for some level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsql.errors import NotSupportedError
from dpsql.noise import mechanisms
from dpsql.noise.mechanisms import positive_real
from dpsql.noise.r2t_levels import DEFAULT_BASE, fine_levels, levels
from dpsql.noise.r2t_tail import tail_steps

__all__ = ["CONFIDENCE", "MIN_BETA", "R2TPlan", "half_widths_at", "increment_plan", "level_plan",
           "plan_r2t", "r2t_scales", "shift_tail"]

#: The smallest beta a plan takes: each tail's share beta / (L + 1) stays a normal float.
MIN_BETA = 1e-300

#: Confidence of the published interval (simultaneous over all levels).
CONFIDENCE = 0.95

Plan = tuple[list[float], list[float], list[float], list[float]]


def _too_noisy() -> NotSupportedError:
    return NotSupportedError(
        "R2T's top truncation level needs more noise than the discrete sampler takes: declare a "
        "smaller max_contribution for the privacy unit, tighten the bounds, or raise epsilon"
    )


def shift_tail(beta: float, n: int) -> float:
    """Each level's share ``beta / (L + 1)`` of beta: the most probability with which its noise
    may exceed its shift.

    Why L + 1 (:mod:`dpsql.noise.r2t`, "Accuracy"): R2T's guarantee, ``Q(I) - bias <= value <=
    Q(I)`` with probability ``1 - beta``, needs L upper tails (no level above its shift, so the
    value is not above Q(I)) and one lower tail (the first level covering the largest unit not
    below minus its shift, which bounds the bias); the noise is symmetric, so one share serves
    either side. The paper's union over both tails of every level (``beta / (2L)``) spends
    ``L - 1`` lower tails the argument never reads.
    """
    return beta / (n + 1)


def _one_sided_steps(scale: float, tail: float) -> int:
    """``ceil(scale ln(1 / (2 tail)))``: a shift of this many integer steps is exceeded by
    discrete Laplace(scale) noise with probability < ``tail`` (``P(X > ceil(s)) < p^s / 2``,
    module docstring of :mod:`dpsql.noise.r2t`)."""
    return math.ceil(scale * math.log(1.0 / (2.0 * tail)))


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


def _draw_scale(sensitivity: float, eps_level: float, integer: bool) -> tuple[float, float]:
    """One draw's public ``(scale, grid)``: a count's exact discrete Laplace scale (grid 1), or
    a sum's scale on its grid (:func:`~dpsql.noise.mechanisms.gridded_sum_scale`); a scale the
    sampler cannot take is :func:`_too_noisy`."""
    if integer:
        scale = sensitivity / eps_level
        if not scale <= mechanisms.MAX_DISCRETE_SCALE:
            raise _too_noisy()
        return scale, 1.0
    try:
        return mechanisms.gridded_sum_scale(sensitivity, eps_level)
    except mechanisms.EpsilonTooSmallForSum as e:
        raise NotSupportedError(f"R2T's levels of a SUM split epsilon too thin: {e}") from None
    except mechanisms.EpsilonTooLargeForSum as e:
        raise NotSupportedError(str(e)) from None
    except ValueError:
        raise _too_noisy() from None


Levels = tuple[int, ...] | tuple[float, ...]


def level_plan(taus: Levels, b: float, eps: float, beta: float, integer: bool) -> Plan:
    """Per-level noise: level j noised alone at scale ``L tau_j b / epsilon`` (sums: ``+ g_j``)
    with the one-level shift and half-width (dpsql.noise.r2t's module docstring, "Per-level
    noise")."""
    n = len(taus)
    eps_level = eps / n
    tail = shift_tail(beta, n)
    alpha_level = (1.0 - CONFIDENCE) / n
    scales, grids, shifts, widths = [], [], [], []
    for tau in taus:
        scale, g = _draw_scale(tau * b, eps_level, integer)
        scales.append(scale)
        grids.append(g)
        if integer:
            shifts.append(float(_one_sided_steps(scale, tail)))
        else:
            shifts.append(g * (_one_sided_steps(scale / g, tail) + 0.5))
        widths.append(_level_width(scale, g, alpha_level, integer))
    return scales, grids, shifts, widths


def _level_width(scale: float, g: float, alpha: float, integer: bool) -> float:
    """One level noised alone at ``scale`` on grid ``g``: the smallest half-width (whole steps,
    sums plus half a step of snapping) its error exceeds with probability at most ``alpha``."""
    if integer:
        return float(_two_sided_steps(scale, alpha))
    return g * (_two_sided_steps(scale / g, alpha) + 0.5)


def _increment_widths(scales: list[float], grids: list[float], alpha: float, integer: bool
                      ) -> list[float] | None:
    """Noised increments: each level's half-width at two-sided tail ``alpha`` (twice
    :func:`~dpsql.noise.r2t_tail.tail_steps`'s one-sided bound at ``alpha / 2``; sums plus the
    snapping of every draw so far), or None when no tail bound applies to some level."""
    widths = []
    rounding = 0.0  # sums: each snapped increment is off by at most half its grid step
    for j in range(len(scales)):
        both = tail_steps(scales, grids, j, alpha / 2, integer=integer)
        if both is None:
            return None
        rounding += grids[j] / 2
        widths.append(float(both) if integer else grids[j] * both + rounding)
    return widths


def increment_plan(taus: Levels, b: float, eps: float, beta: float, integer: bool
                   ) -> Plan | None:
    """Noised increments: ``D_j = Q(tau_j) - Q(tau_(j-1))`` noised at scale ``L (tau_j -
    tau_(j-1)) b / epsilon`` (sums: ``+ g_j``); level j's noise is the sum of the first j, its
    shift and half-width from :func:`dpsql.noise.r2t_tail.tail_steps` (dpsql.noise.r2t's
    module docstring, "Noised increments"). None when no tail bound applies to some level."""
    n = len(taus)
    eps_level = eps / n
    scales, grids = [], []
    previous: float = 0
    for tau in taus:
        scale, g = _draw_scale((tau - previous) * b, eps_level, integer)
        previous = tau
        scales.append(scale)
        grids.append(g)
    shifts = []
    rounding = 0.0  # sums: each snapped increment is off by at most half its grid step
    for j in range(n):
        up = tail_steps(scales, grids, j, shift_tail(beta, n), integer=integer)
        if up is None:
            return None
        rounding += grids[j] / 2
        shifts.append(float(up) if integer else grids[j] * up + rounding)
    widths = _increment_widths(scales, grids, (1.0 - CONFIDENCE) / n, integer)
    if widths is None:
        return None
    return scales, grids, shifts, widths


# ---------------------------------------------------------------------------------------------
# The public plan of one release (dpsql.noise.r2t's plan_r2t)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class R2TPlan:
    """The public parameters of one R2T release: they depend on GS, b, epsilon, beta only.

    ``levels[j]`` is tau in rows (:func:`~dpsql.noise.r2t_levels.levels`, or its fine
    levels, ``fine``); ``increments`` whether the levels are released as noised
    increments (dpsql.noise.r2t's module docstring); ``scales[j]`` the noise scale of draw j
    in value units (of level j, or of its increment; a count's discrete Laplace scale; a
    sum's grid step times its integer noise's scale); ``granularities[j]`` its grid (1 for
    counts); ``shifts[j]`` what is subtracted from level j before the max; ``half_widths[j]``
    level j's share of the simultaneous 95% interval.
    """

    levels: tuple[int, ...] | tuple[float, ...]
    unit_bound: float
    epsilon: float
    beta: float
    integer: bool
    scales: tuple[float, ...]
    granularities: tuple[float, ...]
    shifts: tuple[float, ...]
    half_widths: tuple[float, ...]
    increments: bool = False
    fine: bool = False

    @property
    def epsilon_per_level(self) -> float:
        return self.epsilon / len(self.levels)


def plan_r2t(*, unit_bound: float, max_contribution: int, epsilon: float, beta: float = 0.1,
             integer: bool, base: float = DEFAULT_BASE, increments: bool = True,
             fine: bool = False) -> R2TPlan:
    """The public plan of an R2T release (levels, scales, grids, shifts, half-widths, and
    whether the levels are released as noised increments).

    Precondition: ``unit_bound`` (b) finite > 0, a whole number when ``integer``; GS as for
    :func:`levels`, whose levels the plan uses, or with ``fine`` those of
    :func:`~dpsql.noise.r2t_levels.fine_levels` (then ``integer`` only when they are whole);
    ``epsilon`` finite > 0; ``MIN_BETA <= beta < 1``. Otherwise ``TypeError`` / ``ValueError``
    (programming errors); a level whose count scale exceeds
    ``MAX_DISCRETE_SCALE`` (or a sum scale outside the grid's range) is a
    :class:`NotSupportedError`. Guarantee: every field is a function of these public
    parameters alone (dpsql.noise.r2t's module docstring says what each means). With
    ``increments`` (allowed only under the increments' precondition, there) the plan noises
    the increments when its tail bound applies to every level and no level's shift or
    half-width is larger than per-level noise's; otherwise it is the per-level plan.
    """
    b = positive_real(unit_bound, "unit_bound")
    eps = positive_real(epsilon, "epsilon")
    beta_f = positive_real(beta, "beta")
    if not MIN_BETA <= beta_f < 1.0:  # below it beta / (L + 1) underflows in the tail bounds
        raise ValueError(f"beta must lie in [{MIN_BETA:g}, 1)")
    if not isinstance(integer, bool):
        raise TypeError("integer must be a bool")
    if not isinstance(increments, bool):
        raise TypeError("increments must be a bool")
    if integer and not b.is_integer():
        raise ValueError("a count's unit_bound must be a whole number of rows' weight (1 for "
                         "COUNT); use integer=False for sums")
    if not isinstance(fine, bool):
        raise TypeError("fine must be a bool")
    taus = fine_levels(max_contribution, base) if fine else levels(max_contribution, base)
    if integer and not all(float(t).is_integer() for t in taus):
        raise ValueError("a count's fine levels are not whole rows here: use integer=False")
    if not eps / len(taus) > 0.0:  # epsilon near 5e-324: each level's share underflows
        raise NotSupportedError(
            f"epsilon {eps:g} is too small to split over R2T's {len(taus)} truncation levels: "
            "raise epsilon")
    chosen = level_plan(taus, b, eps, beta_f, integer)
    use_increments = False
    if increments and len(taus) > 1:
        inc = increment_plan(taus, b, eps, beta_f, integer)
        if inc is not None:
            # level 1 is one draw in both plans (increment tau_1 - 0), of the same scale and
            # grid: either plan's shift and half-width bound it, so keep the smaller
            assert (inc[0][0], inc[1][0]) == (chosen[0][0], chosen[1][0])
            inc[2][0] = min(inc[2][0], chosen[2][0])
            inc[3][0] = min(inc[3][0], chosen[3][0])
        if inc is not None and all(
                x <= y for new, old in ((inc[2], chosen[2]), (inc[3], chosen[3]))
                for x, y in zip(new, old, strict=True)):
            chosen, use_increments = inc, True
    scales, grids, shifts, widths = chosen
    return R2TPlan(levels=taus, unit_bound=b, epsilon=eps, beta=beta_f, integer=integer,
                   scales=tuple(scales), granularities=tuple(grids), shifts=tuple(shifts),
                   half_widths=tuple(widths), increments=use_increments, fine=fine)


def half_widths_at(plan: R2TPlan, confidence: float) -> tuple[float, ...]:
    """Each level's half-width of ``plan``'s simultaneous interval at ``confidence`` instead
    of :data:`CONFIDENCE`: ``P(|level j's error| > width_j) <= (1 - confidence) / L`` for the
    plan's own draws (per-level noise, or noised increments with level 1's smaller of the two
    bounds, as :func:`plan_r2t`), so every level is within its width with probability >=
    ``confidence`` (union bound). A function of the public plan alone: the same draws, a
    wider or narrower reading of them (post-processing). Equals ``plan.half_widths`` at
    :data:`CONFIDENCE`. Precondition: ``0 < confidence < 1``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must lie in (0, 1)")
    scales, grids = list(plan.scales), list(plan.granularities)
    alpha = (1.0 - confidence) / len(plan.levels)
    alone = [_level_width(s, g, alpha, plan.integer) for s, g in zip(scales, grids, strict=True)]
    if not plan.increments:
        return tuple(alone)
    widths = _increment_widths(scales, grids, alpha, plan.integer)
    # the plan took increments only where every level's tail bound applies, which depends on
    # the scales alone (dpsql.noise.r2t_tail), not on the target
    assert widths is not None
    widths[0] = min(widths[0], alone[0])  # level 1: one draw of the per-level plan's scale
    return tuple(widths)


def r2t_scales(*, unit_bound: float, max_contribution: int, epsilon: float,
               integer: bool, base: float = DEFAULT_BASE, increments: bool = True,
               beta: float = 0.1, fine: bool = False) -> np.ndarray:
    """The public noise scale of every draw (value units), for explain and the release record
    before anything runs: per-level noise ``L tau_j b / epsilon`` for counts, ``L (tau_j b +
    g_j) / epsilon`` for sums; noised increments the same with ``tau_j - tau_(j-1)`` for
    ``tau_j`` (:func:`plan_r2t`, which also says which applies: pass the release's beta, on
    which that choice may depend)."""
    plan = plan_r2t(unit_bound=unit_bound, max_contribution=max_contribution, epsilon=epsilon,
                    beta=beta, integer=integer, base=base, increments=increments, fine=fine)
    return np.array(plan.scales, dtype=np.float64)
