"""Release blocks by brute force (dpsql.analysis.blocks; docs/privacy.md, "Release blocks").

A query with aggregates in CTEs / derived tables / scalar subqueries makes one release per
block (and, with scalar subqueries compared in a private query, a final release whose
subqueries are parameters). For tiny databases (tests/bruteforce/test_soundness.py's universe),
every neighbour is enumerated and, on real DuckDB:

* each block's local sensitivity is at most the ES(0) its own analysis gives (and at most ES(1)
  at distance 1 for the smoothed join block), its exact query being the block as a query of
  its own (with the CTEs it reads);
* the final query of a two-phase request, with its parameter fixed to ANY constant, has local
  sensitivity at most its ES(0), which was computed without knowing the constant;
* the composed budget is the sum of the blocks' (basic composition): split_budget's shares
  give every private measurement the same epsilon, summing to the request's.
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
from dpsql.rewrite.parameters import PARAM_PREFIX
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

BOUNDS = (-1.0, 2.0)


@dataclass(frozen=True)
class Case:
    name: str
    sql: str
    tables: tuple[str, ...]  # the private tables the request reads


CASES = (
    Case("cte_count", "WITH t AS (SELECT COUNT(*) AS n FROM a WHERE a.y > 1) SELECT n FROM t",
         ("a",)),
    Case("cte_histogram",
         "WITH t AS (SELECT a.x, COUNT(*) AS n FROM a GROUP BY a.x) SELECT * FROM t", ("a",)),
    Case("block_over_a_join_cte",
         "WITH j AS (SELECT a.x AS x FROM a JOIN b ON a.x = b.x), "
         "t AS (SELECT COUNT(*) AS n FROM j) SELECT n * 2 AS m FROM t", ("a", "b")),
    Case("two_blocks_joined",
         "WITH u AS (SELECT s.x, SUM(s.v) AS total FROM s GROUP BY s.x), "
         "w AS (SELECT a.x, COUNT(*) AS n FROM a GROUP BY a.x) "
         "SELECT u.x, total, n FROM u JOIN w ON u.x = w.x", ("s", "a")),
    # j outputs x and y twice: DuckDB (and the analysis) read j.y as a.y, the first one
    Case("star_over_a_join_with_duplicate_names",
         "WITH j AS (SELECT * FROM a JOIN b ON a.x = b.x), "
         "t AS (SELECT COUNT(*) AS n FROM j JOIN c ON j.y = c.x) SELECT n FROM t",
         ("a", "b", "c")),
    Case("two_phase",
         "SELECT COUNT(*) AS n FROM a JOIN b ON a.x = b.x "
         "WHERE a.y < (SELECT COUNT(*) FROM c WHERE c.y > 1)", ("a", "b", "c")),
    Case("threshold_inside_a_block",
         "WITH t AS (SELECT a.x, COUNT(*) AS n FROM a WHERE a.y > "
         "(SELECT COUNT(*) FROM b) GROUP BY a.x) SELECT * FROM t", ("a", "b")),
    Case("two_phase_having",
         "SELECT s.x, SUM(s.v) AS total FROM s GROUP BY s.x "
         "HAVING SUM(s.v) > (SELECT SUM(s.v) * 0.5 FROM s)", ("s",)),
)
BY_NAME = {c.name: c for c in CASES}


def _releases(case: Case, db: Database) -> BlockQuery:
    request = analyze_request(case.sql, exact_metadata(db, BOUNDS))
    assert isinstance(request, BlockQuery)
    return request


def _exact_queries(analysis, constant: float | None = None) -> list[tuple[str, bool]]:
    """One DuckDB query per measurement of ``analysis``: (sql, histogram)."""
    out = []
    keys = [k.node.sql(dialect=DIALECT) for k in analysis.group_keys]
    for m in analysis.measurements:
        node = m.node.copy()
        if m.function == "SUM":
            lo, hi = m.bounds
            node = f"SUM(LEAST(GREATEST({node.this.sql(dialect=DIALECT)}, {lo}), {hi}))"
        else:
            node = node.sql(dialect=DIALECT)
        query = analysis.query.copy()
        for arg in ("order", "limit", "having"):
            query.set(arg, None)
        query.set("expressions", [])
        query = query.select(*keys, node, copy=False)
        sql = query.sql(dialect=DIALECT)
        if constant is not None:
            sql = re.sub(rf"\${PARAM_PREFIX}\d+", repr(constant), sql)
        out.append((sql, bool(keys)))
    return out


def _check_release(analysis, case: Case, db: Database, constant: float | None = None) -> None:
    others = [(what, other) for what, other in neighbours(db, case.tables)]
    for m, (sql, histogram) in zip(analysis.measurements, _exact_queries(analysis, constant),
                                   strict=True):
        es0 = m.sensitivity.at(0)
        answers = run_all(sql, [db, *(o for _, o in others)], histogram=histogram)
        base = answers[0]
        for (what, _), answer in zip(others, answers[1:], strict=True):
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
def test_each_release_has_local_sensitivity_at_most_its_es0(case: Case, db: Database):
    request = _releases(case, db)
    # a scalar used as a constant is a parameter (public): the bound must hold whatever noisy
    # value it takes
    for analysis in request.analyses:
        if PARAM_PREFIX in analysis.query.sql(dialect=DIALECT):
            for constant in (-1.5, 0.0, 1.0, 2.5, 7.0):
                _check_release(analysis, case, db, constant)
        else:
            _check_release(analysis, case, db)


@settings(max_examples=max(2, EXAMPLES // 2), deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases(SMALL_VALUES, lo=2, hi=2))
def test_the_join_block_at_distance_one_is_within_es1(db: Database):
    case = BY_NAME["block_over_a_join_cte"]
    (block,) = _releases(case, db).blocks
    (m,) = block.analysis.measurements
    es1 = m.sensitivity.at(1)
    assert m.sensitivity.depends_on_k
    ((sql, _),) = _exact_queries(block.analysis)
    at_most_one = [db, *(d1 for _, d1 in neighbours(db, case.tables, SMALL_VALUES))]
    for d1 in at_most_one:
        seconds = [d2 for _, d2 in neighbours(d1, case.tables, SMALL_VALUES)]
        answers = run_all(sql, [d1, *seconds], histogram=False)
        for answer in answers[1:]:
            assert change(answers[0], answer)[0] <= _tol(es1), (
                f"PRIVACY BUG at distance 1: {sql}\n  D' = {_fmt(d1)}: ES(1) = {es1}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_composed_budget_is_the_sum_over_the_blocks(case: Case):
    db = ALL_EQUAL
    request = _releases(case, db)
    budget = Budget(0.7, 1e-6)
    shares = split_budget(request.analyses, budget)
    plans = list(itertools.chain.from_iterable(
        plan_noise(a, b) for a, b in zip(request.analyses, shares, strict=True)))
    assert math.isclose(math.fsum(p.epsilon for p in plans), 0.7)
    assert math.fsum(p.delta for p in plans) <= 1e-6 * (1 + 1e-12)
    assert len({round(p.epsilon, 12) for p in plans}) == 1  # the same share each
