"""The noise of an R2T plan (:mod:`dpsql.noise.r2t`'s module docstring, "Noised increments" and
"Per-level noise"): each draw's scale and grid, and each level's shift and half-width.

Contract of :func:`level_plan` and :func:`increment_plan`: given the public levels, b, epsilon
and beta (already checked by :func:`dpsql.noise.r2t.plan_r2t`), four lists of length L --
scales, grids, shifts, half-widths -- functions of these public parameters alone, with the
guarantees the R2T module docstring states (each draw (epsilon / L)-DP under its precondition;
``P(level j's noise > its shift's noise part) <= beta / (L + 1)``, :func:`shift_tail`;
``P(|level j's error| > half_width_j) <= 0.05 / L``). A scale the sampler cannot take is a
:class:`~dpsql.errors.NotSupportedError`; :func:`increment_plan` returns None when
:mod:`dpsql.noise.r2t_tail` has no bound for some level.
"""

from __future__ import annotations

import math

from dpsql.errors import NotSupportedError
from dpsql.noise import mechanisms
from dpsql.noise.r2t_tail import tail_steps

__all__ = ["CONFIDENCE", "increment_plan", "level_plan", "shift_tail"]

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
    except ValueError:
        raise _too_noisy() from None


def level_plan(taus: tuple[int, ...], b: float, eps: float, beta: float, integer: bool
                ) -> Plan:
    """Per-level noise: level j noised alone at scale ``L tau_j b / epsilon`` (sums: ``+ g_j``)
    with the one-level shift and half-width (module docstring, "Per-level noise")."""
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
            widths.append(float(_two_sided_steps(scale, alpha_level)))
        else:
            steps = scale / g
            shifts.append(g * (_one_sided_steps(steps, tail) + 0.5))
            widths.append(g * (_two_sided_steps(steps, alpha_level) + 0.5))
    return scales, grids, shifts, widths


def increment_plan(taus: tuple[int, ...], b: float, eps: float, beta: float, integer: bool
                    ) -> Plan | None:
    """Noised increments: ``D_j = Q(tau_j) - Q(tau_(j-1))`` noised at scale ``L (tau_j -
    tau_(j-1)) b / epsilon`` (sums: ``+ g_j``); level j's noise is the sum of the first j, its
    shift and half-width from :func:`dpsql.noise.r2t_tail.tail_steps` (module docstring,
    "Noised increments"). None when no tail bound applies to some level."""
    n = len(taus)
    eps_level = eps / n
    scales, grids = [], []
    previous = 0
    for tau in taus:
        scale, g = _draw_scale((tau - previous) * b, eps_level, integer)
        previous = tau
        scales.append(scale)
        grids.append(g)
    shifts, widths = [], []
    rounding = 0.0  # sums: each snapped increment is off by at most half its grid step
    for j in range(n):
        up = tail_steps(scales, grids, j, shift_tail(beta, n), integer=integer)
        both = tail_steps(scales, grids, j, (1.0 - CONFIDENCE) / (2 * n), integer=integer)
        if up is None or both is None:
            return None
        if integer:
            shifts.append(float(up))
            widths.append(float(both))
        else:
            rounding += grids[j] / 2
            shifts.append(grids[j] * up + rounding)
            widths.append(grids[j] * both + rounding)
    return scales, grids, shifts, widths
