"""Syntax helpers and the checks shared by the relation, join and measurement builders.

The checks here reject what no rule of dpsql.analysis.rules covers (subqueries hidden in a
filter, scalar subqueries, nested aggregates, duplicate output names, outer references); their
messages are part of the interface (tests match on them).
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.aggregates import VARIANCE_TYPES
from dpsql.analysis.kexpr import KExpr
from dpsql.analysis.model import ColumnFacts
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.trees import copy_tree
from dpsql.errors import AggregateArithmeticError, UnsupportedConstructError

#: the aggregates with a measurement rule (dpsql.analysis.measure); a FILTER clause wraps one
AGGREGATES = (exp.Count, exp.Sum, exp.Avg, *VARIANCE_TYPES)


def conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """Flatten nested ANDs (and parentheses around them) into a list of conjuncts.

    An OR whose every branch shares conjuncts, ``(a AND x) OR (a AND y)`` (TPC-H Q19, where a
    is the join key ``p_partkey = l_partkey``), is first factored *in the query tree itself*
    into ``a AND (x OR y)`` (:func:`factor_or`), so the join rule sees ``a`` and the exact
    query runs the very condition the analysis read."""
    if node is None:
        return []
    node = node.unnest()
    if isinstance(node, exp.And):
        return conjuncts(node.left) + conjuncts(node.right)
    if isinstance(node, exp.Or):
        factored = factor_or(node)
        if factored is not node:
            node.replace(factored)
            return conjuncts(factored)
    return [node]


def _flatten(node: exp.Expression, kind: type[exp.Connector]) -> list[exp.Expression]:
    node = node.unnest()
    if isinstance(node, kind):
        return _flatten(node.left, kind) + _flatten(node.right, kind)
    return [node]


def _join(nodes: list[exp.Expression], kind: type[exp.Connector]) -> exp.Expression:
    out = exp.Paren(this=nodes[0]) if len(nodes) > 1 else nodes[0]
    for node in nodes[1:]:
        out = kind(this=out, expression=exp.Paren(this=node))
    return out


def _same(a: exp.Expression, b: exp.Expression) -> bool:
    """Structurally equal, or the same equality written the other way round (a = b, b = a:
    SQL's = is symmetric, NULLs included)."""
    if a == b:
        return True
    return (isinstance(a, exp.EQ) and isinstance(b, exp.EQ)
            and a.left == b.right and a.right == b.left)


def factor_or(node: exp.Or) -> exp.Expression:
    """``(a AND x) OR (a AND y)`` as ``a AND (x OR y)``: the conjuncts every branch of the OR
    shares (structurally equal, an equality possibly written the other way round), taken out
    once, as the first branch writes them; ``node`` itself when there are none.

    Semantics-preserving in SQL's three-valued logic, which is distributive (Kleene's logic is
    a De Morgan algebra): for every row the factored condition has the same value, TRUE,
    FALSE or NULL. A branch left with nothing (``a OR (a AND y)``) is TRUE, so the OR of the
    remainders is dropped (``TRUE OR anything`` is TRUE). Built from copies: ``node`` is not
    changed."""
    branches = [_flatten(b, exp.And) for b in _flatten(node, exp.Or)]
    common: list[exp.Expression] = []
    for candidate in branches[0]:
        if any(_same(candidate, c) for c in common):
            continue
        if all(any(_same(candidate, c) for c in branch) for branch in branches[1:]):
            common.append(candidate)
    if not common:
        return node
    rests = [[c for c in branch if not any(_same(c, k) for k in common)] for branch in branches]
    parts = [copy_tree(c) for c in common]
    if all(rests):
        parts.append(_join([_join([copy_tree(c) for c in rest], exp.And) for rest in rests],
                           exp.Or))
    return exp.Paren(this=_join(parts, exp.And))


def has_aggregate(node: exp.Expression) -> bool:
    return any(in_same_select(a, node) for a in node.find_all(*AGGREGATES))


def _crosses(inner: exp.Expression, outer: exp.Expression, kind: type[exp.Expression]) -> bool:
    """Whether a node of ``kind`` lies strictly between ``inner`` and its ancestor ``outer``."""
    node = inner.parent if inner is not outer else None
    while node is not None and node is not outer:
        if isinstance(node, kind):
            return True
        node = node.parent
    return False


def has_inner_aggregate(query: exp.Query) -> bool:
    """Whether an aggregate of ``query`` sits below a nested SELECT (a CTE, derived table or
    subquery computes one): what sends a query to the blocks' or the unit's derived-table
    analysis."""
    return any(_crosses(agg, query, exp.Select) for agg in query.find_all(*AGGREGATES))


def in_same_select(inner: exp.Expression, outer: exp.Expression) -> bool:
    """True when ``inner`` is not nested in a subquery below ``outer``."""
    return not _crosses(inner, outer, exp.Query)


def is_count_star(node: exp.Expression | None) -> bool:
    """``COUNT(*)`` without DISTINCT (a FILTER wraps it, so a filtered count is not one)."""
    return (isinstance(node, exp.Count) and isinstance(node.this, exp.Star)
            and not node.args.get("distinct"))


def tables_read(query: exp.Expression) -> frozenset[str]:
    """The names of the tables ``query`` reads anywhere in it, CTE names excluded (a
    qualified ``db.name`` is a table even when a CTE shares its name)."""
    ctes = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    return frozenset(t.name for t in query.find_all(exp.Table) if t.name not in ctes or t.db)


def sql_text(node: exp.Expression) -> str:
    """``node.sql(dialect=DIALECT)``: generated from a copy, taken by copy_tree."""
    return copy_tree(node).sql(dialect=DIALECT, copy=False)


def key_of(node: exp.Expression) -> tuple[str, str] | str:
    """What identifies a GROUP BY key or an expression compared with one: a column by its
    (qualified) table and name, without generating SQL; anything else by its SQL text."""
    if isinstance(node, exp.Column):
        return (node.table, node.name)
    return sql_text(node)


def mf_str(mf: KExpr | None) -> str:
    return "unknown" if mf is None else str(mf)


def check_unique_output(name: str, out: dict[tuple[str, str], ColumnFacts]) -> None:
    """Reject a second output column of the same name in a subquery, CTE or UNION branch.

    DuckDB binds ``t.x`` to the FIRST column named x (it renames the second to x_1), while a
    dict keyed by name would keep the LAST one's facts: ``(SELECT customer_id AS x, order_id AS
    x ...) t JOIN c ON c.id = t.x`` would use order_id's mf 1 for a join on customer_id.
    """
    if any(key.lower() == name.lower() for _, key in out):
        raise UnsupportedConstructError(
            f"a subquery outputs two columns named {name!r}: give each column a distinct alias"
        )


def reject_outer_references(select: exp.Select) -> None:
    """Reject a derived table, CTE or IN subquery that refers to an enclosing query's columns.

    DuckDB evaluates such a subquery once per outer row (an implicit LATERAL join), so its
    relation is not one fixed relation with one stability: in
    ``EXISTS (SELECT 1 FROM (SELECT COUNT(*) AS n FROM r WHERE r.k = o.k) t WHERE t.n = o.q)``
    one changed row of r changes n for every outer row with that k, which no mf of o.q bounds.
    Correlated EXISTS conditions are analysed by the semi-join rule instead (from_where with
    correlated_ok=True), not here.
    """
    items = [select.args["from_"].this] + [j.this for j in select.args.get("joins") or []]
    aliases = {item.alias_or_name for item in items}
    for col in select.find_all(exp.Column):
        if col.table and col.table not in aliases and in_same_select(col, select):
            raise UnsupportedConstructError(
                f"a subquery in FROM, a CTE or an IN subquery refers to {sql_text(col)} of an "
                "enclosing query (an implicit LATERAL join), which has no sensitivity rule: "
                "join the tables instead, or correlate only through EXISTS (... WHERE "
                "inner.k = outer.k)"
            )


def derived_type(node: exp.Expression) -> str | None:
    """The type of a computed output column, where it is certain: an explicit CAST, COUNT."""
    if isinstance(node, (exp.Cast, exp.TryCast)) and isinstance(node.args.get("to"), exp.DataType):
        return node.args["to"].sql(dialect=DIALECT)
    if isinstance(node, exp.Count):
        return "BIGINT"  # COUNT is BIGINT in DuckDB and Spark
    return None


def check_filter(cond: exp.Expression | None, where: str) -> None:
    """A filter keeps stability and mf, unless it hides a subquery no rule covers."""
    if cond is None:
        return
    cond = cond.this if isinstance(cond, exp.Having) else cond
    for sub in cond.find_all(exp.Subquery, exp.Exists, exp.Select):
        query = sub.this if isinstance(sub, (exp.Subquery, exp.Exists)) else sub
        if isinstance(query, exp.Select) and any(has_aggregate(e) for e in query.expressions):
            raise AggregateArithmeticError(
                f"the aggregate subquery in {where} ({sql_text(sub)[:60]}) feeds a comparison; "
                "its exact value could flip every row, and no rule bounds that: "
                "run it as its own query and pass the noisy value as a parameter"
            )
        raise UnsupportedConstructError(
            f"a subquery inside {where} must be a whole AND-ed condition of the form "
            "x IN (SELECT ...), EXISTS (...), NOT IN or NOT EXISTS"
        )
    if has_aggregate(cond) and where != "HAVING":
        raise AggregateArithmeticError(f"an aggregate cannot appear in {where}")


def check_scalar(node: exp.Expression, where: str) -> None:
    if node.find(exp.Subquery, exp.Select) is not None:
        raise UnsupportedConstructError(
            f"a scalar subquery in the {where} is not supported: join instead"
        )


def check_aggregate_args(node: exp.Expression) -> None:
    check_scalar(node, "SELECT list")
    for agg in node.find_all(*AGGREGATES):
        if any(inner is not agg for inner in agg.find_all(*AGGREGATES)):
            raise AggregateArithmeticError(f"nested aggregate {sql_text(agg)} is not supported")

