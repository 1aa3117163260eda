"""The Gaussian plan's sensitivities by brute force (dpsql.noise.gaussian_plan).

The discrete Gaussian is certified for integer vectors moving between neighbours by at most
``linf`` per coordinate and ``l2_squared`` in squared L2 norm. For every pure template of
tests/bruteforce/test_soundness.py (and a few more), on random tiny databases, this file
enumerates EVERY neighbour (change one row of one private table) on real DuckDB and checks the
integer vector the noise is added to:

* counts: the exact count change per bin;
* sums: the change of the snapped value ``R((v + c)/g)`` on the plan's grid g, for several
  offsets c (a real sum may sit anywhere relative to the grid).

Both must satisfy ``max |t| <= linf`` and ``sum t^2 <= l2_squared``, also between neighbours
of neighbours (ES does not depend on k on this path, so ES(1) = ES(0)). A histogram's L2 claim
(2 S^2 rather than (2S)^2) is what makes Gaussian histograms worth having; a test shows it is
attained.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, example, given, settings

from dpsql.budget import Budget
from dpsql.noise import gaussian_plan
from dpsql.noise.plan import plan_noise
from tests.bruteforce.test_soundness import (
    ALL_EQUAL,
    DERANDOMIZE,
    EXAMPLES,
    SMALL_VALUES,
    TEMPLATES,
    Database,
    Evaluator,
    Template,
    _clamped,
    _fmt,
    analysed,
    databases,
    neighbours,
)

EXTRA = (
    Template("count_pure", "SELECT COUNT(*) FROM a WHERE a.x <> 2", ("a",), depends_on_k=False),
    Template("histogram_pure", "SELECT a.x, COUNT(*) FROM a GROUP BY a.x", ("a",),
             histogram=True, depends_on_k=False),
    Template("histogram_sum_positive", "SELECT s.x, SUM(s.v) FROM s GROUP BY s.x", ("s",),
             histogram=True, bounds=(0.5, 3.0),
             reference=f"SELECT s.x, SUM({_clamped('s.v')}) FROM s GROUP BY s.x",
             depends_on_k=False),
)
PURE = tuple(t for t in TEMPLATES if not t.depends_on_k) + EXTRA
BUDGET = Budget(1.0, 1e-6, "gaussian")
#: where a real sum may sit relative to its grid: fractions of a grid step
OFFSETS = (0.0, 0.25, 0.49, 0.5, 0.51, 0.999)


def _limits(template: Template, db: Database) -> tuple[int, int, float | None]:
    """(linf, l2_squared, grid) the plan certifies for ``template`` on ``db``'s metadata."""
    analysis = analysed(template, db)
    m = analysis.measurements[0]
    es = m.sensitivity.at(0)
    grouped = bool(analysis.group_keys)
    (plan,) = plan_noise(analysis, BUDGET)
    if m.function == "COUNT":
        sigma, l2, linf = gaussian_plan.count_sigma(es, grouped, 1.0, 1e-6, "analytic")
        assert plan.sigma == sigma and plan.granularity is None
        return linf, l2, None
    assert m.bounds is not None
    width = max(m.bounds[1], 0.0) - min(m.bounds[0], 0.0)
    sigma, g, l2, linf = gaussian_plan.sum_sigma(es, width, grouped, 1.0, 1e-6, "analytic")
    assert plan.sigma == sigma and plan.granularity == g
    return linf, l2, g


def _steps(a: float | dict, b: float | dict, grid: float | None, offset: float) -> list[int]:
    """The integer vector the noise is added to, moved from ``a`` to ``b``."""
    def snap(v: float) -> int:
        return int(v) if grid is None else math.floor((v + offset * grid) / grid + 0.5)

    if isinstance(a, dict):
        assert isinstance(b, dict)
        return [snap(b.get(k, 0.0)) - snap(a.get(k, 0.0)) for k in set(a) | set(b)]
    assert isinstance(b, float)
    return [snap(b) - snap(a)]


def _check(template: Template, base: float | dict, other: float | dict, limits, what: str):
    linf, l2, grid = limits
    for offset in (OFFSETS if grid is not None else (0.0,)):
        t = _steps(base, other, grid, offset)
        assert max(map(abs, t), default=0) <= linf and sum(x * x for x in t) <= l2, (
            f"PRIVACY BUG (Gaussian): {template.sql}\n  {what}\n  q = {base} -> {other}, "
            f"grid {grid}, offset {offset}: steps {t} exceed linf {linf} / l2^2 {l2}")


@pytest.mark.parametrize("template", PURE, ids=lambda t: t.name)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases())
@example(db=ALL_EQUAL)
def test_integer_moves_within_certified_sensitivities(template: Template, db: Database):
    limits = _limits(template, db)
    q = Evaluator(template)
    q.evaluate([db, *(other for _, other in neighbours(db, template.tables))])
    base = q(db)
    for what, other in neighbours(db, template.tables):
        _check(template, base, q(other), limits, f"D = {_fmt(db)}, neighbour {what}")


@pytest.mark.parametrize("template", PURE, ids=lambda t: t.name)
@settings(max_examples=max(2, EXAMPLES // 2), deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases(SMALL_VALUES, lo=2, hi=2))
def test_at_distance_one(template: Template, db: Database):
    limits = _limits(template, db)
    q = Evaluator(template)
    at_most_one = [db, *(d1 for _, d1 in neighbours(db, template.tables, SMALL_VALUES))]
    q.evaluate([*at_most_one, *(d2 for d1 in at_most_one
                                for _, d2 in neighbours(d1, template.tables, SMALL_VALUES))])
    for what, d1 in itertools.chain([("D itself", db)],
                                    neighbours(db, template.tables, SMALL_VALUES)):
        for what2, d2 in neighbours(d1, template.tables, SMALL_VALUES):
            _check(template, q(d1), q(d2), limits, f"D = {_fmt(db)}, {what}, then {what2}")


def test_histogram_l2_bound_is_attained():
    """One row moving between two bins moves two counts by 1 each: squared L2 norm 2 = 2 S^2
    (S = 1), the plan's l2_squared exactly -- where Laplace pays L1 = 2S."""
    db: Database = {"a": ((1, 1), (2, 1)), "b": (), "c": (), "s": (), "p": ()}
    template = EXTRA[1]
    linf, l2, _ = _limits(template, db)
    assert (linf, l2) == (1, 2)
    q = Evaluator(template)
    worst = max(sum(x * x for x in _steps(q(db), q(n), None, 0.0))
                for _, n in neighbours(db, template.tables))
    assert worst == l2
