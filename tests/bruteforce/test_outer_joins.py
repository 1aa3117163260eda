"""Soundness of the LEFT / RIGHT / FULL JOIN rules (rules.outer_join_stability,
rules.full_join_stability) by brute force.

The method of tests/bruteforce/test_soundness.py (whose universe, neighbours and DuckDB runner
this file reuses): for tiny databases D with their exact metadata, every neighbour D' (one row
of one private table replaced by any other tuple) changes the answer by at most ES(0), and for a
subset every neighbour of every neighbour by at most ES(1). The databases include unmatched
kept rows (null-extended in the output), duplicate keys on both sides, empty tables, and
self-joins (one change on both sides at once).

Histograms keep the NULL bin a null-extended group key makes (the engine drops it, as it is not
in the declared domain): a bin more can only make the observed change larger.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings

from dpsql.analysis.elastic import QueryAnalysis, analyze
from dpsql.errors import MissingMetricError, UnsupportedConstructError
from dpsql.metadata import Domain, Metadata
from tests.bruteforce.test_soundness import (
    ALL_EQUAL,
    DERANDOMIZE,
    EMPTY_TABLES,
    EXAMPLES,
    SMALL_VALUES,
    Database,
    Evaluator,
    Template,
    _clamped,
    _fmt,
    _tol,
    assert_within_es1,
    change,
    databases,
    exact_metadata,
    neighbours,
)

#: the filter that makes a moved null-extended-side row count twice: a matched row with
#: b.y = 1 and an unmatched kept row with a.y = 2 both pass; their replacements both fail
TWICE = "b.y = 1 OR (b.y IS NULL AND a.y = 2)"

TEMPLATES: tuple[Template, ...] = (
    Template("left_join", "SELECT COUNT(*) FROM a LEFT JOIN b ON a.x = b.x", ("a", "b")),
    Template("left_join_count_column", "SELECT COUNT(b.y) FROM a LEFT JOIN b ON a.x = b.x",
             ("a", "b")),
    Template("left_join_filter_twice",
             f"SELECT COUNT(*) FROM a LEFT JOIN b ON a.x = b.x WHERE {TWICE}", ("a", "b")),
    Template("left_join_two_keys",
             "SELECT COUNT(*) FROM a LEFT JOIN b ON a.x = b.x AND a.y = b.y "
             "WHERE b.x IS NULL OR a.y = 1", ("a", "b")),
    Template("left_join_extra_on",
             "SELECT COUNT(*) FROM a LEFT JOIN b ON a.x = b.y AND b.x <> 2 AND a.y >= 2 "
             "WHERE b.x IS NULL", ("a", "b")),
    Template("right_join",
             "SELECT COUNT(a.y) FROM b RIGHT JOIN a ON b.x = a.x WHERE b.y = 1 OR "
             "(b.y IS NULL AND a.y = 2)", ("a", "b")),
    Template("self_left_join", "SELECT COUNT(*) FROM a a1 LEFT JOIN a a2 ON a1.x = a2.y",
             ("a",)),
    Template("self_left_join_filter",
             "SELECT COUNT(*) FROM a a1 LEFT JOIN a a2 ON a1.x = a2.y "
             "WHERE a2.x = 1 OR (a2.x IS NULL AND a1.y = 2)", ("a",)),
    Template("self_left_join_cross",
             "SELECT COUNT(*) FROM a a1 LEFT JOIN a a2 ON a1.x = a2.y "
             "WHERE a1.x = 1 OR (a2.x IS NULL AND a1.x = 2)", ("a",)),
    Template("self_left_join_cte",
             "WITH t AS (SELECT a.x, a.y FROM a WHERE a.y <> 3) "
             "SELECT COUNT(t2.x) FROM t t1 LEFT JOIN t t2 ON t1.x = t2.y", ("a",)),
    Template("self_right_join",
             "SELECT COUNT(*) FROM a a1 RIGHT JOIN a a2 ON a1.y = a2.x WHERE a1.y IS NULL",
             ("a",)),
    Template("public_kept_side", "SELECT COUNT(b.x) FROM p LEFT JOIN b ON p.x = b.x", ("b",),
             depends_on_k=False),
    Template("public_kept_side_filter",
             "SELECT COUNT(*) FROM p LEFT JOIN b ON p.x = b.x "
             "WHERE b.y = 1 OR (b.y IS NULL AND p.g = 2)", ("b",), depends_on_k=False),
    Template("public_null_side", "SELECT COUNT(*) FROM a LEFT JOIN p ON a.x = p.x", ("a",),
             depends_on_k=False),
    Template("histogram_kept_key",
             "SELECT a.x, COUNT(b.y) FROM a LEFT JOIN b ON a.y = b.y GROUP BY a.x", ("a", "b"),
             histogram=True),
    Template("histogram_null_side_key",
             "SELECT b.y, COUNT(*) FROM a LEFT JOIN b ON a.x = b.x GROUP BY b.y", ("a", "b"),
             histogram=True),
    # grouped by the key every private table is joined on: the keyed rule's constant 2
    # (dpsql.analysis.keyed_groups; tests/bruteforce/test_keyed_derived.py)
    Template("count_per_parent_zero",
             "SELECT COUNT(*) FROM (SELECT a.x, COUNT(b.y) AS n FROM a LEFT JOIN b "
             "ON a.x = b.x GROUP BY a.x) t WHERE t.n = 0", ("a", "b"), depends_on_k=False),
    Template("left_then_inner_on_kept_key",
             "SELECT COUNT(*) FROM a LEFT JOIN b ON a.x = b.x JOIN c ON a.y = c.y",
             ("a", "b", "c")),
    Template("left_then_public_on_null_side",
             "SELECT COUNT(*) FROM a LEFT JOIN b ON a.x = b.x JOIN p ON b.y = p.x", ("a", "b")),
    Template("two_left_joins",
             "SELECT COUNT(*) FROM a LEFT JOIN b ON a.x = b.x LEFT JOIN c ON a.y = c.x "
             "WHERE b.y IS NULL OR c.y IS NULL", ("a", "b", "c")),
    Template("left_join_in_derived_table",
             "SELECT COUNT(*) FROM (SELECT a.x, b.y FROM a LEFT JOIN b ON a.y = b.x) t "
             "JOIN c ON t.x = c.x", ("a", "b", "c")),
    Template("comma_then_left_join",
             "SELECT COUNT(*) FROM a, c LEFT JOIN b ON c.x = b.x WHERE a.y = c.y", ("a", "b", "c")),
    # p links to nothing before b: the analysis joins it after the LEFT JOIN, (a ⟕ b) ⋈ p,
    # which has the rows of DuckDB's (a × p) ⟕ b filtered by the WHERE (ON reads a and b only)
    Template("deferred_comma_past_left_join",
             "SELECT COUNT(*) FROM a, p LEFT JOIN b ON a.x = b.x WHERE a.y = b.y AND p.x = b.y",
             ("a", "b")),
    # --- FULL OUTER JOIN: both sides kept and null-extended
    Template("full_join", "SELECT COUNT(*) FROM a FULL JOIN b ON a.x = b.x", ("a", "b")),
    Template("full_join_filter",
             "SELECT COUNT(*) FROM a FULL OUTER JOIN b ON a.x = b.x WHERE (a.y = 1 AND b.y = 1) "
             "OR (b.y IS NULL AND a.y = 2) OR (a.y IS NULL AND b.y = 2)", ("a", "b")),
    Template("full_join_count_column_extra_on",
             "SELECT COUNT(a.y) FROM a FULL JOIN b ON a.x = b.y AND b.x <> 2", ("a", "b")),
    Template("self_full_join_cross",
             "SELECT COUNT(*) FROM a a1 FULL JOIN a a2 ON a1.x = a2.y "
             "WHERE a1.x = 1 OR a2.x IS NULL OR a1.x IS NULL", ("a",)),
    Template("full_join_public", "SELECT COUNT(*) FROM p FULL JOIN b ON p.x = b.x", ("b",),
             depends_on_k=False),
    Template("histogram_full_join",
             "SELECT a.x, COUNT(*) FROM a FULL JOIN b ON a.y = b.y GROUP BY a.x", ("a", "b"),
             histogram=True),
    Template("left_join_sum", "SELECT SUM(s.v) FROM a LEFT JOIN s ON a.x = s.x", ("a", "s"),
             bounds=(-1.0, 2.0),
             reference=f"SELECT SUM({_clamped('s.v')}) FROM a LEFT JOIN s ON a.x = s.x"),
)

#: Templates for the distance-2 check (ES(1) >= LS at every neighbour).
DISTANCE_TWO = ("left_join_filter_twice", "self_left_join_cross", "self_left_join_filter",
                "right_join", "two_left_joins", "count_per_parent_zero", "full_join_filter",
                "self_full_join_cross")
BY_NAME = {t.name: t for t in TEMPLATES}


def outer_metadata(db: Database, bounds: tuple[float, float] | None = None) -> Metadata:
    """test_soundness's exact metadata, with b.y releasable too (a null-extended group key)."""
    md = exact_metadata(db, bounds)
    b = md.tables["b"]
    y = replace(b.columns["y"], releasable=True, domain=Domain(values=(1, 2, 3)))
    return replace(md, tables={**md.tables, "b": replace(b, columns={**b.columns, "y": y})})


def analysed(template: Template, db: Database) -> QueryAnalysis:
    analysis = analyze(template.sql, outer_metadata(db, template.bounds))
    assert len(analysis.measurements) == 1, "templates release exactly one aggregate"
    es = analysis.measurements[0].sensitivity
    assert es.depends_on_k == template.depends_on_k, str(es)
    return analysis


#: kept rows without a match next to duplicated keys on both sides
UNMATCHED: Database = {"a": ((1, 1), (1, 2), (2, 2), (3, 1)), "b": ((1, 1), (1, 1)),
                       "c": ((2, 2),), "s": ((1, 3), (3, -2)), "p": ((1, 1), (2, 2))}
#: a self-join where one change adds rows on both sides that match each other (S1·S2)
SELF_CROSS: Database = {"a": ((1, 1), (2, 1), (3, 2)), "b": (), "c": (), "s": (), "p": ()}

#: the full self-join's worst case: (2, 3) moved to (1, 1)
SELF_FULL: Database = {"a": ((1, 1), (2, 3), (3, 2)), "b": (), "c": (), "s": (), "p": ()}


def test_every_template_is_accepted():
    for t in TEMPLATES:
        analysed(t, UNMATCHED)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.name)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases())
@example(db=ALL_EQUAL)
@example(db=EMPTY_TABLES)
@example(db=UNMATCHED)
@example(db=SELF_CROSS)
@example(db=SELF_FULL)
def test_local_sensitivity_at_most_es0(template: Template, db: Database):
    es0 = analysed(template, db).measurements[0].sensitivity.at(0)
    q = Evaluator(template)
    q.evaluate([db, *(other for _, other in neighbours(db, template.tables))])
    base = q(db)
    for what, other in neighbours(db, template.tables):
        per_bin, l1 = change(base, q(other))
        assert per_bin <= _tol(es0) and l1 <= _tol(es0), (
            f"PRIVACY BUG: {template.sql}\n  D = {_fmt(db)}\n  neighbour: {what}\n"
            f"  q(D) = {base}, q(D') = {q(other)}: change {per_bin} (L1 {l1}) > ES(0) = {es0}"
        )


@pytest.mark.parametrize("name", DISTANCE_TWO)
@settings(max_examples=max(2, EXAMPLES // 2), deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases(SMALL_VALUES, lo=2, hi=2))
def test_local_sensitivity_at_distance_one_at_most_es1(name: str, db: Database):
    template = BY_NAME[name]
    assert_within_es1(template, db, analysed(template, db).measurements[0].sensitivity.at(1))


def _ls(template: Template, db: Database) -> float:
    q = Evaluator(template)
    return max(change(q(db), q(n))[0] for _, n in neighbours(db, template.tables))


def test_null_extended_side_change_is_attained_twice():
    """The factor 2 of 2·mf(a)·S(r2) is needed: one moved b row turns a matched kept row into a
    null-extended one and an unmatched one into a matched one, and the filter counts both."""
    db: Database = {"a": ((1, 1), (2, 2)), "b": ((1, 1),), "c": (), "s": (), "p": ()}
    t = BY_NAME["left_join_filter_twice"]
    # mf(a.x) = 1, mf(b.x) = 1: max(2 * 1 * 1, max(1, 1) * 1) = 2
    assert analysed(t, db).measurements[0].sensitivity.at(0) == 2.0
    assert Evaluator(t)(db) == 2.0  # (1,1)+(1,1) with b.y = 1, and (2,2) unmatched with a.y = 2
    assert _ls(t, db) == 2.0  # b's row to (2, 2): both rows fail the filter


def test_self_left_join_bound_is_attained():
    """The shared-ancestor rule's 2·mf(x) + max(1, mf(y)) + 1 is reached: a1 = (3, 2) moves to
    (1, 1), which matches the two y = 1 rows and itself (the S1·S2 term), and (2, 1) loses its
    only match; the filter counts the 5 added rows and none of the 2 removed ones."""
    db = SELF_CROSS
    t = BY_NAME["self_left_join_cross"]
    # mf(a1.x) = 1, mf(a2.y) = 2: 2 * 1 + 2 + 1 = 5
    assert analysed(t, db).measurements[0].sensitivity.at(0) == 5.0
    assert _ls(t, db) == 5.0


def test_full_join_bound_is_attained():
    """(max(1, mf(a.x)) + mf(a.x))·S(b) = 4 is reached: b's row leaves the two a rows of key 1
    (null-extending them) for the two unmatched a rows of key 2; the filter counts the 4
    removed rows and none of the 4 added."""
    db: Database = {"a": ((1, 1), (1, 1), (2, 2), (2, 2)), "b": ((1, 1),), "c": (), "s": (),
                    "p": ()}
    t = BY_NAME["full_join_filter"]
    # mf(a.x) = 2, mf(b.x) = 1: max((2 + 2) * 1, (1 + 1) * 1) = 4
    assert analysed(t, db).measurements[0].sensitivity.at(0) == 4.0
    assert Evaluator(t)(db) == 4.0
    assert _ls(t, db) == 4.0


def test_self_full_join_bound_is_attained():
    """2·mf(x) + 2·mf(y) + 1 = 5 is reached: the moved row matches itself and (1, 1) on both
    sides, and (3, 2) loses its match on both sides; the filter counts the 5 added rows."""
    t = BY_NAME["self_full_join_cross"]
    assert analysed(t, SELF_FULL).measurements[0].sensitivity.at(0) == 5.0
    assert Evaluator(t)(SELF_FULL) == 1.0
    assert _ls(t, SELF_FULL) == 5.0


@pytest.mark.parametrize("sql", [
    # a private join on a null-extended column: its mf is unknown
    "SELECT COUNT(*) FROM a LEFT JOIN b ON a.x = b.x JOIN c ON b.y = c.y",
    "SELECT COUNT(*) FROM a LEFT JOIN b ON a.x = b.x WHERE b.y IN (SELECT c.x FROM c)",
    "SELECT COUNT(*) FROM b RIGHT JOIN a ON a.x = b.x JOIN c ON b.y = c.y",
    "SELECT COUNT(*) FROM a FULL JOIN b ON a.x = b.x JOIN c ON a.y = c.y",
])
def test_null_extended_columns_have_no_max_frequency(sql: str):
    with pytest.raises(MissingMetricError, match="null-extended"):
        analyze(sql, outer_metadata(UNMATCHED))


def test_outer_join_keys_come_from_on_only():
    # a WHERE equality does not key a LEFT JOIN (it filters the joined rows)
    with pytest.raises(UnsupportedConstructError, match="no equality"):
        analyze("SELECT COUNT(*) FROM a LEFT JOIN b ON a.y > 1 WHERE a.x = b.x",
                outer_metadata(UNMATCHED))
    # ON reading a table joined only later (comma joins are reordered): refused
    with pytest.raises(UnsupportedConstructError, match="join order"):
        analyze("SELECT COUNT(*) FROM a, c LEFT JOIN b ON c.x = b.x WHERE a.y = b.y",
                outer_metadata(UNMATCHED))
