"""dpsql.accounting.curves: a release's privacy curve from its noise plans.

Exact values (randomised response's Rényi divergence in 60-digit decimal arithmetic, the
discrete Laplace law's exact divergence at shift 1), the bound over every epsilon-DP pair
(random pmf pairs with bounded ratio, and the two-point pair that attains it, so a bound that
is too small fails), and the curves of real plans: pure Laplace, Gaussian, and the releases
that have none.
"""

from __future__ import annotations

import math
import random
from decimal import Decimal, localcontext

import pytest

from dpsql.accounting.curves import ALPHAS, ROUND_UP, PrivacyCurve, pure_dp_rdp, release_curve
from dpsql.accounting.renyi import discrete_laplace_rdp
from dpsql.analysis.elastic import analyze
from dpsql.budget import Budget
from dpsql.metadata import Column, Metadata, Table
from dpsql.noise.partition import plan_with_selection
from dpsql.noise.plan import plan_noise
from tests.typed_metadata import typed


def _rr_decimal(alpha: float, epsilon: float) -> float:
    with localcontext() as ctx:
        ctx.prec = 60
        a, e = Decimal(alpha), Decimal(epsilon)
        inner = ((a * e).exp() + ((1 - a) * e).exp()) / (1 + e.exp())
        return float(inner.ln() / (a - 1))


@pytest.mark.parametrize("alpha", [1.25, 2.0, 22.0, 256.0])
@pytest.mark.parametrize("epsilon", [1e-9, 1e-4, 0.02, 1.0, 10.0])
def test_pure_dp_rdp_is_randomised_response_to_full_precision(alpha, epsilon):
    # the log-space form has no cancellation: right to 1e-12 even at epsilon 1e-9
    assert pure_dp_rdp(alpha, epsilon) == pytest.approx(_rr_decimal(alpha, epsilon), rel=1e-12)


@pytest.mark.parametrize("alpha", [1.5, 4.0, 22.0, 128.0])
@pytest.mark.parametrize("epsilon", [0.01, 0.3, 2.0])
def test_it_is_the_exact_discrete_laplace_divergence_of_a_unit_count(alpha, epsilon):
    assert pure_dp_rdp(alpha, epsilon) == pytest.approx(
        discrete_laplace_rdp(alpha, 1.0 / epsilon, 1), rel=1e-9)


def _rdp(alpha: float, p: list[float], q: list[float]) -> float:
    return math.log(math.fsum(pi ** alpha * qi ** (1 - alpha) for pi, qi in zip(p, q,
                                                                             strict=True))) / (
        alpha - 1)


def test_no_epsilon_dp_pair_exceeds_the_bound_and_randomised_response_attains_it():
    rng = random.Random(18)
    epsilon = 0.7
    for _ in range(300):
        n = rng.randint(2, 6)
        q = [rng.random() + 0.05 for _ in range(n)]
        total = sum(q)
        q = [x / total for x in q]
        # a P with P/Q in [e^-eps, e^eps]: tilt Q, then mix toward Q until the ratio holds
        p = [x * math.exp(rng.uniform(-epsilon, epsilon)) for x in q]
        total = sum(p)
        p = [x / total for x in p]
        ratio = max(max(a / b, b / a) for a, b in zip(p, q, strict=True))
        if math.log(ratio) > epsilon:
            continue
        for alpha in (1.5, 3.0, 22.0):
            assert _rdp(alpha, p, q) <= pure_dp_rdp(alpha, epsilon) * (1 + 1e-12)
    w = math.exp(epsilon) / (1 + math.exp(epsilon))
    for alpha in (1.5, 3.0, 22.0):  # randomised response: equality, so 1% less would fail
        assert _rdp(alpha, [w, 1 - w], [1 - w, w]) == pytest.approx(
            pure_dp_rdp(alpha, epsilon), rel=1e-12)


def _md(public_u: bool = False) -> Metadata:
    t = Table("t", {
        "k": Column("k", 3, releasable=True, partition_selection=True),
        "v": Column("v", bounds=(0.0, 10.0)),
    })
    u = Table("u", {"k": Column("k", 2)}, public=public_u)
    return typed(Metadata(tables={"t": t, "u": u}))


def _plans(sql: str, budget: Budget):
    return plan_noise(analyze(sql, _md()), budget)


def test_a_pure_laplace_release_adds_its_measurements_or_takes_the_sum():
    plans = _plans("SELECT COUNT(*), SUM(v) FROM t", Budget(1.0, 0.0))
    curve = release_curve(plans)
    assert curve is not None and curve.alphas == ALPHAS
    for alpha, tau in zip(ALPHAS, curve.rdp, strict=True):
        each = 2 * pure_dp_rdp(alpha, 0.5)
        assert tau == pytest.approx(min(each, pure_dp_rdp(alpha, 1.0)) * ROUND_UP, rel=1e-15)
        assert tau >= min(each, pure_dp_rdp(alpha, 1.0))  # rounded up, never down
    assert curve.rho == pytest.approx(2 * 0.5 ** 2 / 2 * ROUND_UP, rel=1e-15)
    # at small orders the measurements' sum is the smaller bound (composition pays off)
    assert curve.at(1.25) < pure_dp_rdp(1.25, 1.0)


def test_a_gaussian_release_is_rho_zcdp_with_rho_from_its_l2_move():
    plans = _plans("SELECT COUNT(*) FROM t", Budget(1.0, 1e-6, "gaussian"))
    (p,) = plans
    assert p.l2_squared == 1 and p.sigma is not None
    curve = release_curve(plans)
    assert curve is not None
    rho = 1 / (2 * p.sigma ** 2)
    assert curve.rho == pytest.approx(rho, rel=1e-8) and curve.rho >= rho
    assert curve.at(22.0) >= 22.0 * rho
    assert curve.mu is not None and curve.mu >= 1 / p.sigma  # the GDP certificate


def test_without_a_charge_the_gdp_certificate_is_skipped_and_nothing_else_changes():
    plans = _plans("SELECT COUNT(*) FROM t", Budget(1.0, 1e-6, "gaussian"))
    full, bare = release_curve(plans), release_curve(plans, with_mu=False)
    assert full is not None and bare is not None and full.mu is not None and bare.mu is None
    assert (bare.rho, bare.rdp) == (full.rho, full.rdp)


def test_releases_without_a_curve():
    joined = _plans("SELECT COUNT(*) FROM t JOIN u ON t.k = u.k", Budget(1.0, 1e-6))
    assert not joined[0].pure and release_curve(joined) is None
    analysis = analyze("SELECT k, COUNT(*) FROM t GROUP BY k", _md())
    plans, selection = plan_with_selection(analysis, Budget(1.0, 1e-6))
    assert selection is not None and release_curve(plans, selection) is None


def test_a_public_release_has_the_zero_curve():
    curve = release_curve(plan_noise(analyze("SELECT COUNT(*) FROM u", _md(True)), None))
    assert curve is not None and curve.rho == 0 and set(curve.rdp) == {0.0}


def test_json_round_trip_is_exact_and_damage_is_refused():
    curve = release_curve(_plans("SELECT COUNT(*) FROM t", Budget(0.1, 0.0)))
    assert curve is not None and PrivacyCurve.from_json(curve.to_json()) == curve
    for bad in ('{"alphas": [2.0], "rdp": [-1.0], "rho": 0}', '{"alphas": [1.0], "rdp": [1.0], '
                '"rho": 0}', '{"alphas": [2.0], "rdp": [], "rho": 0}', '{"rdp": []}'):
        with pytest.raises((ValueError, KeyError)):
            PrivacyCurve.from_json(bad)
