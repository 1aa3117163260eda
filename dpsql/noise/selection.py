"""Private selection: exponential mechanism, Report Noisy Max, grid quantiles (seeds 001, 002).

These mechanisms release an *index* (which candidate), not a noisy number. Randomness comes from
:func:`secure_uniforms` (``os.urandom`` only), like every other sampler in :mod:`dpsql.noise`.

* :func:`exponential_probabilities` / :func:`exponential_mechanism` -- McSherry and Talwar's
  mechanism: candidate ``r`` is chosen with probability proportional to
  ``exp(epsilon * u(r) / (2 * sensitivity))`` (``/ sensitivity`` when the utility is monotone).
* :func:`report_noisy_max` -- the index of the largest of several counts (seed 001), top-k by
  peeling: ``k`` rounds of the exponential mechanism, each with ``epsilon / k``. One round *is*
  Report Noisy Max with Gumbel noise, which has exactly the exponential mechanism's law.
* :func:`grid_quantile` -- a quantile over a public grid of candidate values, by the exponential
  mechanism with utility ``-|rank - target|``.

How a choice is drawn (argued once, here). The weights ``w_r = exp(l_r - max l)`` are computed in
float64 and summed cumulatively (``C``); a 53-bit uniform ``U`` picks the first ``r`` with
``C_r > U * C_last``. Every step is a rounding of the exact computation, so each candidate's
realised probability differs from the exact one by less than ``(n + 2) * 2^-52`` (``n``
candidates; cumulative-sum rounding plus the uniform's grid), and a candidate whose exact
probability is below ``e^-700`` may be realised as never chosen. The mechanisms are therefore
``epsilon``-DP up to an additive ``delta <= n * (n + 2) * 2^-52 + n * e^-700`` (below 2^-30
for a million candidates), the same kind of resolution slack the Laplace sampler documents. The
running time depends on the number of candidates only.
"""

from __future__ import annotations

import math
import os

import numpy as np

__all__ = [
    "exponential_mechanism",
    "exponential_mechanism_rows",
    "exponential_probabilities",
    "grid_quantile",
    "quantile_utilities",
    "report_noisy_max",
    "secure_uniforms",
]

#: Largest number of candidates a selection accepts (keeps the documented delta below 2^-30).
MAX_CANDIDATES = 1 << 20


def secure_uniforms(size: int) -> np.ndarray:
    """``size`` uniforms on the grid ``{k * 2^-53 : 0 <= k < 2^53}`` from ``os.urandom`` only.

    Guarantee: float64 values in ``[0, 1)``, each grid point with probability exactly 2^-53.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError("size must be an integer >= 0")
    words = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
    return (words >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _check_epsilon_sensitivity(epsilon: float, sensitivity: float) -> tuple[float, float]:
    for name, value in (("epsilon", epsilon), ("sensitivity", sensitivity)):
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
        if not math.isfinite(float(value)) or float(value) <= 0.0:
            raise ValueError(f"{name} must be a finite number > 0")
    return float(epsilon), float(sensitivity)


def _logits(utilities: np.ndarray, epsilon: float, sensitivity: float,
            monotone: bool) -> np.ndarray:
    u = np.asarray(utilities, dtype=np.float64)
    if u.ndim != 1 or u.size == 0:
        raise ValueError("utilities must be a non-empty one-dimensional array")
    if u.size > MAX_CANDIDATES:
        raise ValueError(f"at most {MAX_CANDIDATES} candidates are supported")
    if not np.all(np.isfinite(u)):
        raise ValueError("utilities must be finite")
    factor = epsilon / (sensitivity if monotone else 2.0 * sensitivity)
    return u * factor


def exponential_probabilities(utilities: np.ndarray, epsilon: float, sensitivity: float, *,
                              monotone: bool = False) -> np.ndarray:
    """The exponential mechanism's exact law (in float64), for explain output and tests.

    Precondition: ``utilities`` finite, 1-D, non-empty; ``epsilon``, ``sensitivity`` finite > 0.
    Guarantee: probabilities ``p_r ∝ exp(epsilon * u_r / (2 * sensitivity))`` (``/ sensitivity``
    with ``monotone=True``) summing to 1. If every utility changes by at most ``sensitivity``
    between neighbouring databases, ``p_r(D) <= e^epsilon * p_r(D')`` for every ``r``; with
    ``monotone=True`` this needs, in addition, that all utilities move in the same direction.
    """
    epsilon, sensitivity = _check_epsilon_sensitivity(epsilon, sensitivity)
    logits = _logits(utilities, epsilon, sensitivity, monotone)
    w = np.exp(logits - logits.max())
    return w / w.sum()


def exponential_mechanism(utilities: np.ndarray, epsilon: float, sensitivity: float, *,
                          monotone: bool = False, draws: int = 1) -> np.ndarray:
    """Choose ``draws`` independent candidates by the exponential mechanism (module docstring).

    Precondition: as :func:`exponential_probabilities`; ``draws >= 1`` (tests draw many at once;
    each draw is a separate ``epsilon``-DP release).
    Guarantee: an int64 array of ``draws`` candidate indices, each drawn from
    :func:`exponential_probabilities` up to the resolution in the module docstring, so one
    draw is ``epsilon``-DP for utilities of the given sensitivity (plus that ``delta``).
    """
    epsilon, sensitivity = _check_epsilon_sensitivity(epsilon, sensitivity)
    logits = _logits(utilities, epsilon, sensitivity, monotone)
    cumulative = np.cumsum(np.exp(logits - logits.max()))
    targets = secure_uniforms(draws) * cumulative[-1]
    picked = np.searchsorted(cumulative, targets, side="right")
    # U * C_last < C_last, so the index is in range unless rounding says otherwise.
    return np.minimum(picked, cumulative.size - 1).astype(np.int64)


def exponential_mechanism_rows(utilities: np.ndarray, epsilon: float,
                               sensitivity: float) -> np.ndarray:
    """One independent :func:`exponential_mechanism` draw per row of a 2-D ``utilities``.

    Precondition: ``utilities`` finite, shape ``(rows, n)`` with ``n >= 1``; ``epsilon``,
    ``sensitivity`` finite > 0. Guarantee: an int64 array of ``rows`` indices, row ``i``'s
    drawn exactly as ``exponential_mechanism(utilities[i], epsilon, sensitivity)`` draws it
    (the same weights, cumulative sums and 53-bit uniform, one per row), so each row's draw is
    ``epsilon``-DP for utilities of that sensitivity, with the module's resolution ``delta``.
    (Vectorised: a GROUP BY's bins are drawn in one pass.)
    """
    epsilon, sensitivity = _check_epsilon_sensitivity(epsilon, sensitivity)
    u = np.asarray(utilities, dtype=np.float64)
    if u.ndim != 2 or u.shape[1] == 0:
        raise ValueError("utilities must be two-dimensional with at least one column")
    if u.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    if u.shape[1] > MAX_CANDIDATES:
        raise ValueError(f"at most {MAX_CANDIDATES} candidates are supported")
    if not np.all(np.isfinite(u)):
        raise ValueError("utilities must be finite")
    logits = u * (epsilon / (2.0 * sensitivity))  # as _logits, row by row
    cumulative = np.cumsum(np.exp(logits - logits.max(axis=1, keepdims=True)), axis=1)
    targets = secure_uniforms(u.shape[0]) * cumulative[:, -1]
    picked = (cumulative <= targets[:, None]).sum(axis=1)  # first index with C_r > U * C_last
    return np.minimum(picked, u.shape[1] - 1).astype(np.int64)


def report_noisy_max(counts: np.ndarray, epsilon: float, sensitivity: float, *,
                     k: int = 1) -> np.ndarray:
    """The indices of the ``k`` largest counts, chosen privately, largest first.

    Precondition: ``counts`` finite, 1-D, with at least ``k`` entries; ``1 <= k``; each count
    changes by at most ``sensitivity`` between neighbouring databases (for dpsql's
    change-one-row neighbours, a histogram with stability S moves a row between two bins, so
    each count changes by at most S and the utilities are *not* monotone).
    Guarantee: ``epsilon``-DP (plus the module's resolution ``delta`` per round): round ``i``
    chooses among the counts not chosen yet by the exponential mechanism with ``epsilon / k``
    and the counts as utilities, which is Report Noisy Max with Gumbel noise; ``k`` rounds
    compose to ``epsilon`` (basic composition; the candidates removed are already released).
    """
    epsilon, sensitivity = _check_epsilon_sensitivity(epsilon, sensitivity)
    values = np.asarray(counts, dtype=np.float64)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError("k must be an integer >= 1")
    if values.ndim != 1 or values.size < k:
        raise ValueError("counts must be one-dimensional with at least k entries")
    remaining = np.arange(values.size)
    chosen: list[int] = []
    for _ in range(k):
        pick = int(exponential_mechanism(values[remaining], epsilon / k, sensitivity)[0])
        chosen.append(int(remaining[pick]))
        remaining = np.delete(remaining, pick)
    return np.asarray(chosen, dtype=np.int64)


def grid_quantile(at_or_below: np.ndarray, total: int, quantile: float, epsilon: float,
                  sensitivity: float = 1.0) -> int:
    """The index of a private ``quantile`` among ``m`` public, increasing grid points.

    ``at_or_below[j]`` is the exact number of (clamped) values at or below grid point ``j`` and
    ``total`` the number of values; the utility of point ``j`` is ``-|at_or_below[j] - q *
    total|``. (MIN is ``q = 0``; MAX ``q = 1``; MEDIAN ``q = 0.5``.)

    Precondition: ``at_or_below`` non-decreasing integers, ``0 <= quantile <= 1``; the counts
    come from a relation of stability ``sensitivity``: under dpsql's change-one-row neighbours
    ``total`` is unchanged by a changed row and each ``at_or_below[j]`` moves by at most the
    number of changed rows, so every utility moves by at most ``sensitivity`` (a relation
    whose row count can change needs ``sensitivity * (1 + quantile)``: the caller's argument).
    Guarantee: an index drawn by :func:`exponential_mechanism` with that utility: ``epsilon``-DP.
    """
    utilities = quantile_utilities(at_or_below, total, quantile)
    return int(exponential_mechanism(utilities, epsilon, sensitivity)[0])


def quantile_utilities(at_or_below: np.ndarray, total: int, quantile: float) -> np.ndarray:
    """``-|at_or_below[j] - quantile * total|`` per grid point (see :func:`grid_quantile`)."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError("quantile must lie in [0, 1]")
    counts = np.asarray(at_or_below, dtype=np.float64)
    return -np.abs(counts - quantile * float(total))
