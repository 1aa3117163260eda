"""Releasing values with discrete Gaussian noise (a Gaussian :class:`~dpsql.noise.plan.NoisePlan`).

The arithmetic is the Laplace path's: :func:`dpsql.noise.mechanisms.release_counts` adds exact
integer noise to integer counts, and :func:`~dpsql.noise.mechanisms.release_sums` snaps each sum
to a power-of-two grid g and adds g times integer noise. Both draw that integer noise from a
:class:`~dpsql.noise.mechanisms.Sampler`; :class:`_GaussianNoise` is the sampler that draws
N_Z(0, sigma^2) (:func:`dpsql.noise.gaussian.discrete_gaussian`) instead, so validation, snapping
and the exact integer arithmetic are shared, not copied.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from dpsql.noise import gaussian, mechanisms

__all__ = ["GaussianSampler", "release_gaussian_counts", "release_gaussian_sums"]


@runtime_checkable
class GaussianSampler(Protocol):
    """Source of discrete Gaussian noise (tests substitute one; production uses the secure
    :func:`dpsql.noise.gaussian.discrete_gaussian`). Contract: ``size`` integers, shape
    ``(size,)``, distributed as N_Z(0, sigma^2)."""

    def discrete_gaussian(self, sigma: float, size: int) -> np.ndarray: ...


class _Secure:
    def discrete_gaussian(self, sigma: float, size: int) -> np.ndarray:
        return gaussian.discrete_gaussian(sigma, size)


class _GaussianNoise:
    """A :class:`~dpsql.noise.mechanisms.Sampler` for one release: whatever scale the release
    function passes (``scale / g``, which is ``sigma`` by construction), it draws
    N_Z(0, sigma^2) from ``source``."""

    def __init__(self, sigma: float, source: GaussianSampler) -> None:
        self.sigma, self.source = sigma, source

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return self.source.discrete_gaussian(self.sigma, size)


def _source(sampler: object | None) -> GaussianSampler:
    if sampler is None:
        return _Secure()
    if not isinstance(sampler, GaussianSampler):
        raise TypeError("a test sampler for a Gaussian release needs a discrete_gaussian method")
    return sampler


def release_gaussian_counts(values: np.ndarray, sigma: float, *,
                            sampler: object | None = None) -> np.ndarray:
    """Integer counts plus N_Z(0, sigma^2) each (exact int64 arithmetic).

    Precondition: as :func:`dpsql.noise.mechanisms.release_counts`; ``0 < sigma <= 2^30``.
    Guarantee: if the counts move between neighbours by an integer vector of squared L2 norm at
    most l2 and per-coordinate at most linf, and ``sigma >= discrete_sigma(l2, linf, eps, delta)``,
    the release is (eps, delta)-DP (dpsql.noise.gaussian.certified_delta), up to the sampler's
    resolution. ``sampler`` is for tests only (a :class:`GaussianSampler`).
    """
    noise = _GaussianNoise(sigma, _source(sampler))
    return mechanisms.release_counts(values, sigma, sampler=noise)


def release_gaussian_sums(values: np.ndarray, sigma: float, granularity: float, *,
                          sampler: object | None = None) -> np.ndarray:
    """Sums snapped to the grid ``granularity`` = g, plus g * N_Z(0, sigma^2) each.

    Precondition: as :func:`dpsql.noise.mechanisms.release_sums` with ``scale = sigma * g``;
    ``g`` a power of two; sigma in grid steps.
    Guarantee: every output is an exact multiple of g and a function of the integer
    ``R(v/g) + Y`` only (no low bits of v leak); if each sum moves by at most D (real), its
    snapped value moves by at most ceil(D/g) steps, and the accounting of
    :func:`release_gaussian_counts` applies to those integer steps.
    """
    noise = _GaussianNoise(sigma, _source(sampler))
    return mechanisms.release_sums(values, sigma * granularity, sampler=noise,
                                   granularity=granularity)
