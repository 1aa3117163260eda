"""R2T's truncation levels on the owner's geometric grid (dpsql.noise.r2t's module docstring,
"Mechanism"): ``tau_j = floor(B^j)`` rows up to the first level >= GS.

Its own module, free of numpy, so the metadata reader (dpsql.metadata.unit_paths) can validate
a declared grid without loading the noise machinery (the CLI's light commands stay light).
"""

from __future__ import annotations

import functools
import math
import numbers
from fractions import Fraction

__all__ = ["DEFAULT_BASE", "FINE_BITS", "MAX_LEVELS", "MIN_BASE", "fine_exponent", "fine_levels",
           "levels"]

#: Largest number of levels: GS up to 2^62 rows (counts must stay within int64).
MAX_LEVELS = 62
#: The paper's grid: tau_j = 2^j (the default when the owner declares no base)
DEFAULT_BASE = 2.0
#: Fine levels (:func:`fine_levels`) keep the top level below 2^(FINE_BITS + 1) grid steps, so
#: every level is a whole number of steps below 2^31 (the max-flow's int32 capacities)
FINE_BITS = 30
#: The smallest base: with B >= 2 the levels floor(B^j) are distinct and start at 2 or more
MIN_BASE = 2.0


def _exact_base(base: float) -> Fraction:
    """The grid's base as an exact rational (a float is the binary number it holds, so the
    levels are a function of the declared value alone, never of float rounding)."""
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError("the levels' base must be a real number")
    value = float(base)
    if not math.isfinite(value) or not MIN_BASE <= value <= 2**MAX_LEVELS:
        raise ValueError(f"the levels' base must lie in [{MIN_BASE}, 2^62], got {base!r}")
    return Fraction(int(base)) if isinstance(base, numbers.Integral) else Fraction(value)


# Exact rational powers are slow and every plan, truncation and check of one release asks for
# the same grid: computed once per (GS, base) and its types (``typed``: True is refused, not
# taken for 1); an immutable tuple, so the cached value is the value.
@functools.lru_cache(maxsize=256, typed=True)
def levels(max_contribution: int, base: float = DEFAULT_BASE) -> tuple[int, ...]:
    """The truncation levels ``tau_j = floor(B^j)`` rows for ``j = 1..L``, ``B = base``, L the
    smallest ``j >= 1`` with ``tau_j >= GS`` (``L = max(1, ceil(log_B GS))``).

    Precondition: ``max_contribution`` (GS) an integer in ``[1, 2^62]``, ``base`` a real
    number in ``[2, 2^62]``, and ``tau_L <= 2^62``; otherwise ``TypeError`` / ``ValueError``.
    Guarantee: strictly increasing integers (``B >= 2``: ``B^(j+1) - B^j >= B^j >= 2``, so the
    floors differ), ``tau_1 = floor(B) >= 2``, ``tau_L >= GS`` (truncation at the top level
    cuts no unit within GS) and ``tau_L < B max(GS, 2)``; for a whole base exactly ``B^j``.
    Exact (rational powers of the base, no floating point): the default ``B = 2`` gives
    ``2, 4, .., 2^ceil(log2 GS)``.
    """
    if isinstance(max_contribution, bool) or not isinstance(max_contribution, numbers.Integral):
        raise TypeError("max_contribution (GS) must be an integer number of rows")
    gs = int(max_contribution)
    if not 1 <= gs <= 2**MAX_LEVELS:
        raise ValueError("max_contribution (GS) must lie in [1, 2^62] rows")
    b = _exact_base(base)
    out: list[int] = []
    power = Fraction(1)
    while not out or out[-1] < gs:
        power *= b
        out.append(math.floor(power))
    if out[-1] > 2**MAX_LEVELS:
        raise ValueError(f"the top truncation level floor({float(b):g}^{len(out)}) = {out[-1]} "
                         f"exceeds 2^62 rows: declare a smaller base or max_contribution")
    return tuple(out)


def _floor_log2(x: Fraction) -> int:
    """``floor(log2(x))`` of a positive rational, exactly."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if (x.numerator << max(-e, 0)) < (x.denominator << max(e, 0)):
        e -= 1  # 2^e > x
    return e


@functools.lru_cache(maxsize=256, typed=True)
def fine_exponent(max_contribution: int, base: float = DEFAULT_BASE) -> int:
    """The k of :func:`fine_levels`: ``max(0, FINE_BITS - floor(log2(B^L)))``, L as in
    :func:`levels` (same preconditions)."""
    n_levels = len(levels(max_contribution, base))
    return max(0, FINE_BITS - _floor_log2(_exact_base(base) ** n_levels))


@functools.lru_cache(maxsize=256, typed=True)
def fine_levels(max_contribution: int, base: float = DEFAULT_BASE
                ) -> tuple[int, ...] | tuple[float, ...]:
    """R2T's levels ``B^j`` themselves, on the dyadic grid ``2^-k`` (the max-flow truncation
    of several units, dpsql.noise.r2t_flow): ``tau_j = floor(B^j 2^k) / 2^k`` for the same
    ``j = 1..L`` as :func:`levels`, ``k = fine_exponent(GS, B)``.

    Precondition: as :func:`levels`. Guarantee: strictly increasing, ``floor(B^j) <= tau_j <=
    B^j`` (exact rationals, so a function of the declared GS and B alone), ``tau_L >= GS``, and
    every ``tau_j 2^k`` a whole number below ``2^31`` when ``k > 0`` (``B^L < 2^(e + 1)``
    with ``e = floor(log2 B^L) = FINE_BITS - k``); floats, each exact (at most 31 significant
    bits). When every such level is a whole number (a whole base such as the default 2, or
    ``k = 0``: the top level is ``2^30`` or more) they are exactly :func:`levels`, as ints.
    R2T's own code races ``5.5^j`` (hkustDB/Race-to-the-Top, ``R2TSJF.py``); base 5.5 is
    dyadic (``5.5^j = 11^j / 2^j``), so its fine levels are exactly ``5.5^j`` while ``j <= k``.
    """
    whole = levels(max_contribution, base)
    k = fine_exponent(max_contribution, base)
    b = _exact_base(base)
    steps = [math.floor(b ** j * 2**k) for j in range(1, len(whole) + 1)]
    if all(s % (1 << k) == 0 for s in steps):
        return whole
    return tuple(math.ldexp(float(s), -k) for s in steps)
