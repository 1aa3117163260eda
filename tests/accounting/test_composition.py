"""The composition theorems (dpsql/accounting/composition.py).

Expectations are computed by hand in the test (the arithmetic is written out), or by a naive
direct evaluation of the seed formula that shares no code with dpsql.accounting.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.accounting import (
    advanced_composition,
    basic_composition,
    compose,
    kov_bound,
    kov_delta,
    optimal_homogeneous_composition,
)
from dpsql.errors import ProgrammingError

# -- composition ------------------------------------------------------------------------------


def naive_delta_i(eps: float, k: int, i: int) -> float:
    """The seed formula evaluated directly in floats (fine for small k)."""
    num = sum(math.comb(k, j) * (math.exp((k - j) * eps) - math.exp((k - 2 * i + j) * eps))
              for j in range(i))
    return num / (1 + math.exp(eps)) ** k


def test_basic_composition():
    assert basic_composition([]) == (0.0, 0.0)
    assert basic_composition([(0.1, 1e-8)] * 3) == (0.3, 3e-8)
    assert basic_composition([(0.1, 0.0)] * 100) == (10.0, 0.0)


def test_advanced_composition_homogeneous_drv():
    eps, delta = advanced_composition([(0.1, 0.0)] * 100, 1e-6)
    # 0.1 * sqrt(2 * 100 * ln(1e6)) + 100 * 0.1 * (e^0.1 - 1)
    #   = 0.1 * sqrt(200 * 13.815510557964274) + 10 * 0.10517091807564763
    #   = 0.1 * 52.56521769...           + 1.0517091807564763 = 6.30823...
    assert eps == pytest.approx(0.1 * math.sqrt(200 * math.log(1e6)) + 10 * (math.e**0.1 - 1))
    assert eps == pytest.approx(6.308, abs=5e-4)
    assert delta == 1e-6
    assert advanced_composition([(0.1, 1e-8)] * 100, 1e-6)[1] == pytest.approx(1e-6 + 100e-8)


def test_advanced_composition_heterogeneous():
    eps, delta = advanced_composition([(0.1, 1e-7), (0.5, 0.0), (1.0, 2e-7)], 1e-5)
    # sum eps^2 = 0.01 + 0.25 + 1 = 1.26; ln(1e5) = 11.512925464970229
    # sqrt(2 * 11.512925464970229 * 1.26) = sqrt(29.012572...) = 5.38633...
    # sum eps (e^eps - 1) = 0.1*0.10517092 + 0.5*0.64872127 + 1.0*1.71828183 = 2.05316...
    assert eps == pytest.approx(math.sqrt(2 * math.log(1e5) * 1.26)
                                + 0.1 * math.expm1(0.1) + 0.5 * math.expm1(0.5) + math.expm1(1.0))
    assert eps == pytest.approx(5.38633 + 2.05316, abs=1e-4)  # 7.43949
    assert delta == pytest.approx(3e-7 + 1e-5)


def test_kov_bound_homogeneous_seed_formula():
    eps, delta = kov_bound([(0.1, 0.0)] * 100, 1e-6)
    # k eps (e^eps-1)/(e^eps+1) = 10 * 0.10517092 / 2.10517092 = 0.49958347...
    drift = 10 * (math.e**0.1 - 1) / (math.e**0.1 + 1)
    # second: + 0.1 sqrt(200 ln(e + sqrt(100*0.01)/1e-6)) = + 0.1 sqrt(200 ln(1000002.718...))
    second = drift + 0.1 * math.sqrt(200 * math.log(math.e + 1.0 / 1e-6))
    # third:  + 0.1 sqrt(200 ln(1e6)) = + 5.25652177
    third = drift + 0.1 * math.sqrt(200 * math.log(1e6))
    assert eps == pytest.approx(min(10.0, second, third))
    assert eps == pytest.approx(5.7561, abs=1e-4)
    assert delta == pytest.approx(1e-6)  # 1 - (1 - 1e-6) * 1


def test_kov_delta_by_hand():
    # k = 3, eps = 1, i = 1: C(3,0)(e^3 - e^1)/(1+e)^3 = e(e-1)/(1+e)^2
    assert kov_delta(1.0, 3, 1) == pytest.approx(math.e * (math.e - 1) / (1 + math.e) ** 2,
                                                 rel=1e-8)
    assert kov_delta(1.0, 3, 1) == pytest.approx(0.337834712, rel=1e-8)
    assert kov_delta(1.0, 3, 0) == 0.0
    # slack: the computed value never understates the exact one
    for eps, k in [(0.5, 20), (0.1, 100), (0.05, 300)]:
        for i in range(k // 2 + 1):
            exact = naive_delta_i(eps, k, i)
            assert exact <= kov_delta(eps, k, i) <= exact * (1 + 1e-8) + 1e-300


def test_kov_delta_grows_with_i():
    values = [kov_delta(0.2, 40, i) for i in range(21)]
    assert values == sorted(values)


def test_kov_optimal_small_case_by_hand_beats_basic_and_drv():
    # k = 3, eps = 1, delta' = 0.5: delta_1 = 0.3378 <= 0.5 and i = 1 is floor(3/2),
    # so the composition is ((3 - 2) * 1, 0.3378)-DP = (1, 0.3378).
    eps, delta = optimal_homogeneous_composition(1.0, 0.0, 3, 0.5)
    assert eps == 1.0 and delta == pytest.approx(0.337834712, rel=1e-8)
    assert eps < basic_composition([(1.0, 0.0)] * 3)[0] == 3.0
    # DRV: sqrt(2 ln 2 * 3) + 3 (e - 1) = 2.0393 + 5.1548 = 7.19
    assert eps < advanced_composition([(1.0, 0.0)] * 3, 0.5)[0]


def test_kov_optimal_k20_strictly_below_kov_bound_basic_and_drv():
    eps, k, dp = 0.5, 20, 1e-2
    z = (1 + math.exp(0.5)) ** 20  # = 2.6487212707^20
    # delta_3 = [C(20,0)(e^10 - e^7) + C(20,1)(e^9.5 - e^7.5) + C(20,2)(e^9 - e^8)] / z
    delta_3 = (1 * (math.exp(10) - math.exp(7)) + 20 * (math.exp(9.5) - math.exp(7.5))
               + 190 * (math.exp(9) - math.exp(8))) / z
    delta_4 = (1 * (math.exp(10) - math.exp(6)) + 20 * (math.exp(9.5) - math.exp(6.5))
               + 190 * (math.exp(9) - math.exp(7)) + 1140 * (math.exp(8.5) - math.exp(7.5))) / z
    assert delta_3 == pytest.approx(0.0042410, rel=1e-4) and delta_3 <= dp < delta_4
    got_eps, got_delta = optimal_homogeneous_composition(eps, 0.0, k, dp)
    assert got_eps == (20 - 2 * 3) * 0.5 == 7.0
    assert got_delta == pytest.approx(delta_3, rel=1e-8) and got_delta >= delta_3
    # KOV closed form: 10 tanh(0.25) + sqrt(2 * 20 * 0.25 * ln(100)) = 2.4492 + 6.7861 = 9.2353
    assert kov_bound([(eps, 0.0)] * k, dp)[0] == pytest.approx(9.2353, abs=1e-4)
    # DRV: sqrt(2 ln(100) * 5) + 20 * 0.5 * (e^0.5 - 1) = 6.7861 + 6.4872 = 13.2733
    assert advanced_composition([(eps, 0.0)] * k, dp)[0] == pytest.approx(13.2733, abs=1e-4)
    assert got_eps < kov_bound([(eps, 0.0)] * k, dp)[0] < 10.0 < 13.27


def test_kov_optimal_100_queries_at_a_tenth():
    # naive seed formula: delta_26 = 8.05e-7 <= 1e-6 < delta_27 = 2.21e-6 -> (100 - 52) * 0.1
    assert naive_delta_i(0.1, 100, 26) <= 1e-6 < naive_delta_i(0.1, 100, 27)
    eps, delta = optimal_homogeneous_composition(0.1, 0.0, 100, 1e-6)
    assert eps == pytest.approx(4.8)
    assert delta == pytest.approx(naive_delta_i(0.1, 100, 26), rel=1e-8)
    # 4.8 < KOV bound 5.756 < DRV 6.308 < basic 10
    assert eps < kov_bound([(0.1, 0.0)] * 100, 1e-6)[0] < 6.308 < 10


def test_kov_optimal_with_per_mechanism_delta():
    # 1 - (1 - delta)^k (1 - delta_i) with delta = 1e-7, k = 100, delta_i = delta_26
    eps, delta = optimal_homogeneous_composition(0.1, 1e-7, 100, 1e-6)
    assert eps == pytest.approx(4.8)
    expected = 1 - (1 - 1e-7) ** 100 * (1 - naive_delta_i(0.1, 100, 26))
    assert delta == pytest.approx(expected, rel=1e-6)
    assert delta <= 100 * 1e-7 + 1e-6  # never worse than DRV's delta


def test_kov_optimal_large_k_no_overflow():
    # e^(k eps) = e^1000 would overflow a float; everything stays in log space.
    eps, delta = optimal_homogeneous_composition(0.1, 0.0, 10_000, 1e-6)
    assert math.isfinite(eps) and 0 < delta <= 1e-6
    bound = kov_bound([(0.1, 0.0)] * 10_000, 1e-6)[0]
    assert eps <= bound + 2 * 0.1  # grid optimum is within 2 eps of the continuous optimum
    assert eps < advanced_composition([(0.1, 0.0)] * 10_000, 1e-6)[0] < 1000.0


def test_optimal_edge_cases():
    assert optimal_homogeneous_composition(0.5, 0.0, 0, 1e-6) == (0.0, 0.0)
    assert optimal_homogeneous_composition(0.0, 1e-3, 2, 1e-6) == pytest.approx(
        (0.0, 1 - (1 - 1e-3) ** 2))
    # delta' too small for any i >= 1: falls back to k eps
    assert optimal_homogeneous_composition(1.0, 0.0, 4, 1e-12) == (4.0, 0.0)
    with pytest.raises(ProgrammingError):
        optimal_homogeneous_composition(0.1, 0.0, 10, 0.0)
    with pytest.raises(ProgrammingError):
        kov_delta(0.1, 10, 6)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(0.001, 2.0), k=st.integers(1, 200), exp=st.integers(1, 12))
def test_bounds_are_ordered(eps, k, exp):
    dp = 10.0**-exp
    charges = [(eps, 0.0)] * k
    basic = basic_composition(charges)[0]
    drv = advanced_composition(charges, dp)[0]
    kov = kov_bound(charges, dp)[0]
    opt = optimal_homogeneous_composition(eps, 0.0, k, dp)[0]
    assert kov <= basic * (1 + 1e-12) and kov <= drv * (1 + 1e-12)
    assert opt <= basic * (1 + 1e-12)
    assert opt <= kov + 2 * eps + 1e-9


def test_compose_homogeneous_and_heterogeneous():
    report = compose([(0.1, 0.0)] * 100, 1e-6)
    assert report.homogeneous and report.k == 100
    assert report.basic.epsilon == 10.0
    assert report.advanced.epsilon == pytest.approx(6.3082, abs=1e-4)
    assert report.kov_bound.epsilon == pytest.approx(5.7561, abs=1e-4)
    assert report.kov_optimal.epsilon == pytest.approx(4.8)
    assert "exact" in report.kov_optimal.note

    mixed = compose([(0.1, 0.0)] * 50 + [(0.2, 1e-8)] * 10, 1e-6)
    assert not mixed.homogeneous
    assert mixed.basic.epsilon == 7.0 and mixed.basic.delta == pytest.approx(1e-7)
    # the optimal bound is applied to 60 charges of (max eps, max delta) = (0.2, 1e-8)
    assert (mixed.kov_optimal.epsilon, mixed.kov_optimal.delta) == pytest.approx(
        optimal_homogeneous_composition(0.2, 1e-8, 60, 1e-6))
    assert "upper bound" in mixed.kov_optimal.note and "0.2" in mixed.kov_optimal.note
    assert mixed.kov_bound.epsilon == pytest.approx(kov_bound([(0.1, 0.0)] * 50
                                                              + [(0.2, 1e-8)] * 10, 1e-6)[0])

    empty = compose([], 1e-6)
    assert all(b.epsilon == 0.0 and b.delta == 0.0 for b in empty.bounds())
