"""dpsql/rewrite/plan.py: the exact SQL with and without the clamps the stored data make the
identity, generated once through markers, is what generating both trees in full gives, even
when the analyst's text holds a clamp's or a marker's text."""

from __future__ import annotations

import pytest

from dpsql.analysis.elastic import analyze
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.trees import copy_tree
from dpsql.execute import layout
from dpsql.metadata import loads_metadata
from dpsql.rewrite import plan as plan_module
from dpsql.rewrite.context import RewriteContext
from dpsql.rewrite.plan import PASSES, plan_execution

MD = loads_metadata("""
tables:
  t:
    columns:
      price: {bounds: [0, 100], type: 'DECIMAL(15,2)'}
      n: {bounds: [-10, 20], type: INTEGER}
      x: {bounds: [0, 10], type: DOUBLE}
      s: {type: VARCHAR}
      g: {releasable: true, type: VARCHAR, domain: {values: [a, b]}}
""")


class InBounds:
    """Stored data that fit every bound (StoredData, dpsql.rewrite.context)."""

    def in_bounds(self, table, column, bounds):
        return True

    def domain_table(self, table, column):
        return None


def _twice(sql: str) -> tuple[str, str]:
    """(with every clamp, without the removable ones), each tree generated in full."""
    analysis = analyze(sql, MD)
    ctx = RewriteContext(analysis, MD, InBounds())
    tree = analysis.query
    for rewrite in PASSES:
        tree = rewrite(tree, ctx=ctx)
    domains = [d.sql(dialect=DIALECT) for d in ctx.domains if d is not None]
    canonical = layout.write(tree.sql(dialect=DIALECT), domains, len(analysis.measurements))
    for clamp, column in ctx.removable:
        clamp.replace(copy_tree(column))
    exact = layout.write(tree.sql(dialect=DIALECT), domains, len(analysis.measurements))
    return canonical.bins_sql, exact.bins_sql


QUERIES = [
    "SELECT SUM(price) AS s FROM t",
    "SELECT g, SUM(n) AS a, AVG(price) AS b, SUM(x) AS c FROM t GROUP BY g",
    # the analyst writes a clamp's very text, and a marker's
    "SELECT g, SUM(n) AS a FROM t WHERE (CASE WHEN t.n < -10 THEN -10 WHEN t.n > 20 THEN 20 "
    "ELSE t.n END) > 0 AND s <> '__dpsql_clamp_0_00000000000000000' GROUP BY g",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_one_generation_gives_both_statements(sql):
    canonical, exact = _twice(sql)
    plan = plan_execution(analyze(sql, MD), MD, InBounds())
    assert canonical != exact and "CASE WHEN t.n < -10" not in exact.split("WHERE")[0]
    assert (plan.normal_form, plan.exact_sql) == (canonical, exact)
    # without stored facts nothing is removable: one statement
    assert plan_execution(analyze(sql, MD), MD).exact_sql == canonical


def test_a_marker_found_more_than_once_falls_back_to_two_generations(monkeypatch):
    monkeypatch.setattr(plan_module.secrets, "token_hex", lambda n: "0" * 17)
    sql = QUERIES[2]  # holds the marker's text in a string literal
    plan = plan_execution(analyze(sql, MD), MD, InBounds())
    assert (plan.normal_form, plan.exact_sql) == _twice(sql)


def test_native_clamp_bounds_are_memoised_per_kind_and_exact_bound():
    from dpsql.rewrite import clamps
    from dpsql.rewrite.safe_compare import Kind

    dec = Kind("decimal", 8, 2)
    for bounds, kind in [((0.0, 10.0), dec), ((-0.0, 10.0), dec), ((0, 10), dec),
                         ((-2.5, 0.25), dec), ((0.0, 0.1), dec), ((0.0, 5.0), Kind("int", 9)),
                         ((-0.0, 5.0), Kind("int", 9)), ((0.0, 1e12), Kind("int", 9)),
                         ((0.0, 1.0), Kind("decimal", 19, 2))]:
        first = clamps._native_bounds(bounds, kind)
        again = clamps._native_bounds(bounds, kind)
        texts = clamps._native_texts(bounds, kind)
        if texts is None:
            assert first is None and again is None
            continue
        assert first is not None and again is not None
        assert [n.sql() for n in first] == [n.sql() for n in again]
        assert [n.sql() for n in first] == list(texts)
        assert all(a is not b for a, b in zip(first, again, strict=True))  # fresh nodes
    # -0.0 and 0.0 are different keys: a DECIMAL's -0.0 is written '-0.00'
    assert clamps._native_texts((-0.0, 1.0), dec) == ("-0.00", "1.00")
    assert [n.sql() for n in clamps._native_bounds((0.0, 1.0), dec)] == ["0.00", "1.00"]
