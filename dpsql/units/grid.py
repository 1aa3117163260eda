"""The truncation grid of each R2T part (a query under a privacy unit without GROUP BY).

R2T truncates each unit's contribution c_u at levels tau_j and releases every
``Q(tau_j) = sum_u min(c_u, tau_j b)`` (:mod:`dpsql.noise.r2t`). What the levels count
depends on the part (:class:`dpsql.units.analysis.R2TPart`):

* **a COUNT**: rows. ``b = 1``, levels ``floor(B^j)`` rows up to the first >= GS =
  ``max_contribution`` (the owner's grid, :func:`dpsql.noise.r2t.levels`).
* **a SUM part** (the non-negative sum of max(x, 0), or the non-positive one of max(-x, 0), each
  row's value clamped into ``[0, bound]``): **value units**, as R2T's code
  (hkustDB/Race-to-the-Top, ``R2TSJF.py``: ``tau = 5.5^i``, compared with each unit's summed
  value). ``b = 1``, levels ``floor(B^j)`` value units up to the first >= ``GS_value``: the
  owner's ``max_sum`` (a bound in value units on one unit's SUM, R2T's GS for a SUM) when
  declared, else ``ceil(max_contribution * bound)`` (what GS rows of the largest value sum to).
  Rows-times-bound levels ``floor(B^j) * bound`` (dpsql's earlier rule) jump by whole rows of the
  largest value, so a unit whose rows are smaller than the bound on average is truncated at a
  level up to B times coarser than its sum needs; and they cannot take an owner's bound on the
  sum.

**Several units** (dpsql.units.multi, the max-flow truncation): the levels are R2T's own
``B^j`` on a fine dyadic grid (:func:`dpsql.noise.r2t_levels.fine_levels`; exactly ``5.5^j``
for R2T's base), in rows or value units as above. A flow solves a real level as exactly as a
whole one (dpsql.noise.r2t_flow), and its levels are noised one by one, so nothing there needs
whole rows; a COUNT whose levels are not whole is released through the sums' noise
(:func:`released_integer`), then rounded (post-processing). Under one unit the levels stay
whole (``floor(B^j)``): its counts are exact integers under discrete noise, noised as
increments. Whole bases (the default 2) give the same levels either way.

Contract of :func:`part_grid`. Precondition: ``part`` is one of the analysis's parts (COUNT:
``bound == 1`` and ``integer``; SUM: ``bound > 0`` finite, ``integer`` false) and ``unit`` the
declared privacy unit. Guarantee: ``(unit_bound, max_contribution)`` for
:func:`dpsql.noise.r2t.plan_r2t` and :func:`dpsql.noise.r2t.levels`, a function of the metadata
and the clamp bound alone (public); the executed query truncates at ``tau_j * unit_bound`` over
exactly those levels. Under add/remove of one unit (FK cascade) each ``Q(tau_j)`` moves by
``min(c_u, tau_j unit_bound) <= tau_j unit_bound`` because ``c_u >= 0`` (a COUNT; a SUM part of
values clamped into ``[0, bound]``): R2T's precondition, for any public grid. A grid whose top
level would exceed 2^62 is a :class:`~dpsql.errors.NotSupportedError` naming the bound and the
fix (it depends on the metadata and the SQL's bounds alone).
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpsql.analysis.model import Measurement
from dpsql.errors import NotSupportedError
from dpsql.metadata import PrivacyUnit
from dpsql.noise.r2t_levels import MAX_LEVELS, fine_levels, levels
from dpsql.rewrite.fixed_point import SUMMAND_BITS, exponent_below
from dpsql.units.analysis import R2TPart, UnitRelease, per_group_clamp

__all__ = ["fine_grid", "part_grid", "part_levels", "r2t_row_bounds", "released_integer",
           "sum_top", "summand_exponent"]


def sum_top(bound: float, unit: PrivacyUnit) -> int:
    """GS_value of a SUM part whose rows contribute at most ``bound`` each (module docstring):
    the owner's ``max_sum``, else ``ceil(max_contribution * bound)`` (exact, in rationals), at
    least 1."""
    if unit.max_sum is not None:
        return int(unit.max_sum)
    return max(1, math.ceil(Fraction(unit.max_contribution) * Fraction(float(bound))))


def part_grid(part: R2TPart, unit: PrivacyUnit) -> tuple[float, int]:
    """``(unit_bound, max_contribution)`` of ``part``'s R2T release (module contract)."""
    if part.integer:
        return float(part.bound), unit.max_contribution
    gs = sum_top(part.bound, unit)
    if gs > 2**MAX_LEVELS:
        raise _too_large(gs)
    try:
        levels(gs, unit.level_base)
    except ValueError:
        raise _too_large(gs) from None
    return 1.0, gs


def part_levels(part: R2TPart, unit: PrivacyUnit, fine: bool = False
                ) -> tuple[int, ...] | tuple[float, ...]:
    """The levels of ``part`` (rows for a COUNT, value units for a SUM part); ``fine``: the
    fine levels of several units (module docstring)."""
    gs = part_grid(part, unit)[1]
    return fine_levels(gs, unit.level_base) if fine else levels(gs, unit.level_base)


def fine_grid(release: UnitRelease) -> bool:
    """Whether ``release`` truncates at fine levels: over several units (module docstring)."""
    return bool(release.more)


def released_integer(part: R2TPart, release: UnitRelease) -> bool:
    """Whether ``part`` is released as an exact integer under discrete noise: a COUNT whose
    levels are whole rows (always under one unit)."""
    return part.integer and all(
        float(t).is_integer() for t in part_levels(part, release.unit, fine_grid(release)))


def _too_large(gs: int) -> NotSupportedError:
    return NotSupportedError(
        f"under a privacy unit, a SUM's truncation levels would reach {gs} value units, beyond "
        "2^62: declare max_sum (a bound on one unit's sum) in the privacy_unit, a smaller "
        "max_contribution, or tighter bounds on the summed column")


def summand_exponent(m: Measurement, release: UnitRelease) -> int:
    """The largest fixed-point k (dpsql.rewrite.fixed_point) with which every value the
    units query sums over units stays below 2^62 steps: a part's truncated contribution (at most
    its top level, in value units) under R2T; a unit's clamped contribution to one group
    (:func:`dpsql.units.analysis.per_group_clamp`) in two stages. A sum of fewer than 2^63 of
    them cannot overflow DECIMAL(38, 0). The rows of no unit, added in full
    (dpsql.units.rewrite), are one such sum of per-row values, each below 2^62 steps too (a
    row is within the top level, or within one group's clamp), so the total stays a sum of
    fewer than 2^63 values below 2^62 steps: one per unit or per row of no unit. Public: the
    metadata and the bounds alone."""
    if release.r2t:
        top = max((Fraction(max(part_levels(p, release.unit, fine_grid(release)))) * Fraction(
            part_grid(p, release.unit)[0]) for p in release.parts if p.index == m.index),
            default=Fraction(0))  # no part: a SUM over [0, 0]
    else:
        lo, hi = per_group_clamp(m, release.unit)
        top = max(Fraction(-lo), Fraction(hi))
    return exponent_below(top, SUMMAND_BITS)


def r2t_row_bounds(m: Measurement, release: UnitRelease) -> tuple[float, float]:
    """SUM measurement ``m``'s bounds within its R2T parts' top levels (value units, b = 1):
    [max(l, -top_neg), min(u, top_pos)], each top rounded outwards to a double. A row's part
    value above its top level is at least every level, so is its unit's contribution, and
    every truncated sum min(c_u, tau_j) is the same with the row clamped there. The rows of
    no unit are added in full (dpsql.units.rewrite), so there such a row counts as the top
    level: a clamp of the row alone by public bounds, like every clamp (it moves nothing
    between neighbours; it matters only when a bound exceeds the top level, an owner's
    ``max_sum`` below one row's bound)."""
    assert m.bounds is not None
    lo, hi = float(m.bounds[0]), float(m.bounds[1])
    for p in release.parts:
        if p.index != m.index:
            continue
        top = max(part_levels(p, release.unit, fine_grid(release))) * int(
            part_grid(p, release.unit)[0])
        outward = float(top)
        if outward < top:  # nearest double below the integer level: one step up
            outward = math.nextafter(outward, math.inf)
        if p.sign > 0:
            hi = min(hi, outward)
        else:
            lo = max(lo, -outward)
    return lo, hi
