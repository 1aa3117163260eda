"""Unit tests of dpsql.noise.mechanisms: contracts, validation, exact grid arithmetic, bit mapping.

Test samplers live here (never in dpsql/): they implement the Sampler protocol with
deterministic noise so the release arithmetic can be checked exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpsql.noise import mechanisms
from dpsql.noise.mechanisms import (
    MAX_DISCRETE_SCALE,
    SUM_GRID_BITS,
    Sampler,
    SecureSampler,
    _discrete_laplace_from_words,
    default_sampler,
    discrete_laplace,
    laplace_half_width,
    release_counts,
    release_sums,
    sum_granularity,
)
from tests.noise.randomness import assert_secure_randomness


class ConstantSampler:
    """Returns the same integer noise for every cell and records the scales asked for."""

    def __init__(self, value: int = 0) -> None:
        self.value = value
        self.calls: list[tuple[float, int]] = []

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        self.calls.append((scale, size))
        return np.full(size, self.value, dtype=np.int64)


class SeededSampler:
    """Reproducible (NOT secure) discrete Laplace: difference of two seeded geometrics."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        q = -math.expm1(-1.0 / scale)
        return self.rng.geometric(q, size) - self.rng.geometric(q, size)


class BadSampler:
    def __init__(self, result) -> None:
        self.result = result

    def discrete_laplace(self, scale: float, size: int):
        return self.result


BAD_SCALES = [0.0, -1.0, -0.0, math.nan, math.inf, -math.inf]


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("scale", BAD_SCALES)
def test_every_entry_point_rejects_bad_scales(scale):
    with pytest.raises(ValueError):
        discrete_laplace(scale, 3)
    with pytest.raises(ValueError):
        release_counts(np.array([1, 2]), scale, sampler=ConstantSampler())
    with pytest.raises(ValueError):
        release_sums(np.array([1.0, 2.0]), scale, sampler=ConstantSampler())
    with pytest.raises(ValueError):
        laplace_half_width(scale)
    with pytest.raises(ValueError):
        sum_granularity(scale)


@pytest.mark.parametrize("scale", ["1.0", None, True, 1 + 0j])
def test_non_numeric_scale_is_a_type_error(scale):
    with pytest.raises(TypeError):
        discrete_laplace(scale, 3)


def test_astronomical_scales_are_refused_not_overflowed():
    for scale in (MAX_DISCRETE_SCALE * 2, 1e20, 1e300):
        with pytest.raises(ValueError, match="MAX_DISCRETE_SCALE"):
            discrete_laplace(scale, 1)
        with pytest.raises(ValueError, match="MAX_DISCRETE_SCALE"):
            release_counts(np.array([5]), scale, sampler=ConstantSampler())
    for scale in (1e305, 1e-305):  # outside [2^-1000, 2^1000]
        with pytest.raises(ValueError):
            release_sums(np.array([5.0]), scale, sampler=ConstantSampler())


def test_largest_allowed_scale_stays_within_documented_bound():
    x = discrete_laplace(MAX_DISCRETE_SCALE, 10_000)
    assert x.dtype == np.int64
    assert np.all(np.abs(x) < 53.4 * MAX_DISCRETE_SCALE)


@pytest.mark.parametrize("size", [-1])
def test_negative_size(size):
    with pytest.raises(ValueError):
        discrete_laplace(1.0, size)


@pytest.mark.parametrize("size", [2.0, "3", None])
def test_non_integer_size(size):
    with pytest.raises(TypeError):
        discrete_laplace(1.0, size)


# --------------------------------------------------------------------------- discrete_laplace


def test_discrete_laplace_dtype_shape_and_randomness():
    x = discrete_laplace(10.0, 1000)
    assert x.dtype == np.int64 and x.shape == (1000,)
    assert len(np.unique(x)) > 10  # P(fewer) is astronomically small at scale 10
    assert discrete_laplace(np.float64(2.5), np.int64(7)).shape == (7,)
    empty = discrete_laplace(1.0, 0)
    assert empty.dtype == np.int64 and empty.shape == (0,)


def test_tiny_scale_is_a_point_mass_at_zero():
    # P(X != 0) = 2p/(1+p) with p = exp(-1000): zero to double precision, and exactly zero here.
    assert not discrete_laplace(1e-3, 10_000).any()
    assert not discrete_laplace(5e-324, 100).any()  # 1/scale overflows to inf: still fine


def test_secure_sampler_is_the_default_and_satisfies_the_protocol():
    assert isinstance(default_sampler(), SecureSampler)
    assert default_sampler() is default_sampler()
    for sampler in (default_sampler(), ConstantSampler(), SeededSampler(1)):
        assert isinstance(sampler, Sampler)
    assert default_sampler().discrete_laplace(3.0, 5).dtype == np.int64


def test_randomness_comes_only_from_os_urandom():
    # Static guard on the module source: no `random` module, no numpy generators, no seeds.
    assert_secure_randomness(mechanisms, reads_urandom=True)


def _words(exponent: int, mantissa: int, negative: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Bits for which the sampler sees E = exponent leading zeros and the given mantissa."""
    if exponent < 11:
        a, b = (1 << (10 - exponent)) << 53, 0
    elif exponent < 75:
        a, b = 0, 1 << (63 - (exponent - 11))
    else:
        a, b = 0, 0
    a |= mantissa << 1 | int(negative)
    return np.array([a], dtype=np.uint64), np.array([b], dtype=np.uint64)


@pytest.mark.parametrize("exponent", [0, 1, 10, 11, 12, 42, 43, 44, 74, 75])
@pytest.mark.parametrize("scale", [0.7, 10.0, 2.0**20])
def test_bit_mapping_matches_the_inverse_cdf(exponent, scale):
    # X = floor(scale * (E ln 2 - ln V + c)), V = (2^52 + mantissa + 1) / 2^53, sign from bit 0.
    c = -math.log1p(0.5 * math.expm1(-1.0 / scale))
    for mantissa in (0, 1, 12345678901, (1 << 52) - 1):
        v = (2**52 + mantissa + 1) / 2**53
        expected = math.floor(scale * (exponent * math.log(2) + (c - math.log(v))))
        got = _discrete_laplace_from_words(*_words(exponent, mantissa), scale)
        neg = _discrete_laplace_from_words(*_words(exponent, mantissa, True), scale)
        assert abs(int(got[0]) - expected) <= 1  # libm vs numpy log may differ by an ulp
        assert int(neg[0]) == -int(got[0])


def test_bit_mapping_extremes():
    # V = 1 and E = 0 (U = 1): the smallest magnitude, always 0.
    for scale in (0.5, 1e3, MAX_DISCRETE_SCALE):
        assert _discrete_laplace_from_words(*_words(0, (1 << 52) - 1), scale)[0] == 0
    # All 75 exponent bits zero: the truncation point, below 53.4 scales.
    top = _discrete_laplace_from_words(*_words(75, 0), 100.0)[0]
    assert top == math.floor(100.0 * (75 * math.log(2) + math.log(2)
                                      - math.log1p(0.5 * math.expm1(-0.01))))
    assert top < 53.4 * 100


def test_bit_mapping_is_monotone_in_the_uniform():
    # Larger mantissa (larger U) never gives a larger |X|; larger E never a smaller one.
    mantissas = np.linspace(0, (1 << 52) - 1, 2001).astype(np.uint64)
    for exponent in (0, 11, 60):
        a, b = _words(exponent, 0)
        out = _discrete_laplace_from_words((a | (mantissas << np.uint64(1))),
                                           np.repeat(b, mantissas.size), 37.0)
        assert np.all(np.diff(out) <= 0)
    per_exponent = [_discrete_laplace_from_words(*_words(e, 7), 5.0)[0] for e in range(76)]
    assert np.all(np.diff(per_exponent) >= 0)


# --------------------------------------------------------------------------- release_counts


def test_counts_are_int64_and_keep_shape():
    values = np.array([[1, 2, 3], [40, 50, 60]], dtype=np.int32)
    out = release_counts(values, 2.0)
    assert out.dtype == np.int64 and out.shape == (2, 3)
    assert release_counts([7, 8], 2.0).dtype == np.int64
    assert release_counts(np.array([], dtype=np.int64), 2.0).shape == (0,)


def test_counts_add_exactly_the_sampler_noise():
    sampler = ConstantSampler(-3)
    values = np.array([0, 5, 2**62], dtype=np.int64)
    out = release_counts(values, 4.0, sampler=sampler)
    assert out.tolist() == [-3, 2, 2**62 - 3]
    assert sampler.calls == [(4.0, 3)]
    # Integral floats are accepted and come back as exact int64.
    assert release_counts(np.array([3.0, 2.0**53]), 1.0, sampler=ConstantSampler(1)).tolist() \
        == [4, 2**53 + 1]


def test_counts_with_a_seeded_sampler_are_reproducible():
    values = np.arange(1000)
    first = release_counts(values, 5.0, sampler=SeededSampler(7))
    second = release_counts(values, 5.0, sampler=SeededSampler(7))
    assert np.array_equal(first, second)
    assert np.array_equal(first - values, SeededSampler(7).discrete_laplace(5.0, 1000))


@pytest.mark.parametrize("values, error", [
    (np.array([1.5]), ValueError),
    (np.array([math.nan]), ValueError),
    (np.array([math.inf]), ValueError),
    (np.array([2.0**54]), ValueError),
    (np.array([2**62 + 1], dtype=np.int64), ValueError),
    (np.array([-(2**62) - 1], dtype=np.int64), ValueError),
    (np.array([2**63], dtype=np.uint64), ValueError),
    (np.array([True, False]), TypeError),
    (np.array(["3"]), TypeError),
    (np.array([1 + 1j]), TypeError),
])
def test_counts_reject_non_counts(values, error):
    with pytest.raises(error):
        release_counts(values, 1.0, sampler=ConstantSampler())


@pytest.mark.parametrize("noise, error", [
    (np.zeros(2), TypeError),                                  # floats
    (np.zeros(3, dtype=np.int64), ValueError),                 # wrong size
    (np.zeros((2, 1), dtype=np.int64), ValueError),            # wrong shape
    (np.array([2**60, 0], dtype=np.int64), ValueError),        # beyond +-2^53
    (np.array([-(2**60), 0], dtype=np.int64), ValueError),
])
def test_misbehaving_samplers_are_refused(noise, error):
    with pytest.raises(error):
        release_counts(np.array([1, 2]), 1.0, sampler=BadSampler(noise))
    with pytest.raises(error):
        release_sums(np.array([1.0, 2.0]), 1.0, sampler=BadSampler(noise))


# --------------------------------------------------------------------------- release_sums


@pytest.mark.parametrize("scale, exponent", [
    (1.0, -20), (2.0, -19), (3.0, -18), (1000.0, -10), (1024.0, -10), (1025.0, -9),
    (0.1, -23), (2.0**-1000, -1020), (2.0**1000, 980),
])
def test_sum_granularity_is_a_power_of_two_tied_to_the_scale(scale, exponent):
    g = sum_granularity(scale)
    assert g == 2.0**exponent
    assert 2.0 ** (SUM_GRID_BITS - 1) < scale / g <= 2.0**SUM_GRID_BITS


def test_sum_outputs_are_exact_multiples_of_the_grid():
    values = np.array([0.1, 1 / 3, -2 / 3, math.pi * 1e10, -1e-300, 5e-324, 1e15 + 0.5, 0.0,
                       123456.789, -987654.321])
    for scale in (1e-3, 0.5, 7.0, 2000.0, 1e9):
        g = sum_granularity(scale)
        out = release_sums(values, scale)
        assert out.dtype == np.float64 and out.shape == values.shape
        steps = out / g
        assert np.array_equal(steps, np.floor(steps))
        assert not np.any(np.signbit(out[out == 0]))


def test_sum_snapping_is_round_half_up_and_shift_equivariant():
    g = sum_granularity(8.0)  # 2^-17
    fractions = np.array([0.0, 0.25, 0.5 - 2.0**-10, 0.5, 0.75])  # exact at j = 2^40 too
    for j in (-3, -1, 0, 2, 2**40):
        values = (j + fractions) * g
        out = release_sums(values, 8.0, sampler=ConstantSampler(0)) / g
        assert out.tolist() == [j, j, j, j + 1, j + 1]


def test_sum_adds_grid_times_sampler_noise_at_scale_over_grid():
    sampler = ConstantSampler(5)
    out = release_sums(np.array([[1.0, -2.0]]), 1000.0, sampler=sampler)
    g = sum_granularity(1000.0)
    assert out.shape == (1, 2)
    assert out.tolist() == [[1.0 + 5 * g, -2.0 + 5 * g]]
    assert sampler.calls == [(1000.0 / g, 2)]


def test_sum_never_emits_negative_zero():
    out = release_sums(np.array([-0.0, -1e-300, -0.4 * sum_granularity(3.0)]), 3.0,
                       sampler=ConstantSampler(0))
    assert out.tolist() == [0.0, 0.0, 0.0]
    assert not np.any(np.signbit(out))


@given(value=st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
       scale=st.floats(min_value=1e-6, max_value=1e9))
def test_sum_snap_error_is_at_most_half_a_grid_step(value, scale):
    g = sum_granularity(scale)
    out = float(release_sums(np.array([value]), scale, sampler=ConstantSampler(0))[0])
    assert out / g == math.floor(out / g)
    assert abs(out - value) <= g / 2


@given(v1=st.floats(min_value=-1e6, max_value=1e6), v2=st.floats(min_value=-1e6, max_value=1e6))
def test_sum_snapping_is_monotone(v1, v2):
    lo, hi = min(v1, v2), max(v1, v2)
    out = release_sums(np.array([lo, hi]), 1.0, sampler=ConstantSampler(0))
    assert out[0] <= out[1]


@pytest.mark.parametrize("values, error", [
    (np.array([math.nan]), ValueError),
    (np.array([None]), TypeError),
    (np.array(["1.0"]), TypeError),
])
def test_sums_reject_bad_values(values, error):
    with pytest.raises(error):
        release_sums(values, 1.0, sampler=ConstantSampler())


def test_sums_too_large_are_saturated_not_refused():
    """A sum beyond V = min(2^1020, g 2^1000) is released as V: an error would depend on the
    data (an oracle); the clip is public and 1-Lipschitz."""
    limit = math.ldexp(sum_granularity(1.0), 1000)  # g = 2^-20: V = 2^980
    assert limit == 2.0**980
    for value in (math.inf, 1e308, 2.0**1021):
        (out,) = release_sums(np.array([value]), 1.0, sampler=ConstantSampler(0))
        assert out == limit
    out = release_sums(np.array([-math.inf, 5.0]), 1.0, sampler=ConstantSampler(0))
    assert out.tolist() == [-limit, 5.0]
    (out,) = release_sums(np.array([1e308]), 2.0**40, sampler=ConstantSampler(0))
    assert out == 2.0**1020  # a coarse grid: V = 2^1020
    (out,) = release_sums(np.array([1e300]), 2.0**-900, sampler=ConstantSampler(0))
    assert out == 2.0**80  # a tiny grid, g = 2^-920: V = 2^80


def test_integer_sums_are_accepted():
    out = release_sums(np.array([3, 4], dtype=np.int64), 1.0, sampler=ConstantSampler(0))
    assert out.dtype == np.float64 and out.tolist() == [3.0, 4.0]


# --------------------------------------------------------------------------- laplace_half_width


def test_half_width_hand_computed_values():
    assert laplace_half_width(10.0) == pytest.approx(10 * math.log(20), rel=1e-12)  # 29.957...
    assert laplace_half_width(10.0) == pytest.approx(29.957322735539910, rel=1e-12)
    assert laplace_half_width(1.0, 0.99) == pytest.approx(math.log(100), rel=1e-12)
    assert laplace_half_width(2.0, 0.95, cells=5) == pytest.approx(2 * math.log(100), rel=1e-12)
    assert laplace_half_width(5409.18185629817, 0.5) == pytest.approx(5409.18185629817
                                                                      * math.log(2), rel=1e-12)


def test_half_width_continuous_tail_equals_beta():
    # Defining identity: P[|Lap(b)| >= alpha] = exp(-alpha / b) = beta / cells.
    for b, conf, cells in ((0.3, 0.9, 1), (10.0, 0.95, 1), (7.0, 0.99, 12)):
        alpha = laplace_half_width(b, conf, cells)
        assert math.exp(-alpha / b) == pytest.approx((1 - conf) / cells, rel=1e-12)


@pytest.mark.parametrize("scale", [0.3, 1.0, 2.5, 10.0, 100.0, 1e4])
@pytest.mark.parametrize("confidence, cells", [(0.5, 1), (0.9, 1), (0.95, 1), (0.95, 7),
                                               (0.99, 1), (0.999999, 3)])
def test_half_width_plus_half_covers_discrete_noise(scale, confidence, cells):
    # Documented claim: for discrete Laplace noise P(|X| > alpha + 1/2) <= beta / cells (exact
    # pmf: P(|X| >= k) = 2 p^k / (1 + p)).
    alpha = laplace_half_width(scale, confidence, cells)
    k = math.floor(alpha + 0.5) + 1  # smallest integer above alpha + 1/2
    p = math.exp(-1.0 / scale)
    assert 2 * p**k / (1 + p) <= (1 - confidence) / cells * (1 + 1e-12)


@pytest.mark.parametrize("kwargs, error", [
    ({"confidence": 0.0}, ValueError),
    ({"confidence": 1.0}, ValueError),
    ({"confidence": 1.5}, ValueError),
    ({"confidence": math.nan}, ValueError),
    ({"cells": 0}, ValueError),
    ({"cells": 2.0}, TypeError),
    ({"cells": True}, TypeError),
    ({"confidence": "0.95"}, TypeError),
])
def test_half_width_validation(kwargs, error):
    with pytest.raises(error):
        laplace_half_width(1.0, **kwargs)
