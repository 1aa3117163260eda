"""Correlated scalar subqueries by brute force (dpsql.analysis.correlated; docs/privacy.md,
"Correlated scalar subqueries").

A subquery correlated by one equality ``inner.k = outer.c`` is released in two phases: a
histogram GROUP BY k (phase 1), then the outer query reading the noisy histogram as a public
lookup of c (phase 2). For tiny databases (tests/bruteforce/test_soundness.py's universe),
every neighbour is enumerated and, on real DuckDB:

* phase 1: each of the histogram's measurements moves by at most its ES(0) per bin and in L1
  (its exact query is the histogram as a query of its own, the public restriction included);
* phase 2: with the lookup fixed to ANY function of the key (several, NULL values included,
  written by dpsql.rewrite.lookups itself), the outer query's local sensitivity is at most the
  ES(0) its analysis computed with a parameter in place of the subquery (and at most ES(1) at
  distance 1 where that analysis is smoothed);
* the two phases compose: the request's budget is the sum of the measurements' shares.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, settings

from dpsql.analysis.blocks import BlockQuery, analyze_request
from dpsql.analysis.parse import DIALECT
from dpsql.budget import Budget
from dpsql.noise.plan import plan_noise, split_budget
from dpsql.rewrite.lookups import lookup_case
from dpsql.rewrite.parameters import PARAM_PREFIX
from tests.bruteforce.test_blocks import BOUNDS, _exact_queries
from tests.bruteforce.test_soundness import (
    ALL_EQUAL,
    DERANDOMIZE,
    EMPTY_TABLES,
    EXAMPLES,
    SMALL_VALUES,
    Database,
    _fmt,
    _tol,
    change,
    databases,
    exact_metadata,
    neighbours,
    run_all,
)


@dataclass(frozen=True)
class Case:
    name: str
    sql: str
    tables: tuple[str, ...]  # the private tables the request reads


CASES = (
    # TPC-H Q17's shape: the outer column is public (p.x), the histogram restricted to p.g = 1
    Case("q17_public_outer_column",
         "SELECT SUM(s.v) AS total FROM s, p WHERE p.x = s.x AND p.g = 1 AND s.v < "
         "(SELECT AVG(s2.v) FROM s AS s2 WHERE s2.x = p.x)", ("s",)),
    # the same table in both phases, the outer column private
    Case("self_correlated",
         "SELECT SUM(s.v) AS total FROM s WHERE s.v >= "
         "(SELECT AVG(s2.v) * 0.5 FROM s AS s2 WHERE s2.x = s.x)", ("s",)),
    Case("count_histogram",
         "SELECT COUNT(*) AS n FROM a WHERE a.y > (SELECT COUNT(*) FROM s WHERE s.x = a.x "
         "AND s.v > 0)", ("a", "s")),
    # a smoothed outer query (a join of private tables): ES(1) is checked too
    Case("smoothed_outer_join",
         "SELECT COUNT(*) AS n FROM a JOIN b ON a.x = b.x WHERE a.y < "
         "(SELECT SUM(s.v) FROM s WHERE s.x = b.x)", ("a", "b", "s")),
)
BY_NAME = {c.name: c for c in CASES}

#: lookup functions of the key (values 1, 2, 3): varying, with NULLs (a bin whose noisy count
#: is <= 0 has a NULL AVG) and a missing key, none at all (a constant is tests/bruteforce/
#: test_blocks.py's two-phase case)
LOOKUPS: tuple[dict[int, float | None], ...] = (
    {1: -1.5, 2: 2.5, 3: 1.0}, {1: 3.0, 2: None}, {},
)


def _request(case: Case, db: Database) -> BlockQuery:
    request = analyze_request(case.sql, exact_metadata(db, BOUNDS))
    assert isinstance(request, BlockQuery) and request.final is not None
    (block,) = request.blocks
    assert block.lookup is not None and block.param is not None
    return request


def _with_lookup(sql: str, request: BlockQuery, values: dict[int, float | None]) -> str:
    (block,) = request.blocks
    assert block.lookup is not None
    case = lookup_case(block.lookup, sorted(values.items())).sql(dialect=DIALECT)
    return re.sub(rf"\${PARAM_PREFIX}{block.param}\b", f"({case})", sql)


def _check(sql: str, es0: float, case: Case, db: Database, histogram: bool) -> None:
    others = list(neighbours(db, case.tables))
    base, *answers = run_all(sql, [db, *(o for _, o in others)], histogram=histogram)
    for (what, _), answer in zip(others, answers, strict=True):
        per_bin, l1 = change(base, answer)
        assert per_bin <= _tol(es0) and l1 <= _tol(es0), (
            f"PRIVACY BUG: {case.sql}\n  release: {sql}\n  D = {_fmt(db)}\n"
            f"  neighbour: {what}\n  q(D) = {base}, q(D') = {answer} > ES(0) = {es0}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases())
@example(db=ALL_EQUAL)
@example(db=EMPTY_TABLES)
def test_both_phases_have_local_sensitivity_at_most_their_es0(case: Case, db: Database):
    request = _request(case, db)
    (block,) = request.blocks
    histogram = block.analysis
    assert [k.node.sql(dialect=DIALECT) for k in histogram.group_keys] == [
        re.search(r"WHERE (\w+\.x) = ", case.sql.split("(SELECT", 1)[1]).group(1)]
    for m, (sql, grouped) in zip(histogram.measurements, _exact_queries(histogram),
                                 strict=True):
        assert grouped
        _check(sql, m.sensitivity.at(0), case, db, histogram=True)
    final = request.final
    assert final is not None
    for m, (sql, grouped) in zip(final.measurements, _exact_queries(final), strict=True):
        for values in LOOKUPS:
            _check(_with_lookup(sql, request, values), m.sensitivity.at(0), case, db, grouped)


@settings(max_examples=max(2, EXAMPLES // 4), deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases(SMALL_VALUES, lo=2, hi=2))
def test_the_smoothed_final_query_at_distance_one_is_within_es1(db: Database):
    case = BY_NAME["smoothed_outer_join"]
    request = _request(case, db)
    assert request.final is not None
    (m,) = request.final.measurements
    assert m.sensitivity.depends_on_k
    es1 = m.sensitivity.at(1)
    ((sql, _),) = _exact_queries(request.final)
    for values in LOOKUPS[:2]:
        fixed = _with_lookup(sql, request, values)
        for d1 in [db, *(d for _, d in neighbours(db, case.tables, SMALL_VALUES))]:
            seconds = [d2 for _, d2 in neighbours(d1, case.tables, SMALL_VALUES)]
            base, *answers = run_all(fixed, [d1, *seconds], histogram=False)
            for answer in answers:
                assert change(base, answer)[0] <= _tol(es1), (
                    f"PRIVACY BUG at distance 1: {fixed}\n  D' = {_fmt(d1)}: ES(1) = {es1}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_two_phases_compose_to_the_request_budget(case: Case):
    request = _request(case, ALL_EQUAL)
    budget = Budget(0.9, 1e-6)
    shares = split_budget(request.analyses, budget)
    plans = list(itertools.chain.from_iterable(
        plan_noise(a, b) for a, b in zip(request.analyses, shares, strict=True)))
    assert math.isclose(math.fsum(p.epsilon for p in plans), 0.9)
    assert math.fsum(p.delta for p in plans) <= 1e-6 * (1 + 1e-12)
    assert len({round(p.epsilon, 12) for p in plans}) == 1  # the same share each
