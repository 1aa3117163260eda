"""The (epsilon, delta) one release may spend: validated once, where a request enters dpsql.

Everything downstream (the noise plan, the release record, the ledger charge) takes a
:class:`Budget` and trusts it, rather than checking the two floats again at every layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpsql.errors import ProgrammingError

#: the noise mechanisms an analyst may choose (docs/privacy.md, section 4); Laplace is the default
MECHANISMS = ("laplace", "gaussian")
#: how a Gaussian sigma is calibrated: the exact discrete accountant ("analytic", the default)
#: or the seeds' classical formula (epsilon < 1 only), certified by the same accountant
CALIBRATIONS = ("analytic", "classical")


@dataclass(frozen=True)
class Budget:
    """A per-query privacy budget.

    Guarantee: ``epsilon`` is a finite float > 0 and ``delta`` a finite float in [0, 1);
    construction raises :class:`~dpsql.errors.ProgrammingError` otherwise (a user mistake,
    named with the fix), so holding a Budget means holding valid parameters. ``mechanism`` is
    one of :data:`MECHANISMS` and ``calibration`` one of :data:`CALIBRATIONS` (the calibration
    matters for the Gaussian only); both are public choices of the analyst.
    """

    epsilon: float
    delta: float = 0.0
    mechanism: str = "laplace"
    calibration: str = "analytic"

    def __post_init__(self) -> None:
        eps, dlt = self.epsilon, self.delta
        # an int past the largest double (10**400) made math.isfinite raise OverflowError
        if isinstance(eps, int) and not isinstance(eps, bool) and abs(eps) > 2**1023:
            eps = math.inf
        if isinstance(dlt, int) and not isinstance(dlt, bool) and abs(dlt) > 2**1023:
            dlt = math.inf
        # bool is an int: True is not an epsilon
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (
            math.isfinite(eps) and eps > 0
        ):
            raise ProgrammingError(f"epsilon must be a finite number > 0, got {eps!r}")
        if isinstance(dlt, bool) or not isinstance(dlt, (int, float)) or not (
            math.isfinite(dlt) and 0 <= dlt < 1
        ):
            raise ProgrammingError(f"delta must be a finite number in [0, 1), got {dlt!r}")
        object.__setattr__(self, "epsilon", float(eps))
        object.__setattr__(self, "delta", float(dlt))
        check_mechanism(self.mechanism, self.calibration)

    @classmethod
    def of(cls, epsilon: float | None, delta: float | None = 0.0, *,
           mechanism: str | None = None, calibration: str | None = None) -> Budget | None:
        """``Budget(epsilon, delta, mechanism, calibration)`` (None: the defaults), or None when
        no epsilon was given (a public-only query needs none; a private one is refused with the
        fix when it arrives without one). A delta and the mechanism are checked either way."""
        mech = "laplace" if mechanism is None else mechanism
        cal = "analytic" if calibration is None else calibration
        if epsilon is None:
            cls(1.0, 0.0 if delta is None else delta, mech, cal)  # raises if invalid
            return None
        return cls(epsilon, 0.0 if delta is None else delta, mech, cal)


def check_mechanism(mechanism: object, calibration: object = "analytic") -> None:
    """Raise ProgrammingError unless ``mechanism`` is in :data:`MECHANISMS` and ``calibration``
    in :data:`CALIBRATIONS` (the message names the choices)."""
    if mechanism not in MECHANISMS:
        raise ProgrammingError(
            f"unknown noise mechanism {mechanism!r}: choose mechanism='laplace' (the default) or "
            "mechanism='gaussian'")
    if calibration not in CALIBRATIONS:
        raise ProgrammingError(
            f"unknown Gaussian calibration {calibration!r}: choose calibration='analytic' (the "
            "default) or calibration='classical'")


class MissingEpsilonError(ProgrammingError):
    """A query on private data came without an epsilon (its own class, so the server can say
    how a psql session sets one instead of the driver's keywords)."""


def missing_epsilon() -> MissingEpsilonError:
    """The error for a query on private data that came without an epsilon."""
    return MissingEpsilonError(
        "no epsilon for this query: pass cursor.execute(sql, params, epsilon=0.1) or set a "
        "default with dpsql.connect(..., epsilon=0.1)"
    )
