"""Gaussian noise plans for pure releases (issue #18, part 1; docs/privacy.md, section 4).

An analyst who chooses ``mechanism='gaussian'`` gets, for every private measurement of a pure
release (ES independent of k: no join of private tables), integer discrete Gaussian noise
N_Z(0, sigma^2) (:mod:`dpsql.noise.gaussian`) instead of discrete Laplace noise:

* **counts**: the count plus N_Z(0, sigma^2). A scalar count moves by at most ``S = ES``
  (one coordinate: CKS Theorem 7's exact delta applies). A histogram (GROUP BY; ES = 2S per
  bin, :func:`dpsql.analysis.rules.count_sensitivity`) moves by a vector with every coordinate
  at most S and L1 norm at most 2S (S rows removed, S added, each in one bin), so its squared
  L2 norm is at most ``S * 2S = 2 S^2``: ``l2_squared = 2 S^2, linf = S`` -- sqrt(2) S in L2
  where Laplace pays 2S in L1.
* **sums**: snapped to a power-of-two grid g as :func:`dpsql.noise.mechanisms.release_sums`
  does, then g times N_Z(0, sigma^2). The grid depends on the sensitivity alone (public).
  A bin moving by at most D (real) moves its snapped value by at most
  ``ceil(D/g) <= ceil(D/g) + 1 = L`` steps; a histogram moves at most ``2S = ES/w`` bins
  (w the bounds' width) by a total of at most ES/g + 2S steps, so its squared L2 norm in
  steps is at most ``L * ceil(ES/g + ES/w)``.

sigma is the smallest the discrete accountant certifies (``calibration='analytic'``,
:func:`dpsql.noise.gaussian.discrete_sigma`), or the seeds' classical formula for epsilon < 1
(``calibration='classical'``), raised to the certified sigma should the discrete accountant not
certify it. Every input is public (the SQL, the metadata, epsilon and delta), so every refusal
here is too: delta = 0, a smoothed (join) release, classical with epsilon >= 1 per measurement,
and a sigma beyond the sampler's cap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpsql.analysis.elastic import Measurement
from dpsql.errors import NotSupportedError
from dpsql.noise import gaussian, mechanisms

#: a Gaussian sum's grid: a bin's sensitivity spans (2^(BITS-1), 2^BITS] grid steps
#: (:func:`sum_grid`)
GAUSSIAN_SUM_GRID_BITS = 8


def check_gaussian(private: Sequence[Measurement], epsilon: float, delta: float,
                   calibration: str) -> None:
    """Refuse what the Gaussian path cannot release, before any charge.

    Precondition: ``private`` are the request's private measurements, ``epsilon`` the share of
    each (basic composition), ``delta`` the request's delta.
    Guarantee: raises NotSupportedError (naming the fix) for delta = 0, for a measurement whose
    ES depends on k (smoothed release), and for the classical calibration at a per-measurement
    epsilon >= 1; depends on the SQL, the metadata and the budget alone.
    """
    if not private:
        return
    if delta <= 0.0:
        raise NotSupportedError(
            "the Gaussian mechanism needs delta > 0: pass a delta such as 1e-6, or use "
            "mechanism='laplace', which needs none")
    if any(m.sensitivity.depends_on_k for m in private):
        raise NotSupportedError(
            "this query joins private tables, so its noise is calibrated to a smoothed, "
            "data-dependent sensitivity, which dpsql proves admissible for Laplace noise only: "
            "use mechanism='laplace' for this query")
    if calibration == "classical" and epsilon >= 1.0:
        raise NotSupportedError(
            f"the classical Gaussian calibration holds for epsilon < 1 per measurement, and "
            f"each of this query's {len(private)} measurement(s) gets epsilon {epsilon:.6g}: "
            "use calibration='analytic' (the default) or a smaller epsilon")


def calibrated_sigma(l2_squared: int, linf: int, epsilon: float, delta: float,
                     calibration: str) -> float:
    """sigma for integer noise of these sensitivities at (epsilon, delta).

    Guarantee: N_Z(0, sigma^2) per coordinate is (epsilon, delta)-DP for integer vectors moving
    by at most ``l2_squared`` in squared L2 norm and ``linf`` per coordinate: the analytic
    choice is :func:`~dpsql.noise.gaussian.discrete_sigma`; the classical one is
    ``classical_sigma(sqrt(l2_squared))``, used only if :func:`certified_delta` proves it, else
    the certified sigma (never smaller than what the accountant proves).
    """
    try:
        certified = gaussian.discrete_sigma(l2_squared, linf, epsilon, delta)
    except ValueError:  # no sigma up to 2^30 certifies it
        raise _too_noisy() from None
    if calibration == "analytic":
        return certified
    sigma = gaussian.classical_sigma(math.sqrt(l2_squared), epsilon, delta)
    if gaussian.certified_delta(sigma, l2_squared, linf, epsilon) <= delta:
        return sigma
    return max(sigma, certified)


def _too_noisy() -> NotSupportedError:
    return NotSupportedError(
        "the Gaussian noise this query needs is too large to release anything useful: raise "
        "epsilon or delta, tighten the bounds, or split the query")


def count_sigma(es: float, grouped: bool, epsilon: float, delta: float,
                calibration: str, unit_bins: int | None = None) -> tuple[float, int, int]:
    """(sigma, l2_squared, linf) of a pure COUNT with ES ``es`` (module docstring).

    Precondition: ``es`` finite > 0 is ES(0) of the count: 2S per bin when ``grouped`` (a row
    substituted), or, with ``unit_bins`` = kappa (a privacy unit's two-stage, add / remove one
    unit: dpsql.units.analysis), an L1 bound over at most kappa bins that each move by at most
    ``es / kappa`` = C (so l2_squared = kappa C^2, linf = C)."""
    if unit_bins is not None:
        linf = math.ceil(es / unit_bins)
        l2_squared = unit_bins * linf * linf
    else:
        linf = math.ceil(es / 2.0 if grouped else es)
        l2_squared = 2 * linf * linf if grouped else linf * linf
    sigma = calibrated_sigma(l2_squared, linf, epsilon, delta, calibration)
    if sigma > gaussian.MAX_SIGMA:
        raise _too_noisy()
    return sigma, l2_squared, linf


def sum_grid(es: float, grouped: bool) -> float:
    """The public power-of-two grid of a Gaussian SUM: ``2^(ceil(log2 D) - BITS)``, D the
    per-bin sensitivity (ES/2 grouped, ES scalar), so one bin moves by ``ceil(D/g) + 1`` in
    ``(2^(BITS-1) + 1, 2^BITS + 1]`` steps: the + 1 raises sigma by at most 2^-(BITS-1)
    relatively, and snapping errs by at most ``g/2 <= D 2^-BITS``. Tying the grid to D rather
    than to sigma keeps that overhead small at every epsilon (sigma is about D/epsilon), and
    keeps sigma in steps near 2^BITS / epsilon, which bounds the exact accountant's work.
    Public inputs only."""
    per_bin = es / 2.0 if grouped else es
    # sum_granularity(x) = 2^(ceil(log2 x) - SUM_GRID_BITS)
    return mechanisms.sum_granularity(per_bin) * 2.0 ** (
        mechanisms.SUM_GRID_BITS - GAUSSIAN_SUM_GRID_BITS)


def sum_sigma(es: float, width: float, grouped: bool, epsilon: float, delta: float,
              calibration: str, unit_bins: int | None = None
              ) -> tuple[float, float, int, int]:
    """(sigma in grid steps, grid g, l2_squared, linf in steps) of a pure SUM (module docstring).

    Precondition: ``es`` finite > 0 is ES(0) of the sum, ``width`` = max(u,0) - min(l,0) > 0 of
    its clamp bounds (ES = 2 S width per bin when ``grouped``, S width otherwise); with
    ``unit_bins`` = kappa (a privacy unit's two-stage, add / remove one unit), ES = kappa C w
    bounds a move of at most kappa bins, each by at most ``D = es / kappa`` (its per-group
    clamp), so each snapped bin by at most ``ceil(D/g) + 1`` steps: l2_squared = kappa times
    its square.
    """
    per_bin = es / unit_bins if unit_bins is not None else es / 2.0 if grouped else es
    g = sum_grid(per_bin, False)  # the grid of the per-bin sensitivity (sum_grid's D)
    linf = math.ceil(per_bin / g) + 1
    if unit_bins is not None:
        l2_squared = unit_bins * linf * linf
    elif grouped:
        # at most 2S = ES/w rows change, each in one bin: at most floor(ES/w) bins change
        # (1e-9 up: ES/w is a float quotient of 2 S w by w, maybe a hair below 2S)
        bins = math.floor(es / width * (1.0 + 1e-9))
        l2_squared = max(linf * math.ceil(es / g + bins), linf * linf)
    else:
        l2_squared = linf * linf
    sigma = calibrated_sigma(l2_squared, linf, epsilon, delta, calibration)
    if sigma > gaussian.MAX_SIGMA or sigma > mechanisms.MAX_DISCRETE_SCALE:
        raise _too_noisy()
    return sigma, g, l2_squared, linf
