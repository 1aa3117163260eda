"""Selection queries: MIN / MAX / MEDIAN / quantiles and top-k by COUNT(*) (issue #18).

These release a *choice* (a grid point, or which keys) made by the exponential mechanism or
Report Noisy Max (dpsql.noise.selection), not a noisy number. Two shapes are recognised at the
top-level SELECT; anything else is left to the ordinary analysis (which refuses MIN / MAX /
quantiles, and answers other ORDER BY ... LIMIT queries by a noisy histogram, post-processed):

* **quantile queries**: every aggregate of the top-level SELECT (select list, HAVING, ORDER BY)
  is one of MIN(x), MAX(x), MEDIAN(x), QUANTILE(x, q) / QUANTILE_DISC(x, q),
  QUANTILE_CONT(x, q), PERCENTILE_CONT(q) / PERCENTILE_DISC(q) WITHIN GROUP (ORDER BY x),
  all over the same argument x with declared (or derivable) bounds, optionally with GROUP BY
  over declared domains. :func:`analyze_selection` builds two *carrier* analyses with the
  ordinary analysis: the analyst's query with the i-th distinct aggregate replaced by
  ``COUNT(i + 1)`` (its output columns, HAVING / ORDER BY / LIMIT post-processing and group
  keys; measurement i stands for aggregate i), and the same query with each aggregate replaced
  by ``SUM(x)`` (x's bounds, its qualified form and the relation's stability). The *histogram*
  analysis built from the second groups by the keys and one more key, x's grid cell (a
  computed key with the public domain 0..cells-1): its COUNT(*) per (bin, cell) is the only
  private read.
* **top-k** by COUNT(*): :mod:`dpsql.analysis.selection_topk`.

Contract: every refusal here depends on the SQL, the public metadata and nothing else (no
data, no max frequency, no row count); the sensitivity returned holds under dpsql's
change-one-row neighbours (docs/privacy.md, section 2, "Selection: quantiles and top-k").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis import hygiene, rules
from dpsql.analysis.blocks import analyze_request
from dpsql.analysis.checks import AGGREGATES, in_same_select, sql_text
from dpsql.analysis.derived_keys import INPUT, DerivedDomain
from dpsql.analysis.kexpr import Const
from dpsql.analysis.model import GroupKey, Measurement, OutputColumn, QueryAnalysis
from dpsql.analysis.parse import DIALECT, parse_sql
from dpsql.analysis.selection_grid import Grid, SelectionAggregate
from dpsql.analysis.selection_topk import TopKQuery, top_k_query
from dpsql.analysis.trees import copy_tree
from dpsql.errors import (
    Error,
    NotSupportedError,
    UnsupportedConstructError,
    UnsupportedQueryError,
)
from dpsql.metadata import Column, Domain, Metadata

_SELECTION_TYPES = (exp.Min, exp.Max, exp.Median, exp.Quantile, exp.PercentileCont,
                    exp.PercentileDisc)
_MAYBE = re.compile(r"\b(MIN|MAX|MEDIAN|QUANTILE\w*|PERCENTILE\w*)\s*\(", re.IGNORECASE)
_INTEGER_TYPES = frozenset({"TINYINT", "SMALLINT", "INTEGER", "INT", "BIGINT", "HUGEINT",
                            "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "INT2", "INT4",
                            "INT8", "LONG", "SHORT"})


@dataclass(frozen=True)
class QuantileQuery:
    """A quantile query (module docstring): ``outputs`` (its measurement j stands for
    ``aggregates[j]``),
    ``histogram`` (keys + the cell key, one COUNT(*)), the grid, and the utility sensitivity
    per aggregate: S without GROUP BY, 2 S with (docs/privacy.md)."""

    outputs: QueryAnalysis
    histogram: QueryAnalysis
    aggregates: tuple[SelectionAggregate, ...]
    grid: Grid
    sensitivity: float
    argument: str


def analyze_selection(sql: str, metadata: Metadata) -> QuantileQuery | TopKQuery | None:
    """The selection query ``sql`` is, or None when it is neither shape (module contract)."""
    upper = sql.upper()
    maybe_quantile = _MAYBE.search(sql) is not None
    maybe_top = "LIMIT" in upper and "ORDER" in upper and "COUNT" in upper
    if not (maybe_quantile or maybe_top):
        return None
    hygiene.check_size(sql)  # the ordinary parse's first checks, with its messages
    try:
        query = parse_sql(sql)
    except Error:
        return None  # the ordinary path raises the same error
    hygiene.check_shape(query)  # before anything recursive walks the tree
    if not isinstance(query, exp.Select):
        return None
    if _selection_nodes(query):
        if metadata.privacy_unit is not None:  # the utility's sensitivity is per row
            raise UnsupportedConstructError(
                "under a privacy unit, MIN / MAX / MEDIAN / quantiles have no unit-level rule "
                "yet: use COUNT, SUM or AVG (or SAMPLE_AGGREGATE over the unit)")
        return _quantile_query(query, metadata)
    if maybe_top and metadata.privacy_unit is not None:
        return None  # the unit's own GROUP BY (two-stage), then ORDER BY / LIMIT on it
    if maybe_top:
        return top_k_query(query, metadata)
    return None


def _selection_nodes(query: exp.Select) -> list[exp.Expression]:
    """The selection aggregates of ``query``'s select list, HAVING and ORDER BY, in walk
    order (the same order in any copy of the tree)."""
    return [node for node in query.find_all(*_SELECTION_TYPES)
            if in_same_select(node, query) and _top_level(node, query)]


def _top_level(node: exp.Expression, query: exp.Select) -> bool:
    """In the select list, HAVING or ORDER BY of ``query`` (not in its WHERE / FROM)."""
    while node.parent is not None and node.parent is not query:
        node = node.parent
    return node.arg_key in ("expressions", "having", "order")


def epsilon_shares(query: QuantileQuery | TopKQuery, epsilon: float) -> tuple[float, ...]:
    """How a selection query spends ``epsilon`` (basic composition): quantiles, one share per
    measurement of ``query.outputs`` (epsilon over the distinct aggregates); top-k,
    (selection, released counts): all to the selection without a COUNT(*) in the select
    list, else half each. Depends on the SQL and epsilon only."""
    if isinstance(query, QuantileQuery):
        return (epsilon / len(query.aggregates),) * len(query.aggregates)
    if query.count_column is None:
        return (epsilon, 0.0)
    return (epsilon / 2.0, epsilon / 2.0)


# --------------------------------------------------------------------------- quantiles


def _describe(node: exp.Expression) -> tuple[exp.Expression, SelectionAggregate, exp.Expression]:
    """(the node to replace, the aggregate, its argument) of one selection aggregate."""
    target: exp.Expression = node
    if isinstance(node.parent, exp.WithinGroup):
        target = node.parent
        order = target.expression
        if not isinstance(order, exp.Order) or len(order.expressions) != 1:
            raise UnsupportedConstructError(
                f"{sql_text(target)}: WITHIN GROUP needs exactly one ORDER BY argument")
        ordered = order.expressions[0]
        if ordered.args.get("desc"):
            raise UnsupportedConstructError(
                f"{sql_text(target)}: write WITHIN GROUP (ORDER BY x) in ascending order, and "
                "ask for the quantile 1 - q instead of a descending order")
        arg, q = ordered.this, node.this
    elif isinstance(node, (exp.Min, exp.Max, exp.Median)):
        arg = node.this
        q = exp.Literal.number(0 if isinstance(node, exp.Min) else
                               1 if isinstance(node, exp.Max) else 0.5)
        if node.expressions:
            raise UnsupportedConstructError(f"{sql_text(node)}: give exactly one argument")
    else:
        arg = node.this
        q = node.args.get("quantile") if isinstance(node, exp.Quantile) else node.expression
    if isinstance(target.parent, exp.Filter):
        raise UnsupportedConstructError(
            f"{sql_text(target.parent)}: FILTER is not supported on MIN / MAX / quantiles: "
            "move the condition to WHERE")
    if isinstance(arg, exp.Distinct) or node.args.get("distinct"):
        raise UnsupportedConstructError(
            f"{sql_text(target)}: DISTINCT is not supported in MIN / MAX / quantiles (a "
            "quantile of the distinct values is not offered): remove it")
    if arg is None:
        raise UnsupportedConstructError(f"{sql_text(target)}: give the argument")
    if arg.find(exp.Placeholder) is not None or (
            q is not None and q.find(exp.Placeholder) is not None):
        raise UnsupportedConstructError(
            f"{sql_text(target)}: the argument and the quantile must be written in the query "
            "(no '?' parameter inside MIN / MAX / quantiles)")
    quantile = _quantile_value(q, target)
    name = {exp.Min: "MIN", exp.Max: "MAX", exp.Median: "MEDIAN", exp.Quantile: "QUANTILE_DISC",
            exp.PercentileCont: "QUANTILE_CONT", exp.PercentileDisc: "QUANTILE_DISC"}[type(node)]
    discrete = not isinstance(node, (exp.Median, exp.PercentileCont))
    return target, SelectionAggregate(name, quantile, discrete), arg


def _quantile_value(q: exp.Expression | None, node: exp.Expression) -> float:
    value: float | None = None
    inner = q.unnest() if q is not None else None
    if isinstance(inner, exp.Neg) and isinstance(inner.this, exp.Literal):
        value = -1.0
    elif isinstance(inner, exp.Literal) and not inner.is_string:
        try:
            value = float(inner.this)
        except ValueError:
            value = None
    if value is None or not 0.0 <= value <= 1.0 or not math.isfinite(value):
        raise UnsupportedConstructError(
            f"{sql_text(node)}: the quantile must be one number between 0 and 1 written in the "
            "query (one quantile per aggregate: write several aggregates for several)")
    return value


def _quantile_query(query: exp.Select, metadata: Metadata) -> QuantileQuery:
    for agg in query.find_all(*AGGREGATES):
        if in_same_select(agg, query) and _top_level(agg, query):
            raise UnsupportedQueryError(
                f"{sql_text(agg)} and MIN / MAX / quantiles in one query: they use different "
                "mechanisms (noise; the exponential mechanism), so ask them in separate queries")
    if query.args.get("distinct") is not None:
        raise UnsupportedConstructError(
            "SELECT DISTINCT with MIN / MAX / quantiles: remove DISTINCT (one row per group)")
    for clause in ("having", "order", "limit", "offset"):
        part = query.args.get(clause)
        if part is not None and part.find(exp.Placeholder) is not None:
            raise UnsupportedConstructError(
                f"a '?' parameter in {clause.upper()} of a query with MIN / MAX / quantiles: "
                "write the value in the query")
    for item in query.expressions:
        if item.find(exp.Placeholder) is not None:
            raise UnsupportedConstructError(
                "a '?' parameter in the select list of a query with MIN / MAX / quantiles: "
                "write the value in the query")
    # unnamed outputs named by their text, as the ordinary parse names them
    query.set("expressions", [
        item if isinstance(item, (exp.Alias, exp.Column, exp.Star))
        else exp.alias_(item, item.sql(dialect=DIALECT), quoted=True)
        for item in query.expressions])
    described = [_describe(node) for node in _selection_nodes(query)]
    args = {sql_text(arg) for _, _, arg in described}
    if len(args) > 1:
        raise UnsupportedQueryError(
            f"MIN / MAX / quantiles over several arguments ({', '.join(sorted(args))}) in one "
            "query: ask one query per argument")
    aggregates: list[SelectionAggregate] = []
    outputs, sums = copy_tree(query), copy_tree(query)
    # the copies' nodes in the same walk order as ``found``
    out_nodes, sum_nodes = _selection_nodes(outputs), _selection_nodes(sums)
    for (_, spec, arg), out_node, sum_node in zip(described, out_nodes, sum_nodes, strict=True):
        if spec not in aggregates:
            aggregates.append(spec)
        i = aggregates.index(spec)
        _target(out_node).replace(exp.Count(this=exp.Literal.number(i + 1)))
        _target(sum_node).replace(exp.Sum(this=copy_tree(arg)))
    for clause in ("having", "order", "limit", "offset"):
        sums.set(clause, None)
    first = described[0][1]
    label = f"{first.function}({sql_text(described[0][2])})"
    out_analysis = _analysis(outputs, metadata, label)
    try:
        sum_analysis = _analysis(sums, metadata, label)
    except NotSupportedError as exc:
        # the SUM carrier's refusals name SUM(x): name the analyst's aggregate instead
        message = str(exc.args[0]) if exc.args else str(exc)
        if _date_column(described[0][2], query, metadata):
            return _date_quantiles(query, described, aggregates, out_analysis, metadata, label)
        if "needs bounds: " in message:
            message = (f"{label} needs bounds (the grid the exponential mechanism chooses "
                       f"from): {message.split('needs bounds: ', 1)[1]}")
        elif message.startswith("SUM("):
            message = first.function + message[3:]
        raise type(exc)(message) from None
    stability = _constant_stability(sum_analysis, label)
    if any(k.partition for k in sum_analysis.group_keys):
        raise UnsupportedQueryError(
            f"{label} per group of a key without a declared domain: the groups would come from "
            "the data; group by a column with a declared domain")
    measurement = next(m for m in sum_analysis.measurements if m.function == "SUM")
    assert measurement.bounds is not None
    arg = measurement.node.this
    grid = Grid.of(measurement.bounds, _integer_column(arg, sum_analysis.query, metadata))
    grouped = bool(sum_analysis.group_keys)
    # measurement j of the outputs analysis is COUNT(i + 1): aggregate i
    by_measurement = tuple(aggregates[int(m.node.this.this) - 1]
                           for m in out_analysis.measurements)
    return QuantileQuery(
        outputs=out_analysis,
        histogram=_histogram(sum_analysis, arg, grid, stability),
        aggregates=by_measurement,
        grid=grid,
        sensitivity=(2.0 if grouped else 1.0) * stability,
        argument=sql_text(arg))


def _date_quantiles(query: exp.Select, described: list, aggregates: list[SelectionAggregate],
                    out_analysis: QueryAnalysis, metadata: Metadata,
                    label: str) -> QuantileQuery:
    """Quantiles of a DATE (or TIMESTAMP) base column with day bounds: the grid is the days
    of the bounds (Grid.of_days); the relation, keys and the qualified argument come from the
    query with each aggregate replaced by ``COUNT(x)``."""
    counts = copy_tree(query)
    arg = described[0][2]
    for node in _selection_nodes(counts):
        _target(node).replace(exp.Count(this=copy_tree(arg)))
    for clause in ("having", "order", "limit", "offset"):
        counts.set(clause, None)
    count_analysis = _analysis(counts, metadata, label)
    stability = _constant_stability(count_analysis, label)
    if any(k.partition for k in count_analysis.group_keys):
        raise UnsupportedQueryError(
            f"{label} per group of a key without a declared domain: the groups would come from "
            "the data; group by a column with a declared domain")
    qualified = count_analysis.measurements[0].node.this
    column = _base_column(qualified, count_analysis.query, metadata)
    if column is None or column.date_bounds is None:
        raise UnsupportedConstructError(
            f"{label}: MIN / MAX / quantiles of dates read a DATE or TIMESTAMP column of a "
            "declared table with day bounds directly (not a computed or derived value)")
    grid = Grid.of_days(*column.date_bounds)
    grouped = bool(count_analysis.group_keys)
    by_measurement = tuple(aggregates[int(m.node.this.this) - 1]
                           for m in out_analysis.measurements)
    return QuantileQuery(
        outputs=out_analysis,
        histogram=_histogram(count_analysis, qualified, grid, stability),
        aggregates=by_measurement, grid=grid,
        sensitivity=(2.0 if grouped else 1.0) * stability, argument=sql_text(qualified))


def _base_column(arg: exp.Expression, query: exp.Select, metadata: Metadata) -> Column | None:
    """The declared column a qualified column reference reads directly, or None."""
    if not isinstance(arg, exp.Column):
        return None
    for table in query.find_all(exp.Table):
        if table.alias_or_name == arg.table and table.name in metadata.tables:
            return metadata.table(table.name).columns.get(arg.name)
    return None


def _target(node: exp.Expression) -> exp.Expression:
    return node.parent if isinstance(node.parent, exp.WithinGroup) else node


def _analysis(query: exp.Select, metadata: Metadata, label: str) -> QueryAnalysis:
    result = analyze_request(query.sql(dialect=DIALECT), metadata)
    if not isinstance(result, QueryAnalysis):
        raise UnsupportedQueryError(
            f"{label} in a query with aggregates in subqueries or CTEs: put MIN / MAX / "
            "quantiles in the top-level SELECT of a query with no other aggregate")
    return result


def _constant_stability(analysis: QueryAnalysis, label: str) -> float:
    """S of the aggregated relation: constant (one private table, public joins) and > 0."""
    stability = analysis.tree.children[0].stability
    if stability.depends_on_k:
        raise UnsupportedQueryError(
            f"{label} over a join of private tables: the exponential mechanism needs a "
            "sensitivity that does not depend on the data; read one private table (joins "
            "with public tables are fine)")
    value = stability.at(0)
    if value <= 0:
        raise NotSupportedError(
            f"{label} over public tables only: nothing private to protect, and dpsql answers "
            "MIN / MAX / quantiles only over private data; query the public table directly")
    return value


def _date_column(arg: exp.Expression, query: exp.Select, metadata: Metadata) -> bool:
    """Whether ``arg`` names a column with day bounds of a table ``query`` reads (by name:
    for the refusal's message only)."""
    if not isinstance(arg, exp.Column):
        return False
    for table in query.find_all(exp.Table):
        if table.name in metadata.tables and (not arg.table or arg.table == table.alias_or_name):
            column = metadata.table(table.name).columns.get(arg.name)
            if column is not None and column.date_bounds is not None:
                return True
    return False


def _integer_column(arg: exp.Expression, query: exp.Select, metadata: Metadata) -> bool:
    """Whether ``arg`` is a base column declared with an integer type (an exact grid)."""
    if not isinstance(arg, exp.Column):
        return False
    for table in query.find_all(exp.Table):
        if table.alias_or_name == arg.table and table.name in metadata.tables:
            column = metadata.table(table.name).columns.get(arg.name)
            kind = (column.type or "").upper().split("(")[0].strip() if column else ""
            return kind in _INTEGER_TYPES
    return False


def _histogram(sums: QueryAnalysis, arg: exp.Expression, grid: Grid,
               stability: float) -> QueryAnalysis:
    """The analysis whose exact query counts rows per (bin of the keys, grid cell of
    ``arg``): the keys of ``sums`` and one computed key, the cell, over the public domain
    0..cells-1 (a derived domain: the identity on a declared value list)."""
    query = copy_tree(sums.query)
    cell = grid.cell_sql(arg)
    keys = list(query.args["group"].expressions) if query.args.get("group") else []
    count = exp.Count(this=exp.Star())
    query.set("group", exp.Group(expressions=[*keys, copy_tree(cell)]))
    query.set("expressions", [*(copy_tree(k) for k in keys),
                              exp.alias_(copy_tree(cell), "__cell"),
                              exp.alias_(count, "__n")])
    for clause in ("having", "order", "limit", "offset", "distinct"):
        query.set(clause, None)
    cell_key = GroupKey(
        index=len(keys), node=query.args["group"].expressions[-1], domain=Domain(),
        name="__cell", type="BIGINT",
        derived_domain=DerivedDomain(
            expr=exp.column(INPUT), values=Domain(values=tuple(range(grid.cells))),
            input_type="BIGINT", label=f"grid cells 0..{grid.cells - 1}"))
    group_keys = (*sums.group_keys, cell_key)
    es = rules.count_sensitivity(Const(stability), True)
    measurement = Measurement(0, "COUNT", exp.Count(this=exp.Star()), es, label="COUNT(*)")
    items = query.expressions
    columns = (*(OutputColumn(f"__k{k.index}", "group_key", None, (), items[k.index])
                 for k in group_keys),
               OutputColumn("__n", "aggregate", "COUNT", (0,), items[-1]))
    return QueryAnalysis(query=query, columns=columns, measurements=(measurement,),
                         group_keys=group_keys, tree=sums.tree)
