"""Discrete Gaussian noise for SAMPLE_AGGREGATE (``mechanism='gaussian'``; docs/privacy.md,
"Sample-and-aggregate").

Contract. For one output with public bounds [lo, hi] over m blocks, ``S = sum_b c_b`` is the
sum of the clamped block answers (:mod:`.release`). With the Gaussian, S is snapped to the
public power-of-two grid ``g = sum_grid(D)`` and released as ``g (round(S/g) + Y)``, ``Y ~
N_Z(0, sigma^2)`` (:func:`dpsql.noise.gaussian_release.release_gaussian_sums`), then divided
by m (post-processing). k outputs split (epsilon, delta) evenly (basic composition, as every
dpsql query does) and get independent noise.

Sensitivity, derived from the module relation (change one row of the private table): the
row's old and new blocks are the only blocks whose rows differ (:mod:`.release`'s argument),
each clamped answer lies in [lo, hi], so ``|S - S'| <= D = 2 (hi - lo)`` (hi - lo when both
rows share a block, or under add/remove). Each output is one scalar with its own noise, so its
L2 move equals its L1 move: D for the sum, ``2 (hi - lo) / m`` for the mean (the ``(hi -
lo)/m`` per changed block, times the two blocks a change touches). In grid steps the snapped
sum moves by at most ``linf = ceil(D/g) + 1``, ``l2_squared = linf^2`` (one coordinate):
exactly a scalar Gaussian SUM of sensitivity D (:func:`dpsql.noise.gaussian_plan.sum_sigma`),
whose sigma is the smallest the discrete accountant certifies at (epsilon_j, delta_j)
(``analytic``), or the seeds' classical sigma when it certifies it (``classical``; epsilon_j <
1 only). Each output is then rho_j = l2_squared / (2 sigma^2)-zCDP (CKS Theorem 14); the
release's curve is the sum (:func:`dpsql.accounting.curves.gaussian_curve`), so the zCDP and
Rényi filters charge it like the other Gaussian releases.

Refusals (NotSupportedError, before anything is read; SQL, metadata and budget only): delta =
0, the classical calibration at epsilon_j >= 1, and a sigma beyond the sampler's cap.
"""

from __future__ import annotations

import math

from dpsql.budget import Budget
from dpsql.errors import NotSupportedError
from dpsql.noise import gaussian, gaussian_plan

#: the release record's name for this mechanism
MECHANISM_GAUSSIAN = "sample_aggregate_gaussian"


def check_budget(budget: Budget, outputs: int) -> tuple[float, float]:
    """(epsilon_j, delta_j) of each of ``outputs`` Gaussian outputs; refuses delta = 0 and the
    classical calibration at epsilon_j >= 1 (module docstring)."""
    epsilon, delta = budget.epsilon / outputs, budget.delta / outputs
    if budget.delta <= 0.0:
        raise NotSupportedError(
            "SAMPLE_AGGREGATE with the Gaussian mechanism needs delta > 0: pass a delta such as "
            "1e-6, or use mechanism='laplace', which needs none")
    if budget.calibration == "classical" and epsilon >= 1.0:
        raise NotSupportedError(
            f"the classical Gaussian calibration holds for epsilon < 1 per output, and each of "
            f"this query's {outputs} SAMPLE_AGGREGATE output(s) gets epsilon {epsilon:.6g}: use "
            "calibration='analytic' (the default) or a smaller epsilon")
    return epsilon, delta


def sum_noise(lower: float, upper: float, epsilon: float, delta: float,
              calibration: str) -> tuple[float, float, int]:
    """(sigma in grid steps, grid g, l2_squared in steps) of one output's sum (module
    docstring). Raises NotSupportedError when no sigma the sampler can draw certifies it."""
    sensitivity = 2.0 * (upper - lower)
    try:
        sigma, grid, l2_squared, _linf = gaussian_plan.sum_sigma(
            sensitivity, sensitivity, False, epsilon, delta, calibration)
    except ValueError:  # a sensitivity beyond the grid's range
        raise NotSupportedError(
            f"SAMPLE_AGGREGATE bounds [{lower:g}, {upper:g}]: their Gaussian noise cannot be "
            "sampled; declare narrower bounds") from None
    return sigma, grid, l2_squared


def half_width(sigma: float, grid: float, blocks: int, confidence: float) -> float:
    """|noisy mean - clamped mean| <= this with probability >= ``confidence``: the sum's
    subgaussian tail (:func:`dpsql.noise.gaussian.gaussian_half_width`, sigma in value units
    ``sigma * g``) plus g/2 of snapping, over m."""
    return (gaussian.gaussian_half_width(sigma * grid, confidence) + grid / 2.0) / blocks


def rho(sigma: float, l2_squared: int) -> float:
    """zCDP rho of one output: ``l2_squared / (2 sigma^2)`` (both in grid steps)."""
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError("sigma must be finite and > 0")
    return l2_squared / (2.0 * sigma * sigma)
