"""Passes: ``NOT IN (subquery)`` with NOT EXISTS semantics for the subquery's values (one NULL
in the subquery must not empty the result), NULL for a NULL probe value, and back to a
null-safe NOT IN where the comparison stayed plain.

SQL's ``x NOT IN (S)`` is UNKNOWN when S holds a NULL (a value of one row of S decides every
row's answer: unbounded sensitivity), and for a NULL x it is UNKNOWN unless S is empty (S's
emptiness decides). dpsql answers ``x NOT IN (S)`` as: NULL when x is NULL, else whether no
non-NULL value of S equals x. Each row's answer is then a function of its own x and of which
values S holds, as NOT EXISTS's is, and it is SQL's whenever S holds no NULL and is not empty
(QA round 7: a NULL x was counted as "not in", 2,727 rows more than DuckDB)."""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.keytypes import COMPARABLE_KEY, is_marked_comparable
from dpsql.analysis.trees import copy_tree
from dpsql.rewrite.context import RewriteContext


def not_in_as_not_exists(query: exp.Expression, *,
                         ctx: RewriteContext | None) -> exp.Expression:
    """``x NOT IN (SELECT y ...)`` -> ``NOT EXISTS (SELECT 1 FROM (...) s WHERE s.y = x)``.

    Innermost first: the probe holds a copy of the subquery, so a NOT IN nested inside it must
    already be rewritten when the copy is taken (else it keeps plain NOT IN semantics, and one
    NULL in its subquery would empty it).
    """
    if ctx is not None and not (ctx.may_contain(exp.Not) and ctx.may_contain(exp.In)):
        return query
    targets = [node for node in query.find_all(exp.Not, bfs=False)
               if isinstance(node.this.unnest(), exp.In)
               and node.this.unnest().args.get("query") is not None]
    # aliases in text order, rewrites from the last (innermost) back
    for n, not_node in reversed(list(enumerate(targets))):
        inner = not_node.this.unnest()
        sub = inner.args["query"]
        sub = sub.this if isinstance(sub, exp.Subquery) else sub
        alias = f"__dpsql_notin{n}"
        column = sub.selects[0].alias_or_name
        probe_eq = exp.EQ(this=exp.column(column, alias), expression=copy_tree(inner.this))
        if is_marked_comparable(inner):  # the analysis proved the IN key's types comparable
            probe_eq.meta[COMPARABLE_KEY] = True
        probe = exp.select("1").from_(exp.alias_(copy_tree(sub).subquery(), alias)).where(probe_eq)
        not_node.set("this", exp.Exists(this=probe))
        # a NULL probe value: NULL, as SQL answers it whenever the subquery has a row
        guard = exp.Case(ifs=[exp.If(this=exp.Is(this=copy_tree(inner.this),
                                                 expression=exp.Null()), true=exp.Null())])
        not_node.replace(guard)
        guard.set("default", not_node)
    return query


def null_safe_not_in(query: exp.Expression, *,
                     ctx: RewriteContext | None) -> exp.Expression:
    """The probes of :func:`not_in_as_not_exists` whose comparison stayed plain (cannot fail,
    see :func:`.totality.make_total`) -> ``NOT x IN (SELECT s.y FROM (...) s WHERE s.y IS NOT
    NULL)``, in place; run after :func:`.totality.total_query`.

    The same semantics (a NULL y matches nothing; a NULL x never reaches the probe, its guard
    answers NULL: :func:`not_in_as_not_exists`), but DuckDB runs
    it as one mark join, while it decorrelates the NOT EXISTS through a duplicate-eliminated join
    over the outer rows (TPC-H Q16 at SF10: ~1.3x the time of the whole query). A probe whose
    comparison is wrapped in TRY stays NOT EXISTS: IN has no place for the TRY.
    """
    if ctx is not None and not (ctx.may_contain(exp.Not) and ctx.may_contain(exp.In)):
        return query  # no NOT IN was rewritten: there is no probe
    for exists in list(query.find_all(exp.Exists)):
        probe, not_node = exists.this, exists.parent
        if not (isinstance(not_node, exp.Not) and isinstance(probe, exp.Select)):
            continue
        source = probe.args.get("from_")
        eq = probe.args.get("where")
        eq = eq.this if eq is not None else None
        if not (source is not None and isinstance(source.this, exp.Subquery)
                and source.this.alias.startswith("__dpsql_notin") and isinstance(eq, exp.EQ)
                and isinstance(eq.this, exp.Column) and eq.this.table == source.this.alias):
            continue
        column, x = eq.this, eq.expression
        values = exp.Select(
            expressions=[copy_tree(column)], from_=copy_tree(source), where=exp.Where(
                this=exp.Not(this=exp.Is(this=copy_tree(column), expression=exp.Null()))))
        not_node.replace(exp.Paren(this=exp.Not(
            this=exp.In(this=copy_tree(x), query=exp.Subquery(this=values)))))
    return query
