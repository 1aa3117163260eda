"""Two cheap exact certificates for a SUM's levels over two units, read from the per-unit loads
that :class:`dpsql.noise.r2t_certify.Pairs` holds (that module's contract: each returns a
level's exact maximum flow OPT, or None when its premise fails; issue #17, the time of TPC-H
Q7 over customer and supplier, whose two middle levels they settle while reading only a few
results):

6. **A side saturated, from the loads** (:func:`saturated_by_loads`; sums, every psi <= tau):
   x = s on the results of X units surely light (real load <= tau, so their floored load
   <= T) and 0 elsewhere is feasible; each Y unit then receives more than its light-X load
   over delta less one step per such result (each floor loses under 1). When that bound
   reaches T for every present Y unit, lowering flows to T each gives present_y * T, the cut
   of Y's sink edges: OPT. Only the few heavy X units' results are read (TPC-H Q7's middle
   level: every supplier heavy, 0.3% of the customers).
7. **Closed form 3 with few heavy units** (:func:`closed_mostly_light`; sums): with X light,
   OPT = sum_y min(L'_y, T), and every surely light Y unit has L'_y <= T, so OPT is the plain
   sum of s less L'_y - min(L'_y, T) of the other Y units, summed over their results alone.
"""

from __future__ import annotations

import math

import numpy as np

from dpsql.noise.r2t_certify import Pairs, exact_sums, floored_total, level_caps

__all__ = ["closed_mostly_light", "saturated_by_loads"]


def saturated_by_loads(p: Pairs, tau: float, delta: float) -> int | None:
    """Sums: OPT when one side saturates on the results of the other side's light units,
    judged from the loads alone (module docstring, 6), else None."""
    if p.integer or not p.a.size or p.top > tau:
        return None
    cap = math.floor(tau / delta)
    for x, load_x, count_x, y, load_y, count_y, ny, present_y in (
            (p.a, p.load_a, p.count_a, p.b, p.load_b, p.count_b, p.nb, p.present_b),
            (p.b, p.load_b, p.count_b, p.a, p.load_a, p.count_a, p.na, p.present_a)):
        # each Y unit's ``low`` below is at most its own lowered load over delta (what is
        # left out is >= 0, and so is count_y - left_rows; float rounding is monotone): a
        # present Y unit below cap by that alone fails the certificate, so this side is not
        # worth the pass over every result that finds the unsure X units' rows
        margin = (count_y + 2) * 2.0**-51
        if not np.all((load_y * (1.0 - margin) / delta >= cap) | (count_y == 0)):
            continue
        # an X unit is surely light when its float64 load, raised by its sum's margin
        # (Pairs.light), is at most tau; the others' results are left out of the flow
        unsure = load_x * (1.0 + (count_x + 1) * 2.0**-51) > tau
        left_out: np.ndarray = np.zeros(ny)
        left_rows: np.ndarray = np.zeros(ny, np.int64)
        if unsure.any():
            if int(count_x[unsure].sum()) * 8 > x.size:  # too many to leave out: not here
                continue
            rows = np.flatnonzero(unsure[x])
            left_out = np.bincount(y[rows], weights=p.values[rows], minlength=ny)
            left_rows = np.bincount(y[rows], minlength=ny)
        # each Y unit's light-X load, lowered by both float sums' margins (each within
        # (n + 1) 2^-52 of its value relatively, n <= count_y), less one step per result
        light_load = load_y * (1.0 - margin) - left_out * (1.0 + margin)
        low = (light_load / delta - (count_y - left_rows)) * (1.0 - 2.0**-50)
        if np.all((low >= cap) | (count_y == 0)):
            return present_y * cap
    return None


def closed_mostly_light(p: Pairs, tau: float, delta: float) -> int | None:
    """Sums: closed form 3 (dpsql.noise.r2t_certify) when one side is light and the other mostly is:
    OPT = sum over the other side's units y of min(L'_y, T), where a surely light y (its load
    at most tau, with :meth:`Pairs.light`'s margin) has L'_y <= T. So OPT is the plain sum of
    every result's capacity, less ``L'_y - min(L'_y, T)`` of the few other y, summed over their
    own results: no per-unit sum over every result. Else None."""
    if p.integer or not p.a.size:
        return None
    cap = math.floor(tau / delta)
    for light_side, y, load_y, count_y, ny, most_y in (
            ("a", p.b, p.load_b, p.count_b, p.nb, p.most_b),
            ("b", p.a, p.load_a, p.count_a, p.na, p.most_a)):
        if not p.light(light_side, tau):
            continue
        unsure = load_y * (1.0 + (count_y + 1) * 2.0**-51) > tau
        if int(count_y[unsure].sum()) * 8 > y.size:  # many: full()'s per-unit sums
            continue
        total = floored_total(p, tau, delta)  # every result's capacity, summed exactly
        if unsure.any():
            rows = np.flatnonzero(unsure[y])
            s, _ = level_caps(p.values[rows], tau, delta, False, top=p.top)
            sums = exact_sums(y[rows], s, ny, cap, most_y)
            total += int(np.minimum(sums, cap).sum()) - int(sums.sum())
        return total
    return None
