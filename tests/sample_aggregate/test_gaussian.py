"""dpsql/sample_aggregate/gaussian.py and the Gaussian branch of release.py: exact parameters
(sigma, grid, L2 move, record, curve), refusals before any read, and the noise it draws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsql.accounting.curves import ROUND_UP
from dpsql.budget import Budget
from dpsql.errors import NotSupportedError
from dpsql.noise import gaussian as dg
from dpsql.noise.gaussian_plan import sum_grid
from dpsql.sample_aggregate.gaussian import MECHANISM_GAUSSIAN, rho
from dpsql.sample_aggregate.release import noisy_means, plan_release, release_curve
from dpsql.sample_aggregate.rewrite import SamplePlan

PLAN = SamplePlan(exact_sql="", exact_params=(), n_params=0, blocks=10,
                  names=("med", "ratio"), bounds=((0.0, 100.0), (-1.0, 1.0)))


@pytest.mark.parametrize("calibration", ["analytic", "classical"])
def test_sigma_is_the_scalar_sum_sigma_of_twice_the_width(calibration):
    """One changed row moves two blocks by hi - lo each: the sum's sensitivity is 2 (hi - lo),
    one coordinate, so l2^2 = linf^2 in grid steps, linf = ceil(D / g) + 1."""
    eps, delta = (0.8, 1e-6) if calibration == "classical" else (2.0, 1e-6)
    outputs, record = plan_release(PLAN, Budget(eps, delta, "gaussian", calibration), "fp")
    for o, (lo, hi) in zip(outputs, PLAN.bounds, strict=True):
        d = 2.0 * (hi - lo)
        g = sum_grid(d, False)
        linf = math.ceil(d / g) + 1
        assert (o.epsilon, o.delta, o.sensitivity) == (eps / 2, delta / 2, d)
        assert (o.granularity, o.l2_squared) == (g, linf * linf)
        certified = dg.discrete_sigma(linf * linf, linf, eps / 2, delta / 2)
        if calibration == "analytic":
            assert o.sigma == certified
        else:  # the seeds' sigma = sqrt(l2^2) sqrt(2 ln(1.25/delta)) / epsilon, if certified
            assert o.sigma == max(dg.classical_sigma(linf, eps / 2, delta / 2), certified)
        assert o.scale == o.sigma * g
        # the certified sigma really is (eps_j, delta_j)-DP for that move
        assert dg.certified_delta(o.sigma, linf * linf, linf, eps / 2) <= delta / 2
    assert (record.epsilon, record.delta, record.mechanism) == (eps, delta, MECHANISM_GAUSSIAN)
    col = record.columns[0]
    o = outputs[0]
    assert (col.mechanism, col.epsilon, col.delta, col.calibration) == (
        MECHANISM_GAUSSIAN, eps / 2, delta / 2, calibration)
    assert col.sigma == o.scale / 10 and col.noise_scale == o.scale / 10
    alpha = (o.scale * math.sqrt(2 * math.log(2 / 0.05)) + o.granularity / 2) / 10
    assert col.half_width_95 == pytest.approx(alpha) and col.accuracy_alpha == col.half_width_95
    assert col.accuracy_beta == 0.05
    assert "discrete Gaussian" in (col.post_processing or "")


def test_analytic_sigma_in_value_units_is_near_the_continuous_one():
    """The mean's sigma is about the analytic Gaussian's for sensitivity 2 (hi - lo) / m."""
    outputs, _ = plan_release(PLAN, Budget(2.0, 1e-6, "gaussian"), "fp")
    continuous = dg.analytic_sigma(200.0, 1.0, 5e-7)
    assert continuous <= outputs[0].scale <= continuous * 1.02


def test_the_curve_is_the_sum_of_the_outputs_rho():
    outputs, _ = plan_release(PLAN, Budget(1.0, 1e-6, "gaussian"), "fp")
    curve = release_curve(outputs)
    want = sum(o.l2_squared / (2 * o.sigma**2) for o in outputs)
    assert curve.rho == pytest.approx(want * ROUND_UP, rel=1e-12)
    assert curve.at(2.0) == pytest.approx(2.0 * curve.rho, rel=1e-8)
    assert rho(2.0, 8) == 1.0
    with pytest.raises(ValueError):
        rho(0.0, 1)


def test_refusals_before_any_read():
    with pytest.raises(NotSupportedError, match="needs delta > 0"):
        plan_release(PLAN, Budget(1.0, 0.0, "gaussian"), "fp")
    with pytest.raises(NotSupportedError, match="classical Gaussian calibration"):
        plan_release(PLAN, Budget(2.0, 1e-6, "gaussian", "classical"), "fp")  # 1 per output
    plan_release(PLAN, Budget(1.9, 1e-6, "gaussian", "classical"), "fp")
    plan_release(SamplePlan("", (), 0, 10, ("x",), ((-1e300, 1e300),)),
                 Budget(1.0, 1e-6, "gaussian"), "fp")  # a sensitivity of 4e300 is sampled
    wide = SamplePlan("", (), 0, 10, ("x",), ((-1e307, 1e307),))
    with pytest.raises(NotSupportedError, match="narrower bounds"):
        plan_release(wide, Budget(1.0, 1e-6, "gaussian"), "fp")


class Fixed:
    """Every Gaussian draw is ``value`` (tests only); Laplace draws fail."""

    def __init__(self, value: int) -> None:
        self.value, self.sigmas = value, []

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:  # pragma: no cover
        raise AssertionError("the Gaussian path must not draw Laplace noise")

    def discrete_gaussian(self, sigma: float, size: int) -> np.ndarray:
        self.sigmas.append(sigma)
        return np.full(size, self.value, dtype=np.int64)


def test_the_noise_is_grid_times_the_gaussian_draw():
    outputs, _ = plan_release(PLAN, Budget(1.0, 1e-6, "gaussian"), "fp")
    answers = np.array([[50.0] * 10, [0.5] * 10])
    sampler = Fixed(3)
    means = noisy_means(answers, outputs, sampler)
    assert sampler.sigmas == [o.sigma for o in outputs]
    for mean, o, exact in zip(means, outputs, (50.0, 0.5), strict=True):
        snapped = round(exact * 10 / o.granularity) * o.granularity
        assert mean == pytest.approx((snapped + 3 * o.granularity) / 10)


def test_the_noise_has_the_planned_sigma():
    outputs, _ = plan_release(SamplePlan("", (), 0, 4, ("a",), ((0.0, 1.0),)),
                              Budget(1.0, 1e-6, "gaussian"), "fp")
    draws = np.array([noisy_means(np.zeros((1, 4)), outputs)[0] for _ in range(3000)])
    sd = outputs[0].scale / 4
    # the sample sd's relative standard error is ~1/sqrt(2n) ~ 1.3%
    assert abs(draws.std() / sd - 1) < 0.08
