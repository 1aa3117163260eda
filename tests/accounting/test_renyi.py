"""dpsql.accounting.renyi: exact discrete Laplace RDP, conversions and adaptive filters.

The closed form is checked against the definition summed over a wide support; the filters are
checked to refuse exactly at their boundary under adaptively chosen sequences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsql.accounting.renyi import (
    RenyiFilter,
    ZcdpFilter,
    best_laplace_scale,
    discrete_laplace_rdp,
    rdp_budget,
    rdp_delta,
    zcdp_budget,
)
from dpsql.noise.gaussian import zcdp_delta


def _brute_rdp(alpha: float, scale: float, shift: int) -> float:
    k = np.arange(-int(200 * scale) - 50, int(200 * scale) + 50 + shift, dtype=float)
    q = math.exp(-1 / scale)
    c = (1 - q) / (1 + q)
    log_p = math.log(c) - np.abs(k) / scale
    log_r = math.log(c) - np.abs(k - shift) / scale
    terms = alpha * log_p + (1 - alpha) * log_r
    top = terms.max()
    return (top + math.log(np.exp(terms - top).sum())) / (alpha - 1)


@pytest.mark.parametrize("alpha", [1.5, 2.0, 8.0, 40.0])
@pytest.mark.parametrize("scale", [0.7, 3.0, 25.0])
@pytest.mark.parametrize("shift", [1, 2, 5])
def test_closed_form_equals_the_definition(alpha, scale, shift):
    assert discrete_laplace_rdp(alpha, scale, shift) == pytest.approx(
        _brute_rdp(alpha, scale, shift), rel=1e-9, abs=1e-12)


def test_rdp_is_below_the_max_divergence_and_approaches_it():
    scale, shift = 4.0, 2
    values = [discrete_laplace_rdp(a, scale, shift) for a in (2.0, 10.0, 100.0, 10_000.0)]
    assert values == sorted(values)  # non-decreasing in the order
    assert values[-1] <= shift / scale and values[-1] > 0.99 * shift / scale
    assert discrete_laplace_rdp(3.0, scale, 0) == 0.0


def test_rdp_delta_and_budget_are_inverse():
    alpha, epsilon, delta = 12.0, 1.0, 1e-6
    tau = rdp_budget(alpha, epsilon, delta)
    assert rdp_delta(tau, alpha, epsilon) == pytest.approx(delta, rel=1e-9)
    assert rdp_delta(tau * 1.01, alpha, epsilon) > delta
    assert rdp_budget(1.5, 0.01, 1e-12) == 0.0  # no RDP total is small enough


def test_zcdp_budget_is_the_largest_rho():
    rho = zcdp_budget(1.0, 1e-6)
    assert zcdp_delta(rho, 1.0) <= 1e-6 < zcdp_delta(rho * (1 + 1e-9), 1.0)


def test_renyi_filter_refuses_exactly_at_the_boundary_under_adaptive_choices():
    flt = RenyiFilter(alpha=8.0, budget=1.0)
    # an analyst who adapts: each request sized from what is left
    requests = [0.4, 0.35, 0.25, 1e-12]
    assert [flt.charge(t) for t in requests[:3]] == [True, True, True]
    assert flt.spent == pytest.approx(1.0) and flt.spent <= 1
    assert not flt.charge(requests[3]) and flt.history == requests[:3]  # refused: no charge
    assert not RenyiFilter(alpha=2.0, budget=0.5).charge(0.5000001)
    assert RenyiFilter(alpha=2.0, budget=0.5).charge(0.5)


def test_zcdp_filter_refuses_past_its_budget():
    flt = ZcdpFilter.for_dp(1.0, 1e-6)
    per_query = math.nextafter(flt.budget / 100, 0.0)  # rounded down: 100 fit exactly
    assert all(flt.charge(per_query) for _ in range(100))
    assert not flt.charge(flt.budget * 1e-6)


def test_issue_18_scenario_100_counts():
    """100 counts under a total (epsilon 1, delta 1e-6): the per-query noise std under the
    Rényi filter is at most 63 (141 under basic composition)."""
    scale, alpha = best_laplace_scale(100, 1.0, 1e-6)
    p = math.exp(-1 / scale)
    std = math.sqrt(2 * p) / (1 - p)
    assert std <= 63.0 and 10 < alpha < 50
    # the filter built for that budget accepts exactly 100 such counts
    flt = RenyiFilter.for_dp(alpha, 1.0, 1e-6)
    tau = discrete_laplace_rdp(alpha, scale, 1)
    assert all(flt.charge(tau) for _ in range(100)) and not flt.charge(tau)
