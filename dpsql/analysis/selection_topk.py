"""Top-k by COUNT(*) (issue #18): ``SELECT key[, COUNT(*)] FROM ... [WHERE ...] GROUP BY key
ORDER BY COUNT(*) DESC LIMIT k`` with one group key over a declared domain, reading one private
table (public joins allowed), released by Report Noisy Max with peeling (dpsql.noise.selection).

Contract: the shape is recognised from the SQL and the public metadata alone; anything else
returns None and is left to the ordinary analysis (a noisy histogram, ORDER BY / LIMIT as
post-processing). Each count moves by at most S (the relation's constant stability) between
change-one-row neighbours (docs/privacy.md, "Selection: quantiles and top-k").
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.blocks import analyze_request
from dpsql.analysis.checks import is_count_star, sql_text
from dpsql.analysis.model import QueryAnalysis
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.trees import copy_tree
from dpsql.errors import Error
from dpsql.metadata import Metadata


@dataclass(frozen=True)
class TopKQuery:
    """A top-k query: ``analysis`` groups by one key and measures COUNT(*) (measurement 0);
    ``count_column`` is the select-list position of the released COUNT(*), if any; each count
    moves by at most ``sensitivity`` = S between neighbours."""

    analysis: QueryAnalysis
    k: int
    count_column: int | None
    key_column: int
    sensitivity: float


def top_k_query(query: exp.Select, metadata: Metadata) -> TopKQuery | None:
    """The top-k shape, or None (then today's noisy histogram and post-processing apply)."""
    order, limit = query.args.get("order"), query.args.get("limit")
    group = query.args.get("group")
    if (order is None or limit is None or group is None or len(group.expressions) != 1
            or query.args.get("having") is not None or query.args.get("offset") is not None
            or query.args.get("distinct") is not None or len(order.expressions) != 1):
        return None
    k = _limit_value(limit)
    if k is None:
        return None
    ordered = order.expressions[0]
    if not ordered.args.get("desc"):
        return None
    key_sql = sql_text(group.expressions[0])
    items = query.expressions
    key_column = count_column = None
    for i, item in enumerate(items):
        inner = item.this if isinstance(item, exp.Alias) else item
        if is_count_star(inner) and count_column is None:
            count_column = i
        elif sql_text(inner) == key_sql and key_column is None:
            key_column = i
        else:
            return None
    if key_column is None or not _orders_by_count(ordered.this, items, count_column):
        return None
    carrier = copy_tree(query)
    for clause in ("order", "limit"):
        carrier.set(clause, None)
    if count_column is None:
        carrier.set("expressions", [*carrier.expressions,
                                    exp.alias_(exp.Count(this=exp.Star()), "dpsql_count")])
    try:
        analysis = analyze_request(carrier.sql(dialect=DIALECT), metadata)
    except Error:
        return None  # the ordinary analysis refuses it with its own message
    if (not isinstance(analysis, QueryAnalysis) or len(analysis.group_keys) != 1
            or analysis.group_keys[0].partition or len(analysis.measurements) != 1):
        return None
    stability = analysis.tree.children[0].stability
    if stability.depends_on_k or stability.at(0) <= 0:
        return None  # joins of private tables, or public data: today's path
    return TopKQuery(analysis, k, count_column, key_column, stability.at(0))


def _limit_value(limit: exp.Expression) -> int | None:
    value = limit.expression if isinstance(limit, exp.Limit) else None
    if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        k = int(value.this)
        return k if 1 <= k <= 10_000 else None
    return None


def _orders_by_count(node: exp.Expression, items: list[exp.Expression],
                     count_column: int | None) -> bool:
    """``ORDER BY COUNT(*)``, or the alias or position of the COUNT(*) output."""
    if is_count_star(node):
        return True
    if count_column is None:
        return False
    item = items[count_column]
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return int(node.this) == count_column + 1
    return (isinstance(node, exp.Column) and not node.table and isinstance(item, exp.Alias)
            and node.name == item.alias)
