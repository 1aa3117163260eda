"""An AVG's 95% interval under a privacy unit without GROUP BY (R2T): pure post-processing.

An AVG there is noisy SUM / noisy COUNT, two R2T releases (dpsql.units.noise), each truncated
per unit and shifted low by its own tail bound. Its interval is computed from what is already
released -- each measurement's interval read at 97.5% from its noisy levels
(:data:`dpsql.units.noise.AVG_MEASUREMENT_CONFIDENCE`, ``R2TOutcome.for_avg``) -- and the
public clamp bounds [l, u] of the AVG's argument: no budget, no data read.

What it covers. With probability >= 97.5% each (dpsql.noise.r2t, "The published 95%
interval"), the SUM's interval has ``S_lo <= S(I)`` and ``S(tau_L) <= S_hi``, and the COUNT's
``C_lo <= C(I)`` and ``C(tau_L) <= C_hi``: lower bounds on the untruncated answers, upper
bounds on the answers truncated at the top levels. Both hold together with probability >= 95%
(union bound; no independence needed). When every unit is within the top levels -- at most
``max_contribution`` rows in the query (each unit table's, with several units; there the
rows of neither unit count as one more unit, dpsql.units.multi_execute.pair_codes), and, when
the owner declares ``max_sum``, each of its SUM parts at most that -- the truncated answers ARE
the answers, so on that event the true ``AVG = S / C`` (over the values clamped into [l, u], with
the rows of no unit in full) lies in :func:`ratio_interval`'s result. A unit beyond the top
levels voids the upper bounds, hence the claim (as for a bare COUNT's or SUM's upper bound).
"""

from __future__ import annotations

import math

__all__ = ["ratio_interval"]


def ratio_interval(total: tuple[float, float], count: tuple[float, float],
                   bounds: tuple[float, float]) -> tuple[float, float]:
    """The range of ``S / C`` over the box ``S in total``, ``C in count`` with C a whole number
    >= 1 (an AVG is defined over at least one row), intersected with ``bounds`` [l, u].

    Contract. Precondition: ``bounds`` has ``l <= u``. Guarantee: the result ``(lo, hi)`` has
    ``l <= lo <= hi <= u``, and for every S in ``total`` and whole C >= 1 in ``count`` with
    ``S / C`` in [l, u] (an average of values clamped into [l, u]), ``lo <= S / C <= hi``.
    When no such C exists (``count``'s upper end below 1), the box is empty or not finite,
    or the range misses [l, u] -- each possible only outside the event the intervals hold,
    or never -- the result is [l, u] itself: still true, and saying nothing more.

    S / C is monotone in S at fixed C > 0 and in C at fixed S, so its extremes over the box
    are at its corners: the low end at ``S_lo / C_hi`` when S_lo >= 0 (a larger count
    divides a non-negative sum down) and at ``S_lo / C_lo`` when S_lo < 0; symmetrically the
    high end.
    """
    low, high = float(bounds[0]), float(bounds[1])
    s_lo, s_hi = float(total[0]), float(total[1])
    # C is a whole number >= 1: rounding the count's lower end up keeps every such C
    c_lo = max(math.ceil(count[0]), 1) if math.isfinite(count[0]) else 1
    c_hi = float(count[1])
    if not (math.isfinite(s_lo) and math.isfinite(s_hi) and s_lo <= s_hi) or not c_lo <= c_hi:
        return low, high
    # C_hi may be infinite: S / C then tends to 0 from S's side, which min / max keep
    lo = min(s_lo / c_lo, s_lo / c_hi if math.isfinite(c_hi) else 0.0)
    hi = max(s_hi / c_lo, s_hi / c_hi if math.isfinite(c_hi) else 0.0)
    lo, hi = max(lo, low), min(hi, high)
    if lo > hi:
        return low, high
    return lo, hi
