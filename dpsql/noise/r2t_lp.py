"""R2T's LP truncation, for query results that belong to several privacy units (issue #17).

When a result row can belong to two units (the unit table joined to itself, two private unit
tables), naive truncation ``sum_u min(c_u, tau)`` no longer has sensitivity tau: removing one
unit removes rows other units were charged for, and dropping the units above tau can let one
new unit push many others over. R2T (Dong et al., SIGMOD 2022, Section 5.2 and 6) truncates by
a linear program instead:

    Q(I, tau) = max sum_q x_q   s.t.   0 <= x_q <= psi(q) for every result q,
                                        sum over q containing u of x_q <= tau for every unit u.

Properties (the paper, Section 5; psi >= 0): (1) removing one unit u (with every result
containing it) lowers the optimum by at most tau: the optimum's x restricted to the remaining
results is feasible for the smaller LP and loses only u's results, whose x sum to at most tau;
conversely the smaller LP's optimum is feasible for the larger one; (2) ``Q(I, tau) <= Q(I) =
sum_q psi(q)``; (3) ``Q(I, tau) = Q(I)`` once tau is at least every unit's contribution
``sum over q containing u of psi(q)`` (x = psi is feasible). tau is in value units here, so
:func:`~dpsql.noise.r2t.release_r2t` applies with ``Q(tau_j) = lp_truncated(results, tau_j * b)``
(b = ``unit_bound``), ``integer=False`` (an optimum can be fractional: the triangle's is 3/2)
and ``increments=False``: (1) bounds each level's move by tau, not the move of the difference
of two levels by their difference, so the noised increments' precondition is not shown here.

Numerics (what the caller must know). The LP is solved in floating point by HiGHS
(``scipy.optimize.linprog(method='highs')``), so the optimum is known only up to the solver's
tolerance. :func:`lp_truncated_bounds` therefore certifies an interval: ``lower`` is the
objective of the solver's x repaired to exact feasibility (clipped to [0, psi], then every
result scaled by the least ``tau / load_u`` of its overloaded units, less a 1e-12 margin), so
``lower <= OPT``; ``upper`` is the objective of a dual-feasible point built from the solver's
duals y >= 0 (``z_q = max(0, 1 - sum_{u in q} y_u)``), so ``OPT <= upper`` by weak duality.
:func:`lp_truncated` returns ``lower``. Its sensitivity is at most ``tau + gap(I) + gap(I')``
(gap = upper - lower); the gaps measured on the tests' instances are below 1e-9, far inside the
grid step the sum release adds to every level's sensitivity (``g_j``, about ``2^-20`` of the
level's scale) — but that is an observation, not a proof for every instance: a caller that
needs the bound must check the gap against a public tolerance. Up to float64 rounding of the
sums (relative 1e-15).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from dpsql.errors import InternalError

__all__ = ["lp_truncated", "lp_truncated_bounds", "unit_contributions"]

#: The repaired primal is scaled down by this much more, so float rounding of the loads cannot
#: leave a unit above tau.
_REPAIR_MARGIN = 1e-12


def _incidence(results: Sequence[tuple[float, Sequence[Hashable]]]
               ) -> tuple[np.ndarray, list[np.ndarray], int]:
    """psi as an array, each result's distinct unit indices, and the number of units."""
    index: dict[Hashable, int] = {}
    psi = np.empty(len(results), dtype=np.float64)
    members: list[np.ndarray] = []
    for i, (value, units) in enumerate(results):
        v = float(value)
        if not math.isfinite(v) or v < 0:
            raise ValueError("every result's value psi(q) must be finite and >= 0")
        psi[i] = v
        ids = sorted({index.setdefault(u, len(index)) for u in units})
        if not ids:
            raise ValueError("every result must belong to at least one unit")
        members.append(np.array(ids, dtype=np.int64))
    return psi, members, len(index)


def unit_contributions(results: Sequence[tuple[float, Sequence[Hashable]]]
                       ) -> dict[Hashable, float]:
    """Each unit's contribution ``sum over q containing u of psi(q)`` (a result in two units
    counts for both): ``Q(I, tau) = Q(I)`` once tau reaches the largest of them."""
    out: dict[Hashable, float] = {}
    for value, units in results:
        for u in set(units):
            out[u] = out.get(u, 0.0) + float(value)
    return out


def lp_truncated_bounds(results: Sequence[tuple[float, Sequence[Hashable]]],
                        tau: float) -> tuple[float, float]:
    """Certified ``(lower, upper)`` around the LP truncation ``Q(I, tau)`` (module docstring).

    Precondition: ``results`` a sequence of ``(psi(q), units of q)`` with finite ``psi >= 0``
    and at least one unit each (a unit listed twice in one result counts once); ``tau``
    finite > 0. Guarantee: ``lower <= Q(I, tau) <= upper``, ``lower`` the objective of an
    exactly feasible point (up to float64 rounding of sums). ``InternalError`` if HiGHS does not
    report an optimum (a feasible, bounded LP always has one).
    """
    from scipy import sparse  # lazy: scipy is loaded only when an LP truncation runs
    from scipy.optimize import linprog

    t = float(tau)
    if not math.isfinite(t) or t <= 0:
        raise ValueError("tau must be a finite number > 0")
    psi, members, n_units = _incidence(results)
    n = psi.size
    if n == 0:
        return 0.0, 0.0
    rows = np.concatenate(members)
    cols = np.repeat(np.arange(n), [m.size for m in members])
    a = sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n_units, n))
    res = linprog(-np.ones(n), A_ub=a, b_ub=np.full(n_units, t),
                  bounds=np.column_stack([np.zeros(n), psi]), method="highs")
    if res.status != 0 or res.x is None:
        raise InternalError(f"the LP truncation did not solve ({res.message}); please report")
    # primal repair: exactly feasible, so its objective is <= OPT
    x = np.clip(np.asarray(res.x, dtype=np.float64), 0.0, psi)
    load = a @ x
    with np.errstate(divide="ignore"):
        factor = np.where(load > t, t / load * (1.0 - _REPAIR_MARGIN), 1.0)
    per_result = np.array([factor[m].min() for m in members])
    lower = float((x * per_result).sum())
    # dual: y >= 0 on the unit constraints, z_q = max(0, 1 - sum y over q's units) >= 0
    y = np.maximum(-np.asarray(res.ineqlin.marginals, dtype=np.float64), 0.0)
    covered = a.T @ y
    upper = float((psi * np.maximum(0.0, 1.0 - covered)).sum() + t * y.sum())
    return lower, max(upper, lower)


def lp_truncated(results: Sequence[tuple[float, Sequence[Hashable]]], tau: float) -> float:
    """The LP truncation ``Q(I, tau)`` (its certified lower end, an exactly feasible
    objective); see :func:`lp_truncated_bounds` and the module docstring for the numerics."""
    return lp_truncated_bounds(results, tau)[0]
