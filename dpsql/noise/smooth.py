"""Smoothing elastic sensitivity (docs/design.md, "Noise").

Contract of :func:`smooth`: given ES(k) with the kexpr properties (non-negative, and
e^(-beta k) ES(k) non-increasing for k >= degree / beta), returns
S = max over k = 0..ceil(D/beta) of e^(-beta k) ES(k), which equals the max over all k >= 0,
so S is a beta-smooth upper bound on local sensitivity (Nissim-Raskhodnikova-Smith 2007; FLEX).
Discrete Laplace noise of scale 2S/epsilon then gives (epsilon, delta)-DP with
beta = ln(1 + epsilon / (2 ln(2/delta))) (docs/privacy.md section 4, "Smooth sensitivity with
discrete Laplace noise": the proof's dilation step needs e^beta - 1 <= epsilon / (2 ln(2/delta));
FLEX's beta = epsilon / (2 ln(2/delta)) fails it, and its delta, for large epsilon). When ES
does not depend on k it is a global sensitivity and scale ES/epsilon gives pure epsilon-DP
(delta 0). Infinity and NaN never reach a scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dpsql.analysis.kexpr import KExpr, shared_array
from dpsql.errors import NotSupportedError

#: The scan is O(D / beta); refuse parameters that would make it absurdly long.
_MAX_SCAN = 50_000_000


def beta_for(epsilon: float, delta: float) -> float:
    """beta = ln(1 + epsilon / (2 ln(2/delta))): FLEX's epsilon / (2 ln(2/delta)), taken
    through ln(1 + x) so that e^beta - 1 <= epsilon / (2 ln(2/delta)), the condition of the
    dilation lemma for the discrete Laplace law (docs/privacy.md section 4). Slightly smaller
    than FLEX's (by about beta^2 / 2), so S is slightly larger."""
    return math.log1p(epsilon / (2.0 * math.log(2.0 / delta)))


@dataclass(frozen=True)
class Smoothed:
    """S = max_k e^(-beta k) ES(k), the k attaining it, and the scan's upper end."""

    smooth_sensitivity: float
    k_argmax: int
    k_scan: int
    beta: float


def smooth(es: KExpr, epsilon: float, delta: float, *, memo: ScanMemo | None = None
           ) -> Smoothed:
    """The smooth sensitivity of ``es`` (see module contract). Scans every k; no early stop.
    ``memo`` shares the scan's arrays with other calls of one noise plan (:class:`ScanMemo`);
    the result does not depend on it."""
    beta = beta_for(epsilon, delta)
    degree = es.degree
    # beta 0 (a delta whose 2 / delta is inf, or an epsilon that underflows): no scan ends
    if not beta > 0.0 or degree / beta > _MAX_SCAN:
        raise NotSupportedError(
            "epsilon/delta are too small for this join query to be smoothed: raise epsilon "
            "or delta"
        )
    k_scan = math.ceil(degree / beta)
    # No early stopping: FLEX stops at the first decrease, which is wrong for sums of terms.
    best, best_k = _scan(es, beta, k_scan, memo)
    # No refusal for a non-finite S here: S depends on max frequencies, so refusing would
    # reveal them; the noise plan caps it with a public window (_smoothed_plan).
    return Smoothed(best, best_k, k_scan, beta)


#: Vectorised values within this relative distance of the largest are re-evaluated exactly.
_NEAR_MAX = 1e-9
#: k values evaluated per numpy pass (bounds the scan's memory).
_CHUNK = 1 << 20
#: the longest scan whose arrays a ScanMemo keeps (8 bytes per k per part of ES)
_SHARED_MAX = 1 << 16


class ScanMemo:
    """What the scans of one noise plan share: its smoothed measurements have one beta, and
    their ES(k) are built from one relation's stability (a SUM's is a COUNT's times a
    width). For a scan of fewer than ``_SHARED_MAX`` k, each part of ES at those k is computed
    once (:func:`~dpsql.analysis.kexpr.shared_array`, by id: keep one ScanMemo for one plan,
    while its measurements are alive); the k grid and e^(-beta k) once per (beta, k_scan)
    (:func:`_decay_grid`, shared by plans). The values are those an
    unshared scan computes, so the result is the same."""

    def __init__(self) -> None:
        self._grids: dict[tuple[float, int], tuple[np.ndarray, np.ndarray,
                                                   dict[int, np.ndarray]]] = {}

    def grid(self, beta: float, k_scan: int) -> tuple[np.ndarray, np.ndarray,
                                                      dict[int, np.ndarray]]:
        """(k = 0..k_scan as floats, e^(-beta k), the parts' values memo)."""
        hit = self._grids.get((beta, k_scan))
        if hit is None:
            hit = (*_decay_grid(beta, k_scan), {})
            self._grids[(beta, k_scan)] = hit
        return hit


@lru_cache(maxsize=8)
def _decay_grid(beta: float, k_scan: int) -> tuple[np.ndarray, np.ndarray]:
    """k = 0..k_scan as floats and e^(-beta k): a pure function of public numbers (beta from
    epsilon and delta, k_scan from the degree), kept across noise plans (an analyst repeats
    an epsilon) as read-only arrays, at most ``_SHARED_MAX`` long."""
    ks = np.arange(0, k_scan + 1, dtype=np.float64)
    with np.errstate(all="ignore"):
        decay = np.exp(-beta * ks)
    ks.flags.writeable = False
    decay.flags.writeable = False
    return ks, decay


def _scan(es: KExpr, beta: float, k_scan: int, memo: ScanMemo | None = None
          ) -> tuple[float, int]:
    """max over k = 0..k_scan of e^(-beta k) ES(k) and the first k attaining it.

    The result is exactly that of the scalar loop :func:`_scan_scalar`: numpy evaluates the
    k in chunks (within a few ulps, far inside ``_NEAR_MAX``), and only the k whose value is
    within ``_NEAR_MAX`` of the largest are re-evaluated with the scalar expression, in
    increasing order. Non-finite or non-positive values fall back to the scalar loop.
    """
    near: list[tuple[int, float]] = []  # (k, approximate value) close to the running max
    top = -math.inf
    threshold = -math.inf
    for start in range(0, k_scan + 1, _CHUNK):
        if memo is not None and k_scan < _SHARED_MAX:  # one chunk, shared
            ks, decay, parts = memo.grid(beta, k_scan)
            with np.errstate(all="ignore"):
                values = decay * shared_array(es, ks, parts)
        else:
            ks = np.arange(start, min(start + _CHUNK, k_scan + 1), dtype=np.float64)
            with np.errstate(all="ignore"):
                values = np.exp(-beta * ks) * es.at_array(ks)
        if not bool(np.isfinite(values).all()):
            return _scan_scalar(es, beta, range(k_scan + 1))
        chunk_top = float(values.max())
        if chunk_top > top:
            top = chunk_top
            threshold = top * (1.0 - _NEAR_MAX)
            near = [(k, v) for k, v in near if v >= threshold]
        if chunk_top >= threshold:
            idx = np.flatnonzero(values >= threshold)
            near += [(start + int(i), float(values[i])) for i in idx]
    if not top > 0:
        return _scan_scalar(es, beta, range(k_scan + 1))
    return _scan_scalar(es, beta, [k for k, _ in near])


def _scan_scalar(es: KExpr, beta: float, ks) -> tuple[float, int]:
    best, best_k = -1.0, 0
    for k in ks:
        value = math.exp(-beta * k) * es.at(k)
        if value > best:
            best, best_k = value, k
    return best, best_k
