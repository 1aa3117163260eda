"""Gaussian noise plans (dpsql.noise.gaussian_plan): exact parameters and public refusals."""

import math

import pytest

from dpsql.analysis.elastic import analyze
from dpsql.budget import Budget
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.metadata import Column, Domain, Metadata, Table
from dpsql.noise import gaussian, gaussian_plan
from dpsql.noise.plan import plan_noise, split_budget
from tests.typed_metadata import typed


def shop(mf_customer: int = 100) -> Metadata:
    return typed(Metadata(tables={
        "orders": Table("orders", {
            "customer_id": Column("customer_id", mf_customer),
            "region": Column("region", releasable=True, domain=Domain(values=("n", "s", "e"))),
            "cost": Column("cost", bounds=(-5.0, 1000.0)),
        }),
        "recs": Table("recs", {"customer_id": Column("customer_id", 250)}),
        "regions": Table("regions", {"region": Column("region", 1)}, public=True),
    }))


def gauss(epsilon: float, delta: float, calibration: str = "analytic") -> Budget:
    return Budget(epsilon, delta, "gaussian", calibration)


def test_scalar_count_sigma_is_the_exact_one_dimensional_accountant():
    (plan,) = plan_noise(analyze("SELECT COUNT(*) FROM orders", shop()), gauss(0.5, 1e-6))
    assert plan.sigma == gaussian.discrete_sigma(1, 1, 0.5, 1e-6)
    assert plan.scale == plan.sigma and plan.granularity is None
    assert (plan.epsilon, plan.delta, plan.calibration) == (0.5, 1e-6, "analytic")
    # certified, and not loose: 2^-12 below is not
    assert gaussian.certified_delta(plan.sigma, 1, 1, 0.5) <= 1e-6
    assert gaussian.certified_delta(plan.sigma * (1 - 2**-11), 1, 1, 0.5) > 1e-6


def test_histogram_count_uses_l2_squared_two_s_squared():
    sql = "SELECT region, COUNT(*) FROM orders GROUP BY region"
    (plan,) = plan_noise(analyze(sql, shop()), gauss(1.0, 1e-6))
    # ES = 2S = 2 per bin (L1); the Gaussian uses l2^2 = 2 S^2 = 2, linf = S = 1
    assert plan.sigma == gaussian.discrete_sigma(2, 1, 1.0, 1e-6)
    assert plan.sigma < gaussian.discrete_sigma(4, 2, 1.0, 1e-6)  # what (2S)^2 would cost
    assert gaussian_plan.count_sigma(6.0, True, 1.0, 1e-6, "analytic")[1:] == (18, 3)


def test_budget_is_split_by_basic_composition_including_delta():
    sql = "SELECT COUNT(*), SUM(cost) FROM orders"
    count, total = plan_noise(analyze(sql, shop()), gauss(0.8, 1e-6))
    assert (count.epsilon, count.delta) == (total.epsilon, total.delta) == (0.4, 5e-7)
    assert count.sigma == gaussian.discrete_sigma(1, 1, 0.4, 5e-7)


def test_sum_is_snapped_and_its_integer_sensitivity_absorbs_the_grid():
    (plan,) = plan_noise(analyze("SELECT SUM(cost) FROM orders", shop()), gauss(0.3, 1e-6))
    es, g = 1005.0, plan.granularity
    assert g == 2.0 ** (10 - 8)  # 2^(ceil(log2 1005) - 8): 1005 spans 251.25 steps
    linf = math.ceil(es / g) + 1
    assert linf == 253
    assert plan.sigma == gaussian.discrete_sigma(linf * linf, linf, 0.3, 1e-6)
    assert plan.scale == plan.sigma * g
    # the grid costs at most 2^-7 of sigma against the exact accountant at ES itself
    continuous = es * gaussian.analytic_sigma(1.0, 0.3, 1e-6)
    assert continuous < plan.scale <= continuous * (1 + 2**-7) * 1.01
    for eps in (1.0, 0.01):  # at every epsilon
        (p,) = plan_noise(analyze("SELECT SUM(cost) FROM orders", shop()), gauss(eps, 1e-6))
        assert p.scale <= es * gaussian.analytic_sigma(1.0, eps, 1e-6) * (1 + 2**-7) * 1.01


def test_grouped_sum_sensitivities():
    sigma, g, l2, linf = gaussian_plan.sum_sigma(2 * 1005.0, 1005.0, True, 1.0, 1e-6,
                                                 "analytic")
    assert linf == math.ceil(1005.0 / g) + 1
    assert l2 == linf * math.ceil(2 * 1005.0 / g + 2)
    assert sigma == gaussian.discrete_sigma(l2, linf, 1.0, 1e-6)


def test_classical_calibration_is_the_seed_formula_when_certified():
    (plan,) = plan_noise(analyze("SELECT COUNT(*) FROM orders", shop()),
                         gauss(0.5, 1e-6, "classical"))
    assert plan.sigma == pytest.approx(math.sqrt(2 * math.log(1.25 / 1e-6)) / 0.5, rel=1e-15)
    assert plan.calibration == "classical"
    assert plan.sigma > gaussian.discrete_sigma(1, 1, 0.5, 1e-6)  # looser than analytic


def test_classical_never_goes_below_the_certified_sigma():
    # at a huge delta the classical sigma is below what the discrete accountant certifies
    sigma = gaussian_plan.calibrated_sigma(1, 1, 0.9, 0.4, "classical")
    assert gaussian.certified_delta(sigma, 1, 1, 0.9) <= 0.4


@pytest.mark.parametrize("budget, sql, message", [
    (gauss(1.0, 0.0), "SELECT COUNT(*) FROM orders", "needs delta > 0"),
    (gauss(1.0, 1e-6), "SELECT COUNT(*) FROM orders o JOIN recs r "
     "ON o.customer_id = r.customer_id", "joins private tables"),
    (gauss(1.0, 1e-6, "classical"), "SELECT COUNT(*) FROM orders", "epsilon < 1"),
    # 2 measurements: 1.6/2 = 0.8 each is fine, 2.2/2 = 1.1 is not
    (gauss(2.2, 1e-6, "classical"), "SELECT COUNT(*), SUM(cost) FROM orders", "1.1"),
    (gauss(1e-9, 1e-12), "SELECT COUNT(*) FROM orders", "too large"),
])
def test_refusals_are_public_and_name_the_fix(budget, sql, message):
    with pytest.raises(NotSupportedError, match=message):
        plan_noise(analyze(sql, shop()), budget)
    # the same refusal at any max frequency: it depends on the SQL and the budget alone
    with pytest.raises(NotSupportedError) as other:
        plan_noise(analyze(sql, shop(7)), budget)
    assert message in str(other.value)


def test_classical_below_one_per_measurement_is_accepted():
    plans = plan_noise(analyze("SELECT COUNT(*), SUM(cost) FROM orders", shop()),
                       gauss(1.6, 1e-6, "classical"))
    assert all(p.calibration == "classical" for p in plans)


def test_public_queries_need_no_delta():
    (plan,) = plan_noise(analyze("SELECT COUNT(*) FROM regions", shop()), gauss(1.0, 0.0))
    assert plan.scale == 0 and plan.sigma is None


def test_split_budget_keeps_the_mechanism_and_gives_every_measurement_delta():
    a = analyze("SELECT COUNT(*) FROM orders", shop())
    b = analyze("SELECT COUNT(*), SUM(cost) FROM orders", shop())
    shares = split_budget([a, b], gauss(0.9, 3e-6, "classical"))
    assert [s.mechanism for s in shares if s] == ["gaussian", "gaussian"]
    assert [s.calibration for s in shares if s] == ["classical", "classical"]
    assert [s.delta for s in shares if s] == pytest.approx([1e-6, 2e-6])
    assert [s.epsilon for s in shares if s] == pytest.approx([0.3, 0.6])
    laplace = split_budget([a, b], Budget(0.9, 3e-6))
    assert [s.delta for s in laplace if s] == [0.0, 0.0]


def test_budget_validates_the_choices():
    with pytest.raises(ProgrammingError, match="mechanism='gaussian'"):
        Budget(1.0, 0.0, "gauss")
    with pytest.raises(ProgrammingError, match="calibration='classical'"):
        Budget(1.0, 0.0, "gaussian", "exact")
    assert Budget.of(None, 0.0, mechanism="gaussian") is None
    with pytest.raises(ProgrammingError):
        Budget.of(None, 0.0, mechanism="nope")


def test_under_a_privacy_unit_a_bin_moves_by_c_rows_not_half_the_sensitivity():
    """A two-stage release (dpsql.units.analysis): ES = kappa C w is an L1 bound over at most
    kappa bins, each moving by C w (add / remove one unit), not the row-level histogram's
    ES / 2 per bin. With kappa = 1 and C = 3 the row-level rule gave l2^2 = 8, linf = 2 for a
    bin one unit moves by 3: sigma certified for a smaller move than the one that happens."""
    assert gaussian_plan.count_sigma(3.0, True, 1.0, 1e-6, "analytic", 1)[1:] == (9, 3)
    assert gaussian_plan.count_sigma(300.0, True, 1.0, 1e-6, "analytic", 3)[1:] == (30000, 100)
    _, g, l2, linf = gaussian_plan.sum_sigma(12.0, 4.0, True, 1.0, 1e-6, "analytic", 1)
    assert linf == math.ceil(12.0 / g) + 1 and l2 == linf * linf
    assert (l2 ** 0.5) * g >= 12.0  # the clamp C w = 12 of the one bin
    _, g, l2, linf = gaussian_plan.sum_sigma(1200.0, 4.0, True, 1.0, 1e-6, "analytic", 3)
    assert linf == math.ceil(400.0 / g) + 1 and l2 == 3 * linf * linf
