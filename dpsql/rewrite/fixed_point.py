"""Exact sums of DOUBLE values: each clamped value on a public fixed-point grid, summed as an
integer (docs/privacy.md, section 4, "Floating-point summation").

A database adds DOUBLE values in floating point, in an order that can depend on the other rows
(parallel scans), so the computed sum of n values moves between neighbours by up to
Delta + 2 gamma_n n B, not Delta (Higham; Casacuberta et al., CCS 2022). dpsql therefore never
sums a DOUBLE: each row's clamped value becomes an integer number of grid steps 2^-k,

    CAST(CASE WHEN t < L THEN L WHEN t > U THEN U ELSE ROUND(t) END AS BIGINT),
    t = value * 2^k,  L = ceil(l 2^k),  U = floor(u 2^k),

the integers are summed exactly (DuckDB: HUGEINT; Spark: DECIMAL(38, 0)), and the exact integer
sum is converted to DOUBLE once, at the end, and scaled by 2^-k (exact: a power of two).

Contract of :func:`row_steps` and :func:`exponent`. Precondition: ``l <= u`` finite doubles,
``k = exponent(max(|l|, |u|))`` or smaller (:func:`exponent_below`). Guarantee: every row adds an
integer in ``[L, U]`` with ``L 2^-k >= l`` and ``U 2^-k <= u`` (L <= U: the bound of larger
magnitude is on the grid), whatever its value (NULL adds nothing; NaN and +inf add U, -inf L,
as the DOUBLE clamp did), as a function of that row alone; the sum is an integer computed
exactly, in any order, so it is a function of the multiset of rows and moves between
neighbours by exactly what the clamped values do: at most the sensitivity the bounds give. A
value inside ``[L 2^-k, U 2^-k]`` is rounded to the nearest step (half away from zero): an
error of at most 2^-k-1 <= 2^-53 max(|l|, |u|) per row (with the largest k), DOUBLE's own
precision at the bound; a value between a bound off the grid and the first step inside moves
inwards by up to one step.

|t| <= 2^53 per row, so a sum of fewer than 2^73 rows fits HUGEINT and DECIMAL(38, 0): no
overflow, hence no error, for any data.

The one conversion to DOUBLE (:func:`to_value`) is a deterministic function of the exact sum S
within 2^-51 |S| of it (DuckDB converts a HUGEINT with at most two roundings). Its effect on
the release is bounded in docs/privacy.md, section 4.
"""

from __future__ import annotations

import math
from fractions import Fraction

from sqlglot import exp

#: a row's value is at most 2^ROW_BITS grid steps: an integer exact in DOUBLE and BIGINT
ROW_BITS = 53

#: the most steps one integer summand may hold when further integers are summed over up to
#: 2^63 of them (units' truncated contributions): 2^62 * 2^63 < 2^126 < 10^38
SUMMAND_BITS = 62


def exponent(top: float, bits: int = ROW_BITS) -> int:
    """``k = bits - e`` for ``2^(e-1) <= |top| < 2^e``: ``top * 2^k < 2^bits`` (and
    ``>= 2^(bits-1)``), and with ``bits = ROW_BITS`` ``top``'s own double is on the grid (its
    53 significant bits). Public: a function of ``top`` alone. 0 for ``top == 0``."""
    if not math.isfinite(top):
        raise ValueError("a fixed-point grid needs finite bounds")
    if top == 0:
        return 0
    _, e = math.frexp(abs(top))  # |top| < 2^e, and >= 2^(e-1)
    return bits - e


def exponent_below(top: Fraction | int | float, bits: int = SUMMAND_BITS) -> int:
    """The largest k with ``top * 2^k < 2^bits`` (``top`` >= 0, exact)."""
    top = Fraction(top)
    if top <= 0:
        return 1 << 20
    k = bits - math.floor(math.log2(top)) - 1
    while top * Fraction(2) ** k >= 2**bits:  # log2 of a huge Fraction may round
        k -= 1
    while top * Fraction(2) ** (k + 1) < 2**bits:
        k += 1
    return k


def grid_bounds(lo: float | Fraction, hi: float | Fraction, k: int) -> tuple[int, int]:
    """``(ceil(lo 2^k), floor(hi 2^k))``, exactly."""
    scale = Fraction(2) ** k
    return math.ceil(Fraction(lo) * scale), math.floor(Fraction(hi) * scale)


def _power(k: int) -> exp.Expression:
    """2^k as a DOUBLE expression (two factors beyond a double's exponent range)."""
    if -1000 <= k <= 1000:
        return exp.convert(math.ldexp(1.0, k))
    half = k // 2
    return exp.Mul(this=exp.convert(math.ldexp(1.0, half)),
                   expression=exp.convert(math.ldexp(1.0, k - half)))


def _integer(value: int) -> exp.Expression:
    return exp.Literal.number(value) if value >= 0 else exp.Neg(
        this=exp.Literal.number(-value))


def scaled(value: exp.Expression, k: int) -> exp.Expression:
    """``value * 2^k`` (``value`` a DOUBLE expression)."""
    return exp.Mul(this=value, expression=_power(k))


def row_steps(value: exp.Expression, bounds: tuple[float, float], k: int) -> exp.Expression:
    """A row's DOUBLE ``value`` as a BIGINT number of steps 2^-k inside ``bounds`` (module
    contract): ``CAST(CASE .. ELSE ROUND(t) END AS BIGINT)``. Where the stored values lie in
    bounds that are on the grid (:func:`on_grid`), the CASE may be replaced by its ELSE
    branch (dpsql.rewrite.clamps records it as removable): the same integers."""
    t = scaled(value, k)
    rounded = exp.Anonymous(this="ROUND", expressions=[t])
    lo, hi = grid_bounds(bounds[0], bounds[1], k)
    assert lo <= hi, (bounds, k)
    case = exp.Case(ifs=[
        exp.If(this=exp.LT(this=t.copy(), expression=_integer(lo)), true=_integer(lo)),
        exp.If(this=exp.GT(this=t.copy(), expression=_integer(hi)), true=_integer(hi)),
    ], default=rounded)
    return exp.Cast(this=case, to=exp.DataType.build("BIGINT"))


def on_grid(bounds: tuple[float, float], k: int) -> bool:
    """Whether both bounds are multiples of 2^-k (then ROUND keeps a value of the bounds in
    them, and :func:`row_steps` may go without its CASE)."""
    scale = Fraction(2) ** k
    return all((Fraction(b) * scale).denominator == 1 for b in bounds)


def exact_sum(steps: exp.Expression) -> exp.Expression:
    """``SUM`` of integer ``steps`` as DECIMAL(38, 0): exact and typed on every backend
    (Spark's exact-sum translation reads the argument's type)."""
    return exp.Sum(this=exp.Cast(this=steps, to=exp.DataType.build("DECIMAL(38, 0)")))


def to_value(total: exp.Expression, k: int) -> exp.Expression:
    """An exact integer sum of steps 2^-k as its DOUBLE value (module contract)."""
    return exp.Mul(this=exp.Cast(this=total, to=exp.DataType.build("DOUBLE")),
                   expression=_power(-k))
