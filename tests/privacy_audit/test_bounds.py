"""dpsql.privacy_audit.bounds: Clopper-Pearson intervals and the loss lower bounds.

The lower bounds are checked on samples of known laws whose true loss is known: below it at the
stated confidence (run with confidence 1 - 1e-6: a false failure once per million runs), and
above a threshold when the loss is large (the bound has power).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dpsql.noise.mechanisms import discrete_laplace
from dpsql.privacy_audit.bounds import beta_quantile, clopper_pearson, loss_lower_bounds

CONFIDENCE = 1 - 1e-6


@pytest.mark.parametrize(("k", "n"), [(0, 10), (1, 10), (5, 10), (10, 10), (3, 1000),
                                      (4990, 5000), (250, 20_000)])
@pytest.mark.parametrize("alpha", [0.05, 1e-6])
def test_clopper_pearson_ends_are_the_beta_quantiles(k, n, alpha):
    """Each end is where the regularised incomplete beta function, evaluated independently in
    40-digit arithmetic (mpmath), reaches alpha/2 or 1 - alpha/2 (the exact interval)."""
    lo, hi = clopper_pearson(k, n, alpha)
    with mpmath.workdps(40):
        if k == 0:
            assert lo == 0.0
        else:
            got = mpmath.betainc(k, n - k + 1, 0, lo, regularized=True)
            assert float(got) == pytest.approx(alpha / 2, rel=1e-9)
        if k == n:
            assert hi == 1.0
        else:
            got = mpmath.betainc(k + 1, n - k, 0, hi, regularized=True)
            assert float(got) == pytest.approx(1 - alpha / 2, rel=1e-9)
    assert 0.0 <= lo < k / n + 1e-12 or k == 0
    assert hi > k / n - 1e-12


def test_beta_quantile_of_a_uniform():
    assert beta_quantile(0.3, 1.0, 1.0) == pytest.approx(0.3, abs=1e-12)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_lower_bound_stays_below_the_true_loss(epsilon):
    """Discrete Laplace(1/epsilon) around 0 and around 1: the true loss is exactly epsilon."""
    scale = 1.0 / epsilon
    x = discrete_laplace(scale, 20_000).astype(float)
    y = 1.0 + discrete_laplace(scale, 20_000)
    bounds = loss_lower_bounds(x, y, confidence=CONFIDENCE)
    assert bounds.max_divergence <= epsilon
    assert all(value <= epsilon for value in bounds.renyi.values())
    # and the bound has power: it is not far below the truth
    assert bounds.max_divergence > 0.6 * epsilon


def test_identical_laws_give_no_loss_and_delta_is_subtracted():
    x = discrete_laplace(3.0, 5_000).astype(float)
    y = discrete_laplace(3.0, 5_000).astype(float)
    assert loss_lower_bounds(x, y, confidence=CONFIDENCE).max_divergence < 0.5
    shifted = 6.0 + discrete_laplace(1.0, 5_000)
    loose = loss_lower_bounds(x, shifted, confidence=CONFIDENCE)
    strict = loss_lower_bounds(x, shifted, delta=0.2, confidence=CONFIDENCE)
    assert strict.max_divergence < loose.max_divergence
    assert math.isfinite(loose.max_divergence) and loose.max_divergence > 2.0


def test_empty_samples_are_refused():
    with pytest.raises(ValueError):
        loss_lower_bounds(np.array([]), np.array([1.0]))
