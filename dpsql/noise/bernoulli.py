"""Secure Bernoulli draws: keep each of many items independently with its own probability
(the optimal partition selection, :mod:`dpsql.noise.optimal_partition`).

How a draw is made (argued once, here). Each item gets a fresh 53-bit word ``W`` from
``os.urandom`` (uniform on ``{0, ..., 2^53 - 1}``, :func:`secure_words`), and is kept iff
``W < floor(p * 2^53)``. Multiplying a float64 by 2^53 is exact (a change of exponent) and so
is ``floor`` of the product, so the realised probability of keeping is EXACTLY
``floor(p * 2^53) / 2^53``, in ``(p - 2^-53, p]``: never above ``p``, and equal to ``p`` when
``p`` is a multiple of 2^-53 (every probability the optimal selection's table holds is). The
running time depends on the number of items only.

Tests substitute the words (the :class:`WordSource` protocol: a sampler with a
``uniform_words(size)`` method, e.g. tests/shop_fixture.ZeroNoise, whose words are all 2^52,
i.e. "keep iff p > 1/2", the median decision as zero Laplace noise is for thresholding);
production passes no sampler, or dpsql's :class:`~dpsql.noise.mechanisms.SecureSampler`.
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

import numpy as np

from dpsql.noise.mechanisms import SecureSampler

__all__ = ["WORD_BITS", "WordSource", "bernoulli", "secure_words", "thresholds"]

#: bits of each uniform word: probabilities are realised on the grid k / 2^53
WORD_BITS = 53
_ONE = 1 << WORD_BITS


@runtime_checkable
class WordSource(Protocol):
    """A test source of uniform words. Contract: ``uniform_words(size)`` returns ``size``
    integers in ``[0, 2^53)`` (shape ``(size,)``); only shape and range are checked."""

    def uniform_words(self, size: int) -> np.ndarray: ...


def secure_words(size: int) -> np.ndarray:
    """``size`` independent words uniform on ``{0, ..., 2^53 - 1}`` (int64), from
    ``os.urandom`` only."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError("size must be an integer >= 0")
    raw = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
    return (raw >> np.uint64(64 - WORD_BITS)).astype(np.int64)


def thresholds(probabilities: np.ndarray) -> np.ndarray:
    """``floor(p * 2^53)`` per probability (int64): an item is kept iff its word is below it.
    Precondition: every ``p`` finite in [0, 1] (else ValueError)."""
    p = np.asarray(probabilities, dtype=np.float64)
    if not np.all(np.isfinite(p)) or np.any(p < 0.0) or np.any(p > 1.0):
        raise ValueError("probabilities must be finite and in [0, 1]")
    return np.floor(p * float(_ONE)).astype(np.int64)  # exact: a power-of-two scaling


def _words(size: int, source: object | None) -> np.ndarray:
    if source is None or isinstance(source, SecureSampler):
        return secure_words(size)
    if not isinstance(source, WordSource):
        raise TypeError("a test sampler for a Bernoulli draw (the optimal partition "
                        "selection) needs a uniform_words method")
    words = np.asarray(source.uniform_words(size))
    if words.dtype.kind not in "iu" or words.shape != (size,):
        raise ValueError(f"uniform_words returned {words.dtype} {words.shape}, expected "
                         f"({size},) integers")
    words = words.astype(np.int64)
    if size and (words.min() < 0 or words.max() >= _ONE):
        raise ValueError("uniform_words returned words outside [0, 2^53)")
    return words


def bernoulli(probabilities: np.ndarray, source: object | None = None) -> np.ndarray:
    """One independent draw per item: a boolean array, True (kept) with probability
    ``floor(p * 2^53) / 2^53`` exactly (module docstring), in ``(p - 2^-53, p]``.

    Precondition: ``probabilities`` 1-D, finite, in [0, 1]. ``source``: None (production:
    ``os.urandom``), a :class:`~dpsql.noise.mechanisms.SecureSampler`, or a test
    :class:`WordSource`."""
    cut = thresholds(probabilities)
    if cut.ndim != 1:
        raise ValueError("probabilities must be one-dimensional")
    return _words(cut.size, source) < cut
