"""GDP certificates by brute force (dpsql/noise/gdp.py, dpsql/accounting/curves.py).

For the pure COUNT templates of tests/bruteforce/test_soundness.py on tiny databases, this file
takes the Gaussian noise plans the engine would use (``mechanism='gaussian'``), enumerates
EVERY neighbour, and checks the release's charged mu against the truth:

* the neighbour's move, bin by bin, has squared L2 norm within the plan's ``l2_squared`` (the
  sensitivity the certificate is computed from);
* each moved bin's exact least mu (every vertex of the trade-off curve of N_Z(0, sigma^2)
  against its shift, in 60-digit arithmetic: tests/noise/gdp_reference.py), composed over the
  moved bins as GDP composes (sqrt of the sum of squares), stays below the charged mu.

A filtered unit count attains its certificate (to 1e-8), so a mu even slightly too small fails.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, example, given, settings

from dpsql.accounting.curves import release_curve
from dpsql.analysis.elastic import analyze
from dpsql.budget import Budget
from dpsql.noise.plan import plan_noise
from tests.bruteforce.test_curves import PLAIN, PURE_COUNTS
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
from tests.noise import gdp_reference as ref


def shifts(base: float | dict, other: float | dict) -> list[int]:
    if isinstance(base, dict):
        assert isinstance(other, dict)
        moved = [abs(base.get(k, 0.0) - other.get(k, 0.0)) for k in set(base) | set(other)]
    else:
        assert isinstance(other, float)
        moved = [abs(base - other)]
    assert all(m == int(m) for m in moved)
    return [int(m) for m in moved if m]


def check(template: Template, db: Database, epsilon: float) -> float:
    """Assert the charged mu bounds every neighbour's exact mu; return the largest ratio."""
    analysis = analyze(template.sql, exact_metadata(db, template.bounds))
    plans = plan_noise(analysis, Budget(epsilon, 1e-3, mechanism="gaussian"))
    (plan,) = plans
    assert plan.sigma is not None and plan.l2_squared is not None
    curve = release_curve(plans)
    assert curve is not None and curve.mu is not None
    q = Evaluator(template)
    q.evaluate([db, *(other for _, other in neighbours(db, template.tables))])
    base = q(db)
    worst = 0.0
    for what, other in neighbours(db, template.tables):
        moved = shifts(base, q(other))
        assert sum(d * d for d in moved) <= plan.l2_squared, (
            f"PRIVACY BUG: {template.sql}: neighbour {what} moves {moved}, beyond the L2 move "
            f"{plan.l2_squared} the GDP certificate assumes")
        real = math.sqrt(sum(float(ref.least_mu(plan.sigma, d)) ** 2 for d in moved))
        assert real <= curve.mu, (
            f"PRIVACY BUG: {template.sql} at epsilon {epsilon}\n  D = {db}\n  neighbour: {what}"
            f"\n  exact mu {real} > charged mu {curve.mu}")
        worst = max(worst, real / curve.mu)
    return worst


@pytest.mark.parametrize("name", PURE_COUNTS)
@settings(max_examples=2, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases())
@example(db=ALL_EQUAL)
def test_the_charged_mu_bounds_every_neighbours_exact_mu(name: str, db: Database):
    check(BY_NAME[name], db, 3.0)


def test_a_unit_count_attains_its_certificate():
    db: Database = {"a": ((1, 1), (1, 2), (3, 2)), "b": ((2, 2),), "c": ((1, 3),),
                    "s": ((1, -2),), "p": ((1, 1),)}
    assert check(PLAIN, db, 1.0) == pytest.approx(1.0, rel=1e-8)
