"""Brute-force soundness of SUM / AVG over expressions, FILTER and the variance measurements.

The universe, neighbour enumeration and batched DuckDB runner are tests/bruteforce/
test_soundness.py's (private tables a, b, s; values {1, 2, 3}, s.v in {-2, 0, 1, 3}). The
metadata adds bounds: s.v [-1, 2] and s.x [1, 2] (so stored values fall outside both and the
clamp matters); a.x and a.y have none.

Unlike test_soundness.py, which checks a hand-written reference, each query here is the SQL
dpsql EXECUTES: the rewrite passes up to the clamps (parameters, totality, NOT IN, clamps) run
over the analysed query, and the result -- the group keys ``__k<i>`` and every measurement
``__m<j>``, with each computed argument made total and clamped as a whole -- runs on D and on
every neighbour. Each measurement's change (per bin, and L1 over bins) must be at most its own
ES(0); for a few templates, at every neighbour D' too, at most ES(1) (distance 2).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import HealthCheck, example, given, settings

from dpsql.analysis.elastic import QueryAnalysis, analyze
from dpsql.analysis.parse import DIALECT
from dpsql.metadata import Metadata
from dpsql.rewrite import fixed_point
from dpsql.rewrite.context import RewriteContext
from dpsql.rewrite.domains import domain_relations
from dpsql.rewrite.plan import PASSES
from tests.bruteforce.batch import run_many
from tests.bruteforce.test_soundness import (
    _CONN,
    ALL_EQUAL,
    DERANDOMIZE,
    EMPTY_TABLES,
    EXAMPLES,
    SCHEMA,
    SMALL_VALUES,
    Database,
    _fmt,
    _tol,
    databases,
    exact_metadata,
    neighbours,
)

BOUNDS = {("s", "v"): (-1.0, 2.0), ("s", "x"): (1.0, 2.0)}

#: (name, SQL, private tables it reads)
TEMPLATES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("sum_arithmetic", "SELECT SUM(s.v * 2 - s.x) FROM s", ("s",)),
    ("sum_case", "SELECT SUM(CASE WHEN s.x > 1 THEN s.v ELSE -s.x END) FROM s", ("s",)),
    ("sum_case_without_else_join",
     "SELECT SUM(CASE WHEN a.y = 2 THEN s.v * s.x END) FROM s JOIN a ON s.x = a.x",
     ("s", "a")),
    ("sum_division", "SELECT SUM(s.v / (s.x + 1)) FROM s", ("s",)),
    ("sum_division_by_a_constant", "SELECT SUM(s.v / -2) FROM s WHERE s.x <> 3", ("s",)),
    ("sum_analyst_clamp_of_unbounded",
     "SELECT SUM(LEAST(GREATEST(a.y * 2 - a.x, 0), 4)) FROM a", ("a",)),
    ("sum_greatest_least_unbounded",
     "SELECT SUM(GREATEST(LEAST(a.x - a.y, 1), -1)) FROM a JOIN b ON a.x = b.y", ("a", "b")),
    ("sum_coalesce_abs", "SELECT SUM(COALESCE(ABS(s.v), 0) * 3) FROM s", ("s",)),
    # every value overflows INTEGER: TRY makes it NULL, which SUM skips
    ("sum_overflowing_cast", "SELECT SUM(CAST(s.v * 1500000000 AS INTEGER)) FROM s", ("s",)),
    ("avg_expression", "SELECT AVG(ABS(s.v) + 1) FROM s", ("s",)),
    # a value computed in a derived table and summed outside (TPC-H Q7-Q9's volume / amount):
    # its bounds come out of the subquery, and the clamp is on the summed column
    ("sum_of_a_derived_tables_value",
     "SELECT SUM(d.w) FROM (SELECT s.v * 2 - s.x AS w, s.x FROM s WHERE s.x <> 3) d", ("s",)),
    ("sum_of_a_derived_value_over_a_join",
     "SELECT SUM(d.w) FROM (SELECT s.v * s.x AS w FROM s JOIN a ON s.x = a.x) d",
     ("s", "a")),
    ("count_filter", "SELECT COUNT(*) FILTER (WHERE s.v > 0) FROM s", ("s",)),
    ("count_filter_join",
     "SELECT COUNT(a.y) FILTER (WHERE a.y <> b.y) FROM a JOIN b ON a.x = b.x", ("a", "b")),
    ("count_distinct_filter",
     "SELECT COUNT(DISTINCT a.y) FILTER (WHERE a.x <> 2) FROM a", ("a",)),
    ("sum_filter", "SELECT SUM(s.v) FILTER (WHERE s.x <> 2) FROM s", ("s",)),
    ("avg_filter_histogram",
     "SELECT s.x, AVG(s.v) FILTER (WHERE s.v >= 0) FROM s GROUP BY s.x", ("s",)),
    ("variance", "SELECT VAR_POP(s.v), STDDEV(s.v * 2) FROM s", ("s",)),
    ("variance_self_join", "SELECT VAR_SAMP(s.v) FROM s JOIN s s2 ON s.x = s2.x", ("s",)),
    ("variance_histogram_filter",
     "SELECT s.x, VARIANCE(s.v) FILTER (WHERE s.v <> 0) FROM s GROUP BY s.x", ("s",)),
)
BY_NAME = {t[0]: t for t in TEMPLATES}
DISTANCE_TWO = ("sum_case_without_else_join", "variance_self_join", "count_filter_join")


def metadata(db: Database) -> Metadata:
    """test_soundness's exact metadata (true max frequencies) with :data:`BOUNDS`."""
    md = exact_metadata(db)
    tables = {}
    for name, table in md.tables.items():
        cols = {c: dataclasses.replace(col, bounds=BOUNDS.get((name, c)))
                for c, col in table.columns.items()}
        tables[name] = dataclasses.replace(table, columns=cols)
    return Metadata(tables=tables)


def executed_sql(analysis: QueryAnalysis, md: Metadata) -> str:
    """The measurements as dpsql executes them (the rewrite passes before the domain join,
    which only drops bins outside the declared domain)."""
    ctx = RewriteContext(analysis, md, None)
    tree = analysis.query
    for rewrite in PASSES:
        if rewrite is domain_relations:
            break
        tree = rewrite(tree, ctx=ctx)
    return tree.sql(dialect=DIALECT)


Answer = dict[tuple, tuple[float, ...]]


def answers(sql: str, dbs: list[Database], n_keys: int) -> list[Answer]:
    """Per database: bin (the key values) -> the measurements (NULL sums count as 0)."""
    out = []
    for rows in run_many(_CONN, sql, dbs, SCHEMA):
        out.append({tuple(r[:n_keys]): tuple(float(v or 0) for v in r[n_keys:]) for r in rows})
    return out


def check(name: str, sql: str, db: Database, others: list[tuple[str, Database]],
          at: int, base_db: Database | None = None) -> None:
    """Every measurement moves by at most its ES(at) between ``base_db`` (default ``db``) and
    each of ``others``; the analysis uses ``db``'s exact metadata."""
    md = metadata(db)
    analysis = analyze(sql, md)
    es = [m.sensitivity.at(at) for m in analysis.measurements]
    n_keys = len(analysis.group_keys)
    base, *rest = answers(executed_sql(analysis, md), [base_db or db, *(o for _, o in others)],
                          n_keys)
    for (what, _), answer in zip(others, rest, strict=True):
        for j, bound in enumerate(es):
            diffs = [abs(base.get(k, (0.0,) * len(es))[j] - answer.get(k, (0.0,) * len(es))[j])
                     for k in set(base) | set(answer)]
            per_bin, l1 = max(diffs, default=0.0), sum(diffs)
            assert per_bin <= _tol(bound) and l1 <= _tol(bound), (
                f"PRIVACY BUG ({name}, {analysis.measurements[j].label}): {sql}\n"
                f"  D = {_fmt(base_db or db)}\n  neighbour: {what}\n  q(D) = {base}\n"
                f"  q(D') = {answer}: change {per_bin} (L1 {l1}) > ES({at}) = {bound}")


def test_every_template_is_accepted_with_the_expected_measurements():
    counts = {name: len(analyze(sql, metadata(ALL_EQUAL)).measurements)
              for name, sql, _ in TEMPLATES}
    assert counts["avg_expression"] == 2  # SUM and COUNT
    assert counts["variance"] == 6  # COUNT and two centred sums, for each argument
    assert counts["variance_histogram_filter"] == 3
    assert counts["sum_arithmetic"] == counts["count_filter"] == 1


def _clamps_into(sql: str, bounds: tuple[float, float]) -> bool:
    """Whether ``sql`` clamps a fixed-point SUM into ``bounds`` (dpsql.rewrite.fixed_point: the
    bounds in steps 2^-k, k = exponent(max |bound|))."""
    k = fixed_point.exponent(max(abs(b) for b in bounds))
    lo, hi = fixed_point.grid_bounds(*bounds, k)
    return f"< {lo} THEN {lo}" in sql and f"> {hi} THEN {hi}" in sql


def test_a_derived_tables_value_keeps_its_bounds():
    """s.v * 2 - s.x computed in a derived table and summed outside: [-4, 3], ES(0) = 4 + 3
    (as summed in place), and the executed SUM clamps the derived column."""
    md = metadata(ALL_EQUAL)
    analysis = analyze(BY_NAME["sum_of_a_derived_tables_value"][1], md)
    (m,) = analysis.measurements
    assert m.bounds == (-4.0, 3.0) and m.sensitivity.at(0) == 7.0
    sql = executed_sql(analysis, md)
    assert _clamps_into(sql, (-4.0, 3.0))


def test_the_clamp_wraps_the_computed_value():
    """The executed SUM clamps the whole per-row value into the derived bounds, each
    sub-expression made total: the reference below is what the clamp computes."""
    md = metadata(ALL_EQUAL)
    sql = executed_sql(analyze(BY_NAME["sum_arithmetic"][1], md), md)
    # s.v * 2 - s.x over v in [-1, 2], x in [1, 2]: [-4, 3]
    assert "TRY(s.v * 2 - s.x)" in sql and _clamps_into(sql, (-4.0, 3.0))
    db: Database = {**ALL_EQUAL, "s": ((1, 3), (3, -2), (2, 1))}
    # rows: 3*2-1 = 5 -> 3; -2*2-3 = -7 -> -4; 1*2-2 = 0
    (got,) = answers(sql, [db], 0)
    assert got == {(): (-1.0,)}


def test_negating_the_least_integer_becomes_null_and_is_skipped():
    """-x fails on INT32's least value in DuckDB ("Overflow in negation"): the rewrite wraps a
    negated column in TRY like any other arithmetic, so that row counts as NULL."""
    md = metadata(ALL_EQUAL)
    sql = executed_sql(analyze("SELECT SUM(-s.v) FROM s", md), md)
    assert "TRY(-s.v)" in sql
    db: Database = {**ALL_EQUAL, "s": ((1, -2147483648), (1, 1))}
    (got,) = answers(sql, [db], 0)
    assert got == {(): (-1.0,)}


def test_overflow_becomes_null_and_is_skipped():
    md = metadata(ALL_EQUAL)
    sql = executed_sql(analyze(BY_NAME["sum_overflowing_cast"][1], md), md)
    db: Database = {**ALL_EQUAL, "s": ((1, 3), (1, 1), (1, 0))}
    # 3 * 1.5e9 fits no INTEGER (NULL, skipped); 1.5e9 and 0 do
    (got,) = answers(sql, [db], 0)
    assert got == {(): (1.5e9,)}


@pytest.mark.parametrize("name", [t[0] for t in TEMPLATES])
@settings(max_examples=max(3, EXAMPLES // 2), deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases(hi=4))
@example(db=ALL_EQUAL)
@example(db=EMPTY_TABLES)
def test_each_measurement_moves_at_most_es0(name: str, db: Database):
    _, sql, tables = BY_NAME[name]
    check(name, sql, db, list(neighbours(db, tables)), 0)


@pytest.mark.parametrize("name", DISTANCE_TWO)
@settings(max_examples=2, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases(SMALL_VALUES, lo=2, hi=2))
def test_each_measurement_at_distance_one_moves_at_most_es1(name: str, db: Database):
    _, sql, tables = BY_NAME[name]
    for _, d1 in itertools.chain([("D", db)], neighbours(db, tables, SMALL_VALUES)):
        check(name, sql, db, list(neighbours(d1, tables, SMALL_VALUES)), 1, base_db=d1)
