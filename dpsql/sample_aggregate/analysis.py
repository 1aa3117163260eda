"""Which queries the sample-and-aggregate path answers, and what it needs of them.

The SQL surface (docs/privacy.md, "Sample-and-aggregate"): every output of a scalar query is
wrapped as ``SAMPLE_AGGREGATE(expr, lo, hi)``, e.g. ::

    SELECT SAMPLE_AGGREGATE(MEDIAN(o.price), 0, 500) AS median_price
    FROM orders AS o JOIN products AS p ON o.product_id = p.product_id
    WHERE p.category = 'books'

``expr`` is any arithmetic of allow-listed aggregates (:data:`ANY_TYPE_AGGREGATES`,
:data:`NUMERIC_AGGREGATES`) over one private table whose owner enabled ``sample_aggregate``,
joined to public tables; ``lo`` < ``hi`` are numeric literals, the analyst's public output
bounds. The wrapper is the analyst's explicit request: a query without it never takes this
path, and a query with it takes no other.

Contract of :func:`analyze_sample_aggregate`: it returns a :class:`SampleAggregateQuery` or
raises (``UnsupportedConstructError``, ``ProgrammingError``) before anything is read; what it
decides depends on the SQL and the public metadata only (the table's ``sample_aggregate``
setting, public flags, declared columns), never on data. Accepted queries satisfy the
preconditions of the rewrite (:mod:`.rewrite`): the private table occurs exactly once, as the
top-level FROM, so every row of the joined relation comes from one private row and its block
is that row's; no clause mixes blocks (no GROUP BY, HAVING, window, ORDER BY, LIMIT, DISTINCT,
set operation or CTE); and every aggregate is one the rewrite makes total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.parse import parse_query, parse_sql
from dpsql.errors import ProgrammingError, UnsupportedConstructError
from dpsql.metadata import Metadata
from dpsql.metadata.model import SampleAggregate

#: the wrapper's name (case-insensitive in SQL)
WRAPPER = "sample_aggregate"

#: aggregates that cannot fail for any value of any type (their arguments made total) and
#: whose answer is a function of the multiset of their inputs (MODE is not: its ties go to
#: the value met first, which the order rows reach it in decides, and that order can depend
#: on the rest of the table)
ANY_TYPE_AGGREGATES: tuple[type[exp.Expression], ...] = (
    exp.Count, exp.Min, exp.Max, exp.Median, exp.PercentileCont, exp.PercentileDisc,
    exp.Quantile,
)
#: aggregates run over their argument cast to DOUBLE (TRY_CAST): a double sum or moment
#: overflows to infinity or NaN, never to an error (an integer SUM can overflow HUGEINT)
NUMERIC_AGGREGATES: tuple[type[exp.Expression], ...] = (
    exp.Sum, exp.Avg, exp.Stddev, exp.StddevSamp, exp.StddevPop, exp.Variance,
    exp.VariancePop, exp.Corr, exp.CovarSamp, exp.CovarPop,
)
AGGREGATES = (*ANY_TYPE_AGGREGATES, *NUMERIC_AGGREGATES)
_QUANTILES = (exp.PercentileCont, exp.PercentileDisc, exp.Quantile)
_JOIN_KINDS = ("", "INNER", "CROSS")


@dataclass(frozen=True)
class SampleOutput:
    """One output column: its name, the per-block expression, and the declared bounds."""

    name: str
    expression: exp.Expression
    lower: float
    upper: float


@dataclass(frozen=True)
class SampleAggregateQuery:
    """An accepted query: the qualified SQL (wrappers included), the private table (its
    name, its alias in FROM, the owner's setting) and the outputs in order."""

    query: exp.Select
    table: str
    alias: str
    setting: SampleAggregate
    outputs: tuple[SampleOutput, ...]

    @property
    def blocks(self) -> int:
        return self.setting.blocks


def mentions_wrapper(sql: str) -> bool:
    """Whether ``sql`` calls SAMPLE_AGGREGATE anywhere (the SQL text alone decides). A cheap
    text test first; a query that names it only in a string or comment parses without it."""
    if WRAPPER not in sql.lower():
        return False
    try:
        tree = parse_sql(sql)
    except Exception:  # the normal path reports the syntax error in its own words
        return False
    return any(_is_wrapper(n) for n in tree.find_all(exp.Anonymous))


def _is_wrapper(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.this).lower() == WRAPPER


def _refuse(what: str) -> UnsupportedConstructError:
    return UnsupportedConstructError(f"SAMPLE_AGGREGATE: {what}")


def analyze_sample_aggregate(sql: str, metadata: Metadata) -> SampleAggregateQuery:
    """Parse ``sql`` (the allow-list extended by :data:`AGGREGATES` and the wrapper) and
    check it (module contract)."""
    # every aggregate passes the allow-list here, to be judged by _check_aggregates
    query = parse_query(sql, metadata, extra_funcs=(exp.AggFunc,),
                        extra_anonymous=frozenset({WRAPPER}))
    if not isinstance(query, exp.Select):
        raise _refuse("set operations (UNION, INTERSECT, EXCEPT) are not supported: write one "
                      "SELECT whose outputs are all SAMPLE_AGGREGATE(expr, lo, hi)")
    _check_clauses(query)
    _check_aggregates(query)
    table, alias, setting = _private_table(query, metadata)
    outputs = tuple(_output(item) for item in query.expressions)
    wrappers = sum(1 for n in query.find_all(exp.Anonymous) if _is_wrapper(n))
    if wrappers != len(outputs):
        raise _refuse("SAMPLE_AGGREGATE may appear only as a whole output column, not inside "
                      "another expression, a condition or another SAMPLE_AGGREGATE")
    return SampleAggregateQuery(query, table, alias, setting, outputs)


def _check_clauses(query: exp.Select) -> None:
    """No clause that would mix blocks or release more than one row."""
    for arg, what in (("with_", "WITH (CTEs)"), ("group", "GROUP BY"), ("having", "HAVING"),
                      ("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET"),
                      ("distinct", "DISTINCT"), ("qualify", "QUALIFY")):
        if query.args.get(arg) is not None:
            raise _refuse(f"{what} is not supported: the query is answered once per block and "
                          "the block answers averaged, so it must be one scalar SELECT "
                          "(joins to public tables and WHERE are allowed)")


def _check_aggregates(query: exp.Select) -> None:
    """Only the positive list's aggregates, and outside the wrappers (in a WHERE subquery
    over public tables) only the ordinary path's COUNT, SUM and AVG."""
    for node in query.find_all(exp.AggFunc):
        if not isinstance(node, AGGREGATES):
            raise _refuse(f"aggregate {node.sql_name()} is not supported; use COUNT, SUM, "
                          "AVG, MIN, MAX, MEDIAN, QUANTILE_CONT, QUANTILE_DISC, STDDEV, "
                          "VARIANCE, CORR or COVAR")
        wrapped = any(_is_wrapper(a) for a in _ancestors(node))
        if not wrapped and not isinstance(node, (exp.Count, exp.Sum, exp.Avg)):
            raise _refuse(f"{node.sql_name()} is supported only inside SAMPLE_AGGREGATE")


def _ancestors(node: exp.Expression) -> list[exp.Expression]:
    out, parent = [], node.parent
    while parent is not None:
        out.append(parent)
        parent = parent.parent
    return out


def _private_table(query: exp.Select,
                   metadata: Metadata) -> tuple[str, str, SampleAggregate]:
    """The one private table, as the top-level FROM; joins only to public tables, none that
    null-extends the private side."""
    private = [t for t in query.find_all(exp.Table) if not metadata.table(t.name).public]
    source = query.args["from_"].this if query.args.get("from_") is not None else None
    if len(private) != 1 or private[0] is not source:
        raise _refuse("the query must read exactly one private table, once, as the first "
                      "table of its FROM (join public tables to it; no subquery may read a "
                      "private table)")
    for join in query.args.get("joins") or []:
        if not isinstance(join.this, exp.Table):
            raise _refuse("join declared public tables directly, not subqueries")
        kind = (join.args.get("kind") or "").upper()
        side = (join.args.get("side") or "").upper()
        if kind not in _JOIN_KINDS or side not in ("", "LEFT") or join.args.get("method"):
            raise _refuse(f"{join.sql(dialect='duckdb')[:40]}... is not supported: use inner "
                          "or LEFT joins that keep the private table's rows (a RIGHT, FULL, "
                          "NATURAL, SEMI, ANTI or ASOF join could produce rows of no block)")
    assert isinstance(source, exp.Table)
    table = metadata.table(source.name)
    setting = table.sample_aggregate
    if setting is None:
        raise _refuse(f"the data owner has not enabled sample-and-aggregate on table "
                      f"{table.name!r} (metadata: 'sample_aggregate: {{blocks: M}}' on the "
                      "table)")
    unit = metadata.privacy_unit
    if unit is not None and (table.unit is None or not table.unit.direct
                             or setting.by != table.unit.column):
        raise _refuse(f"with a privacy unit declared, table {table.name!r} needs "
                      "'sample_aggregate: {by: ...}' naming its own unit column, so one "
                      "unit's rows share one block")
    return table.name, source.alias_or_name, setting


def _output(item: exp.Expression) -> SampleOutput:
    node = item.this if isinstance(item, exp.Alias) else item
    if not _is_wrapper(node):
        raise _refuse("every output column must be SAMPLE_AGGREGATE(expr, lo, hi) (a query "
                      "takes either this path or the ordinary one, not both)")
    args = node.expressions
    if len(args) != 3:
        raise _refuse(f"it takes three arguments (expr, lo, hi), got {len(args)}")
    expression, lower, upper = args[0], _bound(args[1]), _bound(args[2])
    if not lower < upper:
        raise _refuse(f"the lower output bound {lower:g} must be below the upper {upper:g}")
    _check_expression(expression)
    return SampleOutput(item.alias_or_name, expression, lower, upper)


def _bound(node: exp.Expression) -> float:
    """A numeric literal, optionally negated: the bounds are public constants."""
    inner, sign = node.unnest(), 1.0
    if isinstance(inner, exp.Neg):
        inner, sign = inner.this.unnest(), -1.0
    if isinstance(inner, exp.Literal) and not inner.is_string:
        try:
            value = sign * float(inner.this)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and abs(value) <= 1e300:
            return value
    raise _refuse(f"output bounds must be numeric literals such as 0 or -2.5, got "
                  f"{node.sql(dialect='duckdb')[:40]}")


def _check_expression(expression: exp.Expression) -> None:
    """Aggregates of the positive list, not nested, no FILTER, no subquery; every column
    inside an aggregate (the block answer is a function of the block's rows)."""
    if expression.find(exp.Query, exp.Subquery, exp.Exists) is not None:
        raise _refuse("no subquery inside SAMPLE_AGGREGATE: compute the block answer from "
                      "aggregates of the joined rows")
    if expression.find(exp.Filter) is not None:
        raise _refuse("FILTER (WHERE ...) is not supported inside SAMPLE_AGGREGATE: put the "
                      "condition in a CASE inside the aggregate")
    found = False
    for node in expression.walk():
        if not isinstance(node, AGGREGATES):
            continue
        found = True
        if any(isinstance(a, exp.AggFunc) for a in node.walk() if a is not node):
            raise _refuse("aggregates cannot be nested")
        if isinstance(node, _QUANTILES):
            _check_quantile(node)
    if not found:
        raise _refuse("the expression must contain an aggregate (it is computed once per "
                      "block of rows)")
    for column in expression.find_all(exp.Column):
        if column.find_ancestor(*AGGREGATES) is None:
            raise _refuse(f"column {column.sql(dialect='duckdb')} is outside any aggregate: "
                          "a block answer is an aggregate of the block's rows")
    if expression.find(exp.Placeholder) is not None and any(
            n.find(exp.Placeholder) for n in expression.find_all(*_QUANTILES)):
        raise ProgrammingError("SAMPLE_AGGREGATE: a quantile's fraction must be a literal")


def _check_quantile(node: exp.Expression) -> None:
    fraction = node.args.get("quantile") or node.expression
    literal = fraction.unnest() if fraction is not None else None
    if not (isinstance(literal, exp.Literal) and not literal.is_string
            and 0.0 <= float(literal.this) <= 1.0):
        raise _refuse(f"{node.sql_name()} needs a literal fraction between 0 and 1 as its "
                      "second argument")
