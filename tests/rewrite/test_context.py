"""What the rewrite passes share (dpsql/rewrite/context.py): the analysed query's node classes
and CTE names, listed once, let a pass skip a walk only where it could find nothing."""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.elastic import analyze
from dpsql.analysis.parse import DIALECT
from dpsql.rewrite.context import RewriteContext
from dpsql.rewrite.not_in import not_in_as_not_exists, null_safe_not_in
from dpsql.rewrite.parameters import number_parameters
from tests.analysis.test_elastic import MD

PLAIN = "SELECT COUNT(*) FROM orders WHERE quantity > 2"
NOT_IN = ("WITH c AS (SELECT customer_id FROM customers) SELECT COUNT(*) FROM orders "
          "WHERE customer_id NOT IN (SELECT customer_id FROM c) AND quantity > ?")


def test_node_classes_and_cte_names_of_the_analysed_query():
    plain = RewriteContext(analyze(PLAIN, MD), MD)
    assert plain.may_contain(exp.Column) and plain.may_contain(exp.Binary)  # subclasses count
    assert not plain.may_contain(exp.Not, exp.Placeholder, exp.CTE)
    assert plain.cte_names() == frozenset()
    rich = RewriteContext(analyze(NOT_IN, MD), MD)
    assert rich.may_contain(exp.Not) and rich.may_contain(exp.Placeholder)
    assert rich.cte_names() == frozenset({"c"})


def test_passes_with_a_context_write_what_they_write_without():
    for sql in (PLAIN, NOT_IN):
        out = []
        for ctx_of in (lambda a: None, lambda a: RewriteContext(a, MD)):
            analysis = analyze(sql, MD)
            ctx = ctx_of(analysis)
            tree = number_parameters(analysis.query, ctx=ctx).copy()
            tree = null_safe_not_in(not_in_as_not_exists(tree, ctx=ctx), ctx=ctx)
            out.append(tree.sql(dialect=DIALECT))
        assert out[0] == out[1]
    assert "NOT EXISTS" not in out[0] and "__dpsql_notin0" in out[0]  # the NOT IN was rewritten
