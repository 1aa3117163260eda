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

__all__ = ["DEFAULT_BASE", "MAX_LEVELS", "MIN_BASE", "levels"]

#: Largest number of levels: GS up to 2^62 rows (counts must stay within int64).
MAX_LEVELS = 62
#: The paper's grid: tau_j = 2^j (the default when the owner declares no base)
DEFAULT_BASE = 2.0
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
