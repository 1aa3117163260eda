"""A subquery that is one constant, written as the constant (QA round 7's refusals:
``status IN (SELECT 'returned')`` was refused as "a query without FROM reads no declared
table", ``quantity = (SELECT 2)`` as a subquery no rule covers).

Contract of :func:`inline_constant_subqueries`: a scalar subquery ``(SELECT c)`` becomes
``c``, and ``x IN (SELECT c)`` becomes ``x IN (c)``, where the subquery is a bare SELECT of
one projection -- no FROM, WHERE, GROUP BY, HAVING, ORDER BY, LIMIT, DISTINCT or WITH -- and
``c`` a literal (a number, possibly negated, a string or TRUE / FALSE). That subquery returns
exactly one row holding ``c``, so SQL answers both forms alike on every row. NULL is left as a
subquery: dpsql answers ``NOT IN (SELECT NULL)`` with NOT EXISTS semantics, which a list does
not have. The SQL alone decides; nothing else changes.
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["inline_constant_subqueries"]

#: clauses that make a SELECT more than one constant row
_CLAUSES = ("from_", "where", "group", "having", "order", "limit", "offset", "distinct", "with_",
            "joins", "qualify", "windows")


def _constant(query: exp.Expression) -> exp.Expression | None:
    """``c`` when ``query`` is ``SELECT c`` of one literal (module contract), else None."""
    if not isinstance(query, exp.Select) or len(query.expressions) != 1:
        return None
    if any(query.args.get(clause) for clause in _CLAUSES):
        return None
    value = query.expressions[0].unalias()
    inner = value.unnest()
    literal = inner.this if isinstance(inner, exp.Neg) else inner
    if isinstance(literal, exp.Literal) and (not isinstance(inner, exp.Neg)
                                             or not literal.is_string):
        return value.copy()
    if isinstance(inner, exp.Boolean):
        return value.copy()
    return None


def inline_constant_subqueries(query: exp.Expression) -> exp.Expression:
    """``query`` with every one-constant subquery written as its constant, in place."""
    for node in list(query.find_all(exp.Subquery, exp.In)):
        if isinstance(node, exp.In):
            sub = node.args.get("query")
            body = sub.this if isinstance(sub, exp.Subquery) else sub
            value = _constant(body) if body is not None else None
            if value is not None:
                node.set("query", None)
                node.set("expressions", [value])
            continue
        if node.alias or isinstance(node.parent, (exp.From, exp.Join, exp.In, exp.Exists,
                                                  exp.CTE, exp.SetOperation)):
            continue  # a relation, or handled above
        value = _constant(node.this)
        if value is not None:
            node.replace(exp.Paren(this=value))
    return query
