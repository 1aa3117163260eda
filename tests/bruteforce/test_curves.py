"""Privacy curves by brute force (dpsql/accounting/curves.py, docs/privacy.md section 5).

For the pure COUNT templates of tests/bruteforce/test_soundness.py (global sensitivity: public
joins, UNION ALL of one table, grouped subqueries, a histogram over a public key) on tiny
databases, this file takes the noise plan the engine would use (scale ES/epsilon of discrete
Laplace noise per bin), enumerates EVERY neighbour, and computes the exact Rényi divergence of
the two output laws, the sum over bins of the closed-form discrete Laplace divergence
(:func:`dpsql.accounting.renyi.discrete_laplace_rdp`, itself tested against the definition).
It must stay below the curve the ledger charges, at every order of the grid: the curve is what
the Rényi and zCDP filters add up, so a curve below the truth is an overspent budget.

A count of sensitivity 1 attains the curve (its privacy loss is exactly +-epsilon), so a bound
even 1% too small fails here. Sums are covered by their epsilon-DP argument (docs/privacy.md
section 4) and the bound over every epsilon-DP pair (tests/accounting/test_curves.py): their
shifts in grid steps are too long to sum over here.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings

from dpsql.accounting.curves import ALPHAS, release_curve
from dpsql.accounting.renyi import discrete_laplace_rdp
from dpsql.analysis.elastic import analyze
from dpsql.budget import Budget
from dpsql.noise.plan import plan_noise
from tests.bruteforce.test_soundness import (
    ALL_EQUAL,
    BY_NAME,
    DERANDOMIZE,
    Database,
    Evaluator,
    Template,
    databases,
    exact_metadata,
    neighbours,
)

PURE_COUNTS = ("public_join", "union_shared", "histogram_public_key", "nested_group_count",
               "nested_group_no_aggregate_count")
#: a plain filtered count (sensitivity 1): the curve is attained
PLAIN = Template("plain", "SELECT COUNT(*) FROM a WHERE a.y <> 2", ("a",), depends_on_k=False)
ORDERS = (1.25, 2.0, 8.0, 22.0, 256.0)


def divergence(alpha: float, scale: float, base: float | dict, other: float | dict) -> float:
    """D_alpha between the engine's outputs on two databases: independent discrete Laplace
    noise of ``scale`` per bin, the exact answers shifted by integers."""
    if isinstance(base, dict):
        assert isinstance(other, dict)
        shifts = [abs(base.get(k, 0.0) - other.get(k, 0.0)) for k in set(base) | set(other)]
    else:
        assert isinstance(other, float)
        shifts = [abs(base - other)]
    total = 0.0
    for s in shifts:
        assert s == int(s)
        total += discrete_laplace_rdp(alpha, scale, int(s))
    return total


def check(template: Template, db: Database, epsilon: float) -> float:
    """Assert the curve bounds every neighbour's divergence; return the largest ratio."""
    analysis = analyze(template.sql, exact_metadata(db, template.bounds))
    plans = plan_noise(analysis, Budget(epsilon, 0.0))
    (plan,) = plans
    assert plan.pure and plan.measurement.function == "COUNT"
    curve = release_curve(plans)
    assert curve is not None
    q = Evaluator(template)
    q.evaluate([db, *(other for _, other in neighbours(db, template.tables))])
    base = q(db)
    worst = 0.0
    for what, other in neighbours(db, template.tables):
        for alpha in ORDERS:
            real = divergence(alpha, plan.scale, base, q(other))
            bound = curve.at(alpha)
            assert real <= bound, (
                f"PRIVACY BUG: {template.sql} at epsilon {epsilon}, alpha {alpha}\n"
                f"  D = {db}\n  neighbour: {what}\n  divergence {real} > curve {bound}")
            worst = max(worst, real / bound if bound else 0.0)
    return worst


@pytest.mark.parametrize("name", PURE_COUNTS)
@pytest.mark.parametrize("epsilon", [0.3, 2.0])
@settings(max_examples=3, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases())
@example(db=ALL_EQUAL)
def test_the_curve_bounds_every_neighbours_divergence(name: str, epsilon: float, db: Database):
    check(BY_NAME[name], db, epsilon)


def test_a_unit_count_attains_the_curve():
    db: Database = {"a": ((1, 1), (1, 2), (3, 2)), "b": ((2, 2),), "c": ((1, 3),),
                    "s": ((1, -2),), "p": ((1, 1),)}
    assert check(PLAIN, db, 0.7) == pytest.approx(1.0, rel=1e-6)
    assert set(ORDERS) <= set(ALPHAS)
