"""dpsql/sample_aggregate/release.py: the noise plan and record (exact values), the block
answers' validation, clamping with the lower bound as the default, and the noisy mean."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsql.budget import Budget
from dpsql.errors import NotSupportedError, OperationalError, ProgrammingError
from dpsql.noise import mechanisms
from dpsql.sample_aggregate.release import (
    MECHANISM,
    block_answers,
    clamped_sums,
    noisy_means,
    plan_release,
)
from dpsql.sample_aggregate.rewrite import SamplePlan
from tests.shop_fixture import ZeroNoise

PLAN = SamplePlan(exact_sql="", exact_params=(), n_params=0, blocks=10,
                  names=("med", "ratio"), bounds=((0.0, 100.0), (-1.0, 1.0)))


def test_plan_splits_epsilon_and_scales_by_twice_the_width():
    outputs, record = plan_release(PLAN, Budget(2.0, 1e-6), "fp")
    med, ratio = outputs
    assert (med.epsilon, ratio.epsilon) == (1.0, 1.0)
    assert (med.sensitivity, med.scale) == (200.0, 200.0)  # 2 (hi - lo) / epsilon_j
    assert (ratio.sensitivity, ratio.scale) == (4.0, 4.0)
    assert med.granularity == mechanisms.sum_granularity(200.0)
    assert (record.epsilon, record.delta, record.mechanism) == (2.0, 0.0, MECHANISM)
    assert [c.name for c in record.columns] == ["med", "ratio"]
    col = record.columns[0]
    assert (col.mechanism, col.epsilon, col.delta) == (MECHANISM, 1.0, 0.0)
    # the mean's 95% half-width: (b ln 20 + g) / m
    assert col.half_width_95 == pytest.approx((200.0 * math.log(20) + med.granularity) / 10)
    assert col.post_processing is not None and "10 blocks" in col.post_processing
    assert "[0, 100]" in col.post_processing and "counts as 0" in col.post_processing


def test_refusals_before_any_read():
    from dpsql.errors import ProgrammingError as Missing
    with pytest.raises(Missing, match="epsilon"):
        plan_release(PLAN, None, "fp")
    wide = SamplePlan("", (), 0, 10, ("x",), ((-1e300, 1e300),))
    plan_release(wide, Budget(1.0), "fp")  # a scale of 4e300 is still sampled
    with pytest.raises(NotSupportedError, match="narrower bounds"):
        plan_release(wide, Budget(1e-3), "fp")


def test_block_answers_fill_missing_and_null_blocks_with_nan():
    answers = block_answers([(2, 5.0, None), (0, 1.5, 0.25)], 4, 2)
    assert np.array_equal(answers, np.array([[1.5, np.nan, 5.0, np.nan],
                                             [0.25, np.nan, np.nan, np.nan]]), equal_nan=True)


@pytest.mark.parametrize("rows", [[(4, 1.0)], [(-1, 1.0)], [(1, 1.0), (1, 2.0)],
                                  [(1.0, 1.0)], [(True, 1.0)], [(None, 1.0)]])
def test_malformed_block_ids_fail_before_noise(rows):
    with pytest.raises(OperationalError, match="malformed block id"):
        block_answers(rows, 4, 1)


def test_clamped_sums_take_nan_as_lo_and_clip_infinities():
    outputs, _ = plan_release(SamplePlan("", (), 0, 5, ("a",), ((-1.0, 2.0),)), Budget(1.0),
                              "fp")
    answers = np.array([[np.nan, np.inf, -np.inf, 0.5, 7.0]])
    # lo + hi + lo + 0.5 + hi
    assert clamped_sums(answers, outputs).tolist() == [-1.0 + 2.0 - 1.0 + 0.5 + 2.0]


def test_noisy_mean_without_noise_is_the_clamped_mean():
    outputs, _ = plan_release(PLAN, Budget(1000.0), "fp")
    answers = np.array([[10.0, 20.0, np.nan, 150.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0],
                        [0.5] * 10])
    sampler = ZeroNoise()
    means = noisy_means(answers, outputs, sampler)
    assert means[0] == pytest.approx((10 + 20 + 0 + 100 + 30) / 10, abs=outputs[0].granularity)
    assert means[1] == pytest.approx(0.5, abs=outputs[1].granularity)
    assert sampler.sizes == [1, 1]


def test_noisy_mean_noise_has_the_planned_scale():
    """Mean absolute noise of the released mean is b / m (Laplace: E|X| = b)."""
    outputs, _ = plan_release(SamplePlan("", (), 0, 4, ("a",), ((0.0, 1.0),)), Budget(1.0),
                              "fp")
    draws = np.array([noisy_means(np.zeros((1, 4)), outputs)[0] for _ in range(4000)])
    # b = 2, m = 4: E|mean| = 0.5; sd of the sample mean of |X|/m is 0.5/sqrt(4000) ~ 0.008
    assert abs(np.mean(np.abs(draws)) - 0.5) < 0.05


def test_programming_error_is_the_missing_epsilon_class():
    with pytest.raises(ProgrammingError):
        plan_release(PLAN, None, "fp")


def test_the_release_curve_is_pure_laplace_per_output():
    from dpsql.accounting.curves import ALPHAS, pure_dp_rdp
    from dpsql.sample_aggregate.release import release_curve

    outputs, _ = plan_release(PLAN, Budget(2.0), "fp")
    curve = release_curve(outputs)
    assert curve.rho == pytest.approx(2 * 1.0**2 / 2, rel=1e-8)  # sum of eps_j^2 / 2
    for alpha, value in zip(ALPHAS, curve.rdp, strict=True):
        want = min(2 * pure_dp_rdp(alpha, 1.0), pure_dp_rdp(alpha, 2.0))
        assert value == pytest.approx(want, rel=1e-8) and value >= want
