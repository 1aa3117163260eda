"""The post-processing query: the analyst's outer SELECT (expressions, HAVING, ORDER BY,
DISTINCT, LIMIT) over the table of NOISY values, and the fast path that needs no SQL."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.aggregates import VARIANCE_TYPES, moment_labels, unfilter, variance_sql
from dpsql.analysis.checks import key_of
from dpsql.analysis.elastic import Measurement, QueryAnalysis
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.trees import copy_tree
from dpsql.rewrite.parameters import PARAM_PREFIX, number_parameters, used_params
from dpsql.rewrite.totality import AGGREGATES

NOISY_TABLE = "__noisy"


@dataclass(frozen=True)
class OutputSpec:
    """How one output column is read from the noisy row (the post-processing fast path)."""

    kind: str  # "key" | "measurement" | "avg"
    index: int  # key or measurement index (the SUM for avg)
    count_index: int = -1  # the COUNT for avg
    bounds: tuple[float, float] | None = None


@dataclass(frozen=True)
class AvgInterval:
    """An output column that is a bare AVG, for its per-row interval (dpsql.release.avg_rows):
    where it is and which noisy measurements it is computed from."""

    position: int  #: the output column
    total: int  #: its SUM measurement
    count: int  #: its COUNT measurement
    bounds: tuple[float, float]  #: the argument's clamp bounds [l, u]


def _replacement_map(analysis: QueryAnalysis) -> dict[str, exp.Expression]:
    """SQL text of a key / aggregate in the analyst's query -> its noisy column."""
    repl: dict[str, exp.Expression] = {}
    for key in analysis.group_keys:
        repl[key.node.sql(dialect=DIALECT)] = exp.column(f"__k{key.index}")
    by_label = {m.label: m for m in analysis.measurements}
    for agg_sql, m in by_label.items():
        repl[agg_sql] = exp.column(f"__m{m.index}")
    return repl


def _avg_expression(sum_i: int, count_i: int, bounds: tuple[float, float]) -> exp.Expression:
    # Post-processing of noisy values: NULL where the noisy count is <= 0 (as SQL's AVG of no
    # row; a ratio there would be a bound or noise, not an average), else the ratio clamped to
    # the bounds the true average lies in (max(count, 1) keeps a fractional count safe).
    count = exp.column(f"__m{count_i}")
    ratio = exp.Div(this=exp.column(f"__m{sum_i}"),
                    expression=exp.func("GREATEST", copy_tree(count), exp.convert(1)))
    clamped = exp.func("LEAST", exp.func("GREATEST", ratio, exp.convert(float(bounds[0]))),
                       exp.convert(float(bounds[1])))
    return exp.Case(ifs=[exp.If(this=exp.GT(this=count, expression=exp.convert(0)),
                                true=clamped)])


_PARAMETER = re.compile(rf"\$?{PARAM_PREFIX}(?:tmp)?\d+|\?")


def _by_label(analysis: QueryAnalysis) -> dict[str, Measurement]:
    """The measurements by label, parameters written ``?`` whether numbered or not: labels and
    the query post-processing reads may be written before or after number_parameters."""
    return {_PARAMETER.sub("?", m.label): m for m in analysis.measurements}


def _label(node: exp.Expression) -> str:
    return _PARAMETER.sub("?", node.sql(dialect=DIALECT))


def _avg_parts(analysis: QueryAnalysis, avg: exp.Avg) -> tuple[int, int, tuple[float, float]]:
    """The SUM and COUNT measurements an AVG is computed from, and its bounds."""
    arg = avg.this.unnest()
    by_label = _by_label(analysis)
    total = by_label[_label(exp.Sum(this=copy_tree(arg)))]
    count = by_label[_label(exp.Count(this=copy_tree(arg)))]
    assert total.bounds is not None
    return total.index, count.index, total.bounds


def avg_only_sums(analysis: QueryAnalysis) -> dict[int, int]:
    """The SUM measurements the query reads only through AVGs, each with the COUNT measurement
    of the same AVG (index -> index): the two-stage scales such a SUM with its unit's count
    (dpsql.units.rewrite). A SUM the query also reads bare (``SUM(x)``, ``HAVING SUM(x) >
    ..``) is not in it."""
    query = analysis.query.transform(unfilter)  # a copy: FILTERs read as they were measured
    parts = {}
    bare = set()
    by_label = _by_label(analysis)
    for node in query.find_all(exp.Avg, exp.Sum):
        if isinstance(node, exp.Avg):
            total, count, _ = _avg_parts(analysis, node)
            parts[total] = count
        elif node.find_ancestor(exp.Avg) is None:
            m = by_label.get(_label(node))
            if m is not None:
                bare.add(m.index)
    return {total: count for total, count in parts.items() if total not in bare}


def _variance_expression(analysis: QueryAnalysis, node: exp.Expression) -> exp.Expression:
    """A variance-family aggregate from its noisy COUNT, centred SUM and SUM of squares
    (:func:`dpsql.analysis.aggregates.variance_sql`)."""
    by_label = _by_label(analysis)
    count, first, square = (by_label[_PARAMETER.sub("?", label)]
                            for label in moment_labels(node.this.unnest()))
    assert first.bounds is not None
    return variance_sql(node, exp.column(f"__m{count.index}"), exp.column(f"__m{first.index}"),
                        exp.column(f"__m{square.index}"), first.bounds[1])


def _to_noisy(node: exp.Expression, analysis: QueryAnalysis, repl) -> exp.Expression:
    # computed group keys (EXTRACT(year FROM d)) are replaced whole, by their noisy column
    computed = {type(k.node) for k in analysis.group_keys if not isinstance(k.node, exp.Column)}

    def transform(n: exp.Expression) -> exp.Expression:
        n = unfilter(n)  # agg(x) FILTER (WHERE p) was measured as agg(CASE WHEN p THEN x END)
        if isinstance(n, exp.Avg):
            return _avg_expression(*_avg_parts(analysis, n))
        if isinstance(n, VARIANCE_TYPES):
            return _variance_expression(analysis, n)
        # only these can be replaced
        if isinstance(n, (exp.Column, *AGGREGATES)) or type(n) in computed:
            key = n.sql(dialect=DIALECT)
            if key in repl:
                return copy_tree(repl[key])
        return n

    return copy_tree(node).transform(transform)


def avg_intervals(analysis: QueryAnalysis, query: exp.Select) -> tuple[AvgInterval, ...]:
    """The output columns that are a bare ``AVG(x)``, each with its SUM and COUNT: what a
    per-row interval reads. None (empty) under DISTINCT, whose rows are the distinct output values
    (a row's noisy SUM and COUNT beside them would make two equal averages two rows)."""
    if query.args.get("distinct") is not None:
        return ()
    out = []
    for position, col in enumerate(analysis.columns):
        inner = col.node.this if isinstance(col.node, exp.Alias) else col.node
        if col.kind != "group_key" and col.function == "AVG" and isinstance(inner, exp.Avg):
            out.append(AvgInterval(position, *_avg_parts(analysis, inner)))
    return tuple(out)


def build_post(analysis: QueryAnalysis, query: exp.Select,
               avg: Sequence[AvgInterval] = ()) -> exp.Select:
    """The analyst's outer SELECT, evaluated over NOISY_TABLE; after its columns, each of
    ``avg``'s noisy SUM and COUNT (``__avg_s<k>``, ``__avg_c<k>``: the caller strips them)."""
    repl = _replacement_map(analysis)
    hidden = [exp.alias_(exp.column(f"__m{m}"), f"__avg_{side}{k}")
              for k, spec in enumerate(avg)
              for side, m in (("s", spec.total), ("c", spec.count))]
    post = exp.select(*[_to_noisy(e, analysis, repl) for e in query.expressions],
                      *hidden).from_(NOISY_TABLE)
    having = query.args.get("having")
    if having is not None:
        post = post.where(_to_noisy(having.this, analysis, repl))
    order = query.args.get("order")
    if order is not None:
        post.set("order", _to_noisy(order, analysis, repl))
    for arg in ("limit", "offset", "distinct"):
        if query.args.get(arg) is not None:
            post.set(arg, copy_tree(query.args[arg]))
    return post


def fast_path(analysis: QueryAnalysis, query: exp.Select) -> tuple[OutputSpec, ...] | None:
    """Output specs when post-processing is only picking (and ordering) columns: no SQL.

    Read from the analysis's output columns (which measurement or key each one is) rather than
    by generating SQL text again.
    """
    if any(query.args.get(a) is not None for a in ("having", "limit", "offset", "distinct")):
        return None
    key_index = {key_of(k.node): k.index for k in analysis.group_keys}
    specs = []
    for col in analysis.columns:
        inner = col.node.this if isinstance(col.node, exp.Alias) else col.node
        if col.kind == "group_key":
            index = key_index.get(key_of(inner))
            if index is None:
                return None
            specs.append(OutputSpec("key", index))
        elif col.function in ("COUNT", "SUM") and len(col.measurements) == 1:
            specs.append(OutputSpec("measurement", col.measurements[0]))
        elif col.function == "AVG" and isinstance(inner, exp.Avg):
            specs.append(OutputSpec("avg", *_avg_parts(analysis, inner)))
        else:
            return None
    return tuple(specs)


def fast_order(analysis: QueryAnalysis, query: exp.Select) -> tuple[tuple[int, bool], ...] | None:
    """ORDER BY as (output column, descending) pairs, when every term names an output column
    (qualify rewrites ``ORDER BY p_brand`` / an alias to the output's name); else None."""
    order = query.args.get("order")
    if order is None:
        return ()
    names = [c.name for c in analysis.columns]
    terms = []
    for ordered in order.expressions:
        term = ordered.this
        if not (isinstance(term, exp.Column) and not term.table and names.count(term.name) == 1):
            return None
        terms.append((names.index(term.name), bool(ordered.args.get("desc"))))
    return tuple(terms)


def post_processing_sql(analysis: QueryAnalysis, avg: Sequence[AvgInterval] = ()
                        ) -> tuple[str, tuple[int, ...]]:
    """The post-processing SQL over NOISY_TABLE and the parameters it uses (what
    ``ExecutionPlan.post_sql`` holds when there is no fast path); with ``avg``, each one's
    SUM and COUNT after the columns (:func:`build_post`)."""
    query = number_parameters(analysis.query)
    assert isinstance(query, exp.Select)
    sql = build_post(analysis, query, avg).sql(dialect=DIALECT, copy=False)
    return sql, used_params(sql)


def public_table_sql(name: str, columns: Sequence[str]) -> str:
    """``SELECT "c1", ... FROM "name"``: how a public table a post-processing query joins is
    read into the post-processing DuckDB (every column named, quoted; no data reaches SQL)."""
    select = exp.select(*(exp.column(c, quoted=True) for c in columns)).from_(
        exp.table_(name, quoted=True))
    return select.sql(dialect=DIALECT)
