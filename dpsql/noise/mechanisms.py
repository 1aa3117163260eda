"""Noise for dpsql: with .selection and .bernoulli, the modules that draw random numbers (design).

Every released number gets its noise here, from the operating system's CSPRNG (``os.urandom``),
vectorised with numpy. Nothing in this module uses numpy's generators, :mod:`random`, or a seed.

* :func:`discrete_laplace` — the two-sided geometric ("discrete Laplace") sampler.
* :func:`release_counts` — integer counts plus discrete Laplace noise (exact integer arithmetic).
* :func:`release_sums` — Google's "secure noise generation" for real-valued sums: snap to a
  power-of-two grid, add grid-step times discrete Laplace noise (Mironov 2012).
* :func:`laplace_half_width` — the accuracy half-width of Laplace noise, union-bounded over cells.

Samplers follow the :class:`Sampler` protocol so tests can substitute deterministic noise;
production code uses :func:`default_sampler` (a :class:`SecureSampler`).

How a sample is drawn (argued once, here). Let ``p = exp(-1/b)`` for scale ``b``. The folded
variable ``M = |X|`` has survival function ``P(M >= k) = 2 p^k / (1 + p)`` for ``k >= 1`` (and 1
for ``k = 0``), so for ``U`` uniform on (0, 1] the inverse CDF is ``M = floor(-b ln(U (1+p)/2))``;
a fair sign bit then gives ``X = ±M``. The folded law already gives 0 its whole mass
``(1-p)/(1+p)``, so attaching a sign to ``M = 0`` does not count zero twice (``-0`` and ``+0`` are
the same integer). This costs one logarithm per sample and no loop whose length depends on the
value drawn, so sampling time does not reveal the noise.

The uniform is a *floating-point* uniform, not a 53-bit fixed-point one: two 64-bit words per
sample give one sign bit, 52 mantissa bits ``V`` in (1/2, 1], and 75 bits whose count of leading
zeros is the binary exponent ``E`` (geometric with ratio 1/2), ``U = V * 2^-E``. With a
fixed-point uniform (multiples of 2^-53), consecutive grid points skip whole integers of output
wherever ``U < b 2^-53``, leaving outputs of probability 0 (at ``b = 2^40``, the scale a 2^-40
relative sum grid would need, that region holds 2^-13 of the mass); the floating uniform has
relative resolution 2^-53 all the way down to 2^-75.
Resulting resolution of the realised law (b = scale, x = output):

* truncation: ``U > 2^-76``, so ``|X| < b (76 ln 2 + c) < 53.4 b`` with ``c = ln(2/(1+p)) < ln 2``;
  at most 2^-75 of mass is misplaced;
* each probability ``P(X = x)`` is realised within a relative error of at most about
  ``(|x| + b) 2^-50``: the uniform's grid contributes ``b 2^-52`` (an atom spans about
  ``2^52 / b`` grid points), the floating-point evaluation of ``b (E ln 2 - ln V + c)`` about
  ``|x| 2^-52`` (checked against an 80-bit reference by bisection over the mantissa, for scales
  3 to 2^32 and exponents 0 to 74). For a shift of Δ between neighbours the privacy loss is
  therefore ``Δ/b + O(b 2^-43)`` in the worst case over the 53-scale support (about 2^-23 for
  the ``b <= 2^20`` used by sums), plus the < 2^-75 of truncated mass as a δ. The scale is
  capped at ``MAX_DISCRETE_SCALE = 2^32`` so these terms stay negligible.
"""

from __future__ import annotations

import math
import os
from typing import Protocol, runtime_checkable

import numpy as np

from dpsql.errors import NotSupportedError

__all__ = [
    "MAX_DISCRETE_SCALE",
    "SUM_GRID_BITS",
    "Sampler",
    "SecureSampler",
    "default_sampler",
    "discrete_laplace",
    "laplace_half_width",
    "release_counts",
    "release_sums",
    "sum_granularity",
]

#: Largest scale :func:`discrete_laplace` accepts. Beyond it the floating-point inverse CDF loses
#: integer resolution in the far tail (see the module docstring); a count needing more noise
#: than this (standard deviation ~6e9) carries no information anyway.
MAX_DISCRETE_SCALE = 2.0**32

#: :func:`release_sums` uses the grid ``g = 2^(ceil(log2 scale) - SUM_GRID_BITS)``, so the integer
#: noise it draws has scale ``scale / g`` in ``(2^19, 2^20]``.
SUM_GRID_BITS = 20

# release_sums accepts scales in [2^-1000, 2^1000] so that g is a normal float and g * noise is
# finite; values above 2^1020 in magnitude are refused (the output must stay finite).
_SUM_SCALE_EXP_RANGE = (-1000, 1000)
_SUM_MAX_ABS_VALUE = 2.0**1020
# Largest count magnitude accepted: count + noise must not overflow int64.
_COUNT_MAX_ABS = 2**62
# Noise from any sampler must be exactly representable as float64 and must not overflow int64.
_NOISE_MAX_ABS = 2**53

_LN2 = math.log(2.0)
_CHUNK = 1 << 16  # samples per vectorised pass: keeps temporaries in cache
_MANT_MASK = np.uint64((1 << 52) - 1)
_LOW32_MASK = np.uint64(0xFFFFFFFF)


# ---------------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------------


def positive_real(value: float, name: str) -> float:
    """``value`` as a float, checked a real number (TypeError) that is finite and > 0
    (ValueError): the noise modules' check of epsilon, sensitivities, sigmas and bounds."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out) or out <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0")
    return out


def _check_scale(scale: float, name: str = "scale") -> float:
    if isinstance(scale, bool) or not isinstance(scale, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a real number, got {type(scale).__name__}")
    value = float(scale)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0 (got a non-positive, NaN or "
                         "infinite value); check the sensitivity and epsilon it was derived from")
    return value


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int | np.integer):
        raise TypeError(f"size must be an integer, got {type(size).__name__}")
    if size < 0:
        raise ValueError("size must be >= 0")
    return int(size)


def _checked_noise(noise: object, size: int) -> np.ndarray:
    """Validate a sampler's output: ``size`` integers within ±2^53, returned as int64."""
    arr = np.asarray(noise)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"sampler returned dtype {arr.dtype}, expected integers")
    if arr.shape != (size,):
        raise ValueError(f"sampler returned shape {arr.shape}, expected ({size},)")
    if arr.size and (arr.max() > _NOISE_MAX_ABS or (arr.dtype.kind == "i" and arr.min()
                                                   < -_NOISE_MAX_ABS)):
        raise ValueError("sampler returned noise beyond ±2^53")
    return arr.astype(np.int64, copy=False)


# ---------------------------------------------------------------------------------------------
# The sampler
# ---------------------------------------------------------------------------------------------


def _discrete_laplace_from_words(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """Map two uint64 words per sample to discrete Laplace(scale) samples (int64).

    A pure, value-independent-time function of the bits (the module docstring argues the
    law). Bit layout: ``a`` bit 0 = sign; ``a`` bits 1..52 = mantissa ``V``; ``a`` bits 53..63
    (most significant first) then ``b`` bits 63..0 = the 75 exponent bits, whose leading-zero
    count is ``E`` (75 when all are zero).
    """
    p_minus_1 = math.expm1(-1.0 / scale)           # p - 1, accurate for large scales
    c = -math.log1p(0.5 * p_minus_1)               # c = -ln((1 + p) / 2) >= 0
    sign = (a & np.uint64(1)).astype(bool)
    # V = (2^52 + mant + 1) / 2^53 in (1/2, 1]; every step below is exact in float64.
    mant = ((a >> np.uint64(1)) & _MANT_MASK) + np.uint64(1)
    v = mant.astype(np.float64) * 2.0**-53 + 0.5
    # Leading zeros via frexp on exactly representable floats (frexp(0) has exponent 0).
    top = (a >> np.uint64(53)).astype(np.float64)                 # 11 bits
    hi = (b >> np.uint64(32)).astype(np.float64)                  # 32 bits
    lo = (b & _LOW32_MASK).astype(np.float64)                     # 32 bits
    e_top = 11 - np.frexp(top)[1]
    e_hi = 32 - np.frexp(hi)[1]
    e_lo = 32 - np.frexp(lo)[1]
    e = e_top + (e_top == 11) * (e_hi + (e_hi == 32) * e_lo)
    # -ln U = E ln 2 - ln V; M = floor(scale * (-ln U + c)) >= 0.
    x = (e * _LN2 + (c - np.log(v))) * scale
    m = np.floor(x).astype(np.int64)
    return np.where(sign, -m, m)


def discrete_laplace(scale: float, size: int) -> np.ndarray:
    """Draw ``size`` i.i.d. discrete Laplace samples: ``P(X = x) ∝ exp(-|x| / scale)``.

    Precondition: ``0 < scale <= MAX_DISCRETE_SCALE`` (finite), ``size >= 0``; otherwise
    ``ValueError`` (``TypeError`` for non-numbers).
    Guarantee: an int64 array of shape ``(size,)`` from ``os.urandom`` only (16 bytes per
    sample), drawn by a whole-array inverse CDF whose running time depends on ``size`` alone.
    The realised law matches the exact pmf ``(1-p)/(1+p) p^|x|``, ``p = exp(-1/scale)``, up to the
    resolution in the module docstring: mass beyond about 53 scales (< 2^-75) is cut, and each
    probability has relative error at most about ``(|x| + scale) 2^-50``.
    """
    scale = _check_scale(scale)
    size = _check_size(size)
    if scale > MAX_DISCRETE_SCALE:
        raise ValueError("scale exceeds MAX_DISCRETE_SCALE = 2^32: the noise would be "
                         "meaningless; use a larger epsilon or a smaller sensitivity")
    out = np.empty(size, dtype=np.int64)
    for start in range(0, size, _CHUNK):
        n = min(_CHUNK, size - start)
        words = np.frombuffer(os.urandom(16 * n), dtype=np.uint64)
        out[start:start + n] = _discrete_laplace_from_words(words[0::2], words[1::2], scale)
    return out


@runtime_checkable
class Sampler(Protocol):
    """Source of discrete Laplace noise; :class:`SecureSampler` is the only production one.

    Contract: ``discrete_laplace(scale, size)`` returns ``size`` integers (shape ``(size,)``)
    distributed as :func:`discrete_laplace`. The release functions check shape, integer dtype
    and magnitude (±2^53) of what a sampler returns, not its distribution.
    """

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray: ...


class SecureSampler:
    """The default sampler: :func:`discrete_laplace`, bytes from ``os.urandom`` only.

    Stateless, so safe to share between threads and across ``fork`` (the kernel CSPRNG has no
    user-space state to duplicate).
    """

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return discrete_laplace(scale, size)

    def __repr__(self) -> str:
        return "SecureSampler()"


_DEFAULT_SAMPLER = SecureSampler()


def default_sampler() -> Sampler:
    """Return the process-wide secure sampler (a :class:`SecureSampler`)."""
    return _DEFAULT_SAMPLER


# ---------------------------------------------------------------------------------------------
# Releases
# ---------------------------------------------------------------------------------------------


def release_counts(values: np.ndarray, scale: float, *,
                   sampler: Sampler | None = None) -> np.ndarray:
    """Release exact integer counts with discrete Laplace noise: ``values + discrete_laplace``.

    Precondition: ``values`` holds exact integer counts (any shape; integer dtype, or floats
    that are integral and at most 2^53 in magnitude), each at most 2^62 in magnitude; ``scale``
    as for :func:`discrete_laplace` (``ValueError`` for ``scale > MAX_DISCRETE_SCALE``).
    Guarantee: an int64 array of the same shape, computed in exact integer arithmetic with one
    independent noise draw per cell. If each count changes by at most an integer Δ between
    neighbouring databases and ``scale = Δ / ε``, the release is ε-DP (shifting the pmf by at
    most Δ changes any probability by a factor at most ``exp(Δ / scale) = e^ε``), up to the
    sampler resolution in the module docstring.
    ``sampler=None`` means :func:`default_sampler`.
    """
    scale = _check_scale(scale)
    if scale > MAX_DISCRETE_SCALE:
        raise ValueError("scale exceeds MAX_DISCRETE_SCALE = 2^32: the noise would be "
                         "meaningless; use a larger epsilon or a smaller sensitivity")
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        if arr.size and (arr.max() > _COUNT_MAX_ABS or (arr.dtype.kind == "i" and arr.min()
                                                       < -_COUNT_MAX_ABS)):
            raise ValueError("a count exceeds 2^62 in magnitude")
        counts = arr.astype(np.int64)
    elif arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError("counts must be finite (NaN or infinity found)")
        if not np.all(np.abs(arr) <= 2.0**53) or not np.all(np.floor(arr) == arr):
            raise ValueError("float counts must be integral and at most 2^53 in magnitude")
        counts = arr.astype(np.int64)
    else:
        raise TypeError(f"counts must have an integer dtype, got {arr.dtype}")
    sampler = default_sampler() if sampler is None else sampler
    noise = _checked_noise(sampler.discrete_laplace(scale, counts.size), counts.size)
    return counts + noise.reshape(counts.shape)


def sum_granularity(scale: float) -> float:
    """The grid step of :func:`release_sums`: ``g = 2^(ceil(log2 scale) - SUM_GRID_BITS)``.

    Precondition: ``2^-1000 <= scale <= 2^1000`` (finite, > 0); otherwise ``ValueError``.
    Guarantee: ``g`` is an exact power of two, a normal float, and ``scale / g`` (exact) lies
    in ``(2^19, 2^20]``.

    Why 2^20 steps per scale rather than Google's 2^40: the integer noise then has scale at most
    2^20, where the sampler's worst-case loss slack is about 2^-23 (module docstring), while the
    rounding slack ``g / scale`` stays below 2^-19 — and is zero whenever ``g`` divides the
    sensitivity, e.g. any integer sensitivity with ``scale <= 2^20``.
    """
    if scale == math.inf:  # bounds near the largest double, doubled or divided by epsilon
        raise ScaleOutOfRange(_SCALE_OUT_OF_RANGE)
    scale = _check_scale(scale)
    mant, exp = math.frexp(scale)                  # scale = mant * 2^exp, 0.5 <= mant < 1
    ceil_log2 = exp - 1 if mant == 0.5 else exp
    lo, hi = _SUM_SCALE_EXP_RANGE
    if not lo <= ceil_log2 <= hi:
        raise ScaleOutOfRange(_SCALE_OUT_OF_RANGE)
    return math.ldexp(1.0, ceil_log2 - SUM_GRID_BITS)


_SCALE_OUT_OF_RANGE = (
    "the noise scale of a sum (from its bounds and epsilon) must lie in [2^-1000, 2^1000]: "
    "declare bounds of a usual magnitude (rescale the column) or use another epsilon")


class ScaleOutOfRange(NotSupportedError, ValueError):
    """A sum's noise scale outside [2^-1000, 2^1000]: a ValueError for the mechanisms' callers,
    and a PEP 249 NotSupportedError for the analyst (the scale depends on the bounds and
    epsilon alone, so refusing is data-independent)."""


class EpsilonTooSmallForSum(ScaleOutOfRange):
    """An epsilon so small (about 2^-19 per draw or less) that a sum's grid step, which grows
    with the scale, outruns the scale: :func:`gridded_sum_scale` has no scale to give. Like
    :class:`ScaleOutOfRange`, refusing depends on public numbers alone."""


class EpsilonTooLargeForSum(ScaleOutOfRange):
    """An epsilon per draw above :data:`MAX_SUM_EPSILON`: a sum's grid, about its scale times
    2^-20, shrinks with 1/epsilon, and :func:`release_sums` saturates sums at g 2^1000, about
    2^980 / epsilon times the bound's width, so a larger epsilon silently clipped ordinary
    sums (145 released as 2^-13 at epsilon 1e300: the red team). Public: epsilon alone."""


#: the largest epsilon per draw a sum is released at: sums then saturate no lower than about
#: 2^80 times the bound's width (the sum of 2^80 rows at the bound)
MAX_SUM_EPSILON = 2.0**900


def check_sum_epsilon(epsilon: float) -> None:
    """Refuse (:class:`EpsilonTooLargeForSum`) a sum's epsilon per draw above
    :data:`MAX_SUM_EPSILON`."""
    if epsilon > MAX_SUM_EPSILON:
        raise EpsilonTooLargeForSum(
            f"epsilon {epsilon:g} (per noise draw) is too large for a sum: its noise grid "
            "would clip ordinary sums; use an epsilon of at most 2^900 (about 8e270)")


def gridded_sum_scale(sensitivity: float, epsilon: float) -> tuple[float, float]:
    """``(scale, g)`` for a sum of the given sensitivity released on its grid: a neighbour moves
    the snapped value by at most ``sensitivity + g``, so ``scale = (sensitivity + g) / epsilon``
    with ``g = sum_granularity(scale)`` (g grows with the scale; three steps settle it). Public:
    a function of the sensitivity and epsilon alone. ``ValueError`` as :func:`sum_granularity`
    for a scale outside its range; :class:`EpsilonTooSmallForSum` (a ValueError) when epsilon
    is so small that no scale settles (about 2^-19 or less), :class:`EpsilonTooLargeForSum`
    above :data:`MAX_SUM_EPSILON`."""
    check_sum_epsilon(epsilon)
    scale = sensitivity / epsilon
    for _ in range(3):
        scale = (sensitivity + sum_granularity(scale)) / epsilon
    g = sum_granularity(scale)
    if not (sensitivity + g) / epsilon <= scale * (1 + 1e-12):
        # g is at least scale * 2^-SUM_GRID_BITS, so g / epsilon outgrows the scale once
        # epsilon nears 2^-SUM_GRID_BITS: no scale settles (public: epsilon alone)
        raise EpsilonTooSmallForSum(
            f"epsilon {epsilon:g} (per noise draw) is too small for a sum's noise grid: "
            f"raise epsilon above about 2^-{SUM_GRID_BITS - 1} (2e-6) per draw")
    return scale, g


def _check_granularity(g: float, scale: float) -> float:
    g = _check_scale(g, "granularity")
    if math.frexp(g)[0] != 0.5:
        raise ValueError("granularity must be a power of two")
    if scale / g > MAX_DISCRETE_SCALE:
        raise ValueError("scale / granularity exceeds MAX_DISCRETE_SCALE = 2^32")
    return g


def release_sums(values: np.ndarray, scale: float, *,
                 sampler: Sampler | None = None,
                 granularity: float | None = None) -> np.ndarray:
    """Release real-valued sums with grid-snapped discrete Laplace noise (secure noise).

    With ``g = granularity`` (a power of two with ``scale / g <= MAX_DISCRETE_SCALE``) or, by
    default, ``g = sum_granularity(scale)``, each value ``v`` becomes
    ``g * (R(v / g) + Y)``, where ``R(y) = floor(y + 1/2)`` (round half up, computed exactly)
    and ``Y ~ discrete_laplace(scale / g)``.

    Precondition: ``values`` real (integer or float dtype, any shape), not NaN; ``scale`` as for
    :func:`sum_granularity`. Integers above 2^53 are first rounded to float64. Each value is
    first **saturated** into ``[-V, V]``, ``V = min(2^1020, g 2^1000)`` (infinities too): a
    public, 1-Lipschitz, monotone map, so it moves no neighbour's pair further apart, and a
    sum too large for the grid is released saturated instead of raising (an error that depended
    on the data would be an oracle: found by the float-sum red team,
    tests/redteam/test_sum_error_attacks.py).
    Guarantee: a float64 array of the same shape whose every entry is an exact multiple of
    ``g`` and a function of the integer ``R(v / g) + Y`` only (the float addition is a single
    correctly rounded operation on exact integers and ``g`` is a power of two), so no low bits of
    ``v`` leak and ``-0.0`` never appears. ``R`` is monotone and ``R(y + k) = R(y) + k`` for
    integers ``k``, so if ``v`` moves by at most Δ between neighbours, ``R(v / g)`` moves by at
    most ``ceil(Δ / g)`` grid steps: with ``scale = Δ / ε`` the release is ε-DP exactly when
    ``g`` divides Δ (e.g. integer Δ and ``scale <= 2^20``), and ``(ε + g / scale)``-DP with
    ``g / scale < 2^-19`` in general, up to the sampler resolution. Error: ``|out - v| <= g/2 +
    g |Y|``.
    """
    scale = _check_scale(scale)
    arr = np.asarray(values)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"sums must have a real numeric dtype, got {arr.dtype}")
    x = arr.astype(np.float64)
    if np.any(np.isnan(x)):
        raise ValueError("sums must not be NaN")
    # An explicit grid lets callers keep the grid independent of a data-dependent scale
    # (smoothed releases): the output's granularity must not reveal the scale.
    g = sum_granularity(scale) if granularity is None else _check_granularity(granularity, scale)
    limit = _SUM_MAX_ABS_VALUE if g >= 2.0**20 else math.ldexp(g, 1000)  # min(2^1020, g 2^1000)
    x = np.clip(x, -limit, limit)                  # saturate (docstring): never raise on data
    y = x / g                                      # exact: g is a power of two; |y| <= 2^1020
    fl = np.floor(y)
    snapped = fl + (y - fl >= 0.5)                 # floor(y + 1/2) exactly; +0.0 for zero
    sampler = default_sampler() if sampler is None else sampler
    noise = _checked_noise(sampler.discrete_laplace(scale / g, x.size), x.size)
    with np.errstate(over="ignore"):
        out = (snapped + noise.reshape(x.shape).astype(np.float64)) * g
    if not np.all(np.isfinite(out)):
        raise ValueError("noisy sum overflows float64")
    return out


# ---------------------------------------------------------------------------------------------
# Accuracy
# ---------------------------------------------------------------------------------------------


def laplace_half_width(scale: float, confidence: float = 0.95, cells: int = 1) -> float:
    """Half-width ``alpha = scale * ln(cells / beta)``, ``beta = 1 - confidence``.

    Precondition: ``scale`` finite > 0, ``0 < confidence < 1``, integer ``cells >= 1``;
    otherwise ``ValueError`` (``TypeError`` for a non-integer ``cells``).
    Guarantee: for ``cells`` independent continuous Laplace(scale) noises, the probability that
    any of them has ``|noise| >= alpha`` is at most ``beta`` (union bound over cells of
    ``P[|Lap(b)| >= b ln(1/beta')] = beta'`` with ``beta' = beta / cells``; equality for one cell).
    For the discrete noise of :func:`release_counts`, ``P(|X| >= k) = 2p^k/(1+p) <=
    P(|Lap(b)| >= k - 1/2)``, so the integer error exceeds ``alpha + 1/2`` with probability at
    most ``beta``; :func:`release_sums` errs by at most ``alpha + g`` (``g`` its grid step).
    The scale itself may be data-dependent (smoothed sensitivity): show the result only where
    the scale may be shown (docs/design.md, "Privacy model").
    """
    scale = _check_scale(scale)
    if isinstance(confidence, bool) or not isinstance(confidence, int | float | np.floating):
        raise TypeError("confidence must be a real number")
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError("confidence must lie strictly between 0 and 1")
    if isinstance(cells, bool) or not isinstance(cells, int | np.integer):
        raise TypeError("cells must be an integer")
    if cells < 1:
        raise ValueError("cells must be >= 1")
    beta = 1.0 - float(confidence)
    return scale * (math.log(int(cells)) - math.log(beta))
