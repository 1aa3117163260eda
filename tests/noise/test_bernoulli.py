"""dpsql.noise.bernoulli: the realised keep probability is exactly floor(p 2^53) / 2^53, the
words are uniform and come from os.urandom only."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpsql.noise import bernoulli
from dpsql.noise.mechanisms import SecureSampler
from tests.noise.randomness import assert_secure_randomness

ONE = 1 << 53
ALPHA = 1e-6  # per assertion: the file's false-failure rate is below 1e-5


class Words:
    """A word source returning fixed words (the contract: integers in [0, 2^53))."""

    def __init__(self, words):
        self.words = np.asarray(words, dtype=np.int64)

    def uniform_words(self, size: int) -> np.ndarray:
        assert size == len(self.words)
        return self.words


def test_reads_only_os_urandom():
    assert_secure_randomness(bernoulli, reads_urandom=True)


def test_thresholds_are_exact_floors_on_the_grid():
    p = np.array([0.0, 2.0**-53, 3 * 2.0**-54, 0.1, 0.5, 1 - 2.0**-53, 1.0])
    cut = bernoulli.thresholds(p)
    assert cut.tolist() == [0, 1, 1, int(0.1 * ONE), ONE // 2, ONE - 1, ONE]
    assert all(c / ONE <= q < (c + 1) / ONE or q == 1.0 for c, q in zip(cut, p, strict=True))
    for bad in ([-1e-300], [1.0 + 2.0**-52], [float("nan")]):
        with pytest.raises(ValueError):
            bernoulli.thresholds(np.array(bad))


def test_an_item_is_kept_iff_its_word_is_below_the_threshold():
    p = np.array([0.0, 0.0, 0.25, 0.25, 1.0, 1.0])
    words = [0, ONE - 1, ONE // 4 - 1, ONE // 4, 0, ONE - 1]
    assert bernoulli.bernoulli(p, Words(words)).tolist() == [False, False, True, False,
                                                             True, True]


def test_a_bad_source_is_refused():
    with pytest.raises(TypeError, match="uniform_words"):
        bernoulli.bernoulli(np.array([0.5]), object())
    with pytest.raises(ValueError, match="outside"):
        bernoulli.bernoulli(np.array([0.5]), Words([ONE]))
    with pytest.raises(ValueError, match="one-dimensional"):
        bernoulli.bernoulli(np.array([[0.5]]))


def test_secure_words_are_uniform_53_bit_integers():
    words = bernoulli.secure_words(200_000)
    assert words.dtype == np.int64 and words.min() >= 0 and words.max() < ONE
    top = np.bincount(words >> 49, minlength=16)  # the 4 top bits
    low = np.bincount(words & 15, minlength=16)  # the 4 low bits
    for counts in (top, low):
        assert stats.chisquare(counts).pvalue > ALPHA, counts
    assert bernoulli.secure_words(0).shape == (0,)


@pytest.mark.parametrize("source", [None, SecureSampler()])
def test_frequencies_match_the_probabilities(source):
    """Chi-square over items of several probabilities at once (200,000 draws each)."""
    p = np.array([1e-3, 0.1, 0.5, 0.9, 0.999])
    runs = 40_000
    kept = np.zeros(len(p), dtype=np.int64)
    for _ in range(5):
        kept += bernoulli.bernoulli(np.tile(p, runs), source).reshape(runs, len(p)).sum(axis=0)
    total = 5 * runs
    observed = np.concatenate([kept, total - kept])
    expected = np.concatenate([p * total, (1 - p) * total])
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < stats.chi2.isf(ALPHA, len(p)), (kept, p * total)


def test_probability_zero_and_one_are_exact():
    assert not bernoulli.bernoulli(np.zeros(10_000)).any()
    assert bernoulli.bernoulli(np.ones(10_000)).all()
