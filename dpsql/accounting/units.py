"""Fixed-point privacy amounts: how the ledger turns an epsilon or delta into exact integers.

Budgets must never be overspent through floating-point drift: summing 0.01 three hundred times in
binary floating point gives 3.0000000000000013 > 3.0 (one query refused too early) and other
sequences drift the other way (one query too many allowed). So the ledger never adds floats.
Every amount is stored as an integer number of fixed units and all budget arithmetic is exact
integer arithmetic inside SQLite:

  epsilon: 1 unit = 1e-12  (int64 holds up to ~9.2e6 epsilon; we cap budgets at 1e6)
  delta:   1 unit = 1e-18  (delta <= 1 needs at most 1e18 units < 2**63)

A float is read as the decimal number its repr() denotes (0.01 -> exactly 1/100, what the owner
or analyst typed; it differs from the binary double by < 1e-17 relative, far below one unit and
below the rounding of the noise calibration itself). Then each CHARGE is rounded UP to a whole
unit and each BUDGET is rounded DOWN, so rounding can only ever refuse a query, never allow an
overspend. With these units 300 charges of 0.01 against a budget of 3.0 succeed exactly 300 times.
A delta below 1e-18 is charged as 1e-18 (conservative).
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal

from dpsql.errors import ProgrammingError

EPSILON_UNIT_EXPONENT = 12
DELTA_UNIT_EXPONENT = 18
# Our own decimal context: the thread's default one may have been lowered by someone else, and
# scaleb()/addition round to the context precision. 80 digits hold every exact value we handle.
_DECIMAL = Context(prec=80)
_EPSILON_SCALE = 10**EPSILON_UNIT_EXPONENT
_DELTA_SCALE = 10**DELTA_UNIT_EXPONENT
#: Largest epsilon budget or charge the ledger accepts (keeps every sum inside SQLite's int64).
MAX_EPSILON = 1_000_000


def _to_units(value: float, scale_exponent: int, rounding: str, what: str, limit: int) -> int:
    """Exact integer units of ``value`` (read as its decimal repr), rounded with ``rounding``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise ProgrammingError(f"{what} must be a number, got {type(value).__name__}")
    # repr() of a float is the shortest decimal string that round-trips: the number the user wrote
    exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if not exact.is_finite():
        raise ProgrammingError(f"{what} must be finite, got {value!r}")
    if exact < 0:
        raise ProgrammingError(f"{what} must be >= 0, got {value!r}")
    if exact > limit:
        raise ProgrammingError(f"{what} must be <= {limit}, got {value!r}")
    scaled = exact.scaleb(scale_exponent, context=_DECIMAL)
    return int(scaled.to_integral_value(rounding=rounding, context=_DECIMAL))


def _eps_units(value: float, *, charge: bool) -> int:
    """Epsilon in units of 1e-12: charges round up, budgets round down."""
    rounding = ROUND_CEILING if charge else ROUND_FLOOR
    return _to_units(value, EPSILON_UNIT_EXPONENT, rounding, "epsilon", MAX_EPSILON)


def _delta_units(value: float, *, charge: bool) -> int:
    """Delta in units of 1e-18: charges round up, budgets round down."""
    rounding = ROUND_CEILING if charge else ROUND_FLOOR
    return _to_units(value, DELTA_UNIT_EXPONENT, rounding, "delta", 1)


def _eps_float(units: int) -> float:
    return units / _EPSILON_SCALE  # int / int is correctly rounded in Python


def _delta_float(units: int) -> float:
    return units / _DELTA_SCALE
